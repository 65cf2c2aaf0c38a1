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
//!    every pending record to the [`wal`](super::wal) with one `pwrite` and
//!    one `fdatasync`. That is the durability point.
//!    The logged records wait in memory, the newest per key: a key written
//!    a thousand times between checkpoints costs sled one insert.
//! 3. A checkpoint, when the log is half full (checked by
//!    [`Store::settle`], on the same thread, after the waiters were
//!    released), at a clean shutdown and at every start-up, applies the
//!    logged records to sled's trees, drops them from the overlay, flushes
//!    sled (its `flush` and an `fdatasync` of its log: sled 0.34's flush
//!    ends in `sync_file_range`, which reaches neither the file's metadata
//!    nor the drive's cache, sled issue #1452) and then empties the log.
//!
//! **sled never holds a record that the log has not made durable**: records
//! reach sled only after their `fdatasync`. Whatever sled writes on its own
//! is therefore a prefix of the durable records, and replaying the log over
//! it at start-up yields exactly the durable state, never a mix.
//!
//! Pages too large for sled's log go to files under `blobs/`, which sled
//! never syncs; the segment size below keeps default-sized values out of
//! blobs, and a checkpoint fsyncs any blob files that exist anyway.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, RwLock};

use crate::error::{Error, Result};
use crate::lease::{JobName, LeaseRecord};
use crate::store::wal::{Kind, Record, Wal};
use crate::store::{
    decode_lease, decode_value, encode_lease, encode_value, value_key, Store, ValueRecord,
};

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
    /// `None` while a reopen after a failure has not succeeded yet.
    open: RwLock<Option<Open>>,
    /// The first failure since the store was (re)opened. Once set, every
    /// put and sync fails until [`Store::reopen`]: sled itself stops
    /// writing after an I/O error, and a later flush that returned `Ok`
    /// would not mean that the earlier puts reached the disk.
    failed: Mutex<Option<String>>,
    syncs: AtomicU64,
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
    /// Forgets overlay entries that sled now holds: those of puts up to
    /// `seq` that no later put replaced.
    fn trim(&mut self, seq: u64) {
        self.overlay.retain(|_, (s, _)| *s > seq);
    }
}

struct Open {
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
}

/// The logged puts not in sled yet: the newest per key, so that a key
/// written many times between checkpoints is applied once.
#[derive(Default)]
struct Logged {
    leases: BTreeMap<Vec<u8>, Vec<u8>>,
    values: BTreeMap<Vec<u8>, Vec<u8>>,
    /// The sequence number of the last put logged.
    upto: u64,
}

impl Logged {
    fn add(&mut self, puts: Vec<Put>) {
        for p in puts {
            self.upto = self.upto.max(p.seq);
            let map = match p.record.kind {
                Kind::Lease => &mut self.leases,
                Kind::Value => &mut self.values,
            };
            map.insert(p.record.key, p.record.value);
        }
    }
}

impl SledStore {
    /// Opens (or creates) the store in `dir`.
    ///
    /// Fails, rather than starting empty, when the directory cannot be
    /// created or read, or is in use by another process: an empty store
    /// would reset every token.
    pub fn open(dir: &Path) -> Result<SledStore> {
        let open = Open::checked(dir)?;
        Ok(SledStore {
            dir: dir.to_owned(),
            open: RwLock::new(Some(open)),
            failed: Mutex::new(None),
            syncs: AtomicU64::new(0),
            pending: Mutex::new(Pending::default()),
            space: Mutex::new(None),
        })
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.pending.lock().expect("pending lock")
    }

    /// Queues a put for the next `sync`.
    fn stage(&self, kind: Kind, key: Vec<u8>, value: Vec<u8>) -> Result<()> {
        self.write(|_| {
            let mut p = self.pending();
            p.next_seq += 1;
            let seq = p.next_seq;
            if kind == Kind::Value {
                p.overlay.insert(key.clone(), (seq, value.clone()));
            }
            p.puts.push(Put {
                seq,
                record: Record { kind, key, value },
            });
            Ok(())
        })
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
        f(open)
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
        let upto = o.apply_logged(&mut o.logged.lock().expect("logged lock"))?;
        self.pending().trim(upto);
        o.checkpoint(wal)
    }

    /// The free bytes of the data dir's file system: asked anew unless the
    /// last answer is recent and far from full (see [`SPACE_TRUSTED`]).
    fn free(&self) -> std::io::Result<u64> {
        let now = crate::clock::now();
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
/// marker record. If it exists, the store must contain that record: sled
/// opens a store whose files are corrupt as an *empty* store, and starting
/// empty would reset every token.
const MARKER_FILE: &str = "leasehold.store";
/// The marker record, in sled's default tree.
const MARKER_KEY: &[u8] = b"leasehold/format";
const MARKER_VALUE: &[u8] = b"1";

impl Open {
    /// Opens the store in `dir`, refusing one that lost its data, and
    /// replays the write-ahead log into it.
    fn checked(dir: &Path) -> Result<Open> {
        let (open, records) = Open::sled_checked(dir)?;
        let replayed = records.len();
        let puts: Vec<Put> = records
            .into_iter()
            .map(|record| Put { seq: 0, record })
            .collect();
        open.apply(&puts)?;
        // Make the replayed records sled's, and start a new generation.
        open.checkpoint(&mut open.wal.lock().expect("wal lock"))?;
        if replayed > 0 {
            tracing::info!(records = replayed, "replayed the write-ahead log");
        }
        Ok(open)
    }

    /// Applies logged puts to sled's trees, in order.
    fn apply(&self, puts: &[Put]) -> Result<()> {
        for p in puts {
            let tree = match p.record.kind {
                Kind::Lease => &self.leases,
                Kind::Value => &self.values,
            };
            tree.insert(p.record.key.as_slice(), p.record.value.as_slice())
                .map_err(Error::storage)?;
        }
        Ok(())
    }

    /// Applies the logged puts to sled's trees, in key order, leaving
    /// `logged` empty. Returns the sequence number they reach.
    fn apply_logged(&self, logged: &mut Logged) -> Result<u64> {
        let l = std::mem::take(logged);
        for (tree, map) in [(&self.leases, l.leases), (&self.values, l.values)] {
            for (k, v) in map {
                tree.insert(k, v).map_err(Error::storage)?;
            }
        }
        Ok(l.upto)
    }

    /// Makes everything applied to sled durable in sled, then empties the
    /// log. sled first: until it is durable, the log is the only copy.
    fn checkpoint(&self, wal: &mut Wal) -> Result<()> {
        self.db.flush().map_err(Error::storage)?;
        self.log.sync_data().map_err(Error::storage)?;
        self.sync_blobs().map_err(Error::storage)?;
        wal.reset()
            .map_err(|e| Error::storage(format!("cannot reset {}: {e}", wal.path().display())))
    }

    /// Opens sled in `dir`, refusing a store that lost its data, and
    /// reads the log without applying it.
    fn sled_checked(dir: &Path) -> Result<(Open, Vec<Record>)> {
        let marker = dir.join(MARKER_FILE);
        let had_marker = marker.exists();
        let had_log = std::fs::metadata(dir.join("db")).is_ok_and(|m| m.len() > 0);
        let (open, records) = Open::new(dir)?;
        let has_record = open
            .db
            .get(MARKER_KEY)
            .map_err(Error::storage)?
            .is_some_and(|v| v.as_ref() == MARKER_VALUE);
        if has_record {
            if !had_marker {
                write_marker(dir)?;
            }
            return Ok((open, records));
        }
        if had_marker || had_log {
            return Err(Error::storage(format!(
                "data dir {} holds no leasehold data although it should ({}): its files are \
                 corrupt or are not a leasehold store. Refusing to start, because an empty store \
                 would issue tokens again. Restore the directory from a backup, or point \
                 --data-dir at an empty directory to start afresh on purpose",
                dir.display(),
                if had_marker {
                    format!("{MARKER_FILE} exists")
                } else {
                    "a sled log exists".to_owned()
                }
            )));
        }
        // A new store: the record, durably, then the file.
        open.db
            .insert(MARKER_KEY, MARKER_VALUE)
            .map_err(Error::storage)?;
        open.db.flush().map_err(Error::storage)?;
        open.log.sync_data().map_err(Error::storage)?;
        write_marker(dir)?;
        Ok((open, records))
    }

    fn new(dir: &Path) -> Result<(Open, Vec<Record>)> {
        std::fs::create_dir_all(dir).map_err(|e| {
            Error::storage(format!("cannot create data dir {}: {e}", dir.display()))
        })?;
        let db = sled::Config::new()
            .path(dir)
            .segment_size(SEGMENT_SIZE)
            // Every change is flushed by `sync`, in group commits; a
            // background flusher would only add I/O.
            .flush_every_ms(None)
            .open()
            .map_err(|e| match e {
                sled::Error::Io(io) if io.to_string().contains("could not acquire lock") => {
                    Error::storage(format!(
                        "data dir {} is in use by another leasehold process ({io})",
                        dir.display()
                    ))
                }
                e => Error::storage(format!("cannot open data dir {}: {e}", dir.display())),
            })?;
        let leases = db.open_tree("leases").map_err(Error::storage)?;
        let values = db.open_tree("values").map_err(Error::storage)?;
        let log = File::open(dir.join("db"))
            .map_err(|e| Error::storage(format!("cannot open {}/db: {e}", dir.display())))?;
        // Make the files' directory entries durable too.
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| Error::storage(format!("cannot sync data dir {}: {e}", dir.display())))?;
        let path = dir.join(WAL_FILE);
        let size = free_bytes(dir).map_or(WAL_SIZE, |free| (free / 8).clamp(WAL_MIN, WAL_SIZE));
        let (wal, records) = Wal::open(&path, size & !4095)
            .map_err(|e| Error::storage(format!("cannot open {}: {e}", path.display())))?;
        let open = Open {
            db,
            leases,
            values,
            log,
            blobs: dir.join("blobs"),
            wal: Mutex::new(wal),
            logged: Mutex::new(Logged::default()),
        };
        Ok((open, records))
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

impl Store for SledStore {
    fn leases(&self) -> Result<Vec<(JobName, LeaseRecord)>> {
        self.with(|o| {
            // Logged lease records first go where the scan below sees them.
            let mut logged = o.logged.lock().expect("logged lock");
            for (k, v) in std::mem::take(&mut logged.leases) {
                o.leases.insert(k, v).map_err(Error::storage)?;
            }
            drop(logged);
            o.leases
                .iter()
                .map(|kv| {
                    let (k, v) = kv.map_err(Error::storage)?;
                    let name = String::from_utf8(k.to_vec())
                        .map_err(|_| Error::storage("corrupt job name in store"))?;
                    Ok((JobName::from_trusted(name), decode_lease(&v)?))
                })
                .collect()
        })
    }

    fn put_lease(&self, job: &JobName, record: &LeaseRecord) -> Result<()> {
        self.ensure_space(job.as_str().len() + 64)?;
        self.stage(
            Kind::Lease,
            job.as_str().as_bytes().to_vec(),
            encode_lease(record),
        )
    }

    fn get_value(&self, job: &JobName, key: &[u8]) -> Result<Option<ValueRecord>> {
        let k = value_key(job, key);
        if let Some((_, v)) = self.pending().overlay.get(&k) {
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
            let logged = wal
                .append(puts.iter().map(|p| &p.record))
                .map_err(|e| Error::storage(format!("{}: {e}", wal.path().display())))?;
            let mut done = o.logged.lock().expect("logged lock");
            if logged {
                done.add(puts);
                return Ok(());
            }
            // Too big for the room left in the log: straight into sled,
            // after what is logged, and checkpoint.
            o.apply_logged(&mut done)?;
            o.apply(&puts)?;
            o.checkpoint(&mut wal)?;
            let last = puts.last().map_or(0, |p| p.seq);
            self.pending().trim(last);
            Ok(())
        })?;
        self.syncs.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn settle(&self) -> Result<()> {
        self.write(|o| {
            let mut wal = o.wal.lock().expect("wal lock");
            if wal.used() * 2 > wal.capacity() {
                self.checkpoint_open(o, &mut wal)?;
            }
            Ok(())
        })
    }

    fn settle_due(&self) -> bool {
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

    fn check_space(&self) -> Result<()> {
        self.ensure_space(0)
    }

    fn reopen(&self) -> Result<()> {
        let mut guard = self.open.write().expect("store lock");
        // Close first: the data dir's lock must be free to open it again,
        // and whatever sled still holds in memory must go.
        drop(guard.take());
        // Puts that were not logged are lost; the log has the rest.
        *self.pending() = Pending::default();
        // sled's own threads may still be finishing the closed instance's
        // work (a log write, a file truncation), and hold its lock on the
        // data dir until they are done: wait for them, or the open below
        // takes our own past for another process.
        wait_until_unlocked(&self.dir.join("db"), UNLOCK_WAIT)?;
        *guard = Some(Open::checked(&self.dir)?);
        *self.failed.lock().expect("failed lock") = None;
        tracing::info!(dir = %self.dir.display(), "store reopened");
        Ok(())
    }
}

/// Bytes available to this process in the file system holding `dir`.
fn free_bytes(dir: &Path) -> std::io::Result<u64> {
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
    let started = crate::clock::now();
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
        let waited = crate::clock::now().saturating_duration_since(started);
        if waited >= limit {
            tracing::warn!(?waited, path = %db.display(), "the data dir is still locked");
            return Ok(());
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let waited = crate::clock::now().saturating_duration_since(started);
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
    use crate::lease::{Limits, Token};

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
        s.settle().unwrap();
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
    fn logged_puts_reach_sled_once_per_key_at_a_checkpoint() {
        let dir = tempfile::tempdir().unwrap();
        let s = SledStore::open(dir.path()).unwrap();
        let l = Limits::default();
        let job = l.job("j").unwrap();
        for v in 1..=50u64 {
            s.put_value(&job, b"k", &val(1, v, Some(&format!("v{v}"))))
                .unwrap();
            s.sync().unwrap();
            s.settle().unwrap();
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
        s.put_lease(&job, &lease).unwrap();
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
        s.put_lease(&job, &lease).unwrap();
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
                s.settle().unwrap();
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
