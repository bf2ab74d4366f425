//! LangGraph checkpoints over HTTP (issue 13), against the real router on a loopback port:
//! put/get with full and append values, pending writes, list pages and filters, the thread
//! operations, tenant isolation, refused input writing nothing, the mirror and the event.

mod common;

use common::{TestServer, wait_for};
use serde_json::{Value, json};
use stepwise_core::apikey::{generate_api_key, hash_api_key};
use stepwise_store::Tenant;
use stepwise_store::prelude::*;

#[path = "checkpoints/documents.rs"]
mod documents;
#[path = "checkpoints/refs.rs"]
mod refs;

fn b64(text: &str) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let bytes = text.as_bytes();
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (i, shift) in [18, 12, 6, 0].into_iter().enumerate() {
            out.push(if i <= chunk.len() {
                char::from(A[((n >> shift) & 63) as usize])
            } else {
                '='
            });
        }
    }
    out
}

fn sha256(text: &str) -> String {
    stepwise_store::checkpoints::sha256_hex(text.as_bytes())
}

fn typed(text: &str) -> Value {
    json!({"type": "json", "data": b64(text)})
}

fn enc(text: &str) -> String {
    url::form_urlencoded::byte_serialize(text.as_bytes())
        .collect::<String>()
        .replace('+', "%20")
}

async fn put(server: &TestServer, thread: &str, id: &str, body: Value) -> (u16, Value) {
    let url = server.url(&format!(
        "/v1/threads/{}/checkpoints/{}",
        enc(thread),
        enc(id)
    ));
    server.send(server.client.put(url).json(&body)).await
}

async fn put_writes(server: &TestServer, thread: &str, id: &str, body: Value) -> (u16, Value) {
    let url = server.url(&format!(
        "/v1/threads/{}/checkpoints/{}/writes",
        enc(thread),
        enc(id)
    ));
    server.send(server.client.put(url).json(&body)).await
}

fn checkpoint(id: &str, parent: Option<&str>, versions: Value, blobs: Value) -> Value {
    json!({
        "checkpoint_ns": "",
        "parent_checkpoint_id": parent,
        "checkpoint": typed(&format!("checkpoint {id}")),
        "metadata": {"source": "loop", "step": id.parse::<i64>().unwrap_or(0), "run_id": format!("run-{}", id.parse::<i64>().unwrap_or(0) % 2)},
        "channel_versions": versions,
        "blobs": blobs,
    })
}

fn ids(page: &Value) -> Vec<String> {
    page["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| t["checkpoint_id"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// The decoded items of a list value.
fn items(blob: &Value) -> Vec<String> {
    blob["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|i| decode(i["data"].as_str().unwrap_or_default()))
        .collect()
}

fn decode(text: &str) -> String {
    let value = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        _ => 63,
    } as u32;
    let mut out = Vec::new();
    for chunk in text.as_bytes().chunks(4) {
        let pad = chunk.iter().filter(|&&c| c == b'=').count();
        let mut n = 0u32;
        for &c in chunk.iter().take(4 - pad) {
            n = (n << 6) | value(c);
        }
        n <<= 6 * pad as u32;
        out.extend_from_slice(&[(n >> 16) as u8, (n >> 8) as u8, n as u8][..3 - pad]);
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_and_get_resolve_append_chains() {
    let server = TestServer::start().await;
    let thread = "chat/42 ü";
    let (status, body) = server
        .get(&format!("/v1/threads/{}/checkpoints/latest", enc(thread)))
        .await;
    assert_eq!(status, 404, "{body}");

    let first = checkpoint(
        "1",
        None,
        json!({"messages": "v1", "count": "v1"}),
        json!([
            {"channel": "messages", "version": "v1", "type": "json", "data": b64("[m0]")},
            {"channel": "count", "version": "v1", "type": "json", "data": b64("1")}
        ]),
    );
    let (status, created) = put(&server, thread, "1", first.clone()).await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["thread_id"], json!(thread));
    assert_eq!(created["checkpoint_id"], json!("1"));
    let (status, again) = put(&server, thread, "1", first).await;
    assert_eq!(
        (status, &again),
        (200, &created),
        "the same put again writes nothing"
    );

    let (status, body) = put(
        &server,
        thread,
        "2",
        checkpoint(
            "2",
            Some("1"),
            json!({"messages": "v2", "count": "v1"}),
            json!([{"channel": "messages", "version": "v2", "base_version": "v1", "items": [typed("m1")]}]),
        ),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let (status, body) = put(
        &server,
        thread,
        "3",
        checkpoint(
            "3",
            Some("2"),
            json!({"messages": "v3", "count": "v1", "log": "l1"}),
            json!([
                {"channel": "messages", "version": "v3", "base_version": "v2", "items": [typed("m2"), typed("m3")]},
                {"channel": "log", "version": "l1", "base_version": null, "items": [typed("started")]}
            ]),
        ),
    )
    .await;
    assert_eq!(status, 201, "{body}");

    let (status, latest) = server
        .get(&format!("/v1/threads/{}/checkpoints/latest", enc(thread)))
        .await;
    assert_eq!(status, 200, "{latest}");
    assert_eq!(latest["checkpoint_id"], json!("3"));
    assert_eq!(latest["parent_checkpoint_id"], json!("2"));
    assert_eq!(latest["thread_id"], json!(thread));
    assert_eq!(
        decode(latest["checkpoint"]["data"].as_str().unwrap_or_default()),
        "checkpoint 3"
    );
    assert_eq!(latest["metadata"]["step"], json!(3));
    let blobs = latest["blobs"].as_array().cloned().unwrap_or_default();
    let by = |c: &str| {
        blobs
            .iter()
            .find(|b| b["channel"] == json!(c))
            .cloned()
            .unwrap_or(Value::Null)
    };
    assert_eq!(by("count")["type"], json!("json"));
    assert_eq!(
        decode(by("count")["data"].as_str().unwrap_or_default()),
        "1"
    );
    let messages = by("messages");
    assert_eq!(messages["type"], json!("list"));
    assert_eq!(messages["version"], json!("v3"));
    assert_eq!(
        decode(messages["base"]["data"].as_str().unwrap_or_default()),
        "[m0]"
    );
    assert_eq!(items(&messages), vec!["m1", "m2", "m3"]);
    assert_eq!(by("log")["base"], Value::Null);
    assert_eq!(items(&by("log")), vec!["started"]);

    let (status, second) = server
        .get(&format!("/v1/threads/{}/checkpoints/2", enc(thread)))
        .await;
    assert_eq!(status, 200, "{second}");
    let messages = second["blobs"]
        .as_array()
        .and_then(|b| {
            b.iter()
                .find(|b| b["channel"] == json!("messages"))
                .cloned()
        })
        .unwrap_or(Value::Null);
    assert_eq!(items(&messages), vec!["m1"]);
    assert_eq!(
        server
            .get(&format!("/v1/threads/{}/checkpoints/9", enc(thread)))
            .await
            .0,
        404
    );
    assert_eq!(
        server
            .get(&format!(
                "/v1/threads/{}/checkpoints/latest?checkpoint_ns=sub",
                enc(thread)
            ))
            .await
            .0,
        404
    );

    // A reader that holds version v1 of `messages` gets only the items after it.
    let have = enc(&json!({"messages": "v1"}).to_string());
    let (status, since) = server
        .get(&format!(
            "/v1/threads/{}/checkpoints/latest?checkpoint_ns=&have={have}",
            enc(thread)
        ))
        .await;
    assert_eq!(status, 200, "{since}");
    let messages = since["blobs"]
        .as_array()
        .and_then(|b| {
            b.iter()
                .find(|b| b["channel"] == json!("messages"))
                .cloned()
        })
        .unwrap_or(Value::Null);
    assert_eq!(messages["type"], json!("list"));
    assert_eq!(messages["since"], json!("v1"));
    assert_eq!(messages.get("base"), None);
    assert_eq!(items(&messages), vec!["m1", "m2", "m3"]);
    let (status, body) = server
        .get(&format!(
            "/v1/threads/{}/checkpoints/2?have=%5B%5D",
            enc(thread)
        ))
        .await;
    assert_eq!(
        (status, body["error"]["field"].clone()),
        (400, json!("have"))
    );

    // An append on a base that is not stored: 409, nothing written.
    let orphan = checkpoint(
        "4",
        Some("3"),
        json!({"messages": "v9"}),
        json!([{"channel": "messages", "version": "v9", "base_version": "v8", "items": [typed("x")]}]),
    );
    let (status, body) = put(&server, thread, "4", orphan).await;
    assert_eq!(
        (status, body["error"]["code"].clone()),
        (409, json!("conflict")),
        "{body}"
    );
    assert_eq!(
        server
            .get(&format!("/v1/threads/{}/checkpoints/4", enc(thread)))
            .await
            .0,
        404
    );

    // The thread is a session of the tenant.
    let (status, info) = server.get(&format!("/v1/threads/{}", enc(thread))).await;
    assert_eq!(status, 200, "{info}");
    assert_eq!(info["checkpoints"], json!(3));
    assert_eq!(info["session"]["id"], created["session_id"]);
    assert_eq!(
        info["session"]["metadata"]["langgraph_thread_id"],
        json!(thread)
    );
    assert_eq!(
        info["session"]["name"],
        Value::Null,
        "not a valid session name"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_replace_special_channels_and_keep_the_others() {
    let server = TestServer::start().await;
    assert_eq!(
        put(
            &server,
            "t",
            "1",
            checkpoint("1", None, json!({}), json!([]))
        )
        .await
        .0,
        201
    );
    let write = |task: &str, path: &str, writes: Value| json!({"task_id": task, "task_path": path, "writes": writes});
    for body in [
        write(
            "b",
            "~1",
            json!([{"idx": 0, "channel": "x", "type": "json", "data": b64("b0")}]),
        ),
        write(
            "a",
            "~2",
            json!([{"idx": 0, "channel": "x", "type": "json", "data": b64("a0")},
                                {"idx": -3, "channel": "__interrupt__", "type": "json", "data": b64("i1")}]),
        ),
        write(
            "a",
            "~2",
            json!([{"idx": 0, "channel": "x", "type": "json", "data": b64("CHANGED")},
                                {"idx": -3.0, "channel": "__interrupt__", "type": "json", "data": b64("i2")}]),
        ),
    ] {
        let (status, body) = put_writes(&server, "t", "1", body).await;
        assert_eq!(status, 204, "{body}");
    }
    let (_, tuple) = server.get("/v1/threads/t/checkpoints/1").await;
    let writes: Vec<(String, i64, String)> = tuple["pending_writes"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|w| {
            (
                w["task_id"].as_str().unwrap_or_default().to_string(),
                w["idx"].as_i64().unwrap_or(99),
                decode(w["data"].as_str().unwrap_or_default()),
            )
        })
        .collect();
    assert_eq!(
        writes,
        vec![
            ("b".into(), 0, "b0".into()),
            ("a".into(), -3, "i2".into()),
            ("a".into(), 0, "a0".into()),
        ]
    );
    assert_eq!(tuple["pending_writes"][0]["task_path"], json!("~1"));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_pages_filters_and_spans_threads() {
    let server = TestServer::start().await;
    for i in 1..=9 {
        let id = format!("{i}");
        let mut body = checkpoint(&id, None, json!({}), json!([]));
        if i == 5 {
            body["checkpoint_ns"] = json!("child:1");
        }
        assert_eq!(put(&server, "t", &id, body).await.0, 201);
    }
    assert_eq!(
        put(
            &server,
            "other",
            "55",
            checkpoint("55", None, json!({}), json!([]))
        )
        .await
        .0,
        201
    );

    let (status, all) = server.get("/v1/threads/t/checkpoints").await;
    assert_eq!(status, 200, "{all}");
    assert_eq!(ids(&all), vec!["9", "8", "7", "6", "5", "4", "3", "2", "1"]);
    assert_eq!(all["next_cursor"], Value::Null);
    let (_, root) = server.get("/v1/threads/t/checkpoints?checkpoint_ns=").await;
    assert_eq!(ids(&root), vec!["9", "8", "7", "6", "4", "3", "2", "1"]);
    let (_, before) = server
        .get("/v1/threads/t/checkpoints?before=7&limit=2")
        .await;
    assert_eq!(ids(&before), vec!["6", "5"]);
    let filter = enc(&json!({"run_id": "run-1", "source": "loop"}).to_string());
    let (_, filtered) = server
        .get(&format!("/v1/threads/t/checkpoints?filter={filter}"))
        .await;
    assert_eq!(ids(&filtered), vec!["9", "7", "5", "3", "1"]);

    // Cursor pages cover the list once.
    let mut seen = Vec::new();
    let mut path = "/v1/threads/t/checkpoints?limit=4".to_string();
    loop {
        let (status, page) = server.get(&path).await;
        assert_eq!(status, 200, "{page}");
        seen.extend(ids(&page));
        match page["next_cursor"].as_str() {
            Some(cursor) => path = format!("/v1/threads/t/checkpoints?limit=4&cursor={cursor}"),
            None => break,
        }
    }
    assert_eq!(seen, ids(&all));

    // Every thread of the tenant, newest first.
    let (_, across) = server.get("/v1/checkpoints?limit=3").await;
    assert_eq!(ids(&across), vec!["9", "8", "7"]);
    let (_, across) = server.get("/v1/checkpoints?before=6").await;
    assert_eq!(ids(&across), vec!["55", "5", "4", "3", "2", "1"]);
    assert_eq!(across["items"][0]["thread_id"], json!("other"));
    let (_, unknown) = server.get("/v1/threads/nope/checkpoints").await;
    assert_eq!(ids(&unknown), Vec::<String>::new());

    for bad in [
        "limit=0",
        "limit=1001",
        "limit=x",
        "filter=%5B1%5D",
        "filter=nope",
        "cursor=zz",
    ] {
        let (status, body) = server
            .get(&format!("/v1/threads/t/checkpoints?{bad}"))
            .await;
        assert_eq!(status, 400, "{bad}: {body}");
        assert_eq!(body["error"]["code"], json!("invalid_request"), "{bad}");
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thread_operations() {
    let server = TestServer::start().await;
    for i in 1..=4 {
        let id = format!("{i}");
        let body = checkpoint(
            &id,
            None,
            json!({"m": format!("v{i}")}),
            json!([{"channel": "m", "version": format!("v{i}"),
                    "base_version": if i == 1 { Value::Null } else { json!(format!("v{}", i - 1)) },
                    "items": [typed(&id)]}]),
        );
        assert_eq!(put(&server, "src", &id, body).await.0, 201);
        let writes = json!({"task_id": "task", "writes": [{"idx": 0, "channel": "c", "type": "json", "data": b64("w")}]});
        assert_eq!(put_writes(&server, "src", &id, writes).await.0, 204);
    }

    // copy
    let (status, copied) = server
        .post("/v1/threads/src/copy", json!({"target_thread_id": "dst"}))
        .await;
    assert_eq!(status, 201, "{copied}");
    assert_eq!(copied["thread_id"], json!("dst"));
    assert_eq!(copied["checkpoints"], json!(4));
    let (_, src) = server.get("/v1/threads/src/checkpoints").await;
    let (_, dst) = server.get("/v1/threads/dst/checkpoints").await;
    assert_eq!(ids(&src), ids(&dst));
    assert_eq!(src["items"][0]["blobs"], dst["items"][0]["blobs"]);
    assert_eq!(
        src["items"][0]["pending_writes"],
        dst["items"][0]["pending_writes"]
    );
    let (status, body) = server
        .post("/v1/threads/src/copy", json!({"target_thread_id": "dst"}))
        .await;
    assert_eq!(
        (status, body["error"]["code"].clone()),
        (409, json!("conflict"))
    );
    let (status, _) = server
        .post("/v1/threads/nope/copy", json!({"target_thread_id": "x"}))
        .await;
    assert_eq!(status, 404);

    // delete-for-runs: run-1 is checkpoints 1 and 3
    let (status, body) = server
        .post(
            "/v1/checkpoints/delete-for-runs",
            json!({"run_ids": ["run-1"]}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["deleted"], json!(4), "two in each thread");
    let (_, src) = server.get("/v1/threads/src/checkpoints").await;
    assert_eq!(ids(&src), vec!["4", "2"]);
    assert_eq!(
        items(&src["items"][0]["blobs"][0]),
        vec!["1", "2", "3", "4"]
    );

    // prune keep_latest, then delete
    let (status, body) = server
        .post(
            "/v1/checkpoints/prune",
            json!({"thread_ids": ["src"], "strategy": "keep_latest"}),
        )
        .await;
    assert_eq!((status, body["deleted"].clone()), (200, json!(1)));
    let (_, src) = server.get("/v1/threads/src/checkpoints").await;
    assert_eq!(ids(&src), vec!["4"]);
    assert_eq!(
        items(&src["items"][0]["blobs"][0]),
        vec!["1", "2", "3", "4"],
        "the kept checkpoint keeps its chain"
    );
    assert_eq!(
        src["items"][0]["pending_writes"].as_array().map(Vec::len),
        Some(1)
    );
    let (status, body) = server
        .post(
            "/v1/checkpoints/prune",
            json!({"thread_ids": ["src", "dst"], "strategy": "delete"}),
        )
        .await;
    assert_eq!((status, body["deleted"].clone()), (200, json!(3)));
    let (_, info) = server.get("/v1/threads/src").await;
    assert_eq!(info["checkpoints"], json!(0));

    // delete_thread: for real, with its session
    let session = info["session"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let (status, _) = server
        .send(server.client.delete(server.url("/v1/threads/src")))
        .await;
    assert_eq!(status, 204);
    assert_eq!(server.get("/v1/threads/src").await.0, 404);
    assert_eq!(
        server.get(&format!("/v1/sessions/{session}")).await.0,
        404,
        "the session is gone too"
    );
    let (status, _) = server
        .send(server.client.delete(server.url("/v1/threads/src")))
        .await;
    assert_eq!(status, 404);

    // Deleting the thread's session (soft) deletes the thread.
    let (_, info) = server.get("/v1/threads/dst").await;
    let session = info["session"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let (status, _) = server
        .send(
            server
                .client
                .delete(server.url(&format!("/v1/sessions/{session}"))),
        )
        .await;
    assert_eq!(status, 204);
    assert_eq!(server.get("/v1/threads/dst").await.0, 404);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenants_never_see_each_others_threads() {
    let mut server = TestServer::start().await;
    let (alice_key, bob_key) = (
        generate_api_key().expect("key"),
        generate_api_key().expect("key"),
    );
    for (tenant, key) in [("alice", &alice_key), ("bob", &bob_key)] {
        server
            .store
            .create_api_key(
                &Tenant::new(tenant).expect("tenant"),
                tenant,
                stepwise_store::AccessRole::Admin,
                None,
                &hash_api_key(key),
            )
            .await
            .expect("key");
    }
    wait_for(|| async { (server.get("/v1/checkpoints").await.0 == 401).then_some(()) }).await;
    let body = |who: &str| {
        checkpoint(
            "1",
            None,
            json!({"m": "v1"}),
            json!([{"channel": "m", "version": "v1", "type": "json", "data": b64(who)}]),
        )
    };
    server.token = Some(alice_key.clone());
    let (status, alice) = put(&server, "shared", "1", body("alice")).await;
    assert_eq!(status, 201, "{alice}");
    server.token = Some(bob_key.clone());
    let (status, bob) = put(&server, "shared", "1", body("bob")).await;
    assert_eq!(status, 201, "bob's first put creates bob's thread: {bob}");
    assert_ne!(alice["session_id"], bob["session_id"]);
    let (_, tuple) = server.get("/v1/threads/shared/checkpoints/latest").await;
    assert_eq!(
        decode(tuple["blobs"][0]["data"].as_str().unwrap_or_default()),
        "bob"
    );
    let (_, all) = server.get("/v1/checkpoints").await;
    assert_eq!(all["items"].as_array().map(Vec::len), Some(1));
    let alice_session = alice["session_id"].as_str().unwrap_or_default();
    assert_eq!(
        server.get(&format!("/v1/sessions/{alice_session}")).await.0,
        404
    );
    let (status, _) = server
        .send(server.client.delete(server.url("/v1/threads/shared")))
        .await;
    assert_eq!(status, 204, "bob deletes his own thread");
    server.token = Some(alice_key);
    let (status, tuple) = server.get("/v1/threads/shared/checkpoints/latest").await;
    assert_eq!(status, 200, "alice's thread is untouched");
    assert_eq!(
        decode(tuple["blobs"][0]["data"].as_str().unwrap_or_default()),
        "alice"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_and_writes_nothing() {
    let server = TestServer::start().await;
    let good = checkpoint(
        "1",
        None,
        json!({"m": "v1"}),
        json!([{"channel": "m", "version": "v1", "type": "json", "data": b64("x")}]),
    );
    let mut cases: Vec<(Value, &str)> = Vec::new();
    let mut with = |key: &str, value: Value, field: &'static str| {
        let mut body = good.clone();
        body[key] = value;
        cases.push((body, field));
    };
    with("checkpoint", json!({"type": "json"}), "checkpoint.data");
    with(
        "checkpoint",
        json!({"type": "json", "data": "not base64!"}),
        "checkpoint.data",
    );
    with(
        "checkpoint",
        json!({"type": "", "data": ""}),
        "checkpoint.type",
    );
    with("metadata", json!([1]), "metadata");
    with("channel_versions", json!({"m": 1}), "channel_versions");
    with("checkpoint_ns", json!("a\u{1}b"), "checkpoint_ns");
    with(
        "blobs",
        json!([{"channel": "m", "version": "v1", "type": "json", "data": "QQ==", "items": []}]),
        "blobs[0]",
    );
    with(
        "blobs",
        json!([{"channel": "m", "version": "v1", "items": [{"type": "json", "data": "@@@@"}]}]),
        "blobs[0].items[0].data",
    );
    with(
        "blobs",
        json!([{"channel": "", "version": "v1", "type": "json", "data": ""}]),
        "blobs[0].channel",
    );
    with(
        "blobs",
        Value::Array(vec![
            json!({"channel": "m", "version": "v", "type": "j", "data": ""});
            1001
        ]),
        "blobs",
    );
    with(
        "mirror",
        json!([{"role": "robot", "content": "x"}]),
        "mirror[0].role",
    );
    for (body, field) in cases {
        let (status, answer) = put(&server, "t", "1", body).await;
        assert_eq!(status, 400, "{answer}");
        assert_eq!(answer["error"]["field"], json!(field), "{answer}");
    }
    let long: String = "x".repeat(257);
    assert_eq!(put(&server, &long, "1", good.clone()).await.0, 400);
    assert_eq!(put(&server, "a\u{7}b", "1", good.clone()).await.0, 400);
    let writes = json!({"task_id": "t", "writes": [{"idx": 0.5, "channel": "c", "type": "json", "data": ""}]});
    let (status, answer) = put_writes(&server, "t", "1", writes).await;
    assert_eq!(
        (status, answer["error"]["field"].clone()),
        (400, json!("writes[0].idx"))
    );
    let (status, _) = server
        .post(
            "/v1/checkpoints/prune",
            json!({"thread_ids": ["t"], "strategy": "all"}),
        )
        .await;
    assert_eq!(status, 400);
    let (status, _) = server
        .post(
            "/v1/checkpoints/delete-for-runs",
            json!({"run_ids": "run-1"}),
        )
        .await;
    assert_eq!(status, 400);
    // Nothing was written: no thread, no session.
    assert_eq!(server.get("/v1/threads/t").await.0, 404);
    let (_, sessions) = server.get("/v1/sessions").await;
    assert_eq!(sessions["items"], json!([]));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_checkpoints_are_events_and_mirror_the_conversation() {
    let server = TestServer::start().await;
    let mut body = checkpoint("1", None, json!({}), json!([]));
    body["mirror"] = json!([
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "weather in Paris?"},
        {"role": "assistant", "content": "Let me look.", "tool_calls": [{"id": "c1", "name": "weather", "arguments": {"city": "Paris"}}],
         "usage": {"input": 10, "output": 5}},
        {"role": "tool", "content": "sunny", "tool_call_id": "c1"},
        {"role": "assistant", "content": "It is sunny."}
    ]);
    let (status, created) = put(&server, "conv", "1", body.clone()).await;
    assert_eq!(status, 201, "{created}");
    let session = created["session_id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    // The same put again mirrors nothing more.
    assert_eq!(put(&server, "conv", "1", body).await.0, 200);

    let mut events = server.events(&session, Some(0)).await;
    let seen = events.until("checkpoint.created").await;
    let event = seen.last().cloned().unwrap_or_else(|| panic!("no event"));
    assert_eq!(
        event.data["metadata"],
        json!({"thread_id": "conv", "checkpoint_ns": "", "checkpoint_id": "1", "step": 1})
    );
    let types: Vec<&str> = seen.iter().map(|e| e.event.as_str()).collect();
    assert!(
        types.contains(&"message.created") && types.contains(&"step.completed"),
        "{types:?}"
    );

    let messages = server.messages(&session).await;
    let texts: Vec<(String, String)> = messages
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap_or_default().into(),
                m["content"].as_str().unwrap_or_default().into(),
            )
        })
        .collect();
    assert_eq!(
        texts,
        vec![
            ("user".into(), "weather in Paris?".into()),
            ("assistant".into(), "It is sunny.".into())
        ]
    );
    let (status, memory) = server.get(&format!("/v1/sessions/{session}/memory")).await;
    assert_eq!(status, 200, "{memory}");
    let steps = memory["steps"].as_array().cloned().unwrap_or_default();
    assert_eq!(steps.len(), 1, "{memory}");
    assert_eq!(steps[0]["model_output"], json!("Let me look."));
    assert_eq!(steps[0]["tool_calls"][0]["name"], json!("weather"));
    assert_eq!(steps[0]["observations"], json!("weather: sunny"));
    assert_eq!(steps[0]["token_usage"]["input"], json!(10));

    // A tool result of a call mirrored earlier is a step of its own.
    let mut next = checkpoint("2", Some("1"), json!({}), json!([]));
    next["mirror"] = json!([{"role": "tool", "content": "22C", "tool_call_id": "c9"}]);
    assert_eq!(put(&server, "conv", "2", next).await.0, 201);
    wait_for(|| async {
        let (_, memory) = server.get(&format!("/v1/sessions/{session}/memory")).await;
        (memory["steps"].as_array().map(Vec::len) == Some(2)).then_some(())
    })
    .await;
    server.stop().await;
}

/// Figures for issue 13 (no thresholds: it prints them):
/// `cargo test --release -p stepwise-server --test checkpoints -- --ignored --nocapture`.
/// A 1,000-step thread whose `messages` list grows by one ~400-byte message per step (stored
/// as appends): GET latest, whole and with `have`; a thread of 20,000 checkpoints: list 20.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "figures; run explicitly with --release"]
async fn checkpoint_figures() {
    use stepwise_store::{BlobBody, NewBlob, NewCheckpoint, TypedValue};
    let server = TestServer::start().await;
    let tenant = Tenant::new(stepwise_server::LOCAL_TENANT).expect("tenant");
    let message = "x".repeat(400);
    let new =
        |thread: &str, i: u32, blobs: Vec<NewBlob>, versions: &[(&str, String)]| NewCheckpoint {
            thread_id: thread.into(),
            user_id: "bench".into(),
            checkpoint_ns: String::new(),
            checkpoint_id: format!("{i:08}"),
            parent_checkpoint_id: (i > 1).then(|| format!("{:08}", i - 1)),
            checkpoint: TypedValue::new("msgpack", vec![7u8; 300]),
            metadata: json!({"source": "loop", "step": i, "run_id": "run"}),
            channel_versions: versions
                .iter()
                .map(|(c, v)| (c.to_string(), json!(v)))
                .collect(),
            blobs,
            announce: true,
        };
    for i in 1..=1000u32 {
        let version = format!("{i:08}");
        let blobs = vec![
            NewBlob {
                channel: "messages".into(),
                version: version.clone(),
                body: BlobBody::Append {
                    base_version: (i > 1).then(|| format!("{:08}", i - 1)),
                    items: vec![TypedValue::new("msgpack", message.as_bytes().to_vec())],
                },
            },
            NewBlob {
                channel: "count".into(),
                version: version.clone(),
                body: BlobBody::Full(TypedValue::new("msgpack", i.to_le_bytes().to_vec())),
            },
        ];
        let versions = [("messages", version.clone()), ("count", version)];
        server
            .store
            .put_checkpoint(&tenant, new("long", i, blobs, &versions))
            .await
            .expect("put");
    }
    for i in 1..=20_000u32 {
        server
            .store
            .put_checkpoint(&tenant, new("many", i, Vec::new(), &[]))
            .await
            .expect("put");
    }
    async fn timed(server: &TestServer, path: &str, n: usize) -> (f64, f64, usize) {
        let mut ms = Vec::with_capacity(n);
        let mut bytes = 0;
        for _ in 0..n {
            let started = std::time::Instant::now();
            let response = server
                .client
                .get(server.url(path))
                .send()
                .await
                .expect("get");
            assert_eq!(response.status().as_u16(), 200);
            bytes = response.bytes().await.expect("body").len();
            ms.push(started.elapsed().as_secs_f64() * 1000.0);
        }
        ms.sort_by(f64::total_cmp);
        (ms[n / 2], ms[n * 95 / 100], bytes)
    }
    let have = enc(&json!({"messages": "00000999"}).to_string());
    for (what, path) in [
        (
            "get latest, 1,000-step thread (whole list)",
            "/v1/threads/long/checkpoints/latest?checkpoint_ns=".to_string(),
        ),
        (
            "get latest, 1,000-step thread (have the previous step)",
            format!("/v1/threads/long/checkpoints/latest?checkpoint_ns=&have={have}"),
        ),
        (
            "list limit=20, 20,000 checkpoints, ns=\"\"",
            "/v1/threads/many/checkpoints?checkpoint_ns=&limit=20".to_string(),
        ),
        (
            "list limit=20, 20,000 checkpoints, every ns",
            "/v1/threads/many/checkpoints?limit=20".to_string(),
        ),
        (
            "list limit=20 before the middle",
            "/v1/threads/many/checkpoints?checkpoint_ns=&limit=20&before=00010000".to_string(),
        ),
    ] {
        let (p50, p95, bytes) = timed(&server, &path, 200).await;
        println!("{what}: p50 {p50:.2} ms, p95 {p95:.2} ms, {bytes} bytes");
    }
    server.stop().await;
}
