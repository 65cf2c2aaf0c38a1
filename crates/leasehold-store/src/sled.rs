//! The embedded store: leasehold's write-ahead log in front of sled. The
//! only module that names sled.
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
//!    every pending record to the [`wal`] with one `pwrite` and
//!    one `fdatasync`. That is the durability point.
//!    The logged records wait in memory, the newest per key: a key written
//!    a thousand times between checkpoints costs sled one insert.
//! 3. A checkpoint, when the log is half full (checked by
//!    [`Store::checkpoint_if_due`], on the same thread, after the waiters were
//!    released), at a clean shutdown and at every start-up, applies the
//!    logged records to sled's trees, drops them from the overlay, flushes
//!    sled (its `flush` and an `fdatasync` of its log: sled 0.34's flush
//!    ends in `sync_file_range`, which reaches neither the file's metadata
//!    nor the drive's cache, sled issue #1452) and then empties the log.
//!
//!    The records go to sled in one transaction with sled's *checkpoint
//!    record* (generation, record counts, digest, highest token, floor),
//!    and after the log's reset the same figures go to the manifest
//!    ([`manifest`]).
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

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, RwLock};

use crate::datadir::{self, DirLock};
use crate::manifest::{self, record_hash, Checkpoint};
use crate::wal::{self, Kind, Record, Wal};
use crate::{
    decode_history, decode_lease, decode_value, encode_history, encode_lease, encode_value,
    history_key, history_prefix, value_key, HistoryPut, Store, Tenure, ValueRecord,
};
use leasehold_core::error::{Error, Result};
use leasehold_core::lease::{Floors, JobName, LeaseRecord, Token};

/// The write-ahead log's file in the data dir.
const WAL_FILE: &str = "wal";
/// The write-ahead log's size when it is created: a checkpoint runs when it
/// is half full. Smaller on a small file system (an eighth of the free
/// space), so that the log never takes the room that sled needs.
const WAL_SIZE: u64 = 8 * 1024 * 1024;
const WAL_MIN: u64 = 64 * 1024;

/// sled's segment size. A page larger than a quarter of it goes to a blob
/// file, so 2 MiB keeps pages up to 512 KiB in the log. It is stored in the
/// data dir and must not change between runs.
const SEGMENT_SIZE: usize = 2 * 1024 * 1024;

/// The free space a put needs beyond its own size. sled may start a new
/// segment at any write, and a write that fails inside sled stops the whole
/// store until it is reopened (which itself needs space); refusing the put
/// up front keeps the store, and reads, working on a full disk.
const RESERVE: u64 = 2 * SEGMENT_SIZE as u64;

/// Free space above which a `statvfs` result is reused for up to
/// [`SPACE_FRESH`]: filling that much within that time would take a writer
/// of several GB/s. Nearer to full, every put asks the file system again.
const SPACE_TRUSTED: u64 = 256 * 1024 * 1024;
const SPACE_FRESH: std::time::Duration = std::time::Duration::from_millis(100);

/// The embedded store.
pub struct SledStore {
    dir: PathBuf,
    /// The data dir's lock, held for the store's life (see [`datadir`]).
    _lock: DirLock,
    /// `None` while a reopen after a failure has not succeeded yet.
    open: RwLock<Option<Open>>,
    /// The first failure since the store was (re)opened. Once set, every
    /// put and sync fails until [`Store::reopen`]: sled itself stops
    /// writing after an I/O error, and a later flush that returned `Ok`
    /// would not mean that the earlier puts reached the disk.
    failed: Mutex<Option<String>>,
    syncs: AtomicU64,
    /// Where the log's batches stop being durable, after a failed sync: the
    /// generation and the offset from which [`Store::reopen`] zeroes the
    /// log, so that a change answered as discarded is discarded.
    discard: Mutex<Option<(u64, u64)>>,
    /// Goes up before records move from the overlay to sled (a checkpoint)
    /// and at a reopen: see [`Store::recheck_value_in_memory`].
    read_epoch: AtomicU64,
    /// Puts not yet in the log, and the values not yet in sled.
    pending: Mutex<Pending>,
    /// The last `statvfs` of the data dir: when, and the free bytes.
    space: Mutex<Option<(std::time::Instant, u64)>>,
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
    /// [`Store::leases`], which would otherwise read and decode them all
    /// again (a million leases: about a fifth of the start-up). Dropped by
    /// any checkpoint: only what sled held at the inspection is here.
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

/// History changes as the value tree stores them: key, encoded record.
fn encoded_history(job: &JobName, history: &[HistoryPut]) -> Vec<(Vec<u8>, Vec<u8>)> {
    history
        .iter()
        .map(|h| {
            let (k, v) = encode_history(job, h);
            (k, encode_value(&v))
        })
        .collect()
}

/// An empty record value stands for a removal: a job's deletion removes
/// its records (no encoded lease or value record is empty).
const REMOVED: Vec<u8> = Vec::new();

impl Logged {
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
        std::fs::create_dir_all(dir).map_err(|e| {
            Error::storage(format!("cannot create data dir {}: {e}", dir.display()))
        })?;
        let lock = DirLock::exclusive(dir, "a leasehold server")?;
        if let Some(done) = datadir::finish_switch(dir)? {
            tracing::warn!(dir = %dir.display(), "{done}");
        }
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
        let prefix = value_key(job, b"");
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

    /// Refuses a put of about `bytes` when the data dir's file system is
    /// too full for it, before sled sees it.
    fn ensure_space(&self, bytes: usize) -> Result<()> {
        let free = self.free().map_err(|e| {
            Error::storage(format!("cannot stat data dir {}: {e}", self.dir.display()))
        })?;
        let needed = RESERVE + bytes as u64;
        if free < needed {
            return Err(Error::NoSpace { free, needed });
        }
        Ok(())
    }

    /// Applies the logged puts to sled, forgets them in the overlay, and
    /// checkpoints.
    fn checkpoint_open(&self, o: &Open, wal: &mut Wal) -> Result<()> {
        // Before sled changes: a read from sled that a caller made before
        // this point must be made again (see `recheck_value`).
        self.read_epoch.fetch_add(1, Ordering::AcqRel);
        let upto = o.checkpoint(wal)?;
        self.pending().trim(upto);
        Ok(())
    }

    /// The free bytes of the data dir's file system: asked anew unless the
    /// last answer is recent and far from full (see [`SPACE_TRUSTED`]).
    fn free(&self) -> std::io::Result<u64> {
        let now = leasehold_core::clock::now();
        let mut last = self.space.lock().expect("space lock");
        if let Some((at, free)) = *last {
            if free > SPACE_TRUSTED && now.saturating_duration_since(at) < SPACE_FRESH {
                return Ok(free);
            }
        }
        let free = free_bytes(&self.dir)?;
        *last = Some((now, free));
        Ok(free)
    }

    fn failure(&self, default: &str) -> String {
        self.failed
            .lock()
            .expect("failed lock")
            .clone()
            .unwrap_or_else(|| default.to_owned())
    }
}

/// A file beside sled's own, written once the store holds leasehold's
/// marker record; data dirs made before the manifest existed are
/// recognised by it.
const MARKER_FILE: &str = "leasehold.store";
/// The marker record, in sled's default tree.
const MARKER_KEY: &[u8] = b"leasehold/format";
const MARKER_VALUE: &[u8] = b"1";
/// The checkpoint record, in sled's default tree, written in the same
/// transaction as each checkpoint's data.
const CHECKPOINT_KEY: &[u8] = b"leasehold/checkpoint";
/// Trees, as numbered in record digests.
const TREE_LEASES: u8 = 1;
const TREE_VALUES: u8 = 2;

/// One thing wrong with a data dir: the file, and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The file or files, relative to the data dir.
    pub file: String,
    /// What is wrong with it.
    pub what: String,
}

impl Problem {
    fn new(file: &str, what: impl Into<String>) -> Problem {
        Problem {
            file: file.to_owned(),
            what: what.into(),
        }
    }
}

/// What reading a whole data dir found (see [`inspect`]).
#[derive(Debug, Default)]
pub struct Inspection {
    /// The manifest, if it checks out.
    pub manifest: Option<Checkpoint>,
    /// sled's checkpoint record, if there is one.
    pub sled: Option<Checkpoint>,
    /// What sled holds, counted and hashed record by record.
    pub found: Checkpoint,
    /// The log's generation, if it could be read.
    pub wal_generation: Option<u64>,
    /// Records in the log that a start would replay.
    pub wal_records: usize,
    /// Bytes of a torn last batch in the log (an unacknowledged write cut
    /// by a crash).
    pub wal_torn: u64,
    /// The highest token any record holds (sled and log together).
    pub max_token: u64,
    /// Every problem found; empty for a healthy data dir.
    pub problems: Vec<Problem>,
    /// A data dir of the format before the manifest: upgraded at start.
    pub legacy: bool,
    /// A data dir with nothing in it yet.
    pub fresh: bool,
}

/// The advice every refusal ends with.
pub fn damage_advice(dir: &Path) -> String {
    format!(
        "leasehold wrote nothing to the data dir. `leasehold check --data-dir {d}` reports \
         everything it finds. To go on: restore a backup (`leasehold restore --data-dir {d} \
         FILE`), or keep what is readable with `leasehold recover --data-dir {d}`; both raise the \
         token floor so that no token is ever issued twice",
        d = dir.display()
    )
}

impl Open {
    /// Opens the store in `dir`: checks everything (see [`inspect`]),
    /// refusing a damaged data dir, then replays the log and checkpoints
    /// (a new generation).
    fn checked(dir: &Path) -> Result<Open> {
        let (open, records, ins) = Open::inspected(dir, false)?;
        if !ins.problems.is_empty() {
            let list: String = ins
                .problems
                .iter()
                .map(|p| format!("\n  - {}/{}: {}", dir.display(), p.file, p.what))
                .collect();
            return Err(Error::storage(format!(
                "data dir {} is damaged; refusing to start, because a damaged store could issue \
                 a token again or lose acknowledged writes:{list}\n{}",
                dir.display(),
                damage_advice(dir)
            )));
        }
        let open = open.expect("a healthy inspection opens the store");
        let replayed = records.len();
        // What the inspection decoded is sled's state; the checkpoint below
        // changes it only when it has records to replay.
        let first = open.first_leases.lock().expect("first leases lock").take();
        open.logged
            .lock()
            .expect("logged lock")
            .add_records(records);
        open.checkpoint(&mut open.wal.lock().expect("wal lock"))?;
        if replayed == 0 {
            *open.first_leases.lock().expect("first leases lock") = first;
        }
        if replayed > 0 {
            tracing::info!(records = replayed, "replayed the write-ahead log");
        }
        if ins.legacy {
            tracing::info!(dir = %dir.display(), "data dir upgraded: it now has a manifest");
        }
        if let Some(r) = &open.ckpt.lock().expect("checkpoint lock").recovered {
            tracing::warn!(dir = %dir.display(), "this data dir was {r}");
        }
        Ok(open)
    }

    /// Reads and checks everything in `dir`. Returns the open store and the
    /// records to replay when the data dir is healthy (or new: then it is
    /// created); the problems otherwise. Writes nothing of leasehold's into
    /// a data dir that has problems. Unless `thorough`, it stops at the
    /// first file with a problem, before opening sled (whose own recovery
    /// may rewrite its snapshot file).
    fn inspected(dir: &Path, thorough: bool) -> Result<(Option<Open>, Vec<Record>, Inspection)> {
        let mut ins = Inspection::default();
        std::fs::create_dir_all(dir).map_err(|e| {
            Error::storage(format!("cannot create data dir {}: {e}", dir.display()))
        })?;
        let manifest = match manifest::read(dir) {
            Ok(f) => f,
            Err(e) => {
                return Err(Error::storage(format!(
                    "cannot read {}: {e}",
                    dir.join(manifest::FILE).display()
                )))
            }
        };
        let had_marker = dir.join(MARKER_FILE).exists();
        let wal_path = dir.join(WAL_FILE);
        let had_wal = wal_path.exists();
        match &manifest {
            manifest::Found::Ok(c) => ins.manifest = Some(c.clone()),
            manifest::Found::Damaged(why) => {
                ins.problems.push(Problem::new(manifest::FILE, why.clone()))
            }
            manifest::Found::Missing => {}
        }
        // The log, before sled is opened.
        let guess = ins.manifest.as_ref().map_or([0; 16], |m| m.store_id);
        let mut wal = None;
        let mut records = Vec::new();
        let mut wal_v1 = false;
        if had_wal {
            match Wal::open(&wal_path, guess) {
                Ok((w, replay)) => {
                    ins.wal_generation = Some(replay.generation);
                    ins.wal_records = replay.records.len();
                    ins.wal_torn = replay.torn;
                    wal_v1 = replay.store_id.is_none();
                    if let (Some(id), Some(m)) = (replay.store_id, &ins.manifest) {
                        if id != m.store_id {
                            ins.problems.push(Problem::new(
                                WAL_FILE,
                                "its header and leasehold.manifest name different data \
                                 dirs: one of the two was copied from another data dir",
                            ));
                        }
                    }
                    records = replay.records;
                    wal = Some(w);
                }
                Err(wal::OpenError::Damaged(why)) => ins.problems.push(Problem::new(WAL_FILE, why)),
                Err(wal::OpenError::Io(e)) => {
                    return Err(Error::storage(format!(
                        "cannot read {}: {e}",
                        wal_path.display()
                    )))
                }
            }
        }
        for r in &records {
            match r.kind {
                Kind::Lease => {
                    if let Ok(l) = decode_lease(&r.value) {
                        ins.max_token = ins.max_token.max(l.token.0);
                    }
                }
                Kind::Floor => ins.max_token = ins.max_token.max(decode_floor(&r.value)),
                Kind::Value => {}
            }
        }
        // sled makes a missing file anew, empty: in a data dir that has
        // been used, that is damage, to be named before sled opens.
        if !matches!(manifest, manifest::Found::Missing) {
            for f in ["db", "conf"] {
                if !dir.join(f).exists() {
                    ins.problems.push(Problem::new(
                        f,
                        "missing: one of sled's files, which hold the checkpointed state",
                    ));
                }
            }
        }
        // No store, but what a restore or recover sets aside or writes
        // first: a data dir emptied by an interrupted tool (of an earlier
        // version, or a new store never switched in), not a new one.
        // Starting empty would issue every token again.
        if matches!(manifest, manifest::Found::Missing) && !had_wal && !dir.join("db").exists() {
            let left = datadir::leftovers(dir);
            if !left.is_empty() {
                let names: Vec<String> = left
                    .iter()
                    .map(|p| {
                        p.file_name()
                            .unwrap_or_default()
                            .to_string_lossy()
                            .into_owned()
                    })
                    .collect();
                ins.problems.push(Problem::new(
                    &names.join(", "),
                    "the data dir holds no store, only what an interrupted `restore` or \
                     `recover` leaves: run it again (or `recover`, which counts the tokens of \
                     these folders too)",
                ));
                return Ok((None, records, ins));
            }
        }
        if !thorough && !ins.problems.is_empty() {
            return Ok((None, records, ins));
        }
        // sled, and everything in it.
        let had_db = std::fs::metadata(dir.join("db")).is_ok_and(|m| m.len() > 0);
        let (db, leases, values, log) = open_sled(dir)?;
        let marker = db.get(MARKER_KEY).map_err(Error::storage)?;
        let has_marker_record = marker.as_deref() == Some(MARKER_VALUE);
        if let Some(v) = db.get(CHECKPOINT_KEY).map_err(Error::storage)? {
            match Checkpoint::decode(&v) {
                Some(c) => ins.sled = Some(c),
                None => ins.problems.push(Problem::new(
                    "db",
                    "sled's checkpoint record does not decode",
                )),
            }
        }
        let mut found = Checkpoint::default();
        // Kept for the server's first read of every lease, unless a key is
        // not a name (that read then fails, naming it).
        let mut decoded = Some(Vec::new());
        for (tree, t) in [(TREE_LEASES, &leases), (TREE_VALUES, &values)] {
            for kv in t.iter() {
                let (k, v) = match kv {
                    Ok(kv) => kv,
                    Err(e) => {
                        ins.problems.push(Problem::new(
                            "db",
                            format!("sled cannot read every record: {e}"),
                        ));
                        break;
                    }
                };
                found.digest = found.digest.wrapping_add(record_hash(tree, &k, &v));
                if tree == TREE_LEASES {
                    found.leases += 1;
                    match decode_lease(&v) {
                        Ok(l) => {
                            found.max_token = found.max_token.max(l.token.0);
                            if let Some(d) = decoded.as_mut() {
                                match std::str::from_utf8(&k) {
                                    Ok(name) => d.push((JobName::from_trusted(name.into()), l)),
                                    Err(_) => decoded = None,
                                }
                            }
                        }
                        Err(e) => ins.problems.push(Problem::new("db", e.to_string())),
                    }
                } else {
                    found.values += 1;
                    if let Err(e) = decode_value(&v) {
                        ins.problems.push(Problem::new("db", e.to_string()));
                    }
                }
            }
        }
        ins.max_token = ins.max_token.max(found.max_token);
        ins.found = found.clone();
        let empty = found.leases == 0 && found.values == 0 && records.is_empty();
        // Which kind of data dir is this?
        match (&manifest, &ins.sled) {
            (manifest::Found::Missing, None) => {
                if empty && !had_marker && !has_marker_record {
                    ins.fresh = true;
                } else if (had_marker || had_db) && has_marker_record && (wal_v1 || !had_wal) {
                    ins.legacy = true;
                } else if had_marker || had_db || had_wal {
                    ins.problems.push(Problem::new(
                        "db",
                        "sled holds no leasehold data although the data dir has been used: its \
                         files are lost, corrupt, or not a leasehold store",
                    ));
                }
            }
            (manifest::Found::Missing, Some(s)) => {
                if empty && s.floor == 0 && s.max_token == 0 {
                    // A first start that stopped before its manifest was
                    // written: nothing to lose.
                    ins.fresh = true;
                } else {
                    ins.problems.push(Problem::new(
                        manifest::FILE,
                        "missing, although sled holds a checkpoint: deleted or lost",
                    ));
                }
            }
            (manifest::Found::Ok(_), None) => ins.problems.push(Problem::new(
                "db",
                "sled holds no checkpoint record although the manifest names one: sled's files \
                 are lost, replaced, or corrupt",
            )),
            (manifest::Found::Damaged(_), _) | (manifest::Found::Ok(_), Some(_)) => {}
        }
        if let Some(s) = &ins.sled {
            if (s.leases, s.values, s.digest) != (found.leases, found.values, found.digest) {
                ins.problems.push(Problem::new(
                    "db",
                    format!(
                        "sled holds {} lease and {} value records (digest {:016x}), but its \
                         checkpoint record says {} and {} (digest {:016x}): records were lost or \
                         changed (a damaged page or blob)",
                        found.leases, found.values, found.digest, s.leases, s.values, s.digest
                    ),
                ));
            }
            ins.max_token = ins.max_token.max(s.max_token);
            if let Some(m) = &ins.manifest {
                ins.max_token = ins.max_token.max(m.max_token);
                if m.store_id != s.store_id {
                    ins.problems.push(Problem::new(
                        "db",
                        "sled's checkpoint record and leasehold.manifest name different data \
                         dirs: one of the two was copied from another data dir",
                    ));
                } else if s.generation < m.generation {
                    ins.problems.push(Problem::new(
                        "db",
                        format!(
                            "sled holds checkpoint {} but the manifest names {}: sled's files \
                             are from an older state",
                            s.generation, m.generation
                        ),
                    ));
                } else if s.generation > m.generation + 1
                    && ins.wal_generation != Some(m.generation)
                {
                    ins.problems.push(Problem::new(
                        manifest::FILE,
                        format!(
                            "it names checkpoint {} but sled holds {}: an older copy",
                            m.generation, s.generation
                        ),
                    ));
                }
            }
            match (&wal, ins.wal_generation) {
                (None, _) if had_wal => {}
                (None, _) => ins.problems.push(Problem::new(
                    WAL_FILE,
                    "missing: the write-ahead log holds the latest acknowledged changes",
                )),
                (Some(_), Some(w)) if w == s.generation => {}
                (Some(_), Some(w))
                    if w < s.generation
                        && ins.manifest.as_ref().is_some_and(|m| m.generation == w) =>
                {
                    // A crash (or a failed sync) after sled's part of a
                    // checkpoint, before the log's reset: its records are
                    // in sled already. Several such failures in a row (a
                    // disk that fails every sync for a while) leave sled
                    // more than one generation ahead, each attempt having
                    // applied the same log.
                    records.clear();
                }
                (Some(_), Some(w)) => ins.problems.push(Problem::new(
                    WAL_FILE,
                    format!(
                        "it is of generation {w} but sled holds checkpoint {}: a log from another \
                         state",
                        s.generation
                    ),
                )),
                (Some(_), None) => {}
            }
        }
        if !ins.problems.is_empty() {
            return Ok((None, records, ins));
        }
        let mut base = match (ins.sled.clone(), ins.fresh || ins.legacy) {
            (Some(s), false) => s,
            (s, _) => Checkpoint {
                store_id: *uuid::Uuid::new_v4().as_bytes(),
                generation: s.as_ref().map_or(0, |s| s.generation),
                leases: found.leases,
                values: found.values,
                digest: found.digest,
                max_token: ins.max_token,
                ..Checkpoint::default()
            },
        };
        base.max_token = base.max_token.max(ins.max_token);
        if ins.fresh || ins.legacy {
            db.insert(MARKER_KEY, MARKER_VALUE)
                .map_err(Error::storage)?;
        }
        let wal = match wal {
            Some(mut w) if !ins.fresh => {
                if wal_v1 {
                    w.set_store_id(base.store_id);
                }
                w
            }
            _ => {
                if had_wal {
                    std::fs::remove_file(&wal_path).map_err(|e| {
                        Error::storage(format!("cannot remove {}: {e}", wal_path.display()))
                    })?;
                }
                let size =
                    free_bytes(dir).map_or(WAL_SIZE, |free| (free / 8).clamp(WAL_MIN, WAL_SIZE));
                Wal::create(&wal_path, size & !4095, base.store_id, base.generation).map_err(
                    |e| Error::storage(format!("cannot create {}: {e}", wal_path.display())),
                )?
            }
        };
        if ins.fresh {
            records.clear();
        }
        let open = Open {
            db,
            leases,
            values,
            log,
            dir: dir.to_owned(),
            blobs: dir.join("blobs"),
            wal: Mutex::new(wal),
            logged: Mutex::new(Logged::default()),
            manifest_generation: AtomicU64::new(
                ins.manifest
                    .as_ref()
                    .map_or(base.generation, |m| m.generation),
            ),
            ckpt: Mutex::new(base),
            gate: RwLock::new(()),
            preempt: AtomicBool::new(false),
            held_since: Mutex::new(None),
            first_leases: Mutex::new(decoded.filter(|_| !thorough)),
        };
        if (ins.fresh || ins.legacy) && !had_marker {
            // The marker file last: a data dir with it has been started.
            open.checkpoint(&mut open.wal.lock().expect("wal lock"))?;
            write_marker(dir)?;
        }
        Ok((Some(open), records, ins))
    }

    /// Applies the logged puts to sled in one transaction with the new
    /// checkpoint record, makes sled durable, starts the log's next
    /// generation, and writes the manifest, leaving `logged` empty. Returns
    /// the sequence number the applied puts reach.
    ///
    /// The order is what start-up relies on: sled (data and record
    /// together, atomically) first, because until it is durable the log is
    /// the only copy; then the log's reset; then the manifest. A crash
    /// between two steps leaves sled one generation ahead, which
    /// [`Open::inspected`] accepts.
    fn checkpoint(&self, wal: &mut Wal) -> Result<u64> {
        self.first_leases.lock().expect("first leases lock").take();
        use sled::Transactional as _;
        let _gate = self.gate.write().expect("gate lock");
        // No backup holds it back now.
        self.preempt.store(false, Ordering::Release);
        self.held_since.lock().expect("held lock").take();
        let l = std::mem::take(&mut *self.logged.lock().expect("logged lock"));
        let base = self.ckpt.lock().expect("checkpoint lock").clone();
        let generation = self.manifest_generation.load(Ordering::Acquire) + 1;
        let meta: &sled::Tree = &self.db;
        let next = (&self.leases, &self.values, meta)
            .transaction(|(lt, vt, mt)| {
                let mut c = base.clone();
                c.generation = generation;
                c.unix_ms = leasehold_core::clock::wall_unix_ms();
                c.new_job_floor = c.new_job_floor.max(l.new_job_floor);
                c.max_token = c.max_token.max(c.new_job_floor);
                for (tree, t, map) in [(TREE_LEASES, lt, &l.leases), (TREE_VALUES, vt, &l.values)] {
                    for (k, v) in map {
                        if v.is_empty() {
                            if let Some(old) = t.remove(k.as_slice())? {
                                c.digest = c.digest.wrapping_sub(record_hash(tree, k, &old));
                                match tree {
                                    TREE_LEASES => c.leases -= 1,
                                    _ => c.values -= 1,
                                }
                            }
                            continue;
                        }
                        match t.insert(k.as_slice(), v.as_slice())? {
                            Some(old) => {
                                c.digest = c.digest.wrapping_sub(record_hash(tree, k, &old))
                            }
                            None if tree == TREE_LEASES => c.leases += 1,
                            None => c.values += 1,
                        }
                        c.digest = c.digest.wrapping_add(record_hash(tree, k, v));
                        if tree == TREE_LEASES {
                            if let Ok(r) = decode_lease(v) {
                                c.max_token = c.max_token.max(r.token.0);
                            }
                        }
                    }
                }
                mt.insert(CHECKPOINT_KEY, c.encode())?;
                Ok(c)
            })
            .map_err(|e: sled::transaction::TransactionError<()>| {
                Error::storage(format!("checkpoint into sled: {e:?}"))
            })?;
        // sled's flush writes its log and any blob files; the blobs are
        // made durable before the log that points to them.
        self.db.flush().map_err(Error::storage)?;
        self.sync_blobs().map_err(Error::storage)?;
        self.log.sync_data().map_err(Error::storage)?;
        wal.reset(next.generation)
            .map_err(|e| Error::storage(format!("cannot reset {}: {e}", wal.path().display())))?;
        manifest::write(&self.dir, &next).map_err(|e| {
            Error::storage(format!(
                "cannot write {}: {e}",
                self.dir.join(manifest::FILE).display()
            ))
        })?;
        self.manifest_generation
            .store(next.generation, Ordering::Release);
        *self.ckpt.lock().expect("checkpoint lock") = next;
        Ok(l.upto)
    }

    fn sync_blobs(&self) -> std::io::Result<()> {
        let entries = match std::fs::read_dir(&self.blobs) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
        let mut any = false;
        for entry in entries {
            // sled deletes a blob file once no page refers to it, from its
            // own threads and at any time: one gone since the listing holds
            // nothing that needs syncing.
            match File::open(entry?.path()) {
                Ok(f) => f.sync_data()?,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            }
            any = true;
        }
        if any {
            File::open(&self.blobs)?.sync_all()?;
        }
        Ok(())
    }
}

/// Opens sled in `dir`, with leasehold's settings.
pub(crate) fn open_sled(dir: &Path) -> Result<(sled::Db, sled::Tree, sled::Tree, File)> {
    let db = sled::Config::new()
        .path(dir)
        .segment_size(SEGMENT_SIZE)
        // Every change is flushed by a checkpoint; a background flusher
        // would only add I/O.
        .flush_every_ms(None)
        .open()
        .map_err(|e| match e {
            sled::Error::Io(io) if io.to_string().contains("could not acquire lock") => {
                Error::storage(format!(
                    "data dir {} is in use by another leasehold process ({io})",
                    dir.display()
                ))
            }
            e => Error::storage(format!(
                "cannot open data dir {}: sled cannot read its files (db, conf, snap.*, blobs/): \
                 {e}\n{}",
                dir.display(),
                damage_advice(dir)
            )),
        })?;
    let leases = db.open_tree("leases").map_err(Error::storage)?;
    let values = db.open_tree("values").map_err(Error::storage)?;
    let log = File::open(dir.join("db"))
        .map_err(|e| Error::storage(format!("cannot open {}/db: {e}", dir.display())))?;
    // Make the files' directory entries durable too.
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::storage(format!("cannot sync data dir {}: {e}", dir.display())))?;
    Ok((db, leases, values, log))
}

/// Reads and checks every file of the data dir at `dir`, as a start would,
/// and reports what it found. The caller must make sure no server uses
/// `dir`; `leasehold check` runs it on a copy, so that sled's own recovery
/// cannot change the original.
pub fn inspect(dir: &Path) -> Result<Inspection> {
    let (_, _, ins) = Open::inspected(dir, true)?;
    Ok(ins)
}

impl Store for SledStore {
    fn leases(&self) -> Result<Vec<(JobName, LeaseRecord)>> {
        let decode = |k: &[u8], v: &[u8]| {
            let name = String::from_utf8(k.to_vec())
                .map_err(|_| Error::storage("corrupt job name in store"))?;
            Ok((JobName::from_trusted(name), decode_lease(v)?))
        };
        self.with(|o| {
            let first = o.first_leases.lock().expect("first leases lock").take();
            if let Some(first) = first {
                let logged = o.logged.lock().expect("logged lock");
                if logged.leases.is_empty() && self.pending().puts.is_empty() {
                    return Ok(first);
                }
            }
            // Logged lease records are newer than sled's; sled is written
            // only by checkpoints.
            let logged = o.logged.lock().expect("logged lock").leases.clone();
            let mut out = Vec::new();
            for kv in o.leases.iter() {
                let (k, v) = kv.map_err(Error::storage)?;
                if !logged.contains_key(k.as_ref()) {
                    out.push(decode(&k, &v)?);
                }
            }
            for (k, v) in logged.iter().filter(|(_, v)| !v.is_empty()) {
                out.push(decode(k, v)?);
            }
            Ok(out)
        })
    }

    fn recovered(&self) -> Option<String> {
        self.with(|o| Ok(o.ckpt.lock().expect("checkpoint lock").recovered.clone()))
            .unwrap_or(None)
    }

    fn floors(&self) -> Floors {
        let every = self
            .with(|o| Ok(Token(o.ckpt.lock().expect("checkpoint lock").floor)))
            .unwrap_or(Token::NONE);
        let new_jobs = self
            .with(|o| {
                let c = o.ckpt.lock().expect("checkpoint lock").new_job_floor;
                let l = o.logged.lock().expect("logged lock").new_job_floor;
                Ok(Token(c.max(l)))
            })
            .unwrap_or(Token::NONE);
        Floors { every, new_jobs }
    }

    fn count_keys(&self, job: &JobName) -> Result<usize> {
        Ok(self.value_keys(job)?.len())
    }

    fn delete_job(&self, job: &JobName, floor: Token) -> Result<usize> {
        let keys = self.value_keys(job)?;
        self.ensure_space(64 + keys.iter().map(|k| k.len() + 16).sum::<usize>())?;
        // One staging, under one hold of the pending lock: a sync logs
        // these puts in one batch, which a crash keeps whole or not at all.
        self.write(|_| {
            let mut p = self.pending();
            let n = keys.len();
            for k in keys {
                p.push(Kind::Value, k, REMOVED);
            }
            p.push(Kind::Lease, job.as_str().as_bytes().to_vec(), REMOVED);
            p.push(Kind::Floor, Vec::new(), floor.0.to_le_bytes().to_vec());
            Ok(n)
        })
    }

    fn put_lease(
        &self,
        job: &JobName,
        record: &LeaseRecord,
        history: &[HistoryPut],
        keep: u64,
    ) -> Result<()> {
        if history.is_empty() || keep == 0 {
            self.ensure_space(job.as_str().len() + 64)?;
            return self.stage(
                Kind::Lease,
                job.as_str().as_bytes().to_vec(),
                encode_lease(record),
            );
        }
        let puts = encoded_history(job, history);
        // What a grant pushes out of the kept window: usually one tenure
        // (one or two records), found by a range read that starts at the
        // job's oldest. When tokens jumped (a floor raised by a restore, a
        // recover or a deletion), the window by token would hold every
        // earlier tenure: then the newest `keep` tenures are kept by count.
        let mut trim = Vec::new();
        for h in history {
            if let HistoryPut::Grant { token, .. } = h {
                if let Some(through) = token.0.checked_sub(keep).filter(|t| *t > 0) {
                    let start = history_prefix(job);
                    let last = history_key(job, Token(through), 1);
                    let old = self.value_range(&start, &last)?;
                    if old.len() <= 2 {
                        trim.extend(old.into_keys());
                        continue;
                    }
                    let all = self.value_range(&start, &history_key(job, Token(u64::MAX), 1))?;
                    let token_of = |k: &[u8]| {
                        k.get(start.len()..start.len() + 8)
                            .and_then(|b| b.try_into().ok())
                            .map_or(0, u64::from_be_bytes)
                    };
                    let tokens: BTreeSet<u64> = all.keys().map(|k| token_of(k)).collect();
                    let excess = (tokens.len() + 1).saturating_sub(keep as usize);
                    let cut: BTreeSet<u64> = tokens.into_iter().take(excess).collect();
                    trim.extend(all.into_keys().filter(|k| cut.contains(&token_of(k))));
                }
            }
        }
        let size: usize = puts
            .iter()
            .map(|(k, v)| k.len() + v.len() + 16)
            .sum::<usize>()
            + trim.iter().map(|k| k.len() + 16).sum::<usize>();
        self.ensure_space(job.as_str().len() + 64 + size)?;
        // One staging, under one hold of the pending lock: one batch of
        // the log, which a crash keeps whole or not at all.
        self.write(|_| {
            let mut p = self.pending();
            for k in trim {
                p.push(Kind::Value, k, REMOVED);
            }
            for (k, v) in puts {
                p.push(Kind::Value, k, v);
            }
            p.push(
                Kind::Lease,
                job.as_str().as_bytes().to_vec(),
                encode_lease(record),
            );
            Ok(())
        })
    }

    fn put_history(&self, job: &JobName, history: &[HistoryPut]) -> Result<()> {
        let puts = encoded_history(job, history);
        self.ensure_space(
            puts.iter()
                .map(|(k, v)| k.len() + v.len() + 16)
                .sum::<usize>()
                + 64,
        )?;
        self.write(|_| {
            let mut p = self.pending();
            for (k, v) in puts {
                p.push(Kind::Value, k, v);
            }
            Ok(())
        })
    }

    fn history(&self, job: &JobName, before: Option<Token>, limit: usize) -> Result<Vec<Tenure>> {
        let start = history_prefix(job);
        let last = match before {
            Some(t) if t.0 == 0 => return Ok(Vec::new()),
            Some(t) => history_key(job, Token(t.0 - 1), 1),
            None => history_key(job, Token(u64::MAX), 1),
        };
        let records = self
            .value_range(&start, &last)?
            .into_iter()
            .map(|(k, v)| Ok((k[start.len()..].to_vec(), decode_value(&v)?)))
            .collect::<Result<Vec<_>>>()?;
        let mut tenures = decode_history(&records)?;
        tenures.reverse();
        tenures.truncate(limit);
        Ok(tenures)
    }

    fn get_value(&self, job: &JobName, key: &[u8]) -> Result<Option<ValueRecord>> {
        let k = value_key(job, key);
        if let Some((_, v)) = self.pending().overlay.get(&k) {
            if v.is_empty() {
                return Ok(None);
            }
            return decode_value(v).map(Some);
        }
        // Not in the overlay: sled has it, because puts leave the overlay
        // only after they were applied to sled.
        self.with(|o| match o.values.get(&k).map_err(Error::storage)? {
            Some(v) => decode_value(&v).map(Some),
            None => Ok(None),
        })
    }

    fn put_value(&self, job: &JobName, key: &[u8], record: &ValueRecord) -> Result<()> {
        let size = job.as_str().len() + key.len() + record.value.as_ref().map_or(0, Vec::len);
        self.ensure_space(size + 64)?;
        self.stage(Kind::Value, value_key(job, key), encode_value(record))
    }

    fn list_values(
        &self,
        job: &JobName,
        prefix: &[u8],
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, ValueRecord)>> {
        use std::ops::Bound;
        let base = value_key(job, b"").len();
        let scan_prefix = value_key(job, prefix);
        let start = match after.map(|a| value_key(job, a)) {
            Some(a) if a >= scan_prefix => Bound::Excluded(a),
            _ => Bound::Included(scan_prefix.clone()),
        };
        // The overlay first, then sled: an entry that leaves the overlay in
        // between was applied to sled before it left.
        let overlay: Vec<(Vec<u8>, Vec<u8>)> = self
            .pending()
            .overlay
            .range((start.clone(), Bound::Unbounded))
            .take_while(|(k, _)| k.starts_with(&scan_prefix))
            .map(|(k, (_, v))| (k.clone(), v.clone()))
            .collect();
        let mut overlay = overlay.into_iter().peekable();
        let guard = self.open.read().expect("store lock");
        let o = guard
            .as_ref()
            .ok_or_else(|| Error::storage(self.failure("the store is not open")))?;
        let mut sled = o
            .values
            .range((start, Bound::Unbounded))
            .map(|kv| kv.map(|(k, v)| (k.to_vec(), v)).map_err(Error::storage))
            .take_while(|kv| {
                kv.as_ref()
                    .map_or(true, |(k, _)| k.starts_with(&scan_prefix))
            })
            .peekable();
        let mut out = Vec::new();
        while out.len() < limit {
            // Merge the two key-ordered runs; the overlay wins a tie.
            let from_sled = match (overlay.peek(), sled.peek()) {
                (None, None) => break,
                (Some(_), None) => false,
                (None, Some(_)) => true,
                (Some((ko, _)), Some(Ok((ks, _)))) => ks < ko,
                (_, Some(Err(_))) => true,
            };
            let (k, v) = if from_sled {
                let (k, v) = sled.next().expect("peeked")?;
                (k, v.to_vec())
            } else {
                let (k, v) = overlay.next().expect("peeked");
                if sled
                    .peek()
                    .is_some_and(|kv| kv.as_ref().is_ok_and(|(ks, _)| *ks == k))
                {
                    sled.next();
                }
                (k, v)
            };
            if v.is_empty() {
                continue;
            }
            let rec = decode_value(&v)?;
            if rec.value.is_some() {
                out.push((k[base..].to_vec(), rec));
            }
        }
        Ok(out)
    }

    fn sync(&self) -> Result<()> {
        self.write(|o| {
            let puts = std::mem::take(&mut self.pending().puts);
            if puts.is_empty() {
                return Ok(());
            }
            let mut wal = o.wal.lock().expect("wal lock");
            let logged = wal.append(puts.iter().map(|p| &p.record)).map_err(|e| {
                // The batch may be in the file all the same (a failed
                // fdatasync leaves it in the page cache): void at reopen.
                self.discard
                    .lock()
                    .expect("discard lock")
                    .get_or_insert((wal.generation(), wal.end()));
                Error::storage(format!("{}: {e}", wal.path().display()))
            })?;
            let mut done = o.logged.lock().expect("logged lock");
            done.add(puts);
            drop(done);
            if logged {
                return Ok(());
            }
            // Too big for the room left in the log: straight into sled,
            // after what is logged, in one checkpoint, which ends a backup
            // that holds it back.
            o.preempt.store(true, Ordering::Release);
            self.checkpoint_open(o, &mut wal)
        })?;
        self.syncs.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn checkpoint_if_due(&self) -> Result<()> {
        self.write(|o| {
            let mut wal = o.wal.lock().expect("wal lock");
            if wal.used() * 2 <= wal.capacity() {
                return Ok(());
            }
            // Not while a backup reads sled, as long as the log has room:
            // the flusher must not wait for a backup. Past three quarters,
            // or after BACKUP_HOLD, the backup is ended instead.
            if o.gate.try_write().is_err() {
                let now = leasehold_core::clock::now();
                let since = *o.held_since.lock().expect("held lock").get_or_insert(now);
                if wal.used() * 4 > wal.capacity() * 3
                    || now.saturating_duration_since(since) >= crate::BACKUP_HOLD
                {
                    o.preempt.store(true, Ordering::Release);
                } else {
                    return Ok(());
                }
            }
            self.checkpoint_open(o, &mut wal)
        })
    }

    fn checkpoint_due(&self) -> bool {
        self.with(|o| {
            let wal = o.wal.lock().expect("wal lock");
            Ok(wal.used() * 2 > wal.capacity())
        })
        .unwrap_or(false)
    }

    fn checkpoint(&self) -> Result<()> {
        self.write(|o| self.checkpoint_open(o, &mut o.wal.lock().expect("wal lock")))
    }

    fn nearly_full(&self) -> bool {
        self.free().map_or(true, |free| free < 2 * RESERVE)
    }

    fn backup(&self, out: &mut dyn std::io::Write) -> Result<()> {
        self.write(|o| self.checkpoint_open(o, &mut o.wal.lock().expect("wal lock")))?;
        self.with(|o| {
            let _gate = o.gate.read().expect("gate lock");
            let mut out = Preemptible {
                out,
                preempt: &o.preempt,
            };
            let c = o.ckpt.lock().expect("checkpoint lock").clone();
            let records = [(Kind::Lease, &o.leases), (Kind::Value, &o.values)]
                .into_iter()
                .flat_map(|(kind, t)| {
                    t.iter().map(move |kv| {
                        let (k, v) = kv.map_err(Error::storage)?;
                        Ok(Record {
                            kind,
                            key: k.to_vec(),
                            value: v.to_vec(),
                        })
                    })
                });
            crate::backup::write_backup(&c, records, &mut out)
        })
    }

    fn needs_reopen(&self) -> bool {
        self.failed.lock().expect("failed lock").is_some()
    }

    fn check_space(&self) -> Result<()> {
        self.ensure_space(0)
    }

    fn read_epoch(&self) -> u64 {
        self.read_epoch.load(Ordering::Acquire)
    }

    fn recheck_value_in_memory(
        &self,
        job: &JobName,
        key: &[u8],
        epoch: u64,
    ) -> Result<Option<Option<Option<ValueRecord>>>> {
        if let Some((_, v)) = self.pending().overlay.get(&value_key(job, key)) {
            if v.is_empty() {
                return Ok(Some(Some(None)));
            }
            return decode_value(v).map(|r| Some(Some(Some(r))));
        }
        // Not in the overlay now, so not at the first read either (entries
        // leave it only at a checkpoint or a reopen, which move the epoch):
        // that read came from sled, and sled has not changed since.
        if self.read_epoch.load(Ordering::Acquire) == epoch {
            return Ok(Some(None));
        }
        // A checkpoint moved records: only sled can tell, and a read of
        // sled waits while a checkpoint's transaction applies.
        Ok(None)
    }

    fn reopen(&self) -> Result<()> {
        self.read_epoch.fetch_add(1, Ordering::AcqRel);
        let mut guard = self.open.write().expect("store lock");
        // Close first: the data dir's lock must be free to open it again,
        // and whatever sled still holds in memory must go. sled's own
        // close unwraps its final fsync (sled 0.34, `Log::drop`): on a disk
        // that fails syncs it panics, which must not unwind through our
        // lock (it would poison it, and the caller's).
        let old = guard.take();
        if let Err(e) = no_panic(move || {
            drop(old);
            Ok(())
        }) {
            tracing::warn!(error = %e, "sled failed while closing; opening it again");
        }
        // Puts that were not logged are lost; the log has the rest.
        *self.pending() = Pending::default();
        // sled's own threads may still be finishing the closed instance's
        // work (a log write, a file truncation), and hold its lock on the
        // data dir until they are done: wait for them, or the open below
        // takes our own past for another process.
        wait_until_unlocked(&self.dir.join("db"), UNLOCK_WAIT)?;
        let discard = *self.discard.lock().expect("discard lock");
        if let Some((generation, from)) = discard {
            let path = self.dir.join(WAL_FILE);
            wal::discard_after(&path, generation, from).map_err(|e| {
                Error::storage(format!(
                    "cannot void the changes whose sync failed in {}: {e}",
                    path.display()
                ))
            })?;
        }
        *guard = Some(no_panic(|| Open::checked(&self.dir))?);
        *self.discard.lock().expect("discard lock") = None;
        *self.failed.lock().expect("failed lock") = None;
        // Reads made during the reopen may have seen the discarded overlay.
        self.read_epoch.fetch_add(1, Ordering::AcqRel);
        tracing::info!(dir = %self.dir.display(), "store reopened");
        Ok(())
    }
}

/// A backup's output, ended as soon as a checkpoint must not wait for it.
struct Preemptible<'a> {
    out: &'a mut dyn std::io::Write,
    preempt: &'a AtomicBool,
}

impl Preemptible<'_> {
    fn ended(&self) -> std::io::Result<()> {
        if self.preempt.load(Ordering::Acquire) {
            return Err(std::io::Error::other(
                "the backup was ended: its reader was too slow, and the store needed the \
                 checkpoint the backup held back (the log three quarters full, or a checkpoint \
                 waiting 30 s); run it again from a reader that keeps up",
            ));
        }
        Ok(())
    }
}

impl std::io::Write for Preemptible<'_> {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        loop {
            self.ended()?;
            match self.out.write(b) {
                Err(e) if e.kind() == std::io::ErrorKind::TimedOut => continue,
                r => return r,
            }
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        loop {
            self.ended()?;
            match self.out.flush() {
                Err(e) if e.kind() == std::io::ErrorKind::TimedOut => continue,
                r => return r,
            }
        }
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

/// Bytes available to this process in the file system holding `dir`.
pub(crate) fn free_bytes(dir: &Path) -> std::io::Result<u64> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes())?;
    // SAFETY: statvfs is plain old data; all-zero is a valid value.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `path` is a valid NUL-terminated string and `st` a valid,
    // writable statvfs for the call's duration.
    if unsafe { libc::statvfs(path.as_ptr(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(st.f_bavail as u64 * st.f_frsize as u64)
}

/// How long a reopen waits for the instance it closed to let go of the
/// data dir's lock.
const UNLOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Waits until nobody holds sled's lock on `db` (an exclusive `flock`), up
/// to `limit`. Fails only when the file cannot be opened or locked for
/// another reason; when the lock is still held at the limit, returns and
/// lets sled's open say so.
fn wait_until_unlocked(db: &Path, limit: std::time::Duration) -> Result<()> {
    use std::os::fd::AsRawFd;
    let f = match File::open(db) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::storage(format!("cannot open {}: {e}", db.display()))),
    };
    let started = leasehold_core::clock::now();
    loop {
        // SAFETY: flock on a descriptor that `f` keeps open.
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            // Closing `f` below releases it for sled.
            break;
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::WouldBlock {
            return Err(Error::storage(format!("cannot lock {}: {e}", db.display())));
        }
        let waited = leasehold_core::clock::now().saturating_duration_since(started);
        if waited >= limit {
            tracing::warn!(?waited, path = %db.display(), "the data dir is still locked");
            return Ok(());
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let waited = leasehold_core::clock::now().saturating_duration_since(started);
    tracing::debug!(?waited, "the closed store let go of the data dir");
    Ok(())
}

/// Writes the marker file durably (file, then directory entry).
fn write_marker(dir: &Path) -> Result<()> {
    let p = dir.join(MARKER_FILE);
    let f = File::create(&p)
        .map_err(|e| Error::storage(format!("cannot write {}: {e}", p.display())))?;
    f.sync_all()
        .and_then(|()| File::open(dir)?.sync_all())
        .map_err(|e| Error::storage(format!("cannot sync {}: {e}", p.display())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasehold_core::lease::{Limits, Token};

    fn val(token: u64, version: u64, v: Option<&str>) -> ValueRecord {
        ValueRecord {
            token: Token(token),
            version,
            value: v.map(|s| s.as_bytes().to_vec()),
        }
    }

    fn keys(s: &SledStore, job: &JobName, after: Option<&[u8]>, limit: usize) -> Vec<String> {
        s.list_values(job, b"k", after, limit)
            .unwrap()
            .into_iter()
            .map(|(k, r)| {
                format!(
                    "{}={}",
                    String::from_utf8(k).unwrap(),
                    String::from_utf8(r.value.unwrap()).unwrap()
                )
            })
            .collect()
    }

    /// Values live in three places on their way (pending, logged but not in
    /// sled, in sled); gets and lists see the newest, in key order.
    #[test]
    fn reads_see_every_put_wherever_it_is() {
        let dir = tempfile::tempdir().unwrap();
        let s = SledStore::open(dir.path()).unwrap();
        let job = Limits::default().job("j").unwrap();
        let other = Limits::default().job("j2").unwrap();
        for k in ["k1", "k3", "k5"] {
            s.put_value(&job, k.as_bytes(), &val(1, 1, Some("sled")))
                .unwrap();
        }
        s.put_value(&other, b"k0", &val(1, 1, Some("other")))
            .unwrap();
        s.sync().unwrap();
        s.checkpoint().unwrap();
        s.put_value(&job, b"k2", &val(1, 1, Some("logged")))
            .unwrap();
        s.put_value(&job, b"k3", &val(1, 2, Some("logged")))
            .unwrap();
        s.sync().unwrap();
        s.put_value(&job, b"k4", &val(1, 1, Some("pending")))
            .unwrap();
        s.put_value(&job, b"k5", &val(1, 2, None)).unwrap();
        assert_eq!(
            keys(&s, &job, None, 100),
            ["k1=sled", "k2=logged", "k3=logged", "k4=pending"]
        );
        assert_eq!(keys(&s, &job, Some(b"k2"), 2), ["k3=logged", "k4=pending"]);
        assert_eq!(s.get_value(&job, b"k5").unwrap(), Some(val(1, 2, None)));
        assert_eq!(
            s.get_value(&job, b"k3").unwrap().unwrap().version,
            2,
            "the logged put, not sled's"
        );
        s.sync().unwrap();
        s.checkpoint_if_due().unwrap();
        assert!(
            !s.pending().overlay.is_empty(),
            "logged puts wait for a checkpoint"
        );
        s.checkpoint().unwrap();
        assert!(s.pending().overlay.is_empty(), "everything is in sled");
        assert_eq!(
            keys(&s, &job, None, 100),
            ["k1=sled", "k2=logged", "k3=logged", "k4=pending"]
        );
    }

    /// Between checkpoints, a key written many times waits in memory as its
    /// newest put only; the checkpoint gives sled that one, and a logged
    /// lease is seen by `leases` before any checkpoint.
    #[test]
    fn the_first_read_of_every_lease_after_a_start_is_sled_and_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let l = Limits::default();
        let lease = |token| LeaseRecord {
            holder: Some(l.holder("w").unwrap()),
            token: Token(token),
            ttl: std::time::Duration::from_secs(9),
        };
        let (a, b, c) = (
            l.job("a").unwrap(),
            l.job("b").unwrap(),
            l.job("c").unwrap(),
        );
        {
            let s = SledStore::open(dir.path()).unwrap();
            s.put_lease(&a, &lease(1), &[], 0).unwrap();
            s.put_lease(&b, &lease(1), &[], 0).unwrap();
            s.sync().unwrap();
            s.checkpoint().unwrap();
            // Durable in the log only: replayed at the next start.
            s.put_lease(&b, &lease(2), &[], 0).unwrap();
            s.put_lease(&c, &lease(1), &[], 0).unwrap();
            s.sync().unwrap();
        }
        let all = vec![
            (a.clone(), lease(1)),
            (b.clone(), lease(2)),
            (c.clone(), lease(1)),
        ];
        let sorted = |mut v: Vec<(JobName, LeaseRecord)>| {
            v.sort_by(|x, y| x.0.cmp(&y.0));
            v
        };
        // A start that replayed the log: read from sled.
        let s = SledStore::open(dir.path()).unwrap();
        assert_eq!(sorted(s.leases().unwrap()), all);
        drop(s);
        // A start with nothing to replay: what the inspection decoded, once.
        let s = SledStore::open(dir.path()).unwrap();
        assert!(s
            .with(|o| Ok(o.first_leases.lock().unwrap().is_some()))
            .unwrap());
        assert_eq!(sorted(s.leases().unwrap()), all);
        assert!(s
            .with(|o| Ok(o.first_leases.lock().unwrap().is_none()))
            .unwrap());
        // Later reads see later changes.
        s.put_lease(&a, &lease(2), &[], 0).unwrap();
        s.sync().unwrap();
        let now = sorted(s.leases().unwrap());
        assert_eq!(now[0], (a.clone(), lease(2)));
        // Changed between the start and the first read: not the inspection's.
        drop(s);
        let s = SledStore::open(dir.path()).unwrap();
        s.put_lease(&c, &lease(3), &[], 0).unwrap();
        s.sync().unwrap();
        assert_eq!(sorted(s.leases().unwrap())[2], (c, lease(3)));
    }

    #[test]
    fn logged_puts_reach_sled_once_per_key_at_a_checkpoint() {
        let dir = tempfile::tempdir().unwrap();
        let s = SledStore::open(dir.path()).unwrap();
        let l = Limits::default();
        let job = l.job("j").unwrap();
        for v in 1..=50u64 {
            s.put_value(&job, b"k", &val(1, v, Some(&format!("v{v}"))))
                .unwrap();
            s.sync().unwrap();
            s.checkpoint_if_due().unwrap();
        }
        let in_sled = |s: &SledStore| {
            s.with(|o| Ok(o.values.get(value_key(&job, b"k")).unwrap()))
                .unwrap()
                .map(|v| decode_value(&v).unwrap().version)
        };
        assert_eq!(in_sled(&s), None, "nothing applied before a checkpoint");
        assert_eq!(
            s.with(|o| Ok(o.logged.lock().unwrap().values.len()))
                .unwrap(),
            1,
            "fifty logged puts of one key wait as one"
        );
        let lease = LeaseRecord {
            holder: Some(l.holder("w").unwrap()),
            token: Token(3),
            ttl: std::time::Duration::from_secs(9),
        };
        s.put_lease(&job, &lease, &[], 0).unwrap();
        s.sync().unwrap();
        assert_eq!(s.leases().unwrap(), vec![(job.clone(), lease)]);
        s.put_value(&job, b"k", &val(1, 51, Some("pending")))
            .unwrap();
        s.checkpoint().unwrap();
        assert_eq!(
            in_sled(&s),
            Some(50),
            "the newest logged put, not the pending one"
        );
        assert_eq!(s.get_value(&job, b"k").unwrap().unwrap().version, 51);
        s.sync().unwrap();
        s.checkpoint().unwrap();
        assert_eq!(in_sled(&s), Some(51));
        assert!(s.pending().overlay.is_empty());
    }

    /// A deleted job's records are gone at once for reads, after a restart
    /// that replays the log, and after a checkpoint (whose counts and
    /// digest a restart checks); the new-job floor survives both; other
    /// jobs are untouched.
    #[test]
    fn a_deleted_job_is_gone_and_its_floor_stays() {
        let dir = tempfile::tempdir().unwrap();
        let l = Limits::default();
        let (x, y) = (l.job("x").unwrap(), l.job("y").unwrap());
        let lease = |t| LeaseRecord {
            holder: None,
            token: Token(t),
            ttl: std::time::Duration::from_secs(9),
        };
        {
            let s = SledStore::open(dir.path()).unwrap();
            s.put_lease(&x, &lease(7), &[], 0).unwrap();
            s.put_lease(&y, &lease(2), &[], 0).unwrap();
            for i in 0..5 {
                s.put_value(&x, format!("k{i}").as_bytes(), &val(7, 1, Some("v")))
                    .unwrap();
            }
            s.put_value(&x, b"gone", &val(7, 2, None)).unwrap();
            s.put_value(&y, b"k0", &val(2, 1, Some("y"))).unwrap();
            s.sync().unwrap();
            s.checkpoint().unwrap();
            // One more, only in the overlay and the log.
            s.put_value(&x, b"k9", &val(7, 1, Some("v"))).unwrap();
            s.sync().unwrap();
            assert_eq!(
                s.delete_job(&x, Token(7)).unwrap(),
                7,
                "tombstones included"
            );
            assert_eq!(s.get_value(&x, b"k0").unwrap(), None);
            assert_eq!(s.get_value(&x, b"k9").unwrap(), None);
            assert!(keys(&s, &x, None, 100).is_empty());
            assert_eq!(s.count_keys(&x).unwrap(), 0);
            assert_eq!(s.count_keys(&y).unwrap(), 1);
            s.sync().unwrap();
            assert_eq!(s.leases().unwrap(), vec![(y.clone(), lease(2))]);
            // No checkpoint: the restart replays the log.
        }
        let s = SledStore::open(dir.path()).unwrap();
        assert_eq!(s.floors().new_jobs, Token(7));
        assert_eq!(
            s.floors().every,
            Token::NONE,
            "the every-job floor is not raised"
        );
        assert_eq!(s.leases().unwrap(), vec![(y.clone(), lease(2))]);
        assert_eq!(s.get_value(&x, b"k0").unwrap(), None);
        assert_eq!(keys(&s, &y, None, 100), vec!["k0=y"]);
        let c = s.last_checkpoint().unwrap();
        assert_eq!((c.leases, c.values, c.new_job_floor), (1, 1, 7));
        assert!(c.max_token >= 7);
        drop(s);
        // The checkpointed state passes the start-up checks again.
        let s = SledStore::open(dir.path()).unwrap();
        assert_eq!(s.floors().new_jobs, Token(7));
        assert_eq!(s.count_keys(&y).unwrap(), 1);
    }

    /// A read made without the caller's lock is confirmed from memory, or
    /// made again when a checkpoint or a reopen may have changed where the
    /// record lives.
    #[test]
    fn a_read_ahead_is_confirmed_or_made_again() {
        let dir = tempfile::tempdir().unwrap();
        let s = SledStore::open(dir.path()).unwrap();
        let job = Limits::default().job("j").unwrap();
        s.put_value(&job, b"k", &val(1, 1, Some("one"))).unwrap();
        s.sync().unwrap();
        s.checkpoint().unwrap();
        // Read from sled, nothing since: still good.
        let e = s.read_epoch();
        assert_eq!(s.get_value(&job, b"k").unwrap().unwrap().version, 1);
        assert_eq!(crate::recheck_value(&s, &job, b"k", e).unwrap(), None);
        assert_eq!(
            s.recheck_value_in_memory(&job, b"k", e).unwrap(),
            Some(None)
        );
        // A put since: the overlay's record.
        s.put_value(&job, b"k", &val(1, 2, Some("two"))).unwrap();
        assert_eq!(
            crate::recheck_value(&s, &job, b"k", e).unwrap(),
            Some(Some(val(1, 2, Some("two"))))
        );
        assert_eq!(
            s.recheck_value_in_memory(&job, b"k", e).unwrap(),
            Some(Some(Some(val(1, 2, Some("two")))))
        );
        // A checkpoint moved it to sled and out of the overlay: read again
        // (from memory alone the store cannot tell).
        s.sync().unwrap();
        s.checkpoint().unwrap();
        assert_eq!(s.recheck_value_in_memory(&job, b"k", e).unwrap(), None);
        assert_eq!(
            crate::recheck_value(&s, &job, b"k", e).unwrap(),
            Some(Some(val(1, 2, Some("two"))))
        );
        // A reopen, likewise.
        let e = s.read_epoch();
        s.reopen().unwrap();
        assert_eq!(
            crate::recheck_value(&s, &job, b"k", e).unwrap(),
            Some(Some(val(1, 2, Some("two"))))
        );
    }

    /// A reopen keeps exactly what was synced: logged puts come back from
    /// the log, unsynced ones are gone.
    #[test]
    fn a_reopen_replays_the_log_and_drops_what_was_not_synced() {
        let dir = tempfile::tempdir().unwrap();
        let s = SledStore::open(dir.path()).unwrap();
        let l = Limits::default();
        let job = l.job("j").unwrap();
        let lease = LeaseRecord {
            holder: Some(l.holder("w").unwrap()),
            token: Token(7),
            ttl: std::time::Duration::from_secs(9),
        };
        s.put_lease(&job, &lease, &[], 0).unwrap();
        s.put_value(&job, b"k1", &val(7, 1, Some("synced")))
            .unwrap();
        s.sync().unwrap(); // logged; never applied to sled before the reopen
        s.put_value(&job, b"k2", &val(7, 1, Some("lost"))).unwrap();
        s.reopen().unwrap();
        assert_eq!(s.leases().unwrap(), vec![(job.clone(), lease)]);
        assert_eq!(
            s.get_value(&job, b"k1").unwrap(),
            Some(val(7, 1, Some("synced")))
        );
        assert_eq!(s.get_value(&job, b"k2").unwrap(), None);
        drop(s);
        // And again from a fresh process's point of view.
        let s = SledStore::open(dir.path()).unwrap();
        assert_eq!(keys(&s, &job, None, 10), ["k1=synced"]);
    }

    /// A batch that does not fit in the log goes straight into sled, and a
    /// log that passes half full is checkpointed: nothing is lost either way.
    #[test]
    fn a_full_log_checkpoints_into_sled() {
        let dir = tempfile::tempdir().unwrap();
        let s = SledStore::open(dir.path()).unwrap();
        let job = Limits::default().job("j").unwrap();
        let cap = s.with(|o| Ok(o.wal.lock().unwrap().capacity())).unwrap();
        let big = "x".repeat(60 * 1024);
        let mut n = 0u64;
        while n * 60 * 1024 < cap * 3 {
            n += 1;
            let k = format!("k{n:04}");
            s.put_value(&job, k.as_bytes(), &val(1, 1, Some(&big)))
                .unwrap();
            if n % 5 == 0 {
                s.sync().unwrap();
                s.checkpoint_if_due().unwrap();
            }
        }
        // Many at once: more than the whole log holds.
        for i in 0..(cap / (60 * 1024) + 2) {
            let k = format!("m{i:04}");
            s.put_value(&job, k.as_bytes(), &val(1, 1, Some(&big)))
                .unwrap();
        }
        s.sync().unwrap();
        let used = s.with(|o| Ok(o.wal.lock().unwrap().used())).unwrap();
        assert!(used * 2 <= cap, "the log was checkpointed: {used} of {cap}");
        drop(s);
        let s = SledStore::open(dir.path()).unwrap();
        assert_eq!(
            s.list_values(&job, b"", None, 10_000).unwrap().len() as u64,
            n + cap / (60 * 1024) + 2
        );
    }
}
