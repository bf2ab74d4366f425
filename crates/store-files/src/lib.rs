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
mod langgraph_store;
mod load;
mod messages;
mod operations;
mod queue;
mod retention;
mod sessions;
mod snapshots;
mod state;
mod steps;
mod workers;
mod writer;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use serde_json::Value;
use stepwise_core::{Event, Id, SharedClock, Timestamp, system_clock};
use stepwise_store::{Ack, EventHub, Result, Store, StoreError, Tenant, WorkerSeen};
use tokio::sync::broadcast;

pub use disk::{
    FileEvent, INDEX_FILE, IndexEntry, IndexFile, LOCAL_TENANT, METADATA_FILE, Runtime,
    TENANTS_DIR, tenant_dir,
};
pub use load::{OpenReport, SkippedFile};

use crate::state::{State, TenantState};
use stepwise_store::prelude::*;

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
    /// Held by a write that queues an execution only while its session has none
    /// (`IfBusy::Refuse`): its check and its separate writes are one step.
    refusing: tokio::sync::Mutex<()>,
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
                refusing: tokio::sync::Mutex::new(()),
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
    /// JSON files keep no LangGraph checkpoints: those need the SQLite or PostgreSQL backend.
    type Checkpoints = stepwise_store::NoCheckpoints;

    fn checkpoints(&self) -> Option<&Self::Checkpoints> {
        None
    }

    fn backend_name(&self) -> &'static str {
        "files"
    }
}
