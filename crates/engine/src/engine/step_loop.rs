//! The step loop: drives a built-in agent one step at a time until it finishes, pauses
//! or is interrupted — asking the agent for its next decision, running the decision's
//! tool calls, saving every step and ending the execution through [`super::finish`].

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures_util::FutureExt;
use serde_json::{Value, json};
use stepwise_core::{
    Event, EventType, Execution, Id, StepBody, StepError, StepKind, Timestamp, TokenUsage,
};
use stepwise_store::{Store, StoreError, Tenant, restore_memory};

use super::finish::Outcome;
use super::{Engine, Run, RunControl, RunEnd, cancelled_error, panic_message};
use crate::BoxFuture;
use crate::agent::{Agent, AgentContext, DeltaSink};

/// Whether the store refused a step this run queued because the execution is no longer its
/// to write (it is over, or another run saved that step): a run that lost it.
fn saves_refused(run: &mut Run) -> bool {
    run.step_acks.iter_mut().any(|ack| {
        matches!(
            ack.failed_already(),
            Some(StoreError::InvalidState(_) | StoreError::Conflict(_))
        )
    })
}

impl<S: Store> Engine<S> {
    /// Runs an execution's step loop until it finishes, pauses, or is interrupted.
    /// Boxed so subagents can run inline through the same loop.
    pub(super) fn drive(
        &self,
        tenant: Tenant,
        execution: Execution,
        resume_answer: Option<Value>,
        ctl: RunControl,
        parent_snapshot_id: Option<Id>,
    ) -> BoxFuture<'_, RunEnd> {
        Box::pin(async move {
            let tenant = &tenant;
            let (agent, mut run) = match self
                .start_run(tenant, execution, resume_answer, &ctl, parent_snapshot_id)
                .await
            {
                Ok(started) => started,
                Err(end) => return end,
            };
            self.record_resume_answer(tenant, &mut run).await;
            loop {
                if let Some(end) = self.step(tenant, agent.as_ref(), &mut run, &ctl).await {
                    return end;
                }
            }
        })
    }

    /// Loads what the agent needs (its steps so far, the session's memory) and announces
    /// the run; an unknown agent fails the execution, a store that cannot read the steps
    /// leaves it to its lease.
    async fn start_run(
        &self,
        tenant: &Tenant,
        execution: Execution,
        resume_answer: Option<Value>,
        ctl: &RunControl,
        parent_snapshot_id: Option<Id>,
    ) -> Result<(Arc<dyn Agent>, Run), RunEnd> {
        let store = &self.inner.store;
        let session_id = execution.session_id;
        let Some(agent) = self.inner.agents.get(&execution.agent_type) else {
            let reason = format!(
                "no agent of type '{}' is registered in this server",
                execution.agent_type
            );
            return Err(self
                .fail_unstarted(tenant, &execution, &reason, parent_snapshot_id)
                .await);
        };
        let memory = match (agent.needs_session_memory(), session_id) {
            (true, Some(session_id)) => restore_memory(store, tenant, session_id)
                .await
                .ok()
                .flatten(),
            _ => None,
        };
        // The execution's own steps are its part of the memory, when that was read.
        let steps = match &memory {
            Some(memory) => memory
                .steps
                .iter()
                .filter(|s| s.execution_id == execution.id)
                .cloned()
                .collect(),
            None => match store.list_steps(tenant, execution.id).await {
                Ok(loaded) => loaded.items,
                Err(e) => {
                    tracing::warn!(execution = %execution.id, error = %e, "could not load steps; leaving the execution to its lease");
                    return Err(RunEnd::Released);
                }
            },
        };

        let started_text = if steps.is_empty() {
            "Execution started"
        } else {
            "Execution resumed"
        };
        // Queued, not awaited: the run's first wait for the disk is its end. A resumed
        // pause said "Execution resumed" when the answer came.
        let mut last_line = None;
        if execution.parent_execution_id.is_none()
            && resume_answer.is_none()
            && let Some(session_id) = session_id
        {
            last_line = self
                .queue_status(tenant, session_id, execution.id, started_text)
                .await;
        }
        self.inner
            .publisher
            .emit(
                tenant,
                session_id,
                Some(execution.id),
                EventType::ExecutionStarted,
                started_text,
                json!({"attempt": execution.attempts}),
            )
            .await;

        let latest_snapshot_id = execution.last_snapshot_id;
        let deltas = self.delta_sink(tenant, &execution);
        let run = Run {
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
            step_acks: Vec::new(),
            last_line,
            parent_snapshot_id,
            latest_snapshot_id,
        };
        Ok((agent, run))
    }

    /// Streamed model tokens go to the session's live subscribers (`message.delta`).
    fn delta_sink(&self, tenant: &Tenant, execution: &Execution) -> DeltaSink {
        let Some(session_id) = execution.session_id else {
            return DeltaSink::discard();
        };
        let store = self.inner.store.clone();
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

    /// The user's answer after a pause becomes a `user_input` step (once, even when this
    /// run is itself resumed after a crash).
    async fn record_resume_answer(&self, tenant: &Tenant, run: &mut Run) {
        let Some(answer) = run.ctx.resume_answer.clone() else {
            return;
        };
        if run
            .ctx
            .steps
            .last()
            .is_some_and(|s| s.kind == StepKind::UserInput)
        {
            return;
        }
        let text = match &answer {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let number = run.ctx.next_step_number();
        self.step_started(tenant, run, number).await;
        let body = StepBody {
            observations: Some(text),
            output: json!({"answer": answer}),
            ..timed_body()
        };
        self.save_step(
            tenant,
            run,
            StepKind::UserInput,
            body,
            "user answered".into(),
        )
        .await;
    }

    /// One turn of the loop: stop if interrupted, else ask the agent and carry out its
    /// decision. `Some` when the run ended.
    async fn step(
        &self,
        tenant: &Tenant,
        agent: &dyn Agent,
        run: &mut Run,
        ctl: &RunControl,
    ) -> Option<RunEnd> {
        if ctl.is_lost() {
            return Some(RunEnd::Lost);
        }
        if saves_refused(run) {
            // The store took no more of this run's steps: the execution was cancelled on
            // another node, or taken over. Stop now, not at the next heartbeat, so no more of
            // its events go out beside the next run of the session.
            tracing::info!(execution = %run.ctx.execution.id, "a step of this run was refused (cancelled or taken over elsewhere); stopping this run");
            ctl.lost.store(true, std::sync::atomic::Ordering::SeqCst);
            return Some(RunEnd::Lost);
        }
        if ctl.cancel.is_cancelled() {
            return Some(self.finish_run(tenant, run, ctl, Outcome::Cancelled).await);
        }
        let is_child = run.ctx.execution.parent_execution_id.is_some();
        if !is_child && self.inner.shutdown.is_cancelled() {
            return Some(self.release(run, ctl).await);
        }

        let number = run.ctx.next_step_number();
        self.step_started(tenant, run, number).await;
        let started_at = Timestamp::now();
        let decided = {
            // While the agent decides (a model call, usually) this run needs no core here.
            let _thinking = self.thinking();
            tokio::select! {
                biased;
                _ = ctl.cancel.cancelled() => None,
                result = AssertUnwindSafe(agent.next_step(&run.ctx)).catch_unwind() => Some(result),
            }
        };
        let started = StepBody {
            started_at: Some(started_at),
            ..timed_body()
        };
        let decision = match decided {
            None => {
                if ctl.is_lost() {
                    return Some(RunEnd::Lost);
                }
                let body = StepBody {
                    error: Some(cancelled_error()),
                    ..started
                };
                self.save_step(tenant, run, StepKind::Action, body, "cancelled".into())
                    .await;
                return Some(self.finish_run(tenant, run, ctl, Outcome::Cancelled).await);
            }
            Some(Err(panic)) => {
                let error = StepError {
                    kind: "panic".into(),
                    message: format!("the agent panicked: {}", panic_message(&panic)),
                };
                return Some(self.fail_with_step(tenant, run, ctl, started, error).await);
            }
            Some(Ok(Err(agent_error))) => {
                let error = StepError {
                    kind: agent_error.kind,
                    message: agent_error.message,
                };
                return Some(self.fail_with_step(tenant, run, ctl, started, error).await);
            }
            Some(Ok(Ok(decision))) => decision,
        };
        self.carry_out(tenant, run, ctl, number, started, decision)
            .await
    }

    /// Publishes `step.started` for the step about to run.
    async fn step_started(&self, tenant: &Tenant, run: &Run, number: u32) {
        self.run_event(
            tenant,
            run,
            EventType::StepStarted,
            number,
            &format!("Started step {number}"),
            None,
        )
        .await;
    }
}

/// A step body stamped as started now.
fn timed_body() -> StepBody {
    StepBody {
        started_at: Some(Timestamp::now()),
        token_usage: TokenUsage::default(),
        ..StepBody::default()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use stepwise_core::{ExecutionStatus, StepKind};

    use super::super::testing::{Harness, call, info, line, status};
    use crate::agent::{AgentError, Decision};

    #[tokio::test]
    async fn a_tool_step_then_an_answer_completes_with_every_step_line_and_event_in_order() {
        let h = Harness::new(vec![
            Ok(Decision::act(vec![call(
                "calculator",
                json!({"expression": "2+2"}),
            )])),
            Ok(Decision::finish("It is 4")),
        ])
        .await;
        let id = h.say("what is 2+2?").await;
        h.run_next().await;

        let execution = h.execution(id).await;
        assert_eq!(execution.status, ExecutionStatus::Completed);
        assert_eq!(execution.output, json!("It is 4"));
        let steps = h.steps(id).await;
        let kinds: Vec<StepKind> = steps.iter().map(|s| s.kind).collect();
        assert_eq!(kinds, [StepKind::Action, StepKind::FinalAnswer]);
        assert_eq!(steps[0].observations.as_deref(), Some("4"));
        assert_eq!(steps[0].tool_calls[0].name, "calculator");

        let snapshots = h.snapshots(id).await;
        let last = snapshots.last().expect("a snapshot");
        assert!(last.is_final);
        assert_eq!(last.state["status"], json!("completed"));
        assert_eq!(last.state["output"], json!("It is 4"));
        assert_eq!(last.step_number, 2);

        let lines: Vec<_> = h.messages().await.iter().map(line).collect();
        assert_eq!(
            lines[1..],
            [
                status("Execution queued"),
                status("Execution started"),
                info(
                    "Step 1: called calculator",
                    json!({"step_number": 1, "tool": "calculator", "kind": "action"})
                ),
                info(
                    "Step 2: final answer",
                    json!({"step_number": 2, "kind": "final_answer"})
                ),
                ("assistant".into(), "It is 4".into(), json!(null)),
            ]
        );
        assert_eq!(lines[0].1, "what is 2+2?");

        assert_eq!(
            h.event_types().await,
            [
                "message.created",
                "message.created",
                "execution.queued",
                "message.created",
                "execution.started",
                "step.started",
                "tool.called",
                "tool.completed",
                "step.completed",
                "message.created",
                "step.started",
                "step.completed",
                "message.created",
                "message.created",
                "execution.completed",
            ]
        );
        // The step line's event carries the line's metadata beside the role.
        let events = h.events().await;
        assert_eq!(
            events[9].metadata,
            json!({"role": "info", "step_number": 1, "tool": "calculator", "kind": "action"})
        );
        assert_eq!(events[0].metadata, json!({"role": "user"}));
        assert_eq!(events[14].metadata, json!({"step_count": 2}));
    }

    #[tokio::test]
    async fn a_failing_step_is_saved_and_fails_the_execution_with_its_reason() {
        let h = Harness::new(vec![
            Ok(Decision::Plan {
                plan: "look it up".into(),
                token_usage: Default::default(),
            }),
            Err(AgentError::new("model_error", "the model is down")),
        ])
        .await;
        let id = h.say("hello").await;
        h.run_next().await;

        let execution = h.execution(id).await;
        assert_eq!(execution.status, ExecutionStatus::Failed);
        assert_eq!(
            execution.error_message.as_deref(),
            Some("the model is down")
        );
        let steps = h.steps(id).await;
        assert_eq!(steps.len(), 2);
        assert_eq!(steps[0].kind, StepKind::Planning);
        let error = steps[1]
            .error
            .as_ref()
            .expect("the failed step has its error");
        assert_eq!(
            (error.kind.as_str(), error.message.as_str()),
            ("model_error", "the model is down")
        );

        let last = h.snapshots(id).await.pop().expect("a snapshot");
        assert!(last.is_final);
        assert_eq!(last.state["status"], json!("failed"));
        assert_eq!(last.state["error_message"], json!("the model is down"));

        let lines: Vec<_> = h.messages().await.iter().map(line).collect();
        assert_eq!(
            lines[lines.len() - 3..],
            [
                info(
                    "Step 1: planned: look it up",
                    json!({"step_number": 1, "kind": "planning"})
                ),
                info(
                    "Step 2: failed: the model is down",
                    json!({"step_number": 2, "kind": "action"})
                ),
                status("Execution failed: the model is down"),
            ]
        );
        let types = h.event_types().await;
        assert_eq!(
            types[types.len() - 4..],
            [
                "step.completed",
                "message.created",
                "message.created",
                "execution.failed"
            ]
        );
    }

    #[tokio::test]
    async fn a_question_pauses_and_the_users_answer_resumes_to_the_end() {
        let h = Harness::new(vec![
            Ok(Decision::act(vec![call(
                "user_input",
                json!({"question": "Which city?"}),
            )])),
            Ok(Decision::finish("Paris it is")),
        ])
        .await;
        let id = h.say("book a trip").await;
        h.run_next().await;

        let paused = h.execution(id).await;
        assert_eq!(paused.status, ExecutionStatus::Paused);
        let snapshot = h.snapshots(id).await.pop().expect("a snapshot");
        assert!(!snapshot.is_final, "a pause is not the end");
        assert_eq!(snapshot.state["question"], json!("Which city?"));
        let lines: Vec<_> = h.messages().await.iter().map(line).collect();
        assert_eq!(
            lines.last(),
            Some(&("assistant".into(), "Which city?".into(), json!(null)))
        );
        let types = h.event_types().await;
        assert_eq!(types.last().map(String::as_str), Some("execution.paused"));

        let resumed = h.say("Paris").await;
        assert_eq!(resumed, id, "the answer resumes the paused execution");
        h.run_next().await;

        let done = h.execution(id).await;
        assert_eq!(done.status, ExecutionStatus::Completed);
        assert_eq!(done.output, json!("Paris it is"));
        let kinds: Vec<StepKind> = h.steps(id).await.iter().map(|s| s.kind).collect();
        assert_eq!(
            kinds,
            [StepKind::Action, StepKind::UserInput, StepKind::FinalAnswer]
        );
        let lines: Vec<_> = h.messages().await.iter().map(line).collect();
        assert!(lines.contains(&info(
            "Step 2: user answered",
            json!({"step_number": 2, "kind": "user_input"})
        )));
    }
}
