//! The `mirror` of a put: new messages of the graph's `messages` channel, appended to the
//! thread's session so it reads like any Stepwise conversation (messages in the UI, steps
//! in its memory, events on its stream). They go to one external *conversation execution*
//! of the session (`metadata.conversation = "langgraph"`), opened on first use:
//!
//! - user text, and assistant text without tool calls: Stepwise messages;
//! - assistant tool calls: a step (the text as its thought, the calls as `tool_calls`),
//!   with the results of those calls that come in the same put as its `observations`;
//! - tool results whose call was mirrored by an earlier put: a step of observations;
//! - system messages are not mirrored.
//!
//! The checkpoint is stored before the mirror is written, and a mirror that cannot be
//! written is logged, never an error of the put: the checkpoint is what LangGraph needs.

use serde::Deserialize;
use serde_json::{Value, json};
use stepwise_core::{
    EventType, ExecutionStatus, Id, Role, StepBody, StepKind, TokenUsage, ToolCall,
};
use stepwise_engine::EXTERNAL_AGENT;
use stepwise_store::{NewExecution, NewStep, Store};

use super::MAX_ITEMS;
use crate::AppState;
use crate::auth::Caller;
use crate::error::{ApiError, ApiResult};

/// The marker of the conversation execution: `metadata.conversation == "langgraph"`.
const MARKER: &str = "langgraph";
/// Largest token count a mirrored usage may name (JSON's exact integers).
const MAX_TOKENS: u64 = 9_007_199_254_740_991;

/// A message of the graph's `messages` channel, as the saver derived it.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[allow(dead_code)]
pub struct MirrorMessage {
    /// `user`, `assistant`, `tool` or `system`.
    #[schema(schema_with = role_schema)]
    pub role: String,
    pub content: String,
    /// The assistant's tool calls: `{id, name, arguments}`.
    #[schema(schema_with = tool_calls_schema)]
    pub tool_calls: Option<Vec<Value>>,
    /// The call a `tool` message answers.
    pub tool_call_id: Option<String>,
    /// Tokens of the model call that produced an assistant message: `{input, output}`.
    #[schema(schema_with = usage_schema)]
    pub usage: Option<Value>,
}

/// `role`: the four roles a mirrored message has.
fn role_schema() -> utoipa::openapi::schema::Schema {
    utoipa::openapi::schema::ObjectBuilder::new()
        .schema_type(utoipa::openapi::schema::Type::String)
        .enum_values(Some(["user", "assistant", "tool", "system"]))
        .build()
        .into()
}

/// `tool_calls`: at most [`MAX_ITEMS`] `{id, name, arguments}`, or `null`.
fn tool_calls_schema() -> utoipa::openapi::schema::Schema {
    use utoipa::openapi::schema::{ArrayBuilder, ObjectBuilder, SchemaType, Type};
    let text = || ObjectBuilder::new().schema_type(Type::String);
    ArrayBuilder::new()
        .schema_type(crate::schemas::typed(Type::Array, true))
        .max_items(Some(MAX_ITEMS))
        .items(
            ObjectBuilder::new()
                .schema_type(Type::Object)
                .required("id")
                .required("name")
                .property("id", text())
                .property("name", text())
                .property(
                    "arguments",
                    ObjectBuilder::new().schema_type(SchemaType::AnyValue),
                ),
        )
        .build()
        .into()
}

/// `usage`: `{input, output}` token counts up to [`MAX_TOKENS`], or `null`.
fn usage_schema() -> utoipa::openapi::schema::Schema {
    use utoipa::openapi::schema::{ObjectBuilder, Type};
    let count = || {
        ObjectBuilder::new()
            .schema_type(Type::Integer)
            .minimum(Some(0))
            .maximum(Some(MAX_TOKENS))
    };
    ObjectBuilder::new()
        .schema_type(crate::schemas::typed(Type::Object, true))
        .property("input", count())
        .property("output", count())
        .build()
        .into()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MirrorRole {
    User,
    Assistant,
    Tool,
    System,
}

#[derive(Debug, Clone)]
pub(crate) struct Mirrored {
    role: MirrorRole,
    content: String,
    tool_calls: Vec<ToolCall>,
    tool_call_id: Option<String>,
    usage: Option<TokenUsage>,
}

fn count(value: Option<&Value>, path: &str) -> ApiResult<u64> {
    match value {
        None => Ok(0),
        Some(v) => v
            .as_u64()
            .or_else(|| {
                v.as_f64()
                    .filter(|f| f.fract() == 0.0 && (0.0..=MAX_TOKENS as f64).contains(f))
                    .map(|f| f as u64)
            })
            .filter(|n| *n <= MAX_TOKENS)
            .ok_or_else(|| {
                ApiError::invalid(
                    path,
                    format!("{path} must be an integer from 0 to {MAX_TOKENS}"),
                )
            }),
    }
}

/// Reads `mirror` (absent or null: nothing to mirror).
pub(crate) fn parse_mirror(value: Option<&Value>) -> ApiResult<Vec<Mirrored>> {
    let items = match value {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(items)) if items.len() <= MAX_ITEMS => items,
        Some(_) => {
            return Err(ApiError::invalid(
                "mirror",
                format!("mirror must be an array of at most {MAX_ITEMS} messages"),
            ));
        }
    };
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let path = format!("mirror[{i}]");
        let Value::Object(m) = item else {
            return Err(ApiError::invalid(
                &path,
                format!("{path} must be an object"),
            ));
        };
        let role = match m.get("role").and_then(Value::as_str) {
            Some("user") => MirrorRole::User,
            Some("assistant") => MirrorRole::Assistant,
            Some("tool") => MirrorRole::Tool,
            Some("system") => MirrorRole::System,
            _ => {
                return Err(ApiError::invalid(
                    &format!("{path}.role"),
                    "role must be user, assistant, tool or system",
                ));
            }
        };
        let content = match m.get("content") {
            Some(Value::String(text)) => text.clone(),
            _ => {
                return Err(ApiError::invalid(
                    &format!("{path}.content"),
                    "content must be a string",
                ));
            }
        };
        let mut tool_calls = Vec::new();
        match m.get("tool_calls") {
            None | Some(Value::Null) => {}
            Some(Value::Array(calls)) if calls.len() <= MAX_ITEMS => {
                for (k, call) in calls.iter().enumerate() {
                    let call_path = format!("{path}.tool_calls[{k}]");
                    let (Some(id), Some(name)) = (
                        call.get("id").and_then(Value::as_str),
                        call.get("name").and_then(Value::as_str),
                    ) else {
                        return Err(ApiError::invalid(
                            &call_path,
                            "a tool call is an object {id, name, arguments} with string id and name",
                        ));
                    };
                    tool_calls.push(ToolCall {
                        id: id.to_string(),
                        name: name.to_string(),
                        arguments: call.get("arguments").cloned().unwrap_or(Value::Null),
                    });
                }
            }
            Some(_) => {
                return Err(ApiError::invalid(
                    &format!("{path}.tool_calls"),
                    format!("tool_calls must be an array of at most {MAX_ITEMS} calls"),
                ));
            }
        }
        let tool_call_id = match m.get("tool_call_id") {
            None | Some(Value::Null) => None,
            Some(Value::String(id)) => Some(id.clone()),
            Some(_) => {
                return Err(ApiError::invalid(
                    &format!("{path}.tool_call_id"),
                    "tool_call_id must be a string or null",
                ));
            }
        };
        let usage = match m.get("usage") {
            None | Some(Value::Null) => None,
            Some(Value::Object(u)) => Some(TokenUsage::new(
                count(u.get("input"), &format!("{path}.usage.input"))?,
                count(u.get("output"), &format!("{path}.usage.output"))?,
            )),
            Some(_) => {
                return Err(ApiError::invalid(
                    &format!("{path}.usage"),
                    "usage must be an object {input, output} or null",
                ));
            }
        };
        out.push(Mirrored {
            role,
            content,
            tool_calls,
            tool_call_id,
            usage,
        });
    }
    Ok(out)
}

/// Appends the mirrored messages to the session (logged, never failing the put).
pub(crate) async fn append<S: Store>(
    state: &AppState<S>,
    caller: &Caller,
    session_id: Id,
    messages: Vec<Mirrored>,
) {
    if let Err(e) = try_append(state, caller, session_id, messages).await {
        tracing::warn!(session = %session_id, error = %e.message, "could not mirror a checkpoint's messages to its session");
    }
}

fn cut(text: &str) -> String {
    crate::error::cut(text, crate::limits::MAX_CONTENT_CHARS)
}

async fn conversation<S: Store>(
    state: &AppState<S>,
    caller: &Caller,
    session_id: Id,
) -> ApiResult<stepwise_core::Execution> {
    let store = state.store();
    let open = store
        .list_executions(&caller.tenant, session_id)
        .await?
        .into_iter()
        .rev()
        .find(|e| {
            e.agent_type == EXTERNAL_AGENT
                && e.status == ExecutionStatus::Running
                && e.metadata.get("conversation").and_then(Value::as_str) == Some(MARKER)
        });
    if let Some(execution) = open {
        return Ok(execution);
    }
    let execution = store
        .create_execution(
            &caller.tenant,
            NewExecution {
                session_id: Some(session_id),
                parent_execution_id: None,
                user_id: caller.user_id.clone(),
                agent_type: EXTERNAL_AGENT.to_string(),
                agent_config: Value::Null,
                input: Value::Null,
                metadata: json!({"conversation": MARKER}),
                status: ExecutionStatus::Running,
                lease: None,
            },
        )
        .await?;
    state
        .engine
        .publisher()
        .emit(
            &caller.tenant,
            Some(session_id),
            Some(execution.id),
            EventType::ExecutionStarted,
            "Execution started",
            json!({}),
        )
        .await;
    Ok(execution)
}

async fn try_append<S: Store>(
    state: &AppState<S>,
    caller: &Caller,
    session_id: Id,
    messages: Vec<Mirrored>,
) -> ApiResult<()> {
    let execution = conversation(state, caller, session_id).await?;
    let mut next_step = execution.step_count + 1;
    let mut i = 0;
    while i < messages.len() {
        let message = &messages[i];
        i += 1;
        match message.role {
            MirrorRole::System => {}
            MirrorRole::User | MirrorRole::Assistant if message.tool_calls.is_empty() => {
                if message.content.trim().is_empty() {
                    continue;
                }
                let role = if message.role == MirrorRole::User {
                    Role::User
                } else {
                    Role::Assistant
                };
                state
                    .engine
                    .publisher()
                    .say(
                        &caller.tenant,
                        session_id,
                        execution.id,
                        role,
                        &cut(&message.content),
                    )
                    .await;
            }
            MirrorRole::User | MirrorRole::Assistant | MirrorRole::Tool => {
                let mut body = StepBody::default();
                let mut results = Vec::new();
                if message.role == MirrorRole::Tool {
                    results.push(message);
                } else {
                    let thought = message.content.trim();
                    body.model_output = (!thought.is_empty()).then(|| cut(thought));
                    body.tool_calls = message
                        .tool_calls
                        .iter()
                        .take(crate::limits::MAX_TOOL_CALLS_PER_STEP)
                        .cloned()
                        .collect();
                    if let Some(usage) = message.usage {
                        body.token_usage = usage;
                    }
                }
                // The results that follow (of these calls, or more unpaired results).
                while let Some(next) = messages.get(i)
                    && next.role == MirrorRole::Tool
                {
                    results.push(next);
                    i += 1;
                }
                if !results.is_empty() {
                    let text: Vec<String> = results
                        .iter()
                        .map(|r| {
                            let call = r.tool_call_id.as_deref().and_then(|id| {
                                message
                                    .tool_calls
                                    .iter()
                                    .find(|c| c.id == id)
                                    .map(|c| c.name.as_str())
                            });
                            match (call, &r.tool_call_id) {
                                (Some(name), _) => format!("{name}: {}", r.content),
                                (None, Some(id)) => format!("{id}: {}", r.content),
                                (None, None) => r.content.clone(),
                            }
                        })
                        .collect();
                    body.observations = Some(cut(&text.join("\n")));
                }
                let step_number = u32::try_from(next_step)
                    .map_err(|_| ApiError::invalid("mirror", "too many steps"))?;
                let tool = body.tool_calls.first().map(|c| c.name.clone());
                let appended = state
                    .store()
                    .append_step(
                        &caller.tenant,
                        NewStep {
                            execution_id: execution.id,
                            step_number,
                            kind: StepKind::Action,
                            body,
                        },
                    )
                    .await?
                    .await?;
                next_step += 1;
                if appended.created {
                    let mut metadata = json!({"step_number": step_number});
                    if let (Some(tool), Some(map)) = (tool, metadata.as_object_mut()) {
                        map.insert("tool".into(), Value::String(tool));
                    }
                    state
                        .engine
                        .publisher()
                        .emit(
                            &caller.tenant,
                            Some(session_id),
                            Some(execution.id),
                            EventType::StepCompleted,
                            &format!("Completed step {step_number}"),
                            metadata,
                        )
                        .await;
                }
            }
        }
    }
    Ok(())
}
