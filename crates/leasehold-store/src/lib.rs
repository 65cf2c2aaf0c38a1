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
use leasehold_core::lease::{JobName, LeaseRecord, Token};

// The records and their encodings are the core's (`leasehold_core::record`),
// shared with the etcd backend, which stores the same bytes without this
// crate; re-exported here, where the store's users have always found them.
pub use leasehold_core::record::{
    decode_history, decode_lease, decode_value, encode_history, encode_lease, encode_value,
    history_key, history_prefix, value_key, HistoryPut, Tenure, ValueRecord, HISTORY_MARK,
};

pub mod datadir;

/// How long a backup may hold back a checkpoint that is due before the
/// backup is ended (see [`Store::backup`]).
pub const BACKUP_HOLD: Duration = Duration::from_secs(30);
pub mod manifest;
pub mod repair;
pub mod sled;
pub mod wal;

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
