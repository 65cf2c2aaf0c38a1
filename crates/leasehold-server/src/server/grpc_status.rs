//! The one table from [`Error`] to gRPC status.
//!
//! Every status carries a `google.rpc.ErrorInfo` with domain `leasehold`
//! and the error's reason, so that clients in any language branch on the
//! reason, never on the message. Bad input also carries a
//! `google.rpc.BadRequest` naming the field, unless the fault is the
//! message as a whole (bytes that are not a protobuf message): then
//! neither names a field.

use std::collections::HashMap;

use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

use crate::error::Error;
use crate::proto::ErrorReason;

/// The `ErrorInfo` domain of every leasehold error.
pub const DOMAIN: &str = "leasehold";

/// Maps a domain error to its gRPC status. The mapping:
///
/// | error | code | reason |
/// |---|---|---|
/// | `InvalidArgument` | INVALID_ARGUMENT | INVALID_ARGUMENT |
/// | `UnknownToken` | INVALID_ARGUMENT | UNKNOWN_TOKEN |
/// | `LeaseLost` | FAILED_PRECONDITION | LEASE_LOST |
/// | `Fenced` | FAILED_PRECONDITION | FENCED |
/// | `Storage` | UNAVAILABLE | STORAGE |
/// | `TokensExhausted` | FAILED_PRECONDITION | TOKENS_EXHAUSTED |
/// | `NoSpace` | RESOURCE_EXHAUSTED | DISK_FULL |
/// | `Storage`, etcd out of space ([`leasehold_etcd::is_no_space`]) | RESOURCE_EXHAUSTED | DISK_FULL |
/// | `Unauthenticated` | UNAUTHENTICATED | UNAUTHENTICATED |
/// | `PermissionDenied` | PERMISSION_DENIED | PERMISSION_DENIED |
/// | `Overloaded` | RESOURCE_EXHAUSTED | OVERLOADED |
/// | `QuotaExceeded` | RESOURCE_EXHAUSTED | QUOTA_EXCEEDED |
/// | `JobInUse` | FAILED_PRECONDITION | JOB_IN_USE |
/// | `NoSuccessor` | FAILED_PRECONDITION | NO_SUCCESSOR |
/// | `SlowWatcher` | RESOURCE_EXHAUSTED | OVERLOADED |
/// | `ShuttingDown` | UNAVAILABLE | SHUTTING_DOWN |
///
/// A limit's refusal has `limit` and `max` in its `ErrorInfo`, and
/// `principal` when the limit is a principal's own (the policy's
/// `[principal.limits]`).
pub fn to_status(e: &Error) -> Status {
    let mut meta = HashMap::new();
    let code = match e {
        Error::InvalidArgument { field, .. } => {
            if !field.is_empty() {
                meta.insert("field".to_owned(), field.to_string());
            }
            Code::InvalidArgument
        }
        Error::UnknownToken { current, .. } => {
            meta.insert("current_token".to_owned(), current.to_string());
            Code::InvalidArgument
        }
        Error::LeaseLost {
            current_holder,
            current,
            ..
        } => {
            meta.insert("current_token".to_owned(), current.to_string());
            if let Some(h) = current_holder {
                meta.insert("current_holder".to_owned(), h.clone());
            }
            Code::FailedPrecondition
        }
        Error::Fenced { current, .. } => {
            meta.insert("current_token".to_owned(), current.to_string());
            Code::FailedPrecondition
        }
        Error::TokensExhausted { .. } | Error::JobInUse { .. } | Error::NoSuccessor { .. } => {
            Code::FailedPrecondition
        }
        Error::NoSpace { free, needed } => {
            meta.insert("free_bytes".to_owned(), free.to_string());
            meta.insert("needed_bytes".to_owned(), needed.to_string());
            Code::ResourceExhausted
        }
        Error::Unauthenticated(_) => Code::Unauthenticated,
        Error::PermissionDenied { action, job, .. } => {
            meta.insert("action".to_owned(), action.to_string());
            meta.insert("job".to_owned(), job.clone());
            Code::PermissionDenied
        }
        Error::Overloaded {
            limit,
            max,
            principal,
        }
        | Error::QuotaExceeded {
            limit,
            max,
            principal,
        } => {
            meta.insert("limit".to_owned(), limit.to_string());
            meta.insert("max".to_owned(), max.to_string());
            if let Some(p) = principal {
                meta.insert("principal".to_owned(), p.clone());
            }
            Code::ResourceExhausted
        }
        Error::SlowWatcher { after } => {
            meta.insert("limit".to_owned(), "--watch-stall-timeout".to_owned());
            meta.insert("max".to_owned(), format!("{after:?}"));
            Code::ResourceExhausted
        }
        // etcd refused the change for lack of space: nothing was applied,
        // as with a full disk, not an unknown outcome.
        Error::Storage(_) if leasehold_etcd::is_no_space(e) => Code::ResourceExhausted,
        Error::Storage(_) | Error::ShuttingDown | Error::Serve(_) => Code::Unavailable,
    };
    let mut details = ErrorDetails::with_error_info(reason(e).reason(), DOMAIN, meta);
    if let Error::InvalidArgument { field, message } = e {
        if !field.is_empty() {
            details.add_bad_request_violation(field.as_ref(), message.clone());
        }
    }
    Status::with_error_details(code, e.to_string(), details)
}

/// The machine-readable reason of `e`, from the contract's `ErrorReason`
/// (sent in `google.rpc.ErrorInfo` as its name without the prefix).
pub fn reason(e: &Error) -> ErrorReason {
    match e {
        Error::InvalidArgument { .. } => ErrorReason::InvalidArgument,
        Error::UnknownToken { .. } => ErrorReason::UnknownToken,
        Error::LeaseLost { .. } => ErrorReason::LeaseLost,
        Error::TokensExhausted { .. } => ErrorReason::TokensExhausted,
        Error::Fenced { .. } => ErrorReason::Fenced,
        Error::Storage(_) if leasehold_etcd::is_no_space(e) => ErrorReason::DiskFull,
        Error::Storage(_) => ErrorReason::Storage,
        Error::NoSpace { .. } => ErrorReason::DiskFull,
        Error::Unauthenticated(_) => ErrorReason::Unauthenticated,
        Error::PermissionDenied { .. } => ErrorReason::PermissionDenied,
        Error::Overloaded { .. } => ErrorReason::Overloaded,
        Error::QuotaExceeded { .. } => ErrorReason::QuotaExceeded,
        Error::JobInUse { .. } => ErrorReason::JobInUse,
        Error::NoSuccessor { .. } => ErrorReason::NoSuccessor,
        Error::SlowWatcher { .. } => ErrorReason::Overloaded,
        Error::ShuttingDown | Error::Serve(_) => ErrorReason::ShuttingDown,
    }
}

/// `?` from a domain error to a gRPC status in the handlers:
/// `result.map_err(status)?`. (The error type lives in the pure core,
/// which knows nothing of tonic, so this cannot be a `From`.)
pub fn status(e: Error) -> Status {
    to_status(&e)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::FenceCause;
    use crate::lease::Token;

    #[test]
    fn fenced_names_current_token_in_message_and_metadata() {
        let s = to_status(&Error::Fenced {
            job: "j".into(),
            token: Token(1),
            current: Token(2),
            cause: FenceCause::Superseded,
        });
        assert_eq!(s.code(), Code::FailedPrecondition);
        assert!(s.message().contains('2'), "{}", s.message());
        let info = s.get_error_details().error_info().cloned().unwrap();
        assert_eq!(info.reason, "FENCED");
        assert_eq!(info.domain, DOMAIN);
        assert_eq!(info.metadata["current_token"], "2");
    }

    #[test]
    fn permission_denied_names_action_and_job() {
        let s = to_status(&Error::PermissionDenied {
            action: "lease",
            job: "billing/x".into(),
            why: "no grant",
        });
        assert_eq!(s.code(), Code::PermissionDenied);
        let info = s.get_error_details().error_info().cloned().unwrap();
        assert_eq!(info.reason, "PERMISSION_DENIED");
        assert_eq!(info.metadata["action"], "lease");
        assert_eq!(info.metadata["job"], "billing/x");
        let s = to_status(&Error::Unauthenticated("no credentials".into()));
        assert_eq!(s.code(), Code::Unauthenticated);
        let info = s.get_error_details().error_info().cloned().unwrap();
        assert_eq!(info.reason, "UNAUTHENTICATED");
    }

    #[test]
    fn overloaded_names_the_limit() {
        let s = to_status(&Error::Overloaded {
            limit: "--max-in-flight-per-connection",
            max: 1000,
            principal: None,
        });
        assert_eq!(s.code(), Code::ResourceExhausted);
        assert!(s.message().contains("--max-in-flight-per-connection"));
        let info = s.get_error_details().error_info().cloned().unwrap();
        assert_eq!(info.reason, "OVERLOADED");
        assert_eq!(info.metadata["limit"], "--max-in-flight-per-connection");
        assert_eq!(info.metadata["max"], "1000");
        assert!(!info.metadata.contains_key("principal"));
    }

    #[test]
    fn a_principals_limit_names_the_principal() {
        let s = to_status(&Error::QuotaExceeded {
            limit: "max_watchers",
            max: 3,
            principal: Some("billing".into()),
        });
        assert_eq!(s.code(), Code::ResourceExhausted);
        assert!(
            s.message()
                .contains(r#"principal "billing": max_watchers 3"#),
            "{}",
            s.message()
        );
        let info = s.get_error_details().error_info().cloned().unwrap();
        assert_eq!(info.reason, "QUOTA_EXCEEDED");
        assert_eq!(info.metadata["limit"], "max_watchers");
        assert_eq!(info.metadata["max"], "3");
        assert_eq!(info.metadata["principal"], "billing");
    }

    #[test]
    fn invalid_argument_names_field() {
        let s = to_status(&Error::invalid("ttl", "too long"));
        assert_eq!(s.code(), Code::InvalidArgument);
        let d = s.get_error_details();
        assert_eq!(d.error_info().unwrap().metadata["field"], "ttl");
        assert_eq!(d.bad_request().unwrap().field_violations[0].field, "ttl");
    }

    #[test]
    fn invalid_argument_of_the_whole_message_names_no_field() {
        let s = to_status(&Error::invalid("", "not a message"));
        assert_eq!(s.code(), Code::InvalidArgument);
        assert_eq!(s.message(), "invalid request: not a message");
        let d = s.get_error_details();
        let info = d.error_info().unwrap();
        assert_eq!(info.reason, "INVALID_ARGUMENT");
        assert!(!info.metadata.contains_key("field"));
        assert!(d.bad_request().is_none());
    }
}
