//! A thread in a session's export document over HTTP, and back by an import.

// The test shares the helpers of `checkpoints.rs` (puts, typed values).
use super::*;

/// A thread's session exports with its checkpoints (`thread` in the document); importing
/// the document while the thread exists is a 409 that writes nothing; after the thread is
/// deleted the import brings it back, and its checkpoints read back as they were.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_threads_export_carries_its_checkpoints_and_imports_back() {
    let server = TestServer::start().await;
    for i in 1..=3 {
        let id = format!("{i}");
        let body = checkpoint(
            &id,
            (i > 1).then(|| format!("{}", i - 1)).as_deref(),
            json!({"messages": format!("v{i}"), "count": "c1"}),
            if i == 1 {
                json!([{"channel": "messages", "version": "v1", "type": "json", "data": b64("[m0]")},
                       {"channel": "count", "version": "c1", "type": "json", "data": b64("1")}])
            } else {
                json!([{"channel": "messages", "version": format!("v{i}"), "base_version": format!("v{}", i - 1),
                        "items": [typed(&format!("m{i}"))]}])
            },
        );
        assert_eq!(put(&server, "exported thread", &id, body).await.0, 201);
    }
    let mut sub = checkpoint(
        "2a",
        None,
        json!({"log": "l1"}),
        json!([{"channel": "log", "version": "l1", "base_version": null, "items": [typed("started")]}]),
    );
    sub["checkpoint_ns"] = json!("tools:1");
    assert_eq!(put(&server, "exported thread", "2a", sub).await.0, 201);
    let writes = json!({"task_id": "task", "task_path": "p", "writes": [
        {"idx": 0, "channel": "messages", "type": "json", "data": b64("w0")},
        {"idx": -1, "channel": "__error__", "type": "json", "data": b64("boom")}]});
    assert_eq!(
        put_writes(&server, "exported thread", "3", writes).await.0,
        204
    );

    let thread = "/v1/threads/exported%20thread";
    let (_, info) = server.get(thread).await;
    let session = info["session"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let read_back = || async {
        let (status, root) = server
            .get(&format!("{thread}/checkpoints/latest?checkpoint_ns="))
            .await;
        assert_eq!(status, 200, "{root}");
        let (_, sub) = server
            .get(&format!(
                "{thread}/checkpoints/latest?checkpoint_ns=tools%3A1"
            ))
            .await;
        let (_, all) = server.get(&format!("{thread}/checkpoints")).await;
        (root, sub, all)
    };
    let before = read_back().await;
    assert_eq!(items(&before.0["blobs"][1]), vec!["m2", "m3"]);

    let (status, document) = server.get(&format!("/v1/sessions/{session}/export")).await;
    assert_eq!(status, 200, "{document}");
    let exported = &document["thread"];
    assert_eq!(exported["thread_id"], json!("exported thread"));
    assert_eq!(exported["checkpoints"].as_array().map(Vec::len), Some(4));
    assert_eq!(
        exported["checkpoint_blobs"].as_array().map(Vec::len),
        Some(5)
    );
    assert_eq!(
        exported["checkpoint_writes"].as_array().map(Vec::len),
        Some(2)
    );
    assert_eq!(
        exported["checkpoint_blobs"][2],
        json!({"checkpoint_ns": "", "channel": "messages", "version": "v2", "kind": "append",
               "base_version": "v1", "items": [typed("m2")]})
    );

    // The thread (and its session's name) exist: 409, and nothing is written.
    let (_, sessions_before) = server.get("/v1/sessions?limit=100").await;
    let (status, body) = server.post("/v1/sessions/import", document.clone()).await;
    assert_eq!(
        (status, body["error"]["code"].clone()),
        (409, json!("conflict")),
        "{body}"
    );
    let (_, sessions_after) = server.get("/v1/sessions?limit=100").await;
    assert_eq!(sessions_before["items"], sessions_after["items"]);

    // A blob chain that leaves the document is a 400 naming the field.
    let mut broken = document.clone();
    broken["thread"]["checkpoint_blobs"][2]["base_version"] = json!("v0");
    let (status, body) = server.post("/v1/sessions/import", broken).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(
        body["error"]["field"],
        json!("thread.checkpoint_blobs[2].base_version")
    );

    let (status, _) = server.send(server.client.delete(server.url(thread))).await;
    assert_eq!(status, 204);
    assert_eq!(server.get(thread).await.0, 404);
    let (status, imported) = server.post("/v1/sessions/import", document).await;
    assert_eq!(status, 201, "{imported}");
    let (_, info) = server.get(thread).await;
    assert_eq!(info["session"]["id"], imported["id"]);
    assert_eq!(info["checkpoints"], json!(4));
    let after = read_back().await;
    assert_eq!(
        after, before,
        "the imported thread reads back like the original"
    );
    server.stop().await;
}
