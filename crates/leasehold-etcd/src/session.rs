//! The frontend's session: one etcd lease that its waiters' keys are bound
//! to, kept alive while the frontend runs.
//!
//! A frontend that dies stops renewing its session lease, etcd revokes it
//! when its TTL runs out, and with it goes every waiter key the frontend
//! had put: a dead frontend blocks the line for at most the session TTL. A
//! frontend that closes revokes its session at once. If the session lease
//! runs out while the frontend lives (etcd unreachable for longer than the
//! TTL), a new one is opened; the waiters bound to the old one find their
//! keys gone and fail (see [`super::decide::acquire`]).
//!
//! Opening a session also learns etcd's minimum lease TTL: etcd raises a
//! shorter TTL to its minimum and says so in its answer, so one grant of
//! 1 s tells it.

use std::time::Duration;

use tokio::sync::watch;

use super::client::Etcd;
use super::{closed, EtcdNode};
use leasehold_core::error::{Error, Result};

/// The session lease, as it is now.
pub struct Session {
    id: watch::Sender<i64>,
    ttl: Duration,
}

impl Session {
    /// Learns etcd's minimum lease TTL, checks `ttl` (whole seconds, see
    /// [`check_ttl`]) against it and grants the session lease. Returns the
    /// session and the minimum.
    pub async fn open(etcd: &Etcd, ttl: Duration) -> Result<(Session, Duration)> {
        let (probe, min) = etcd.grant(1).await?;
        etcd.revoke(probe).await?;
        let min_ttl = Duration::from_secs(min.max(1) as u64);
        check_ttl(ttl, Some(min_ttl))?;
        let (id, _) = etcd.grant(ttl.as_secs() as i64).await?;
        Ok((
            Session {
                id: watch::Sender::new(id),
                ttl,
            },
            min_ttl,
        ))
    }

    /// The session lease's id now.
    pub fn id(&self) -> i64 {
        *self.id.borrow()
    }

    /// Revokes the session lease: this frontend's waiters leave the line
    /// at once.
    pub async fn revoke(&self, etcd: &Etcd) {
        if let Err(e) = etcd.revoke(self.id()).await {
            tracing::warn!(error = %e, "could not revoke the etcd session lease; it runs out on its own");
        }
    }
}

/// Refuses a session TTL that is not a whole, positive number of seconds,
/// or (once etcd's minimum is known) is below it.
pub fn check_ttl(ttl: Duration, min: Option<Duration>) -> Result<()> {
    if ttl.subsec_nanos() != 0 || ttl.is_zero() {
        return Err(Error::invalid(
            "etcd_session_ttl",
            format!("{ttl:?} is not a whole number of seconds"),
        ));
    }
    match min {
        Some(min) if ttl < min => Err(Error::invalid(
            "etcd_session_ttl",
            format!("{ttl:?} is below etcd's minimum lease TTL of {min:?}"),
        )),
        _ => Ok(()),
    }
}

/// How often the session lease is renewed: three times per TTL, so that
/// two renewals in a row may fail without losing it.
pub fn renew_every(ttl: Duration) -> Duration {
    ttl / 3
}

impl EtcdNode {
    /// Keeps the session lease alive until the frontend closes; opens a
    /// new one if it was lost (its waiters then ask again).
    ///
    /// A keep-alive is sent every third of the TTL from when the last was
    /// sent, each in a task of its own: one that etcd is slow to answer
    /// (a member stalled, a loaded machine) does not hold back the next,
    /// so the session is lost only when etcd answers none of three in a
    /// row in time, not when one answer plus the wait before the next
    /// outlasts the TTL.
    pub(super) async fn keep_session(self) {
        let mut closing = self.inner.closing.subscribe();
        let every = renew_every(self.inner.session.ttl);
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        let regrant = std::sync::Arc::new(tokio::sync::Mutex::new(()));
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = closed(&mut closing) => return,
            }
            let (node, regrant) = (self.clone(), regrant.clone());
            tokio::spawn(async move { node.renew_session(&regrant).await });
        }
    }

    /// One keep-alive of the session lease; a new session when etcd has
    /// none of that id any more (one at a time: `regrant`).
    async fn renew_session(&self, regrant: &tokio::sync::Mutex<()>) {
        let (session, etcd) = (&self.inner.session, &self.inner.etcd);
        let id = session.id();
        match etcd.keep_alive(id).await {
            Ok(Some(_)) => {}
            Ok(None) => {
                let _one = regrant.lock().await;
                // Another keep-alive opened a new one, or the frontend is
                // closing (its session revoked).
                if session.id() != id || *self.inner.closing.borrow() {
                    return;
                }
                tracing::warn!("the etcd session lease expired; waiters of this frontend lost their places in line");
                match etcd.grant(session.ttl.as_secs() as i64).await {
                    Ok((id, _)) => {
                        session.id.send_replace(id);
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot open a new etcd session lease")
                    }
                }
            }
            Err(e) => tracing::warn!(error = %e, "cannot renew the etcd session lease"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(r: Result<()>) -> Option<String> {
        match r {
            Err(Error::InvalidArgument { field, .. }) => Some(field.into_owned()),
            _ => None,
        }
    }

    #[test]
    fn a_session_ttl_is_whole_seconds_at_least_etcds_minimum() {
        let s = Duration::from_secs;
        assert!(check_ttl(s(2), None).is_ok());
        assert!(check_ttl(s(2), Some(s(2))).is_ok());
        let named = Some("etcd_session_ttl".to_owned());
        assert_eq!(field(check_ttl(Duration::ZERO, None)), named);
        assert_eq!(field(check_ttl(Duration::from_millis(2500), None)), named);
        assert_eq!(field(check_ttl(s(1), Some(s(2)))), named);
    }

    #[test]
    fn the_session_is_renewed_three_times_per_ttl() {
        assert_eq!(renew_every(Duration::from_secs(3)), Duration::from_secs(1));
        assert_eq!(
            renew_every(Duration::from_secs(2)),
            Duration::from_nanos(666_666_666)
        );
    }
}
