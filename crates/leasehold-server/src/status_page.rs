//! The status page on the admin port: `GET /` (one HTML file, its script
//! and styles inline, embedded in the binary: no build step, no external
//! asset, works offline), and the JSON and event stream it reads.
//!
//! | path | what |
//! |---|---|
//! | `/` | the page |
//! | `/api/jobs?prefix=P&after=J&limit=N` | a page of jobs (up to [`MAX_PAGE_JOBS`] and about [`MAX_PAGE_BYTES`]), in name order after the cursor `J`: leader, token, time left, leaderless time, waiters, fenced writes; `next` is the following page's cursor |
//! | `/api/job?name=J` | one job: its row, its history ([`crate::backend::Backend::history`]), its first [`MAX_KEYS`] keys with version and token |
//! | `/api/events?prefix=P` | server-sent events: `data: [rows]` for the jobs that changed (a grant, a release, a fenced write), at most every [`COALESCE`]; `event: reload` when the stream fell behind |
//!
//! The feed is the backend's change feed ([`Backend::changes`]),
//! which the watchers of `WatchLease` are told from. Countdowns run in the
//! browser from each row's `remaining_ms`: a renewal is not an event, and
//! an expiry needs none (the page sees the time run out).
//!
//! With a policy, every path needs a principal with `admin` or a `read`
//! grant (a bearer token, a client certificate, or, for a browser, HTTP
//! Basic authentication with the token as the password), and shows only
//! the jobs it may read.

use std::collections::BTreeSet;
use std::convert::Infallible;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::connect_info::ConnectInfo;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode, Uri};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use tokio_stream::Stream;

use crate::backend::Backend;
use crate::clock;
use crate::error::Error;
use crate::lease::{JobName, JobStatus, LeaseState, Limits, TenureEnd};
use crate::read_budget::{
    Admission, Client, ReadBudget, StreamPlace, MAX_EVENT_STREAMS_PER_CLIENT,
};
use crate::server::auth::{self, Auth, Caller};
use crate::server::conn::Peer;
use crate::server::counted;
use crate::server::shards;

/// The page.
const PAGE: &str = include_str!("status/index.html");

/// The most jobs one page of `/api/jobs` lists (and its default `limit`).
pub const MAX_PAGE_JOBS: usize = 1000;
/// A page of `/api/jobs` ends at the first row past this many bytes.
pub const MAX_PAGE_BYTES: usize = 256 << 10;
/// The most rows one page of `/api/jobs` looks at (those the caller may
/// not read included) before it ends with a cursor.
pub const MAX_SCANNED: usize = 4 * MAX_PAGE_JOBS;
/// The most keys `/api/job` lists.
pub const MAX_KEYS: usize = 200;
/// The most tenures `/api/job` lists.
pub const MAX_TENURES: usize = 1000;
/// The most waiting candidates the job view lists (it counts them all).
pub const MAX_CANDIDATES: usize = 100;
/// Changes that come together are sent together, at most this often.
pub const COALESCE: Duration = Duration::from_millis(100);

/// What the status handlers share.
#[derive(Clone)]
pub struct StatusState {
    /// The backend.
    pub node: Backend,
    /// The policy, if any.
    pub auth: Option<Arc<Auth>>,
    /// Input limits, for the job name of `/api/job`.
    pub limits: Limits,
    /// What its readers may cost.
    pub budget: Arc<ReadBudget>,
    /// The chaos API's actions in force (`--enable-chaos`).
    pub chaos: Arc<crate::server::chaos::ChaosState>,
}

/// `GET /`.
pub async fn page(
    State(s): State<StatusState>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    headers: HeaderMap,
) -> Response {
    if let Err(r) = caller(&s, &headers, &peer) {
        return r;
    }
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        PAGE,
    )
        .into_response()
}

/// `GET /api/jobs?prefix=P&after=J&limit=N`: one page of the job list.
///
/// **A page costs what it returns, not what the server holds**: at most
/// `limit` (at most [`MAX_PAGE_JOBS`], the default) jobs and about
/// [`MAX_PAGE_BYTES`] of JSON, read from the backend one bounded page at a
/// time from the cursor on, and at most [`MAX_SCANNED`] rows looked at. The
/// answer's `next` is the cursor of the following page (`after=`), `null`
/// at the end. Every answer is charged to its client's byte budget
/// ([`crate::read_budget`]): past it the answer is slowed, then refused
/// with 429.
pub async fn jobs(
    State(s): State<StatusState>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    headers: HeaderMap,
    uri: Uri,
) -> Response {
    let who = match caller(&s, &headers, &peer) {
        Ok(c) => c,
        Err(r) => return r,
    };
    let client = Client::of(who.principal(), peer.remote.map(|a| a.ip()));
    if let Admission::Refused(after) = s.budget.admit(&client) {
        return over_budget(after);
    }
    let prefix = query(&uri, "prefix").unwrap_or_default();
    if let Err(e) = s.limits.job_prefix(&prefix) {
        return bad(&e);
    }
    let after = query(&uri, "after").filter(|a| !a.is_empty());
    if let Some(a) = &after {
        if let Err(e) = s.limits.job(a) {
            return bad(&e);
        }
    }
    let limit = match query(&uri, "limit") {
        None => MAX_PAGE_JOBS,
        Some(l) => match l.parse::<usize>() {
            Ok(n) if (1..=MAX_PAGE_JOBS).contains(&n) => n,
            _ => {
                return (
                    StatusCode::BAD_REQUEST,
                    format!("limit: must be 1 to {MAX_PAGE_JOBS} jobs, got {l:?}\n"),
                )
                    .into_response()
            }
        },
    };
    let mut counted = true;
    let mut out = String::with_capacity(MAX_PAGE_BYTES + 1024);
    let _ = write!(out, "{{\"now_ms\":{},", clock::wall_unix_ms());
    let head = out.len();
    out.push_str("\"jobs\":[");
    let mut listed = 0usize;
    let mut scanned = 0usize;
    // The cursor: the last job looked at (listed or not).
    let mut last: Option<String> = None;
    let mut full = false;
    // Only the ranges the caller may read are scanned (disjoint, in
    // order): the page costs what the caller can see, not the store.
    'ranges: for range in who.read_ranges(&prefix) {
        // A cursor past this range's start starts inside it (or past its
        // end); one before it starts at its beginning.
        let mut from = after.clone().filter(|a| a.as_str() >= range.as_str());
        loop {
            let want = (limit - listed).min(MAX_SCANNED - scanned).clamp(1, 1000);
            let page = match s.node.status(&range, from.as_deref(), want).await {
                Ok(p) => {
                    counted = p.counted;
                    p.jobs
                }
                Err(e) => return unavailable(&e),
            };
            let n = page.len();
            for r in page {
                scanned += 1;
                if who.may_read(r.view.job.as_str()) {
                    if listed > 0 {
                        out.push(',');
                    }
                    row(&mut out, &r);
                    listed += 1;
                }
                from = Some(r.view.job.to_string());
                last.clone_from(&from);
                if listed >= limit || scanned >= MAX_SCANNED || out.len() >= MAX_PAGE_BYTES {
                    full = true;
                    break 'ranges;
                }
            }
            if n < want {
                break;
            }
        }
    }
    out.push_str("],\"next\":");
    match (full, &last) {
        (true, Some(l)) => string(&mut out, l),
        _ => out.push_str("null"),
    }
    out.push('}');
    // `counted` is known once the backend answered: it goes first.
    out.insert_str(head, &format!("\"counted\":{counted},"));
    s.budget.charge(&client, out.len() as u64).await;
    json(out)
}

/// 429, with when to come back.
fn over_budget(after: Duration) -> Response {
    let secs = after.as_secs() + 1;
    let mut r = (
        StatusCode::TOO_MANY_REQUESTS,
        format!(
            "this client has read more of the status page than --admin-read-rate allows \
             (with a burst of --admin-read-burst), or all clients together more than \
             --admin-read-rate-total; retry in {secs} s\n"
        ),
    )
        .into_response();
    if let Ok(v) = HeaderValue::from_str(&secs.to_string()) {
        r.headers_mut().insert(header::RETRY_AFTER, v);
    }
    r
}

/// `GET /api/job?name=J`.
pub async fn job(
    State(s): State<StatusState>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    headers: HeaderMap,
    uri: Uri,
) -> Response {
    let who = match caller(&s, &headers, &peer) {
        Ok(c) => c,
        Err(r) => return r,
    };
    let client = Client::of(who.principal(), peer.remote.map(|a| a.ip()));
    if let Admission::Refused(after) = s.budget.admit(&client) {
        return over_budget(after);
    }
    let name = query(&uri, "name").unwrap_or_default();
    let job = match s.limits.job(&name) {
        Ok(j) => j,
        Err(e) => return bad(&e),
    };
    if let Err(e) = who.authorize(auth::Action::Read, job.as_str()) {
        return (StatusCode::FORBIDDEN, auth::describe(&e)).into_response();
    }
    let status = match s.node.status(job.as_str(), None, 1).await {
        Ok(s) => s.jobs.into_iter().find(|r| r.view.job == job),
        Err(e) => return unavailable(&e),
    };
    let history = match s.node.history(&job, None, MAX_TENURES).await {
        Ok(h) => h,
        Err(e) => return unavailable(&e),
    };
    let page = match s.node.keys(&job, b"", None, MAX_KEYS).await {
        Ok(k) => k,
        Err(e) => return unavailable(&e),
    };
    let (line, waiting) = match counted::waiters(&s.node, &job, MAX_CANDIDATES).await {
        Ok(l) => l,
        Err(e) => return unavailable(&e),
    };
    // A counted job's count, or the counted job a slot's job belongs to
    // (shown only to a caller that may read that job too).
    let slots = counted::count_of(&s.node, &job).await.ok().flatten();
    let slot_of = match counted::slot_of(&s.node, &s.limits, &job).await {
        Some((base, k, n)) if who.authorize(auth::Action::Read, base.as_str()).is_ok() => {
            Some((base, k, n))
        }
        _ => None,
    };
    // A shard group's own job (its members and owners), or the group a
    // shard's job belongs to (each shown only to a caller that may read
    // the group's job).
    let group = match shards::count_of(&s.node, &job).await {
        Ok(Some(_)) => shards::group_view(&s.node, &job).await.ok(),
        _ => None,
    };
    let shard_of = match shards::shard_of_job(&s.node, &s.limits, &job).await {
        Some((g, k, n)) if who.authorize(auth::Action::Read, g.as_str()).is_ok() => {
            let owner = shards::group_view(&s.node, &g).await.ok();
            Some((g, k, n, owner))
        }
        _ => None,
    };
    let mut out = String::new();
    let _ = write!(out, "{{\"now_ms\":{},\"job\":", clock::wall_unix_ms());
    match &status {
        Some(r) => row(&mut out, r),
        None => out.push_str("null"),
    }
    out.push_str(",\"name\":");
    string(&mut out, job.as_str());
    // The chaos API's actions in force on the job, for people.
    out.push_str(",\"chaos\":");
    string(&mut out, &s.chaos.in_force(job.as_str()));
    if let Some(n) = slots {
        let _ = write!(out, ",\"slots\":{n}");
    }
    if let Some((base, k, n)) = &slot_of {
        out.push_str(",\"slot_of\":{\"job\":");
        string(&mut out, base.as_str());
        let _ = write!(out, ",\"slot\":{k},\"slots\":{n}}}");
    }
    if let Some(g) = &group {
        out.push_str(",\"group\":");
        group_json(&mut out, g);
    }
    if let Some((g, k, n, view)) = &shard_of {
        out.push_str(",\"shard_of\":{\"group\":");
        string(&mut out, g.as_str());
        let _ = write!(out, ",\"shard\":{k},\"shards\":{n},\"members\":");
        let _ = write!(out, "{}", view.as_ref().map_or(0, |v| v.members.len()));
        out.push('}');
    }
    // The candidates: who waits, in the order a release hands over.
    let _ = write!(out, ",\"waiting\":{waiting},\"candidates\":[");
    for (i, w) in line.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let (principal, holder) = auth::unbind(w.holder.as_str());
        out.push_str("{\"holder\":");
        string(&mut out, holder);
        out.push_str(",\"principal\":");
        string(&mut out, principal.unwrap_or_default());
        let _ = write!(out, ",\"preferred\":{}}}", w.preferred);
    }
    out.push(']');
    out.push_str(",\"history\":[");
    for (i, t) in history.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let (principal, holder) = auth::unbind(&t.holder);
        out.push_str("{\"token\":");
        let _ = write!(out, "{}", t.token.0);
        out.push_str(",\"holder\":");
        string(&mut out, holder);
        out.push_str(",\"principal\":");
        string(&mut out, principal.unwrap_or_default());
        if !t.value.is_empty() {
            out.push_str(",\"value\":");
            string(&mut out, &String::from_utf8_lossy(&t.value));
        }
        let _ = write!(
            out,
            ",\"granted_ms\":{},\"ttl_ms\":{}",
            t.granted_unix_ms,
            t.ttl.as_millis()
        );
        match t.end {
            Some((how, at)) => {
                let how = match how {
                    TenureEnd::Released => "released",
                    TenureEnd::Expired => "expired",
                    TenureEnd::TakenOver => "taken over",
                    TenureEnd::Deleted => "deleted",
                    TenureEnd::Restored => "restored",
                    TenureEnd::Recovered => "recovered",
                    TenureEnd::ConnectionClosed => "connection closed",
                    TenureEnd::Transferred => "transferred",
                    TenureEnd::Chaos => "ended by chaos",
                };
                let _ = write!(out, ",\"end\":\"{how}\",\"ended_ms\":{at}}}");
            }
            None => out.push_str(",\"end\":null,\"ended_ms\":null}"),
        }
    }
    out.push_str("],\"keys\":[");
    for (i, (k, v)) in page.keys.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str("{\"key\":");
        string(&mut out, &String::from_utf8_lossy(k));
        let _ = write!(
            out,
            ",\"version\":{},\"token\":{},\"bytes\":{}}}",
            v.version, v.token.0, v.size
        );
    }
    let more = page.resume_after.is_some();
    let _ = write!(out, "],\"keys_truncated\":{more}}}");
    s.budget.charge(&client, out.len() as u64).await;
    json(out)
}

/// `GET /api/events?prefix=P`.
pub async fn events(
    State(s): State<StatusState>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    headers: HeaderMap,
    uri: Uri,
) -> Response {
    let who = match caller(&s, &headers, &peer) {
        Ok(c) => c,
        Err(r) => return r,
    };
    let prefix = query(&uri, "prefix").unwrap_or_default();
    if let Err(e) = s.limits.job_prefix(&prefix) {
        return bad(&e);
    }
    let client = Client::of(who.principal(), peer.remote.map(|a| a.ip()));
    let Some(place) = s.budget.stream(&client) else {
        let mut r = (
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "too many event streams: at most {} open at once (--max-event-streams), {} per \
                 client; retry later\n",
                s.budget.limits().max_event_streams,
                MAX_EVENT_STREAMS_PER_CLIENT
            ),
        )
            .into_response();
        let h = r.headers_mut();
        h.insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
        h.insert(header::CONNECTION, HeaderValue::from_static("close"));
        return r;
    };
    let rx = s.node.changes();
    Sse::new(feed(s.node.clone(), who, prefix, rx, place))
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}

/// The event stream: the rows of the jobs that changed, a batch at most
/// every [`COALESCE`].
fn feed(
    node: Backend,
    mut who: Caller,
    prefix: String,
    mut rx: tokio::sync::broadcast::Receiver<JobName>,
    place: StreamPlace,
) -> impl Stream<Item = Result<Event, Infallible>> {
    use tokio::sync::broadcast::error::RecvError;
    let (tx, out) = tokio::sync::mpsc::channel(16);
    tokio::spawn(async move {
        // The stream's place, given back when its task ends.
        let _place = place;
        let mut reloads = who.reloads();
        loop {
            let mut changed = BTreeSet::new();
            let mut lagged = false;
            // A page closed while nothing changes ends its task too.
            let first = tokio::select! {
                r = rx.recv() => Some(r),
                // A reload: looked at below.
                Some(()) = async {
                    match &mut reloads {
                        Some(r) => r.changed().await.ok(),
                        None => std::future::pending().await,
                    }
                } => None,
                _ = tx.closed() => return,
            };
            // The page's caller under the policy in force now: a caller
            // that may no longer see the page loses its stream (the
            // browser's reconnection is then refused).
            match who.current() {
                Ok(c) if c.reads_something() => who = c,
                _ => return,
            }
            match first {
                None => continue,
                Some(Ok(j)) => {
                    changed.insert(j);
                }
                Some(Err(RecvError::Lagged(_))) => lagged = true,
                Some(Err(RecvError::Closed)) => return,
            }
            // What else changes within the window goes in the same batch.
            let until = tokio::time::Instant::now() + COALESCE;
            loop {
                match tokio::time::timeout_at(until, rx.recv()).await {
                    Ok(Ok(j)) => {
                        changed.insert(j);
                    }
                    Ok(Err(RecvError::Lagged(_))) => lagged = true,
                    Ok(Err(RecvError::Closed)) | Err(_) => break,
                }
            }
            let event = if lagged {
                Event::default().event("reload").data("lagged")
            } else {
                let mut out = String::from("[");
                let mut first = true;
                for j in changed
                    .iter()
                    .filter(|j| j.as_str().starts_with(&prefix) && who.may_read(j.as_str()))
                {
                    let rows = match node.status(j.as_str(), None, 1).await {
                        Ok(s) => s.jobs,
                        Err(_) => continue,
                    };
                    // A deleted job has no row: it is sent as gone.
                    match rows.into_iter().find(|r| r.view.job == *j) {
                        Some(r) => {
                            if !first {
                                out.push(',');
                            }
                            first = false;
                            row(&mut out, &r);
                        }
                        None => {
                            if !first {
                                out.push(',');
                            }
                            first = false;
                            out.push_str("{\"job\":");
                            string(&mut out, j.as_str());
                            out.push_str(",\"gone\":true}");
                        }
                    }
                }
                if first {
                    continue;
                }
                out.push(']');
                Event::default().data(out)
            };
            if tx.send(Ok(event)).await.is_err() {
                return;
            }
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(out)
}

/// The caller, if it may see the page; else the answer that says why
/// (returned at once by every handler, so its size does not matter).
#[allow(clippy::result_large_err)]
fn caller(s: &StatusState, headers: &HeaderMap, peer: &Peer) -> Result<Caller, Response> {
    let Some(a) = &s.auth else {
        return Ok(Caller::open());
    };
    // A browser sends the token as HTTP Basic authentication's password.
    let mut headers = headers.clone();
    if let Some(secret) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| basic_password(v.as_bytes()))
    {
        if let Ok(v) = HeaderValue::from_str(&format!("Bearer {secret}")) {
            headers.insert(header::AUTHORIZATION, v);
        }
    }
    let refuse = |code, e: &Error| {
        let mut r = (code, auth::describe(e)).into_response();
        r.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Basic realm=\"leasehold\", charset=\"UTF-8\""),
        );
        r
    };
    let who = a
        .authenticate(&headers, Some(peer))
        .map_err(|e| refuse(StatusCode::UNAUTHORIZED, &e))?;
    if !who.reads_something() {
        let e = Error::PermissionDenied {
            action: "read",
            job: String::new(),
            why: "the status page needs `admin` or a `read` grant",
        };
        return Err((StatusCode::FORBIDDEN, auth::describe(&e)).into_response());
    }
    Ok(who)
}

/// The password of an `Authorization: Basic` value.
fn basic_password(v: &[u8]) -> Option<String> {
    let b64 = v.strip_prefix(b"Basic ")?;
    let raw = base64::engine::general_purpose::STANDARD.decode(b64).ok()?;
    let s = String::from_utf8(raw).ok()?;
    let (_, password) = s.split_once(':')?;
    Some(password.to_owned())
}

/// One row of the job list.
fn row(out: &mut String, r: &JobStatus) {
    out.push_str("{\"job\":");
    string(out, r.view.job.as_str());
    match &r.view.state {
        LeaseState::Held {
            holder,
            ttl,
            remaining,
            value,
            ..
        } => {
            let (principal, holder) = auth::unbind(holder.as_str());
            out.push_str(",\"holder\":");
            string(out, holder);
            out.push_str(",\"principal\":");
            string(out, principal.unwrap_or_default());
            if let Some(v) = value {
                // For people: as text (bytes that are not UTF-8 replaced).
                out.push_str(",\"value\":");
                string(out, &String::from_utf8_lossy(v));
            }
            let _ = write!(
                out,
                ",\"ttl_ms\":{},\"remaining_ms\":{}",
                ttl.as_millis(),
                remaining.as_millis()
            );
        }
        LeaseState::Free(_) => out.push_str(",\"holder\":null"),
    }
    let _ = write!(out, ",\"token\":{}", r.view.token.0);
    if let Some(v) = r.vacant_for {
        let _ = write!(out, ",\"vacant_ms\":{}", v.as_millis());
    }
    let _ = write!(out, ",\"waiters\":{},\"fenced\":{}", r.waiters, r.fenced);
    if let Some(a) = r.fenced_ago {
        let _ = write!(out, ",\"fenced_ago_ms\":{}", a.as_millis());
    }
    out.push('}');
}

/// A JSON string.
fn string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            // `<` too, so that nothing in a name can close a script.
            c if (c as u32) < 0x20 || c == '<' || c == '\u{2028}' || c == '\u{2029}' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

fn json(body: String) -> Response {
    (
        [
            (header::CONTENT_TYPE, "application/json"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        body,
    )
        .into_response()
}

fn bad(e: &Error) -> Response {
    (StatusCode::BAD_REQUEST, format!("{e}\n")).into_response()
}

fn unavailable(e: &Error) -> Response {
    (StatusCode::SERVICE_UNAVAILABLE, format!("{e}\n")).into_response()
}

/// The value of `name` in the URI's query, percent-decoded (`+` is a
/// space); `None` when absent or not UTF-8 once decoded.
fn query(uri: &Uri, name: &str) -> Option<String> {
    let q = uri.query()?;
    for pair in q.split('&') {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        if k == name {
            return percent_decode(v);
        }
    }
    None
}

fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => {
                let h = std::str::from_utf8(&b[i + 1..i + 3]).ok()?;
                out.push(u8::from_str_radix(h, 16).ok()?);
                i += 2;
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8(out).ok()
}

/// A shard group as the job view shows it: its count, its members with
/// the shards each owns, and each shard's owner and token.
fn group_json(out: &mut String, g: &crate::proto::ShardGroup) {
    let _ = write!(out, "{{\"shards\":{},\"members\":[", g.shards);
    for (i, m) in g.members.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str("{\"member\":");
        string(out, &m.member);
        let list: Vec<String> = m.shards.iter().map(u32::to_string).collect();
        let _ = write!(out, ",\"shards\":[{}]}}", list.join(","));
    }
    out.push_str("],\"owners\":[");
    for (i, o) in g.owners.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(out, "{{\"shard\":{},\"job\":", o.shard);
        string(out, &o.job);
        out.push_str(",\"member\":");
        string(out, &o.member);
        let _ = write!(out, ",\"token\":{}}}", o.token);
    }
    out.push_str("]}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_decode_and_strings_escape() {
        let uri: Uri = "/api/job?name=a%2Fb+c&x=1".parse().unwrap();
        assert_eq!(query(&uri, "name").as_deref(), Some("a/b c"));
        assert_eq!(query(&uri, "x").as_deref(), Some("1"));
        assert_eq!(query(&uri, "y"), None);
        let bad: Uri = "/api/job?name=%ff%fe".parse().unwrap();
        assert_eq!(query(&bad, "name"), None, "not UTF-8");
        let cut: Uri = "/api/job?name=abc%2".parse().unwrap();
        assert_eq!(query(&cut, "name").as_deref(), Some("abc%2"));
        let mut s = String::new();
        string(&mut s, "a\"b\\c</script>\u{1}");
        assert_eq!(s, "\"a\\\"b\\\\c\\u003c/script>\\u0001\"");
        assert_eq!(
            basic_password(b"Basic dTpzZWNyZXQ=").as_deref(),
            Some("secret")
        );
        assert_eq!(basic_password(b"Bearer x"), None);
    }
}
