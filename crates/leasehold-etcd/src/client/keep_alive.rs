//! One `LeaseKeepAlive` stream for every keep-alive of a client.
//!
//! etcd's `LeaseKeepAlive` is a bidirectional stream: each request names a
//! lease, each answer names it back. Opening a stream for every renewal
//! costs an HTTP/2 stream and etcd's per-stream goroutines each time, at
//! every holder's renewal rate. So one task owns one stream: every
//! keep-alive of the client (each holder's renewal, the session lease) is
//! sent on it, and each answer is routed back by its lease id to the
//! callers waiting for that lease, oldest first (etcd answers a stream's
//! requests in order, so several renewals of one lease are answered in the
//! order they were asked).
//!
//! A stream that stops answering (its member paused or partitioned: callers
//! wait and no answer has come for `stall`) is dropped, and so is a
//! stream that ends or fails: its callers get the error, UNAVAILABLE
//! for a stall, and try again within their deadline, and the next
//! keep-alive opens a new stream, which the channel's balancer may send to
//! another member. [`KeepAlives::reopen`] does the same on demand (for an
//! answer from a member behind the current raft term).
//!
//! The stream is owned by its task alone: callers hold only a sender of
//! commands, and the task ends when the last one is dropped.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::Members;
use tokio::sync::{mpsc, oneshot};
use tokio::time::sleep_until;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Status, Streaming};

use super::pb;
use super::pb::lease_client::LeaseClient;

/// An answer to one keep-alive, or why there is none.
pub type Answer = std::result::Result<pb::LeaseKeepAliveResponse, Status>;

/// How many keep-alives may wait for the task, and be in flight on the
/// stream, before callers are told to try again.
const QUEUE: usize = 1024;

enum Cmd {
    KeepAlive(i64, oneshot::Sender<Answer>),
    Reopen,
}

/// Hands keep-alives to the task that owns the stream. Cheap to clone.
#[derive(Clone)]
pub struct KeepAlives {
    cmds: mpsc::Sender<Cmd>,
    opened: Arc<AtomicU64>,
}

impl KeepAlives {
    /// Keep-alives to the current one of `members`, one stream at a time,
    /// each stalled stream given up after `stall`; a stream opened again
    /// (it broke, stalled, or was reopened) goes to the next member. Spawns
    /// the task: call within a tokio runtime.
    pub(crate) fn spawn(members: Arc<Members>, stall: Duration) -> KeepAlives {
        Self::spawn_with(
            Grpc {
                members,
                last: None,
            },
            stall,
        )
    }

    fn spawn_with<O: Open>(open: O, stall: Duration) -> KeepAlives {
        let (cmds, rx) = mpsc::channel(QUEUE);
        let opened = Arc::new(AtomicU64::new(0));
        tokio::spawn(run(open, rx, stall, opened.clone()));
        KeepAlives { cmds, opened }
    }

    /// Renews lease `id` once: etcd's answer (a TTL of 0 or less when the
    /// lease is gone), or the stream's error.
    pub async fn keep_alive(&self, id: i64) -> Answer {
        let rx = self.request(id).await?;
        rx.await
            .unwrap_or_else(|_| Err(Status::unavailable("the keep-alive stream was reset")))
    }

    /// Queues a keep-alive of `id`; the answer comes on the receiver.
    async fn request(&self, id: i64) -> Result<oneshot::Receiver<Answer>, Status> {
        let (tx, rx) = oneshot::channel();
        self.cmds
            .send(Cmd::KeepAlive(id, tx))
            .await
            .map_err(|_| Status::unavailable("the keep-alive task has stopped"))?;
        Ok(rx)
    }

    /// Drops the current stream: its unanswered keep-alives fail and ask
    /// again, on a new stream.
    pub fn reopen(&self) {
        let _ = self.cmds.try_send(Cmd::Reopen);
    }

    /// How many streams were opened so far.
    pub fn opened(&self) -> u64 {
        self.opened.load(Ordering::Relaxed)
    }
}

/// Opens keep-alive streams: the seam between the routing task and gRPC,
/// so that the task can be tested without etcd.
trait Open: Send + 'static {
    type Answers: Answers;

    /// Opens a stream that sends what arrives on `requests`. Returns at
    /// once: a stream that cannot be opened fails on its first answer.
    fn open(&mut self, requests: mpsc::Receiver<pb::LeaseKeepAliveRequest>) -> Self::Answers;
}

/// The answers of one stream.
trait Answers: Send + 'static {
    /// The next answer; `None` once the stream ended. Cancel-safe: a call
    /// dropped before it resolves loses nothing.
    fn next(&mut self) -> impl Future<Output = Option<Answer>> + Send;
}

struct Grpc {
    members: Arc<Members>,
    /// The member of the stream opened last.
    last: Option<usize>,
}

type Opening =
    Pin<Box<dyn Future<Output = Result<Streaming<pb::LeaseKeepAliveResponse>, Status>> + Send>>;

/// A gRPC stream: being opened (etcd sends its response headers with its
/// first answer), then open, then done.
struct GrpcAnswers {
    state: GrpcState,
    /// Completes when the stream's member is found stalled.
    stalled: Pin<Box<dyn Future<Output = ()> + Send>>,
}

enum GrpcState {
    Opening(Opening),
    Open(Box<Streaming<pb::LeaseKeepAliveResponse>>),
    Done,
}

impl Open for Grpc {
    type Answers = GrpcAnswers;

    fn open(&mut self, requests: mpsc::Receiver<pb::LeaseKeepAliveRequest>) -> GrpcAnswers {
        if let Some(m) = self.last {
            self.members.failed(m);
        }
        let (member, channel) = self.members.pick();
        self.last = Some(member);
        let mut client = LeaseClient::new(channel);
        GrpcAnswers {
            state: GrpcState::Opening(Box::pin(async move {
                client
                    .lease_keep_alive(ReceiverStream::new(requests))
                    .await
                    .map(|r| r.into_inner())
            })),
            stalled: Box::pin(self.members.stalled(member)),
        }
    }
}

impl Answers for GrpcAnswers {
    async fn next(&mut self) -> Option<Answer> {
        if matches!(self.state, GrpcState::Done) {
            return None;
        }
        tokio::select! {
            a = self.state.next() => a,
            () = &mut self.stalled => {
                self.state = GrpcState::Done;
                Some(Err(Status::unavailable("the keep-alive stream's etcd member stopped answering")))
            }
        }
    }
}

impl GrpcState {
    async fn next(&mut self) -> Option<Answer> {
        loop {
            match self {
                GrpcState::Opening(f) => match f.as_mut().await {
                    Ok(s) => *self = GrpcState::Open(Box::new(s)),
                    Err(e) => {
                        *self = GrpcState::Done;
                        return Some(Err(e));
                    }
                },
                GrpcState::Open(s) => return s.message().await.transpose(),
                GrpcState::Done => return None,
            }
        }
    }
}

/// The open stream: where requests go, where answers come from.
struct Stream<A> {
    requests: mpsc::Sender<pb::LeaseKeepAliveRequest>,
    answers: A,
}

/// Callers waiting for an answer, by lease id, oldest first.
#[derive(Default)]
struct Pending {
    by_lease: HashMap<i64, VecDeque<oneshot::Sender<Answer>>>,
    count: usize,
}

impl Pending {
    fn push(&mut self, id: i64, reply: oneshot::Sender<Answer>) {
        self.by_lease.entry(id).or_default().push_back(reply);
        self.count += 1;
    }

    /// Hands `answer` to the oldest caller waiting for its lease. An answer
    /// nobody waits for (its caller's stream was reset) is dropped.
    fn route(&mut self, answer: pb::LeaseKeepAliveResponse) {
        let Some(q) = self.by_lease.get_mut(&answer.id) else {
            return;
        };
        let reply = q.pop_front().expect("no empty queues are kept");
        if q.is_empty() {
            self.by_lease.remove(&answer.id);
        }
        self.count -= 1;
        // The caller may have given up; its answer goes nowhere.
        let _ = reply.send(Ok(answer));
    }

    /// Fails every waiting caller with `status`.
    fn fail_all(&mut self, status: &Status) {
        for (_, q) in self.by_lease.drain() {
            for reply in q {
                let _ = reply.send(Err(status.clone()));
            }
        }
        self.count = 0;
    }

    fn is_empty(&self) -> bool {
        self.count == 0
    }
}

async fn next_answer<A: Answers>(stream: &mut Option<Stream<A>>) -> Option<Answer> {
    match stream {
        Some(s) => s.answers.next().await,
        None => std::future::pending().await,
    }
}

/// The task: owns the stream, sends keep-alives, routes answers.
async fn run<O: Open>(
    mut open: O,
    mut cmds: mpsc::Receiver<Cmd>,
    stall: Duration,
    opened: Arc<AtomicU64>,
) {
    let mut stream: Option<Stream<O::Answers>> = None;
    let mut pending = Pending::default();
    // When the stream last made progress: the last answer, or the first
    // request after a quiet spell. Stalled once `stall` has passed since.
    let mut progress = tokio::time::Instant::now();
    loop {
        let idle = pending.is_empty();
        tokio::select! {
            cmd = cmds.recv() => match cmd {
                None => {
                    pending.fail_all(&Status::unavailable("the etcd client is closed"));
                    return;
                }
                Some(Cmd::Reopen) => {
                    pending.fail_all(&Status::unavailable("the keep-alive stream was reopened"));
                    stream = None;
                }
                Some(Cmd::KeepAlive(id, reply)) => {
                    let s = stream.get_or_insert_with(|| {
                        let (requests, rx) = mpsc::channel(QUEUE);
                        opened.fetch_add(1, Ordering::Relaxed);
                        Stream { requests, answers: open.open(rx) }
                    });
                    if let Err(e) = s.requests.try_send(pb::LeaseKeepAliveRequest { id }) {
                        let _ = reply.send(Err(Status::unavailable(format!(
                            "{}: {e}",
                            super::LOCAL_FULL
                        ))));
                        continue;
                    }
                    if idle {
                        progress = tokio::time::Instant::now();
                    }
                    pending.push(id, reply);
                }
            },
            answer = next_answer(&mut stream) => {
                let status = match answer {
                    Some(Ok(a)) => {
                        progress = tokio::time::Instant::now();
                        pending.route(a);
                        continue;
                    }
                    Some(Err(s)) => s,
                    None => Status::unavailable("the keep-alive stream ended"),
                };
                pending.fail_all(&status);
                stream = None;
            }
            _ = sleep_until(progress + stall), if !idle => {
                pending.fail_all(&Status::unavailable(format!(
                    "the keep-alive stream gave no answer within {stall:?}"
                )));
                stream = None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use tokio::time::Instant;

    use super::*;

    /// The far end of a stream opened by [`Fake`]: the requests it was
    /// sent, and where to put its answers.
    struct Far {
        requests: mpsc::Receiver<pb::LeaseKeepAliveRequest>,
        answers: mpsc::UnboundedSender<Answer>,
    }

    impl Far {
        async fn request(&mut self) -> i64 {
            self.requests.recv().await.expect("a request").id
        }

        fn answer(&self, id: i64, ttl: i64) {
            let _ = self.answers.send(Ok(pb::LeaseKeepAliveResponse {
                header: None,
                id,
                ttl,
            }));
        }
    }

    /// Streams whose far ends the test holds.
    struct Fake {
        opened: mpsc::UnboundedSender<Far>,
    }

    struct FakeAnswers(mpsc::UnboundedReceiver<Answer>);

    impl Open for Fake {
        type Answers = FakeAnswers;

        fn open(&mut self, requests: mpsc::Receiver<pb::LeaseKeepAliveRequest>) -> FakeAnswers {
            let (answers, rx) = mpsc::unbounded_channel();
            let _ = self.opened.send(Far { requests, answers });
            FakeAnswers(rx)
        }
    }

    impl Answers for FakeAnswers {
        async fn next(&mut self) -> Option<Answer> {
            self.0.recv().await
        }
    }

    const STALL: Duration = Duration::from_secs(2);

    fn fake() -> (KeepAlives, mpsc::UnboundedReceiver<Far>) {
        let (opened, streams) = mpsc::unbounded_channel();
        (KeepAlives::spawn_with(Fake { opened }, STALL), streams)
    }

    fn ttl(a: Answer) -> i64 {
        a.expect("an answer").ttl
    }

    #[tokio::test(start_paused = true)]
    async fn answers_are_routed_by_lease_oldest_first_on_one_stream() {
        let (ka, mut streams) = fake();
        let a1 = ka.request(1).await.unwrap();
        let b = ka.request(2).await.unwrap();
        let a2 = ka.request(1).await.unwrap();
        let mut far = streams.recv().await.unwrap();
        assert_eq!(
            [
                far.request().await,
                far.request().await,
                far.request().await
            ],
            [1, 2, 1]
        );
        // Answered in another order across leases.
        far.answer(2, 20);
        far.answer(1, 10);
        far.answer(1, 11);
        assert_eq!(ttl(b.await.unwrap()), 20);
        assert_eq!(ttl(a1.await.unwrap()), 10);
        assert_eq!(ttl(a2.await.unwrap()), 11);
        // Later keep-alives use the same stream.
        let c = tokio::spawn({
            let ka = ka.clone();
            async move { ka.keep_alive(3).await }
        });
        assert_eq!(far.request().await, 3);
        far.answer(3, 0);
        assert_eq!(ttl(c.await.unwrap()), 0, "a lease that is gone");
        assert_eq!(ka.opened(), 1);
        assert!(streams.try_recv().is_err(), "no second stream");
    }

    #[tokio::test(start_paused = true)]
    async fn a_stalled_stream_fails_its_callers_and_the_next_call_opens_another() {
        let (ka, mut streams) = fake();
        let started = Instant::now();
        let stuck = ka.request(1).await.unwrap();
        let mut far = streams.recv().await.unwrap();
        assert_eq!(far.request().await, 1);
        let e = stuck.await.unwrap().unwrap_err();
        assert_eq!(e.code(), tonic::Code::Unavailable);
        assert!(started.elapsed() >= STALL);
        // An answer after the reset goes nowhere.
        far.answer(1, 5);
        let next = ka.request(1).await.unwrap();
        let mut far2 = streams.recv().await.unwrap();
        assert_eq!(far2.request().await, 1);
        far2.answer(1, 7);
        assert_eq!(ttl(next.await.unwrap()), 7);
        assert_eq!(ka.opened(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_busy_stream_is_not_stalled_while_answers_come() {
        let (ka, mut streams) = fake();
        let slow = ka.request(1).await.unwrap();
        let mut far = streams.recv().await.unwrap();
        assert_eq!(far.request().await, 1);
        // Answers to others keep coming: the stream is alive.
        for i in 0..4 {
            tokio::time::sleep(STALL / 2).await;
            let other = ka.request(2).await.unwrap();
            assert_eq!(far.request().await, 2);
            far.answer(2, i);
            assert_eq!(ttl(other.await.unwrap()), i);
        }
        far.answer(1, 9);
        assert_eq!(ttl(slow.await.unwrap()), 9);
        assert_eq!(ka.opened(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_or_ended_stream_fails_its_callers_with_its_error() {
        let (ka, mut streams) = fake();
        let a = ka.request(1).await.unwrap();
        let b = ka.request(2).await.unwrap();
        let far = streams.recv().await.unwrap();
        far.answers
            .send(Err(Status::unavailable("etcdserver: no leader")))
            .unwrap();
        for r in [a, b] {
            assert_eq!(
                r.await.unwrap().unwrap_err().message(),
                "etcdserver: no leader"
            );
        }
        let c = ka.request(3).await.unwrap();
        let far2 = streams.recv().await.unwrap();
        drop(far2);
        assert_eq!(
            c.await.unwrap().unwrap_err().code(),
            tonic::Code::Unavailable
        );
        assert_eq!(ka.opened(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn reopen_moves_later_calls_to_a_new_stream() {
        let (ka, mut streams) = fake();
        let a = ka.request(1).await.unwrap();
        let _far = streams.recv().await.unwrap();
        ka.reopen();
        assert_eq!(
            a.await.unwrap().unwrap_err().code(),
            tonic::Code::Unavailable
        );
        let b = ka.request(1).await.unwrap();
        let mut far2 = streams.recv().await.unwrap();
        assert_eq!(far2.request().await, 1);
        far2.answer(1, 3);
        assert_eq!(ttl(b.await.unwrap()), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn the_task_ends_with_the_last_handle() {
        let (ka, mut streams) = fake();
        let a = ka.request(1).await.unwrap();
        let far = streams.recv().await.unwrap();
        drop(ka);
        assert_eq!(
            a.await.unwrap().unwrap_err().code(),
            tonic::Code::Unavailable
        );
        // The task dropped the stream: its request side is closed.
        let mut requests = far.requests;
        assert_eq!(requests.recv().await.map(|r| r.id), Some(1));
        assert!(requests.recv().await.is_none());
    }
}
