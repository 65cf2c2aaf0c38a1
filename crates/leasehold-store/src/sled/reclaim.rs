//! Reclaiming disk space: the store rewritten whole, into a new sled, when
//! its data dir has grown past a multiple of its live data.
//!
//! sled 0.34 reclaims little of its own garbage: every overwritten value
//! and every deleted job's records leave dead pages in its segments, and
//! under churn with large values the data dir grows far past what a read
//! could return (see BENCHMARKS.md, "Disk space under churn"). So after a
//! checkpoint (and at start-up) the store compares the data dir's size on
//! disk with the live data (the bytes of every key and value sled holds,
//! counted at start-up and kept up to date by each checkpoint); past
//! `ratio` times that, plus the log's fixed size and [`SLACK`], it
//! rewrites the store:
//!
//! 1. a checkpoint, so that sled holds every durable record and the log
//!    is empty; then, holding the log (no sync can log a batch until the
//!    end; staging goes on in memory), every record is copied into a new
//!    sled in a `.new-reclaim-…` folder inside the data dir, counted and
//!    hashed against sled's checkpoint record, with the same checkpoint
//!    (the data dir's identity, the highest token, the floors) one
//!    generation on, a new empty log of that generation and a manifest,
//!    all durable;
//! 2. the old sled is closed, and the data dir's switch
//!    ([`datadir::switch`], the one `restore` uses) sets the old files
//!    aside into a `reclaimed-…` folder and moves the new ones in; the
//!    folder set aside is then removed, and the store opened again, with
//!    the same full check as any start.
//!
//! **A reclaim never changes what the store holds, and a crash at any
//! point leaves either the old store or the new one, each whole**: before
//! the switch's intent file is durable, the old files are untouched and
//! the next start removes the unfinished new folder; after it, the next
//! start finishes the switch, and removes the set-aside folder. The new
//! store carries the old one's checkpoint record (highest token, token
//! floor, new-job floor), so no token can be issued twice. Tested by
//! `tests/it/reclaim.rs` (SIGKILL during a reclaim, then a restart).
//!
//! The copy holds the log, so writes wait for it (decisions do not): its
//! time is logged at INFO, with its progress every [`PROGRESS_RECORDS`]
//! records. A backup reading sled when a rewrite starts is ended, as for a
//! checkpoint the log needs; one asked for during a rewrite starts once it
//! is over. A reclaim that fails (no room for the copy, say) is logged at
//! WARN and changes nothing; the next checkpoint may try again.
//!
//! **Memory after churn.** The same rewrite gives back the memory a burst
//! of churn left in sled. Every change a checkpoint applies makes new
//! versions of sled's tree nodes; the old ones wait for epoch-based
//! reclamation, and the survivors are scattered among the burst's pages,
//! so that no allocator can hand those pages back (BENCHMARKS.md,
//! "churn-memory": 200,000 jobs held at once and then deleted left 186 to
//! 199 MiB on an idle server with no job). So when the store settles
//! after a burst ([`SledStore::settle_memory`]), a store whose sleds have
//! taken in more than [`CHURN_RATIO`] times its live data, and more than
//! [`CHURN_FLOOR`], since the last such rewrite (reclaims of disk space
//! in between do not count: the burst goes on around them) is rewritten
//! the same way (the
//! copy costs what the live data does, and nothing waits for it on an
//! idle server), and the garbage that the closed sled left waiting for
//! its epoch is then freed ([`drain_deferred`]).

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use super::checkpoint::{sync_blobs, CHECKPOINT_KEY, TREE_LEASES, TREE_VALUES};
use super::open::{wait_until_unlocked, write_marker, MARKER_KEY, MARKER_VALUE, UNLOCK_WAIT};
use super::{no_panic, open_sled, Open, SledStore, WAL_FILE};
use crate::datadir;
use crate::manifest::{self, record_hash, Checkpoint};
use crate::wal::Wal;
use leasehold_core::error::{Error, Result};

/// The ratio of a data dir's size to its live data past which the store
/// is rewritten, unless set otherwise (`--reclaim-ratio`).
pub const DEFAULT_RATIO: f64 = 1.5;
/// The ratios a store accepts (besides 0, off): below the lowest, a store
/// just rewritten could be past it again.
pub const MIN_RATIO: f64 = 1.2;
/// The highest ratio a store accepts.
pub const MAX_RATIO: f64 = 1000.0;
/// What a data dir may hold beyond `ratio` times its live data and the
/// log's fixed size before it is rewritten: sled's own files and the
/// segments it keeps open, for a store of little live data.
pub const SLACK: u64 = 4 << 20;
/// Records between two progress lines of a rewrite.
const PROGRESS_RECORDS: u64 = 100_000;
/// Where a reclaim writes the new store, and where it sets the old aside.
const NEW_NAME: &str = "reclaim-";
const ASIDE_PREFIX: &str = "reclaimed-";

/// Checks a `--reclaim-ratio`: 0 (off), or from [`MIN_RATIO`] to
/// [`MAX_RATIO`]. The error names the limits; the caller names the flag.
pub fn check_ratio(ratio: f64) -> std::result::Result<(), String> {
    if ratio == 0.0 || (MIN_RATIO..=MAX_RATIO).contains(&ratio) {
        return Ok(());
    }
    Err(format!(
        "is {ratio}: it must be 0 (never reclaim) or from {MIN_RATIO} to {MAX_RATIO}"
    ))
}

/// Bytes allocated on disk to the store's files in `dir` (its log, sled's
/// files, its blobs; not the lock, nor folders set aside), as `du` counts
/// them.
pub fn store_bytes(dir: &Path) -> u64 {
    fn walk(p: &Path) -> u64 {
        use std::os::unix::fs::MetadataExt as _;
        let Ok(entries) = std::fs::read_dir(p) else {
            return 0;
        };
        entries
            .flatten()
            .map(|e| match e.metadata() {
                Ok(m) if m.is_dir() => walk(&e.path()),
                Ok(m) => m.blocks() * 512,
                Err(_) => 0,
            })
            .sum()
    }
    use std::os::unix::fs::MetadataExt as _;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .filter(|e| datadir::is_store_entry(&e.file_name().to_string_lossy()))
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => walk(&e.path()),
            Ok(m) => m.blocks() * 512,
            Err(_) => 0,
        })
        .sum()
}

/// Keeps `floor` in the data dir (written whole or not at all), or removes
/// it when 0.
fn write_floor(dir: &Path, floor: u64) -> std::io::Result<()> {
    let path = dir.join(datadir::RECLAIM_FLOOR_FILE);
    if floor == 0 {
        return match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        };
    }
    let tmp = dir.join(format!("{}.tmp", datadir::RECLAIM_FLOOR_FILE));
    std::fs::write(&tmp, format!("{floor}\n"))?;
    std::fs::rename(&tmp, &path)
}

/// Removes what an interrupted reclaim leaves once any switch is finished:
/// a new store never switched in, and the old files set aside. Both are
/// only copies of what the store in place holds.
pub(super) fn remove_leftovers(dir: &Path) {
    for p in datadir::leftovers(dir) {
        let name = p.file_name().unwrap_or_default().to_string_lossy();
        let new = format!("{}{NEW_NAME}", datadir::NEW_PREFIX);
        if name.starts_with(&new) || name.starts_with(ASIDE_PREFIX) {
            match std::fs::remove_dir_all(&p) {
                Ok(()) => tracing::info!(
                    folder = %p.display(),
                    "removed what an interrupted reclaim of disk space left"
                ),
                Err(e) => tracing::warn!(folder = %p.display(), error = %e, "cannot remove"),
            }
        }
    }
}

/// The prefix of the folders a reclaim sets aside (for [`datadir`]).
pub(crate) const ASIDE: &str = ASIDE_PREFIX;

/// What the store needs to judge whether a reclaim is due.
pub(super) struct Reclaim {
    /// The ratio as bits of an `f64` (0: off).
    pub(super) ratio: std::sync::atomic::AtomicU64,
    /// No reclaim below this size: set after a rewrite that could not get
    /// under the threshold, so that the next waits for real growth.
    pub(super) floor: std::sync::atomic::AtomicU64,
    /// After such a rewrite, the bytes its copy took per live byte (as bits
    /// of an `f64`; 0: none): see [`grown_floor`].
    pub(super) copy_per_live: std::sync::atomic::AtomicU64,
    /// The churn taken in by the sleds closed by rewrites since the last
    /// settle's rewrite: a reclaim of disk space in the middle of a burst
    /// leaves the burst's garbage, and the new sled's nodes scattered
    /// among the rest of it, so it does not count as giving memory back.
    pub(super) carried: std::sync::atomic::AtomicU64,
    /// The least churn a settle rewrites for ([`CHURN_FLOOR`]; lower in
    /// tests).
    pub(super) churn_floor: std::sync::atomic::AtomicU64,
    /// Rewrites done, for tests and metrics.
    pub(super) done: std::sync::atomic::AtomicU64,
    /// No reclaim before then: [`BUSY_SHARE`] of the time at most goes on
    /// rewrites, however fast the churn.
    pub(super) not_before: std::sync::Mutex<Option<std::time::Instant>>,
    /// Held by a rewrite from its first step to its switch, and by a
    /// backup from its start until it holds the gate that checkpoints wait
    /// on: a backup asked for during a rewrite starts after it, on the
    /// rewritten store (see [`SledStore::reclaim_now`]).
    pub(super) running: std::sync::Mutex<()>,
}

/// The most of its time the store spends rewriting itself: after a
/// rewrite of `d`, the next waits `d / BUSY_SHARE - d`. Writes wait for a
/// rewrite's copy, so under a churn that outgrows the threshold between
/// two checkpoints (the soak's 49 MB/s) this keeps nine tenths of the
/// time for them, and the data dir grows for a little longer instead.
pub const BUSY_SHARE: f64 = 0.1;

impl Reclaim {
    pub(super) fn new(ratio: f64) -> Reclaim {
        Reclaim {
            ratio: ratio.to_bits().into(),
            floor: 0.into(),
            copy_per_live: 0.into(),
            churn_floor: CHURN_FLOOR.into(),
            carried: 0.into(),
            done: 0.into(),
            not_before: std::sync::Mutex::new(None),
            running: std::sync::Mutex::new(()),
        }
    }

    fn ratio(&self) -> f64 {
        f64::from_bits(self.ratio.load(Ordering::Relaxed))
    }
}

/// When a settled store is rewritten to give back memory: a sled that
/// has taken in more than this many times its live data since it was
/// opened (see the module's docs).
pub const CHURN_RATIO: u64 = 4;

/// And more than this many bytes (32 MiB), below which a burst's pages
/// are few.
pub const CHURN_FLOOR: u64 = 32 << 20;

/// How many epochs [`drain_deferred`] goes through: each frees up to 8
/// bags of 64 deferred frees, so 65,536 of them free up to 33 million,
/// far more than one burst leaves. Measured: 17 to 121 ms after a burst of
/// 200,000 jobs.
const DRAIN_EPOCHS: usize = 1 << 16;

/// Frees what sled's tree left waiting for epoch-based reclamation (old
/// node versions, and a closed sled's nodes): crossbeam's collector frees
/// a few bags at a time, and only when a thread pins, so after a burst
/// that outran it the garbage waits for the next burst, holding memory.
/// Each round pins, hands this thread's bag over and collects. sled uses
/// crossbeam-epoch's default collector, the one pinned here (one crate
/// in the build: the same major version).
pub(super) fn drain_deferred() {
    for _ in 0..DRAIN_EPOCHS {
        crossbeam_epoch::pin().flush();
    }
}

/// The size past which a data dir of `live` bytes is rewritten.
fn threshold(ratio: f64, live: u64, wal: u64) -> u64 {
    (ratio * live as f64) as u64 + wal + SLACK
}

/// The floor of a store whose last rewrite could not get under the
/// threshold, grown with its live data: twice what a copy of `live` bytes
/// would take, at `copy_per_live` bytes a live byte as that copy took,
/// plus the log and [`SLACK`] (0: no such rewrite).
///
/// Many small records take sled about three times their size even in a
/// fresh copy (a million held leases: 121 MB of live data copied into
/// 388 MB), above any ratio under that. A fixed floor (twice the copy's
/// size) is reached by growth alone, so a store that only grows was
/// rewritten at every doubling, each copy larger than the store it
/// replaced, and writes waited for each (17.6 s for the last of four
/// while a million jobs were created; BENCHMARKS.md, "Third pass"). This
/// one is reached only by data a copy would leave behind.
///
/// A copy of a tiny store is mostly sled's fixed files, so its bytes per
/// live byte are taken as at most [`COPY_PER_LIVE_MAX`].
pub(super) fn grown_floor(copy_per_live: f64, live: u64, wal: u64) -> u64 {
    if copy_per_live <= 0.0 {
        return 0;
    }
    2 * ((copy_per_live.min(COPY_PER_LIVE_MAX) * live as f64) as u64 + wal + SLACK)
}

/// The most bytes a copy is taken to need per live byte in
/// [`grown_floor`]: small leases measured about 3 to 4.
const COPY_PER_LIVE_MAX: f64 = 8.0;

impl SledStore {
    /// Sets the ratio past which the store is rewritten (0: never reclaim; see
    /// [`SledStore::reclaim_if_due`]). Refused
    /// outside 0 and [`MIN_RATIO`] to [`MAX_RATIO`].
    pub fn set_reclaim_ratio(&self, ratio: f64) -> Result<()> {
        check_ratio(ratio).map_err(|why| Error::InvalidArgument {
            field: "reclaim_ratio".into(),
            message: why,
        })?;
        self.reclaim.ratio.store(ratio.to_bits(), Ordering::Relaxed);
        Ok(())
    }

    /// How many times the store was rewritten to reclaim disk space since
    /// it was opened.
    pub fn reclaims(&self) -> u64 {
        self.reclaim.done.load(Ordering::Relaxed)
    }

    /// Sets the least churn a settle rewrites the store for
    /// ([`CHURN_FLOOR`] unless set): for tests, which cannot churn that
    /// much quickly.
    #[doc(hidden)]
    pub fn set_churn_floor(&self, bytes: u64) {
        self.reclaim.churn_floor.store(bytes, Ordering::Relaxed);
    }

    /// The live data: bytes of every key and value the store holds in sled.
    pub fn live_bytes(&self) -> Result<u64> {
        self.with(|o| Ok(o.live.load(Ordering::Acquire)))
    }

    /// Rewrites the store if its data dir has outgrown its live data (see
    /// the module's docs). Errors are those that put the store out of
    /// service; a reclaim that fails otherwise is logged and changes
    /// nothing.
    pub fn reclaim_if_due(&self) -> Result<()> {
        let ratio = self.reclaim.ratio();
        if ratio == 0.0 || self.needs_reopen_now() {
            return Ok(());
        }
        let now = std::time::Instant::now();
        let not_before = *self.reclaim.not_before.lock().expect("reclaim lock");
        if not_before.is_some_and(|t| now < t) {
            return Ok(());
        }
        let (live, wal) = self.with(|o| {
            Ok((
                o.live.load(Ordering::Acquire),
                o.wal.lock().expect("wal lock").capacity(),
            ))
        })?;
        let size = store_bytes(&self.dir);
        let over = threshold(ratio, live, wal);
        let per_live = f64::from_bits(self.reclaim.copy_per_live.load(Ordering::Relaxed));
        let floor = self
            .reclaim
            .floor
            .load(Ordering::Relaxed)
            .max(grown_floor(per_live, live, wal));
        if size <= over.max(floor) {
            return Ok(());
        }
        self.reclaim_now(size, live)?;
        let took = now.elapsed();
        *self.reclaim.not_before.lock().expect("reclaim lock") =
            Some(now + took.div_f64(BUSY_SHARE));
        let after = store_bytes(&self.dir);
        // A store that its own rewrite cannot bring under the threshold
        // waits for twice its size before the next, after a restart too.
        let floor = if after > over { after * 2 } else { 0 };
        self.reclaim.floor.store(floor, Ordering::Relaxed);
        // Kept in memory only: a restart goes back to the fixed floor,
        // which is the more eager of the two.
        let per_live = if after > over && live > 0 {
            after.saturating_sub(wal + SLACK) as f64 / live as f64
        } else {
            0.0
        };
        self.reclaim
            .copy_per_live
            .store(per_live.to_bits(), Ordering::Relaxed);
        if let Err(e) = write_floor(&self.dir, floor) {
            tracing::warn!(dir = %self.dir.display(), error = %e, "cannot keep the reclaim floor; the next start may rewrite the store again");
        }
        Ok(())
    }

    /// The size below which no reclaim of disk space is due (0: none):
    /// see [`datadir::RECLAIM_FLOOR_FILE`].
    pub fn reclaim_floor(&self) -> u64 {
        self.reclaim.floor.load(Ordering::Relaxed)
    }

    /// Takes the floor a reclaim before this start left.
    pub(super) fn read_reclaim_floor(&self) {
        let floor = std::fs::read_to_string(self.dir.join(datadir::RECLAIM_FLOOR_FILE))
            .ok()
            .and_then(|t| t.trim().parse().ok())
            .unwrap_or(0);
        self.reclaim.floor.store(floor, Ordering::Relaxed);
    }

    /// After a burst, once the store has settled: rewrites the store if
    /// the churn its sleds took in since the last such rewrite (or the
    /// start) is more than `CHURN_RATIO` (4) times the live data and more
    /// than `CHURN_FLOOR` (32 MiB), unless reclaims are off or a backup is
    /// reading the store; then frees what sled left waiting for its epoch. See the module's
    /// docs. Returns whether it rewrote the store.
    pub fn settle_memory(&self) -> Result<bool> {
        let rewrote = self.rewrite_if_churned()?;
        drain_deferred();
        Ok(rewrote)
    }

    fn rewrite_if_churned(&self) -> Result<bool> {
        if self.reclaim.ratio() == 0.0 || self.needs_reopen_now() {
            return Ok(false);
        }
        // Not held back by a recent reclaim ([`BUSY_SHARE`]): the store
        // is idle, and the copy costs what the live data does, at most a
        // quarter of what the churn since the last one wrote.
        let now = std::time::Instant::now();
        let (live, absorbed, backup) = self.with(|o| {
            Ok((
                o.live.load(Ordering::Acquire),
                o.absorbed.load(Ordering::Acquire) + self.reclaim.carried.load(Ordering::Acquire),
                o.gate.try_write().is_err(),
            ))
        })?;
        let floor = self.reclaim.churn_floor.load(Ordering::Relaxed);
        // A settle never ends a backup: the next one will do.
        if backup || absorbed <= live.saturating_mul(CHURN_RATIO).max(floor) {
            return Ok(false);
        }
        let why = format!(
            "giving back memory: sled took in {:.1} MB of changes since the start or the last \
             rewrite for memory, against {:.1} MB of live data; rewriting the store",
            absorbed as f64 / 1e6,
            live as f64 / 1e6
        );
        let before = self.reclaims();
        self.rewrite(
            store_bytes(&self.dir),
            live,
            &why,
            "gave back memory: the store was rewritten",
        )?;
        *self.reclaim.not_before.lock().expect("reclaim lock") =
            Some(now + now.elapsed().div_f64(BUSY_SHARE));
        let rewrote = self.reclaims() > before;
        if rewrote {
            // What the closed sleds took in is gone with them (rewrites
            // run one at a time, on the group committer's thread).
            self.reclaim.carried.store(0, Ordering::Release);
        }
        Ok(rewrote)
    }

    fn needs_reopen_now(&self) -> bool {
        self.failed.lock().expect("failed lock").is_some()
    }

    /// Rewrites the store now (see the module's docs).
    ///
    /// A backup reading sled when the rewrite starts is ended rather than
    /// waited for, as for a checkpoint the log needs (step 1). A backup
    /// asked for meanwhile waits for the rewrite (or its giving up) and
    /// then reads the store in place: started during the copy, its own
    /// checkpoint would move the log and give the rewrite up, and its read
    /// would hold the switch back (and, the switch waiting for the store's
    /// lock, every other use of the store) for as long as its reader takes.
    pub fn reclaim_now(&self, size: u64, live: u64) -> Result<()> {
        self.rewrite(
            size,
            live,
            "reclaiming disk space: the data dir has outgrown its live data; rewriting the store \
             (writes wait for the copy)",
            "reclaimed disk space: the store was rewritten",
        )
    }

    /// Rewrites the store now, logging `why` at INFO first and `done` at
    /// the end.
    fn rewrite(&self, size: u64, live: u64, why: &str, done: &str) -> Result<()> {
        let _running = self.reclaim.running.lock().expect("reclaim lock");
        let started = leasehold_core::clock::now();
        let ms = leasehold_core::clock::wall_unix_ms();
        let new_name = format!("{}{NEW_NAME}{ms}", datadir::NEW_PREFIX);
        let aside_name = format!("{ASIDE_PREFIX}{ms}");
        let new_dir = self.dir.join(&new_name);
        tracing::info!(
            dir = %self.dir.display(),
            size_mb = size as f64 / 1e6,
            live_mb = live as f64 / 1e6,
            "{why}"
        );
        // 1. A checkpoint, then the copy, holding the log.
        let copied = self.write(|o| {
            // A backup that reads sled is ended rather than waited for, as
            // for a checkpoint the log needs.
            o.preempt.store(true, Ordering::Release);
            let mut wal = o.wal.lock().expect("wal lock");
            self.checkpoint_open(o, &mut wal)?;
            let c = o.ckpt.lock().expect("checkpoint lock").clone();
            let mark = (wal.generation(), wal.used());
            Ok(
                match no_panic(|| copy_store(o, &c, &new_dir, wal.capacity())) {
                    Ok(next) => Some((mark, next)),
                    Err(e) => {
                        tracing::warn!(
                            error = %e,
                            "cannot reclaim disk space: the copy failed; the store is unchanged"
                        );
                        let _ = std::fs::remove_dir_all(&new_dir);
                        None
                    }
                },
            )
        })?;
        let Some((mark, next)) = copied else {
            return Ok(());
        };
        let copy_took = leasehold_core::clock::now().saturating_duration_since(started);
        // 2. The switch, with no sync in between: if one logged a batch
        // since the copy, its records are not in the copy, and the
        // reclaim is given up (the next checkpoint may try again). No
        // backup reads sled now (see above), so the store's lock is
        // not held for one.
        let mut guard = self.open.write().expect("store lock");
        let unchanged = guard.as_ref().is_some_and(|o| {
            let wal = o.wal.lock().expect("wal lock");
            (wal.generation(), wal.used()) == mark
        });
        if !unchanged || self.needs_reopen_now() {
            drop(guard);
            let _ = std::fs::remove_dir_all(&new_dir);
            tracing::info!("reclaim given up: changes were logged during the copy");
            return Ok(());
        }
        self.read_epoch.fetch_add(1, Ordering::AcqRel);
        let old = guard.take();
        if let Some(o) = &old {
            self.reclaim
                .carried
                .fetch_add(o.absorbed.load(Ordering::Acquire), Ordering::AcqRel);
        }
        if let Err(e) = no_panic(move || {
            drop(old);
            Ok(())
        }) {
            tracing::warn!(error = %e, "sled failed while closing for a reclaim");
        }
        let swapped = (|| {
            wait_until_unlocked(&self.dir.join("db"), UNLOCK_WAIT)?;
            datadir::switch(&self.dir, &new_name, &aside_name)?;
            if let Err(e) = std::fs::remove_dir_all(self.dir.join(&aside_name)) {
                tracing::warn!(
                    folder = %self.dir.join(&aside_name).display(),
                    error = %e,
                    "cannot remove the old files of a reclaim (the next start tries again)"
                );
            }
            no_panic(|| Open::checked(&self.dir))
        })();
        match swapped {
            Ok(open) => {
                // The node's table is the store's already: nobody reads
                // the leases the start-up check decoded, which would hold
                // them (about 190 bytes a lease) until the next checkpoint,
                // for good on a store idle after its reclaim.
                open.first_leases.lock().expect("first leases lock").take();
                *guard = Some(open)
            }
            Err(e) => {
                // Out of service until the recovery thread's reopen, which
                // finishes the switch first.
                self.failed
                    .lock()
                    .expect("failed lock")
                    .get_or_insert_with(|| format!("reclaim of disk space: {e}"));
                return Err(e);
            }
        }
        self.read_epoch.fetch_add(1, Ordering::AcqRel);
        drop(guard);
        self.reclaim.done.fetch_add(1, Ordering::Relaxed);
        let after = store_bytes(&self.dir);
        tracing::info!(
            before_mb = size as f64 / 1e6,
            after_mb = after as f64 / 1e6,
            live_mb = live as f64 / 1e6,
            generation = next.generation,
            copy_ms = copy_took.as_millis() as u64,
            total_ms = leasehold_core::clock::now()
                .saturating_duration_since(started)
                .as_millis() as u64,
            "{done}"
        );
        Ok(())
    }
}

/// Writes a copy of sled's records into a new store at `new` (created),
/// with `c`'s checkpoint one generation on, an empty log of that
/// generation (`wal_capacity` bytes) and a manifest, all durable. Returns
/// the new checkpoint. Fails, leaving `new` to its caller, when the copy
/// does not count and hash to `c`.
fn copy_store(o: &Open, c: &Checkpoint, new: &Path, wal_capacity: u64) -> Result<Checkpoint> {
    let io = |what: &str, p: &Path, e: std::io::Error| {
        Error::storage(format!("cannot {what} {}: {e}", p.display()))
    };
    std::fs::create_dir(new).map_err(|e| io("create", new, e))?;
    let mut next = c.clone();
    next.generation = c.generation + 1;
    next.unix_ms = leasehold_core::clock::wall_unix_ms();
    {
        let (db, leases, values, log) = open_sled(new)?;
        db.insert(MARKER_KEY, MARKER_VALUE)
            .map_err(Error::storage)?;
        let mut found = Checkpoint::default();
        let mut records = 0u64;
        for (tree, from, to) in [
            (TREE_LEASES, &o.leases, &leases),
            (TREE_VALUES, &o.values, &values),
        ] {
            // The tree's shape first, every key with an empty value, then
            // the values: sled rewrites a leaf whole at every split and
            // every tenth change, so values inserted as the tree grows are
            // written about three times over (a new sled of 6.5 MB of 1 to
            // 64 KiB values took 19 MB); set into leaves that no longer
            // split, each is written about once (6.7 MB).
            for k in from.iter().keys() {
                to.insert(k.map_err(Error::storage)?, &[][..])
                    .map_err(Error::storage)?;
            }
            for kv in from.iter() {
                let (k, v) = kv.map_err(Error::storage)?;
                found.digest = found.digest.wrapping_add(record_hash(tree, &k, &v));
                match tree {
                    TREE_LEASES => found.leases += 1,
                    _ => found.values += 1,
                }
                to.insert(k, v).map_err(Error::storage)?;
                records += 1;
                if records % PROGRESS_RECORDS == 0 {
                    tracing::info!(records, "reclaiming disk space: records copied");
                }
            }
        }
        if (found.leases, found.values, found.digest) != (c.leases, c.values, c.digest) {
            return Err(Error::storage(format!(
                "the copy holds {} lease and {} value records (digest {:016x}), but sled's \
                 checkpoint record says {} and {} (digest {:016x})",
                found.leases, found.values, found.digest, c.leases, c.values, c.digest
            )));
        }
        db.insert(CHECKPOINT_KEY, next.encode())
            .map_err(Error::storage)?;
        db.flush().map_err(Error::storage)?;
        sync_blobs(&new.join("blobs")).map_err(|e| io("sync", &new.join("blobs"), e))?;
        log.sync_data()
            .map_err(|e| io("sync", &new.join("db"), e))?;
        drop((leases, values, db));
    }
    wait_until_unlocked(&new.join("db"), UNLOCK_WAIT)?;
    let wal_path: PathBuf = new.join(WAL_FILE);
    // `Wal::create` takes the file's size, header included.
    Wal::create(
        &wal_path,
        wal_capacity + crate::wal::HEADER,
        c.store_id,
        next.generation,
    )
    .map_err(|e| io("create", &wal_path, e))?;
    manifest::write(new, &next).map_err(|e| io("write", &new.join(manifest::FILE), e))?;
    write_marker(new)?;
    std::fs::File::open(new)
        .and_then(|d| d.sync_all())
        .map_err(|e| io("sync", new, e))?;
    Ok(next)
}
