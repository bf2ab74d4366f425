//! A step's tool calls: run in parallel with a timeout each, their `tool.called` and
//! `tool.completed` events in call order, and subagents — child executions run inline
//! through the same step loop.

use std::panic::AssertUnwindSafe;

use futures_util::FutureExt;
use futures_util::stream::{FuturesOrdered, StreamExt};
use serde_json::{Value, json};
use stepwise_core::{EventType, ExecutionStatus, StepError, ToolCall};
use stepwise_store::{NewExecution, Store, Tenant};

use super::{
    Engine, MAX_SUBAGENT_DEPTH, MAX_TOOL_CALLS_PER_STEP, Run, RunControl, RunEnd, cancelled_error,
    cut, panic_message,
};
use crate::tools::{SUBAGENT, ToolError, string_argument};

impl<S: Store> Engine<S> {
    /// Runs one step's tool calls: every `tool.called` event first, in call order; then the
    /// calls themselves, all at once (a model asking for several tools in one turn expects
    /// them to run in parallel), each `tool.completed` going out in call order as soon as
    /// that call and the ones before it are done. A subagent call runs after the others,
    /// one at a time: it watches the cancel token itself and must not be dropped midway.
    /// A call that fails or panics is that call's result; the others still run.
    pub(super) async fn run_tool_calls(
        &self,
        tenant: &Tenant,
        run: &Run,
        calls: &[ToolCall],
        ctl: &RunControl,
        number: u32,
    ) -> ToolRun {
        for call in calls {
            self.run_event(
                tenant,
                run,
                EventType::ToolCalled,
                number,
                &format!("Called {}", call.name),
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
        self.run_event(
            tenant,
            run,
            EventType::ToolCompleted,
            number,
            &content,
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
                    lease: None,
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
        self.running_map().insert(child.id, child_ctl.clone());
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
}

/// One tool call's result: its observation, or the error that is its result.
type CallResult = std::result::Result<String, StepError>;

/// The outcome of a step's tool calls, by call (`None`: not run, the execution was
/// cancelled first).
pub(super) struct ToolRun {
    pub(super) results: Vec<Option<CallResult>>,
    pub(super) interrupted: bool,
}

impl ToolRun {
    /// The step's `observations` (the results that are not errors, in call order, one per
    /// line), its `error` (the first failed call's, or the cancellation) and its `output`:
    /// with several calls, `{"tool_results": [{id, name, observation, error}]}` keeps each
    /// call's own result, so nothing depends on splitting the joined text.
    pub(super) fn into_step_parts(
        self,
        calls: &[ToolCall],
    ) -> (Option<String>, Option<StepError>, Value) {
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
