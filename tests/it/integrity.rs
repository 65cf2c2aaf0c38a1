//! A damaged data dir never starts quietly, and tokens never go back.
//!
//! Real server processes on real data dirs: state is written over gRPC,
//! the server is SIGKILLed or stopped cleanly, one file of the data dir is
//! damaged (deleted, truncated, a byte flipped, replaced by the same file
//! from an older state), and the server started again. It must either
//! refuse to start, naming the file, or start with every acknowledged write
//! present and every next token above every token issued before.
//! `leasehold check` must agree with the server. Then the ways back:
//! backup, restore and recover, end to end.

use crate::common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{bin, serve_command, ServerProcess};
use leasehold::client::Client;

/// Everything acknowledged: each job's highest token, each key's value.
#[derive(Default, Clone)]
pub(crate) struct History {
    pub(crate) tokens: BTreeMap<String, u64>,
    pub(crate) values: BTreeMap<(String, String), Vec<u8>>,
}

/// Grants each job `rounds` times (a new holder each time, releasing in
/// between) and writes keys with each grant's token, big ones included so
/// that sled keeps some pages in blob files.
pub(crate) async fn load(url: &str, h: &mut History, jobs: &[&str], rounds: u32, big: usize) {
    let c = Client::connect(url).await.unwrap();
    for job in jobs {
        for r in 0..rounds {
            let holder = format!("w{r}@{}", uuid_like());
            let a = c
                .acquire(job, &holder, Duration::from_secs(5), Duration::from_secs(5))
                .await
                .unwrap();
            assert!(a.acquired);
            let token = a.lease.token;
            let prev = h.tokens.insert(job.to_string(), token);
            assert!(prev.is_none_or(|p| token > p), "tokens go up");
            for k in 0..big {
                let key = format!("big{k}");
                let v = vec![(token as u8) ^ (k as u8) | 1; 60 * 1024];
                c.checked_write(job, token, key.as_bytes(), v.clone())
                    .await
                    .unwrap();
                h.values.insert((job.to_string(), key), v);
            }
            let key = format!("k{}", r % 3);
            let v = format!("{job}:{token}:{r}").into_bytes();
            c.checked_write(job, token, key.as_bytes(), v.clone())
                .await
                .unwrap();
            h.values.insert((job.to_string(), key), v);
            c.release(job, &holder, token).await.unwrap();
        }
    }
}

fn uuid_like() -> String {
    format!("{:x}", std::time::UNIX_EPOCH.elapsed().unwrap().as_nanos())
}

/// Checks that a started server holds all of `h`, and that each job's next
/// grant is above every token issued before.
pub(crate) async fn verify(url: &str, h: &History) {
    let c = Client::connect(url).await.unwrap();
    for ((job, key), v) in &h.values {
        let got = c.read(job, key.as_bytes()).await.unwrap();
        assert_eq!(
            got.found.then_some(got.value.as_slice()),
            Some(v.as_slice()),
            "acknowledged value of {job}/{key} after restart"
        );
    }
    for (job, token) in &h.tokens {
        let a = c
            .acquire(
                job,
                "checker",
                Duration::from_secs(1),
                Duration::from_secs(5),
            )
            .await
            .unwrap();
        assert!(a.acquired);
        assert!(
            a.lease.token > *token,
            "job {job}: granted token {} after {token} was issued",
            a.lease.token
        );
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Stop {
    Kill,
    Clean,
}

pub(crate) fn stop(mut s: ServerProcess, how: Stop) {
    match how {
        Stop::Kill => s.kill9(),
        Stop::Clean => {
            s.signal(libc::SIGTERM);
            assert!(s.child.wait().unwrap().success());
        }
    }
}

/// Starts `leasehold serve`: the server, or its exit status and standard
/// error when it refuses to start.
pub(crate) fn try_start(dir: &Path) -> Result<ServerProcess, (i32, String)> {
    let log = dir.with_extension("stderr");
    let mut child = serve_command(dir)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    if line.is_empty() {
        let status = child.wait().unwrap();
        let err = std::fs::read_to_string(&log).unwrap();
        return Err((status.code().unwrap_or(-1), err));
    }
    let words: Vec<&str> = line.split_whitespace().collect();
    Ok(ServerProcess {
        child,
        addr: words[3].parse().unwrap(),
        admin: words[5].parse().unwrap(),
        data_dir: dir.to_owned(),
    })
}

pub(crate) fn check(dir: &Path) -> (bool, String) {
    let out = Command::new(bin())
        .args(["check", "--data-dir"])
        .arg(dir)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

pub(crate) fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to.join(e.file_name()));
        } else {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

/// Every file under `dir`, relative to it.
pub(crate) fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let rel = PathBuf::from(e.file_name());
        if e.file_type().unwrap().is_dir() {
            out.extend(files(&e.path()).into_iter().map(|p| rel.join(p)));
        } else {
            out.push(rel);
        }
    }
    out.sort();
    out
}

/// The bytes of every file of `dir` that leasehold writes: its log, its
/// manifest, its marker (sled's recovery, which runs when sled opens its
/// files, may rewrite sled's own).
pub(crate) fn contents(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    files(dir)
        .into_iter()
        // The lock file names whoever opened the data dir last: not data.
        .filter(|p| !is_sled_file(p) && p != Path::new("leasehold.lock"))
        .map(|p| {
            let mut b = Vec::new();
            std::fs::File::open(dir.join(&p))
                .unwrap()
                .read_to_end(&mut b)
                .unwrap();
            (p, b)
        })
        .collect()
}

#[derive(Debug, Clone)]
enum Damage {
    Delete,
    Truncate(u64),
    Flip(u64),
    Older,
}

fn damage(dir: &Path, old: &Path, file: &Path, d: &Damage) -> bool {
    let p = dir.join(file);
    let len = std::fs::metadata(&p).unwrap().len();
    match d {
        Damage::Delete => std::fs::remove_file(&p).unwrap(),
        Damage::Truncate(n) => {
            if *n >= len {
                return false;
            }
            std::fs::File::options()
                .write(true)
                .open(&p)
                .unwrap()
                .set_len(*n)
                .unwrap();
        }
        Damage::Flip(at) => {
            if *at >= len {
                return false;
            }
            let mut b = std::fs::read(&p).unwrap();
            b[*at as usize] ^= 0x5a;
            std::fs::write(&p, b).unwrap();
        }
        Damage::Older => {
            let o = old.join(file);
            if !o.exists() || std::fs::read(&o).unwrap() == std::fs::read(&p).unwrap() {
                return false;
            }
            std::fs::copy(o, &p).unwrap();
        }
    }
    true
}

fn is_sled_file(p: &Path) -> bool {
    let f = p.to_string_lossy();
    f == "db" || f == "conf" || f.starts_with("snap.") || f.starts_with("blobs")
}

/// The names an error may use for a file: itself, or "sled" for sled's own.
fn named(err: &str, file: &Path) -> bool {
    let f = file.to_string_lossy();
    err.contains(&*f) || (is_sled_file(file) && (err.contains("sled") || err.contains("/db")))
}

/// A data dir with a history, as `stop` leaves it, and a copy of it from
/// an older state (after the first half of the history).
async fn prepared(how: Stop, root: &Path) -> (PathBuf, PathBuf, History) {
    let dir = root.join("dir");
    let mut h = History::default();
    let s = ServerProcess::start(&dir, &[]);
    load(&s.url(), &mut h, &["alpha", "beta"], 3, 0).await;
    stop(s, how);
    let old = root.join("old");
    copy_dir(&dir, &old);
    let s = ServerProcess::start(&dir, &[]);
    load(&s.url(), &mut h, &["alpha", "gamma"], 3, 0).await;
    // Twelve values of 60 KiB in one job: sled keeps such pages in blobs.
    load(&s.url(), &mut h, &["big"], 1, 12).await;
    load(&s.url(), &mut h, &["beta"], 2, 0).await;
    stop(s, how);
    (dir, old, h)
}

async fn matrix(how: Stop) {
    let root = tempfile::tempdir().unwrap();
    let (base, old, h) = prepared(how, root.path()).await;
    let (ok, report) = check(&base);
    assert!(ok, "a healthy data dir checks out:\n{report}");
    let mut refused = 0;
    let mut started = 0;
    for file in files(&base) {
        let len = std::fs::metadata(base.join(&file)).unwrap().len();
        let mut damages = vec![Damage::Delete, Damage::Older];
        for n in [0, 512, 1000, 1024, 4096, len / 2, len.saturating_sub(1)] {
            damages.push(Damage::Truncate(n));
        }
        for at in [
            0,
            9,
            100,
            4100,
            4200,
            5000,
            9000,
            40_000,
            len / 3,
            len / 2,
            len.saturating_sub(1),
        ] {
            damages.push(Damage::Flip(at));
        }
        for d in damages {
            let trial = root.path().join(format!("trial-{refused}-{started}"));
            copy_dir(&base, &trial);
            if !damage(&trial, &old, &file, &d) {
                std::fs::remove_dir_all(&trial).unwrap();
                continue;
            }
            let what = format!("{how:?} stop, {} {d:?}", file.display());
            let (check_ok, report) = check(&trial);
            let before = contents(&trial);
            match try_start(&trial) {
                Err((code, err)) => {
                    refused += 1;
                    assert_ne!(code, 0, "{what}");
                    assert!(
                        !check_ok,
                        "{what}: check says healthy, serve refused:\n{err}"
                    );
                    assert!(
                        named(&err, &file),
                        "{what}: the error names no file:\n{err}"
                    );
                    assert_eq!(
                        contents(&trial),
                        before,
                        "{what}: a refused start changed the data dir"
                    );
                    // Whatever sled's own recovery did to its files, the
                    // damage is not laundered: a second start refuses too.
                    assert!(
                        try_start(&trial).is_err(),
                        "{what}: a second start succeeded"
                    );
                    assert!(
                        !check(&trial).0,
                        "{what}: check passes after a refused start"
                    );
                }
                Ok(s) => {
                    started += 1;
                    assert!(check_ok, "{what}: serve started, check says:\n{report}");
                    verify(&s.url(), &h).await;
                }
            }
            std::fs::remove_dir_all(&trial).unwrap();
        }
    }
    eprintln!("{how:?}: {refused} damaged data dirs refused, {started} started intact");
    assert!(
        refused > 10 && started > 0,
        "{refused} refused, {started} started"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn damage_after_a_sigkill_is_refused_or_harmless() {
    matrix(Stop::Kill).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn damage_after_a_clean_stop_is_refused_or_harmless() {
    matrix(Stop::Clean).await;
}

/// The first complaint of the issue, exactly: tokens 1 to 5, SIGKILL, the
/// log deleted. The server refuses to start; `recover` brings it back with
/// the next token above 5.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_log_is_refused_and_recover_keeps_tokens_going_up() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("d");
    let s = ServerProcess::start(&dir, &[]);
    let mut h = History::default();
    load(&s.url(), &mut h, &["payroll"], 5, 0).await;
    assert_eq!(h.tokens["payroll"], 5);
    s.kill9();
    std::fs::remove_file(dir.join("wal")).unwrap();
    let (code, err) = try_start(&dir).err().expect("must refuse");
    assert_ne!(code, 0);
    assert!(err.contains("wal") && err.contains("recover"), "{err}");
    let out = Command::new(bin())
        .args(["recover", "--data-dir"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("not provable"), "{said}");
    let s = try_start(&dir).expect("starts after recover");
    let c = Client::connect(&s.url()).await.unwrap();
    let a = c
        .acquire("payroll", "x", Duration::from_secs(5), Duration::ZERO)
        .await
        .unwrap();
    // Nothing on disk knew of tokens 1 to 5 (they were all in the log), so
    // the floor is the highest token found plus the margin.
    assert!(a.acquired && a.lease.token > 1 << 32, "{}", a.lease.token);
    let a = c
        .acquire("never-seen", "x", Duration::from_secs(5), Duration::ZERO)
        .await
        .unwrap();
    assert!(a.lease.token > 5, "a job the store lost: {}", a.lease.token);
    let (_, metrics) = common::admin_request(s.admin, "/metrics").await;
    assert!(
        metrics.contains("leasehold_store_recovered{how=\"recovered\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("leasehold_store_token_floor 4294967"),
        "{metrics}"
    );
    let log = std::fs::read_to_string(dir.with_extension("stderr")).unwrap();
    assert!(log.contains("WARN") && log.contains("recovered"), "{log}");
}

/// Backup through a running server, then restore it: into the same data dir
/// (its history proves the highest token), into a new one (the floor jumps
/// by 2^32), and never from a damaged backup file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backup_then_restore_never_issues_a_token_again() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("d");
    let s = ServerProcess::start(&dir, &[]);
    let mut h = History::default();
    load(&s.url(), &mut h, &["a", "b"], 3, 2).await;
    let backed_up = h.clone();
    let file = root.path().join("b.lhb");
    let out = Command::new(bin())
        .args(["backup", "--server", &s.url(), "--out"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Life goes on after the backup: tokens up to 7 on "a", a new job.
    load(&s.url(), &mut h, &["a"], 4, 0).await;
    load(&s.url(), &mut h, &["c"], 2, 0).await;
    assert_eq!(h.tokens["a"], 7);
    stop(s, Stop::Clean);

    // A damaged backup is refused and changes nothing.
    let bytes = std::fs::read(&file).unwrap();
    for (name, b) in [
        ("cut", bytes[..bytes.len() / 2].to_vec()),
        ("flipped", {
            let mut b = bytes.clone();
            b[bytes.len() / 2] ^= 1;
            b
        }),
    ] {
        let bad = root.path().join(name);
        std::fs::write(&bad, b).unwrap();
        let before = contents(&dir);
        let out = Command::new(bin())
            .args(["restore", "--data-dir"])
            .arg(&dir)
            .arg(&bad)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{name} backup restored");
        assert_eq!(contents(&dir), before, "{name}: the data dir changed");
    }

    for (target, proven) in [(dir.clone(), true), (root.path().join("new"), false)] {
        let out = Command::new(bin())
            .args(["restore", "--data-dir"])
            .arg(&target)
            .arg(&file)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let said = String::from_utf8_lossy(&out.stdout);
        assert_eq!(said.contains("(proven"), proven, "{said}");
        let s = try_start(&target).expect("starts after restore");
        let c = Client::connect(&s.url()).await.unwrap();
        // What the backup held is back; what came after is not.
        for ((job, key), v) in &backed_up.values {
            let got = c.read(job, key.as_bytes()).await.unwrap();
            assert_eq!(
                got.found.then_some(got.value.as_slice()),
                Some(v.as_slice()),
                "{job}/{key}"
            );
        }
        assert!(!c.read("c", b"k0").await.unwrap().found);
        for job in ["a", "b", "c", "d"] {
            let a = c
                .acquire(job, "after", Duration::from_secs(5), Duration::ZERO)
                .await
                .unwrap();
            assert!(a.acquired, "every lease was released by the restore");
            let floor = if proven { 7 } else { 3 + (1u64 << 32) };
            assert!(a.lease.token > floor, "{job}: token {}", a.lease.token);
            assert!(a.lease.token > 7, "{job}: token {} repeats", a.lease.token);
        }
        let (_, metrics) = common::admin_request(s.admin, "/metrics").await;
        assert!(
            metrics.contains("leasehold_store_recovered{how=\"restored\"} 1"),
            "{metrics}"
        );
        stop(s, Stop::Clean);
        let (ok, report) = check(&target);
        assert!(ok && report.contains("restored"), "{report}");
    }
}

/// A data dir written before the manifest existed (a first-format log, left
/// by a SIGKILL) starts, replays its log, and gets a manifest; nothing is
/// lost, and tokens go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_data_dir_from_before_the_manifest_is_upgraded() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("d");
    copy_dir(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/data-dir-v1"),
        &dir,
    );
    std::fs::remove_file(dir.join("README.md")).unwrap();
    assert!(check(&dir).0, "{}", check(&dir).1);
    let s = try_start(&dir).expect("an old data dir starts");
    let c = Client::connect(&s.url()).await.unwrap();
    let v = c.read("job1", b"k").await.unwrap();
    assert_eq!(
        (v.found, v.value.as_slice(), v.token),
        (true, &b"v4"[..], 4)
    );
    let l = c.get_lease("job1").await.unwrap();
    assert_eq!(
        (l.holder.as_deref(), l.token),
        (Some("h4"), 4),
        "the held lease is live again"
    );
    c.release("job1", "h4", 4).await.unwrap();
    let a = c
        .acquire("job1", "h5", Duration::from_secs(5), Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(a.lease.token, 5);
    stop(s, Stop::Clean);
    assert!(dir.join("leasehold.manifest").exists());
    let (ok, report) = check(&dir);
    assert!(ok, "{report}");
}

/// Where `dir` is in the middle of a switch (`restore` or `recover`
/// interrupted): its switch file is there.
fn mid_switch(dir: &Path) -> bool {
    dir.join("leasehold.switch").exists()
}

/// Data dirs as `tool ARGS` left them (run on copies of `template` at
/// `dir`), SIGKILLed at its `rename`s in the middle of the switch: the
/// first point after the switch file is written (old files going aside)
/// and the first in the last phase (new files moving in). Each is copied
/// to `root/NAME-N`.
fn interrupted(
    template: &Path,
    dir: &Path,
    args: &[&std::ffi::OsStr],
    root: &Path,
    name: &str,
) -> Vec<PathBuf> {
    let mut points = Vec::new();
    for n in 1.. {
        let _ = std::fs::remove_dir_all(dir);
        copy_dir(template, dir);
        if !crate::tools::run_killed_at(args, "rename", n) {
            break;
        }
        if mid_switch(dir) {
            let phase = std::fs::read_to_string(dir.join("leasehold.switch")).unwrap();
            points.push((n, phase.contains("phase move")));
        }
    }
    // The first point of each phase.
    let mut chosen: Vec<u32> = Vec::new();
    for moving in [false, true] {
        if let Some((n, _)) = points.iter().find(|p| p.1 == moving) {
            chosen.push(*n);
        }
    }
    assert!(
        chosen.len() >= 2,
        "{name}: too few mid-switch kill points: {points:?}"
    );
    chosen
        .into_iter()
        .map(|n| {
            let _ = std::fs::remove_dir_all(dir);
            copy_dir(template, dir);
            assert!(crate::tools::run_killed_at(args, "rename", n));
            assert!(mid_switch(dir), "{name}: rename #{n} again");
            let state = root.join(format!("{name}-{n}"));
            copy_dir(dir, &state);
            state
        })
        .collect()
}

/// Whether `a` and `b` hold the same files' bytes, wherever they are (a
/// switch finished moves files), sled's files (which sled's recovery may
/// rewrite), the lock and the switch file aside.
fn same_bytes(a: &BTreeMap<PathBuf, Vec<u8>>, b: &BTreeMap<PathBuf, Vec<u8>>) -> bool {
    let bytes = |m: &BTreeMap<PathBuf, Vec<u8>>| {
        let mut v: Vec<Vec<u8>> = m
            .iter()
            .filter(|(p, _)| {
                let name = Path::new(p.file_name().unwrap());
                !is_sled_file(name)
                    && name != Path::new("leasehold.lock")
                    && !name.to_string_lossy().starts_with("leasehold.switch")
            })
            .map(|(_, b)| b.clone())
            .collect();
        v.sort();
        v
    };
    bytes(a) == bytes(b)
}

/// Damages every file of `base` (a data dir some tool left) a few ways:
/// each damaged copy must be refused, naming the file (or the folder or
/// switch file it belongs to), with `check` agreeing and nothing changed,
/// or start with every next token above every token issued (`h`). `old`
/// holds the same files from an earlier state. Returns (refused, started).
async fn damage_each_file(base: &Path, old: &Path, h: &History, what: &str) -> (u32, u32) {
    let (mut refused, mut started) = (0, 0);
    for file in files(base) {
        if file == Path::new("leasehold.lock") {
            continue;
        }
        let len = std::fs::metadata(base.join(&file)).unwrap().len();
        let damages = [
            Damage::Delete,
            Damage::Older,
            Damage::Truncate(len / 2),
            Damage::Flip(len / 2),
        ];
        for d in damages {
            let trial = base.with_file_name(format!("trial-{refused}-{started}"));
            let _ = std::fs::remove_dir_all(&trial);
            copy_dir(base, &trial);
            if !damage(&trial, old, &file, &d) {
                std::fs::remove_dir_all(&trial).unwrap();
                continue;
            }
            let what = format!("{what}: {} {d:?}", file.display());
            let (check_ok, report) = check(&trial);
            let before = contents(&trial);
            match try_start(&trial) {
                Err((code, err)) => {
                    refused += 1;
                    assert_ne!(code, 0, "{what}");
                    assert!(
                        !check_ok,
                        "{what}: check says healthy, serve refused:\n{err}"
                    );
                    let top = file.components().next().unwrap().as_os_str();
                    assert!(
                        named(&err, &file)
                            || err.contains(&*top.to_string_lossy())
                            || err.contains("leasehold.switch")
                            // The switch file lost: the dir is refused for what
                            // it then holds (the folders the switch named, or
                            // the damage `recover` was run for), named.
                            || (top == "leasehold.switch"
                                && err.contains(&format!("{}/", trial.display()))),
                        "{what}: the error names no file:\n{err}"
                    );
                    // A start finishes an interrupted switch before it
                    // reads the store (renames only): no file's bytes
                    // change, whichever name they end up under.
                    assert!(
                        same_bytes(&contents(&trial), &before),
                        "{what}: a refused start changed the data dir's files: {:?} became {:?}",
                        before.keys().collect::<Vec<_>>(),
                        contents(&trial).keys().collect::<Vec<_>>()
                    );
                    assert!(
                        try_start(&trial).is_err(),
                        "{what}: a second start succeeded"
                    );
                    assert!(
                        !check(&trial).0,
                        "{what}: check passes after a refused start"
                    );
                }
                Ok(s) => {
                    started += 1;
                    assert!(check_ok, "{what}: serve started, check says:\n{report}");
                    crate::tools::verify_tokens(&s.url(), h, &what).await;
                    s.kill9();
                }
            }
            std::fs::remove_dir_all(&trial).unwrap();
        }
    }
    eprintln!("{what}: {refused} damaged data dirs refused, {started} started");
    (refused, started)
}

/// The damage matrix on the states the tools leave: a `restore` and a
/// `recover` SIGKILLed in the middle of their switch (the switch file,
/// the `.new-…` folder and the set-aside folder all there, made by strace
/// at the tool's renames, two points each), and a used data dir into
/// which another store's backup was restored; one test each, so that
/// they run side by side. Every file of each is damaged four ways
/// (deleted, older, truncated to half, a byte flipped in the middle). A
/// refused start may finish the switch (renames only) before it reads
/// the store: no file's bytes may change.
async fn damage_each_state(states: &[(PathBuf, PathBuf, History, String)]) {
    for (base, old, h, what) in states {
        let (refused, started) = damage_each_file(base, old, h, what).await;
        assert!(
            refused > 0 && started > 0,
            "{what}: {refused} refused, {started} started"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn damage_to_a_restore_killed_mid_switch_is_refused_or_harmless() {
    let root = tempfile::tempdir().unwrap();
    let (template, file, h) = crate::tools::used_dir_and_backup(root.path()).await;
    let dir = root.path().join("d");
    let restore: Vec<&std::ffi::OsStr> = vec![
        "restore".as_ref(),
        "--data-dir".as_ref(),
        dir.as_os_str(),
        file.as_os_str(),
    ];
    damage_killed_mid_switch(
        &template,
        &dir,
        &restore,
        root.path(),
        "restore",
        &template,
        &h,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn damage_to_a_recover_killed_mid_switch_is_refused_or_harmless() {
    let root = tempfile::tempdir().unwrap();
    let (template, _, h) = crate::tools::used_dir_and_backup(root.path()).await;
    let dir = root.path().join("d");
    // Damage to recover from: the manifest deleted.
    let damaged = root.path().join("damaged-template");
    copy_dir(&template, &damaged);
    std::fs::remove_file(damaged.join("leasehold.manifest")).unwrap();
    let recover: Vec<&std::ffi::OsStr> =
        vec!["recover".as_ref(), "--data-dir".as_ref(), dir.as_os_str()];
    damage_killed_mid_switch(
        &damaged,
        &dir,
        &recover,
        root.path(),
        "recover",
        &template,
        &h,
    )
    .await;
}

/// The matrix on the states `tool` (run with `args` on a copy of `from`
/// at `dir`) leaves when killed mid-switch; `old` is the older copy for
/// the "Older" damage, `h` every token issued.
async fn damage_killed_mid_switch(
    from: &Path,
    dir: &Path,
    args: &[&std::ffi::OsStr],
    root: &Path,
    tool: &str,
    old: &Path,
    h: &History,
) {
    let states: Vec<_> = interrupted(from, dir, args, root, tool)
        .into_iter()
        .map(|s| {
            let what = format!("{tool} killed mid-switch ({})", s.display());
            (s, old.to_path_buf(), h.clone(), what)
        })
        .collect();
    damage_each_state(&states).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn damage_to_a_foreign_backup_restored_into_a_used_dir_is_refused_or_harmless() {
    let root = tempfile::tempdir().unwrap();
    let (_, file, h) = crate::tools::used_dir_and_backup(root.path()).await;
    // Another store's backup restored into a used data dir.
    let y = root.path().join("foreign");
    let s = ServerProcess::start(&y, &[]);
    let mut hy = History::default();
    load(&s.url(), &mut hy, &["other", "pay"], 2, 0).await;
    stop(s, Stop::Clean);
    let y_before = root.path().join("foreign-before");
    copy_dir(&y, &y_before);
    let out = crate::tools::tool(&[
        "restore".as_ref(),
        "--data-dir".as_ref(),
        y.as_os_str(),
        file.as_os_str(),
    ]);
    assert!(out.status.success(), "{}", crate::tools::said(&out));
    // Every token either store issued: Y's own `pay` 1 and 2, X's to 6.
    for (job, t) in &h.tokens {
        let e = hy.tokens.entry(job.clone()).or_insert(0);
        *e = (*e).max(*t);
    }
    damage_each_state(&[(y, y_before, hy, "a foreign backup restored".into())]).await;
}
