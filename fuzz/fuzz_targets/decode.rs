//! Request decoding and validation, and the store's record decoding, on
//! arbitrary bytes: nothing panics, and whatever validation accepts is
//! within the limits.
#![no_main]

use leasehold::lease::Limits;
use leasehold::proto;
use leasehold::server::convert;
use libfuzzer_sys::fuzz_target;
use prost::Message;

fuzz_target!(|data: &[u8]| {
    let l = Limits::default();
    let name_ok = |s: &str| !s.is_empty() && s.len() <= l.max_name_bytes && !s.chars().any(char::is_control);
    if let Some((tag, body)) = data.split_first() {
        match tag % 5 {
            0 => {
                if let Ok(r) = proto::AcquireRequest::decode(body) {
                    if let Ok((job, holder, ttl, wait)) = convert::acquire_args(&l, &r) {
                        assert!(name_ok(job.as_str()) && name_ok(holder.as_str()));
                        assert!(ttl >= l.min_ttl && ttl <= l.max_ttl && wait <= l.max_wait);
                    }
                }
            }
            1 => {
                if let Ok(r) = proto::RenewRequest::decode(body) {
                    if let Ok((job, holder, token, ttl)) = convert::renew_args(&l, &r) {
                        assert!(name_ok(job.as_str()) && name_ok(holder.as_str()));
                        assert!(token.0 > 0 && ttl >= l.min_ttl && ttl <= l.max_ttl);
                    }
                }
            }
            2 => {
                if let Ok(r) = proto::ReleaseRequest::decode(body) {
                    if let Ok((_, _, token)) = convert::release_args(&l, &r) {
                        assert!(token.0 > 0);
                    }
                }
            }
            3 => {
                if let Ok(r) = proto::CheckedWriteRequest::decode(body) {
                    if let Ok(w) = convert::write_args(&l, r) {
                        assert!(!w.key.is_empty() && w.key.len() <= l.max_key_bytes);
                        assert!(w.value.as_ref().is_none_or(|v| v.len() <= l.max_value_bytes));
                        assert!(w.token.0 > 0 && name_ok(w.job.as_str()));
                    }
                }
            }
            _ => {
                if let Ok(r) = proto::ReadRequest::decode(body) {
                    if let Ok((job, key)) = convert::read_args(&l, r) {
                        assert!(name_ok(job.as_str()) && !key.is_empty() && key.len() <= l.max_key_bytes);
                    }
                }
            }
        }
    }
    // Records read back from disk: corrupt bytes are an error, never a panic.
    let _ = leasehold::store::decode_lease(data);
    let _ = leasehold::store::decode_value(data);
});
