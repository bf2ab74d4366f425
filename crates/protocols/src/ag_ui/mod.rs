//! AG-UI (what `@ag-ui/client`'s `HttpAgent`, CopilotKit and assistant-ui's AG-UI runtime
//! speak) over a session: `POST /v1/ag-ui` runs a `RunAgentInput` (the thread is the
//! session) and answers its events; `POST /v1/ag-ui/connect` gives a reconnecting client
//! the thread's messages and the running turn. One file per endpoint; here the input's
//! types, the mapping of a turn's items to events ([`AgUiStream`]); the response is
//! `crate::sse::respond`'s.
//! The mapping table is in docs/api.md.

pub(crate) mod connect;
pub(crate) mod run;

use std::collections::VecDeque;

use serde::Deserialize;
use serde_json::{Value, json};
use stepwise_core::{Event, Id, Message, Role, Step, ToolCall};
use stepwise_server::{AgentBody, ApiError, ApiResult};
use stepwise_store::{MessageQuery, Store, Tenant};

use crate::render::{Protocol, StepFrames, TurnFrames};
use crate::sse::{Out, StepCache};

/// The AG-UI `RunAgentInput` (the fields Stepwise reads; `tools`, `context` and `state` are
/// accepted and ignored).
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct RunAgentInput {
    /// The thread: a session id, or a session name (a new session of that name on the first run).
    #[serde(rename = "threadId")]
    #[schema(schema_with = stepwise_server::schemas::chat_id)]
    pub thread_id: String,
    /// The client's id for this run (echoed in `RUN_STARTED` and `RUN_FINISHED`).
    #[serde(rename = "runId")]
    #[schema(schema_with = stepwise_server::schemas::run_id)]
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
    #[schema(schema_with = stepwise_server::schemas::object_or_null)]
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
        crate::sessions::check_chat_id(&self.thread_id, "threadId")?;
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
    /// Whether the input ends with a user message: a new turn. A client that sends the whole
    /// thread (`HttpAgent`) ends it with the assistant's last turn when it only answers or
    /// drops an interrupt.
    pub(crate) fn ends_with_user_message(&self) -> bool {
        self.messages.last().is_some_and(|m| m.role == "user")
    }

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
pub(crate) type AgUiStream = TurnFrames<AgUi>;

/// AG-UI: what a run's events look like in it, and the ids they echo.
pub(crate) struct AgUi {
    thread_id: String,
    run_id: String,
    session_id: Id,
}

impl AgUiStream {
    pub(crate) fn new(thread_id: String, run_id: String, session_id: Id, execution_id: Id) -> Self {
        TurnFrames::begin(
            AgUi {
                thread_id,
                run_id,
                session_id,
            },
            execution_id,
        )
    }

    pub(crate) fn run_started(&self) -> Value {
        let AgUi {
            thread_id,
            run_id,
            session_id,
        } = &self.protocol;
        json!({"type": "RUN_STARTED", "threadId": thread_id, "runId": run_id,
               "metadata": {"stepwise": {"sessionId": session_id, "executionId": self.execution_id()}}})
    }

    pub(crate) fn finished(&self, outcome: Value, result: Option<&str>) -> Value {
        self.protocol.finished(outcome, result)
    }

    /// `RUN_FINISHED` for a run that ends at once (a reconnect with nothing running).
    pub(crate) fn finish_now(&self, paused_question: Option<&str>) -> Value {
        match paused_question {
            Some(question) => self.finished(
                interrupt(self.execution_id(), question, self.asking_call()),
                None,
            ),
            None => self.finished(json!({"type": "success"}), None),
        }
    }
}

impl AgUi {
    fn finished(&self, outcome: Value, result: Option<&str>) -> Value {
        let mut event = json!({"type": "RUN_FINISHED", "threadId": self.thread_id,
                               "runId": self.run_id, "outcome": outcome});
        if let Some(result) = result {
            event["result"] = json!(result);
        }
        event
    }
}

/// The interrupt a paused execution ends its run with.
fn interrupt(execution_id: Id, question: &str, asking_call: Option<&str>) -> Value {
    let mut interrupt = json!({"id": execution_id.to_string(), "reason": "input_required",
                               "message": question});
    if let Some(call) = asking_call {
        interrupt["toolCallId"] = json!(call);
    }
    json!({"type": "interrupt", "interrupts": [interrupt]})
}

static STEP_EVENTS: StepCache<StepFrames> = StepCache::new(VecDeque::new());

impl Protocol for AgUi {
    const NAME: &'static str = "ag-ui";
    // `@ag-ui/client` keeps a thread's tool calls by id: a second `call_1` would rename the
    // first and append to its arguments.
    const THREAD_WIDE_CALL_IDS: bool = true;

    fn text_start(id: &str) -> Value {
        json!({"type": "TEXT_MESSAGE_START", "messageId": id, "role": "assistant"})
    }

    fn text_delta(id: &str, delta: &str) -> Value {
        json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": id, "delta": delta})
    }

    fn text_end(id: &str) -> Value {
        json!({"type": "TEXT_MESSAGE_END", "messageId": id})
    }

    fn step_started(n: u32) -> Vec<u8> {
        format!("data: {{\"type\":\"STEP_STARTED\",\"stepName\":\"step {n}\"}}\n\n").into_bytes()
    }

    fn step_finished(n: u32) -> Vec<u8> {
        format!("data: {{\"type\":\"STEP_FINISHED\",\"stepName\":\"step {n}\"}}\n\n").into_bytes()
    }

    fn tool_call(
        out: &mut Out,
        call_id: &str,
        call: &ToolCall,
        result: Option<Result<String, String>>,
    ) {
        out.push(
            json!({"type": "TOOL_CALL_START", "toolCallId": call_id, "toolCallName": call.name}),
        );
        out.push(json!({"type": "TOOL_CALL_ARGS", "toolCallId": call_id, "delta": call.arguments.to_string()}));
        out.push(json!({"type": "TOOL_CALL_END", "toolCallId": call_id}));
        let content = match result {
            Some(Ok(output)) => output,
            Some(Err(error)) => format!("Error: {error}"),
            None => return,
        };
        out.push(
            json!({"type": "TOOL_CALL_RESULT", "messageId": format!("{call_id}-result"),
                        "toolCallId": call_id, "content": content, "role": "tool"}),
        );
    }

    fn other_step(step: &Step) -> Value {
        json!({"type": "CUSTOM", "name": "stepwise.step", "value": step})
    }

    fn other_event(event: &Event) -> Value {
        json!({"type": "CUSTOM", "name": format!("stepwise.{}", event.event_type.as_str()), "value": event})
    }

    fn step_cache() -> &'static StepCache<StepFrames> {
        &STEP_EVENTS
    }

    fn paused(&self, out: &mut Out, execution_id: Id, question: &str, asking_call: Option<&str>) {
        out.push(self.finished(interrupt(execution_id, question, asking_call), None));
    }

    fn completed(&self, out: &mut Out, answer: &str) {
        out.push(self.finished(json!({"type": "success"}), Some(answer)));
    }

    fn failed(&self, out: &mut Out, error: &str) {
        out.push(json!({"type": "RUN_ERROR", "message": error, "code": "execution_failed"}));
    }

    fn cancelled(&self, out: &mut Out) {
        out.push(self.finished(json!({"type": "cancelled"}), None));
    }
}

/// The answer of a run that ends at once: these events, and nothing to follow.
pub(crate) fn run_ended<S: Store>(events: &[Value]) -> axum::response::Response {
    crate::sse::respond::<S, AgUi>(crate::sse::frames(events), None)
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
