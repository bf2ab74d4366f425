//! What a new user meets in the first hour (issue 38), against a real node over HTTP:
//! `?wait=S` on the message posts, `GET /v1/limits`, a 413 that names the limit, the favicon.

mod common;

use common::{Options, TestServer};
use serde_json::json;
use stepwise_server::ServerConfig;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_post_with_wait_answers_the_finished_execution_and_its_answer() {
    let server = TestServer::start().await;
    let (status, answered) = server
        .post("/v1/messages?wait=20", json!({"content": "2+3*4"}))
        .await;
    assert_eq!(status, 200, "{answered}");
    assert_eq!(answered["execution"]["status"], "completed");
    assert_eq!(answered["answer"]["role"], "assistant");
    assert_eq!(
        answered["answer"]["execution_id"],
        answered["execution"]["id"]
    );
    assert!(
        answered["answer"]["content"]
            .as_str()
            .unwrap_or("")
            .contains("14"),
        "{answered}"
    );
    let session = answered["session_id"]
        .as_str()
        .expect("session")
        .to_string();
    // The same on a session's post.
    let (status, again) = server
        .post(
            &format!("/v1/sessions/{session}/messages?wait=20"),
            json!({"content": "steps: 2"}),
        )
        .await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["session_id"], session.as_str());
    assert!(again["answer"]["content"].is_string());
    // A run that cannot end in time: 202 as without a wait (a paused one waits for its user).
    let (status, queued) = server
        .post(
            &format!("/v1/sessions/{session}/messages?wait=0.2"),
            json!({"content": "ask me"}),
        )
        .await;
    assert_eq!(status, 202, "{queued}");
    assert!(queued.get("answer").is_none());
    for bad in ["61", "-1", "soon", "NaN"] {
        let (status, error) = server
            .post(
                &format!("/v1/messages?wait={bad}"),
                json!({"content": "hi"}),
            )
            .await;
        assert_eq!(status, 400, "wait={bad}: {error}");
        assert_eq!(error["error"]["field"], "wait");
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_are_told_and_a_413_names_the_limit() {
    let server = TestServer::start_with(Options {
        server: ServerConfig {
            body_limit: 2_000,
            ..ServerConfig::default()
        },
        ..Options::default()
    })
    .await;
    let (status, limits) = server.get("/v1/limits").await;
    assert_eq!(status, 200);
    assert_eq!(limits["max_body_bytes"], 2_000);
    assert_eq!(limits["max_content_chars"], 100_000);
    let (status, error) = server
        .post("/v1/messages", json!({"content": "x".repeat(5_000)}))
        .await;
    assert_eq!(status, 413);
    assert_eq!(error["error"]["code"], "payload_too_large");
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("2000 bytes"),
        "{error}"
    );
    let favicon = server
        .client
        .get(server.url("/favicon.svg"))
        .send()
        .await
        .expect("favicon");
    assert_eq!(favicon.status().as_u16(), 200);
    assert_eq!(favicon.headers()["content-type"], "image/svg+xml");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_outside_the_server_posts_info_and_notification_lines() {
    let server = TestServer::start().await;
    let (status, session) = server.post("/v1/sessions", json!({})).await;
    assert_eq!(status, 201);
    let session = session["id"].as_str().expect("session").to_string();
    let (status, opened) = server
        .post(
            &format!("/v1/sessions/{session}/executions"),
            json!({"agent_type": "external"}),
        )
        .await;
    assert_eq!(status, 201, "{opened}");
    let execution = opened["id"].as_str().expect("execution").to_string();
    let path = format!("/v1/executions/{execution}/messages");
    let (status, info) = server
        .post(
            &path,
            json!({"role": "info", "content": "Searching the docs"}),
        )
        .await;
    assert_eq!(status, 201, "{info}");
    assert_eq!(info["role"], "info");
    assert_eq!(info["execution_id"], execution.as_str());
    let (status, note) = server
        .post(
            &path,
            json!({"role": "notification", "content": "Report ready"}),
        )
        .await;
    assert_eq!(status, 201, "{note}");
    let (_, listed) = server
        .get(&format!(
            "/v1/sessions/{session}/messages?roles=info,notification"
        ))
        .await;
    let contents: Vec<&str> = listed["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|m| m["content"].as_str())
        .collect();
    assert!(
        contents.contains(&"Searching the docs") && contents.contains(&"Report ready"),
        "{listed}"
    );
    for (body, field) in [
        (json!({"role": "assistant", "content": "x"}), "role"),
        (json!({"role": "info", "content": "   "}), "content"),
    ] {
        let (status, error) = server.post(&path, body).await;
        assert_eq!(status, 400, "{error}");
        assert_eq!(error["error"]["field"], field);
    }
    let (status, _) = server
        .post(
            &format!("/v1/executions/{execution}/complete"),
            json!({"final_answer": "done"}),
        )
        .await;
    assert_eq!(status, 200);
    let (status, error) = server
        .post(&path, json!({"role": "info", "content": "too late"}))
        .await;
    assert_eq!(
        status, 422,
        "a finished execution's lines are written: {error}"
    );
    // A built-in agent's execution takes no lines over HTTP.
    let (_, posted) = server.post("/v1/messages", json!({"content": "2+2"})).await;
    let builtin = posted["execution"]["id"].as_str().expect("execution");
    let (status, _) = server
        .post(
            &format!("/v1/executions/{builtin}/messages"),
            json!({"role": "info", "content": "hi"}),
        )
        .await;
    assert_eq!(status, 422);
    server.stop().await;
}
