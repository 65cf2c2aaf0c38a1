//! leasehold's gRPC contract: the code generated from
//! `proto/leasehold/v1/leasehold.proto` (and the operator's `admin.proto`),
//! its file descriptor set, and the conversions that need no domain type.
//!
//! Clients and the server both build on this crate; it knows nothing of
//! either.

#![allow(missing_docs, clippy::all)]

use std::time::Duration;

tonic::include_proto!("leasehold.v1");

pub mod proof;

/// The encoded file descriptor set, served by reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("leasehold_descriptor");

/// A [`Duration`] as a protobuf `Duration`, saturating at its range.
pub fn to_proto_duration(d: Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        nanos: d.subsec_nanos() as i32,
    }
}

impl ErrorReason {
    /// The reason as sent in `google.rpc.ErrorInfo`: the enum value's name
    /// without the `ERROR_REASON_` prefix (`LEASE_LOST`).
    pub fn reason(self) -> &'static str {
        let name = self.as_str_name();
        name.strip_prefix("ERROR_REASON_").unwrap_or(name)
    }

    /// The enum value for a reason string, if it is one.
    pub fn from_reason(reason: &str) -> Option<ErrorReason> {
        ErrorReason::from_str_name(&format!("ERROR_REASON_{reason}"))
    }
}

#[cfg(test)]
mod tests {
    use super::ErrorReason;

    #[test]
    fn every_reason_round_trips_without_its_prefix() {
        for r in (1..).map_while(|n| ErrorReason::try_from(n).ok()) {
            assert!(!r.reason().starts_with("ERROR_REASON_"));
            assert_eq!(ErrorReason::from_reason(r.reason()), Some(r));
        }
        assert_eq!(ErrorReason::Fenced.reason(), "FENCED");
        assert_eq!(ErrorReason::from_reason("NOT_A_REASON"), None);
    }
}
