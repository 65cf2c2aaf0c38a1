//! The one error type of the library.
//!
//! Every variant says whether retrying can help. The mapping to gRPC status
//! codes and `google.rpc.ErrorInfo` reasons lives in one table,
//! `leasehold_server::server::grpc_status`; the client decodes it back in
//! `leasehold_client::ClientError`.

use std::borrow::Cow;
use std::fmt;

use crate::lease::Token;

/// A `Result` with the library's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why a `CheckedWrite` was fenced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FenceCause {
    /// The job has been granted again since this token: a newer leader exists.
    Superseded,
    /// The token is still the job's newest, but its lease expired or was
    /// released: nobody leads right now.
    NotLive,
    /// The key was already written with a higher token.
    KeyNewer,
}

/// Everything that can go wrong in leasehold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// A request field is empty, too large, or out of range. Nothing was
    /// changed. Retrying the same request cannot help.
    InvalidArgument {
        /// The request field, as named in the proto (`job`, `ttl`, ...); a
        /// field of a nested message is named by its path from the
        /// request (`writes.job`). Empty when the fault is the message as
        /// a whole (bytes that are not a protobuf message at all).
        field: Cow<'static, str>,
        /// What is wrong, naming the limit.
        message: String,
    },
    /// A token the server never issued for the job: zero, or above the job's
    /// newest token. Nothing was changed. Retrying cannot help.
    UnknownToken {
        /// The job.
        job: String,
        /// The token in the request.
        token: u64,
        /// The job's newest token.
        current: Token,
    },
    /// The job has issued its last token: a grant would repeat one, so none
    /// is made. Nothing was changed. Retrying cannot help.
    TokensExhausted {
        /// The job.
        job: String,
    },
    /// `Renew` or `Release` by a holder that no longer holds the lease with
    /// that token. Nothing was changed. Retrying cannot help: the caller has
    /// lost leadership and must stop its work.
    LeaseLost {
        /// The job.
        job: String,
        /// The holder now, if any.
        current_holder: Option<String>,
        /// The job's newest token.
        current: Token,
    },
    /// A `CheckedWrite` with a token that is not the job's live token.
    /// Nothing was written. Retrying cannot help: the writer is not the
    /// leader.
    Fenced {
        /// The job.
        job: String,
        /// The writer's token.
        token: Token,
        /// The job's newest token.
        current: Token,
        /// Why.
        cause: FenceCause,
    },
    /// The store failed to read or to make a change durable (I/O error, disk
    /// full). The outcome of a failed change is unknown until it is read
    /// back. Retrying later can help.
    Storage(String),
    /// The data dir's disk is (nearly) full, so the change was refused
    /// before anything was written. Reads go on. Retrying after space is
    /// freed can help.
    NoSpace {
        /// Bytes free for the server in the data dir's file system.
        free: u64,
        /// Bytes a write needs free: its own size plus the store's reserve.
        needed: u64,
    },
    /// The call carried no credentials the server's policy knows: no
    /// client certificate or bearer token of a principal, or a token that
    /// matches none. Nothing was changed. Retrying with the same
    /// credentials cannot help.
    Unauthenticated(String),
    /// The caller is known, but its policy grants it no `action` on `job`,
    /// or the job's lease is bound to another principal. Nothing was
    /// changed, and nothing of the job is told. Retrying cannot help until
    /// the policy or the holder changes.
    PermissionDenied {
        /// The action refused: `lease`, `write`, `read`, `admin` or `chaos`.
        action: &'static str,
        /// The job (empty for an action on no job, such as a backup).
        job: String,
        /// Why, without anything of the job's state.
        why: &'static str,
    },
    /// The server is at a limit on calls in flight: all callers' calls
    /// together (`--max-in-flight`), one connection's
    /// (`--max-in-flight-per-connection`), or one principal's (its
    /// policy's `max_in_flight`). The call was not run; nothing was
    /// changed. Retrying with backoff can help. A renewal of a live lease
    /// is never refused for other calls' load (it has a budget of its
    /// own).
    Overloaded {
        /// The limit reached: the flag that sets it, or the policy's field
        /// when `principal` is set.
        limit: &'static str,
        /// Its value.
        max: usize,
        /// The principal whose own limit it is; `None` for the server's.
        principal: Option<String>,
    },
    /// A limit on state was reached (`--max-jobs`, `--max-waiters-per-job`,
    /// `--max-watchers`, or a principal's `max_jobs`, `max_waiters_per_job`,
    /// `max_watchers`). Nothing was changed. Retrying helps only once the
    /// state shrinks (waiters leave the line, watchers end).
    QuotaExceeded {
        /// The limit reached: the flag that sets it, or the policy's field
        /// when `principal` is set.
        limit: &'static str,
        /// Its value.
        max: usize,
        /// The principal whose own limit it is; `None` for the server's.
        principal: Option<String>,
    },
    /// A `WatchLease` stream whose client read none of the events waiting
    /// for it for `after` (`--watch-stall-timeout`): the server closed it
    /// rather than hold more for it. Nothing else changed. Opening the
    /// watch again helps, with a client that reads.
    SlowWatcher {
        /// How long events waited unread.
        after: std::time::Duration,
    },
    /// `DeleteJob` on a job whose lease is live, or that Acquires are
    /// waiting for. Nothing was changed. Retrying helps once the lease is
    /// released or has expired, and nobody waits.
    JobInUse {
        /// The job.
        job: String,
        /// Why: who holds it, or how many wait.
        why: String,
    },
    /// `TransferLease` found no successor: nobody waits for the job, or
    /// the named holder does not. Nothing was changed: the caller still
    /// leads. Retrying helps once a successor waits.
    NoSuccessor {
        /// The job.
        job: String,
        /// The holder named as successor, if one was.
        to: Option<String>,
    },
    /// The server is shutting down. Retrying against a server that is up
    /// can help.
    ShuttingDown,
    /// The server's listener or transport failed. Restarting can help.
    Serve(String),
}

impl Error {
    /// An [`Error::InvalidArgument`] for `field`.
    pub fn invalid(field: impl Into<Cow<'static, str>>, message: impl Into<String>) -> Self {
        Error::InvalidArgument {
            field: field.into(),
            message: message.into(),
        }
    }

    /// An [`Error::Storage`] from any displayable cause.
    pub fn storage(cause: impl fmt::Display) -> Self {
        Error::Storage(cause.to_string())
    }

    /// An [`Error::Serve`] from any displayable cause.
    pub fn serve(cause: impl fmt::Display) -> Self {
        Error::Serve(cause.to_string())
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::InvalidArgument { field, message } if field.is_empty() => {
                write!(f, "invalid request: {message}")
            }
            Error::InvalidArgument { field, message } => write!(f, "invalid {field}: {message}"),
            Error::UnknownToken {
                job,
                token,
                current,
            } => write!(
                f,
                "token {token} was never issued for job {job:?} (its newest token is {current})"
            ),
            Error::TokensExhausted { job } => write!(
                f,
                "job {job:?} has issued its last token ({}): a grant would repeat one, so none \
                 is made; use another job name",
                u64::MAX
            ),
            Error::LeaseLost {
                job,
                current_holder,
                current,
            } => match current_holder {
                Some(h) => write!(
                    f,
                    "lease on job {job:?} lost: it is held by {h:?} with token {current}"
                ),
                None => write!(
                    f,
                    "lease on job {job:?} lost: it is free (expired or released), last token {current}"
                ),
            },
            Error::Fenced {
                job,
                token,
                current,
                cause,
            } => match cause {
                FenceCause::Superseded => write!(
                    f,
                    "write fenced: token {token} is stale, job {job:?} is at token {current}"
                ),
                FenceCause::NotLive => write!(
                    f,
                    "write fenced: the lease of token {token} on job {job:?} is no longer live \
                     (expired or released); current token {current}"
                ),
                FenceCause::KeyNewer => write!(
                    f,
                    "write fenced: the key was written with a token above {token}; \
                     job {job:?} is at token {current}"
                ),
            },
            Error::Storage(cause) => write!(f, "storage failure: {cause}"),
            Error::NoSpace { free, needed } => write!(
                f,
                "disk full: {free} bytes free in the data dir, a write needs at least {needed}; \
                 nothing was changed"
            ),
            Error::Unauthenticated(why) => write!(f, "unauthenticated: {why}"),
            Error::PermissionDenied { action, job, why } if job.is_empty() => {
                write!(f, "permission denied: {action}: {why}")
            }
            Error::PermissionDenied { action, job, why } => {
                write!(f, "permission denied: {action} on job {job:?}: {why}")
            }
            Error::Overloaded {
                limit: limit @ ("--max-frame-rate-per-connection" | "max_frame_rate"),
                max,
                principal,
            } => write!(
                f,
                "overloaded: more than {max} frames a second that carry no call (SETTINGS, \
                 PING, RST_STREAM) or streams opened past the stream limit, for seconds ({}); \
                 nothing was changed; slow down, or the connection is closed",
                Limit(limit, *max, principal)
            ),
            Error::Overloaded {
                limit: limit @ ("--max-queued-response-bytes" | "max_queued_response_kib"),
                max,
                principal,
            } => write!(
                f,
                "overloaded: the answers held for clients that have not read them are at \
                 their limit of {max} {} ({}); nothing was changed; read the answers, or \
                 retry with backoff",
                if *limit == "max_queued_response_kib" { "KiB" } else { "bytes" },
                Limit(limit, *max, principal)
            ),
            Error::Overloaded {
                limit,
                max,
                principal,
            } => write!(
                f,
                "overloaded: at the limit of {max} calls in flight ({}); nothing was \
                 changed; retry with backoff",
                Limit(limit, *max, principal)
            ),
            Error::QuotaExceeded {
                limit,
                max,
                principal,
            } => write!(
                f,
                "quota exceeded: at the limit of {max} ({}); nothing was changed",
                Limit(limit, *max, principal)
            ),
            Error::SlowWatcher { after } => write!(
                f,
                "watch closed: the client read no event for {after:?} while changes waited                  (--watch-stall-timeout); open it again and read as events arrive"
            ),
            Error::JobInUse { job, why } => {
                write!(f, "job {job:?} is in use ({why}); nothing was deleted")
            }
            Error::NoSuccessor { job, to: Some(to) } => write!(
                f,
                "no successor: {to:?} has no Acquire waiting on job {job:?}; nothing changed, \
                 the lease is still yours"
            ),
            Error::NoSuccessor { job, to: None } => write!(
                f,
                "no successor: nobody waits for job {job:?}; nothing changed, the lease is still yours"
            ),
            Error::ShuttingDown => f.write_str("the server is shutting down"),
            Error::Serve(cause) => write!(f, "server failure: {cause}"),
        }
    }
}

impl std::error::Error for Error {}

/// A limit as an error message names it: the server's flag, or
/// `principal "billing": max_in_flight 50`.
struct Limit<'a>(&'a str, usize, &'a Option<String>);

impl fmt::Display for Limit<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.2 {
            None => f.write_str(self.0),
            Some(p) => write!(f, "principal {p:?}: {} {}", self.0, self.1),
        }
    }
}
