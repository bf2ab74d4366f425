//! The OpenAI-compatible chat-completions client: streaming and not, tool calls assembled
//! from their deltas, timeouts (connect, first token, total), retries with exponential
//! backoff and jitter on 429/5xx/connection errors honouring `Retry-After`, and
//! cancellation that drops the HTTP request at once.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::time::Duration;

use futures_util::StreamExt;
use reqwest::StatusCode;
use reqwest::header::HeaderMap;
use serde_json::Value;
use tokio::sync::OnceCell;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use stepwise_engine::BoxFuture;

use crate::wire::{
    ChatChunk, ChatRequest, ChatResponse, ToolCallDelta, Usage, content_text, error_message,
    finish_reason,
};

/// Why a model call failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LlmError {
    #[error("cannot reach the model server: {0}")]
    Connect(String),
    #[error("the model server answered {status}: {message}")]
    Status {
        status: u16,
        message: String,
        retry_after: Option<Duration>,
    },
    #[error("the model sent nothing within {} s (first-token timeout)", .0.as_secs_f64())]
    FirstTokenTimeout(Duration),
    #[error("the model call took longer than {} s (total timeout)", .0.as_secs_f64())]
    TotalTimeout(Duration),
    #[error("the model's stream broke: {0}")]
    Stream(String),
    #[error("the model server reported an error: {0}")]
    Server(String),
    #[error("the model's answer could not be read: {0}")]
    Decode(String),
    #[error("the model call was cancelled")]
    Cancelled,
    #[error("{0}")]
    Config(String),
    #[error("{last} (gave up after {attempts} attempts)")]
    Exhausted { attempts: u32, last: Box<LlmError> },
}

impl LlmError {
    /// A short name for the failure, recorded as the step error's `kind`.
    pub fn kind(&self) -> &'static str {
        match self {
            LlmError::Connect(_) => "model_unreachable",
            LlmError::Status { .. } => "model_http_error",
            LlmError::FirstTokenTimeout(_) | LlmError::TotalTimeout(_) => "model_timeout",
            LlmError::Stream(_) => "model_stream_error",
            LlmError::Server(_) => "model_error",
            LlmError::Decode(_) => "model_bad_answer",
            LlmError::Cancelled => "cancelled",
            LlmError::Config(_) => "model_config",
            LlmError::Exhausted { last, .. } => last.kind(),
        }
    }

    /// Whether trying again may help: rate limits, server errors, connection trouble.
    pub fn is_retryable(&self) -> bool {
        match self {
            LlmError::Connect(_) | LlmError::FirstTokenTimeout(_) | LlmError::Stream(_) => true,
            LlmError::Status { status, .. } => {
                *status == 429 || *status == 408 || (500..600).contains(status)
            }
            _ => false,
        }
    }

    fn retry_after(&self) -> Option<Duration> {
        match self {
            LlmError::Status { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

/// How the client reaches the server and how patient it is.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientSettings {
    /// Up to and including `/v1`, e.g. `http://localhost:11434/v1`.
    pub base_url: String,
    pub api_key: Option<String>,
    pub connect_timeout: Duration,
    /// From sending the request to the first streamed event (or the whole answer when
    /// not streaming): a local server loading a model can take a while.
    pub first_token_timeout: Duration,
    /// One attempt, from sending to the last byte.
    pub total_timeout: Duration,
    /// Attempts after the first one.
    pub max_retries: u32,
    pub backoff_initial: Duration,
    pub backoff_max: Duration,
    /// A server's `Retry-After` is honoured up to this.
    pub retry_after_max: Duration,
}

impl Default for ClientSettings {
    fn default() -> Self {
        ClientSettings {
            base_url: String::new(),
            api_key: None,
            connect_timeout: Duration::from_secs(10),
            first_token_timeout: Duration::from_secs(120),
            total_timeout: Duration::from_secs(600),
            max_retries: 2,
            backoff_initial: Duration::from_millis(500),
            backoff_max: Duration::from_secs(20),
            retry_after_max: Duration::from_secs(120),
        }
    }
}

/// A piece of a streamed answer, as it arrives.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum StreamEvent<'a> {
    Content(&'a str),
    Reasoning(&'a str),
}

/// A tool call as the model made it; `arguments` is the JSON text it sent.
#[derive(Debug, Clone, PartialEq)]
pub struct AssembledCall {
    pub id: Option<String>,
    pub name: String,
    pub arguments: String,
}

/// The model's whole answer to one request.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChatOutcome {
    pub content: String,
    pub reasoning: String,
    pub tool_calls: Vec<AssembledCall>,
    pub finish_reason: Option<String>,
    pub usage: Option<Usage>,
    /// HTTP attempts it took (1 when the first one answered).
    pub attempts: u32,
    /// Streamed chunks that were not JSON and were skipped.
    pub malformed_chunks: u32,
}

/// Where the streamed pieces go.
pub type EventSink<'a> = &'a mut (dyn FnMut(StreamEvent<'_>) + Send);

/// A chat model: the HTTP client, or a fake in tests and benchmarks.
pub trait ChatModel: Send + Sync + 'static {
    fn chat<'a>(
        &'a self,
        request: &'a ChatRequest,
        cancel: &'a CancellationToken,
        on_event: EventSink<'a>,
    ) -> BoxFuture<'a, Result<ChatOutcome, LlmError>>;
}

/// The HTTP client of an OpenAI-compatible server.
pub struct ChatClient {
    http: reqwest::Client,
    settings: ClientSettings,
    endpoint: String,
    /// The server's first model, when none is configured (llama.cpp and LM Studio serve
    /// whatever is loaded).
    discovered_model: OnceCell<String>,
}

impl ChatClient {
    pub fn new(settings: ClientSettings) -> Result<Self, LlmError> {
        let base = settings.base_url.trim().trim_end_matches('/').to_string();
        if base.is_empty() {
            return Err(LlmError::Config(
                "no model server base URL is configured".into(),
            ));
        }
        let scheme_ok =
            base.starts_with("http://") || (cfg!(feature = "tls") && base.starts_with("https://"));
        if !scheme_ok {
            let hint = if base.starts_with("https://") {
                "this build has no TLS support (build stepwise-llm with the `tls` feature)"
            } else {
                "it must start with http:// or https://"
            };
            return Err(LlmError::Config(format!(
                "the model server base URL '{base}' cannot be used: {hint}"
            )));
        }
        let http = reqwest::Client::builder()
            .connect_timeout(settings.connect_timeout)
            .build()
            .map_err(|e| LlmError::Config(format!("cannot build the HTTP client: {e}")))?;
        Ok(ChatClient {
            http,
            endpoint: format!("{base}/chat/completions"),
            settings: ClientSettings {
                base_url: base,
                ..settings
            },
            discovered_model: OnceCell::new(),
        })
    }

    pub fn settings(&self) -> &ClientSettings {
        &self.settings
    }

    /// Sends a chat request, retrying what can be retried. Streamed pieces go to
    /// `on_event` as they arrive; a request whose stream already produced text is not
    /// retried (the reader has seen it).
    pub async fn chat(
        &self,
        request: &ChatRequest,
        cancel: &CancellationToken,
        on_event: EventSink<'_>,
    ) -> Result<ChatOutcome, LlmError> {
        let mut owned;
        let request = if request.model.trim().is_empty() {
            owned = request.clone();
            owned.model = self.default_model(cancel).await?;
            &owned
        } else {
            request
        };
        let mut attempt = 0;
        loop {
            attempt += 1;
            let mut emitted = false;
            let result = {
                let mut sink = |event: StreamEvent<'_>| {
                    emitted = true;
                    on_event(event)
                };
                self.attempt(request, cancel, &mut sink).await
            };
            match result {
                Ok(mut outcome) => {
                    outcome.attempts = attempt;
                    return Ok(outcome);
                }
                Err(error) if error.is_retryable() && !emitted => {
                    if attempt > self.settings.max_retries {
                        return Err(if attempt > 1 {
                            LlmError::Exhausted {
                                attempts: attempt,
                                last: Box::new(error),
                            }
                        } else {
                            error
                        });
                    }
                    let wait = match error.retry_after() {
                        Some(asked) => asked.min(self.settings.retry_after_max),
                        None => backoff(
                            attempt,
                            self.settings.backoff_initial,
                            self.settings.backoff_max,
                        ),
                    };
                    tracing::info!(attempt, error = %error, wait_ms = wait.as_millis() as u64, "model call failed; retrying");
                    tokio::select! {
                        biased;
                        _ = cancel.cancelled() => return Err(LlmError::Cancelled),
                        _ = tokio::time::sleep(wait) => {}
                    }
                }
                Err(error) => return Err(error),
            }
        }
    }

    /// The ids of the models the server offers (`GET /models`).
    pub async fn list_models(&self, cancel: &CancellationToken) -> Result<Vec<String>, LlmError> {
        let url = format!("{}/models", self.settings.base_url);
        let send = self.authorized(self.http.get(&url)).send();
        let response = tokio::select! {
            biased;
            _ = cancel.cancelled() => return Err(LlmError::Cancelled),
            r = tokio::time::timeout(self.settings.first_token_timeout, send) => match r {
                Err(_) => return Err(LlmError::FirstTokenTimeout(self.settings.first_token_timeout)),
                Ok(r) => r.map_err(request_error)?,
            }
        };
        let status = response.status();
        let headers = response.headers().clone();
        let body = response.text().await.map_err(request_error)?;
        if !status.is_success() {
            return Err(status_error(status, &headers, &body));
        }
        let json: Value = serde_json::from_str(&body)
            .map_err(|e| LlmError::Decode(format!("the model list is not JSON: {e}")))?;
        let ids = json
            .get("data")
            .and_then(Value::as_array)
            .map(|models| {
                models
                    .iter()
                    .filter_map(|m| m.get("id").and_then(Value::as_str).map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        Ok(ids)
    }

    async fn default_model(&self, cancel: &CancellationToken) -> Result<String, LlmError> {
        self.discovered_model
            .get_or_try_init(|| async {
                let models = self.list_models(cancel).await?;
                models.into_iter().next().ok_or_else(|| {
                    LlmError::Config(
                        "no model is configured (STEPWISE_LLM_MODEL) and the server lists none"
                            .into(),
                    )
                })
            })
            .await
            .cloned()
    }

    fn authorized(&self, builder: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.settings.api_key {
            Some(key) if !key.is_empty() => builder.bearer_auth(key),
            _ => builder,
        }
    }

    /// One HTTP attempt. Dropping this future (cancel, timeout) drops the connection.
    async fn attempt(
        &self,
        request: &ChatRequest,
        cancel: &CancellationToken,
        on_event: EventSink<'_>,
    ) -> Result<ChatOutcome, LlmError> {
        let started = Instant::now();
        let total = started + self.settings.total_timeout;
        let first = (started + self.settings.first_token_timeout).min(total);
        let send = self
            .authorized(self.http.post(&self.endpoint))
            .json(request)
            .send();
        let response = self
            .bounded(cancel, first, total, send)
            .await?
            .map_err(request_error)?;
        let status = response.status();
        if !status.is_success() {
            let headers = response.headers().clone();
            let body = self
                .bounded(cancel, total, total, response.text())
                .await?
                .unwrap_or_default();
            return Err(status_error(status, &headers, &body));
        }
        if !request.stream {
            let body = self
                .bounded(cancel, first, total, response.bytes())
                .await?
                .map_err(request_error)?;
            return parse_response(&body);
        }

        let mut events = std::pin::pin!(crate::sse::data_events(response.bytes_stream()));
        let mut answer = Assembly::default();
        let mut got_event = false;
        loop {
            let deadline = if got_event { total } else { first };
            let data = match self.bounded(cancel, deadline, total, events.next()).await? {
                None => break,
                Some(Ok(data)) => data,
                Some(Err(e)) => return Err(LlmError::Stream(e)),
            };
            got_event = true;
            let data = data.trim();
            if data == "[DONE]" {
                break;
            }
            if data.is_empty() {
                continue;
            }
            answer.push_chunk(data, on_event)?;
        }
        answer.finish()
    }

    /// Awaits `future` unless cancelled or past a deadline (`first` until something was
    /// received, `total` for the whole attempt).
    async fn bounded<T>(
        &self,
        cancel: &CancellationToken,
        deadline: Instant,
        total: Instant,
        future: impl Future<Output = T>,
    ) -> Result<T, LlmError> {
        tokio::select! {
            biased;
            _ = cancel.cancelled() => Err(LlmError::Cancelled),
            result = tokio::time::timeout_at(deadline, future) => result.map_err(|_| {
                if deadline < total {
                    LlmError::FirstTokenTimeout(self.settings.first_token_timeout)
                } else {
                    LlmError::TotalTimeout(self.settings.total_timeout)
                }
            }),
        }
    }
}

impl ChatModel for ChatClient {
    fn chat<'a>(
        &'a self,
        request: &'a ChatRequest,
        cancel: &'a CancellationToken,
        on_event: EventSink<'a>,
    ) -> BoxFuture<'a, Result<ChatOutcome, LlmError>> {
        Box::pin(ChatClient::chat(self, request, cancel, on_event))
    }
}

/// Exponential backoff with jitter: a random wait between half and all of
/// `initial * 2^(attempt-1)`, at most `max`.
pub fn backoff(attempt: u32, initial: Duration, max: Duration) -> Duration {
    let exponent = attempt.saturating_sub(1).min(20);
    let full = initial.saturating_mul(1u32 << exponent).min(max);
    let random = RandomState::new().hash_one(Instant::now()) % 1000;
    full / 2 + full / 2 * (random as u32) / 1000
}

fn request_error(error: reqwest::Error) -> LlmError {
    if error.is_connect() {
        LlmError::Connect(error_chain(&error))
    } else if error.is_builder() {
        LlmError::Config(error_chain(&error))
    } else {
        LlmError::Stream(error_chain(&error))
    }
}

fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

fn status_error(status: StatusCode, headers: &HeaderMap, body: &str) -> LlmError {
    let message = serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|json| json.get("error").map(error_message))
        .unwrap_or_else(|| stepwise_core::summary::cut_chars(body.trim(), 500));
    LlmError::Status {
        status: status.as_u16(),
        message: if message.is_empty() {
            status.canonical_reason().unwrap_or("error").to_string()
        } else {
            message
        },
        retry_after: retry_after(headers),
    }
}

/// `retry-after-ms` (OpenAI) or `Retry-After` in seconds. An HTTP-date is not read; the
/// usual backoff applies then.
pub fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let number = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<f64>().ok())
            .filter(|v| v.is_finite() && *v >= 0.0)
    };
    if let Some(ms) = number("retry-after-ms") {
        return Some(Duration::from_secs_f64(ms / 1000.0));
    }
    number("retry-after").map(|secs| Duration::from_secs_f64(secs.min(86_400.0)))
}

fn parse_response(body: &[u8]) -> Result<ChatOutcome, LlmError> {
    let response: ChatResponse = serde_json::from_slice(body).map_err(|e| {
        LlmError::Decode(format!(
            "{e} in {}",
            stepwise_core::summary::cut_chars(&String::from_utf8_lossy(body), 200)
        ))
    })?;
    if let Some(error) = &response.error {
        return Err(LlmError::Server(error_message(error)));
    }
    let Some(choice) = response.choices.into_iter().next() else {
        return Err(LlmError::Decode("the answer has no choices".into()));
    };
    let message = choice.message.unwrap_or_default();
    let mut calls = CallAssembler::default();
    for call in message.tool_calls.iter().flatten() {
        // Whole calls, in order: each one is its own call even without an index.
        calls.push_whole(call);
    }
    Ok(ChatOutcome {
        content: content_text(&message.content).unwrap_or_default(),
        reasoning: message
            .reasoning_content
            .or(message.reasoning)
            .unwrap_or_default(),
        tool_calls: calls.finish(),
        finish_reason: finish_reason(&choice.finish_reason),
        usage: response.usage,
        attempts: 1,
        malformed_chunks: 0,
    })
}

/// A streamed answer being put together.
#[derive(Default)]
struct Assembly {
    content: String,
    reasoning: String,
    calls: CallAssembler,
    finish_reason: Option<String>,
    usage: Option<Usage>,
    malformed: u32,
    chunks: u32,
}

impl Assembly {
    fn push_chunk(&mut self, data: &str, on_event: EventSink<'_>) -> Result<(), LlmError> {
        let chunk: ChatChunk = match serde_json::from_str(data) {
            Ok(chunk) => chunk,
            Err(e) => {
                // One bad chunk should not lose a whole answer; it is counted and logged.
                self.malformed += 1;
                tracing::warn!(error = %e, chunk = %stepwise_core::summary::cut_chars(data, 200), "skipping a malformed stream chunk");
                return Ok(());
            }
        };
        self.chunks += 1;
        if let Some(error) = &chunk.error {
            return Err(LlmError::Server(error_message(error)));
        }
        if chunk.usage.is_some() {
            self.usage = chunk.usage;
        }
        // Only the first choice matters (we never ask for n > 1).
        for choice in chunk.choices.iter().filter(|c| c.index.unwrap_or(0) == 0) {
            if let Some(reason) = finish_reason(&choice.finish_reason) {
                self.finish_reason = Some(reason);
            }
            let Some(delta) = &choice.delta else { continue };
            if let Some(text) = delta
                .reasoning_content
                .as_deref()
                .or(delta.reasoning.as_deref())
                .filter(|t| !t.is_empty())
            {
                self.reasoning.push_str(text);
                on_event(StreamEvent::Reasoning(text));
            }
            if let Some(text) = content_text(&delta.content).filter(|t| !t.is_empty()) {
                self.content.push_str(&text);
                on_event(StreamEvent::Content(&text));
            }
            for call in delta.tool_calls.iter().flatten() {
                self.calls.push_delta(call);
            }
        }
        Ok(())
    }

    fn finish(self) -> Result<ChatOutcome, LlmError> {
        let tool_calls = self.calls.finish();
        if self.chunks == 0 {
            return Err(LlmError::Stream(if self.malformed > 0 {
                format!(
                    "the stream had {} chunk(s), none of them readable",
                    self.malformed
                )
            } else {
                "the stream ended without an answer".into()
            }));
        }
        Ok(ChatOutcome {
            content: self.content,
            reasoning: self.reasoning,
            tool_calls,
            finish_reason: self.finish_reason,
            usage: self.usage,
            attempts: 1,
            malformed_chunks: self.malformed,
        })
    }
}

#[derive(Debug, Default)]
struct PartialCall {
    index: Option<u32>,
    id: Option<String>,
    name: String,
    arguments: String,
}

/// Puts tool calls together from their streamed pieces: by `index` when the server sends
/// one, else by `id`, else onto the last call.
#[derive(Debug, Default)]
struct CallAssembler {
    calls: Vec<PartialCall>,
}

impl CallAssembler {
    fn push_delta(&mut self, delta: &ToolCallDelta) {
        let id = delta.id.as_ref().filter(|id| !id.is_empty());
        let position = match (delta.index, id) {
            (Some(index), _) => self.calls.iter().position(|c| c.index == Some(index)),
            (None, Some(id)) => self.calls.iter().position(|c| c.id.as_ref() == Some(id)),
            (None, None) => self.calls.len().checked_sub(1),
        };
        let position = position.unwrap_or_else(|| {
            self.calls.push(PartialCall {
                index: delta.index,
                ..PartialCall::default()
            });
            self.calls.len() - 1
        });
        if let Some(call) = self.calls.get_mut(position) {
            merge(call, delta);
        }
    }

    fn push_whole(&mut self, delta: &ToolCallDelta) {
        let mut call = PartialCall::default();
        merge(&mut call, delta);
        self.calls.push(call);
    }

    fn finish(self) -> Vec<AssembledCall> {
        self.calls
            .into_iter()
            .filter(|c| !c.name.is_empty())
            .map(|c| AssembledCall {
                id: c.id,
                name: c.name,
                arguments: c.arguments,
            })
            .collect()
    }
}

fn merge(call: &mut PartialCall, delta: &ToolCallDelta) {
    if call.id.is_none() {
        call.id = delta.id.clone().filter(|id| !id.is_empty());
    }
    let Some(function) = &delta.function else {
        return;
    };
    if let Some(name) = function.name.as_ref().filter(|n| !n.is_empty())
        && call.name.is_empty()
    {
        call.name = name.clone();
    }
    match &function.arguments {
        None | Some(Value::Null) => {}
        Some(Value::String(piece)) => call.arguments.push_str(piece),
        // A server that sends the arguments as an object sends them whole.
        Some(whole) => call.arguments = whole.to_string(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_with_jitter_and_stays_under_the_cap() {
        let initial = Duration::from_millis(100);
        let max = Duration::from_secs(1);
        for attempt in 1..10 {
            let wait = backoff(attempt, initial, max);
            let full = (initial * (1 << (attempt - 1))).min(max);
            assert!(
                wait >= full / 2 && wait <= full,
                "attempt {attempt}: {wait:?}"
            );
        }
    }

    #[test]
    fn retry_after_reads_seconds_and_milliseconds() {
        let mut headers = HeaderMap::new();
        headers.insert("retry-after", "2".parse().unwrap());
        assert_eq!(retry_after(&headers), Some(Duration::from_secs(2)));
        headers.insert("retry-after-ms", "150".parse().unwrap());
        assert_eq!(retry_after(&headers), Some(Duration::from_millis(150)));
        let mut date = HeaderMap::new();
        date.insert(
            "retry-after",
            "Wed, 21 Oct 2015 07:28:00 GMT".parse().unwrap(),
        );
        assert_eq!(retry_after(&date), None);
    }

    #[test]
    fn tool_calls_assemble_from_pieces() {
        let mut calls = CallAssembler::default();
        let piece = |index: Option<u32>, id: Option<&str>, name: Option<&str>, args: Value| {
            serde_json::from_value::<ToolCallDelta>(serde_json::json!({
                "index": index, "id": id, "function": {"name": name, "arguments": args}
            }))
            .unwrap()
        };
        calls.push_delta(&piece(
            Some(0),
            Some("a"),
            Some("calculator"),
            "{\"expr".into(),
        ));
        calls.push_delta(&piece(Some(1), Some("b"), Some("clock"), "".into()));
        calls.push_delta(&piece(Some(0), None, None, "ession\": \"1+".into()));
        calls.push_delta(&piece(Some(1), None, None, "{}".into()));
        calls.push_delta(&piece(Some(0), None, None, "2\"}".into()));
        let done = calls.finish();
        assert_eq!(done.len(), 2);
        assert_eq!(done[0].arguments, "{\"expression\": \"1+2\"}");
        assert_eq!(done[0].id.as_deref(), Some("a"));
        assert_eq!(done[1].name, "clock");

        // No index: by id, then onto the last call; object arguments are whole.
        let mut calls = CallAssembler::default();
        calls.push_delta(&piece(
            None,
            Some("x"),
            Some("clock"),
            serde_json::json!({}),
        ));
        calls.push_delta(&piece(
            None,
            Some("y"),
            Some("calculator"),
            "{\"expression\":".into(),
        ));
        calls.push_delta(&piece(None, None, None, "\"2\"}".into()));
        let done = calls.finish();
        assert_eq!(done[0].arguments, "{}");
        assert_eq!(done[1].arguments, "{\"expression\":\"2\"}");
    }
}
