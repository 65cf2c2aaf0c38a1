//! Proto types stop here: explicit conversions from requests to validated
//! domain values, and from domain values to responses.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::lease::{LeaseState, LeaseView};
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

/// A std duration as a proto one.
pub fn to_proto_duration(d: Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: d.as_secs() as i64,
        nanos: d.subsec_nanos() as i32,
    }
}

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
