//! The embedded store: leasehold's write-ahead log in front of sled. The
//! only module (with its submodules) that names sled.
//!
//! Two sled trees: `leases` (job -> lease record) and `values` ((job, key)
//! -> value record).
//!
//! # The path of a put
//!
//! 1. `put_*` appends the record to a pending list and, for values, to an
//!    in-memory overlay that gets read before sled, so the put is visible
//!    at once.
//! 2. [`Store::sync`] (the flusher thread, once per group commit) writes
//!    every pending record to the [`wal`](crate::wal) with one `pwrite` and
//!    one `fdatasync`. That is the durability point.
//!    The logged records wait in memory, the newest per key: a key written
//!    a thousand times between checkpoints costs sled one insert.
//! 3. A checkpoint, when the log is half full or `CHECKPOINT_KEYS` keys
//!    wait for sled (checked by [`Store::checkpoint_if_due`], on the same
//!    thread, after the waiters were released), at a clean shutdown and at
//!    every start-up, applies the
//!    logged records to sled's trees, drops them from the overlay, flushes
//!    sled (its `flush` and an `fdatasync` of its log: sled 0.34's flush
//!    ends in `sync_file_range`, which reaches neither the file's metadata
//!    nor the drive's cache, sled issue #1452) and then empties the log.
//!
//!    The records go to sled in one transaction with sled's *checkpoint
//!    record* (generation, record counts, digest, highest token, floor),
//!    and after the log's reset the same figures go to the manifest
//!    ([`manifest`](crate::manifest)).
//!
//! # Start-up
//!
//! The store (through [`inspect`], the same code) reads everything before the server listens: the
//! manifest, the log (whose header names the data dir and generation),
//! and every record in sled, counted and hashed against sled's checkpoint
//! record. Any disagreement is damage, and the store refuses to open,
//! naming each file: a damaged store could issue a token again. A data
//! dir made before the manifest existed is upgraded at its first start.
//!
//! **sled never holds a record that the log has not made durable**: records
//! reach sled only after their `fdatasync`. Whatever sled writes on its own
//! is therefore a prefix of the durable records, and replaying the log over
//! it at start-up yields exactly the durable state, never a mix.
//!
//! Pages too large for sled's log go to files under `blobs/`, which sled
//! never syncs; the segment size below keeps default-sized values out of
//! blobs, and a checkpoint fsyncs any blob files that exist anyway.
//!
//! # Its files
//!
//! This file holds the store's state (where a put is on its way: pending,
//! logged, in sled) and the reads that merge those places. The rest is
//! split by what it does to that state:
//!
//! - `store.rs`: the [`Store`] trait's methods (staging, the sync, the
//!   reads, backups, the reopen);
//! - `checkpoint.rs`: the checkpoint, which moves logged puts into sled;
//! - `open.rs`: opening a data dir and checking all of it first
//!   ([`inspect`], [`Inspection`], [`Problem`]);
//! - `space.rs`: the free-space queries that refuse a put before sled
//!   sees it.
//!
//! [`Store`]: crate::Store
//! [`Store::sync`]: crate::Store::sync
//! [`Store::checkpoint_if_due`]: crate::Store::checkpoint_if_due

mod checkpoint;
mod open;
mod reclaim;
mod scan;
mod space;
mod store;
#[cfg(test)]
mod tests;

pub(crate) use open::open_sled;
pub use open::{damage_advice, inspect, Inspection, Problem};
pub(crate) use reclaim::ASIDE as RECLAIM_ASIDE;
pub use reclaim::{check_ratio, store_bytes, DEFAULT_RATIO, MAX_RATIO, MIN_RATIO};
pub(crate) use space::free_bytes;
use space::RESERVE;

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, RwLock};

use crate::datadir::{self, DirLock};
use crate::manifest::Checkpoint;
use crate::value_key;
use crate::wal::{Kind, Record, Wal};
use leasehold_core::error::{Error, Result};
use leasehold_core::lease::{JobName, LeaseRecord};

/// The write-ahead log's file in the data dir.
const WAL_FILE: &str = "wal";

/// sled's segment size. A page larger than a quarter of it goes to a blob
/// file, so 2 MiB keeps pages up to 512 KiB in the log. It is stored in the
/// data dir and must not change between runs.
const SEGMENT_SIZE: usize = 2 * 1024 * 1024;

/// A checkpoint is due once this many keys wait for sled, however little
/// of the log they fill.
///
/// sled 0.34 applies a transaction under one pinned epoch: every version
/// of a tree node that the transaction's inserts replace (each insert
/// copies its leaf) stays allocated until the whole transaction ends. A
/// checkpoint of 40,000 keys (half of an 8 MiB log of small records)
/// made a transient heap of over 100 MB at each checkpoint, and what the
/// store keeps for good was allocated among it, so the allocator could
/// give little of it back: a server that had taken a million Acquires
/// held 472 to 510 MiB, against 396 MiB with checkpoints of about 10,000
/// keys (BENCHMARKS.md, "A running server's memory").
pub(crate) const CHECKPOINT_KEYS: usize = 8192;

/// The embedded store.
pub struct SledStore {
    dir: PathBuf,
    /// The data dir's lock, held for the store's life (see [`datadir`]).
    _lock: DirLock,
    /// `None` while a reopen after a failure has not succeeded yet.
    open: RwLock<Option<Open>>,
    /// The first failure since the store was (re)opened. Once set, every
    /// put and sync fails until [`Store::reopen`](crate::Store::reopen):
    /// sled itself stops writing after an I/O error, and a later flush that
    /// returned `Ok` would not mean that the earlier puts reached the disk.
    failed: Mutex<Option<String>>,
    syncs: AtomicU64,
    /// Where the log's batches stop being durable, after a failed sync: the
    /// generation and the offset from which
    /// [`Store::reopen`](crate::Store::reopen) zeroes the log, so that a
    /// change answered as discarded is discarded.
    discard: Mutex<Option<(u64, u64)>>,
    /// Goes up before records move from the overlay to sled (a checkpoint)
    /// and at a reopen: see
    /// [`Store::recheck_value_in_memory`](crate::Store::recheck_value_in_memory).
    read_epoch: AtomicU64,
    /// Puts not yet in the log, and the values not yet in sled.
    pending: Mutex<Pending>,
    /// The last `statvfs` of the data dir: when, and the free bytes.
    space: Mutex<Option<(std::time::Instant, u64)>>,
    /// When to rewrite the store to reclaim disk space (`reclaim.rs`).
    reclaim: reclaim::Reclaim,
}

/// One put on its way: logged by `sync`, applied to sled by a checkpoint.
struct Put {
    seq: u64,
    record: Record,
}

#[derive(Default)]
struct Pending {
    /// Puts since the last `sync`, in order.
    puts: Vec<Put>,
    /// The newest put of every value key that is not in sled yet (logged or
    /// not), read before sled.
    overlay: BTreeMap<Vec<u8>, (u64, Vec<u8>)>,
    next_seq: u64,
}

impl Pending {
    /// Queues a put, numbered; a value's newest put is read before sled.
    fn push(&mut self, kind: Kind, key: Vec<u8>, value: Vec<u8>) {
        self.next_seq += 1;
        let seq = self.next_seq;
        if kind == Kind::Value {
            self.overlay.insert(key.clone(), (seq, value.clone()));
        }
        self.puts.push(Put {
            seq,
            record: Record { kind, key, value },
        });
    }

    /// Forgets overlay entries that sled now holds: those of puts up to
    /// `seq` that no later put replaced.
    fn trim(&mut self, seq: u64) {
        self.overlay.retain(|_, (s, _)| *s > seq);
    }
}

struct Open {
    dir: PathBuf,
    db: sled::Db,
    leases: sled::Tree,
    values: sled::Tree,
    /// sled's own log file, opened a second time for the `fdatasync` of a
    /// checkpoint.
    log: File,
    blobs: PathBuf,
    wal: Mutex<Wal>,
    /// Logged puts that no checkpoint has applied to sled yet.
    logged: Mutex<Logged>,
    /// What the last checkpoint made durable (sled's record of it).
    ckpt: Mutex<Checkpoint>,
    /// Bytes of the keys and values sled holds: the live data, which a
    /// reclaim compares the data dir's size with (`reclaim.rs`).
    live: AtomicU64,
    /// Bytes of keys and values that checkpoints put into (or removed
    /// from) this sled since it was opened: the churn it has taken in,
    /// which a settle compares with the live data (`reclaim.rs`).
    absorbed: AtomicU64,
    /// The generation the manifest names. A checkpoint is always this
    /// plus one: one that failed after sled's part is done again under
    /// the same generation, so that failed checkpoints in a row never
    /// leave sled more than one ahead of the manifest.
    manifest_generation: AtomicU64,
    /// Held for writing by a checkpoint, for reading by a backup: sled
    /// changes only at checkpoints, so a backup that holds it reads one
    /// checkpoint's state.
    gate: RwLock<()>,
    /// Set when a checkpoint must not wait for the backup that holds
    /// `gate` any longer: the backup ends at its next write.
    preempt: AtomicBool,
    /// Since when a due checkpoint has waited for a backup.
    held_since: Mutex<Option<std::time::Instant>>,
    /// The lease records the start-up's inspection decoded, for the first
    /// [`Store::leases`](crate::Store::leases), which would otherwise read
    /// and decode them all again (a million leases: about a fifth of the
    /// start-up). Dropped by any checkpoint: only what sled held at the
    /// inspection is here.
    first_leases: Mutex<Option<Vec<(JobName, LeaseRecord)>>>,
}

/// The logged puts not in sled yet: the newest per key, so that a key
/// written many times between checkpoints is applied once.
#[derive(Default)]
struct Logged {
    leases: BTreeMap<Vec<u8>, Vec<u8>>,
    values: BTreeMap<Vec<u8>, Vec<u8>>,
    /// The sequence number of the last put logged.
    upto: u64,
    /// The highest new-job floor logged.
    new_job_floor: u64,
}

impl Logged {
    /// How many keys wait for sled: the inserts the next checkpoint makes.
    fn keys(&self) -> usize {
        self.leases.len() + self.values.len()
    }

    fn add(&mut self, puts: Vec<Put>) {
        for p in puts {
            self.upto = self.upto.max(p.seq);
            let map = match p.record.kind {
                Kind::Lease => &mut self.leases,
                Kind::Value => &mut self.values,
                Kind::Floor => {
                    self.new_job_floor = self.new_job_floor.max(decode_floor(&p.record.value));
                    continue;
                }
            };
            map.insert(p.record.key, p.record.value);
        }
    }

    /// Adds records replayed from the log, in order.
    fn add_records(&mut self, records: Vec<Record>) {
        self.add(
            records
                .into_iter()
                .map(|record| Put { seq: 0, record })
                .collect(),
        );
    }
}

impl SledStore {
    /// Opens (or creates) the store in `dir`.
    ///
    /// Fails, rather than starting empty, when the directory cannot be
    /// created or read, or is in use by another process: an empty store
    /// would reset every token.
    pub fn open(dir: &Path) -> Result<SledStore> {
        SledStore::open_reclaiming(dir, DEFAULT_RATIO)
    }

    /// [`SledStore::open`], rewriting the store to reclaim disk space when
    /// its data dir grows past `ratio` times its live data (0: never; see
    /// [`SledStore::reclaim_if_due`]), at start-up too.
    pub fn open_reclaiming(dir: &Path, ratio: f64) -> Result<SledStore> {
        check_ratio(ratio).map_err(|why| Error::InvalidArgument {
            field: "reclaim_ratio".into(),
            message: why,
        })?;
        std::fs::create_dir_all(dir).map_err(|e| {
            Error::storage(format!("cannot create data dir {}: {e}", dir.display()))
        })?;
        let lock = DirLock::exclusive(dir, "a leasehold server")?;
        if let Some(done) = datadir::finish_switch(dir)? {
            tracing::warn!(dir = %dir.display(), "{done}");
        }
        reclaim::remove_leftovers(dir);
        let open = no_panic(|| Open::checked(dir)).map_err(|e| match free_bytes(dir) {
            // Not damage: only space is missing.
            Ok(free) if free < RESERVE => Error::storage(format!(
                "cannot start: the file system holding data dir {} has {free} bytes free, and a \
                 start needs at least {RESERVE} to write its checkpoint; free some space and \
                 start again (nothing in the data dir is damaged, no restore or recover is \
                 needed). The error: {e}",
                dir.display()
            )),
            _ => e,
        })?;
        Ok(SledStore {
            dir: dir.to_owned(),
            _lock: lock,
            open: RwLock::new(Some(open)),
            failed: Mutex::new(None),
            syncs: AtomicU64::new(0),
            discard: Mutex::new(None),
            read_epoch: AtomicU64::new(0),
            pending: Mutex::new(Pending::default()),
            space: Mutex::new(None),
            reclaim: reclaim::Reclaim::new(ratio),
        })
        .and_then(|store| {
            store.read_reclaim_floor();
            store.reclaim_if_due()?;
            Ok(store)
        })
    }

    /// Raises the token floor to at least `floor` and records how the data
    /// dir was recovered; durable at the next checkpoint.
    pub fn set_floor(&self, floor: u64, note: &str) -> Result<()> {
        self.with(|o| {
            let mut c = o.ckpt.lock().expect("checkpoint lock");
            c.floor = c.floor.max(floor);
            c.max_token = c.max_token.max(c.floor);
            c.recovered = Some(note.to_owned());
            Ok(())
        })
    }

    /// Stages a record as the log stores it (for restoring a backup).
    pub fn put_raw(&self, kind: Kind, key: Vec<u8>, value: Vec<u8>) -> Result<()> {
        self.stage(kind, key, value)
    }

    /// What the last checkpoint made durable.
    pub fn last_checkpoint(&self) -> Result<Checkpoint> {
        self.with(|o| Ok(o.ckpt.lock().expect("checkpoint lock").clone()))
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.pending.lock().expect("pending lock")
    }

    /// Queues a put for the next `sync`.
    fn stage(&self, kind: Kind, key: Vec<u8>, value: Vec<u8>) -> Result<()> {
        self.write(|_| {
            self.pending().push(kind, key, value);
            Ok(())
        })
    }

    /// The value records with keys from `start` up to and including `last`,
    /// in key order: sled's, with the overlay's over them (a removal there
    /// takes a key out). The overlay is read first: an entry that leaves
    /// it in between was applied to sled before it left.
    fn value_range(&self, start: &[u8], last: &[u8]) -> Result<BTreeMap<Vec<u8>, Vec<u8>>> {
        use std::ops::Bound;
        let range = (
            Bound::Included(start.to_vec()),
            Bound::Included(last.to_vec()),
        );
        let overlay: Vec<(Vec<u8>, Vec<u8>)> = self
            .pending()
            .overlay
            .range(range.clone())
            .map(|(k, (_, v))| (k.clone(), v.clone()))
            .collect();
        let mut out = BTreeMap::new();
        self.with(|o| {
            for kv in o.values.range(range) {
                let (k, v) = kv.map_err(Error::storage)?;
                out.insert(k.to_vec(), v.to_vec());
            }
            Ok(())
        })?;
        for (k, v) in overlay {
            match v.is_empty() {
                true => out.remove(&k),
                false => out.insert(k, v),
            };
        }
        Ok(out)
    }

    /// Every value key of `job`, tombstones included: sled's, and the
    /// overlay's over them (a removal there takes a key out).
    fn value_keys(&self, job: &JobName) -> Result<BTreeSet<Vec<u8>>> {
        self.keys_under(&value_key(job, b""))
    }

    /// Every key of the values tree that starts with `prefix`, the staged
    /// changes applied.
    fn keys_under(&self, prefix: &[u8]) -> Result<BTreeSet<Vec<u8>>> {
        let prefix = prefix.to_vec();
        // The overlay after sled: an entry that leaves the overlay in
        // between was applied to sled before it left, and is seen twice at
        // worst.
        let mut keys = BTreeSet::new();
        self.with(|o| {
            for k in o.values.scan_prefix(&prefix).keys() {
                keys.insert(k.map_err(Error::storage)?.to_vec());
            }
            Ok(())
        })?;
        for (k, (_, v)) in self
            .pending()
            .overlay
            .range(prefix.clone()..)
            .take_while(|(k, _)| k.starts_with(&prefix))
        {
            match v.is_empty() {
                true => keys.remove(k),
                false => keys.insert(k.clone()),
            };
        }
        Ok(keys)
    }

    /// How many durability barriers ran, for tests and metrics.
    pub fn syncs(&self) -> u64 {
        self.syncs.load(Ordering::Relaxed)
    }

    fn with<T>(&self, f: impl FnOnce(&Open) -> Result<T>) -> Result<T> {
        let guard = self.open.read().expect("store lock");
        let open = guard
            .as_ref()
            .ok_or_else(|| Error::storage(self.failure("the store is not open")))?;
        no_panic(|| f(open))
    }

    /// Runs a write, failing fast once the store has failed, and marking it
    /// failed on error.
    fn write<T>(&self, f: impl FnOnce(&Open) -> Result<T>) -> Result<T> {
        if let Some(e) = self.failed.lock().expect("failed lock").as_ref() {
            return Err(Error::storage(format!("{e} (the store is being reopened)")));
        }
        let r = self.with(f);
        if let Err(e) = &r {
            self.failed
                .lock()
                .expect("failed lock")
                .get_or_insert_with(|| e.to_string());
        }
        r
    }

    fn failure(&self, default: &str) -> String {
        self.failed
            .lock()
            .expect("failed lock")
            .clone()
            .unwrap_or_else(|| default.to_owned())
    }
}

/// Runs `f`, turning a panic inside it into a storage error. sled 0.34
/// unwraps some I/O results on its own paths (a write refused with EIO or
/// EROFS while it opens or flushes): such a panic must fail the store,
/// which then reopens when the disk answers, and never unwind through the
/// store's locks, or the callers', which would refuse every later call.
fn no_panic<T>(f: impl FnOnce() -> Result<T>) -> Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|p| {
        let why = p
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic".to_owned());
        Err(Error::storage(format!("sled failed: {why}")))
    })
}

/// Reads a [`Kind::Floor`] record's value (0 if it is not 8 bytes: the
/// log's checksums keep damaged records out).
fn decode_floor(v: &[u8]) -> u64 {
    v.try_into().map(u64::from_le_bytes).unwrap_or(0)
}
