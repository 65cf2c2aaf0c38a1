//! The operator's tools for a data dir: check it, back it up, restore a
//! backup, recover what a damaged one still holds.
//!
//! # The token floor
//!
//! leasehold's first promise is that a token is never issued twice. When
//! state is lost (a damaged data dir, or an old backup put back), the
//! records that knew the newest tokens may be gone. So every way back
//! raises the store's *token floor*: from then on every job's next grant
//! gets a token above it, jobs the store no longer remembers included.
//! The floor is chosen as:
//!
//! - **the highest token ever issued on the data dir, when that is
//!   proven**: the manifest holds the highest token of its checkpoint, and
//!   every grant since is in the write-ahead log, so when both are intact
//!   (and the log is the manifest's generation), their maximum is exact;
//! - otherwise **the highest token seen anywhere, plus 2^32**
//!   ([`MARGIN`]): no real history issues four billion grants on one job
//!   between a backup and its restore, or after the last checkpoint a
//!   damaged manifest knew of;
//! - or what the operator says (`--floor N`), when they know better; never
//!   below the highest token seen.
//!
//! This is the rule "raise the epoch first" applied to recovery: the
//! floor is durable (in sled's checkpoint record and the manifest) before
//! the server serves anything.
//!
//! # Backups
//!
//! A backup is taken through a running server ([`write_backup`], over the
//! `Admin.Backup` RPC): a checkpoint first, so that sled holds everything
//! durable, then sled's records, read while no other checkpoint can change
//! them. The file is self-checking: a header (the data dir's identity, the
//! highest token then, the floor then, the time), the records, and a
//! trailer with their count, digest and a CRC of the whole file.

use std::collections::BTreeMap;
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

// The backup format is its own module, which the embedded store writes
// without depending on the tools; here, where its users find it.
pub use crate::backup::{read_backup, write_backup, Backup};
use crate::datadir::{self, DirLock};
use crate::manifest::{self, hex, Checkpoint};
use crate::sled::{inspect, Inspection, Problem, SledStore};
use crate::wal::{self, Kind, Record, StoreId};
use crate::{decode_lease, encode_lease, HistoryPut, Store};
use leasehold_core::error::{Error, Result};
use leasehold_core::lease::{JobName, TenureEnd};

/// How far above the highest token seen the floor jumps when the true
/// highest cannot be proven.
pub const MARGIN: u64 = 1 << 32;

/// A data dir's report, for `leasehold check`.
pub struct Report {
    /// What was found.
    pub inspection: Inspection,
    /// An interrupted `restore` or `recover` that the next start finishes
    /// (the inspection is of the data dir after it).
    pub switched: Option<String>,
    /// The private keys in the data dir's `signing-keys.pem` (0: none).
    pub signing_keys: usize,
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let i = &self.inspection;
        if let Some(s) = &self.switched {
            writeln!(
                f,
                "interrupted       the next start {s}; what follows is after it"
            )?;
        }
        if i.fresh {
            writeln!(f, "an empty data dir: no leasehold store in it yet")?;
        }
        let c = i.manifest.as_ref().or(i.sled.as_ref());
        if let Some(c) = c {
            writeln!(f, "store id          {}", hex(&c.store_id))?;
            writeln!(
                f,
                "checkpoint        {} (at {} ms since the Unix epoch)",
                c.generation, c.unix_ms
            )?;
            writeln!(f, "token floor       {}", c.floor)?;
            if c.new_job_floor > 0 {
                writeln!(
                    f,
                    "new-job floor     {} (raised by deleted jobs)",
                    c.new_job_floor
                )?;
            }
            if let Some(r) = &c.recovered {
                writeln!(f, "history           {r}")?;
            }
        }
        if i.legacy {
            writeln!(
                f,
                "format            before the manifest (upgraded at the next start)"
            )?;
        }
        writeln!(f, "jobs              {}", i.found.leases)?;
        writeln!(
            f,
            "keys              {} (deleted ones included)",
            i.found.values
        )?;
        writeln!(f, "highest token     {}", i.max_token)?;
        if self.signing_keys > 0 {
            writeln!(
                f,
                "signing keys      {} in {} (the first signs grants' proofs)",
                self.signing_keys,
                datadir::KEYS_FILE
            )?;
        } else if !i.fresh {
            writeln!(f, "signing keys      none in {}", datadir::KEYS_FILE)?;
        }
        match i.wal_generation {
            Some(g) => writeln!(
                f,
                "write-ahead log   generation {g}, {} records to replay{}",
                i.wal_records,
                if i.wal_torn > 0 {
                    format!(
                        ", a torn last batch of {} bytes (never acknowledged)",
                        i.wal_torn
                    )
                } else {
                    String::new()
                }
            )?,
            None => writeln!(f, "write-ahead log   unreadable or missing")?,
        }
        if i.problems.is_empty() {
            writeln!(f, "healthy")
        } else {
            writeln!(f, "{} problem(s):", i.problems.len())?;
            for p in &i.problems {
                writeln!(f, "  - {}: {}", p.file, p.what)?;
            }
            write!(f, "{}", recovery_advice())
        }
    }
}

fn recovery_advice() -> &'static str {
    "To go on: restore a backup (`leasehold restore`), or keep what is readable with \
     `leasehold recover`; both raise the token floor so that no token is issued twice.\n"
}

/// Checks the data dir at `dir` without changing it: everything is read
/// from a copy (sled's own recovery may write to the files it opens).
pub fn check(dir: &Path) -> Result<Report> {
    if !dir.is_dir() {
        return Err(Error::storage(format!(
            "{} is not a directory",
            dir.display()
        )));
    }
    // No server may use it meanwhile: a copy of a live dir is torn.
    let _lock = DirLock::shared(dir)?;
    let scratch = Scratch::for_copy_of(dir)?;
    copy_dir(dir, &scratch.copy)
        .map_err(|e| Error::storage(format!("cannot copy {} to read it: {e}", dir.display())))?;
    // What a start would find: an interrupted switch finished first.
    let switched = datadir::finish_switch(&scratch.copy)?;
    let mut inspection = inspect(&scratch.copy)?;
    let keys = datadir::signing_keys(dir)?;
    let signing_keys = keys.as_deref().map_or(0, |k| {
        datadir::pem_blocks(&String::from_utf8_lossy(k)).len()
    });
    match keys {
        None if dir.join(datadir::KEYS_MARKER).exists() => inspection.problems.push(Problem {
            file: datadir::KEYS_FILE.to_owned(),
            what: "missing: the server refuses to start without the signing key that made its \
                   proofs; restore it from a backup (restore brings it back), or start with \
                   --new-signing-key if it is lost for good"
                .to_owned(),
        }),
        Some(_) if signing_keys == 0 => inspection.problems.push(Problem {
            file: datadir::KEYS_FILE.to_owned(),
            what: "holds no PEM private key: damaged".to_owned(),
        }),
        _ => {}
    }
    Ok(Report {
        inspection,
        switched,
        signing_keys,
    })
}

/// What a way back did, for its caller to print.
#[derive(Debug)]
pub struct Outcome {
    /// Jobs and value records in the new store.
    pub jobs: usize,
    /// Value records in the new store.
    pub values: usize,
    /// The highest token seen anywhere.
    pub highest: u64,
    /// The new floor: every next grant is above it.
    pub floor: u64,
    /// Whether the highest token was proven (else the floor has the margin).
    pub proven: bool,
    /// Where the old files went, if there were any.
    pub kept: Option<PathBuf>,
    /// What could not be read or was lost, one line each.
    pub lost: Vec<String>,
}

/// What could be read of a data dir, damaged or not.
struct Salvage {
    leases: BTreeMap<Vec<u8>, Vec<u8>>,
    values: BTreeMap<Vec<u8>, Vec<u8>>,
    highest: u64,
    proven: bool,
    lost: Vec<String>,
    any: bool,
    /// The data dir's identity, from its manifest.
    store_id: Option<StoreId>,
}

/// Reads whatever `dir` still holds (from a copy, so that sled's own
/// recovery cannot change it): sled's records, then the log's valid
/// records over them, and the highest token anything names.
fn salvage(dir: &Path) -> Result<Salvage> {
    let scratch = Scratch::for_copy_of(dir)?;
    copy_dir(dir, &scratch.copy)
        .map_err(|e| Error::storage(format!("cannot copy {} to read it: {e}", dir.display())))?;
    let mut s = salvage_in(&scratch.copy)?;
    // Folders that earlier runs set aside, or new stores never switched
    // in: their tokens may have been issued too. They prove nothing.
    for f in datadir::leftovers(dir) {
        let found = aside_highest(&f);
        if found > 0 {
            s.any = true;
            if found > s.highest {
                s.highest = found;
                s.proven = false;
            }
        }
    }
    Ok(s)
}

/// The highest token that the manifest and the log of a set-aside folder
/// name (reads only).
fn aside_highest(dir: &Path) -> u64 {
    let mut h = 0;
    if let Ok(manifest::Found::Ok(c)) = manifest::read(dir) {
        h = h.max(c.max_token).max(c.floor);
    }
    if let Ok((records, ..)) = wal::salvage(&dir.join("wal")) {
        for r in records {
            match r.kind {
                Kind::Lease => {
                    if let Ok(l) = decode_lease(&r.value) {
                        h = h.max(l.token.0);
                    }
                }
                Kind::Floor => {
                    if let Ok(b) = <[u8; 8]>::try_from(r.value.as_slice()) {
                        h = h.max(u64::from_le_bytes(b));
                    }
                }
                Kind::Value => {}
            }
        }
    }
    h
}

fn salvage_in(dir: &Path) -> Result<Salvage> {
    let mut s = Salvage {
        leases: BTreeMap::new(),
        values: BTreeMap::new(),
        highest: 0,
        proven: false,
        lost: Vec::new(),
        any: false,
        store_id: None,
    };
    let manifest = match manifest::read(dir).map_err(Error::storage)? {
        manifest::Found::Ok(c) => Some(c),
        manifest::Found::Damaged(why) => {
            s.lost.push(format!("{}: {why}", manifest::FILE));
            s.any = true;
            None
        }
        manifest::Found::Missing => None,
    };
    if let Some(m) = &manifest {
        s.highest = s.highest.max(m.max_token).max(m.floor);
        s.any = true;
        s.store_id = Some(m.store_id);
    }
    let wal_path = dir.join("wal");
    let mut wal_ok = None;
    if wal_path.exists() {
        s.any = true;
        let (records, generation, problem) = wal::salvage(&wal_path).map_err(Error::storage)?;
        if let Some(p) = problem {
            s.lost.push(format!(
                "wal: {p}; kept the {} records before the damage",
                records.len()
            ));
        } else {
            wal_ok = generation;
        }
        for r in records {
            if r.kind == Kind::Lease {
                if let Ok(l) = decode_lease(&r.value) {
                    s.highest = s.highest.max(l.token.0);
                }
            }
            match r.kind {
                Kind::Lease => s.wal_leases(r),
                Kind::Value => {
                    s.values.insert(r.key, r.value);
                }
                Kind::Floor => {
                    if let Ok(b) = <[u8; 8]>::try_from(r.value.as_slice()) {
                        s.highest = s.highest.max(u64::from_le_bytes(b));
                    }
                }
            }
        }
    }
    let has_sled = dir.join("db").exists() || dir.join("conf").exists();
    if has_sled {
        s.any = true;
        match crate::sled::open_sled(dir) {
            Ok((db, ..)) => {
                if let Some(c) = db
                    .get(b"leasehold/checkpoint")
                    .ok()
                    .flatten()
                    .and_then(|v| Checkpoint::decode(&v))
                {
                    s.highest = s.highest.max(c.max_token).max(c.floor);
                }
                for (name, map) in [("leases", 0), ("values", 1)] {
                    let tree = match db.open_tree(name) {
                        Ok(t) => t,
                        Err(e) => {
                            s.lost.push(format!("sled tree {name}: {e}"));
                            continue;
                        }
                    };
                    for kv in tree.iter() {
                        match kv {
                            Ok((k, v)) => {
                                let m = if map == 0 {
                                    &mut s.leases
                                } else {
                                    &mut s.values
                                };
                                // The log's records are newer.
                                m.entry(k.to_vec()).or_insert_with(|| v.to_vec());
                            }
                            Err(e) => {
                                s.lost
                                    .push(format!("sled tree {name}: a record is unreadable: {e}"));
                                break;
                            }
                        }
                    }
                }
            }
            Err(e) => s.lost.push(format!("sled: cannot open: {e}")),
        }
    }
    // An empty record is a deleted job's record: logged removals are newer
    // than sled's records, and keep them out.
    s.leases.retain(|_, v| !v.is_empty());
    s.values.retain(|_, v| !v.is_empty());
    s.leases.retain(|k, v| match decode_lease(v) {
        Ok(l) => {
            s.highest = s.highest.max(l.token.0);
            true
        }
        Err(_) => {
            s.lost.push(format!(
                "the lease record of job {:?} does not decode",
                String::from_utf8_lossy(k)
            ));
            false
        }
    });
    s.values.retain(|_, v| crate::decode_value(v).is_ok());
    // Exact only when the manifest knew every token up to its checkpoint and
    // the log holds every grant since.
    s.proven = matches!((&manifest, wal_ok), (Some(m), Some(g)) if m.generation == g);
    Ok(s)
}

impl Salvage {
    fn wal_leases(&mut self, r: Record) {
        self.leases.insert(r.key, r.value);
    }
}

/// Keeps what a damaged data dir still holds: moves every file into a
/// `damaged-<time>` folder inside it, and writes a new store there with
/// what was readable, every lease released, and the token floor raised.
pub fn recover(dir: &Path, floor: Option<u64>) -> Result<Outcome> {
    if !dir.is_dir() {
        return Err(Error::storage(format!(
            "{} is not a directory",
            dir.display()
        )));
    }
    let _lock = DirLock::exclusive(dir, "leasehold recover")?;
    datadir::finish_switch(dir)?;
    let s = salvage(dir)?;
    if !s.any {
        return Err(Error::storage(format!(
            "{} holds no leasehold data: nothing to recover",
            dir.display()
        )));
    }
    let floor = choose_floor(s.highest, s.proven, floor)?;
    let note = format!(
        "recovered at {} ms since the Unix epoch: {} job(s) and {} value record(s) kept, every \
         lease released, tokens continue above {floor}{}",
        leasehold_core::clock::wall_unix_ms(),
        s.leases.len(),
        s.values.len(),
        if s.lost.is_empty() {
            String::new()
        } else {
            format!("; lost or unreadable: {}", s.lost.join("; "))
        }
    );
    let (kept, jobs, values) = replace_store(
        dir,
        "damaged",
        &s.leases,
        &s.values,
        floor,
        &note,
        TenureEnd::Recovered,
    )?;
    Ok(Outcome {
        jobs,
        values,
        highest: s.highest,
        floor,
        proven: s.proven,
        kept,
        lost: s.lost,
    })
}

/// Puts the backup at `file` in place of the data dir at `dir`. The old
/// files, if any, move to a `replaced-<time>` folder inside it; their
/// highest token counts for the floor.
pub fn restore(dir: &Path, file: &Path, floor: Option<u64>) -> Result<Outcome> {
    let backup = read_backup(file)?;
    std::fs::create_dir_all(dir)
        .map_err(|e| Error::storage(format!("cannot create {}: {e}", dir.display())))?;
    let _lock = DirLock::exclusive(dir, "leasehold restore")?;
    datadir::finish_switch(dir)?;
    let existing = salvage(dir)?;
    let (highest, proven, lost) = if existing.any {
        // The data dir's own history proves its highest token, and so
        // covers its own backups: a backup from this store, no newer than
        // what the store knows. A backup from anywhere else (another
        // server, another store id, a store restored since) may have come
        // from a store that went on issuing tokens after it.
        let own =
            existing.store_id == Some(backup.store_id) && backup.max_token <= existing.highest;
        (
            existing.highest.max(backup.max_token),
            existing.proven && own,
            existing.lost.clone(),
        )
    } else {
        // Nothing to prove the history with: the backup's data dir may
        // have gone on issuing tokens after the backup.
        (backup.max_token, false, Vec::new())
    };
    let floor = choose_floor(highest, proven, floor)?;
    // The backup's signing keys first (added to the data dir's, which stay
    // first): should the restore stop after this, a start refuses nothing
    // it would have taken before, and the next restore adds nothing again.
    if let Some(keys) = &backup.signing_keys {
        datadir::merge_signing_keys(dir, keys)?;
    }
    let mut leases = BTreeMap::new();
    let mut values = BTreeMap::new();
    for r in backup.records {
        match r.kind {
            Kind::Lease => leases.insert(r.key, r.value),
            Kind::Value => values.insert(r.key, r.value),
            Kind::Floor => None,
        };
    }
    let note = format!(
        "restored at {} ms since the Unix epoch from a backup taken at {} ms (store {}, highest \
         token then {}): changes after the backup are lost, every lease released, tokens continue \
         above {floor}",
        leasehold_core::clock::wall_unix_ms(),
        backup.unix_ms,
        hex(&backup.store_id),
        backup.max_token,
    );
    let (kept, jobs, values) = replace_store(
        dir,
        "replaced",
        &leases,
        &values,
        floor,
        &note,
        TenureEnd::Restored,
    )?;
    Ok(Outcome {
        jobs,
        values,
        highest,
        floor,
        proven,
        kept,
        lost,
    })
}

fn choose_floor(highest: u64, proven: bool, asked: Option<u64>) -> Result<u64> {
    match asked {
        Some(f) if f < highest => Err(Error::InvalidArgument {
            field: "floor".into(),
            message: format!(
                "--floor {f} is below the highest token found ({highest}): tokens would repeat"
            ),
        }),
        Some(f) => Ok(f),
        None if proven => Ok(highest),
        None => highest.checked_add(MARGIN).ok_or_else(|| {
            Error::storage(format!(
                "the highest token found ({highest}) leaves no room for a margin; give --floor"
            ))
        }),
    }
}

/// Replaces the store in `dir` with a new one: every lease released, the
/// floor and the note in its checkpoint. The new store is written whole
/// and durable in a folder inside `dir` first; then [`datadir::switch`]
/// sets the old files aside (into `<aside>-<time>`) and moves the new ones
/// in, so that any interruption leaves a switch the next start (or run)
/// finishes, never an empty or mixed data dir. Stale new folders of
/// earlier interrupted runs are removed first. Returns where the old files
/// went (if there were any), and the jobs and values written.
#[allow(clippy::too_many_arguments)]
fn replace_store(
    dir: &Path,
    aside: &str,
    leases: &BTreeMap<Vec<u8>, Vec<u8>>,
    values: &BTreeMap<Vec<u8>, Vec<u8>>,
    floor: u64,
    note: &str,
    how: TenureEnd,
) -> Result<(Option<PathBuf>, usize, usize)> {
    let io = |e: io::Error| {
        Error::storage(format!(
            "cannot replace the store in {}: {e}",
            dir.display()
        ))
    };
    for old in datadir::leftovers(dir) {
        let name = old.file_name().unwrap_or_default().to_string_lossy();
        if name.starts_with(datadir::NEW_PREFIX) {
            std::fs::remove_dir_all(&old).map_err(io)?;
        }
    }
    let had_store = std::fs::read_dir(dir)
        .map_err(io)?
        .flatten()
        .any(|e| datadir::is_store_entry(&e.file_name().to_string_lossy()));
    let ms = leasehold_core::clock::wall_unix_ms();
    let new = format!("{}{ms}", datadir::NEW_PREFIX);
    let (jobs, vals) = write_store(&dir.join(&new), leases, values, floor, note, how)?;
    let aside = format!("{aside}-{ms}");
    datadir::switch(dir, &new, &aside)?;
    Ok((had_store.then(|| dir.join(aside)), jobs, vals))
}

/// Writes a new store in the empty `dir`: every lease released, the floor
/// and the note in its checkpoint. A tenure whose end the history does not
/// hold yet (the lease was held, or ran out unrecorded) ends there, `how`:
/// history never shows two tenures of a job as not ended. Returns the jobs
/// and values written.
fn write_store(
    dir: &Path,
    leases: &BTreeMap<Vec<u8>, Vec<u8>>,
    values: &BTreeMap<Vec<u8>, Vec<u8>>,
    floor: u64,
    note: &str,
    how: TenureEnd,
) -> Result<(usize, usize)> {
    let now = leasehold_core::clock::wall_unix_ms();
    let mut ends = BTreeMap::new();
    for (k, v) in leases {
        let (Ok(name), Ok(l)) = (std::str::from_utf8(k), decode_lease(v)) else {
            continue;
        };
        let job = JobName::from_trusted(name.to_owned());
        let granted = crate::history_key(&job, l.token, 0);
        let ended = crate::history_key(&job, l.token, 1);
        if l.token.0 > 0 && values.contains_key(&granted) && !values.contains_key(&ended) {
            let (key, record) = crate::encode_history(
                &job,
                &HistoryPut::End {
                    token: l.token,
                    how,
                    at_unix_ms: now,
                },
            );
            ends.insert(key, crate::encode_value(&record));
        }
    }
    let store = SledStore::open(dir)?;
    store.set_floor(floor, note)?;
    store.checkpoint()?;
    let mut n = 0;
    for (k, v) in leases {
        let mut l = decode_lease(v)?;
        l.holder = None;
        store.put_raw(Kind::Lease, k.clone(), encode_lease(&l))?;
        n += 1;
        if n % 10_000 == 0 {
            store.sync()?;
            store.checkpoint()?;
        }
    }
    for (k, v) in values.iter().chain(&ends) {
        store.put_raw(Kind::Value, k.clone(), v.clone())?;
        n += 1;
        if n % 10_000 == 0 {
            store.sync()?;
            store.checkpoint()?;
        }
    }
    store.sync()?;
    store.checkpoint()?;
    Ok((leases.len(), values.len()))
}

/// A temporary folder, removed on drop. A tool killed before its drop
/// runs leaves it behind: each folder holds a lock file, locked for its
/// owner's life, and every new scratch folder first removes the ones
/// whose lock nobody holds any more.
struct Scratch {
    /// The folder: the lock file and `copy`.
    root: PathBuf,
    /// Where the copy goes.
    copy: PathBuf,
    /// The lock on the lock file, held until drop.
    _owner: std::fs::File,
}

/// The names of scratch folders in the temporary folder.
const SCRATCH_PREFIX: &str = "leasehold-check-";
/// The lock file in each, held by the process that made it.
const SCRATCH_OWNER: &str = ".owner";

impl Scratch {
    /// A scratch folder for a copy of `dir`, in the temporary folder
    /// (`TMPDIR`), refused up front when that has too little room.
    fn for_copy_of(dir: &Path) -> Result<Scratch> {
        let tmp = std::env::temp_dir();
        sweep_scratch(&tmp);
        let needed = dir_size(dir);
        if let Ok(free) = crate::sled::free_bytes(&tmp) {
            // The copy, and room for sled's recovery to write in it.
            let want = needed + (needed / 4).max(16 << 20);
            if free < want {
                return Err(Error::storage(format!(
                    "{} is read from a copy, which needs about {} MiB in {} ({} MiB free): set \
                     TMPDIR to a folder with room, for example one on the data dir's own file \
                     system",
                    dir.display(),
                    want >> 20,
                    tmp.display(),
                    free >> 20
                )));
            }
        }
        Scratch::new(&tmp)
    }

    fn new(tmp: &Path) -> Result<Scratch> {
        let name = format!(
            "{SCRATCH_PREFIX}{}-{}",
            std::process::id(),
            leasehold_core::clock::wall_unix_ms()
        );
        // Made under a name no sweep touches, locked, then renamed: a
        // sweep never sees the folder without its owner's lock.
        let making = tmp.join(format!(".{name}"));
        let p = tmp.join(&name);
        let made = (|| {
            std::fs::create_dir_all(making.join("copy"))?;
            let owner = std::fs::File::create(making.join(SCRATCH_OWNER))?;
            // SAFETY: flock on a descriptor that `owner` keeps open.
            if unsafe { libc::flock(owner.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
                return Err(io::Error::last_os_error());
            }
            std::fs::rename(&making, &p)?;
            Ok(owner)
        })();
        match made {
            Ok(owner) => Ok(Scratch {
                copy: p.join("copy"),
                root: p,
                _owner: owner,
            }),
            Err(e) => {
                let _ = std::fs::remove_dir_all(&making);
                Err(Error::storage(format!(
                    "cannot create {}: {e}",
                    p.display()
                )))
            }
        }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// Removes the scratch folders in `tmp` that no live process owns: a
/// named one whose lock file is unlocked (its owner was killed), and one
/// untouched for an hour that has no lock file (from an earlier version)
/// or still has its hidden name (killed while being made: until it is
/// renamed, its lock may not be taken yet, so a lock test would race with
/// its maker). Best effort: a folder it cannot remove stays.
fn sweep_scratch(tmp: &Path) {
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return;
    };
    let hour_old = |e: &std::fs::DirEntry| {
        e.metadata().and_then(|m| m.modified()).is_ok_and(|t| {
            t.elapsed()
                .is_ok_and(|age| age > std::time::Duration::from_secs(3600))
        })
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let (hidden, made) = match name.strip_prefix('.') {
            Some(n) => (true, n),
            None => (false, name.as_str()),
        };
        if !made.starts_with(SCRATCH_PREFIX) || !e.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let path = e.path();
        let stale = if hidden {
            hour_old(&e)
        } else {
            match std::fs::File::open(path.join(SCRATCH_OWNER)) {
                // SAFETY: flock on a descriptor that `f` keeps open; the
                // lock goes with it when it is dropped.
                Ok(f) => {
                    let got = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
                    got == 0
                }
                Err(_) => hour_old(&e),
            }
        };
        if stale {
            let _ = std::fs::remove_dir_all(&path);
        }
    }
}

/// The bytes that [`copy_dir`] copies of `dir` (best effort).
fn dir_size(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            match e.file_type() {
                Ok(t) if t.is_dir() => {
                    if datadir::ASIDE_PREFIXES.iter().any(|p| n.starts_with(p)) {
                        0
                    } else {
                        dir_size(&e.path())
                    }
                }
                _ => e.metadata().map_or(0, |m| m.len()),
            }
        })
        .sum()
}

fn copy_dir(from: &Path, to: &Path) -> io::Result<()> {
    for e in std::fs::read_dir(from)? {
        let e = e?;
        let t = to.join(e.file_name());
        if e.file_type()?.is_dir() {
            let n = e.file_name().to_string_lossy().into_owned();
            std::fs::create_dir_all(&t)?;
            // Set-aside folders are named, not copied: what they hold
            // counts only for the floor, read in place.
            if datadir::ASIDE_PREFIXES.iter().any(|p| n.starts_with(p)) {
                continue;
            }
            copy_dir(&e.path(), &t)?;
        } else {
            std::fs::copy(e.path(), &t)?;
        }
    }
    Ok(())
}
