//! Worker presence: the worker processes a tenant has, their agent types and when each last
//! called (`GET /v1/agents`, "no worker is online" on a queued message).

use std::future::Future;

use stepwise_core::Timestamp;

use crate::{Result, Tenant, WorkerSeen};

pub trait WorkerStore: Send + Sync {
    /// Records that a worker process of this tenant called (a claim or a heartbeat):
    /// its agent types and the time. Workers not seen for a day are forgotten.
    fn record_worker(
        &self,
        tenant: &Tenant,
        worker: WorkerSeen,
    ) -> impl Future<Output = Result<()>> + Send;

    /// A worker process of this tenant stopped cleanly: its last call is set to `at` (an
    /// earlier time than its last call, so it is offline at once; its agent types stay
    /// known until it is forgotten). Whether the tenant had that worker.
    fn worker_offline(
        &self,
        tenant: &Tenant,
        worker_id: &str,
        at: Timestamp,
    ) -> impl Future<Output = Result<bool>> + Send;

    /// The tenant's workers seen at or after `since`, most recent first.
    fn list_workers(
        &self,
        tenant: &Tenant,
        since: Timestamp,
    ) -> impl Future<Output = Result<Vec<WorkerSeen>>> + Send;
}

/// Passes the whole domain through to the wrapped store (see [`crate::Layer`]).
pub trait PassWorkers: crate::Layer {}

impl<L: PassWorkers> WorkerStore for L {
    fn record_worker(
        &self,
        tenant: &Tenant,
        worker: WorkerSeen,
    ) -> impl Future<Output = Result<()>> + Send {
        self.layer_inner().record_worker(tenant, worker)
    }

    fn worker_offline(
        &self,
        tenant: &Tenant,
        worker_id: &str,
        at: Timestamp,
    ) -> impl Future<Output = Result<bool>> + Send {
        self.layer_inner().worker_offline(tenant, worker_id, at)
    }

    fn list_workers(
        &self,
        tenant: &Tenant,
        since: Timestamp,
    ) -> impl Future<Output = Result<Vec<WorkerSeen>>> + Send {
        self.layer_inner().list_workers(tenant, since)
    }
}
