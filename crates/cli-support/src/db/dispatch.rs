//! The opened backend as one store type: every command, the server and the engine are
//! compiled once, for [`OpenedStore`], instead of once per backend (which was most of a
//! release build's time: each copy of the server is several MB of machine code). Each call
//! is one `match` on the backend, next to a database round trip or a queued write.
//!
//! The calls are generated per domain from the domain's declaration (`stepwise_store::domain!`
//! hands its list of methods to `dispatch!`): a method added to a domain is dispatched with
//! nothing written here.

use std::sync::Arc;
use std::time::Duration;

use stepwise_core::{
    Event, Execution, Id, Message, Session, SessionDocument, Snapshot, Step, Timestamp,
};
use stepwise_store::prelude::*;
use stepwise_store::{
    AccessRole, Ack, ApiKeyRecord, CheckpointPut, CheckpointQuery, CheckpointRecord, Claim,
    ClaimFilter, CleanupReport, IfBusy, Loaded, MessageQuery, MessagesAfter, NewCheckpoint,
    NewEvent, NewExecution, NewMessage, NewSession, NewSnapshot, NewStep, Page, PageRequest,
    PruneStrategy, PutWrites, Result, RetentionLock, RetentionOverride, RetentionPolicy,
    SessionCache, SessionFilter, SessionPatch, SigningKey, StatusCounts, StepAppend, StepMirror,
    StepsAfter, StoreStats, Tenant, TenantScope, ThreadInfo, Transition, WorkerSeen,
};
use stepwise_store::{NamespaceQuery, StoreItem, StoreItemPut, StoreItemSearch};
use tokio::sync::broadcast;

use super::OpenedStore;

/// Implements a domain's trait for [`OpenedStore`]: each method calls the backend's own.
/// `without files: EXPR` answers EXPR on the files backend, which does not implement the
/// domain; `sync { ... }` lists the domain's methods that are not `async`.
macro_rules! dispatch {
    (
        $domain:ident;
        $(fn $method:ident($($arg:ident: $ty:ty),*) -> $out:ty;)*
        $(sync { $(fn $sync_method:ident($($sync_arg:ident: $sync_ty:ty),*) $(-> $sync_out:ty)?;)* })?
    ) => {
        impl $domain for OpenedStore {
            $(
                async fn $method(&self, $($arg: $ty),*) -> $out {
                    match self {
                        OpenedStore::Sqlite(store) => store.$method($($arg),*).await,
                        OpenedStore::Postgres(store) => store.$method($($arg),*).await,
                        OpenedStore::Files(store) => store.$method($($arg),*).await,
                    }
                }
            )*
            $($(
                fn $sync_method(&self, $($sync_arg: $sync_ty),*) $(-> $sync_out)? {
                    match self {
                        OpenedStore::Sqlite(store) => store.$sync_method($($sync_arg),*),
                        OpenedStore::Postgres(store) => store.$sync_method($($sync_arg),*),
                        OpenedStore::Files(store) => store.$sync_method($($sync_arg),*),
                    }
                }
            )*)?
        }
    };
    (
        $domain:ident, without files: $fallback:expr;
        $(fn $method:ident($($arg:ident: $ty:ty),*) -> $out:ty;)*
    ) => {
        impl $domain for OpenedStore {
            $(
                async fn $method(&self, $($arg: $ty),*) -> $out {
                    match self {
                        OpenedStore::Sqlite(store) => store.$method($($arg),*).await,
                        OpenedStore::Postgres(store) => store.$method($($arg),*).await,
                        OpenedStore::Files(_) => {
                            $(let _ = $arg;)*
                            $fallback
                        }
                    }
                }
            )*
        }
    };
}

impl Store for OpenedStore {
    type Checkpoints = Self;

    /// SQLite and PostgreSQL keep LangGraph checkpoints; session files do not.
    fn checkpoints(&self) -> Option<&Self> {
        match self {
            OpenedStore::Files(_) => None,
            OpenedStore::Sqlite(_) | OpenedStore::Postgres(_) => Some(self),
        }
    }

    fn session_cache(&self) -> Option<&SessionCache> {
        match self {
            OpenedStore::Sqlite(store) => store.session_cache(),
            OpenedStore::Postgres(store) => store.session_cache(),
            OpenedStore::Files(store) => store.session_cache(),
        }
    }

    fn write_backlog(&self) -> u64 {
        match self {
            OpenedStore::Sqlite(store) => store.write_backlog(),
            OpenedStore::Postgres(store) => store.write_backlog(),
            OpenedStore::Files(store) => store.write_backlog(),
        }
    }

    fn orders_transitions(&self) -> bool {
        match self {
            OpenedStore::Sqlite(store) => store.orders_transitions(),
            OpenedStore::Postgres(store) => store.orders_transitions(),
            OpenedStore::Files(store) => store.orders_transitions(),
        }
    }

    async fn queue_ending(
        &self,
        tenant: &Tenant,
        id: Id,
        ending: stepwise_store::Ending,
    ) -> Result<Ack<Execution>> {
        match self {
            OpenedStore::Sqlite(store) => store.queue_ending(tenant, id, ending).await,
            OpenedStore::Postgres(store) => store.queue_ending(tenant, id, ending).await,
            OpenedStore::Files(store) => store.queue_ending(tenant, id, ending).await,
        }
    }

    fn backend_name(&self) -> &'static str {
        match self {
            OpenedStore::Sqlite(store) => store.backend_name(),
            OpenedStore::Postgres(store) => store.backend_name(),
            OpenedStore::Files(store) => store.backend_name(),
        }
    }
}

// Every domain's methods, as its declaration lists them (`stepwise_store::domain!`).
stepwise_store::session_store_methods!(dispatch);
stepwise_store::message_store_methods!(dispatch);
stepwise_store::execution_store_methods!(dispatch);
stepwise_store::queue_store_methods!(dispatch);
stepwise_store::worker_store_methods!(dispatch);
stepwise_store::step_store_methods!(dispatch);
stepwise_store::snapshot_store_methods!(dispatch);
stepwise_store::event_store_methods!(dispatch);
stepwise_store::retention_store_methods!(dispatch);
stepwise_store::key_store_methods!(dispatch);
stepwise_store::operations_store_methods!(dispatch);
stepwise_store::checkpoint_store_methods!(dispatch, without files: Err(stepwise_store::checkpoints::unsupported()));
stepwise_store::langgraph_store_methods!(dispatch);
