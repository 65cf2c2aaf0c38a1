//! Durable storage behind one trait, [`Store`], and its two
//! implementations.
//!
//! The server keeps every rule in memory (`leasehold_core::lease`) and uses
//! the store only to remember what must survive a crash: each job's lease
//! record (its newest token above all), the fenced values, the history of
//! leaders and the token floors. A store is two things:
//!
//! - **a log of changes**: each `put_*` (and [`Store::delete_job`]) stages
//!   one change, buffered and visible to reads at once, and one barrier,
//!   [`Store::sync`], makes every earlier change durable. That shape lets
//!   the caller share one barrier between many concurrent requests (group
//!   commit, `leasehold-node`).
//! - **the target of checkpoints**: what is durable is moved, off the
//!   request path, to where a restart reads it fastest
//!   ([`Store::checkpoint_if_due`]), and can be backed up from there.
//!
//! Everything else the trait has is reads, and the disk's state (space,
//! failure). Each method's docs state what is durable when it returns, what
//! a crash may take, and what its errors mean.
//!
//! # Durability contract
//!
//! - **When `sync` returns `Ok`, every change staged before `sync` was
//!   called is durable**: on stable storage, surviving a process crash and
//!   a power loss, for [`sled::SledStore`]; for the life of the process for
//!   [`memory::MemoryStore`].
//! - Changes become visible to reads at once, durable or not. The caller
//!   must not acknowledge anything it read before a `sync` that covers it.
//! - Recovery yields a prefix of the changes, in order: if a change
//!   survived, every change before it survived. Each change is atomic: a
//!   crash keeps all of it or none.
//! - **After a failed change or sync, every change and sync fails until
//!   [`Store::reopen`] succeeds**, and a reopen keeps only what was
//!   durable. A change refused up front for lack of space
//!   ([`Error::NoSpace`]) is not a failure: it changes nothing, and the
//!   store goes on.
//!
//! # The stores
//!
//! - [`sled::SledStore`], the embedded default: leasehold's write-ahead log
//!   in front of sled, checkpointed into sled.
//! - [`memory::MemoryStore`]: the same contract with "durable" meaning
//!   "kept while the process lives", for tests and for the single node
//!   without a disk. The backend conformance suite (`tests/it/conformance.rs`)
//!   runs the same scenarios on the single node on each store and on etcd.
//!
//! A replicated engine (etcd) needs more than this trait, because there the
//! decisions themselves must happen inside the engine's transactions; that
//! seam is the server's `Backend` (`leasehold-server`, `backend.rs`).

use std::time::Duration;

use leasehold_core::error::{Error, Result};
use leasehold_core::lease::{Floors, JobName, LeaseRecord, Token};

// The records and their encodings are the core's (`leasehold_core::record`),
// shared with the etcd backend, which stores the same bytes without this
// crate; re-exported here, where the store's users have always found them.
pub use leasehold_core::record::{
    decode_history, decode_lease, decode_value, encode_history, encode_lease, encode_value,
    history_key, history_prefix, value_key, HistoryPut, KeyPage, KeyPager, ListBudget, Tenure,
    ValueMeta, ValueRecord, HISTORY_MARK, LIST_PAGE_BYTES, LIST_PAGE_TIME,
};

mod backup;
pub mod datadir;

/// How long a backup may hold back a checkpoint that is due before the
/// backup is ended (see [`Store::backup`]).
pub const BACKUP_HOLD: Duration = Duration::from_secs(30);
pub mod manifest;
pub mod memory;
pub mod repair;
pub mod sled;
pub mod wal;

/// Durable storage for lease records and fenced values: a log of changes
/// that [`Store::sync`] makes durable, readable at once, and the target of
/// the checkpoints that move what is durable to where a restart reads it
/// fastest.
///
/// The methods fall in four groups. Each states what it leaves durable
/// when it returns, what a crash may take, and what its errors mean; the
/// module docs give the rules common to all.
///
/// - **Staging** ([`Store::put_lease`], [`Store::put_history`],
///   [`Store::put_value`], [`Store::delete_job`]): each call is one change,
///   visible to reads at once, durable only once a later
///   [`Store::sync`] returns `Ok`. A crash before that may take it, and then
///   takes every change staged after it too. Each call is atomic: a crash
///   keeps all of it or none. [`Error::NoSpace`] refuses the whole change
///   up front and leaves the store working; any other error puts the store
///   out of service until [`Store::reopen`].
/// - **The barrier and the way back** ([`Store::sync`],
///   [`Store::reopen`]; [`Store::needs_reopen`], provided).
/// - **Reads** ([`Store::leases`], [`Store::floors`], [`Store::get_value`],
///   [`Store::list_keys`], [`Store::history`], [`Store::count_keys`];
///   [`Store::recovered`], provided): they see every staged change, durable or not,
///   so a caller must not show what it read before a sync covers it. A
///   read error changes nothing.
/// - **The checkpoint target and the disk** ([`Store::checkpoint`],
///   [`Store::checkpoint_if_due`], [`Store::checkpoint_due`],
///   [`Store::backup`], [`Store::nearly_full`], [`Store::check_space`]),
///   and the read-ahead pair ([`Store::read_epoch`],
///   [`Store::recheck_value_in_memory`]) that lets a caller read outside
///   its lock: provided, with the defaults of a store that has no
///   checkpoints, no disk and no read cache (such as
///   [`memory::MemoryStore`]).
pub trait Store: Send + Sync + 'static {
    // ---- Staging: the log ----

    /// Stages a job's lease record, with the changes to the job's history
    /// that the same decision made, **as one change: a crash keeps all of
    /// them or none**. Keeps the history of the `keep` newest tokens: a
    /// grant's record removes the job's tenures with a token at or below
    /// its own minus `keep`; with `keep` 0, or no history, the record
    /// alone is stored. When there is not enough space the whole change
    /// is refused with [`Error::NoSpace`], and nothing changes.
    fn put_lease(
        &self,
        job: &JobName,
        record: &LeaseRecord,
        history: &[HistoryPut],
        keep: u64,
    ) -> Result<()>;
    /// Stages changes to the job's history alone (the end of a tenure
    /// recorded by a deletion), as one change.
    fn put_history(&self, job: &JobName, history: &[HistoryPut]) -> Result<()>;
    /// Stages a value record (a tombstone when its value is `None`).
    fn put_value(&self, job: &JobName, key: &[u8], record: &ValueRecord) -> Result<()>;
    /// Forgets `job`: its lease record, every value record of it
    /// (tombstones included) and its history, and raises the new-job
    /// floor of [`Store::floors`] to at least `floor`, **as one change:
    /// after a crash, the deletion and the new floor are both there, or
    /// neither**. Returns how many value records it removed (tombstones
    /// included, history not).
    fn delete_job(&self, job: &JobName, floor: Token) -> Result<usize>;

    // ---- The barrier and the way back ----

    /// The durability barrier. **When it returns `Ok`, every change staged
    /// before it was called is durable**, in the store's sense of it (on
    /// stable storage for sled; for as long as the process lives for
    /// [`memory::MemoryStore`]). An error means that some of them may not
    /// be: the store is out of service until [`Store::reopen`].
    fn sync(&self) -> Result<()>;
    /// After a failure: discards whatever is not durable and opens the
    /// store again from what is. Once a change or a sync has failed, every
    /// later change and sync fails until this succeeds, so nothing written
    /// after a failure can be mistaken for durable. An error leaves the
    /// store out of service; the caller tries again.
    fn reopen(&self) -> Result<()>;
    /// Whether an operation failed in a way that leaves the store refusing
    /// changes until it is reopened (a failed checkpoint, say). The
    /// server's recovery thread reopens it; a caller whose call failed
    /// outside the change path (a backup) asks this to tell it so.
    fn needs_reopen(&self) -> bool {
        false
    }

    // ---- Reads: every staged change, durable or not ----

    /// Every lease record, for start-up and for the reload after a
    /// [`Store::reopen`].
    fn leases(&self) -> Result<Vec<(JobName, LeaseRecord)>>;
    /// The floors the lease table grants above: `every`, raised when a
    /// data dir is recovered or restored, so that no token issued before
    /// can be issued again, and `new_jobs`, raised by
    /// [`Store::delete_job`], so that a job created again never repeats a
    /// token (jobs the store knows keep their own counter). Read at
    /// start-up and after a reopen, when nothing is staged; in between, a
    /// floor raised by a deletion shows once a sync has covered it (the
    /// lease table keeps its own until then).
    fn floors(&self) -> Floors;
    /// The record under (job, key), if any (tombstones included).
    fn get_value(&self, job: &JobName, key: &[u8]) -> Result<Option<ValueRecord>>;
    /// One page of `job`'s live (not deleted) keys that start with
    /// `prefix`, after key `after`, in key order: at most `limit` keys,
    /// and no more records looked at (deleted keys included) than `budget`
    /// allows ([`KeyPager`] decides where it stops).
    fn list_keys(
        &self,
        job: &JobName,
        prefix: &[u8],
        after: Option<&[u8]>,
        limit: usize,
        budget: ListBudget,
    ) -> Result<KeyPage>;
    /// Up to `limit` tenures of `job` with a token below `before` (all when
    /// `None`), newest first.
    fn history(&self, job: &JobName, before: Option<Token>, limit: usize) -> Result<Vec<Tenure>>;
    /// How many keys `job` holds, deleted ones (tombstones) included.
    fn count_keys(&self, job: &JobName) -> Result<usize>;
    /// How the data dir was last recovered or restored, if it was: what was
    /// kept, what was lost, the floor.
    fn recovered(&self) -> Option<String> {
        None
    }

    // ---- The checkpoint target and the disk ----

    /// Moves everything durable to where a restart reads it fastest; for a
    /// clean shutdown, after the last [`Store::sync`]. It must not change
    /// what is durable. An error puts the store out of service (see
    /// [`Store::needs_reopen`]).
    fn checkpoint(&self) -> Result<()> {
        Ok(())
    }
    /// [`Store::checkpoint`] if one is due: the group committer calls it
    /// right after a [`Store::sync`] whose waiters were released.
    fn checkpoint_if_due(&self) -> Result<()> {
        Ok(())
    }
    /// The server is idle (no change for a while): a checkpoint of what
    /// the log holds, even if none is due, then what else a checkpoint
    /// may lead to (a reclaim of disk space), and the memory a burst of
    /// churn left given back (sled: a rewrite of the store when it took
    /// in far more than its live data, then its deferred frees run), so
    /// that what a burst of changes left (the log's records held in
    /// memory, dead pages, old tree nodes) does not wait for the next
    /// burst. Never waits for a backup, nor ends one. The group committer
    /// calls it once after each burst.
    fn settle(&self) -> Result<()> {
        Ok(())
    }
    /// Whether [`Store::checkpoint_if_due`] has work to do after the syncs
    /// so far: a sync run away from the flusher asks, and hands the work
    /// over.
    fn checkpoint_due(&self) -> bool {
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
    /// the backup must end. The default refuses: such a store cannot be
    /// backed up.
    fn backup(&self, out: &mut dyn std::io::Write) -> Result<()> {
        let _ = out;
        Err(Error::storage(
            "this store cannot be backed up by leasehold",
        ))
    }
    /// Whether the disk is nearly full, so that a change may soon be
    /// refused with [`Error::NoSpace`]. Callers use it to prepare to undo a
    /// decision whose change cannot be stored. Cheap: asked before every
    /// decision.
    fn nearly_full(&self) -> bool {
        false
    }
    /// Fails with [`Error::NoSpace`] when the disk is too full for any
    /// change at all: even the smallest would be refused. The server's
    /// health reports it, and asks again until space returns. Any other
    /// error means the space could not be told.
    fn check_space(&self) -> Result<()> {
        Ok(())
    }

    // ---- Reading outside the caller's lock ----

    /// A number to take before a [`Store::get_value`] made without the
    /// caller's lock, for [`Store::recheck_value_in_memory`] and
    /// [`recheck_value`]. A store whose reads are always current keeps 0.
    fn read_epoch(&self) -> u64 {
        0
    }
    /// Under the caller's lock, after `get_value(job, key)` was called
    /// without it (with `epoch` from [`Store::read_epoch`] taken before),
    /// from memory alone: `Some(None)` when that read is still the key's
    /// record, `Some(Some(record))` with the record now when it is not,
    /// and `None` when only a read can tell (a checkpoint moved records
    /// since `epoch`). A caller under a lock that others wait for then
    /// lets go, reads ahead again, and retries, so that no read waits on
    /// the store's own locks under it; [`recheck_value`] is the read. The
    /// default reads again (for a store whose reads are memory look-ups).
    fn recheck_value_in_memory(
        &self,
        job: &JobName,
        key: &[u8],
        epoch: u64,
    ) -> Result<Option<Option<Option<ValueRecord>>>> {
        let _ = epoch;
        self.get_value(job, key).map(|r| Some(Some(r)))
    }
}

/// [`Store::recheck_value_in_memory`], reading the store when memory
/// cannot tell: `None` when the read made after `epoch` is still the key's
/// record, else the record now. Lets the caller do a slow read outside its
/// lock and, most of the time, only a memory look-up inside it.
pub fn recheck_value(
    store: &dyn Store,
    job: &JobName,
    key: &[u8],
    epoch: u64,
) -> Result<Option<Option<ValueRecord>>> {
    match store.recheck_value_in_memory(job, key, epoch)? {
        Some(answer) => Ok(answer),
        None => store.get_value(job, key).map(Some),
    }
}
