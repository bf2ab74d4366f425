//! Snapshots on PostgreSQL: saved through the group-commit writer (state encoded here),
//! listed without their state, read one at a time with it.

use std::sync::atomic::Ordering;

use stepwise_core::{Id, Snapshot, codec};
use stepwise_store::{Ack, NewSnapshot, Result, StoreError, Tenant};

use crate::PgStore;
use crate::sql::{self, args, map_pg, snapshot_cols};
use crate::writer::SnapshotJob;

/// Without the state (listing reads no payloads).
const EXECUTION_SNAPSHOTS: &str = concat!(
    "SELECT ",
    snapshot_cols!(),
    " FROM snapshots WHERE execution_id = $1 AND tenant_id = $2 ORDER BY created_at, id"
);
const SNAPSHOT_BY_ID: &str = concat!(
    "SELECT ",
    snapshot_cols!(),
    ", state FROM snapshots WHERE id = $1 AND tenant_id = $2"
);

impl PgStore {
    /// A snapshot checked, stamped and its state encoded, ready for the writer.
    pub(crate) fn snapshot_job(&self, tenant: &Tenant, new: NewSnapshot) -> Result<SnapshotJob> {
        for (field, text) in [("agent_id", &new.agent_id), ("agent_name", &new.agent_name)] {
            if let Some(text) = text {
                sql::check_text(field, text)?;
            }
        }
        if new.step_number > i32::MAX as u32 {
            return Err(StoreError::invalid(
                "step_number",
                "the step number is too large",
            ));
        }
        let state = codec::encode_value(&new.state, self.inner.options.compress_threshold);
        let replace = new.replace;
        Ok(SnapshotJob {
            tenant: tenant.as_str().to_string(),
            snapshot: new.into_snapshot(self.now()),
            state,
            replace,
        })
    }
}

impl stepwise_store::SnapshotStore for PgStore {
    async fn save_snapshot(&self, tenant: &Tenant, new: NewSnapshot) -> Result<Ack<Snapshot>> {
        let job = self.snapshot_job(tenant, new)?;
        self.inner
            .writer
            .snapshot(self.shard_key(job.snapshot.execution_id), job)
            .await
    }

    /// An execution's snapshots in order, each with a `null` state.
    async fn list_snapshots(&self, tenant: &Tenant, execution_id: Id) -> Result<Vec<Snapshot>> {
        let client = self.client().await?;
        let rows = client
            .query_typed(EXECUTION_SNAPSHOTS, args![execution_id, tenant.as_str()])
            .await
            .map_err(map_pg)?;
        sql::collect(&rows, sql::snapshot)
    }

    /// One snapshot with its state; a state that cannot be decoded reads as not found (and
    /// is counted in the self's decode errors).
    async fn get_snapshot(&self, tenant: &Tenant, id: Id) -> Result<Option<Snapshot>> {
        let client = self.client().await?;
        let Some(row) = client
            .query_typed_opt(SNAPSHOT_BY_ID, args![id, tenant.as_str()])
            .await
            .map_err(map_pg)?
        else {
            return Ok(None);
        };
        let mut snapshot = sql::snapshot(&row)?;
        let state: Vec<u8> = sql::get(&row, "state")?;
        match codec::decode_value(&state) {
            Ok(state) => {
                snapshot.state = state;
                Ok(Some(snapshot))
            }
            Err(e) => {
                self.inner.decode_errors.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(snapshot = %id, error = %e, "a stored snapshot cannot be decoded");
                Ok(None)
            }
        }
    }
}
