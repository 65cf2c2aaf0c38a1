//! Per-job leadership as this frontend sees it, for metrics only.
//!
//! One watch on every job key keeps a copy of each job's newest token and
//! whether it is held, and counts grants, takeovers, releases and expiries
//! as they happen anywhere in the cluster. No decision reads it: every
//! decision reads etcd. After a broken watch it reloads from a fresh read
//! and watches again (events it missed in between are not counted).
//!
//! Records are read with the same parse as every decision ([`Keys::record`]);
//! one that does not decode is skipped with a warning, and the job's other
//! record still counts.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::client::{pb, range_req, Etcd, WatchRange};
use super::keys::{Keys, Record};
use leasehold_core::error::Result;
use leasehold_core::lease::{JobName, Leadership, Stats, TenureEnd, Token};

#[derive(Debug, Clone)]
struct Job {
    token: Token,
    released: bool,
    last_holder: String,
    held: bool,
    vacant_since: Instant,
}

impl Job {
    fn new() -> Job {
        Job {
            token: Token::NONE,
            released: false,
            last_holder: String::new(),
            held: false,
            vacant_since: Instant::now(),
        }
    }
}

/// The copy, shared with the task that keeps it.
#[derive(Default)]
pub struct Mirror {
    state: Mutex<State>,
    /// Record each expiry it sees in the job's history (the end of the
    /// tenure, if no frontend recorded it first): on unless
    /// `--history-per-job 0`.
    record_expiries: bool,
    /// Every job an event changed: the status page's feed.
    changes: Option<tokio::sync::broadcast::Sender<JobName>>,
}

#[derive(Default)]
struct State {
    jobs: BTreeMap<String, Job>,
    stats: Stats,
}

impl Mirror {
    /// An empty copy; see [`Mirror::record_expiries`].
    pub fn new(record_expiries: bool) -> Mirror {
        Mirror {
            record_expiries,
            changes: Some(tokio::sync::broadcast::Sender::new(
                leasehold_backend::CHANGES_BUFFERED,
            )),
            ..Mirror::default()
        }
    }

    /// The jobs whose leadership changes from now on, as the mirror sees
    /// them (see the backends' `changes`).
    pub fn changes(&self) -> tokio::sync::broadcast::Receiver<JobName> {
        match &self.changes {
            Some(s) => s.subscribe(),
            None => tokio::sync::broadcast::Sender::new(1).subscribe(),
        }
    }

    /// Who holds `job` (the holder as stored), as far as the mirror
    /// knows: a hint for a refusal made before a decision, never a
    /// decision.
    pub fn holder(&self, job: &str) -> Option<String> {
        let st = self.state.lock().expect("mirror lock");
        st.jobs
            .get(job)
            .filter(|j| j.held)
            .map(|j| j.last_holder.clone())
    }

    /// How long each of `jobs` has had no leader, as far as the mirror
    /// knows (`None`: led, or not known).
    pub fn vacant_for(&self, jobs: &[&str]) -> Vec<Option<Duration>> {
        let st = self.state.lock().expect("mirror lock");
        let now = Instant::now();
        jobs.iter()
            .map(|j| {
                st.jobs
                    .get(*j)
                    .filter(|j| !j.held)
                    .map(|j| now.saturating_duration_since(j.vacant_since))
            })
            .collect()
    }

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
        let mut w = etcd
            .watch(&[WatchRange::all((start, end))], revision + 1)
            .await?;
        loop {
            let resp = w.next().await?;
            let mut expired = Vec::new();
            {
                let mut st = self.state.lock().expect("mirror lock");
                for ev in &resp.events {
                    expired.extend(apply(&mut st, keys, ev));
                }
            }
            if let Some(changes) = self.changes.as_ref().filter(|c| c.receiver_count() > 0) {
                for ev in &resp.events {
                    if let Some((name, _)) = keys.event(ev) {
                        let _ = changes.send(JobName::from_trusted(name.to_owned()));
                    }
                }
            }
            if self.record_expiries {
                for (job, token) in expired {
                    record_expiry(etcd.clone(), keys.clone(), job, token);
                }
            }
        }
    }

    fn load(&self, keys: &Keys, kv: &pb::KeyValue, jobs: &mut BTreeMap<String, Job>) {
        let Some((name, r)) = keys.record(kv, false) else {
            return;
        };
        let j = jobs.entry(name.to_owned()).or_insert_with(Job::new);
        match r {
            Ok(Record::Token { rec, .. }) => {
                j.token = rec.token;
                j.released = rec.released;
                j.last_holder = rec.holder;
            }
            Ok(Record::Holder(_)) => j.held = true,
            Ok(Record::HolderGone | Record::TokenGone) => {}
            Err(bad) => tracing::warn!(%bad, "metrics mirror: skipping a record"),
        }
    }
}

/// Records, in the background, that the tenure of `token` on `job` ran
/// out now, unless an end of it is recorded already (every frontend sees
/// the expiry; the first to write wins).
fn record_expiry(etcd: Etcd, keys: Keys, job: String, token: Token) {
    tokio::spawn(async move {
        let job = JobName::from_trusted(job);
        let op = super::txn::history_end_if_absent(
            &keys,
            &job,
            token,
            TenureEnd::Expired,
            leasehold_core::clock::wall_unix_ms(),
        );
        // Only while the tenure's grant is recorded: not after the job was
        // deleted (with its history), nor once the grant is trimmed.
        let grant = keys.history(job.as_str(), token, 0);
        let req = pb::TxnRequest {
            compare: vec![super::client::exists(grant)],
            success: vec![op],
            failure: Vec::new(),
        };
        if let Err(e) = etcd.txn(req).await {
            tracing::debug!(%job, token = token.0, error = %e, "could not record an expiry in the history; the next grant records it");
        }
    });
}

/// Folds one event into the copy; the job and token of a lease it saw run
/// out, if it did.
fn apply(st: &mut State, keys: &Keys, ev: &pb::Event) -> Option<(String, Token)> {
    let (name, r) = keys.event(ev)?;
    let State { jobs, stats } = st;
    if let Ok(Record::TokenGone) = r {
        // The job was deleted.
        jobs.remove(name);
        return None;
    }
    let j = jobs.entry(name.to_owned()).or_insert_with(Job::new);
    match r {
        Ok(Record::Token { rec: t, .. }) => {
            if t.token > j.token {
                stats.grants += 1;
                // A new token while the holder key is there: a transfer,
                // which puts the successor's holder key over the old one.
                if j.held && !j.released && j.token > Token::NONE {
                    stats.transfers += 1;
                }
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
        Ok(Record::Holder(_)) => j.held = true,
        Ok(Record::HolderGone) if j.held => {
            // A release puts the token record (released) before it deletes
            // the holder key, in one transaction: a delete without it is
            // the etcd lease running out.
            j.held = false;
            j.vacant_since = Instant::now();
            if !j.released {
                stats.expiries += 1;
                return Some((name.to_owned(), j.token));
            }
        }
        Ok(Record::HolderGone | Record::TokenGone) => {}
        Err(bad) => tracing::warn!(%bad, "metrics mirror: skipping an event"),
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::{HolderRec, TokenRec};

    fn put(key: Vec<u8>, value: Vec<u8>) -> pb::Event {
        pb::Event {
            r#type: pb::event::EventType::Put as i32,
            kv: Some(pb::KeyValue {
                key,
                value,
                // Every holder key leasehold puts is bound to an etcd lease.
                lease: 7,
                ..Default::default()
            }),
            prev_kv: None,
        }
    }

    fn grant(k: &Keys, job: &str, token: u64, holder: &str) -> [pb::Event; 2] {
        let t = TokenRec {
            token: Token(token),
            released: false,
            holder: holder.into(),
            owner: None,
        };
        let h = HolderRec {
            issued: Default::default(),
            token: Token(token),
            ttl: Duration::from_secs(5),
            holder: holder.into(),
            value: None,
            sharing: Default::default(),
        };
        [
            put(k.token(job), t.encode()),
            put(k.holder(job), h.encode()),
        ]
    }

    fn release(k: &Keys, job: &str, token: u64, holder: &str) -> [pb::Event; 2] {
        let t = TokenRec {
            token: Token(token),
            released: true,
            holder: holder.into(),
            owner: None,
        };
        [put(k.token(job), t.encode()), gone(k, job)]
    }

    fn gone(k: &Keys, job: &str) -> pb::Event {
        pb::Event {
            r#type: pb::event::EventType::Delete as i32,
            ..put(k.holder(job), Vec::new())
        }
    }

    fn counts(s: &Stats) -> [u64; 4] {
        [s.grants, s.takeovers, s.releases, s.expiries]
    }

    #[test]
    fn grants_takeovers_releases_and_expiries_are_counted_once() {
        let k = Keys::new("lh/");
        let mirror = Mirror::default();
        let feed = |evs: &[pb::Event]| {
            let mut st = mirror.state.lock().unwrap();
            for ev in evs {
                apply(&mut st, &k, ev);
            }
        };
        feed(&grant(&k, "j", 1, "a"));
        feed(&release(&k, "j", 1, "a"));
        // The same release seen again (a re-put) is not a second one.
        feed(&release(&k, "j", 1, "a"));
        feed(&grant(&k, "j", 2, "a"));
        feed(&[gone(&k, "j")]);
        feed(&grant(&k, "j", 3, "b"));
        // A renewal that moves the holder key is no grant.
        feed(&grant(&k, "j", 3, "b")[1..]);
        feed(&grant(&k, "other", 1, "c"));
        let (jobs, stats) = mirror.snapshot();
        assert_eq!(counts(&stats), [4, 1, 1, 1]);
        let names: Vec<&str> = jobs.iter().map(|(j, _)| j.as_str()).collect();
        assert_eq!(names, ["j", "other"]);
        assert_eq!(jobs[0].1, Leadership::Led { token: Token(3) });

        feed(&release(&k, "j", 3, "b"));
        let (jobs, stats) = mirror.snapshot();
        assert_eq!(counts(&stats), [4, 1, 2, 1]);
        assert!(matches!(
            jobs[0].1,
            Leadership::Vacant {
                token: Token(3),
                ..
            }
        ));
    }

    #[test]
    fn a_record_that_does_not_decode_is_skipped() {
        let k = Keys::new("lh/");
        let mut st = State::default();
        apply(&mut st, &k, &put(k.token("j"), b"garbage".to_vec()));
        for ev in grant(&k, "j", 1, "a") {
            apply(&mut st, &k, &ev);
        }
        assert_eq!(counts(&st.stats), [1, 0, 0, 0]);
        let mirror = Mirror::default();
        let mut jobs = BTreeMap::new();
        let kv = |key, value: &[u8]| pb::KeyValue {
            key,
            value: value.to_vec(),
            ..Default::default()
        };
        mirror.load(&k, &kv(k.holder("j"), b"garbage"), &mut jobs);
        mirror.load(
            &k,
            &kv(
                k.token("j"),
                &TokenRec {
                    token: Token(7),
                    released: true,
                    holder: "a".into(),
                    owner: None,
                }
                .encode(),
            ),
            &mut jobs,
        );
        let j = &jobs["j"];
        assert_eq!((j.token, j.released, j.held), (Token(7), true, false));
    }
}
