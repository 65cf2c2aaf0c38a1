//! Leases bound to their holder's connection (`bind_to_stream`).
//!
//! When a leader's process dies, its kernel closes its TCP connections at
//! once: a FIN, or a RST if data was unread. A grant bound to the
//! connection its Acquire (or a `KeepAlive` message asking for it) came
//! on is then released at once, where it would otherwise be held for its
//! TTL, and the first waiter is granted the next token in the same
//! decision. The history records the tenure's end as `connection closed`.
//!
//! **Only the client's own close releases**: a read that finds the end of
//! the stream, or a reset, from the client ([`ConnBinds::peer_closed`]).
//! A connection that goes silent (a partition, a paused process, a
//! half-open socket, a proxy holding the TCP connection) releases
//! nothing: the lease runs its TTL. Nor does a connection the server
//! closes (its idle timeout, a flood's GOAWAY, its shutdown), nor a
//! stream that ends with an error while its connection lives on.
//! **Nothing is released once the server is shutting down**: clients
//! close their connections in answer to its GOAWAY, and the leases they
//! hold must outlive the restart.
//!
//! A connection the server closes (its idle timeout: a leader with a long
//! TTL renews every third of it, and may be idle for longer) leaves its
//! bindings waiting, attached to no connection: the holder's next renewal
//! of the same grant, on whatever connection it comes, binds it there
//! ([`Bindings::renewed`]), so that a long TTL does not lose the binding.
//! One that waits longer than the longest TTL (`--max-ttl`) belongs to a
//! lease that has ended, and is dropped: jobs deleted or abandoned leave
//! nothing behind.
//!
//! The release is the holder's own (holder and token compared), so a
//! binding can never end anyone else's lease: a lease that moved on, was
//! released, or was bound again on another connection of this server is
//! left alone. A binding lives in this server's memory only; in etcd mode,
//! only the frontend that took the call knows of it.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::backend::Backend;
use crate::clock;
use crate::lease::{HolderId, JobName, TenureEnd, Token};

/// One connection's side of its bindings: whether its client closed it,
/// and the jobs bound to it. Shared by every call on the connection (in
/// its [`super::conn::Peer`]); the connection ends them when it is dropped
/// ([`ConnBinds::ended`]).
#[derive(Debug)]
pub struct ConnBinds {
    id: u64,
    peer_closed: AtomicBool,
    jobs: Mutex<Option<(Weak<Bindings>, HashSet<JobName>)>>,
}

impl Default for ConnBinds {
    fn default() -> ConnBinds {
        // From 1: 0 is UNATTACHED.
        static NEXT: AtomicU64 = AtomicU64::new(1);
        ConnBinds {
            id: NEXT.fetch_add(1, Ordering::Relaxed),
            peer_closed: AtomicBool::new(false),
            jobs: Mutex::new(None),
        }
    }
}

impl ConnBinds {
    /// The client's end closed or reset the connection: a read found its
    /// end, or the socket reported a reset.
    pub fn peer_closed(&self) {
        self.peer_closed.store(true, Ordering::Release);
    }

    /// The connection is gone: its bound leases are released if the
    /// client closed it, and forgotten otherwise.
    pub fn ended(&self) {
        let taken = self.jobs.lock().expect("binds lock").take();
        if let Some((bindings, jobs)) = taken {
            if let Some(b) = bindings.upgrade() {
                b.closed(self.id, jobs, self.peer_closed.load(Ordering::Acquire));
            }
        }
    }
}

/// In [`Bound::conn`]: attached to no connection (its own was closed by
/// the server) until the holder's next renewal.
const UNATTACHED: u64 = 0;

#[derive(Debug, Clone)]
struct Bound {
    conn: u64,
    holder: HolderId,
    token: Token,
    /// Since when it waits unattached.
    unattached_since: Option<Instant>,
}

/// Every lease bound on this server, by job: the connection it is bound
/// to, and the grant (holder and token) a close releases.
pub struct Bindings {
    jobs: Mutex<HashMap<JobName, Bound>>,
    /// How many bindings wait unattached: renewals skip the lock when
    /// none does.
    unattached: AtomicU64,
    /// No lease lives longer than this without a renewal: a binding that
    /// waits unattached for longer is dropped.
    max_ttl: Duration,
    /// How many may wait unattached before the next look for ones to drop
    /// (twice as many as the last look left, so that looks cost amortised
    /// O(1) each).
    look_at: AtomicU64,
    backend: Backend,
    closing: watch::Receiver<bool>,
}

/// Unattached bindings there may be before the first look for ones to
/// drop.
const LOOK_MIN: u64 = 64;

impl Bindings {
    /// Bindings whose releases go to `backend`, none once `closing` is
    /// true; no lease lives past `max_ttl` without a renewal.
    pub fn new(
        backend: Backend,
        closing: watch::Receiver<bool>,
        max_ttl: Duration,
    ) -> Arc<Bindings> {
        Arc::new(Bindings {
            jobs: Mutex::new(HashMap::new()),
            unattached: AtomicU64::new(0),
            max_ttl,
            look_at: AtomicU64::new(LOOK_MIN),
            backend,
            closing,
        })
    }

    /// Binds the grant of `token` to `holder` on `job` to the connection
    /// of `conn`, moving it from any other connection.
    pub fn bind(
        self: &Arc<Self>,
        conn: &ConnBinds,
        job: &JobName,
        holder: &HolderId,
        token: Token,
    ) {
        {
            let mut mine = conn.jobs.lock().expect("binds lock");
            let (_, jobs) = mine.get_or_insert_with(|| (Arc::downgrade(self), HashSet::new()));
            if !jobs.contains(job) {
                jobs.insert(job.clone());
            }
        }
        let bound = Bound {
            conn: conn.id,
            holder: holder.clone(),
            token,
            unattached_since: None,
        };
        let old = self
            .jobs
            .lock()
            .expect("bindings lock")
            .insert(job.clone(), bound);
        if old.is_some_and(|b| b.conn == UNATTACHED) {
            self.unattached.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// The grant of `token` to `holder` on `job` was renewed on the
    /// connection of `conn`: a binding of it that waits unattached (its
    /// connection was closed by the server) is bound there.
    pub fn renewed(
        self: &Arc<Self>,
        conn: &ConnBinds,
        job: &JobName,
        holder: &HolderId,
        token: Token,
    ) {
        if self.unattached.load(Ordering::Relaxed) == 0 {
            return;
        }
        let waiting = self
            .jobs
            .lock()
            .expect("bindings lock")
            .get(job)
            .is_some_and(|b| b.conn == UNATTACHED && &b.holder == holder && b.token == token);
        if waiting {
            self.bind(conn, job, holder, token);
        }
    }

    /// Forgets the binding of (`holder`, `token`) on `job`, if it is the
    /// one bound: the lease was released or handed over.
    pub fn unbind(&self, job: &JobName, holder: &HolderId, token: Token) {
        let mut jobs = self.jobs.lock().expect("bindings lock");
        let ours = jobs
            .get(job)
            .is_some_and(|b| &b.holder == holder && b.token == token);
        if ours && jobs.remove(job).is_some_and(|b| b.conn == UNATTACHED) {
            self.unattached.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Drops the bindings that have waited unattached for longer than any
    /// lease can live without a renewal.
    fn drop_ended(&self, bound: &mut HashMap<JobName, Bound>) {
        let now = clock::now();
        let max_ttl = self.max_ttl;
        let before = bound.len();
        bound.retain(|_, b| {
            b.unattached_since
                .is_none_or(|t| now.saturating_duration_since(t) <= max_ttl)
        });
        let dropped = (before - bound.len()) as u64;
        let left = self.unattached.fetch_sub(dropped, Ordering::Relaxed) - dropped;
        self.look_at
            .store((left * 2).max(LOOK_MIN), Ordering::Relaxed);
    }

    /// How many bindings wait unattached.
    pub fn unattached(&self) -> u64 {
        self.unattached.load(Ordering::Relaxed)
    }

    /// How many leases are bound right now.
    pub fn len(&self) -> usize {
        self.jobs.lock().expect("bindings lock").len()
    }

    /// Whether no lease is bound.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The connection `conn` ended: with `release` (its client closed it)
    /// its bindings are forgotten and their leases released; otherwise
    /// (the server closed it) they wait, unattached, for their holders'
    /// next renewals ([`Bindings::renewed`]).
    fn closed(&self, conn: u64, jobs: HashSet<JobName>, release: bool) {
        let mut ended = Vec::new();
        {
            let mut bound = self.jobs.lock().expect("bindings lock");
            for job in jobs {
                match bound.get_mut(&job) {
                    Some(b) if b.conn == conn && !release => {
                        b.conn = UNATTACHED;
                        b.unattached_since = Some(clock::now());
                        self.unattached.fetch_add(1, Ordering::Relaxed);
                    }
                    Some(b) if b.conn == conn => {
                        if let Some(b) = bound.remove(&job) {
                            ended.push((job, b));
                        }
                    }
                    _ => {}
                }
            }
            if self.unattached.load(Ordering::Relaxed) >= self.look_at.load(Ordering::Relaxed) {
                self.drop_ended(&mut bound);
            }
            let (len, cap) = (bound.len(), bound.capacity());
            if cap > 64 && len < cap / 4 {
                bound.shrink_to(len * 2);
            }
        }
        if !release || ended.is_empty() || *self.closing.borrow() {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        for (job, b) in ended {
            let backend = self.backend.clone();
            rt.spawn(async move {
                match backend
                    .end_lease(&job, &b.holder, b.token, TenureEnd::ConnectionClosed)
                    .await
                {
                    Ok(true) => tracing::info!(
                        job = %job,
                        token = b.token.0,
                        "released a lease bound to a connection its client closed"
                    ),
                    Ok(false) => {}
                    Err(e) => tracing::debug!(
                        job = %job,
                        token = b.token.0,
                        error = %e,
                        "a lease bound to a closed connection was not released (it had moved on)"
                    ),
                }
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::Limits;
    use leasehold_node::Node;
    use leasehold_store::memory::MemoryStore;

    /// Bindings whose connections the server closed wait for a renewal;
    /// once there are enough of them, those older than the longest TTL are
    /// dropped, and the count of those that wait follows.
    #[tokio::test]
    async fn unattached_bindings_older_than_the_longest_ttl_are_dropped() {
        let node = Node::open(Arc::new(MemoryStore::new())).unwrap();
        let (_tx, closing) = watch::channel(false);
        let max_ttl = Duration::from_millis(50);
        let b = Bindings::new(node.into(), closing, max_ttl);
        let l = Limits::default();
        let holder = l.holder("h").unwrap();
        let close = |name: &str| {
            let conn = ConnBinds::default();
            b.bind(&conn, &l.job(name).unwrap(), &holder, Token(1));
            // The server closes it: the binding waits, unattached.
            conn.ended();
        };
        for i in 0..LOOK_MIN - 1 {
            close(&format!("j{i}"));
        }
        assert_eq!(b.unattached(), LOOK_MIN - 1, "below the threshold: kept");
        std::thread::sleep(max_ttl * 2);
        // The close that reaches the threshold drops every binding older
        // than the longest TTL; its own, just made, is kept.
        close("last");
        assert_eq!((b.unattached(), b.len()), (1, 1));
        // A binding that waits is kept below the threshold, and a renewal
        // on a new connection takes it back.
        let job = l.job("last").unwrap();
        let again = ConnBinds::default();
        // A renewal of another grant takes nothing.
        b.renewed(&again, &job, &holder, Token(9));
        assert_eq!((b.unattached(), b.len()), (1, 1));
        b.renewed(&again, &job, &holder, Token(1));
        assert_eq!((b.unattached(), b.len()), (0, 1));
        // Released: forgotten.
        b.unbind(&job, &holder, Token(1));
        assert!(b.is_empty());
    }
}
