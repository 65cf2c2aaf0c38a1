//! Proto types stop here: explicit conversions from requests to validated
//! domain values, and from domain values to responses.
//!
//! Each request's conversion is also where the policy's per-job rule is
//! applied ([`Caller::authorize`], with the job just validated) and where
//! the holder is bound to the caller's principal ([`Caller::bind`]): every
//! handler goes through here, so none can forget either.

use std::time::Duration;

use crate::backend::EventKind;
use crate::error::{Error, Result};
use crate::lease::{HolderId, JobName, LeaseState, LeaseView, Limits, Published, Token};
use crate::proto;
use crate::server::auth::{self, Action, Caller};

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

/// A validated job name that `caller` may do `action` on.
pub fn job_arg(l: &Limits, caller: &Caller, action: Action, job: &str) -> Result<JobName> {
    let job = l.job(job)?;
    caller.authorize(action, job.as_str())?;
    Ok(job)
}

/// A validated `Acquire`: (job, holder bound to the caller, ttl, wait).
pub fn acquire_args(
    l: &Limits,
    caller: &Caller,
    r: &proto::AcquireRequest,
) -> Result<(JobName, HolderId, Duration, Duration, Published)> {
    Ok((
        job_arg(l, caller, Action::Lease, &r.job)?,
        caller.bind(l.holder(&r.holder)?),
        l.ttl(duration("ttl", r.ttl)?)?,
        l.wait(duration("wait", r.wait)?)?,
        l.lease_value(&r.value)?,
    ))
}

/// A validated `Renew`: (job, holder bound to the caller, token, ttl, the
/// value to publish instead, if any).
pub type RenewArgs = (JobName, HolderId, Token, Duration, Option<Published>);

/// Validates a `Renew`.
pub fn renew_args(l: &Limits, caller: &Caller, r: &proto::RenewRequest) -> Result<RenewArgs> {
    Ok((
        job_arg(l, caller, Action::Lease, &r.job)?,
        caller.bind(l.holder(&r.holder)?),
        l.token(r.token)?,
        l.ttl(duration("ttl", r.ttl)?)?,
        r.value.as_deref().map(|v| l.lease_value(v)).transpose()?,
    ))
}

/// A validated `Release`: (job, holder bound to the caller, token).
pub fn release_args(
    l: &Limits,
    caller: &Caller,
    r: &proto::ReleaseRequest,
) -> Result<(JobName, HolderId, Token)> {
    Ok((
        job_arg(l, caller, Action::Lease, &r.job)?,
        caller.bind(l.holder(&r.holder)?),
        l.token(r.token)?,
    ))
}

/// A validated `TransferLease`: (job, holder bound to the caller, token,
/// the successor as its client names it, the successor's TTL).
pub type TransferArgs = (JobName, HolderId, Token, Option<String>, Option<Duration>);

/// Validates a `TransferLease`.
pub fn transfer_args(
    l: &Limits,
    caller: &Caller,
    r: &proto::TransferLeaseRequest,
) -> Result<TransferArgs> {
    let to = match r.to_holder.is_empty() {
        true => None,
        false => Some(l.holder(&r.to_holder).map_err(|e| rename(e, "to_holder"))?),
    };
    let ttl = match r.ttl {
        None => None,
        Some(_) => Some(l.ttl(duration("ttl", r.ttl)?)?),
    };
    Ok((
        job_arg(l, caller, Action::Lease, &r.job)?,
        caller.bind(l.holder(&r.holder)?),
        l.token(r.token)?,
        to.map(|h| h.to_string()),
        ttl,
    ))
}

/// `e` naming `field` when it names a field (a check made for one field
/// and applied to another of the same kind).
pub fn rename(e: Error, field: &'static str) -> Error {
    match e {
        Error::InvalidArgument { message, .. } => Error::invalid(field, message),
        e => e,
    }
}

/// A validated `CheckedWrite`.
pub type WriteArgs = crate::backend::Write;

/// Validates a `CheckedWrite` that `caller` may make. (Whether the job's
/// live grant is another principal's is asked by the store, in the
/// write's decision: [`Caller::held_by_another`].)
pub fn write_args(l: &Limits, caller: &Caller, r: proto::CheckedWriteRequest) -> Result<WriteArgs> {
    write_args_with(l, caller, r, None).map(|(w, _)| w)
}

/// [`write_args`], where a write may carry a proof instead of a token
/// (`CheckedWrite`'s, with `proofs` the server's keys): the proof must
/// verify and be for the write's job, and its token is the write's. With
/// the principal the proof names, whose the live grant must be.
pub fn write_args_with(
    l: &Limits,
    caller: &Caller,
    r: proto::CheckedWriteRequest,
    proofs: Option<&Proofs>,
) -> Result<(WriteArgs, Option<String>)> {
    let job = job_arg(l, caller, Action::Write, &r.job)?;
    let (token, by_proof) = match (r.proof.is_empty(), proofs) {
        (true, _) => (l.token(r.token)?, None),
        (false, None) => {
            return Err(Error::invalid(
                "proof",
                "WriteStream takes tokens only: send a write with a proof by CheckedWrite",
            ))
        }
        (false, Some(proofs)) => {
            if r.proof.len() > MAX_PROOF_BYTES {
                return Err(Error::invalid(
                    "proof",
                    format!("{} bytes, the limit is {MAX_PROOF_BYTES}", r.proof.len()),
                ));
            }
            let c = proofs
                .verify(&r.proof)
                .map_err(|e| Error::invalid("proof", e.to_string()))?;
            if c.job != job.as_str() {
                return Err(Error::invalid(
                    "proof",
                    format!("the proof is for job {:?}, not {:?}", c.job, job.as_str()),
                ));
            }
            if r.token != 0 && r.token != c.token {
                return Err(Error::invalid(
                    "token",
                    format!("{} is not the proof's token {}", r.token, c.token),
                ));
            }
            (l.token(c.token)?, Some(c.principal))
        }
    };
    l.key(&r.key)?;
    let value = if r.delete {
        None
    } else {
        l.value(&r.value)?;
        Some(r.value)
    };
    Ok((
        WriteArgs {
            job,
            token,
            key: r.key,
            value,
        },
        by_proof,
    ))
}

/// The longest `CheckedWriteRequest.proof` read: a proof is about 400
/// bytes with names at their limits.
pub const MAX_PROOF_BYTES: usize = 4096;

/// A validated `Read`: (job, key).
pub fn read_args(l: &Limits, caller: &Caller, r: proto::ReadRequest) -> Result<(JobName, Vec<u8>)> {
    let job = job_arg(l, caller, Action::Read, &r.job)?;
    l.key(&r.key)?;
    Ok((job, r.key))
}

use crate::proofs::Proofs;
pub use crate::proto::to_proto_duration;

/// A lease snapshot as the proto `Lease`: the holder as its client sent
/// it, the principal it is bound to, and the grant's proof.
pub fn lease(v: &LeaseView, proofs: &Proofs) -> proto::Lease {
    let (holder, principal, ttl, remaining, value) = match &v.state {
        LeaseState::Held {
            holder,
            ttl,
            remaining,
            value,
            ..
        } => {
            let (principal, holder) = auth::unbind(holder.as_str());
            (
                holder.to_owned(),
                principal.unwrap_or_default().to_owned(),
                Some(to_proto_duration(*ttl)),
                Some(to_proto_duration(*remaining)),
                value.as_deref().map(<[u8]>::to_vec).unwrap_or_default(),
            )
        }
        LeaseState::Free(_) => (String::new(), String::new(), None, None, Vec::new()),
    };
    proto::Lease {
        job: v.job.to_string(),
        holder,
        token: v.token.0,
        ttl,
        remaining,
        principal,
        proof: proofs.of(v),
        value,
        slot: 0,
        slots: 0,
    }
}

/// [`lease`] as `caller` may see it: whole when the grant is its own
/// principal's or it may `read` the job; else without the holder, the
/// principal, the token, the proof and the value. A `lease` grant alone tells that a job is
/// held, and for how long, not by whom or under which token.
pub fn lease_for(caller: &Caller, v: &LeaseView, proofs: &Proofs) -> proto::Lease {
    if !may_see(caller, v) {
        let mut l = lease(v, &Proofs::none());
        l.holder.clear();
        l.principal.clear();
        l.token = 0;
        l.value.clear();
        return l;
    }
    lease(v, proofs)
}

/// Whether `caller` may see who holds `v` and under which token: the grant
/// is its own principal's, or it may `read` the job.
pub fn may_see(caller: &Caller, v: &LeaseView) -> bool {
    let own = match &v.state {
        LeaseState::Held { holder, .. } => !caller.held_by_another(holder.as_str()),
        LeaseState::Free(_) => false,
    };
    own || caller.may_read(v.job.as_str())
}

/// A stored tenure as the proto `Tenure`: the holder as its client sent
/// it, the principal it was bound to, wall-clock times.
pub fn tenure(t: &crate::record::Tenure) -> proto::Tenure {
    use crate::lease::TenureEnd;
    use proto::tenure::End;
    let (principal, holder) = auth::unbind(&t.holder);
    let at = |ms: u64| prost_types::Timestamp {
        seconds: (ms / 1000) as i64,
        nanos: ((ms % 1000) * 1_000_000) as i32,
    };
    let (end, ended_at) = match t.end {
        None => (End::Unspecified, None),
        Some((how, ms)) => (
            match how {
                TenureEnd::Released => End::Released,
                TenureEnd::Expired => End::Expired,
                TenureEnd::TakenOver => End::TakenOver,
                TenureEnd::Deleted => End::Deleted,
                TenureEnd::Restored => End::Restored,
                TenureEnd::Recovered => End::Recovered,
                TenureEnd::ConnectionClosed => End::ConnectionClosed,
                TenureEnd::Transferred => End::Transferred,
                TenureEnd::Chaos => End::Chaos,
            },
            Some(at(ms)),
        ),
    };
    proto::Tenure {
        token: t.token.0,
        holder: holder.to_owned(),
        principal: principal.unwrap_or_default().to_owned(),
        granted_at: Some(at(t.granted_unix_ms)),
        ttl: Some(to_proto_duration(t.ttl)),
        end: end as i32,
        ended_at,
        value: t.value.clone(),
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
        EventKind::ValueChanged => Kind::ValueChanged,
    }
}

/// A chaos action as the proto `ChaosEvent`.
pub fn chaos_event(e: &crate::server::chaos::Event) -> proto::ChaosEvent {
    proto::ChaosEvent {
        at: Some(prost_types::Timestamp {
            seconds: (e.at_unix_ms / 1000) as i64,
            nanos: ((e.at_unix_ms % 1000) * 1_000_000) as i32,
        }),
        action: e.action.to_owned(),
        detail: e.detail.clone(),
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
