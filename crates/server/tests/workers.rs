//! Worker processes over HTTP (`docs/workers.md`), against a real node: claims with their
//! lease and restore data, the long poll woken by a message, lease fencing after a lost
//! worker, pause and answer, cancel seen by the heartbeat, handing back, tenants, and
//! hostile input. The Python worker's own suite drives the same protocol with real
//! processes killed and frozen.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::{TestServer, assert_error, wait_for};
use serde_json::{Value, json};
use stepwise_core::apikey::{generate_api_key, hash_api_key};
use stepwise_store::Tenant;
use stepwise_store::prelude::*;

const LEASE: &str = "stepwise-lease";

fn claim_body(agent: &str, slots: u32, wait_s: f64) -> Value {
    json!({"worker_id": "test-worker-1", "agents": [{"type": agent, "description": "Says hello"}],
           "slots": slots, "wait_s": wait_s})
}

async fn claim(server: &TestServer, agent: &str, slots: u32, wait_s: f64) -> Vec<Value> {
    let (status, body) = server
        .post("/v1/workers/claim", claim_body(agent, slots, wait_s))
        .await;
    assert_eq!(status, 200, "{body}");
    body["items"].as_array().unwrap().clone()
}

/// A claim for one execution of `agent` sent now, waiting up to `wait_s` (its answer later).
fn waiting_claim(server: &TestServer, agent: &str, wait_s: f64) -> tokio::task::JoinHandle<Value> {
    let client = server.client.clone();
    let url = server.url("/v1/workers/claim");
    let body = claim_body(agent, 1, wait_s);
    tokio::spawn(async move {
        client
            .post(url)
            .json(&body)
            .send()
            .await
            .unwrap()
            .json::<Value>()
            .await
            .unwrap()
    })
}

/// Posts a message for `agent` to a new session: (session id, execution id). It says
/// `agent.wait: true`, so it queues before any worker of the type has announced it.
async fn message_for(server: &TestServer, agent: &str, content: &str) -> (String, String) {
    let (status, body) = server
        .post(
            "/v1/messages",
            json!({"content": content, "agent": {"type": agent, "wait": true}}),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    (
        body["session_id"].as_str().unwrap().to_string(),
        body["execution"]["id"].as_str().unwrap().to_string(),
    )
}

/// Admin keys of two tenants, alice and bob (the server then asks every call for a key).
async fn tenant_keys(server: &TestServer) -> (String, String) {
    let keys = (generate_api_key().unwrap(), generate_api_key().unwrap());
    for (tenant, key) in [("alice", &keys.0), ("bob", &keys.1)] {
        let tenant = Tenant::new(tenant).unwrap();
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
            .unwrap();
    }
    wait_for(|| async { (server.get("/v1/sessions").await.0 == 401).then_some(()) }).await;
    keys
}

async fn leased(server: &TestServer, path: &str, lease: Option<&str>, body: Value) -> (u16, Value) {
    let mut request = server.client.post(server.url(path)).json(&body);
    if let Some(lease) = lease {
        request = request.header(LEASE, lease);
    }
    server.send(request).await
}

fn text(claim: &Value, key: &str) -> String {
    claim[key].as_str().unwrap_or_default().to_string()
}

async fn step_count(server: &TestServer, execution: &str) -> usize {
    let (_, steps) = server
        .get(&format!("/v1/executions/{execution}/steps"))
        .await;
    steps["items"].as_array().unwrap().len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_claims_writes_with_its_lease_and_completes() {
    let server = TestServer::start().await;
    let (session, execution) = message_for(&server, "greeter", "Ada").await;
    // No worker yet: the message waits, and says so; the server's own workers leave it.
    let messages = server.messages(&session).await;
    assert!(
        messages.iter().any(|m| m["content"]
            .as_str()
            .unwrap_or_default()
            .contains("no worker")),
        "{messages:?}"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(server.execution(&execution).await["status"], "pending");

    let claims = claim(&server, "greeter", 4, 0.0).await;
    assert_eq!(claims.len(), 1);
    let c = &claims[0];
    assert_eq!(c["execution"]["id"], json!(execution));
    assert_eq!(c["execution"]["status"], "running");
    assert_eq!(c["attempt"], 1);
    assert_eq!(c["input_text"], "Ada");
    assert_eq!(c["session"]["id"], json!(session));
    assert_eq!(c["memory"]["steps"], json!([]));
    assert_eq!(c["steps"], json!([]));
    assert!(c["heartbeat_interval_s"].as_f64().unwrap() > 0.0);
    let lease = text(c, "lease");
    assert!(lease.starts_with("lease_"));

    // The agent type is listed, with its worker online.
    let (_, agents) = server.get("/v1/agents").await;
    let greeter = agents["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["type"] == "greeter")
        .cloned()
        .unwrap();
    assert_eq!(greeter["builtin"], false);
    assert_eq!(greeter["workers_online"], 1);
    assert_eq!(greeter["description"], "Says hello");
    assert!(
        agents["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["type"] == "demo" && a["builtin"] == true)
    );

    let steps = format!("/v1/executions/{execution}/steps");
    let step = json!({"step_number": 1, "model_output": "Greeting", "observations": "said hello"});
    // Without the lease, or with another one: refused, nothing written.
    let (status, body) = leased(&server, &steps, None, step.clone()).await;
    assert_error(status, &body, 409, "lease_lost", "no lease");
    let (status, body) = leased(&server, &steps, Some("lease_forged"), step.clone()).await;
    assert_error(status, &body, 409, "lease_lost", "forged lease");
    assert_eq!(step_count(&server, &execution).await, 0);

    let (status, body) = leased(&server, &steps, Some(&lease), step.clone()).await;
    assert_eq!(status, 201, "{body}");
    let (status, _) = leased(&server, &steps, Some(&lease), step).await;
    assert_eq!(status, 200, "the same step again writes nothing");
    let (status, body) = leased(
        &server,
        &format!("/v1/executions/{execution}/deltas"),
        Some(&lease),
        json!({"text": "Hel"}),
    )
    .await;
    assert_eq!(status, 202, "{body}");
    // A delta may carry metadata (an object, bounded) for the protocols that stream more
    // than text; text may then be empty.
    let deltas = format!("/v1/executions/{execution}/deltas");
    let with_metadata =
        json!({"text": "", "metadata": {"langgraph": [{"mode": "custom", "ns": "", "data": 1}]}});
    let (status, body) = leased(&server, &deltas, Some(&lease), with_metadata).await;
    assert_eq!(status, 202, "{body}");
    let (status, body) = leased(
        &server,
        &deltas,
        Some(&lease),
        json!({"text": "x", "metadata": [1]}),
    )
    .await;
    assert_error(
        status,
        &body,
        400,
        "invalid_request",
        "metadata that is not an object",
    );
    let huge = json!({"text": "", "metadata": {"big": "x".repeat(2 * 1024 * 1024)}});
    let (status, body) = leased(&server, &deltas, Some(&lease), huge).await;
    assert_error(status, &body, 400, "invalid_request", "metadata over 2 MiB");
    let (status, body) = leased(
        &server,
        &format!("/v1/executions/{execution}/heartbeat"),
        None,
        json!({"lease": lease, "worker_id": "test-worker-1"}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["cancel_requested"], false);

    let (status, body) = leased(
        &server,
        &format!("/v1/executions/{execution}/complete"),
        Some(&lease),
        json!({"output": "Hello, Ada", "final_message": "Hello, Ada"}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "completed");
    let messages = server.messages(&session).await;
    assert!(
        messages
            .iter()
            .any(|m| m["role"] == "assistant" && m["content"] == "Hello, Ada")
    );
    // A finished execution's lease is not current any more.
    let (status, body) = leased(
        &server,
        &format!("/v1/executions/{execution}/heartbeat"),
        None,
        json!({"lease": lease}),
    )
    .await;
    assert_error(status, &body, 409, "lease_lost", "heartbeat after the end");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_claim_is_woken_by_a_message() {
    let server = TestServer::start().await;
    let waiting = waiting_claim(&server, "planner", 20.0);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (_, execution) = message_for(&server, "planner", "plan a trip").await;
    let answer = waiting.await.unwrap();
    assert_eq!(answer["items"][0]["execution"]["id"], json!(execution));
    server.stop().await;
}

/// `on_busy: interrupt` with one execution running on a worker and one queued behind it:
/// the queued one is cancelled before the running one frees the session, so a claim
/// waiting meanwhile never gets it; it gets the interrupting message's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_never_lets_a_waiting_claim_take_the_queued_execution() {
    let server = TestServer::start().await;
    let (session, first) = message_for(&server, "slowpoke", "one").await;
    let claimed = claim(&server, "slowpoke", 1, 5.0).await;
    assert_eq!(claimed[0]["execution"]["id"], json!(first));
    let path = format!("/v1/sessions/{session}/messages");
    let queue = |content: &str, on_busy: &str| {
        server.post(
            &path,
            json!({"content": content, "on_busy": on_busy, "agent": {"type": "slowpoke", "wait": true}}),
        )
    };
    let (status, queued) = queue("two", "enqueue").await;
    assert_eq!(status, 202, "{queued}");
    let queued = text(&queued["execution"], "id");
    // A worker waits for work while the third message interrupts the other two.
    let waiting = waiting_claim(&server, "slowpoke", 10.0);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (status, last) = queue("three", "interrupt").await;
    assert_eq!(status, 202, "{last}");
    let answer = waiting.await.unwrap();
    assert_eq!(
        answer["items"][0]["execution"]["id"], last["execution"]["id"],
        "{answer}"
    );
    let (_, never) = server.get(&format!("/v1/executions/{queued}")).await;
    assert_eq!(never["status"], "cancelled", "{never}");
    assert!(never["started_at"].is_null(), "{never}");
    let (_, cancelled) = server.get(&format!("/v1/executions/{first}")).await;
    assert_eq!(cancelled["status"], "cancelled", "{cancelled}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_workers_execution_is_taken_over_and_its_old_lease_is_fenced() {
    let server = TestServer::start().await; // 5 s leases
    let (session, execution) = message_for(&server, "coder", "write code").await;
    let first = claim(&server, "coder", 1, 0.0).await.remove(0);
    let old = text(&first, "lease");
    let steps = format!("/v1/executions/{execution}/steps");
    for n in 1..=2 {
        let (status, body) = leased(
            &server,
            &steps,
            Some(&old),
            json!({"step_number": n, "model_output": format!("step {n}")}),
        )
        .await;
        assert_eq!(status, 201, "{body}");
    }
    // The worker stops renewing: after its lease, another claim takes the execution over.
    let second = wait_for(|| async {
        let mut claims = claim(&server, "coder", 1, 1.0).await;
        (!claims.is_empty()).then(|| claims.remove(0))
    })
    .await;
    assert_eq!(second["execution"]["id"], json!(execution));
    assert_eq!(second["attempt"], 2);
    assert_eq!(second["steps"].as_array().unwrap().len(), 2);
    let new = text(&second, "lease");
    assert_ne!(new, old);
    let messages = server.messages(&session).await;
    assert!(
        messages
            .iter()
            .any(|m| m["content"] == "Worker lost: resuming from step 3, attempt 2"),
        "{messages:?}"
    );

    // The frozen worker wakes: every write and heartbeat of its lease is refused.
    let (status, body) = leased(
        &server,
        &steps,
        Some(&old),
        json!({"step_number": 3, "model_output": "from the old worker"}),
    )
    .await;
    assert_error(status, &body, 409, "lease_lost", "old lease step");
    let (status, body) = leased(
        &server,
        &format!("/v1/executions/{execution}/complete"),
        Some(&old),
        json!({"output": "old"}),
    )
    .await;
    assert_error(status, &body, 409, "lease_lost", "old lease complete");
    let (status, _) = leased(
        &server,
        &steps,
        Some(&new),
        json!({"step_number": 3, "model_output": "from the new worker"}),
    )
    .await;
    assert_eq!(status, 201);
    let (_, listed) = server.get(&steps).await;
    let outputs: Vec<&str> = listed["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["model_output"].as_str().unwrap())
        .collect();
    assert_eq!(outputs, ["step 1", "step 2", "from the new worker"]);
    server.stop().await;
}

/// A worker that writes more often than a third of its lease keeps the lease without a
/// heartbeat: a write renews a lease that has aged (not every write commits a renewal).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_writing_steps_keeps_its_lease_without_heartbeats() {
    let server = TestServer::start().await; // 5 s leases
    let (session, execution) = message_for(&server, "coder", "write code").await;
    let first = claim(&server, "coder", 1, 0.0).await.remove(0);
    let lease = text(&first, "lease");
    let steps = format!("/v1/executions/{execution}/steps");
    // 8 steps 0.9 s apart: 7.2 s, past the 5 s lease the claim started.
    for n in 1..=8 {
        tokio::time::sleep(Duration::from_millis(900)).await;
        let (status, body) = leased(
            &server,
            &steps,
            Some(&lease),
            json!({"step_number": n, "model_output": format!("step {n}")}),
        )
        .await;
        assert_eq!(status, 201, "step {n}: {body}");
    }
    assert!(
        claim(&server, "coder", 1, 0.0).await.is_empty(),
        "the writing worker's lease was taken over"
    );
    let (status, body) = leased(
        &server,
        &format!("/v1/executions/{execution}/complete"),
        Some(&lease),
        json!({"output": "done"}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["attempts"], 1, "{body}");
    let messages = server.messages(&session).await;
    assert!(
        messages.iter().any(|m| m["content"] == "Step 8: step 8"),
        "{messages:?}"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_answer_cancel_and_hand_back() {
    let server = TestServer::start().await;
    let (session, execution) = message_for(&server, "asker", "book a table").await;
    let c = claim(&server, "asker", 1, 0.0).await.remove(0);
    let lease = text(&c, "lease");
    let (status, body) = leased(
        &server,
        &format!("/v1/executions/{execution}/pause"),
        Some(&lease),
        json!({"question": "For how many?"}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "paused");
    // The answer queues it again; the next claim carries the answer as a step.
    let answered = server.message_to(&session, "four").await;
    assert_eq!(answered["execution"]["id"], json!(execution));
    let resumed = claim(&server, "asker", 1, 5.0).await.remove(0);
    assert_eq!(resumed["resume_answer"], "four");
    let steps = resumed["steps"].as_array().unwrap();
    assert_eq!(steps.last().unwrap()["kind"], "user_input");
    assert_eq!(steps.last().unwrap()["observations"], "four");

    // Handing it back costs no attempt; the next claim gets the same attempt number.
    let lease = text(&resumed, "lease");
    let (status, body) = leased(
        &server,
        &format!("/v1/executions/{execution}/release"),
        Some(&lease),
        json!({}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "pending");
    let again = claim(&server, "asker", 1, 5.0).await.remove(0);
    assert_eq!(again["attempt"], resumed["attempt"]);

    // Cancel: the heartbeat says so, and writes are refused.
    let lease = text(&again, "lease");
    let (status, _) = server
        .post(&format!("/v1/executions/{execution}/cancel"), json!({}))
        .await;
    assert_eq!(status, 202);
    let (status, body) = leased(
        &server,
        &format!("/v1/executions/{execution}/heartbeat"),
        None,
        json!({"lease": lease}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["cancel_requested"], true);
    let (status, body) = leased(
        &server,
        &format!("/v1/executions/{execution}/steps"),
        Some(&lease),
        json!({"model_output": "late"}),
    )
    .await;
    assert_error(status, &body, 409, "lease_lost", "after cancel");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_claims_and_other_tenants_leases_are_refused() {
    let mut server = TestServer::start().await;
    for (body, field) in [
        (claim_body("greeter", 10_000, 0.0), "slots"),
        (claim_body("../etc", 1, 0.0), "agents[0].type"),
        (claim_body("greeter", 1, 600.0), "wait_s"),
        (
            json!({"worker_id": "w", "agents": [], "slots": 1}),
            "agents",
        ),
        (
            json!({"worker_id": "bad id!", "agents": [{"type": "x"}], "slots": 1}),
            "worker_id",
        ),
    ] {
        let (status, answer) = server.post("/v1/workers/claim", body).await;
        assert_error(status, &answer, 400, "invalid_request", field);
        assert_eq!(answer["error"]["field"], field);
    }

    // A well-formed name the server keeps for its own agent: not for a worker.
    let (status, answer) = server
        .post("/v1/workers/claim", claim_body("demo", 1, 0.0))
        .await;
    assert_error(status, &answer, 422, "invalid_state", "a built-in type");
    assert_eq!(answer["error"]["field"], "agents[0].type");

    let (alice_key, bob_key) = tenant_keys(&server).await;
    server.token = Some(alice_key.clone());
    let (_, execution) = message_for(&server, "greeter", "for alice").await;
    let (_, other) = message_for(&server, "greeter", "also for alice").await;
    let c = claim(&server, "greeter", 1, 0.0).await.remove(0);
    let lease = text(&c, "lease");
    assert_eq!(c["execution"]["id"], json!(execution));

    // Bob sees neither Alice's worker nor her queued execution.
    server.token = Some(bob_key);
    let (_, agents) = server.get("/v1/agents").await;
    assert!(
        agents["items"]
            .as_array()
            .unwrap()
            .iter()
            .all(|a| a["type"] != "greeter"),
        "bob sees no worker of alice: {agents}"
    );
    assert!(claim(&server, "greeter", 4, 0.0).await.is_empty());
    // Her lease is not found for him, and writes nothing.
    let (status, body) = leased(
        &server,
        &format!("/v1/executions/{execution}/steps"),
        Some(&lease),
        json!({"model_output": "bob was here"}),
    )
    .await;
    assert_error(status, &body, 404, "not_found", "another tenant's lease");
    let (status, body) = leased(
        &server,
        &format!("/v1/executions/{execution}/heartbeat"),
        None,
        json!({"lease": lease}),
    )
    .await;
    assert_error(
        status,
        &body,
        404,
        "not_found",
        "another tenant's heartbeat",
    );
    server.token = Some(alice_key);
    assert_eq!(step_count(&server, &execution).await, 0);
    assert_eq!(server.execution(&other).await["status"], "pending");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sessions_default_agent_answers_its_messages() {
    let server = TestServer::start().await;
    let (status, session) = server
        .post(
            "/v1/sessions",
            json!({"title": "t", "agent": {"type": "greeter", "config": {"tone": "warm"}}}),
        )
        .await;
    assert_eq!(status, 201, "{session}");
    assert_eq!(
        session["agent"],
        json!({"type": "greeter", "config": {"tone": "warm"}})
    );
    let id = session["id"].as_str().unwrap().to_string();
    let sent = server.message_to(&id, "hello").await;
    assert_eq!(sent["execution"]["agent_type"], "greeter");
    assert_eq!(sent["execution"]["agent_config"], json!({"tone": "warm"}));
    // A message naming an agent still picks its own.
    let (status, sent) = server
        .post(
            &format!("/v1/sessions/{id}/messages"),
            json!({"content": "2+2", "agent": {"type": "demo"}}),
        )
        .await;
    assert_eq!(status, 202);
    assert_eq!(sent["execution"]["agent_type"], "demo");
    // Cleared: the server's default again. `external` and bad names are refused.
    let (status, patched) = server
        .send(
            server
                .client
                .patch(server.url(&format!("/v1/sessions/{id}")))
                .json(&json!({"agent": null})),
        )
        .await;
    assert_eq!(status, 200, "{patched}");
    assert_eq!(patched["agent"], Value::Null);
    for bad in ["external", "no spaces", "-dash-first"] {
        let (status, body) = server
            .post("/v1/sessions", json!({"agent": {"type": bad}}))
            .await;
        assert_error(status, &body, 400, "invalid_request", bad);
    }
    let (status, body) = server
        .post(
            "/v1/messages",
            json!({"content": "hi", "session": {"agent": {"type": "planner"}}}),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["execution"]["agent_type"], "planner");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_agent_runs_another_worker_agent_as_its_subagent() {
    let server = TestServer::start().await;
    let (session, parent) = message_for(&server, "planner", "plan and code").await;
    let p = claim(&server, "planner", 1, 0.0).await.remove(0);
    let (status, child) = server
        .post(
            &format!("/v1/sessions/{session}/executions"),
            json!({"agent_type": "coder", "input": {"message": "write it"}, "parent_execution_id": parent}),
        )
        .await;
    assert_eq!(status, 201, "{child}");
    assert_eq!(child["status"], "pending");
    let child_id = child["id"].as_str().unwrap().to_string();
    // The coder's worker claims it while its parent runs.
    let c = claim(&server, "coder", 1, 5.0).await.remove(0);
    assert_eq!(c["execution"]["id"], json!(child_id));
    assert_eq!(c["execution"]["parent_execution_id"], json!(parent));
    let (status, _) = leased(
        &server,
        &format!("/v1/executions/{child_id}/complete"),
        Some(&text(&c, "lease")),
        json!({"output": "code written"}),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(server.execution(&child_id).await["output"], "code written");
    let (status, _) = leased(
        &server,
        &format!("/v1/executions/{parent}/complete"),
        Some(&text(&p, "lease")),
        json!({"output": "planned", "final_message": "planned"}),
    )
    .await;
    assert_eq!(status, 200);
    // A built-in type is not opened this way.
    let (status, body) = server
        .post(
            &format!("/v1/sessions/{session}/executions"),
            json!({"agent_type": "demo", "input": {}}),
        )
        .await;
    assert_error(status, &body, 400, "invalid_request", "built-in subagent");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_error_is_retried_until_the_attempts_run_out() {
    let server = TestServer::start().await; // 5 attempts
    let (session, execution) = message_for(&server, "flaky", "try hard").await;
    let c = claim(&server, "flaky", 1, 0.0).await.remove(0);
    let (status, body) = leased(
        &server,
        &format!("/v1/executions/{execution}/fail"),
        Some(&text(&c, "lease")),
        json!({"error_message": "the model timed out", "retry": true}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "pending", "back in the queue");
    let messages = server.messages(&session).await;
    assert!(
        messages
            .iter()
            .any(|m| m["content"] == "Agent error on attempt 1: the model timed out; trying again")
    );
    // A string output completes with that answer when the worker names none.
    let again = claim(&server, "flaky", 1, 5.0).await.remove(0);
    assert_eq!(again["attempt"], 2);
    let (status, _) = leased(
        &server,
        &format!("/v1/executions/{execution}/complete"),
        Some(&text(&again, "lease")),
        json!({"output": "made it"}),
    )
    .await;
    assert_eq!(status, 200);
    let messages = server.messages(&session).await;
    assert!(
        messages
            .iter()
            .any(|m| m["role"] == "assistant" && m["content"] == "made it")
    );

    // Used up: the last retry fails the execution.
    let (_, doomed) = message_for(&server, "doomed", "never works").await;
    let mut last = Value::Null;
    for _ in 0..5 {
        let c = claim(&server, "doomed", 1, 5.0).await.remove(0);
        let (status, body) = leased(
            &server,
            &format!("/v1/executions/{doomed}/fail"),
            Some(&text(&c, "lease")),
            json!({"error_message": "broken", "retry": true}),
        )
        .await;
        assert_eq!(status, 200, "{body}");
        last = body;
    }
    assert_eq!(last["status"], "failed");
    assert!(
        last["error_message"]
            .as_str()
            .unwrap()
            .contains("no retries left")
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steps_sent_in_a_batch_are_saved_in_order_once() {
    let server = TestServer::start().await;
    let (_, execution) = message_for(&server, "batcher", "many steps").await;
    let c = claim(&server, "batcher", 1, 0.0).await.remove(0);
    let lease = text(&c, "lease");
    let batch = format!("/v1/executions/{execution}/steps/batch");
    let steps = json!({"steps": [
        {"model_output": "one"}, {"model_output": "two"}, {"step_number": 5, "model_output": "five"}, {"model_output": "six"}
    ]});
    let (status, body) = leased(&server, &batch, None, steps.clone()).await;
    assert_error(
        status,
        &body,
        409,
        "lease_lost",
        "a batch without the lease",
    );
    let (status, body) = leased(&server, &batch, Some(&lease), steps.clone()).await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["created"], 4);
    let numbers: Vec<u64> = body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["step_number"].as_u64().unwrap())
        .collect();
    assert_eq!(numbers, [1, 2, 5, 6]);
    // Sent again (a retry): nothing new. Another body at a stored number: 409.
    let (status, body) = leased(
        &server,
        &batch,
        Some(&lease),
        json!({"steps": [{"step_number": 1, "model_output": "one"}, {"step_number": 2, "model_output": "two"}]}),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["created"], 0);
    let (status, body) = leased(
        &server,
        &batch,
        Some(&lease),
        json!({"steps": [{"step_number": 7, "model_output": "seven"}, {"step_number": 2, "model_output": "changed"}]}),
    )
    .await;
    assert_error(status, &body, 409, "conflict", "another body");
    assert_eq!(
        step_count(&server, &execution).await,
        5,
        "the step before the conflict is saved"
    );
    let (status, body) = leased(&server, &batch, Some(&lease), json!({"steps": []})).await;
    assert_error(status, &body, 400, "invalid_request", "an empty batch");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_for_an_agent_type_no_worker_announced_is_refused_with_the_closest_names() {
    let mut server = TestServer::start().await;
    let (alice, bob) = tenant_keys(&server).await;
    server.token = Some(alice);
    let sessions_before = server.get("/v1/sessions").await.1["items"]
        .as_array()
        .unwrap()
        .len();
    // Nothing announced `greeter` yet: refused, nothing written, the built-ins named.
    let (status, body) = server
        .post(
            "/v1/messages",
            json!({"content": "hi", "agent": {"type": "greeter"}}),
        )
        .await;
    assert_error(
        status,
        &body,
        422,
        "unknown_agent",
        "no worker announced it",
    );
    assert_eq!(body["error"]["field"], "agent.type");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("demo") && message.contains("agent.wait"),
        "{message}"
    );
    let (_, sessions) = server.get("/v1/sessions").await;
    assert_eq!(
        sessions["items"].as_array().unwrap().len(),
        sessions_before,
        "a refused message creates no session"
    );

    // A worker announces it (a claim that takes nothing).
    assert!(claim(&server, "greeter", 0, 0.0).await.is_empty());
    let (status, body) = server
        .post(
            "/v1/messages",
            json!({"content": "hi", "agent": {"type": "greeterr"}}),
        )
        .await;
    assert_error(status, &body, 422, "unknown_agent", "misspelled");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("did you mean greeter?"), "{message}");
    // The same to an existing session.
    let (_, session) = server.post("/v1/sessions", json!({"title": "t"})).await;
    let to_session = format!("/v1/sessions/{}/messages", session["id"].as_str().unwrap());
    let (status, body) = server
        .post(
            &to_session,
            json!({"content": "hi", "agent": {"type": "greeterr"}}),
        )
        .await;
    assert_error(
        status,
        &body,
        422,
        "unknown_agent",
        "misspelled, to a session",
    );
    assert!(
        server
            .messages(session["id"].as_str().unwrap())
            .await
            .is_empty()
    );
    // With agent.wait it queues; the announced type queues; built-in ones run.
    let (status, body) = server
        .post(
            "/v1/messages",
            json!({"content": "hi", "agent": {"type": "greeterr", "wait": true}}),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["execution"]["status"], "pending");
    for (path, agent) in [
        ("/v1/messages", "greeter"),
        (to_session.as_str(), "greeter"),
        (to_session.as_str(), "demo"),
    ] {
        let (status, body) = server
            .post(path, json!({"content": "2+2", "agent": {"type": agent}}))
            .await;
        assert_eq!(status, 202, "{agent} at {path}: {body}");
    }

    // Another tenant's worker does not make a type known here.
    server.token = Some(bob);
    let (status, body) = server
        .post(
            "/v1/messages",
            json!({"content": "hi", "agent": {"type": "greeter"}}),
        )
        .await;
    assert_error(
        status,
        &body,
        422,
        "unknown_agent",
        "another tenant's worker",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_stops_cleanly_is_offline_at_once_and_its_type_stays_known() {
    let mut server = TestServer::start().await;
    let (alice, bob) = tenant_keys(&server).await;
    server.token = Some(alice.clone());
    assert!(claim(&server, "greeter", 0, 0.0).await.is_empty());
    let online = |agents: &Value| {
        agents["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["type"] == "greeter")
            .map(|a| a["workers_online"].clone())
    };
    assert_eq!(online(&server.get("/v1/agents").await.1), Some(json!(1)));

    let (status, body) = server.delete("/v1/workers/test-worker-1").await;
    assert_eq!(status, 204, "{body}");
    assert_eq!(
        online(&server.get("/v1/agents").await.1),
        Some(json!(0)),
        "offline at once, still listed"
    );
    // Its type stays known: a message for it queues (no worker online says so).
    let (status, body) = server
        .post(
            "/v1/messages",
            json!({"content": "hi", "agent": {"type": "greeter"}}),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    // It comes back with its next call.
    assert!(claim(&server, "greeter", 0, 0.0).await.is_empty());
    assert_eq!(online(&server.get("/v1/agents").await.1), Some(json!(1)));

    // A worker id the tenant never saw, or another tenant's: 404; a malformed one: 400.
    let (status, body) = server.delete("/v1/workers/nobody").await;
    assert_error(status, &body, 404, "not_found", "unknown worker");
    server.token = Some(bob);
    let (status, body) = server.delete("/v1/workers/test-worker-1").await;
    assert_error(status, &body, 404, "not_found", "another tenant's worker");
    server.token = Some(alice);
    assert_eq!(online(&server.get("/v1/agents").await.1), Some(json!(1)));
    let (status, body) = server.delete("/v1/workers/bad%20id!").await;
    assert_error(status, &body, 400, "invalid_request", "malformed worker id");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workers_step_is_told_like_a_built_in_one_and_include_step_carries_it() {
    let server = TestServer::start().await;
    let (session, execution) = message_for(&server, "searcher", "find it").await;
    let c = claim(&server, "searcher", 1, 0.0).await.remove(0);
    let lease = text(&c, "lease");
    let step = json!({"step_number": 1, "model_output": "Looking it up",
        "tool_calls": [{"id": "c1", "name": "search", "arguments": {"q": "it"}}],
        "observations": "found 3 pages"});
    let (status, body) = leased(
        &server,
        &format!("/v1/executions/{execution}/steps"),
        Some(&lease),
        step,
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let (status, body) = leased(
        &server,
        &format!("/v1/executions/{execution}/complete"),
        Some(&lease),
        json!({"output": "3 pages", "final_message": "I found 3 pages"}),
    )
    .await;
    assert_eq!(status, 200, "{body}");

    // The stream, read back: the same events, in the same order, as a built-in agent's step.
    let mut events = server.events(&session, None).await;
    let seen = events.until("execution.completed").await;
    let step_events: Vec<(String, Value)> = seen
        .iter()
        .filter(|e| e.event.starts_with("step.") || e.event.starts_with("tool."))
        .map(|e| (e.event.clone(), e.data["metadata"]["tool"].clone()))
        .collect();
    assert_eq!(
        step_events,
        [
            ("step.started".to_string(), Value::Null),
            ("tool.called".to_string(), json!("search")),
            ("tool.completed".to_string(), json!("search")),
            ("step.completed".to_string(), json!("search")),
        ]
    );
    let completed = seen.iter().find(|e| e.event == "tool.completed").unwrap();
    assert_eq!(completed.data["content"], "found 3 pages");
    let plain = seen.iter().find(|e| e.event == "step.completed").unwrap();
    assert!(
        plain.data["metadata"].get("step").is_none(),
        "{:?}",
        plain.data
    );
    // Its status line, as the engine writes for its own steps.
    let messages = server.messages(&session).await;
    let line = messages
        .iter()
        .find(|m| m["content"] == "Step 1: called search · Looking it up")
        .expect("the step's status line");
    assert_eq!(line["role"], "info");
    assert_eq!(line["metadata"]["tool"], "search");

    // ?include=step: step.completed carries the whole Step.
    let response = server
        .client
        .get(server.url(&format!("/v1/sessions/{session}/events?include=step")))
        .send()
        .await
        .unwrap();
    let mut events = common::SseReader::new(response);
    let seen = events.until("execution.completed").await;
    let with_step = seen.iter().find(|e| e.event == "step.completed").unwrap();
    let step = &with_step.data["metadata"]["step"];
    assert_eq!(step["step_number"], 1);
    assert_eq!(step["model_output"], "Looking it up");
    assert_eq!(step["tool_calls"][0]["name"], "search");
    assert_eq!(step["observations"], "found 3 pages");
    let (status, body) = server
        .get(&format!("/v1/sessions/{session}/events?include=everything"))
        .await;
    assert_error(status, &body, 400, "invalid_request", "an unknown include");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_a_message_came_from_reaches_the_workers_claim() {
    let server = TestServer::start().await;
    let (status, body) = server
        .post(
            "/v1/messages",
            json!({"content": "where is my parcel?", "agent": {"type": "support", "wait": true},
                   "related_type": "order", "related_id": "42",
                   "context_url": "https://shop.example/orders/42", "metadata": {"plan": "pro"}}),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(
        body["execution"]["input"],
        json!({"message": "where is my parcel?", "context": {"related_type": "order",
            "related_id": "42", "context_url": "https://shop.example/orders/42",
            "metadata": {"plan": "pro"}}})
    );
    let c = claim(&server, "support", 1, 0.0).await.remove(0);
    assert_eq!(c["input"]["context"]["related_id"], "42");
    assert_eq!(c["input"]["context"]["metadata"], json!({"plan": "pro"}));
    assert_eq!(c["input_text"], "where is my parcel?");

    // A message that says nothing of where it came from: the input is the message alone.
    let (_, body) = server
        .post(
            "/v1/messages",
            json!({"content": "hi", "agent": {"type": "support"}, "context_url": null}),
        )
        .await;
    assert_eq!(body["execution"]["input"], json!({"message": "hi"}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_step_agents_step_goes_with_its_completion_and_a_refused_one_writes_nothing() {
    let server = TestServer::start().await;
    let (session, execution) = message_for(&server, "echo", "Ada").await;
    let c = claim(&server, "echo", 1, 0.0).await.remove(0);
    assert_eq!(c["complete_takes_steps"], true);
    let lease = text(&c, "lease");
    let complete = format!("/v1/executions/{execution}/complete");
    // Whole numbers written as floats (`1.0`, an integer to JSON Schema) are taken, as
    // `/steps/batch` takes them.
    let body = json!({"output": "Echo: Ada",
        "steps": [{"step_number": 1.0, "model_output": "Echoing",
                   "tool_calls": [{"id": "c1", "name": "echo", "arguments": {}}],
                   "observations": "Ada", "token_usage": {"input": 3.0, "output": 2, "total": 5.0}}]});

    // Refused before anything is written: no lease, a forged one, a step that is not one,
    // an empty list. The execution still runs, without a step.
    let (status, answer) = leased(&server, &complete, None, body.clone()).await;
    assert_error(status, &answer, 409, "lease_lost", "no lease");
    let forged = "lease_0000000000000000000000000000000000";
    let (status, answer) = leased(&server, &complete, Some(forged), body.clone()).await;
    assert_error(status, &answer, 409, "lease_lost", "a forged lease");
    let (status, answer) = leased(
        &server,
        &complete,
        Some(&lease),
        json!({"output": "x", "steps": [{"model_output": "fine"}, {"kind": "nonsense"}]}),
    )
    .await;
    assert_error(status, &answer, 400, "invalid_request", "a bad step");
    assert_eq!(answer["error"]["field"], "steps[1].kind");
    let (status, answer) = leased(
        &server,
        &complete,
        Some(&lease),
        json!({"output": "x", "steps": []}),
    )
    .await;
    assert_error(status, &answer, 400, "invalid_request", "no steps");
    assert_eq!(step_count(&server, &execution).await, 0);
    assert_eq!(server.execution(&execution).await["status"], "running");

    // The owner: the step is saved and the execution completes, in one request.
    let (status, done) = leased(&server, &complete, Some(&lease), body.clone()).await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["status"], "completed");
    assert_eq!(done["step_count"], 1);
    assert_eq!(done["output"], "Echo: Ada");
    let (_, steps) = server
        .get(&format!("/v1/executions/{execution}/steps"))
        .await;
    let steps = steps["items"].as_array().unwrap();
    assert_eq!(steps.len(), 1);
    assert_eq!(steps[0]["step_number"], 1);
    assert_eq!(steps[0]["observations"], "Ada");
    let (_, snapshots) = server
        .get(&format!("/v1/executions/{execution}/snapshots"))
        .await;
    let last = snapshots["items"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["is_final"], true);
    assert_eq!(last["step_number"], 1, "{last}");

    // Told as a step and then a completion: the step's events before execution.completed,
    // its status line and the answer as messages.
    let mut events = server.events(&session, None).await;
    let seen: Vec<String> = events
        .until("execution.completed")
        .await
        .into_iter()
        .map(|e| e.event)
        .filter(|e| e.starts_with("step.") || e.starts_with("tool.") || e == "execution.completed")
        .collect();
    assert_eq!(
        seen,
        [
            "step.started",
            "tool.called",
            "tool.completed",
            "step.completed",
            "execution.completed"
        ]
    );
    let messages = server.messages(&session).await;
    let contents: Vec<&str> = messages
        .iter()
        .map(|m| m["content"].as_str().unwrap_or_default())
        .collect();
    assert!(
        contents.contains(&"Step 1: called echo · Echoing"),
        "{contents:?}"
    );
    assert_eq!(contents.last(), Some(&"Echo: Ada"), "{contents:?}");

    // Sent again (a retry after a lost answer): the lease ended with the execution.
    let (status, answer) = leased(&server, &complete, Some(&lease), body).await;
    assert_error(status, &answer, 409, "lease_lost", "after completing");
    assert_eq!(step_count(&server, &execution).await, 1);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_workers_complete_with_steps_is_fenced_and_writes_nothing() {
    let server = TestServer::start().await; // 5 s leases
    let (_, execution) = message_for(&server, "echo", "Ada").await;
    let first = claim(&server, "echo", 1, 0.0).await.remove(0);
    let old = text(&first, "lease");
    // The first worker freezes past its lease; another claim takes the execution over.
    let second = wait_for(|| async {
        let mut claims = claim(&server, "echo", 1, 1.0).await;
        (!claims.is_empty()).then(|| claims.remove(0))
    })
    .await;
    assert_eq!(second["attempt"], 2);
    let new = text(&second, "lease");
    let complete = format!("/v1/executions/{execution}/complete");

    // The old worker wakes and sends its step with its answer: refused, nothing written.
    let (status, answer) = leased(
        &server,
        &complete,
        Some(&old),
        json!({"output": "old", "steps": [{"model_output": "from the old worker"}]}),
    )
    .await;
    assert_error(status, &answer, 409, "lease_lost", "the old lease");
    assert_eq!(step_count(&server, &execution).await, 0);
    let now = server.execution(&execution).await;
    assert_eq!(now["status"], "running");
    assert_eq!(now["output"], Value::Null);

    // The new owner's step and answer.
    let (status, done) = leased(
        &server,
        &complete,
        Some(&new),
        json!({"output": "new", "steps": [{"model_output": "from the new worker"}]}),
    )
    .await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["status"], "completed");
    assert_eq!(done["output"], "new");
    let (_, steps) = server
        .get(&format!("/v1/executions/{execution}/steps"))
        .await;
    let outputs: Vec<&str> = steps["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["model_output"].as_str().unwrap())
        .collect();
    assert_eq!(outputs, ["from the new worker"]);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_of_several_executions_hands_each_its_own_session_memory_and_steps() {
    let server = TestServer::start().await;
    // Three sessions, each with a first execution whose step names its session.
    let mut sessions = Vec::new();
    for name in ["ada", "grace", "linus"] {
        let (session, execution) = message_for(&server, "greeter", name).await;
        let c = claim(&server, "greeter", 1, 0.0).await.remove(0);
        assert_eq!(c["execution"]["id"], json!(execution));
        let body = json!({"output": format!("hello {name}"),
            "steps": [{"step_number": 1, "model_output": "Greeting", "observations": format!("memory of {name}")}]});
        let complete = format!("/v1/executions/{execution}/complete");
        let (status, done) = leased(&server, &complete, Some(&text(&c, "lease")), body).await;
        assert_eq!(status, 200, "{done}");
        sessions.push((name, session));
    }
    // A second message in each, claimed in one request.
    let mut second = std::collections::HashMap::new();
    for (name, session) in &sessions {
        let (status, body) = server
            .post(
                &format!("/v1/sessions/{session}/messages"),
                json!({"content": format!("again {name}"),
                       "agent": {"type": "greeter", "wait": true}}),
            )
            .await;
        assert_eq!(status, 202, "{body}");
        second.insert(
            body["execution"]["id"].as_str().unwrap().to_string(),
            (*name, session.clone()),
        );
    }
    let claims = claim(&server, "greeter", 5, 0.0).await;
    assert_eq!(claims.len(), 3, "{claims:?}");
    for c in &claims {
        let id = c["execution"]["id"].as_str().unwrap();
        let (name, session) = &second[id];
        assert_eq!(c["session"]["id"], json!(session), "{c}");
        assert_eq!(c["input_text"], format!("again {name}"));
        assert_eq!(c["steps"], json!([]), "{c}");
        let memory: Vec<&str> = c["memory"]["steps"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|s| s["observations"].as_str())
            .collect();
        assert_eq!(memory, [format!("memory of {name}")], "{c}");
        assert_eq!(server.execution(id).await["status"], "running");
    }
    server.stop().await;
}

/// A take-over's claim in a session with an earlier execution: `steps` are exactly the
/// execution's own saved steps, in order, and `memory` exactly the earlier execution's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_taken_over_claim_hands_its_own_steps_apart_from_the_memory_before_it() {
    let server = TestServer::start().await; // 5 s leases
    let (session, first) = message_for(&server, "coder", "plan").await;
    let c = claim(&server, "coder", 1, 0.0).await.remove(0);
    let body = json!({"output": "planned",
        "steps": [{"step_number": 1, "model_output": "earlier 1"},
                  {"step_number": 2, "model_output": "earlier 2"}]});
    let complete = format!("/v1/executions/{first}/complete");
    let (status, done) = leased(&server, &complete, Some(&text(&c, "lease")), body).await;
    assert_eq!(status, 200, "{done}");

    let (status, body) = server
        .post(
            &format!("/v1/sessions/{session}/messages"),
            json!({"content": "build", "agent": {"type": "coder", "wait": true}}),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    let second = body["execution"]["id"].as_str().unwrap().to_string();
    let c = claim(&server, "coder", 1, 0.0).await.remove(0);
    assert_eq!(c["execution"]["id"], json!(second));
    let outputs = |list: &Value| -> Vec<String> {
        list.as_array()
            .unwrap()
            .iter()
            .map(|s| s["model_output"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(outputs(&c["steps"]), Vec::<String>::new(), "{c}");
    assert_eq!(
        outputs(&c["memory"]["steps"]),
        ["earlier 1", "earlier 2"],
        "{c}"
    );
    let steps = format!("/v1/executions/{second}/steps");
    for n in 1..=3 {
        let (status, body) = leased(
            &server,
            &steps,
            Some(&text(&c, "lease")),
            json!({"step_number": n, "model_output": format!("own {n}")}),
        )
        .await;
        assert_eq!(status, 201, "{body}");
    }
    // The worker stops: after its lease, the next claim takes the execution over.
    let again = wait_for(|| async {
        let mut claims = claim(&server, "coder", 1, 1.0).await;
        (!claims.is_empty()).then(|| claims.remove(0))
    })
    .await;
    assert_eq!(again["execution"]["id"], json!(second));
    assert_eq!(again["attempt"], 2);
    assert_eq!(again["session"]["id"], json!(session));
    assert_eq!(
        outputs(&again["steps"]),
        ["own 1", "own 2", "own 3"],
        "{again}"
    );
    let numbers: Vec<u64> = again["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["step_number"].as_u64().unwrap())
        .collect();
    assert_eq!(numbers, [1, 2, 3]);
    assert_eq!(
        outputs(&again["memory"]["steps"]),
        ["earlier 1", "earlier 2"],
        "{again}"
    );
    server.stop().await;
}

/// An execution completed with `complete` and steps: its steps' bodies in order, one final
/// snapshot at the last step, each step told once before `execution.completed`, the status
/// lines in order and the answer last.
async fn completed_with_steps(
    server: &TestServer,
    session: &str,
    execution: &str,
    outputs: &[&str],
    answer: &str,
) {
    assert_eq!(server.execution(execution).await["status"], "completed");
    let (_, steps) = server
        .get(&format!("/v1/executions/{execution}/steps"))
        .await;
    let stored: Vec<&str> = steps["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["model_output"].as_str().unwrap())
        .collect();
    assert_eq!(stored, outputs);
    let (_, snapshots) = server
        .get(&format!("/v1/executions/{execution}/snapshots"))
        .await;
    let finals: Vec<&Value> = snapshots["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["is_final"] == true)
        .collect();
    assert_eq!(finals.len(), 1, "{snapshots}");
    assert_eq!(finals[0]["step_number"], outputs.len());
    let mut events = server.events(session, None).await;
    let told: Vec<String> = events
        .until("execution.completed")
        .await
        .into_iter()
        .filter(|e| e.event == "step.completed" || e.event == "execution.completed")
        .map(|e| e.event)
        .collect();
    let mut expected = vec!["step.completed"; outputs.len()];
    expected.push("execution.completed");
    assert_eq!(told, expected);
    let messages = server.messages(session).await;
    let contents: Vec<&str> = messages
        .iter()
        .map(|m| m["content"].as_str().unwrap_or_default())
        .collect();
    let lines: Vec<&str> = contents
        .iter()
        .copied()
        .filter(|c| c.starts_with("Step "))
        .collect();
    let expected: Vec<String> = outputs
        .iter()
        .enumerate()
        .map(|(k, output)| format!("Step {}: {output}", k + 1))
        .collect();
    assert_eq!(lines, expected, "{contents:?}");
    assert_eq!(contents.last(), Some(&answer), "{contents:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn complete_with_steps_new_or_already_stored_saves_each_once_and_tells_them_before_the_end() {
    let server = TestServer::start().await;

    // Steps the execution has not stored: saved, told and completed together.
    let (session, execution) = message_for(&server, "closer", "go").await;
    let c = claim(&server, "closer", 1, 0.0).await.remove(0);
    let (status, done) = leased(
        &server,
        &format!("/v1/executions/{execution}/complete"),
        Some(&text(&c, "lease")),
        json!({"output": "ok", "final_message": "Both done",
               "steps": [{"model_output": "one"}, {"model_output": "two"}]}),
    )
    .await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["status"], "completed");
    assert_eq!(done["step_count"], 2);
    completed_with_steps(&server, &session, &execution, &["one", "two"], "Both done").await;

    // A stored step among them.
    let (session, execution) = message_for(&server, "closer", "go again").await;
    let c = claim(&server, "closer", 1, 0.0).await.remove(0);
    let lease = text(&c, "lease");
    let (status, body) = leased(
        &server,
        &format!("/v1/executions/{execution}/steps"),
        Some(&lease),
        json!({"step_number": 1, "model_output": "first"}),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let complete = format!("/v1/executions/{execution}/complete");
    // Another body at the stored number: 409, and the execution still runs.
    let (status, body) = leased(
        &server,
        &complete,
        Some(&lease),
        json!({"output": "x", "steps": [{"step_number": 1, "model_output": "changed"}]}),
    )
    .await;
    assert_error(
        status,
        &body,
        409,
        "conflict",
        "another body at a stored step",
    );
    assert_eq!(server.execution(&execution).await["status"], "running");
    // The stored step again (a retry after a lost answer) with two new ones: each saved
    // once, and the execution completes.
    let (status, done) = leased(
        &server,
        &complete,
        Some(&lease),
        json!({"output": "all done", "final_message": "All done", "steps": [
            {"step_number": 1, "model_output": "first"},
            {"step_number": 2, "model_output": "second"},
            {"model_output": "third"}]}),
    )
    .await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["step_count"], 3);
    completed_with_steps(
        &server,
        &session,
        &execution,
        &["first", "second", "third"],
        "All done",
    )
    .await;
    server.stop().await;
}
