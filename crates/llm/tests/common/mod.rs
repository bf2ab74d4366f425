//! A fake OpenAI-compatible server on loopback: it records every request body and answers
//! from a script (a function of the request), speaking the real wire format: SSE chunks,
//! JSON bodies, error statuses with headers. It notices when a client drops a stream.

#![allow(dead_code, clippy::unwrap_used)]

use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};

/// What the server answers to one request.
#[derive(Clone)]
pub enum Reply {
    /// SSE data payloads, each sent as its own write, then the body ends.
    Stream(Vec<String>),
    /// SSE data payloads, then the stream stays open (keep-alive comments) until the
    /// client goes away.
    StreamThenHang(Vec<String>),
    Json(Value),
    Status(u16, Vec<(&'static str, String)>, String),
    /// No answer at all until the client goes away.
    Hang,
}

pub type Script = Arc<dyn Fn(&Value, usize) -> Reply + Send + Sync>;

#[derive(Clone)]
struct Shared {
    requests: Arc<Mutex<Vec<Value>>>,
    dropped_streams: Arc<AtomicUsize>,
    script: Script,
}

pub struct FakeModel {
    pub base_url: String,
    shared: Shared,
    _server: tokio::task::JoinHandle<()>,
}

impl FakeModel {
    pub async fn start(script: impl Fn(&Value, usize) -> Reply + Send + Sync + 'static) -> Self {
        let shared = Shared {
            requests: Arc::new(Mutex::new(Vec::new())),
            dropped_streams: Arc::new(AtomicUsize::new(0)),
            script: Arc::new(script),
        };
        let app = Router::new()
            .route("/v1/chat/completions", post(chat))
            .route("/v1/models", get(models))
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        FakeModel {
            base_url: format!("http://{addr}/v1"),
            shared,
            _server: server,
        }
    }

    pub fn requests(&self) -> Vec<Value> {
        self.shared.requests.lock().unwrap().clone()
    }

    pub fn request_count(&self) -> usize {
        self.shared.requests.lock().unwrap().len()
    }

    pub fn dropped_streams(&self) -> usize {
        self.shared.dropped_streams.load(Ordering::SeqCst)
    }
}

async fn models() -> impl IntoResponse {
    axum::Json(json!({"object": "list", "data": [{"id": "fake-model", "object": "model"}]}))
}

async fn chat(State(shared): State<Shared>, body: Bytes) -> Response {
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let index = {
        let mut requests = shared.requests.lock().unwrap();
        requests.push(request.clone());
        requests.len() - 1
    };
    match (shared.script)(&request, index) {
        Reply::Json(value) => axum::Json(value).into_response(),
        Reply::Status(status, headers, body) => {
            let mut response = (StatusCode::from_u16(status).unwrap(), body).into_response();
            for (name, value) in headers {
                response
                    .headers_mut()
                    .insert(name, HeaderValue::from_str(&value).unwrap());
            }
            response
        }
        Reply::Stream(events) => sse(events, false, shared.dropped_streams.clone()),
        Reply::StreamThenHang(events) => sse(events, true, shared.dropped_streams.clone()),
        Reply::Hang => sse(Vec::new(), true, shared.dropped_streams.clone()),
    }
}

fn sse(events: Vec<String>, hang: bool, dropped: Arc<AtomicUsize>) -> Response {
    let frames = events
        .into_iter()
        .map(|data| Bytes::from(format!("data: {data}\n\n")))
        .collect();
    let body = Body::from_stream(Frames {
        frames,
        hang,
        ticker: hang.then(|| tokio::time::interval(Duration::from_millis(20))),
        _guard: DropGuard(dropped),
    });
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(body)
        .unwrap()
}

struct DropGuard(Arc<AtomicUsize>);

impl Drop for DropGuard {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

struct Frames {
    frames: VecDeque<Bytes>,
    hang: bool,
    ticker: Option<tokio::time::Interval>,
    _guard: DropGuard,
}

impl futures_util::Stream for Frames {
    type Item = Result<Bytes, Infallible>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if let Some(frame) = self.frames.pop_front() {
            return Poll::Ready(Some(Ok(frame)));
        }
        if !self.hang {
            return Poll::Ready(None);
        }
        // Keep-alive comments: writing them is how the server notices a closed client.
        match self.ticker.as_mut().map(|t| t.poll_tick(cx)) {
            Some(Poll::Ready(_)) => Poll::Ready(Some(Ok(Bytes::from_static(b": keep-alive\n\n")))),
            _ => Poll::Pending,
        }
    }
}

// --- chunk builders ---------------------------------------------------------------------

pub fn chunk(delta: Value, finish_reason: Option<&str>) -> String {
    json!({
        "id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "fake-model",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason.unwrap_or(""), "logprobs": null}]
    })
    .to_string()
}

pub fn usage_chunk(prompt: u64, completion: u64) -> String {
    json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [],
           "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}})
    .to_string()
}

/// A streamed plain answer, a few characters a chunk.
pub fn stream_answer(text: &str) -> Reply {
    let mut events = vec![chunk(json!({"role": "assistant", "content": ""}), None)];
    let chars: Vec<char> = text.chars().collect();
    for piece in chars.chunks(4) {
        events.push(chunk(
            json!({"content": piece.iter().collect::<String>()}),
            None,
        ));
    }
    events.push(chunk(json!({}), Some("stop")));
    events.push(usage_chunk(10, 5));
    events.push("[DONE]".into());
    Reply::Stream(events)
}

/// Streamed tool calls `(id, name, arguments JSON)`, each call's arguments split in
/// pieces of 5 characters, the calls' pieces interleaved.
pub fn stream_tool_calls(calls: &[(&str, &str, String)]) -> Reply {
    let mut events = vec![chunk(json!({"role": "assistant", "content": null}), None)];
    for (index, (id, name, _)) in calls.iter().enumerate() {
        events.push(chunk(
            json!({"tool_calls": [{"index": index, "id": id, "type": "function",
                                   "function": {"name": name, "arguments": ""}}]}),
            None,
        ));
    }
    let pieces: Vec<Vec<String>> = calls
        .iter()
        .map(|(_, _, args)| {
            args.chars()
                .collect::<Vec<_>>()
                .chunks(5)
                .map(|c| c.iter().collect())
                .collect()
        })
        .collect();
    let longest = pieces.iter().map(Vec::len).max().unwrap_or(0);
    for round in 0..longest {
        for (index, call_pieces) in pieces.iter().enumerate() {
            if let Some(piece) = call_pieces.get(round) {
                events.push(chunk(
                    json!({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}),
                    None,
                ));
            }
        }
    }
    events.push(chunk(json!({}), Some("tool_calls")));
    events.push("[DONE]".into());
    Reply::Stream(events)
}

/// The tool results in a request, in order: `(tool_call_id, content)`.
pub fn tool_results(request: &Value) -> Vec<(String, String)> {
    request["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "tool")
        .map(|m| {
            (
                m["tool_call_id"].as_str().unwrap_or_default().to_string(),
                m["content"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// Polls `check` until it is true or `deadline` passes.
pub async fn wait_until(what: &str, deadline: Duration, mut check: impl AsyncFnMut() -> bool) {
    let end = tokio::time::Instant::now() + deadline;
    loop {
        if check().await {
            return;
        }
        if tokio::time::Instant::now() > end {
            panic!("timed out waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
