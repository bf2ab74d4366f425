//! Retention (every tenant: the cleaner is the one cross-tenant writer).

use std::future::Future;

use stepwise_core::Timestamp;

use crate::{
    CleanupReport, Result, RetentionLock, RetentionOverride, RetentionPolicy, Tenant, TenantScope,
};

pub trait RetentionStore: Send + Sync {
    /// Marks `active` sessions of the tenants in `scope` not updated since `cutoff` as
    /// `abandoned` and cancels their paused executions. Returns how many sessions were
    /// marked (or would be, when `dry`).
    fn mark_abandoned(
        &self,
        cutoff: Timestamp,
        dry: bool,
        scope: TenantScope,
    ) -> impl Future<Output = Result<u64>> + Send;

    /// Deletes sessions of the tenants in `scope` past retention with every child row, in
    /// small batches.
    fn cleanup_old_sessions(
        &self,
        now: Timestamp,
        policy: RetentionPolicy,
        dry: bool,
        scope: TenantScope,
    ) -> impl Future<Output = Result<CleanupReport>> + Send;

    /// The tenants with a retention of their own, and theirs.
    fn tenant_retentions(
        &self,
    ) -> impl Future<Output = Result<Vec<(String, RetentionOverride)>>> + Send;

    /// Sets a tenant's own retention (`None`: the server's again).
    fn set_tenant_retention(
        &self,
        tenant: &Tenant,
        retention: Option<RetentionOverride>,
    ) -> impl Future<Output = Result<()>> + Send;

    /// Tries to become the one process running a retention pass: `None` when another
    /// node holds the lock (that node's pass covers every tenant; skip this one). Hold
    /// the returned lock for the whole pass.
    fn try_retention_lock(&self) -> impl Future<Output = Result<Option<RetentionLock>>> + Send;
}

/// Passes the whole domain through to the wrapped store (see [`crate::Layer`]).
pub trait PassRetention: crate::Layer {}

impl<L: PassRetention> RetentionStore for L {
    fn mark_abandoned(
        &self,
        cutoff: Timestamp,
        dry: bool,
        scope: TenantScope,
    ) -> impl Future<Output = Result<u64>> + Send {
        self.layer_inner().mark_abandoned(cutoff, dry, scope)
    }

    fn cleanup_old_sessions(
        &self,
        now: Timestamp,
        policy: RetentionPolicy,
        dry: bool,
        scope: TenantScope,
    ) -> impl Future<Output = Result<CleanupReport>> + Send {
        self.layer_inner()
            .cleanup_old_sessions(now, policy, dry, scope)
    }

    fn tenant_retentions(
        &self,
    ) -> impl Future<Output = Result<Vec<(String, RetentionOverride)>>> + Send {
        self.layer_inner().tenant_retentions()
    }

    fn set_tenant_retention(
        &self,
        tenant: &Tenant,
        retention: Option<RetentionOverride>,
    ) -> impl Future<Output = Result<()>> + Send {
        self.layer_inner().set_tenant_retention(tenant, retention)
    }

    fn try_retention_lock(&self) -> impl Future<Output = Result<Option<RetentionLock>>> + Send {
        self.layer_inner().try_retention_lock()
    }
}
