//! Per-job leadership as this frontend sees it, for metrics only.
//!
//! One watch on every job key keeps a copy of each job's newest token and
//! whether it is held, and counts grants, takeovers, releases and expiries
//! as they happen anywhere in the cluster. No decision reads it: every
//! decision reads etcd. After a broken watch it reloads from a fresh read
//! and watches again (events it missed in between are not counted).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::client::{pb, range_req, Etcd};
use super::keys::{HolderRec, Keys, TokenRec};
use crate::error::Result;
use crate::lease::{JobName, Leadership, Stats, Token};

#[derive(Debug, Clone)]
struct Job {
    token: Token,
    released: bool,
    last_holder: String,
    held: bool,
    vacant_since: Instant,
}

/// The copy, shared with the task that keeps it.
#[derive(Default)]
pub struct Mirror {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    jobs: BTreeMap<String, Job>,
    stats: Stats,
}

impl Mirror {
    /// Every job's leadership now, and the counters.
    pub fn snapshot(&self) -> (Vec<(JobName, Leadership)>, Stats) {
        let st = self.state.lock().expect("mirror lock");
        let now = Instant::now();
        let jobs = st
            .jobs
            .iter()
            .map(|(name, j)| {
                let l = if j.held {
                    Leadership::Led { token: j.token }
                } else {
                    Leadership::Vacant {
                        token: j.token,
                        for_: now.saturating_duration_since(j.vacant_since),
                    }
                };
                (JobName::from_trusted(name.clone()), l)
            })
            .collect();
        (jobs, st.stats.clone())
    }

    /// Keeps the copy until `closing` turns true.
    pub async fn run(self: Arc<Self>, etcd: Etcd, keys: Keys, mut closing: watch::Receiver<bool>) {
        loop {
            let r = tokio::select! {
                r = self.follow(&etcd, &keys) => r,
                _ = closing.wait_for(|c| *c) => return,
            };
            if let Err(e) = r {
                tracing::debug!(error = %e, "metrics mirror: etcd watch broke; reloading");
            }
            // Not a poll for any decision: a pause before reconnecting.
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(500)) => {}
                _ = closing.wait_for(|c| *c) => return,
            }
        }
    }

    async fn follow(&self, etcd: &Etcd, keys: &Keys) -> Result<()> {
        let (start, end) = keys.all_jobs();
        let mut loaded = BTreeMap::<String, Job>::new();
        let mut from = start.clone();
        let mut revision = 0;
        loop {
            let mut req = range_req(from.clone(), end.clone(), 1000);
            req.revision = revision;
            let r = etcd.range(req).await?;
            if revision == 0 {
                revision = r.header.as_ref().map_or(0, |h| h.revision);
            }
            for kv in &r.kvs {
                self.load(keys, kv, &mut loaded);
            }
            match r.kvs.last() {
                Some(last) if r.more => {
                    from = last.key.clone();
                    from.push(0);
                }
                _ => break,
            }
        }
        {
            let now = Instant::now();
            let mut st = self.state.lock().expect("mirror lock");
            for (name, j) in loaded.iter_mut() {
                if let Some(old) = st.jobs.get(name) {
                    if !old.held && !j.held {
                        j.vacant_since = old.vacant_since;
                    }
                } else if !j.held {
                    j.vacant_since = now;
                }
            }
            st.jobs = loaded;
        }
        let mut w = etcd.watch(&[(start, end)], revision + 1).await?;
        loop {
            let resp = w.next().await?;
            let mut st = self.state.lock().expect("mirror lock");
            for ev in &resp.events {
                apply(&mut st, keys, ev);
            }
        }
    }

    fn load(&self, keys: &Keys, kv: &pb::KeyValue, jobs: &mut BTreeMap<String, Job>) {
        let Some((name, kind)) = keys.parse_job_key(&kv.key) else {
            return;
        };
        let j = jobs.entry(name.to_owned()).or_insert_with(|| Job {
            token: Token::NONE,
            released: false,
            last_holder: String::new(),
            held: false,
            vacant_since: Instant::now(),
        });
        match kind {
            b't' => {
                if let Ok(t) = TokenRec::decode(&kv.value) {
                    j.token = t.token;
                    j.released = t.released;
                    j.last_holder = t.holder;
                }
            }
            b'h' => j.held = HolderRec::decode(&kv.value).is_ok(),
            _ => {}
        }
    }
}

fn apply(st: &mut State, keys: &Keys, ev: &pb::Event) {
    let Some(kv) = &ev.kv else { return };
    let Some((name, kind)) = keys.parse_job_key(&kv.key) else {
        return;
    };
    let deleted = ev.r#type == pb::event::EventType::Delete as i32;
    let State { jobs, stats } = st;
    let j = jobs.entry(name.to_owned()).or_insert_with(|| Job {
        token: Token::NONE,
        released: false,
        last_holder: String::new(),
        held: false,
        vacant_since: Instant::now(),
    });
    match (kind, deleted) {
        (b't', false) => {
            let Ok(t) = TokenRec::decode(&kv.value) else {
                return;
            };
            if t.token > j.token {
                stats.grants += 1;
                if !j.last_holder.is_empty() && j.last_holder != t.holder {
                    stats.takeovers += 1;
                }
            }
            if t.released && !(j.released && j.token == t.token) {
                stats.releases += 1;
            }
            j.token = t.token;
            j.released = t.released;
            j.last_holder = t.holder;
        }
        (b'h', false) => j.held = true,
        (b'h', true) if j.held => {
            // A release puts the token record (released) before it deletes
            // the holder key, in one transaction: a delete without it is
            // the etcd lease running out.
            if !j.released {
                stats.expiries += 1;
            }
            j.held = false;
            j.vacant_since = Instant::now();
        }
        _ => {}
    }
}
