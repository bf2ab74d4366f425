//! Cancelling an execution, wherever it is: pending or paused, running here, or running
//! on another node.

use stepwise_core::{Execution, ExecutionStatus, Id};
use stepwise_store::{Result, Store, StoreError, Tenant};

use super::Engine;
use super::finish::{Driver, Outcome};

impl<S: Store> Engine<S> {
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
            return Err(already(&execution));
        }
        if execution.status == ExecutionStatus::Running {
            let local = self.running_map().get(&id).map(|ctl| ctl.cancel.clone());
            if let Some(token) = local {
                token.cancel();
                return Ok(execution);
            }
        }
        let driver = Driver::Idle {
            parent_snapshot_id: None,
        };
        match self
            .finish(tenant, &execution, driver, &Outcome::Cancelled, true)
            .await
        {
            Ok(cancelled) => Ok(cancelled),
            Err(StoreError::InvalidState(_)) => {
                let now = store
                    .get_execution(tenant, id)
                    .await?
                    .ok_or(StoreError::NotFound("execution"))?;
                Err(already(&now))
            }
            Err(e) => Err(e),
        }
    }
}

fn already(execution: &Execution) -> StoreError {
    StoreError::Conflict(format!("the execution is already {}", execution.status))
}
