//! The data dir as a whole: who is using it, and a switch of the store
//! (`restore`, `recover`) that no interruption can leave half done.
//!
//! # The lock
//!
//! Every process that opens a data dir takes `leasehold.lock` in it with
//! `flock`: the server and the tools that change the data dir
//! (`restore`, `recover`) exclusively, `leasehold check` shared. The
//! holder of the exclusive lock writes its pid and what it is into the
//! file, so that a refusal names the process. The kernel drops a lock when
//! its process dies, SIGKILL included, so a lock file left behind never
//! blocks anyone. sled's own lock on its `db` file is older and still
//! there; it cannot cover a switch, which moves `db` away.
//!
//! **Nothing changes a data dir that a live server uses**: two writers
//! would each believe they know the newest token.
//!
//! # The switch
//!
//! `restore` and `recover` write the new store whole in a folder
//! `.new-<ms>` inside the data dir, durable, and only then switch:
//!
//! 1. `leasehold.switch` is written durably: the new folder, the folder
//!    the old files go to (`replaced-<ms>` or `damaged-<ms>`), and the
//!    phase `aside`;
//! 2. every old entry moves into that folder, the directory is synced, and
//!    the switch file is rewritten with the phase `move`;
//! 3. every entry of the new folder moves in, the manifest last, and the
//!    directory is synced;
//! 4. the new folder and the switch file are removed.
//!
//! Whoever opens the data dir next finishes a switch it finds
//! ([`finish_switch`]): the server at its start, `check` on its copy,
//! `restore` and `recover` before they begin. Every rename is atomic, and
//! the phase says which side an entry of the data dir belongs to, so
//! finishing is the same steps again from where they stopped. **A data
//! dir in the middle of a switch never looks empty**: the switch file is
//! durable before the first rename, and nothing opens the store without
//! finishing the switch first.

use std::fs::File;
use std::io::{self, Write as _};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use leasehold_core::error::{Error, Result};

use crate::manifest;

/// The lock file in the data dir.
pub const LOCK_FILE: &str = "leasehold.lock";
/// The switch's intent file in the data dir.
pub const SWITCH_FILE: &str = "leasehold.switch";
const SWITCH_FIRST_LINE: &str = "leasehold-switch 1";
/// Where a new store is written before the switch.
pub const NEW_PREFIX: &str = ".new-";
/// Where the old files of a data dir go: restore's and recover's, and a
/// reclaim's of disk space (removed once the switch is done).
pub const ASIDE_PREFIXES: [&str; 3] = ["replaced-", "damaged-", crate::sled::RECLAIM_ASIDE];

/// The server's signing keys for grants' proofs (PKCS#8 PEM blocks, the
/// first signing; made and read by the server, `leasehold_server::proofs`).
/// Not a store entry: restore and recover leave it in place, and backups
/// carry it beside the records ([`signing_keys`], [`merge_signing_keys`]).
pub const KEYS_FILE: &str = "signing-keys.pem";

/// Written beside [`KEYS_FILE`] when a key is made or restored, and kept:
/// with it and without the key file, the key is lost (a start and `check`
/// refuse); with neither, the data dir predates signed grants.
pub const KEYS_MARKER: &str = "signing-keys.made";

/// The size below which the store is not rewritten to reclaim disk space
/// (decimal bytes): twice what the last rewrite came to, when even that
/// was over the ratio (many small records take sled several times their
/// own size). Written by a reclaim, read at start, so that each start
/// does not rewrite such a store again. Not a store entry; a missing or
/// unreadable one is no floor.
pub const RECLAIM_FLOOR_FILE: &str = "reclaim-floor";

/// Whether the entry `name` of a data dir belongs to the store (as opposed
/// to the lock, a switch, the signing keys, or a folder set aside or being
/// written).
pub fn is_store_entry(name: &str) -> bool {
    name != LOCK_FILE
        && name != KEYS_FILE
        && name != KEYS_MARKER
        && !name.starts_with(RECLAIM_FLOOR_FILE)
        && !name.starts_with(".signing-keys")
        && !name.starts_with(SWITCH_FILE)
        && !name.starts_with(NEW_PREFIX)
        && !ASIDE_PREFIXES.iter().any(|p| name.starts_with(p))
}

/// A lock on a data dir, held until dropped (or the process ends).
pub struct DirLock {
    _file: File,
}

impl std::fmt::Debug for DirLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DirLock")
    }
}

impl DirLock {
    /// Takes the data dir's lock exclusively, for `what` (a few words: the
    /// process as an operator would name it), or fails naming the process
    /// that holds it. The data dir must exist.
    pub fn exclusive(dir: &Path, what: &str) -> Result<DirLock> {
        let p = dir.join(LOCK_FILE);
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&p)
            .map_err(|e| Error::storage(format!("cannot open {}: {e}", p.display())))?;
        if !try_flock(&f, libc::LOCK_EX, &p)? {
            return Err(in_use(dir, &p));
        }
        let line = format!("pid {} {what}\n", std::process::id());
        f.set_len(0)
            .and_then(|()| f.write_all(line.as_bytes()))
            .and_then(|()| f.sync_data())
            .map_err(|e| Error::storage(format!("cannot write {}: {e}", p.display())))?;
        Ok(DirLock { _file: f })
    }

    /// Makes sure no process holds the data dir exclusively, and keeps any
    /// from taking it while this lives: for a reader that changes nothing.
    /// Writes nothing: without a lock file, it tests sled's lock on `db`
    /// (a server of an earlier version), and holds that one.
    pub fn shared(dir: &Path) -> Result<Option<DirLock>> {
        for name in [LOCK_FILE, "db"] {
            let p = dir.join(name);
            let f = match File::open(&p) {
                Ok(f) => f,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(Error::storage(format!("cannot open {}: {e}", p.display()))),
            };
            if !try_flock(&f, libc::LOCK_SH, &p)? {
                return Err(in_use(dir, &p));
            }
            return Ok(Some(DirLock { _file: f }));
        }
        Ok(None)
    }
}

/// `flock(op | LOCK_NB)`: `Ok(false)` when another holds it.
fn try_flock(f: &File, op: libc::c_int, p: &Path) -> Result<bool> {
    // SAFETY: flock on a descriptor that `f` keeps open.
    if unsafe { libc::flock(f.as_raw_fd(), op | libc::LOCK_NB) } == 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    if e.kind() == io::ErrorKind::WouldBlock {
        return Ok(false);
    }
    Err(Error::storage(format!("cannot lock {}: {e}", p.display())))
}

/// The refusal for a data dir in use, naming the process when the lock
/// file says which.
fn in_use(dir: &Path, lock: &Path) -> Error {
    let who = std::fs::read_to_string(dir.join(LOCK_FILE))
        .ok()
        .and_then(|t| {
            let t = t.trim();
            let rest = t.strip_prefix("pid ")?;
            let (pid, what) = rest
                .split_once(' ')
                .unwrap_or((rest, "a leasehold process"));
            Some(format!("process {pid} ({what})"))
        })
        .unwrap_or_else(|| "another leasehold process".to_owned());
    Error::storage(format!(
        "data dir {} is in use by {who}, which holds {}; stop it first (for a running server, \
         `leasehold backup` reads its state safely)",
        dir.display(),
        lock.display()
    ))
}

/// Where a switch stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// The old entries are moving into the aside folder.
    Aside,
    /// The new entries are moving in.
    Move,
}

/// A switch under way, as its intent file names it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Switch {
    new: String,
    aside: String,
    phase: Phase,
}

impl Switch {
    fn to_text(&self) -> String {
        let phase = match self.phase {
            Phase::Aside => "aside",
            Phase::Move => "move",
        };
        format!(
            "{SWITCH_FIRST_LINE}\nnew {}\naside {}\nphase {phase}\n",
            self.new, self.aside
        )
    }

    fn from_text(t: &str) -> std::result::Result<Switch, String> {
        let mut lines = t.lines();
        if lines.next() != Some(SWITCH_FIRST_LINE) {
            return Err(format!("its first line is not `{SWITCH_FIRST_LINE}`"));
        }
        let mut field = |k: &str| {
            lines
                .next()
                .and_then(|l| l.strip_prefix(k))
                .and_then(|v| v.strip_prefix(' '))
                .map(str::to_owned)
                .ok_or_else(|| format!("it has no `{k}` line where one belongs"))
        };
        let (new, aside, phase) = (field("new")?, field("aside")?, field("phase")?);
        // Plain names of the kinds a switch makes, nothing else: a switch
        // file moves files only within the data dir.
        let plain = |n: &str| !n.is_empty() && !n.contains('/') && n != "." && n != "..";
        if !plain(&new) || !new.starts_with(NEW_PREFIX) {
            return Err(format!("`new {new}` is not a folder a switch makes"));
        }
        if !plain(&aside) || !ASIDE_PREFIXES.iter().any(|p| aside.starts_with(p)) {
            return Err(format!("`aside {aside}` is not a folder a switch makes"));
        }
        let phase = match phase.as_str() {
            "aside" => Phase::Aside,
            "move" => Phase::Move,
            other => return Err(format!("`phase {other}` is not a phase")),
        };
        Ok(Switch { new, aside, phase })
    }

    /// Writes the intent file atomically and durably.
    fn write(&self, dir: &Path) -> io::Result<()> {
        let tmp = dir.join(format!("{SWITCH_FILE}.new"));
        let mut f = File::create(&tmp)?;
        f.write_all(self.to_text().as_bytes())?;
        f.sync_data()?;
        std::fs::rename(&tmp, dir.join(SWITCH_FILE))?;
        sync_dir(dir)
    }
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Replaces the store in `dir` with the complete, durable store in the
/// folder `new` inside it; the old entries go to the folder `aside` inside
/// it. Any interruption leaves a switch that [`finish_switch`] completes.
/// The caller holds the data dir's lock.
pub fn switch(dir: &Path, new: &str, aside: &str) -> Result<()> {
    let s = Switch {
        new: new.to_owned(),
        aside: aside.to_owned(),
        phase: Phase::Aside,
    };
    // The new folder's own entry, durable before the intent names it.
    sync_dir(dir)
        .and_then(|()| s.write(dir))
        .map_err(|e| switch_error(dir, &e))?;
    run(dir, s)
}

/// Finishes a switch that an interrupted `restore` or `recover` left in
/// `dir`, if there is one. Returns a line for the operator when it did.
/// The caller holds the data dir's lock (or works on a copy).
pub fn finish_switch(dir: &Path) -> Result<Option<String>> {
    let p = dir.join(SWITCH_FILE);
    let t = match std::fs::read_to_string(&p) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::storage(format!("cannot read {}: {e}", p.display()))),
    };
    let s = Switch::from_text(&t).map_err(|why| {
        Error::storage(format!(
            "{} names an interrupted restore or recover, but {why}: damaged or edited. The new \
             store is in a `{NEW_PREFIX}…` folder and the old one in a `replaced-…` or \
             `damaged-…` folder inside the data dir; put the right files back by hand, or run \
             `leasehold recover`",
            p.display()
        ))
    })?;
    let line = format!(
        "finished an interrupted switch of the store (new files from {}, old ones in {})",
        s.new, s.aside
    );
    run(dir, s)?;
    Ok(Some(line))
}

/// The switch's steps, from `s.phase` on.
fn run(dir: &Path, mut s: Switch) -> Result<()> {
    let err = |e: io::Error| switch_error(dir, &e);
    let aside = dir.join(&s.aside);
    let new = dir.join(&s.new);
    if s.phase == Phase::Aside {
        std::fs::create_dir_all(&aside).map_err(err)?;
        for e in entries(dir).map_err(err)? {
            let name = e.to_string_lossy().into_owned();
            if is_store_entry(&name) {
                std::fs::rename(dir.join(&e), aside.join(&e)).map_err(err)?;
            }
        }
        sync_dir(&aside).and_then(|()| sync_dir(dir)).map_err(err)?;
        // Nothing was there to set aside (a new data dir).
        if entries(&aside).map_err(err)?.is_empty() {
            std::fs::remove_dir(&aside).map_err(err)?;
        }
        s.phase = Phase::Move;
        s.write(dir).map_err(err)?;
    }
    if new.exists() {
        let mut moving: Vec<_> = entries(&new)
            .map_err(err)?
            .into_iter()
            .filter(|n| n != LOCK_FILE)
            .collect();
        // The manifest last: a store without it is refused, never taken
        // for a new one.
        moving.sort_by_key(|n| n == manifest::FILE);
        for n in moving {
            std::fs::rename(new.join(&n), dir.join(&n)).map_err(err)?;
        }
        sync_dir(dir).map_err(err)?;
        std::fs::remove_dir_all(&new).map_err(err)?;
    }
    std::fs::remove_file(dir.join(SWITCH_FILE)).map_err(err)?;
    sync_dir(dir).map_err(err)?;
    Ok(())
}

fn entries(dir: &Path) -> io::Result<Vec<std::ffi::OsString>> {
    std::fs::read_dir(dir)?
        .map(|e| e.map(|e| e.file_name()))
        .collect()
}

fn switch_error(dir: &Path, e: &io::Error) -> Error {
    Error::storage(format!(
        "cannot switch the store in {}: {e}; the next start, restore or recover finishes the \
         switch ({} names it)",
        dir.display(),
        SWITCH_FILE
    ))
}

/// Folders that a restore or recover left in `dir` without a switch to
/// finish: set-aside folders and unfinished new stores. A data dir that
/// holds no store but these was emptied by an interrupted tool (of an
/// earlier version), not new.
pub fn leftovers(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n.starts_with(NEW_PREFIX) || ASIDE_PREFIXES.iter().any(|p| n.starts_with(p))
        })
        .map(|e| e.path())
        .collect();
    out.sort();
    out
}

/// The data dir's signing keys file, if it has one.
pub fn signing_keys(dir: &Path) -> Result<Option<Vec<u8>>> {
    match std::fs::read(dir.join(KEYS_FILE)) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::storage(format!(
            "cannot read {}: {e}",
            dir.join(KEYS_FILE).display()
        ))),
    }
}

pub use leasehold_core::record::pem_blocks;

/// Adds the keys of `keys` (a backup's) to the data dir's keys file: the
/// data dir's own keys stay first (the one signing stays the same), the
/// others are listed after them, so proofs made under either verify. A
/// data dir without a keys file takes `keys` whole. Written atomically,
/// mode 0600. Returns how many keys were added.
pub fn merge_signing_keys(dir: &Path, keys: &[u8]) -> Result<usize> {
    let incoming = std::str::from_utf8(keys)
        .map_err(|_| Error::storage("the backup's signing keys are not text".to_owned()))?;
    let have = signing_keys(dir)?
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default();
    let mut blocks = pem_blocks(&have);
    let mut added = 0;
    for b in pem_blocks(incoming) {
        if !blocks.contains(&b) {
            blocks.push(b);
            added += 1;
        }
    }
    if added > 0 {
        write_private(dir, KEYS_FILE, blocks.concat().as_bytes()).map_err(|e| {
            Error::storage(format!(
                "cannot write {}: {e}",
                dir.join(KEYS_FILE).display()
            ))
        })?;
    }
    Ok(added)
}

/// Writes `bytes` as `dir/name`, mode 0600: a new file, fsync, rename,
/// fsync of the directory.
fn write_private(dir: &Path, name: &str, bytes: &[u8]) -> io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let tmp = dir.join(format!(".{name}.new"));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, dir.join(name))?;
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_switch_file_names_only_folders_a_switch_makes() {
        let s = Switch {
            new: ".new-1".into(),
            aside: "replaced-1".into(),
            phase: Phase::Move,
        };
        assert_eq!(Switch::from_text(&s.to_text()), Ok(s));
        for bad in [
            "leasehold-switch 1\nnew ../x\naside replaced-1\nphase move\n",
            "leasehold-switch 1\nnew .new-1\naside /etc\nphase move\n",
            "leasehold-switch 1\nnew .new-1\naside replaced-1/../..\nphase move\n",
            "leasehold-switch 1\nnew .new-1\naside replaced-1\nphase done\n",
            "leasehold-switch 1\nnew .new-1\n",
            "",
        ] {
            assert!(Switch::from_text(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_switch_interrupted_after_any_step_finishes_the_same() {
        // Every prefix of the steps, then finish_switch: the same result.
        for stop_after in 0..6 {
            let d = tempfile::tempdir().unwrap();
            let dir = d.path();
            for n in ["db", "conf", "wal", manifest::FILE] {
                std::fs::write(dir.join(n), format!("old {n}")).unwrap();
            }
            std::fs::create_dir(dir.join(".new-5")).unwrap();
            for n in ["db", "conf", "wal", manifest::FILE, LOCK_FILE] {
                std::fs::write(dir.join(".new-5").join(n), format!("new {n}")).unwrap();
            }
            let mut s = Switch {
                new: ".new-5".into(),
                aside: "replaced-5".into(),
                phase: Phase::Aside,
            };
            s.write(dir).unwrap();
            // Do part of the work by hand, as an interrupted run would.
            std::fs::create_dir(dir.join("replaced-5")).unwrap();
            let old = ["conf", "db", manifest::FILE, "wal"];
            for n in old.iter().take(stop_after.min(4)) {
                std::fs::rename(dir.join(n), dir.join("replaced-5").join(n)).unwrap();
            }
            if stop_after >= 4 {
                s.phase = Phase::Move;
                s.write(dir).unwrap();
            }
            if stop_after >= 5 {
                std::fs::rename(dir.join(".new-5/db"), dir.join("db")).unwrap();
            }
            assert!(finish_switch(dir).unwrap().is_some());
            for n in old {
                assert_eq!(
                    std::fs::read_to_string(dir.join(n)).unwrap(),
                    format!("new {n}"),
                    "stopped after {stop_after}"
                );
                assert_eq!(
                    std::fs::read_to_string(dir.join("replaced-5").join(n)).unwrap(),
                    format!("old {n}")
                );
            }
            assert!(!dir.join(".new-5").exists() && !dir.join(SWITCH_FILE).exists());
            assert_eq!(finish_switch(dir).unwrap(), None);
        }
    }

    #[test]
    fn a_second_exclusive_lock_is_refused_naming_the_first() {
        let d = tempfile::tempdir().unwrap();
        let held = DirLock::exclusive(d.path(), "leasehold serve").unwrap();
        let e = DirLock::exclusive(d.path(), "leasehold restore").unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains(&format!("process {} (leasehold serve)", std::process::id())),
            "{msg}"
        );
        assert!(DirLock::shared(d.path()).is_err());
        drop(held);
        let r = DirLock::shared(d.path()).unwrap();
        assert!(r.is_some());
        assert!(DirLock::exclusive(d.path(), "leasehold restore").is_err());
        drop(r);
        DirLock::exclusive(d.path(), "leasehold restore").unwrap();
    }
}
