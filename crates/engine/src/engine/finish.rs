//! Finishing: the one way an execution ends (or stops for the user), whoever drives it —
//! a built-in agent's run, an external agent over HTTP, or a cancel of an execution that
//! is not running here.
//!
//! The order is the built-in agents' and the same for every driver:
//!
//! 1. the steps queued so far are made durable (the run's own acks, or a store flush);
//! 2. the answer goes to the session (so a client that sees `completed` finds it);
//! 3. the snapshot (final when the execution finishes: every finished execution has one);
//! 4. the transition in the store (the status a client reads);
//! 5. the status line or the question (a question after the pause, so an answer sent right
//!    after it resumes the execution);
//! 6. the execution's event;
//! 7. the doorbell: the session's next queued execution may run now.

use serde_json::{Value, json};
use stepwise_core::{EventType, Execution, Id, Role};
use stepwise_store::{Result, Store, StoreError, Tenant, Transition};

use super::snapshots::{new_snapshot, snapshot_state};
use super::{Engine, Run, RunControl, RunEnd};

/// How an execution ends, or stops for the user.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Outcome {
    /// Completed with this output; `answer` is the assistant's message to the session.
    Completed {
        output: Value,
        answer: Option<String>,
    },
    Failed {
        reason: String,
    },
    /// Paused until the user answers this question.
    Paused {
        question: String,
    },
    Cancelled,
}

impl Outcome {
    fn transition(&self) -> Transition {
        match self {
            Outcome::Completed { output, .. } => Transition::Complete {
                output: output.clone(),
            },
            Outcome::Failed { reason } => Transition::Fail {
                error_message: reason.clone(),
            },
            Outcome::Paused { question } => Transition::Pause {
                question: question.clone(),
            },
            Outcome::Cancelled => Transition::Cancel,
        }
    }

    /// The status the snapshot names.
    fn status(&self) -> &'static str {
        match self {
            Outcome::Completed { .. } => "completed",
            Outcome::Failed { .. } => "failed",
            Outcome::Paused { .. } => "paused",
            Outcome::Cancelled => "cancelled",
        }
    }

    /// What the snapshot adds to the state: the output, the error or the question.
    fn snapshot_extra(&self) -> Option<Value> {
        match self {
            Outcome::Completed { output, .. } => Some(json!({ "output": output })),
            Outcome::Failed { reason } => Some(json!({ "error_message": reason })),
            Outcome::Paused { question } => Some(json!({ "question": question })),
            Outcome::Cancelled => None,
        }
    }
}

/// Who drove the execution, which decides how its steps are settled and what its
/// snapshot holds.
pub(super) enum Driver<'a> {
    /// A built-in agent's run: its queued steps and the state of its context.
    Run(&'a mut Run),
    /// An agent outside the server: steps were posted over HTTP (flushed before the
    /// transition); a final snapshot is added only when the agent saved none.
    External,
    /// Nothing runs it here (an unknown agent, an orphaned subagent, a cancel of a pending
    /// or paused execution).
    Idle { parent_snapshot_id: Option<Id> },
}

impl<S: Store> Engine<S> {
    /// Ends an execution (see the module docs for the order). `announce`: whether the
    /// session gets the answer and the status line (not for a built-in subagent, whose
    /// answer is its parent's tool result). Fails only when the store refuses the
    /// transition (or, for an external agent, a write), having written nothing after it.
    pub(super) async fn finish(
        &self,
        tenant: &Tenant,
        execution: &Execution,
        mut driver: Driver<'_>,
        outcome: &Outcome,
        announce: bool,
    ) -> Result<Execution> {
        let store = &self.inner.store;
        let publisher = &self.inner.publisher;
        let session_id = execution.session_id.filter(|_| announce);

        match &mut driver {
            Driver::Run(run) => self.settle_steps(run).await,
            Driver::External => store.flush().await?,
            Driver::Idle { .. } => {}
        }
        if let (
            Outcome::Completed {
                answer: Some(answer),
                ..
            },
            Some(session_id),
        ) = (outcome, session_id)
        {
            publisher
                .say(tenant, session_id, execution.id, Role::Assistant, answer)
                .await;
        }
        self.finishing_snapshot(tenant, execution, &mut driver, outcome)
            .await?;
        let done = store
            .transition_execution(tenant, execution.id, outcome.transition())
            .await?;
        if let Some(session_id) = session_id {
            match outcome {
                Outcome::Completed { .. } => {}
                Outcome::Failed { reason } => {
                    self.say_status(
                        tenant,
                        session_id,
                        execution.id,
                        &format!("Execution failed: {reason}"),
                    )
                    .await
                }
                Outcome::Paused { question } => {
                    publisher
                        .say(tenant, session_id, execution.id, Role::Assistant, question)
                        .await;
                }
                Outcome::Cancelled => {
                    self.say_status(tenant, session_id, execution.id, "Execution cancelled")
                        .await
                }
            }
        }
        let (event_type, content, metadata) = match outcome {
            Outcome::Completed { answer, .. } => {
                let step_count = match &driver {
                    Driver::Run(run) => run.ctx.steps.len() as u64,
                    _ => done.step_count,
                };
                (
                    EventType::ExecutionCompleted,
                    answer.as_deref().unwrap_or("Execution completed"),
                    json!({ "step_count": step_count }),
                )
            }
            Outcome::Failed { reason } => (EventType::ExecutionFailed, reason.as_str(), json!({})),
            Outcome::Paused { question } => (
                EventType::ExecutionPaused,
                question.as_str(),
                json!({ "question": question }),
            ),
            Outcome::Cancelled => (
                EventType::ExecutionCancelled,
                "Execution cancelled",
                json!({}),
            ),
        };
        publisher
            .emit(
                tenant,
                execution.session_id,
                Some(execution.id),
                event_type,
                content,
                metadata,
            )
            .await;
        self.ring();
        Ok(done)
    }

    /// The snapshot an outcome leaves: final unless the execution paused.
    async fn finishing_snapshot(
        &self,
        tenant: &Tenant,
        execution: &Execution,
        driver: &mut Driver<'_>,
        outcome: &Outcome,
    ) -> Result<()> {
        let store = &self.inner.store;
        let is_final = !matches!(outcome, Outcome::Paused { .. });
        match driver {
            Driver::Run(run) => {
                self.snapshot(
                    tenant,
                    run,
                    outcome.status(),
                    is_final,
                    outcome.snapshot_extra(),
                )
                .await;
            }
            Driver::Idle { parent_snapshot_id } => {
                let state =
                    snapshot_state(execution, outcome.status(), outcome.snapshot_extra(), &[]);
                let step_number = u32::try_from(execution.step_count).unwrap_or(u32::MAX);
                // Queued, not awaited: nothing links to it.
                if let Err(e) = store
                    .save_snapshot(
                        tenant,
                        new_snapshot(execution, step_number, true, *parent_snapshot_id, state),
                    )
                    .await
                {
                    tracing::warn!(execution = %execution.id, error = %e, "could not save a snapshot");
                }
            }
            Driver::External => {
                let snapshots = store.list_snapshots(tenant, execution.id).await?;
                let parent_snapshot_id = if is_final {
                    // The agent's own final snapshot stands.
                    if snapshots.iter().any(|s| s.is_final) {
                        return Ok(());
                    }
                    snapshots.last().map(|s| s.id)
                } else {
                    None
                };
                let mut state = json!({"execution_id": execution.id, "status": outcome.status()});
                match outcome {
                    Outcome::Completed { output, .. } => {
                        state["output"] = output.clone();
                        state["error_message"] = Value::Null;
                    }
                    Outcome::Failed { reason } => {
                        state["output"] = Value::Null;
                        state["error_message"] = json!(reason);
                    }
                    Outcome::Paused { question } => state["question"] = json!(question),
                    Outcome::Cancelled => {}
                }
                let mut snapshot = new_snapshot(
                    execution,
                    u32::try_from(execution.step_count).unwrap_or(u32::MAX),
                    is_final,
                    parent_snapshot_id,
                    state,
                );
                snapshot.debug_mode = false;
                store.save_snapshot(tenant, snapshot).await?.await?;
            }
        }
        Ok(())
    }

    /// Waits until the steps queued so far are durable (before a status change, so a
    /// finished execution's steps are all there when a client sees it finished).
    pub(super) async fn settle_steps(&self, run: &mut Run) {
        if let Some(ack) = run.last_ack.take()
            && let Err(e) = ack.await
        {
            tracing::warn!(execution = %run.ctx.execution.id, error = %e, "a step could not be saved");
        }
    }

    /// Ends a built-in agent's run: a store that refuses the transition means another
    /// worker or a cancel elsewhere took the execution (the run is lost).
    pub(super) async fn finish_run(
        &self,
        tenant: &Tenant,
        run: &mut Run,
        ctl: &RunControl,
        outcome: Outcome,
    ) -> RunEnd {
        if outcome == Outcome::Cancelled && ctl.is_lost() {
            return RunEnd::Lost;
        }
        let execution = run.ctx.execution.clone();
        let announce = execution.parent_execution_id.is_none();
        match self
            .finish(tenant, &execution, Driver::Run(run), &outcome, announce)
            .await
        {
            Ok(_) => run_end(outcome),
            Err(e) => {
                tracing::info!(execution = %execution.id, error = %e, "could not finish the execution (taken over or cancelled elsewhere?)");
                RunEnd::Lost
            }
        }
    }

    /// Fails an execution that never started running here (its agent is unknown, or it is
    /// a subagent whose parent's worker stopped).
    pub(super) async fn fail_unstarted(
        &self,
        tenant: &Tenant,
        execution: &Execution,
        reason: &str,
        parent_snapshot_id: Option<Id>,
    ) -> RunEnd {
        let outcome = Outcome::Failed {
            reason: reason.to_string(),
        };
        let announce = execution.parent_execution_id.is_none();
        let driver = Driver::Idle { parent_snapshot_id };
        match self
            .finish(tenant, execution, driver, &outcome, announce)
            .await
        {
            Ok(_) => run_end(outcome),
            Err(e) => {
                tracing::warn!(execution = %execution.id, error = %e, "could not fail the execution");
                RunEnd::Lost
            }
        }
    }

    /// Shutdown: the steps so far are made durable and the execution goes back to the
    /// queue, to resume from its last saved step.
    pub(super) async fn release(&self, run: &mut Run, ctl: &RunControl) -> RunEnd {
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

    /// Refuses an outcome the execution's status does not allow, before anything is
    /// written (the store checks again in the transition).
    pub(super) fn check_can_end(execution: &Execution, outcome: &Outcome) -> Result<()> {
        let target = outcome.transition().target();
        if execution.status.can_become(target) {
            Ok(())
        } else {
            Err(StoreError::InvalidState(format!(
                "the execution is {} and cannot become {}",
                execution.status, target
            )))
        }
    }
}

fn run_end(outcome: Outcome) -> RunEnd {
    match outcome {
        Outcome::Completed { output, answer } => {
            RunEnd::Completed(answer.unwrap_or_else(|| match output {
                Value::String(text) => text,
                other => other.to_string(),
            }))
        }
        Outcome::Failed { reason } => RunEnd::Failed(reason),
        Outcome::Paused { .. } => RunEnd::Paused,
        Outcome::Cancelled => RunEnd::Cancelled,
    }
}
