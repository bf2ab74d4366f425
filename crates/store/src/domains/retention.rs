//! Retention (every tenant: the cleaner is the one cross-tenant writer).

use stepwise_core::Timestamp;

use crate::{
    CleanupReport, Result, RetentionLock, RetentionOverride, RetentionPolicy, Tenant, TenantScope,
};

crate::domain! {
    $
    pub trait RetentionStore, pass PassRetention, methods retention_store_methods {
        /// Marks `active` sessions of the tenants in `scope` not updated since `cutoff` as
        /// `abandoned` and cancels their paused executions. Returns how many sessions were
        /// marked (or would be, when `dry`).
        fn mark_abandoned(&self, cutoff: Timestamp, dry: bool, scope: TenantScope) -> Result<u64>;

        /// Deletes sessions of the tenants in `scope` past retention with every child row, in
        /// small batches.
        fn cleanup_old_sessions(&self, now: Timestamp, policy: RetentionPolicy, dry: bool, scope: TenantScope) -> Result<CleanupReport>;

        /// The tenants with a retention of their own, and theirs.
        fn tenant_retentions(&self) -> Result<Vec<(String, RetentionOverride)>>;

        /// Sets a tenant's own retention (`None`: the server's again).
        fn set_tenant_retention(&self, tenant: &Tenant, retention: Option<RetentionOverride>) -> Result<()>;

        /// Tries to become the one process running a retention pass: `None` when another
        /// node holds the lock (that node's pass covers every tenant; skip this one). Hold
        /// the returned lock for the whole pass.
        fn try_retention_lock(&self) -> Result<Option<RetentionLock>>;
    }
}
