//! The HTTP contract: bad input is a 4xx JSON error (never a 5xx), auth, tenant isolation,
//! sessions CRUD, pagination, the OpenAPI document.

mod common;

use std::time::Duration;

use common::{TestServer, assert_error, wait_for};
use serde_json::{Value, json};
use stepwise_core::apikey::{generate_api_key, hash_api_key};
use stepwise_server::ServerConfig;
use stepwise_store::Tenant;
use stepwise_store::prelude::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_answers_a_4xx_json_error_never_a_5xx() {
    let server = TestServer::start().await;
    let (_, session) = server.post("/v1/sessions", json!({"title": "t"})).await;
    let session = session["id"].as_str().unwrap_or_default().to_string();
    let (_, execution) = server.message("hello").await;
    let client = &server.client;
    let url = |p: &str| server.url(p);

    let cases: Vec<(&str, reqwest::RequestBuilder, u16, &str)> = vec![
        (
            "malformed json",
            client
                .post(url("/v1/messages"))
                .header("content-type", "application/json")
                .body("{"),
            400,
            "invalid_request",
        ),
        (
            "missing content",
            client.post(url("/v1/messages")).json(&json!({})),
            400,
            "invalid_request",
        ),
        (
            "content of the wrong type",
            client
                .post(url("/v1/messages"))
                .json(&json!({"content": 5})),
            400,
            "invalid_request",
        ),
        (
            "empty content",
            client
                .post(url("/v1/messages"))
                .json(&json!({"content": "  "})),
            400,
            "invalid_request",
        ),
        (
            "not json",
            client
                .post(url("/v1/messages"))
                .header("content-type", "text/plain")
                .body("hello"),
            415,
            "unsupported_media_type",
        ),
        (
            "no content type",
            client.post(url("/v1/messages")).body("{\"content\":\"x\"}"),
            415,
            "unsupported_media_type",
        ),
        (
            "not an agent type",
            client
                .post(url("/v1/messages"))
                .json(&json!({"content": "x", "agent": {"type": "no such agent!"}})),
            400,
            "invalid_request",
        ),
        (
            "agent config not an object",
            client
                .post(url("/v1/messages"))
                .json(&json!({"content": "x", "agent": {"type": "demo", "config": 3}})),
            400,
            "invalid_request",
        ),
        (
            "bad session id",
            client.get(url("/v1/sessions/not-an-id")),
            400,
            "invalid_request",
        ),
        (
            "bad execution id",
            client.get(url("/v1/executions/123")),
            400,
            "invalid_request",
        ),
        (
            "unknown session",
            client.get(url("/v1/sessions/01a20000-0000-7000-8000-000000000000")),
            404,
            "not_found",
        ),
        (
            "unknown snapshot",
            client.get(url("/v1/snapshots/01a20000-0000-7000-8000-000000000000")),
            404,
            "not_found",
        ),
        (
            "limit 0",
            client.get(url("/v1/sessions?limit=0")),
            400,
            "invalid_request",
        ),
        (
            "limit 501",
            client.get(url("/v1/sessions?limit=501")),
            400,
            "invalid_request",
        ),
        (
            "limit not a number",
            client.get(url(&format!("/v1/sessions/{session}/messages?limit=x"))),
            400,
            "invalid_request",
        ),
        (
            "bad cursor",
            client.get(url("/v1/sessions?cursor=nonsense")),
            400,
            "invalid_request",
        ),
        (
            "bad cursor on steps",
            client.get(url(&format!("/v1/executions/{execution}/steps?cursor=zz"))),
            400,
            "invalid_request",
        ),
        (
            "bad status",
            client.get(url("/v1/sessions?status=sleeping")),
            400,
            "invalid_request",
        ),
        (
            "bad role",
            client.get(url(&format!("/v1/sessions/{session}/messages?roles=robot"))),
            400,
            "invalid_request",
        ),
        (
            "an empty status",
            client.get(url("/v1/sessions?status=")),
            400,
            "invalid_request",
        ),
        (
            "an empty role among others",
            client.get(url(&format!("/v1/sessions/{session}/messages?roles=user,"))),
            400,
            "invalid_request",
        ),
        (
            "bad after",
            client.get(url(&format!("/v1/sessions/{session}/messages?after=x"))),
            400,
            "invalid_request",
        ),
        (
            "patch to a status clients cannot set",
            client
                .patch(url(&format!("/v1/sessions/{session}")))
                .json(&json!({"status": "abandoned"})),
            400,
            "invalid_request",
        ),
        (
            "patch with an unknown status",
            client
                .patch(url(&format!("/v1/sessions/{session}")))
                .json(&json!({"status": "zzz"})),
            400,
            "invalid_request",
        ),
        (
            "bad session name",
            client
                .post(url("/v1/sessions"))
                .json(&json!({"name": "../../etc/passwd"})),
            400,
            "invalid_request",
        ),
        (
            "reserved session name",
            client
                .post(url("/v1/sessions"))
                .json(&json!({"name": "CON"})),
            400,
            "invalid_request",
        ),
        (
            "metadata not an object",
            client
                .post(url("/v1/sessions"))
                .json(&json!({"metadata": [1]})),
            400,
            "invalid_request",
        ),
        (
            "bad Last-Event-ID",
            client
                .get(url(&format!("/v1/sessions/{session}/events")))
                .header("Last-Event-ID", "abc"),
            400,
            "invalid_request",
        ),
        (
            "empty Last-Event-ID",
            client
                .get(url(&format!("/v1/sessions/{session}/events")))
                .header("Last-Event-ID", ""),
            400,
            "invalid_request",
        ),
        (
            "bad after on events",
            client.get(url(&format!("/v1/sessions/{session}/events?after=-3"))),
            400,
            "invalid_request",
        ),
        (
            "wrong method",
            client.put(url("/v1/messages")),
            405,
            "method_not_allowed",
        ),
        (
            "wrong method on a session",
            client.post(url(&format!("/v1/sessions/{session}"))),
            405,
            "method_not_allowed",
        ),
        (
            "unknown path",
            client.get(url("/v1/nothing-here")),
            404,
            "not_found",
        ),
        (
            "external with another agent type",
            client
                .post(url(&format!("/v1/sessions/{session}/executions")))
                .json(&json!({"agent_type": "demo"})),
            400,
            "invalid_request",
        ),
        (
            "import garbage",
            client
                .post(url("/v1/sessions/import"))
                .json(&json!({"format_version": 1})),
            400,
            "invalid_request",
        ),
        (
            "steps sent to a server-run execution",
            client
                .post(url(&format!("/v1/executions/{execution}/steps")))
                .json(&json!({"kind": "dance"})),
            422,
            "invalid_state",
        ),
    ];
    for (what, request, status, code) in cases {
        let (got, body) = common::read(request.send().await.expect("request")).await;
        assert_error(got, &body, status, code, what);
    }

    // A body over the 4 MiB limit is refused from its declared length, before it is read.
    // Sent over a raw socket: an HTTP client still writing the 5 MiB body may see the
    // connection close before it reads the answer, which would make this check flaky.
    {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let address = url("/")
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_string();
        let socket = tokio::net::TcpStream::connect(&address)
            .await
            .expect("connect");
        let head = format!(
            "POST /v1/messages HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{{\"content\":\"",
            5 * 1024 * 1024
        );
        let (mut reader, mut writer) = socket.into_split();
        // Write the whole body while reading the answer; the server may stop reading (and
        // close) once it is over the limit, so a failed write is expected, not an error.
        let sending = tokio::spawn(async move {
            let _ = writer.write_all(head.as_bytes()).await;
            let _ = writer.write_all(&vec![b'a'; 5 * 1024 * 1024]).await;
            let _ = writer.write_all(b"\"}").await;
        });
        let mut answer = Vec::new();
        let _ =
            tokio::time::timeout(Duration::from_secs(30), reader.read_to_end(&mut answer)).await;
        sending.abort();
        let answer = String::from_utf8_lossy(&answer);
        assert!(answer.starts_with("HTTP/1.1 413"), "too large: {answer}");
        assert!(answer.contains("payload_too_large"), "too large: {answer}");
    }

    let (status, body) = server
        .post(
            &format!("/v1/sessions/{session}/messages"),
            json!({"content": "x", "agent": {"type": 7}}),
        )
        .await;
    assert_error(
        status,
        &body,
        400,
        "invalid_request",
        "agent type not a string",
    );
    assert_eq!(body["error"]["field"], json!("agent.type"));
    let (status, body) = server.post("/v1/messages", json!({})).await;
    assert_eq!(body["error"]["field"], json!("content"), "{status} {body}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_crud_soft_delete_and_pagination() {
    let server = TestServer::start().await;
    let (status, created) = server.post("/v1/sessions", json!({"title": "First", "name": "first", "related_type": "ticket", "related_id": "7", "metadata": {"k": 1}})).await;
    assert_eq!(status, 201, "{created}");
    for field in [
        "id",
        "tenant_id",
        "user_id",
        "name",
        "title",
        "status",
        "related_type",
        "related_id",
        "initial_context_url",
        "metadata",
        "last_execution_id",
        "last_snapshot_id",
        "message_count",
        "created_at",
        "updated_at",
    ] {
        assert!(created.get(field).is_some(), "missing {field}");
    }
    assert_eq!(created["status"], json!("active"));
    assert_eq!(created["tenant_id"], json!("local"));
    let id = created["id"].as_str().unwrap_or_default().to_string();
    let (status, body) = server.post("/v1/sessions", json!({"name": "first"})).await;
    assert_error(status, &body, 409, "conflict", "duplicate name");

    let (status, patched) = server
        .send(
            server
                .client
                .patch(server.url(&format!("/v1/sessions/{id}")))
                .json(&json!({"title": "Renamed", "status": "completed"})),
        )
        .await;
    assert_eq!(status, 200, "{patched}");
    assert_eq!(patched["title"], json!("Renamed"));
    assert_eq!(patched["status"], json!("completed"));

    let (_, related) = server
        .get("/v1/sessions?related_type=ticket&related_id=7")
        .await;
    assert_eq!(related["items"].as_array().map(Vec::len), Some(1));

    // A name is a lookup: the one session with that name, or none; other filters still apply.
    let (status, named) = server.get("/v1/sessions?name=first").await;
    assert_eq!(status, 200, "{named}");
    assert_eq!(named["items"][0]["id"], json!(id));
    assert_eq!(named["items"].as_array().map(Vec::len), Some(1));
    assert_eq!(named["next_cursor"], Value::Null);
    let (_, other) = server.get("/v1/sessions?name=second").await;
    assert_eq!(other["items"], json!([]));
    let (_, filtered) = server.get("/v1/sessions?name=first&status=active").await;
    assert_eq!(filtered["items"], json!([]), "first is completed now");
    let (status, body) = server.get("/v1/sessions?name=a%2Fb").await;
    assert_error(status, &body, 400, "invalid_request", "a name with a slash");
    assert_eq!(body["error"]["field"], json!("name"));

    for n in 0..4 {
        let (status, _) = server
            .post("/v1/sessions", json!({"title": format!("s{n}")}))
            .await;
        assert_eq!(status, 201);
    }
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("/v1/sessions?limit=2&cursor={c}"),
            None => "/v1/sessions?limit=2".to_string(),
        };
        let (status, page) = server.get(&path).await;
        assert_eq!(status, 200);
        seen.extend(
            page["items"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .map(|s| s["id"].clone()),
        );
        match page["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_string()),
            None => break,
        }
    }
    assert_eq!(seen.len(), 5);

    let (status, _) = server
        .send(
            server
                .client
                .delete(server.url(&format!("/v1/sessions/{id}"))),
        )
        .await;
    assert_eq!(status, 204);
    let (status, deleted) = server.get(&format!("/v1/sessions/{id}")).await;
    assert_eq!(status, 200);
    assert_eq!(deleted["status"], json!("deleted"));
    let (_, listed) = server.get("/v1/sessions?limit=500").await;
    assert!(
        !listed["items"]
            .as_array()
            .is_some_and(|s| s.iter().any(|s| s["id"] == json!(id)))
    );
    let (_, listed) = server.get("/v1/sessions?status=deleted").await;
    assert_eq!(listed["items"].as_array().map(Vec::len), Some(1));

    // Messages page with cursors too.
    let (session, execution) = server.message("steps: 3").await;
    server.wait_status(&execution, &["completed"]).await;
    let all = server.messages(&session).await;
    let (_, page) = server
        .get(&format!("/v1/sessions/{session}/messages?limit=2"))
        .await;
    assert_eq!(page["items"].as_array().map(Vec::len), Some(2));
    let next = page["next_cursor"].as_str().unwrap_or_default().to_string();
    let (_, rest) = server
        .get(&format!(
            "/v1/sessions/{session}/messages?limit=500&cursor={next}"
        ))
        .await;
    assert_eq!(rest["items"].as_array().map(Vec::len), Some(all.len() - 2));
    let (_, users) = server
        .get(&format!(
            "/v1/sessions/{session}/messages?roles=user,assistant"
        ))
        .await;
    assert_eq!(users["items"].as_array().map(Vec::len), Some(2));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_separate_tenants_and_revocation_reaches_the_server() {
    let server = TestServer::start_with(common::Options {
        server: ServerConfig::default(),
        ..Default::default()
    })
    .await;
    let alice_key = generate_api_key().expect("key");
    let bob_key = generate_api_key().expect("key");
    let alice = Tenant::new("alice").expect("tenant");
    let bob = Tenant::new("bob").expect("tenant");
    server
        .store
        .create_api_key(
            &alice,
            "a",
            stepwise_store::AccessRole::Admin,
            None,
            &hash_api_key(&alice_key),
        )
        .await
        .expect("key");
    let bob_record = server
        .store
        .create_api_key(
            &bob,
            "b",
            stepwise_store::AccessRole::Admin,
            None,
            &hash_api_key(&bob_key),
        )
        .await
        .expect("key");

    // With keys, the API is closed (after the short auth cache expires).
    wait_for(|| async { (server.get("/v1/sessions").await.0 == 401).then_some(()) }).await;
    let (status, body) = server.get("/v1/sessions").await;
    assert_error(status, &body, 401, "unauthorized", "no key");
    let (status, body) = server
        .send(
            server
                .client
                .get(server.url("/v1/sessions"))
                .bearer_auth("sw_wrong"),
        )
        .await;
    assert_error(status, &body, 401, "unauthorized", "wrong key");
    assert_eq!(server.get("/healthz").await.0, 200, "health needs no key");
    assert_eq!(server.get("/openapi.json").await.0, 200);

    let mut as_alice = server;
    as_alice.token = Some(alice_key.clone());
    let (session, execution) = as_alice.message("2+2").await;
    as_alice.wait_status(&execution, &["completed"]).await;
    let (_, created) = as_alice.get(&format!("/v1/sessions/{session}")).await;
    assert_eq!(created["tenant_id"], json!("alice"));
    assert_eq!(created["user_id"], json!("a"));
    let (_, snapshots) = as_alice
        .get(&format!("/v1/executions/{execution}/snapshots"))
        .await;
    let snapshot = snapshots["items"][0]["id"]
        .as_str()
        .unwrap_or_default()
        .to_string();

    as_alice.token = Some(bob_key.clone());
    let as_bob = as_alice;
    for path in [
        format!("/v1/sessions/{session}"),
        format!("/v1/sessions/{session}/messages"),
        format!("/v1/sessions/{session}/memory"),
        format!("/v1/sessions/{session}/executions"),
        format!("/v1/sessions/{session}/events"),
        format!("/v1/sessions/{session}/export"),
        format!("/v1/executions/{execution}"),
        format!("/v1/executions/{execution}/steps"),
        format!("/v1/executions/{execution}/snapshots"),
        format!("/v1/snapshots/{snapshot}"),
    ] {
        let (status, body) = as_bob.get(&path).await;
        assert_error(status, &body, 404, "not_found", &path);
    }
    let (status, body) = as_bob
        .post(
            &format!("/v1/sessions/{session}/messages"),
            json!({"content": "hi"}),
        )
        .await;
    assert_error(
        status,
        &body,
        404,
        "not_found",
        "message to another tenant's session",
    );
    let (status, body) = as_bob
        .post(&format!("/v1/executions/{execution}/cancel"), json!({}))
        .await;
    assert_error(
        status,
        &body,
        404,
        "not_found",
        "cancel another tenant's execution",
    );
    // Every write to Alice's session or execution is a 404 for Bob and changes nothing.
    let step = json!({"step_number": 99, "kind": "action", "model_output": "x"});
    for (path, body) in [
        (
            format!("/v1/sessions/{session}/executions"),
            json!({"agent_type": "external", "input": "x"}),
        ),
        (format!("/v1/executions/{execution}/steps"), step),
        (
            format!("/v1/executions/{execution}/snapshots"),
            json!({"state": {}}),
        ),
        (
            format!("/v1/executions/{execution}/complete"),
            json!({"output": "x"}),
        ),
        (
            format!("/v1/executions/{execution}/fail"),
            json!({"error_message": "x"}),
        ),
        (
            format!("/v1/executions/{execution}/pause"),
            json!({"question": "x"}),
        ),
    ] {
        let (status, body) = as_bob.post(&path, body).await;
        assert_error(status, &body, 404, "not_found", &path);
    }
    let (status, body) = as_bob
        .send(
            as_bob
                .client
                .patch(as_bob.url(&format!("/v1/sessions/{session}")))
                .json(&json!({"title": "Bob was here", "status": "closed"})),
        )
        .await;
    assert_error(
        status,
        &body,
        404,
        "not_found",
        "PATCH another tenant's session",
    );
    let (status, body) = as_bob
        .send(
            as_bob
                .client
                .delete(as_bob.url(&format!("/v1/sessions/{session}"))),
        )
        .await;
    assert_error(
        status,
        &body,
        404,
        "not_found",
        "DELETE another tenant's session",
    );
    let (_, listed) = as_bob.get("/v1/sessions").await;
    assert_eq!(listed["items"], json!([]));
    let (_, listed) = as_bob.get("/v1/sessions?status=deleted").await;
    assert_eq!(listed["items"], json!([]));
    let untouched = as_bob
        .store
        .get_session(&alice, session.parse().expect("id"))
        .await
        .expect("read")
        .expect("Alice's session is still there");
    assert_eq!(untouched.status.as_str(), "active");
    assert_eq!(
        untouched.title,
        created["title"].as_str().map(str::to_string)
    );
    let alice_steps = as_bob
        .store
        .list_steps(&alice, execution.parse().expect("id"))
        .await
        .expect("steps");
    assert!(alice_steps.items.iter().all(|s| s.step_number != 99));

    // Revoking Bob's key reaches the running server within seconds.
    assert!(
        as_bob
            .store
            .revoke_api_key(bob_record.id)
            .await
            .expect("revoke")
    );
    wait_for(|| async { (as_bob.get("/v1/sessions").await.0 == 401).then_some(()) }).await;
    tokio::time::timeout(Duration::from_secs(1), as_bob.stop())
        .await
        .ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_readiness_metrics_and_openapi() {
    let server = TestServer::start().await;
    assert_eq!(server.get("/healthz").await.0, 200);
    assert_eq!(server.get("/readyz").await.0, 200);
    let response = server
        .client
        .get(server.url("/metrics"))
        .send()
        .await
        .expect("metrics");
    assert_eq!(response.status().as_u16(), 200);
    let text = response.text().await.unwrap_or_default();
    assert!(text.contains("stepwise_queue_depth"), "{text}");
    assert!(text.contains("stepwise_sse_subscribers"), "{text}");

    let (status, doc) = server.get("/openapi.json").await;
    assert_eq!(status, 200);
    assert!(
        doc["openapi"]
            .as_str()
            .is_some_and(|v| v.starts_with("3.1")),
        "{}",
        doc["openapi"]
    );
    let paths = doc["paths"].as_object().cloned().unwrap_or_default();
    for (path, method) in [
        ("/v1/sessions", "post"),
        ("/v1/sessions", "get"),
        ("/v1/sessions/{id}", "get"),
        ("/v1/sessions/{id}", "patch"),
        ("/v1/sessions/{id}", "delete"),
        ("/v1/sessions/{id}/messages", "get"),
        ("/v1/sessions/{id}/messages", "post"),
        ("/v1/messages", "post"),
        ("/v1/sessions/{id}/memory", "get"),
        ("/v1/sessions/{id}/executions", "get"),
        ("/v1/sessions/{id}/executions", "post"),
        ("/v1/sessions/{id}/events", "get"),
        ("/v1/sessions/{id}/export", "get"),
        ("/v1/sessions/import", "post"),
        ("/v1/executions/{id}", "get"),
        ("/v1/executions/{id}/cancel", "post"),
        ("/v1/executions/{id}/steps", "get"),
        ("/v1/executions/{id}/steps", "post"),
        ("/v1/executions/{id}/snapshots", "get"),
        ("/v1/executions/{id}/snapshots", "post"),
        ("/v1/executions/{id}/complete", "post"),
        ("/v1/executions/{id}/fail", "post"),
        ("/v1/executions/{id}/pause", "post"),
        ("/v1/snapshots/{id}", "get"),
        ("/healthz", "get"),
        ("/readyz", "get"),
    ] {
        assert!(
            paths.get(path).and_then(|p| p.get(method)).is_some(),
            "openapi lacks {method} {path}"
        );
    }
    let schemas = &doc["components"]["schemas"];
    for (schema, fields) in [
        (
            "Session",
            vec![
                "id",
                "tenant_id",
                "user_id",
                "name",
                "title",
                "status",
                "message_count",
                "created_at",
                "updated_at",
            ],
        ),
        (
            "Execution",
            vec![
                "id",
                "session_id",
                "parent_execution_id",
                "agent_type",
                "status",
                "token_usage",
                "error_message",
            ],
        ),
        (
            "Step",
            vec![
                "id",
                "execution_id",
                "step_number",
                "kind",
                "tool_calls",
                "error",
                "token_usage",
            ],
        ),
        (
            "Event",
            vec![
                "session_id",
                "message_id",
                "execution_id",
                "event_type",
                "content",
                "metadata",
                "timestamp",
            ],
        ),
    ] {
        for field in fields {
            assert!(
                !schemas[schema]["properties"][field].is_null(),
                "schema {schema} lacks {field}"
            );
        }
    }
    server.stop().await;
}
