//! The lease and fence rules against the reference model, on scenarios
//! decoded from arbitrary bytes (the same model the property tests use).
#![no_main]

use leasehold::lease::model;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(e) = model::check(&model::from_bytes(data)) {
        panic!("the lease table disagrees with the model: {e}");
    }
});
