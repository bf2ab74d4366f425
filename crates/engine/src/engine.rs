//! The engine: submitting messages, cancelling, and the workers' step loop.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::FutureExt;
use futures_util::stream::{FuturesOrdered, StreamExt};
use serde_json::{Value, json};
use stepwise_core::{
    Event, EventType, Execution, ExecutionStatus, Id, Message, Role, Step, StepBody, StepError,
    StepKind, Timestamp, TokenUsage, ToolCall, new_id,
};
use stepwise_store::{
    Ack, Claim, NewEvent, NewExecution, NewMessage, NewSnapshot, NewStep, Result, StepAppend,
    Store, StoreError, Tenant, Transition, restore_memory,
};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::BoxFuture;
use crate::agent::{AgentContext, AgentRegistry, Decision, DeltaSink};
use crate::tools::{SUBAGENT, ToolError, ToolSet, USER_INPUT, string_argument};

/// Executions of this type are driven over HTTP by an agent outside the server; workers
/// never run them.
pub const EXTERNAL_AGENT: &str = "external";

/// How deep subagents may nest (a subagent delegating to a subagent...).
const MAX_SUBAGENT_DEPTH: u32 = 4;
/// The most tool calls one step runs (the HTTP API's limit for a posted step, too).
pub const MAX_TOOL_CALLS_PER_STEP: usize = 64;

#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Worker tasks; each runs one execution at a time.
    pub workers: usize,
    /// How long a claim holds an execution without a heartbeat.
    pub lease: Duration,
    /// Claims after which an execution that keeps losing its worker fails.
    pub max_attempts: u32,
    /// The fallback poll: idle workers look for work the doorbell did not announce (leases
    /// of crashed workers, lost notifications) after between one and two of these.
    pub poll_interval: Duration,
    /// The agent type of a message that names none.
    pub default_agent: String,
    /// How long one tool call may run before it counts as failed ("timed out"); the agent
    /// sees that error as the call's result and goes on. Subagents are not limited by it.
    pub tool_timeout: Duration,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            workers: 8,
            lease: Duration::from_secs(15),
            max_attempts: 5,
            poll_interval: Duration::from_secs(5),
            default_agent: crate::demo::DEMO_AGENT.to_string(),
            tool_timeout: Duration::from_secs(300),
        }
    }
}

/// The agent a message asks for.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentChoice {
    pub agent_type: String,
    pub config: Value,
}

/// A user message to a session.
#[derive(Debug, Clone, Default)]
pub struct MessageInput {
    pub content: String,
    pub related_type: Option<String>,
    pub related_id: Option<String>,
    pub context_url: Option<String>,
    pub metadata: Value,
    pub agent: Option<AgentChoice>,
}

/// What submitting a message did: the stored message and the execution that will answer
/// it (a new pending one, or the paused one it resumed).
#[derive(Debug, Clone)]
pub struct Submitted {
    pub session_id: Id,
    pub message: Message,
    pub execution: Execution,
}

/// How one run of an execution ended.
enum RunEnd {
    Completed(String),
    Failed(String),
    Paused,
    Cancelled,
    /// Given back to the queue (shutdown) or left for the lease to expire (store trouble).
    Released,
    /// Another worker or a cancel elsewhere took it; this run writes nothing more.
    Lost,
}

/// The controls of one running execution.
#[derive(Clone)]
struct RunControl {
    cancel: CancellationToken,
    lost: Arc<AtomicBool>,
    worker: String,
    depth: u32,
}

impl RunControl {
    fn is_lost(&self) -> bool {
        self.lost.load(Ordering::SeqCst)
    }
}

struct Inner<S> {
    store: S,
    agents: AgentRegistry,
    tools: Arc<ToolSet>,
    config: EngineConfig,
    doorbell: Notify,
    running: Mutex<HashMap<Id, CancellationToken>>,
    shutdown: CancellationToken,
    tracker: TaskTracker,
}

/// The execution engine. Cheap to clone; every clone is the same engine.
pub struct Engine<S: Store> {
    inner: Arc<Inner<S>>,
}

impl<S: Store> Clone for Engine<S> {
    fn clone(&self) -> Self {
        Engine {
            inner: self.inner.clone(),
        }
    }
}

impl<S: Store> Engine<S> {
    pub fn new(store: S, agents: AgentRegistry, config: EngineConfig) -> Self {
        Self::with_tools(store, agents, ToolSet::builtin(), config)
    }

    pub fn with_tools(
        store: S,
        agents: AgentRegistry,
        tools: ToolSet,
        config: EngineConfig,
    ) -> Self {
        Engine {
            inner: Arc::new(Inner {
                store,
                agents,
                tools: Arc::new(tools),
                config,
                doorbell: Notify::new(),
                running: Mutex::new(HashMap::new()),
                shutdown: CancellationToken::new(),
                tracker: TaskTracker::new(),
            }),
        }
    }

    pub fn store(&self) -> &S {
        &self.inner.store
    }

    pub fn config(&self) -> &EngineConfig {
        &self.inner.config
    }

    pub fn agents(&self) -> &AgentRegistry {
        &self.inner.agents
    }

    /// Whether messages may name this agent type.
    pub fn can_run(&self, agent_type: &str) -> bool {
        self.inner.agents.contains(agent_type)
    }

    /// Wakes an idle worker: there is work.
    pub fn ring(&self) {
        self.inner.doorbell.notify_one();
    }

    /// How many executions this process is running now.
    pub fn running_count(&self) -> usize {
        self.running_map().len()
    }

    fn running_map(&self) -> std::sync::MutexGuard<'_, HashMap<Id, CancellationToken>> {
        self.inner.running.lock().unwrap_or_else(|e| e.into_inner())
    }

    // --- submitting -------------------------------------------------------------------

    /// Stores a user message in a session and queues the execution that answers it: the
    /// paused execution of the session resumes with the message as the user's answer;
    /// otherwise a new `pending` execution queues behind any running one.
    pub async fn submit_message(
        &self,
        tenant: &Tenant,
        user_id: &str,
        session_id: Id,
        input: MessageInput,
    ) -> Result<Submitted> {
        let store = &self.inner.store;
        let agent = self.choose_agent(&input)?;
        let session = store
            .get_session(tenant, session_id)
            .await?
            .ok_or(StoreError::NotFound("session"))?;
        self.submit_to_session(tenant, user_id, &session, input, agent)
            .await
    }

    /// [`Engine::submit_message`] for a session the caller has just read.
    pub async fn submit_message_to(
        &self,
        tenant: &Tenant,
        user_id: &str,
        session: &stepwise_core::Session,
        input: MessageInput,
    ) -> Result<Submitted> {
        let agent = self.choose_agent(&input)?;
        self.submit_to_session(tenant, user_id, session, input, agent)
            .await
    }

    pub fn choose_agent(&self, input: &MessageInput) -> Result<AgentChoice> {
        match &input.agent {
            Some(choice) => {
                if choice.agent_type == EXTERNAL_AGENT {
                    return Err(StoreError::invalid(
                        "agent.type",
                        "external executions are opened with POST /v1/sessions/{id}/executions",
                    ));
                }
                if !self.can_run(&choice.agent_type) {
                    return Err(StoreError::invalid(
                        "agent.type",
                        format!(
                            "unknown agent type '{}'; known: {}",
                            choice.agent_type,
                            self.inner.agents.names().join(", ")
                        ),
                    ));
                }
                Ok(choice.clone())
            }
            None => Ok(AgentChoice {
                agent_type: self.inner.config.default_agent.clone(),
                config: Value::Null,
            }),
        }
    }

    async fn submit_to_session(
        &self,
        tenant: &Tenant,
        user_id: &str,
        session: &stepwise_core::Session,
        input: MessageInput,
        agent: AgentChoice,
    ) -> Result<Submitted> {
        let store = &self.inner.store;
        let session_id = session.id;

        if let Some(latest) = self
            .latest_root_execution(tenant, session.last_execution_id)
            .await?
            && latest.status == ExecutionStatus::Paused
        {
            let answer = Value::String(input.content.clone());
            match store
                .transition_execution(tenant, latest.id, Transition::Resume { answer })
                .await
            {
                Ok(execution) => {
                    let message = self
                        .user_message(tenant, session_id, execution.id, &input)
                        .await?;
                    self.say(
                        tenant,
                        session_id,
                        execution.id,
                        Role::Info,
                        "Execution resumed",
                    )
                    .await;
                    self.emit(
                        tenant,
                        Some(session_id),
                        Some(execution.id),
                        EventType::ExecutionQueued,
                        "Execution resumed",
                        json!({}),
                    )
                    .await;
                    self.ring();
                    return Ok(Submitted {
                        session_id,
                        message,
                        execution,
                    });
                }
                // Resumed or cancelled by someone else meanwhile: queue a new execution.
                Err(StoreError::InvalidState(_)) => {}
                Err(e) => return Err(e),
            }
        }

        let execution = store
            .create_execution(
                tenant,
                NewExecution {
                    session_id: Some(session_id),
                    parent_execution_id: None,
                    user_id: user_id.to_string(),
                    agent_type: agent.agent_type,
                    agent_config: agent.config,
                    input: json!({"message": input.content}),
                    metadata: Value::Null,
                    status: ExecutionStatus::Pending,
                },
            )
            .await?;
        // The user's message and the "queued" line go to the save queue together (in this
        // order: each is stamped when first polled), so they share one commit; their events
        // follow in the same order.
        let (message, queued) = tokio::join!(
            store.append_message(
                tenant,
                NewMessage {
                    session_id,
                    role: Role::User,
                    content: input.content.clone(),
                    execution_id: Some(execution.id),
                    related_type: input.related_type.clone(),
                    related_id: input.related_id.clone(),
                    context_url: input.context_url.clone(),
                    metadata: input.metadata.clone(),
                },
            ),
            store.append_message(
                tenant,
                NewMessage::new(session_id, Role::Info, "Execution queued")
                    .for_execution(execution.id),
            ),
        );
        let message = message?;
        self.message_event(tenant, &message).await;
        match queued {
            Ok(queued) => self.message_event(tenant, &queued).await,
            Err(e) => {
                tracing::warn!(session = %session_id, error = %e, "could not store a message")
            }
        }
        self.emit(
            tenant,
            Some(session_id),
            Some(execution.id),
            EventType::ExecutionQueued,
            "Execution queued",
            json!({}),
        )
        .await;
        self.ring();
        Ok(Submitted {
            session_id,
            message,
            execution,
        })
    }

    async fn user_message(
        &self,
        tenant: &Tenant,
        session_id: Id,
        execution_id: Id,
        input: &MessageInput,
    ) -> Result<Message> {
        let message = self
            .inner
            .store
            .append_message(
                tenant,
                NewMessage {
                    session_id,
                    role: Role::User,
                    content: input.content.clone(),
                    execution_id: Some(execution_id),
                    related_type: input.related_type.clone(),
                    related_id: input.related_id.clone(),
                    context_url: input.context_url.clone(),
                    metadata: input.metadata.clone(),
                },
            )
            .await?;
        self.message_event(tenant, &message).await;
        Ok(message)
    }

    /// The session's latest top-level execution (a subagent's parent, not the subagent).
    async fn latest_root_execution(
        &self,
        tenant: &Tenant,
        last: Option<Id>,
    ) -> Result<Option<Execution>> {
        let mut next = last;
        for _ in 0..=MAX_SUBAGENT_DEPTH + 1 {
            let Some(id) = next else { return Ok(None) };
            let Some(execution) = self.inner.store.get_execution(tenant, id).await? else {
                return Ok(None);
            };
            match execution.parent_execution_id {
                Some(parent) => next = Some(parent),
                None => return Ok(Some(execution)),
            }
        }
        Ok(None)
    }

    // --- cancelling -------------------------------------------------------------------

    /// Cancels an execution: a pending or paused one at once, one running here at its next
    /// step boundary (a step in flight is aborted), one running elsewhere through the store
    /// (its worker loses the lease). A finished execution is a `Conflict`.
    pub async fn cancel(&self, tenant: &Tenant, id: Id) -> Result<Execution> {
        let store = &self.inner.store;
        let execution = store
            .get_execution(tenant, id)
            .await?
            .ok_or(StoreError::NotFound("execution"))?;
        if execution.status.is_finished() {
            return Err(StoreError::Conflict(format!(
                "the execution is already {}",
                execution.status
            )));
        }
        if execution.status == ExecutionStatus::Running {
            let local = self.running_map().get(&id).cloned();
            if let Some(token) = local {
                token.cancel();
                return Ok(execution);
            }
        }
        let cancelled = match store
            .transition_execution(tenant, id, Transition::Cancel)
            .await
        {
            Ok(cancelled) => cancelled,
            Err(StoreError::InvalidState(_)) => {
                let now = store
                    .get_execution(tenant, id)
                    .await?
                    .ok_or(StoreError::NotFound("execution"))?;
                return Err(StoreError::Conflict(format!(
                    "the execution is already {}",
                    now.status
                )));
            }
            Err(e) => return Err(e),
        };
        let snapshot = self.snapshot_state(&cancelled, "cancelled", None, None);
        drop(
            store
                .save_snapshot(
                    tenant,
                    NewSnapshot {
                        execution_id: id,
                        parent_snapshot_id: None,
                        agent_id: Some(id.to_string()),
                        agent_name: Some(cancelled.agent_type.clone()),
                        step_number: u32::try_from(cancelled.step_count).unwrap_or(u32::MAX),
                        is_final: true,
                        debug_mode: is_debug(&cancelled),
                        state: snapshot,
                    },
                )
                .await,
        );
        if let Some(session_id) = cancelled.session_id {
            self.say(tenant, session_id, id, Role::Info, "Execution cancelled")
                .await;
        }
        self.emit(
            tenant,
            cancelled.session_id,
            Some(id),
            EventType::ExecutionCancelled,
            "Execution cancelled",
            json!({}),
        )
        .await;
        // The session's next queued execution may run now.
        self.ring();
        Ok(cancelled)
    }

    // --- workers ----------------------------------------------------------------------

    /// Starts the workers: one claimer that sleeps on the doorbell and hands what it
    /// claims to a bounded pool of runners (`workers` executions at a time).
    pub fn spawn_workers(&self) {
        let prefix = format!(
            "{}-{}",
            std::process::id(),
            &new_id().simple().to_string()[20..]
        );
        let engine = self.clone();
        self.inner
            .tracker
            .spawn(async move { engine.claimer_loop(prefix).await });
    }

    /// Stops taking work; running executions stop at their next step boundary and go back
    /// to the queue (resumable). Waits up to `grace` for the workers to finish.
    pub async fn shutdown(&self, grace: Duration) -> bool {
        self.inner.shutdown.cancel();
        self.inner.tracker.close();
        tokio::time::timeout(grace, self.inner.tracker.wait())
            .await
            .is_ok()
    }

    /// Claims work while there is some and a runner is free, then sleeps until the
    /// doorbell rings (a message queued here, a run ended here, another node's `NOTIFY`)
    /// or the jittered fallback poll is due (leases of crashed workers, lost notifications).
    /// An idle node so sends one claim query per fallback interval, not one per worker.
    async fn claimer_loop(self, prefix: String) {
        let config = &self.inner.config;
        let shutdown = self.inner.shutdown.clone();
        let (free_tx, mut free_rx) = tokio::sync::mpsc::unbounded_channel::<String>();
        for n in 0..config.workers.max(1) {
            let _ = free_tx.send(format!("worker-{prefix}-{n}"));
        }
        tracing::debug!(workers = config.workers.max(1), "workers started");
        loop {
            let retry_soon;
            {
                // A free runner first: its name is the claim's lease owner.
                let worker = tokio::select! {
                    biased;
                    _ = shutdown.cancelled() => break,
                    worker = free_rx.recv() => match worker {
                        Some(worker) => worker,
                        None => break,
                    },
                };
                match self
                    .inner
                    .store
                    .claim_next(&worker, config.lease, config.max_attempts)
                    .await
                {
                    Ok(Some(claim)) => {
                        // More may be pending: look again as soon as a runner is free.
                        let engine = self.clone();
                        let free_tx = free_tx.clone();
                        self.inner.tracker.spawn(async move {
                            engine.run_claim(&worker, claim).await;
                            let _ = free_tx.send(worker);
                        });
                        continue;
                    }
                    Ok(None) => retry_soon = false,
                    Err(e) => {
                        tracing::warn!(worker, error = %e, "claiming work failed");
                        retry_soon = true;
                    }
                }
                let _ = free_tx.send(worker);
            }
            // A crashed worker's lease expires at most `lease` after its last heartbeat.
            let wait = if retry_soon {
                config.poll_interval.min(Duration::from_secs(1))
            } else {
                jittered(config.poll_interval).min(config.lease)
            };
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = self.inner.doorbell.notified() => {}
                _ = self.inner.store.queue_signal() => {}
                _ = tokio::time::sleep(wait) => {}
            }
        }
        tracing::debug!("workers stopped");
    }

    async fn run_claim(&self, worker: &str, claim: Claim) {
        let Claim {
            execution,
            tenant,
            resume_answer,
        } = claim;
        let id = execution.id;
        tracing::info!(execution = %id, attempts = execution.attempts, agent = %execution.agent_type, "running execution");
        let ctl = RunControl {
            cancel: CancellationToken::new(),
            lost: Arc::new(AtomicBool::new(false)),
            worker: worker.to_string(),
            depth: 0,
        };
        self.running_map().insert(id, ctl.cancel.clone());
        let heartbeat_done = CancellationToken::new();
        let heartbeat_task = tokio::spawn(heartbeat(
            self.inner.store.clone(),
            worker.to_string(),
            id,
            self.inner.config.lease,
            ctl.clone(),
            heartbeat_done.clone(),
        ));

        let end = if execution.parent_execution_id.is_some() {
            // A subagent whose parent's worker died: the parent runs the subagent again
            // when it resumes, so this one is closed.
            self.finish_failed(
                &tenant,
                &execution,
                None,
                "the parent execution's worker stopped; the parent runs the subagent again",
                None,
            )
            .await
        } else if execution.agent_type == EXTERNAL_AGENT {
            // A paused external execution resumed by the user's message: it is running
            // again, driven over HTTP by its agent. Keep its lease alive (without holding a
            // worker) until the agent finishes it or this server stops.
            let store = self.inner.store.clone();
            let (worker, lease, shutdown) = (
                worker.to_string(),
                self.inner.config.lease,
                self.inner.shutdown.clone(),
            );
            let hold = RunControl {
                cancel: CancellationToken::new(),
                lost: Arc::new(AtomicBool::new(false)),
                worker: worker.clone(),
                depth: 0,
            };
            self.inner
                .tracker
                .spawn(heartbeat(store, worker, id, lease, hold, shutdown));
            RunEnd::Lost
        } else {
            self.drive(tenant.clone(), execution, resume_answer, ctl.clone(), None)
                .await
        };

        heartbeat_done.cancel();
        let _ = heartbeat_task.await;
        self.running_map().remove(&id);
        if !matches!(end, RunEnd::Lost) {
            // The session's next queued execution may run now.
            self.ring();
        }
    }

    /// Runs an execution's step loop until it finishes, pauses, or is interrupted.
    /// Boxed so subagents can run inline through the same loop.
    fn drive(
        &self,
        tenant: Tenant,
        execution: Execution,
        resume_answer: Option<Value>,
        ctl: RunControl,
        parent_snapshot_id: Option<Id>,
    ) -> BoxFuture<'_, RunEnd> {
        Box::pin(async move {
            self.drive_inner(tenant, execution, resume_answer, ctl, parent_snapshot_id)
                .await
        })
    }

    async fn drive_inner(
        &self,
        tenant: Tenant,
        execution: Execution,
        resume_answer: Option<Value>,
        ctl: RunControl,
        parent_snapshot_id: Option<Id>,
    ) -> RunEnd {
        let store = &self.inner.store;
        let tenant = &tenant;
        let session_id = execution.session_id;
        let is_child = execution.parent_execution_id.is_some();

        let Some(agent) = self.inner.agents.get(&execution.agent_type) else {
            let reason = format!(
                "no agent of type '{}' is registered in this server",
                execution.agent_type
            );
            return self
                .finish_failed(tenant, &execution, None, &reason, parent_snapshot_id)
                .await;
        };
        let steps = match store.list_steps(tenant, execution.id).await {
            Ok(loaded) => loaded.items,
            Err(e) => {
                tracing::warn!(execution = %execution.id, error = %e, "could not load steps; leaving the execution to its lease");
                return RunEnd::Released;
            }
        };
        let memory = match (agent.needs_session_memory(), session_id) {
            (true, Some(session_id)) => restore_memory(store, tenant, session_id)
                .await
                .ok()
                .flatten(),
            _ => None,
        };

        let started_text = if steps.is_empty() {
            "Execution started"
        } else {
            "Execution resumed"
        };
        if !is_child && let Some(session_id) = session_id {
            self.say(tenant, session_id, execution.id, Role::Info, started_text)
                .await;
        }
        self.emit(
            tenant,
            session_id,
            Some(execution.id),
            EventType::ExecutionStarted,
            started_text,
            json!({"attempt": execution.attempts}),
        )
        .await;

        let deltas = match session_id {
            Some(session_id) => {
                let store = store.clone();
                let tenant = tenant.clone();
                let execution_id = execution.id;
                DeltaSink::new(move |text| {
                    store.publish_live(
                        &tenant,
                        Event {
                            id: 0,
                            session_id,
                            message_id: None,
                            execution_id: Some(execution_id),
                            event_type: EventType::MessageDelta,
                            content: text.to_string(),
                            metadata: json!({}),
                            timestamp: Timestamp::now(),
                        },
                    )
                })
            }
            None => DeltaSink::discard(),
        };
        let mut run = Run {
            ctx: AgentContext {
                tenant: tenant.clone(),
                execution,
                memory,
                steps,
                resume_answer,
                tools: self.inner.tools.clone(),
                cancel: ctl.cancel.clone(),
                deltas,
            },
            last_ack: None,
            parent_snapshot_id,
            latest_snapshot_id: None,
        };
        run.latest_snapshot_id = run.ctx.execution.last_snapshot_id;

        // The user's answer after a pause becomes a `user_input` step (once, even when
        // this run is itself resumed after a crash).
        if let Some(answer) = run.ctx.resume_answer.clone()
            && run
                .ctx
                .steps
                .last()
                .is_none_or(|s| s.kind != StepKind::UserInput)
        {
            let text = match &answer {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            let number = run.ctx.next_step_number();
            self.emit_step(
                tenant,
                &run,
                EventType::StepStarted,
                number,
                format!("Started step {number}"),
                None,
            )
            .await;
            let body = StepBody {
                observations: Some(text),
                output: json!({"answer": answer}),
                ..timed_body()
            };
            self.save_step(
                tenant,
                &mut run,
                StepKind::UserInput,
                body,
                "user answered".into(),
            )
            .await;
        }

        loop {
            if ctl.is_lost() {
                return RunEnd::Lost;
            }
            if ctl.cancel.is_cancelled() {
                return self.finish_cancelled(tenant, &mut run, &ctl).await;
            }
            if !is_child && self.inner.shutdown.is_cancelled() {
                return self.release(tenant, &mut run, &ctl).await;
            }

            let number = run.ctx.next_step_number();
            self.emit_step(
                tenant,
                &run,
                EventType::StepStarted,
                number,
                format!("Started step {number}"),
                None,
            )
            .await;
            let started_at = Timestamp::now();
            let decided = tokio::select! {
                biased;
                _ = ctl.cancel.cancelled() => None,
                result = AssertUnwindSafe(agent.next_step(&run.ctx)).catch_unwind() => Some(result),
            };
            let decision = match decided {
                None => {
                    if ctl.is_lost() {
                        return RunEnd::Lost;
                    }
                    let body = StepBody {
                        error: Some(cancelled_error()),
                        started_at: Some(started_at),
                        ..timed_body()
                    };
                    self.save_step(tenant, &mut run, StepKind::Action, body, "cancelled".into())
                        .await;
                    return self.finish_cancelled(tenant, &mut run, &ctl).await;
                }
                Some(Err(panic)) => {
                    let reason = format!("the agent panicked: {}", panic_message(&panic));
                    let body = StepBody {
                        error: Some(StepError {
                            kind: "panic".into(),
                            message: reason.clone(),
                        }),
                        started_at: Some(started_at),
                        ..timed_body()
                    };
                    self.save_step(
                        tenant,
                        &mut run,
                        StepKind::Action,
                        body,
                        format!("failed: {reason}"),
                    )
                    .await;
                    return self
                        .finish_failed(
                            tenant,
                            &run.ctx.execution.clone(),
                            Some(&mut run),
                            &reason,
                            None,
                        )
                        .await;
                }
                Some(Ok(Err(agent_error))) => {
                    let body = StepBody {
                        error: Some(StepError {
                            kind: agent_error.kind.clone(),
                            message: agent_error.message.clone(),
                        }),
                        started_at: Some(started_at),
                        ..timed_body()
                    };
                    self.save_step(
                        tenant,
                        &mut run,
                        StepKind::Action,
                        body,
                        format!("failed: {}", agent_error.message),
                    )
                    .await;
                    return self
                        .finish_failed(
                            tenant,
                            &run.ctx.execution.clone(),
                            Some(&mut run),
                            &agent_error.message,
                            None,
                        )
                        .await;
                }
                Some(Ok(Ok(decision))) => decision,
            };

            match decision {
                Decision::Fail { error_message } => {
                    return self
                        .finish_failed(
                            tenant,
                            &run.ctx.execution.clone(),
                            Some(&mut run),
                            &error_message,
                            None,
                        )
                        .await;
                }
                Decision::Plan { plan, token_usage } => {
                    let summary =
                        format!("planned: {}", cut(plan.lines().next().unwrap_or(""), 80));
                    let body = StepBody {
                        model_output: Some(plan),
                        token_usage,
                        started_at: Some(started_at),
                        ..timed_body()
                    };
                    self.save_step(tenant, &mut run, StepKind::Planning, body, summary)
                        .await;
                    if is_debug(&run.ctx.execution) {
                        self.snapshot(tenant, &mut run, "running", false, None)
                            .await;
                    }
                }
                Decision::Finish {
                    answer,
                    model_output,
                    token_usage,
                } => {
                    let body = StepBody {
                        model_output,
                        output: Value::String(answer.clone()),
                        token_usage,
                        started_at: Some(started_at),
                        ..timed_body()
                    };
                    self.save_step(
                        tenant,
                        &mut run,
                        StepKind::FinalAnswer,
                        body,
                        "final answer".into(),
                    )
                    .await;
                    return self.finish_completed(tenant, &mut run, answer).await;
                }
                Decision::Act {
                    model_output,
                    tool_calls,
                    token_usage,
                } => {
                    if let Some(ask) = tool_calls.iter().find(|c| c.name == USER_INPUT).cloned() {
                        let question = string_argument(&ask.arguments, "question")
                            .unwrap_or("?")
                            .to_string();
                        self.emit_step(
                            tenant,
                            &run,
                            EventType::ToolCalled,
                            number,
                            format!("Called {USER_INPUT}"),
                            Some(USER_INPUT),
                        )
                        .await;
                        if is_child {
                            let reason = "a subagent cannot ask the user".to_string();
                            let body = StepBody {
                                model_output,
                                tool_calls: vec![ask],
                                error: Some(StepError {
                                    kind: "tool_error".into(),
                                    message: reason.clone(),
                                }),
                                token_usage,
                                started_at: Some(started_at),
                                ..timed_body()
                            };
                            self.save_step(
                                tenant,
                                &mut run,
                                StepKind::Action,
                                body,
                                format!("failed: {reason}"),
                            )
                            .await;
                            return self
                                .finish_failed(
                                    tenant,
                                    &run.ctx.execution.clone(),
                                    Some(&mut run),
                                    &reason,
                                    None,
                                )
                                .await;
                        }
                        let body = StepBody {
                            model_output,
                            tool_calls: vec![ask],
                            output: json!({"question": question}),
                            token_usage,
                            started_at: Some(started_at),
                            ..timed_body()
                        };
                        self.save_step(
                            tenant,
                            &mut run,
                            StepKind::Action,
                            body,
                            format!("called {USER_INPUT}"),
                        )
                        .await;
                        return self.finish_paused(tenant, &mut run, question).await;
                    }

                    let ran = self
                        .run_tool_calls(tenant, &run, &tool_calls, &ctl, number)
                        .await;
                    if ran.interrupted && ctl.is_lost() {
                        return RunEnd::Lost;
                    }
                    let interrupted = ran.interrupted;
                    let names: Vec<&str> = tool_calls.iter().map(|c| c.name.as_str()).collect();
                    let (observations, error, output) = ran.into_step_parts(&tool_calls);
                    let summary = match (&error, names.is_empty()) {
                        (Some(e), _) => format!("failed: {}", e.message),
                        (None, true) => "thought".to_string(),
                        (None, false) => format!("called {}", names.join(", ")),
                    };
                    let body = StepBody {
                        model_output,
                        tool_calls,
                        observations,
                        error,
                        output,
                        token_usage,
                        started_at: Some(started_at),
                        ..timed_body()
                    };
                    self.save_step(tenant, &mut run, StepKind::Action, body, summary)
                        .await;
                    if interrupted {
                        return self.finish_cancelled(tenant, &mut run, &ctl).await;
                    }
                    if is_debug(&run.ctx.execution) {
                        self.snapshot(tenant, &mut run, "running", false, None)
                            .await;
                    }
                }
            }
        }
    }

    /// Runs one step's tool calls: every `tool.called` event first, in call order; then the
    /// calls themselves, all at once (a model asking for several tools in one turn expects
    /// them to run in parallel), each `tool.completed` going out in call order as soon as
    /// that call and the ones before it are done. A subagent call runs after the others,
    /// one at a time: it watches the cancel token itself and must not be dropped midway.
    /// A call that fails or panics is that call's result; the others still run.
    async fn run_tool_calls(
        &self,
        tenant: &Tenant,
        run: &Run,
        calls: &[ToolCall],
        ctl: &RunControl,
        number: u32,
    ) -> ToolRun {
        for call in calls {
            self.emit_step(
                tenant,
                run,
                EventType::ToolCalled,
                number,
                format!("Called {}", call.name),
                Some(&call.name),
            )
            .await;
        }
        let mut results: Vec<Option<CallResult>> = vec![None; calls.len()];
        let mut interrupted = false;
        // A model asking for more calls than a step may hold gets an error for the rest
        // (each call still has its result, so the model can go on).
        for result in results.iter_mut().skip(MAX_TOOL_CALLS_PER_STEP) {
            *result = Some(Err(StepError {
                kind: "tool_error".into(),
                message: format!(
                    "not run: at most {MAX_TOOL_CALLS_PER_STEP} tool calls run in one step"
                ),
            }));
        }

        let mut parallel: FuturesOrdered<_> = calls
            .iter()
            .enumerate()
            .take(MAX_TOOL_CALLS_PER_STEP)
            .filter(|(_, call)| call.name != SUBAGENT)
            .map(|(k, call)| async move {
                let result = AssertUnwindSafe(self.run_tool(tenant, run, call, ctl))
                    .catch_unwind()
                    .await;
                (k, result)
            })
            .collect();
        loop {
            let next = tokio::select! {
                biased;
                _ = ctl.cancel.cancelled() => {
                    interrupted = true;
                    break;
                }
                next = parallel.next() => next,
            };
            let Some((k, result)) = next else {
                break;
            };
            let result = self
                .tool_completed(tenant, run, number, &calls[k], result)
                .await;
            results[k] = Some(result);
        }
        drop(parallel);

        for (k, call) in calls.iter().enumerate().take(MAX_TOOL_CALLS_PER_STEP) {
            if interrupted || call.name != SUBAGENT {
                continue;
            }
            let result = AssertUnwindSafe(self.run_tool(tenant, run, call, ctl))
                .catch_unwind()
                .await;
            if ctl.cancel.is_cancelled() {
                interrupted = true;
                break;
            }
            results[k] = Some(self.tool_completed(tenant, run, number, call, result).await);
        }
        ToolRun {
            results,
            interrupted,
        }
    }

    /// Publishes a finished call's `tool.completed` and turns its outcome into its result.
    async fn tool_completed(
        &self,
        tenant: &Tenant,
        run: &Run,
        number: u32,
        call: &ToolCall,
        result: std::thread::Result<std::result::Result<String, ToolError>>,
    ) -> CallResult {
        let (content, result) = match result {
            Ok(Ok(observation)) => (
                format!("{} returned {}", call.name, cut(&observation, 200)),
                Ok(observation),
            ),
            Ok(Err(tool_error)) => (
                format!("{} failed: {}", call.name, tool_error.message),
                Err(StepError {
                    kind: "tool_error".into(),
                    message: tool_error.message,
                }),
            ),
            Err(panic) => {
                let message = format!("the tool {} panicked: {}", call.name, panic_message(&panic));
                (
                    message.clone(),
                    Err(StepError {
                        kind: "panic".into(),
                        message,
                    }),
                )
            }
        };
        self.emit_step(
            tenant,
            run,
            EventType::ToolCompleted,
            number,
            content,
            Some(&call.name),
        )
        .await;
        result
    }

    async fn run_tool(
        &self,
        tenant: &Tenant,
        run: &Run,
        call: &ToolCall,
        ctl: &RunControl,
    ) -> std::result::Result<String, ToolError> {
        if call.name == SUBAGENT {
            let task = string_argument(&call.arguments, "task")?.to_string();
            return self.run_subagent(tenant, run, task, ctl).await;
        }
        match self.inner.tools.get(&call.name) {
            Some(tool) => {
                let limit = self.inner.config.tool_timeout;
                match tokio::time::timeout(limit, tool.call(&call.arguments)).await {
                    Ok(result) => result,
                    Err(_) => Err(ToolError::new(format!(
                        "the tool {} timed out after {} s",
                        call.name,
                        limit.as_secs_f64()
                    ))),
                }
            }
            None => Err(ToolError::new(format!(
                "there is no tool named '{}'",
                call.name
            ))),
        }
    }

    /// Runs a child execution inline on this worker and answers with its final answer.
    async fn run_subagent(
        &self,
        tenant: &Tenant,
        run: &Run,
        task: String,
        ctl: &RunControl,
    ) -> std::result::Result<String, ToolError> {
        if ctl.depth >= MAX_SUBAGENT_DEPTH {
            return Err(ToolError::new(format!(
                "subagents nest at most {MAX_SUBAGENT_DEPTH} deep"
            )));
        }
        let parent = &run.ctx.execution;
        // The child's snapshots point to the parent's latest one; make sure there is one.
        let parent_snapshot_id = match run.latest_snapshot_id {
            Some(id) => Some(id),
            None => {
                self.save_snapshot_now(
                    tenant,
                    parent,
                    &run.ctx,
                    "delegating",
                    false,
                    run.parent_snapshot_id,
                    None,
                )
                .await
            }
        };
        let child = self
            .inner
            .store
            .create_execution(
                tenant,
                NewExecution {
                    session_id: parent.session_id,
                    parent_execution_id: Some(parent.id),
                    user_id: parent.user_id.clone(),
                    agent_type: parent.agent_type.clone(),
                    agent_config: parent.agent_config.clone(),
                    input: json!({"message": task}),
                    metadata: Value::Null,
                    status: ExecutionStatus::Running,
                },
            )
            .await
            .map_err(|e| ToolError::new(format!("could not start the subagent: {e}")))?;
        let child_ctl = RunControl {
            cancel: ctl.cancel.child_token(),
            lost: ctl.lost.clone(),
            worker: ctl.worker.clone(),
            depth: ctl.depth + 1,
        };
        self.running_map()
            .insert(child.id, child_ctl.cancel.clone());
        let end = self
            .drive(
                tenant.clone(),
                child.clone(),
                None,
                child_ctl,
                parent_snapshot_id,
            )
            .await;
        self.running_map().remove(&child.id);
        match end {
            RunEnd::Completed(answer) => Ok(answer),
            RunEnd::Failed(reason) => Err(ToolError::new(format!("the subagent failed: {reason}"))),
            RunEnd::Cancelled => Err(ToolError::new("the subagent was cancelled")),
            RunEnd::Paused | RunEnd::Released | RunEnd::Lost => {
                Err(ToolError::new("the subagent was interrupted"))
            }
        }
    }

    // --- saving -------------------------------------------------------------------------

    /// Queues a step (fire-and-forget: the agent loop does not wait for the disk), its
    /// info line and its `step.completed` event, and adds it to the context.
    async fn save_step(
        &self,
        tenant: &Tenant,
        run: &mut Run,
        kind: StepKind,
        mut body: StepBody,
        summary: String,
    ) {
        let execution = &run.ctx.execution;
        let number = run.ctx.next_step_number();
        if body.ended_at.is_none() {
            body.ended_at = Some(Timestamp::now());
        }
        let failed = body.error.is_some();
        let tool = body.tool_calls.first().map(|c| c.name.clone());
        let step = Step::from_body(
            new_id(),
            execution.id,
            execution.session_id,
            number,
            kind,
            body.clone(),
            Timestamp::now(),
        );
        match self
            .inner
            .store
            .append_step(
                tenant,
                NewStep {
                    execution_id: execution.id,
                    step_number: number,
                    kind,
                    body,
                },
            )
            .await
        {
            Ok(ack) => run.last_ack = Some(ack),
            Err(e) => {
                tracing::warn!(execution = %execution.id, step = number, error = %e, "could not queue a step")
            }
        }
        // step.completed is queued right behind the step, so both commit in one batch and
        // subscribers hear of the step as soon as it is durable; the status line follows.
        let content = if failed {
            format!("Step {number} failed")
        } else {
            format!("Completed step {number}")
        };
        self.emit_step(
            tenant,
            run,
            EventType::StepCompleted,
            number,
            content,
            tool.as_deref(),
        )
        .await;
        if let Some(session_id) = execution.session_id {
            let prefix = if execution.parent_execution_id.is_some() {
                "Subagent step"
            } else {
                "Step"
            };
            self.say(
                tenant,
                session_id,
                execution.id,
                Role::Info,
                &format!("{prefix} {number}: {summary}"),
            )
            .await;
        }
        run.ctx.steps.push(step);
    }

    /// Waits until the steps queued so far are durable (before a status change, so a
    /// finished execution's steps are all there when a client sees it finished).
    async fn settle_steps(&self, run: &mut Run) {
        if let Some(ack) = run.last_ack.take()
            && let Err(e) = ack.await
        {
            tracing::warn!(execution = %run.ctx.execution.id, error = %e, "a step could not be saved");
        }
    }

    async fn finish_completed(&self, tenant: &Tenant, run: &mut Run, answer: String) -> RunEnd {
        self.settle_steps(run).await;
        let execution = run.ctx.execution.clone();
        if execution.parent_execution_id.is_none()
            && let Some(session_id) = execution.session_id
        {
            self.say(tenant, session_id, execution.id, Role::Assistant, &answer)
                .await;
        }
        self.snapshot(
            tenant,
            run,
            "completed",
            true,
            Some(json!({"output": answer})),
        )
        .await;
        if let Err(e) = self
            .inner
            .store
            .transition_execution(
                tenant,
                execution.id,
                Transition::Complete {
                    output: Value::String(answer.clone()),
                },
            )
            .await
        {
            tracing::warn!(execution = %execution.id, error = %e, "could not complete the execution");
            return RunEnd::Lost;
        }
        self.emit(
            tenant,
            execution.session_id,
            Some(execution.id),
            EventType::ExecutionCompleted,
            &answer,
            json!({"step_count": run.ctx.steps.len()}),
        )
        .await;
        RunEnd::Completed(answer)
    }

    /// Fails an execution with its reason; `run` is absent when it never started.
    async fn finish_failed(
        &self,
        tenant: &Tenant,
        execution: &Execution,
        run: Option<&mut Run>,
        reason: &str,
        parent_snapshot_id: Option<Id>,
    ) -> RunEnd {
        match run {
            Some(run) => {
                self.settle_steps(run).await;
                self.snapshot(
                    tenant,
                    run,
                    "failed",
                    true,
                    Some(json!({"error_message": reason})),
                )
                .await;
            }
            None => {
                let ctx_steps = Vec::new();
                let state = self.snapshot_state(
                    execution,
                    "failed",
                    Some(json!({"error_message": reason})),
                    Some(&ctx_steps),
                );
                drop(
                    self.inner
                        .store
                        .save_snapshot(
                            tenant,
                            new_snapshot(execution, 0, true, parent_snapshot_id, state),
                        )
                        .await,
                );
            }
        }
        if let Err(e) = self
            .inner
            .store
            .transition_execution(
                tenant,
                execution.id,
                Transition::Fail {
                    error_message: reason.to_string(),
                },
            )
            .await
        {
            tracing::warn!(execution = %execution.id, error = %e, "could not fail the execution");
            return RunEnd::Lost;
        }
        if execution.parent_execution_id.is_none()
            && let Some(session_id) = execution.session_id
        {
            self.say(
                tenant,
                session_id,
                execution.id,
                Role::Info,
                &format!("Execution failed: {reason}"),
            )
            .await;
        }
        self.emit(
            tenant,
            execution.session_id,
            Some(execution.id),
            EventType::ExecutionFailed,
            reason,
            json!({}),
        )
        .await;
        RunEnd::Failed(reason.to_string())
    }

    async fn finish_paused(&self, tenant: &Tenant, run: &mut Run, question: String) -> RunEnd {
        self.settle_steps(run).await;
        let execution = run.ctx.execution.clone();
        self.snapshot(
            tenant,
            run,
            "paused",
            false,
            Some(json!({"question": question})),
        )
        .await;
        // Paused before the question is posted, so an answer sent right after it resumes.
        if let Err(e) = self
            .inner
            .store
            .transition_execution(
                tenant,
                execution.id,
                Transition::Pause {
                    question: question.clone(),
                },
            )
            .await
        {
            tracing::warn!(execution = %execution.id, error = %e, "could not pause the execution");
            return RunEnd::Lost;
        }
        if let Some(session_id) = execution.session_id {
            self.say(tenant, session_id, execution.id, Role::Assistant, &question)
                .await;
        }
        self.emit(
            tenant,
            execution.session_id,
            Some(execution.id),
            EventType::ExecutionPaused,
            &question,
            json!({"question": question}),
        )
        .await;
        RunEnd::Paused
    }

    async fn finish_cancelled(&self, tenant: &Tenant, run: &mut Run, ctl: &RunControl) -> RunEnd {
        if ctl.is_lost() {
            return RunEnd::Lost;
        }
        self.settle_steps(run).await;
        let execution = run.ctx.execution.clone();
        self.snapshot(tenant, run, "cancelled", true, None).await;
        if let Err(e) = self
            .inner
            .store
            .transition_execution(tenant, execution.id, Transition::Cancel)
            .await
        {
            tracing::debug!(execution = %execution.id, error = %e, "could not cancel the execution (already finished?)");
            return RunEnd::Lost;
        }
        if execution.parent_execution_id.is_none()
            && let Some(session_id) = execution.session_id
        {
            self.say(
                tenant,
                session_id,
                execution.id,
                Role::Info,
                "Execution cancelled",
            )
            .await;
        }
        self.emit(
            tenant,
            execution.session_id,
            Some(execution.id),
            EventType::ExecutionCancelled,
            "Execution cancelled",
            json!({}),
        )
        .await;
        RunEnd::Cancelled
    }

    /// Shutdown: the steps so far are made durable and the execution goes back to the
    /// queue, to resume from its last saved step.
    async fn release(&self, tenant: &Tenant, run: &mut Run, ctl: &RunControl) -> RunEnd {
        let _ = tenant;
        self.settle_steps(run).await;
        if let Err(e) = self
            .inner
            .store
            .release(&ctl.worker, run.ctx.execution.id)
            .await
        {
            tracing::warn!(execution = %run.ctx.execution.id, error = %e, "could not release; its lease will expire");
        }
        RunEnd::Released
    }

    async fn snapshot(
        &self,
        tenant: &Tenant,
        run: &mut Run,
        status: &str,
        is_final: bool,
        extra: Option<Value>,
    ) {
        let id = self
            .save_snapshot_now(
                tenant,
                &run.ctx.execution,
                &run.ctx,
                status,
                is_final,
                run.parent_snapshot_id,
                extra,
            )
            .await;
        if id.is_some() {
            run.latest_snapshot_id = id;
        }
    }

    /// Saves a snapshot and waits for it (snapshots are rare: pause, finish, debug steps,
    /// before a subagent), so its id can link subagents' snapshots.
    #[allow(clippy::too_many_arguments)]
    async fn save_snapshot_now(
        &self,
        tenant: &Tenant,
        execution: &Execution,
        ctx: &AgentContext,
        status: &str,
        is_final: bool,
        parent_snapshot_id: Option<Id>,
        extra: Option<Value>,
    ) -> Option<Id> {
        let state = self.snapshot_state(execution, status, extra, Some(&ctx.steps));
        let step_number = ctx.steps.last().map_or(0, |s| s.step_number);
        let saved = match self
            .inner
            .store
            .save_snapshot(
                tenant,
                new_snapshot(execution, step_number, is_final, parent_snapshot_id, state),
            )
            .await
        {
            Ok(ack) => ack.await,
            Err(e) => Err(e),
        };
        match saved {
            Ok(snapshot) => Some(snapshot.id),
            Err(e) => {
                tracing::warn!(execution = %execution.id, error = %e, "could not save a snapshot");
                None
            }
        }
    }

    /// The agent state saved in snapshots: plain JSON a person can read.
    fn snapshot_state(
        &self,
        execution: &Execution,
        status: &str,
        extra: Option<Value>,
        steps: Option<&Vec<Step>>,
    ) -> Value {
        let steps = steps.map(Vec::as_slice).unwrap_or_default();
        let mut usage = TokenUsage::default();
        for step in steps {
            usage.add(&step.token_usage);
        }
        let mut state = json!({
            "execution_id": execution.id,
            "agent_type": execution.agent_type,
            "agent_config": execution.agent_config,
            "input": execution.input,
            "status": status,
            "step_count": steps.len(),
            "last_step": steps.last(),
            "token_usage": usage,
        });
        if let (Some(Value::Object(extra)), Some(map)) = (extra, state.as_object_mut()) {
            map.extend(extra);
        }
        state
    }

    // --- messages and events --------------------------------------------------------------

    /// Stores a message (info line, assistant answer) and queues its `message.created`
    /// event; a failure is logged (status lines must not stop a run).
    pub async fn say(
        &self,
        tenant: &Tenant,
        session_id: Id,
        execution_id: Id,
        role: Role,
        content: &str,
    ) {
        match self
            .inner
            .store
            .append_message(
                tenant,
                NewMessage::new(session_id, role, content).for_execution(execution_id),
            )
            .await
        {
            Ok(message) => self.message_event(tenant, &message).await,
            Err(e) => {
                tracing::warn!(session = %session_id, error = %e, "could not store a message")
            }
        }
    }

    async fn message_event(&self, tenant: &Tenant, message: &Message) {
        let event = NewEvent {
            session_id: message.session_id,
            message_id: Some(message.id),
            execution_id: message.execution_id,
            event_type: EventType::MessageCreated,
            content: message.content.clone(),
            metadata: json!({"role": message.role}),
        };
        self.queue_event(tenant, event).await;
    }

    async fn emit_step(
        &self,
        tenant: &Tenant,
        run: &Run,
        event_type: EventType,
        step_number: u32,
        content: String,
        tool: Option<&str>,
    ) {
        let mut metadata = json!({"step_number": step_number});
        if let (Some(tool), Some(map)) = (tool, metadata.as_object_mut()) {
            map.insert("tool".into(), Value::String(tool.to_string()));
        }
        self.emit(
            tenant,
            run.ctx.execution.session_id,
            Some(run.ctx.execution.id),
            event_type,
            &content,
            metadata,
        )
        .await;
    }

    /// Queues an event; publishing never waits for the disk (subscribers get it once it
    /// is committed).
    pub async fn emit(
        &self,
        tenant: &Tenant,
        session_id: Option<Id>,
        execution_id: Option<Id>,
        event_type: EventType,
        content: &str,
        metadata: Value,
    ) {
        let Some(session_id) = session_id else { return };
        self.queue_event(
            tenant,
            NewEvent {
                session_id,
                message_id: None,
                execution_id,
                event_type,
                content: content.to_string(),
                metadata,
            },
        )
        .await;
    }

    async fn queue_event(&self, tenant: &Tenant, event: NewEvent) {
        // Awaiting queues the event (waiting only while the bounded save queue is full:
        // backpressure); the Ack is dropped, so nothing waits for the disk. Events of one
        // session stay in order because the queue is FIFO.
        match self.inner.store.append_event(tenant, event).await {
            Ok(_ack) => {}
            Err(e) => tracing::warn!(error = %e, "could not queue an event"),
        }
    }
}

/// One run of an execution: the agent's context and what the loop keeps between steps.
struct Run {
    ctx: AgentContext,
    last_ack: Option<Ack<StepAppend>>,
    parent_snapshot_id: Option<Id>,
    latest_snapshot_id: Option<Id>,
}

async fn heartbeat<S: Store>(
    store: S,
    worker: String,
    id: Id,
    lease: Duration,
    ctl: RunControl,
    done: CancellationToken,
) {
    let period = (lease / 3).max(Duration::from_millis(50));
    loop {
        tokio::select! {
            _ = done.cancelled() => return,
            _ = tokio::time::sleep(period) => {}
        }
        match store.renew_leases(&worker, vec![id], lease).await {
            Ok(lost) if lost.contains(&id) => {
                tracing::info!(execution = %id, "lost the lease (cancelled or taken over); stopping this run");
                ctl.lost.store(true, Ordering::SeqCst);
                ctl.cancel.cancel();
                return;
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(execution = %id, error = %e, "could not renew the lease"),
        }
    }
}

fn new_snapshot(
    execution: &Execution,
    step_number: u32,
    is_final: bool,
    parent_snapshot_id: Option<Id>,
    state: Value,
) -> NewSnapshot {
    NewSnapshot {
        execution_id: execution.id,
        parent_snapshot_id,
        agent_id: Some(execution.id.to_string()),
        agent_name: Some(execution.agent_type.clone()),
        step_number,
        is_final,
        debug_mode: is_debug(execution),
        state,
    }
}

fn is_debug(execution: &Execution) -> bool {
    execution
        .agent_config
        .get("debug")
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

fn timed_body() -> StepBody {
    StepBody {
        started_at: Some(Timestamp::now()),
        ..StepBody::default()
    }
}

/// One tool call's result: its observation, or the error that is its result.
type CallResult = std::result::Result<String, StepError>;

/// The outcome of a step's tool calls, by call (`None`: not run, the execution was
/// cancelled first).
struct ToolRun {
    results: Vec<Option<CallResult>>,
    interrupted: bool,
}

impl ToolRun {
    /// The step's `observations` (the results that are not errors, in call order, one per
    /// line), its `error` (the first failed call's, or the cancellation) and its `output`:
    /// with several calls, `{"tool_results": [{id, name, observation, error}]}` keeps each
    /// call's own result, so nothing depends on splitting the joined text.
    fn into_step_parts(self, calls: &[ToolCall]) -> (Option<String>, Option<StepError>, Value) {
        let observations: Vec<&str> = self
            .results
            .iter()
            .filter_map(|r| r.as_ref()?.as_ref().ok().map(String::as_str))
            .collect();
        let observations = (!observations.is_empty()).then(|| observations.join("\n"));
        let error = if self.interrupted {
            Some(cancelled_error())
        } else {
            self.results
                .iter()
                .find_map(|r| r.as_ref()?.as_ref().err().cloned())
        };
        let output = if calls.len() > 1 {
            let per_call: Vec<Value> = calls
                .iter()
                .zip(&self.results)
                .map(|(call, result)| {
                    let (observation, error) = match result {
                        Some(Ok(text)) => (Some(text.as_str()), None),
                        Some(Err(e)) => (None, Some(json!({"kind": e.kind, "message": e.message}))),
                        None => (None, Some(json!({"kind": "cancelled", "message": "not run: the execution was cancelled"}))),
                    };
                    json!({"id": call.id, "name": call.name, "observation": observation, "error": error})
                })
                .collect();
            json!({ "tool_results": per_call })
        } else {
            Value::Null
        };
        (observations, error, output)
    }
}

fn cancelled_error() -> StepError {
    StepError {
        kind: "cancelled".into(),
        message: "the execution was cancelled".into(),
    }
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(text) = panic.downcast_ref::<&str>() {
        (*text).to_string()
    } else if let Some(text) = panic.downcast_ref::<String>() {
        text.clone()
    } else {
        "unknown panic".to_string()
    }
}

/// `base` plus a random part of it (so nodes started together do not poll together).
fn jittered(base: Duration) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(base.as_nanos() as u64);
    let fraction = (hasher.finish() % 1_000) as u32;
    base + base * fraction / 1_000
}

fn cut(text: &str, max: usize) -> String {
    stepwise_core::summary::cut_chars(text, max)
}
