//! The AI SDK and AG-UI views of a session (api.md "Front ends"): the parts and events a
//! turn maps to, read from a real server: a demo run, streamed tokens that are not sent again
//! when their step is stored, a pause and its answer, an external agent's run followed by
//! the resume path, and the errors.
#![allow(clippy::unwrap_used)]

mod common;

use common::{Options, TestServer, wait_for};
use serde_json::{Value, json};
use stepwise_engine::{Agent, AgentContext, AgentError, BoxFuture, Decision};

/// The `data:` payloads of a front-end stream, read to its end.
async fn frames(response: reqwest::Response) -> Vec<Value> {
    let text = response.text().await.expect("the stream's body");
    text.split("\n\n")
        .filter_map(|frame| frame.strip_prefix("data: "))
        .map(|data| serde_json::from_str(data).unwrap_or(Value::String(data.to_string())))
        .collect()
}

/// The parts' types, without the transient `data-stepwise-*` of other events.
fn kinds(parts: &[Value]) -> Vec<String> {
    parts
        .iter()
        .filter(|p| p.get("transient").is_none() && p["type"] != "CUSTOM")
        .map(|p| p["type"].as_str().unwrap_or("[DONE]").to_string())
        .collect()
}

fn texts(parts: &[Value], delta: &str, key: &str) -> Vec<String> {
    parts
        .iter()
        .filter(|p| p["type"] == delta)
        .map(|p| p[key].as_str().unwrap_or_default().to_string())
        .collect()
}

async fn chat(server: &TestServer, id: &str, text: &str) -> reqwest::Response {
    server
        .client
        .post(server.url("/v1/ai-sdk/chat"))
        .json(&json!({"id": id, "messages": [
            {"id": "a", "role": "assistant", "parts": [{"type": "text", "text": "earlier"}]},
            {"id": "u", "role": "user", "parts": [{"type": "step-start"}, {"type": "text", "text": text}]}
        ], "trigger": "submit-message"}))
        .send()
        .await
        .expect("post")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_demo_run_maps_to_ui_message_stream_parts() {
    let server = TestServer::start().await;
    let response = chat(&server, "demo-chat", "steps: 2").await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-vercel-ai-ui-message-stream"], "v1");
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let parts = frames(response).await;
    let step = [
        "start-step",
        "text-start",
        "text-delta",
        "text-end",
        "tool-input-available",
        "tool-output-available",
        "finish-step",
    ];
    let mut expected = vec!["start"];
    expected.extend(step);
    expected.extend(step);
    expected.extend([
        "start-step",
        "text-start",
        "text-delta",
        "text-end",
        "finish-step",
        "finish",
        "[DONE]",
    ]);
    assert_eq!(kinds(&parts), expected);
    assert_eq!(
        texts(&parts, "text-delta", "delta"),
        [
            "Step 1 of 2: computing 1.",
            "Step 2 of 2: computing 2.",
            "Done: 2 steps"
        ]
    );
    let inputs: Vec<&Value> = parts
        .iter()
        .filter(|p| p["type"] == "tool-input-available")
        .collect();
    assert_eq!(inputs[0]["toolName"], "calculator");
    assert_eq!(inputs[0]["input"], json!({"expression": "1"}));
    let outputs: Vec<&Value> = parts
        .iter()
        .filter(|p| p["type"] == "tool-output-available")
        .collect();
    assert_eq!(outputs[1]["output"], "2");
    assert_eq!(outputs[1]["toolCallId"], inputs[1]["toolCallId"]);
    assert_eq!(parts.iter().rev().nth(1).unwrap()["finishReason"], "stop");
    // Other events of the turn come as transient data parts, never one of another turn.
    let data: Vec<&str> = parts
        .iter()
        .filter(|p| p.get("transient").is_some())
        .map(|p| p["type"].as_str().unwrap())
        .collect();
    assert!(
        data.contains(&"data-stepwise-execution-started"),
        "{data:?}"
    );
    assert!(data.contains(&"data-stepwise-tool-called"), "{data:?}");
    // The chat is the session of that name; its user message is the turn's text alone.
    let (_, sessions) = server.get("/v1/sessions?name=demo-chat").await;
    let session = sessions["items"][0]["id"].as_str().unwrap().to_string();
    let messages = server.messages(&session).await;
    let users: Vec<&Value> = messages.iter().filter(|m| m["role"] == "user").collect();
    assert_eq!(users.len(), 1);
    assert_eq!(users[0]["content"], "steps: 2");
    assert_eq!(parts[0]["messageId"], users[0]["id"]);
    // Nothing runs: the resume answers 204, whether by name or by id.
    for key in ["demo-chat", session.as_str()] {
        let resume = server
            .client
            .get(server.url(&format!("/v1/ai-sdk/chat/{key}/stream")))
            .send()
            .await
            .unwrap();
        assert_eq!(resume.status(), 204);
    }
    server.stop().await;
}

/// Streams its answer as tokens, then stores the same text as its final answer.
struct Streaming;

impl Agent for Streaming {
    fn next_step<'a>(
        &'a self,
        ctx: &'a AgentContext,
    ) -> BoxFuture<'a, Result<Decision, AgentError>> {
        Box::pin(async move {
            for token in ["Hel", "lo ", "there."] {
                ctx.deltas.send(token);
            }
            Ok(Decision::finish("Hello there."))
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamed_tokens_are_not_sent_again_with_their_stored_step() {
    let register: common::Register = Box::new(|agents| {
        agents.register("streaming", Streaming);
    });
    let server = TestServer::start_with(Options {
        register: Some(register),
        ..Options::default()
    })
    .await;
    for round in 0..5 {
        let response = server
            .client
            .post(server.url("/v1/ai-sdk/chat"))
            .json(&json!({"id": format!("tokens-{round}"), "agent": {"type": "streaming"},
                          "messages": [{"role": "user", "parts": [{"type": "text", "text": "hi"}]}]}))
            .send()
            .await
            .unwrap();
        let parts = frames(response).await;
        assert_eq!(
            texts(&parts, "text-delta", "delta").concat(),
            "Hello there.",
            "{parts:?}"
        );
        assert_eq!(texts(&parts, "text-start", "id").len(), 1, "{parts:?}");
        assert_eq!(texts(&parts, "text-end", "id").len(), 1, "{parts:?}");

        let events = frames(
            server
                .client
                .post(server.url("/v1/ag-ui"))
                .json(&json!({"threadId": format!("tokens-{round}"), "runId": "r",
                              "messages": [{"id": "m", "role": "user", "content": "again"}]}))
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(
            texts(&events, "TEXT_MESSAGE_CONTENT", "delta").concat(),
            "Hello there."
        );
        let last = events.last().unwrap();
        assert_eq!(last["type"], "RUN_FINISHED");
        assert_eq!(last["result"], "Hello there.");
    }
    server.stop().await;
}

/// `useChat`'s `addToolOutput` on the pause's `user_input` call: the transport sends the chat
/// ending with the assistant's message, whose tool part holds the output. That output answers
/// the pause; the earlier user message is not posted again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_output_for_the_question_answers_the_pause() {
    let server = TestServer::start().await;
    let parts = frames(chat(&server, "tool-answer", "ask me").await).await;
    let asked = parts
        .iter()
        .find(|p| p["type"] == "tool-input-available" && p["toolName"] == "user_input")
        .expect("the question's tool call")
        .clone();
    let answered = server
        .client
        .post(server.url("/v1/ai-sdk/chat"))
        .json(&json!({"id": "tool-answer", "messages": [
            {"id": "u", "role": "user", "parts": [{"type": "text", "text": "ask me"}]},
            {"id": "a", "role": "assistant", "parts": [
                {"type": "step-start"},
                {"type": "tool-user_input", "toolCallId": asked["toolCallId"], "state": "output-available",
                 "input": asked["input"], "output": "green"}]}
        ], "trigger": "submit-message"}))
        .send()
        .await
        .expect("post");
    let parts = frames(answered).await;
    assert_eq!(
        texts(&parts, "text-delta", "delta")
            .last()
            .map(String::as_str),
        Some("You said: green"),
        "{parts:?}"
    );
    let (_, session) = server.get("/v1/sessions?name=tool-answer").await;
    let session = session["items"][0]["id"].as_str().unwrap().to_string();
    let users: Vec<String> = server
        .messages(&session)
        .await
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(users, ["ask me", "green"]);
    server.stop().await;
}

/// The `toolCallId` of a run's (first) `TOOL_CALL_START`.
fn call_id(events: &[Value]) -> Value {
    events
        .iter()
        .find(|e| e["type"] == "TOOL_CALL_START")
        .map(|e| e["toolCallId"].clone())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_is_an_interrupt_and_the_next_input_resumes_it() {
    let server = TestServer::start().await;
    let run = |body: Value| {
        let request = server.client.post(server.url("/v1/ag-ui")).json(&body);
        async move { frames(request.send().await.unwrap()).await }
    };
    let events = run(json!({"threadId": "paused-thread", "runId": "one",
        "messages": [{"id": "m1", "role": "user", "content": [{"type": "text", "text": "ask me"}]}]}))
    .await;
    assert_eq!(events[0]["type"], "RUN_STARTED");
    assert_eq!(events[0]["runId"], "one");
    let first_call = call_id(&events);
    let last = events.last().unwrap();
    assert_eq!(last["type"], "RUN_FINISHED");
    assert_eq!(last["outcome"]["type"], "interrupt");
    let interrupt = &last["outcome"]["interrupts"][0];
    assert_eq!(interrupt["message"], "What should I use?");
    assert_eq!(interrupt["reason"], "input_required");
    let execution = events[0]["metadata"]["stepwise"]["executionId"].clone();
    assert_eq!(interrupt["id"], execution);
    // The user_input call is closed (START, ARGS, END) and has no result.
    let calls: Vec<&str> = events
        .iter()
        .filter(|e| e["type"].as_str().unwrap().starts_with("TOOL_CALL_"))
        .map(|e| e["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        calls,
        ["TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END"]
    );

    let events = run(json!({"threadId": "paused-thread", "runId": "two",
        "messages": [{"id": "m1", "role": "user", "content": "ask me"}],
        "resume": [{"interruptId": interrupt["id"], "status": "resolved", "payload": {"answer": "glue"}}]}))
    .await;
    assert_eq!(events[0]["metadata"]["stepwise"]["executionId"], execution);
    let last = events.last().unwrap();
    assert_eq!(last["outcome"]["type"], "success");
    assert_eq!(last["result"], "You said: glue");

    // A cancelled resume entry without a new message: the paused execution is cancelled.
    let events = run(json!({"threadId": "paused-thread", "runId": "three",
        "messages": [{"id": "m2", "role": "user", "content": "ask me"}]}))
    .await;
    let interrupt = events.last().unwrap()["outcome"]["interrupts"][0].clone();
    // Each execution's tool calls have ids of their own in the thread (`@ag-ui/client` keeps
    // them by id), and the interrupt names its call.
    let second_call = call_id(&events);
    assert_ne!(first_call, second_call);
    assert_eq!(interrupt["toolCallId"], second_call);
    // The whole thread sent again (as `HttpAgent` does), ending with the assistant's turn:
    // no new message, only the cancel.
    let events = run(
        json!({"threadId": "paused-thread", "runId": "four", "messages": [
            {"id": "m2", "role": "user", "content": "ask me"},
            {"id": "a2", "role": "assistant", "content": "What should I use?"}],
        "resume": [{"interruptId": interrupt["id"], "status": "cancelled"}]}),
    )
    .await;
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(events[1]["outcome"]["type"], "cancelled");
    let execution = server.execution(interrupt["id"].as_str().unwrap()).await;
    assert_eq!(execution["status"], "cancelled");
    let session = execution["session_id"].as_str().unwrap().to_string();
    let asked = server
        .messages(&session)
        .await
        .iter()
        .filter(|m| m["role"] == "user" && m["content"] == "ask me")
        .count();
    assert_eq!(asked, 2, "the cancel posted no turn of its own");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_external_agents_run_is_followed_from_its_first_step() {
    let server = TestServer::start().await;
    let (_, session) = server
        .post("/v1/sessions", json!({"name": "external-chat"}))
        .await;
    let session_id = session["id"].as_str().unwrap().to_string();
    let (status, execution) = server
        .post(
            &format!("/v1/sessions/{session_id}/executions"),
            json!({"agent_type": "external", "input": {"task": "look up"}}),
        )
        .await;
    assert_eq!(status, 201, "{execution}");
    let execution_id = execution["id"].as_str().unwrap().to_string();
    let (status, _) = server
        .post(
            &format!("/v1/executions/{execution_id}/steps"),
            json!({"step_number": 1, "kind": "action", "model_output": "Looking it up.",
                   "tool_calls": [{"id": "c1", "name": "search", "arguments": {"q": "x"}}],
                   "observations": "found x"}),
        )
        .await;
    assert_eq!(status, 201);
    // The resume path replays the running execution, then follows it live.
    let resume = server
        .client
        .get(server.url("/v1/ai-sdk/chat/external-chat/stream"))
        .send()
        .await
        .unwrap();
    assert_eq!(resume.status(), 200);
    let reading = tokio::spawn(frames(resume));
    wait_for(|| async {
        let (_, steps) = server
            .get(&format!("/v1/executions/{execution_id}/steps"))
            .await;
        steps["items"].as_array().map(|s| s.len() == 1)
    })
    .await;
    let (status, _) = server
        .post(
            &format!("/v1/executions/{execution_id}/complete"),
            json!({"output": {"x": 1}, "final_message": "x is 1"}),
        )
        .await;
    assert_eq!(status, 200);
    let parts = reading.await.unwrap();
    assert_eq!(
        kinds(&parts),
        [
            "start",
            "start-step",
            "text-start",
            "text-delta",
            "text-end",
            "tool-input-available",
            "tool-output-available",
            "finish-step",
            "text-start",
            "text-delta",
            "text-end",
            "finish",
            "[DONE]"
        ]
    );
    let tool = parts
        .iter()
        .find(|p| p["type"] == "tool-output-available")
        .unwrap();
    assert_eq!(tool["output"], "found x");
    assert_eq!(texts(&parts, "text-delta", "delta")[1], "x is 1");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_front_end_requests_are_clear_errors() {
    let server = TestServer::start().await;
    let cases = [
        (
            "/v1/ai-sdk/chat",
            json!({"id": "x", "messages": []}),
            "messages",
        ),
        (
            "/v1/ai-sdk/chat",
            json!({"id": "x", "messages": [{"role": "user", "parts": [{"type": "text", "text": "  "}]}]}),
            "messages",
        ),
        (
            "/v1/ai-sdk/chat",
            json!({"id": "a b", "messages": [{"role": "user", "parts": [{"type": "text", "text": "hi"}]}]}),
            "id",
        ),
        (
            "/v1/ai-sdk/chat",
            json!({"id": "x", "agent": {"type": "no such agent!"}, "messages": [{"role": "user", "parts": [{"type": "text", "text": "hi"}]}]}),
            "agent.type",
        ),
        (
            "/v1/ag-ui",
            json!({"threadId": "t", "runId": "r", "messages": [{"role": "assistant", "content": "hi"}]}),
            "messages",
        ),
        (
            "/v1/ag-ui",
            json!({"threadId": "t", "runId": "r", "forwardedProps": {"agent": 3}, "messages": [{"role": "user", "content": "hi"}]}),
            "forwardedProps.agent",
        ),
    ];
    for (path, body, field) in cases {
        let (status, answer) = server.post(path, body.clone()).await;
        assert_eq!(status, 400, "{body}: {answer}");
        assert_eq!(answer["error"]["code"], "invalid_request", "{answer}");
        assert_eq!(answer["error"]["field"], field, "{body}: {answer}");
    }
    // Nothing was created by a refused turn.
    let (_, sessions) = server.get("/v1/sessions").await;
    assert_eq!(sessions["items"], json!([]));
    let (status, answer) = server.get("/v1/ai-sdk/chat/a%20b/stream").await;
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["error"]["field"], "chat_id");
    let (status, answer) = server
        .post("/v1/ag-ui/connect", json!({"threadId": "..", "runId": "r"}))
        .await;
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["error"]["field"], "threadId");
    let (status, answer) = server
        .post("/v1/ai-sdk/chat/nobody/cancel", json!({}))
        .await;
    assert_eq!(status, 404, "{answer}");
    let (status, _) = server.post("/v1/sessions", json!({"name": "idle"})).await;
    assert_eq!(status, 201);
    let (status, answer) = server.post("/v1/ai-sdk/chat/idle/cancel", json!({})).await;
    assert_eq!(status, 409, "{answer}");
    assert_eq!(answer["error"]["code"], "conflict");
    server.stop().await;
}
