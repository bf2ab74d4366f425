//! The storage API of Stepwise. Every backend (SQLite, PostgreSQL, JSON files) implements
//! [`Store`] and passes the conformance suite in `stepwise-store-tests`.
//!
//! Rules every backend keeps:
//! - every call takes the [`Tenant`]; no call reads or writes another tenant's rows, and
//!   another tenant's id behaves exactly like an id that does not exist;
//! - not-found is `Ok(None)`, never an error;
//! - steps, events and snapshots go through the save path: the call queues the write and
//!   returns an [`Ack`] at once (waiting only while the bounded queue is full); the `Ack`
//!   resolves once the write is durable, and dropping it is fire-and-forget;
//! - an event reaches [`EventStore::subscribe`]rs only after it is committed, so a live stream
//!   and a replay from the store agree;
//! - stored records that cannot be decoded are skipped and counted, never a panic.
//!
//! The rules that do not depend on how rows are stored (what a patch changes, retention
//! cutoffs, lease expiry, name checks, the import plan) live once in [`rules`]; a backend
//! keeps only its I/O.
//!
//! The API is split by domain ([`domains`]: sessions, messages, executions, the queue,
//! steps, snapshots, events, retention, checkpoints, keys, operations); [`Store`] is all of
//! them together. Adding a method: add it to its domain's trait, and the compiler lists
//! every backend that needs it; then add a case to the conformance suite.

mod ack;
pub mod cache;
mod cached_read;
pub mod checkpoints;
pub mod domains;
mod error;
mod hub;
pub mod langgraph_store;
mod layer;
mod mirror;
mod records;
mod rekey;
mod restore;
pub mod rules;
pub mod separately;
mod types;

pub use ack::{Ack, AckSender};
pub use cache::{
    Cached, CachedMessages, CachedSteps, DEFAULT_SESSION_CACHE_BYTES, MessageOrder, MessagesAfter,
    Part, Positioned, PositionedMessage, PositionedStep, RowOrder, RowsAfter, START_POSITION,
    SessionCache, SessionCacheStats, StepOrder, StepsAfter,
};
pub use checkpoints::{
    BlobBody, CheckpointPut, CheckpointQuery, CheckpointRecord, NewBlob, NewCheckpoint, NewWrite,
    PruneStrategy, PutWrites, ResolvedBlob, ThreadInfo, TypedValue, WriteRecord,
};
pub use domains::{
    CheckpointStore, CheckpointStoreExt, EventStore, ExecutionStore, KeyStore, MessageStore,
    NoCheckpoints, OperationsStore, QueueStore, QueueStoreExt, RetentionStore, SessionStore,
    SnapshotStore, StepStore, WorkerStore,
};
pub use domains::{LangGraphStore, PassLangGraphStore};
pub use domains::{
    PassEvents, PassExecutions, PassKeys, PassMessages, PassOperations, PassQueue, PassRetention,
    PassSessions, PassSnapshots, PassSteps, PassWorkers,
};
pub use error::{Result, StoreError};
pub use hub::{EventHub, SUBSCRIBER_BUFFER};
pub use langgraph_store::{NamespaceQuery, StoreItem, StoreItemPut, StoreItemSearch};
pub use layer::Layer;
pub use mirror::{NOTE_KEYS, StepMirror, message_created};
pub use rekey::rekey_document;
pub use restore::{export_session, list_session_messages, restore_memory, session_with_memory};
pub use types::*;

/// A whole backend: every domain's store, with what the backend can do besides.
///
/// Each domain is its own trait (in [`domains`]), implemented in the backend's file for
/// that domain; a wrapper (the server's metering) implements the domains it changes and
/// passes the others through. LangGraph checkpoints are a capability, not a domain every
/// backend has: [`Store::checkpoints`] is `None` on a backend that keeps none.
pub trait Store:
    SessionStore
    + MessageStore
    + ExecutionStore
    + QueueStore
    + WorkerStore
    + StepStore
    + SnapshotStore
    + EventStore
    + RetentionStore
    + KeyStore
    + LangGraphStore
    + OperationsStore
    + Clone
    + 'static
{
    /// The backend's checkpoint store ([`NoCheckpoints`] on one that keeps none).
    type Checkpoints: CheckpointStore;

    /// The checkpoint store, where this backend keeps LangGraph checkpoints.
    fn checkpoints(&self) -> Option<&Self::Checkpoints>;

    /// The hot-session cache [`restore_memory`] and [`list_session_messages`] use, if the
    /// backend keeps one.
    fn session_cache(&self) -> Option<&SessionCache> {
        None
    }

    /// Writes queued in this process and not yet committed (the save queue's depth: what
    /// the running executions' writes wait behind). 0 on a backend that queues none.
    fn write_backlog(&self) -> u64 {
        0
    }

    /// Whether [`Store::queue_ending`] writes a run's end in one commit, after every write
    /// this process queued before it (one writer taking its queue in order), so that the
    /// caller need not await those writes first. `false` by default: the caller awaits its
    /// own writes' acks, then writes the end ([`ExecutionStore::transition_execution`]).
    fn orders_transitions(&self) -> bool {
        false
    }

    /// Queues the end of a run: its answer (and the answer's `message.created` event), its
    /// snapshot, the move of the execution `id` and the execution's event. The [`Ack`]
    /// resolves with the moved execution once all of it is durable.
    ///
    /// Where [`Store::orders_transitions`] holds it is one write, committed after every
    /// write queued before it: a move the lifecycle refuses (`InvalidState`, `NotFound`)
    /// writes nothing, and a refused answer or snapshot (its session or parent gone) is
    /// logged and left out. The default keeps the order the slow way: it waits for every
    /// queued write ([`OperationsStore::flush`]), writes the answer and the snapshot, then
    /// the move, then the event (a refused move then leaves the answer and snapshot).
    fn queue_ending(
        &self,
        tenant: &Tenant,
        id: stepwise_core::Id,
        ending: Ending,
    ) -> impl std::future::Future<Output = Result<Ack<stepwise_core::Execution>>> + Send {
        async move {
            self.flush().await?;
            if let Some(answer) = ending.answer {
                match self.append_message(tenant, answer).await {
                    Ok(message) => {
                        if let Err(e) =
                            durable(self.append_event(tenant, message_created(&message)).await)
                                .await
                        {
                            tracing::warn!(execution = %id, error = %e, "could not store the answer's event");
                        }
                    }
                    Err(e) => {
                        tracing::warn!(execution = %id, error = %e, "could not store the answer")
                    }
                }
            }
            if let Some(snapshot) = ending.snapshot
                && let Err(e) = durable(self.save_snapshot(tenant, snapshot).await).await
            {
                tracing::warn!(execution = %id, error = %e, "could not save a snapshot");
            }
            let moved = self
                .transition_execution(tenant, id, ending.transition)
                .await?;
            if let Some(event) = ending.event
                && let Err(e) = durable(self.append_event(tenant, event).await).await
            {
                tracing::warn!(execution = %id, error = %e, "could not store the execution's event");
            }
            Ok(Ack::ready(Ok(moved)))
        }
    }

    fn backend_name(&self) -> &'static str;
}

/// A queued write's result once durable: the call's refusal or the ack's.
async fn durable<T: Send + 'static>(queued: Result<Ack<T>>) -> Result<T> {
    queued?.await
}

/// Every domain trait, for code that calls store methods on a concrete backend:
/// `use stepwise_store::prelude::*;`.
pub mod prelude {
    pub use crate::{
        CheckpointStore, CheckpointStoreExt, EventStore, ExecutionStore, KeyStore, LangGraphStore,
        MessageStore, OperationsStore, QueueStore, QueueStoreExt, RetentionStore, SessionStore,
        SnapshotStore, StepStore, Store, WorkerStore,
    };
}
