//! One turn of a session as chat front ends see it (the AI SDK and AG-UI streams): the
//! stored events of the session from the turn's user message (its `message.created`) to the
//! end of the execution answering it, with the live `message.delta`s of that execution,
//! turned into [`RunItem`]s: steps with their stored rows, streamed tokens, the outcome.
//! Each protocol renders the items its own way; both read the same events as
//! `GET /v1/sessions/{id}/events` (subscribe first, then replay from the store: no gap, no
//! duplicate), so they work for every agent, built-in or external.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;

use serde_json::Value;
use stepwise_core::{Event, EventType, Execution, ExecutionStatus, Id, Role, Session, Step};
use stepwise_server::step_cache::{step_number, stored_step};
use stepwise_server::{ApiResult, AppState, Caller, KEEP_ALIVE, SubscriberSlot};
use stepwise_store::{Store, Tenant};
use tokio::sync::broadcast;
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

use crate::sessions::latest_root_execution;

/// Events read from the store at once while catching up or looking for a turn's start.
const PAGE: u32 = 200;

/// What a front end is told about a turn, in order.
#[derive(Debug, Clone)]
pub(crate) enum RunItem {
    /// `step.started` of step `n`.
    StepStarted(u32),
    /// Streamed model tokens (`message.delta`, live only): its `content`, and its
    /// `metadata` where the worker sent more than text.
    Delta(Arc<Event>),
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
            shutdown: state.closing().clone(),
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
            EventType::MessageDelta => RunItem::Delta(event),
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

    /// Step `n` of the turn's execution, as stored (read through `stepwise_server::step_cache`).
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

/// What a reconnecting front end finds in a session.
pub(crate) enum Rejoin<S: Store> {
    /// The running turn, followed from its start.
    Running {
        turn: Turn,
        follower: RunFollower<S>,
        slot: SubscriberSlot,
    },
    /// Nothing runs: the session's latest execution, if any.
    Idle(Option<Execution>),
}

/// The session's running turn, followed from its start (subscribed before anything is
/// read, so what the replay misses arrives live), holding a place among the session's
/// streams; or its latest execution when none runs.
pub(crate) async fn rejoin<S: Store>(
    state: &AppState<S>,
    caller: &Caller,
    session: &Session,
) -> ApiResult<Rejoin<S>> {
    let slot = state.stream_slot(&caller.tenant, session.id)?;
    let store = state.store();
    let live = store.subscribe(&caller.tenant, session.id);
    let execution = match latest_root_execution(store, &caller.tenant, session).await? {
        Some(execution) if is_live(&execution) => execution,
        latest => return Ok(Rejoin::Idle(latest)),
    };
    let (turn, after) = find_turn(store, &caller.tenant, session.id, execution.id).await?;
    let follower = RunFollower::new(
        state,
        caller.tenant.clone(),
        session.id,
        turn,
        live,
        Start::After(after),
    );
    Ok(Rejoin::Running {
        turn,
        follower,
        slot,
    })
}
