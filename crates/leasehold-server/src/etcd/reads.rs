//! Reads of one job shared by the calls that need it at once.
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

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use super::{EtcdNode, Read};
use crate::error::{Error, Result};
use crate::lease::JobName;

/// The read of each job that is waiting to be sent.
#[derive(Default)]
pub(super) struct SharedReads {
    jobs: Mutex<HashMap<String, Arc<Pending>>>,
}

struct Pending {
    /// Set once the read is sent: from then on nobody joins it.
    sent: AtomicBool,
    answer: watch::Sender<Option<Result<Read>>>,
}

impl EtcdNode {
    /// The job read at a moment after this call began, shared with the
    /// calls that asked at the same time.
    pub(super) async fn read_job_shared(&self, job: &JobName) -> Result<Read> {
        let mut answer = {
            let mut jobs = self.inner.reads.jobs.lock().expect("shared reads lock");
            match jobs.get(job.as_str()) {
                Some(p) if !p.sent.load(Ordering::Acquire) => p.answer.subscribe(),
                _ => {
                    let p = Arc::new(Pending {
                        sent: AtomicBool::new(false),
                        answer: watch::Sender::new(None),
                    });
                    jobs.insert(job.as_str().to_owned(), p.clone());
                    let rx = p.answer.subscribe();
                    let (node, job) = (self.clone(), job.clone());
                    tokio::spawn(async move {
                        let r = node.read_job_noting(&job, None, &p.sent).await;
                        {
                            let mut jobs = node.inner.reads.jobs.lock().expect("shared reads lock");
                            if jobs.get(job.as_str()).is_some_and(|q| Arc::ptr_eq(q, &p)) {
                                jobs.remove(job.as_str());
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
