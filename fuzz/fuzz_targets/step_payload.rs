//! Arbitrary bytes as a stored payload (a step row, a snapshot's state, an execution's
//! documents), as a damaged or hostile database would hand them back: plain JSON of any
//! version, or LZ4- or zstd-compressed JSON. Decoding must answer Ok or Err, never panic,
//! and never inflate beyond `MAX_INFLATED_BYTES`; whatever decodes must survive being
//! written again in the current version (plain and compressed) unchanged.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stepwise_core::codec::MAX_INFLATED_BYTES;
use stepwise_core::codec::{decode_step, decode_value, encode_step, encode_value, unpack};

fuzz_target!(|data: &[u8]| {
    if let Ok(json) = unpack(data) {
        assert!(json.len() <= MAX_INFLATED_BYTES, "inflated past the limit");
    }
    if let Ok(body) = decode_step(data) {
        for threshold in [usize::MAX, 0] {
            let again = decode_step(&encode_step(&body, threshold));
            assert_eq!(again.as_ref(), Ok(&body), "a step changed on re-encoding");
        }
    }
    if let Ok(value) = decode_value(data) {
        for threshold in [usize::MAX, 0] {
            let again = decode_value(&encode_value(&value, threshold));
            assert_eq!(again.as_ref(), Ok(&value), "a value changed on re-encoding");
        }
    }
});
