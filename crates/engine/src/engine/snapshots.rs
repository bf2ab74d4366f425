//! Snapshots of a run: the agent state saved on pause, on finish, after debug steps and
//! before a subagent starts, as plain JSON a person can read.

use serde_json::{Value, json};
use stepwise_core::{Execution, Id, Step, TokenUsage};
use stepwise_store::{NewSnapshot, Store, Tenant};

use super::{Engine, Run, is_debug};
use crate::agent::AgentContext;

impl<S: Store> Engine<S> {
    /// Saves a snapshot of the run and remembers it as the run's latest.
    pub(super) async fn snapshot(
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
    pub(super) async fn save_snapshot_now(
        &self,
        tenant: &Tenant,
        ctx: &AgentContext,
        status: &str,
        is_final: bool,
        parent_snapshot_id: Option<Id>,
        extra: Option<Value>,
    ) -> Option<Id> {
        let execution = &ctx.execution;
        let state = snapshot_state(execution, status, extra, &ctx.steps);
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
}

/// The agent state saved in snapshots: the execution, its status, the step count, the
/// last step and the token usage so far, plus `extra`'s keys (output, question, error).
pub(super) fn snapshot_state(
    execution: &Execution,
    status: &str,
    extra: Option<Value>,
    steps: &[Step],
) -> Value {
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

/// A snapshot of an execution the engine writes (its agent is the execution itself).
pub(super) fn new_snapshot(
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
        replace: false,
    }
}
