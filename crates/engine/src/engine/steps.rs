//! Saving a built-in agent's step: the step row, its `step.completed` event and its info
//! line with the step's metadata, all queued, not awaited.

use stepwise_core::{EventType, Role, Step, StepBody, StepError, StepKind, Timestamp, new_id};
use stepwise_store::{NewStep, Store, Tenant};

use super::finish::Outcome;
use super::{Engine, MessageNote, Run, RunControl, RunEnd};

impl<S: Store> Engine<S> {
    /// Queues a step, its `step.completed` event and its info line (fire-and-forget: the
    /// agent loop does not wait for the disk; `finish` awaits them), and adds it to the
    /// context.
    pub(super) async fn save_step(
        &self,
        tenant: &Tenant,
        run: &mut Run,
        kind: StepKind,
        mut body: StepBody,
        summary: String,
    ) {
        let execution = &run.ctx.execution;
        let publisher = &self.inner.publisher;
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
            Ok(ack) => run.step_acks.push(ack),
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
        publisher
            .step_event(
                tenant,
                execution.session_id,
                execution.id,
                EventType::StepCompleted,
                number,
                &content,
                tool.as_deref(),
            )
            .await;
        if let Some(session_id) = execution.session_id {
            let (prefix, note_kind) = if execution.parent_execution_id.is_some() {
                ("Subagent step", "subagent")
            } else {
                ("Step", kind.as_str())
            };
            let queued = publisher
                .note_queued(
                    tenant,
                    session_id,
                    execution.id,
                    Role::Info,
                    &format!("{prefix} {number}: {summary}"),
                    &MessageNote::step(number, note_kind, tool),
                )
                .await;
            if queued.is_some() {
                run.last_line = queued;
            }
        }
        run.ctx.steps.push(step);
    }

    /// Saves a failed action step (`body` plus the error) and fails the execution with the
    /// error's message.
    pub(super) async fn fail_with_step(
        &self,
        tenant: &Tenant,
        run: &mut Run,
        ctl: &RunControl,
        mut body: StepBody,
        error: StepError,
    ) -> RunEnd {
        let reason = error.message.clone();
        body.error = Some(error);
        self.save_step(
            tenant,
            run,
            StepKind::Action,
            body,
            format!("failed: {reason}"),
        )
        .await;
        self.finish_run(tenant, run, ctl, Outcome::Failed { reason })
            .await
    }
}
