//! The opened backend as one store type: every command, the server and the engine are
//! compiled once, for [`OpenedStore`], instead of once per backend (which was most of a
//! release build's time: each copy of the server is several MB of machine code). Each call
//! is one `match` on the backend, next to a database round trip or a queued write.
//!
//! The calls are listed per domain below, as the domains' traits declare them. A method
//! added to a trait without a default and not listed here is a compile error ("not all trait
//! items implemented"); one with a default must be listed too, or the default would run
//! instead of the backend's own.

use std::sync::Arc;
use std::time::Duration;

use stepwise_core::{
    Event, Execution, Id, Message, Session, SessionDocument, Snapshot, Step, Timestamp,
};
use stepwise_store::prelude::*;
use stepwise_store::{
    AccessRole, Ack, ApiKeyRecord, CheckpointPut, CheckpointQuery, CheckpointRecord, Claim,
    ClaimFilter, CleanupReport, Loaded, MessageQuery, MessagesAfter, NewCheckpoint, NewEvent,
    NewExecution, NewMessage, NewSession, NewSnapshot, NewStep, Page, PageRequest, PruneStrategy,
    PutWrites, Result, RetentionLock, RetentionOverride, RetentionPolicy, SessionCache,
    SessionFilter, SessionPatch, SigningKey, StatusCounts, StepAppend, StepMirror, StepsAfter,
    StoreStats, Tenant, TenantScope, ThreadInfo, Transition, WorkerSeen,
};
use tokio::sync::broadcast;

use super::OpenedStore;

/// Implements a domain's trait for [`OpenedStore`]: each listed method calls the backend's
/// own. `without files: EXPR` answers EXPR on the files backend, which does not implement
/// the domain; `extra { ... }` holds the domain's methods that are not `async`.
macro_rules! dispatch {
    (
        $domain:ident;
        $(fn $method:ident($($arg:ident: $ty:ty),*) -> $out:ty;)*
        $(extra { $($extra:item)* })?
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
            $($($extra)*)?
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

    fn backend_name(&self) -> &'static str {
        match self {
            OpenedStore::Sqlite(store) => store.backend_name(),
            OpenedStore::Postgres(store) => store.backend_name(),
            OpenedStore::Files(store) => store.backend_name(),
        }
    }
}

dispatch! {
    SessionStore;
    fn create_session(tenant: &Tenant, new: NewSession) -> Result<Session>;
    fn get_session(tenant: &Tenant, id: Id) -> Result<Option<Session>>;
    fn find_session_by_name(tenant: &Tenant, name: &str) -> Result<Option<Session>>;
    fn list_sessions(tenant: &Tenant, filter: SessionFilter, page: PageRequest) -> Result<Page<Session>>;
    fn update_session(tenant: &Tenant, id: Id, patch: SessionPatch) -> Result<Option<Session>>;
    fn delete_session(tenant: &Tenant, id: Id) -> Result<bool>;
    fn import_document(tenant: &Tenant, user_id: &str, doc: SessionDocument) -> Result<Session>;
}

dispatch! {
    MessageStore;
    fn append_message(tenant: &Tenant, new: NewMessage) -> Result<Message>;
    fn list_messages(tenant: &Tenant, session_id: Id, query: MessageQuery) -> Result<Vec<Message>>;
    fn list_session_messages_after(tenant: &Tenant, session_id: Id, after: i64) -> Result<MessagesAfter>;
}

dispatch! {
    ExecutionStore;
    fn create_execution(tenant: &Tenant, new: NewExecution) -> Result<Execution>;
    fn create_execution_with_messages(tenant: &Tenant, new: NewExecution, messages: Vec<NewMessage>, events: Vec<NewEvent>) -> Result<(Execution, Vec<Message>)>;
    fn get_execution(tenant: &Tenant, id: Id) -> Result<Option<Execution>>;
    fn list_executions(tenant: &Tenant, session_id: Id) -> Result<Vec<Execution>>;
    fn transition_execution(tenant: &Tenant, id: Id, transition: Transition) -> Result<Execution>;
    fn remove_executions(tenant: &Tenant, session_id: Id, ids: Vec<Id>) -> Result<u64>;
}

dispatch! {
    QueueStore;
    fn claim_matching(filter: &ClaimFilter, workers: &[String], lease: Duration, max_attempts: u32) -> Result<Vec<Claim>>;
    fn renew_leases(worker: &str, ids: Vec<Id>, lease: Duration) -> Result<Vec<Id>>;
    fn release(worker: &str, id: Id) -> Result<()>;
    fn requeue(worker: &str, id: Id) -> Result<()>;
    fn queue_depth() -> Result<u64>;
    fn queue_signal() -> ();
}

dispatch! {
    WorkerStore;
    fn record_worker(tenant: &Tenant, worker: WorkerSeen) -> Result<()>;
    fn worker_offline(tenant: &Tenant, worker_id: &str, at: Timestamp) -> Result<bool>;
    fn list_workers(tenant: &Tenant, since: Timestamp) -> Result<Vec<WorkerSeen>>;
}

dispatch! {
    StepStore;
    fn append_step(tenant: &Tenant, new: NewStep) -> Result<Ack<StepAppend>>;
    fn append_step_mirrored(tenant: &Tenant, new: NewStep, mirror: StepMirror) -> Result<Ack<StepAppend>>;
    fn list_steps(tenant: &Tenant, execution_id: Id) -> Result<Loaded<Step>>;
    fn list_session_steps(tenant: &Tenant, session_id: Id) -> Result<Loaded<Step>>;
    fn list_session_steps_after(tenant: &Tenant, session_id: Id, after: i64) -> Result<StepsAfter>;
}

dispatch! {
    SnapshotStore;
    fn save_snapshot(tenant: &Tenant, new: NewSnapshot) -> Result<Ack<Snapshot>>;
    fn list_snapshots(tenant: &Tenant, execution_id: Id) -> Result<Vec<Snapshot>>;
    fn get_snapshot(tenant: &Tenant, id: Id) -> Result<Option<Snapshot>>;
}

dispatch! {
    EventStore;
    fn append_event(tenant: &Tenant, new: NewEvent) -> Result<Ack<Event>>;
    fn list_events(tenant: &Tenant, session_id: Id, after: i64, limit: u32) -> Result<Vec<Event>>;
    extra {
        fn subscribe(&self, tenant: &Tenant, session_id: Id) -> broadcast::Receiver<Arc<Event>> {
            match self {
                OpenedStore::Sqlite(store) => store.subscribe(tenant, session_id),
                OpenedStore::Postgres(store) => store.subscribe(tenant, session_id),
                OpenedStore::Files(store) => store.subscribe(tenant, session_id),
            }
        }

        fn publish_live(&self, tenant: &Tenant, event: Event) {
            match self {
                OpenedStore::Sqlite(store) => store.publish_live(tenant, event),
                OpenedStore::Postgres(store) => store.publish_live(tenant, event),
                OpenedStore::Files(store) => store.publish_live(tenant, event),
            }
        }
    }
}

dispatch! {
    RetentionStore;
    fn mark_abandoned(cutoff: Timestamp, dry: bool, scope: TenantScope) -> Result<u64>;
    fn cleanup_old_sessions(now: Timestamp, policy: RetentionPolicy, dry: bool, scope: TenantScope) -> Result<CleanupReport>;
    fn tenant_retentions() -> Result<Vec<(String, RetentionOverride)>>;
    fn set_tenant_retention(tenant: &Tenant, retention: Option<RetentionOverride>) -> Result<()>;
    fn try_retention_lock() -> Result<Option<RetentionLock>>;
}

dispatch! {
    KeyStore;
    fn create_api_key(tenant: &Tenant, user_id: &str, role: AccessRole, name: Option<String>, key_hash: &str) -> Result<ApiKeyRecord>;
    fn find_api_key(key_hash: &str) -> Result<Option<ApiKeyRecord>>;
    fn list_api_keys() -> Result<Vec<ApiKeyRecord>>;
    fn revoke_api_key(id: Id) -> Result<bool>;
    fn count_active_api_keys() -> Result<u64>;
    fn list_signing_keys() -> Result<Vec<SigningKey>>;
    fn add_signing_key(secret: &str) -> Result<SigningKey>;
}

dispatch! {
    OperationsStore;
    fn flush() -> Result<()>;
    fn ping() -> Result<()>;
    fn stats() -> Result<StoreStats>;
    fn count_by_status() -> Result<StatusCounts>;
}

dispatch! {
    CheckpointStore, without files: Err(stepwise_store::checkpoints::unsupported());
    fn put_checkpoint(tenant: &Tenant, new: NewCheckpoint) -> Result<CheckpointPut>;
    fn put_checkpoint_writes(tenant: &Tenant, writes: PutWrites) -> Result<Id>;
    fn get_checkpoint_since(tenant: &Tenant, thread_id: &str, checkpoint_ns: &str, checkpoint_id: Option<&str>, have: &std::collections::BTreeMap<String, String>) -> Result<Option<CheckpointRecord>>;
    fn list_checkpoints(tenant: &Tenant, query: CheckpointQuery) -> Result<Page<CheckpointRecord>>;
    fn get_thread(tenant: &Tenant, thread_id: &str) -> Result<Option<ThreadInfo>>;
    fn export_thread(tenant: &Tenant, session_id: Id) -> Result<Option<stepwise_core::document::DocumentThread>>;
    fn delete_thread(tenant: &Tenant, thread_id: &str) -> Result<bool>;
    fn copy_thread(tenant: &Tenant, source: &str, target: &str, user_id: &str) -> Result<Option<ThreadInfo>>;
    fn delete_checkpoints_for_runs(tenant: &Tenant, run_ids: Vec<String>) -> Result<u64>;
    fn prune_checkpoints(tenant: &Tenant, thread_ids: Vec<String>, strategy: PruneStrategy) -> Result<u64>;
}
