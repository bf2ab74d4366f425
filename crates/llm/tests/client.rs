//! The chat client against a fake OpenAI-compatible server over loopback HTTP.

#![allow(clippy::unwrap_used)]

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use serde_json::json;
use stepwise_llm::client::{ChatClient, ClientSettings, LlmError, StreamEvent};
use stepwise_llm::wire::{ChatMessage, ChatRequest, StreamOptions};
use tokio_util::sync::CancellationToken;

fn settings(base_url: &str) -> ClientSettings {
    ClientSettings {
        base_url: base_url.to_string(),
        api_key: Some("test-key".into()),
        backoff_initial: Duration::from_millis(1),
        backoff_max: Duration::from_millis(5),
        ..ClientSettings::default()
    }
}

fn request(stream: bool) -> ChatRequest {
    ChatRequest {
        model: "fake-model".into(),
        messages: vec![ChatMessage::user("hi")],
        tools: Vec::new(),
        tool_choice: None,
        parallel_tool_calls: None,
        temperature: None,
        max_tokens: None,
        stream,
        stream_options: stream.then_some(StreamOptions {
            include_usage: true,
        }),
    }
}

#[tokio::test]
async fn a_streamed_answer_with_tool_call_arguments_split_mid_argument() {
    let model = FakeModel::start(|_, _| {
        let mut events = vec![
            chunk(json!({"role": "assistant", "content": "Let me "}), None),
            chunk(json!({"content": "compute.", "reasoning_content": "2 calls"}), None),
            chunk(json!({"tool_calls": [{"index": 0, "id": "call_a", "type": "function",
                                         "function": {"name": "calculator", "arguments": "{\"expre"}}]}), None),
            chunk(json!({"tool_calls": [{"index": 1, "id": "call_b", "type": "function",
                                         "function": {"name": "clock", "arguments": ""}}]}), None),
            chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": "ssion\": \"12*"}}]}), None),
            chunk(json!({"tool_calls": [{"index": 1, "function": {"arguments": "{}"}}]}), None),
            chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": "(3+4)\"}"}}]}), None),
            chunk(json!({}), Some("tool_calls")),
            usage_chunk(42, 17),
        ];
        events.push("[DONE]".into());
        Reply::Stream(events)
    })
    .await;
    let client = ChatClient::new(settings(&model.base_url)).unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    let mut on_event = move |event: StreamEvent<'_>| {
        if let StreamEvent::Content(text) = event {
            sink.lock().unwrap().push(text.to_string());
        }
    };
    let outcome = client
        .chat(&request(true), &CancellationToken::new(), &mut on_event)
        .await
        .unwrap();
    assert_eq!(outcome.content, "Let me compute.");
    assert_eq!(outcome.reasoning, "2 calls");
    assert_eq!(*seen.lock().unwrap(), vec!["Let me ", "compute."]);
    assert_eq!(outcome.tool_calls.len(), 2);
    assert_eq!(outcome.tool_calls[0].id.as_deref(), Some("call_a"));
    assert_eq!(outcome.tool_calls[0].name, "calculator");
    assert_eq!(
        outcome.tool_calls[0].arguments,
        "{\"expression\": \"12*(3+4)\"}"
    );
    assert_eq!(outcome.tool_calls[1].arguments, "{}");
    assert_eq!(outcome.finish_reason.as_deref(), Some("tool_calls"));
    let usage = outcome.usage.unwrap();
    assert_eq!(
        (usage.prompt_tokens, usage.completion_tokens),
        (Some(42), Some(17))
    );

    let sent = &model.requests()[0];
    assert_eq!(sent["stream"], true);
    assert_eq!(sent["stream_options"]["include_usage"], true);
    assert_eq!(sent["messages"][0]["content"], "hi");
}

#[tokio::test]
async fn a_non_streamed_answer_with_tool_calls_and_reasoning() {
    let model = FakeModel::start(|_, _| {
        Reply::Json(json!({
            "id": "x", "object": "chat.completion",
            "choices": [{"index": 0, "finish_reason": "", "message": {
                "role": "assistant", "content": null, "reasoning": "thinking",
                "tool_calls": [{"id": "c1", "type": "function",
                                "function": {"name": "calculator", "arguments": {"expression": "1+1"}}}]}}]
        }))
    })
    .await;
    let client = ChatClient::new(settings(&model.base_url)).unwrap();
    let outcome = client
        .chat(&request(false), &CancellationToken::new(), &mut |_| {})
        .await
        .unwrap();
    assert_eq!(outcome.content, "");
    assert_eq!(outcome.reasoning, "thinking");
    assert_eq!(outcome.finish_reason, None);
    assert_eq!(outcome.usage, None);
    assert_eq!(outcome.tool_calls[0].arguments, "{\"expression\":\"1+1\"}");
}

#[tokio::test]
async fn a_429_with_retry_after_is_waited_out_then_retried() {
    let model = FakeModel::start(|_, index| match index {
        0 => Reply::Status(
            429,
            vec![("retry-after", "1".into())],
            json!({"error": {"message": "slow down", "type": "rate_limit"}}).to_string(),
        ),
        _ => stream_answer("ok"),
    })
    .await;
    let client = ChatClient::new(settings(&model.base_url)).unwrap();
    let started = std::time::Instant::now();
    let outcome = client
        .chat(&request(true), &CancellationToken::new(), &mut |_| {})
        .await
        .unwrap();
    // The backoff alone is at most 5 ms: only Retry-After explains a wait of a second.
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(outcome.content, "ok");
    assert_eq!(outcome.attempts, 2);
    assert_eq!(model.request_count(), 2);
}

#[tokio::test]
async fn a_500_three_times_gives_up_after_three_attempts() {
    let model = FakeModel::start(|_, _| {
        Reply::Status(
            500,
            Vec::new(),
            json!({"error": {"message": "boom"}}).to_string(),
        )
    })
    .await;
    let client = ChatClient::new(settings(&model.base_url)).unwrap();
    let error = client
        .chat(&request(true), &CancellationToken::new(), &mut |_| {})
        .await
        .unwrap_err();
    assert_eq!(model.request_count(), 3);
    assert_eq!(error.kind(), "model_http_error");
    assert!(
        matches!(&error, LlmError::Exhausted { attempts: 3, .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains("500: boom"), "{error}");
}

#[tokio::test]
async fn a_400_is_not_retried() {
    let model = FakeModel::start(|_, _| {
        Reply::Status(
            400,
            Vec::new(),
            json!({"error": {"message": "bad tools"}}).to_string(),
        )
    })
    .await;
    let client = ChatClient::new(settings(&model.base_url)).unwrap();
    let error = client
        .chat(&request(true), &CancellationToken::new(), &mut |_| {})
        .await
        .unwrap_err();
    assert_eq!(model.request_count(), 1);
    assert_eq!(
        error.to_string(),
        "the model server answered 400: bad tools"
    );
}

#[tokio::test]
async fn a_malformed_chunk_is_skipped_and_the_answer_kept() {
    let model = FakeModel::start(|_, _| {
        Reply::Stream(vec![
            chunk(json!({"content": "Hel"}), None),
            "{\"choices\": [{\"delta\": {\"content\": \"BROKEN".into(),
            chunk(json!({"content": "lo"}), None),
            chunk(json!({}), Some("stop")),
            "[DONE]".into(),
        ])
    })
    .await;
    let client = ChatClient::new(settings(&model.base_url)).unwrap();
    let outcome = client
        .chat(&request(true), &CancellationToken::new(), &mut |_| {})
        .await
        .unwrap();
    assert_eq!(outcome.content, "Hello");
    assert_eq!(outcome.malformed_chunks, 1);
}

#[tokio::test]
async fn an_error_chunk_in_the_stream_is_an_error() {
    let model = FakeModel::start(|_, _| {
        Reply::Stream(vec![
            chunk(json!({"content": "Hel"}), None),
            json!({"error": {"message": "the model crashed"}}).to_string(),
        ])
    })
    .await;
    let client = ChatClient::new(settings(&model.base_url)).unwrap();
    let error = client
        .chat(&request(true), &CancellationToken::new(), &mut |_| {})
        .await
        .unwrap_err();
    assert_eq!(error, LlmError::Server("the model crashed".into()));
}

#[tokio::test]
async fn cancelling_mid_stream_drops_the_connection() {
    let model = FakeModel::start(|_, _| {
        Reply::StreamThenHang(vec![chunk(json!({"content": "partial"}), None)])
    })
    .await;
    let client = ChatClient::new(settings(&model.base_url)).unwrap();
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    let mut on_event = move |_: StreamEvent<'_>| trigger.cancel();
    let error = client
        .chat(&request(true), &cancel, &mut on_event)
        .await
        .unwrap_err();
    assert_eq!(error, LlmError::Cancelled);
    wait_until(
        "the server to see the stream dropped",
        Duration::from_secs(10),
        async || model.dropped_streams() == 1,
    )
    .await;
    assert_eq!(model.request_count(), 1);
}

#[tokio::test]
async fn a_silent_server_hits_the_first_token_timeout() {
    let model = FakeModel::start(|_, _| Reply::Hang).await;
    let client = ChatClient::new(ClientSettings {
        first_token_timeout: Duration::from_millis(200),
        max_retries: 1,
        ..settings(&model.base_url)
    })
    .unwrap();
    let error = client
        .chat(&request(true), &CancellationToken::new(), &mut |_| {})
        .await
        .unwrap_err();
    assert_eq!(error.kind(), "model_timeout");
    assert_eq!(model.request_count(), 2);
}

#[tokio::test]
async fn no_model_configured_uses_the_servers_first_model() {
    let model = FakeModel::start(|_, _| stream_answer("hi")).await;
    let client = ChatClient::new(settings(&model.base_url)).unwrap();
    let mut unnamed = request(true);
    unnamed.model = String::new();
    client
        .chat(&unnamed, &CancellationToken::new(), &mut |_| {})
        .await
        .unwrap();
    assert_eq!(model.requests()[0]["model"], "fake-model");
}

#[tokio::test]
async fn an_unreachable_server_is_a_connection_error() {
    // A port that was just free.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let client = ChatClient::new(ClientSettings {
        max_retries: 0,
        ..settings(&format!("http://{addr}/v1"))
    })
    .unwrap();
    let error = client
        .chat(&request(true), &CancellationToken::new(), &mut |_| {})
        .await
        .unwrap_err();
    assert_eq!(error.kind(), "model_unreachable");
    assert!(ChatClient::new(settings("ftp://x")).is_err());
}
