//! The embedded store, on sled. The only module that names sled.
//!
//! Two trees: `leases` (job -> lease record) and `values` ((job, key) ->
//! value record). [`SledStore::sync`] is sled's `flush` followed by an
//! `fdatasync` of the log file: sled 0.34's flush uses `sync_file_range`,
//! which writes the pages but neither the file's metadata nor the drive's
//! cache (sled issue #1452), so on its own it does not survive a power loss.
//! Pages too large for the log go to files under `blobs/`, which sled never
//! syncs; the segment size below keeps default-sized values out of blobs,
//! and `sync` fsyncs any blob files that exist anyway.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, RwLock};

use crate::error::{Error, Result};
use crate::lease::{JobName, LeaseRecord};
use crate::store::{
    decode_lease, decode_value, encode_lease, encode_value, value_key, Store, ValueRecord,
};

/// sled's segment size. A page larger than a quarter of it goes to a blob
/// file, so 2 MiB keeps pages up to 512 KiB in the log. It is stored in the
/// data dir and must not change between runs.
const SEGMENT_SIZE: usize = 2 * 1024 * 1024;

/// The free space a put needs beyond its own size. sled may start a new
/// segment at any write, and a write that fails inside sled stops the whole
/// store until it is reopened (which itself needs space); refusing the put
/// up front keeps the store, and reads, working on a full disk.
const RESERVE: u64 = 2 * SEGMENT_SIZE as u64;

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
}

struct Open {
    db: sled::Db,
    leases: sled::Tree,
    values: sled::Tree,
    /// The log file, opened a second time for `fdatasync`.
    log: File,
    blobs: PathBuf,
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
        let free = free_bytes(&self.dir).map_err(|e| {
            Error::storage(format!("cannot stat data dir {}: {e}", self.dir.display()))
        })?;
        let needed = RESERVE + bytes as u64;
        if free < needed {
            return Err(Error::NoSpace { free, needed });
        }
        Ok(())
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
    /// Opens the store in `dir`, refusing one that lost its data.
    fn checked(dir: &Path) -> Result<Open> {
        let marker = dir.join(MARKER_FILE);
        let had_marker = marker.exists();
        let had_log = std::fs::metadata(dir.join("db")).is_ok_and(|m| m.len() > 0);
        let open = Open::new(dir)?;
        let has_record = open
            .db
            .get(MARKER_KEY)
            .map_err(Error::storage)?
            .is_some_and(|v| v.as_ref() == MARKER_VALUE);
        if has_record {
            if !had_marker {
                write_marker(dir)?;
            }
            return Ok(open);
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
        Ok(open)
    }

    fn new(dir: &Path) -> Result<Open> {
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
        Ok(Open {
            db,
            leases,
            values,
            log,
            blobs: dir.join("blobs"),
        })
    }

    fn sync_blobs(&self) -> std::io::Result<()> {
        let entries = match std::fs::read_dir(&self.blobs) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
        let mut any = false;
        for entry in entries {
            File::open(entry?.path())?.sync_data()?;
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
        self.write(|o| {
            o.leases
                .insert(job.as_str().as_bytes(), encode_lease(record))
                .map_err(Error::storage)?;
            Ok(())
        })
    }

    fn get_value(&self, job: &JobName, key: &[u8]) -> Result<Option<ValueRecord>> {
        self.with(
            |o| match o.values.get(value_key(job, key)).map_err(Error::storage)? {
                Some(v) => decode_value(&v).map(Some),
                None => Ok(None),
            },
        )
    }

    fn put_value(&self, job: &JobName, key: &[u8], record: &ValueRecord) -> Result<()> {
        let size = job.as_str().len() + key.len() + record.value.as_ref().map_or(0, Vec::len);
        self.ensure_space(size + 64)?;
        self.write(|o| {
            o.values
                .insert(value_key(job, key), encode_value(record))
                .map_err(Error::storage)?;
            Ok(())
        })
    }

    fn list_values(
        &self,
        job: &JobName,
        prefix: &[u8],
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, ValueRecord)>> {
        let base = value_key(job, b"").len();
        let scan_prefix = value_key(job, prefix);
        let guard = self.open.read().expect("store lock");
        let o = guard
            .as_ref()
            .ok_or_else(|| Error::storage(self.failure("the store is not open")))?;
        let iter = match after.map(|a| value_key(job, a)) {
            Some(a) if a >= scan_prefix => o
                .values
                .range((std::ops::Bound::Excluded(a), std::ops::Bound::Unbounded)),
            _ => o.values.range(scan_prefix.clone()..),
        };
        let mut out = Vec::new();
        for kv in iter {
            let (k, v) = kv.map_err(Error::storage)?;
            if !k.starts_with(&scan_prefix) {
                break;
            }
            let rec = decode_value(&v)?;
            if rec.value.is_some() {
                out.push((k[base..].to_vec(), rec));
                if out.len() == limit {
                    break;
                }
            }
        }
        Ok(out)
    }

    fn sync(&self) -> Result<()> {
        self.write(|o| {
            o.db.flush().map_err(Error::storage)?;
            o.log.sync_data().map_err(Error::storage)?;
            o.sync_blobs().map_err(Error::storage)?;
            Ok(())
        })?;
        self.syncs.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn nearly_full(&self) -> bool {
        free_bytes(&self.dir).map_or(true, |free| free < 2 * RESERVE)
    }

    fn reopen(&self) -> Result<()> {
        let mut guard = self.open.write().expect("store lock");
        // Close first: the data dir's lock must be free to open it again,
        // and whatever sled still holds in memory must go.
        drop(guard.take());
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

/// Writes the marker file durably (file, then directory entry).
fn write_marker(dir: &Path) -> Result<()> {
    let p = dir.join(MARKER_FILE);
    let f = File::create(&p)
        .map_err(|e| Error::storage(format!("cannot write {}: {e}", p.display())))?;
    f.sync_all()
        .and_then(|()| File::open(dir)?.sync_all())
        .map_err(|e| Error::storage(format!("cannot sync {}: {e}", p.display())))
}
