//! A run's stream as LangGraph's server writes it: `event: metadata` (`{run_id, attempt}`)
//! first, then `event: <mode>` (`<mode>|<namespace>` for a subgraph's, with
//! `stream_subgraphs`) for each chunk of the requested modes, and `event: error` when the
//! run fails.
//!
//! The chunks are what the graph's worker stored with the run: the chunks of `values`,
//! `updates` and `custom` (and `checkpoints`, `tasks`, `debug` when the run's own
//! `stream_mode` asked for them) that came before each saved step, in the step's
//! `output.langgraph` (`stream: [[mode, namespace, data, seq], ...]`, a `batch` id and the
//! `count` of chunks the batch had), and those after the last step in the snapshot saved when
//! the run ended or paused. So a run's stream is the same when it is joined later, on any
//! node, from its start or after the `Last-Event-ID` it got to: each stored chunk carries its
//! number as its `id`.
//!
//! The worker also sends each chunk live as it comes, in its delta's `metadata.langgraph`
//! (`{mode, ns, data, batch, seq, prev}`, `prev` the batch stored before), so a client sees
//! a node's input before its tokens, not when the node's step is saved. A live chunk is
//! written only where it is the next one of the stream (its batch follows the last one
//! stored, its `seq` the last one written) with the id it will have when stored; anything
//! else waits for its batch to be stored, so the stream has no gap, no duplicate and the same
//! ids either way. `messages` (the model's tokens and messages, `messages-tuple`) and
//! `events` are live only and carry no id.

use std::collections::{HashMap, HashSet};
use std::convert::Infallible;

use axum::body::{Body, Bytes};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use stepwise_core::{Event, Execution, Id};
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

/// Where a run's live chunks stand against its stored ones.
#[derive(Debug, Default)]
struct Live {
    /// The batch whose live chunks are being written.
    front: Option<Front>,
    /// The first live chunks of the batch after it, until the front one is stored.
    held: Option<Held>,
    /// The batches stored (and written) so far.
    landed: HashSet<String>,
    /// The messages streamed so far, by id (`messages` mode: its partial messages).
    messages: HashMap<String, Value>,
}

#[derive(Debug)]
struct Front {
    batch: String,
    /// The stream's count before the batch: a chunk's id is `base + seq + 1`.
    base: u64,
    /// The `seq` of the next chunk to write.
    next: u64,
}

#[derive(Debug)]
struct Held {
    batch: String,
    prev: Option<String>,
    chunks: Vec<(String, String, Value)>,
    bytes: usize,
}

/// Live chunks held while the batch before is not stored yet, at most.
const MAX_HELD_CHUNKS: usize = 256;
const MAX_HELD_BYTES: usize = 4 * 1024 * 1024;

/// One run's stream to one client.
struct RunStream<S: Store> {
    state: AppState<S>,
    tenant: Tenant,
    execution_id: Id,
    thread_id: String,
    modes: Modes,
    follower: Option<RunFollower<S>>,
    _slot: Option<SubscriberSlot>,
    /// The number of stored chunks written or passed over (the last id given).
    counted: u64,
    live: Live,
    /// The step whose tokens are streaming (their message's id).
    step: u32,
    /// Cancels the run when the client leaves before it ends (`on_disconnect: cancel`).
    cancel_on_drop: Option<CancelOnDrop<S>>,
    ended: bool,
}

impl<S: Store> Drop for RunStream<S> {
    fn drop(&mut self) {
        if self.ended
            && let Some(guard) = &mut self.cancel_on_drop
        {
            guard.disarm();
        }
    }
}

/// Cancels a run when dropped while armed: the request that waits for it (a stream, a
/// join, a wait) was dropped because its client left (`on_disconnect: "cancel"`,
/// `cancel_on_disconnect`).
pub(crate) struct CancelOnDrop<S: Store> {
    state: AppState<S>,
    tenant: Tenant,
    execution_id: Id,
    armed: bool,
}

impl<S: Store> CancelOnDrop<S> {
    pub(crate) fn new(state: &AppState<S>, tenant: &Tenant, execution_id: Id) -> Self {
        CancelOnDrop {
            state: state.clone(),
            tenant: tenant.clone(),
            execution_id,
            armed: true,
        }
    }

    /// The run ended (or the client stayed): nothing to cancel.
    pub(crate) fn disarm(&mut self) {
        self.armed = false;
    }
}

impl<S: Store> Drop for CancelOnDrop<S> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let engine = self.state.engine.clone();
        let tenant = self.tenant.clone();
        let id = self.execution_id;
        tokio::spawn(async move {
            if let Err(e) = engine.cancel(&tenant, id).await {
                tracing::debug!(execution = %id, error = %e, "a left client's run was not cancelled");
            }
        });
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

/// `a` with the chunk `b` of the same message added (text appended, tool call chunks
/// joined), as `messages` mode shows a partial message.
fn add_chunk(a: &mut Value, b: &Value) {
    let (Some(a), Some(b)) = (a.as_object_mut(), b.as_object()) else {
        return;
    };
    for (key, value) in b {
        match (key.as_str(), a.get_mut(key), value) {
            ("content", Some(Value::String(have)), Value::String(more)) => have.push_str(more),
            ("tool_call_chunks" | "tool_calls", Some(Value::Array(have)), Value::Array(more)) => {
                have.extend(more.iter().cloned())
            }
            (_, Some(_), Value::Null) => {}
            ("content", Some(_), _) | ("id", Some(_), _) => {}
            _ => {
                a.insert(key.clone(), value.clone());
            }
        }
    }
}

impl<S: Store> RunStream<S> {
    /// Writes one chunk with its id, when the client asked for it and has not had it.
    fn chunk(&mut self, out: &mut Vec<u8>, id: u64, mode: &str, namespace: &str, data: &Value) {
        if self.modes.after.is_some_and(|after| id <= after) {
            return;
        }
        if !namespace.is_empty() && !self.modes.subgraphs {
            return;
        }
        if !self.modes.wants(mode) {
            return;
        }
        let name = if namespace.is_empty() {
            mode.to_string()
        } else {
            format!("{mode}|{namespace}")
        };
        event(out, &name, Some(id), data);
    }

    /// A stored batch (a step's `output.langgraph`, a snapshot's `langgraph`): writes its
    /// chunks the client has not had live, and the held live chunks of the batch after it.
    fn land(&mut self, out: &mut Vec<u8>, stored: Option<&Value>) {
        let Some(stored) = stored else { return };
        let chunks = stored
            .get("stream")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        let batch = stored.get("batch").and_then(Value::as_str);
        let base = self.counted;
        let written = match (&self.live.front, batch) {
            (Some(front), Some(batch)) if front.batch == batch => front.next,
            _ => 0,
        };
        let mut count = 0;
        for (position, chunk) in chunks.iter().enumerate() {
            let seq = chunk
                .get(3)
                .and_then(Value::as_u64)
                .unwrap_or(position as u64);
            count = count.max(seq + 1);
            let (Some(mode), Some(namespace), Some(data)) = (
                chunk.get(0).and_then(Value::as_str),
                chunk.get(1).and_then(Value::as_str),
                chunk.get(2),
            ) else {
                continue;
            };
            if seq >= written {
                self.chunk(out, base + seq + 1, mode, namespace, data);
            }
        }
        let count = stored
            .get("count")
            .and_then(Value::as_u64)
            .unwrap_or(count)
            .max(count);
        self.counted = base + count;
        let Some(batch) = batch else { return };
        self.live.landed.insert(batch.to_string());
        // The batch written live is stored (or, stored after another, was lost with its
        // worker): the next one can go live.
        self.live.front = None;
        if self
            .live
            .held
            .as_ref()
            .is_some_and(|held| held.batch == batch)
        {
            self.live.held = None;
        }
        let ready = self.live.held.as_ref().is_some_and(|held| {
            held.prev
                .as_ref()
                .is_none_or(|prev| self.live.landed.contains(prev))
        });
        if ready && let Some(held) = self.live.held.take() {
            let base = self.counted;
            let next = held.chunks.len() as u64;
            for (seq, (mode, namespace, data)) in held.chunks.into_iter().enumerate() {
                self.chunk(out, base + seq as u64 + 1, &mode, &namespace, &data);
            }
            self.live.front = Some(Front {
                batch: held.batch,
                base,
                next,
            });
        }
    }

    /// A chunk the worker sent live (`{mode, ns, data}`, with `batch`, `seq` and `prev` for
    /// one that is stored too).
    fn live_chunk(&mut self, out: &mut Vec<u8>, item: &Value) {
        let (Some(mode), Some(data)) = (item.get("mode").and_then(Value::as_str), item.get("data"))
        else {
            return;
        };
        let namespace = item.get("ns").and_then(Value::as_str).unwrap_or("");
        let Some(batch) = item.get("batch").and_then(Value::as_str) else {
            self.live_only(out, mode, namespace, data);
            return;
        };
        let Some(seq) = item.get("seq").and_then(Value::as_u64) else {
            return;
        };
        if self.live.landed.contains(batch) {
            return;
        }
        if let Some(front) = self.live.front.as_mut() {
            if front.batch == batch {
                if seq == front.next {
                    front.next += 1;
                    let id = front.base + seq + 1;
                    self.chunk(out, id, mode, namespace, data);
                }
                return;
            }
        } else if self.live.held.is_none() && seq == 0 {
            let prev = item.get("prev").and_then(Value::as_str);
            if prev.is_none_or(|prev| self.live.landed.contains(prev)) {
                self.live.front = Some(Front {
                    batch: batch.to_string(),
                    base: self.counted,
                    next: 1,
                });
                let id = self.counted + 1;
                self.chunk(out, id, mode, namespace, data);
                return;
            }
        }
        // Another batch is being written, or the one before this is not stored yet: hold
        // the first chunks of this one (the rest comes when it is stored).
        let size = data.to_string().len();
        match self.live.held.as_mut() {
            Some(held) if held.batch == batch => {
                if seq as usize != held.chunks.len() {
                    return;
                }
                if held.chunks.len() >= MAX_HELD_CHUNKS || held.bytes + size > MAX_HELD_BYTES {
                    self.live.held = None;
                    return;
                }
                held.bytes += size;
                held.chunks
                    .push((mode.to_string(), namespace.to_string(), data.clone()));
            }
            None if seq == 0 && size <= MAX_HELD_BYTES => {
                self.live.held = Some(Held {
                    batch: batch.to_string(),
                    prev: item.get("prev").and_then(Value::as_str).map(str::to_string),
                    chunks: vec![(mode.to_string(), namespace.to_string(), data.clone())],
                    bytes: size,
                });
            }
            _ => {}
        }
    }

    /// A live-only chunk: the model's messages (`messages-tuple`, or `messages` as partial
    /// and complete messages) and `events`.
    fn live_only(&mut self, out: &mut Vec<u8>, mode: &str, namespace: &str, data: &Value) {
        if !namespace.is_empty() && !self.modes.subgraphs {
            return;
        }
        let named = |name: &str| {
            if namespace.is_empty() {
                name.to_string()
            } else {
                format!("{name}|{namespace}")
            }
        };
        if mode != "messages" {
            if self.modes.wants(mode) {
                event(out, &named(mode), None, data);
            }
            return;
        }
        if self.modes.wants("messages-tuple") {
            event(out, &named("messages"), None, data);
            return;
        }
        if !self.modes.wants("messages") {
            return;
        }
        let (Some(message), metadata) = (data.get(0), data.get(1)) else {
            return;
        };
        let Some(id) = message
            .get("id")
            .and_then(Value::as_str)
            .map(str::to_string)
        else {
            return;
        };
        let partial = message
            .get("type")
            .and_then(Value::as_str)
            .is_some_and(|kind| kind.ends_with("Chunk"));
        if !self.live.messages.contains_key(&id) {
            let metadata =
                json!({ id.clone(): {"metadata": metadata.cloned().unwrap_or(Value::Null)} });
            event(out, &named("messages/metadata"), None, &metadata);
        }
        if partial {
            let whole = self
                .live
                .messages
                .entry(id)
                .and_modify(|have| add_chunk(have, message))
                .or_insert_with(|| message.clone());
            let whole = json!([whole]);
            event(out, &named("messages/partial"), None, &whole);
        } else {
            self.live.messages.insert(id, message.clone());
            event(out, &named("messages/complete"), None, &json!([message]));
        }
    }

    fn token(&mut self, out: &mut Vec<u8>, delta: &Event) {
        if let Some(items) = delta.metadata.get("langgraph").and_then(Value::as_array) {
            for item in items {
                self.live_chunk(out, item);
            }
            return;
        }
        // A worker that sends text only: the tokens as one message per step.
        let text = &delta.content;
        if text.is_empty() || (!self.modes.wants("messages-tuple") && !self.modes.wants("messages"))
        {
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
        self.live_only(out, "messages", "", &json!([message, metadata]));
    }

    /// The chunks stored after the run's last step: in the latest state the worker saved.
    async fn tail(&mut self, out: &mut Vec<u8>) {
        match super::threads::run_state(&self.state, &self.tenant, self.execution_id).await {
            Ok(Some(saved)) => self.land(out, Some(&saved)),
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
            RunItem::Delta(delta) => self.token(&mut out, &delta),
            RunItem::Step(step) => self.land(&mut out, step.output.get("langgraph")),
            RunItem::Completed { .. } | RunItem::Paused { .. } => self.tail(&mut out).await,
            RunItem::Failed { error } => {
                self.counted += 1;
                let data = error_body(&error);
                event(&mut out, "error", Some(self.counted), &data);
            }
            RunItem::Cancelled | RunItem::Other(_) => {}
        }
        Some(Bytes::from(out))
    }
}

/// A failed run's `{error, message}` as LangGraph's server sends it: the exception's type and
/// its text. A worker fails a run with `Type: message` (a Python exception's name first); any
/// other failure (a lease given up, a run the server ended) is a `RunError`.
pub(crate) fn error_body(failure: &str) -> Value {
    let named = failure.split_once(": ").filter(|(name, _)| {
        name.starts_with(|c: char| c.is_ascii_uppercase())
            && name.len() <= 128
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    });
    match named {
        Some((name, message)) => json!({"error": name, "message": message}),
        None => json!({"error": "RunError", "message": failure}),
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
    let cancel_on_drop =
        cancel_on_disconnect.then(|| CancelOnDrop::new(&state, &tenant, execution.id));
    let run = RunStream {
        state,
        tenant,
        execution_id: execution.id,
        thread_id,
        modes,
        follower,
        _slot: slot,
        counted: 0,
        live: Live::default(),
        step: 0,
        cancel_on_drop,
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
