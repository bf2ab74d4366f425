//! The JSON files backend (seed 004): human-readable sessions in a folder, one
//! `<name>.json` session document per session and an `index.json` listing them, for a
//! single process.
//!
//! Everything lives in memory behind one lock and is written through: each call changes
//! the state and marks the files it touched; a writer thread rewrites marked files
//! atomically (temporary file, fsync, rename, fsync of the folder), many changes to one
//! session in one rewrite, and resolves the calls' [`Ack`]s once the files are durable. A
//! crash leaves every file either as it was or as it became, never torn. At open, files
//! that cannot be read are reported and skipped, and `index.json` is rebuilt from the
//! session files if it disagrees with them (it may lag one batch behind after a crash).
//!
//! One process at a time: the folder is locked while a store has it open.
//!
//! This file holds the store type, opening, reloading and the write-through plumbing; the
//! [`Store`] methods are one-line calls into a file per domain (the domains of the
//! conformance suite), which apply the rules from [`stepwise_store::rules`] to the state.

mod disk;
mod events;
mod executions;
mod import;
mod keys;
mod load;
mod messages;
mod operations;
mod retention;
mod sessions;
mod snapshots;
mod state;
mod steps;
mod writer;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::Value;
use stepwise_core::{
    Event, Execution, Id, Message, Session, SessionDocument, SharedClock, Snapshot, Step,
    Timestamp, system_clock,
};
use stepwise_store::{
    Ack, ApiKeyRecord, Claim, ClaimFilter, CleanupReport, EventHub, Loaded, MessageQuery, NewEvent,
    NewExecution, NewMessage, NewSession, NewSnapshot, NewStep, Page, PageRequest, Result,
    RetentionLock, RetentionPolicy, SessionFilter, SessionPatch, StatusCounts, StepAppend, Store,
    StoreError, StoreStats, Tenant, Transition, WorkerSeen,
};
use tokio::sync::broadcast;

pub use disk::{
    FileEvent, INDEX_FILE, IndexEntry, IndexFile, LOCAL_TENANT, METADATA_FILE, Runtime,
    TENANTS_DIR, tenant_dir,
};
pub use load::{OpenReport, SkippedFile};

use crate::state::{State, TenantState};

#[derive(Clone)]
pub struct FileOptions {
    /// Server time (injected in tests).
    pub clock: SharedClock,
}

impl Default for FileOptions {
    fn default() -> Self {
        FileOptions {
            clock: system_clock(),
        }
    }
}

/// A handle to one folder of session files; cheap to clone. The writer stops, after
/// writing everything pending, when the last handle is dropped (or at [`FileStore::close`]).
#[derive(Clone)]
pub struct FileStore {
    inner: Arc<Inner>,
}

struct Inner {
    shared: Arc<Shared>,
    writer: Mutex<Option<JoinHandle<()>>>,
    report: OpenReport,
}

pub(crate) struct Shared {
    root: PathBuf,
    state: Mutex<State>,
    wake: Condvar,
    hub: EventHub,
    clock: SharedClock,
    decode_errors: AtomicU64,
    save_errors: AtomicU64,
    /// False from a write that failed because the disk is full until one succeeds.
    writable: std::sync::atomic::AtomicBool,
    /// Another tenant's subscriptions listen here: it never sends.
    nowhere: broadcast::Sender<Arc<Event>>,
    /// Worker processes seen (kept in memory: they are gone with the process anyway).
    workers: Mutex<std::collections::HashMap<(String, String), WorkerSeen>>,
    /// Holds the folder's lock for as long as the store is open.
    _lock: File,
}

impl Shared {
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        // Every change to the state is completed before the lock is released, so a
        // panic elsewhere cannot leave it half-changed.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.wake.notify_all();
        let handle = self.writer.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(handle) = handle {
            let _ = handle.join();
        }
    }
}

impl FileStore {
    pub fn open(dir: &Path) -> Result<FileStore> {
        Self::open_with(dir, FileOptions::default())
    }

    /// Opens (creating if needed) the folder `dir`. Files that cannot be read are logged,
    /// counted and skipped (see [`FileStore::open_report`]); the others load.
    pub fn open_with(dir: &Path, options: FileOptions) -> Result<FileStore> {
        let unavailable = |what: &str, e: std::io::Error| {
            StoreError::Unavailable(format!("{what} {}: {e}", dir.display()))
        };
        std::fs::create_dir_all(dir).map_err(|e| unavailable("cannot create", e))?;
        let lock = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join(disk::LOCK_FILE))
            .map_err(|e| unavailable("cannot open the lock file in", e))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(StoreError::Unavailable(format!(
                    "{} is in use by another Stepwise process (the files backend serves one process at a time)",
                    dir.display()
                )));
            }
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(unavailable("cannot lock", e));
            }
        }
        let (mut state, report) = load::load(dir).map_err(|e| unavailable("cannot read", e))?;
        // Repairs found at open (a rebuilt index, a file renamed by hand) are written now.
        writer::write_now(&mut state).map_err(|e| unavailable("cannot write to", e))?;
        let skipped = report.skipped.len() as u64 + report.damaged_records;
        if !report.skipped.is_empty() {
            tracing::warn!(
                folder = %dir.display(),
                skipped = report.skipped.len(),
                "some session files could not be read and were skipped"
            );
        }
        let shared = Arc::new(Shared {
            root: dir.to_path_buf(),
            state: Mutex::new(state),
            wake: Condvar::new(),
            hub: EventHub::new(),
            clock: options.clock,
            decode_errors: AtomicU64::new(skipped),
            save_errors: AtomicU64::new(0),
            writable: std::sync::atomic::AtomicBool::new(true),
            nowhere: broadcast::channel(1).0,
            workers: Mutex::default(),
            _lock: lock,
        });
        let thread_shared = shared.clone();
        let handle = std::thread::Builder::new()
            .name("stepwise-files-writer".into())
            .spawn(move || writer::run(thread_shared))
            .map_err(|e| StoreError::Backend(format!("cannot start the writer thread: {e}")))?;
        Ok(FileStore {
            inner: Arc::new(Inner {
                shared,
                writer: Mutex::new(Some(handle)),
                report,
            }),
        })
    }

    /// `~/.stepwise/sessions`, the folder used when none is named.
    pub fn default_dir() -> Option<PathBuf> {
        std::env::var_os("HOME")
            .filter(|h| !h.is_empty())
            .map(|home| PathBuf::from(home).join(".stepwise").join("sessions"))
    }

    pub fn dir(&self) -> &Path {
        &self.inner.shared.root
    }

    /// What opening the folder found: sessions loaded, files skipped and why.
    pub fn open_report(&self) -> &OpenReport {
        &self.inner.report
    }

    /// Writes everything pending, then drops this handle off the async workers; the
    /// writer stops (and the folder is unlocked) once the last handle is gone.
    pub async fn close(self) -> Result<()> {
        self.flush().await?;
        tokio::task::spawn_blocking(move || drop(self))
            .await
            .map_err(|e| StoreError::Backend(format!("closing the files store: {e}")))
    }

    /// Reads every file again, picking up edits made by hand while the store was open
    /// (after writing what is pending). Returns what the reading found.
    pub async fn reload(&self) -> Result<OpenReport> {
        loop {
            self.flush().await?;
            let shared = &self.inner.shared;
            let mut state = shared.lock();
            if !state.pending.is_empty() || state.in_flight {
                continue;
            }
            let (mut fresh, report) = load::load(&shared.root).map_err(|e| {
                StoreError::Unavailable(format!("cannot read {}: {e}", shared.root.display()))
            })?;
            fresh.pending = std::mem::take(&mut state.pending);
            *state = fresh;
            shared.decode_errors.fetch_add(
                report.skipped.len() as u64 + report.damaged_records,
                Ordering::Relaxed,
            );
            if !state.pending.is_empty() {
                shared.wake.notify_one();
            }
            return Ok(report);
        }
    }

    fn now(&self) -> Timestamp {
        self.inner.shared.clock.now()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.inner.shared.lock()
    }

    /// An [`Ack`] that resolves with `value` once everything marked so far is durable.
    fn enqueue<T: Send + 'static>(&self, state: &mut State, value: T) -> Ack<T> {
        let (tx, ack) = Ack::channel();
        state.pending.finishes.push(Box::new(move |result| {
            let _ = tx.send(result.map(|()| value));
        }));
        self.inner.shared.wake.notify_one();
        ack
    }

    fn count_skipped(&self, n: u64) {
        if n > 0 {
            self.inner
                .shared
                .decode_errors
                .fetch_add(n, Ordering::Relaxed);
        }
    }

    fn owns_session(&self, tenant: &Tenant, session_id: Id) -> bool {
        self.lock().session(tenant.as_str(), session_id).is_some()
    }
}

/// How deeply a stored JSON value may nest. A session file puts a value a few levels
/// down, and a file nested deeper than the JSON reader's limit (128) could not be read
/// back: the whole session would be skipped at the next open.
pub const MAX_VALUE_DEPTH: usize = 100;

pub(crate) fn check_depth<'a>(
    field: &'static str,
    values: impl IntoIterator<Item = &'a Value>,
) -> Result<()> {
    for value in values {
        let mut stack = vec![(value, 1usize)];
        while let Some((v, depth)) = stack.pop() {
            if depth > MAX_VALUE_DEPTH {
                return Err(StoreError::invalid(
                    field,
                    format!("JSON nested deeper than {MAX_VALUE_DEPTH} levels cannot be stored"),
                ));
            }
            match v {
                Value::Array(items) => stack.extend(items.iter().map(|i| (i, depth + 1))),
                Value::Object(map) => stack.extend(map.values().map(|i| (i, depth + 1))),
                _ => {}
            }
        }
    }
    Ok(())
}

pub(crate) fn tenant_state<'a>(
    state: &'a mut State,
    root: &Path,
    tenant: &str,
) -> &'a mut TenantState {
    state
        .tenants
        .entry(tenant.to_string())
        .or_insert_with(|| TenantState {
            dir: disk::tenant_dir(root, tenant),
            ..TenantState::default()
        })
}

impl Store for FileStore {
    async fn create_session(&self, tenant: &Tenant, new: NewSession) -> Result<Session> {
        self.session_create(tenant, new).await
    }

    async fn get_session(&self, tenant: &Tenant, id: Id) -> Result<Option<Session>> {
        self.session_get(tenant, id).await
    }

    async fn find_session_by_name(&self, tenant: &Tenant, name: &str) -> Result<Option<Session>> {
        self.session_find_by_name(tenant, name).await
    }

    async fn list_sessions(
        &self,
        tenant: &Tenant,
        filter: SessionFilter,
        page: PageRequest,
    ) -> Result<Page<Session>> {
        self.session_list(tenant, filter, page).await
    }

    async fn update_session(
        &self,
        tenant: &Tenant,
        id: Id,
        patch: SessionPatch,
    ) -> Result<Option<Session>> {
        self.session_update(tenant, id, patch).await
    }

    async fn delete_session(&self, tenant: &Tenant, id: Id) -> Result<bool> {
        self.session_delete(tenant, id).await
    }

    async fn append_message(&self, tenant: &Tenant, new: NewMessage) -> Result<Message> {
        self.message_append(tenant, new).await
    }

    async fn list_messages(
        &self,
        tenant: &Tenant,
        session_id: Id,
        query: MessageQuery,
    ) -> Result<Vec<Message>> {
        self.message_list(tenant, session_id, query).await
    }

    async fn create_execution(&self, tenant: &Tenant, new: NewExecution) -> Result<Execution> {
        self.execution_create(tenant, new).await
    }

    async fn get_execution(&self, tenant: &Tenant, id: Id) -> Result<Option<Execution>> {
        self.execution_get(tenant, id).await
    }

    async fn list_executions(&self, tenant: &Tenant, session_id: Id) -> Result<Vec<Execution>> {
        self.execution_list(tenant, session_id).await
    }

    async fn transition_execution(
        &self,
        tenant: &Tenant,
        id: Id,
        transition: Transition,
    ) -> Result<Execution> {
        self.execution_transition(tenant, id, transition).await
    }

    async fn claim_matching(
        &self,
        filter: &ClaimFilter,
        workers: &[String],
        lease: Duration,
        max_attempts: u32,
    ) -> Result<Vec<Claim>> {
        let mut claims = Vec::with_capacity(workers.len());
        for worker in workers {
            match self
                .queue_claim_next(filter, worker, lease, max_attempts)
                .await
            {
                Ok(Some(claim)) => claims.push(claim),
                Ok(None) => break,
                Err(e) if claims.is_empty() => return Err(e),
                Err(e) => {
                    tracing::warn!(worker, error = %e, "claiming work failed after some claims");
                    break;
                }
            }
        }
        Ok(claims)
    }

    async fn record_worker(&self, tenant: &Tenant, worker: WorkerSeen) -> Result<()> {
        let forget_before =
            worker.last_seen_at.0 - stepwise_store::rules::FORGET_WORKERS_AFTER.as_micros() as i64;
        let mut workers = self
            .inner
            .shared
            .workers
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        workers.retain(|_, w| w.last_seen_at.0 >= forget_before);
        let key = (tenant.as_str().to_string(), worker.worker_id.clone());
        // The newer call wins, never the other way round.
        if workers
            .get(&key)
            .is_none_or(|known| known.last_seen_at <= worker.last_seen_at)
        {
            workers.insert(key, worker);
        }
        Ok(())
    }

    async fn list_workers(&self, tenant: &Tenant, since: Timestamp) -> Result<Vec<WorkerSeen>> {
        let workers = self
            .inner
            .shared
            .workers
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let mut seen: Vec<WorkerSeen> = workers
            .iter()
            .filter(|((t, _), w)| t == tenant.as_str() && w.last_seen_at >= since)
            .map(|(_, w)| w.clone())
            .collect();
        seen.sort_by(|a, b| {
            b.last_seen_at
                .cmp(&a.last_seen_at)
                .then_with(|| a.worker_id.cmp(&b.worker_id))
        });
        Ok(seen)
    }

    async fn renew_leases(&self, worker: &str, ids: Vec<Id>, lease: Duration) -> Result<Vec<Id>> {
        self.queue_renew(worker, ids, lease).await
    }

    async fn release(&self, worker: &str, id: Id) -> Result<()> {
        self.queue_release(worker, id, false).await
    }

    async fn requeue(&self, worker: &str, id: Id) -> Result<()> {
        self.queue_release(worker, id, true).await
    }

    async fn queue_depth(&self) -> Result<u64> {
        self.queue_pending().await
    }

    async fn append_step(&self, tenant: &Tenant, new: NewStep) -> Result<Ack<StepAppend>> {
        self.step_append(tenant, new).await
    }

    async fn list_steps(&self, tenant: &Tenant, execution_id: Id) -> Result<Loaded<Step>> {
        self.step_list(tenant, execution_id).await
    }

    async fn list_session_steps(&self, tenant: &Tenant, session_id: Id) -> Result<Loaded<Step>> {
        self.step_list_session(tenant, session_id).await
    }

    async fn save_snapshot(&self, tenant: &Tenant, new: NewSnapshot) -> Result<Ack<Snapshot>> {
        self.snapshot_save(tenant, new).await
    }

    async fn list_snapshots(&self, tenant: &Tenant, execution_id: Id) -> Result<Vec<Snapshot>> {
        self.snapshot_list(tenant, execution_id).await
    }

    async fn get_snapshot(&self, tenant: &Tenant, id: Id) -> Result<Option<Snapshot>> {
        self.snapshot_get(tenant, id).await
    }

    async fn append_event(&self, tenant: &Tenant, new: NewEvent) -> Result<Ack<Event>> {
        self.event_append(tenant, new).await
    }

    async fn list_events(
        &self,
        tenant: &Tenant,
        session_id: Id,
        after: i64,
        limit: u32,
    ) -> Result<Vec<Event>> {
        self.event_list(tenant, session_id, after, limit).await
    }

    fn subscribe(&self, tenant: &Tenant, session_id: Id) -> broadcast::Receiver<Arc<Event>> {
        self.event_subscribe(tenant, session_id)
    }

    fn publish_live(&self, tenant: &Tenant, event: Event) {
        self.event_publish_live(tenant, event)
    }

    async fn import_document(
        &self,
        tenant: &Tenant,
        user_id: &str,
        doc: SessionDocument,
    ) -> Result<Session> {
        self.import_document_as_session(tenant, user_id, doc).await
    }

    async fn mark_abandoned(&self, cutoff: Timestamp, dry: bool) -> Result<u64> {
        self.retention_mark_abandoned(cutoff, dry).await
    }

    async fn cleanup_old_sessions(
        &self,
        now: Timestamp,
        policy: RetentionPolicy,
        dry: bool,
    ) -> Result<CleanupReport> {
        self.retention_cleanup(now, policy, dry).await
    }

    async fn put_checkpoint(
        &self,
        _tenant: &Tenant,
        _new: stepwise_store::NewCheckpoint,
    ) -> Result<stepwise_store::CheckpointPut> {
        Err(stepwise_store::checkpoints::unsupported())
    }

    async fn put_checkpoint_writes(
        &self,
        _tenant: &Tenant,
        _writes: stepwise_store::PutWrites,
    ) -> Result<Id> {
        Err(stepwise_store::checkpoints::unsupported())
    }

    async fn get_checkpoint_since(
        &self,
        _tenant: &Tenant,
        _thread_id: &str,
        _checkpoint_ns: &str,
        _checkpoint_id: Option<&str>,
        _have: &std::collections::BTreeMap<String, String>,
    ) -> Result<Option<stepwise_store::CheckpointRecord>> {
        Err(stepwise_store::checkpoints::unsupported())
    }

    async fn list_checkpoints(
        &self,
        _tenant: &Tenant,
        _query: stepwise_store::CheckpointQuery,
    ) -> Result<Page<stepwise_store::CheckpointRecord>> {
        Err(stepwise_store::checkpoints::unsupported())
    }

    async fn get_thread(
        &self,
        _tenant: &Tenant,
        _thread_id: &str,
    ) -> Result<Option<stepwise_store::ThreadInfo>> {
        Err(stepwise_store::checkpoints::unsupported())
    }

    /// No session of this backend is a thread: its export documents carry no checkpoints.
    async fn export_thread(
        &self,
        _tenant: &Tenant,
        _session_id: Id,
    ) -> Result<Option<stepwise_core::document::DocumentThread>> {
        Ok(None)
    }

    async fn delete_thread(&self, _tenant: &Tenant, _thread_id: &str) -> Result<bool> {
        Err(stepwise_store::checkpoints::unsupported())
    }

    async fn copy_thread(
        &self,
        _tenant: &Tenant,
        _source: &str,
        _target: &str,
        _user_id: &str,
    ) -> Result<Option<stepwise_store::ThreadInfo>> {
        Err(stepwise_store::checkpoints::unsupported())
    }

    async fn delete_checkpoints_for_runs(
        &self,
        _tenant: &Tenant,
        _run_ids: Vec<String>,
    ) -> Result<u64> {
        Err(stepwise_store::checkpoints::unsupported())
    }

    async fn prune_checkpoints(
        &self,
        _tenant: &Tenant,
        _thread_ids: Vec<String>,
        _strategy: stepwise_store::PruneStrategy,
    ) -> Result<u64> {
        Err(stepwise_store::checkpoints::unsupported())
    }

    async fn create_api_key(
        &self,
        tenant: &Tenant,
        user_id: &str,
        name: Option<String>,
        key_hash: &str,
    ) -> Result<ApiKeyRecord> {
        self.key_create(tenant, user_id, name, key_hash).await
    }

    async fn find_api_key(&self, key_hash: &str) -> Result<Option<ApiKeyRecord>> {
        self.key_find(key_hash).await
    }

    async fn list_api_keys(&self) -> Result<Vec<ApiKeyRecord>> {
        self.key_list().await
    }

    async fn revoke_api_key(&self, id: Id) -> Result<bool> {
        self.key_revoke(id).await
    }

    async fn count_active_api_keys(&self) -> Result<u64> {
        self.key_count_active().await
    }

    async fn flush(&self) -> Result<()> {
        let ack = {
            let mut state = self.lock();
            self.enqueue(&mut state, ())
        };
        ack.await
    }

    async fn ping(&self) -> Result<()> {
        self.operations_ping().await
    }

    async fn stats(&self) -> Result<StoreStats> {
        self.operations_stats().await
    }

    async fn count_by_status(&self) -> Result<StatusCounts> {
        self.operations_count_by_status().await
    }

    async fn try_retention_lock(&self) -> Result<Option<RetentionLock>> {
        // One process at a time uses the folder.
        Ok(Some(RetentionLock::local()))
    }

    fn backend_name(&self) -> &'static str {
        "files"
    }
}
