//! LangGraph checkpoints (see [`crate::checkpoints`] for the types). Only backends
//! that can store them implement it; [`crate::Store::checkpoints`] says whether one does.

use std::future::Future;

use stepwise_core::Id;

use crate::{
    CheckpointPut, CheckpointQuery, CheckpointRecord, NewCheckpoint, Page, PruneStrategy,
    PutWrites, Result, Tenant, ThreadInfo,
};

crate::domain! {
    $
    pub trait CheckpointStore, methods checkpoint_store_methods {
        /// Stores a checkpoint and its blobs in one transaction, with its `checkpoint.created`
        /// event when the put [announces](NewCheckpoint::announce) it
        /// ([`checkpoint_created`](crate::checkpoints::checkpoint_created), published to the
        /// session's subscribers after the commit), creating the thread (a session named after
        /// it when that name is valid and free) on the first put. The same checkpoint again
        /// writes nothing (`created: false`, no event); a blob already stored is kept.
        fn put_checkpoint(&self, tenant: &Tenant, new: NewCheckpoint) -> Result<CheckpointPut>;

        /// Stores pending writes (creating the thread if needed): `idx < 0` replaces the row at
        /// the same `(task_id, idx)`, `idx >= 0` keeps an existing one. Returns the session.
        fn put_checkpoint_writes(&self, tenant: &Tenant, writes: PutWrites) -> Result<Id>;

        /// One checkpoint (the latest of the namespace when `checkpoint_id` is `None`), for a
        /// reader that already holds some values: for a channel
        /// in `have` (channel -> version) whose append chain reaches that version, the value is
        /// [`ResolvedBlob::Since`](crate::ResolvedBlob::Since), only the items appended after it.
        fn get_checkpoint_since(&self, tenant: &Tenant, thread_id: &str, checkpoint_ns: &str, checkpoint_id: Option<&str>, have: &std::collections::BTreeMap<String, String>) -> Result<Option<CheckpointRecord>>;

        /// Checkpoints newest first (`checkpoint_id` descending), keyset-paginated.
        fn list_checkpoints(&self, tenant: &Tenant, query: CheckpointQuery) -> Result<Page<CheckpointRecord>>;

        fn get_thread(&self, tenant: &Tenant, thread_id: &str) -> Result<Option<ThreadInfo>>;

        /// The LangGraph thread a session is, with every checkpoint, blob and write row as
        /// stored (writes in the order they were written), for the session's export document.
        /// `None` when the session is no thread (and on a backend that keeps no checkpoints).
        fn export_thread(&self, tenant: &Tenant, session_id: Id) -> Result<Option<stepwise_core::document::DocumentThread>>;

        /// Hard delete: the thread's checkpoints, blobs and writes, and its session with every
        /// row. `false` when there is no such thread.
        fn delete_thread(&self, tenant: &Tenant, thread_id: &str) -> Result<bool>;

        /// Copies every checkpoint, blob and write of `source` to `target` (created like a put
        /// creates a thread). `None` when there is no source; `Conflict` when the target
        /// already has checkpoints.
        fn copy_thread(&self, tenant: &Tenant, source: &str, target: &str, user_id: &str) -> Result<Option<ThreadInfo>>;

        /// Deletes the checkpoints whose metadata `run_id` is listed, with their writes (their
        /// blobs stay: a later checkpoint may build on them). Returns how many checkpoints went.
        fn delete_checkpoints_for_runs(&self, tenant: &Tenant, run_ids: Vec<String>) -> Result<u64>;

        /// Prunes the threads' checkpoints; returns how many checkpoints went.
        fn prune_checkpoints(&self, tenant: &Tenant, thread_ids: Vec<String>, strategy: PruneStrategy) -> Result<u64>;
    }
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

/// Implements a domain for a type with no values: no method can be called.
macro_rules! uninhabited {
    ($Trait:ident for $Never:ident; $(fn $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty;)*) => {
        impl $Trait for $Never {
            $(
                #[allow(unused_variables)]
                async fn $name(&self, $($arg: $ty),*) -> $ret {
                    match *self {}
                }
            )*
        }
    };
}
checkpoint_store_methods!(uninhabited for NoCheckpoints);
