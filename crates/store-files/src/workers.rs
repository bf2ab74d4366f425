//! Worker processes seen in the files backend: kept in the tenant's state, saved with it.

use stepwise_core::Timestamp;
use stepwise_store::{Result, Tenant, WorkerSeen};

use crate::FileStore;

impl stepwise_store::WorkerStore for FileStore {
    async fn record_worker(&self, tenant: &Tenant, worker: WorkerSeen) -> Result<()> {
        let forget_before =
            worker.last_seen_at.0 - stepwise_store::rules::FORGET_WORKERS_AFTER.as_micros() as i64;
        let mut workers = self
            .inner
            .shared
            .workers
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        workers.retain(|_, w| w.last_seen_at.0 >= forget_before);
        let key = (tenant.as_str().to_string(), worker.worker_id.clone());
        // The newer call wins, never the other way round.
        if workers
            .get(&key)
            .is_none_or(|known| known.last_seen_at <= worker.last_seen_at)
        {
            workers.insert(key, worker);
        }
        Ok(())
    }

    async fn worker_offline(
        &self,
        tenant: &Tenant,
        worker_id: &str,
        at: Timestamp,
    ) -> Result<bool> {
        let mut workers = self
            .inner
            .shared
            .workers
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let key = (tenant.as_str().to_string(), worker_id.to_string());
        Ok(workers
            .get_mut(&key)
            .map(|worker| worker.last_seen_at = at)
            .is_some())
    }

    async fn list_workers(&self, tenant: &Tenant, since: Timestamp) -> Result<Vec<WorkerSeen>> {
        let workers = self
            .inner
            .shared
            .workers
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let mut seen: Vec<WorkerSeen> = workers
            .iter()
            .filter(|((t, _), w)| t == tenant.as_str() && w.last_seen_at >= since)
            .map(|(_, w)| w.clone())
            .collect();
        seen.sort_by(|a, b| {
            b.last_seen_at
                .cmp(&a.last_seen_at)
                .then_with(|| a.worker_id.cmp(&b.worker_id))
        });
        Ok(seen)
    }
}
