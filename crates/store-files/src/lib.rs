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

mod disk;
mod load;
mod state;
mod writer;

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::Value;
use stepwise_core::document::{DocumentLimits, validate_document};
use stepwise_core::name::validate_name;
use stepwise_core::{
    Event, Execution, ExecutionStatus, Id, Message, Session, SessionDocument, SessionStatus,
    SharedClock, Snapshot, Step, Timestamp, new_id, system_clock,
};
use stepwise_store::{
    Ack, ApiKeyRecord, Claim, CleanupReport, EventHub, Loaded, MessageQuery, NewEvent,
    NewExecution, NewMessage, NewSession, NewSnapshot, NewStep, Page, PageRequest, Result,
    RetentionLock, RetentionPolicy, SessionFilter, SessionPatch, StatusCounts, StepAppend, Store,
    StoreError, StoreStats, Tenant, Transition, cursor,
};
use tokio::sync::broadcast;

pub use disk::{
    FileEvent, INDEX_FILE, IndexEntry, IndexFile, LOCAL_TENANT, METADATA_FILE, Runtime,
    TENANTS_DIR, tenant_dir,
};
pub use load::{OpenReport, SkippedFile};

use crate::disk::stem_of;
use crate::state::{Container, ExecEntry, Key, KeyEntry, Lease, State, StoredStep, TenantState};

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

fn check_depth<'a>(field: &'static str, values: impl IntoIterator<Item = &'a Value>) -> Result<()> {
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

fn check_name(name: &Option<String>) -> Result<()> {
    match name {
        Some(name) => validate_name(name).map_err(StoreError::from),
        None => Ok(()),
    }
}

fn tenant_state<'a>(state: &'a mut State, root: &Path, tenant: &str) -> &'a mut TenantState {
    state
        .tenants
        .entry(tenant.to_string())
        .or_insert_with(|| TenantState {
            dir: disk::tenant_dir(root, tenant),
            ..TenantState::default()
        })
}

/// Whether `stem` can be given to session `id`: not another session's file, not a file
/// that could not be read.
fn stem_free(ts: &TenantState, stem: &str, id: Id) -> Result<()> {
    if ts.blocked_stems.contains(stem) {
        return Err(StoreError::Conflict(format!(
            "{stem}.json exists but could not be read; fix or move that file first"
        )));
    }
    if ts.stems.get(stem).is_some_and(|other| *other != id) {
        return Err(StoreError::Conflict(format!(
            "a session named '{stem}' already exists"
        )));
    }
    Ok(())
}

fn lease_until(now: Timestamp, lease: Duration) -> Timestamp {
    Timestamp(
        now.0
            .saturating_add(lease.as_micros().min(i64::MAX as u128) as i64),
    )
}

fn decode_steps<'a>(steps: impl Iterator<Item = &'a StoredStep>, loaded: &mut Loaded<Step>) {
    for s in steps {
        match s {
            StoredStep::Decoded(step) => loaded.items.push(step.clone()),
            StoredStep::Damaged(_) => loaded.skipped += 1,
        }
    }
}

fn expired(now: Timestamp, policy: RetentionPolicy, session: &Session) -> bool {
    let days = match session.status {
        SessionStatus::Completed => policy.completed_days,
        SessionStatus::Abandoned => policy.abandoned_days,
        SessionStatus::Deleted => policy.deleted_days,
        _ => return false,
    };
    session.updated_at < now.minus_days(days)
}

fn container_report(container: &Container) -> CleanupReport {
    CleanupReport {
        sessions: 1,
        messages: container.messages.len() as u64,
        executions: container.executions.len() as u64,
        steps: container
            .executions
            .iter()
            .map(|e| e.steps.len() as u64)
            .sum::<u64>()
            + container.orphan_damaged_steps(),
        snapshots: container.snapshots.len() as u64,
        events: container.events.len() as u64,
    }
}

fn add_report(total: &mut CleanupReport, r: CleanupReport) {
    total.sessions += r.sessions;
    total.messages += r.messages;
    total.executions += r.executions;
    total.steps += r.steps;
    total.snapshots += r.snapshots;
    total.events += r.events;
}

impl Store for FileStore {
    async fn create_session(&self, tenant: &Tenant, new: NewSession) -> Result<Session> {
        check_depth("metadata", [&new.metadata])?;
        check_name(&new.name)?;
        let now = self.now();
        let session = new.into_session(tenant, now);
        let ack = {
            let mut state = self.lock();
            let ts = tenant_state(&mut state, &self.inner.shared.root, tenant.as_str());
            if let Some(name) = &session.name
                && ts.names.contains_key(name)
            {
                return Err(StoreError::Conflict(format!(
                    "a session named '{name}' already exists"
                )));
            }
            let stem = stem_of(&session);
            stem_free(ts, &stem, session.id)?;
            if let Some(name) = &session.name {
                ts.names.insert(name.clone(), session.id);
            }
            ts.stems.insert(stem, session.id);
            ts.sessions.insert(
                session.id,
                Container {
                    session: Some(session.clone()),
                    ..Container::default()
                },
            );
            let key = Key {
                tenant: tenant.as_str().to_string(),
                session: Some(session.id),
            };
            state.touch(&key, true);
            self.enqueue(&mut state, session)
        };
        ack.await
    }

    async fn get_session(&self, tenant: &Tenant, id: Id) -> Result<Option<Session>> {
        Ok(self
            .lock()
            .session(tenant.as_str(), id)
            .and_then(|c| c.session.clone()))
    }

    async fn find_session_by_name(&self, tenant: &Tenant, name: &str) -> Result<Option<Session>> {
        let state = self.lock();
        let Some(ts) = state.tenant(tenant.as_str()) else {
            return Ok(None);
        };
        Ok(ts
            .names
            .get(name)
            .and_then(|id| ts.sessions.get(id))
            .and_then(|c| c.session.clone()))
    }

    async fn list_sessions(
        &self,
        tenant: &Tenant,
        filter: SessionFilter,
        page: PageRequest,
    ) -> Result<Page<Session>> {
        let after = page.cursor.as_deref().map(cursor::decode).transpose()?;
        let limit = page.limit() as usize;
        let state = self.lock();
        let Some(ts) = state.tenant(tenant.as_str()) else {
            return Ok(Page {
                items: Vec::new(),
                next_cursor: None,
            });
        };
        let mut items: Vec<&Session> = ts
            .sessions
            .values()
            .filter_map(|c| c.session.as_ref())
            .filter(|s| match &filter.statuses {
                Some(statuses) if !statuses.is_empty() => statuses.contains(&s.status),
                _ => s.status != SessionStatus::Deleted,
            })
            .filter(|s| {
                filter
                    .related_type
                    .as_ref()
                    .is_none_or(|v| s.related_type.as_ref() == Some(v))
                    && filter
                        .related_id
                        .as_ref()
                        .is_none_or(|v| s.related_id.as_ref() == Some(v))
                    && filter.user_id.as_ref().is_none_or(|v| &s.user_id == v)
            })
            .filter(|s| after.is_none_or(|(at, id)| (s.updated_at, s.id) < (at, id)))
            .collect();
        items.sort_by_key(|x| std::cmp::Reverse((x.updated_at, x.id)));
        let next_cursor = (items.len() > limit)
            .then(|| {
                items
                    .get(limit - 1)
                    .map(|s| cursor::encode(s.updated_at, s.id))
            })
            .flatten();
        items.truncate(limit);
        Ok(Page {
            items: items.into_iter().cloned().collect(),
            next_cursor,
        })
    }

    async fn update_session(
        &self,
        tenant: &Tenant,
        id: Id,
        patch: SessionPatch,
    ) -> Result<Option<Session>> {
        check_name(&patch.name)?;
        check_depth("metadata", patch.metadata.iter())?;
        let now = self.now();
        let ack = {
            let mut state = self.lock();
            let root = self.inner.shared.root.clone();
            let ts = tenant_state(&mut state, &root, tenant.as_str());
            let Some(current) = ts.sessions.get(&id).and_then(|c| c.session.clone()) else {
                return Ok(None);
            };
            let mut session = current.clone();
            if let Some(title) = patch.title {
                session.title = Some(title);
            }
            if let Some(name) = patch.name {
                session.name = Some(name);
            }
            if let Some(status) = patch.status {
                session.status = status;
            }
            if let Some(metadata) = patch.metadata {
                session.metadata = metadata;
            }
            session.updated_at = now;
            let (old_stem, new_stem) = (stem_of(&current), stem_of(&session));
            if let Some(name) = &session.name
                && ts.names.get(name).is_some_and(|other| *other != id)
            {
                return Err(StoreError::Conflict(
                    "a session with that name already exists".into(),
                ));
            }
            stem_free(ts, &new_stem, id)?;
            if old_stem != new_stem {
                if let Some(old) = &current.name {
                    ts.names.remove(old);
                }
                if let Some(name) = &session.name {
                    ts.names.insert(name.clone(), id);
                }
                ts.stems.remove(&old_stem);
                ts.stems.insert(new_stem, id);
                state
                    .pending
                    .removals
                    .push((tenant.as_str().to_string(), old_stem));
            }
            let Some(container) = state.session_mut(tenant.as_str(), id) else {
                return Ok(None);
            };
            container.session = Some(session.clone());
            state.touch(
                &Key {
                    tenant: tenant.as_str().to_string(),
                    session: Some(id),
                },
                true,
            );
            self.enqueue(&mut state, Some(session))
        };
        ack.await
    }

    async fn delete_session(&self, tenant: &Tenant, id: Id) -> Result<bool> {
        let now = self.now();
        let ack = {
            let mut state = self.lock();
            let Some(session) = state
                .session_mut(tenant.as_str(), id)
                .and_then(|c| c.session.as_mut())
            else {
                return Ok(false);
            };
            session.status = SessionStatus::Deleted;
            session.updated_at = now;
            state.touch(
                &Key {
                    tenant: tenant.as_str().to_string(),
                    session: Some(id),
                },
                true,
            );
            self.enqueue(&mut state, true)
        };
        ack.await
    }

    async fn append_message(&self, tenant: &Tenant, new: NewMessage) -> Result<Message> {
        check_depth("metadata", [&new.metadata])?;
        let session_id = new.session_id;
        let ack = {
            let mut state = self.lock();
            // Read the clock under the lock, so concurrent appends are stored in time order.
            let now = self.now();
            let message = new.into_message(now);
            let Some(container) = state.session_mut(tenant.as_str(), session_id) else {
                return Err(StoreError::NotFound("session"));
            };
            container.messages.push(message.clone());
            if let Some(session) = container.session.as_mut() {
                session.message_count += 1;
                session.updated_at = now;
            }
            state.touch(
                &Key {
                    tenant: tenant.as_str().to_string(),
                    session: Some(session_id),
                },
                true,
            );
            self.enqueue(&mut state, message)
        };
        ack.await
    }

    async fn list_messages(
        &self,
        tenant: &Tenant,
        session_id: Id,
        query: MessageQuery,
    ) -> Result<Vec<Message>> {
        let state = self.lock();
        let Some(container) = state.session(tenant.as_str(), session_id) else {
            return Ok(Vec::new());
        };
        let after = match query.after {
            Some(after) => {
                let found = container
                    .messages
                    .iter()
                    .find(|m| m.id == after)
                    .ok_or_else(|| {
                        StoreError::invalid("after", "no such message in this session")
                    })?;
                Some((found.created_at, found.id))
            }
            None => None,
        };
        let roles = query.roles.filter(|r| !r.is_empty());
        let matching = container
            .messages
            .iter()
            .filter(|m| after.is_none_or(|a| (m.created_at, m.id) > a))
            .filter(|m| roles.as_ref().is_none_or(|r| r.contains(&m.role)))
            .take(query.limit.map_or(usize::MAX, |l| l as usize))
            .cloned()
            .collect();
        Ok(matching)
    }

    async fn create_execution(&self, tenant: &Tenant, new: NewExecution) -> Result<Execution> {
        check_depth("input", [&new.input, &new.agent_config, &new.metadata])?;
        let now = self.now();
        let execution = new.into_execution(tenant, now)?;
        let ack = {
            let mut state = self.lock();
            let now = self.now();
            let execution = Execution {
                started_at: execution.started_at.map(|_| now),
                created_at: now,
                updated_at: now,
                ..execution
            };
            if let Some(session_id) = execution.session_id
                && state.session(tenant.as_str(), session_id).is_none()
            {
                return Err(StoreError::NotFound("session"));
            }
            if let Some(parent) = execution.parent_execution_id
                && state.exec(tenant.as_str(), parent).is_none()
            {
                return Err(StoreError::NotFound("parent execution"));
            }
            let root = self.inner.shared.root.clone();
            let ts = tenant_state(&mut state, &root, tenant.as_str());
            let Some(container) = ts.container_mut(execution.session_id) else {
                return Err(StoreError::NotFound("session"));
            };
            container.executions.push(ExecEntry {
                execution: execution.clone(),
                steps: Default::default(),
                lease: None,
                resume_answer: None,
            });
            if let Some(session) = container.session.as_mut() {
                session.last_execution_id = Some(execution.id);
                session.updated_at = now;
            }
            let key = Key {
                tenant: tenant.as_str().to_string(),
                session: execution.session_id,
            };
            state.executions.insert(execution.id, key.clone());
            state.touch(&key, true);
            self.enqueue(&mut state, execution)
        };
        ack.await
    }

    async fn get_execution(&self, tenant: &Tenant, id: Id) -> Result<Option<Execution>> {
        Ok(self
            .lock()
            .exec(tenant.as_str(), id)
            .map(|(_, e)| e.execution.clone()))
    }

    async fn list_executions(&self, tenant: &Tenant, session_id: Id) -> Result<Vec<Execution>> {
        let state = self.lock();
        let Some(container) = state.session(tenant.as_str(), session_id) else {
            return Ok(Vec::new());
        };
        Ok(container
            .executions
            .iter()
            .map(|e| e.execution.clone())
            .collect())
    }

    async fn transition_execution(
        &self,
        tenant: &Tenant,
        id: Id,
        transition: Transition,
    ) -> Result<Execution> {
        match &transition {
            Transition::Resume { answer } => check_depth("answer", [answer])?,
            Transition::Complete { output } => check_depth("output", [output])?,
            _ => {}
        }
        let now = self.now();
        let ack = {
            let mut state = self.lock();
            let Some((key, entry)) = state.exec_mut(tenant.as_str(), id) else {
                return Err(StoreError::NotFound("execution"));
            };
            let target = transition.target();
            let current = entry.execution.status;
            if !current.can_become(target) {
                return Err(StoreError::InvalidState(format!(
                    "the execution is {current} and cannot become {target}"
                )));
            }
            let e = &mut entry.execution;
            e.status = target;
            entry.resume_answer = None;
            match transition {
                // The claim ended with the worker pausing: not an interruption.
                Transition::Pause { .. } => e.attempts = 0,
                Transition::Resume { answer } => entry.resume_answer = Some(answer),
                Transition::Complete { output } => {
                    e.output = output;
                    e.completed_at.get_or_insert(now);
                }
                Transition::Fail { error_message } => {
                    e.error_message = Some(error_message);
                    e.completed_at.get_or_insert(now);
                }
                Transition::Cancel => {
                    e.completed_at.get_or_insert(now);
                }
            }
            entry.lease = None;
            e.updated_at = now;
            let execution = e.clone();
            state.touch(&key, false);
            self.enqueue(&mut state, execution)
        };
        ack.await
    }

    async fn claim_next(
        &self,
        worker: &str,
        lease: Duration,
        max_attempts: u32,
    ) -> Result<Option<Claim>> {
        let now = self.now();
        let until = lease_until(now, lease);
        let ack = {
            let mut state = self.lock();
            // Running executions whose worker stopped renewing its lease, oldest first.
            let mut stale: Vec<(Timestamp, Id, Key)> = state
                .all_executions()
                .filter(|(_, e)| {
                    e.execution.status == ExecutionStatus::Running
                        && e.lease.as_ref().is_some_and(|l| l.expires_at < now)
                })
                .map(|(k, e)| (e.execution.created_at, e.execution.id, k.clone()))
                .collect();
            stale.sort_by_key(|x| (x.0, x.1));
            let mut claimed: Option<Claim> = None;
            for (_, id, key) in stale {
                let Some((_, entry)) = state.exec_mut(&key.tenant, id) else {
                    continue;
                };
                let e = &mut entry.execution;
                entry.lease = None;
                if e.attempts >= max_attempts {
                    tracing::warn!(execution = %id, attempts = e.attempts, "failing an execution whose workers kept stopping");
                    e.status = ExecutionStatus::Failed;
                    e.error_message = Some(format!(
                        "the execution was interrupted {} times (its worker stopped before finishing); giving up",
                        e.attempts
                    ));
                    e.completed_at = Some(now);
                    e.updated_at = now;
                    state.touch(&key, false);
                    continue;
                }
                entry.lease = Some(Lease {
                    owner: worker.to_string(),
                    expires_at: until,
                });
                e.attempts += 1;
                e.updated_at = now;
                claimed = Some(Claim {
                    execution: e.clone(),
                    tenant: Tenant::new(key.tenant.clone())?,
                    resume_answer: None,
                });
                state.touch(&key, false);
                break;
            }
            if claimed.is_none() {
                // The oldest pending execution of a session with nothing running and no
                // older pending one; executions without a session never wait.
                let mut pending: Vec<(Timestamp, Id, Key)> = state
                    .all_executions()
                    .filter(|(_, e)| {
                        e.execution.status == ExecutionStatus::Pending
                            && e.execution.parent_execution_id.is_none()
                    })
                    .map(|(k, e)| (e.execution.created_at, e.execution.id, k.clone()))
                    .collect();
                pending.sort_by_key(|x| (x.0, x.1));
                for (created_at, id, key) in pending {
                    if let Some(session) = key.session {
                        let Some(container) = state.session(&key.tenant, session) else {
                            continue;
                        };
                        let blocked = container.executions.iter().any(|o| {
                            o.execution.session_id == Some(session)
                                && (o.execution.status == ExecutionStatus::Running
                                    || (o.execution.status == ExecutionStatus::Pending
                                        && (o.execution.created_at, o.execution.id)
                                            < (created_at, id)))
                        });
                        if blocked {
                            continue;
                        }
                    }
                    let Some((_, entry)) = state.exec_mut(&key.tenant, id) else {
                        continue;
                    };
                    let e = &mut entry.execution;
                    e.status = ExecutionStatus::Running;
                    e.attempts += 1;
                    e.started_at.get_or_insert(now);
                    e.updated_at = now;
                    entry.lease = Some(Lease {
                        owner: worker.to_string(),
                        expires_at: until,
                    });
                    let resume_answer = entry.resume_answer.take();
                    claimed = Some(Claim {
                        execution: entry.execution.clone(),
                        tenant: Tenant::new(key.tenant.clone())?,
                        resume_answer,
                    });
                    state.touch(&key, false);
                    break;
                }
            }
            self.enqueue(&mut state, claimed)
        };
        ack.await
    }

    async fn renew_leases(&self, worker: &str, ids: Vec<Id>, lease: Duration) -> Result<Vec<Id>> {
        let until = lease_until(self.now(), lease);
        let mut state = self.lock();
        let mut lost = Vec::new();
        for id in ids {
            let key = state.executions.get(&id).cloned();
            let held = key.as_ref().and_then(|key| {
                let (_, entry) = state.exec_mut(&key.tenant, id)?;
                let lease = entry.lease.as_mut()?;
                if entry.execution.status != ExecutionStatus::Running || lease.owner != worker {
                    return None;
                }
                lease.expires_at = until;
                Some(())
            });
            match (held, key) {
                // Written with the next batch: an older deadline on disk only means a
                // crashed process's work is taken over sooner.
                (Some(()), Some(key)) => state.touch(&key, false),
                _ => lost.push(id),
            }
        }
        if !state.pending.dirty.is_empty() {
            self.inner.shared.wake.notify_one();
        }
        Ok(lost)
    }

    async fn release(&self, worker: &str, id: Id) -> Result<()> {
        let now = self.now();
        let ack = {
            let mut state = self.lock();
            let Some(key) = state.executions.get(&id).cloned() else {
                return Ok(());
            };
            let Some((_, entry)) = state.exec_mut(&key.tenant, id) else {
                return Ok(());
            };
            let held = entry.execution.status == ExecutionStatus::Running
                && entry.lease.as_ref().is_some_and(|l| l.owner == worker);
            if !held {
                return Ok(());
            }
            entry.lease = None;
            let e = &mut entry.execution;
            e.status = ExecutionStatus::Pending;
            e.attempts = e.attempts.saturating_sub(1);
            e.updated_at = now;
            state.touch(&key, false);
            self.enqueue(&mut state, ())
        };
        ack.await
    }

    async fn queue_depth(&self) -> Result<u64> {
        Ok(self
            .lock()
            .all_executions()
            .filter(|(_, e)| e.execution.status == ExecutionStatus::Pending)
            .count() as u64)
    }

    async fn append_step(&self, tenant: &Tenant, new: NewStep) -> Result<Ack<StepAppend>> {
        check_depth(
            "body",
            std::iter::once(&new.body.output)
                .chain(new.body.tool_calls.iter().map(|c| &c.arguments)),
        )?;
        if new.step_number == 0 {
            return Err(StoreError::invalid(
                "step_number",
                "step numbers start at 1",
            ));
        }
        let now = self.now();
        let mut state = self.lock();
        let Some((key, entry)) = state.exec_mut(tenant.as_str(), new.execution_id) else {
            return Err(StoreError::NotFound("execution"));
        };
        if let Some(existing) = entry.steps.get(&new.step_number) {
            // The same step again is a no-op; anything else under its number a conflict.
            return match existing {
                StoredStep::Decoded(step) if step.kind == new.kind && step.body() == new.body => {
                    let step = step.clone();
                    Ok(self.enqueue(
                        &mut state,
                        StepAppend {
                            step,
                            created: false,
                        },
                    ))
                }
                _ => Err(StoreError::Conflict(format!(
                    "step {} of this execution already exists with another body",
                    new.step_number
                ))),
            };
        }
        if entry.execution.status.is_finished() {
            return Err(StoreError::InvalidState(format!(
                "the execution is {}; no more steps can be added",
                entry.execution.status
            )));
        }
        let usage = new.body.token_usage;
        let step = Step::from_body(
            new_id(),
            new.execution_id,
            entry.execution.session_id,
            new.step_number,
            new.kind,
            new.body,
            now,
        );
        entry
            .steps
            .insert(new.step_number, StoredStep::Decoded(step.clone()));
        let e = &mut entry.execution;
        e.step_count = e.step_count.max(u64::from(new.step_number));
        e.token_usage.add(&usage);
        e.updated_at = now;
        state.touch(&key, false);
        Ok(self.enqueue(
            &mut state,
            StepAppend {
                step,
                created: true,
            },
        ))
    }

    async fn list_steps(&self, tenant: &Tenant, execution_id: Id) -> Result<Loaded<Step>> {
        let mut loaded = Loaded {
            items: Vec::new(),
            skipped: 0,
        };
        if let Some((_, entry)) = self.lock().exec(tenant.as_str(), execution_id) {
            decode_steps(entry.steps.values(), &mut loaded);
        }
        self.count_skipped(loaded.skipped);
        Ok(loaded)
    }

    async fn list_session_steps(&self, tenant: &Tenant, session_id: Id) -> Result<Loaded<Step>> {
        let mut loaded = Loaded {
            items: Vec::new(),
            skipped: 0,
        };
        if let Some(container) = self.lock().session(tenant.as_str(), session_id) {
            for entry in &container.executions {
                decode_steps(entry.steps.values(), &mut loaded);
            }
            loaded.skipped += container.orphan_damaged_steps();
        }
        self.count_skipped(loaded.skipped);
        Ok(loaded)
    }

    async fn save_snapshot(&self, tenant: &Tenant, new: NewSnapshot) -> Result<Ack<Snapshot>> {
        check_depth("state", [&new.state])?;
        let mut state = self.lock();
        let now = self.now();
        let snapshot = new.into_snapshot(now);
        if state.exec(tenant.as_str(), snapshot.execution_id).is_none() {
            return Err(StoreError::NotFound("execution"));
        }
        if let Some(parent) = snapshot.parent_snapshot_id
            && state
                .snapshots
                .get(&parent)
                .is_none_or(|k| k.tenant != tenant.as_str())
        {
            return Err(StoreError::invalid(
                "parent_snapshot_id",
                "no such snapshot",
            ));
        }
        let Some((key, entry)) = state.exec_mut(tenant.as_str(), snapshot.execution_id) else {
            return Err(StoreError::NotFound("execution"));
        };
        entry.execution.last_snapshot_id = Some(snapshot.id);
        entry.execution.updated_at = now;
        let Some(container) = state.container_mut(&key) else {
            return Err(StoreError::NotFound("execution"));
        };
        container.snapshots.push(snapshot.clone());
        if let Some(session) = container.session.as_mut() {
            session.last_snapshot_id = Some(snapshot.id);
        }
        state.snapshots.insert(snapshot.id, key.clone());
        state.touch(&key, false);
        Ok(self.enqueue(&mut state, snapshot))
    }

    async fn list_snapshots(&self, tenant: &Tenant, execution_id: Id) -> Result<Vec<Snapshot>> {
        let state = self.lock();
        let Some((key, _)) = state.exec(tenant.as_str(), execution_id) else {
            return Ok(Vec::new());
        };
        let Some(container) = state
            .tenant(&key.tenant)
            .and_then(|t| t.container(key.session))
        else {
            return Ok(Vec::new());
        };
        Ok(container
            .snapshots
            .iter()
            .filter(|s| s.execution_id == execution_id)
            .map(|s| Snapshot {
                state: Value::Null,
                ..s.clone()
            })
            .collect())
    }

    async fn get_snapshot(&self, tenant: &Tenant, id: Id) -> Result<Option<Snapshot>> {
        let state = self.lock();
        let Some(key) = state
            .snapshots
            .get(&id)
            .filter(|k| k.tenant == tenant.as_str())
        else {
            return Ok(None);
        };
        Ok(state
            .tenant(&key.tenant)
            .and_then(|t| t.container(key.session))
            .and_then(|c| c.snapshots.iter().find(|s| s.id == id))
            .cloned())
    }

    async fn append_event(&self, tenant: &Tenant, new: NewEvent) -> Result<Ack<Event>> {
        check_depth("metadata", [&new.metadata])?;
        let mut state = self.lock();
        let now = self.now();
        let Some(container) = state.session_mut(tenant.as_str(), new.session_id) else {
            return Err(StoreError::NotFound("session"));
        };
        container.last_event_id += 1;
        let event = Event {
            id: container.last_event_id,
            session_id: new.session_id,
            message_id: new.message_id,
            execution_id: new.execution_id,
            event_type: new.event_type,
            content: new.content,
            metadata: new.metadata,
            timestamp: now,
        };
        container.events.push(event.clone());
        state.pending.events.push(Arc::new(event.clone()));
        state.touch(
            &Key {
                tenant: tenant.as_str().to_string(),
                session: Some(new.session_id),
            },
            false,
        );
        Ok(self.enqueue(&mut state, event))
    }

    async fn list_events(
        &self,
        tenant: &Tenant,
        session_id: Id,
        after: i64,
        limit: u32,
    ) -> Result<Vec<Event>> {
        let state = self.lock();
        let Some(container) = state.session(tenant.as_str(), session_id) else {
            return Ok(Vec::new());
        };
        // Ids are dense from 1, so the first event after `after` sits at index `after`.
        let start = container.events.partition_point(|e| e.id <= after);
        Ok(container.events[start..]
            .iter()
            .take(limit as usize)
            .cloned()
            .collect())
    }

    fn subscribe(&self, tenant: &Tenant, session_id: Id) -> broadcast::Receiver<Arc<Event>> {
        if self.owns_session(tenant, session_id) {
            self.inner.shared.hub.subscribe(session_id)
        } else {
            // Another tenant's id behaves like an unknown one: nothing ever arrives.
            self.inner.shared.nowhere.subscribe()
        }
    }

    fn publish_live(&self, tenant: &Tenant, event: Event) {
        if self.owns_session(tenant, event.session_id) {
            self.inner.shared.hub.publish(Arc::new(event));
        }
    }

    async fn import_document(
        &self,
        tenant: &Tenant,
        user_id: &str,
        doc: SessionDocument,
    ) -> Result<Session> {
        if doc.thread.is_some() {
            return Err(StoreError::InvalidState(
                "this document carries a LangGraph thread's checkpoints; checkpoints need the SQLite or PostgreSQL backend".into(),
            ));
        }
        validate_document(&doc, &DocumentLimits::default()).map_err(|e| StoreError::Invalid {
            field: Some("document"),
            message: e.to_string(),
        })?;
        check_depth("session", [&doc.session.metadata])?;
        check_depth("messages", doc.messages.iter().map(|m| &m.metadata))?;
        check_depth(
            "executions",
            doc.executions
                .iter()
                .flat_map(|e| [&e.agent_config, &e.input, &e.output, &e.metadata]),
        )?;
        check_depth(
            "steps",
            doc.steps.iter().flat_map(|s| {
                std::iter::once(&s.output).chain(s.tool_calls.iter().map(|c| &c.arguments))
            }),
        )?;
        check_depth("snapshots", doc.snapshots.iter().map(|s| &s.state))?;
        let container = rekey(tenant, user_id, doc, self.now())?;
        let Some(session) = container.session.clone() else {
            return Err(StoreError::invalid(
                "session",
                "the document has no session",
            ));
        };
        let ack = {
            let mut state = self.lock();
            let root = self.inner.shared.root.clone();
            let ts = tenant_state(&mut state, &root, tenant.as_str());
            if let Some(name) = &session.name
                && ts.names.contains_key(name)
            {
                return Err(StoreError::Conflict(format!(
                    "a session named '{name}' already exists"
                )));
            }
            let stem = stem_of(&session);
            stem_free(ts, &stem, session.id)?;
            if let Some(name) = &session.name {
                ts.names.insert(name.clone(), session.id);
            }
            ts.stems.insert(stem, session.id);
            let key = Key {
                tenant: tenant.as_str().to_string(),
                session: Some(session.id),
            };
            for e in &container.executions {
                state.executions.insert(e.execution.id, key.clone());
            }
            for s in &container.snapshots {
                state.snapshots.insert(s.id, key.clone());
            }
            let root = self.inner.shared.root.clone();
            tenant_state(&mut state, &root, tenant.as_str())
                .sessions
                .insert(session.id, container);
            state.touch(&key, true);
            self.enqueue(&mut state, session)
        };
        ack.await
    }

    async fn mark_abandoned(&self, cutoff: Timestamp, dry: bool) -> Result<u64> {
        let now = self.now();
        let ack = {
            let mut state = self.lock();
            let stale: Vec<Key> = state
                .tenants
                .iter()
                .flat_map(|(tenant, ts)| {
                    ts.sessions.iter().filter_map(move |(id, c)| {
                        let s = c.session.as_ref()?;
                        (s.status == SessionStatus::Active && s.updated_at < cutoff).then(|| Key {
                            tenant: tenant.clone(),
                            session: Some(*id),
                        })
                    })
                })
                .collect();
            let count = stale.len() as u64;
            if dry {
                return Ok(count);
            }
            for key in &stale {
                let Some(container) = state.container_mut(key) else {
                    continue;
                };
                for entry in &mut container.executions {
                    let e = &mut entry.execution;
                    if e.status == ExecutionStatus::Paused {
                        e.status = ExecutionStatus::Cancelled;
                        e.completed_at = Some(now);
                        e.updated_at = now;
                        entry.lease = None;
                        entry.resume_answer = None;
                    }
                }
                if let Some(session) = container.session.as_mut() {
                    session.status = SessionStatus::Abandoned;
                    session.updated_at = now;
                }
                state.touch(key, true);
            }
            self.enqueue(&mut state, count)
        };
        ack.await
    }

    async fn cleanup_old_sessions(
        &self,
        now: Timestamp,
        policy: RetentionPolicy,
        dry: bool,
    ) -> Result<CleanupReport> {
        let ack = {
            let mut state = self.lock();
            let doomed: Vec<(String, Id)> = state
                .tenants
                .iter()
                .flat_map(|(tenant, ts)| {
                    ts.sessions.iter().filter_map(move |(id, c)| {
                        let s = c.session.as_ref()?;
                        expired(now, policy, s).then(|| (tenant.clone(), *id))
                    })
                })
                .collect();
            let mut total = CleanupReport::default();
            for (tenant, id) in &doomed {
                if let Some(container) = state.session(tenant, *id) {
                    add_report(&mut total, container_report(container));
                }
            }
            if dry {
                return Ok(total);
            }
            for (tenant, id) in doomed {
                let Some(ts) = state.tenants.get_mut(&tenant) else {
                    continue;
                };
                let Some(container) = ts.sessions.remove(&id) else {
                    continue;
                };
                let stem = container.session.as_ref().map(stem_of);
                if let Some(name) = container.session.as_ref().and_then(|s| s.name.clone()) {
                    ts.names.remove(&name);
                }
                if let Some(stem) = &stem {
                    ts.stems.remove(stem);
                }
                for e in &container.executions {
                    state.executions.remove(&e.execution.id);
                }
                for s in &container.snapshots {
                    state.snapshots.remove(&s.id);
                }
                if let Some(stem) = stem {
                    state.pending.removals.push((tenant.clone(), stem));
                }
                state.pending.index_dirty.insert(tenant);
            }
            if total.sessions > 0 {
                tracing::info!(?total, "retention cleanup deleted expired sessions");
            }
            self.enqueue(&mut state, total)
        };
        ack.await
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
        let record = ApiKeyRecord::new(tenant, user_id, name, self.now());
        let ack = {
            let mut state = self.lock();
            if state.api_keys.iter().any(|k| k.hash == key_hash) {
                return Err(StoreError::Conflict("that key already exists".into()));
            }
            state.api_keys.push(KeyEntry {
                record: record.clone(),
                hash: key_hash.to_string(),
            });
            let root = self.inner.shared.root.clone();
            tenant_state(&mut state, &root, LOCAL_TENANT);
            state.touch(&keys_key(), false);
            self.enqueue(&mut state, record)
        };
        ack.await
    }

    async fn find_api_key(&self, key_hash: &str) -> Result<Option<ApiKeyRecord>> {
        Ok(self
            .lock()
            .api_keys
            .iter()
            .find(|k| k.hash == key_hash && k.record.revoked_at.is_none())
            .map(|k| k.record.clone()))
    }

    async fn list_api_keys(&self) -> Result<Vec<ApiKeyRecord>> {
        let mut keys: Vec<ApiKeyRecord> = self
            .lock()
            .api_keys
            .iter()
            .map(|k| k.record.clone())
            .collect();
        keys.sort_by_key(|x| (x.created_at, x.id));
        Ok(keys)
    }

    async fn revoke_api_key(&self, id: Id) -> Result<bool> {
        let now = self.now();
        let ack = {
            let mut state = self.lock();
            let Some(key) = state.api_keys.iter_mut().find(|k| k.record.id == id) else {
                return Ok(false);
            };
            key.record.revoked_at.get_or_insert(now);
            state.touch(&keys_key(), false);
            self.enqueue(&mut state, true)
        };
        ack.await
    }

    async fn count_active_api_keys(&self) -> Result<u64> {
        Ok(self
            .lock()
            .api_keys
            .iter()
            .filter(|k| k.record.revoked_at.is_none())
            .count() as u64)
    }

    async fn flush(&self) -> Result<()> {
        let ack = {
            let mut state = self.lock();
            self.enqueue(&mut state, ())
        };
        ack.await
    }

    async fn ping(&self) -> Result<()> {
        let root = &self.inner.shared.root;
        if !self.inner.shared.writable.load(Ordering::Relaxed) {
            return Err(StoreError::StorageFull(format!(
                "the last write to {} failed because the disk is full",
                root.display()
            )));
        }
        match std::fs::metadata(root) {
            Ok(m) if m.is_dir() => Ok(()),
            Ok(_) => Err(StoreError::Unavailable(format!(
                "{} is not a folder",
                root.display()
            ))),
            Err(e) => Err(StoreError::Unavailable(format!(
                "{} cannot be reached: {e}",
                root.display()
            ))),
        }
    }

    async fn stats(&self) -> Result<StoreStats> {
        let (bytes, queue_depth) = {
            let state = self.lock();
            let bytes = state.file_sizes.values().sum();
            let depth = state
                .all_executions()
                .filter(|(_, e)| e.execution.status == ExecutionStatus::Pending)
                .count() as u64;
            (bytes, depth)
        };
        Ok(StoreStats {
            bytes,
            queue_depth,
            decode_errors: self.inner.shared.decode_errors.load(Ordering::Relaxed),
            save_errors: self.inner.shared.save_errors.load(Ordering::Relaxed),
        })
    }

    async fn count_by_status(&self) -> Result<StatusCounts> {
        let state = self.lock();
        let mut sessions: BTreeMap<&'static str, (SessionStatus, u64)> = BTreeMap::new();
        for tenant in state.tenants.values() {
            for session in tenant.sessions.values().filter_map(|c| c.session.as_ref()) {
                sessions
                    .entry(session.status.as_str())
                    .or_insert((session.status, 0))
                    .1 += 1;
            }
        }
        let mut executions: BTreeMap<&'static str, (ExecutionStatus, u64)> = BTreeMap::new();
        for (_, entry) in state.all_executions() {
            let status = entry.execution.status;
            executions.entry(status.as_str()).or_insert((status, 0)).1 += 1;
        }
        Ok(StatusCounts {
            sessions: sessions.into_values().collect(),
            executions: executions.into_values().collect(),
        })
    }

    async fn try_retention_lock(&self) -> Result<Option<RetentionLock>> {
        // One process at a time uses the folder.
        Ok(Some(RetentionLock::local()))
    }

    fn backend_name(&self) -> &'static str {
        "files"
    }
}

/// The root `metadata.json`, which holds the API keys.
fn keys_key() -> Key {
    Key {
        tenant: LOCAL_TENANT.to_string(),
        session: None,
    }
}

/// The document as a new session of `tenant` ([`stepwise_store::rekey_document`]), laid
/// out as this store keeps a session in memory.
fn rekey(
    tenant: &Tenant,
    user_id: &str,
    doc: SessionDocument,
    now: Timestamp,
) -> Result<Container> {
    let doc = stepwise_store::rekey_document(tenant, user_id, doc, now)?;
    let mut messages = doc.messages;
    messages.sort_by_key(|x| (x.created_at, x.id));
    let mut executions: Vec<ExecEntry> = doc
        .executions
        .into_iter()
        .map(|execution| ExecEntry {
            execution,
            steps: Default::default(),
            lease: None,
            resume_answer: None,
        })
        .collect();
    executions.sort_by(|a, b| {
        (a.execution.created_at, a.execution.id).cmp(&(b.execution.created_at, b.execution.id))
    });
    for step in doc.steps {
        if let Some(entry) = executions
            .iter_mut()
            .find(|e| e.execution.id == step.execution_id)
        {
            entry
                .steps
                .insert(step.step_number, StoredStep::Decoded(step));
        }
    }
    let mut snapshots = doc.snapshots;
    snapshots.sort_by_key(|x| (x.created_at, x.id));
    Ok(Container {
        session: Some(doc.session),
        messages,
        executions,
        snapshots,
        ..Container::default()
    })
}
