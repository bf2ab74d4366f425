//! A message to a busy session (`on_busy`: enqueue, reject, interrupt, rollback) and forks
//! (`POST /v1/sessions/{id}/fork`), against a real node over HTTP.

mod common;

use common::{Options, TestServer, wait_for};
use serde_json::{Value, json};

/// A node whose demo agent takes 100 ms a step: `steps: 200` runs for 20 s.
async fn slow_server() -> TestServer {
    TestServer::start_with(Options {
        step_ms: 100,
        ..Options::default()
    })
    .await
}

/// A session whose first execution is running (`steps: 200`): (session, execution).
async fn busy_session(server: &TestServer) -> (String, String) {
    let (session, execution) = server.message("steps: 200").await;
    server.wait_status(&execution, &["running"]).await;
    wait_for(|| async {
        let (_, steps) = server
            .get(&format!("/v1/executions/{execution}/steps"))
            .await;
        (steps["items"].as_array().map_or(0, Vec::len) >= 1).then_some(())
    })
    .await;
    (session, execution)
}

async fn post_on_busy(
    server: &TestServer,
    session: &str,
    content: &str,
    on_busy: &str,
) -> (u16, Value) {
    server
        .post(
            &format!("/v1/sessions/{session}/messages"),
            json!({"content": content, "on_busy": on_busy}),
        )
        .await
}

fn contents(messages: &[Value], role: &str) -> Vec<String> {
    messages
        .iter()
        .filter(|m| m["role"] == role)
        .map(|m| m["content"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reject_answers_409_while_busy_and_202_once_the_session_is_idle() {
    let server = slow_server().await;
    let (session, execution) = busy_session(&server).await;

    let (status, body) = post_on_busy(&server, &session, "2+2", "reject").await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["code"], "session_busy");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains(&execution),
        "{body}"
    );
    // Nothing was written, and the running execution goes on.
    assert!(!contents(&server.messages(&session).await, "user").contains(&"2+2".to_string()));
    assert_eq!(server.execution(&execution).await["status"], "running");

    // Once it is over, the same message is taken.
    let (status, _) = server
        .post(&format!("/v1/executions/{execution}/cancel"), json!({}))
        .await;
    assert_eq!(status, 202);
    server.wait_status(&execution, &["cancelled"]).await;
    let (status, body) = post_on_busy(&server, &session, "2+2", "reject").await;
    assert_eq!(status, 202, "{body}");
    let next = body["execution"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let done = server.wait_status(&next, &["completed"]).await;
    assert_eq!(done["output"], json!("4"), "{done}");
    server.stop().await;
}

/// Rejects sent at the same instant to an idle session: the check and the write are one
/// step of the store, so exactly one is queued and the others find it busy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_rejects_at_the_same_instant_exactly_one_is_queued() {
    let server = slow_server().await;
    let (status, created) = server.post("/v1/sessions", json!({})).await;
    assert_eq!(status, 201, "{created}");
    let session = created["id"].as_str().unwrap_or_default().to_string();

    let posts = (0..8).map(|n| {
        let (server, session) = (&server, &session);
        async move { post_on_busy(server, session, &format!("steps: 50 #{n}"), "reject").await }
    });
    let answers = futures_util::future::join_all(posts).await;
    let accepted: Vec<&Value> = answers
        .iter()
        .filter(|(status, _)| *status == 202)
        .map(|(_, body)| body)
        .collect();
    assert_eq!(accepted.len(), 1, "{answers:?}");
    for (status, body) in answers.iter().filter(|(status, _)| *status != 202) {
        assert_eq!(*status, 409, "{body}");
        assert_eq!(body["error"]["code"], "session_busy", "{body}");
    }
    // One user message, one execution: the refused wrote nothing.
    assert_eq!(contents(&server.messages(&session).await, "user").len(), 1);
    let (_, executions) = server
        .get(&format!("/v1/sessions/{session}/executions"))
        .await;
    assert_eq!(
        executions["items"].as_array().map_or(0, Vec::len),
        1,
        "{executions}"
    );

    let execution = accepted[0]["execution"]["id"].as_str().unwrap_or_default();
    let (status, _) = server
        .post(&format!("/v1/executions/{execution}/cancel"), json!({}))
        .await;
    assert_eq!(status, 202);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interrupt_cancels_the_running_execution_and_keeps_both() {
    let server = slow_server().await;
    let (session, first) = busy_session(&server).await;

    let (status, body) = post_on_busy(&server, &session, "3*3", "interrupt").await;
    assert_eq!(status, 202, "{body}");
    let second = body["execution"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let cancelled = server.wait_status(&first, &["cancelled"]).await;
    assert!(cancelled["step_count"].as_u64().unwrap_or_default() >= 1);
    server.wait_status(&second, &["completed"]).await;

    let messages = server.messages(&session).await;
    assert_eq!(contents(&messages, "user"), vec!["steps: 200", "3*3"]);
    assert!(
        contents(&messages, "assistant")
            .iter()
            .any(|m| m.contains('9')),
        "{messages:?}"
    );
    let (_, steps) = server.get(&format!("/v1/executions/{first}/steps")).await;
    assert!(
        !steps["items"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .is_empty()
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollback_removes_the_running_execution_and_all_it_wrote() {
    let server = slow_server().await;
    let (session, earlier) = server.message("1+1").await;
    server.wait_status(&earlier, &["completed"]).await;
    let (status, body) = post_on_busy(&server, &session, "steps: 200", "enqueue").await;
    assert_eq!(status, 202, "{body}");
    let running = body["execution"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    server.wait_status(&running, &["running"]).await;
    // A second message queued behind it goes too.
    let queued = server.message_to(&session, "steps: 100").await["execution"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_string();

    let (status, body) = post_on_busy(&server, &session, "5+5", "rollback").await;
    assert_eq!(status, 202, "{body}");
    let new = body["execution"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    server.wait_status(&new, &["completed"]).await;

    for gone in [&running, &queued] {
        let (status, _) = server.get(&format!("/v1/executions/{gone}")).await;
        assert_eq!(status, 404, "execution {gone} was rolled back");
        let (status, _) = server.get(&format!("/v1/executions/{gone}/steps")).await;
        assert_eq!(status, 404);
    }
    let messages = server.messages(&session).await;
    assert_eq!(contents(&messages, "user"), vec!["1+1", "5+5"]);
    assert!(messages.iter().all(|m| m["execution_id"] != json!(running)));
    let (_, listed) = server
        .get(&format!("/v1/sessions/{session}/executions"))
        .await;
    let ids: Vec<&str> = listed["items"]
        .as_array()
        .map(|items| items.iter().filter_map(|e| e["id"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(ids, vec![earlier.as_str(), new.as_str()]);
    let (_, got) = server.get(&format!("/v1/sessions/{session}")).await;
    assert_eq!(got["message_count"], json!(messages.len()), "{got}");
    assert_eq!(got["last_execution_id"], json!(new));
    // The replayed events carry nothing of the removed executions.
    let mut events = server.events(&session, Some(0)).await;
    let mut replay = Vec::new();
    while let Some(event) = events.next().await {
        let last = event.event == "execution.completed" && event.data["execution_id"] == json!(new);
        replay.push(event);
        if last {
            break;
        }
    }
    assert!(
        replay
            .iter()
            .any(|e| e.data["execution_id"] == json!(earlier))
    );
    assert!(
        replay
            .iter()
            .all(|e| e.data["execution_id"] != json!(running)
                && e.data["execution_id"] != json!(queued)),
        "{replay:?}"
    );
    // The agent memory restores without them.
    let (_, memory) = server.get(&format!("/v1/sessions/{session}/memory")).await;
    let text = memory.to_string();
    assert!(!text.contains("Step 1 of 200"), "{text}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_busy_is_checked_and_enqueue_is_the_default() {
    let server = slow_server().await;
    let (session, first) = busy_session(&server).await;
    let (status, body) = post_on_busy(&server, &session, "2+2", "later").await;
    assert_eq!(status, 400, "{body}");
    let second = server.message_to(&session, "2+2").await["execution"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert_eq!(server.execution(&second).await["status"], "pending");
    assert_eq!(server.execution(&first).await["status"], "running");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_holds_the_session_up_to_its_point_and_leaves_the_original() {
    let server = TestServer::start().await;
    let (session, first) = server.message("steps: 3").await;
    server.wait_status(&first, &["completed"]).await;
    let second = server.message_to(&session, "steps: 4").await["execution"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    server.wait_status(&second, &["completed"]).await;
    let original = server.messages(&session).await;

    // The whole session (no body), under a name.
    let fork = |body: Option<Value>| {
        let request = server
            .client
            .post(server.url(&format!("/v1/sessions/{session}/fork")));
        let request = match body {
            Some(body) => request.json(&body),
            None => request,
        };
        server.send(request)
    };
    let (status, whole) = fork(None).await;
    assert_eq!(status, 201, "{whole}");
    let (status, nulled) = fork(Some(Value::Null)).await;
    assert_eq!(
        status, 201,
        "a null body forks the whole session too: {nulled}"
    );
    assert_ne!(whole["id"], json!(session));
    let copied = server
        .messages(whole["id"].as_str().unwrap_or_default())
        .await;
    assert_eq!(
        copied.iter().map(|m| &m["content"]).collect::<Vec<_>>(),
        original.iter().map(|m| &m["content"]).collect::<Vec<_>>()
    );

    // After the first execution: its messages only.
    let (status, after_first) =
        fork(Some(json!({"execution_id": first, "name": "after-first"}))).await;
    assert_eq!(status, 201, "{after_first}");
    assert_eq!(after_first["name"], "after-first");
    let forked = after_first["id"].as_str().unwrap_or_default().to_string();
    let messages = server.messages(&forked).await;
    assert_eq!(contents(&messages, "user"), vec!["steps: 3"]);
    assert_eq!(contents(&messages, "assistant"), vec!["Done: 3 steps"]);

    // At step 2 of the second: that execution cancelled there, with two steps.
    let (status, at_step) = fork(Some(json!({"execution_id": second, "step_number": 2.0}))).await;
    assert_eq!(status, 201, "{at_step}");
    let cut = at_step["id"].as_str().unwrap_or_default().to_string();
    let (_, executions) = server.get(&format!("/v1/sessions/{cut}/executions")).await;
    let executions = executions["items"].as_array().cloned().unwrap_or_default();
    assert_eq!(executions.len(), 2);
    assert_eq!(executions[0]["status"], "completed");
    assert_eq!(executions[1]["status"], "cancelled");
    let cut_execution = executions[1]["id"].as_str().unwrap_or_default();
    let (_, steps) = server
        .get(&format!("/v1/executions/{cut_execution}/steps"))
        .await;
    let numbers: Vec<u64> = steps["items"]
        .as_array()
        .map(|s| s.iter().filter_map(|s| s["step_number"].as_u64()).collect())
        .unwrap_or_default();
    assert_eq!(numbers, vec![1, 2]);
    let messages = server.messages(&cut).await;
    assert_eq!(contents(&messages, "user"), vec!["steps: 3", "steps: 4"]);
    assert_eq!(contents(&messages, "assistant"), vec!["Done: 3 steps"]);
    let (_, got) = server.get(&format!("/v1/sessions/{cut}")).await;
    assert_eq!(got["message_count"], json!(messages.len()));

    // The fork goes on by itself; the original is untouched.
    let next = server.message_to(&cut, "2+3").await["execution"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    server.wait_status(&next, &["completed"]).await;
    assert_eq!(server.messages(&session).await, original);

    // Refusals: another session's execution, a step it does not have, a bad name, a taken one.
    let (other_session, other) = server.message("1+1").await;
    server.wait_status(&other, &["completed"]).await;
    let (status, body) = fork(Some(json!({"execution_id": other}))).await;
    assert_eq!(
        (status, body["error"]["code"].clone()),
        (422, json!("invalid_state")),
        "{body}"
    );
    let (status, body) = fork(Some(json!({"execution_id": second, "step_number": 99}))).await;
    assert_eq!(
        (status, body["error"]["field"].clone()),
        (422, json!("step_number")),
        "{body}"
    );
    let (status, body) = fork(Some(json!({"execution_id": ""}))).await;
    assert_eq!(
        (status, body["error"]["field"].clone()),
        (400, json!("execution_id")),
        "{body}"
    );
    let (status, body) = fork(Some(json!({"name": "no spaces allowed"}))).await;
    assert_eq!(
        (status, body["error"]["field"].clone()),
        (400, json!("name")),
        "{body}"
    );
    let (status, body) = fork(Some(json!({"name": "after-first"}))).await;
    assert_eq!(status, 409, "{body}");
    let (status, _) = server
        .post(
            &format!("/v1/sessions/{other_session}/fork"),
            json!({"execution_id": first}),
        )
        .await;
    assert_eq!(status, 422, "an execution of another session");
    server.stop().await;
}
