//! Worker presence: the worker processes a tenant has, their agent types and when each last
//! called (`GET /v1/agents`, "no worker is online" on a queued message).

use stepwise_core::Timestamp;

use crate::{Result, Tenant, WorkerSeen};

crate::domain! {
    $
    pub trait WorkerStore, pass PassWorkers, methods worker_store_methods {
        /// Records that a worker process of this tenant called (a claim or a heartbeat):
        /// its agent types and the time. Workers not seen for a day are forgotten.
        fn record_worker(&self, tenant: &Tenant, worker: WorkerSeen) -> Result<()>;

        /// A worker process of this tenant stopped cleanly: its last call is set to `at` (an
        /// earlier time than its last call, so it is offline at once; its agent types stay
        /// known until it is forgotten). Whether the tenant had that worker.
        fn worker_offline(&self, tenant: &Tenant, worker_id: &str, at: Timestamp) -> Result<bool>;

        /// The tenant's workers seen at or after `since`, most recent first.
        fn list_workers(&self, tenant: &Tenant, since: Timestamp) -> Result<Vec<WorkerSeen>>;
    }
}
