//! Append items that stand for a pending write of the parent checkpoint, over HTTP.

// The test shares the helpers of `checkpoints.rs` (puts, typed values).
use super::*;

/// An append item `{write: {task_id, idx, sha256}}` stands for the list a pending write of the
/// parent checkpoint holds: read back as `{type, data, splice: true}`. One that names no
/// stored write on its channel, other bytes, or comes without a parent, is a 409; one with a
/// bad shape a 400.
/// Neither stores the checkpoint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn append_items_refer_to_the_parents_pending_writes() {
    let server = TestServer::start().await;
    let first = checkpoint(
        "1",
        None,
        json!({"m": "1"}),
        json!([{"channel": "m", "version": "1", "type": "json", "data": b64("[a]")}]),
    );
    assert_eq!(put(&server, "r", "1", first).await.0, 201);
    let writes = json!({"task_id": "node", "writes": [
        {"idx": 0, "channel": "m", "type": "json", "data": b64("[b,c]")},
        {"idx": 1, "channel": "other", "type": "json", "data": b64("[x]")},
    ]});
    assert_eq!(put_writes(&server, "r", "1", writes).await.0, 204);
    let second = |items: Value, parent: Option<&str>| {
        checkpoint(
            "2",
            parent,
            json!({"m": "2"}),
            json!([{"channel": "m", "version": "2", "base_version": "1", "items": items}]),
        )
    };
    let refer = |task: &str, idx: i64, bytes: &str| json!([{"write": {"task_id": task, "idx": idx, "sha256": sha256(bytes)}}]);
    let bc = sha256("[b,c]");
    for (items, parent, status, what) in [
        (
            refer("nobody", 0, "[b,c]"),
            Some("1"),
            409,
            "an unknown task",
        ),
        (
            refer("node", 1, "[x]"),
            Some("1"),
            409,
            "a write on another channel",
        ),
        (refer("node", 0, "[b]"), Some("1"), 409, "other bytes"),
        (refer("node", 0, "[b,c]"), None, 409, "no parent checkpoint"),
        (refer("node", -1, "[b,c]"), Some("1"), 400, "a negative idx"),
        (
            json!([{"write": {"task_id": "node", "sha256": bc}}]),
            Some("1"),
            400,
            "no idx",
        ),
        (
            json!([{"write": {"task_id": "node", "idx": 0}}]),
            Some("1"),
            400,
            "no sha256",
        ),
        (
            json!([{"write": {"task_id": "node", "idx": 0, "sha256": bc.to_uppercase()}}]),
            Some("1"),
            400,
            "an uppercase sha256",
        ),
        (
            json!([{"write": {"task_id": "node", "idx": 0, "sha256": bc}, "type": "json"}]),
            Some("1"),
            400,
            "a write and a type",
        ),
    ] {
        let (got, body) = put(&server, "r", "2", second(items, parent)).await;
        assert_eq!(got, status, "{what}: {body}");
        assert_eq!(
            server.get("/v1/threads/r/checkpoints/2").await.0,
            404,
            "{what}: nothing stored"
        );
    }
    // A whole number written as a float is an integer too.
    let with_ref = json!([{"write": {"task_id": "node", "idx": 0.0, "sha256": bc}}, typed("d")]);
    assert_eq!(
        put(&server, "r", "2", second(with_ref, Some("1"))).await.0,
        201
    );
    let (status, tuple) = server.get("/v1/threads/r/checkpoints/2").await;
    assert_eq!(status, 200, "{tuple}");
    let blob = &tuple["blobs"][0];
    assert_eq!(items(blob), vec!["[b,c]", "d"]);
    assert_eq!(blob["items"][0]["splice"], json!(true), "{blob}");
    assert_eq!(blob["items"][0]["type"], json!("json"));
    assert!(blob["items"][1].get("splice").is_none(), "{blob}");
    server.stop().await;
}
