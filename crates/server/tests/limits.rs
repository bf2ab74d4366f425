//! Limits and hostile input over real HTTP: the per-key rate limit, SSE subscriber limits,
//! the related_type allow-list, context URL rules, content / metadata / tool-call limits.
//! Every refusal is a 4xx JSON error with `field` where a field is at fault, and writes
//! nothing.

mod common;

use common::{Options, TestServer, read, wait_for};
use serde_json::{Value, json};
use stepwise_core::apikey::{generate_api_key, hash_api_key};
use stepwise_server::ServerConfig;
use stepwise_store::Tenant;
use stepwise_store::prelude::*;

fn assert_refused(status: u16, body: &Value, expected: u16, code: &str, field: Option<&str>) {
    assert_eq!(status, expected, "{body}");
    assert_eq!(body["error"]["code"], json!(code), "{body}");
    assert!(body["error"]["message"].is_string(), "{body}");
    if let Some(field) = field {
        assert_eq!(body["error"]["field"], json!(field), "{body}");
    }
}

async fn start(config: ServerConfig) -> TestServer {
    TestServer::start_with(Options {
        server: config,
        ..Default::default()
    })
    .await
}

async fn new_session(server: &TestServer) -> String {
    let (status, body) = server.post("/v1/sessions", json!({"title": "t"})).await;
    assert_eq!(status, 201, "{body}");
    body["id"].as_str().unwrap_or_default().to_string()
}

async fn session_count(server: &TestServer) -> usize {
    let (status, body) = server.get("/v1/sessions?limit=500").await;
    assert_eq!(status, 200, "{body}");
    body["items"].as_array().map_or(0, Vec::len)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_over_its_burst_gets_429_with_retry_after_and_other_keys_do_not() {
    // A burst of 3 refilled at one token per 1000 s: the 4th request cannot have a token
    // however slowly the machine runs.
    let server = start(ServerConfig {
        rate_limit_per_sec: 0.001,
        rate_limit_burst: 3,
        ..ServerConfig::default()
    })
    .await;
    let tenant = Tenant::new("acme").expect("tenant");
    let first = generate_api_key().expect("key");
    let second = generate_api_key().expect("key");
    for (name, key) in [("first", &first), ("second", &second)] {
        server
            .store
            .create_api_key(
                &tenant,
                "u",
                stepwise_store::AccessRole::Admin,
                Some(name.to_string()),
                &hash_api_key(key),
            )
            .await
            .expect("key");
    }
    let get = |key: &str| {
        server
            .client
            .get(server.url("/v1/sessions"))
            .bearer_auth(key)
            .send()
    };
    for n in 0..3 {
        let (status, body) = read(get(&first).await.expect("request")).await;
        assert_eq!(status, 200, "request {n} of the burst: {body}");
    }
    let response = get(&first).await.expect("request");
    let retry_after = response
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let (status, body) = read(response).await;
    assert_refused(status, &body, 429, "rate_limited", None);
    let retry_after = retry_after.expect("a Retry-After header in whole seconds");
    assert!(retry_after >= 1, "{retry_after}");

    // Another key of the same tenant has its own bucket.
    let (status, body) = read(get(&second).await.expect("request")).await;
    assert_eq!(status, 200, "{body}");
    // Health, readiness and the document are not limited.
    for path in ["/healthz", "/readyz", "/openapi.json"] {
        let response = server
            .client
            .get(server.url(path))
            .send()
            .await
            .expect("get");
        assert_eq!(response.status().as_u16(), 200, "{path}");
    }
    // Still limited.
    let (status, _) = read(get(&first).await.expect("request")).await;
    assert_eq!(status, 429);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_streams_are_limited_per_session_and_per_tenant() {
    let server = start(ServerConfig {
        max_sse_per_session: 2,
        max_sse_per_tenant: 3,
        ..ServerConfig::default()
    })
    .await;
    let a = new_session(&server).await;
    let b = new_session(&server).await;
    let open = |session: &str| {
        server
            .client
            .get(server.url(&format!("/v1/sessions/{session}/events")))
            .send()
    };
    let first = open(&a).await.expect("stream");
    assert_eq!(first.status().as_u16(), 200);
    let second = open(&a).await.expect("stream");
    assert_eq!(second.status().as_u16(), 200);
    let refused = open(&a).await.expect("request");
    assert!(refused.headers().contains_key("retry-after"));
    let (status, body) = read(refused).await;
    assert_refused(status, &body, 429, "rate_limited", None);

    // The tenant's third stream is on another session; its fourth is refused.
    let third = open(&b).await.expect("stream");
    assert_eq!(third.status().as_u16(), 200);
    let (status, body) = read(open(&b).await.expect("request")).await;
    assert_refused(status, &body, 429, "rate_limited", None);

    // A closed stream gives its place back (once the server sees the connection go).
    drop(first);
    let reopened = wait_for(|| async {
        let response = open(&a).await.expect("request");
        (response.status().as_u16() == 200).then_some(response)
    })
    .await;
    drop((second, third, reopened));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn related_type_must_be_on_the_allow_list_when_one_is_configured() {
    let server = start(ServerConfig {
        related_types: Some(vec!["issue".into(), "ticket".into()]),
        ..ServerConfig::default()
    })
    .await;
    let (status, body) = server
        .post("/v1/sessions", json!({"related_type": "order"}))
        .await;
    assert_refused(status, &body, 400, "invalid_request", Some("related_type"));
    let (status, body) = server
        .post(
            "/v1/messages",
            json!({"content": "hi", "related_type": "order"}),
        )
        .await;
    assert_refused(status, &body, 400, "invalid_request", Some("related_type"));
    let (status, body) = server
        .post(
            "/v1/messages",
            json!({"content": "hi", "session": {"related_type": "order"}}),
        )
        .await;
    assert_refused(
        status,
        &body,
        400,
        "invalid_request",
        Some("session.related_type"),
    );
    assert_eq!(session_count(&server).await, 0, "nothing was written");

    let (status, body) = server
        .post(
            "/v1/sessions",
            json!({"related_type": "issue", "related_id": "42"}),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let session = body["id"].as_str().unwrap_or_default().to_string();
    let (status, body) = server
        .post(
            &format!("/v1/sessions/{session}/messages"),
            json!({"content": "hi", "related_type": "order"}),
        )
        .await;
    assert_refused(status, &body, 400, "invalid_request", Some("related_type"));
    assert!(server.messages(&session).await.is_empty());
    server.message_to(&session, "hi").await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn context_urls_are_http_only_and_stored_canonical() {
    let server = TestServer::start().await;
    for bad in [
        "javascript:alert(1)",
        "ftp://example.com/file",
        "http://",
        "http://user:secret@example.com/",
        "data:text/html,hi",
        "",
    ] {
        let (status, body) = server
            .post("/v1/sessions", json!({"initial_context_url": bad}))
            .await;
        assert_refused(
            status,
            &body,
            400,
            "invalid_request",
            Some("initial_context_url"),
        );
        let (status, body) = server
            .post("/v1/messages", json!({"content": "hi", "context_url": bad}))
            .await;
        assert_refused(status, &body, 400, "invalid_request", Some("context_url"));
    }
    let long = format!("https://example.com/{}", "a".repeat(2048));
    let (status, body) = server
        .post("/v1/sessions", json!({"initial_context_url": long}))
        .await;
    assert_refused(
        status,
        &body,
        400,
        "invalid_request",
        Some("initial_context_url"),
    );
    assert_eq!(session_count(&server).await, 0, "nothing was written");

    let (status, session) = server
        .post(
            "/v1/sessions",
            json!({"initial_context_url": "HTTP://Example.COM:80/a/../b?q=1#top"}),
        )
        .await;
    assert_eq!(status, 201, "{session}");
    assert_eq!(
        session["initial_context_url"],
        json!("http://example.com/b?q=1#top")
    );
    let id = session["id"].as_str().unwrap_or_default().to_string();
    let (_, stored) = server.get(&format!("/v1/sessions/{id}")).await;
    assert_eq!(
        stored["initial_context_url"],
        json!("http://example.com/b?q=1#top")
    );
    let accepted = server
        .post(
            &format!("/v1/sessions/{id}/messages"),
            json!({"content": "hi", "context_url": "https://Docs.Example.com:443"}),
        )
        .await;
    assert_eq!(accepted.0, 202, "{}", accepted.1);
    assert_eq!(
        accepted.1["message"]["context_url"],
        json!("https://docs.example.com/")
    );
    let messages = server.messages(&id).await;
    assert!(
        messages
            .iter()
            .any(|m| m["context_url"] == json!("https://docs.example.com/")),
        "{messages:?}"
    );

    // Import: a document's URLs follow the same rules.
    let (status, mut document) = server.get(&format!("/v1/sessions/{id}/export")).await;
    assert_eq!(status, 200, "{document}");
    document["session"]["initial_context_url"] = json!("ftp://example.com/");
    let (status, body) = server.post("/v1/sessions/import", document.clone()).await;
    assert_refused(
        status,
        &body,
        400,
        "invalid_request",
        Some("session.initial_context_url"),
    );
    document["session"]["initial_context_url"] = json!("HTTPS://EXAMPLE.com:443/x");
    let (status, imported) = server.post("/v1/sessions/import", document).await;
    assert_eq!(status, 201, "{imported}");
    assert_eq!(
        imported["initial_context_url"],
        json!("https://example.com/x")
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_content_and_deep_or_large_metadata_are_refused_and_write_nothing() {
    let server = TestServer::start().await;
    let session = new_session(&server).await;
    let path = format!("/v1/sessions/{session}/messages");
    let too_long = "x".repeat(stepwise_server::limits::MAX_CONTENT_CHARS + 1);
    // One level deeper than allowed (the metadata object itself is level 1).
    let mut deep = json!("leaf");
    for _ in 0..=stepwise_server::limits::MAX_METADATA_DEPTH {
        deep = json!({ "a": deep });
    }
    let big = json!({"blob": "x".repeat(stepwise_server::limits::MAX_METADATA_BYTES)});
    let cases = [
        (json!({"content": too_long}), "content"),
        (json!({"content": ""}), "content"),
        (json!({"content": " \n\t "}), "content"),
        (json!({"content": "hi", "metadata": deep}), "metadata"),
        (json!({"content": "hi", "metadata": big}), "metadata"),
        (json!({"content": "hi", "metadata": [1, 2]}), "metadata"),
    ];
    for (body, field) in &cases {
        let (status, answer) = server.post(&path, body.clone()).await;
        assert_refused(status, &answer, 400, "invalid_request", Some(field));
        let (status, answer) = server.post("/v1/messages", body.clone()).await;
        assert_refused(status, &answer, 400, "invalid_request", Some(field));
    }
    assert!(
        server.messages(&session).await.is_empty(),
        "no message was stored"
    );
    assert_eq!(session_count(&server).await, 1, "no session was created");
    let (_, stored) = server.get(&format!("/v1/sessions/{session}")).await;
    assert_eq!(stored["message_count"], json!(0));

    // Sessions: deep metadata on create and update.
    let mut too_deep = json!(1);
    for _ in 0..=stepwise_server::limits::MAX_METADATA_DEPTH {
        too_deep = json!([too_deep]);
    }
    let too_deep = json!({ "a": too_deep });
    let (status, body) = server
        .post("/v1/sessions", json!({"metadata": too_deep.clone()}))
        .await;
    assert_refused(status, &body, 400, "invalid_request", Some("metadata"));
    let (status, body) = server
        .send(
            server
                .client
                .patch(server.url(&format!("/v1/sessions/{session}")))
                .json(&json!({"metadata": too_deep})),
        )
        .await;
    assert_refused(status, &body, 400, "invalid_request", Some("metadata"));
    assert_eq!(session_count(&server).await, 1);
    // Within the limits is fine.
    let ok = "y".repeat(stepwise_server::limits::MAX_CONTENT_CHARS);
    let (status, body) = server
        .post(
            &path,
            json!({"content": ok, "metadata": {"k": [1, {"n": 2}]}}),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_with_too_many_tool_calls_is_refused() {
    let server = TestServer::start().await;
    let session = new_session(&server).await;
    let (status, execution) = server
        .post(
            &format!("/v1/sessions/{session}/executions"),
            json!({"agent_type": "external", "input": "task"}),
        )
        .await;
    assert_eq!(status, 201, "{execution}");
    let execution = execution["id"].as_str().unwrap_or_default().to_string();
    let calls = |n: usize| -> Vec<Value> {
        (0..n)
            .map(|i| json!({"id": format!("c{i}"), "name": "calculator", "arguments": {"expression": "1+1"}}))
            .collect()
    };
    let max = stepwise_server::limits::MAX_TOOL_CALLS_PER_STEP;
    let steps = format!("/v1/executions/{execution}/steps");
    let (status, body) = server
        .post(
            &steps,
            json!({"step_number": 1, "tool_calls": calls(max + 1)}),
        )
        .await;
    assert_refused(status, &body, 400, "invalid_request", Some("tool_calls"));
    let (status, listed) = server.get(&steps).await;
    assert_eq!(status, 200, "{listed}");
    assert_eq!(listed["items"], json!([]), "nothing was written");

    let (status, body) = server
        .post(&steps, json!({"step_number": 1, "tool_calls": calls(max)}))
        .await;
    assert_eq!(status, 201, "{body}");
    // A whole number written as a float is a step number (JSON Schema calls it an integer).
    let (status, body) = server
        .post(
            &steps,
            json!({"step_number": 2.0, "token_usage": {"input": 3.0}}),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["step_number"], json!(2));

    // Import refuses a document whose tool call has a name of the wrong type, or too many
    // tool calls in a step, and writes nothing.
    let (status, document) = server.get(&format!("/v1/sessions/{session}/export")).await;
    assert_eq!(status, 200, "{document}");
    let before = session_count(&server).await;
    let mut wrong = document.clone();
    wrong["steps"][0]["tool_calls"][0]["name"] = json!(5);
    let (status, body) = server.post("/v1/sessions/import", wrong).await;
    assert_refused(status, &body, 400, "invalid_request", None);
    let mut crowded = document.clone();
    crowded["steps"][0]["tool_calls"] = json!(calls(300));
    let (status, body) = server.post("/v1/sessions/import", crowded).await;
    assert_refused(status, &body, 400, "invalid_request", None);
    // JSON that is not a session document at all is refused too, not made an empty session.
    for not_a_document in [json!({"hello": "world"}), json!({})] {
        let (status, body) = server
            .post("/v1/sessions/import", not_a_document.clone())
            .await;
        assert_refused(
            status,
            &body,
            400,
            "invalid_request",
            Some("format_version"),
        );
    }
    assert_eq!(session_count(&server).await, before, "nothing was imported");
    let (status, body) = server.post("/v1/sessions/import", document).await;
    assert_eq!(status, 201, "{body}");
    server.stop().await;
}
