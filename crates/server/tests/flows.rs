//! End-to-end flows over real HTTP on loopback: message → events → completion, pause and
//! resume, cancel, queueing, SSE reconnects, subagents, debug snapshots, panics.

mod common;

use std::time::Duration;

use common::{Options, TestServer, wait_for};
use serde_json::{Value, json};
use stepwise_engine::{Agent, AgentContext, AgentError, BoxFuture, Decision};
use stepwise_store::prelude::*;

fn kinds(events: &[common::SseEvent]) -> Vec<String> {
    events.iter().map(|e| e.event.clone()).collect()
}

fn contents(messages: &[Value]) -> Vec<(String, String)> {
    messages
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap_or_default().to_string(),
                m["content"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_streams_every_step_and_completes_with_the_answer() {
    let server = TestServer::start().await;
    let (session, execution) = server.message("2+3*4").await;

    let mut stream = server.events(&session, None).await;
    let events = stream.until("execution.completed").await;
    let types = kinds(&events);
    for expected in [
        "message.created",
        "execution.queued",
        "execution.started",
        "step.started",
        "tool.called",
        "tool.completed",
        "step.completed",
        "execution.completed",
    ] {
        assert!(
            types.contains(&expected.to_string()),
            "missing {expected} in {types:?}"
        );
    }
    let ids: Vec<i64> = events.iter().map(|e| e.id.unwrap_or(-1)).collect();
    assert_eq!(
        ids,
        (1..=ids.len() as i64).collect::<Vec<_>>(),
        "event ids start at 1 and increase by one"
    );
    let last = events.last().map(|e| e.data.clone()).unwrap_or_default();
    assert_eq!(last["execution_id"], json!(execution));
    assert_eq!(last["content"], json!("14"));
    let tool = events
        .iter()
        .find(|e| e.event == "tool.called")
        .map(|e| e.data.clone())
        .unwrap_or_default();
    assert_eq!(tool["metadata"]["tool"], json!("calculator"));
    assert_eq!(tool["metadata"]["step_number"], json!(1));

    let done = server.wait_status(&execution, &["completed"]).await;
    assert_eq!(done["output"], json!("14"));
    assert_eq!(done["step_count"], json!(2));
    assert!(done["completed_at"].is_string());

    let messages = contents(&server.messages(&session).await);
    assert_eq!(messages[0], ("user".into(), "2+3*4".into()));
    assert!(messages.contains(&("info".into(), "Execution queued".into())));
    assert!(messages.contains(&("info".into(), "Execution started".into())));
    assert!(messages.contains(&("info".into(), "Step 1: called calculator".into())));
    assert_eq!(messages.last(), Some(&("assistant".into(), "14".into())));

    let (_, steps) = server
        .get(&format!("/v1/executions/{execution}/steps"))
        .await;
    let steps = steps["items"].as_array().cloned().unwrap_or_default();
    assert_eq!(steps.len(), 2);
    assert_eq!(steps[0]["kind"], json!("action"));
    assert_eq!(
        steps[0]["tool_calls"][0]["arguments"],
        json!({"expression": "2+3*4"})
    );
    assert_eq!(steps[0]["observations"], json!("14"));
    assert_eq!(steps[1]["kind"], json!("final_answer"));

    let (_, snapshots) = server
        .get(&format!("/v1/executions/{execution}/snapshots"))
        .await;
    let snapshots = snapshots["items"].as_array().cloned().unwrap_or_default();
    let last = snapshots.last().cloned().unwrap_or_default();
    assert_eq!(last["is_final"], json!(true));
    assert_eq!(last["state"], Value::Null, "lists leave the state out");
    let (status, full) = server
        .get(&format!(
            "/v1/snapshots/{}",
            last["id"].as_str().unwrap_or_default()
        ))
        .await;
    assert_eq!(status, 200);
    assert_eq!(full["state"]["status"], json!("completed"));

    let (_, memory) = server.get(&format!("/v1/sessions/{session}/memory")).await;
    assert_eq!(memory["restored"], json!("full"));
    assert_eq!(memory["steps"].as_array().map(Vec::len), Some(2));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_input_pauses_and_the_next_message_resumes_the_same_execution() {
    let server = TestServer::start().await;
    let (session, execution) = server.message("Please ask me something").await;
    let paused = server.wait_status(&execution, &["paused"]).await;
    assert!(
        paused["last_snapshot_id"].is_string(),
        "a snapshot is saved on pause"
    );
    let messages = contents(&server.messages(&session).await);
    assert_eq!(
        messages.last(),
        Some(&("assistant".into(), "What should I use?".into()))
    );

    let answer = server.message_to(&session, "the blue one").await;
    assert_eq!(
        answer["execution"]["id"],
        json!(execution),
        "the answer resumes the paused execution"
    );
    let done = server.wait_status(&execution, &["completed"]).await;
    assert_eq!(done["output"], json!("You said: the blue one"));
    let messages = contents(&server.messages(&session).await);
    assert_eq!(
        messages.last(),
        Some(&("assistant".into(), "You said: the blue one".into()))
    );
    let resumed_lines = messages
        .iter()
        .filter(|(role, text)| role == "info" && text == "Execution resumed")
        .count();
    assert_eq!(
        resumed_lines, 1,
        "one status line for the resume: {messages:?}"
    );

    let mut stream = server.events(&session, None).await;
    let events = stream.until("execution.completed").await;
    assert!(kinds(&events).contains(&"execution.paused".to_string()));
    let (_, executions) = server
        .get(&format!("/v1/sessions/{session}/executions"))
        .await;
    assert_eq!(executions["items"].as_array().map(Vec::len), Some(1));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_stops_running_and_pending_executions_and_finished_ones_conflict() {
    let server = TestServer::start_with(Options {
        step_ms: 20,
        ..Options::default()
    })
    .await;
    let (session, running) = server.message("steps: 1000").await;
    let queued = server.message_to(&session, "hello").await;
    let queued = queued["execution"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    wait_for(|| async {
        (server.execution(&running).await["step_count"]
            .as_u64()
            .unwrap_or(0)
            >= 2)
            .then_some(())
    })
    .await;

    // The queued one is cancelled at once.
    let (status, body) = server
        .post(&format!("/v1/executions/{queued}/cancel"), json!({}))
        .await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["status"], json!("cancelled"));

    let (status, _) = server
        .post(&format!("/v1/executions/{running}/cancel"), json!({}))
        .await;
    assert_eq!(status, 202);
    let cancelled = server.wait_status(&running, &["cancelled"]).await;
    assert!(cancelled["step_count"].as_u64().unwrap_or(1000) < 1000);
    assert!(cancelled["completed_at"].is_string());

    let (status, body) = server
        .post(&format!("/v1/executions/{running}/cancel"), json!({}))
        .await;
    assert_eq!(status, 409);
    assert_eq!(body["error"]["code"], json!("conflict"));

    let (_, snapshots) = server
        .get(&format!("/v1/executions/{running}/snapshots"))
        .await;
    assert!(
        snapshots["items"]
            .as_array()
            .is_some_and(|s| s.iter().any(|s| s["is_final"] == json!(true)))
    );
    let mut stream = server.events(&session, None).await;
    let events = stream.until("execution.cancelled").await;
    assert!(!events.is_empty());

    // The session takes new work afterwards.
    let next = server.message_to(&session, "hi again").await;
    let next = next["execution"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert_eq!(
        server.wait_status(&next, &["completed"]).await["output"],
        json!("Echo: hi again")
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_queued_on_one_session_run_one_after_the_other() {
    let server = TestServer::start_with(Options {
        step_ms: 10,
        ..Options::default()
    })
    .await;
    let (session, first) = server.message("steps: 5").await;
    let second = server.message_to(&session, "hello").await;
    assert_eq!(second["execution"]["status"], json!("pending"));
    let second = second["execution"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let first = server.wait_status(&first, &["completed"]).await;
    let second = server.wait_status(&second, &["completed"]).await;
    assert!(
        second["started_at"].as_str() >= first["completed_at"].as_str(),
        "the second starts after the first finished"
    );
    let answers: Vec<String> = contents(&server.messages(&session).await)
        .into_iter()
        .filter(|(role, _)| role == "assistant")
        .map(|(_, content)| content)
        .collect();
    assert_eq!(
        answers,
        vec!["Done: 5 steps".to_string(), "Echo: hello".to_string()]
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconnecting_mid_run_gives_exactly_what_a_full_replay_gives() {
    let server = TestServer::start_with(Options {
        step_ms: 15,
        ..Options::default()
    })
    .await;
    let (session, _) = server.message("steps: 30").await;

    // Read part of the run live, drop the connection, reconnect from the last id seen.
    let mut first = server.events(&session, None).await;
    let mut seen = Vec::new();
    while seen.len() < 25 {
        seen.push(first.next().await.expect("an event"));
    }
    drop(first);
    let last = seen.last().and_then(|e| e.id).expect("an id");
    let mut second = server.events(&session, Some(last)).await;
    seen.extend(second.until("execution.completed").await);

    let mut replay = server.events(&session, None).await;
    let full = replay.until("execution.completed").await;
    assert_eq!(seen, full, "no gap and no duplicate across the reconnect");

    // `?after=` works like Last-Event-ID.
    let response = server
        .client
        .get(server.url(&format!(
            "/v1/sessions/{session}/events?after={}",
            full.len() - 1
        )))
        .send()
        .await
        .expect("request");
    let mut tail = common::SseReader::new(response);
    assert_eq!(tail.next().await, full.last().cloned());
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subagents_run_as_child_executions_with_linked_snapshots() {
    let server = TestServer::start().await;
    let (session, parent) = server.message("delegate: 6*7").await;
    let done = server.wait_status(&parent, &["completed"]).await;
    assert_eq!(done["output"], json!("42"));
    let (_, executions) = server
        .get(&format!("/v1/sessions/{session}/executions"))
        .await;
    let executions = executions["items"].as_array().cloned().unwrap_or_default();
    let child = executions
        .iter()
        .find(|e| e["parent_execution_id"] == json!(parent))
        .cloned()
        .expect("a child execution");
    assert_eq!(child["session_id"], json!(session));
    assert_eq!(child["status"], json!("completed"));
    assert_eq!(child["output"], json!("42"));

    let (_, parent_snapshots) = server
        .get(&format!("/v1/executions/{parent}/snapshots"))
        .await;
    let parent_ids: Vec<Value> = parent_snapshots["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|s| s["id"].clone())
        .collect();
    let (_, child_snapshots) = server
        .get(&format!(
            "/v1/executions/{}/snapshots",
            child["id"].as_str().unwrap_or_default()
        ))
        .await;
    let child_snapshots = child_snapshots["items"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(!child_snapshots.is_empty());
    for snapshot in child_snapshots {
        assert!(
            parent_ids.contains(&snapshot["parent_snapshot_id"]),
            "child snapshots point to the parent's"
        );
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debug_mode_saves_a_snapshot_per_step_and_failures_are_saved() {
    let server = TestServer::start().await;
    let (status, body) = server
        .post(
            "/v1/messages",
            json!({"content": "steps: 3", "agent": {"type": "demo", "config": {"debug": true}}}),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    let execution = body["execution"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    server.wait_status(&execution, &["completed"]).await;
    let (_, snapshots) = server
        .get(&format!("/v1/executions/{execution}/snapshots"))
        .await;
    let snapshots = snapshots["items"].as_array().cloned().unwrap_or_default();
    assert_eq!(
        snapshots
            .iter()
            .filter(|s| s["is_final"] == json!(false))
            .count(),
        3
    );
    assert_eq!(
        snapshots
            .iter()
            .filter(|s| s["is_final"] == json!(true))
            .count(),
        1
    );
    assert!(snapshots.iter().all(|s| s["debug_mode"] == json!(true)));

    let (_, failing) = server.message("this should fail").await;
    let failed = server.wait_status(&failing, &["failed"]).await;
    assert_eq!(failed["error_message"], json!("division by zero"));
    let (_, steps) = server.get(&format!("/v1/executions/{failing}/steps")).await;
    assert_eq!(
        steps["items"][0]["error"]["message"],
        json!("division by zero")
    );
    server.stop().await;
}

struct PanickingAgent;

impl Agent for PanickingAgent {
    fn next_step<'a>(
        &'a self,
        ctx: &'a AgentContext,
    ) -> BoxFuture<'a, Result<Decision, AgentError>> {
        Box::pin(async move {
            if ctx.input_text().contains("boom") {
                panic!("the agent exploded");
            }
            Ok(Decision::finish("fine"))
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_agent_fails_its_execution_and_the_worker_keeps_working() {
    let register: Box<dyn FnOnce(&mut stepwise_engine::AgentRegistry)> = Box::new(|agents| {
        agents.register("panicky", PanickingAgent);
    });
    let server = TestServer::start_with(Options {
        register: Some(register),
        ..Options::default()
    })
    .await;
    let mut ids = Vec::new();
    for _ in 0..6 {
        let (status, body) = server
            .post(
                "/v1/messages",
                json!({"content": "boom", "agent": {"type": "panicky"}}),
            )
            .await;
        assert_eq!(status, 202);
        ids.push(
            body["execution"]["id"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        );
    }
    for id in &ids {
        let failed = server.wait_status(id, &["failed"]).await;
        assert!(
            failed["error_message"]
                .as_str()
                .unwrap_or_default()
                .contains("the agent exploded"),
            "{failed}"
        );
        let (_, steps) = server.get(&format!("/v1/executions/{id}/steps")).await;
        assert_eq!(steps["items"][0]["error"]["kind"], json!("panic"));
    }
    let (_, fine) = server.message("all good").await;
    assert_eq!(
        server.wait_status(&fine, &["completed"]).await["output"],
        json!("Echo: all good")
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn external_agents_drive_their_execution_over_http() {
    let server = TestServer::start().await;
    let (status, session) = server
        .post("/v1/sessions", json!({"title": "external"}))
        .await;
    assert_eq!(status, 201);
    let session = session["id"].as_str().unwrap_or_default().to_string();
    let (status, execution) = server
        .post(
            &format!("/v1/sessions/{session}/executions"),
            json!({"agent_type": "external", "input": {"task": "x"}}),
        )
        .await;
    assert_eq!(status, 201, "{execution}");
    assert_eq!(execution["status"], json!("running"));
    let id = execution["id"].as_str().unwrap_or_default().to_string();

    let step = json!({"step_number": 1, "kind": "action", "model_output": "thinking", "tool_calls": [{"id": "c1", "name": "search", "arguments": {"q": "rust"}}], "observations": "found", "token_usage": {"input": 3, "output": 4}});
    let (status, created) = server
        .post(&format!("/v1/executions/{id}/steps"), step.clone())
        .await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["step_number"], json!(1));
    let (status, again) = server
        .post(&format!("/v1/executions/{id}/steps"), step)
        .await;
    assert_eq!(status, 200, "the same step again is idempotent");
    assert_eq!(again["id"], created["id"]);
    let (status, body) = server
        .post(
            &format!("/v1/executions/{id}/steps"),
            json!({"step_number": 1, "kind": "action", "model_output": "other"}),
        )
        .await;
    assert_eq!(status, 409, "{body}");

    let (status, snapshot) = server
        .post(
            &format!("/v1/executions/{id}/snapshots"),
            json!({"state": {"memory": [1, 2]}, "step_number": 1}),
        )
        .await;
    assert_eq!(status, 201, "{snapshot}");
    let (status, done) = server
        .post(
            &format!("/v1/executions/{id}/complete"),
            json!({"output": {"answer": 42}, "final_message": "The answer is 42"}),
        )
        .await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["status"], json!("completed"));
    assert_eq!(
        done["token_usage"],
        json!({"input": 3, "output": 4, "total": 7})
    );
    let (_, steps) = server.get(&format!("/v1/executions/{id}/steps")).await;
    assert_eq!(
        steps["items"].as_array().map(Vec::len),
        Some(1),
        "the server adds no steps of its own"
    );
    let messages = contents(&server.messages(&session).await);
    assert_eq!(
        messages.last(),
        Some(&("assistant".into(), "The answer is 42".into()))
    );
    let (status, _) = server
        .post(
            &format!("/v1/executions/{id}/complete"),
            json!({"output": 1}),
        )
        .await;
    assert_eq!(status, 422);

    // A demo execution is not driven from outside.
    let (_, demo) = server.message("hello").await;
    server.wait_status(&demo, &["completed"]).await;
    let (status, body) = server
        .post(
            &format!("/v1/executions/{demo}/steps"),
            json!({"kind": "action"}),
        )
        .await;
    assert_eq!(status, 422, "{body}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_then_import_copies_a_session_with_new_ids() {
    let server = TestServer::start().await;
    let (session, execution) = server.message("2+2").await;
    server.wait_status(&execution, &["completed"]).await;
    let (status, document) = server.get(&format!("/v1/sessions/{session}/export")).await;
    assert_eq!(status, 200);
    assert_eq!(document["format_version"], json!(1));
    for key in ["session", "messages", "executions", "steps", "snapshots"] {
        assert!(!document[key].is_null(), "missing {key}");
    }
    let (status, imported) = server.post("/v1/sessions/import", document.clone()).await;
    assert_eq!(status, 201, "{imported}");
    assert_ne!(imported["id"], json!(session));
    let copied = server
        .messages(imported["id"].as_str().unwrap_or_default())
        .await;
    assert_eq!(
        contents(&copied),
        contents(&server.messages(&session).await)
    );

    // A hostile document is refused and writes nothing.
    let (_, before) = server.get("/v1/sessions?limit=500").await;
    let mut broken = document.clone();
    broken["steps"][0]["execution_id"] = json!("01a20000-0000-7000-8000-000000000000");
    let (status, body) = server.post("/v1/sessions/import", broken).await;
    assert_eq!(status, 400, "{body}");
    let mut bad_name = document.clone();
    bad_name["session"]["name"] = json!("../etc");
    assert_eq!(server.post("/v1/sessions/import", bad_name).await.0, 400);
    let mut bad_version = document;
    bad_version["format_version"] = json!(99);
    assert_eq!(server.post("/v1/sessions/import", bad_version).await.0, 400);
    let (_, after) = server.get("/v1/sessions?limit=500").await;
    assert_eq!(
        before["items"].as_array().map(Vec::len),
        after["items"].as_array().map(Vec::len)
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_streams_end_when_the_server_stops() {
    let server = TestServer::start().await;
    let (status, session) = server.post("/v1/sessions", json!({})).await;
    assert_eq!(status, 201);
    let session = session["id"].as_str().unwrap_or_default().to_string();
    let stream = server.events(&session, None).await;
    let reader = tokio::spawn(async move {
        let mut stream = stream;
        while stream.next().await.is_some() {}
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    server.stop().await;
    // The stream ends when the server stops (graceful shutdown does not hang on it).
    tokio::time::timeout(Duration::from_secs(10), reader)
        .await
        .expect("the stream ended")
        .expect("reader");
}

/// A client that stops reading while a burst of events goes out: the server cannot keep
/// the burst in memory for it (its live buffer holds a few dozen events), so once the
/// socket is full it falls behind — and then catches up from the store instead of
/// dropping the stream. When the client reads again, every event arrives, in order,
/// once, on the same connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_that_stops_reading_catches_up_without_a_gap() {
    use stepwise_core::EventType;
    use stepwise_store::{NewEvent, NewSession, Tenant};

    let server = TestServer::start().await;
    let tenant = Tenant::new(stepwise_server::LOCAL_TENANT).expect("tenant");
    let session = server
        .store
        .create_session(
            &tenant,
            NewSession {
                user_id: "u".into(),
                ..NewSession::default()
            },
        )
        .await
        .expect("session");
    let event = |n: usize| NewEvent {
        session_id: session.id,
        message_id: None,
        execution_id: None,
        event_type: EventType::StepCompleted,
        // 2 KB each: the burst (20 MB) is larger than any socket buffer on the way.
        content: format!("{n:06} {}", "x".repeat(2048)),
        metadata: json!({"step_number": n}),
    };
    server
        .store
        .append_event(&tenant, event(1))
        .await
        .expect("queue")
        .await
        .expect("durable");
    let mut stream = server.events(&session.id.to_string(), None).await;
    let first = stream.next().await.expect("the first event");
    assert_eq!(first.id, Some(1));

    // The client reads nothing while 10,000 more events are committed.
    const BURST: usize = 10_000;
    let mut last = None;
    for n in 2..=BURST + 1 {
        last = Some(
            server
                .store
                .append_event(&tenant, event(n))
                .await
                .expect("queue"),
        );
    }
    last.expect("an ack").await.expect("durable");

    for n in 2..=BURST + 1 {
        let next = stream
            .next()
            .await
            .unwrap_or_else(|| panic!("the stream ended before event {n}"));
        assert_eq!(next.id, Some(n as i64), "no gap, no duplicate");
        assert!(
            next.data["content"]
                .as_str()
                .is_some_and(|c| c.starts_with(&format!("{n:06} "))),
            "event {n} carries its own content"
        );
    }
    server.stop().await;
}

/// A recorder (an app recording its own agent) that stops renewing its lease: the server
/// fails its execution, keeps its steps, runs the message queued behind it, and refuses the
/// recorder's late writes; one opened with `lease: false` stays running as before leases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recorder_that_stops_renewing_its_lease_no_longer_blocks_its_session() {
    let server = TestServer::start().await; // leases of 5 s
    let (_, session) = server.post("/v1/sessions", json!({})).await;
    let session = session["id"].as_str().unwrap_or_default().to_string();
    let (status, opened) = server
        .post(
            &format!("/v1/sessions/{session}/executions"),
            json!({"agent_type": "external", "input": {"task": "x"}}),
        )
        .await;
    assert_eq!(status, 201, "{opened}");
    let lease = opened["lease"].as_str().expect("a lease").to_string();
    assert!(opened["lease_expires_at"].is_string(), "{opened}");
    let interval = opened["heartbeat_interval_s"].as_f64().expect("interval");
    assert!(interval > 0.0 && interval < 5.0, "{opened}");
    let id = opened["id"].as_str().unwrap_or_default().to_string();
    // A recorder from before leases, in another session: it never sends the lease.
    let (_, third) = server.post("/v1/sessions", json!({})).await;
    let (_, old_client) = server
        .post(
            &format!(
                "/v1/sessions/{}/executions",
                third["id"].as_str().unwrap_or_default()
            ),
            json!({"agent_type": "external"}),
        )
        .await;
    let old_id = old_client["id"].as_str().unwrap_or_default().to_string();

    let step =
        |n: u32| json!({"step_number": n, "kind": "action", "model_output": format!("step {n}")});
    let post_step = |n: u32, lease: Option<&str>| {
        let request = server
            .client
            .post(server.url(&format!("/v1/executions/{id}/steps")))
            .json(&step(n));
        match lease {
            Some(lease) => request.header("Stepwise-Lease", lease),
            None => request,
        }
    };
    assert_eq!(server.send(post_step(1, Some(&lease))).await.0, 201);
    let beat = |lease: &str| {
        server
            .client
            .post(server.url(&format!("/v1/executions/{id}/heartbeat")))
            .json(&json!({"lease": lease}))
    };
    let (status, renewed) = server.send(beat(&lease)).await;
    assert_eq!(status, 200, "{renewed}");
    assert_eq!(renewed["cancel_requested"], json!(false));
    let (status, forged) = server.send(beat("not-the-lease")).await;
    assert_eq!(status, 409, "{forged}");

    // An unleased recorder beside it, in another session: held running as before.
    let (_, other) = server.post("/v1/sessions", json!({})).await;
    let (status, unleased) = server
        .post(
            &format!(
                "/v1/sessions/{}/executions",
                other["id"].as_str().unwrap_or_default()
            ),
            json!({"agent_type": "external", "lease": false}),
        )
        .await;
    assert_eq!(status, 201, "{unleased}");
    assert_eq!(unleased["lease"], Value::Null);
    assert_eq!(unleased["heartbeat_interval_s"], Value::Null);
    assert_eq!(unleased["lease_expires_at"], Value::Null);

    // A message queued behind the recorder waits while it lives...
    let queued = server.message_to(&session, "after the recorder").await;
    let queued = queued["execution"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert_eq!(server.execution(&queued).await["status"], json!("pending"));

    // ...and runs once the recorder stops renewing (it died). Meanwhile the recorder from
    // before leases (opened first: unrenewed, its lease would run out first) keeps its
    // execution alive by writing without the header.
    let mut old_steps = 0;
    let failed = wait_for(|| {
        old_steps += 1;
        let (server, old_id, id, n) = (&server, old_id.clone(), id.clone(), old_steps);
        async move {
            let (status, _) = server
                .post(
                    &format!("/v1/executions/{old_id}/steps"),
                    json!({"step_number": n, "kind": "action"}),
                )
                .await;
            assert_eq!(status, 201, "a write without the header renews the lease");
            tokio::time::sleep(Duration::from_millis(500)).await;
            let execution = server.execution(&id).await;
            (execution["status"] == json!("failed")).then_some(execution)
        }
    })
    .await;
    assert_eq!(server.execution(&old_id).await["status"], json!("running"));
    let reason = failed["error_message"].as_str().unwrap_or_default();
    assert!(reason.contains("recorder stopped"), "{failed}");
    let (_, steps) = server.get(&format!("/v1/executions/{id}/steps")).await;
    assert_eq!(
        steps["items"].as_array().map(Vec::len),
        Some(1),
        "its saved step is kept"
    );
    server.wait_status(&queued, &["completed"]).await;

    // The recorder coming back is told its lease is gone and writes nothing.
    let (status, late) = server.send(post_step(2, Some(&lease))).await;
    assert_eq!(status, 409, "{late}");
    assert_eq!(late["error"]["code"], json!("lease_lost"));
    let (status, _) = server.send(beat(&lease)).await;
    assert_eq!(status, 409);
    let (_, steps) = server.get(&format!("/v1/executions/{id}/steps")).await;
    assert_eq!(steps["items"].as_array().map(Vec::len), Some(1));

    // The unleased one outlived the lease: still running, still writable.
    let unleased_id = unleased["id"].as_str().unwrap_or_default();
    assert_eq!(
        server.execution(unleased_id).await["status"],
        json!("running")
    );
    let (status, _) = server
        .post(&format!("/v1/executions/{unleased_id}/steps"), step(1))
        .await;
    assert_eq!(status, 201);
    server.stop().await;
}
