//! One turn of a front-end stream (the AI SDK's UI message stream, AG-UI), as both protocols
//! tell it: a step opened before its frames and closed after them, streamed tokens in a text
//! part that the stored text holding them closes instead of repeating, and the outcome last,
//! with nothing left open. [`TurnFrames`] is that order; a [`Protocol`] says how each piece is
//! written.

use axum::body::Bytes;
use serde_json::Value;
use stepwise_core::{Event, Id, Step, StepKind, ToolCall};

use crate::follower::RunItem;
use crate::sse::{Out, StepCache, for_step};
use crate::steps::{LiveText, Streamed, final_answer, says_text, tool_result};

/// How one front-end protocol writes the pieces of a turn.
pub(crate) trait Protocol {
    /// The protocol's name (frames rendered once for every viewer are kept under it).
    const NAME: &'static str;
    /// A header its responses carry besides the event-stream ones.
    const HEADER: Option<(&'static str, &'static str)> = None;
    /// What its stream says after a turn's last frame.
    const END: &'static [u8] = b"";
    /// The part (event) that opens text part `id`.
    fn text_start(id: &str) -> Value;
    /// Text added to text part `id`.
    fn text_delta(id: &str, delta: &str) -> Value;
    /// The part that closes text part `id`.
    fn text_end(id: &str) -> Value;
    /// The frame that opens step `n`.
    fn step_started(n: u32) -> Vec<u8>;
    /// The frame that closes step `n`.
    fn step_finished(n: u32) -> Vec<u8>;
    /// Whether a stored tool call's id goes out prefixed with its execution's id: for a
    /// protocol whose client keeps tool calls by id over the whole thread (AG-UI), where the
    /// agents' own ids (`call_1`, ...) repeat from one execution to the next.
    const THREAD_WIDE_CALL_IDS: bool = false;
    /// A stored tool call's parts: its input, then its result when it has one (`None`: the
    /// `user_input` call of a pause).
    fn tool_call(
        out: &mut Out,
        call_id: &str,
        call: &ToolCall,
        result: Option<Result<String, String>>,
    );
    /// The part of a stored step that is neither an action nor the final answer.
    fn other_step(step: &Step) -> Value;
    /// The part of a Stepwise event the protocol has none of its own for (the same for every
    /// viewer).
    fn other_event(event: &Event) -> Value;
    /// Where this protocol keeps the frames of recent steps.
    fn step_cache() -> &'static StepCache<StepFrames>;
    /// The end of a turn that paused on `question` (already sent as text).
    fn paused(&self, out: &mut Out, execution_id: Id, question: &str, asking_call: Option<&str>);
    /// The end of a turn that completed with `answer` (already sent as text).
    fn completed(&self, out: &mut Out, answer: &str);
    /// The end of a turn whose execution failed.
    fn failed(&self, out: &mut Out, error: &str);
    /// The end of a turn whose execution was cancelled.
    fn cancelled(&self, out: &mut Out);
}

/// The frames of a stored step, the same for every viewer: its text and its answer (each
/// with the text they hold, to match streamed tokens), and the rest (tool calls with their
/// results, or the step itself).
pub(crate) struct StepFrames {
    text: Option<(String, Bytes)>,
    answer: Option<(String, Bytes)>,
    is_final: bool,
    /// The call without a result (the `user_input` call of a pause).
    asking_call: Option<String>,
    rest: Bytes,
}

impl StepFrames {
    fn new<P: Protocol>(execution_id: Id, step: &Step) -> Self {
        let n = step.step_number;
        let text_frames = |id: String, text: &str| {
            let mut out = Out::default();
            out.push(P::text_start(&id));
            out.push(P::text_delta(&id, text));
            out.push(P::text_end(&id));
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
                } else if P::THREAD_WIDE_CALL_IDS {
                    format!("{execution_id}-{}", call.id)
                } else {
                    call.id.clone()
                };
                let result = tool_result(step, i);
                if result.is_none() {
                    asking_call = Some(call_id.clone());
                }
                P::tool_call(&mut rest, &call_id, call, result);
            }
        } else if step.kind != StepKind::FinalAnswer {
            rest.push(P::other_step(step));
        }
        StepFrames {
            text,
            answer,
            is_final: step.kind == StepKind::FinalAnswer,
            asking_call,
            rest: rest.bytes(),
        }
    }
}

/// One turn being written in protocol `P`.
pub(crate) struct TurnFrames<P> {
    /// What the protocol needs of its own (ids it echoes).
    pub(crate) protocol: P,
    execution_id: Id,
    step: u32,
    /// The open step (its number when it was opened).
    open_step: Option<u32>,
    /// Streamed tokens and their open text part.
    live: LiveText,
    /// The final answer was sent as text.
    answered: bool,
    /// The `user_input` call of the step that paused.
    asking_call: Option<String>,
    seq: u32,
}

impl<P: Protocol> TurnFrames<P> {
    pub(crate) fn begin(protocol: P, execution_id: Id) -> Self {
        TurnFrames {
            protocol,
            execution_id,
            step: 0,
            open_step: None,
            live: LiveText::default(),
            answered: false,
            asking_call: None,
            seq: 0,
        }
    }

    pub(crate) fn execution_id(&self) -> Id {
        self.execution_id
    }

    /// The `user_input` call of the step that paused, once one was seen.
    pub(crate) fn asking_call(&self) -> Option<&str> {
        self.asking_call.as_deref()
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
                out.push(P::text_start(&id));
                out.push(P::text_delta(&id, text));
                out.push(P::text_end(&id));
            }
        }
    }

    fn open_step(&mut self, out: &mut Out) {
        if self.open_step.is_none() {
            out.raw(&P::step_started(self.step));
            self.open_step = Some(self.step);
        }
    }

    fn close_text(&mut self, out: &mut Out) {
        if let Some(id) = self.live.id.take() {
            out.push(P::text_end(&id));
        }
        self.live = LiveText::default();
    }

    fn close_step(&mut self, out: &mut Out) {
        if let Some(n) = self.open_step.take() {
            out.raw(&P::step_finished(n));
        }
    }

    /// Before the outcome: nothing left open.
    fn close_all(&mut self, out: &mut Out) {
        self.close_text(out);
        self.close_step(out);
    }

    /// The frames of one item of the turn.
    pub(crate) fn frames(&mut self, item: RunItem) -> Out {
        let mut out = Out::default();
        match item {
            RunItem::StepStarted(n) => {
                self.close_step(&mut out);
                self.step = n;
                self.open_step(&mut out);
            }
            RunItem::Delta(delta) => {
                let text = &delta.content;
                if text.is_empty() {
                    return out;
                }
                let id = match &self.live.id {
                    Some(id) => id.clone(),
                    None => {
                        let id = self.next_id("text");
                        out.push(P::text_start(&id));
                        self.live.id = Some(id.clone());
                        id
                    }
                };
                self.live.push(text);
                out.push(P::text_delta(&id, text));
            }
            RunItem::Step(step) => {
                if self.step != step.step_number {
                    self.close_step(&mut out);
                    self.step = step.step_number;
                }
                self.open_step(&mut out);
                let execution_id = self.execution_id;
                let frames = for_step(P::step_cache(), &step, || {
                    StepFrames::new::<P>(execution_id, &step)
                });
                for (text, bytes) in [&frames.text, &frames.answer].into_iter().flatten() {
                    match self.live.take(text) {
                        Streamed::Whole => self.close_text(&mut out),
                        Streamed::Prefix => {}
                        Streamed::No => out.raw(bytes),
                    }
                }
                if frames.is_final {
                    self.answered = true;
                }
                if let Some(call) = &frames.asking_call {
                    self.asking_call = Some(call.clone());
                }
                out.raw(&frames.rest);
                self.close_step(&mut out);
            }
            RunItem::Paused { question } => {
                self.close_all(&mut out);
                self.text(&mut out, &question);
                let asking_call = self.asking_call.as_deref();
                self.protocol
                    .paused(&mut out, self.execution_id, &question, asking_call);
            }
            RunItem::Completed { answer } => {
                if !self.answered && !answer.is_empty() {
                    self.text(&mut out, &answer);
                }
                self.close_all(&mut out);
                self.protocol.completed(&mut out, &answer);
            }
            RunItem::Failed { error } => {
                self.close_all(&mut out);
                self.protocol.failed(&mut out, &error);
            }
            RunItem::Cancelled => {
                self.close_all(&mut out);
                self.protocol.cancelled(&mut out);
            }
            RunItem::Other(event) => out.push(P::other_event(&event)),
            RunItem::KeepAlive => {}
        }
        out
    }
}
