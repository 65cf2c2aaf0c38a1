//! A checkpoint killed or failed at any of its calls never lets a token
//! repeat, and a failed one heals by itself.
//!
//! A checkpoint (`Open::checkpoint` in the store) applies the logged
//! records to sled in one transaction, flushes sled (its `pwrite64`s and
//! `sync_file_range`s of `db`, on sled's own threads), `fdatasync`s sled's
//! log and any blob files, resets the log (`pwrite64` of zeroes and of the
//! new header, each followed by an `fdatasync` of `wal`), and writes the
//! manifest (`write` and `fdatasync` of `leasehold.manifest.new`, `rename`,
//! `fsync` of the data dir). A running server checkpoints when its log is
//! half full or 8,192 keys wait for sled, at a clean stop, and before every backup: the tests force one
//! with `leasehold backup` on an idle server (so that every call counted is
//! the checkpoint's), after writes that the log holds and sled does not.
//!
//! strace attaches to the server, counts one kind of call (on one file,
//! where other threads make the same kind elsewhere: `-P`), and acts at
//! its `n`-th, for every `n` until a checkpoint finishes untouched: every
//! point of [`POINTS`], none sampled (a checkpoint makes about fifteen such
//! calls). strace counts per thread, so a kind made on several of sled's
//! threads is acted on at the first thread to reach `n`.
//!
//! - SIGKILLed there, the data dir must pass `check` and start with every
//!   acknowledged value and every next token above every token issued.
//! - Failed there (EIO), the server must heal by itself once the disk
//!   answers (strace detached): `/healthz` 200 and changes accepted, on
//!   the same process; then after a SIGKILL it starts with everything
//!   acknowledged, tokens above every token issued, those of the healed
//!   server included.
//!
//! A census run first traces every kind of call that writes, moves or
//! removes a file, and requires that a checkpoint makes none of the kinds
//! outside [`POINTS`] (`unlink`, `mkdir`, `ftruncate`, ...): a new kind
//! must join the points.

use crate::common;
use crate::faults::{inject, Injected};
use crate::integrity::{check, copy_dir, load, try_start, verify, History};

use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{bin, ServerProcess};
use leasehold::client::Client;

/// The calls of a checkpoint: each kind counted on its own, on one file of
/// the data dir where other threads make the same kind elsewhere (sockets,
/// eventfds).
const POINTS: [(&str, Option<&str>); 7] = [
    ("pwrite64", Some("db")),
    ("sync_file_range", Some("db")),
    ("fdatasync", None),
    ("pwrite64", Some("wal")),
    ("write", Some("leasehold.manifest.new")),
    ("rename", None),
    ("fsync", None),
];

/// Kinds a checkpoint must not make (see the census).
const NEVER: [&str; 10] = [
    "unlink",
    "unlinkat",
    "mkdir",
    "mkdirat",
    "ftruncate",
    "fallocate",
    "renameat",
    "renameat2",
    "pwritev",
    "pwritev2",
];

/// A data dir with a history, SIGKILLed (its log holds the last changes),
/// with 60 KiB values in one job (sled keeps such pages in blob files).
async fn template(root: &Path) -> (PathBuf, History) {
    let dir = root.join("template");
    let s = ServerProcess::start(&dir, &[]);
    let mut h = History::default();
    load(&s.url(), &mut h, &["alpha", "beta"], 3, 0).await;
    load(&s.url(), &mut h, &["big"], 1, 12).await;
    load(&s.url(), &mut h, &["alpha"], 2, 0).await;
    s.kill9();
    (dir, h)
}

/// A server on a fresh copy of `template` at `dir` that has acknowledged
/// writes since its start (its own checkpoint): the log holds records
/// that sled does not, for the next checkpoint to apply.
async fn running(template: &Path, dir: &Path, h: &mut History) -> ServerProcess {
    let _ = std::fs::remove_dir_all(dir);
    copy_dir(template, dir);
    let _ = std::fs::remove_file(dir.join("leasehold.lock"));
    let s = ServerProcess::spawn_with_stderr(
        common::serve_command(dir),
        dir,
        std::process::Stdio::null(),
    );
    load(&s.url(), h, &["ck"], 2, 2).await;
    load(&s.url(), h, &["beta"], 1, 0).await;
    s
}

/// `leasehold backup` of the server at `url`: the server checkpoints
/// before it reads. Whether the backup succeeded.
fn backup(url: &str, out: &Path) -> bool {
    let _ = std::fs::remove_file(out);
    Command::new(bin())
        .args(["backup", "--server", url, "--out"])
        .arg(out)
        .output()
        .unwrap()
        .status
        .success()
}

/// strace's arguments for `action` (`signal=KILL` or `error=EIO`) at the
/// `n`-th call of `syscall` (on `file` of `dir`).
fn args(dir: &Path, syscall: &str, file: Option<&str>, action: &str, n: u32) -> Vec<String> {
    let mut a = vec![
        "-e".into(),
        format!("trace={syscall}"),
        "-e".into(),
        format!("inject={syscall}:{action}:when={n}"),
    ];
    if let Some(f) = file {
        a.push("-P".into());
        a.push(dir.join(f).to_string_lossy().into_owned());
    }
    a
}

fn strace(server: &ServerProcess, args: &[String]) -> (std::process::Child, Injected) {
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    inject(server, &a)
}

/// Detaches strace (SIGINT) and reaps it.
fn detach(mut strace: std::process::Child) {
    common::signal(strace.id(), libc::SIGINT);
    strace.wait().unwrap();
}

/// Every kind of call of one checkpoint that writes, moves or removes a
/// file of `dir`, counted from strace's trace of a forced checkpoint.
async fn census(template: &Path, dir: &Path) -> BTreeMap<String, usize> {
    let mut h = History::default();
    let s = running(template, dir, &mut h).await;
    let kinds: Vec<&str> = POINTS.iter().map(|p| p.0).chain(NEVER).collect();
    let trace = dir.with_extension("trace");
    let (st, _) = strace(
        &s,
        &[
            "-yy".into(),
            "-o".into(),
            trace.to_string_lossy().into_owned(),
            "-e".into(),
            format!("trace={}", kinds.join(",")),
        ],
    );
    assert!(backup(&s.url(), &dir.with_extension("lhb")));
    detach(st);
    s.kill9();
    let mut counts = BTreeMap::new();
    let within = format!("{}", dir.display());
    for line in std::fs::read_to_string(&trace).unwrap().lines() {
        // "PID name(ARGS) = R", or its "<... name resumed>" half.
        let Some(call) = line.split_whitespace().nth(1) else {
            continue;
        };
        let Some(name) = call.split('(').next() else {
            continue;
        };
        if kinds.contains(&name) && line.contains(&within) {
            *counts.entry(name.to_owned()).or_default() += 1;
        }
    }
    counts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_killed_at_any_call_never_lets_a_token_repeat() {
    let root = tempfile::tempdir().unwrap();
    let (template, base) = template(root.path()).await;
    let dir = root.path().join("d");
    let counts = census(&template, &dir).await;
    eprintln!("one checkpoint's calls: {counts:?}");
    for k in NEVER {
        assert!(
            !counts.contains_key(k),
            "a checkpoint makes {k}: add it to POINTS ({counts:?})"
        );
    }
    let mut kills = BTreeMap::new();
    for (syscall, file) in POINTS {
        for n in 1.. {
            let mut h = base.clone();
            let mut s = running(&template, &dir, &mut h).await;
            let (st, _) = strace(&s, &args(&dir, syscall, file, "signal=KILL", n));
            let what = format!("killed at {syscall} #{n} on {}", file.unwrap_or("any file"));
            if backup(&s.url(), &dir.with_extension("lhb")) {
                // The checkpoint made fewer such calls: past the last point.
                detach(st);
                assert!(s.child.try_wait().unwrap().is_none(), "{what}: died");
                s.kill9();
                break;
            }
            let status = s.child.wait().unwrap();
            assert_eq!(status.signal(), Some(libc::SIGKILL), "{what}: {status:?}");
            let mut st = st;
            st.wait().unwrap();
            *kills
                .entry(format!("{syscall} {}", file.unwrap_or("")))
                .or_insert(0) += 1;
            let (ok, report) = check(&dir);
            assert!(ok, "{what}: check says:\n{report}");
            let s = try_start(&dir)
                .unwrap_or_else(|(code, err)| panic!("{what}: refused to start ({code}):\n{err}"));
            verify(&s.url(), &h).await;
            s.kill9();
        }
    }
    eprintln!("checkpoint killed at: {kills:?}");
    let total: u32 = kills.values().sum();
    assert!(
        total >= 10 && kills.len() == POINTS.len(),
        "only {total} kill points ({kills:?}): strace injected nothing?"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_failed_at_any_call_heals_and_never_lets_a_token_repeat() {
    let root = tempfile::tempdir().unwrap();
    let (template, base) = template(root.path()).await;
    let dir = root.path().join("d");
    let mut failed = BTreeMap::new();
    for (syscall, file) in POINTS {
        for n in 1.. {
            let mut h = base.clone();
            let s = running(&template, &dir, &mut h).await;
            let before = store_counts(&s).await;
            let (st, injected) = strace(&s, &args(&dir, syscall, file, "error=EIO", n));
            let what = format!("failed at {syscall} #{n} on {}", file.unwrap_or("any file"));
            let backed_up = backup(&s.url(), &dir.with_extension("lhb"));
            // Detached: the disk answers again.
            detach(st);
            if injected.total() == 0 {
                assert!(backed_up, "{what}: nothing failed, yet the backup did");
                s.kill9();
                break;
            }
            *failed
                .entry(format!("{syscall} {}", file.unwrap_or("")))
                .or_insert(0) += 1;
            if !backed_up {
                // The failed checkpoint is the store's failure at once, not
                // at the next change: counted, and the store reopened,
                // while nobody makes a change.
                common::eventually(&format!("{what}: the failure reported and healed"), || {
                    let s = &s;
                    async move {
                        let (failures, recoveries) = store_counts(s).await;
                        (failures > before.0 && recoveries > before.1).then_some(())
                    }
                })
                .await;
            }
            heals(&s, &mut h, &what, !backed_up).await;
            let mut s = s;
            assert!(s.child.try_wait().unwrap().is_none(), "{what}: died");
            s.kill9();
            let s = try_start(&dir).unwrap_or_else(|(code, err)| {
                panic!("{what}, healed, then SIGKILLed: refused to start ({code}):\n{err}")
            });
            verify(&s.url(), &h).await;
            s.kill9();
        }
    }
    eprintln!("checkpoint failed at: {failed:?}");
    let total: u32 = failed.values().sum();
    assert!(
        total >= 10 && failed.len() == POINTS.len(),
        "only {total} failure points ({failed:?}): strace injected nothing?"
    );
}

/// `leasehold_store_failures_total` and `leasehold_store_recoveries_total`
/// from the server's `/metrics`.
async fn store_counts(s: &ServerProcess) -> (f64, f64) {
    let (code, text) = common::admin_request(s.admin, "/metrics").await;
    assert_eq!(code, 200, "{text}");
    let get = |name| common::metric(&text, name).unwrap_or_else(|| panic!("no {name}:\n{text}"));
    (
        get("leasehold_store_failures_total"),
        get("leasehold_store_recoveries_total"),
    )
}

/// The server heals by itself: `/healthz` answers 200 and a change is
/// accepted (a grant, and a write with its token, added to `h`). With
/// `first_try`, the server has already reopened its store: the first
/// grant asked for must be accepted.
async fn heals(s: &ServerProcess, h: &mut History, what: &str, first_try: bool) {
    let c = Client::connect(&s.url()).await.unwrap();
    let admin = s.admin;
    let token = common::eventually(&format!("{what}: healed"), || {
        let c = c.clone();
        async move {
            if common::admin_request(admin, "/healthz").await.0 != 200 {
                return None;
            }
            let a = c
                .acquire(
                    "healed",
                    "h",
                    std::time::Duration::from_secs(30),
                    std::time::Duration::ZERO,
                )
                .await;
            match a {
                Ok(a) => Some(a.lease.token),
                Err(e) if first_try => panic!("{what}: reopened, yet a grant failed: {e:?}"),
                Err(_) => None,
            }
        }
    })
    .await;
    let prev = h.tokens.insert("healed".into(), token);
    assert!(prev.is_none_or(|p| token > p));
    let v = format!("after {what}").into_bytes();
    c.checked_write("healed", token, b"k", v.clone())
        .await
        .unwrap_or_else(|e| panic!("{what}: a write after healing: {e:?}"));
    h.values.insert(("healed".into(), "k".into()), v);
    c.release("healed", "h", token).await.unwrap();
}
