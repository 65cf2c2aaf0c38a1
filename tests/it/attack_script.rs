//! The attack script of the second security pass: its attacks, one after
//! another, against one server process with TLS, client certificates and
//! a policy, as an attacker would run them. Each is refused with its
//! documented status, and after each the victims' state (their leases,
//! with holder, principal, token and TTL, and their keys, as `admin` reads
//! them) is what it was. Each attack also has a test of its own, on both
//! backends where the backend matters (`security`, `overload`); what is
//! refused at start-up (a policy without TLS off loopback, `--etcd-user`
//! over clear text, a certificate name listed twice) is there too.

use crate::common;
use crate::overload::{connect_from, count_closed};
use crate::security::{self, Setup, ADMIN, BILLING, NOW, OPS, TTL};

use std::time::Duration;

use common::pki;
use leasehold::client::{Client, ClientError, Security};
use leasehold::proto;
use tonic::Code;

const RACER: &str = "racer-secret";
const LESSEE: &str = "lessee-secret";

/// The jobs whose state no attack may change.
const VICTIMS: [&str; 3] = ["billing/state", "ops/state", "shared/state"];

/// The victims' leases (without the time left) and keys, as admin reads
/// them.
async fn victims(admin: &Client) -> Vec<String> {
    let mut out = Vec::new();
    for job in VICTIMS {
        let l = admin.get_lease(job).await.unwrap();
        out.push(format!(
            "{job}: holder {:?} principal {:?} token {} ttl {:?}",
            l.holder, l.principal, l.token, l.ttl
        ));
        for k in admin.list_keys(job, b"").await.unwrap() {
            let v = admin.read(job, &k.key).await.unwrap();
            out.push(format!(
                "  {:?}: version {} token {} {:?}",
                k.key, k.version, k.token, v.value
            ));
        }
    }
    out
}

/// A TLS channel to the gRPC port from the local address `from`.
async fn channel_from(
    s: &Setup,
    p: &common::ServerProcess,
    from: &str,
) -> tonic::transport::Channel {
    tonic::transport::Endpoint::from_shared(security::url(p))
        .unwrap()
        .local_address(Some(from.parse().unwrap()))
        .tls_config(
            tonic::transport::ClientTlsConfig::new()
                .ca_certificate(tonic::transport::Certificate::from_pem(s.ca.pem())),
        )
        .unwrap()
        .connect()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_attack_against_one_server_is_refused_and_changes_nothing() {
    let s = Setup::new();
    let extra = format!(
        "[[principal]]\nname = \"root\"\ncert_names = [\"root.workers.internal\"]\n\n\
         [[grant]]\nprincipal = \"root\"\njobs = [\"\"]\nactions = [\"admin\"]\n\n\
         [[principal]]\nname = \"racer\"\ntoken_sha256 = [\"{}\"]\n\n\
         [[grant]]\nprincipal = \"racer\"\njobs = [\"shared/\"]\nactions = [\"lease\"]\n\n\
         [[principal]]\nname = \"lessee\"\ntoken_sha256 = [\"{}\"]\n\
         limits = {{ max_jobs = 3 }}\n\n\
         [[grant]]\nprincipal = \"lessee\"\njobs = [\"l/\"]\nactions = [\"lease\"]\n",
        pki::sha256_hex(RACER),
        pki::sha256_hex(LESSEE)
    );
    std::fs::write(&s.policy, format!("{extra}{}", security::policy())).unwrap();
    let ca = s.ca_file.display().to_string();
    // A handshake timeout that outlasts the admin port's count below.
    let p = s.start(&[
        "--tls-client-ca",
        &ca,
        "--max-connections",
        "200",
        "--handshake-timeout",
        "60s",
    ]);
    let admin = s.client(&p, Some(ADMIN)).await;
    let billing = s.client(&p, Some(BILLING)).await;
    let ops = s.client(&p, Some(OPS)).await;
    for (c, job) in [
        (&billing, "billing/state"),
        (&ops, "ops/state"),
        (&billing, "shared/state"),
    ] {
        let held = c
            .acquire(job, "victim", Duration::from_secs(600), NOW)
            .await
            .unwrap();
        assert!(held.acquired);
        c.checked_write(job, held.lease.token, b"k", b"v".to_vec())
            .await
            .unwrap();
    }
    let before = victims(&admin).await;
    let mut attacks = Vec::new();
    let mut unchanged = |what: &'static str, now: Vec<String>| {
        assert_eq!(now, before, "the victims' state changed: {what}");
        attacks.push(what);
    };

    // A stream of writes carrying the job's next token, racing another
    // principal's Acquire (High 1).
    security::next_token_race(&s, &p, 3).await;
    unchanged("writes with the next token", victims(&admin).await);

    // Client certificates that are no principal's, or two (High 4).
    let named: [(&[&str], &str, &str); 3] = [
        (&["*.workers.internal"], "x", "names no principal"),
        (
            &["nobody.elsewhere.internal"],
            "root.workers.internal",
            "names no principal",
        ),
        (
            &["billing.workers.internal", "root.workers.internal"],
            "x",
            "names two principals",
        ),
    ];
    for (names, cn, words) in named {
        let (cert, key) = s.ca.issue_with(names, true, |p| {
            p.distinguished_name.push(rcgen::DnType::CommonName, cn)
        });
        let c = Client::connect_with(
            &security::url(&p),
            Security {
                ca_pem: Some(s.ca.pem().into_bytes()),
                cert_pem: Some(cert.into_bytes()),
                key_pem: Some(key.into_bytes()),
                ..Security::default()
            },
        )
        .await
        .unwrap();
        for e in [
            c.delete_job("billing/state").await.unwrap_err(),
            c.backup_to(&mut Vec::new()).await.unwrap_err(),
        ] {
            match e {
                ClientError::Unauthenticated(m) => assert!(m.contains(words), "{m}"),
                e => panic!("{names:?}: expected UNAUTHENTICATED, got {e:?}"),
            }
        }
    }
    unchanged("certificates that name no principal", victims(&admin).await);

    // Listings that would name another's jobs (Medium 6).
    let mut raw = security::raw(&s, &p, BILLING).await;
    for prefix in ["ops/", "ops/st", "nothing/"] {
        let r = raw
            .list_leases(proto::ListLeasesRequest {
                prefix: prefix.into(),
                page_size: 1,
                page_token: String::new(),
            })
            .await
            .unwrap()
            .into_inner();
        assert!(
            r.leases.is_empty() && r.next_page_token.is_empty(),
            "{prefix}: {r:?}"
        );
    }
    let lessee = s.client(&p, Some(LESSEE)).await;
    security::assert_denied(lessee.list_leases("").await.unwrap_err(), "read", "");
    unchanged("listings", victims(&admin).await);

    // `lease` without `read`: who holds the job, and its token, stay
    // unseen; its holder string cannot be taken over.
    let racer = s.client(&p, Some(RACER)).await;
    let busy = racer.acquire("shared/state", "r", TTL, NOW).await.unwrap();
    assert!(!busy.acquired);
    assert_eq!(
        (busy.lease.holder, busy.lease.principal, busy.lease.token),
        (None, None, 0)
    );
    security::assert_denied(
        racer
            .acquire("shared/state", "victim", TTL, NOW)
            .await
            .unwrap_err(),
        "lease",
        "shared/state",
    );
    unchanged("a lease grant without read", victims(&admin).await);

    // Another principal's lease, with its holder string and token.
    let token = admin.get_lease("shared/state").await.unwrap().token;
    let short = Duration::from_secs(3);
    security::assert_denied(
        ops.renew("shared/state", "victim", token, short)
            .await
            .unwrap_err(),
        "lease",
        "shared/state",
    );
    security::assert_denied(
        ops.release("shared/state", "victim", token)
            .await
            .unwrap_err(),
        "lease",
        "shared/state",
    );
    let st = security::raw(&s, &p, OPS)
        .await
        .release(proto::ReleaseRequest {
            job: "shared/state".into(),
            holder: "victim".into(),
            token,
            give_back: true,
        })
        .await
        .unwrap_err();
    assert_eq!(st.code(), Code::PermissionDenied, "{st:?}");
    let e = ops
        .checked_write("shared/state", token, b"k", b"stolen".to_vec())
        .await
        .unwrap_err();
    assert!(matches!(e, ClientError::PermissionDenied { .. }), "{e:?}");
    unchanged("another principal's lease", victims(&admin).await);

    // A look-alike holder: invisible characters are refused.
    for holder in ["vic\u{200B}tim", "victim\u{202E}"] {
        let e = billing
            .acquire("billing/state", holder, TTL, NOW)
            .await
            .unwrap_err();
        assert!(format!("{e:?}").contains("format characters"), "{e:?}");
    }
    unchanged("look-alike holders", victims(&admin).await);

    // Guessing tokens from 127.0.0.3: throttled after 20, while a proven
    // secret from there is served.
    let guesser = channel_from(&s, &p, "127.0.0.3").await;
    let with = |secret: &str| {
        proto::leases_client::LeasesClient::with_interceptor(
            guesser.clone(),
            security::Bearer(format!("Bearer {secret}").parse().unwrap()),
        )
    };
    let get = proto::GetLeaseRequest {
        job: "ops/state".into(),
    };
    let mut messages = Vec::new();
    for i in 0..25 {
        let st = with(&format!("guess-{i}"))
            .get_lease(get.clone())
            .await
            .unwrap_err();
        assert_eq!(st.code(), Code::Unauthenticated);
        messages.push(st.message().to_owned());
    }
    assert!(
        messages[..20]
            .iter()
            .all(|m| m.contains("matches no principal")),
        "{messages:?}"
    );
    assert!(
        messages[20..]
            .iter()
            .all(|m| m.contains("failed authentications from 127.0.0.3")),
        "{messages:?}"
    );
    with(OPS).get_lease(get.clone()).await.unwrap();
    let (code, text) = security::admin_get_path(&s, &p, "/metrics", Some(ADMIN)).await;
    assert_eq!(code, 200);
    let throttled: f64 = text
        .lines()
        .filter(|l| {
            l.starts_with("leasehold_auth_denied_total{") && l.contains("reason=\"throttled\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert!(throttled >= 5.0, "{throttled} throttled refusals counted");
    unchanged("guessed tokens", victims(&admin).await);

    // The admin port from 127.0.0.2: silent connections get 16 places,
    // and the probe is answered (High 2).
    let mut held = Vec::new();
    for _ in 0..40 {
        held.push(connect_from("127.0.0.2", p.admin).await.unwrap());
    }
    assert_eq!(
        count_closed(&mut held, 24).await,
        24,
        "not 16 admin connections open from one address"
    );
    assert_eq!(
        security::admin_get_path(&s, &p, "/healthz", None).await,
        (200, "ok\n".to_owned())
    );
    drop(held);
    unchanged("the admin port held", victims(&admin).await);

    // The gRPC port filled with connections without credentials, each
    // with a health Watch, from 127.0.0.4 (High 3): a client with a token
    // still gets in, and those with one keep their connections.
    let mut watchers = Vec::new();
    for _ in 0..220 {
        let channel = channel_from(&s, &p, "127.0.0.4").await;
        let mut w = tonic_health::pb::health_client::HealthClient::new(channel)
            .watch(tonic_health::pb::HealthCheckRequest {
                service: String::new(),
            })
            .await
            .unwrap()
            .into_inner();
        assert!(w.message().await.unwrap().is_some());
        watchers.push(w);
    }
    let late = s.client(&p, Some(BILLING)).await;
    late.get_lease("billing/state").await.unwrap();
    ops.get_lease("ops/state").await.unwrap();
    drop(watchers);
    unchanged(
        "the gRPC port filled without credentials",
        victims(&admin).await,
    );

    // One principal's flood of new jobs stops at its own max_jobs, and
    // the others still create theirs (Medium 8).
    for i in 0..3 {
        let job = format!("l/{i}");
        assert!(lessee.acquire(&job, "f", TTL, NOW).await.unwrap().acquired);
    }
    let e = lessee.acquire("l/3", "f", TTL, NOW).await.unwrap_err();
    assert!(
        matches!(&e, ClientError::QuotaExceeded { message, .. }
            if message.contains("principal \"lessee\": max_jobs 3")),
        "{e:?}"
    );
    assert_eq!(admin.get_lease("l/3").await.unwrap().token, 0);
    let theirs = billing.acquire("billing/new", "w", TTL, NOW).await.unwrap();
    assert!(theirs.acquired);
    unchanged("a flood of new jobs", victims(&admin).await);

    // A reload that takes grants away reaches the streams already open
    // (Medium 5). Last: it rewrites the policy.
    security::streams_follow_a_reload(&s, &p).await;
    unchanged("streams across a reload", victims(&admin).await);

    println!(
        "{} attacks on one server, each refused, the victims unchanged: {attacks:?}",
        attacks.len()
    );
}

/// In etcd mode, a frontend started without `--policy` on the prefix that
/// policed frontends serve would create holders bound to no principal, and
/// let anonymous callers write with a principal's live token: it refuses
/// to start, naming the setting, and the policed frontend's lease is as it
/// was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_etcd_a_frontend_without_the_policy_cannot_join_policed_ones() {
    let s = Setup::new();
    let endpoints = common::etcd::shared_endpoints().join(",");
    let prefix = common::etcd::fresh_prefix();
    let args = s.args();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let policed = common::etcd::frontend(&endpoints, &prefix, &args);
    let billing = s.client(&policed, Some(BILLING)).await;
    let held = billing
        .acquire("billing/state", "victim", Duration::from_secs(600), NOW)
        .await
        .unwrap();
    let out = common::etcd::frontend_command(&endpoints, &prefix, &[])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(out.stdout.is_empty(), "it started listening");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--policy: not given here, given on the frontends already serving"),
        "{err}"
    );
    let admin = s.client(&policed, Some(ADMIN)).await;
    let l = admin.get_lease("billing/state").await.unwrap();
    assert_eq!(
        (l.holder.as_deref(), l.principal.as_deref(), l.token),
        (Some("victim"), Some("billing"), held.lease.token)
    );
}
