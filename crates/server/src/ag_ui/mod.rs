//! AG-UI (what `@ag-ui/client`'s `HttpAgent`, CopilotKit and assistant-ui's AG-UI runtime
//! speak) over a session: `POST /v1/ag-ui` runs a `RunAgentInput` (the thread is the
//! session) and answers its events; `POST /v1/ag-ui/connect` gives a reconnecting client
//! the thread's messages and the running turn. One file per endpoint; here the input's
//! types, the mapping of a turn's [`RunItem`]s to events ([`AgUiStream`]) and the response.
//! The mapping table is in docs/api.md.

pub(crate) mod connect;
pub(crate) mod run;

use std::collections::VecDeque;
use std::convert::Infallible;

use axum::body::{Body, Bytes};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use stepwise_core::{Event, Id, Message, Role, Step, StepKind};
use stepwise_store::{MessageQuery, Store, Tenant};

use crate::error::{ApiError, ApiResult};
use crate::limits::SubscriberSlot;
use crate::messages::AgentBody;
use crate::runs::{
    LiveText, Out, RunFollower, RunItem, StepCache, Streamed, final_answer, for_step, says_text,
    shared_frame, tool_result,
};

/// The AG-UI `RunAgentInput` (the fields Stepwise reads; `tools`, `context` and `state` are
/// accepted and ignored).
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct RunAgentInput {
    /// The thread: a session id, or a session name (a new session of that name on the first run).
    #[serde(rename = "threadId")]
    #[schema(schema_with = crate::schemas::chat_id)]
    pub thread_id: String,
    /// The client's id for this run (echoed in `RUN_STARTED` and `RUN_FINISHED`).
    #[serde(rename = "runId")]
    #[schema(schema_with = crate::schemas::run_id)]
    pub run_id: String,
    /// The thread's messages; the last one with role `user` is the turn.
    #[serde(default)]
    #[schema(max_items = 10000)]
    pub messages: Vec<AgUiMessage>,
    /// Answers to the interrupts of a paused run: `payload` (text, or JSON) is the user's answer.
    pub resume: Option<Vec<ResumeEntry>>,
    /// `{agent: {type, config}}` picks the agent (default: the session's latest execution's
    /// agent, else the server's default).
    #[serde(rename = "forwardedProps")]
    #[schema(schema_with = crate::schemas::object_or_null)]
    pub forwarded_props: Option<Value>,
}

/// An AG-UI message: only user messages' text is read.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct AgUiMessage {
    #[allow(dead_code)] // in the schema; Stepwise gives stored messages its own ids
    pub id: Option<String>,
    /// `user`, `assistant`, `system`, `developer`, `tool`...
    pub role: String,
    /// Text, or an array of content parts (`{type: "text", text}` are read).
    pub content: Option<Value>,
}

/// An answer to an interrupt.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct ResumeEntry {
    #[serde(rename = "interruptId")]
    pub interrupt_id: String,
    pub status: ResumeStatus,
    pub payload: Option<Value>,
}

/// `resolved` (answered with `payload`) or `cancelled` (the paused execution is cancelled).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ResumeStatus {
    Resolved,
    Cancelled,
}

impl AgUiMessage {
    pub(crate) fn text(&self) -> String {
        match &self.content {
            Some(Value::String(text)) => text.clone(),
            Some(Value::Array(parts)) => parts
                .iter()
                .filter(|p| p.get("type").and_then(Value::as_str) == Some("text"))
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("\n\n"),
            _ => String::new(),
        }
    }
}

impl RunAgentInput {
    /// Checks what the schema says and serde does not.
    pub(crate) fn check(&self) -> ApiResult<()> {
        crate::runs::check_chat_id(&self.thread_id, "threadId")?;
        let run_chars = self.run_id.chars().count();
        if !(1..=128).contains(&run_chars) {
            return Err(ApiError::invalid(
                "runId",
                "runId must be 1 to 128 characters long",
            ));
        }
        if !matches!(
            self.forwarded_props,
            None | Some(Value::Null | Value::Object(_))
        ) {
            return Err(ApiError::invalid(
                "forwardedProps",
                "forwardedProps must be a JSON object",
            ));
        }
        Ok(())
    }

    /// The agent `forwardedProps.agent` names.
    pub(crate) fn agent(&self) -> ApiResult<Option<AgentBody>> {
        let Some(agent) = self.forwarded_props.as_ref().and_then(|p| p.get("agent")) else {
            return Ok(None);
        };
        if agent.is_null() {
            return Ok(None);
        }
        serde_json::from_value(agent.clone())
            .map(Some)
            .map_err(|e| {
                ApiError::invalid(
                    "forwardedProps.agent",
                    format!("forwardedProps.agent must be {{type, config}}: {e}"),
                )
            })
    }

    /// The text of the last user message ("" when none).
    pub(crate) fn last_user_text(&self) -> String {
        self.messages
            .iter()
            .rev()
            .find(|m| m.role == "user")
            .map(AgUiMessage::text)
            .unwrap_or_default()
    }
}

/// The events of one run, in the order `@ag-ui/client`'s verifier accepts: `RUN_STARTED`
/// first, every step, text message and tool call closed before the run ends, and
/// `RUN_FINISHED` (outcome `success`, `interrupt` or `cancelled`) or `RUN_ERROR` last.
pub(crate) struct AgUiStream {
    thread_id: String,
    run_id: String,
    execution_id: Id,
    session_id: Id,
    step: u32,
    step_open: Option<String>,
    /// Streamed tokens and their open text message.
    live: LiveText,
    answered: bool,
    /// The `user_input` call of the step that paused.
    asking_call: Option<String>,
    seq: u32,
}

impl AgUiStream {
    pub(crate) fn new(thread_id: String, run_id: String, session_id: Id, execution_id: Id) -> Self {
        AgUiStream {
            thread_id,
            run_id,
            execution_id,
            session_id,
            step: 0,
            step_open: None,
            live: LiveText::default(),
            answered: false,
            asking_call: None,
            seq: 0,
        }
    }

    pub(crate) fn run_started(&self) -> Value {
        json!({"type": "RUN_STARTED", "threadId": self.thread_id, "runId": self.run_id,
               "metadata": {"stepwise": {"sessionId": self.session_id, "executionId": self.execution_id}}})
    }

    fn next_id(&mut self, what: &str) -> String {
        self.seq += 1;
        format!("{}-{}-{what}{}", self.execution_id, self.step, self.seq)
    }

    /// A stored text: sent whole, unless its tokens were streamed.
    fn text(&mut self, out: &mut Out, text: &str) {
        match self.live.take(text) {
            Streamed::Whole => self.close_text(out),
            Streamed::Prefix => {}
            Streamed::No => {
                let id = self.next_id("text");
                out.push(
                    json!({"type": "TEXT_MESSAGE_START", "messageId": id, "role": "assistant"}),
                );
                out.push(json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": id, "delta": text}));
                out.push(json!({"type": "TEXT_MESSAGE_END", "messageId": id}));
            }
        }
    }

    fn open_step(&mut self, out: &mut Out) {
        if self.step_open.is_none() {
            let name = format!("step {}", self.step);
            out.raw(
                format!("data: {{\"type\":\"STEP_STARTED\",\"stepName\":\"{name}\"}}\n\n")
                    .as_bytes(),
            );
            self.step_open = Some(name);
        }
    }

    fn close_text(&mut self, out: &mut Out) {
        if let Some(id) = self.live.id.take() {
            out.push(json!({"type": "TEXT_MESSAGE_END", "messageId": id}));
        }
        self.live = LiveText::default();
    }

    fn close_step(&mut self, out: &mut Out) {
        if let Some(name) = self.step_open.take() {
            out.raw(
                format!("data: {{\"type\":\"STEP_FINISHED\",\"stepName\":\"{name}\"}}\n\n")
                    .as_bytes(),
            );
        }
    }

    fn close_all(&mut self, out: &mut Out) {
        self.close_text(out);
        self.close_step(out);
    }

    pub(crate) fn finished(&self, outcome: Value, result: Option<&str>) -> Value {
        let mut event = json!({"type": "RUN_FINISHED", "threadId": self.thread_id,
                               "runId": self.run_id, "outcome": outcome});
        if let Some(result) = result {
            event["result"] = json!(result);
        }
        event
    }

    /// The interrupt a paused execution ends its run with.
    pub(crate) fn interrupt(&self, question: &str) -> Value {
        let mut interrupt = json!({"id": self.execution_id.to_string(), "reason": "input_required",
                                   "message": question});
        if let Some(call) = &self.asking_call {
            interrupt["toolCallId"] = json!(call);
        }
        json!({"type": "interrupt", "interrupts": [interrupt]})
    }

    /// `RUN_FINISHED` for a run that ends at once (a reconnect with nothing running).
    pub(crate) fn finish_now(&self, paused_question: Option<&str>) -> Value {
        match paused_question {
            Some(question) => self.finished(self.interrupt(question), None),
            None => self.finished(json!({"type": "success"}), None),
        }
    }

    /// The event of a Stepwise event that has no AG-UI event of its own: the same for every viewer.
    fn custom(event: &Event) -> Value {
        json!({"type": "CUSTOM", "name": format!("stepwise.{}", event.event_type.as_str()), "value": event})
    }

    /// The events for one item of the turn.
    pub(crate) fn events(&mut self, item: RunItem) -> Out {
        let mut out = Out::default();
        match item {
            RunItem::StepStarted(n) => {
                self.close_step(&mut out);
                self.step = n;
                self.open_step(&mut out);
            }
            RunItem::Delta(text) => {
                if text.is_empty() {
                    return out;
                }
                let id = match &self.live.id {
                    Some(id) => id.clone(),
                    None => {
                        let id = self.next_id("text");
                        out.push(json!({"type": "TEXT_MESSAGE_START", "messageId": id, "role": "assistant"}));
                        self.live.id = Some(id.clone());
                        id
                    }
                };
                self.live.push(&text);
                out.push(json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": id, "delta": text}));
            }
            RunItem::Step(step) => {
                if self.step != step.step_number {
                    self.close_step(&mut out);
                    self.step = step.step_number;
                }
                self.open_step(&mut out);
                let events = for_step(&STEP_EVENTS, &step, || {
                    StepEvents::new(self.execution_id, &step)
                });
                for (text, frames) in [&events.text, &events.answer].into_iter().flatten() {
                    match self.live.take(text) {
                        Streamed::Whole => self.close_text(&mut out),
                        Streamed::Prefix => {}
                        Streamed::No => out.raw(frames),
                    }
                }
                if events.is_final {
                    self.answered = true;
                }
                if let Some(call) = &events.asking_call {
                    self.asking_call = Some(call.clone());
                }
                out.raw(&events.rest);
                self.close_step(&mut out);
            }
            RunItem::Paused { question } => {
                self.close_all(&mut out);
                self.text(&mut out, &question);
                out.push(self.finished(self.interrupt(&question), None));
            }
            RunItem::Completed { answer } => {
                if !self.answered && !answer.is_empty() {
                    self.text(&mut out, &answer);
                }
                self.close_all(&mut out);
                out.push(self.finished(json!({"type": "success"}), Some(&answer)));
            }
            RunItem::Failed { error } => {
                self.close_all(&mut out);
                out.push(
                    json!({"type": "RUN_ERROR", "message": error, "code": "execution_failed"}),
                );
            }
            RunItem::Cancelled => {
                self.close_all(&mut out);
                out.push(self.finished(json!({"type": "cancelled"}), None));
            }
            RunItem::Other(event) => out.push(AgUiStream::custom(&event)),
            RunItem::KeepAlive => {}
        }
        out
    }
}

/// The events of a stored step, the same for every viewer: its text, its answer (each with
/// the text they hold, to match streamed tokens), and its tool calls with their results.
struct StepEvents {
    text: Option<(String, Bytes)>,
    answer: Option<(String, Bytes)>,
    is_final: bool,
    /// The call without a result (the `user_input` call of a pause).
    asking_call: Option<String>,
    rest: Bytes,
}

static STEP_EVENTS: StepCache<StepEvents> = StepCache::new(VecDeque::new());

impl StepEvents {
    fn new(execution_id: Id, step: &Step) -> Self {
        let n = step.step_number;
        let text_frames = |id: String, text: &str| {
            let mut out = Out::default();
            out.push(json!({"type": "TEXT_MESSAGE_START", "messageId": id, "role": "assistant"}));
            out.push(json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": id, "delta": text}));
            out.push(json!({"type": "TEXT_MESSAGE_END", "messageId": id}));
            out.bytes()
        };
        let text = says_text(step).map(|t| {
            (
                t.to_string(),
                text_frames(format!("{execution_id}-{n}-text"), t),
            )
        });
        let answer = final_answer(step).filter(|a| !a.is_empty()).map(|a| {
            let frames = text_frames(format!("{execution_id}-{n}-answer"), &a);
            (a, frames)
        });
        let mut rest = Out::default();
        let mut asking_call = None;
        if step.kind == StepKind::Action {
            for (i, call) in step.tool_calls.iter().enumerate() {
                let call_id = if call.id.is_empty() {
                    format!("{execution_id}-{n}-call{i}")
                } else {
                    call.id.clone()
                };
                rest.push(json!({"type": "TOOL_CALL_START", "toolCallId": call_id, "toolCallName": call.name}));
                rest.push(json!({"type": "TOOL_CALL_ARGS", "toolCallId": call_id, "delta": call.arguments.to_string()}));
                rest.push(json!({"type": "TOOL_CALL_END", "toolCallId": call_id}));
                let content = match tool_result(step, i) {
                    Some(Ok(output)) => output,
                    Some(Err(error)) => format!("Error: {error}"),
                    None => {
                        asking_call = Some(call_id);
                        continue;
                    }
                };
                rest.push(
                    json!({"type": "TOOL_CALL_RESULT", "messageId": format!("{call_id}-result"),
                                 "toolCallId": call_id, "content": content, "role": "tool"}),
                );
            }
        } else if step.kind != StepKind::FinalAnswer {
            rest.push(json!({"type": "CUSTOM", "name": "stepwise.step", "value": step}));
        }
        StepEvents {
            text,
            answer,
            is_final: step.kind == StepKind::FinalAnswer,
            asking_call,
            rest: rest.bytes(),
        }
    }
}

/// One SSE frame: `data: <event>` and a blank line.
pub(crate) fn frame(event: &Value) -> Bytes {
    let mut out = Vec::with_capacity(128);
    out.extend_from_slice(b"data: ");
    if serde_json::to_writer(&mut out, event).is_err() {
        out.extend_from_slice(b"{}");
    }
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}

fn frames(events: &[Value]) -> Bytes {
    let mut out = Vec::new();
    for event in events {
        out.extend_from_slice(&frame(event));
    }
    Bytes::from(out)
}

/// The streaming answer: `first` (already rendered events), then the turn's events, if
/// any follows.
pub(crate) fn respond<S: Store>(
    first: Vec<Value>,
    follow: Option<(RunFollower<S>, AgUiStream, SubscriberSlot)>,
) -> Response {
    let first = frames(&first);
    let rest = futures_util::stream::unfold(follow, |follow| async move {
        let (mut follower, mut view, slot) = follow?;
        let item = follower.next().await?;
        let bytes = match &item {
            RunItem::KeepAlive => Bytes::from_static(b":\n\n"),
            RunItem::Other(event) => {
                shared_frame(event, "ag-ui", || frame(&AgUiStream::custom(event)))
            }
            _ => view.events(item).bytes(),
        };
        Some((bytes, Some((follower, view, slot))))
    });
    let body = futures_util::StreamExt::map(
        futures_util::StreamExt::chain(futures_util::stream::once(async move { first }), rest),
        Ok::<_, Infallible>,
    );
    (
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
            (header::HeaderName::from_static("x-accel-buffering"), "no"),
        ],
        Body::from_stream(body),
    )
        .into_response()
}

/// The thread's user and assistant messages as AG-UI messages, oldest first, up to and
/// including `until` when given.
pub(crate) async fn snapshot<S: Store>(
    store: &S,
    tenant: &Tenant,
    session_id: Id,
    until: Option<Id>,
) -> ApiResult<Vec<Value>> {
    let mut out = Vec::new();
    let mut after = None;
    loop {
        let page: Vec<Message> = stepwise_store::list_session_messages(
            store,
            tenant,
            session_id,
            MessageQuery {
                after,
                roles: Some(vec![Role::User, Role::Assistant]),
                limit: Some(500),
            },
        )
        .await?;
        let full = page.len() == 500;
        for message in &page {
            out.push(
                json!({"id": message.id.to_string(), "role": message.role.as_str(),
                            "content": message.content}),
            );
            if Some(message.id) == until {
                return Ok(out);
            }
        }
        match page.last() {
            Some(last) if full => after = Some(last.id),
            _ => return Ok(out),
        }
    }
}
