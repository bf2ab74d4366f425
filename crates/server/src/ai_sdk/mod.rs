//! The Vercel AI SDK's UI message stream (protocol `v1`, what `useChat` with a
//! `DefaultChatTransport` reads) over a session: `POST /v1/ai-sdk/chat` posts a turn and
//! answers it as a stream of parts, `GET /v1/ai-sdk/chat/{chat_id}/stream` replays the running
//! turn from its start (204 when nothing runs), `POST /v1/ai-sdk/chat/{chat_id}/cancel` cancels
//! it. One file per endpoint; here the mapping of a turn's [`RunItem`]s to parts
//! ([`UiStream`]) and the response they share. The mapping table is in docs/api.md.

pub(crate) mod cancel;
pub(crate) mod chat;
pub(crate) mod stream;

use std::collections::VecDeque;
use std::convert::Infallible;

use axum::body::{Body, Bytes};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use stepwise_core::{Event, Id, Step, ToolCall};
use stepwise_store::Store;

use crate::limits::SubscriberSlot;
use crate::runs::{Out, RunFollower, RunItem, StepCache, shared_frame};
use crate::turn::{Protocol, StepFrames, Turn};

/// The header that tells the AI SDK which stream protocol the body speaks.
pub const PROTOCOL_HEADER: &str = "x-vercel-ai-ui-message-stream";

/// The parts of one turn, in the order the AI SDK's `processUIMessageStream` accepts:
/// every text part opened before its deltas and closed before the end, every tool output
/// after its input, `finish`/`error`/`abort` last.
pub(crate) type UiStream = Turn<AiSdk>;

/// The AI SDK's UI message stream: what a turn's parts look like in it.
pub(crate) struct AiSdk {
    /// The assistant message's id (the turn's user message id: the same on a resume).
    message_id: String,
}

impl UiStream {
    pub(crate) fn new(execution_id: Id, message_id: Id) -> Self {
        Turn::begin(
            AiSdk {
                message_id: message_id.to_string(),
            },
            execution_id,
        )
    }

    /// The first part: `start` with the assistant message's id.
    pub(crate) fn start(&self) -> Value {
        json!({"type": "start", "messageId": self.protocol.message_id,
               "messageMetadata": {"sessionExecutionId": self.execution_id()}})
    }
}

static STEP_PARTS: StepCache<StepFrames> = StepCache::new(VecDeque::new());

impl Protocol for AiSdk {
    fn text_start(id: &str) -> Value {
        json!({"type": "text-start", "id": id})
    }

    fn text_delta(id: &str, delta: &str) -> Value {
        json!({"type": "text-delta", "id": id, "delta": delta})
    }

    fn text_end(id: &str) -> Value {
        json!({"type": "text-end", "id": id})
    }

    fn step_started(_: u32) -> Vec<u8> {
        b"data: {\"type\":\"start-step\"}\n\n".to_vec()
    }

    fn step_finished(_: u32) -> Vec<u8> {
        b"data: {\"type\":\"finish-step\"}\n\n".to_vec()
    }

    fn tool_call(
        out: &mut Out,
        call_id: &str,
        call: &ToolCall,
        result: Option<Result<String, String>>,
    ) {
        out.push(
            json!({"type": "tool-input-available", "toolCallId": call_id,
                        "toolName": call.name, "input": call.arguments}),
        );
        match result {
            Some(Ok(output)) => out.push(json!({"type": "tool-output-available",
                "toolCallId": call_id, "output": output})),
            Some(Err(error)) => out.push(json!({"type": "tool-output-error",
                "toolCallId": call_id, "errorText": error})),
            None => {}
        }
    }

    fn other_step(step: &Step) -> Value {
        json!({"type": "data-stepwise-step", "data": step, "transient": true})
    }

    fn other_event(event: &Event) -> Value {
        let kind = event.event_type.as_str().replace('.', "-");
        json!({"type": format!("data-stepwise-{kind}"), "data": event, "transient": true})
    }

    fn step_cache() -> &'static StepCache<StepFrames> {
        &STEP_PARTS
    }

    fn paused(&self, out: &mut Out, execution_id: Id, question: &str, _: Option<&str>) {
        out.push(
            json!({"type": "data-stepwise-pause", "id": execution_id.to_string(),
                        "data": {"question": question, "executionId": execution_id}}),
        );
        out.push(json!({"type": "finish", "finishReason": "other"}));
    }

    fn completed(&self, out: &mut Out, _: &str) {
        out.push(json!({"type": "finish", "finishReason": "stop"}));
    }

    fn failed(&self, out: &mut Out, error: &str) {
        out.push(json!({"type": "error", "errorText": error}));
        out.push(json!({"type": "finish", "finishReason": "error"}));
    }

    fn cancelled(&self, out: &mut Out) {
        out.push(json!({"type": "abort", "reason": "the execution was cancelled"}));
    }
}

/// One SSE frame: `data: <part>` and a blank line.
fn frame(part: &Value) -> Bytes {
    let mut out = Vec::with_capacity(128);
    out.extend_from_slice(b"data: ");
    if serde_json::to_writer(&mut out, part).is_err() {
        out.extend_from_slice(b"{}");
    }
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}

/// The streaming answer: `start`, the turn's parts, then `data: [DONE]`.
pub(crate) fn respond<S: Store>(
    follower: RunFollower<S>,
    view: UiStream,
    slot: SubscriberSlot,
) -> Response {
    let first = frame(&view.start());
    let state = (follower, view, slot, false);
    let rest =
        futures_util::stream::unfold(state, |(mut follower, mut view, slot, done)| async move {
            if done {
                return None;
            }
            let Some(item) = follower.next().await else {
                return Some((
                    Bytes::from_static(b"data: [DONE]\n\n"),
                    (follower, view, slot, true),
                ));
            };
            if matches!(item, RunItem::KeepAlive) {
                return Some((Bytes::from_static(b":\n\n"), (follower, view, slot, false)));
            }
            let bytes = match &item {
                RunItem::Other(event) => {
                    shared_frame(event, "ai-sdk", || frame(&AiSdk::other_event(event)))
                }
                _ => view.frames(item).bytes(),
            };
            Some((bytes, (follower, view, slot, false)))
        });
    let frames = futures_util::StreamExt::map(
        futures_util::StreamExt::chain(futures_util::stream::once(async move { first }), rest),
        Ok::<_, Infallible>,
    );
    (
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
            (header::HeaderName::from_static(PROTOCOL_HEADER), "v1"),
            (header::HeaderName::from_static("x-accel-buffering"), "no"),
        ],
        Body::from_stream(frames),
    )
        .into_response()
}
