//! `POST /v1/ai-sdk/chat`: a chat turn from the AI SDK's `DefaultChatTransport`. The body's
//! `id` is the session (its id, or the name of a session, created on the first turn); the
//! last user message of `messages` is the turn, posted like `POST /v1/sessions/{id}/messages`
//! (it answers a paused execution, or queues a new one), unless `messages` ends with the
//! assistant's message holding an output for the pause's `user_input` tool call
//! (`addToolOutput`): that output is the answer. The answer is the turn as a UI message stream.

use axum::extract::State;
use axum::response::Response;
use serde::Deserialize;
use serde_json::Value;
use stepwise_store::Store;

use stepwise_server::{AgentBody, ApiError, ApiJson, ApiResult, AppState, Caller, ErrorBody};

use super::UiStream;
use crate::sessions::{post_turn, session_for_turn, turn_message};
use crate::sse::{frame, respond};

/// What `DefaultChatTransport` posts (fields it adds that are not listed here are ignored).
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct ChatBody {
    /// The chat: a session id, or a session name (a new session of that name on the first turn).
    #[schema(schema_with = stepwise_server::schemas::chat_id)]
    pub id: String,
    /// The chat's messages; the last one with role `user` is the turn.
    pub messages: Vec<UiMessage>,
    /// `submit-message` or `regenerate-message` (both post the last user message).
    #[allow(dead_code)] // in the schema: what the transport sends
    pub trigger: Option<String>,
    #[allow(dead_code)] // in the schema: what the transport sends
    #[serde(rename = "messageId")]
    pub message_id: Option<String>,
    /// The agent that answers (default: the session's latest execution's agent, else the
    /// server's default agent).
    pub agent: Option<AgentBody>,
}

/// A `UIMessage` of the AI SDK: only its text parts are read.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct UiMessage {
    #[allow(dead_code)] // in the schema; Stepwise gives stored messages its own ids
    pub id: Option<String>,
    /// `user`, `assistant` or `system`.
    pub role: String,
    #[serde(default)]
    pub parts: Vec<UiPart>,
}

/// A part of a `UIMessage`: `{type: "text", text}` counts, and the output the page gave the
/// pause's `user_input` tool call (`addToolOutput`); other parts are skipped.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct UiPart {
    /// `text`, `tool-user_input` (or `dynamic-tool`), or another part type (skipped).
    #[serde(rename = "type")]
    pub part_type: String,
    /// A text part's text.
    pub text: Option<Value>,
    /// A `dynamic-tool` part's tool.
    #[serde(rename = "toolName")]
    pub tool_name: Option<String>,
    /// A tool part's output (`state: "output-available"`).
    pub output: Option<Value>,
}

/// The page's answer to the pause: the output it gave the `user_input` tool call
/// (`addToolOutput`, then the transport sends the chat ending with that assistant message).
fn tool_answer(messages: &[UiMessage]) -> Option<String> {
    let last = messages.last().filter(|m| m.role == "assistant")?;
    last.parts.iter().rev().find_map(|part| {
        let asks = part.part_type == "tool-user_input"
            || (part.part_type == "dynamic-tool"
                && part.tool_name.as_deref() == Some("user_input"));
        match part.output.as_ref().filter(|_| asks)? {
            Value::Null => None,
            Value::String(text) => Some(text.clone()),
            other => Some(other.to_string()),
        }
    })
}

impl UiMessage {
    /// The message's text: its text parts, joined by a blank line.
    fn text(&self) -> String {
        let texts: Vec<&str> = self
            .parts
            .iter()
            .filter(|p| p.part_type == "text")
            .filter_map(|p| p.text.as_ref()?.as_str())
            .collect();
        texts.join("\n\n")
    }
}

#[utoipa::path(post, path = "/v1/ai-sdk/chat", tag = "front ends", operation_id = "ai_sdk_chat",
    request_body = ChatBody,
    responses((status = 200, content_type = "text/event-stream", body = stepwise_server::DataFrame,
               description = "The turn as AI SDK UI message stream parts (`data:` lines; header `x-vercel-ai-ui-message-stream: v1`), ending with `data: [DONE]`"),
              (status = 400, body = ErrorBody), (status = 422, body = ErrorBody)))]
#[allow(dead_code)]
pub(crate) fn doc() {}

pub async fn chat<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    ApiJson(body): ApiJson<ChatBody>,
) -> ApiResult<Response> {
    let content = match tool_answer(&body.messages) {
        Some(answer) => answer,
        None => body
            .messages
            .iter()
            .rev()
            .find(|m| m.role == "user")
            .map(UiMessage::text)
            .ok_or_else(|| {
                ApiError::invalid("messages", "messages has no message with role user")
            })?,
    };
    if content.trim().is_empty() {
        return Err(ApiError::invalid(
            "messages",
            "the last user message has no text part",
        ));
    }
    let input = turn_message(&state, content, body.agent)?;
    let session = session_for_turn(&state, &caller, &body.id, "id").await?;
    let (turn, follower, slot) = post_turn(&state, caller, &session, input).await?;
    let message_id = turn.message_id.unwrap_or(turn.execution_id);
    let view = UiStream::new(turn.execution_id, message_id);
    Ok(respond(frame(&view.start()), Some((follower, view, slot))))
}
