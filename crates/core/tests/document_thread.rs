//! A LangGraph thread's checkpoints in the session document (`thread`): absent for an
//! ordinary session (whose JSON stays as it was), round-trips exactly when present, and
//! every rule of the checkpoint calls is checked before an import writes anything.

#![allow(clippy::unwrap_used, clippy::type_complexity)]

use serde_json::{Value, json};
use stepwise_core::document::{DocumentError, DocumentLimits, parse_document};

const FIXTURE_V0: &str = include_str!("fixtures/session-v0-seed004.json");

fn b64(text: &str) -> String {
    stepwise_core::base64::encode(text.as_bytes())
}

/// A current document (the upgraded fixture) as JSON.
fn base() -> Value {
    let doc = parse_document(FIXTURE_V0.as_bytes(), &DocumentLimits::default()).unwrap();
    serde_json::to_value(&doc).unwrap()
}

fn with_thread() -> Value {
    let mut doc = base();
    doc["thread"] = json!({
        "thread_id": "thread 1",
        "checkpoints": [
            {"checkpoint_ns": "", "checkpoint_id": "001", "parent_checkpoint_id": null,
             "checkpoint": {"type": "msgpack", "data": b64("c1")}, "metadata": {"step": 1},
             "channel_versions": {"messages": "1"}, "created_at": "2026-01-06T12:00:00.000000Z"},
            {"checkpoint_ns": "", "checkpoint_id": "002", "parent_checkpoint_id": "001",
             "checkpoint": {"type": "msgpack", "data": b64("c2")}, "metadata": {"step": 2, "run_id": "r"},
             "channel_versions": {"messages": "2"}, "created_at": "2026-01-06T12:00:01.000000Z"},
            {"checkpoint_ns": "tools:1", "checkpoint_id": "001", "parent_checkpoint_id": null,
             "checkpoint": {"type": "msgpack", "data": ""}, "metadata": {},
             "channel_versions": {}, "created_at": "2026-01-06T12:00:02.000000Z"}
        ],
        "checkpoint_blobs": [
            {"checkpoint_ns": "", "channel": "messages", "version": "1", "kind": "full",
             "type": "msgpack", "data": b64("[m0]")},
            {"checkpoint_ns": "", "channel": "messages", "version": "2", "kind": "append",
             "base_version": "1", "items": [{"type": "msgpack", "data": b64("m1")}]},
            {"checkpoint_ns": "tools:1", "channel": "log", "version": "1", "kind": "append",
             "items": [{"type": "json", "data": b64("x")}]}
        ],
        "checkpoint_writes": [
            {"checkpoint_ns": "", "checkpoint_id": "002", "task_id": "t", "task_path": "",
             "idx": -1, "channel": "__error__", "type": "json", "data": b64("boom")}
        ]
    });
    doc
}

fn parse(value: &Value) -> Result<stepwise_core::SessionDocument, DocumentError> {
    parse_document(
        &serde_json::to_vec(value).unwrap(),
        &DocumentLimits::default(),
    )
}

fn field_of(value: &Value) -> String {
    match parse(value) {
        Ok(_) => panic!("accepted: {value}"),
        Err(e) => e.field().unwrap_or_default().to_string(),
    }
}

#[test]
fn an_ordinary_session_has_no_thread_and_its_json_is_unchanged() {
    let value = base();
    let doc = parse(&value).unwrap();
    assert!(doc.thread.is_none());
    let text = serde_json::to_string(&doc).unwrap();
    assert!(!text.contains("\"thread\""), "{text}");
    let mut empty = value;
    empty["thread"] = Value::Null;
    assert_eq!(parse(&empty).unwrap(), doc);
}

#[test]
fn a_thread_round_trips_exactly() {
    let doc = parse(&with_thread()).unwrap();
    let thread = doc.thread.as_ref().unwrap();
    assert_eq!(
        (
            thread.checkpoints.len(),
            thread.checkpoint_blobs.len(),
            thread.checkpoint_writes.len()
        ),
        (3, 3, 1)
    );
    for bytes in [
        serde_json::to_vec(&doc).unwrap(),
        serde_json::to_vec_pretty(&doc).unwrap(),
    ] {
        assert_eq!(
            parse_document(&bytes, &DocumentLimits::default()).unwrap(),
            doc
        );
    }
    // A thread with no checkpoints at all is a thread too (only its id).
    let mut bare = base();
    bare["thread"] = json!({"thread_id": "t"});
    let bare = parse(&bare).unwrap();
    assert_eq!(
        serde_json::to_value(&bare).unwrap()["thread"],
        json!({"thread_id": "t"})
    );
}

#[test]
fn broken_threads_are_refused_naming_the_field() {
    let cases: Vec<(&str, Box<dyn Fn(&mut Value)>)> = vec![
        ("thread.thread_id", Box::new(|t| t["thread_id"] = json!(""))),
        (
            "thread.thread_id",
            Box::new(|t| t["thread_id"] = json!("a\nb")),
        ),
        (
            "thread.thread_id",
            Box::new(|t| t["thread_id"] = json!("x".repeat(257))),
        ),
        (
            "thread.checkpoints[0].checkpoint.data",
            Box::new(|t| t["checkpoints"][0]["checkpoint"]["data"] = json!("not base64!")),
        ),
        (
            "thread.checkpoints[0].checkpoint.data",
            Box::new(|t| t["checkpoints"][0]["checkpoint"]["data"] = json!("QR==")),
        ),
        (
            "thread.checkpoints[0].checkpoint.type",
            Box::new(|t| t["checkpoints"][0]["checkpoint"]["type"] = json!("")),
        ),
        (
            "thread.checkpoints[0].metadata",
            Box::new(|t| t["checkpoints"][0]["metadata"] = json!([1])),
        ),
        (
            "thread.checkpoints[0].channel_versions",
            Box::new(|t| t["checkpoints"][0]["channel_versions"] = json!({"m": true})),
        ),
        (
            "thread.checkpoints[1].checkpoint_id",
            Box::new(|t| t["checkpoints"][1]["checkpoint_id"] = json!("001")),
        ),
        (
            "thread.checkpoint_blobs[0].kind",
            Box::new(|t| t["checkpoint_blobs"][0]["data"] = Value::Null),
        ),
        (
            "thread.checkpoint_blobs[0].kind",
            Box::new(|t| t["checkpoint_blobs"][0]["items"] = json!([{"type": "a", "data": ""}])),
        ),
        (
            "thread.checkpoint_blobs[1].kind",
            Box::new(|t| t["checkpoint_blobs"][1]["type"] = json!("msgpack")),
        ),
        (
            "thread.checkpoint_blobs[1].base_version",
            Box::new(|t| t["checkpoint_blobs"][1]["base_version"] = json!("0")),
        ),
        (
            "thread.checkpoint_blobs[1].base_version",
            Box::new(|t| t["checkpoint_blobs"][1]["checkpoint_ns"] = json!("tools:1")),
        ),
        (
            "thread.checkpoint_blobs[1].base_version",
            Box::new(|t| t["checkpoint_blobs"][1]["base_version"] = json!("2")),
        ),
        (
            "thread.checkpoint_blobs[1].items[0].data",
            Box::new(|t| t["checkpoint_blobs"][1]["items"][0]["data"] = json!("a")),
        ),
        (
            "thread.checkpoint_blobs[2].version",
            Box::new(|t| {
                t["checkpoint_blobs"][2]["checkpoint_ns"] = json!("");
                t["checkpoint_blobs"][2]["channel"] = json!("messages");
            }),
        ),
        (
            "thread.checkpoint_writes[0].checkpoint_id",
            Box::new(|t| t["checkpoint_writes"][0]["checkpoint_id"] = json!("009")),
        ),
        (
            "thread.checkpoint_writes[0].checkpoint_id",
            Box::new(|t| t["checkpoint_writes"][0]["checkpoint_ns"] = json!("tools:1")),
        ),
        (
            "thread.checkpoint_writes[0].data",
            Box::new(|t| t["checkpoint_writes"][0]["data"] = json!("?")),
        ),
        (
            "thread.checkpoint_writes[1].idx",
            Box::new(|t| {
                let again = t["checkpoint_writes"][0].clone();
                t["checkpoint_writes"].as_array_mut().unwrap().push(again);
            }),
        ),
    ];
    for (field, damage) in cases {
        let mut doc = with_thread();
        damage(&mut doc["thread"]);
        assert_eq!(field_of(&doc), field, "{}", doc["thread"]);
    }
    // An append blob naming itself as its base loops.
    let mut looped = with_thread();
    looped["thread"]["checkpoint_blobs"][1]["base_version"] = json!("2");
    assert!(parse(&looped).unwrap_err().to_string().contains("loops"));
}

#[test]
fn the_thread_arrays_have_limits_checked_before_parsing() {
    let limits = DocumentLimits {
        max_checkpoints: 2,
        ..DocumentLimits::default()
    };
    let bytes = serde_json::to_vec(&with_thread()).unwrap();
    let err = parse_document(&bytes, &limits).unwrap_err();
    assert_eq!(
        err,
        DocumentError::TooMany {
            field: "thread.checkpoints".into(),
            max: 2
        }
    );
    // Even when the rest is not valid: the count is taken on the raw bytes.
    let raw = br#"{"format_version": 1, "thread": {"checkpoint_writes": [1, 2, 3]}}"#;
    let err = parse_document(
        raw,
        &DocumentLimits {
            max_checkpoint_writes: 2,
            ..DocumentLimits::default()
        },
    )
    .unwrap_err();
    assert_eq!(err.field(), Some("thread.checkpoint_writes"));
}
