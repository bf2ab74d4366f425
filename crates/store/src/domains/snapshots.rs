//! Snapshots of an execution's state.

use stepwise_core::{Id, Snapshot};

use crate::{Ack, NewSnapshot, Result, Tenant};

crate::domain! {
    $
    pub trait SnapshotStore, pass PassSnapshots, methods snapshot_store_methods {
        /// Queues a snapshot; it becomes the execution's and the session's last snapshot.
        fn save_snapshot(&self, tenant: &Tenant, new: NewSnapshot) -> Result<Ack<Snapshot>>;

        /// An execution's snapshots, oldest first, with `state` left `null`.
        fn list_snapshots(&self, tenant: &Tenant, execution_id: Id) -> Result<Vec<Snapshot>>;

        /// One snapshot with its state; `Ok(None)` also when its state cannot be decoded.
        fn get_snapshot(&self, tenant: &Tenant, id: Id) -> Result<Option<Snapshot>>;
    }
}
