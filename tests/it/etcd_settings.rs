//! Frontends on one prefix share the settings that are rules of the whole
//! (`--min-ttl`, `--max-ttl`, `--history-per-job`, `--max-keys-per-job`,
//! whether `--policy` is given): the first records them, and a frontend
//! whose settings differ refuses to start, naming each one, unless it
//! replaces them on purpose. Real frontend processes on a real etcd.

use crate::common;

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};

use common::etcd::{fresh_prefix, frontend, frontend_command, shared_endpoints};

/// Starts `cmd` and expects it to refuse to start: returns its standard
/// error. A start that prints its listening line fails the test.
fn refused(mut cmd: Command) -> String {
    let mut child = cmd
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    if !line.is_empty() {
        let _ = child.kill();
        panic!("it started: {line}");
    }
    let status = child.wait().unwrap();
    assert!(!status.success());
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    err
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frontend_whose_shared_settings_differ_refuses_to_start_naming_them() {
    let endpoints = shared_endpoints().join(",");
    let prefix = fresh_prefix();
    let policy = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        policy.path(),
        common::pki::token_policy(&[("team", "secret-of-team", &["t/"])]),
    )
    .unwrap();
    let policy = policy.path().to_str().unwrap().to_owned();
    let first = frontend(&endpoints, &prefix, &["--max-ttl", "1h"]);

    let err = refused(frontend_command(&endpoints, &prefix, &["--max-ttl", "30s"]));
    assert!(
        err.contains("--max-ttl: 30000ms here, 3600000ms on the frontends already serving"),
        "{err}"
    );
    let err = refused(frontend_command(
        &endpoints,
        &prefix,
        &["--max-ttl", "1h", "--policy", &policy],
    ));
    assert!(
        err.contains("--policy: given here, not given on the frontends already serving"),
        "{err}"
    );
    assert!(err.contains("--replace-shared-settings"), "{err}");

    // The same settings: it starts, beside the first.
    let second = frontend(&endpoints, &prefix, &["--max-ttl", "1h"]);
    drop(second);

    // Replaced on purpose: the new settings are the ones to agree with.
    drop(first);
    let replaced = frontend(
        &endpoints,
        &prefix,
        &[
            "--max-ttl",
            "1h",
            "--policy",
            &policy,
            "--replace-shared-settings",
        ],
    );
    let err = refused(frontend_command(&endpoints, &prefix, &["--max-ttl", "1h"]));
    assert!(
        err.contains("--policy: not given here, given on the frontends already serving"),
        "{err}"
    );
    drop(replaced);
}
