//! Conversation items (`/v1/sessions/{id}/items`): the store of the OpenAI Agents SDK's
//! sessions. Exact round trips, latest-N reads, pop and clear as steps of their own (the
//! history stays inspectable), retries that write once, conflicts, tenants, the mirrored
//! messages and events, and input that is refused without writing anything.

mod common;

use common::{TestServer, wait_for};
use serde_json::{Value, json};
use stepwise_core::apikey::{generate_api_key, hash_api_key};
use stepwise_store::Tenant;
use stepwise_store::prelude::*;

async fn new_session(server: &TestServer) -> String {
    let (status, body) = server.post("/v1/sessions", json!({"title": "chat"})).await;
    assert_eq!(status, 201, "{body}");
    body["id"].as_str().unwrap_or_default().to_string()
}

fn items_path(session: &str) -> String {
    format!("/v1/sessions/{session}/items")
}

async fn add(server: &TestServer, session: &str, body: Value) -> (u16, Value) {
    server.post(&items_path(session), body).await
}

async fn items(server: &TestServer, session: &str, query: &str) -> (Vec<Value>, u64) {
    let (status, body) = server.get(&format!("{}{query}", items_path(session))).await;
    assert_eq!(status, 200, "{body}");
    (
        body["items"].as_array().cloned().unwrap_or_default(),
        body["version"].as_u64().unwrap_or(u64::MAX),
    )
}

async fn clear(server: &TestServer, session: &str, query: &str) -> (u16, Value) {
    server
        .send(
            server
                .client
                .delete(server.url(&format!("{}{query}", items_path(session)))),
        )
        .await
}

/// The conversation's steps (all its executions), oldest first.
async fn steps(server: &TestServer, session: &str) -> Vec<Value> {
    let (_, executions) = server
        .get(&format!("/v1/sessions/{session}/executions"))
        .await;
    let mut all = Vec::new();
    for execution in executions["items"].as_array().cloned().unwrap_or_default() {
        if execution["metadata"]["conversation"] != json!("items") {
            continue;
        }
        let id = execution["id"].as_str().unwrap_or_default();
        let (_, steps) = server
            .get(&format!("/v1/executions/{id}/steps?limit=500"))
            .await;
        all.extend(steps["items"].as_array().cloned().unwrap_or_default());
    }
    all
}

/// A turn of the OpenAI Agents SDK, as the Responses API's input items.
fn turn() -> Vec<Value> {
    vec![
        json!({"role": "user", "content": "What is 2+3? Use the tool."}),
        json!({"id": "rs_1", "type": "reasoning", "summary": [{"type": "summary_text", "text": "use add"}],
               "encrypted_content": null}),
        json!({"id": "fc_1", "type": "function_call", "call_id": "call_1", "name": "add",
               "arguments": "{\"a\": 2, \"b\": 3}", "status": "completed"}),
        json!({"type": "function_call_output", "call_id": "call_1", "output": "5"}),
        json!({"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
               "content": [{"type": "output_text", "text": "2+3 = 5", "annotations": [],
                            "logprobs": []}],
               "extra": {"nested": [1, 2.5, -3, true, null, "ü \u{1F600}"], "big": 9007199254740991_u64}}),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn items_come_back_exactly_and_the_latest_n_oldest_first() {
    let server = TestServer::start().await;
    let session = new_session(&server).await;
    assert_eq!(items(&server, &session, "").await, (vec![], 0));

    let first = turn();
    let (status, body) = add(
        &server,
        &session,
        json!({"items": first[..3], "version": 0}),
    )
    .await;
    assert_eq!((status, &body), (201, &json!({"added": 3, "version": 1})));
    let (status, body) = add(&server, &session, json!({"items": first[3..]})).await;
    assert_eq!((status, &body), (201, &json!({"added": 2, "version": 2})));

    assert_eq!(items(&server, &session, "").await, (first.clone(), 2));
    assert_eq!(
        items(&server, &session, "?limit=2").await,
        (first[3..].to_vec(), 2)
    );
    assert_eq!(
        items(&server, &session, "?limit=4").await,
        (first[1..].to_vec(), 2),
        "a limit inside a batch cuts the batch"
    );
    assert_eq!(items(&server, &session, "?limit=0").await, (vec![], 2));
    assert_eq!(
        items(&server, &session, "?limit=1000").await,
        (first.clone(), 2)
    );

    // An empty add writes nothing.
    let (status, body) = add(&server, &session, json!({"items": []})).await;
    assert_eq!((status, &body), (200, &json!({"added": 0, "version": 2})));
    assert_eq!(steps(&server, &session).await.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steps_written_elsewhere_are_folded_and_never_hide_valid_items() {
    let server = TestServer::start().await;
    let session = new_session(&server).await;
    let all = turn();
    add(&server, &session, json!({"items": all[..2]})).await;
    assert_eq!(items(&server, &session, "").await.1, 1);
    let (_, executions) = server
        .get(&format!("/v1/sessions/{session}/executions"))
        .await;
    let execution = executions["items"][0]["id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let steps_path = format!("/v1/executions/{execution}/steps");
    // Steps another process (or an external agent) appended: an add, a step that is not an
    // items operation, a pop that names an item that is not the last one (its add was lost),
    // and an add with something that is not an object in it.
    for output in [
        json!({"items_op": "add", "items": [all[2]]}),
        json!({"note": "not an items operation"}),
        json!({"items_op": "pop", "item": {"role": "user", "content": "lost"}}),
        json!({"items_op": "add", "items": [all[3], 7, "x", all[4]]}),
    ] {
        let (status, body) = server.post(&steps_path, json!({"output": output})).await;
        assert_eq!(status, 201, "{body}");
    }
    assert_eq!(items(&server, &session, "").await, (all.clone(), 5));
    // A pop that names the last item removes it.
    let (status, _) = server
        .post(
            &steps_path,
            json!({"output": {"items_op": "pop", "item": all[4]}}),
        )
        .await;
    assert_eq!(status, 201);
    assert_eq!(items(&server, &session, "").await, (all[..4].to_vec(), 6));
    // Writes go on after them.
    let (status, body) = add(&server, &session, json!({"items": all[4..], "version": 6})).await;
    assert_eq!((status, body["version"].clone()), (201, json!(7)));
    assert_eq!(items(&server, &session, "").await, (all.clone(), 7));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pop_and_clear_are_steps_of_their_own_and_the_history_stays() {
    let server = TestServer::start().await;
    let session = new_session(&server).await;
    let all = turn();
    add(&server, &session, json!({"items": all[..3]})).await;
    add(&server, &session, json!({"items": all[3..4]})).await;

    // Pops remove the latest item whatever batch it came in.
    let (status, body) = server
        .post(&format!("{}/pop", items_path(&session)), json!({}))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body, json!({"item": all[3], "version": 3}));
    let (_, body) = server
        .post(
            &format!("{}/pop", items_path(&session)),
            json!({"version": 3}),
        )
        .await;
    assert_eq!(body, json!({"item": all[2], "version": 4}));
    assert_eq!(items(&server, &session, "").await, (all[..2].to_vec(), 4));

    let (status, body) = clear(&server, &session, "?version=4").await;
    assert_eq!((status, &body), (200, &json!({"cleared": 2, "version": 5})));
    assert_eq!(items(&server, &session, "").await, (vec![], 5));

    // Nothing to pop or clear: nothing is written.
    let (_, body) = server
        .post(&format!("{}/pop", items_path(&session)), json!({}))
        .await;
    assert_eq!(body, json!({"item": null, "version": 5}));
    let (_, body) = clear(&server, &session, "").await;
    assert_eq!(body, json!({"cleared": 0, "version": 5}));

    // After a clear, adds start a new list.
    add(&server, &session, json!({"items": all[4..]})).await;
    assert_eq!(items(&server, &session, "").await, (all[4..].to_vec(), 6));

    // Every operation is still there, in order, saying what it did.
    let steps = steps(&server, &session).await;
    let ops: Vec<&str> = steps
        .iter()
        .map(|s| s["output"]["items_op"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(ops, ["add", "add", "pop", "pop", "clear", "add"]);
    assert_eq!(steps[0]["output"]["items"], json!(all[..3]));
    assert_eq!(steps[2]["output"]["item"], all[3]);
    assert_eq!(steps[4]["output"]["count"], json!(2));
    let numbers: Vec<u64> = steps
        .iter()
        .map(|s| s["step_number"].as_u64().unwrap_or_default())
        .collect();
    assert_eq!(numbers, [1, 2, 3, 4, 5, 6]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_write_is_written_once_and_answers_the_same() {
    let server = TestServer::start().await;
    let session = new_session(&server).await;
    let all = turn();
    let body = json!({"items": all[..2], "version": 0, "op_id": "op-1"});
    let (status, first) = add(&server, &session, body.clone()).await;
    assert_eq!(status, 201, "{first}");
    let (status, again) = add(&server, &session, body).await;
    assert_eq!(status, 200, "the same add again: {again}");
    assert_eq!(first, again);
    assert_eq!(items(&server, &session, "").await, (all[..2].to_vec(), 1));

    let pop = json!({"version": 1, "op_id": "op-2"});
    let pop_path = format!("{}/pop", items_path(&session));
    let (_, first) = server.post(&pop_path, pop.clone()).await;
    let (status, again) = server.post(&pop_path, pop).await;
    assert_eq!(status, 200);
    assert_eq!(first, again);
    assert_eq!(first["item"], all[1]);
    assert_eq!(items(&server, &session, "").await, (all[..1].to_vec(), 2));

    let (_, first) = clear(&server, &session, "?version=2&op_id=op-3").await;
    let (status, again) = clear(&server, &session, "?version=2&op_id=op-3").await;
    assert_eq!(status, 200);
    assert_eq!(first, again);
    assert_eq!(first, json!({"cleared": 1, "version": 3}));
    assert_eq!(steps(&server, &session).await.len(), 3);

    // A retry after others wrote is still recognised (it is at its own version).
    add(&server, &session, json!({"items": all[2..3]})).await;
    let (status, late) = add(
        &server,
        &session,
        json!({"items": all[..2], "version": 0, "op_id": "op-1"}),
    )
    .await;
    assert_eq!((status, late["version"].clone()), (200, json!(1)));
    assert_eq!(items(&server, &session, "").await, (all[2..3].to_vec(), 4));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_at_a_stale_version_is_a_conflict_and_writes_nothing() {
    let server = TestServer::start().await;
    let session = new_session(&server).await;
    let all = turn();
    let (status, _) = add(
        &server,
        &session,
        json!({"items": all[..1], "version": 0, "op_id": "a"}),
    )
    .await;
    assert_eq!(status, 201);
    // Another writer at the same version, even with the same items.
    for body in [
        json!({"items": all[..1], "version": 0, "op_id": "b"}),
        json!({"items": all[1..2], "version": 0, "op_id": "a"}),
    ] {
        let (status, error) = add(&server, &session, body).await;
        assert_eq!(status, 409, "{error}");
        assert_eq!(error["error"]["code"], json!("conflict"));
        assert_eq!(error["error"]["field"], json!("version"));
    }
    let (status, error) = server
        .post(
            &format!("{}/pop", items_path(&session)),
            json!({"version": 0, "op_id": "c"}),
        )
        .await;
    assert_eq!(status, 409, "{error}");
    let (status, error) = add(&server, &session, json!({"items": all[..1], "version": 7})).await;
    assert_eq!(status, 409, "a version ahead: {error}");
    let (status, _) = clear(&server, &session, "?version=0").await;
    assert_eq!(status, 409);
    assert_eq!(items(&server, &session, "").await, (all[..1].to_vec(), 1));
    assert_eq!(steps(&server, &session).await.len(), 1);

    // Without a version, concurrent adds all land, in some order.
    let adds = (0..8).map(|i| {
        let server = &server;
        let session = &session;
        async move {
            add(
                server,
                session,
                json!({"items": [{"role": "user", "content": format!("m{i}")}]}),
            )
            .await
        }
    });
    for (status, body) in futures_util::future::join_all(adds).await {
        assert_eq!(status, 201, "{body}");
    }
    let (list, version) = items(&server, &session, "").await;
    assert_eq!((list.len(), version), (9, 9));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_tenants_items_are_not_found() {
    let mut server = TestServer::start().await;
    let alice_key = generate_api_key().expect("key");
    let bob_key = generate_api_key().expect("key");
    for (tenant, key) in [("alice", &alice_key), ("bob", &bob_key)] {
        let tenant = Tenant::new(tenant).expect("tenant");
        server
            .store
            .create_api_key(
                &tenant,
                "u",
                stepwise_store::AccessRole::Admin,
                None,
                &hash_api_key(key),
            )
            .await
            .expect("key");
    }
    wait_for(|| async { (server.get("/v1/sessions").await.0 == 401).then_some(()) }).await;
    server.token = Some(alice_key);
    let session = new_session(&server).await;
    add(&server, &session, json!({"items": turn()})).await;

    server.token = Some(bob_key);
    let path = items_path(&session);
    assert_eq!(server.get(&path).await.0, 404);
    assert_eq!(
        server.post(&path, json!({"items": [{"a": 1}]})).await.0,
        404
    );
    assert_eq!(server.post(&format!("{path}/pop"), json!({})).await.0, 404);
    assert_eq!(clear(&server, &session, "").await.0, 404);

    server.token = Some(generate_api_key().expect("key"));
    assert_eq!(server.get(&path).await.0, 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_and_assistant_messages_tool_calls_and_events_show_in_the_session() {
    let server = TestServer::start().await;
    let session = new_session(&server).await;
    let mut events = server.events(&session, None).await;
    let all = turn();
    add(&server, &session, json!({"items": all[..1]})).await;
    add(&server, &session, json!({"items": all[1..]})).await;

    // The messages follow the steps by a moment (in order).
    let messages = wait_for(|| async {
        let messages = server.messages(&session).await;
        (messages.len() >= 2).then_some(messages)
    })
    .await;
    let said: Vec<(Value, Value)> = messages
        .iter()
        .map(|m| (m["role"].clone(), m["content"].clone()))
        .collect();
    assert_eq!(
        said,
        [
            (json!("user"), json!("What is 2+3? Use the tool.")),
            (json!("assistant"), json!("2+3 = 5")),
        ]
    );
    let steps = steps(&server, &session).await;
    assert_eq!(steps[0]["kind"], json!("user_input"));
    assert_eq!(steps[1]["kind"], json!("action"));
    assert_eq!(
        steps[1]["tool_calls"],
        json!([{"id": "call_1", "name": "add", "arguments": {"a": 2, "b": 3}}])
    );
    assert_eq!(steps[1]["observations"], json!("5"));
    assert_eq!(steps[1]["model_output"], json!("2+3 = 5"));
    assert_eq!(messages[0]["execution_id"], steps[0]["execution_id"]);

    // The stream shows the conversation starting, the messages and the steps.
    let mut seen = Vec::new();
    while seen.len() < 5 {
        let event = events.next().await.expect("an event");
        seen.push(event.event.clone());
    }
    assert_eq!(
        seen,
        [
            "execution.started",
            "message.created",
            "step.completed",
            "message.created",
            "step.completed"
        ]
    );

    // A retried add mirrors nothing again.
    let (status, _) = add(
        &server,
        &session,
        json!({"items": all[..1], "version": 2, "op_id": "x"}),
    )
    .await;
    assert_eq!(status, 201);
    let (status, _) = add(
        &server,
        &session,
        json!({"items": all[..1], "version": 2, "op_id": "x"}),
    )
    .await;
    assert_eq!(status, 200);
    // Mirrors keep the order of the writes: once a later add's message is there, the retry
    // would have shown before it.
    add(
        &server,
        &session,
        json!({"items": [{"role": "user", "content": "marker"}]}),
    )
    .await;
    let messages = wait_for(|| async {
        let messages = server.messages(&session).await;
        (messages.last().map(|m| m["content"].clone()) == Some(json!("marker"))).then_some(messages)
    })
    .await;
    assert_eq!(messages.len(), 4, "{messages:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_input_writes_nothing() {
    let server = TestServer::start().await;
    let session = new_session(&server).await;
    let path = items_path(&session);
    let big = "x".repeat(3 * 1024 * 1024 / 2);
    let many: Vec<Value> = (0..10_001).map(|_| json!({})).collect();
    let cases = [
        (json!({}), 400, "items"),
        (json!({"items": {"a": 1}}), 400, "items"),
        (json!({"items": [{"a": 1}, 2]}), 400, "items[1]"),
        (json!({"items": [{"a": 1}], "version": -1}), 400, "version"),
        (json!({"items": [{"a": 1}], "version": "1"}), 400, "version"),
        (json!({"items": [{"a": 1}], "op_id": ""}), 400, "op_id"),
        (json!({"items": [{"a": 1}], "op_id": "a b"}), 400, "op_id"),
        (json!({"items": many}), 400, "items"),
        (
            json!({"items": [{"text": big}, {"text": big}]}),
            413,
            "items",
        ),
        (json!([1]), 400, ""),
    ];
    for (body, expected, field) in cases {
        let (status, error) = server.post(&path, body.clone()).await;
        assert_eq!(status, expected, "{error}");
        if !field.is_empty() {
            assert_eq!(error["error"]["field"], json!(field), "{error}");
        }
    }
    let (status, _) = server
        .send(
            server
                .client
                .post(server.url(&path))
                .header("content-type", "text/plain")
                .body("{\"items\": []}"),
        )
        .await;
    assert_eq!(status, 415);
    for query in ["?limit=-1", "?limit=x", "?limit=9007199254740992"] {
        assert_eq!(
            server.get(&format!("{path}{query}")).await.0,
            400,
            "{query}"
        );
    }
    for query in ["?version=-1", "?version=x", "?op_id=%20"] {
        assert_eq!(clear(&server, &session, query).await.0, 400, "{query}");
    }
    assert_eq!(
        server
            .post(&format!("{path}/pop"), json!({"version": 1.5}))
            .await
            .0,
        400
    );
    assert_eq!(
        server.get("/v1/sessions/not-a-uuid/items").await.0,
        400,
        "an id that is not a uuid"
    );
    let unknown = "/v1/sessions/01900000-0000-7000-8000-000000000000/items";
    assert_eq!(server.get(unknown).await.0, 404);
    assert_eq!(server.post(unknown, json!({"items": [{}]})).await.0, 404);

    // Nothing was written: no conversation execution, version 0.
    assert_eq!(items(&server, &session, "").await, (vec![], 0));
    let (_, executions) = server
        .get(&format!("/v1/sessions/{session}/executions"))
        .await;
    assert_eq!(executions["items"], json!([]));
    // A whole number written as a float is a number.
    let (status, body) = add(
        &server,
        &session,
        json!({"items": [{"a": 1}], "version": 0.0}),
    )
    .await;
    assert_eq!((status, body["version"].clone()), (201, json!(1)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_conversation_goes_on_in_a_new_execution_and_deleted_sessions_are_read_only() {
    let server = TestServer::start().await;
    let session = new_session(&server).await;
    let all = turn();
    add(&server, &session, json!({"items": all[..2]})).await;
    let (_, executions) = server
        .get(&format!("/v1/sessions/{session}/executions"))
        .await;
    let first = executions["items"][0]["id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let (status, _) = server
        .post(&format!("/v1/executions/{first}/cancel"), json!({}))
        .await;
    assert_eq!(status, 202);

    let (status, body) = add(&server, &session, json!({"items": all[2..], "version": 1})).await;
    assert_eq!((status, body["version"].clone()), (201, json!(2)), "{body}");
    assert_eq!(items(&server, &session, "").await, (all.clone(), 2));
    let (_, body) = server
        .post(&format!("{}/pop", items_path(&session)), json!({}))
        .await;
    assert_eq!(body["item"], all[4]);
    let (_, executions) = server
        .get(&format!("/v1/sessions/{session}/executions"))
        .await;
    let statuses: Vec<Value> = executions["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|e| e["status"].clone())
        .collect();
    assert_eq!(statuses, [json!("cancelled"), json!("running")]);
    // The retry of the first add (in the cancelled execution) is still recognised.
    let numbers: Vec<u64> = steps(&server, &session)
        .await
        .iter()
        .map(|s| s["step_number"].as_u64().unwrap_or_default())
        .collect();
    assert_eq!(numbers, [1, 1, 2]);

    let (status, _) = server
        .send(
            server
                .client
                .delete(server.url(&format!("/v1/sessions/{session}"))),
        )
        .await;
    assert_eq!(status, 204);
    let (status, error) = add(&server, &session, json!({"items": all[..1]})).await;
    assert_eq!(status, 422, "{error}");
    assert_eq!(error["error"]["code"], json!("invalid_state"));
    assert_eq!(items(&server, &session, "").await.0.len(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openapi_document_describes_the_items_endpoints() {
    let server = TestServer::start().await;
    let (_, doc) = server.get("/openapi.json").await;
    let paths = &doc["paths"];
    for (path, method) in [
        ("/v1/sessions/{id}/items", "get"),
        ("/v1/sessions/{id}/items", "post"),
        ("/v1/sessions/{id}/items", "delete"),
        ("/v1/sessions/{id}/items/pop", "post"),
    ] {
        assert!(paths[path][method].is_object(), "{method} {path}");
    }
    let limit = paths["/v1/sessions/{id}/items"]["get"]["parameters"]
        .as_array()
        .and_then(|p| p.iter().find(|p| p["name"] == json!("limit")))
        .cloned()
        .unwrap_or_default();
    assert_eq!(limit["schema"]["minimum"], json!(0));
    let body = &doc["components"]["schemas"]["AppendItemsBody"]["properties"]["items"];
    assert_eq!(body["items"], json!({"type": "object"}));
}
