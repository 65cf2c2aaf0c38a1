//! The records leasehold keeps, and their encodings: a job's lease record,
//! the value under (job, key), and a job's history of leaders, as bytes
//! with a leading format byte.
//!
//! Both backends store these same bytes: the single node in its
//! write-ahead log and sled (`leasehold-store`), etcd as the values of its
//! keys. So the encodings live here, below both, and the etcd backend
//! needs no storage engine to read what it wrote. So does the rule that
//! keeps a job's history to its newest tenures ([`trimmed_history`],
//! [`tenures_beyond`]), which every store applies to these keys. Pure: no
//! I/O.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::lease::{HolderId, Issued, JobName, LeaseRecord, TenureEnd, Token};

/// What is stored under (job, key).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValueRecord {
    /// The token of the write that stored it. The key's highest token: it
    /// only goes up.
    pub token: Token,
    /// 1 for the first write, then one more per accepted write or delete.
    pub version: u64,
    /// The value, or `None` when deleted (a tombstone keeps token and
    /// version, so a stale writer cannot bring a deleted key back).
    pub value: Option<Vec<u8>>,
}

/// A change to a job's history of leaders, as the store keeps it: times
/// are milliseconds since the Unix epoch on the wall clock, for people
/// only (no rule reads them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HistoryPut {
    /// A tenure began.
    Grant {
        /// Its token.
        token: Token,
        /// Its holder.
        holder: HolderId,
        /// When, on the wall clock.
        at_unix_ms: u64,
        /// The TTL it was granted with.
        ttl: Duration,
        /// The value it was granted with (`AcquireRequest.value`).
        value: crate::lease::Published,
    },
    /// The tenure of `token` ended.
    End {
        /// Its token.
        token: Token,
        /// How.
        how: TenureEnd,
        /// When, on the wall clock.
        at_unix_ms: u64,
    },
}

/// One tenure of a job's history, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tenure {
    /// Its token.
    pub token: Token,
    /// Its holder.
    pub holder: String,
    /// When it was granted (wall clock, ms since the Unix epoch).
    pub granted_unix_ms: u64,
    /// The TTL it was granted with.
    pub ttl: Duration,
    /// How and when it ended (wall clock), if that is recorded.
    pub end: Option<(TenureEnd, u64)>,
    /// The value it was granted with; empty for none.
    pub value: Vec<u8>,
}

// ---- Record encoding, shared by both backends ----
//
// Fixed little-endian layouts with a leading format byte, so that a future
// layout can be told apart from this one.

const LEASE_V1: u8 = 1;
const LEASE_V2: u8 = 2;
const LEASE_V3: u8 = 3;
const LEASE_V4: u8 = 4;
const VALUE_V1: u8 = 1;

/// Encodes a lease record: `[1, token u64, ttl_ms u64, held u8, holder...]`,
/// or, for a job with an owner, `[2, token u64, ttl_ms u64, held u8,
/// owner_len u16, owner..., holder...]`; a held lease whose grant is
/// dated ([`Issued`]) is `[3, token u64, ttl_ms u64, 1, issued_unix_ms
/// u64, issued_ttl_ms u64, owner_len u16, owner..., holder...]`, its owner
/// empty when it has none; a held lease with a published value
/// ([`LeaseRecord::value`]) is `[4, ...as 3..., owner..., value_len u16,
/// value..., holder...]`. A store without a policy keeps writing the
/// first form for released leases, which every release reads.
pub fn encode_lease(r: &LeaseRecord) -> Vec<u8> {
    let holder = r.holder.as_ref().map_or("", |h| h.as_str());
    let owner = r.owner.as_deref().unwrap_or_default();
    let value = r.value.as_deref().filter(|_| r.holder.is_some());
    let dated = r.holder.is_some() && (r.issued != Issued::default() || value.is_some());
    let mut b = Vec::with_capacity(38 + owner.len() + holder.len() + value.map_or(0, <[u8]>::len));
    b.push(if value.is_some() {
        LEASE_V4
    } else if dated {
        LEASE_V3
    } else if r.owner.is_some() {
        LEASE_V2
    } else {
        LEASE_V1
    });
    b.extend_from_slice(&r.token.0.to_le_bytes());
    b.extend_from_slice(&(r.ttl.as_millis() as u64).to_le_bytes());
    b.push(r.holder.is_some() as u8);
    if dated {
        b.extend_from_slice(&r.issued.at_unix_ms.to_le_bytes());
        b.extend_from_slice(&r.issued.ttl_ms.to_le_bytes());
    }
    if dated || r.owner.is_some() {
        // A principal's name is at most 128 bytes (the policy's limit).
        let len = u16::try_from(owner.len()).expect("a principal's name fits in u16");
        b.extend_from_slice(&len.to_le_bytes());
        b.extend_from_slice(owner.as_bytes());
    }
    if let Some(v) = value {
        // At most `MAX_LEASE_VALUE_BYTES` (`Limits::lease_value`).
        let len = u16::try_from(v.len()).expect("a lease's value fits in u16");
        b.extend_from_slice(&len.to_le_bytes());
        b.extend_from_slice(v);
    }
    b.extend_from_slice(holder.as_bytes());
    b
}

/// Decodes what [`encode_lease`] wrote, in either form.
pub fn decode_lease(b: &[u8]) -> Result<LeaseRecord> {
    let bad = || Error::storage(format!("corrupt lease record ({} bytes)", b.len()));
    let u64_at = |i: usize| -> Result<u64> {
        let s = b.get(i..i + 8).ok_or_else(bad)?;
        Ok(u64::from_le_bytes(s.try_into().map_err(|_| bad())?))
    };
    if b.len() < 18 || !matches!(b[0], LEASE_V1 | LEASE_V2 | LEASE_V3 | LEASE_V4) {
        return Err(bad());
    }
    let token = Token(u64_at(1)?);
    let ttl = Duration::from_millis(u64_at(9)?);
    let held = b[17];
    let (issued, at) = match b[0] {
        LEASE_V3 | LEASE_V4 if held == 1 => (
            Issued {
                at_unix_ms: u64_at(18)?,
                ttl_ms: u64_at(26)?,
            },
            34,
        ),
        LEASE_V3 | LEASE_V4 => return Err(bad()),
        _ => (Issued::default(), 18),
    };
    let (owner, rest) = match b[0] {
        LEASE_V2 | LEASE_V3 | LEASE_V4 => {
            let len = b.get(at..at + 2).ok_or_else(bad)?;
            let len = u16::from_le_bytes([len[0], len[1]]) as usize;
            let name = b.get(at + 2..at + 2 + len).ok_or_else(bad)?;
            let name = std::str::from_utf8(name).map_err(|_| bad())?;
            let owner = match (b[0], name.is_empty()) {
                (LEASE_V2, true) => return Err(bad()),
                (_, true) => None,
                (_, false) => Some(name.into()),
            };
            (owner, &b[at + 2 + len..])
        }
        _ => (None, &b[18..]),
    };
    let (value, rest) = match b[0] {
        LEASE_V4 => {
            let len = rest.get(..2).ok_or_else(bad)?;
            let len = u16::from_le_bytes([len[0], len[1]]) as usize;
            let v = rest.get(2..2 + len).ok_or_else(bad)?;
            if v.is_empty() {
                return Err(bad());
            }
            (Some(std::sync::Arc::from(v)), &rest[2 + len..])
        }
        _ => (None, rest),
    };
    let holder = match held {
        0 => None,
        1 => {
            let s = std::str::from_utf8(rest).map_err(|_| bad())?;
            Some(HolderId::from_trusted(s.to_owned()))
        }
        _ => return Err(bad()),
    };
    Ok(LeaseRecord {
        holder,
        token,
        ttl,
        owner,
        issued,
        value,
    })
}

/// What a listing tells of a live key: its value record without the value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ValueMeta {
    /// The token of the write that stored it.
    pub token: Token,
    /// Its version.
    pub version: u64,
    /// The value's size in bytes.
    pub size: u32,
}

/// Decodes the head of a value record that [`encode_value`] wrote, without
/// copying its value: `None` for a tombstone.
pub fn decode_value_meta(b: &[u8]) -> Result<Option<ValueMeta>> {
    let bad = || Error::storage(format!("corrupt value record ({} bytes)", b.len()));
    if b.len() < 18 || b[0] != VALUE_V1 {
        return Err(bad());
    }
    let token = Token(u64::from_le_bytes(b[1..9].try_into().map_err(|_| bad())?));
    let version = u64::from_le_bytes(b[9..17].try_into().map_err(|_| bad())?);
    match b[17] {
        0 => Ok(None),
        1 => Ok(Some(ValueMeta {
            token,
            version,
            size: (b.len() - 18) as u32,
        })),
        _ => Err(bad()),
    }
}

/// One page of a job's keys, as a store lists them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyPage {
    /// The live keys, in order, with what is known of their values.
    pub keys: Vec<(Vec<u8>, ValueMeta)>,
    /// The last key the page looked at (live or deleted) when it stopped
    /// before the end of the range, at its limit or its [`ListBudget`]:
    /// the next page starts after it. `None` on the last page.
    pub resume_after: Option<Vec<u8>>,
}

/// The most of the records one page of keys reads before it stops.
pub const LIST_PAGE_BYTES: usize = 4 << 20;
/// The longest one page of keys looks before it stops.
pub const LIST_PAGE_TIME: std::time::Duration = std::time::Duration::from_millis(50);
/// What each record costs a page beyond its bytes.
const LIST_RECORD_COST: usize = 64;

/// What one page of a key listing may still read: **a page costs at most
/// [`LIST_PAGE_BYTES`] of records (deleted keys' tombstones and live
/// values, each at least 64 bytes) and [`LIST_PAGE_TIME`]**,
/// whatever the job holds; a listing that has more hands back where it
/// stopped, and the caller asks again. Every page looks at one record at
/// least, so a listing always moves on.
#[derive(Debug)]
pub struct ListBudget {
    bytes: usize,
    until: std::time::Instant,
}

impl Default for ListBudget {
    fn default() -> Self {
        ListBudget::new(LIST_PAGE_BYTES, LIST_PAGE_TIME)
    }
}

impl ListBudget {
    /// A budget of `bytes` and `time` from now.
    pub fn new(bytes: usize, time: std::time::Duration) -> ListBudget {
        ListBudget {
            bytes,
            until: std::time::Instant::now() + time,
        }
    }

    /// Charges a record of `len` bytes (key and record) that the page
    /// looked at; false once the page must stop after it.
    pub fn charge(&mut self, len: usize) -> bool {
        self.bytes = self.bytes.saturating_sub(len + LIST_RECORD_COST);
        self.bytes > 0 && std::time::Instant::now() < self.until
    }
}

/// Builds one [`KeyPage`] from the records of a range, in key order: the
/// one rule of where a page stops, for every store.
#[derive(Debug)]
pub struct KeyPager {
    page: KeyPage,
    limit: usize,
    budget: ListBudget,
}

impl KeyPager {
    /// A page of at most `limit` live keys, within `budget`.
    pub fn new(limit: usize, budget: ListBudget) -> KeyPager {
        KeyPager {
            page: KeyPage::default(),
            limit,
            budget,
        }
    }

    /// Looks at the record of user key `key`, `len` bytes with its key
    /// (`None`: a tombstone). False once the page is full or its budget
    /// spent: the caller stops, and the next page starts after `key`.
    pub fn look(&mut self, key: &[u8], meta: Option<ValueMeta>, len: usize) -> bool {
        if let Some(m) = meta {
            self.page.keys.push((key.to_vec(), m));
        }
        if self.page.keys.len() >= self.limit || !self.budget.charge(len) {
            self.page.resume_after = Some(key.to_vec());
            return false;
        }
        true
    }

    /// [`KeyPager::look`] at an encoded value record.
    pub fn look_encoded(&mut self, key: &[u8], record: &[u8]) -> Result<bool> {
        let meta = decode_value_meta(record)?;
        Ok(self.look(key, meta, key.len() + record.len()))
    }

    /// The page, once the caller stopped or the range ended.
    pub fn finish(self) -> KeyPage {
        self.page
    }
}

/// Encodes a value record: `[1, token u64, version u64, present u8, value...]`.
pub fn encode_value(r: &ValueRecord) -> Vec<u8> {
    let v = r.value.as_deref().unwrap_or_default();
    let mut b = Vec::with_capacity(18 + v.len());
    b.push(VALUE_V1);
    b.extend_from_slice(&r.token.0.to_le_bytes());
    b.extend_from_slice(&r.version.to_le_bytes());
    b.push(r.value.is_some() as u8);
    b.extend_from_slice(v);
    b
}

/// Decodes what [`encode_value`] wrote.
pub fn decode_value(b: &[u8]) -> Result<ValueRecord> {
    let bad = || Error::storage(format!("corrupt value record ({} bytes)", b.len()));
    if b.len() < 18 || b[0] != VALUE_V1 {
        return Err(bad());
    }
    let token = Token(u64::from_le_bytes(b[1..9].try_into().map_err(|_| bad())?));
    let version = u64::from_le_bytes(b[9..17].try_into().map_err(|_| bad())?);
    let value = match b[17] {
        0 => None,
        1 => Some(b[18..].to_vec()),
        _ => return Err(bad()),
    };
    Ok(ValueRecord {
        token,
        version,
        value,
    })
}

// ---- History records ----
//
// A job's history lives among the value records, under keys no value key
// can have: `FF FF`, the job's length (u16, big-endian), the job, the
// token (u64, big-endian), then 0 for the grant or 1 for the end. A job
// name is at most 65,534 bytes (`Limits`), so no value key starts with
// `FF FF`. Each record is an ordinary value record (token, version 1, the
// payload below as its value), so checks, backups and restores carry it
// unchanged:
//   grant: [1, granted_unix_ms u64, ttl_ms u64, holder...], or with a
//          published value [2, granted_unix_ms u64, ttl_ms u64,
//          value_len u16, value..., holder...]
//   end:   [1, how u8 (1 released, 2 expired, 3 taken over, 4 deleted), at_unix_ms u64]

const HISTORY_V1: u8 = 1;
const HISTORY_V2: u8 = 2;

/// The first two bytes of every history key.
pub const HISTORY_MARK: [u8; 2] = [0xFF, 0xFF];

/// The prefix of every history key of `job`.
pub fn history_prefix(job: &JobName) -> Vec<u8> {
    let j = job.as_str().as_bytes();
    let mut b = Vec::with_capacity(4 + j.len() + 9);
    b.extend_from_slice(&HISTORY_MARK);
    b.extend_from_slice(&(j.len() as u16).to_be_bytes());
    b.extend_from_slice(j);
    b
}

/// The key of the grant (`part` 0) or end (`part` 1) of `job`'s tenure of
/// `token`.
pub fn history_key(job: &JobName, token: Token, part: u8) -> Vec<u8> {
    let mut b = history_prefix(job);
    b.extend_from_slice(&token.0.to_be_bytes());
    b.push(part);
    b
}

/// The key and the value record of one history change.
pub fn encode_history(job: &JobName, put: &HistoryPut) -> (Vec<u8>, ValueRecord) {
    let (token, part, payload) = match put {
        HistoryPut::Grant {
            token,
            holder,
            at_unix_ms,
            ttl,
            value,
        } => {
            let v = value.as_deref().unwrap_or_default();
            let mut b = Vec::with_capacity(19 + v.len() + holder.as_str().len());
            b.push(if v.is_empty() { HISTORY_V1 } else { HISTORY_V2 });
            b.extend_from_slice(&at_unix_ms.to_le_bytes());
            b.extend_from_slice(&(ttl.as_millis() as u64).to_le_bytes());
            if !v.is_empty() {
                let len = u16::try_from(v.len()).expect("a lease's value fits in u16");
                b.extend_from_slice(&len.to_le_bytes());
                b.extend_from_slice(v);
            }
            b.extend_from_slice(holder.as_str().as_bytes());
            (*token, 0, b)
        }
        HistoryPut::End {
            token,
            how,
            at_unix_ms,
        } => {
            let mut b = Vec::with_capacity(10);
            b.push(HISTORY_V1);
            b.push(match how {
                TenureEnd::Released => 1,
                TenureEnd::Expired => 2,
                TenureEnd::TakenOver => 3,
                TenureEnd::Deleted => 4,
                TenureEnd::Restored => 5,
                TenureEnd::Recovered => 6,
                TenureEnd::ConnectionClosed => 7,
                TenureEnd::Transferred => 8,
                TenureEnd::Chaos => 9,
            });
            b.extend_from_slice(&at_unix_ms.to_le_bytes());
            (*token, 1, b)
        }
    };
    (
        history_key(job, token, part),
        ValueRecord {
            token,
            version: 1,
            value: Some(payload),
        },
    )
}

/// Folds a job's history records (key after [`history_prefix`], value
/// record), in key order, into tenures, oldest first. A record that does
/// not decode is an error naming it.
pub fn decode_history(records: &[(Vec<u8>, ValueRecord)]) -> Result<Vec<Tenure>> {
    let mut out: Vec<Tenure> = Vec::new();
    for (rest, r) in records {
        let bad = || {
            Error::storage(format!(
                "corrupt history record ({} byte key, token {})",
                rest.len(),
                r.token
            ))
        };
        if rest.len() != 9 {
            return Err(bad());
        }
        let token = Token(u64::from_be_bytes(rest[..8].try_into().map_err(|_| bad())?));
        let v = r.value.as_deref().ok_or_else(bad)?;
        match rest[8] {
            0 => {
                if v.len() < 17 || !matches!(v[0], HISTORY_V1 | HISTORY_V2) {
                    return Err(bad());
                }
                let at = u64::from_le_bytes(v[1..9].try_into().map_err(|_| bad())?);
                let ttl = u64::from_le_bytes(v[9..17].try_into().map_err(|_| bad())?);
                let (value, rest) = match v[0] {
                    HISTORY_V2 => {
                        let len = v.get(17..19).ok_or_else(bad)?;
                        let len = u16::from_le_bytes([len[0], len[1]]) as usize;
                        let value = v.get(19..19 + len).ok_or_else(bad)?;
                        (value.to_vec(), &v[19 + len..])
                    }
                    _ => (Vec::new(), &v[17..]),
                };
                let holder = std::str::from_utf8(rest).map_err(|_| bad())?;
                out.push(Tenure {
                    token,
                    holder: holder.to_owned(),
                    granted_unix_ms: at,
                    ttl: Duration::from_millis(ttl),
                    end: None,
                    value,
                });
            }
            1 => {
                if v.len() != 10 || v[0] != HISTORY_V1 {
                    return Err(bad());
                }
                let how = match v[1] {
                    1 => TenureEnd::Released,
                    2 => TenureEnd::Expired,
                    3 => TenureEnd::TakenOver,
                    4 => TenureEnd::Deleted,
                    5 => TenureEnd::Restored,
                    6 => TenureEnd::Recovered,
                    7 => TenureEnd::ConnectionClosed,
                    8 => TenureEnd::Transferred,
                    9 => TenureEnd::Chaos,
                    _ => return Err(bad()),
                };
                let at = u64::from_le_bytes(v[2..10].try_into().map_err(|_| bad())?);
                // An end without its grant (trimmed apart) is left out.
                if let Some(t) = out.last_mut().filter(|t| t.token == token) {
                    t.end = Some((how, at));
                }
            }
            _ => return Err(bad()),
        }
    }
    Ok(out)
}

/// The store key of (job, key): the job's length (u16, big-endian), the job,
/// then the key. Length-prefixing keeps one job's keys contiguous and apart
/// from any other job's, whatever bytes the names hold, so a prefix scan
/// never leaks into another job.
pub fn value_key(job: &JobName, key: &[u8]) -> Vec<u8> {
    let j = job.as_str().as_bytes();
    let mut b = Vec::with_capacity(2 + j.len() + key.len());
    b.extend_from_slice(&(j.len() as u16).to_be_bytes());
    b.extend_from_slice(j);
    b.extend_from_slice(key);
    b
}

// ---- Keeping a job's history to its newest tenures ----

/// The token of the tenure that a history key names: the 8 bytes after
/// the job's history prefix (`prefix_len` bytes long: [`history_prefix`]
/// for the stores, the etcd backend's own prefix there), big-endian.
/// `None` for a key too short to hold one.
pub fn history_token(key: &[u8], prefix_len: usize) -> Option<Token> {
    key.get(prefix_len..prefix_len.checked_add(8)?)
        .and_then(|b| b.try_into().ok())
        .map(|b| Token(u64::from_be_bytes(b)))
}

/// The tenures of a job beyond its newest `kept`, oldest first, given the
/// tokens of the tenures its history holds (in any order, a token as often
/// as it has records).
pub fn tenures_beyond(tokens: impl IntoIterator<Item = Token>, kept: u64) -> Vec<Token> {
    let tokens: BTreeSet<Token> = tokens.into_iter().collect();
    let excess = tokens
        .len()
        .saturating_sub(usize::try_from(kept).unwrap_or(usize::MAX));
    tokens.into_iter().take(excess).collect()
}

/// The history keys of `job` that a grant of `token` pushes out of the
/// job's `keep` newest tenures, the new one included: the store's trimming
/// of a job's history, the same in every store that keeps the history
/// under these keys.
///
/// Those are the tenures at or below `token - keep`: usually one (one or
/// two records), found by a read that starts at the job's oldest record.
/// When tokens jumped (a floor raised by a restore, a recover or a
/// deletion), that window would take every earlier tenure: then the
/// newest `keep` tenures are kept by count instead, and the read covers
/// the whole history. A store that keeps no history (`keep` 0) does not
/// call it.
///
/// `keys(start, last)` reads the keys of the job's history records from
/// `start` up to and including `last`, in key order, as the store's reads
/// see them (staged changes included, removed records left out); its
/// error is returned as it is. It is not called when `token` is at most
/// `keep`.
pub fn trimmed_history<E>(
    job: &JobName,
    token: Token,
    keep: u64,
    mut keys: impl FnMut(&[u8], &[u8]) -> std::result::Result<Vec<Vec<u8>>, E>,
) -> std::result::Result<Vec<Vec<u8>>, E> {
    let Some(through) = token.0.checked_sub(keep).filter(|t| *t > 0) else {
        return Ok(Vec::new());
    };
    let start = history_prefix(job);
    let old = keys(&start, &history_key(job, Token(through), 1))?;
    if old.len() <= 2 {
        return Ok(old);
    }
    let all = keys(&start, &history_key(job, Token::LAST, 1))?;
    // A key too short to name a token (damage) counts as the oldest.
    let token_of = |k: &[u8]| history_token(k, start.len()).unwrap_or(Token::NONE);
    let cut: BTreeSet<Token> =
        tenures_beyond(all.iter().map(|k| token_of(k)), keep.saturating_sub(1))
            .into_iter()
            .collect();
    Ok(all
        .into_iter()
        .filter(|k| cut.contains(&token_of(k)))
        .collect())
}

/// The PEM blocks of a text, each whole (`-----BEGIN ...` to `-----END
/// ...`, lines trimmed), in order: how the data dir's signing keys file
/// (`signing-keys.pem`) is read, by the server that signs with it and by
/// the store that backs it up and merges it.
pub fn pem_blocks(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur: Option<String> = None;
    for line in text.lines().map(str::trim) {
        if line.starts_with("-----BEGIN ") {
            cur = Some(String::new());
        }
        if let Some(c) = &mut cur {
            c.push_str(line);
            c.push('\n');
        }
        if line.starts_with("-----END ") {
            out.extend(cur.take());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::Limits;

    #[test]
    fn a_grants_value_is_kept_in_its_history() {
        let l = Limits::default();
        let job = l.job("j").unwrap();
        let grant = |token: u64, value: &[u8]| {
            let (k, r) = encode_history(
                &job,
                &HistoryPut::Grant {
                    token: Token(token),
                    holder: l.holder("w@1").unwrap(),
                    at_unix_ms: 7,
                    ttl: Duration::from_secs(2),
                    value: l.lease_value(value).unwrap(),
                },
            );
            (k[history_prefix(&job).len()..].to_vec(), r)
        };
        let tenures = decode_history(&[grant(1, b""), grant(2, b"10.0.0.7:8080")]).unwrap();
        let values: Vec<&[u8]> = tenures.iter().map(|t| t.value.as_slice()).collect();
        assert_eq!(values, [&b""[..], &b"10.0.0.7:8080"[..]]);
        assert!(tenures.iter().all(|t| t.holder == "w@1"));
    }

    #[test]
    fn records_round_trip() {
        let l = Limits::default();
        for r in [
            // A published value (v4), with and without an owner.
            LeaseRecord {
                issued: Issued::new(1_764_892_800_123, Duration::from_secs(3)),
                holder: Some(l.holder("w@1").unwrap()),
                token: Token(9),
                ttl: Duration::from_secs(3),
                owner: Some("team-a".into()),
                value: l.lease_value(b"10.0.0.7:8080").unwrap(),
            },
            LeaseRecord {
                issued: Issued::default(),
                holder: Some(l.holder("w@2").unwrap()),
                token: Token(10),
                ttl: Duration::from_secs(3),
                owner: None,
                value: l.lease_value(&[0u8; 1024]).unwrap(),
            },
            LeaseRecord {
                issued: Default::default(),
                holder: Some(l.holder("w@1").unwrap()),
                token: Token(u64::MAX),
                ttl: Duration::from_millis(1500),
                owner: None,
                value: None,
            },
            LeaseRecord {
                issued: Default::default(),
                holder: None,
                token: Token(3),
                ttl: Duration::ZERO,
                owner: None,
                value: None,
            },
            LeaseRecord {
                issued: Default::default(),
                holder: Some(HolderId::from_trusted("billing\u{1f}w@1".into())),
                token: Token(7),
                ttl: Duration::from_millis(2500),
                owner: Some("billing".into()),
                value: None,
            },
            LeaseRecord {
                issued: Default::default(),
                holder: None,
                token: Token(8),
                ttl: Duration::ZERO,
                owner: Some("ops team".into()),
                value: None,
            },
            // Dated grants (v3), with and without an owner.
            LeaseRecord {
                issued: Issued::new(1_764_892_800_123, Duration::from_millis(1500)),
                holder: Some(l.holder("w@1").unwrap()),
                token: Token(4),
                ttl: Duration::from_millis(9000),
                owner: None,
                value: None,
            },
            LeaseRecord {
                issued: Issued::new(1, Duration::from_secs(3600)),
                holder: Some(HolderId::from_trusted("billing\u{1f}w@1".into())),
                token: Token(u64::MAX),
                ttl: Duration::from_secs(3600),
                owner: Some("billing".into()),
                value: None,
            },
        ] {
            assert_eq!(decode_lease(&encode_lease(&r)).unwrap(), r);
        }
        // A released lease keeps the old forms: its grant's date is moot.
        let released = LeaseRecord {
            issued: Issued::new(5, Duration::from_secs(1)),
            holder: None,
            token: Token(2),
            ttl: Duration::ZERO,
            owner: None,
            value: None,
        };
        assert_eq!(encode_lease(&released)[0], LEASE_V1);
        // A dated record cut short is damage, as is one that says released.
        let dated = encode_lease(&LeaseRecord {
            issued: Issued::new(7, Duration::from_secs(2)),
            holder: Some(l.holder("w@1").unwrap()),
            token: Token(3),
            ttl: Duration::from_secs(2),
            owner: None,
            value: None,
        });
        assert_eq!(dated[0], LEASE_V3);
        for cut in 18..36 {
            assert!(decode_lease(&dated[..cut]).is_err(), "cut at {cut}");
        }
        let mut unheld = dated.clone();
        unheld[17] = 0;
        assert!(decode_lease(&unheld).is_err());
        for r in [
            ValueRecord {
                token: Token(2),
                version: 9,
                value: Some(b"ok".to_vec()),
            },
            ValueRecord {
                token: Token(2),
                version: 10,
                value: None,
            },
        ] {
            assert_eq!(decode_value(&encode_value(&r)).unwrap(), r);
        }
        assert!(decode_lease(b"\x04garbage-garbage-garbage").is_err());
        // An owner cut short, or empty, is damage.
        let owned = encode_lease(&LeaseRecord {
            issued: Default::default(),
            holder: None,
            token: Token(8),
            ttl: Duration::ZERO,
            owner: Some("billing".into()),
            value: None,
        });
        for cut in 18..owned.len() {
            assert!(decode_lease(&owned[..cut]).is_err(), "cut at {cut}");
        }
        let mut empty = owned[..18].to_vec();
        empty.extend_from_slice(&0u16.to_le_bytes());
        assert!(decode_lease(&empty).is_err());
        assert!(decode_value(b"").is_err());
    }

    #[test]
    fn value_keys_of_different_jobs_never_share_a_prefix() {
        let l = Limits::default();
        let a = value_key(&l.job("a").unwrap(), b"bc");
        let ab = value_key(&l.job("ab").unwrap(), b"c");
        assert!(!a.starts_with(&value_key(&l.job("ab").unwrap(), b"")));
        assert!(!ab.starts_with(&value_key(&l.job("a").unwrap(), b"")));
    }

    /// A history as a store holds it: the keys of tenures `tokens`, a grant
    /// and an end each.
    fn history_of(job: &JobName, tokens: impl IntoIterator<Item = u64>) -> BTreeSet<Vec<u8>> {
        tokens
            .into_iter()
            .flat_map(|t| [history_key(job, Token(t), 0), history_key(job, Token(t), 1)])
            .collect()
    }

    /// Trims `held` as a grant of `token` does, keeping `keep`; returns the
    /// tokens of the tenures left, the new one included.
    fn after_grant(job: &JobName, held: &[u64], token: u64, keep: u64) -> Vec<u64> {
        let mut h = history_of(job, held.iter().copied());
        let cut = trimmed_history::<()>(job, Token(token), keep, |start, last| {
            Ok(h.range(start.to_vec()..=last.to_vec()).cloned().collect())
        })
        .unwrap();
        for k in &cut {
            assert!(h.remove(k), "only keys the history holds are trimmed");
        }
        h.extend(history_of(job, [token]));
        let n = history_prefix(job).len();
        let left: BTreeSet<u64> = h.iter().map(|k| history_token(k, n).unwrap().0).collect();
        left.into_iter().collect()
    }

    #[test]
    fn a_grant_trims_the_history_to_the_newest_tenures() {
        let l = Limits::default();
        let (job, other) = (l.job("j").unwrap(), l.job("j2").unwrap());
        // The usual case: the one tenure that falls out of the window.
        assert_eq!(after_grant(&job, &[3, 4, 5], 6, 3), [4, 5, 6]);
        // Nothing falls out yet, and nothing is read.
        assert_eq!(after_grant(&job, &[1, 2], 3, 3), [1, 2, 3]);
        let none = trimmed_history::<()>(&job, Token(3), 3, |_, _| panic!("no read"));
        assert_eq!(none, Ok(Vec::new()));
        // Tokens jumped (a raised floor): kept by count, not by token.
        assert_eq!(after_grant(&job, &[1, 2, 3], 100, 3), [2, 3, 100]);
        assert_eq!(after_grant(&job, &[1, 2, 3, 4, 5], 1000, 2), [5, 1000]);
        // keep 1: the new tenure alone.
        assert_eq!(after_grant(&job, &[7, 8], 9, 1), [9]);
        // Another job's history is never touched.
        let mut both = history_of(&job, [1, 2, 3]);
        both.extend(history_of(&other, [1, 2, 3]));
        let cut = trimmed_history::<()>(&job, Token(100), 1, |start, last| {
            Ok(both
                .range(start.to_vec()..=last.to_vec())
                .cloned()
                .collect())
        })
        .unwrap();
        assert_eq!(cut.len(), 6);
        assert!(cut.iter().all(|k| k.starts_with(&history_prefix(&job))));
        // The reader's error is the answer.
        assert_eq!(
            trimmed_history(&job, Token(9), 3, |_, _| Err("disk")),
            Err("disk")
        );
    }

    #[test]
    fn the_tenures_beyond_the_newest_are_the_oldest() {
        let t = |v: &[u64]| v.iter().map(|&n| Token(n)).collect::<Vec<_>>();
        assert_eq!(tenures_beyond(t(&[5, 1, 3, 3, 1]), 2), t(&[1]));
        assert_eq!(tenures_beyond(t(&[5, 1, 3]), 0), t(&[1, 3, 5]));
        assert_eq!(tenures_beyond(t(&[5, 1, 3]), 3), t(&[]));
        assert_eq!(tenures_beyond(t(&[5, 1, 3]), u64::MAX), t(&[]));
        let job = Limits::default().job("j").unwrap();
        let n = history_prefix(&job).len();
        assert_eq!(
            history_token(&history_key(&job, Token(7), 1), n),
            Some(Token(7))
        );
        assert_eq!(history_token(&history_prefix(&job), n), None);
    }

    /// A page stops at its limit of live keys, or once its budget of bytes
    /// is spent (tombstones count), after at least one record, and says
    /// where the next starts; the meta of a record is its head, the value
    /// not copied.
    #[test]
    fn a_key_page_stops_at_its_limit_or_budget() {
        let live = |v: &[u8]| {
            encode_value(&ValueRecord {
                token: Token(3),
                version: 2,
                value: Some(v.to_vec()),
            })
        };
        let gone = encode_value(&ValueRecord {
            token: Token(3),
            version: 5,
            value: None,
        });
        let meta = ValueMeta {
            token: Token(3),
            version: 2,
            size: 4,
        };
        assert_eq!(decode_value_meta(&live(b"four")).unwrap(), Some(meta));
        assert_eq!(decode_value_meta(&gone).unwrap(), None);
        assert!(decode_value_meta(&gone[..10]).is_err());

        let hour = Duration::from_secs(3600);
        // The limit: two live keys, the tombstone between them skipped.
        let mut p = KeyPager::new(2, ListBudget::new(1 << 20, hour));
        assert!(p.look_encoded(b"a", &live(b"four")).unwrap());
        assert!(p.look_encoded(b"b", &gone).unwrap());
        assert!(!p.look_encoded(b"c", &live(b"four")).unwrap());
        let page = p.finish();
        let keys: Vec<&[u8]> = page.keys.iter().map(|(k, _)| &k[..]).collect();
        assert_eq!(keys, [b"a", b"c"]);
        assert_eq!(page.resume_after.as_deref(), Some(&b"c"[..]));

        // The budget: tombstones alone spend it; the page has no key, and
        // resumes after the last it looked at.
        let mut p = KeyPager::new(1000, ListBudget::new(500, hour));
        let mut looked = 0;
        while p
            .look_encoded(format!("g{looked:02}").as_bytes(), &gone)
            .unwrap()
        {
            looked += 1;
        }
        let page = p.finish();
        assert!(page.keys.is_empty());
        assert!((4..6).contains(&looked), "{looked}");
        assert_eq!(
            page.resume_after,
            Some(format!("g{looked:02}").into_bytes())
        );

        // A record larger than the whole budget is still listed.
        let mut p = KeyPager::new(1000, ListBudget::new(10, hour));
        assert!(!p.look_encoded(b"big", &live(&[0; 100])).unwrap());
        assert_eq!(p.finish().keys.len(), 1);

        // A range that ends first: no resume.
        let mut p = KeyPager::new(10, ListBudget::default());
        assert!(p.look_encoded(b"a", &live(b"x")).unwrap());
        assert_eq!(p.finish().resume_after, None);
    }
}
