//! Where the etcd backend keeps what, and how records are encoded.
//!
//! Every key starts with the configured prefix (default `leasehold/`).
//! Under it, per job:
//!
//! | key | value | etcd lease | deleted |
//! |---|---|---|---|
//! | `j/{job}\0h` | the holder record: token, TTL (and whether on a group's etcd lease, [`Sharing`]), holder | the grant's own etcd lease, or the group's of the `KeepAlive` stream that renews it (module `groups`) | by the lease's expiry, or by `Release`'s transaction |
//! | `j/{job}\0t` | the token record: newest token, released or not, last holder | none | by `DeleteJob` only, which raises the new-job floor to its token in the same transaction |
//! | `v/{job}\0{key}` | a fenced value: token, version, value or tombstone | none | by `DeleteJob` only (a delete writes a tombstone) |
//! | `w/{job}\0{id}` | a waiting `Acquire`'s place in line (its holder) | the frontend's session lease | when the waiter is granted or gives up, or its frontend dies |
//! | `p/{job}\0{id}` | the same, for a preferred candidate: the line is `p/` first, then `w/`, each by create revision | the frontend's session lease | as `w/` |
//! | `r/{job}\0` | the token (8 bytes, big-endian) of the newest grant to a preferred candidate, put by that grant's (or transfer's) transaction | none | by `DeleteJob` |
//! | `u/{job}\0` | "untold": the token (8 bytes, big-endian) of a grant whose holder has not asked again since; put by the grant's transaction | the grant's own etcd lease | by the holder's first repeated `Acquire` or `Renew` (a deletes-only transaction, which etcd takes even when out of space), or with the lease |
//! | `h/{job}\0{token}{0 or 1}` | the job's history: a tenure's grant (0, put by the grant's transaction) and end (1, by the release's or, for an expiry, by the first frontend that sees the holder key go, while the grant is there); the token is 8 bytes, big-endian; the record is the one the single node stores ([`leasehold_core::record::encode_history`]) | none | by the grant `--history-per-job` tokens later, or with the job by DeleteJob |
//!
//! Store-wide, two keys: `settings`, what every frontend on the prefix
//! must share ([`super::SharedSettings`]), and `meta`, the [`MetaRec`]: the
//! new-job token floor and the number of jobs. Per principal, `o/{principal}`:
//! the number of jobs it created and nobody deleted (its `max_jobs`), put
//! by the same transactions as `meta`; a job's creator is in its token
//! record. A `DeleteJob` deletes the job's `j/` and `v/`
//! keys and raises the floor in one transaction; the grant that creates
//! a job (its token key does not exist) reads the floor, and compares and
//! puts `meta` in its transaction. Grants on existing jobs never touch it.
//!
//! Per batch of waiter keys whose put failed with its outcome unknown,
//! `g/{batch}`: empty, bound to the frontend's session lease, put when
//! the batch is withdrawn. The batch's transaction requires it absent, so
//! that etcd, should the transaction reach it only then (held by a member
//! that was paused, say), applies none of it after the withdrawal.
//!
//! A job name never contains a control character, so `\0` ends it: the
//! range `[j/{job}\0, j/{job}\x01)` holds exactly the job's own two keys,
//! and no other job's name can start with `{job}\0`. Job keys sort by job
//! name (UTF-8 byte order is character order), so listing jobs is one
//! range read.
//!
//! # Reading a job back
//!
//! A job's two keys are read back in one place: [`Keys::record`] turns one
//! key-value of the job range (from a range read or a watch event) into a
//! typed [`Record`], and [`JobState::apply`] folds records into a
//! [`JobState`]. [`Keys::job`] (one job's range) and [`Keys::jobs`] (a
//! listing) are both that fold. A record that does not decode is a
//! [`BadRecord`] naming its job, so that a caller reading many jobs can
//! tell which one is damaged, and skip it or report it.

use std::sync::Arc;
use std::time::Duration;

use super::client::pb;
use leasehold_core::error::{Error, Result};
use leasehold_core::lease::{HolderId, Issued, Published, Token, Vacancy};
use leasehold_core::record::{ValueMeta, ValueRecord};

/// The key layout under one prefix.
#[derive(Debug, Clone)]
pub struct Keys {
    prefix: Vec<u8>,
}

impl Keys {
    /// The layout under `prefix`.
    pub fn new(prefix: &str) -> Keys {
        Keys {
            prefix: prefix.as_bytes().to_vec(),
        }
    }

    fn key(&self, space: &[u8], job: &str, rest: &[u8]) -> Vec<u8> {
        let mut k = Vec::with_capacity(self.prefix.len() + 2 + job.len() + 1 + rest.len());
        k.extend_from_slice(&self.prefix);
        k.extend_from_slice(space);
        k.extend_from_slice(job.as_bytes());
        k.push(0);
        k.extend_from_slice(rest);
        k
    }

    /// The job's holder key.
    pub fn holder(&self, job: &str) -> Vec<u8> {
        self.key(b"j/", job, b"h")
    }

    /// The job's "untold" key: there, holding the grant's token, until the
    /// holder asks again (see `txn::told_again`). Outside the `j/` range,
    /// so that reads of jobs never see it.
    pub fn untold(&self, job: &str) -> Vec<u8> {
        self.key(b"u/", job, b"")
    }

    /// A key nothing writes, under the prefix: health probes read it.
    pub fn health_probe(&self) -> Vec<u8> {
        let mut k = self.prefix.clone();
        k.extend_from_slice(b"health");
        k
    }

    /// The count of the jobs `principal` created and nobody deleted (its
    /// `max_jobs`): a decimal number, put by the grant that creates one of
    /// them and by `DeleteJob`, each comparing it unchanged since read.
    pub fn owned(&self, principal: &str) -> Vec<u8> {
        let mut k = self.prefix.clone();
        k.extend_from_slice(b"o/");
        k.extend_from_slice(principal.as_bytes());
        k
    }

    /// The store-wide record: the new-job floor and the job count.
    pub fn meta(&self) -> Vec<u8> {
        let mut k = self.prefix.clone();
        k.extend_from_slice(b"meta");
        k
    }

    /// The settings every frontend on the prefix shares (see
    /// [`super::SharedSettings`]).
    pub fn settings(&self) -> Vec<u8> {
        let mut k = self.prefix.clone();
        k.extend_from_slice(b"settings");
        k
    }

    /// The prefix of the job's history keys.
    pub fn history_prefix(&self, job: &str) -> Vec<u8> {
        self.key(b"h/", job, b"")
    }

    /// The range of every history key of the job.
    pub fn history_range(&self, job: &str) -> (Vec<u8>, Vec<u8>) {
        let start = self.history_prefix(job);
        let end = prefix_end(&start);
        (start, end)
    }

    /// The key of the grant (`part` 0) or end (`part` 1) of the job's
    /// tenure of `token`.
    pub fn history(&self, job: &str, token: Token, part: u8) -> Vec<u8> {
        let mut k = self.history_prefix(job);
        k.extend_from_slice(&token.0.to_be_bytes());
        k.push(part);
        k
    }

    /// The job's token key.
    pub fn token(&self, job: &str) -> Vec<u8> {
        self.key(b"j/", job, b"t")
    }

    /// The range of the job's holder and token keys.
    pub fn job_range(&self, job: &str) -> (Vec<u8>, Vec<u8>) {
        let start = self.key(b"j/", job, b"");
        let mut end = start.clone();
        *end.last_mut().expect("non-empty") = 1;
        (start, end)
    }

    /// The range of every job key whose job starts with `prefix`, from
    /// just after job `after` when given.
    pub fn jobs_range(&self, prefix: &str, after: Option<&str>) -> (Vec<u8>, Vec<u8>) {
        let mut p = self.prefix.clone();
        p.extend_from_slice(b"j/");
        p.extend_from_slice(prefix.as_bytes());
        let end = prefix_end(&p);
        let start = match after {
            // Past every key of `after` ("{after}\0h", "{after}\0t").
            Some(a) => {
                let mut s = self.key(b"j/", a, b"");
                *s.last_mut().expect("non-empty") = 1;
                s.max(p)
            }
            None => p,
        };
        (start, end)
    }

    /// Every job key of every job.
    pub fn all_jobs(&self) -> (Vec<u8>, Vec<u8>) {
        self.jobs_range("", None)
    }

    /// Splits a job key into its job and which of the job's keys it is;
    /// `None` for any other key.
    pub fn parse_job_key<'a>(&self, key: &'a [u8]) -> Option<(&'a str, JobKey)> {
        let rest = key
            .strip_prefix(self.prefix.as_slice())?
            .strip_prefix(b"j/")?;
        let nul = rest.iter().position(|b| *b == 0)?;
        let job = std::str::from_utf8(&rest[..nul]).ok()?;
        match &rest[nul + 1..] {
            b"h" => Some((job, JobKey::Holder)),
            b"t" => Some((job, JobKey::Token)),
            _ => None,
        }
    }

    /// What one key-value of a job range says about its job: `None` for
    /// a key that is not a job's holder or token key (or the deletion of a
    /// token key, which never happens), else the job and the record,
    /// decoded. `deleted` is whether `kv` comes from a watch's delete
    /// event.
    pub fn record<'a>(
        &self,
        kv: &'a pb::KeyValue,
        deleted: bool,
    ) -> Option<(&'a str, std::result::Result<Record, BadRecord>)> {
        let (job, kind) = self.parse_job_key(&kv.key)?;
        let bad = |what| BadRecord {
            job: job.to_owned(),
            what,
            value: kv.value.clone(),
        };
        let record = match (kind, deleted) {
            (JobKey::Holder, true) => Ok(Record::HolderGone),
            (JobKey::Token, true) => Ok(Record::TokenGone),
            // leasehold binds every holder key to its grant's etcd lease;
            // one without a lease would never expire, and no renewal of it
            // could ever succeed.
            (JobKey::Holder, false) if kv.lease == 0 => Err(bad(
                "holder record without an etcd lease (it would never expire; not written by leasehold: delete the key)",
            )),
            (JobKey::Holder, false) => HolderRec::decode(&kv.value)
                .map(|rec| {
                    Record::Holder(Holding {
                        rec,
                        raw: kv.value.clone(),
                        lease: kv.lease,
                        version: kv.version,
                    })
                })
                .map_err(|_| bad("holder record")),
            (JobKey::Token, false) => TokenRec::decode(&kv.value)
                .map(|rec| Record::Token {
                    rec,
                    mod_revision: kv.mod_revision,
                })
                .map_err(|_| bad("token record")),
        };
        Some((job, record))
    }

    /// What one watch event on job keys says, as [`Keys::record`].
    pub fn event<'a>(
        &self,
        ev: &'a pb::Event,
    ) -> Option<(&'a str, std::result::Result<Record, BadRecord>)> {
        let deleted = ev.r#type == pb::event::EventType::Delete as i32;
        self.record(ev.kv.as_ref()?, deleted)
    }

    /// One job's state from the key-values of its range (see
    /// [`Keys::job_range`]). Keys of other jobs are not expected there, and
    /// are skipped.
    pub fn job(&self, job: &str, kvs: &[pb::KeyValue]) -> std::result::Result<JobState, BadRecord> {
        let mut st = JobState::default();
        for kv in kvs {
            match self.record(kv, false) {
                Some((name, r)) if name == job => st.apply(r?),
                _ => {}
            }
        }
        Ok(st)
    }

    /// Every job in the key-values of a listing (a range of job keys, in
    /// key order), in order, each with its state or the record that did
    /// not decode. One damaged job does not hide the others.
    pub fn jobs(
        &self,
        kvs: &[pb::KeyValue],
    ) -> Vec<(String, std::result::Result<JobState, BadRecord>)> {
        let mut out: Vec<(String, std::result::Result<JobState, BadRecord>)> = Vec::new();
        for kv in kvs {
            let Some((name, r)) = self.record(kv, false) else {
                continue;
            };
            if out.last().is_none_or(|(j, _)| j != name) {
                out.push((name.to_owned(), Ok(JobState::default())));
            }
            let st = &mut out.last_mut().expect("pushed").1;
            match (st.as_mut(), r) {
                (Ok(st), Ok(r)) => st.apply(r),
                // The first damaged record of a job is the one reported.
                (Ok(_), Err(bad)) => *st = Err(bad),
                (Err(_), _) => {}
            }
        }
        out
    }

    /// The key of a fenced value.
    pub fn value(&self, job: &str, key: &[u8]) -> Vec<u8> {
        self.key(b"v/", job, key)
    }

    /// The range of the job's values whose key starts with `prefix`, from
    /// just after `after` when given.
    pub fn values_range(
        &self,
        job: &str,
        prefix: &[u8],
        after: Option<&[u8]>,
    ) -> (Vec<u8>, Vec<u8>) {
        let p = self.value(job, prefix);
        let end = prefix_end(&p);
        let start = match after {
            Some(a) => {
                let mut s = self.value(job, a);
                s.push(0); // the smallest key after `a`
                s.max(p)
            }
            None => p,
        };
        (start, end)
    }

    /// The user key of a value key of `job`.
    pub fn value_user_key<'a>(&self, job: &str, key: &'a [u8]) -> Option<&'a [u8]> {
        let head = self.value(job, b"");
        key.strip_prefix(head.as_slice())
    }

    /// The key whose absence a batch of waiter keys' put requires (`id` is
    /// the batch's): put when the batch, its outcome unknown, is withdrawn,
    /// so that etcd can no longer apply it (see `queue::Joins`).
    pub fn join_guard(&self, id: &str) -> Vec<u8> {
        let mut k = self.prefix.clone();
        k.extend_from_slice(b"g/");
        k.extend_from_slice(id.as_bytes());
        k
    }

    /// A waiter's key: under `p/` for a preferred candidate, `w/` for
    /// the others.
    pub fn waiter(&self, job: &str, id: &str, preferred: bool) -> Vec<u8> {
        self.key(class(preferred), job, id.as_bytes())
    }

    /// The range of the job's waiters that are not preferred.
    pub fn waiters_range(&self, job: &str) -> (Vec<u8>, Vec<u8>) {
        self.line_range(job, false)
    }

    /// The range of the job's waiters of one class.
    pub fn line_range(&self, job: &str, preferred: bool) -> (Vec<u8>, Vec<u8>) {
        let start = self.key(class(preferred), job, b"");
        let end = prefix_end(&start);
        (start, end)
    }

    /// Whether a waiter's key is a preferred candidate's.
    pub fn is_preferred_waiter(&self, key: &[u8]) -> bool {
        key.strip_prefix(self.prefix.as_slice())
            .is_some_and(|k| k.starts_with(b"p/"))
    }

    /// The job's preferred-grant key: the token (8 bytes, big-endian) of
    /// the newest grant made to a preferred candidate, put by that grant's
    /// transaction, with no etcd lease (the holder is preferred while its
    /// token is this one). Outside the `j/` range.
    pub fn preferred_grant(&self, job: &str) -> Vec<u8> {
        self.key(b"r/", job, b"")
    }
}

/// The key space of a class of waiters.
fn class(preferred: bool) -> &'static [u8] {
    match preferred {
        true => b"p/",
        false => b"w/",
    }
}

/// The smallest key after every key that starts with `p` (etcd's prefix
/// range end); `\0` (all keys) when `p` is all `0xff`.
pub fn prefix_end(p: &[u8]) -> Vec<u8> {
    let mut end = p.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// The holder key's value: who holds the live grant, with which token and
/// TTL. Exactly these bytes are compared by `CheckedWrite`'s and
/// `Release`'s transactions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HolderRec {
    /// The grant's token.
    pub token: Token,
    /// The grant's TTL, whole seconds.
    pub ttl: Duration,
    /// The holder.
    pub holder: String,
    /// When the token was granted and with which TTL (its proof's facts);
    /// zero in records written before it was kept.
    pub issued: Issued,
    /// The holder's published value (`Lease.value`).
    pub value: Published,
    /// Which etcd lease the holder key is bound to: the holding's own, or
    /// one its frontend shares among the leases one `KeepAlive` stream
    /// renews together (module `groups`).
    pub sharing: Sharing,
}

/// Whether a holder key is bound to an etcd lease of its own or to a
/// group's, which its `KeepAlive` stream keeps alive for every lease of
/// the group at once (module `groups`).
///
/// **A group's etcd lease is kept alive only by the stream whose group it
/// is, only in a message that renews every one of its leases**: any
/// other renewal of a shared holding moves it to an etcd lease of its own
/// first, and nothing but that stream revokes a group's etcd lease.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sharing {
    /// Bound to a group's etcd lease.
    pub shared: bool,
    /// How often this grant was moved off a group's etcd lease. A grant
    /// moved off [`Sharing::MAX_MOVES_OFF`] times stays on its own: a
    /// client that renews it on changing streams, or in changing company,
    /// would otherwise pay a move at every renewal.
    pub moved_off: u8,
}

impl Sharing {
    /// See [`Sharing::moved_off`].
    pub const MAX_MOVES_OFF: u8 = 3;

    /// Whether the holding may join a group.
    pub fn may_join(&self) -> bool {
        !self.shared && self.moved_off < Sharing::MAX_MOVES_OFF
    }

    /// The same grant moved to an etcd lease of its own.
    pub fn moved_off(self) -> Sharing {
        Sharing {
            shared: false,
            moved_off: self.moved_off.saturating_add(self.shared as u8),
        }
    }

    /// The same grant moved to a group's etcd lease.
    pub fn joined(self) -> Sharing {
        Sharing {
            shared: true,
            ..self
        }
    }

    /// `{ttl}`, `{ttl}+{moved off}` when shared, `{ttl}-{moved off}` when
    /// on its own after a move off. A frontend that predates groups reads
    /// the last two as a damaged record, and so refuses to keep a group's
    /// lease alive for one of its holdings.
    fn suffix(&self) -> String {
        match (self.shared, self.moved_off) {
            (false, 0) => String::new(),
            (true, m) => format!("+{m}"),
            (false, m) => format!("-{m}"),
        }
    }

    fn parse(ttl: &str) -> Option<(u64, Sharing)> {
        let (secs, sharing) = match ttl.find(['+', '-']) {
            None => (ttl, Sharing::default()),
            Some(i) => {
                let moved_off = ttl[i + 1..].parse().ok()?;
                let shared = ttl.as_bytes()[i] == b'+';
                if !shared && moved_off == 0 {
                    return None;
                }
                (&ttl[..i], Sharing { shared, moved_off })
            }
        };
        Some((secs.parse().ok()?, sharing))
    }
}

impl HolderRec {
    /// `{token} {ttl seconds}{sharing} {holder}` (see [`Sharing`]), then, when the grant is dated or
    /// has a value, `\0{issued unix ms} {issued ttl ms}` (a holder never
    /// contains a control character, so `\0` ends it), then, with a
    /// value, `\0{the value in lowercase hex}`.
    pub fn encode(&self) -> Vec<u8> {
        use std::fmt::Write;
        let mut s = format!(
            "{} {}{} {}",
            self.token.0,
            self.ttl.as_secs(),
            self.sharing.suffix(),
            self.holder
        );
        if self.issued != Issued::default() || self.value.is_some() {
            let _ = write!(s, "\0{} {}", self.issued.at_unix_ms, self.issued.ttl_ms);
        }
        if let Some(v) = &self.value {
            s.push('\0');
            for b in v.iter() {
                let _ = write!(s, "{b:02x}");
            }
        }
        s.into_bytes()
    }

    /// The inverse of [`HolderRec::encode`].
    pub fn decode(b: &[u8]) -> Result<HolderRec> {
        let s = std::str::from_utf8(b).map_err(|_| corrupt("holder record", b))?;
        let mut it = s.splitn(3, ' ');
        let (Some(t), Some(ttl), Some(rest)) = (it.next(), it.next(), it.next()) else {
            return Err(corrupt("holder record", b));
        };
        let (rest, value) = match rest.split('\0').nth(2) {
            None => (rest, None),
            Some(hex) => {
                let v = unhex(hex).ok_or_else(|| corrupt("holder record", b))?;
                let head = &rest[..rest.len() - hex.len() - 1];
                (head, Some(Arc::from(v)))
            }
        };
        let (holder, issued) = match rest.split_once('\0') {
            None => (rest, Issued::default()),
            Some((holder, issued)) => {
                let (at, ttl_ms) = issued
                    .split_once(' ')
                    .and_then(|(a, t)| Some((a.parse().ok()?, t.parse().ok()?)))
                    .ok_or_else(|| corrupt("holder record", b))?;
                (
                    holder,
                    Issued {
                        at_unix_ms: at,
                        ttl_ms,
                    },
                )
            }
        };
        let (ttl, sharing) = Sharing::parse(ttl).ok_or_else(|| corrupt("holder record", b))?;
        Ok(HolderRec {
            token: Token(t.parse().map_err(|_| corrupt("holder record", b))?),
            ttl: Duration::from_secs(ttl),
            holder: holder.to_owned(),
            issued,
            value,
            sharing,
        })
    }
}

/// A waiter key's value: its holder, then, when its Acquire publishes a
/// value, `\0` and the value in lowercase hex (as [`HolderRec`]'s).
pub fn encode_waiter(holder: &HolderId, value: &Published) -> Vec<u8> {
    use std::fmt::Write;
    let mut s = holder.as_str().to_owned();
    if let Some(v) = value {
        s.push('\0');
        for b in v.iter() {
            let _ = write!(s, "{b:02x}");
        }
    }
    s.into_bytes()
}

/// The inverse of [`encode_waiter`]; `None` for bytes it did not write.
pub fn decode_waiter(b: &[u8]) -> Option<(HolderId, Published)> {
    let s = std::str::from_utf8(b).ok()?;
    let (holder, value) = match s.split_once('\0') {
        None => (s, None),
        Some((h, hex)) => (h, Some(Arc::from(unhex(hex)?))),
    };
    Some((HolderId::from_trusted(holder.to_owned()), value))
}

/// The bytes of a lowercase hex string; `None` for anything else, or
/// nothing at all (an empty value is written as none).
fn unhex(s: &str) -> Option<Vec<u8>> {
    if s.is_empty() || s.len() % 2 != 0 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| {
            let d = |c: u8| match c {
                b'0'..=b'9' => Some(c - b'0'),
                b'a'..=b'f' => Some(c - b'a' + 10),
                _ => None,
            };
            let b = s.as_bytes();
            Some(d(b[i])? << 4 | d(b[i + 1])?)
        })
        .collect()
}

/// The token key's value: the job's newest token, whether its holder
/// released it, who that holder was, and the principal that created the
/// job, if any (whose `max_jobs` it counts against, see [`Keys::owned`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenRec {
    /// The newest token issued. Only ever goes up.
    pub token: Token,
    /// The grant of `token` was released (rather than still held, or
    /// expired).
    pub released: bool,
    /// The holder of `token`.
    pub holder: String,
    /// The principal that created the job; `None` without a policy. Every
    /// later record of the job carries it on.
    pub owner: Option<String>,
}

impl TokenRec {
    /// `{token} {g|r} {holder}`, or with an owner
    /// `{token} {g|r}+{owner length} {owner} {holder}`. Without a policy
    /// the first form, which every release reads.
    pub fn encode(&self) -> Vec<u8> {
        let state = if self.released { 'r' } else { 'g' };
        match &self.owner {
            None => format!("{} {state} {}", self.token.0, self.holder),
            Some(o) => format!("{} {state}+{} {o} {}", self.token.0, o.len(), self.holder),
        }
        .into_bytes()
    }

    /// The inverse of [`TokenRec::encode`].
    pub fn decode(b: &[u8]) -> Result<TokenRec> {
        let bad = || corrupt("token record", b);
        let s = std::str::from_utf8(b).map_err(|_| bad())?;
        let (t, rest) = s.split_once(' ').ok_or_else(bad)?;
        let (state, rest) = rest.split_at_checked(1).ok_or_else(bad)?;
        let (owner, holder) = match rest.strip_prefix('+') {
            None => (None, rest.strip_prefix(' ').ok_or_else(bad)?),
            Some(rest) => {
                let (len, rest) = rest.split_once(' ').ok_or_else(bad)?;
                let len: usize = len.parse().map_err(|_| bad())?;
                let owner = rest.get(..len).filter(|o| !o.is_empty()).ok_or_else(bad)?;
                let holder = rest[len..].strip_prefix(' ').ok_or_else(bad)?;
                (Some(owner.to_owned()), holder)
            }
        };
        Ok(TokenRec {
            token: Token(t.parse().map_err(|_| bad())?),
            released: match state {
                "r" => true,
                "g" => false,
                _ => return Err(bad()),
            },
            holder: holder.to_owned(),
            owner,
        })
    }
}

/// The `meta` key's value: `{new_job_floor} {jobs}`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MetaRec {
    /// A job created from now on gets tokens above this.
    pub new_job_floor: Token,
    /// Jobs with a token key.
    pub jobs: u64,
}

impl MetaRec {
    /// `{new_job_floor} {jobs}`.
    pub fn encode(&self) -> Vec<u8> {
        format!("{} {}", self.new_job_floor.0, self.jobs).into_bytes()
    }

    /// The inverse of [`MetaRec::encode`].
    pub fn decode(b: &[u8]) -> Result<MetaRec> {
        let s = std::str::from_utf8(b).map_err(|_| corrupt("meta record", b))?;
        let (f, n) = s.split_once(' ').ok_or_else(|| corrupt("meta record", b))?;
        Ok(MetaRec {
            new_job_floor: Token(f.parse().map_err(|_| corrupt("meta record", b))?),
            jobs: n.parse().map_err(|_| corrupt("meta record", b))?,
        })
    }
}

/// The `meta` key as read: its record and mod revision (0 when absent).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Meta {
    /// The record.
    pub rec: MetaRec,
    /// The key's mod revision, for the comparison; 0 when it does not
    /// exist yet.
    pub mod_revision: i64,
}

/// A principal's count of the jobs it owns ([`Keys::owned`]) as read, and
/// the key's mod revision (0 when absent: it owns none).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Owned {
    /// The jobs it created and nobody deleted.
    pub jobs: u64,
    /// The key's mod revision, for the comparison.
    pub mod_revision: i64,
}

impl Owned {
    /// Decodes the count's value: a decimal number.
    pub fn decode(b: &[u8], mod_revision: i64) -> Result<Owned> {
        let jobs = std::str::from_utf8(b)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| corrupt("count of owned jobs", b))?;
        Ok(Owned { jobs, mod_revision })
    }
}

/// Which of a job's keys a key is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobKey {
    /// `j/{job}\0h`, the holder key.
    Holder,
    /// `j/{job}\0t`, the token counter.
    Token,
}

/// The live grant as read from the holder key: the record, the exact bytes
/// (which transactions compare) and the etcd lease it is bound to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holding {
    /// The decoded holder record.
    pub rec: HolderRec,
    /// The holder key's value, exactly as stored.
    pub raw: Vec<u8>,
    /// The etcd lease the holder key is bound to: this grant's own.
    pub lease: i64,
    /// The holder key's version: 1 until the holder asks again (a repeated
    /// `Acquire` or a `Renew`), which puts the key once more when etcd
    /// takes writes. Only a grant still at 1, whose untold key is still
    /// there, is given back when its caller was never told of it.
    pub version: i64,
}

impl Holding {
    /// Whether `kv` (the holder key, as read again) is still exactly this
    /// holding: same bytes, same etcd lease.
    pub fn is_stored_as(&self, kv: &pb::KeyValue) -> bool {
        kv.lease == self.lease && kv.value == self.raw
    }
}

/// What one key-value of a job range says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// The token counter, and the revision it was last put at (the grant
    /// transaction compares it).
    Token {
        /// The decoded token record.
        rec: TokenRec,
        /// The token key's mod revision.
        mod_revision: i64,
    },
    /// The holder key: a live grant.
    Holder(Holding),
    /// The holder key was deleted (a watch event): released or expired.
    HolderGone,
    /// The token key was deleted (a watch event): the job was deleted.
    TokenGone,
}

/// A job's holder and token keys, decoded.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobState {
    /// The token record; `None` for a job never granted.
    pub token: Option<TokenRec>,
    /// The token key's mod revision; 0 when it does not exist.
    pub token_mod: i64,
    /// The live grant, if any.
    pub holder: Option<Holding>,
}

impl JobState {
    /// Folds one record into the state.
    pub fn apply(&mut self, r: Record) {
        match r {
            Record::Token { rec, mod_revision } => {
                self.token = Some(rec);
                self.token_mod = mod_revision;
            }
            Record::Holder(h) => self.holder = Some(h),
            Record::HolderGone => self.holder = None,
            Record::TokenGone => {
                self.token = None;
                self.token_mod = 0;
            }
        }
    }

    /// The job's newest token; [`Token::NONE`] if never granted.
    pub fn token(&self) -> Token {
        self.token.as_ref().map_or(Token::NONE, |t| t.token)
    }

    /// The holder of the newest token, released or not.
    pub fn last_holder(&self) -> Option<&str> {
        self.token.as_ref().map(|t| t.holder.as_str())
    }

    /// Why nobody holds the lease, if nobody does.
    pub fn vacancy(&self) -> Vacancy {
        match &self.token {
            None => Vacancy::Never,
            Some(t) if t.released => Vacancy::Released,
            Some(_) => Vacancy::Expired,
        }
    }
}

/// A job record in etcd that leasehold cannot decode. It names the job, so
/// that a reader of many jobs can skip that one and report it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadRecord {
    /// The job whose record it is.
    pub job: String,
    /// Which record: "holder record" or "token record".
    pub what: &'static str,
    /// The bytes that did not decode.
    pub value: Vec<u8>,
}

impl std::fmt::Display for BadRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "etcd holds a {} of job {:?} that leasehold cannot read: {:?}",
            self.what,
            self.job,
            String::from_utf8_lossy(&self.value)
        )
    }
}

impl From<BadRecord> for Error {
    fn from(b: BadRecord) -> Error {
        Error::storage(b)
    }
}

/// A fenced value: 8 bytes of token (big-endian, first, so that etcd can
/// compare the stored token byte-wise: see [`token_below`]), 8 bytes of
/// version, one byte 1 for a value or 0 for a tombstone, then the value.
pub fn encode_value(rec: &ValueRecord) -> Vec<u8> {
    let v = rec.value.as_deref().unwrap_or_default();
    let mut b = Vec::with_capacity(17 + v.len());
    b.extend_from_slice(&rec.token.0.to_be_bytes());
    b.extend_from_slice(&rec.version.to_be_bytes());
    b.push(rec.value.is_some() as u8);
    b.extend_from_slice(v);
    b
}

/// The inverse of [`encode_value`].
pub fn decode_value(b: &[u8]) -> Result<ValueRecord> {
    if b.len() < 17 || b[16] > 1 {
        return Err(corrupt("value record", b));
    }
    let token = u64::from_be_bytes(b[..8].try_into().expect("8 bytes"));
    let version = u64::from_be_bytes(b[8..16].try_into().expect("8 bytes"));
    Ok(ValueRecord {
        token: Token(token),
        version,
        value: (b[16] == 1).then(|| b[17..].to_vec()),
    })
}

/// The head of an [`encode_value`] record, without copying its value:
/// `None` for a tombstone.
pub fn decode_value_meta(b: &[u8]) -> Result<Option<ValueMeta>> {
    if b.len() < 17 || b[16] > 1 {
        return Err(corrupt("value record", b));
    }
    Ok((b[16] == 1).then(|| ValueMeta {
        token: Token(u64::from_be_bytes(b[..8].try_into().expect("8 bytes"))),
        version: u64::from_be_bytes(b[8..16].try_into().expect("8 bytes")),
        size: (b.len() - 17) as u32,
    }))
}

/// The bytes that every encoded value whose token is at most `token`
/// sorts below: etcd's `VALUE < token_below(t)` compare holds exactly when
/// the stored token is `<= t`.
pub fn token_below(token: Token) -> Vec<u8> {
    match token.0.checked_add(1) {
        Some(n) => n.to_be_bytes().to_vec(),
        // Every 8-byte token prefix sorts below 9 bytes of 0xff.
        None => vec![0xff; 9],
    }
}

fn corrupt(what: &str, b: &[u8]) -> Error {
    Error::Storage(format!(
        "etcd holds a {what} leasehold cannot read: {:?}",
        String::from_utf8_lossy(b)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_keys_are_unambiguous_and_ranges_hold_exactly_one_job() {
        let k = Keys::new("lh/");
        assert_eq!(k.holder("a/b"), b"lh/j/a/b\0h");
        let (s, e) = k.job_range("a");
        for own in [k.holder("a"), k.token("a")] {
            assert!(s <= own && own < e);
        }
        for other in [k.holder("a/b"), k.token("ab"), k.holder("a b")] {
            assert!(!(s <= other && other < e), "{other:?}");
        }
        assert_eq!(
            k.parse_job_key(&k.token("x y")),
            Some(("x y", JobKey::Token))
        );
        assert_eq!(k.parse_job_key(&k.holder("x")), Some(("x", JobKey::Holder)));
        assert_eq!(k.parse_job_key(b"lh/j/x\0q"), None);
        assert_eq!(k.parse_job_key(b"lh/j/x\0hh"), None);
        assert_eq!(k.parse_job_key(b"other/j/x\0h"), None);
        assert_eq!(k.parse_job_key(b"lh/v/x\0k"), None);
    }

    #[test]
    fn job_listing_pages_after_a_job_and_stays_in_the_prefix() {
        let k = Keys::new("lh/");
        let (s, e) = k.jobs_range("fleet/", Some("fleet/009"));
        assert!(k.token("fleet/009") < s);
        assert!(s <= k.holder("fleet/010") && k.token("fleet/010") < e);
        assert!(s <= k.holder("fleet/0090"));
        assert!(k.holder("fleet0") >= e);
        let (s, _) = k.jobs_range("b", Some("a"));
        assert_eq!(s, b"lh/j/b", "after a job before the prefix: the prefix");
    }

    #[test]
    fn value_ranges_page_and_stay_in_the_job() {
        let k = Keys::new("lh/");
        let (s, e) = k.values_range("a", b"cfg/", None);
        assert!(s <= k.value("a", b"cfg/1") && k.value("a", b"cfg/1") < e);
        assert!(k.value("ab", b"cfg/1") >= e);
        let (s, _) = k.values_range("a", b"", Some(b"k"));
        assert!(k.value("a", b"k") < s && s <= k.value("a", b"k\0"));
        assert_eq!(
            k.value_user_key("a", &k.value("a", b"k\0x")),
            Some(&b"k\0x"[..])
        );
    }

    #[test]
    fn prefix_end_increments_the_last_byte_below_ff() {
        assert_eq!(prefix_end(b"ab"), b"ac");
        assert_eq!(prefix_end(b"a\xff"), b"b");
        assert_eq!(prefix_end(b"\xff"), b"\0");
    }

    #[test]
    fn records_round_trip() {
        let h = HolderRec {
            issued: Default::default(),
            token: Token(7),
            ttl: Duration::from_secs(5),
            holder: "w 1@x".into(),
            value: None,
            sharing: Sharing::default(),
        };
        assert_eq!(HolderRec::decode(&h.encode()).unwrap(), h);
        assert_eq!(h.encode(), b"7 5 w 1@x", "undated: the old form");
        let dated = HolderRec {
            issued: Issued::new(1_764_892_800_123, Duration::from_secs(5)),
            ..h.clone()
        };
        assert_eq!(dated.encode(), b"7 5 w 1@x\x001764892800123 5000");
        assert_eq!(HolderRec::decode(&dated.encode()).unwrap(), dated);
        // A published value, any bytes, in hex after the grant's date.
        let valued = HolderRec {
            value: Some(Arc::from(&b"\x00\xff:80"[..])),
            ..dated.clone()
        };
        assert_eq!(
            valued.encode(),
            b"7 5 w 1@x\x001764892800123 5000\x0000ff3a3830"
        );
        assert_eq!(HolderRec::decode(&valued.encode()).unwrap(), valued);
        for bad in [
            &b"7 5 w\x00"[..],
            b"7 5 w\x001",
            b"7 5 w\x00x 1",
            b"7 5 w\x001 2\x00",
            b"7 5 w\x001 2\x00abc",
            b"7 5 w\x001 2\x00zz",
        ] {
            assert!(HolderRec::decode(bad).is_err(), "{bad:?}");
        }
        // A holding on a group's etcd lease, and one moved off it.
        let shared = HolderRec {
            sharing: Sharing {
                shared: true,
                moved_off: 1,
            },
            ..valued.clone()
        };
        assert!(shared.encode().starts_with(b"7 5+1 w 1@x\x00"));
        assert_eq!(HolderRec::decode(&shared.encode()).unwrap(), shared);
        let off = HolderRec {
            sharing: shared.sharing.moved_off(),
            ..h.clone()
        };
        assert_eq!(off.encode(), b"7 5-2 w 1@x");
        assert_eq!(HolderRec::decode(&off.encode()).unwrap(), off);
        assert!(off.sharing.may_join(), "moved off twice: may join again");
        let thrice = off.sharing.joined().moved_off();
        assert_eq!(thrice.moved_off, Sharing::MAX_MOVES_OFF);
        assert!(
            !thrice.may_join(),
            "moved off three times: stays on its own"
        );
        assert!(h.sharing.may_join() && !shared.sharing.may_join());
        assert_eq!(
            Sharing::default().joined().moved_off(),
            Sharing {
                shared: false,
                moved_off: 1
            }
        );
        for bad in [
            &b"7 5-0 w"[..],
            b"7 5+ w",
            b"7 5+x w",
            b"7 +1 w",
            b"7 5+1-1 w",
        ] {
            assert!(HolderRec::decode(bad).is_err(), "{bad:?}");
        }
        // A waiter key's value: the holder, and the value its Acquire
        // publishes; the old form (the holder alone) still reads.
        let who = HolderId::from_trusted("ops\u{1f}w@1".into());
        for value in [None, Some(Arc::from(&b"10.0.0.7"[..]))] {
            let b = encode_waiter(&who, &value);
            assert_eq!(decode_waiter(&b), Some((who.clone(), value)));
        }
        assert_eq!(
            decode_waiter(b"w@2").map(|(h, v)| (h.to_string(), v)),
            Some(("w@2".into(), None))
        );
        assert_eq!(decode_waiter(b"w@2\x00q"), None);
        let t = TokenRec {
            token: Token(9),
            released: true,
            holder: "a b".into(),
            owner: None,
        };
        assert_eq!(TokenRec::decode(&t.encode()).unwrap(), t);
        assert_eq!(t.encode(), b"9 r a b", "without an owner, the old form");
        for owner in ["ops team", "b", "x+1 2"] {
            let t = TokenRec {
                owner: Some(owner.into()),
                released: false,
                ..t.clone()
            };
            assert_eq!(TokenRec::decode(&t.encode()).unwrap(), t);
        }
        for bad in [
            &b"9 x h"[..],
            b"9 g",
            b"9 gh",
            b"9 g+ ops h",
            b"9 g+0  h",
            b"9 g+9 ops h",
            b"9 g+3 opsh",
            b"9 g+-3 ops h",
        ] {
            assert!(TokenRec::decode(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            Owned::decode(b"12", 5).unwrap(),
            Owned {
                jobs: 12,
                mod_revision: 5
            }
        );
        assert!(Owned::decode(b"x", 5).is_err());
        for value in [Some(b"v".to_vec()), None, Some(Vec::new())] {
            let r = ValueRecord {
                token: Token(3),
                version: 4,
                value,
            };
            assert_eq!(decode_value(&encode_value(&r)).unwrap(), r);
        }
    }

    #[test]
    fn token_below_orders_like_the_stored_token() {
        let enc = |t: u64| {
            encode_value(&ValueRecord {
                token: Token(t),
                version: 1,
                value: Some(vec![0xff; 4]),
            })
        };
        let limit = token_below(Token(5));
        assert!(enc(5) < limit && enc(4) < limit && enc(0) < limit);
        assert!(enc(6) >= limit && enc(256) >= limit);
        assert!(enc(u64::MAX) < token_below(Token(u64::MAX)));
    }

    fn kv(key: Vec<u8>, value: &[u8], lease: i64, mod_revision: i64) -> pb::KeyValue {
        pb::KeyValue {
            key,
            value: value.to_vec(),
            lease,
            mod_revision,
            ..Default::default()
        }
    }

    fn holder_rec(token: u64, holder: &str) -> HolderRec {
        HolderRec {
            issued: Default::default(),
            token: Token(token),
            ttl: Duration::from_secs(5),
            holder: holder.into(),
            value: None,
            sharing: Sharing::default(),
        }
    }

    fn token_rec(token: u64, released: bool, holder: &str) -> TokenRec {
        TokenRec {
            token: Token(token),
            released,
            holder: holder.into(),
            owner: None,
        }
    }

    /// The job's range as etcd returns it: holder key first, then token.
    fn job_kvs(
        k: &Keys,
        job: &str,
        holder: Option<&HolderRec>,
        token: &TokenRec,
    ) -> Vec<pb::KeyValue> {
        let mut kvs = Vec::new();
        if let Some(h) = holder {
            kvs.push(kv(k.holder(job), &h.encode(), 77, 12));
        }
        kvs.push(kv(k.token(job), &token.encode(), 0, 11));
        kvs
    }

    #[test]
    fn a_jobs_range_reads_as_its_holder_and_token() {
        let k = Keys::new("lh/");
        let h = holder_rec(3, "w@1");
        let t = token_rec(3, false, "w@1");
        let st = k.job("a", &job_kvs(&k, "a", Some(&h), &t)).unwrap();
        assert_eq!(st.token, Some(t.clone()));
        assert_eq!(st.token_mod, 11);
        assert_eq!(st.token(), Token(3));
        assert_eq!(st.last_holder(), Some("w@1"));
        let held = st.holder.as_ref().unwrap();
        assert_eq!(
            (&held.rec, held.raw.as_slice(), held.lease),
            (&h, &h.encode()[..], 77)
        );
        assert!(held.is_stored_as(&kv(k.holder("a"), &h.encode(), 77, 13)));
        assert!(!held.is_stored_as(&kv(k.holder("a"), &h.encode(), 78, 13)));
        assert!(!held.is_stored_as(&kv(k.holder("a"), &holder_rec(4, "w@1").encode(), 77, 13)));

        let empty = k.job("a", &[]).unwrap();
        assert_eq!(empty, JobState::default());
        assert_eq!(
            (empty.token(), empty.vacancy()),
            (Token::NONE, Vacancy::Never)
        );
        let free = k
            .job("a", &job_kvs(&k, "a", None, &token_rec(3, true, "w@1")))
            .unwrap();
        assert_eq!(
            (free.holder.is_none(), free.vacancy()),
            (true, Vacancy::Released)
        );
        let free = k.job("a", &job_kvs(&k, "a", None, &t)).unwrap();
        assert_eq!(free.vacancy(), Vacancy::Expired);
    }

    /// A holder key without an etcd lease would never expire, and no
    /// renewal of it could succeed: it is a record leasehold cannot use,
    /// named, not a lease held forever.
    #[test]
    fn a_holder_key_without_an_etcd_lease_is_named() {
        let k = Keys::new("lh/");
        let h = holder_rec(3, "w@1");
        let mut kvs = job_kvs(&k, "a", Some(&h), &token_rec(3, false, "w@1"));
        for kv in kvs.iter_mut().filter(|kv| kv.key == k.holder("a")) {
            kv.lease = 0;
        }
        let bad = k.job("a", &kvs).unwrap_err();
        assert!(bad.what.contains("without an etcd lease"), "{}", bad.what);
        let msg = Error::from(bad).to_string();
        assert!(
            msg.contains("would never expire") && msg.contains("\"a\""),
            "{msg}"
        );
    }

    #[test]
    fn a_record_that_does_not_decode_names_its_job() {
        let k = Keys::new("lh/");
        let mut kvs = job_kvs(&k, "a b", None, &token_rec(3, false, "w"));
        kvs[0].value = b"3 x w".to_vec();
        let bad = k.job("a b", &kvs).unwrap_err();
        assert_eq!((bad.job.as_str(), bad.what), ("a b", "token record"));
        let msg = Error::from(bad).to_string();
        assert!(
            msg.contains("token record of job \"a b\"") && msg.contains("3 x w"),
            "{msg}"
        );

        let kvs = vec![kv(k.holder("a"), b"not a holder", 5, 2)];
        let bad = k.job("a", &kvs).unwrap_err();
        assert_eq!(bad.what, "holder record");
    }

    #[test]
    fn one_damaged_job_in_a_listing_leaves_the_others_readable() {
        let k = Keys::new("lh/");
        let mut kvs = job_kvs(
            &k,
            "a",
            Some(&holder_rec(1, "x")),
            &token_rec(1, false, "x"),
        );
        let mut b = job_kvs(
            &k,
            "b",
            Some(&holder_rec(2, "y")),
            &token_rec(2, false, "y"),
        );
        b[0].value = b"garbage".to_vec();
        kvs.extend(b);
        kvs.extend(job_kvs(&k, "c", None, &token_rec(9, true, "z")));
        // A key that is no job key (another space under the prefix) is
        // not a job.
        kvs.push(kv(b"lh/j/c\0zz".to_vec(), b"?", 0, 1));
        let jobs = k.jobs(&kvs);
        let names: Vec<&str> = jobs.iter().map(|(j, _)| j.as_str()).collect();
        assert_eq!(names, ["a", "b", "c"]);
        assert_eq!(jobs[0].1.as_ref().unwrap().token(), Token(1));
        let bad = jobs[1].1.as_ref().unwrap_err();
        assert_eq!((bad.job.as_str(), bad.what), ("b", "holder record"));
        let c = jobs[2].1.as_ref().unwrap();
        assert_eq!((c.token(), c.vacancy()), (Token(9), Vacancy::Released));
        assert!(k.jobs(&[]).is_empty());
    }

    #[test]
    fn watch_events_fold_into_the_same_state() {
        let k = Keys::new("lh/");
        let ev = |key: Vec<u8>, value: &[u8], delete: bool| pb::Event {
            r#type: if delete {
                pb::event::EventType::Delete as i32
            } else {
                pb::event::EventType::Put as i32
            },
            kv: Some(kv(key, value, 9, 20)),
            prev_kv: None,
        };
        let mut st = JobState::default();
        let h = holder_rec(1, "x");
        for e in [
            ev(k.token("a"), &token_rec(1, false, "x").encode(), false),
            ev(k.holder("a"), &h.encode(), false),
        ] {
            let (job, r) = k.event(&e).unwrap();
            assert_eq!(job, "a");
            st.apply(r.unwrap());
        }
        assert_eq!((st.token(), st.token_mod), (Token(1), 20));
        assert_eq!(st.holder.as_ref().map(|h| h.lease), Some(9));
        let (_, gone) = k.event(&ev(k.holder("a"), b"", true)).unwrap();
        assert_eq!(gone, Ok(Record::HolderGone));
        st.apply(gone.unwrap());
        assert_eq!(
            (st.holder.is_none(), st.vacancy()),
            (true, Vacancy::Expired)
        );
        // The token key is deleted only with its job (DeleteJob).
        let (_, deleted) = k.event(&ev(k.token("a"), b"", true)).unwrap();
        assert_eq!(deleted, Ok(Record::TokenGone));
        st.apply(deleted.unwrap());
        assert_eq!((st.token(), st.token_mod), (Token::NONE, 0));
        assert!(k.event(&ev(k.value("a", b"k"), b"v", false)).is_none());
        let (_, bad) = k.event(&ev(k.token("a"), b"1 g", false)).unwrap();
        assert_eq!(bad.unwrap_err().what, "token record");
    }
}
