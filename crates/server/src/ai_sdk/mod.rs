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
use stepwise_core::{Event, Id, Step, StepKind};
use stepwise_store::Store;

use crate::limits::SubscriberSlot;
use crate::runs::{
    LiveText, Out, RunFollower, RunItem, StepCache, Streamed, final_answer, for_step, says_text,
    shared_frame, tool_result,
};

/// The header that tells the AI SDK which stream protocol the body speaks.
pub const PROTOCOL_HEADER: &str = "x-vercel-ai-ui-message-stream";

/// The parts of one turn, in the order the AI SDK's `processUIMessageStream` accepts:
/// every text part opened before its deltas and closed before the end, every tool output
/// after its input, `finish`/`error`/`abort` last.
pub(crate) struct UiStream {
    execution_id: Id,
    /// The assistant message's id (the turn's user message id: the same on a resume).
    message_id: String,
    step_open: bool,
    step: u32,
    /// Streamed tokens and their open text part.
    live: LiveText,
    /// The final answer was sent as text.
    answered: bool,
    seq: u32,
}

impl UiStream {
    pub(crate) fn new(execution_id: Id, message_id: Id) -> Self {
        UiStream {
            execution_id,
            message_id: message_id.to_string(),
            step_open: false,
            step: 0,
            live: LiveText::default(),
            answered: false,
            seq: 0,
        }
    }

    /// The first part: `start` with the assistant message's id.
    pub(crate) fn start(&self) -> Value {
        json!({"type": "start", "messageId": self.message_id,
               "messageMetadata": {"sessionExecutionId": self.execution_id}})
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
                out.push(json!({"type": "text-start", "id": id}));
                out.push(json!({"type": "text-delta", "id": id, "delta": text}));
                out.push(json!({"type": "text-end", "id": id}));
            }
        }
    }

    fn open_step(&mut self, out: &mut Out) {
        if !self.step_open {
            out.raw(b"data: {\"type\":\"start-step\"}\n\n");
            self.step_open = true;
        }
    }

    fn close_text(&mut self, out: &mut Out) {
        if let Some(id) = self.live.id.take() {
            out.push(json!({"type": "text-end", "id": id}));
        }
        self.live = LiveText::default();
    }

    fn close_step(&mut self, out: &mut Out) {
        if self.step_open {
            out.raw(b"data: {\"type\":\"finish-step\"}\n\n");
            self.step_open = false;
        }
    }

    /// Before the outcome: nothing left open.
    fn close_all(&mut self, out: &mut Out) {
        self.close_text(out);
        self.close_step(out);
    }

    /// The part of an event that has no part of its own: the same for every viewer.
    fn other(event: &Event) -> Value {
        let kind = event.event_type.as_str().replace('.', "-");
        json!({"type": format!("data-stepwise-{kind}"), "data": event, "transient": true})
    }

    /// The parts for one item of the turn.
    pub(crate) fn parts(&mut self, item: RunItem) -> Out {
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
                        out.push(json!({"type": "text-start", "id": id}));
                        self.live.id = Some(id.clone());
                        id
                    }
                };
                self.live.push(&text);
                out.push(json!({"type": "text-delta", "id": id, "delta": text}));
            }
            RunItem::Step(step) => {
                if self.step != step.step_number {
                    self.close_step(&mut out);
                    self.step = step.step_number;
                }
                self.open_step(&mut out);
                let parts = for_step(&STEP_PARTS, &step, || {
                    StepParts::new(self.execution_id, &step)
                });
                for (text, frames) in [&parts.text, &parts.answer].into_iter().flatten() {
                    match self.live.take(text) {
                        Streamed::Whole => self.close_text(&mut out),
                        Streamed::Prefix => {}
                        Streamed::No => out.raw(frames),
                    }
                }
                if parts.is_final {
                    self.answered = true;
                }
                out.raw(&parts.rest);
                self.close_step(&mut out);
            }
            RunItem::Paused { question } => {
                self.close_all(&mut out);
                self.text(&mut out, &question);
                out.push(
                    json!({"type": "data-stepwise-pause", "id": self.execution_id.to_string(),
                                "data": {"question": question, "executionId": self.execution_id}}),
                );
                out.push(json!({"type": "finish", "finishReason": "other"}));
            }
            RunItem::Completed { answer } => {
                if !self.answered && !answer.is_empty() {
                    self.text(&mut out, &answer);
                }
                self.close_all(&mut out);
                out.push(json!({"type": "finish", "finishReason": "stop"}));
            }
            RunItem::Failed { error } => {
                self.close_all(&mut out);
                out.push(json!({"type": "error", "errorText": error}));
                out.push(json!({"type": "finish", "finishReason": "error"}));
            }
            RunItem::Cancelled => {
                self.close_all(&mut out);
                out.push(json!({"type": "abort", "reason": "the execution was cancelled"}));
            }
            RunItem::Other(event) => out.push(UiStream::other(&event)),
            RunItem::KeepAlive => {}
        }
        out
    }
}

/// The parts of a stored step, the same for every viewer: its text, its answer (each with
/// the text they hold, to match streamed tokens), and its tool calls with their results.
struct StepParts {
    text: Option<(String, Bytes)>,
    answer: Option<(String, Bytes)>,
    is_final: bool,
    rest: Bytes,
}

static STEP_PARTS: StepCache<StepParts> = StepCache::new(VecDeque::new());

impl StepParts {
    fn new(execution_id: Id, step: &Step) -> Self {
        let n = step.step_number;
        let text_frames = |id: String, text: &str| {
            let mut out = Out::default();
            out.push(json!({"type": "text-start", "id": id}));
            out.push(json!({"type": "text-delta", "id": id, "delta": text}));
            out.push(json!({"type": "text-end", "id": id}));
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
        if step.kind == StepKind::Action {
            for (i, call) in step.tool_calls.iter().enumerate() {
                let call_id = if call.id.is_empty() {
                    format!("{execution_id}-{n}-call{i}")
                } else {
                    call.id.clone()
                };
                rest.push(
                    json!({"type": "tool-input-available", "toolCallId": call_id,
                                 "toolName": call.name, "input": call.arguments}),
                );
                match tool_result(step, i) {
                    Some(Ok(output)) => rest.push(json!({"type": "tool-output-available",
                        "toolCallId": call_id, "output": output})),
                    Some(Err(error)) => rest.push(json!({"type": "tool-output-error",
                        "toolCallId": call_id, "errorText": error})),
                    None => {}
                }
            }
        } else if step.kind != StepKind::FinalAnswer {
            rest.push(json!({"type": "data-stepwise-step", "data": step, "transient": true}));
        }
        StepParts {
            text,
            answer,
            is_final: step.kind == StepKind::FinalAnswer,
            rest: rest.bytes(),
        }
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
                    shared_frame(event, "ai-sdk", || frame(&UiStream::other(event)))
                }
                _ => view.parts(item).bytes(),
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
