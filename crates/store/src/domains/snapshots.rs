//! Snapshots of an execution's state.

use std::future::Future;

use stepwise_core::{Id, Snapshot};

use crate::{Ack, NewSnapshot, Result, Tenant};

pub trait SnapshotStore: Send + Sync {
    /// Queues a snapshot; it becomes the execution's and the session's last snapshot.
    fn save_snapshot(
        &self,
        tenant: &Tenant,
        new: NewSnapshot,
    ) -> impl Future<Output = Result<Ack<Snapshot>>> + Send;

    /// An execution's snapshots, oldest first, with `state` left `null`.
    fn list_snapshots(
        &self,
        tenant: &Tenant,
        execution_id: Id,
    ) -> impl Future<Output = Result<Vec<Snapshot>>> + Send;

    /// One snapshot with its state; `Ok(None)` also when its state cannot be decoded.
    fn get_snapshot(
        &self,
        tenant: &Tenant,
        id: Id,
    ) -> impl Future<Output = Result<Option<Snapshot>>> + Send;
}

/// Passes the whole domain through to the wrapped store (see [`crate::Layer`]).
pub trait PassSnapshots: crate::Layer {}

impl<L: PassSnapshots> SnapshotStore for L {
    fn save_snapshot(
        &self,
        tenant: &Tenant,
        new: NewSnapshot,
    ) -> impl Future<Output = Result<Ack<Snapshot>>> + Send {
        self.layer_inner().save_snapshot(tenant, new)
    }

    fn list_snapshots(
        &self,
        tenant: &Tenant,
        execution_id: Id,
    ) -> impl Future<Output = Result<Vec<Snapshot>>> + Send {
        self.layer_inner().list_snapshots(tenant, execution_id)
    }

    fn get_snapshot(
        &self,
        tenant: &Tenant,
        id: Id,
    ) -> impl Future<Output = Result<Option<Snapshot>>> + Send {
        self.layer_inner().get_snapshot(tenant, id)
    }
}
