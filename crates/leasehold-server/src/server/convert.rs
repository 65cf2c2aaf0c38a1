//! Proto types stop here: explicit conversions from requests to validated
//! domain values, and from domain values to responses.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::lease::{HolderId, JobName, LeaseState, LeaseView, Limits, Token};
use crate::node::EventKind;
use crate::proto;

/// A proto duration as a std one; `None` when unset. Negative or malformed
/// durations are bad input for `field`.
pub fn duration(field: &'static str, d: Option<prost_types::Duration>) -> Result<Option<Duration>> {
    let Some(d) = d else { return Ok(None) };
    if d.seconds < 0 || d.nanos < 0 || d.nanos >= 1_000_000_000 {
        return Err(Error::invalid(
            field,
            format!(
                "must be a non-negative duration (got {}s {}ns)",
                d.seconds, d.nanos
            ),
        ));
    }
    Ok(Some(Duration::new(d.seconds as u64, d.nanos as u32)))
}

/// A validated `Acquire`: (job, holder, ttl, wait).
pub fn acquire_args(
    l: &Limits,
    r: &proto::AcquireRequest,
) -> Result<(JobName, HolderId, Duration, Duration)> {
    Ok((
        l.job(&r.job)?,
        l.holder(&r.holder)?,
        l.ttl(duration("ttl", r.ttl)?)?,
        l.wait(duration("wait", r.wait)?)?,
    ))
}

/// A validated `Renew`: (job, holder, token, ttl).
pub fn renew_args(
    l: &Limits,
    r: &proto::RenewRequest,
) -> Result<(JobName, HolderId, Token, Duration)> {
    Ok((
        l.job(&r.job)?,
        l.holder(&r.holder)?,
        l.token(r.token)?,
        l.ttl(duration("ttl", r.ttl)?)?,
    ))
}

/// A validated `Release`: (job, holder, token).
pub fn release_args(l: &Limits, r: &proto::ReleaseRequest) -> Result<(JobName, HolderId, Token)> {
    Ok((l.job(&r.job)?, l.holder(&r.holder)?, l.token(r.token)?))
}

/// A validated `CheckedWrite`.
pub type WriteArgs = crate::node::Write;

/// Validates a `CheckedWrite`.
pub fn write_args(l: &Limits, r: proto::CheckedWriteRequest) -> Result<WriteArgs> {
    let job = l.job(&r.job)?;
    let token = l.token(r.token)?;
    l.key(&r.key)?;
    let value = if r.delete {
        None
    } else {
        l.value(&r.value)?;
        Some(r.value)
    };
    Ok(WriteArgs {
        job,
        token,
        key: r.key,
        value,
    })
}

/// A validated `Read`: (job, key).
pub fn read_args(l: &Limits, r: proto::ReadRequest) -> Result<(JobName, Vec<u8>)> {
    let job = l.job(&r.job)?;
    l.key(&r.key)?;
    Ok((job, r.key))
}

pub use crate::proto::to_proto_duration;

/// A lease snapshot as the proto `Lease`.
pub fn lease(v: &LeaseView) -> proto::Lease {
    let (holder, ttl, remaining) = match &v.state {
        LeaseState::Held {
            holder,
            ttl,
            remaining,
            ..
        } => (
            holder.to_string(),
            Some(to_proto_duration(*ttl)),
            Some(to_proto_duration(*remaining)),
        ),
        LeaseState::Free(_) => (String::new(), None, None),
    };
    proto::Lease {
        job: v.job.to_string(),
        holder,
        token: v.token.0,
        ttl,
        remaining,
    }
}

/// A watch event kind as the proto enum.
pub fn event_kind(k: EventKind) -> proto::lease_event::Kind {
    use proto::lease_event::Kind;
    match k {
        EventKind::Current => Kind::Current,
        EventKind::Acquired => Kind::Acquired,
        EventKind::Released => Kind::Released,
        EventKind::Expired => Kind::Expired,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negative_durations_are_rejected_by_field() {
        let e = duration(
            "wait",
            Some(prost_types::Duration {
                seconds: -1,
                nanos: 0,
            }),
        )
        .unwrap_err();
        assert!(e.to_string().contains("wait"));
        assert_eq!(duration("ttl", None).unwrap(), None);
        assert_eq!(
            duration("ttl", Some(to_proto_duration(Duration::from_millis(1500)))).unwrap(),
            Some(Duration::from_millis(1500))
        );
    }
}
