//! `leasehold health`, the probe the image's HEALTHCHECK, the systemd
//! unit's users and the Kubernetes exec probes run: against a real server
//! process, plain and with TLS, client CA and a policy (as in the image),
//! on the admin port (`/healthz`) and the gRPC port (gRPC health).

use crate::common::{self, ServerProcess};

use std::process::{Command, Output};

/// `leasehold health ARGS` with none of the server's variables from the
/// test's own environment.
fn probe(args: &[&str]) -> Output {
    let mut c = Command::new(common::bin());
    c.arg("health").args(args);
    for v in [
        "LEASEHOLD_ADMIN_LISTEN",
        "LEASEHOLD_LISTEN",
        "LEASEHOLD_TLS_CERT",
    ] {
        c.env_remove(v);
    }
    c.output().expect("run leasehold health")
}

/// `--timeout` for a probe that should succeed: its default of 3 s is no
/// longer than a stall of a loaded machine, and the test is about the
/// answer, not how fast it comes.
const PATIENT: [&str; 2] = ["--timeout", "30s"];

/// [`probe`] for an answer the test expects: with [`PATIENT`].
fn patient_probe(args: &[&str]) -> Output {
    probe(&[args, &PATIENT].concat())
}

fn healthy(out: &Output) -> bool {
    out.status.success() && String::from_utf8_lossy(&out.stdout).trim() == "ok"
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn the_probe_answers_on_both_ports_plain_and_with_tls() {
    let dir = tempfile::tempdir().unwrap();

    // Plain: the admin port and the gRPC port.
    let p = ServerProcess::start(&dir.path().join("plain"), &[]);
    let (admin, grpc) = (p.admin.to_string(), p.addr.to_string());
    let out = patient_probe(&["--admin-listen", &admin]);
    assert!(healthy(&out), "plain /healthz: {out:?}");
    let out = patient_probe(&["--grpc", "--listen", &grpc]);
    assert!(healthy(&out), "plain gRPC health: {out:?}");
    let out = patient_probe(&["--alive", "--admin-listen", &admin]);
    assert!(healthy(&out), "plain /healthz --alive: {out:?}");
    drop(p);
    // Nothing listens any more: exit 1, saying why.
    let out = probe(&["--admin-listen", &admin]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(stderr(&out).contains("unhealthy"), "{}", stderr(&out));
    let out = probe(&["--alive", "--admin-listen", &admin]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "--alive, nothing listens: {out:?}"
    );

    // As in the image: on 0.0.0.0, TLS on both ports, client CA and a
    // policy. The probe is given the addresses as the server was (it
    // reaches them on loopback) and learns TLS from the server's own
    // variable, LEASEHOLD_TLS_CERT; it needs no credentials.
    let s = common::secured();
    let f = |p: &std::path::Path| p.display().to_string();
    let mut serve = Command::new(common::bin());
    serve
        .args([
            "serve",
            "--listen",
            "0.0.0.0:0",
            "--admin-listen",
            "0.0.0.0:0",
        ])
        .arg("--data-dir")
        .arg(dir.path().join("tls"))
        .args(["--tls-cert", &f(&s.cert_file), "--tls-key", &f(&s.key_file)])
        .args([
            "--tls-client-ca",
            &f(&s.ca_file),
            "--policy",
            &f(&s.policy_file),
        ]);
    let p = ServerProcess::spawn(serve, &dir.path().join("tls"));
    assert!(p.admin.ip().is_unspecified(), "{}", p.admin);
    let (admin, grpc) = (p.admin.to_string(), p.addr.to_string());
    let mut c = Command::new(common::bin());
    let out = c
        .args(["health", "--admin-listen", &admin])
        .args(PATIENT)
        .env("LEASEHOLD_TLS_CERT", &s.cert_file)
        .output()
        .unwrap();
    assert!(healthy(&out), "TLS /healthz: {out:?}");
    let out = patient_probe(&["--grpc", "--listen", &grpc, "--tls-cert", &f(&s.cert_file)]);
    assert!(healthy(&out), "TLS gRPC health: {out:?}");
    // Plain HTTP to a TLS port is no answer.
    let out = probe(&["--admin-listen", &admin, "--timeout", "1s"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
}
