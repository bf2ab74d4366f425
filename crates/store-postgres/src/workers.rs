//! Worker processes seen on PostgreSQL: one row per worker, rewritten when it calls.

use stepwise_core::Timestamp;
use stepwise_store::rules::FORGET_WORKERS_AFTER;
use stepwise_store::{Result, Tenant, WorkerSeen};

use crate::PgStore;
use crate::sql::{self, args, map_pg};

const UPSERT_WORKER: &str = "INSERT INTO workers (tenant_id, worker_id, agents, last_seen_at) VALUES ($1, $2, $3, $4) \
     ON CONFLICT (tenant_id, worker_id) DO UPDATE SET agents = CASE WHEN excluded.last_seen_at >= workers.last_seen_at THEN excluded.agents ELSE workers.agents END, \
     last_seen_at = GREATEST(workers.last_seen_at, excluded.last_seen_at)";
const OFFLINE_WORKER: &str =
    "UPDATE workers SET last_seen_at = $3 WHERE tenant_id = $1 AND worker_id = $2";
const FORGET_WORKERS: &str = "DELETE FROM workers WHERE last_seen_at < $1";
const LIST_WORKERS: &str = "SELECT worker_id, agents, last_seen_at FROM workers WHERE tenant_id = $1 AND last_seen_at >= $2 \
     ORDER BY last_seen_at DESC, worker_id";

impl stepwise_store::WorkerStore for PgStore {
    async fn record_worker(&self, tenant: &Tenant, worker: WorkerSeen) -> Result<()> {
        let forget_before = worker.last_seen_at.0 - FORGET_WORKERS_AFTER.as_micros() as i64;
        let agents = serde_json::to_string(&worker.agents).unwrap_or_else(|_| "[]".into());
        let client = self.client().await?;
        client
            .execute_typed(
                UPSERT_WORKER,
                args![
                    tenant.as_str(),
                    worker.worker_id.as_str(),
                    agents,
                    worker.last_seen_at.0
                ],
            )
            .await
            .map_err(map_pg)?;
        client
            .execute_typed(FORGET_WORKERS, args![forget_before])
            .await
            .map_err(map_pg)?;
        Ok(())
    }

    async fn worker_offline(
        &self,
        tenant: &Tenant,
        worker_id: &str,
        at: Timestamp,
    ) -> Result<bool> {
        let client = self.client().await?;
        let changed = client
            .execute_typed(OFFLINE_WORKER, args![tenant.as_str(), worker_id, at.0])
            .await
            .map_err(map_pg)?;
        Ok(changed > 0)
    }

    async fn list_workers(&self, tenant: &Tenant, since: Timestamp) -> Result<Vec<WorkerSeen>> {
        let client = self.client().await?;
        let rows = client
            .query_typed(LIST_WORKERS, args![tenant.as_str(), since.0])
            .await
            .map_err(map_pg)?;
        let mut workers = Vec::with_capacity(rows.len());
        for row in &rows {
            let agents: String = sql::get(row, "agents")?;
            workers.push(WorkerSeen {
                worker_id: sql::get(row, "worker_id")?,
                agents: serde_json::from_str(&agents).unwrap_or_default(),
                last_seen_at: Timestamp(sql::get(row, "last_seen_at")?),
            });
        }
        Ok(workers)
    }
}
