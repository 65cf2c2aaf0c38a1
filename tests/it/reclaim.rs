//! Disk space follows live data on the single node: churn with large
//! values and DeleteJob leaves a data dir within a small multiple of its
//! live data, and the rewrite that reclaims the space (`store/sled/
//! reclaim.rs`) never lets a token repeat, SIGKILLed at any rename.

use crate::common;
use crate::integrity::{check, copy_dir, load, try_start, verify, History};

use std::io::{BufRead, BufReader};
use std::os::unix::process::{CommandExt as _, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{bin, serve_command, ServerProcess};
use leasehold::client::Client;
use leasehold::store::sled::store_bytes;

const HOUR: Duration = Duration::from_secs(3600);
/// The line the store logs after each rewrite.
const RECLAIMED: &str = "reclaimed disk space";

/// A server on `dir` with `extra` flags whose log (the store's INFO lines
/// among it) goes to `log`.
fn start_logging(dir: &Path, extra: &[&str], log: &Path) -> ServerProcess {
    let mut cmd = serve_command(dir);
    cmd.args(extra);
    let stderr = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap();
    let mut child = cmd
        .env("RUST_LOG", "warn,leasehold_store=info")
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let words: Vec<&str> = line.split_whitespace().collect();
    assert!(
        words.len() == 6 && words[1] == "listening",
        "unexpected start-up line {line:?}; the log:\n{}",
        std::fs::read_to_string(log).unwrap_or_default()
    );
    ServerProcess {
        child,
        addr: words[3].parse().unwrap(),
        admin: words[5].parse().unwrap(),
        data_dir: dir.to_owned(),
    }
}

fn reclaims(log: &Path) -> usize {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .matches(RECLAIMED)
        .count()
}

/// Fills `job` with `keys` values of 60 KiB (the live data), then churns:
/// overwrites them and, between rounds, acquires a job of its own, writes
/// three 60 KiB values, releases and deletes it, until the store has
/// rewritten itself `rewrites` times (`max_rounds` passing first fails
/// the test). Returns the live bytes (keys and values).
async fn churn(url: &str, keys: usize, log: &Path, rewrites: usize, max_rounds: usize) -> u64 {
    let c = Client::connect(url).await.unwrap();
    let token = c
        .acquire("live", "writer", HOUR, Duration::ZERO)
        .await
        .unwrap()
        .lease
        .token;
    for round in 0..max_rounds {
        let mut live = 0u64;
        for k in 0..keys {
            let key = format!("k{k:03}");
            let v = vec![(round * 7 + k) as u8; 60 * 1024];
            live += (key.len() + v.len()) as u64;
            c.checked_write("live", token, key.as_bytes(), v)
                .await
                .unwrap();
        }
        churn_a_deleted_job(&c, round).await;
        if round > 0 && reclaims(log) >= rewrites {
            return live;
        }
    }
    panic!(
        "{max_rounds} rounds of churn ({} MB written) and the store rewrote itself {} times, not \
         {rewrites}",
        max_rounds * keys * 60 * 1024 / 1_000_000,
        reclaims(log)
    );
}

/// One job of round `round` created, given three values of 60 KiB,
/// released and deleted.
async fn churn_a_deleted_job(c: &Client, round: usize) {
    let job = format!("gone-{}", round % 8);
    let a = c
        .acquire(&job, "churner", HOUR, Duration::ZERO)
        .await
        .unwrap();
    assert!(a.acquired);
    for k in 0..3 {
        let key = format!("x{k}");
        c.checked_write(&job, a.lease.token, key.as_bytes(), vec![1; 60 * 1024])
            .await
            .unwrap();
    }
    c.release(&job, "churner", a.lease.token).await.unwrap();
    assert!(c.delete_job(&job).await.unwrap());
}

/// The churn of issue 41, small: 160 keys of 60 KiB live (about 10 MB),
/// overwritten round after round while jobs are created, written and
/// deleted. The store must rewrite itself during the churn, and after a
/// restart (whose start-up reclaims too, when due) the data dir must be
/// at most 4 times the live data, all of it still readable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn churn_with_deletes_leaves_a_data_dir_within_4x_its_live_data() {
    const KEYS: usize = 160;
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("data");
    let log = root.path().join("server.log");
    let s = start_logging(&dir, &[], &log);
    let live = churn(&s.url(), KEYS, &log, 2, 200).await;
    let during = store_bytes(&dir);
    s.signal(libc::SIGTERM);
    let mut s = s;
    assert!(s.child.wait().unwrap().success());
    let s = start_logging(&dir, &[], &log);
    let size = store_bytes(&dir);
    // Every value is still there, as last written.
    let c = Client::connect(&s.url()).await.unwrap();
    let mut read = 0u64;
    for k in 0..KEYS {
        let key = format!("k{k:03}");
        let v = c.read("live", key.as_bytes()).await.unwrap();
        assert!(v.found, "{key} lost");
        read += (key.len() + v.value.len()) as u64;
    }
    assert_eq!(read, live);
    eprintln!(
        "live {:.1} MB; data dir {:.1} MB at the end of the churn, {:.1} MB after the restart \
         ({:.1}x); {} rewrites",
        live as f64 / 1e6,
        during as f64 / 1e6,
        size as f64 / 1e6,
        size as f64 / live as f64,
        reclaims(&log)
    );
    assert!(
        size <= 4 * live,
        "data dir {size} bytes for {live} bytes of live data: over 4x"
    );
    s.kill9();
}

/// The same churn with reclaim off (`--reclaim-ratio 0`) leaves a data dir
/// over 4 times its live data: what the test above guards against is real.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_reclaim_the_same_churn_outgrows_4x() {
    const KEYS: usize = 160;
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("data");
    let log = root.path().join("server.log");
    let s = start_logging(&dir, &["--reclaim-ratio", "0"], &log);
    let c = Client::connect(&s.url()).await.unwrap();
    let token = c
        .acquire("live", "writer", HOUR, Duration::ZERO)
        .await
        .unwrap()
        .lease
        .token;
    let mut live = 0;
    let mut rounds = 0;
    // Until the data dir is past 4x (the bound is in rounds, not time).
    while store_bytes(&dir) <= 4 * live.max(1) {
        rounds += 1;
        assert!(
            rounds <= 200,
            "200 rounds and the data dir stayed within 4x"
        );
        live = 0;
        for k in 0..KEYS {
            let key = format!("k{k:03}");
            let v = vec![(rounds * 7 + k) as u8; 60 * 1024];
            live += (key.len() + v.len()) as u64;
            c.checked_write("live", token, key.as_bytes(), v)
                .await
                .unwrap();
        }
    }
    assert_eq!(reclaims(&log), 0);
    s.kill9();
}

/// A data dir due for a reclaim at its next start: a history of tokens and
/// values (`load`), then 40 keys of 60 KiB overwritten, and jobs created
/// and deleted, with reclaim off, until the data dir is past what a start
/// with reclaim on rewrites (1.5 times the live data, plus the log and
/// 4 MiB: about 16 MB); then SIGKILL.
async fn due_template(root: &Path) -> (PathBuf, History) {
    let dir = root.join("template");
    let log = root.join("template.log");
    let s = start_logging(&dir, &["--reclaim-ratio", "0"], &log);
    let mut h = History::default();
    load(&s.url(), &mut h, &["alpha", "beta"], 3, 2).await;
    let c = Client::connect(&s.url()).await.unwrap();
    let token = c
        .acquire("live", "writer", HOUR, Duration::ZERO)
        .await
        .unwrap()
        .lease
        .token;
    let mut rounds = 0;
    while store_bytes(&dir) < 22 << 20 {
        rounds += 1;
        assert!(
            rounds <= 400,
            "400 rounds and the data dir is {} bytes",
            store_bytes(&dir)
        );
        for k in 0..40 {
            c.checked_write(
                "live",
                token,
                format!("k{k}").as_bytes(),
                vec![rounds as u8; 60 * 1024],
            )
            .await
            .unwrap();
        }
        churn_a_deleted_job(&c, rounds).await;
    }
    eprintln!("template: {rounds} rounds, {} bytes", store_bytes(&dir));
    s.kill9();
    (dir, h)
}

/// `leasehold serve` on `dir` under strace, SIGKILLed at its `n`-th
/// `rename` (a start on a data dir due for a reclaim: the checkpoint's
/// manifest, the copy's manifest, the switch's intent and every file it
/// moves). Whether the kill came before the server listened.
fn killed_at_rename(dir: &Path, n: u32) -> bool {
    let mut child: Child = Command::new("strace")
        .args(["-f", "-o", "/dev/null", "-e", "trace=rename", "-e"])
        .arg(format!("inject=rename:signal=KILL:when={n}"))
        .arg("--")
        .arg(bin())
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "127.0.0.1:0",
        ])
        .arg("--data-dir")
        .arg(dir)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        // A group of its own, the server in it: killed together below.
        .process_group(0)
        .spawn()
        .expect("strace is needed (scripts/test installs it)");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    if line.is_empty() {
        let status = child.wait().unwrap();
        assert!(status.code().is_some() || status.signal().is_some());
        return true;
    }
    // Listening: the start made fewer renames than `n`. strace and the
    // server both go: a strace killed alone lets its tracee run on.
    common::signal_group(child.id(), libc::SIGKILL);
    let _ = child.wait();
    false
}

/// A start that reclaims, SIGKILLed at every rename it makes: each time
/// the data dir passes `check`, starts, holds every acknowledged value,
/// and grants every job a token above every token issued before. And a
/// start left alone rewrites the store, smaller.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reclaim_killed_at_any_rename_never_lets_a_token_repeat() {
    let root = tempfile::tempdir().unwrap();
    let (template, h) = due_template(root.path()).await;
    let before = store_bytes(&template);
    let dir = root.path().join("d");
    let mut kills = 0;
    for n in 1.. {
        assert!(n < 100, "a start made 100 renames?");
        let _ = std::fs::remove_dir_all(&dir);
        copy_dir(&template, &dir);
        let _ = std::fs::remove_file(dir.join("leasehold.lock"));
        if !killed_at_rename(&dir, n) {
            break;
        }
        kills += 1;
        let what = format!("killed at rename #{n}");
        let (ok, report) = check(&dir);
        assert!(ok, "{what}: check says:\n{report}");
        let s = try_start(&dir)
            .unwrap_or_else(|(code, err)| panic!("{what}: refused to start ({code}):\n{err}"));
        verify(&s.url(), &h).await;
        s.kill9();
        // What a reclaim sets aside or leaves unfinished is gone.
        let left: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(".new-") || n.starts_with("reclaimed-"))
            .collect();
        assert!(left.is_empty(), "{what}: left {left:?}");
    }
    eprintln!("a start's reclaim killed at {kills} renames");
    assert!(
        kills >= 8,
        "only {kills} kill points: strace injected nothing?"
    );
    // Untouched, the start reclaims.
    let _ = std::fs::remove_dir_all(&dir);
    copy_dir(&template, &dir);
    let _ = std::fs::remove_file(dir.join("leasehold.lock"));
    let log = root.path().join("last.log");
    let s = start_logging(&dir, &[], &log);
    assert_eq!(
        reclaims(&log),
        1,
        "{}",
        std::fs::read_to_string(&log).unwrap()
    );
    let after = store_bytes(&dir);
    eprintln!("data dir {before} bytes before the start, {after} after its reclaim");
    assert!(after < before, "{before} -> {after}");
    verify(&s.url(), &h).await;
    s.kill9();
}

/// etcd mode: a frontend compacts etcd's history (`--etcd-compact-every`),
/// so that etcd's space follows live data too. After writes that make
/// revisions, an older revision becomes unreadable (etcd answers that it
/// was compacted), while every live value still reads back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_etcd_frontend_compacts_etcds_history() {
    use common::etcd::{fresh_prefix, frontend, EtcdCluster};
    let cluster = EtcdCluster::start(1);
    cluster.wait_ready(common::PATIENCE);
    let s = frontend(
        &cluster.endpoints_arg(),
        &fresh_prefix(),
        &["--etcd-compact-every", "1s"],
    );
    let c = Client::connect(&s.url()).await.unwrap();
    let token = c
        .acquire("job", "w", HOUR, Duration::ZERO)
        .await
        .unwrap()
        .lease
        .token;
    for i in 0..20u8 {
        c.checked_write("job", token, b"k", vec![i; 1024])
            .await
            .unwrap();
    }
    let etcdctl = |args: &[&str]| {
        Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={}", cluster.endpoint(0)))
            .args(args)
            .output()
            .expect("etcdctl is needed (scripts/test installs it)")
    };
    // A revision from before the writes: readable until compacted.
    let old = "2";
    common::eventually(
        "the frontend compacts etcd's history past revision 2",
        || {
            let out = etcdctl(&["get", "--prefix", "", "--rev", old]);
            let err = String::from_utf8_lossy(&out.stderr).into_owned();
            async move { err.contains("compacted").then_some(()) }
        },
    )
    .await;
    let v = c.read("job", b"k").await.unwrap();
    assert_eq!(v.value, vec![19u8; 1024]);
    assert_eq!(v.version, 20);
}
