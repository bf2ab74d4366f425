//! Finishing: the one way an execution ends (or stops for the user), whoever drives it —
//! a built-in agent's run, an external agent over HTTP, or a cancel of an execution that
//! is not running here.
//!
//! The order is the built-in agents' and the same for every driver:
//!
//! 1. the steps queued so far are made durable (the run's own acks, or a store flush);
//! 2. the answer goes to the session (so a client that sees `completed` finds it) and
//!    3. the snapshot (final when the execution finishes: every finished execution has
//!    one). A run's queued steps, its answer and its snapshot are awaited together: they
//!    ride one group commit on the SQL backends, not three one after the other;
//! 4. the transition in the store (the status a client reads), once 1–3 are durable;
//! 5. the status line or the question (a question after the pause, so an answer sent right
//!    after it resumes the execution);
//! 6. the execution's event;
//! 7. the doorbell: the session's next queued execution may run now.
//!
//! An execution that completes (a built-in run, or an external agent's `complete`), on a
//! store that writes a run's end after the writes queued before it (SQLite's one writer,
//! PostgreSQL's writer task of the session: [`Store::orders_transitions`]), has 2–4 and 6
//! written as one write
//! ([`Store::queue_ending`]) queued behind 1, and waits once: the end commits whole, with
//! the run's last writes or after them, never before. An external agent's `complete` that
//! carries steps not stored yet queues them and their events first, and awaits them with
//! the end ([`Engine::queue_completion`], used by `complete_external_with_steps`).

use std::future::IntoFuture;

use serde_json::{Value, json};
use stepwise_core::{EventType, Execution, Id, Role};
use stepwise_store::{
    Ack, Ending, NewEvent, NewMessage, NewSnapshot, Result, Store, StoreError, Tenant, Transition,
};

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

    /// The execution's event: its type, content and metadata (`step_count`: the steps
    /// of a completed execution).
    fn event(&self, step_count: u64) -> (EventType, &str, Value) {
        match self {
            Outcome::Completed { answer, .. } => (
                EventType::ExecutionCompleted,
                answer.as_deref().unwrap_or("Execution completed"),
                json!({ "step_count": step_count }),
            ),
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
        // A recorder's lease ends with its execution (finished, paused or failed here).
        self.recorders().remove(&execution.id);
        if matches!(outcome, Outcome::Completed { .. })
            && !matches!(driver, Driver::Idle { .. })
            && store.orders_transitions()
        {
            let done = self
                .complete_in_one_commit(tenant, execution, driver, outcome, session_id)
                .await?;
            self.ring();
            return Ok(done);
        }

        let settled = match &mut driver {
            Driver::Run(run) => Some(queued_writes(run)),
            Driver::External => {
                store.flush().await?;
                None
            }
            Driver::Idle { .. } => None,
        };
        let settled = async {
            if let Some(settled) = settled {
                settled.await;
            }
        };
        // The run's queued writes, the answer and the snapshot are waited for together;
        // all are durable before the transition.
        let answer = async {
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
        };
        let snapshot = self.finishing_snapshot(tenant, execution, &mut driver, outcome);
        let ((), (), saved) = tokio::join!(settled, answer, snapshot);
        saved?;
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
        let step_count = match &driver {
            Driver::Run(run) => run.ctx.steps.len() as u64,
            _ => done.step_count,
        };
        let (event_type, content, metadata) = outcome.event(step_count);
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

    /// Completes an execution in one commit, on a store that writes an execution's end
    /// after the writes queued before it ([`Store::orders_transitions`]): the answer, the
    /// final snapshot, the move and `execution.completed` are one write, queued behind what
    /// the run or the agent wrote, and awaited with a built-in run's own queued writes (an
    /// external agent's were acknowledged already; no flush is needed, the queue is FIFO).
    async fn complete_in_one_commit(
        &self,
        tenant: &Tenant,
        execution: &Execution,
        driver: Driver<'_>,
        outcome: &Outcome,
        session_id: Option<Id>,
    ) -> Result<Execution> {
        let (settled, snapshot, step_count) = match driver {
            Driver::Run(run) => {
                let state = snapshot_state(
                    execution,
                    outcome.status(),
                    outcome.snapshot_extra(),
                    &run.ctx.steps,
                );
                let step_number = run.ctx.steps.last().map_or(0, |s| s.step_number);
                let snapshot =
                    new_snapshot(execution, step_number, true, run.parent_snapshot_id, state);
                let step_count = run.ctx.steps.len() as u64;
                (Some(queued_writes(run)), Some(snapshot), step_count)
            }
            Driver::External | Driver::Idle { .. } => {
                let snapshot = self.external_snapshot(tenant, execution, outcome).await?;
                (None, snapshot, execution.step_count)
            }
        };
        let ended = self
            .queue_completion(tenant, execution, outcome, session_id, snapshot, step_count)
            .await?;
        let settled = async {
            if let Some(settled) = settled {
                settled.await;
            }
        };
        let ((), moved) = tokio::join!(settled, ended.into_future());
        moved
    }

    /// Queues a completed execution's end as one write ([`Store::queue_ending`]): the
    /// answer to the session (`session_id`: none for a built-in subagent), the final
    /// `snapshot`, the move and `execution.completed` naming `step_count` steps. The [`Ack`]
    /// resolves with the moved execution once the end is committed.
    pub(super) async fn queue_completion(
        &self,
        tenant: &Tenant,
        execution: &Execution,
        outcome: &Outcome,
        session_id: Option<Id>,
        snapshot: Option<NewSnapshot>,
        step_count: u64,
    ) -> Result<Ack<Execution>> {
        let answer = match (outcome, session_id) {
            (
                Outcome::Completed {
                    answer: Some(answer),
                    ..
                },
                Some(session_id),
            ) => Some(
                NewMessage::new(session_id, Role::Assistant, answer).for_execution(execution.id),
            ),
            _ => None,
        };
        let event = execution.session_id.map(|session_id| {
            let (event_type, content, metadata) = outcome.event(step_count);
            NewEvent {
                session_id,
                message_id: None,
                execution_id: Some(execution.id),
                event_type,
                content: content.to_string(),
                metadata,
            }
        });
        let ending = Ending {
            answer,
            snapshot,
            transition: outcome.transition(),
            event,
        };
        self.inner
            .store
            .queue_ending(tenant, execution.id, ending)
            .await
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
                // Durable before the transition, which does not wait for queued saves: a
                // finished execution has its snapshot.
                let snapshot =
                    new_snapshot(execution, step_number, true, *parent_snapshot_id, state);
                let saved = match store.save_snapshot(tenant, snapshot).await {
                    Ok(ack) => ack.await.map(|_| ()),
                    Err(e) => Err(e),
                };
                if let Err(e) = saved {
                    tracing::warn!(execution = %execution.id, error = %e, "could not save a snapshot");
                }
            }
            Driver::External => {
                if let Some(snapshot) = self.external_snapshot(tenant, execution, outcome).await? {
                    store.save_snapshot(tenant, snapshot).await?.await?;
                }
            }
        }
        Ok(())
    }

    /// The snapshot an external agent's execution is left with: none when it finishes and
    /// the agent saved a final one itself, else one naming the outcome (after the agent's
    /// last snapshot).
    pub(super) async fn external_snapshot(
        &self,
        tenant: &Tenant,
        execution: &Execution,
        outcome: &Outcome,
    ) -> Result<Option<NewSnapshot>> {
        let is_final = !matches!(outcome, Outcome::Paused { .. });
        let snapshots = self
            .inner
            .store
            .list_snapshots(tenant, execution.id)
            .await?;
        let parent_snapshot_id = if is_final {
            // The agent's own final snapshot stands.
            if snapshots.iter().any(|s| s.is_final) {
                return Ok(None);
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
        Ok(Some(snapshot))
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
        queued_writes(run).await;
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

/// Takes the acks of the steps and lines `run` queued so far; the future resolves once they
/// are durable (a failed one is logged). It holds no borrow of the run, so the run's
/// answer and snapshot can be written while it waits: before a status change, so that a
/// finished execution's steps and lines are all there when a client sees it finished.
fn queued_writes(run: &mut Run) -> impl std::future::Future<Output = ()> + use<> {
    let (steps, line) = (std::mem::take(&mut run.step_acks), run.last_line.take());
    let execution = run.ctx.execution.id;
    async move {
        let steps = async {
            // They resolve together (one or two group commits): waiting in turn costs
            // the slowest.
            for ack in steps {
                if let Err(e) = ack.await {
                    tracing::warn!(execution = %execution, error = %e, "a step could not be saved");
                }
            }
        };
        let line = async {
            match line {
                Some(ack) => ack.await.map(|_| ()),
                None => Ok(()),
            }
        };
        let ((), line) = tokio::join!(steps, line);
        if let Err(e) = line {
            tracing::warn!(execution = %execution, error = %e, "a line could not be saved");
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};
    use stepwise_core::{ExecutionStatus, StepBody, StepKind};
    use stepwise_store::prelude::*;
    use stepwise_store::{NewSnapshot, NewStep, StoreError, Transition};

    use super::super::late_steps::LateFirstStep;
    use super::super::testing::{Harness, call, line, status};
    use super::super::{ExternalStep, OpenExternal};
    use crate::agent::Decision;
    use stepwise_core::Execution;

    async fn open(h: &Harness) -> Execution {
        h.engine
            .open_external(
                &h.tenant,
                OpenExternal {
                    session_id: h.session_id,
                    parent_execution_id: None,
                    user_id: "user".into(),
                    agent_config: Value::Null,
                    input: json!({"task": "x"}),
                    metadata: Value::Null,
                    leased: false,
                },
            )
            .await
            .expect("opened")
            .execution
    }

    async fn post_step(h: &Harness, execution: &Execution, number: u32) {
        let step = ExternalStep {
            step_number: number,
            kind: StepKind::Action,
            body: StepBody {
                model_output: Some("thinking".into()),
                ..StepBody::default()
            },
        };
        let appended = h
            .engine
            .append_external_step(&h.tenant, execution, step)
            .await
            .expect("the step is saved");
        assert!(appended.created);
    }

    #[tokio::test]
    async fn a_run_changes_status_only_once_every_step_it_queued_is_durable() {
        // The first step's ack resolves after the second's (as when a store commits one
        // execution's steps out of order): the run waits for both before completing.
        let h = Harness::over(
            vec![
                Ok(Decision::act(vec![call(
                    "calculator",
                    json!({"expression": "2+2"}),
                )])),
                Ok(Decision::finish("It is 4")),
            ],
            LateFirstStep::new,
        )
        .await;
        let id = h.say("what is 2+2?").await;
        h.run_next().await;

        let execution = h.execution(id).await;
        assert_eq!(execution.status, ExecutionStatus::Completed);
        assert_eq!(h.steps(id).await.len(), 2);
        assert_eq!(
            h.engine.store().early().await,
            0,
            "the execution completed before its first step's ack resolved"
        );
    }

    #[tokio::test]
    async fn the_late_step_store_sees_a_status_that_did_not_wait_for_its_step() {
        // The twin of the test above: a move made without awaiting the step is seen.
        let h = Harness::over(vec![], LateFirstStep::new).await;
        let id = h.say("hello").await;
        let store = h.engine.store();
        store
            .claim_next("test-worker", std::time::Duration::from_secs(60), 5)
            .await
            .expect("claiming works")
            .expect("an execution is queued");
        let ack = store
            .append_step(
                &h.tenant,
                NewStep {
                    execution_id: id,
                    step_number: 1,
                    kind: StepKind::Action,
                    body: StepBody::default(),
                },
            )
            .await
            .expect("the step is queued");
        store
            .transition_execution(&h.tenant, id, Transition::Cancel)
            .await
            .expect("cancelled");
        ack.await.expect("the step is saved");
        assert_eq!(store.early().await, 1);
    }

    #[tokio::test]
    async fn an_external_completion_writes_the_answer_a_final_snapshot_and_its_event_once() {
        let h = Harness::new(vec![]).await;
        let execution = open(&h).await;
        post_step(&h, &execution, 1).await;
        let done = h
            .engine
            .complete_external(
                &h.tenant,
                &execution,
                json!({"answer": 42}),
                Some("The answer is 42".into()),
            )
            .await
            .expect("completed");
        assert_eq!(done.status, ExecutionStatus::Completed);
        assert_eq!(done.output, json!({"answer": 42}));

        let snapshots = h.snapshots(execution.id).await;
        assert_eq!(snapshots.len(), 1, "the engine adds the final snapshot");
        assert!(snapshots[0].is_final);
        assert_eq!(snapshots[0].state["status"], json!("completed"));
        assert_eq!(snapshots[0].state["output"], json!({"answer": 42}));
        assert_eq!(done.last_snapshot_id, Some(snapshots[0].id));

        // The posted step's events are the engine's own steps' (a recorder's session keeps
        // only its conversation as messages: no status line).
        let lines: Vec<_> = h.messages().await.iter().map(line).collect();
        assert_eq!(
            lines,
            [("assistant".into(), "The answer is 42".into(), json!(null))]
        );
        assert_eq!(
            h.event_types().await,
            [
                "execution.started",
                "step.started",
                "step.completed",
                "message.created",
                "execution.completed"
            ]
        );

        // Completing again is refused before anything is written.
        let again = h
            .engine
            .complete_external(&h.tenant, &done, json!(1), Some("again".into()))
            .await;
        assert!(
            matches!(again, Err(StoreError::InvalidState(_))),
            "{again:?}"
        );
        assert_eq!(h.messages().await.len(), 1);
        assert_eq!(h.snapshots(execution.id).await.len(), 1);
        assert_eq!(h.events().await.len(), 5);
    }

    #[tokio::test]
    async fn an_external_agents_own_final_snapshot_stands() {
        let h = Harness::new(vec![]).await;
        let execution = open(&h).await;
        let own = h
            .engine
            .save_external_snapshot(
                &h.tenant,
                NewSnapshot {
                    execution_id: execution.id,
                    parent_snapshot_id: None,
                    agent_id: Some("mine".into()),
                    agent_name: None,
                    step_number: 0,
                    is_final: true,
                    debug_mode: false,
                    state: json!({"memory": [1, 2]}),
                    replace: false,
                },
            )
            .await
            .expect("saved");
        h.engine
            .complete_external(&h.tenant, &execution, json!("ok"), None)
            .await
            .expect("completed");
        let snapshots = h.snapshots(execution.id).await;
        assert_eq!(snapshots.len(), 1);
        assert_eq!(snapshots[0].id, own.id);
        assert!(h.messages().await.is_empty(), "no final_message, no answer");
        let events = h.events().await;
        let last = events.last().expect("events");
        assert_eq!(last.content, "Execution completed");
    }

    #[tokio::test]
    async fn an_external_pause_asks_after_pausing_and_a_failure_then_ends_it() {
        let h = Harness::new(vec![]).await;
        let execution = open(&h).await;
        let paused = h
            .engine
            .pause_external(&h.tenant, &execution, "Which city?".into())
            .await
            .expect("paused");
        assert_eq!(paused.status, ExecutionStatus::Paused);
        let snapshots = h.snapshots(execution.id).await;
        assert_eq!(snapshots.len(), 1);
        assert!(!snapshots[0].is_final);
        assert_eq!(snapshots[0].state["question"], json!("Which city?"));

        let failed = h
            .engine
            .fail_external(&h.tenant, &paused, "gave up".into())
            .await
            .expect("failed");
        assert_eq!(failed.status, ExecutionStatus::Failed);
        assert_eq!(failed.error_message.as_deref(), Some("gave up"));
        let snapshots = h.snapshots(execution.id).await;
        assert_eq!(snapshots.len(), 2);
        assert!(snapshots[1].is_final);
        assert_eq!(snapshots[1].state["error_message"], json!("gave up"));
        assert_eq!(snapshots[1].parent_snapshot_id, Some(snapshots[0].id));

        let lines: Vec<_> = h.messages().await.iter().map(line).collect();
        assert_eq!(
            lines,
            [
                ("assistant".into(), "Which city?".into(), json!(null)),
                status("Execution failed: gave up"),
            ]
        );
        assert_eq!(
            h.event_types().await,
            [
                "execution.started",
                "message.created",
                "execution.paused",
                "message.created",
                "execution.failed"
            ]
        );
    }

    #[tokio::test]
    async fn cancelling_a_queued_execution_finishes_it_with_a_final_snapshot() {
        let h = Harness::new(vec![]).await;
        let id = h.say("hello").await;
        let cancelled = h.engine.cancel(&h.tenant, id).await.expect("cancelled");
        assert_eq!(cancelled.status, ExecutionStatus::Cancelled);
        let snapshots = h.snapshots(id).await;
        assert_eq!(snapshots.len(), 1);
        assert!(snapshots[0].is_final);
        assert_eq!(snapshots[0].state["status"], json!("cancelled"));
        let lines: Vec<_> = h.messages().await.iter().map(line).collect();
        assert_eq!(lines.last(), Some(&status("Execution cancelled")));
        let types = h.event_types().await;
        assert_eq!(
            types.last().map(String::as_str),
            Some("execution.cancelled")
        );

        let again = h.engine.cancel(&h.tenant, id).await;
        assert!(matches!(again, Err(StoreError::Conflict(_))), "{again:?}");
    }
}
