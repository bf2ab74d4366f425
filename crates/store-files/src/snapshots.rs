//! Snapshots in the files backend: saves that become the execution's and session's last
//! snapshot, a listing without states, and one snapshot with its state.

use serde_json::Value;
use stepwise_core::{Id, Snapshot};
use stepwise_store::{Ack, NewSnapshot, Result, StoreError, Tenant};

use crate::{FileStore, check_depth};

impl stepwise_store::SnapshotStore for FileStore {
    async fn save_snapshot(&self, tenant: &Tenant, new: NewSnapshot) -> Result<Ack<Snapshot>> {
        check_depth("state", [&new.state])?;
        let mut state = self.lock();
        let now = self.now();
        let replace = new.replace;
        let snapshot = new.into_snapshot(now);
        if state.exec(tenant.as_str(), snapshot.execution_id).is_none() {
            return Err(StoreError::NotFound("execution"));
        }
        if let Some(parent) = snapshot.parent_snapshot_id
            && state
                .snapshots
                .get(&parent)
                .is_none_or(|k| k.tenant != tenant.as_str())
        {
            return Err(StoreError::invalid(
                "parent_snapshot_id",
                "no such snapshot",
            ));
        }
        let Some((key, entry)) = state.exec_mut(tenant.as_str(), snapshot.execution_id) else {
            return Err(StoreError::NotFound("execution"));
        };
        entry.execution.last_snapshot_id = Some(snapshot.id);
        entry.execution.updated_at = now;
        let Some(container) = state.container_mut(&key) else {
            return Err(StoreError::NotFound("execution"));
        };
        let mut dropped = Vec::new();
        if replace {
            container.snapshots.retain(|s| {
                let earlier = s.execution_id == snapshot.execution_id;
                if earlier {
                    dropped.push(s.id);
                }
                !earlier
            });
        }
        container.snapshots.push(snapshot.clone());
        if let Some(session) = container.session.as_mut() {
            session.last_snapshot_id = Some(snapshot.id);
        }
        for id in dropped {
            state.snapshots.remove(&id);
        }
        state.snapshots.insert(snapshot.id, key.clone());
        state.touch(&key, false);
        state.reactivate(&key, now);
        Ok(self.enqueue(&mut state, snapshot))
    }

    async fn list_snapshots(&self, tenant: &Tenant, execution_id: Id) -> Result<Vec<Snapshot>> {
        let state = self.lock();
        let Some((key, _)) = state.exec(tenant.as_str(), execution_id) else {
            return Ok(Vec::new());
        };
        let Some(container) = state
            .tenant(&key.tenant)
            .and_then(|t| t.container(key.session))
        else {
            return Ok(Vec::new());
        };
        Ok(container
            .snapshots
            .iter()
            .filter(|s| s.execution_id == execution_id)
            .map(|s| Snapshot {
                state: Value::Null,
                ..s.clone()
            })
            .collect())
    }

    async fn get_snapshot(&self, tenant: &Tenant, id: Id) -> Result<Option<Snapshot>> {
        let state = self.lock();
        let Some(key) = state
            .snapshots
            .get(&id)
            .filter(|k| k.tenant == tenant.as_str())
        else {
            return Ok(None);
        };
        Ok(state
            .tenant(&key.tenant)
            .and_then(|t| t.container(key.session))
            .and_then(|c| c.snapshots.iter().find(|s| s.id == id))
            .cloned())
    }
}
