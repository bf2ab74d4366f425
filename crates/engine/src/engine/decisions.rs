//! Carrying out an agent's decision: a plan, a final answer, a question for the user
//! (the execution pauses) or an action whose tool calls run before its step is saved.

use serde_json::{Value, json};
use stepwise_core::{EventType, StepBody, StepError, StepKind, ToolCall};
use stepwise_store::{Store, Tenant};

use super::finish::Outcome;
use super::{Engine, Run, RunControl, RunEnd, cut, is_debug};
use crate::agent::Decision;
use crate::tools::{USER_INPUT, string_argument};

impl<S: Store> Engine<S> {
    /// Carries out an agent's decision; `Some` when the run ended.
    pub(super) async fn carry_out(
        &self,
        tenant: &Tenant,
        run: &mut Run,
        ctl: &RunControl,
        number: u32,
        started: StepBody,
        decision: Decision,
    ) -> Option<RunEnd> {
        match decision {
            Decision::Fail { error_message } => Some(
                self.finish_run(
                    tenant,
                    run,
                    ctl,
                    Outcome::Failed {
                        reason: error_message,
                    },
                )
                .await,
            ),
            Decision::Plan { plan, token_usage } => {
                let summary = format!("planned: {}", cut(plan.lines().next().unwrap_or(""), 80));
                let body = StepBody {
                    model_output: Some(plan),
                    token_usage,
                    ..started
                };
                self.save_step(tenant, run, StepKind::Planning, body, summary)
                    .await;
                self.debug_snapshot(tenant, run).await;
                None
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
                    ..started
                };
                self.save_step(
                    tenant,
                    run,
                    StepKind::FinalAnswer,
                    body,
                    "final answer".into(),
                )
                .await;
                let outcome = Outcome::Completed {
                    output: Value::String(answer.clone()),
                    answer: Some(answer),
                };
                Some(self.finish_run(tenant, run, ctl, outcome).await)
            }
            Decision::Act {
                model_output,
                tool_calls,
                token_usage,
            } => {
                let body = StepBody {
                    model_output,
                    token_usage,
                    ..started
                };
                match tool_calls.iter().find(|c| c.name == USER_INPUT).cloned() {
                    Some(ask) => Some(self.ask_user(tenant, run, ctl, number, body, ask).await),
                    None => self.act(tenant, run, ctl, number, body, tool_calls).await,
                }
            }
        }
    }

    /// A `user_input` call: the step holds the question and the execution pauses (a
    /// subagent cannot ask: its step fails, and so does it).
    async fn ask_user(
        &self,
        tenant: &Tenant,
        run: &mut Run,
        ctl: &RunControl,
        number: u32,
        body: StepBody,
        ask: ToolCall,
    ) -> RunEnd {
        let question = string_argument(&ask.arguments, "question")
            .unwrap_or("?")
            .to_string();
        self.run_event(
            tenant,
            run,
            EventType::ToolCalled,
            number,
            &format!("Called {USER_INPUT}"),
            Some(USER_INPUT),
        )
        .await;
        let body = StepBody {
            tool_calls: vec![ask],
            ..body
        };
        if run.ctx.execution.parent_execution_id.is_some() {
            let error = StepError {
                kind: "tool_error".into(),
                message: "a subagent cannot ask the user".into(),
            };
            return self.fail_with_step(tenant, run, ctl, body, error).await;
        }
        let body = StepBody {
            output: json!({"question": question}),
            ..body
        };
        self.save_step(
            tenant,
            run,
            StepKind::Action,
            body,
            format!("called {USER_INPUT}"),
        )
        .await;
        self.finish_run(tenant, run, ctl, Outcome::Paused { question })
            .await
    }

    /// An action step: runs its tool calls and saves the step with their results; `Some`
    /// when the run ended (cancelled meanwhile, or lost).
    async fn act(
        &self,
        tenant: &Tenant,
        run: &mut Run,
        ctl: &RunControl,
        number: u32,
        body: StepBody,
        tool_calls: Vec<ToolCall>,
    ) -> Option<RunEnd> {
        let ran = self
            .run_tool_calls(tenant, run, &tool_calls, ctl, number)
            .await;
        if ran.interrupted && ctl.is_lost() {
            return Some(RunEnd::Lost);
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
            tool_calls,
            observations,
            error,
            output,
            ..body
        };
        self.save_step(tenant, run, StepKind::Action, body, summary)
            .await;
        if interrupted {
            return Some(self.finish_run(tenant, run, ctl, Outcome::Cancelled).await);
        }
        self.debug_snapshot(tenant, run).await;
        None
    }

    /// In debug mode, a snapshot after every step.
    async fn debug_snapshot(&self, tenant: &Tenant, run: &mut Run) {
        if is_debug(&run.ctx.execution) {
            self.snapshot(tenant, run, "running", false, None).await;
        }
    }
}
