//! A lock: a job's lease held for a scope, as a guard.
//!
//! [`Client::lock`] waits for the lease (bounded by
//! [`LockOptions::timeout`], if given), then renews it every `ttl / 3` in
//! the background until the guard is released or dropped. It is an
//! [`Elector`] that leads once: the same campaign, renewals, backoff and
//! step-down rule (the lease is given up no later than the instant its
//! last successful grant or renewal was *sent*, plus the TTL), but after a
//! loss it does not campaign again.
//!
//! **A loss does not interrupt your code**: nothing can stop it safely, and
//! a paused process would not notice anyway. Instead [`Lock::is_held`]
//! turns false, [`Lock::lost`] returns, [`Lock::check`] fails with
//! [`ClientError::LeaseLost`], and every write made with [`Lock::token`]
//! after another holder was granted the job is fenced. Carry the token
//! into every write, and select on [`Lock::lost`] (or call
//! [`Lock::check`]) between steps of a long task.
//!
//! ```no_run
//! # async fn demo(client: leasehold_client::Client) -> Result<(), leasehold_client::ClientError> {
//! use std::time::Duration;
//!
//! let mut lock = client.lock("reports", Duration::from_secs(10)).await?;
//! tokio::select! {
//!     r = client.checked_write("reports", lock.token(), b"cursor", b"42".to_vec()) => { r?; }
//!     _ = lock.lost() => eprintln!("lost the lock: stopped"),
//! }
//! lock.release().await; // or drop it: the release then runs in the background
//! # Ok(()) }
//! ```

use std::time::Duration;

use tokio::time::Instant;

use super::{Client, ClientError, Elector, ElectorOptions};

/// The holder name a lock uses when given none (the holder is
/// `name@uuid`).
pub const DEFAULT_LOCK_NAME: &str = "lock";

/// How [`Client::lock_with`] waits and names itself.
#[derive(Debug, Clone, Default)]
pub struct LockOptions {
    /// The holder's name (`name@uuid`); [`DEFAULT_LOCK_NAME`] when empty.
    pub name: String,
    /// Give up waiting after this long: [`ClientError::Unavailable`] naming
    /// the wait, and nothing is left held. `None` waits for as long as it
    /// takes.
    pub timeout: Option<Duration>,
    /// Bind the lease to the client's connection
    /// ([`ElectorOptions::bind_to_stream`]).
    pub bind_to_stream: bool,
    /// A counted lock (a semaphore, `consul lock -n`): one of this many
    /// slots, 2 to 100 ([`ElectorOptions::slots`]); [`Lock::job`] is then
    /// the slot's own job, which writes with [`Lock::token`] name.
    pub slots: u32,
}

/// A job's lease, held until [`Lock::release`] or the guard's drop; see
/// the module docs.
pub struct Lock {
    elector: Option<Elector>,
    job: String,
    token: u64,
}

impl Client {
    /// Waits for `job`'s lease and holds it as a [`Lock`], renewed in the
    /// background; see the module docs of [`Lock`].
    pub async fn lock(&self, job: &str, ttl: Duration) -> Result<Lock, ClientError> {
        self.lock_with(job, ttl, LockOptions::default()).await
    }

    /// [`Client::lock`], with options.
    pub async fn lock_with(
        &self,
        job: &str,
        ttl: Duration,
        options: LockOptions,
    ) -> Result<Lock, ClientError> {
        let name = if options.name.is_empty() {
            DEFAULT_LOCK_NAME
        } else {
            options.name.as_str()
        };
        let elector_options = ElectorOptions {
            bind_to_stream: options.bind_to_stream,
            slots: options.slots,
            ..ElectorOptions::default()
        };
        let mut elector = Elector::start_inner(self.clone(), job, name, ttl, elector_options, true);
        let elected = match options.timeout {
            None => elector.elected().await,
            Some(t) => match tokio::time::timeout(t, elector.elected()).await {
                Ok(r) => r,
                Err(_) => Err(ClientError::Unavailable(format!(
                    "lock on {job:?}: not acquired within {t:?}"
                ))),
            },
        };
        match elected {
            Ok(token) => Ok(Lock {
                // A counted lock's is its slot's job.
                job: elector.lease_job().unwrap_or_else(|| job.to_owned()),
                elector: Some(elector),
                token,
            }),
            Err(e) => {
                // Stops the campaign; a grant that came in that instant is
                // given back.
                elector.resign().await;
                Err(e)
            }
        }
    }
}

impl Lock {
    fn elector(&self) -> &Elector {
        self.elector.as_ref().expect("lock's elector until release")
    }

    /// The fencing token of our grant. It stays the same after a loss:
    /// writes made with it are then fenced.
    pub fn token(&self) -> u64 {
        self.token
    }

    /// The job our lease is on: the job locked, or a counted lock's slot
    /// job (`{job}#{slot}`). Writes with [`Lock::token`] name it.
    pub fn job(&self) -> &str {
        &self.job
    }

    /// Our holder identity, `name@uuid`.
    pub fn holder(&self) -> &str {
        self.elector().holder()
    }

    /// Whether we still hold the lease: not lost, and not past our own
    /// deadline (checked here, even if the renewal has not caught up).
    pub fn is_held(&self) -> bool {
        self.elector().role().token() == Some(self.token)
    }

    /// Our conservative deadline while held: when the last successful
    /// grant or renewal was sent, plus the TTL.
    pub fn deadline(&self) -> Option<Instant> {
        *self.elector().deadline().borrow()
    }

    /// `Ok` while held; [`ClientError::LeaseLost`] once lost.
    pub fn check(&self) -> Result<(), ClientError> {
        if self.is_held() {
            return Ok(());
        }
        Err(ClientError::LeaseLost {
            message: format!("lock on {:?} (token {}) was lost", self.job, self.token),
            current_token: None,
        })
    }

    /// Waits until the lease is lost (at once if it was). Never returns
    /// while we hold it.
    pub async fn lost(&mut self) {
        let mut role = self.elector().watch();
        loop {
            if role.borrow_and_update().token() != Some(self.token) {
                return;
            }
            if role.changed().await.is_err() {
                return;
            }
        }
    }

    /// Stops renewing and releases the lease (bounded by its deadline),
    /// and waits for that.
    pub async fn release(mut self) {
        if let Some(e) = self.elector.take() {
            e.resign().await;
        }
    }
}

impl Drop for Lock {
    /// Releases in the background, on the runtime of the caller; without
    /// one, the renewals stop and the lease runs out on its own.
    fn drop(&mut self) {
        if let Some(e) = self.elector.take() {
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                rt.spawn(e.resign());
            }
        }
    }
}
