//! Opening the embedded store's data dir, and checking all of it first:
//! the manifest, the log and every record in sled, against each other
//! ([`inspect`] runs the same code for `leasehold check`). Also sled's own
//! opening with leasehold's settings ([`open_sled`], which the tools use
//! too), and the wait for a closed instance's lock at a reopen.
//!
//! Apart from the store's state because it is the one path that decides
//! whether a data dir may be used at all, and names every problem found.

use std::fs::File;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Mutex, RwLock};

use super::checkpoint::{CHECKPOINT_KEY, TREE_VALUES};
use super::scan;
use super::space::free_bytes;
use super::{decode_floor, Logged, Open, SEGMENT_SIZE, WAL_FILE};
use crate::datadir;
use crate::manifest::{self, record_hash, Checkpoint};
use crate::wal::{self, Kind, Record, Wal};
use crate::{decode_lease, decode_value};
use leasehold_core::error::{Error, Result};

/// The write-ahead log's size when it is created: a checkpoint runs when it
/// is half full (or earlier: [`CHECKPOINT_KEYS`](super::CHECKPOINT_KEYS)). Smaller on a small file system (an eighth of the free
/// space), so that the log never takes the room that sled needs.
const WAL_SIZE: u64 = 8 * 1024 * 1024;
const WAL_MIN: u64 = 64 * 1024;

/// A file beside sled's own, written once the store holds leasehold's
/// marker record; data dirs made before the manifest existed are
/// recognised by it.
pub(super) const MARKER_FILE: &str = "leasehold.store";
/// The marker record, in sled's default tree.
pub(super) const MARKER_KEY: &[u8] = b"leasehold/format";
pub(super) const MARKER_VALUE: &[u8] = b"1";

/// One thing wrong with a data dir: the file, and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The file or files, relative to the data dir.
    pub file: String,
    /// What is wrong with it.
    pub what: String,
}

impl Problem {
    pub(super) fn new(file: &str, what: impl Into<String>) -> Problem {
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
    /// The bytes of sled's keys and values, counted record by record: the
    /// live data a reclaim compares the data dir with.
    pub live_bytes: u64,
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
    pub(super) fn checked(dir: &Path) -> Result<Open> {
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
        // The leases, on two threads (see `scan`); kept for the server's
        // first read of every lease.
        let expected = ins.sled.as_ref().map_or(0, |s| s.leases);
        let scanned = scan::leases(&leases, expected);
        let mut found = Checkpoint {
            leases: scanned.leases,
            digest: scanned.digest,
            max_token: scanned.max_token,
            ..Checkpoint::default()
        };
        ins.live_bytes += scanned.live_bytes;
        ins.problems.extend(scanned.problems);
        let decoded = scanned.decoded;
        for kv in values.iter() {
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
            found.digest = found.digest.wrapping_add(record_hash(TREE_VALUES, &k, &v));
            ins.live_bytes += (k.len() + v.len()) as u64;
            found.values += 1;
            if let Err(e) = decode_value(&v) {
                ins.problems.push(Problem::new("db", e.to_string()));
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
            live: AtomicU64::new(ins.live_bytes),
            absorbed: AtomicU64::new(0),
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
}

/// The most of its pages sled keeps in memory (its page cache), counted
/// as sled counts it: by their size on disk. Their decoded nodes in
/// memory take about four times as much (a million live Acquires' server:
/// about 120 MB in use with 32 MiB, 550 MiB RSS in all; 454.6 MiB with
/// 8 MiB and 446.6 MiB with 4 MiB, the Acquires no slower). What a
/// checkpoint or read needs that is not cached it reads back from the
/// file, which the kernel caches.
pub(crate) const SLED_CACHE_BYTES: u64 = 8 << 20;

/// Opens sled in `dir`, with leasehold's settings.
pub(crate) fn open_sled(dir: &Path) -> Result<(sled::Db, sled::Tree, sled::Tree, File)> {
    let db = sled::Config::new()
        .path(dir)
        .segment_size(SEGMENT_SIZE)
        // sled keeps up to this much of its pages in memory, and gives
        // nothing back below it: at its own default (1 GiB) a burst of
        // jobs created and deleted left hundreds of MiB held for good.
        // The lease table lives in the node's memory anyway; sled's pages
        // are read at start-up, by checkpoints, and for keys and history.
        .cache_capacity(SLED_CACHE_BYTES)
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

/// How long a reopen waits for the instance it closed to let go of the
/// data dir's lock.
pub(super) const UNLOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Waits until nobody holds sled's lock on `db` (an exclusive `flock`), up
/// to `limit`. Fails only when the file cannot be opened or locked for
/// another reason; when the lock is still held at the limit, returns and
/// lets sled's open say so.
pub(super) fn wait_until_unlocked(db: &Path, limit: std::time::Duration) -> Result<()> {
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
pub(super) fn write_marker(dir: &Path) -> Result<()> {
    let p = dir.join(MARKER_FILE);
    let f = File::create(&p)
        .map_err(|e| Error::storage(format!("cannot write {}: {e}", p.display())))?;
    f.sync_all()
        .and_then(|()| File::open(dir)?.sync_all())
        .map_err(|e| Error::storage(format!("cannot sync {}: {e}", p.display())))
}
