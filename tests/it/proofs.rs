//! Signed grants on real server processes and both backends: every grant
//! carries a proof that verifies under the keys the server lists (by
//! `GetSigningKeys` and at `GET /keys`), renewals and reads keep it, a
//! transfer or an expiry's next grant gets a new one, and it survives a
//! restart; on the single node also a backup restored elsewhere, a
//! foreign backup, and a recover. A missing or damaged key refuses the
//! start, naming the way out; rotation keeps old proofs verifiable while
//! their key is listed, and not after. `CheckedWrite` takes a proof
//! instead of a token: the same fence, the claim checked, and, with a
//! policy, a write forwarded by another principal with the holder's
//! proof.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{bin, Place, ServerProcess};
use leasehold::client::proof::{self, KeySet, ProofErrorKind};
use leasehold::client::{Client, ClientError};

const LONG: Duration = Duration::from_secs(60);

/// A new private key in `dir`, as `openssl genpkey` would write one.
fn key_file(dir: &Path, name: &str) -> PathBuf {
    let f = dir.join(name);
    std::fs::write(&f, proof::Signer::generate_pem().unwrap()).unwrap();
    f
}

/// The server's keys, by `GetSigningKeys`, checked against `GET /keys`.
async fn keys(p: &ServerProcess, c: &Client) -> KeySet {
    let set = c.signing_keys().await.unwrap();
    let (code, body) = common::admin_request(p.admin, "/keys").await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        KeySet::from_jwks(&body).unwrap(),
        set,
        "GET /keys and GetSigningKeys differ"
    );
    set
}

fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// Starts a server on `place`: etcd frontends sign with `key`; the single
/// node with its data dir's own key.
fn start(place: &Place, key: &Path) -> ServerProcess {
    match place {
        Place::Local(_) => place.start(&[]),
        Place::Etcd { .. } => place.start(&["--signing-key", key.to_str().unwrap()]),
    }
}

/// Grant, renew, read, transfer and expiry: the proof of each grant, and
/// the fence of `CheckedWrite` with a proof.
async fn proofs_follow_grants(place: Place) {
    let tmp = tempfile::tempdir().unwrap();
    let key = key_file(tmp.path(), "k.pem");
    let p = start(&place, &key);
    let c = Client::connect(&p.url()).await.unwrap();
    let set = keys(&p, &c).await;
    assert_eq!(set.keys.len(), 1);
    let ttl = common::ttl(Duration::from_secs(3));

    let a = c.acquire("pj", "a@1", ttl, Duration::ZERO).await.unwrap();
    assert!(a.acquired);
    let pa = a.lease.proof.clone().expect("a grant carries a proof");
    let claims = proof::verify_for(&pa, &set, "pj", Some(a.lease.token)).unwrap();
    assert_eq!(
        (claims.holder.as_str(), claims.principal.as_str()),
        ("a@1", "")
    );
    assert_eq!(claims.ttl_ms, ttl.as_millis() as u64);
    assert!(
        claims.issued_at.abs_diff(now_s()) <= 5,
        "issued at {}",
        claims.issued_at
    );
    assert_eq!(claims.kid, set.keys[0].kid);

    // Renewals and reads keep it.
    let r = c
        .renew_lease("pj", "a@1", a.lease.token, ttl)
        .await
        .unwrap();
    assert_eq!(r.lease.proof.as_deref(), Some(pa.as_str()));
    assert_eq!(
        c.get_lease("pj").await.unwrap().proof.as_deref(),
        Some(pa.as_str())
    );
    let listed = c.list_leases("pj").await.unwrap();
    assert_eq!(listed[0].proof.as_deref(), Some(pa.as_str()));

    // A write with the proof instead of a token, and its refusals.
    assert_eq!(
        c.checked_write_with_proof("pj", &pa, b"k", b"1".to_vec())
            .await
            .unwrap(),
        1
    );
    let mut altered = pa.clone().into_bytes();
    let i = altered.len() / 2;
    altered[i] = if altered[i] == b'A' { b'B' } else { b'A' };
    let altered = String::from_utf8(altered).unwrap();
    for (bad, job, field) in [
        (altered.as_str(), "pj", "proof"),
        (pa.as_str(), "other", "proof"),
        ("not.a.proof", "pj", "proof"),
    ] {
        match c
            .checked_write_with_proof(job, bad, b"k", b"x".to_vec())
            .await
        {
            Err(ClientError::InvalidArgument { field: f, message }) => {
                assert_eq!(f.as_deref(), Some(field), "{message}")
            }
            other => panic!("{job} {bad:.20}: {other:?}"),
        }
    }
    // A forged proof: token 2^63, its signature not the server's.
    let forged = {
        let parts: Vec<&str> = pa.split('.').collect();
        let c64 = base64url(&proof::encode_claims(&proof::Claims {
            token: 1 << 63,
            ..claims.clone()
        }));
        format!("{}.{}.{}", parts[0], c64, parts[2])
    };
    assert!(matches!(
        c.checked_write_with_proof("pj", &forged, b"k", b"x".to_vec())
            .await,
        Err(ClientError::InvalidArgument { .. })
    ));
    assert_eq!(
        c.read("pj", b"k").await.unwrap().value,
        b"1",
        "nothing changed"
    );

    // A transfer: the successor's grant has a proof of its own.
    let url = p.url();
    let waiter = tokio::spawn(async move {
        let c = Client::connect(&url).await.unwrap();
        let a = c.acquire("pj", "b@2", ttl, LONG).await.unwrap();
        std::mem::forget(c);
        a
    });
    p.wait_for_waiters(1).await;
    let t = c
        .transfer_lease("pj", "a@1", a.lease.token, None, None)
        .await
        .unwrap();
    let b = waiter.await.unwrap();
    let pb = b.lease.proof.clone().unwrap();
    assert_eq!(t.proof.as_deref(), Some(pb.as_str()));
    assert_ne!(pb, pa);
    let cb = proof::verify_for(&pb, &set, "pj", Some(a.lease.token + 1)).unwrap();
    assert_eq!(cb.holder, "b@2");
    // The old proof still verifies (it was issued), but fences nothing.
    proof::verify_for(&pa, &set, "pj", Some(a.lease.token)).unwrap();
    assert!(matches!(
        c.checked_write_with_proof("pj", &pa, b"k", b"stale".to_vec())
            .await,
        Err(ClientError::Fenced { .. })
    ));
    assert_eq!(
        c.checked_write_with_proof("pj", &pb, b"k", b"2".to_vec())
            .await
            .unwrap(),
        2
    );

    // An expiry: the next grant, a new proof; the expired one is fenced.
    let next = c.acquire("pj", "c@3", ttl, LONG).await.unwrap();
    assert_eq!(next.lease.token, b.lease.token + 1);
    let pc = next.lease.proof.unwrap();
    assert_eq!(
        proof::verify_for(&pc, &set, "pj", None).unwrap().holder,
        "c@3"
    );
    assert!(matches!(
        c.checked_write_with_proof("pj", &pb, b"k", b"late".to_vec())
            .await,
        Err(ClientError::Fenced { .. })
    ));
    // A free job's lease carries none.
    c.release("pj", "c@3", next.lease.token).await.unwrap();
    assert_eq!(c.get_lease("pj").await.unwrap().proof, None);
    p.stop();
}

fn base64url(s: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proofs_follow_grants_renewals_transfers_and_expiry() {
    proofs_follow_grants(Place::local()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proofs_follow_grants_renewals_transfers_and_expiry_on_etcd() {
    proofs_follow_grants(Place::etcd()).await;
}

/// A restart keeps the live grant's proof, byte for byte.
async fn a_restart_keeps_the_proof(place: Place) {
    let tmp = tempfile::tempdir().unwrap();
    let key = key_file(tmp.path(), "k.pem");
    let p = start(&place, &key);
    let c = Client::connect(&p.url()).await.unwrap();
    let a = c.acquire("rj", "a@1", LONG, Duration::ZERO).await.unwrap();
    let pa = a.lease.proof.unwrap();
    p.stop();
    let p = start(&place, &key);
    let c = Client::connect(&p.url()).await.unwrap();
    let set = keys(&p, &c).await;
    let l = c.get_lease("rj").await.unwrap();
    assert_eq!(l.token, a.lease.token, "the lease lives on");
    assert_eq!(
        l.proof.as_deref(),
        Some(pa.as_str()),
        "the same proof after a restart"
    );
    let r = c.renew_lease("rj", "a@1", l.token, LONG).await.unwrap();
    assert_eq!(r.lease.proof.as_deref(), Some(pa.as_str()));
    proof::verify_for(&pa, &set, "rj", Some(l.token)).unwrap();
    p.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_keeps_the_proof_of_a_live_grant() {
    a_restart_keeps_the_proof(Place::local()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_keeps_the_proof_of_a_live_grant_on_etcd() {
    a_restart_keeps_the_proof(Place::etcd()).await;
}

fn leasehold(args: &[&std::ffi::OsStr]) -> std::process::Output {
    Command::new(bin()).args(args).output().unwrap()
}

fn ok(out: std::process::Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A backup restored into a new data dir brings its key: the restored
/// server lists it and its old proofs verify; restored over a data dir
/// with a key of its own (a foreign backup), both keys are listed, the
/// data dir's still signing; a recover keeps the key in place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restore_and_recover_keep_proofs_verifiable() {
    let root = tempfile::tempdir().unwrap();
    let (d1, d2, file) = (
        root.path().join("d1"),
        root.path().join("d2"),
        root.path().join("b.lhb"),
    );
    let p = ServerProcess::start(&d1, &[]);
    let c = Client::connect(&p.url()).await.unwrap();
    let k1 = keys(&p, &c).await;
    let a = c.acquire("bj", "a@1", LONG, Duration::ZERO).await.unwrap();
    let pa = a.lease.proof.unwrap();
    ok(leasehold(&[
        "backup".as_ref(),
        "--server".as_ref(),
        p.url().as_ref(),
        "--out".as_ref(),
        file.as_os_str(),
    ]));
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&file).unwrap().permissions().mode() & 0o077,
        0,
        "a backup holds a private key"
    );
    p.stop();

    // Into a new data dir: the same key, signing.
    ok(leasehold(&[
        "restore".as_ref(),
        "--data-dir".as_ref(),
        d2.as_os_str(),
        file.as_os_str(),
    ]));
    let p = ServerProcess::start(&d2, &[]);
    let c = Client::connect(&p.url()).await.unwrap();
    assert_eq!(keys(&p, &c).await, k1);
    proof::verify_for(&pa, &k1, "bj", Some(a.lease.token)).unwrap();
    let b = c.acquire("bj", "b@2", LONG, Duration::ZERO).await.unwrap();
    assert!(b.lease.token > a.lease.token);
    assert_eq!(
        proof::verify(&b.lease.proof.unwrap(), &k1).unwrap().kid,
        k1.keys[0].kid
    );
    p.stop();

    // A foreign backup over a data dir with its own key.
    let d3 = root.path().join("d3");
    let p = ServerProcess::start(&d3, &[]);
    let k3 = keys(&p, &Client::connect(&p.url()).await.unwrap()).await;
    p.stop();
    assert_ne!(k3, k1);
    ok(leasehold(&[
        "restore".as_ref(),
        "--data-dir".as_ref(),
        d3.as_os_str(),
        file.as_os_str(),
    ]));
    let p = ServerProcess::start(&d3, &[]);
    let c = Client::connect(&p.url()).await.unwrap();
    let both = keys(&p, &c).await;
    assert_eq!(
        both.keys,
        [k3.keys[0].clone(), k1.keys[0].clone()],
        "its own key first, the backup's after"
    );
    proof::verify_for(&pa, &both, "bj", None).unwrap();
    let n = c.acquire("bj", "n@3", LONG, Duration::ZERO).await.unwrap();
    assert_eq!(
        proof::verify(&n.lease.proof.unwrap(), &both).unwrap().kid,
        k3.keys[0].kid
    );
    p.stop();

    // A recover leaves the key where it is.
    let out = ok(leasehold(&[
        "recover".as_ref(),
        "--data-dir".as_ref(),
        d1.as_os_str(),
    ]));
    assert!(!out.is_empty());
    let p = ServerProcess::start(&d1, &[]);
    let c = Client::connect(&p.url()).await.unwrap();
    assert_eq!(keys(&p, &c).await, k1);
    p.stop();
    let report = ok(leasehold(&[
        "check".as_ref(),
        "--data-dir".as_ref(),
        d1.as_os_str(),
    ]));
    assert!(report.contains(&k1.keys[0].kid), "{report}");
}

/// `leasehold serve` on `dir`, expected to refuse: its message.
fn refused(dir: &Path, extra: &[&str]) -> String {
    let out = common::serve_command(dir).args(extra).output().unwrap();
    assert!(!out.status.success(), "started");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A data dir whose key file is gone (its marker says one was made) or
/// damaged refuses to start, and `check` says so; nothing makes a key
/// silently. `--new-signing-key` makes one, on purpose; a data dir from
/// before signed grants gets one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_or_damaged_key_refuses_the_start() {
    let root = tempfile::tempdir().unwrap();
    let d = root.path().join("d");
    let p = ServerProcess::start(&d, &[]);
    let old = keys(&p, &Client::connect(&p.url()).await.unwrap()).await;
    p.stop();
    let file = d.join("signing-keys.pem");
    let good = std::fs::read(&file).unwrap();

    std::fs::remove_file(&file).unwrap();
    let e = refused(&d, &[]);
    assert!(
        e.contains("signing key is gone") && e.contains("--new-signing-key"),
        "{e}"
    );
    assert!(!file.exists(), "a key was made");
    let out = leasehold(&["check".as_ref(), "--data-dir".as_ref(), d.as_os_str()]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("signing-keys.pem: missing"));

    for damaged in [
        &good[..good.len() / 2],
        b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
    ] {
        std::fs::write(&file, damaged).unwrap();
        let e = refused(&d, &[]);
        assert!(e.contains("damaged") || e.contains("no PEM"), "{e}");
        assert_eq!(
            std::fs::read(&file).unwrap(),
            damaged,
            "the damaged key was replaced"
        );
        let out = leasehold(&["check".as_ref(), "--data-dir".as_ref(), d.as_os_str()]);
        assert!(!out.status.success(), "check passed a damaged key");
    }

    std::fs::remove_file(&file).unwrap();
    let p = ServerProcess::start(&d, &["--new-signing-key"]);
    let new = keys(&p, &Client::connect(&p.url()).await.unwrap()).await;
    assert_ne!(new, old);
    p.stop();

    // A data dir from before signed grants (a store, neither the key nor
    // its marker) gets a key at its first start of this release.
    std::fs::remove_file(&file).unwrap();
    std::fs::remove_file(d.join("signing-keys.made")).unwrap();
    let p = ServerProcess::start(&d, &[]);
    assert_eq!(
        keys(&p, &Client::connect(&p.url()).await.unwrap())
            .await
            .keys
            .len(),
        1
    );
    p.stop();
}

/// Rotation: a new key given first signs, the old one still verifies;
/// dropped from the set, the old key's proofs are refused.
async fn rotation(place: Place) {
    let tmp = tempfile::tempdir().unwrap();
    let (ka, kb) = (key_file(tmp.path(), "a.pem"), key_file(tmp.path(), "b.pem"));
    let (a, b) = (ka.to_str().unwrap(), kb.to_str().unwrap());
    let p = place.start(&["--signing-key", a]);
    let c = Client::connect(&p.url()).await.unwrap();
    let set_a = keys(&p, &c).await;
    let g = c.acquire("kj", "a@1", LONG, Duration::ZERO).await.unwrap();
    let pa = g.lease.proof.unwrap();
    assert_eq!(proof::verify(&pa, &set_a).unwrap().kid, set_a.keys[0].kid);
    c.release("kj", "a@1", g.lease.token).await.unwrap();
    p.stop();

    let p = place.start(&["--signing-key", b, "--signing-key", a]);
    let c = Client::connect(&p.url()).await.unwrap();
    let set_ba = keys(&p, &c).await;
    assert_eq!(set_ba.keys[1], set_a.keys[0]);
    proof::verify_for(&pa, &set_ba, "kj", Some(g.lease.token)).unwrap();
    let h = c.acquire("kj", "b@2", LONG, Duration::ZERO).await.unwrap();
    let pb = h.lease.proof.unwrap();
    assert_eq!(
        proof::verify(&pb, &set_ba).unwrap().kid,
        set_ba.keys[0].kid,
        "the new key signs"
    );
    p.stop();

    let p = place.start(&["--signing-key", b]);
    let c = Client::connect(&p.url()).await.unwrap();
    let set_b = keys(&p, &c).await;
    assert!(set_b.get(&set_a.keys[0].kid).is_none());
    assert_eq!(
        proof::verify(&pa, &set_b).unwrap_err().kind,
        ProofErrorKind::UnknownKey
    );
    proof::verify(&pb, &set_b).unwrap();
    // The server refuses a write with the retired key's proof too.
    assert!(matches!(
        c.checked_write_with_proof("kj", &pa, b"k", b"x".to_vec())
            .await,
        Err(ClientError::InvalidArgument { .. })
    ));
    p.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotation_keeps_old_proofs_while_their_key_is_listed() {
    rotation(Place::local()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotation_keeps_old_proofs_while_their_key_is_listed_on_etcd() {
    rotation(Place::etcd()).await;
}

/// An etcd frontend without `--signing-key` signs nothing, and says so in
/// its key set; a damaged `--signing-key` refuses the start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_etcd_frontend_without_a_key_signs_nothing_and_a_bad_key_refuses_the_start() {
    let place = Place::etcd();
    let p = place.start(&[]);
    let c = Client::connect(&p.url()).await.unwrap();
    assert!(keys(&p, &c).await.keys.is_empty());
    let a = c.acquire("nj", "a@1", LONG, Duration::ZERO).await.unwrap();
    assert_eq!(a.lease.proof, None);
    p.stop();
    let tmp = tempfile::tempdir().unwrap();
    let bad = tmp.path().join("bad.pem");
    std::fs::write(&bad, "not a key").unwrap();
    let e = refused(tmp.path(), &["--signing-key", bad.to_str().unwrap()]);
    assert!(e.contains("--signing-key") && e.contains("bad.pem"), "{e}");
}

/// With a policy, a write may be forwarded with the holder's proof by a
/// principal that may write the job but does not hold it: fenced by the
/// proof's token, and the live grant must be the proof's principal's. A
/// token alone from that principal is refused, as before; a stale proof is
/// fenced; a job the forwarder may not write stays refused.
async fn forwarded_writes(on_etcd: bool) {
    use crate::security::{assert_denied, Setup, BILLING, OPS};
    let s = Setup::new();
    let tmp = tempfile::tempdir().unwrap();
    let key = key_file(tmp.path(), "k.pem");
    let k = key.to_str().unwrap();
    let p = match on_etcd {
        false => s.start(&[]),
        true => {
            let mut args = s.args();
            args.extend(["--signing-key".to_owned(), k.to_owned()]);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            common::etcd::frontend(
                &common::etcd::shared_endpoints().join(","),
                &common::etcd::fresh_prefix(),
                &args,
            )
        }
    };
    let billing = s.client(&p, Some(BILLING)).await;
    let ops = s.client(&p, Some(OPS)).await;
    let set = billing.signing_keys().await.unwrap();
    let ttl = common::ttl(Duration::from_secs(3));
    let a = billing
        .acquire("shared/f", "b@1", ttl, Duration::ZERO)
        .await
        .unwrap();
    let pa = a.lease.proof.unwrap();
    assert_eq!(proof::verify(&pa, &set).unwrap().principal, "billing");

    // ops, not the holder, forwards billing's write with billing's proof.
    assert_eq!(
        ops.checked_write_with_proof("shared/f", &pa, b"k", b"1".to_vec())
            .await
            .unwrap(),
        1
    );
    // With the token alone, the grant is another principal's.
    assert_denied(
        ops.checked_write("shared/f", a.lease.token, b"k", b"x".to_vec())
            .await
            .unwrap_err(),
        "write",
        "shared/f",
    );
    // A proof does not widen what the forwarder may write.
    let own = billing
        .acquire("billing/g", "b@1", ttl, Duration::ZERO)
        .await
        .unwrap();
    assert_denied(
        ops.checked_write_with_proof("billing/g", &own.lease.proof.unwrap(), b"k", b"x".to_vec())
            .await
            .unwrap_err(),
        "write",
        "billing/g",
    );
    // Once ops holds the job, billing's proof is stale: fenced.
    billing
        .release("shared/f", "b@1", a.lease.token)
        .await
        .unwrap();
    let o = ops
        .acquire("shared/f", "o@2", ttl, Duration::ZERO)
        .await
        .unwrap();
    assert!(matches!(
        ops.checked_write_with_proof("shared/f", &pa, b"k", b"late".to_vec())
            .await,
        Err(ClientError::Fenced { .. })
    ));
    assert_eq!(
        billing
            .checked_write_with_proof("shared/f", &o.lease.proof.unwrap(), b"k", b"2".to_vec())
            .await
            .unwrap(),
        2
    );
    p.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_forwarded_with_the_holders_proof_is_fenced_by_it() {
    forwarded_writes(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_forwarded_with_the_holders_proof_is_fenced_by_it_on_etcd() {
    forwarded_writes(true).await;
}

/// `leasehold signing-keys` prints the JWKS; `leasehold verify-proof`
/// prints what a proof states, and refuses (exit 1, saying why) another
/// job, another token, an altered proof, and a key set without its key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_prints_the_keys_and_verifies_a_proof() {
    let place = Place::local();
    let p = place.start(&[]);
    let c = Client::connect(&p.url()).await.unwrap();
    let a = c.acquire("cj", "a@1", LONG, Duration::ZERO).await.unwrap();
    let pa = a.lease.proof.unwrap();
    let url = p.url();
    let cli = |args: &[&str]| {
        Command::new(bin())
            .args(args)
            .args(["--server", &url])
            .output()
            .unwrap()
    };
    let jwks = ok(cli(&["signing-keys"]));
    assert_eq!(KeySet::from_jwks(&jwks).unwrap(), keys(&p, &c).await);
    let out = ok(cli(&["verify-proof", &pa, "--job", "cj", "--token", "1"]));
    assert!(
        out.starts_with("verified job=\"cj\" token=1 holder=\"a@1\""),
        "{out}"
    );
    let tmp = tempfile::tempdir().unwrap();
    let other = tmp.path().join("other.json");
    std::fs::write(&other, r#"{"keys":[]}"#).unwrap();
    let mut altered = pa.clone();
    altered.insert(10, 'x');
    for (args, kind) in [
        (
            vec!["verify-proof", pa.as_str(), "--job", "other"],
            "wrong job",
        ),
        (
            vec!["verify-proof", pa.as_str(), "--token", "2"],
            "wrong token",
        ),
        (vec!["verify-proof", altered.as_str()], "malformed"),
        (
            vec![
                "verify-proof",
                pa.as_str(),
                "--jwks",
                other.to_str().unwrap(),
            ],
            "unknown key",
        ),
    ] {
        let out = cli(&args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(
            said.starts_with(&format!("refused ({kind})")),
            "{args:?}: {said}"
        );
    }
    p.stop();
}
