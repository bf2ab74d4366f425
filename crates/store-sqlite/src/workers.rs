//! Worker processes seen on SQLite: one row per worker, rewritten when it calls.

use rusqlite::params;
use stepwise_core::Timestamp;
use stepwise_store::rules::FORGET_WORKERS_AFTER;
use stepwise_store::{Result, Tenant, WorkerSeen};

use crate::SqliteStore;
use crate::writer::map_sqlite;

const UPSERT_WORKER: &str = "INSERT INTO workers (tenant_id, worker_id, agents, last_seen_at) VALUES (?1, ?2, ?3, ?4) \
     ON CONFLICT (tenant_id, worker_id) DO UPDATE SET agents = CASE WHEN excluded.last_seen_at >= last_seen_at THEN excluded.agents ELSE agents END, \
     last_seen_at = MAX(last_seen_at, excluded.last_seen_at)";
const OFFLINE_WORKER: &str =
    "UPDATE workers SET last_seen_at = ?3 WHERE tenant_id = ?1 AND worker_id = ?2";
const FORGET_WORKERS: &str = "DELETE FROM workers WHERE last_seen_at < ?1";
const LIST_WORKERS: &str = "SELECT worker_id, agents, last_seen_at FROM workers WHERE tenant_id = ?1 AND last_seen_at >= ?2 \
     ORDER BY last_seen_at DESC, worker_id";

impl stepwise_store::WorkerStore for SqliteStore {
    async fn record_worker(&self, tenant: &Tenant, worker: WorkerSeen) -> Result<()> {
        let tenant = tenant.as_str().to_string();
        let forget_before = worker.last_seen_at.0 - FORGET_WORKERS_AFTER.as_micros() as i64;
        self.write(move |conn, _| {
            let agents = serde_json::to_string(&worker.agents).unwrap_or_else(|_| "[]".into());
            conn.prepare_cached(UPSERT_WORKER)
                .and_then(|mut s| {
                    s.execute(params![
                        tenant,
                        worker.worker_id,
                        agents,
                        worker.last_seen_at.0
                    ])
                })
                .map_err(map_sqlite)?;
            conn.prepare_cached(FORGET_WORKERS)
                .and_then(|mut s| s.execute(params![forget_before]))
                .map_err(map_sqlite)?;
            Ok(())
        })
        .await
    }

    async fn worker_offline(
        &self,
        tenant: &Tenant,
        worker_id: &str,
        at: Timestamp,
    ) -> Result<bool> {
        let tenant = tenant.as_str().to_string();
        let worker_id = worker_id.to_string();
        self.write(move |conn, _| {
            conn.prepare_cached(OFFLINE_WORKER)
                .and_then(|mut s| s.execute(params![tenant, worker_id, at.0]))
                .map(|changed| changed > 0)
                .map_err(map_sqlite)
        })
        .await
    }

    async fn list_workers(&self, tenant: &Tenant, since: Timestamp) -> Result<Vec<WorkerSeen>> {
        let tenant = tenant.as_str().to_string();
        self.read(move |conn, _| {
            let mut statement = conn.prepare_cached(LIST_WORKERS).map_err(map_sqlite)?;
            let rows = statement
                .query_map(params![tenant, since.0], |r| {
                    let agents: String = r.get(1)?;
                    Ok(WorkerSeen {
                        worker_id: r.get(0)?,
                        agents: serde_json::from_str(&agents).unwrap_or_default(),
                        last_seen_at: Timestamp(r.get(2)?),
                    })
                })
                .map_err(map_sqlite)?;
            rows.collect::<rusqlite::Result<Vec<_>>>()
                .map_err(map_sqlite)
        })
        .await
    }
}
