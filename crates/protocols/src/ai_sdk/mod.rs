//! The Vercel AI SDK's UI message stream (protocol `v1`, what `useChat` with a
//! `DefaultChatTransport` reads) over a session: `POST /v1/ai-sdk/chat` posts a turn and
//! answers it as a stream of parts, `GET /v1/ai-sdk/chat/{chat_id}/stream` replays the running
//! turn from its start (204 when nothing runs), `POST /v1/ai-sdk/chat/{chat_id}/cancel` cancels
//! it. One file per endpoint; here the mapping of a turn's items to parts
//! ([`UiStream`]); the response is `crate::sse::respond`'s. The mapping table is in docs/api.md.

pub(crate) mod cancel;
pub(crate) mod chat;
pub(crate) mod stream;

use std::collections::VecDeque;

use serde_json::{Value, json};
use stepwise_core::{Event, Id, Step, ToolCall};

use crate::render::{Protocol, StepFrames, TurnFrames};
use crate::sse::{Out, StepCache};

/// The header that tells the AI SDK which stream protocol the body speaks.
pub const PROTOCOL_HEADER: &str = "x-vercel-ai-ui-message-stream";

/// The parts of one turn, in the order the AI SDK's `processUIMessageStream` accepts:
/// every text part opened before its deltas and closed before the end, every tool output
/// after its input, `finish`/`error`/`abort` last.
pub(crate) type UiStream = TurnFrames<AiSdk>;

/// The AI SDK's UI message stream: what a turn's parts look like in it.
pub(crate) struct AiSdk {
    /// The assistant message's id (the turn's user message id: the same on a resume).
    message_id: String,
}

impl UiStream {
    pub(crate) fn new(execution_id: Id, message_id: Id) -> Self {
        TurnFrames::begin(
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
    const NAME: &'static str = "ai-sdk";
    const HEADER: Option<(&'static str, &'static str)> = Some((PROTOCOL_HEADER, "v1"));
    const END: &'static [u8] = b"data: [DONE]\n\n";

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
