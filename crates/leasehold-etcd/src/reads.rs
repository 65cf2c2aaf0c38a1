//! Reads shared by the calls that need the same answer at once.
//!
//! Ten thousand `Acquire`s arriving together for one job would each read
//! it: ten thousand linearizable reads for one answer. A call that needs a
//! plain read of a job (no waiter key of its own to look for) joins the
//! read of that job that is waiting to be sent, if there is one, and
//! starts one otherwise. Joining is linearizable: a read that had not been
//! sent when a call asked for it is answered by etcd after the call began,
//! so it reflects every change that completed before the call. A read
//! already sent is never joined. The read runs in a task of its own, so a
//! caller that gives up does not take the others' answer with it.
//!
//! At most one read of a key is in flight: a read started while another
//! is waits for that one's answer before it is sent, and gathers every
//! call that asks in the meantime. A lone call's read goes out at once;
//! calls that crowd in on one job cost one read per round trip, not one
//! each (ten thousand joining waiters made about 1,800 reads when each
//! read went out the moment it was started).
//!
//! The same holds for asking etcd how long a holder's lease has left
//! (`GetLease` and every answer that shows the lease): ten thousand callers
//! of one job share one question per round trip.

use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use super::{EtcdNode, Read};
use leasehold_core::error::{Error, Result};
use leasehold_core::lease::JobName;

/// The newest read of each key: waiting to be sent (callers join it), or
/// in flight (a new one waits for its answer).
pub(super) struct Shared<K, T> {
    newest: Arc<Mutex<HashMap<K, Arc<Pending<T>>>>>,
}

impl<K, T> Default for Shared<K, T> {
    fn default() -> Self {
        Shared {
            newest: Arc::default(),
        }
    }
}

struct Pending<T> {
    /// Set once the read is sent: from then on nobody joins it.
    sent: Arc<AtomicBool>,
    answer: watch::Sender<Option<Result<T>>>,
}

impl<K, T> Shared<K, T>
where
    K: Hash + Eq + Clone + Send + 'static,
    T: Clone + Send + Sync + 'static,
{
    /// The answer of a read of `key` sent after this call began: one that
    /// is not sent yet, or a new one made by `read`, which sets the flag it
    /// is given as it sends.
    pub(super) async fn get<Q, F, Fut>(&self, key: &Q, read: F) -> Result<T>
    where
        K: std::borrow::Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
        F: FnOnce(Arc<AtomicBool>) -> Fut,
        Fut: Future<Output = Result<T>> + Send + 'static,
    {
        let mut answer = {
            let mut newest = self.newest.lock().expect("shared reads lock");
            match newest.get(key) {
                Some(p) if !p.sent.load(Ordering::Acquire) => p.answer.subscribe(),
                in_flight => {
                    // Sent once the read in flight is answered.
                    let mut after = in_flight.map(|p| p.answer.subscribe());
                    let p = Arc::new(Pending {
                        sent: Arc::new(AtomicBool::new(false)),
                        answer: watch::Sender::new(None),
                    });
                    let key = key.to_owned();
                    newest.insert(key.clone(), p.clone());
                    let rx = p.answer.subscribe();
                    let fut = read(p.sent.clone());
                    let all = self.newest.clone();
                    tokio::spawn(async move {
                        if let Some(a) = after.as_mut() {
                            // An error or a dropped sender ends the wait too.
                            let _ = a.wait_for(Option::is_some).await;
                        }
                        let r = fut.await;
                        {
                            let mut newest = all.lock().expect("shared reads lock");
                            if newest.get::<K>(&key).is_some_and(|q| Arc::ptr_eq(q, &p)) {
                                newest.remove::<K>(&key);
                                leasehold_backend::room::give_back_room(&mut *newest);
                            }
                        }
                        p.answer.send_replace(Some(r));
                    });
                    rx
                }
            }
        };
        let r = answer
            .wait_for(Option::is_some)
            .await
            .map_err(|_| Error::Storage("a shared etcd read was dropped".into()))?;
        r.clone().expect("waited for an answer")
    }
}

impl EtcdNode {
    /// The job read at a moment after this call began, shared with the
    /// calls that asked at the same time.
    pub(super) async fn read_job_shared(&self, job: &JobName) -> Result<Read> {
        let node = self.clone();
        let j = job.clone();
        self.inner
            .reads
            .get(job.as_str(), move |sent| async move {
                node.read_job_noting(&j, None, &sent).await
            })
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;
    use std::time::Duration;
    use tokio::sync::Notify;

    /// A read that counts itself, says it is sent at once, and answers
    /// when `go` is notified with the number of reads started before it.
    fn read(
        started: &Arc<AtomicU64>,
        go: &Arc<Notify>,
    ) -> impl FnOnce(Arc<AtomicBool>) -> std::pin::Pin<Box<dyn Future<Output = Result<u64>> + Send>>
    {
        let (started, go) = (started.clone(), go.clone());
        move |sent| {
            Box::pin(async move {
                let n = started.fetch_add(1, Ordering::SeqCst);
                sent.store(true, Ordering::Release);
                go.notified().await;
                Ok(n)
            })
        }
    }

    #[tokio::test]
    async fn calls_during_a_read_in_flight_share_the_next_one_sent_after_it() {
        let shared: Arc<Shared<String, u64>> = Arc::default();
        let (started, go) = (Arc::new(AtomicU64::new(0)), Arc::new(Notify::new()));
        let key = "j".to_owned();
        let first = tokio::spawn({
            let (s, r, k) = (shared.clone(), read(&started, &go), key.clone());
            async move { s.get(&k, r).await }
        });
        while started.load(Ordering::SeqCst) < 1 {
            tokio::task::yield_now().await;
        }
        // Five calls while the first read is in flight: one more read,
        // not sent until the first is answered.
        let later: Vec<_> = (0..5)
            .map(|_| {
                let (s, r, k) = (shared.clone(), read(&started, &go), key.clone());
                tokio::spawn(async move { s.get(&k, r).await })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(started.load(Ordering::SeqCst), 1, "the next read waits");
        go.notify_one();
        assert_eq!(first.await.unwrap().unwrap(), 0);
        while started.load(Ordering::SeqCst) < 2 {
            tokio::task::yield_now().await;
        }
        go.notify_one();
        for l in later {
            assert_eq!(
                l.await.unwrap().unwrap(),
                1,
                "all five share the second read"
            );
        }
        assert_eq!(started.load(Ordering::SeqCst), 2);
        // Nothing in flight: a lone call's read goes out at once.
        let lone = tokio::spawn({
            let (s, r, k) = (shared.clone(), read(&started, &go), key.clone());
            async move { s.get(&k, r).await }
        });
        while started.load(Ordering::SeqCst) < 3 {
            tokio::task::yield_now().await;
        }
        go.notify_one();
        assert_eq!(lone.await.unwrap().unwrap(), 2);
        assert!(
            shared.newest.lock().unwrap().is_empty(),
            "nothing left behind"
        );
    }

    #[tokio::test]
    async fn other_keys_do_not_wait() {
        let shared: Arc<Shared<String, u64>> = Arc::default();
        let (started, go) = (Arc::new(AtomicU64::new(0)), Arc::new(Notify::new()));
        let a = tokio::spawn({
            let (s, r) = (shared.clone(), read(&started, &go));
            async move { s.get(&"a".to_owned(), r).await }
        });
        let b = tokio::spawn({
            let (s, r) = (shared.clone(), read(&started, &go));
            async move { s.get(&"b".to_owned(), r).await }
        });
        while started.load(Ordering::SeqCst) < 2 {
            tokio::task::yield_now().await;
        }
        go.notify_waiters();
        let mut got = [a.await.unwrap().unwrap(), b.await.unwrap().unwrap()];
        got.sort();
        assert_eq!(got, [0, 1]);
    }
}
