//! Durable storage behind a narrow trait.
//!
//! The server keeps every rule in memory (`leasehold_core::lease`) and uses the
//! store only to remember what must survive a crash: each job's lease record
//! (its newest token above all) and the fenced values. The trait is small on
//! purpose: a put that is buffered, and one barrier, [`Store::sync`], that
//! makes every earlier put durable. That shape lets the caller share one
//! barrier between many concurrent requests (group commit).
//!
//! # Durability contract
//!
//! - **When `sync` returns `Ok`, every put that returned before `sync` was
//!   called is on stable storage**, and survives a process crash and a power
//!   loss.
//! - Puts become visible to gets at once, durable or not. The caller must not
//!   acknowledge anything it read before a `sync` that covers it.
//! - Recovery yields a prefix of the puts, in order: if a put survived, every
//!   put before it survived.
//! - **After a failed put or sync, every put and sync fails until
//!   [`Store::reopen`] succeeds**, and a reopen keeps only what was durable.
//!   A put refused up front for lack of space ([`Error::NoSpace`]) is not
//!   a failure: it changes nothing, and the store goes on.
//!
//! [`sled::SledStore`] is the embedded default. A replicated engine (etcd)
//! needs more than this trait, because there the decisions themselves must
//! happen inside the engine's transactions; see ARCHITECTURE.md.

use std::time::Duration;

use leasehold_core::error::{Error, Result};
use leasehold_core::lease::{HolderId, JobName, LeaseRecord, TenureEnd, Token};

pub mod datadir;

/// How long a backup may hold back a checkpoint that is due before the
/// backup is ended (see [`Store::backup`]).
pub const BACKUP_HOLD: Duration = Duration::from_secs(30);
pub mod manifest;
pub mod repair;
pub mod sled;
pub mod wal;

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
}

/// Durable storage for lease records and fenced values.
pub trait Store: Send + Sync + 'static {
    /// Every stored lease record, for start-up.
    fn leases(&self) -> Result<Vec<(JobName, LeaseRecord)>>;
    /// Every job's next grant gets a token above this, jobs never seen
    /// before included: raised when a data dir is recovered or restored,
    /// so that no token issued before can be issued again.
    fn token_floor(&self) -> Token {
        Token::NONE
    }
    /// A job the store does not know gets its first token above this:
    /// raised by [`Store::delete_job`], so that a job created again never
    /// repeats a token. Jobs it knows keep their own counter.
    fn new_job_floor(&self) -> Token {
        Token::NONE
    }
    /// Forgets `job`: its lease record and every value record of it
    /// (tombstones included), and raises [`Store::new_job_floor`] to at
    /// least `floor`, in one change that is buffered until [`Store::sync`]
    /// and **atomic: after a crash, the deletion and the new floor are
    /// both there, or neither**. Returns how many value records it
    /// removed.
    fn delete_job(&self, job: &JobName, floor: Token) -> Result<usize>;
    /// [`Store::put_lease`], with the changes to the job's history that
    /// the same decision made, **staged together: a sync makes all of
    /// them durable or none**, and refused as a whole, changing nothing,
    /// when there is no space. Keeps the history of the `keep` newest
    /// tokens: a grant's record removes the job's tenures with a token at
    /// or below its own minus `keep` (`keep` 0: no history is kept).
    fn put_lease_with_history(
        &self,
        job: &JobName,
        record: &LeaseRecord,
        history: &[HistoryPut],
        keep: u64,
    ) -> Result<()> {
        let _ = (history, keep);
        self.put_lease(job, record)
    }
    /// Stages changes to the job's history alone (the end of a tenure
    /// recorded by a deletion). Buffered until [`Store::sync`].
    fn put_history(&self, job: &JobName, history: &[HistoryPut]) -> Result<()> {
        let _ = (job, history);
        Ok(())
    }
    /// Up to `limit` tenures of `job` with a token below `before` (all when
    /// `None`), newest first. A store that keeps no history has none.
    fn history(&self, job: &JobName, before: Option<Token>, limit: usize) -> Result<Vec<Tenure>> {
        let _ = (job, before, limit);
        Ok(Vec::new())
    }
    /// How many keys `job` holds, deleted ones (tombstones) included.
    fn count_keys(&self, job: &JobName) -> Result<usize>;
    /// How the data dir was last recovered or restored, if it was: what was
    /// kept, what was lost, the floor.
    fn recovered(&self) -> Option<String> {
        None
    }
    /// Stores a job's lease record (buffered until [`Store::sync`]).
    fn put_lease(&self, job: &JobName, record: &LeaseRecord) -> Result<()>;
    /// The record under (job, key), if any (tombstones included).
    fn get_value(&self, job: &JobName, key: &[u8]) -> Result<Option<ValueRecord>>;
    /// A number to take before a [`Store::get_value`] made without the
    /// caller's lock, for [`Store::recheck_value`].
    fn read_epoch(&self) -> u64 {
        0
    }
    /// Under the caller's lock, after `get_value(job, key)` was called
    /// without it (with `epoch` from [`Store::read_epoch`] taken before):
    /// `None` when that read is still the key's record, else the record
    /// now. Lets the caller do a slow read outside its lock and only a
    /// memory look-up inside it. The default reads again.
    fn recheck_value(
        &self,
        job: &JobName,
        key: &[u8],
        epoch: u64,
    ) -> Result<Option<Option<ValueRecord>>> {
        let _ = epoch;
        self.get_value(job, key).map(Some)
    }
    /// [`Store::recheck_value`] from memory alone: `Some` of its answer
    /// when the store can tell without reading, `None` when only a read
    /// can (a checkpoint moved records since `epoch`). A caller under a
    /// lock that others wait for then lets go, reads ahead again, and
    /// retries, so that no read waits on the store's own locks under it.
    /// The default reads.
    fn recheck_value_in_memory(
        &self,
        job: &JobName,
        key: &[u8],
        epoch: u64,
    ) -> Result<Option<Option<Option<ValueRecord>>>> {
        self.recheck_value(job, key, epoch).map(Some)
    }
    /// Stores a value record (buffered until [`Store::sync`]).
    fn put_value(&self, job: &JobName, key: &[u8], record: &ValueRecord) -> Result<()>;
    /// Up to `limit` live (not deleted) records of `job` whose key starts
    /// with `prefix`, after key `after`, in key order.
    fn list_values(
        &self,
        job: &JobName,
        prefix: &[u8],
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, ValueRecord)>>;
    /// The durability barrier; see the module docs.
    fn sync(&self) -> Result<()>;
    /// Background work after a [`Store::sync`] whose waiters were released:
    /// the group committer calls it right after publishing. It must not
    /// change what is durable, only where it is kept.
    fn checkpoint_if_due(&self) -> Result<()> {
        Ok(())
    }
    /// Whether [`Store::checkpoint_if_due`] has work to do after the syncs so far: a
    /// sync run away from the flusher asks, and hands the work over.
    fn checkpoint_due(&self) -> bool {
        false
    }
    /// Moves everything durable to where a restart reads it fastest; for a
    /// clean shutdown, after the last [`Store::sync`].
    fn checkpoint(&self) -> Result<()> {
        Ok(())
    }
    /// Whether the disk is nearly full, so that a put may soon be refused
    /// with [`Error::NoSpace`]. Callers use it to prepare to undo a
    /// decision whose change cannot be stored.
    fn nearly_full(&self) -> bool {
        false
    }
    /// Whether an operation failed in a way that leaves the store refusing
    /// changes until it is reopened (a failed checkpoint, say). The
    /// server's recovery thread reopens it; a caller whose call failed
    /// outside the change path (a backup) asks this to tell it so.
    fn needs_reopen(&self) -> bool {
        false
    }
    /// Writes a consistent snapshot of everything durable to `out`, in the
    /// backup format of [`repair`]. Changes go on meanwhile; they are not in
    /// the snapshot.
    ///
    /// A backup may hold back the store's checkpoints while it runs. When
    /// one is needed (the log is three quarters full, or a checkpoint has
    /// waited [`BACKUP_HOLD`]), the backup is ended with an error: a slow
    /// reader never stalls changes. `out` should therefore not block for
    /// long: a write that fails with [`std::io::ErrorKind::TimedOut`] is
    /// tried again (the same bytes) once the store has checked whether
    /// the backup must end.
    fn backup(&self, out: &mut dyn std::io::Write) -> Result<()> {
        let _ = out;
        Err(Error::storage(
            "this store cannot be backed up by leasehold",
        ))
    }
    /// Fails with [`Error::NoSpace`] when the disk is too full for any
    /// change at all: even the smallest put would be refused. The server's
    /// health reports it, and asks again until space returns.
    fn check_space(&self) -> Result<()> {
        Ok(())
    }
    /// After a failure: discards whatever is not on stable storage and opens
    /// the store again from what is. Once a put or sync has failed, every
    /// later put and sync fails until this succeeds, so nothing written
    /// after a failure can be mistaken for durable.
    fn reopen(&self) -> Result<()>;
}

// ---- Record encoding, shared by stores that keep bytes ----
//
// Fixed little-endian layouts with a leading format byte, so that a future
// layout can be told apart from this one.

const LEASE_V1: u8 = 1;
const VALUE_V1: u8 = 1;

/// Encodes a lease record: `[1, token u64, ttl_ms u64, held u8, holder...]`.
pub fn encode_lease(r: &LeaseRecord) -> Vec<u8> {
    let holder = r.holder.as_ref().map_or("", |h| h.as_str());
    let mut b = Vec::with_capacity(18 + holder.len());
    b.push(LEASE_V1);
    b.extend_from_slice(&r.token.0.to_le_bytes());
    b.extend_from_slice(&(r.ttl.as_millis() as u64).to_le_bytes());
    b.push(r.holder.is_some() as u8);
    b.extend_from_slice(holder.as_bytes());
    b
}

/// Decodes what [`encode_lease`] wrote.
pub fn decode_lease(b: &[u8]) -> Result<LeaseRecord> {
    let bad = || Error::storage(format!("corrupt lease record ({} bytes)", b.len()));
    if b.len() < 18 || b[0] != LEASE_V1 {
        return Err(bad());
    }
    let token = Token(u64::from_le_bytes(b[1..9].try_into().map_err(|_| bad())?));
    let ttl = Duration::from_millis(u64::from_le_bytes(b[9..17].try_into().map_err(|_| bad())?));
    let holder = match b[17] {
        0 => None,
        1 => {
            let s = std::str::from_utf8(&b[18..]).map_err(|_| bad())?;
            Some(HolderId::from_trusted(s.to_owned()))
        }
        _ => return Err(bad()),
    };
    Ok(LeaseRecord { holder, token, ttl })
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
//   grant: [1, granted_unix_ms u64, ttl_ms u64, holder...]
//   end:   [1, how u8 (1 released, 2 expired, 3 taken over, 4 deleted), at_unix_ms u64]

const HISTORY_V1: u8 = 1;

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
        } => {
            let mut b = Vec::with_capacity(17 + holder.as_str().len());
            b.push(HISTORY_V1);
            b.extend_from_slice(&at_unix_ms.to_le_bytes());
            b.extend_from_slice(&(ttl.as_millis() as u64).to_le_bytes());
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
                if v.len() < 17 || v[0] != HISTORY_V1 {
                    return Err(bad());
                }
                let at = u64::from_le_bytes(v[1..9].try_into().map_err(|_| bad())?);
                let ttl = u64::from_le_bytes(v[9..17].try_into().map_err(|_| bad())?);
                let holder = std::str::from_utf8(&v[17..]).map_err(|_| bad())?;
                out.push(Tenure {
                    token,
                    holder: holder.to_owned(),
                    granted_unix_ms: at,
                    ttl: Duration::from_millis(ttl),
                    end: None,
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

#[cfg(test)]
mod tests {
    use super::*;
    use leasehold_core::lease::Limits;

    #[test]
    fn records_round_trip() {
        let l = Limits::default();
        for r in [
            LeaseRecord {
                holder: Some(l.holder("w@1").unwrap()),
                token: Token(u64::MAX),
                ttl: Duration::from_millis(1500),
            },
            LeaseRecord {
                holder: None,
                token: Token(3),
                ttl: Duration::ZERO,
            },
        ] {
            assert_eq!(decode_lease(&encode_lease(&r)).unwrap(), r);
        }
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
        assert!(decode_lease(b"\x02garbage-garbage-garbage").is_err());
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
}
