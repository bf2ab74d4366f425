//! Arbitrary bytes as a session document (an HTTP import, a file handed to the CLI, a file
//! the JSON files backend finds on disk). `parse_document` must answer Ok or Err, never
//! panic; a document it accepts must come back unchanged from its own serialisation (what
//! export writes and import reads); and tight limits may only refuse more, never accept
//! what the default limits refuse.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stepwise_core::document::{DocumentLimits, parse_document};

fn tight() -> DocumentLimits {
    DocumentLimits {
        max_bytes: 2048,
        max_depth: 12,
        max_messages: 3,
        max_executions: 2,
        max_steps: 3,
        max_snapshots: 2,
        max_tool_calls_per_step: 2,
        max_checkpoints: 3,
        max_checkpoint_blobs: 3,
        max_checkpoint_writes: 3,
    }
}

fuzz_target!(|data: &[u8]| {
    let limits = DocumentLimits::default();
    let parsed = parse_document(data, &limits);
    if let Ok(doc) = &parsed {
        for bytes in [serde_json::to_vec(doc), serde_json::to_vec_pretty(doc)] {
            let bytes = bytes.expect("a document serialises");
            match parse_document(&bytes, &limits) {
                Ok(again) => assert_eq!(&again, doc, "the document changed on a round trip"),
                Err(e) => panic!(
                    "a parsed document's own serialisation is refused: {e}\n{}",
                    String::from_utf8_lossy(&bytes)
                ),
            }
        }
    }
    if parse_document(data, &tight()).is_ok() {
        assert!(
            parsed.is_ok(),
            "accepted under tight limits, refused under the defaults: {parsed:?}"
        );
    }
});
