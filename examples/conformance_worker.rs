//! The Rust client's conformance worker: one `Elector` for one job, driven
//! over standard input, reporting on standard output, as
//! `clients/conformance/README.md` specifies for every language. The
//! conformance scenario (`clients/conformance/run.py`) runs it beside the
//! workers of the other four clients, so the Rust client is checked by the
//! same steps, and against them.
//!
//! ```text
//! conformance_worker --server HOST:PORT --job JOB --name NAME --ttl-ms 1000
//!     [--bind] [--preferred] [--yield] [--ca FILE] [--token SECRET]
//! ```

use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold::client::{
    AcquireOptions, Client, ClientError, Elector, ElectorOptions, ElectorSet, Grant, LockOptions,
    Role, Security, ShardEvent, ShardMember, ShardOptions, StreamWrite, WriteOutcome, WriteStream,
};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

struct Args {
    server: String,
    job: String,
    name: String,
    ttl: Duration,
    options: ElectorOptions,
    ca: Option<String>,
    token: Option<String>,
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        server: String::new(),
        job: String::new(),
        name: String::new(),
        ttl: Duration::from_secs(1),
        options: ElectorOptions::default(),
        ca: None,
        token: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--server" => a.server = value()?,
            "--job" => a.job = value()?,
            "--name" => a.name = value()?,
            "--ttl-ms" => {
                let ms: u64 = value()?.parse().map_err(|e| format!("--ttl-ms: {e}"))?;
                a.ttl = Duration::from_millis(ms);
            }
            "--ca" => a.ca = Some(value()?),
            "--token" => a.token = Some(value()?),
            "--bind" => a.options.bind_to_stream = true,
            "--preferred" => a.options.preferred = true,
            "--yield" => a.options.yield_to_preferred = true,
            "--value" => a.options.value = value()?.into_bytes(),
            "--slots" => {
                a.options.slots = value()?.parse().map_err(|e| format!("--slots: {e}"))?;
            }
            other => return Err(format!("unknown flag {other}")),
        }
    }
    Ok(a)
}

/// A published value as the protocol prints it: `-` for none.
fn shown(v: &[u8]) -> String {
    match v.is_empty() {
        true => "-".into(),
        false => String::from_utf8_lossy(v).into_owned(),
    }
}

/// ` value=<v>` after an observe or newleader line, when there is one.
fn with_value(v: &[u8]) -> String {
    match v.is_empty() {
        true => String::new(),
        false => format!(" value={}", shown(v)),
    }
}

fn say(line: impl AsRef<str>) {
    // stdout is line-buffered: each line goes out as it is printed.
    println!("{}", line.as_ref());
}

/// Prints `{prefix}elected{suffix} token=N` and `{prefix}lost{suffix}
/// token=N` as the role changes, and keeps the last token led with in
/// `last`.
fn report(
    role: watch::Receiver<Role>,
    prefix: &str,
    suffix: String,
    last: Arc<Mutex<Option<u64>>>,
) -> JoinHandle<()> {
    report_grant(role, prefix, suffix, last, None)
}

/// [`report`], for an elector whose grant may be a counted lease's slot:
/// its `elected` line then ends with ` job=<slot job> slot=<k>`, and
/// `last_job` keeps the job its last lease was on.
fn report_grant(
    mut role: watch::Receiver<Role>,
    prefix: &str,
    suffix: String,
    last: Arc<Mutex<Option<u64>>>,
    grant: Option<(Grant, Arc<Mutex<Option<String>>>)>,
) -> JoinHandle<()> {
    let prefix = prefix.to_owned();
    tokio::spawn(async move {
        let mut leading: Option<u64> = None;
        loop {
            let now = role.borrow_and_update().token();
            if now != leading {
                if let Some(t) = leading {
                    say(format!("{prefix}lost{suffix} token={t}"));
                }
                if let Some(t) = now {
                    *last.lock().unwrap() = Some(t);
                    let slot = match &grant {
                        Some((g, last_job)) => {
                            *last_job.lock().unwrap() = g.lease_job();
                            match (g.slot(), g.lease_job()) {
                                (Some(k), Some(j)) => format!(" job={j} slot={k}"),
                                _ => String::new(),
                            }
                        }
                        None => String::new(),
                    };
                    say(format!("{prefix}elected{suffix} token={t}{slot}"));
                }
                leading = now;
            }
            if role.changed().await.is_err() {
                if let Some(t) = leading {
                    say(format!("{prefix}lost{suffix} token={t}"));
                }
                return;
            }
        }
    })
}

/// `write ok version=V`, `write fenced current=T`, `write error ...`.
fn write_answer(what: &str, r: Result<u64, ClientError>) -> String {
    match r {
        Ok(v) => format!("{what} ok version={v}"),
        Err(ClientError::Fenced { current_token, .. }) => {
            format!("{what} fenced current={}", current_token.unwrap_or(0))
        }
        Err(e) => format!("{what} error {e}"),
    }
}

struct Twin {
    elector: Option<Elector>,
    last: Arc<Mutex<Option<u64>>>,
    reporter: JoinHandle<()>,
}

struct Follow {
    elector: Elector,
    observer: JoinHandle<()>,
    reporter: JoinHandle<()>,
}

struct Fleet {
    set: ElectorSet,
    reporters: Vec<JoinHandle<()>>,
}

/// A shard member: its task, the way to make it leave, and the token it
/// last owned each shard with.
struct Shards {
    group: String,
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
    tokens: Arc<Mutex<std::collections::HashMap<u32, u64>>>,
}

struct LockTask {
    /// Ends the lock: the task releases it and answers.
    unlock: oneshot::Sender<oneshot::Sender<()>>,
}

struct Worker {
    client: Client,
    args: Args,
    elector: Option<Elector>,
    last: Arc<Mutex<Option<u64>>>,
    /// The job the main elector's last lease was on (a slot's, when
    /// counted).
    last_job: Arc<Mutex<Option<String>>>,
    twins: Vec<Twin>,
    twins_job: String,
    follow: Option<Follow>,
    fleet: Option<Fleet>,
    lock: Option<LockTask>,
    lock_job: String,
    lock_token: Arc<Mutex<Option<u64>>>,
    stream: Option<WriteStream>,
    shards: Option<Shards>,
}

impl Worker {
    async fn command(&mut self, line: &str) -> bool {
        let (cmd, rest) = line.split_once(' ').unwrap_or((line, ""));
        let c = self.client.clone();
        let job = self.args.job.clone();
        match cmd {
            "write" => {
                let token = self.last.lock().unwrap().unwrap_or(0);
                // The job the last lease was on: a counted lease's slot.
                let job = self.last_job.lock().unwrap().clone().unwrap_or(job);
                let r = c
                    .checked_write(&job, token, b"status", rest.as_bytes().to_vec())
                    .await;
                say(write_answer("write", r));
            }
            "bad" => say(self.bad(rest).await),
            "acquire-slots" => say(self.acquire_slots(rest).await),
            "twin" => self.twin(rest),
            "twin-write" => {
                let (i, value) = rest.split_once(' ').unwrap_or((rest, ""));
                let twin = &self.twins[i.parse::<usize>().unwrap_or(0)];
                let token = *twin.last.lock().unwrap();
                match token {
                    None => say("twin-write error never-led"),
                    Some(t) => {
                        let r = c
                            .checked_write(&self.twins_job, t, b"status", value.into())
                            .await;
                        say(write_answer("twin-write", r));
                    }
                }
            }
            "twin-stop" => {
                let i: usize = rest.parse().unwrap_or(0);
                if let Some(e) = self.twins[i].elector.take() {
                    e.resign().await;
                }
                say("twin-stop done");
            }
            "transfer" | "transfer-to" => {
                let to = (cmd == "transfer-to").then_some(rest);
                let Some(e) = self.elector.as_ref() else {
                    return true;
                };
                say(match e.transfer(to).await {
                    Ok(next) => format!("transfer ok token={}", next.token),
                    Err(ClientError::NoSuccessor(_)) => "transfer no-successor".into(),
                    Err(ClientError::LeaseLost { .. }) => "transfer lost".into(),
                    Err(ClientError::NotLeader) => "transfer not-leader".into(),
                    Err(e) => format!("transfer error {e}"),
                });
            }
            "lock" => self.lock(rest),
            "lock-write" => {
                let answer = self.lock_write(rest).await;
                say(answer);
            }
            "unlock" => {
                if let Some(l) = self.lock.take() {
                    let (tx, rx) = oneshot::channel();
                    let _ = l.unlock.send(tx);
                    let _ = rx.await;
                }
                say("unlock done");
            }
            "follow" => self.follow(rest),
            "set-value" => {
                if let Some(e) = self.elector.as_ref() {
                    e.set_value(rest);
                }
                say("set-value done");
            }
            "leader" => {
                if let Some(e) = self.elector.as_ref() {
                    say(match e.leader().await {
                        Ok(l) => format!(
                            "leader holder={} token={} value={}",
                            l.holder.as_deref().unwrap_or("-"),
                            l.token,
                            shown(&l.value)
                        ),
                        Err(e) => format!("leader error {e}"),
                    });
                }
            }
            "waiters" => say(match c.list_waiters(rest, 0).await {
                Ok(w) => std::iter::once(format!("waiters n={}", w.waiting))
                    .chain(w.waiters.into_iter().map(|w| w.holder))
                    .collect::<Vec<_>>()
                    .join(" "),
                Err(e) => format!("waiters error {e}"),
            }),
            "follow-stop" => {
                self.stop_follow().await;
                say("follow-stop done");
            }
            "fleet" => self.fleet(rest),
            "fleet-stop" => {
                self.stop_fleet().await;
                say("fleet-stop done");
            }
            "history" => say(match c.history(rest, 100).await {
                Ok(tenures) => format!(
                    "history {rest} tokens={}",
                    tenures
                        .iter()
                        .map(|t| t.token.to_string())
                        .collect::<Vec<_>>()
                        .join(",")
                ),
                Err(e) => format!("history error {e}"),
            }),
            "delete-job" => say(match c.delete_job(rest).await {
                Ok(true) => "delete-job deleted".to_string(),
                Ok(false) => "delete-job absent".into(),
                Err(ClientError::JobInUse(_)) => "delete-job in-use".into(),
                Err(e) => format!("delete-job error {e}"),
            }),
            "shards" => self.join_shards(rest).await,
            "shards-write" => {
                let (k, value) = rest.split_once(' ').unwrap_or((rest, ""));
                let k: u32 = k.parse().unwrap_or(u32::MAX);
                let owned = self.shards.as_ref().and_then(|s| {
                    let t = s.tokens.lock().unwrap().get(&k).copied();
                    t.map(|t| (format!("{}/{k}", s.group), t))
                });
                match owned {
                    None => say("shards-write error never-owned"),
                    Some((job, token)) => {
                        let r = c
                            .checked_write(&job, token, b"status", value.as_bytes().to_vec())
                            .await;
                        say(write_answer("shards-write", r));
                    }
                }
            }
            "shards-stop" => {
                self.stop_shards().await;
                say("shards-stop done");
            }
            "quit" => return false,
            _ => say(format!("error unknown command {line:?}")),
        }
        true
    }

    /// `shards <group> <n>`: a member of the group, whose shards' work
    /// (waiting until cancelled) is cancelled and ended before a revoke is
    /// acknowledged, as `ShardMember::run` does.
    async fn join_shards(&mut self, rest: &str) {
        self.stop_shards().await;
        let (group, n) = rest.split_once(' ').unwrap_or((rest, ""));
        let Ok(n) = n.trim().parse::<u32>() else {
            return say(format!("shards error bad count {n:?}"));
        };
        let options = ShardOptions {
            ttl: self.args.ttl,
            revoke_timeout: Some(self.args.ttl),
        };
        let mut member =
            match ShardMember::join(&self.client, group, &self.args.name, n, options).await {
                Ok(m) => m,
                Err(ClientError::InvalidArgument { field, .. }) => {
                    return say(format!(
                        "shards invalid field={}",
                        field.unwrap_or_default()
                    ))
                }
                Err(e) => return say(format!("shards error {e}")),
            };
        say(format!("shards member {}", member.member()));
        let tokens: Arc<Mutex<std::collections::HashMap<u32, u64>>> = Arc::default();
        let (stop, mut stopped) = oneshot::channel::<()>();
        let t = tokens.clone();
        let task = tokio::spawn(async move {
            let mut work: std::collections::HashMap<u32, JoinHandle<()>> = Default::default();
            loop {
                let e = tokio::select! {
                    e = member.next() => e,
                    _ = &mut stopped => break,
                };
                match e {
                    Some(Ok(ShardEvent::Assigned(s))) => {
                        t.lock().unwrap().insert(s.shard, s.token);
                        say(format!("shards assigned {} token={}", s.shard, s.token));
                        work.insert(s.shard, tokio::spawn(std::future::pending::<()>()));
                    }
                    Some(Ok(ShardEvent::Revoked(s))) => {
                        if let Some(w) = work.remove(&s.shard) {
                            w.abort();
                            let _ = w.await;
                        }
                        say(format!("shards revoked {}", s.shard));
                        member.release(s.shard);
                    }
                    Some(Ok(ShardEvent::Lost(s))) => {
                        if let Some(w) = work.remove(&s.shard) {
                            w.abort();
                            let _ = w.await;
                        }
                        say(format!("shards lost {} token={}", s.shard, s.token));
                    }
                    Some(Err(e)) => {
                        say(format!("shards error {e}"));
                        break;
                    }
                    None => break,
                }
            }
            for (_, w) in work {
                w.abort();
                let _ = w.await;
            }
            member.leave().await;
        });
        self.shards = Some(Shards {
            group: group.to_owned(),
            stop,
            task,
            tokens,
        });
    }

    /// Leaves the shard group, if a member runs; the tokens stay for
    /// `shards-write`.
    async fn stop_shards(&mut self) {
        if let Some(s) = self.shards.as_mut() {
            let (tx, _) = oneshot::channel();
            let stop = std::mem::replace(&mut s.stop, tx);
            let _ = stop.send(());
            let task = std::mem::replace(&mut s.task, tokio::spawn(async {}));
            let _ = task.await;
        }
    }

    /// `acquire-slots <job> <n>`: one counted Acquire, not waiting, as a
    /// holder of its own; its lease is left to run out.
    async fn acquire_slots(&self, rest: &str) -> String {
        let (job, n) = rest.split_once(' ').unwrap_or((rest, ""));
        let Ok(slots) = n.trim().parse::<u32>() else {
            return format!("acquire-slots error bad count {n:?}");
        };
        let holder = format!("{}@{}", self.args.name, uuid::Uuid::new_v4());
        let options = AcquireOptions {
            slots,
            ..AcquireOptions::default()
        };
        match self
            .client
            .acquire_with(job, &holder, self.args.ttl, Duration::ZERO, options)
            .await
        {
            Ok(a) if a.acquired => format!(
                "acquire-slots ok job={} slot={} token={}",
                a.lease.job, a.lease.slot, a.lease.token
            ),
            Ok(_) => "acquire-slots busy".into(),
            Err(ClientError::InvalidArgument { field, .. }) => {
                format!("acquire-slots invalid field={}", field.unwrap_or_default())
            }
            Err(e) => format!("acquire-slots error {e}"),
        }
    }

    async fn bad(&self, what: &str) -> String {
        let c = &self.client;
        let job = &self.args.job;
        let holder = "bad@input";
        let invalid = |r: Result<(), ClientError>| match r {
            Err(ClientError::InvalidArgument { field, .. }) => {
                format!("bad {what} invalid field={}", field.unwrap_or_default())
            }
            Err(ClientError::UnknownToken { current_token, .. }) => {
                format!(
                    "bad {what} unknown-token current={}",
                    current_token.unwrap_or(0)
                )
            }
            Err(e) => format!("bad {what} error {e}"),
            Ok(()) => format!("bad {what} accepted"),
        };
        let token = self.last.lock().unwrap().unwrap_or(1);
        match what {
            "job" => invalid(
                c.acquire("", holder, self.args.ttl, Duration::ZERO)
                    .await
                    .map(|_| ()),
            ),
            "ttl" => invalid(
                c.acquire(job, holder, Duration::from_millis(1), Duration::ZERO)
                    .await
                    .map(|_| ()),
            ),
            "key" => invalid(
                c.checked_write(job, token, b"", b"x".to_vec())
                    .await
                    .map(|_| ()),
            ),
            "token" => invalid(
                c.checked_write(job, 1 << 62, b"status", b"x".to_vec())
                    .await
                    .map(|_| ()),
            ),
            _ => format!("bad {what} error unknown case"),
        }
    }

    fn twin(&mut self, job: &str) {
        self.twins_job = job.to_owned();
        for i in 0..2 {
            let e = Elector::start(self.client.clone(), job, &self.args.name, self.args.ttl);
            say(format!("twin holder {i} {}", e.holder()));
            let last = Arc::new(Mutex::new(None));
            let reporter = report(e.watch(), "twin ", format!(" {i}"), last.clone());
            self.twins.push(Twin {
                elector: Some(e),
                last,
                reporter,
            });
        }
    }

    fn lock(&mut self, job: &str) {
        let (unlock, mut unlock_rx) = oneshot::channel::<oneshot::Sender<()>>();
        let client = self.client.clone();
        let (job, name, ttl) = (job.to_owned(), self.args.name.clone(), self.args.ttl);
        let lock_token = self.lock_token.clone();
        *lock_token.lock().unwrap() = None;
        self.stream = None;
        self.lock = Some(LockTask { unlock });
        self.lock_job = job.clone();
        tokio::spawn(async move {
            let options = LockOptions {
                name,
                ..LockOptions::default()
            };
            let mut lock = tokio::select! {
                r = client.lock_with(&job, ttl, options) => match r {
                    Ok(l) => l,
                    Err(e) => { say(format!("lock error {e}")); return; }
                },
                reply = &mut unlock_rx => {
                    if let Ok(reply) = reply { let _ = reply.send(()); }
                    return;
                }
            };
            let token = lock.token();
            *lock_token.lock().unwrap() = Some(token);
            say(format!(
                "lock held {job} token={token} holder={}",
                lock.holder()
            ));
            let reply = tokio::select! {
                _ = lock.lost() => {
                    say(format!("lock lost {job} token={token}"));
                    unlock_rx.await.ok()
                }
                reply = &mut unlock_rx => reply.ok(),
            };
            lock.release().await;
            if let Some(reply) = reply {
                let _ = reply.send(());
            }
        });
    }

    async fn lock_write(&mut self, value: &str) -> String {
        let Some(token) = *self.lock_token.lock().unwrap() else {
            return "lock-write error never-held".into();
        };
        if self.stream.is_none() {
            match self.client.write_stream().await {
                Ok(s) => self.stream = Some(s),
                Err(e) => return format!("lock-write error {e}"),
            }
        }
        let stream = self.stream.as_mut().expect("opened");
        let w = StreamWrite::put(&self.lock_job, token, b"status", value.as_bytes().to_vec());
        match stream.write(&[w]).await {
            Ok(outcomes) => match outcomes.into_iter().next() {
                Some(WriteOutcome::Written { version }) => {
                    format!("lock-write ok version={version}")
                }
                Some(WriteOutcome::Fenced { current_token, .. }) => {
                    format!("lock-write fenced current={current_token}")
                }
                other => format!("lock-write error {other:?}"),
            },
            Err(e) => {
                self.stream = None;
                format!("lock-write error {e}")
            }
        }
    }

    fn follow(&mut self, rest: &str) {
        let (job, value) = rest.split_once(' ').unwrap_or((rest, ""));
        let options = ElectorOptions {
            value: value.as_bytes().to_vec(),
            ..ElectorOptions::default()
        };
        let mut e = Elector::start_with(
            self.client.clone(),
            job,
            &self.args.name,
            self.args.ttl,
            options,
        );
        say(format!("follow holder {}", e.holder()));
        let j = job.to_owned();
        e.on_new_leader(move |lease| {
            say(format!(
                "newleader {j} holder={} token={}{}",
                lease.holder.as_deref().unwrap_or("-"),
                lease.token,
                with_value(&lease.value)
            ))
        });
        let reporter = report(
            e.watch(),
            "follow ",
            format!(" {job}"),
            Arc::new(Mutex::new(None)),
        );
        let (client, j) = (self.client.clone(), job.to_owned());
        let observer = tokio::spawn(async move {
            let Ok(mut changes) = client.observe(&j).await else {
                return;
            };
            while let Some(Ok(c)) = changes.next().await {
                let holder = c.lease.holder.as_deref().unwrap_or("-");
                say(format!(
                    "observe {j} holder={holder} token={}{}",
                    c.lease.token,
                    with_value(&c.lease.value)
                ));
            }
        });
        self.follow = Some(Follow {
            elector: e,
            observer,
            reporter,
        });
    }

    async fn stop_follow(&mut self) {
        if let Some(f) = self.follow.take() {
            f.observer.abort();
            f.elector.resign().await;
            let _ = f.reporter.await;
        }
    }

    fn fleet(&mut self, rest: &str) {
        let (n, prefix) = rest.split_once(' ').unwrap_or((rest, ""));
        let n: usize = n.parse().unwrap_or(0);
        let mut set = ElectorSet::start(self.client.clone(), &self.args.name, self.args.ttl);
        say(format!("fleet holder {}", set.holder()));
        let mut reporters = Vec::new();
        for i in 0..n {
            let job = format!("{prefix}{i}");
            let role = set.campaign(&job);
            reporters.push(report(
                role,
                "fleet ",
                format!(" {job}"),
                Arc::new(Mutex::new(None)),
            ));
        }
        self.fleet = Some(Fleet { set, reporters });
    }

    async fn stop_fleet(&mut self) {
        if let Some(f) = self.fleet.take() {
            f.set.resign().await;
            for r in f.reporters {
                let _ = r.await;
            }
        }
    }

    async fn shutdown(mut self) {
        self.stop_shards().await;
        if let Some(l) = self.lock.take() {
            let (tx, rx) = oneshot::channel();
            let _ = l.unlock.send(tx);
            let _ = rx.await;
        }
        self.stop_follow().await;
        self.stop_fleet().await;
        for t in self.twins.drain(..) {
            if let Some(e) = t.elector {
                e.resign().await;
            }
            let _ = t.reporter.await;
        }
        if let Some(e) = self.elector.take() {
            e.resign().await;
        }
    }
}

#[tokio::main]
async fn main() {
    let args = match args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("conformance_worker: {e}");
            std::process::exit(2);
        }
    };
    // Before anything reaches the server: a SIGTERM that arrives once the
    // elector's first Acquire is queued must find the handler in place.
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let mut security = Security::default();
    if let Some(ca) = &args.ca {
        security.ca_pem = Some(std::fs::read(ca).expect("read --ca"));
    }
    security.token = args.token.clone();
    let scheme = if args.ca.is_some() { "https" } else { "http" };
    let url = if args.server.contains("://") {
        args.server.clone()
    } else {
        format!("{scheme}://{}", args.server)
    };
    let client = Client::connect_with(&url, security).await.expect("connect");
    let elector = Elector::start_with(
        client.clone(),
        &args.job,
        &args.name,
        args.ttl,
        args.options.clone(),
    );
    say(format!("holder {}", elector.holder()));
    let last = Arc::new(Mutex::new(None));
    let last_job = Arc::new(Mutex::new(None));
    let main_reporter = report_grant(
        elector.watch(),
        "",
        String::new(),
        last.clone(),
        Some((elector.grant(), last_job.clone())),
    );
    let mut w = Worker {
        client,
        args,
        elector: Some(elector),
        last,
        last_job,
        twins: Vec::new(),
        twins_job: String::new(),
        follow: None,
        fleet: None,
        lock: None,
        lock_job: String::new(),
        lock_token: Arc::new(Mutex::new(None)),
        stream: None,
        shards: None,
    };
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    loop {
        tokio::select! {
            line = lines.next_line() => match line {
                Ok(Some(l)) => {
                    if !w.command(l.trim()).await {
                        break;
                    }
                }
                _ => break,
            },
            _ = term.recv() => break,
        }
    }
    w.shutdown().await;
    let _ = main_reporter.await;
    say("bye");
    // Not a return: the runtime would wait for the thread blocked reading
    // standard input.
    std::process::exit(0);
}
