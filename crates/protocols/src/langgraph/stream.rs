//! A run's stream as LangGraph's server writes it: `event: metadata` (`{run_id, attempt}`)
//! first, then `event: <mode>` (`<mode>|<namespace>` for a subgraph's, with
//! `stream_subgraphs`) for each chunk of the requested modes, and `event: error` when the
//! run fails.
//!
//! The chunks are what the graph's worker stored with the run: the chunks of `values`,
//! `updates` and `custom` (and `checkpoints`, `tasks`, `debug` when the run's own
//! `stream_mode` asked for them) that came before each saved step, in the step's
//! `output.langgraph.stream` (`[[mode, namespace, data], ...]`), and those after the last step
//! in the snapshot saved when the run ended or paused. So a run's stream is the same when it
//! is joined later, on any node, from its start or after the `Last-Event-ID` it got to: each
//! stored chunk carries its number as its `id`. `messages-tuple` (the model's tokens, as
//! `event: messages`) is live only, and carries no id.

use std::collections::HashSet;
use std::convert::Infallible;

use axum::body::{Body, Bytes};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use stepwise_core::{Execution, Id, Step};
use stepwise_store::{Store, Tenant};

use stepwise_server::{AppState, SubscriberSlot};

use crate::follower::{RunFollower, RunItem};

/// What a stream asks for: its modes, whether subgraphs' chunks too, and where a rejoin
/// starts.
#[derive(Debug, Clone, Default)]
pub(crate) struct Modes {
    modes: HashSet<String>,
    subgraphs: bool,
    /// The last stored chunk the client has (`Last-Event-ID`): the stream goes on after it.
    after: Option<u64>,
}

impl Modes {
    /// The modes of a request: `stream_mode` as a string or a list (`values` when absent, as
    /// LangGraph's default).
    pub(crate) fn new(stream_mode: Option<&Value>, subgraphs: bool) -> Self {
        let modes = match stream_mode {
            Some(Value::String(mode)) => vec![mode.clone()],
            Some(Value::Array(list)) => list
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect(),
            _ => Vec::new(),
        };
        Modes::from_list(modes, subgraphs)
    }

    pub(crate) fn from_list(modes: Vec<String>, subgraphs: bool) -> Self {
        let mut modes: HashSet<String> = modes.into_iter().collect();
        if modes.is_empty() {
            modes.insert("values".into());
        }
        Modes {
            modes,
            subgraphs,
            after: None,
        }
    }

    pub(crate) fn after(mut self, last_event_id: Option<u64>) -> Self {
        self.after = last_event_id;
        self
    }

    fn wants(&self, mode: &str) -> bool {
        self.modes.contains(mode)
    }
}

/// One run's stream to one client.
struct RunStream<S: Store> {
    state: AppState<S>,
    tenant: Tenant,
    execution_id: Id,
    thread_id: String,
    modes: Modes,
    follower: Option<RunFollower<S>>,
    _slot: Option<SubscriberSlot>,
    /// The number of the last stored chunk written or passed over.
    counted: u64,
    /// The step whose tokens are streaming (their message's id).
    step: u32,
    /// Cancels the run when the client leaves before it ends (`on_disconnect: cancel`).
    cancel_on_drop: bool,
    ended: bool,
}

impl<S: Store> Drop for RunStream<S> {
    fn drop(&mut self) {
        if self.cancel_on_drop && !self.ended {
            let engine = self.state.engine.clone();
            let tenant = self.tenant.clone();
            let id = self.execution_id;
            tokio::spawn(async move {
                if let Err(e) = engine.cancel(&tenant, id).await {
                    tracing::debug!(execution = %id, error = %e, "a left stream's run was not cancelled");
                }
            });
        }
    }
}

/// `event: NAME`, an `id` when given, `data: JSON` and a blank line.
fn event(out: &mut Vec<u8>, name: &str, id: Option<u64>, data: &Value) {
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(name.as_bytes());
    out.push(b'\n');
    if let Some(id) = id {
        out.extend_from_slice(format!("id: {id}\n").as_bytes());
    }
    out.extend_from_slice(b"data: ");
    // (Serialising a `Value` cannot fail.)
    let _ = serde_json::to_writer(&mut *out, data);
    out.extend_from_slice(b"\n\n");
}

/// The chunks stored in `holder` (a step's `output`, a snapshot's state):
/// `holder.langgraph.stream`.
fn stored_chunks(holder: &Value) -> &[Value] {
    holder
        .get("langgraph")
        .and_then(|l| l.get("stream"))
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

impl<S: Store> RunStream<S> {
    /// Writes the stored chunks the client asked for and has not had.
    fn chunks(&mut self, out: &mut Vec<u8>, chunks: &[Value]) {
        for chunk in chunks {
            self.counted += 1;
            if self.modes.after.is_some_and(|after| self.counted <= after) {
                continue;
            }
            let (Some(mode), Some(namespace), Some(data)) = (
                chunk.get(0).and_then(Value::as_str),
                chunk.get(1).and_then(Value::as_str),
                chunk.get(2),
            ) else {
                continue;
            };
            if !self.modes.wants(mode) || (!namespace.is_empty() && !self.modes.subgraphs) {
                continue;
            }
            let name = if namespace.is_empty() {
                mode.to_string()
            } else {
                format!("{mode}|{namespace}")
            };
            event(out, &name, Some(self.counted), data);
        }
    }

    fn step(&mut self, out: &mut Vec<u8>, step: &Step) {
        self.chunks(out, stored_chunks(&step.output));
    }

    fn token(&mut self, out: &mut Vec<u8>, text: &str) {
        if !self.modes.wants("messages-tuple") && !self.modes.wants("messages") {
            return;
        }
        let message = json!({
            "type": "AIMessageChunk",
            "content": text,
            "id": format!("lc_run--{}-{}", self.execution_id, self.step),
            "additional_kwargs": {},
            "response_metadata": {},
            "tool_calls": [],
            "invalid_tool_calls": [],
            "tool_call_chunks": [],
        });
        let metadata = json!({
            "run_id": self.execution_id.to_string(),
            "thread_id": self.thread_id,
        });
        event(out, "messages", None, &json!([message, metadata]));
    }

    /// The chunks stored after the run's last step: in the latest state the worker saved.
    async fn tail(&mut self, out: &mut Vec<u8>) {
        match super::threads::run_state(&self.state, &self.tenant, self.execution_id).await {
            Ok(Some(saved)) => {
                let chunks = saved
                    .get("stream")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                self.chunks(out, &chunks);
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(execution = %self.execution_id, error = %e.message, "a run's last chunks could not be read")
            }
        }
    }

    /// The frames of the next item; `None` when the stream is over.
    async fn next(&mut self) -> Option<Bytes> {
        if self.ended {
            return None;
        }
        let Some(follower) = self.follower.as_mut() else {
            self.ended = true;
            return None;
        };
        let Some(item) = follower.next().await else {
            self.ended = true;
            return None;
        };
        let mut out = Vec::new();
        match item {
            RunItem::KeepAlive => out.extend_from_slice(b":\n\n"),
            RunItem::StepStarted(n) => self.step = n,
            RunItem::Delta(text) => self.token(&mut out, &text),
            RunItem::Step(step) => self.step(&mut out, &step),
            RunItem::Completed { .. } | RunItem::Paused { .. } => self.tail(&mut out).await,
            RunItem::Failed { error } => {
                self.counted += 1;
                let data = json!({"error": "RunError", "message": error});
                event(&mut out, "error", Some(self.counted), &data);
            }
            RunItem::Cancelled | RunItem::Other(_) => {}
        }
        Some(Bytes::from(out))
    }
}

/// The streaming answer for a run: its `metadata` event, then what `follower` (`None`: a
/// run that has ended and was read whole) brings.
pub(crate) struct Streamed<S: Store> {
    pub state: AppState<S>,
    pub tenant: Tenant,
    pub execution: Execution,
    pub thread_id: String,
    pub modes: Modes,
    pub follower: Option<(RunFollower<S>, SubscriberSlot)>,
    pub cancel_on_disconnect: bool,
}

pub(crate) fn respond<S: Store>(streamed: Streamed<S>) -> Response {
    let Streamed {
        state,
        tenant,
        execution,
        thread_id,
        modes,
        follower,
        cancel_on_disconnect,
    } = streamed;
    let mut first = Vec::new();
    if modes.after.is_none() {
        let metadata =
            json!({"run_id": execution.id.to_string(), "attempt": execution.attempts.max(1)});
        event(&mut first, "metadata", None, &metadata);
    }
    let location = format!("/threads/{thread_id}/runs/{}/stream", execution.id);
    let content_location = format!("/threads/{thread_id}/runs/{}", execution.id);
    let (follower, slot) = match follower {
        Some((f, s)) => (Some(f), Some(s)),
        None => (None, None),
    };
    let run = RunStream {
        state,
        tenant,
        execution_id: execution.id,
        thread_id,
        modes,
        follower,
        _slot: slot,
        counted: 0,
        step: 0,
        cancel_on_drop: cancel_on_disconnect,
        ended: false,
    };
    let rest = futures_util::stream::unfold(run, |mut run| async move {
        run.next().await.map(|bytes| (bytes, run))
    });
    let body = futures_util::StreamExt::map(
        futures_util::StreamExt::chain(
            futures_util::stream::once(async move { Bytes::from(first) }),
            rest,
        ),
        Ok::<_, Infallible>,
    );
    let mut response = (
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
            (header::HeaderName::from_static("x-accel-buffering"), "no"),
        ],
        Body::from_stream(body),
    )
        .into_response();
    let headers = response.headers_mut();
    for (name, value) in [
        (header::LOCATION, location),
        (header::CONTENT_LOCATION, content_location),
    ] {
        if let Ok(value) = header::HeaderValue::from_str(&value) {
            headers.insert(name, value);
        }
    }
    response
}
