//! A message to a busy session (`on_busy`): the session's queued and running executions
//! make room for it, either cancelled and kept (`interrupt`) or cancelled and removed with
//! everything they wrote (`rollback`).

use std::time::{Duration, Instant};

use stepwise_core::{Execution, ExecutionStatus, Id};
use stepwise_store::{CheckpointStore, Result, Store, StoreError, Tenant};

use super::Engine;

/// How long a rollback waits for a cancelled execution to stop (a step in flight is
/// aborted, so this is only reached by a stuck agent).
const STOP_WAIT: Duration = Duration::from_secs(30);

impl<S: Store> Engine<S> {
    /// The session's root executions that are queued or running: what makes it busy. (A
    /// paused execution is not: the next message is its answer.)
    pub async fn busy_executions(&self, tenant: &Tenant, session_id: Id) -> Result<Vec<Execution>> {
        let executions = self.inner.store.list_executions(tenant, session_id).await?;
        Ok(executions
            .into_iter()
            .filter(|e| {
                e.parent_execution_id.is_none()
                    && matches!(
                        e.status,
                        ExecutionStatus::Pending | ExecutionStatus::Running
                    )
            })
            .collect())
    }

    /// Cancels `executions` of the session (a running one stops at its next step boundary;
    /// one that finished meanwhile is left as it is). With `remove`, waits until each has
    /// stopped, then removes it with its sub-executions, steps, snapshots, messages and
    /// events, and the LangGraph checkpoints its run wrote.
    ///
    /// Queued ones are cancelled first, newest first: a running one cancelled first would
    /// free the session for the next queued one, which a worker could claim (and start
    /// writing) before its own cancellation.
    pub async fn make_room(
        &self,
        tenant: &Tenant,
        session_id: Id,
        executions: &[Execution],
        remove: bool,
    ) -> Result<()> {
        let mut order: Vec<&Execution> = executions.iter().collect();
        order.sort_by_key(|e| {
            (
                e.status != ExecutionStatus::Pending,
                std::cmp::Reverse((e.created_at, e.id)),
            )
        });
        for execution in order {
            match self.cancel(tenant, execution.id).await {
                Ok(_) | Err(StoreError::Conflict(_)) | Err(StoreError::NotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
        if !remove || executions.is_empty() {
            return Ok(());
        }
        for execution in executions {
            self.wait_stopped(tenant, execution.id).await?;
        }
        let ids: Vec<Id> = executions.iter().map(|e| e.id).collect();
        let store = &self.inner.store;
        let removed = store
            .remove_executions(tenant, session_id, ids.clone())
            .await?;
        if let Some(checkpoints) = store.checkpoints() {
            checkpoints
                .delete_checkpoints_for_runs(tenant, ids.iter().map(Id::to_string).collect())
                .await?;
        }
        tracing::info!(session = %session_id, removed, "rolled back the session's running executions for a new message");
        Ok(())
    }

    /// Waits until a cancelled execution is finished and no run of this node drives it.
    async fn wait_stopped(&self, tenant: &Tenant, id: Id) -> Result<()> {
        let started = Instant::now();
        loop {
            let running_here = self.running_map().contains_key(&id);
            let finished = match self.inner.store.get_execution(tenant, id).await? {
                Some(execution) => execution.status.is_finished(),
                None => true,
            };
            if finished && !running_here {
                return Ok(());
            }
            if started.elapsed() > STOP_WAIT {
                return Err(StoreError::Conflict(format!(
                    "execution {id} did not stop within {} s of its cancellation",
                    STOP_WAIT.as_secs()
                )));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
