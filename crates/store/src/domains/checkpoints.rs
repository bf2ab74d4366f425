//! LangGraph checkpoints (see [`crate::checkpoints`] for the types). Only backends
//! that can store them implement it; [`crate::Store::checkpoints`] says whether one does.

use std::future::Future;

use stepwise_core::Id;

use crate::{
    CheckpointPut, CheckpointQuery, CheckpointRecord, NewCheckpoint, Page, PruneStrategy,
    PutWrites, Result, Tenant, ThreadInfo,
};

pub trait CheckpointStore: Send + Sync {
    /// Stores a checkpoint and its blobs in one transaction, with its `checkpoint.created`
    /// event when the put [announces](NewCheckpoint::announce) it
    /// ([`checkpoint_created`](crate::checkpoints::checkpoint_created), published to the
    /// session's subscribers after the commit), creating the thread (a session named after
    /// it when that name is valid and free) on the first put. The same checkpoint again
    /// writes nothing (`created: false`, no event); a blob already stored is kept.
    fn put_checkpoint(
        &self,
        tenant: &Tenant,
        new: NewCheckpoint,
    ) -> impl Future<Output = Result<CheckpointPut>> + Send;

    /// Stores pending writes (creating the thread if needed): `idx < 0` replaces the row at
    /// the same `(task_id, idx)`, `idx >= 0` keeps an existing one. Returns the session.
    fn put_checkpoint_writes(
        &self,
        tenant: &Tenant,
        writes: PutWrites,
    ) -> impl Future<Output = Result<Id>> + Send;

    /// One checkpoint (the latest of the namespace when `checkpoint_id` is `None`), for a
    /// reader that already holds some values: for a channel
    /// in `have` (channel -> version) whose append chain reaches that version, the value is
    /// [`ResolvedBlob::Since`](crate::ResolvedBlob::Since), only the items appended after it.
    fn get_checkpoint_since(
        &self,
        tenant: &Tenant,
        thread_id: &str,
        checkpoint_ns: &str,
        checkpoint_id: Option<&str>,
        have: &std::collections::BTreeMap<String, String>,
    ) -> impl Future<Output = Result<Option<CheckpointRecord>>> + Send;

    /// Checkpoints newest first (`checkpoint_id` descending), keyset-paginated.
    fn list_checkpoints(
        &self,
        tenant: &Tenant,
        query: CheckpointQuery,
    ) -> impl Future<Output = Result<Page<CheckpointRecord>>> + Send;

    fn get_thread(
        &self,
        tenant: &Tenant,
        thread_id: &str,
    ) -> impl Future<Output = Result<Option<ThreadInfo>>> + Send;

    /// The LangGraph thread a session is, with every checkpoint, blob and write row as
    /// stored (writes in the order they were written), for the session's export document.
    /// `None` when the session is no thread (and on a backend that keeps no checkpoints).
    fn export_thread(
        &self,
        tenant: &Tenant,
        session_id: Id,
    ) -> impl Future<Output = Result<Option<stepwise_core::document::DocumentThread>>> + Send;

    /// Hard delete: the thread's checkpoints, blobs and writes, and its session with every
    /// row. `false` when there is no such thread.
    fn delete_thread(
        &self,
        tenant: &Tenant,
        thread_id: &str,
    ) -> impl Future<Output = Result<bool>> + Send;

    /// Copies every checkpoint, blob and write of `source` to `target` (created like a put
    /// creates a thread). `None` when there is no source; `Conflict` when the target
    /// already has checkpoints.
    fn copy_thread(
        &self,
        tenant: &Tenant,
        source: &str,
        target: &str,
        user_id: &str,
    ) -> impl Future<Output = Result<Option<ThreadInfo>>> + Send;

    /// Deletes the checkpoints whose metadata `run_id` is listed, with their writes (their
    /// blobs stay: a later checkpoint may build on them). Returns how many checkpoints went.
    fn delete_checkpoints_for_runs(
        &self,
        tenant: &Tenant,
        run_ids: Vec<String>,
    ) -> impl Future<Output = Result<u64>> + Send;

    /// Prunes the threads' checkpoints; returns how many checkpoints went.
    fn prune_checkpoints(
        &self,
        tenant: &Tenant,
        thread_ids: Vec<String>,
        strategy: PruneStrategy,
    ) -> impl Future<Output = Result<u64>> + Send;
}

/// The reads every checkpoint store answers through
/// [`CheckpointStore::get_checkpoint_since`]: derived for every store, so no backend or layer
/// has one of its own to forward or to shadow.
pub trait CheckpointStoreExt: CheckpointStore {
    /// One checkpoint (the latest of the namespace when `checkpoint_id` is `None`).
    fn get_checkpoint(
        &self,
        tenant: &Tenant,
        thread_id: &str,
        checkpoint_ns: &str,
        checkpoint_id: Option<&str>,
    ) -> impl Future<Output = Result<Option<CheckpointRecord>>> + Send {
        async move {
            let have = std::collections::BTreeMap::new();
            self.get_checkpoint_since(tenant, thread_id, checkpoint_ns, checkpoint_id, &have)
                .await
        }
    }
}

impl<T: CheckpointStore + ?Sized> CheckpointStoreExt for T {}

/// The checkpoint store of a backend that keeps no checkpoints: a type with no values, so
/// [`crate::Store::checkpoints`] can only be `None` and none of these methods can be called.
#[derive(Debug, Clone, Copy)]
pub enum NoCheckpoints {}

impl CheckpointStore for NoCheckpoints {
    async fn put_checkpoint(&self, _tenant: &Tenant, _new: NewCheckpoint) -> Result<CheckpointPut> {
        match *self {}
    }

    async fn put_checkpoint_writes(&self, _tenant: &Tenant, _writes: PutWrites) -> Result<Id> {
        match *self {}
    }

    async fn get_checkpoint_since(
        &self,
        _tenant: &Tenant,
        _thread_id: &str,
        _checkpoint_ns: &str,
        _checkpoint_id: Option<&str>,
        _have: &std::collections::BTreeMap<String, String>,
    ) -> Result<Option<CheckpointRecord>> {
        match *self {}
    }

    async fn list_checkpoints(
        &self,
        _tenant: &Tenant,
        _query: CheckpointQuery,
    ) -> Result<Page<CheckpointRecord>> {
        match *self {}
    }

    async fn get_thread(&self, _tenant: &Tenant, _thread_id: &str) -> Result<Option<ThreadInfo>> {
        match *self {}
    }

    async fn export_thread(
        &self,
        _tenant: &Tenant,
        _session_id: Id,
    ) -> Result<Option<stepwise_core::document::DocumentThread>> {
        match *self {}
    }

    async fn delete_thread(&self, _tenant: &Tenant, _thread_id: &str) -> Result<bool> {
        match *self {}
    }

    async fn copy_thread(
        &self,
        _tenant: &Tenant,
        _source: &str,
        _target: &str,
        _user_id: &str,
    ) -> Result<Option<ThreadInfo>> {
        match *self {}
    }

    async fn delete_checkpoints_for_runs(
        &self,
        _tenant: &Tenant,
        _run_ids: Vec<String>,
    ) -> Result<u64> {
        match *self {}
    }

    async fn prune_checkpoints(
        &self,
        _tenant: &Tenant,
        _thread_ids: Vec<String>,
        _strategy: PruneStrategy,
    ) -> Result<u64> {
        match *self {}
    }
}
