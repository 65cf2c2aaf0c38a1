//! The operator's tools never let a token be issued twice.
//!
//! `restore` and `recover` are SIGKILLed at every `rename`, `fsync`,
//! `fdatasync`, `unlink`, `mkdir`, `pwrite64` and `write` they make (strace injects the
//! signal at the n-th call of one kind, for every n until the tool
//! finishes), and then the data dir is started. It must either start
//! with every next token above every token issued before, or refuse to
//! start naming what is wrong; the tool run again must then succeed. A
//! backup from another store restored into a used data dir, and each tool
//! pointed at a live server's data dir, complete the picture.

use crate::common;
use crate::integrity::{check, copy_dir, load, stop, try_start, History, Stop};

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use common::{bin, ServerProcess};
use leasehold::client::Client;

/// The calls a tool is killed at, each kind counted on its own.
const POINTS: [&str; 7] = [
    "rename",
    "fsync",
    "fdatasync",
    "unlink",
    "mkdir",
    "pwrite64",
    "write",
];

/// Runs `leasehold ARGS`, SIGKILLed at its `n`-th call of `syscall`.
/// Returns whether it was killed there (else it ran to its end).
pub(crate) fn run_killed_at(args: &[&std::ffi::OsStr], syscall: &str, n: u32) -> bool {
    let out = Command::new("strace")
        .args(["-f", "-qq", "-o", "/dev/null", "-e"])
        .arg(format!("trace={syscall}"))
        .arg("-e")
        .arg(format!("inject={syscall}:signal=KILL:when={n}"))
        .arg("--")
        .arg(bin())
        .args(args)
        .output()
        .expect("strace is needed (scripts/test installs it)");
    if out.status.signal() == Some(libc::SIGKILL) || out.status.code() == Some(137) {
        return true;
    }
    assert!(
        out.status.success(),
        "leasehold {args:?} failed on its own: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    false
}

pub(crate) fn tool(args: &[&std::ffi::OsStr]) -> Output {
    Command::new(bin()).args(args).output().unwrap()
}

pub(crate) fn said(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr)
}

/// A data dir that issued tokens 1 to 6 on `pay` and 1 to 2 on `ops`, and
/// a backup of it taken at `pay` 3, in `root`. Stopped cleanly.
pub(crate) async fn used_dir_and_backup(root: &Path) -> (PathBuf, PathBuf, History) {
    let dir = root.join("template");
    let s = ServerProcess::start(&dir, &[]);
    let mut h = History::default();
    load(&s.url(), &mut h, &["pay"], 3, 1).await;
    let file = root.join("backup.lhb");
    let out = tool(&[
        "backup".as_ref(),
        "--server".as_ref(),
        s.url().as_ref(),
        "--out".as_ref(),
        file.as_os_str(),
    ]);
    assert!(out.status.success(), "{}", said(&out));
    load(&s.url(), &mut h, &["pay"], 3, 0).await;
    load(&s.url(), &mut h, &["ops"], 2, 0).await;
    assert_eq!(h.tokens["pay"], 6);
    stop(s, Stop::Clean);
    (dir, file, h)
}

/// After an interrupted tool: the data dir starts with tokens above every
/// one issued, or refuses naming the data dir and the way on.
async fn starts_above_or_refuses(dir: &Path, h: &History, what: &str) {
    match try_start(dir) {
        Ok(s) => {
            verify_tokens(&s.url(), h, what).await;
            s.kill9();
        }
        Err((code, err)) => {
            assert_ne!(code, 0, "{what}");
            assert!(
                err.contains(&dir.display().to_string()) && err.contains("restore"),
                "{what}: a refusal names the data dir and the way on: {err}"
            );
        }
    }
}

/// `leasehold check` finds `dir` healthy, with a token floor at or above
/// every token issued.
fn healthy_with_floor_above(dir: &Path, h: &History, what: &str) {
    let (ok, report) = check(dir);
    assert!(ok, "{what}: {report}");
    let floor: u64 = report
        .lines()
        .find_map(|l| l.strip_prefix("token floor"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("{what}: no token floor in {report}"));
    let highest = h.tokens.values().copied().max().unwrap_or(0);
    assert!(floor >= highest, "{what}: floor {floor} below {highest}");
}

/// Every job's next grant is above every token issued on it before.
pub(crate) async fn verify_tokens(url: &str, h: &History, what: &str) {
    let c = Client::connect(url).await.unwrap();
    for (job, issued) in &h.tokens {
        let a = c
            .acquire(job, "checker", Duration::from_secs(30), Duration::ZERO)
            .await
            .unwrap();
        assert!(a.acquired, "{what}: every lease was released");
        assert!(
            a.lease.token > *issued,
            "{what}: {job} granted token {} after {issued} was issued",
            a.lease.token
        );
        c.release(job, "checker", a.lease.token).await.unwrap();
    }
}

/// Kills `leasehold ARGS` (run on a fresh copy of `template` at `dir`) at
/// every call of every kind in [`POINTS`]; after each kill, the data dir
/// starts with tokens going up or refuses, and the same tool run again
/// (after every kill at a call that moves files, after every fourth at
/// the others) finishes and leaves a healthy data dir whose floor is above
/// every token issued.
async fn killed_everywhere(
    template: &Path,
    dir: &Path,
    args: &[&std::ffi::OsStr],
    h: &History,
) -> u32 {
    let mut kills = 0;
    for syscall in POINTS {
        for n in 1.. {
            let _ = std::fs::remove_dir_all(dir);
            copy_dir(template, dir);
            if !run_killed_at(args, syscall, n) {
                break;
            }
            kills += 1;
            let what = format!("{args:?} killed at {syscall} #{n}");
            starts_above_or_refuses(dir, h, &what).await;
            // The tool again, to its end: the data dir is healthy, its
            // floor above every token issued. At the calls that move files
            // (the switch) every time; at the syncs and writes, which
            // leave one of the same few states (a new store half written
            // beside the old one), every fourth.
            if !matches!(syscall, "rename" | "unlink" | "mkdir") && n % 4 != 1 {
                continue;
            }
            let again = tool(args);
            assert!(
                again.status.success(),
                "{what}, run again: {}",
                said(&again)
            );
            healthy_with_floor_above(dir, h, &what);
        }
    }
    eprintln!("{args:?}: killed at {kills} points");
    kills
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_killed_at_any_point_never_lets_a_token_repeat() {
    let root = tempfile::tempdir().unwrap();
    let (template, file, h) = used_dir_and_backup(root.path()).await;
    let dir = root.path().join("d");
    let args: Vec<&std::ffi::OsStr> = vec![
        "restore".as_ref(),
        "--data-dir".as_ref(),
        dir.as_os_str(),
        file.as_os_str(),
    ];
    let kills = killed_everywhere(&template, &dir, &args, &h).await;
    assert!(
        kills >= 10,
        "only {kills} kill points: strace injected nothing?"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recover_killed_at_any_point_never_lets_a_token_repeat() {
    let root = tempfile::tempdir().unwrap();
    let (template, _, h) = used_dir_and_backup(root.path()).await;
    // Damage to recover from: the log deleted (it held the newest grants).
    std::fs::remove_file(template.join("leasehold.manifest")).unwrap();
    let dir = root.path().join("d");
    let args: Vec<&std::ffi::OsStr> =
        vec!["recover".as_ref(), "--data-dir".as_ref(), dir.as_os_str()];
    let kills = killed_everywhere(&template, &dir, &args, &h).await;
    assert!(
        kills >= 10,
        "only {kills} kill points: strace injected nothing?"
    );
}

/// A data dir that an earlier version's interrupted restore left with
/// nothing but its set-aside folders never starts empty, and `recover`
/// counts the tokens those folders hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_data_dir_holding_only_set_aside_folders_is_refused_then_recovered() {
    let root = tempfile::tempdir().unwrap();
    let (template, _, h) = used_dir_and_backup(root.path()).await;
    let dir = root.path().join("d");
    std::fs::create_dir_all(&dir).unwrap();
    copy_dir(&template, &dir.join("replaced-1"));
    std::fs::remove_file(dir.join("replaced-1").join("leasehold.lock")).unwrap();
    let (code, err) = try_start(&dir).err().expect("must refuse");
    assert_ne!(code, 0);
    assert!(
        err.contains("replaced-1") && err.contains("interrupted"),
        "{err}"
    );
    let (ok, report) = check(&dir);
    assert!(!ok && report.contains("replaced-1"), "{report}");
    let out = tool(&["recover".as_ref(), "--data-dir".as_ref(), dir.as_os_str()]);
    assert!(out.status.success(), "{}", said(&out));
    assert!(said(&out).contains("not provable"), "{}", said(&out));
    let s = try_start(&dir).expect("starts after recover");
    verify_tokens(&s.url(), &h, "recovered").await;
}

/// Server X issues `pay` 1 to 6 with a backup taken at 3; Y's data dir,
/// used for other jobs, gets X's backup restored into it. Y's history
/// proves nothing about X's: the floor takes the margin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_from_another_store_restored_into_a_used_dir_never_repeats_a_token() {
    let root = tempfile::tempdir().unwrap();
    let (_, file, h) = used_dir_and_backup(root.path()).await;
    let y = root.path().join("y");
    let s = ServerProcess::start(&y, &[]);
    let mut hy = History::default();
    load(&s.url(), &mut hy, &["other"], 2, 0).await;
    stop(s, Stop::Clean);
    let out = tool(&[
        "restore".as_ref(),
        "--data-dir".as_ref(),
        y.as_os_str(),
        file.as_os_str(),
    ]);
    assert!(out.status.success(), "{}", said(&out));
    assert!(said(&out).contains("not provable"), "{}", said(&out));
    let s = try_start(&y).expect("starts after restore");
    let c = Client::connect(&s.url()).await.unwrap();
    let a = c
        .acquire("pay", "next", Duration::from_secs(30), Duration::ZERO)
        .await
        .unwrap();
    assert!(
        a.lease.token > h.tokens["pay"] && a.lease.token > 1 << 32,
        "X issued pay tokens up to {}; Y granted {}",
        h.tokens["pay"],
        a.lease.token
    );
    // Y's own jobs go on above their tokens too (their values are gone:
    // a restore replaces the store).
    verify_tokens(&s.url(), &hy, "Y's jobs").await;
}

/// `restore`, `recover` and `check` on a live server's data dir refuse,
/// naming the server's process, and change nothing: the server goes on,
/// and after a SIGKILL its tokens go on above every one it issued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_tool_refuses_a_live_data_dir_naming_the_process() {
    let root = tempfile::tempdir().unwrap();
    let (template, file, mut h) = used_dir_and_backup(root.path()).await;
    let s = ServerProcess::start(&template, &[]);
    let pid = format!("process {}", s.pid());
    let d = template.as_os_str();
    for args in [
        vec![
            "restore".as_ref(),
            "--data-dir".as_ref(),
            d,
            file.as_os_str(),
        ],
        vec!["recover".as_ref(), "--data-dir".as_ref(), d],
        vec!["check".as_ref(), "--data-dir".as_ref(), d],
    ] {
        let out = tool(&args);
        assert!(!out.status.success(), "{args:?} ran on a live data dir");
        let said = said(&out);
        assert!(
            said.contains(&pid) && said.contains("in use"),
            "{args:?}: {said}"
        );
    }
    load(&s.url(), &mut h, &["pay"], 2, 0).await;
    assert_eq!(h.tokens["pay"], 8, "the server went on");
    s.kill9();
    let s = try_start(&template).expect("starts after a SIGKILL");
    verify_tokens(&s.url(), &h, "after the tools and a SIGKILL").await;
}

/// A backup whose reader stops (a SIGSTOPped `leasehold backup`) holds
/// back the store's checkpoints only until one is needed: then the backup
/// is ended, and changes go on being acknowledged, however much is written
/// meanwhile. The stopped backup, once continued, fails and leaves no
/// file behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_backup_reader_never_stalls_changes() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("d");
    let s = ServerProcess::start(&dir, &[]);
    // 16 MiB in the store: more than the backup's channel, h2's windows
    // and the socket buffers take before the stopped reader blocks it.
    let (c, token) = bulk(&s.url(), 256).await;
    let value = vec![7u8; 64 * 1024];
    let out = root.path().join("b.lhb");
    let (mut backup, gate) = backup_under_way(&s, &out).await;
    let pid = backup.id();
    common::signal(pid, libc::SIGSTOP);
    gate.open();
    // Twice the log's size, written while the reader is stopped: each write
    // is acknowledged (the store ends the backup when it needs the
    // checkpoint the backup holds back).
    let writes = async {
        for i in 0..256 {
            c.checked_write("bulk", token, format!("n{i}").as_bytes(), value.clone())
                .await
                .unwrap();
        }
    };
    tokio::time::timeout(common::PATIENCE, writes)
        .await
        .expect("writes stalled behind a stopped backup reader");
    common::signal(backup.id(), libc::SIGCONT);
    let status = backup.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut backup.stderr.take().unwrap(), &mut err).unwrap();
    assert!(!status.success(), "the ended backup succeeded: {err}");
    assert!(err.contains("too slow"), "{err}");
    assert_eq!(entries(root.path()), ["d"], "a file was left behind");
    // A backup that keeps up still works.
    let ok = tool(&[
        "backup".as_ref(),
        "--server".as_ref(),
        s.url().as_ref(),
        "--out".as_ref(),
        out.as_os_str(),
    ]);
    assert!(ok.status.success(), "{}", said(&ok));
}

/// A backup CLI SIGKILLed while it writes leaves no file behind: the file
/// has no name until it is whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_backup_leaves_no_file() {
    let root = tempfile::tempdir().unwrap();
    let (_, _, _) = used_dir_and_backup(root.path()).await;
    let before = entries(root.path());
    let s = ServerProcess::start(&root.path().join("template"), &[]);
    bulk(&s.url(), 64).await;
    let (mut backup, _gate) = backup_under_way(&s, &root.path().join("killed.lhb")).await;
    backup.kill().unwrap();
    backup.wait().unwrap();
    assert_eq!(entries(root.path()), before, "a file was left behind");
}

/// Holds job `bulk` and writes `n` values of 64 KiB to it. Returns the
/// client and the token.
async fn bulk(url: &str, n: usize) -> (Client, u64) {
    let c = Client::connect(url).await.unwrap();
    let a = c
        .acquire("bulk", "w", Duration::from_secs(300), Duration::ZERO)
        .await
        .unwrap();
    for i in 0..n {
        c.checked_write(
            "bulk",
            a.lease.token,
            format!("k{i}").as_bytes(),
            vec![7; 64 * 1024],
        )
        .await
        .unwrap();
    }
    (c, a.lease.token)
}

/// `leasehold backup` of the server `s` into `out`, once it has written its
/// first bytes (its standard error piped), and the [`Gate`] it reaches the
/// server through, closed: the backup has its first chunks, and can
/// neither finish nor fail until the gate is opened. (A backup of a few
/// MiB, looked for every few milliseconds, could be written, linked under
/// its name and gone between two looks.)
///
/// A backup that the store ended before it wrote anything is not under
/// way, and another is started: a reclaim of disk space, which may follow
/// the writes a test has just made, ends a backup that was reading when
/// it started.
async fn backup_under_way(s: &ServerProcess, out: &Path) -> (std::process::Child, Gate) {
    let t = std::time::Instant::now();
    loop {
        let gate = Gate::to(s.addr).await;
        let mut backup = Command::new(bin())
            .args(["backup", "--server", &gate.url(), "--out"])
            .arg(out)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let pid = backup.id();
        loop {
            if backup_bytes(pid) > 0 {
                return (backup, gate);
            }
            if let Some(status) = backup.try_wait().unwrap() {
                let mut err = String::new();
                std::io::Read::read_to_string(&mut backup.stderr.take().unwrap(), &mut err)
                    .unwrap();
                assert!(
                    err.contains("the backup was ended"),
                    "the backup ended before it wrote anything ({status}): {err}"
                );
                break;
            }
            assert!(
                t.elapsed() < common::PATIENCE,
                "waited {:?} for a backup under way, in vain",
                common::PATIENCE
            );
            tokio::time::sleep(Duration::from_millis(15)).await;
        }
    }
}

/// A TCP proxy to a server that passes on everything its clients send, but
/// of what the server sends, only the first [`Gate::PASSES`] bytes of each
/// connection until it is opened.
struct Gate {
    addr: std::net::SocketAddr,
    open: tokio::sync::watch::Sender<bool>,
}

impl Gate {
    /// What passes before the gate is opened: the start of a backup's
    /// stream, a few of its 256 KiB chunks, whatever the framing.
    const PASSES: u64 = 1 << 20;

    async fn to(server: std::net::SocketAddr) -> Gate {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (open, _) = tokio::sync::watch::channel(false);
        let opened = open.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = tokio::net::TcpStream::connect(server).await else {
                    return;
                };
                let mut opened = opened.subscribe();
                let (mut cr, mut cw) = client.into_split();
                let (sr, mut sw) = server.into_split();
                tokio::spawn(async move { tokio::io::copy(&mut cr, &mut sw).await });
                tokio::spawn(async move {
                    use tokio::io::AsyncReadExt as _;
                    let mut first = sr.take(Self::PASSES);
                    tokio::io::copy(&mut first, &mut cw).await?;
                    let _ = opened.wait_for(|o| *o).await;
                    tokio::io::copy(&mut first.into_inner(), &mut cw).await
                });
            }
        });
        Gate { addr, open }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Lets everything through from now on.
    fn open(&self) {
        self.open.send_replace(true);
    }
}

/// The names in `dir`, sorted.
fn entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// The bytes a backup process has written to its unnamed output file so
/// far (the open file whose name ends in "(deleted)" or starts with "/#").
fn backup_bytes(pid: u32) -> u64 {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return 0;
    };
    fds.flatten()
        .filter(|fd| {
            std::fs::read_link(fd.path()).is_ok_and(|t| {
                let t = t.to_string_lossy();
                t.contains("/#") || t.ends_with("(deleted)")
            })
        })
        .filter_map(|fd| std::fs::metadata(fd.path()).ok())
        .map(|m| m.len())
        .max()
        .unwrap_or(0)
}

/// `restore` and `recover` end every tenure whose end was not recorded
/// (the held leases they release) as `restored` or `recovered`, so that
/// history never shows two tenures of a job as not ended; and the floor
/// they raise keeps a job's earlier history (it continues above it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restore_and_recover_end_held_tenures_and_keep_history_across_the_floor() {
    use leasehold::proto::tenure::End;
    let root = tempfile::tempdir().unwrap();
    for (tool_name, how) in [("restore", End::Restored), ("recover", End::Recovered)] {
        let dir = root.path().join(tool_name);
        let s = ServerProcess::start(&dir, &[]);
        let mut h = History::default();
        load(&s.url(), &mut h, &["small"], 5, 0).await;
        let c = Client::connect(&s.url()).await.unwrap();
        let held = c
            .acquire("small", "leader", Duration::from_secs(300), Duration::ZERO)
            .await
            .unwrap();
        assert_eq!(held.lease.token, 6);
        let file = root.path().join(format!("{tool_name}.lhb"));
        let out = tool(&[
            "backup".as_ref(),
            "--server".as_ref(),
            s.url().as_ref(),
            "--out".as_ref(),
            file.as_os_str(),
        ]);
        assert!(out.status.success(), "{}", said(&out));
        stop(s, Stop::Clean);
        let target = root.path().join(format!("{tool_name}-target"));
        let args: Vec<&std::ffi::OsStr> = if tool_name == "restore" {
            // Into a new data dir: the floor takes the margin.
            vec![
                "restore".as_ref(),
                "--data-dir".as_ref(),
                target.as_os_str(),
                file.as_os_str(),
            ]
        } else {
            copy_dir(&dir, &target);
            std::fs::remove_file(target.join("leasehold.manifest")).unwrap();
            vec![
                "recover".as_ref(),
                "--data-dir".as_ref(),
                target.as_os_str(),
            ]
        };
        let out = tool(&args);
        assert!(out.status.success(), "{}", said(&out));
        let s = try_start(&target).expect("starts");
        let c = Client::connect(&s.url()).await.unwrap();
        let before = c.history("small", 100).await.unwrap();
        assert_eq!(before.len(), 6, "{tool_name}: {before:?}");
        assert_eq!(before[0].token, 6);
        assert_eq!(
            before[0].end,
            Some(how),
            "{tool_name}: the held tenure's end"
        );
        assert!(
            before
                .iter()
                .all(|t| t.end.is_some_and(|e| e != End::Unspecified)),
            "{tool_name}: a tenure not ended: {before:?}"
        );
        let next = c
            .acquire("small", "next", Duration::from_secs(300), Duration::ZERO)
            .await
            .unwrap();
        assert!(
            next.lease.token > 1 << 32,
            "{tool_name}: {}",
            next.lease.token
        );
        let after = c.history("small", 100).await.unwrap();
        let tokens: Vec<u64> = after.iter().map(|t| t.token).collect();
        assert_eq!(
            tokens,
            [next.lease.token, 6, 5, 4, 3, 2, 1],
            "{tool_name}: the earlier history is kept across the floor"
        );
        let open = after
            .iter()
            .filter(|t| t.end.is_none_or(|e| e == End::Unspecified))
            .count();
        assert_eq!(open, 1, "{tool_name}: one tenure not ended: {after:?}");
        stop(s, Stop::Clean);
    }
}

/// `check`, `restore` and `recover` read the data dir from a scratch copy
/// in `TMPDIR`. A tool SIGKILLed while it makes that copy, or while it
/// fills it, leaves it behind; the next tool run removes it (no process
/// holds its lock any more), and never one that a live tool still reads
/// from or is still making (two tools run at once, as these tests do), nor
/// one of an earlier version younger than an hour.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scratch_copy_left_by_a_killed_tool_is_removed_by_the_next_run() {
    use std::os::fd::AsRawFd;
    let root = tempfile::tempdir().unwrap();
    let (dir, _, _) = used_dir_and_backup(root.path()).await;
    let tmp = root.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let scratch = || -> Vec<String> {
        entries(&tmp)
            .into_iter()
            .filter(|n| n.contains("leasehold-check-"))
            .collect()
    };

    // Killed before the scratch folder gets its name (it is left under
    // its hidden name, and stays while it is young: its maker may not
    // have locked it yet), then while the data dir is copied into it.
    let mut hidden_left = None;
    for (syscall, left_now) in [("rename", 1), ("copy_file_range", 2)] {
        let out = Command::new("strace")
            .args(["-f", "-qq", "-o", "/dev/null", "-e"])
            .arg(format!("trace={syscall}"))
            .arg("-e")
            .arg(format!("inject={syscall}:signal=KILL:when=1"))
            .arg("--")
            .arg(bin())
            .arg("check")
            .arg("--data-dir")
            .arg(&dir)
            .env("TMPDIR", &tmp)
            .output()
            .expect("strace is needed (scripts/test installs it)");
        assert_eq!(
            out.status.signal(),
            Some(libc::SIGKILL),
            "check was not killed at its first {syscall}: {}",
            said(&out)
        );
        let left = scratch();
        assert_eq!(left.len(), left_now, "after a kill at {syscall}: {left:?}");
        assert!(left[0].starts_with('.'), "{left:?}");
        hidden_left.get_or_insert_with(|| left[0].clone());
    }
    // The hidden one, as if killed two hours ago.
    std::fs::File::open(tmp.join(hidden_left.unwrap()))
        .unwrap()
        .set_modified(std::time::SystemTime::now() - Duration::from_secs(7200))
        .unwrap();

    // A scratch folder a live tool owns (this test holds its lock), one
    // of an earlier version (no lock file) made a moment ago, and one
    // being made (hidden, not locked yet) a moment ago.
    let live = tmp.join("leasehold-check-1-1");
    std::fs::create_dir_all(live.join("copy")).unwrap();
    let owner = std::fs::File::create(live.join(".owner")).unwrap();
    // SAFETY: flock on a descriptor that `owner` keeps open.
    assert_eq!(
        unsafe { libc::flock(owner.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) },
        0
    );
    std::fs::create_dir(tmp.join("leasehold-check-2-2")).unwrap();
    std::fs::create_dir(tmp.join(".leasehold-check-4-4")).unwrap();
    std::fs::File::create(tmp.join(".leasehold-check-4-4/.owner")).unwrap();
    // And one of an earlier version, untouched for two hours.
    let old = tmp.join("leasehold-check-3-3");
    std::fs::create_dir(&old).unwrap();
    std::fs::File::open(&old)
        .unwrap()
        .set_modified(std::time::SystemTime::now() - Duration::from_secs(7200))
        .unwrap();

    let out = Command::new(bin())
        .arg("check")
        .arg("--data-dir")
        .arg(&dir)
        .env("TMPDIR", &tmp)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", said(&out));
    assert_eq!(
        scratch(),
        [
            ".leasehold-check-4-4",
            "leasehold-check-1-1",
            "leasehold-check-2-2"
        ],
        "what the run after the kills left"
    );
    drop(owner);
}
