//! Shard groups (`Shards.Join`, `GetGroup`) over real gRPC on both
//! backends, with members that are real `leasehold join` processes:
//! balance after joins and leaves, handovers with token + 1 and the old
//! owner fenced, a SIGKILLed member's shards owned again at once, a
//! SIGSTOPped one's kept until its TTL, a member that never acknowledges a
//! revoke, a count that differs refused, and the Rust `ShardMember`
//! cancelling a shard's work before it acknowledges.

use crate::common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use leasehold::client::{Client, ClientError, ShardMember, ShardOptions};
use leasehold::proto;
use leasehold::proto::join_response::Kind;

/// A `leasehold join` process, its output read by a thread into lines.
struct Member {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Member {
    fn start(url: &str, group: &str, shards: u32, name: &str, ttl: &str) -> Member {
        let mut child = Command::new(common::bin())
            .args(["join", group, "--server", url, "--name", name, "--ttl", ttl])
            .args(["--shards", &shards.to_string()])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let out = child.stdout.take().unwrap();
        let l = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { return };
                l.lock().unwrap().push(line);
            }
        });
        Member { child, lines }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn said(&self, prefix: &str) -> Vec<String> {
        let l = self.lines.lock().unwrap();
        l.iter()
            .filter(|x| x.starts_with(prefix))
            .cloned()
            .collect()
    }

    /// Its identity, from its `joined` line.
    async fn id(&self) -> String {
        common::eventually("the member's joined line", || async {
            let j = self.said("joined ").into_iter().next()?;
            let m = j
                .split_whitespace()
                .find_map(|w| w.strip_prefix("member="))?;
            Some(m.to_owned())
        })
        .await
    }

    fn stop(mut self) {
        common::signal(self.pid(), libc::SIGTERM);
        let status = self.child.wait().unwrap();
        assert!(status.success(), "leasehold join exited with {status}");
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Shards per member, by member.
fn counts(g: &proto::ShardGroup) -> BTreeMap<String, usize> {
    g.members
        .iter()
        .map(|m| (m.member.clone(), m.shards.len()))
        .collect()
}

/// Waits until the group has exactly `members` (as counts of shards).
async fn balanced(c: &Client, group: &str, want: &[(&str, usize)]) -> proto::ShardGroup {
    let want: BTreeMap<String, usize> = want.iter().map(|(m, n)| (m.to_string(), *n)).collect();
    common::eventually(&format!("group {group} to be {want:?}"), || async {
        let g = c.get_group(group).await.ok()?;
        let unowned = g.owners.iter().any(|o| o.member.is_empty());
        (counts(&g) == want && !unowned).then_some(g)
    })
    .await
}

fn owners(g: &proto::ShardGroup) -> Vec<(String, u64)> {
    g.owners
        .iter()
        .map(|o| (o.member.clone(), o.token))
        .collect()
}

/// Three members join one after another, then one leaves: every live
/// member owns ⌊12/M⌋ or ⌈12/M⌉ shards after each; only the shards a
/// balance needs move, each to token + 1; the old owner's write with its
/// token on a moved shard is fenced, the new owner's passes; a Join naming
/// another count is refused naming `shards`; the metrics count the moves.
async fn members_balance_and_moves_are_handovers(place: common::Place) {
    let server = place.start(&[]);
    let url = server.url();
    let c = Client::connect(&url).await.unwrap();
    let g = "orders";

    let a = Member::start(&url, g, 12, "a", "60s");
    let ida = a.id().await;
    let one = balanced(&c, g, &[(&ida, 12)]).await;
    assert_eq!(one.shards, 12);
    assert!(owners(&one).iter().all(|(_, t)| *t == 1), "{one:?}");

    let b = Member::start(&url, g, 12, "b", "60s");
    let idb = b.id().await;
    let two = balanced(&c, g, &[(&ida, 6), (&idb, 6)]).await;
    let moved: Vec<usize> = (0..12).filter(|&k| two.owners[k].member == idb).collect();
    assert_eq!(moved.len(), 6);
    for &k in &moved {
        assert_eq!(two.owners[k].token, 2, "a move is token + 1: {two:?}");
        let job = &two.owners[k].job;
        assert_eq!(job, &format!("{g}/{k}"));
        let stale = c.checked_write(job, 1, b"offset", b"a".to_vec()).await;
        assert!(
            matches!(stale, Err(ClientError::Fenced { .. })),
            "the old owner's write on {job}: {stale:?}"
        );
        let fresh = c.checked_write(job, 2, b"offset", b"b".to_vec()).await;
        assert!(fresh.is_ok(), "the new owner's write on {job}: {fresh:?}");
    }
    // A kept the other six, with their tokens.
    for k in (0..12).filter(|k| !moved.contains(k)) {
        assert_eq!(
            (two.owners[k].member.as_str(), two.owners[k].token),
            (ida.as_str(), 1)
        );
    }
    let revoked = a.said("revoked ");
    assert_eq!(revoked.len(), 6, "A was asked to let go of 6: {revoked:?}");

    let cm = Member::start(&url, g, 12, "c", "60s");
    let idc = cm.id().await;
    let three = balanced(&c, g, &[(&ida, 4), (&idb, 4), (&idc, 4)]).await;
    let moved3 = (0..12)
        .filter(|&k| three.owners[k].member != two.owners[k].member)
        .count();
    assert_eq!(moved3, 4, "a join moves only what the balance needs");

    // B leaves: only its shards move, each to token + 1.
    b.stop();
    let after = balanced(&c, g, &[(&ida, 6), (&idc, 6)]).await;
    for k in 0..12 {
        if three.owners[k].member == idb {
            assert_eq!(after.owners[k].token, three.owners[k].token + 1);
        } else {
            assert_eq!(after.owners[k], three.owners[k], "shard {k} stayed put");
        }
    }

    // Another count is refused, naming the field and the group's count.
    let (code, _, err) = common::cli(&url, &["join", g, "--shards", "5", "--ttl", "60s"]);
    assert_ne!(code, Some(0));
    assert!(
        err.contains("shards") && err.contains("12"),
        "the refusal names `shards` and the count: {err}"
    );
    // `leasehold shards` shows the group.
    let (code, out, _) = common::cli(&url, &["shards", g]);
    assert_eq!(code, Some(0));
    assert!(
        out.starts_with("group=orders shards=12 members=2 unowned=0"),
        "{out}"
    );
    if matches!(place, common::Place::Local(_)) {
        let (_, m) = common::admin_request(server.admin, "/metrics").await;
        let moves = common::metric(&m, "leasehold_shard_moves_total{group=\"orders\"}");
        assert!(moves >= Some(10.0), "moves counted: {moves:?}");
    }
    a.stop();
    cm.stop();
    common::eventually("the members to be gone", || async {
        let g = c.get_group(g).await.ok()?;
        g.members.is_empty().then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_balance_and_moves_are_handovers_on_the_single_node() {
    members_balance_and_moves_are_handovers(common::Place::local()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_balance_and_moves_are_handovers_on_etcd() {
    members_balance_and_moves_are_handovers(common::Place::etcd()).await;
}

/// A SIGKILLed member (TTL 60 s) frees its shards at once: the other owns
/// them all, with tokens + 1, long before the TTL. A SIGSTOPped member
/// keeps its shards until its TTL runs out, then the other owns them; once
/// resumed it is told it lost them, and joins the balance again.
async fn a_killed_member_frees_its_shards_at_once_and_a_paused_one_keeps_them(
    place: common::Place,
) {
    let server = place.start(&[]);
    let url = server.url();
    let c = Client::connect(&url).await.unwrap();
    let g = "partitions";

    let a = Member::start(&url, g, 8, "a", "60s");
    let ida = a.id().await;
    balanced(&c, g, &[(&ida, 8)]).await;
    let b = Member::start(&url, g, 8, "b", "60s");
    let idb = b.id().await;
    let before = balanced(&c, g, &[(&ida, 4), (&idb, 4)]).await;

    let killed = Instant::now();
    common::signal(b.pid(), libc::SIGKILL);
    let after = balanced(&c, g, &[(&ida, 8)]).await;
    assert!(
        killed.elapsed() < Duration::from_secs(30),
        "owned again before the 60 s TTL"
    );
    for k in 0..8 {
        if before.owners[k].member == idb {
            assert_eq!(after.owners[k].token, before.owners[k].token + 1);
        }
    }
    drop(b);

    // A member with a 3 s TTL, paused.
    let p = Member::start(&url, g, 8, "p", "3s");
    let idp = p.id().await;
    let with_p = balanced(&c, g, &[(&ida, 4), (&idp, 4)]).await;
    common::signal(p.pid(), libc::SIGSTOP);
    let paused = Instant::now();
    // Still its own while its TTL runs.
    let g_now = c.get_group(g).await.unwrap();
    if paused.elapsed() < Duration::from_secs(2) {
        assert_eq!(
            counts(&g_now).get(&idp),
            Some(&4),
            "a paused member keeps its shards until its TTL: {g_now:?}"
        );
    }
    balanced(&c, g, &[(&ida, 8)]).await;
    assert!(
        paused.elapsed() >= Duration::from_secs(2),
        "the paused member's shards moved before its TTL ran out"
    );
    for k in 0..8 {
        if with_p.owners[k].member == idp {
            let stale = c
                .checked_write(
                    &with_p.owners[k].job,
                    with_p.owners[k].token,
                    b"k",
                    b"p".to_vec(),
                )
                .await;
            assert!(
                matches!(stale, Err(ClientError::Fenced { .. })),
                "{stale:?}"
            );
        }
    }
    common::signal(p.pid(), libc::SIGCONT);
    common::eventually(
        "the resumed member to be told it lost its shards",
        || async { (p.said("lost ").len() == 4).then_some(()) },
    )
    .await;
    balanced(&c, g, &[(&ida, 4), (&idp, 4)]).await;
    p.stop();
    a.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_member_frees_its_shards_at_once_and_a_paused_one_keeps_them_on_the_single_node() {
    a_killed_member_frees_its_shards_at_once_and_a_paused_one_keeps_them(common::Place::local())
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_member_frees_its_shards_at_once_and_a_paused_one_keeps_them_on_etcd() {
    a_killed_member_frees_its_shards_at_once_and_a_paused_one_keeps_them(common::Place::etcd())
        .await;
}

type JoinStream = (
    tokio::sync::mpsc::Sender<proto::JoinRequest>,
    tonic::Streaming<proto::JoinResponse>,
);

async fn raw_join(url: &str, first: proto::JoinRequest) -> Result<JoinStream, tonic::Status> {
    let mut shards = proto::shards_client::ShardsClient::connect(url.to_owned())
        .await
        .unwrap();
    let (tx, rx) = tokio::sync::mpsc::channel(8);
    tx.send(first).await.unwrap();
    let inbound = shards
        .join(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await?
        .into_inner();
    Ok((tx, inbound))
}

fn first(group: &str, member: &str, shards: u32) -> proto::JoinRequest {
    proto::JoinRequest {
        group: group.into(),
        member: member.into(),
        shards,
        ttl: Some(prost_types::Duration {
            seconds: 60,
            nanos: 0,
        }),
        revoke_timeout: Some(prost_types::Duration {
            seconds: 1,
            nanos: 0,
        }),
        released: vec![],
    }
}

async fn next(s: &mut tonic::Streaming<proto::JoinResponse>) -> proto::JoinResponse {
    tokio::time::timeout(common::PATIENCE, s.message())
        .await
        .expect("an event within the patience")
        .unwrap()
        .expect("the stream goes on")
}

/// A member that never acknowledges its revoke: the shard moves anyway at
/// the revoke's deadline (1 s), the member is told LOST, the new owner has
/// token + 1 and the old token is fenced. Bad first messages are refused
/// naming their field, and change nothing.
async fn a_member_that_never_acknowledges_loses_its_shard_at_the_deadline(place: common::Place) {
    let server = place.start(&[]);
    let url = server.url();
    let c = Client::connect(&url).await.unwrap();
    let g = "stubborn";

    for (req, field) in [
        (first("", "m@1", 2), "group"),
        (first(g, "", 2), "member"),
        (first(g, "m@1", 0), "shards"),
        (first(g, "m@1", 1025), "shards"),
        (
            proto::JoinRequest {
                ttl: None,
                ..first(g, "m@1", 2)
            },
            "ttl",
        ),
    ] {
        let e = match raw_join(&url, req).await {
            Err(e) => e,
            Ok((_, mut s)) => s.message().await.expect_err("a refusal"),
        };
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
        assert!(e.message().contains(field), "{field}: {e:?}");
    }
    assert_eq!(c.get_group(g).await.unwrap().shards, 0, "nothing changed");

    let (_tx, mut s) = raw_join(&url, first(g, "stubborn@1", 2)).await.unwrap();
    assert_eq!(next(&mut s).await.kind, Kind::Joined as i32);
    let mut mine = BTreeMap::new();
    while mine.len() < 2 {
        let e = next(&mut s).await;
        assert_eq!(e.kind, Kind::Assigned as i32, "{e:?}");
        mine.insert(e.shard, e.token);
    }
    let b = Member::start(&url, g, 2, "b", "60s");
    let idb = b.id().await;
    let revoke = next(&mut s).await;
    assert_eq!(revoke.kind, Kind::Revoked as i32, "{revoke:?}");
    assert_eq!(revoke.deadline.map(|d| d.seconds), Some(1));
    let revoked_at = Instant::now();
    // No acknowledgement: the shard moves at the deadline, and we are told.
    let lost = next(&mut s).await;
    assert_eq!(
        (lost.kind, lost.shard),
        (Kind::Lost as i32, revoke.shard),
        "{lost:?}"
    );
    assert!(
        revoked_at.elapsed() >= Duration::from_millis(800),
        "not before the deadline"
    );
    let after = balanced(&c, g, &[("stubborn@1", 1), (&idb, 1)]).await;
    let k = revoke.shard as usize;
    assert_eq!(after.owners[k].member, idb);
    assert_eq!(after.owners[k].token, mine[&revoke.shard] + 1);
    let stale = c
        .checked_write(&revoke.job, mine[&revoke.shard], b"k", b"late".to_vec())
        .await;
    assert!(
        matches!(stale, Err(ClientError::Fenced { .. })),
        "{stale:?}"
    );
    b.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_that_never_acknowledges_loses_its_shard_at_the_deadline_on_the_single_node() {
    a_member_that_never_acknowledges_loses_its_shard_at_the_deadline(common::Place::local()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_that_never_acknowledges_loses_its_shard_at_the_deadline_on_etcd() {
    a_member_that_never_acknowledges_loses_its_shard_at_the_deadline(common::Place::etcd()).await;
}

/// The Rust `ShardMember::run`: a shard's work is cancelled, and has ended,
/// before its revoke is acknowledged, so the next owner's work never
/// overlaps it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rust_member_cancels_a_shards_work_before_it_acknowledges() {
    let place = common::Place::local();
    let server = place.start(&[]);
    let url = server.url();
    let c = Client::connect(&url).await.unwrap();
    let log: Arc<Mutex<Vec<String>>> = Arc::default();
    struct Stopped(Arc<Mutex<Vec<String>>>, String);
    impl Drop for Stopped {
        fn drop(&mut self) {
            self.0.lock().unwrap().push(format!("stop {}", self.1));
        }
    }
    let worker = |who: &'static str| {
        let log = log.clone();
        move |s: leasehold::client::Shard| {
            let log = log.clone();
            async move {
                log.lock().unwrap().push(format!("start {who} {}", s.shard));
                let _guard = Stopped(log.clone(), format!("{who} {}", s.shard));
                std::future::pending::<()>().await;
            }
        }
    };
    let options = ShardOptions {
        ttl: Duration::from_secs(3),
        revoke_timeout: Some(Duration::from_secs(30)),
    };
    let a = ShardMember::join(&c, "work", "a", 4, options.clone())
        .await
        .unwrap();
    let ida = a.member().to_owned();
    let (stop_a, stopped_a) = tokio::sync::oneshot::channel::<()>();
    let run_a = tokio::spawn(a.run(worker("a"), async {
        let _ = stopped_a.await;
    }));
    balanced(&c, "work", &[(&ida, 4)]).await;
    let b = ShardMember::join(&c, "work", "b", 4, options)
        .await
        .unwrap();
    let idb = b.member().to_owned();
    let (stop_b, stopped_b) = tokio::sync::oneshot::channel::<()>();
    let run_b = tokio::spawn(b.run(worker("b"), async {
        let _ = stopped_b.await;
    }));
    let g = balanced(&c, "work", &[(&ida, 2), (&idb, 2)]).await;
    common::eventually("b's work to start on its shards", || async {
        let l = log.lock().unwrap();
        (l.iter().filter(|x| x.starts_with("start b")).count() == 2).then_some(())
    })
    .await;
    let l = log.lock().unwrap().clone();
    for o in g.owners.iter().filter(|o| o.member == idb) {
        let stop = l.iter().position(|x| *x == format!("stop a {}", o.shard));
        let start = l.iter().position(|x| *x == format!("start b {}", o.shard));
        assert!(
            stop.is_some() && stop < start,
            "a's work on shard {} ended before b's began: {l:?}",
            o.shard
        );
    }
    // Renewed past several TTLs.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(counts(&c.get_group("work").await.unwrap()).len(), 2);
    let _ = stop_a.send(());
    run_a.await.unwrap().unwrap();
    balanced(&c, "work", &[(&idb, 4)]).await;
    let _ = stop_b.send(());
    run_b.await.unwrap().unwrap();
}
