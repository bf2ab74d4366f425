//! One turn of a session as chat front ends see it (the AI SDK and AG-UI streams): the
//! stored events of the session from the turn's user message (its `message.created`) to the
//! end of the execution answering it, with the live `message.delta`s of that execution,
//! turned into [`RunItem`]s: steps with their stored rows, streamed tokens, the outcome.
//! Each protocol renders the items its own way; both read the same events as
//! `GET /v1/sessions/{id}/events` (subscribe first, then replay from the store: no gap, no
//! duplicate), so they work for every agent, built-in or external.

use std::collections::{HashMap, VecDeque};
use std::pin::Pin;
use std::sync::{Arc, Mutex, RwLock};

use axum::body::Bytes;

use serde_json::Value;
use stepwise_core::{
    Event, EventType, Execution, ExecutionStatus, Id, Role, Session, Step, StepKind,
};
use stepwise_engine::AgentChoice;
use stepwise_store::{NewSession, Store, Tenant};
use tokio::sync::broadcast;
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

use crate::AppState;
use crate::auth::Caller;
use crate::error::{ApiError, ApiResult};
use crate::events::KEEP_ALIVE;

/// Events read from the store at once while catching up or looking for a turn's start.
const PAGE: u32 = 200;

/// What a front end is told about a turn, in order.
#[derive(Debug, Clone)]
pub(crate) enum RunItem {
    /// `step.started` of step `n`.
    StepStarted(u32),
    /// Streamed model tokens (`message.delta`, live only).
    Delta(String),
    /// `step.completed`, with the step as stored.
    Step(Arc<Step>),
    /// The execution paused: the agent asks the user.
    Paused { question: String },
    /// The execution completed with this answer.
    Completed { answer: String },
    /// The execution failed.
    Failed { error: String },
    /// The execution was cancelled.
    Cancelled,
    /// Any other event of the turn (`message.created`, `execution.started`, `tool.called`...).
    Other(Arc<Event>),
    /// Nothing happened for a while: a keep-alive comment keeps proxies from closing.
    KeepAlive,
}

impl RunItem {
    /// Whether the turn ends with this item.
    pub(crate) fn is_end(&self) -> bool {
        matches!(
            self,
            RunItem::Paused { .. }
                | RunItem::Completed { .. }
                | RunItem::Failed { .. }
                | RunItem::Cancelled
        )
    }
}

/// A turn: the user message that started it and the execution answering it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Turn {
    pub execution_id: Id,
    /// `None`: an execution opened without a user message (an external agent's): the turn
    /// is the whole execution.
    pub message_id: Option<Id>,
}

/// Where a follower starts reading the session's events.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Start {
    /// Subscribed before the turn's message was written: every event of the turn arrives
    /// live (the store is read only after a lag).
    Live,
    /// Replay the stored events after this id, then go live.
    After(i64),
}

/// Follows one turn of a session: the events of its execution from the turn's user
/// message on, ending after the execution's outcome.
pub(crate) struct RunFollower<S: Store> {
    store: S,
    tenant: Tenant,
    session_id: Id,
    turn: Turn,
    live: broadcast::Receiver<Arc<Event>>,
    shutdown: CancellationToken,
    /// The last stored event handed on (None: none yet, in [`Start::Live`]).
    last_seen: Option<i64>,
    replaying: bool,
    backlog: VecDeque<Arc<Event>>,
    /// The turn's user message has been seen: events of the execution count from here.
    started: bool,
    /// The outcome was handed on: nothing follows.
    ended: bool,
    /// Items made from one event, not yet handed on.
    pending: VecDeque<RunItem>,
    /// Fires after [`KEEP_ALIVE`] without an item.
    keep_alive: Pin<Box<tokio::time::Sleep>>,
}

impl<S: Store> RunFollower<S> {
    /// `live` must have been subscribed before anything of the turn could be written (for
    /// [`Start::Live`]) or before the position `start` names was read.
    pub(crate) fn new(
        state: &AppState<S>,
        tenant: Tenant,
        session_id: Id,
        turn: Turn,
        live: broadcast::Receiver<Arc<Event>>,
        start: Start,
    ) -> Self {
        let (last_seen, replaying) = match start {
            Start::Live => (None, false),
            Start::After(after) => (Some(after), true),
        };
        RunFollower {
            store: state.store().clone(),
            tenant,
            session_id,
            turn,
            live,
            shutdown: state.shutdown.clone(),
            last_seen,
            replaying,
            backlog: VecDeque::new(),
            started: turn.message_id.is_none(),
            ended: false,
            pending: VecDeque::new(),
            keep_alive: Box::pin(tokio::time::sleep(KEEP_ALIVE)),
        }
    }

    /// The next item of the turn; `None` after its outcome (or when the server shuts down,
    /// or the store cannot be read).
    pub(crate) async fn next(&mut self) -> Option<RunItem> {
        loop {
            if let Some(item) = self.pending.pop_front() {
                if item.is_end() {
                    self.ended = true;
                }
                self.keep_alive
                    .as_mut()
                    .reset(tokio::time::Instant::now() + KEEP_ALIVE);
                return Some(item);
            }
            if self.ended {
                return None;
            }
            let event = match self.next_event().await? {
                Some(event) => event,
                None => {
                    self.keep_alive
                        .as_mut()
                        .reset(tokio::time::Instant::now() + KEEP_ALIVE);
                    return Some(RunItem::KeepAlive);
                }
            };
            self.accept(event).await;
        }
    }

    /// The next event of the session (stored ones in order, live deltas as they come);
    /// `Some(None)` after [`KEEP_ALIVE`] without one; `None` ends the stream.
    async fn next_event(&mut self) -> Option<Option<Arc<Event>>> {
        loop {
            if let Some(event) = self.backlog.pop_front() {
                self.last_seen = Some(event.id);
                return Some(Some(event));
            }
            if self.replaying {
                let after = self.last_seen.unwrap_or(0);
                let page = tokio::select! {
                    _ = self.shutdown.cancelled() => return None,
                    page = self.store.list_events(&self.tenant, self.session_id, after, PAGE) => page,
                };
                match page {
                    Ok(page) if page.is_empty() => {
                        self.replaying = false;
                        self.last_seen = Some(after);
                    }
                    Ok(page) => self.backlog.extend(page.into_iter().map(Arc::new)),
                    Err(e) => {
                        tracing::warn!(session = %self.session_id, error = %e, "run replay failed; closing the stream");
                        return None;
                    }
                }
                continue;
            }
            let received = tokio::select! {
                _ = self.shutdown.cancelled() => return None,
                () = self.keep_alive.as_mut() => return Some(None),
                received = self.live.recv() => received,
            };
            match received {
                Ok(event) if event.id == 0 => return Some(Some(event)),
                Ok(event) => match self.last_seen {
                    Some(last) if event.id <= last => continue,
                    Some(last) if event.id > last + 1 => {
                        // Committed before the replay's last read and after we
                        // subscribed: read them from the store.
                        self.replaying = true;
                        self.backlog.clear();
                    }
                    _ => {
                        self.last_seen = Some(event.id);
                        return Some(Some(event));
                    }
                },
                Err(RecvError::Lagged(_)) => {
                    // Slower than the session's events: catch up from the store (from the
                    // start when nothing was seen yet; the turn's message marks the start).
                    self.replaying = true;
                    self.backlog.clear();
                }
                Err(RecvError::Closed) => return None,
            }
        }
    }

    /// Turns one event into the items it means for the turn (none for other turns').
    async fn accept(&mut self, event: Arc<Event>) {
        if !self.started {
            if event.event_type == EventType::MessageCreated
                && event.message_id.is_some()
                && event.message_id == self.turn.message_id
            {
                self.started = true;
            }
            return;
        }
        if event.execution_id != Some(self.turn.execution_id) {
            return;
        }
        let item = match event.event_type {
            EventType::MessageDelta => RunItem::Delta(event.content.clone()),
            EventType::StepStarted => match step_number(&event) {
                Some(n) => RunItem::StepStarted(n),
                None => RunItem::Other(event),
            },
            EventType::StepCompleted => match step_number(&event) {
                Some(n) => match self.step(n).await {
                    Some(step) => RunItem::Step(step),
                    None => RunItem::Other(event),
                },
                None => RunItem::Other(event),
            },
            EventType::ExecutionPaused => RunItem::Paused {
                question: event
                    .metadata
                    .get("question")
                    .and_then(Value::as_str)
                    .unwrap_or(&event.content)
                    .to_string(),
            },
            EventType::ExecutionCompleted => RunItem::Completed {
                answer: event.content.clone(),
            },
            EventType::ExecutionFailed => RunItem::Failed {
                error: event.content.clone(),
            },
            EventType::ExecutionCancelled => RunItem::Cancelled,
            _ => RunItem::Other(event),
        };
        self.pending.push_back(item);
    }

    /// Step `n` of the turn's execution, as stored (read through [`STEPS`]).
    async fn step(&self, n: u32) -> Option<Arc<Step>> {
        stored_step(
            &self.store,
            &self.tenant,
            self.session_id,
            self.turn.execution_id,
            n,
        )
        .await
    }
}

/// Step `n` of an execution of the session, as stored: from the steps of the session
/// recently read or acknowledged ([`STEPS`]), else read once for every viewer of the session
/// (only the rows past those already read).
pub(crate) async fn stored_step<S: Store>(
    store: &S,
    tenant: &Tenant,
    session_id: Id,
    execution_id: Id,
    n: u32,
) -> Option<Arc<Step>> {
    let key = (execution_id, n);
    let entry = steps_of(tenant, session_id);
    if let Some(step) = entry.get(key) {
        return Some(step);
    }
    // One read for every viewer of the session: the others wait here, then find it.
    let _loading = entry.loading.lock().await;
    if let Some(step) = entry.get(key) {
        return Some(step);
    }
    let after = *entry.position.read().unwrap_or_else(|e| e.into_inner());
    let started = std::time::Instant::now();
    match store
        .list_session_steps_after(tenant, session_id, after)
        .await
    {
        Ok(read) => {
            tracing::debug!(session = %session_id, rows = read.rows.len(), whole = read.whole,
                elapsed_us = started.elapsed().as_micros() as u64, "front-end streams read new steps");
            entry.add(read)
        }
        Err(e) => {
            tracing::warn!(session = %session_id, error = %e, "could not read the steps");
            return None;
        }
    }
    entry.get(key)
}

pub(crate) fn step_number(event: &Event) -> Option<u32> {
    event
        .metadata
        .get("step_number")
        .and_then(Value::as_u64)
        .and_then(|n| u32::try_from(n).ok())
}

/// How many recent live events keep their rendered frames in [`RENDERED`].
const RECENT_FRAMES: usize = 64;

/// The frames of recent live events that render the same for every viewer (the
/// `data-stepwise-*` parts and `CUSTOM` events of other events): a live event is one `Arc`
/// for every subscriber of its session, so the first stream renders it and the others send
/// the same bytes. Holding the `Arc` keeps the pointer from being reused while it is here.
static RENDERED: RwLock<VecDeque<(Arc<Event>, &'static str, Bytes)>> = RwLock::new(VecDeque::new());

/// `render()` of a live event for `protocol`, rendered once for all its viewers; an event
/// read back from the store (no other holder) is rendered for this viewer alone.
pub(crate) fn shared_frame(
    event: &Arc<Event>,
    protocol: &'static str,
    render: impl FnOnce() -> Bytes,
) -> Bytes {
    if Arc::strong_count(event) < 2 {
        return render();
    }
    let find = |list: &VecDeque<(Arc<Event>, &'static str, Bytes)>| {
        list.iter()
            .rev()
            .find(|(e, p, _)| Arc::ptr_eq(e, event) && *p == protocol)
            .map(|(_, _, frame)| frame.clone())
    };
    if let Some(frame) = find(&RENDERED.read().unwrap_or_else(|e| e.into_inner())) {
        return frame;
    }
    let frame = render();
    let mut list = RENDERED.write().unwrap_or_else(|e| e.into_inner());
    if let Some(frame) = find(&list) {
        return frame;
    }
    if list.len() >= RECENT_FRAMES {
        list.pop_front();
    }
    list.push_back((event.clone(), protocol, frame.clone()));
    frame
}

/// How many sessions keep their steps in [`STEPS`].
const RECENT_SESSIONS: usize = 16;

/// The steps of a session read so far, by execution and step number, and where the next
/// read of new rows starts.
#[derive(Default)]
struct SessionSteps {
    steps: RwLock<HashMap<(Id, u32), Arc<Step>>>,
    position: RwLock<i64>,
    /// Held while reading the store: one read at a time per session.
    loading: tokio::sync::Mutex<()>,
}

impl SessionSteps {
    fn new() -> Self {
        SessionSteps {
            position: RwLock::new(stepwise_store::START_POSITION),
            ..SessionSteps::default()
        }
    }

    fn get(&self, key: (Id, u32)) -> Option<Arc<Step>> {
        self.steps
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
            .cloned()
    }

    /// The rows of a read past the position: new steps are added, the position moves on.
    fn add(&self, read: stepwise_store::StepsAfter) {
        let mut steps = self.steps.write().unwrap_or_else(|e| e.into_inner());
        if read.whole {
            steps.clear();
        }
        let mut position = self.position.write().unwrap_or_else(|e| e.into_inner());
        let highest = read.rows.iter().map(|r| r.position).max();
        for row in read.rows {
            let step = row.item;
            steps
                .entry((step.execution_id, step.step_number))
                .or_insert_with(|| Arc::new(step));
        }
        if !read.whole {
            *position = read
                .next_position
                .or(highest)
                .map_or(*position, |p| p.max(*position));
        }
    }
}

/// The steps of recently followed sessions: every viewer of a run needs each step once, so
/// the first to ask reads the session's new step rows and the others find them here.
static STEPS: Mutex<VecDeque<(SessionKey, Arc<SessionSteps>)>> = Mutex::new(VecDeque::new());

/// A session of a tenant.
type SessionKey = (String, Id);

/// A step the store just acknowledged: when its session is followed, its viewers find it
/// here instead of reading it back (they read it when it comes after its event).
pub(crate) fn remember_step(tenant: &Tenant, step: &Step) {
    let Some(session_id) = step.session_id else {
        return;
    };
    let entry = {
        let list = STEPS.lock().unwrap_or_else(|e| e.into_inner());
        list.iter()
            .find(|((t, id), _)| *id == session_id && t == tenant.as_str())
            .map(|(_, entry)| entry.clone())
    };
    if let Some(entry) = entry {
        entry
            .steps
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .entry((step.execution_id, step.step_number))
            .or_insert_with(|| Arc::new(step.clone()));
    }
}

/// The cache entry of a session (a new, empty one when it has none).
fn steps_of(tenant: &Tenant, session_id: Id) -> Arc<SessionSteps> {
    let mut list = STEPS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, entry)) = list
        .iter()
        .find(|((t, id), _)| *id == session_id && t == tenant.as_str())
    {
        return entry.clone();
    }
    let key = (tenant.as_str().to_string(), session_id);
    if list.len() >= RECENT_SESSIONS {
        list.pop_front();
    }
    let entry = Arc::new(SessionSteps::new());
    list.push_back((key, entry.clone()));
    entry
}

/// The session's latest top-level execution (a subagent's parent, not the subagent).
pub(crate) async fn latest_root_execution<S: Store>(
    store: &S,
    tenant: &Tenant,
    session: &Session,
) -> ApiResult<Option<Execution>> {
    Ok(stepwise_engine::latest_root_execution(store, tenant, session.last_execution_id).await?)
}

/// The turn of a pending or running execution and where to replay it from: the last user
/// message of the execution (its `message.created` event) in the session's events. Reads
/// the session's events from the first. An execution without a user message (an external
/// agent's, opened without one) is a turn of its own, replayed from the first event.
pub(crate) async fn find_turn<S: Store>(
    store: &S,
    tenant: &Tenant,
    session_id: Id,
    execution_id: Id,
) -> ApiResult<(Turn, i64)> {
    let mut after = 0;
    let mut found = None;
    loop {
        let page = store.list_events(tenant, session_id, after, PAGE).await?;
        let Some(last) = page.last() else { break };
        after = last.id;
        for event in &page {
            if event.event_type == EventType::MessageCreated
                && event.execution_id == Some(execution_id)
                && event.metadata.get("role").and_then(Value::as_str) == Some(Role::User.as_str())
                && let Some(message_id) = event.message_id
            {
                found = Some((
                    Turn {
                        execution_id,
                        message_id: Some(message_id),
                    },
                    event.id - 1,
                ));
            }
        }
        if page.len() < PAGE as usize {
            break;
        }
    }
    Ok(found.unwrap_or((
        Turn {
            execution_id,
            message_id: None,
        },
        0,
    )))
}

/// Whether an execution still runs (a front end's resume has something to follow).
pub(crate) fn is_live(execution: &Execution) -> bool {
    matches!(
        execution.status,
        ExecutionStatus::Pending | ExecutionStatus::Running
    )
}

/// A chat or thread id as a front end sends it: a session id or a valid session name, or a
/// 400 naming `field`.
pub(crate) fn check_chat_id(key: &str, field: &str) -> ApiResult<()> {
    if key.parse::<Id>().is_ok() {
        return Ok(());
    }
    stepwise_core::name::validate_name(key).map_err(|e| {
        ApiError::invalid(
            field,
            format!("{field} is neither a session id nor a valid session name: {e}"),
        )
    })
}

/// The session a front end names (checked with [`check_chat_id`]): a session id of the
/// caller's tenant, or a session name; `None` when neither exists or the caller may not see
/// it (another user's session is as absent as another tenant's).
pub(crate) async fn find_session<S: Store>(
    state: &AppState<S>,
    caller: &Caller,
    key: &str,
    field: &str,
) -> ApiResult<Option<Session>> {
    Ok(lookup_session(state, caller, key, field)
        .await?
        .filter(|session| caller.sees(session)))
}

/// [`find_session`] over the whole tenant, whoever owns the session.
async fn lookup_session<S: Store>(
    state: &AppState<S>,
    caller: &Caller,
    key: &str,
    field: &str,
) -> ApiResult<Option<Session>> {
    check_chat_id(key, field)?;
    if let Ok(id) = key.parse::<Id>()
        && let Some(session) = state.store().get_session(&caller.tenant, id).await?
    {
        return Ok(Some(session));
    }
    if stepwise_core::name::validate_name(key).is_err() {
        return Ok(None);
    }
    Ok(state
        .store()
        .find_session_by_name(&caller.tenant, key)
        .await?)
}

/// The session a chat turn goes to: the one `key` names, or a new session named `key`.
pub(crate) async fn session_for_turn<S: Store>(
    state: &AppState<S>,
    caller: &Caller,
    key: &str,
    field: &str,
) -> ApiResult<Session> {
    if let Some(session) = lookup_session(state, caller, key, field).await? {
        // A name another user's session holds never reaches that session (and cannot be
        // taken: names are unique in a tenant).
        if !caller.sees(&session) {
            return Err(ApiError::not_found("session"));
        }
        if session.status == stepwise_core::SessionStatus::Deleted {
            return Err(ApiError::invalid_state("the session is deleted"));
        }
        return Ok(session);
    }
    stepwise_core::name::validate_name(key).map_err(|e| {
        ApiError::invalid(field, format!("{field} is not a valid session name: {e}"))
    })?;
    let new = NewSession {
        user_id: caller.user_id.clone(),
        name: Some(key.to_string()),
        title: None,
        related_type: None,
        related_id: None,
        initial_context_url: None,
        metadata: Value::Null,
    };
    match state.store().create_session(&caller.tenant, new).await {
        Ok(session) => Ok(session),
        // Created by a concurrent first turn: use that one.
        Err(stepwise_store::StoreError::Conflict(_)) => find_session(state, caller, key, field)
            .await?
            .ok_or_else(|| ApiError::conflict("the session was created and deleted meanwhile")),
        Err(e) => Err(e.into()),
    }
}

/// The agent of a turn that names none: the one the session's latest execution ran (so a
/// chat keeps its agent), when the server can run it; else the server's default.
pub(crate) async fn session_agent<S: Store>(
    state: &AppState<S>,
    caller: &Caller,
    session: &Session,
) -> ApiResult<Option<AgentChoice>> {
    let Some(latest) = latest_root_execution(state.store(), &caller.tenant, session).await? else {
        return Ok(None);
    };
    if !state.engine.can_run(&latest.agent_type) {
        return Ok(None);
    }
    Ok(Some(AgentChoice {
        agent_type: latest.agent_type,
        config: latest.agent_config,
    }))
}

/// The kinds of steps whose `model_output` is the agent's text to the user.
pub(crate) fn says_text(step: &Step) -> Option<&str> {
    match step.kind {
        StepKind::Action | StepKind::Planning => step
            .model_output
            .as_deref()
            .filter(|t| !t.trim().is_empty()),
        _ => None,
    }
}

/// A final answer step's answer.
pub(crate) fn final_answer(step: &Step) -> Option<String> {
    if step.kind != StepKind::FinalAnswer {
        return None;
    }
    match &step.output {
        Value::String(text) => Some(text.clone()),
        Value::Null => step.model_output.clone(),
        other => Some(other.to_string()),
    }
}

/// One tool call's result in a step: `Ok(observation)` or `Err(error message)`; `None`
/// when the call has none (the `user_input` call of a pause).
pub(crate) fn tool_result(step: &Step, index: usize) -> Option<Result<String, String>> {
    if let Some(results) = step.output.get("tool_results").and_then(Value::as_array)
        && let Some(result) = results.get(index)
    {
        if let Some(error) = result.get("error").filter(|e| !e.is_null()) {
            let message = error
                .get("message")
                .and_then(Value::as_str)
                .map(str::to_string)
                .unwrap_or_else(|| error.to_string());
            return Some(Err(message));
        }
        let observation = result
            .get("observation")
            .and_then(Value::as_str)
            .unwrap_or_default();
        return Some(Ok(observation.to_string()));
    }
    if step.tool_calls.len() > 1 {
        return None;
    }
    if let Some(error) = &step.error {
        return Some(Err(error.message.clone()));
    }
    step.observations.clone().map(Ok)
}

/// Streamed tokens shown as they came, not yet matched with the stored step that holds
/// them. Deltas are live and stored events are committed in batches, so a step's tokens may
/// arrive before its `step.started`, or even before the previous step's `step.completed`: a
/// stored text that was streamed is recognised by its content and not sent again.
#[derive(Debug, Default)]
pub(crate) struct LiveText {
    /// The open text part (message) the deltas go to.
    pub(crate) id: Option<String>,
    buffer: String,
}

/// Whether a stored text was already streamed.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Streamed {
    /// No: send it.
    No,
    /// Yes, and the open text ends with it: close the text part.
    Whole,
    /// Yes, and more tokens (of the next step) follow it: keep the text part open.
    Prefix,
}

impl LiveText {
    /// Adds a delta (to the open text part, which the caller named in `id`).
    pub(crate) fn push(&mut self, delta: &str) {
        self.buffer.push_str(delta);
    }

    /// Whether `text` was streamed; consumes it from the streamed tokens.
    pub(crate) fn take(&mut self, text: &str) -> Streamed {
        let text = text.trim();
        if self.id.is_none() || text.is_empty() {
            return Streamed::No;
        }
        let buffer = self.buffer.trim_start();
        if buffer.trim_end() == text {
            self.buffer.clear();
            return Streamed::Whole;
        }
        if let Some(rest) = buffer.strip_prefix(text) {
            self.buffer = rest.to_string();
            return Streamed::Prefix;
        }
        Streamed::No
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(session_id: Id, execution_id: Id, n: u32) -> Step {
        Step {
            id: stepwise_core::new_id(),
            execution_id,
            session_id: Some(session_id),
            step_number: n,
            kind: StepKind::Action,
            model_output: Some(format!("step {n}")),
            tool_calls: Vec::new(),
            code: None,
            observations: None,
            error: None,
            output: Value::Null,
            token_usage: Default::default(),
            started_at: None,
            ended_at: None,
            created_at: stepwise_core::Timestamp(0),
        }
    }

    #[test]
    #[allow(clippy::unwrap_used)]
    fn a_stored_step_reaches_the_followers_of_its_session_only() {
        let tenant = Tenant::new("t1").unwrap();
        let (followed, other, execution) = (
            stepwise_core::new_id(),
            stepwise_core::new_id(),
            stepwise_core::new_id(),
        );
        let entry = steps_of(&tenant, followed);
        remember_step(&tenant, &step(followed, execution, 1));
        assert_eq!(
            entry.get((execution, 1)).map(|s| s.step_number),
            Some(1),
            "a followed session's step is there without a read"
        );
        // Another tenant's session of the same id, and a session nobody follows: nothing.
        remember_step(&Tenant::new("t2").unwrap(), &step(followed, execution, 2));
        assert!(entry.get((execution, 2)).is_none());
        remember_step(&tenant, &step(other, execution, 1));
        let list = STEPS.lock().unwrap_or_else(|e| e.into_inner());
        assert!(
            !list.iter().any(|((_, id), _)| *id == other),
            "no entry made for it"
        );
    }

    #[test]
    fn a_streamed_text_is_recognised_whole_or_as_a_prefix() {
        let mut live = LiveText::default();
        assert_eq!(live.take("Hello"), Streamed::No, "nothing streamed");
        live.id = Some("t".into());
        live.push("Hel");
        live.push("lo");
        assert_eq!(live.take("Goodbye"), Streamed::No);
        assert_eq!(live.take(" Hello "), Streamed::Whole);
        live.push("First.");
        live.push(" Second");
        assert_eq!(live.take("First."), Streamed::Prefix);
        assert_eq!(live.take("Second"), Streamed::Whole);
        assert_eq!(live.take(""), Streamed::No);
    }
}

/// The frames of a front-end stream being written: each part as an SSE `data:` line, or
/// bytes rendered before (shared by every viewer).
#[derive(Debug, Default)]
pub(crate) struct Out(Vec<u8>);

impl Out {
    /// One part: `data: <json>` and a blank line.
    pub(crate) fn push(&mut self, part: Value) {
        self.0.extend_from_slice(b"data: ");
        if serde_json::to_writer(&mut self.0, &part).is_err() {
            self.0.extend_from_slice(b"{}");
        }
        self.0.extend_from_slice(b"\n\n");
    }

    /// Frames rendered before.
    pub(crate) fn raw(&mut self, frames: &[u8]) {
        self.0.extend_from_slice(frames);
    }

    pub(crate) fn bytes(self) -> Bytes {
        Bytes::from(self.0)
    }
}

/// Frames of recently streamed steps, per protocol: a step is one `Arc` for every viewer of
/// its run ([`STEPS`]), so its parts are rendered once.
pub(crate) type StepCache<T> = RwLock<VecDeque<(Arc<Step>, Arc<T>)>>;

/// How many steps keep their rendered frames.
const RECENT_STEPS: usize = 32;

/// `build()` of `step`, made once for all its viewers.
pub(crate) fn for_step<T>(
    cache: &'static StepCache<T>,
    step: &Arc<Step>,
    build: impl FnOnce() -> T,
) -> Arc<T> {
    let find = |list: &VecDeque<(Arc<Step>, Arc<T>)>| {
        list.iter()
            .rev()
            .find(|(s, _)| Arc::ptr_eq(s, step))
            .map(|(_, built)| built.clone())
    };
    if let Some(built) = find(&cache.read().unwrap_or_else(|e| e.into_inner())) {
        return built;
    }
    let built = Arc::new(build());
    let mut list = cache.write().unwrap_or_else(|e| e.into_inner());
    if let Some(found) = find(&list) {
        return found;
    }
    if list.len() >= RECENT_STEPS {
        list.pop_front();
    }
    list.push_back((step.clone(), built.clone()));
    built
}
