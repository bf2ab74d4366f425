//! Executions driven over HTTP by an agent outside the server: opening one, its posted
//! steps and snapshots, and completing, failing or pausing it through the same
//! [`super::finish`] as the built-in agents.

use std::collections::HashMap;
use std::future::IntoFuture;

use serde_json::{Value, json};
use stepwise_core::{
    EventType, Execution, ExecutionStatus, Id, Message, Role, Snapshot, Step, StepBody, StepKind,
};
use stepwise_store::{
    NewExecution, NewLease, NewMessage, NewSnapshot, NewStep, Result, StepAppend, Store,
    StoreError, Tenant,
};

use super::finish::{Driver, Outcome};
use super::{EXTERNAL_AGENT, Engine, MessageNote, cut};

/// A new external execution of a session (its session and parent already checked).
#[derive(Debug, Clone)]
pub struct OpenExternal {
    pub session_id: Id,
    pub parent_execution_id: Option<Id>,
    pub user_id: String,
    pub agent_config: Value,
    pub input: Value,
    pub metadata: Value,
    /// Held under a lease its recorder renews (every write with the lease, and
    /// heartbeats): when the recorder stops, the lease runs out and the server fails the
    /// execution, so the session's queue moves on. `false`: held until finished, as before
    /// leases (a recorder that never renews).
    pub leased: bool,
}

/// An opened external execution and its lease token (`None` when opened unleased).
#[derive(Debug, Clone)]
pub struct OpenedExternal {
    pub execution: Execution,
    pub lease: Option<String>,
}

/// The `error_message` of an external execution whose recorder stopped renewing its lease.
pub(super) fn recorder_stopped(lease: std::time::Duration) -> String {
    format!(
        "its recorder stopped: no write or heartbeat came within its lease ({} s); the steps it saved are kept",
        lease.as_secs_f64()
    )
}

/// A step an external agent posts.
#[derive(Debug, Clone)]
pub struct ExternalStep {
    pub step_number: u32,
    pub kind: StepKind,
    pub body: StepBody,
}

/// A snapshot an external agent saves.
pub type ExternalSnapshot = NewSnapshot;

impl<S: Store> Engine<S> {
    /// Opens a running external execution and announces it (`execution.started`); a
    /// leased one comes with its lease token.
    pub async fn open_external(
        &self,
        tenant: &Tenant,
        open: OpenExternal,
    ) -> Result<OpenedExternal> {
        let lease = if open.leased {
            Some(stepwise_core::apikey::generate_lease_token().map_err(|e| {
                StoreError::Backend(format!("no randomness for a lease token: {e}"))
            })?)
        } else {
            None
        };
        let execution = self
            .inner
            .store
            .create_execution(
                tenant,
                NewExecution {
                    session_id: Some(open.session_id),
                    parent_execution_id: open.parent_execution_id,
                    user_id: open.user_id,
                    agent_type: EXTERNAL_AGENT.to_string(),
                    agent_config: open.agent_config,
                    input: open.input,
                    metadata: open.metadata,
                    status: ExecutionStatus::Running,
                    lease: lease.clone().map(|owner| NewLease {
                        owner,
                        duration: self.inner.config.lease,
                    }),
                },
            )
            .await?;
        self.inner
            .publisher
            .emit(
                tenant,
                execution.session_id,
                Some(execution.id),
                EventType::ExecutionStarted,
                "Execution started",
                json!({}),
            )
            .await;
        if let Some(token) = &lease {
            let mut recorders = self.recorders();
            if recorders.len() < super::MAX_REMEMBERED_RECORDERS {
                recorders.insert(execution.id, token.clone());
            }
        }
        Ok(OpenedExternal { execution, lease })
    }

    /// The recorder leases this node remembers (see `Inner::recorders`).
    pub(super) fn recorders(&self) -> std::sync::MutexGuard<'_, HashMap<Id, String>> {
        self.inner
            .recorders
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Queues a pending execution of a worker's agent type in a session (a worker agent's
    /// subagent when it has a parent: claimed by that type's workers while its parent
    /// runs) and rings the workers.
    pub async fn queue_for_worker(
        &self,
        tenant: &Tenant,
        open: OpenExternal,
        agent_type: String,
    ) -> Result<Execution> {
        let execution = self
            .inner
            .store
            .create_execution(
                tenant,
                NewExecution {
                    session_id: Some(open.session_id),
                    parent_execution_id: open.parent_execution_id,
                    user_id: open.user_id,
                    agent_type,
                    agent_config: open.agent_config,
                    input: open.input,
                    metadata: open.metadata,
                    status: ExecutionStatus::Pending,
                    lease: None,
                },
            )
            .await?;
        self.inner
            .publisher
            .emit(
                tenant,
                execution.session_id,
                Some(execution.id),
                EventType::ExecutionQueued,
                "Execution queued",
                json!({}),
            )
            .await;
        self.ring();
        Ok(execution)
    }

    /// Saves a posted step (durable when this returns) and, when it is new, publishes its
    /// `step.completed`. The same step again is `created: false`; another body at its
    /// number is a `Conflict`.
    pub async fn append_external_step(
        &self,
        tenant: &Tenant,
        execution: &Execution,
        step: ExternalStep,
    ) -> Result<StepAppend> {
        let ExternalStep {
            step_number,
            kind,
            body,
        } = step;
        let appended = self
            .inner
            .store
            .append_step(
                tenant,
                NewStep {
                    execution_id: execution.id,
                    step_number,
                    kind,
                    body,
                },
            )
            .await?
            .await?;
        if appended.created {
            self.announce_step(tenant, execution, &appended.step).await;
        }
        Ok(appended)
    }

    /// Saves several posted steps in order with one wait for durability (the backend
    /// commits them together), then publishes `step.completed` for the new ones. Each is
    /// idempotent as [`Engine::append_external_step`]; the first that fails stops the batch
    /// (those before it are saved).
    pub async fn append_external_steps(
        &self,
        tenant: &Tenant,
        execution: &Execution,
        steps: Vec<ExternalStep>,
    ) -> Result<Vec<StepAppend>> {
        let mut queued = Vec::with_capacity(steps.len());
        for step in steps {
            let ack = self
                .inner
                .store
                .append_step(
                    tenant,
                    NewStep {
                        execution_id: execution.id,
                        step_number: step.step_number,
                        kind: step.kind,
                        body: step.body,
                    },
                )
                .await?;
            queued.push(ack);
        }
        let mut appended = Vec::with_capacity(queued.len());
        for ack in queued {
            let done = ack.await?;
            if done.created {
                self.announce_step(tenant, execution, &done.step).await;
            }
            appended.push(done);
        }
        Ok(appended)
    }

    /// What a step an agent outside the server saved tells the session, as the engine's own
    /// runs tell it: `step.started`, `tool.called` then `tool.completed` for each of its tool
    /// calls, `step.completed`, then — for a worker's agent, run from the queue as built-in
    /// ones are — its status line ("Step 2: called search"). A recorder's (`external`)
    /// session keeps only its conversation as messages. A user's answer (`user_input`) is
    /// only its `step.completed`: the answer is shown already.
    pub(super) async fn announce_step(&self, tenant: &Tenant, execution: &Execution, step: &Step) {
        self.announce_new_step(tenant, execution, step.step_number, step.kind, &step.body())
            .await;
    }

    /// [`Engine::announce_step`] of a step by its number, kind and body (one queued, not
    /// stored yet: its events are queued behind it).
    pub(super) async fn announce_new_step(
        &self,
        tenant: &Tenant,
        execution: &Execution,
        number: u32,
        kind: StepKind,
        step: &StepBody,
    ) {
        let publisher = &self.inner.publisher;
        let event = |event_type: EventType, content: String, tool: Option<String>| async move {
            publisher
                .step_event(
                    tenant,
                    execution.session_id,
                    execution.id,
                    event_type,
                    number,
                    &content,
                    tool.as_deref(),
                )
                .await;
        };
        let first_tool = step.tool_calls.first().map(|c| c.name.clone());
        let user_input = kind == StepKind::UserInput;
        if !user_input {
            event(
                EventType::StepStarted,
                format!("Started step {number}"),
                None,
            )
            .await;
            for call in &step.tool_calls {
                event(
                    EventType::ToolCalled,
                    format!("Called {}", call.name),
                    Some(call.name.clone()),
                )
                .await;
            }
            for call in &step.tool_calls {
                let content = match (&step.error, &step.observations) {
                    (Some(error), _) if step.tool_calls.len() == 1 => error.message.clone(),
                    (None, Some(observations)) if step.tool_calls.len() == 1 => {
                        cut(observations, TOOL_RESULT_CHARS)
                    }
                    _ => format!("Completed {}", call.name),
                };
                event(EventType::ToolCompleted, content, Some(call.name.clone())).await;
            }
        }
        let content = if step.error.is_some() {
            format!("Step {number} failed")
        } else {
            format!("Completed step {number}")
        };
        event(EventType::StepCompleted, content, first_tool.clone()).await;
        if user_input || execution.agent_type == EXTERNAL_AGENT {
            return;
        }
        if let Some(session_id) = execution.session_id {
            let (prefix, note_kind) = if execution.parent_execution_id.is_some() {
                ("Subagent step", "subagent")
            } else {
                ("Step", kind.as_str())
            };
            // Queued behind the step: the step is what the request waits for; the line
            // commits with the next batch, and the run's end flushes it before its status.
            if let Some(ack) = publisher
                .note_queued(
                    tenant,
                    session_id,
                    execution.id,
                    Role::Info,
                    &format!("{prefix} {number}: {}", step_summary(kind, step)),
                    &MessageNote::step(number, note_kind, first_tool),
                )
                .await
            {
                super::log_if_lost(session_id, ack);
            }
        }
    }

    /// An `info` or `notification` line an agent outside the server posts to its session
    /// (shown and streamed like the engine's own info lines): stored, then `message.created`.
    pub async fn post_agent_line(
        &self,
        tenant: &Tenant,
        execution: &Execution,
        role: Role,
        content: String,
    ) -> Result<Message> {
        if !matches!(role, Role::Info | Role::Notification) {
            return Err(StoreError::invalid(
                "role",
                "role must be info or notification",
            ));
        }
        let Some(session_id) = execution.session_id else {
            return Err(StoreError::InvalidState(
                "this execution has no session to post a line to".into(),
            ));
        };
        if execution.status.is_finished() {
            return Err(StoreError::InvalidState(format!(
                "the execution is {}: its lines are written",
                execution.status.as_str()
            )));
        }
        let message = NewMessage::new(session_id, role, content).for_execution(execution.id);
        let message = self.inner.store.append_message(tenant, message).await?;
        self.inner.publisher.message_created(tenant, &message).await;
        Ok(message)
    }

    /// Saves a snapshot an external agent sends (durable when this returns).
    pub async fn save_external_snapshot(
        &self,
        tenant: &Tenant,
        snapshot: ExternalSnapshot,
    ) -> Result<Snapshot> {
        self.inner
            .store
            .save_snapshot(tenant, snapshot)
            .await?
            .await
    }

    /// Completes an external execution with its output; `final_message` becomes the
    /// assistant's message to the session.
    pub async fn complete_external(
        &self,
        tenant: &Tenant,
        execution: &Execution,
        output: Value,
        final_message: Option<String>,
    ) -> Result<Execution> {
        let outcome = Outcome::Completed {
            output,
            answer: final_message,
        };
        self.end_external(tenant, execution, outcome).await
    }

    /// Saves an external agent's last steps and completes its execution, for one request
    /// (`complete` with `steps`): a transition the lifecycle refuses writes nothing; the
    /// steps are saved as [`Engine::append_external_steps`] saves a batch (one wait for
    /// durability, `step.completed` for the new ones), then the execution completes as
    /// [`Engine::complete_external`] completes it. A step the store refuses (another body
    /// at a stored number) stops there: the steps before it are saved, the execution is
    /// not completed.
    ///
    /// On a store that writes an end after the writes queued before it
    /// ([`Store::orders_transitions`]), steps the execution has not stored yet (numbers
    /// above its `step_count`, the highest stored) are not waited for on their own: the
    /// steps, their events and the end are queued in that order and committed together
    /// (one commit, not two, for a one-step agent). Only a request racing this one with
    /// another body at the same new number could then see its step refused after the end
    /// was queued: the execution completes with the stored step, and this request answers
    /// the conflict.
    pub async fn complete_external_with_steps(
        &self,
        tenant: &Tenant,
        execution: &Execution,
        steps: Vec<ExternalStep>,
        output: Value,
        final_message: Option<String>,
    ) -> Result<Execution> {
        let outcome = Outcome::Completed {
            output,
            answer: final_message,
        };
        Self::check_can_end(execution, &outcome)?;
        if steps.is_empty() {
            return self.end_external(tenant, execution, outcome).await;
        }
        let unstored = steps
            .iter()
            .all(|s| u64::from(s.step_number) > execution.step_count);
        if unstored && self.inner.store.orders_transitions() {
            return self
                .complete_with_unstored_steps(tenant, execution, steps, outcome)
                .await;
        }
        let appended = self.append_external_steps(tenant, execution, steps).await?;
        // The final snapshot names the last step: the execution as it is now.
        let mut execution = execution.clone();
        let last = appended
            .iter()
            .map(|a| u64::from(a.step.step_number))
            .max()
            .unwrap_or(0);
        execution.step_count = execution.step_count.max(last);
        self.end_external(tenant, &execution, outcome).await
    }

    /// [`Engine::complete_external_with_steps`] on a store that orders its writes, for
    /// steps not stored yet: queued with their events, then the end behind them, all
    /// awaited together.
    async fn complete_with_unstored_steps(
        &self,
        tenant: &Tenant,
        execution: &Execution,
        steps: Vec<ExternalStep>,
        outcome: Outcome,
    ) -> Result<Execution> {
        let store = &self.inner.store;
        // The final snapshot names the last step: the execution as it will be.
        let mut execution = execution.clone();
        let last = steps.iter().map(|s| s.step_number).max().unwrap_or(0);
        execution.step_count = execution.step_count.max(u64::from(last));
        let snapshot = self.external_snapshot(tenant, &execution, &outcome).await?;
        self.recorders().remove(&execution.id);
        let mut saved = Vec::with_capacity(steps.len());
        for step in steps {
            let ExternalStep {
                step_number,
                kind,
                body,
            } = step;
            // The step's events are queued behind it: they commit with it or after it.
            let new = NewStep {
                execution_id: execution.id,
                step_number,
                kind,
                body: body.clone(),
            };
            saved.push(store.append_step(tenant, new).await?);
            self.announce_new_step(tenant, &execution, step_number, kind, &body)
                .await;
        }
        let ended = self
            .queue_completion(
                tenant,
                &execution,
                &outcome,
                execution.session_id,
                snapshot,
                execution.step_count,
            )
            .await?;
        let (saved, moved) = tokio::join!(
            futures_util::future::try_join_all(saved.into_iter().map(IntoFuture::into_future)),
            ended.into_future()
        );
        let done = moved?;
        self.ring();
        saved?;
        Ok(store.get_execution(tenant, done.id).await?.unwrap_or(done))
    }

    /// Fails an external execution with the agent's reason.
    pub async fn fail_external(
        &self,
        tenant: &Tenant,
        execution: &Execution,
        error_message: String,
    ) -> Result<Execution> {
        let outcome = Outcome::Failed {
            reason: error_message,
        };
        self.end_external(tenant, execution, outcome).await
    }

    /// Pauses an external execution until the user answers its question (the user's next
    /// message resumes it).
    pub async fn pause_external(
        &self,
        tenant: &Tenant,
        execution: &Execution,
        question: String,
    ) -> Result<Execution> {
        self.end_external(tenant, execution, Outcome::Paused { question })
            .await
    }

    async fn end_external(
        &self,
        tenant: &Tenant,
        execution: &Execution,
        outcome: Outcome,
    ) -> Result<Execution> {
        // A move the lifecycle refuses writes nothing (no message, no snapshot).
        Self::check_can_end(execution, &outcome)?;
        let done = self
            .finish(tenant, execution, Driver::External, &outcome, true)
            .await?;
        Ok(self
            .inner
            .store
            .get_execution(tenant, done.id)
            .await?
            .unwrap_or(done))
    }
}

/// The longest tool result a `tool.completed` event of a posted step carries, in characters.
const TOOL_RESULT_CHARS: usize = 2_000;

/// A posted step's status line, worded as the web UI words a stored step: "called echo ·
/// Echoing it" (its tools, the first line of its `model_output`, its error), "final answer";
/// "thought" for an action that says nothing.
fn step_summary(kind: StepKind, step: &StepBody) -> String {
    if kind == StepKind::FinalAnswer {
        return "final answer".into();
    }
    let mut parts = Vec::new();
    if !step.tool_calls.is_empty() {
        let names: Vec<&str> = step.tool_calls.iter().map(|c| c.name.as_str()).collect();
        parts.push(format!("called {}", names.join(", ")));
    }
    if let Some(line) = step
        .model_output
        .as_deref()
        .and_then(|t| t.trim().lines().next())
        .map(str::trim)
        .filter(|l| !l.is_empty())
    {
        parts.push(cut(line, 160));
    }
    if let Some(error) = &step.error {
        parts.push(format!("failed: {}", error.message));
    }
    if parts.is_empty() {
        return match kind {
            StepKind::Action => "thought".into(),
            other => other.as_str().replace('_', " "),
        };
    }
    parts.join(" · ")
}
