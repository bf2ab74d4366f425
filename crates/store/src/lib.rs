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
//! - an event reaches [`Store::subscribe`]rs only after it is committed, so a live stream
//!   and a replay from the store agree;
//! - stored records that cannot be decoded are skipped and counted, never a panic.
//!
//! The rules that do not depend on how rows are stored (what a patch changes, retention
//! cutoffs, lease expiry, name checks, the import plan) live once in [`rules`]; a backend
//! keeps only its I/O.
//!
//! Adding a method: add it here, and the compiler lists every backend that needs it; then
//! add a case to the conformance suite.

mod ack;
pub mod cache;
mod cached_read;
pub mod checkpoints;
mod error;
mod hub;
mod mirror;
mod records;
mod rekey;
mod restore;
pub mod rules;
mod types;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use stepwise_core::{
    Event, Execution, Id, Message, Session, SessionDocument, Snapshot, Step, Timestamp,
};
use tokio::sync::broadcast;

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
pub use error::{Result, StoreError};
pub use hub::{EventHub, SUBSCRIBER_BUFFER};
pub use mirror::{NOTE_KEYS, StepMirror, message_created};
pub use rekey::rekey_document;
pub use restore::{export_session, list_session_messages, restore_memory};
pub use types::*;

pub trait Store: Clone + Send + Sync + 'static {
    // --- sessions -------------------------------------------------------------------

    /// Creates an `active` session. A name already used in the tenant is a conflict.
    fn create_session(
        &self,
        tenant: &Tenant,
        new: NewSession,
    ) -> impl Future<Output = Result<Session>> + Send;
    fn get_session(
        &self,
        tenant: &Tenant,
        id: Id,
    ) -> impl Future<Output = Result<Option<Session>>> + Send;
    fn find_session_by_name(
        &self,
        tenant: &Tenant,
        name: &str,
    ) -> impl Future<Output = Result<Option<Session>>> + Send;
    /// Newest `updated_at` first, keyset-paginated.
    fn list_sessions(
        &self,
        tenant: &Tenant,
        filter: SessionFilter,
        page: PageRequest,
    ) -> impl Future<Output = Result<Page<Session>>> + Send;
    fn update_session(
        &self,
        tenant: &Tenant,
        id: Id,
        patch: SessionPatch,
    ) -> impl Future<Output = Result<Option<Session>>> + Send;
    /// Soft delete: the status becomes `deleted`. `false` when there is no such session.
    fn delete_session(&self, tenant: &Tenant, id: Id) -> impl Future<Output = Result<bool>> + Send;

    // --- messages -------------------------------------------------------------------

    /// Appends a message and bumps the session's `message_count` and `updated_at`.
    fn append_message(
        &self,
        tenant: &Tenant,
        new: NewMessage,
    ) -> impl Future<Output = Result<Message>> + Send;
    /// Oldest first (server time in microseconds, id as tie-break).
    fn list_messages(
        &self,
        tenant: &Tenant,
        session_id: Id,
        query: MessageQuery,
    ) -> impl Future<Output = Result<Vec<Message>>> + Send;

    // --- executions -----------------------------------------------------------------

    fn create_execution(
        &self,
        tenant: &Tenant,
        new: NewExecution,
    ) -> impl Future<Output = Result<Execution>> + Send;
    /// Creates a top-level execution of a session together with messages for it (each
    /// message gets the execution's id; they are stamped in order), each message's
    /// `message.created` event ([`message_created`]) and then `events` (each gets the
    /// execution's id): what a user's message does when it queues a new execution. All or
    /// nothing where the backend can write it at once; the session's last execution and
    /// counters move with it, and the events are published once committed. `Invalid`
    /// without a session, with a parent, or with a message or event of another session;
    /// `NotFound` when the session does not exist for this tenant.
    ///
    /// The default is the execution, then the messages, then the events queued, as
    /// separate writes.
    fn create_execution_with_messages(
        &self,
        tenant: &Tenant,
        new: NewExecution,
        messages: Vec<NewMessage>,
        events: Vec<NewEvent>,
    ) -> impl Future<Output = Result<(Execution, Vec<Message>)>> + Send {
        async move {
            rules::check_execution_with_messages(&new, &messages, &events)?;
            let execution = self.create_execution(tenant, new).await?;
            // Appended at once, first polled in order: each is stamped when first polled,
            // so they keep their order.
            let stored = futures_util::future::try_join_all(
                messages
                    .into_iter()
                    .map(|m| self.append_message(tenant, m.for_execution(execution.id))),
            )
            .await?;
            let announced = stored.iter().map(message_created);
            let events = events.into_iter().map(|e| NewEvent {
                execution_id: Some(execution.id),
                ..e
            });
            for event in announced.chain(events).collect::<Vec<_>>() {
                // Queued, not awaited: events of one session stay in order (FIFO queue).
                if let Err(e) = self.append_event(tenant, event).await {
                    tracing::warn!(error = %e, "could not queue an event");
                }
            }
            Ok((execution, stored))
        }
    }
    fn get_execution(
        &self,
        tenant: &Tenant,
        id: Id,
    ) -> impl Future<Output = Result<Option<Execution>>> + Send;
    /// A session's executions (subagents' too), oldest first.
    fn list_executions(
        &self,
        tenant: &Tenant,
        session_id: Id,
    ) -> impl Future<Output = Result<Vec<Execution>>> + Send;
    /// Moves an execution to another status; a move the lifecycle does not allow is
    /// `InvalidState`, an unknown execution `NotFound`.
    fn transition_execution(
        &self,
        tenant: &Tenant,
        id: Id,
        transition: Transition,
    ) -> impl Future<Output = Result<Execution>> + Send;

    // --- the execution queue (all tenants: workers serve every tenant) ------------------

    /// Claims up to one execution for each of `workers` among those `filter` allows, in
    /// one transaction where the backend can: the `k`th claim's lease owner is
    /// `workers[k]`. A claim takes a `running` execution whose worker's lease expired
    /// first (attempts over `max_attempts` fail it instead), else the oldest `pending`
    /// top-level execution of a session with no other execution running (subagents are
    /// run inline by their parent's worker, never claimed). Fewer claims than workers
    /// means nothing else was runnable.
    fn claim_matching(
        &self,
        filter: &ClaimFilter,
        workers: &[String],
        lease: Duration,
        max_attempts: u32,
    ) -> impl Future<Output = Result<Vec<Claim>>> + Send;
    /// Claims the next runnable execution of any agent type and tenant (see
    /// [`Store::claim_matching`]); `None` when there is nothing to do.
    fn claim_next(
        &self,
        worker: &str,
        lease: Duration,
        max_attempts: u32,
    ) -> impl Future<Output = Result<Option<Claim>>> + Send {
        async move {
            let workers = [worker.to_string()];
            let mut claims = self
                .claim_matching(&ClaimFilter::any(), &workers, lease, max_attempts)
                .await?;
            Ok(claims.pop())
        }
    }
    /// Claims up to one execution of any agent type and tenant for each of `workers`
    /// (see [`Store::claim_matching`]).
    fn claim_batch(
        &self,
        workers: &[String],
        lease: Duration,
        max_attempts: u32,
    ) -> impl Future<Output = Result<Vec<Claim>>> + Send {
        async move {
            self.claim_matching(&ClaimFilter::any(), workers, lease, max_attempts)
                .await
        }
    }
    /// Extends the leases this worker holds on these executions; returns the ids it no
    /// longer holds (cancelled, finished, or taken over).
    fn renew_leases(
        &self,
        worker: &str,
        ids: Vec<Id>,
        lease: Duration,
    ) -> impl Future<Output = Result<Vec<Id>>> + Send;
    /// Gives a claimed execution back to the queue at once (graceful shutdown); the
    /// attempt it was claimed with does not count.
    fn release(&self, worker: &str, id: Id) -> impl Future<Output = Result<()>> + Send;
    /// Puts a claimed execution back in the queue to be tried again (its agent failed
    /// and asked for a retry); unlike [`Store::release`], the attempt counts.
    fn requeue(&self, worker: &str, id: Id) -> impl Future<Output = Result<()>> + Send;
    /// Executions waiting to run.
    fn queue_depth(&self) -> impl Future<Output = Result<u64>> + Send;
    /// Resolves when another process may have queued work for the workers (PostgreSQL:
    /// a `NOTIFY` on the queue channel). Stores without such a doorbell never resolve:
    /// their workers rely on the in-process doorbell and the fallback poll.
    fn queue_signal(&self) -> impl Future<Output = ()> + Send {
        std::future::pending()
    }

    /// Records that a worker process of this tenant called (a claim or a heartbeat):
    /// its agent types and the time. Workers not seen for a day are forgotten.
    fn record_worker(
        &self,
        tenant: &Tenant,
        worker: WorkerSeen,
    ) -> impl Future<Output = Result<()>> + Send;
    /// The tenant's workers seen at or after `since`, most recent first.
    fn list_workers(
        &self,
        tenant: &Tenant,
        since: Timestamp,
    ) -> impl Future<Output = Result<Vec<WorkerSeen>>> + Send;

    // --- steps ----------------------------------------------------------------------

    /// Queues a step. The same `(execution, step_number)` with the same body again
    /// resolves to the stored step with `created: false`; another body is a `Conflict`.
    /// Also advances the execution's `step_count` and `token_usage`.
    fn append_step(
        &self,
        tenant: &Tenant,
        new: NewStep,
    ) -> impl Future<Output = Result<Ack<StepAppend>>> + Send;
    /// [`Store::append_step`] with the step's readable side in the same write: when the
    /// step is new, `mirror`'s messages (each with its `message.created` event) and then its
    /// events are stored with it, in one transaction on backends that have them; when the
    /// same step was already there (`created: false`) or the append fails, none of the
    /// mirror is written. The mirror belongs to the step's session (else `Invalid`).
    ///
    /// The default is the step first, then the mirror as separate writes (a failing mirror
    /// write is logged, the step stays).
    fn append_step_mirrored(
        &self,
        tenant: &Tenant,
        new: NewStep,
        mirror: StepMirror,
    ) -> impl Future<Output = Result<Ack<StepAppend>>> + Send {
        async move {
            if !mirror.is_empty() {
                let execution = self.get_execution(tenant, new.execution_id).await?;
                let execution = execution.ok_or(StoreError::NotFound("execution"))?;
                mirror.check_session(execution.session_id)?;
            }
            let appended = self.append_step(tenant, new).await?.await?;
            if appended.created {
                mirror::write_separately(self, tenant, mirror).await;
            }
            Ok(Ack::ready(Ok(appended)))
        }
    }
    /// An execution's steps by step number.
    fn list_steps(
        &self,
        tenant: &Tenant,
        execution_id: Id,
    ) -> impl Future<Output = Result<Loaded<Step>>> + Send;
    /// A session's agent memory: the steps of its executions, in execution order.
    fn list_session_steps(
        &self,
        tenant: &Tenant,
        session_id: Id,
    ) -> impl Future<Output = Result<Loaded<Step>>> + Send;
    /// The session's step rows past `after` (a position from an earlier answer, or
    /// [`START_POSITION`]), with the number of rows the session has, read together: what
    /// the [`SessionCache`] asks on each restore. The default reads the whole session
    /// (every row counts as new); backends with a cache answer with an indexed query.
    fn list_session_steps_after(
        &self,
        tenant: &Tenant,
        session_id: Id,
        after: i64,
    ) -> impl Future<Output = Result<StepsAfter>> + Send {
        let _ = after;
        async move {
            let loaded = self.list_session_steps(tenant, session_id).await?;
            Ok(cache::whole_session(loaded))
        }
    }
    /// The session's message rows past `after` (a position from an earlier answer, or
    /// [`START_POSITION`]), with the number of messages the session has, read together:
    /// what the [`SessionCache`] asks on each [`list_session_messages`]. The default reads
    /// all the session's messages (every row counts as new).
    fn list_session_messages_after(
        &self,
        tenant: &Tenant,
        session_id: Id,
        after: i64,
    ) -> impl Future<Output = Result<MessagesAfter>> + Send {
        let _ = after;
        async move {
            let messages = self
                .list_messages(tenant, session_id, MessageQuery::default())
                .await?;
            Ok(cache::whole_messages(messages))
        }
    }
    /// The hot-session cache [`restore_memory`] and [`list_session_messages`] use, if the
    /// backend keeps one.
    fn session_cache(&self) -> Option<&SessionCache> {
        None
    }

    // --- snapshots ------------------------------------------------------------------

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

    // --- events ---------------------------------------------------------------------

    /// Queues an event; its id (strictly increasing per session, from 1) is assigned when
    /// it commits, and subscribers get it then.
    fn append_event(
        &self,
        tenant: &Tenant,
        new: NewEvent,
    ) -> impl Future<Output = Result<Ack<Event>>> + Send;
    /// Stored events with id greater than `after`, in order, at most `limit`.
    fn list_events(
        &self,
        tenant: &Tenant,
        session_id: Id,
        after: i64,
        limit: u32,
    ) -> impl Future<Output = Result<Vec<Event>>> + Send;
    /// Live events of a session from now on. Subscribe first, then replay from the store,
    /// then skip live events already replayed: that is gap-free and duplicate-free.
    fn subscribe(&self, tenant: &Tenant, session_id: Id) -> broadcast::Receiver<Arc<Event>>;
    /// A live-only event (`message.delta`): sent to subscribers, never stored.
    fn publish_live(&self, tenant: &Tenant, event: Event);

    // --- documents ------------------------------------------------------------------

    /// Writes a whole session document in one transaction, with fresh ids throughout
    /// (references inside the document are rewritten). All or nothing.
    fn import_document(
        &self,
        tenant: &Tenant,
        user_id: &str,
        doc: SessionDocument,
    ) -> impl Future<Output = Result<Session>> + Send;

    // --- retention (all tenants: the cleaner is the one cross-tenant writer) ------------

    /// Marks `active` sessions not updated since `cutoff` as `abandoned` and cancels their
    /// paused executions. Returns how many sessions were marked (or would be, when `dry`).
    fn mark_abandoned(
        &self,
        cutoff: Timestamp,
        dry: bool,
    ) -> impl Future<Output = Result<u64>> + Send;
    /// Deletes sessions past retention with every child row, in small batches.
    fn cleanup_old_sessions(
        &self,
        now: Timestamp,
        policy: RetentionPolicy,
        dry: bool,
    ) -> impl Future<Output = Result<CleanupReport>> + Send;

    /// Tries to become the one process running a retention pass: `None` when another
    /// node holds the lock (that node's pass covers every tenant; skip this one). Hold
    /// the returned lock for the whole pass.
    fn try_retention_lock(&self) -> impl Future<Output = Result<Option<RetentionLock>>> + Send;

    // --- LangGraph checkpoints (see [`checkpoints`]) -------------------------------------

    /// Stores a checkpoint and its blobs in one transaction, creating the thread (a session
    /// named after it when that name is valid and free) on the first put. The same
    /// checkpoint again writes nothing (`created: false`); a blob already stored is kept.
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
    /// [`Store::get_checkpoint`] for a reader that already holds some values: for a channel
    /// in `have` (channel -> version) whose append chain reaches that version, the value is
    /// [`ResolvedBlob::Since`], only the items appended after it.
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

    // --- API keys -------------------------------------------------------------------

    fn create_api_key(
        &self,
        tenant: &Tenant,
        user_id: &str,
        name: Option<String>,
        key_hash: &str,
    ) -> impl Future<Output = Result<ApiKeyRecord>> + Send;
    /// The active (not revoked) key with this hash.
    fn find_api_key(
        &self,
        key_hash: &str,
    ) -> impl Future<Output = Result<Option<ApiKeyRecord>>> + Send;
    fn list_api_keys(&self) -> impl Future<Output = Result<Vec<ApiKeyRecord>>> + Send;
    /// `false` when there is no such key.
    fn revoke_api_key(&self, id: Id) -> impl Future<Output = Result<bool>> + Send;
    fn count_active_api_keys(&self) -> impl Future<Output = Result<u64>> + Send;

    // --- operations -----------------------------------------------------------------

    /// Waits until everything queued before this call is durable.
    fn flush(&self) -> impl Future<Output = Result<()>> + Send;
    /// Whether the database answers (for `/readyz`).
    fn ping(&self) -> impl Future<Output = Result<()>> + Send;
    fn stats(&self) -> impl Future<Output = Result<StoreStats>> + Send;
    /// Sessions and executions by status over every tenant (a cheap grouped count).
    fn count_by_status(&self) -> impl Future<Output = Result<StatusCounts>> + Send;
    fn backend_name(&self) -> &'static str;
}
