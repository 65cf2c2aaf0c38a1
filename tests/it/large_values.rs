//! Values near the size limit from several writers at once, against the
//! real server process over gRPC.

use crate::common;

use std::time::Duration;

use common::ServerProcess;
use leasehold::client::Client;

const HOUR: Duration = Duration::from_secs(3600);

/// Eight writers, each rewriting 20 keys of its own, with values of 60 to
/// 65 KiB. sled keeps pages that large in blob files, and deletes the ones
/// it no longer needs, from its own threads, while checkpoints sync the
/// rest. No write may fail because another one ran, and the store must
/// never fail or be reopened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writers_of_64_kib_values_never_fail() {
    const WRITERS: usize = 8;
    const WRITES: usize = 300;
    const KEYS: usize = 20;
    let len = |w: usize, i: usize| 60 * 1024 + (i * 977 + w * 131) % (5 * 1024 + 1);
    let byte = |w: usize, i: usize| (w * 31 + i) as u8;
    let dir = tempfile::tempdir().unwrap();
    // 65 KiB is above the default limit of 64 KiB.
    let server = ServerProcess::start(dir.path(), &["--max-value-bytes", "66560"]);
    let c = Client::connect(&server.url()).await.unwrap();
    let token = c
        .acquire("big", "a", HOUR, Duration::ZERO)
        .await
        .unwrap()
        .lease
        .token;
    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        let url = server.url();
        tasks.push(tokio::spawn(async move {
            let c = Client::connect(&url).await.unwrap();
            let mut failed = Vec::new();
            for i in 0..WRITES {
                let key = format!("w{w}/k{:02}", i % KEYS);
                let value = vec![byte(w, i); len(w, i)];
                if let Err(e) = c.checked_write("big", token, key.as_bytes(), value).await {
                    failed.push(format!("{key}: {e}"));
                }
            }
            failed
        }));
    }
    let mut failed = Vec::new();
    for t in tasks {
        failed.extend(t.await.unwrap());
    }
    let m = common::admin_request(server.admin, "/metrics").await.1;
    let failures = common::metric(&m, "leasehold_store_failures_total");
    let recoveries = common::metric(&m, "leasehold_store_recoveries_total");
    println!(
        "failed writes: {} of {}; store failures {failures:?}, recoveries {recoveries:?}",
        failed.len(),
        WRITERS * WRITES,
    );
    assert!(
        failed.is_empty(),
        "{} of {} writes failed, the first: {:?}",
        failed.len(),
        WRITERS * WRITES,
        &failed[..failed.len().min(3)]
    );
    assert_eq!((failures, recoveries), (Some(0.0), Some(0.0)), "{m}");
    // Every key holds its last write.
    for w in 0..WRITERS {
        for k in [0, 7, KEYS - 1] {
            let v = c
                .read("big", format!("w{w}/k{k:02}").as_bytes())
                .await
                .unwrap();
            let i = WRITES - KEYS + k;
            assert_eq!((v.value.len(), v.value[0]), (len(w, i), byte(w, i)));
            assert_eq!(v.version, (WRITES / KEYS) as u64);
        }
    }
}
