//! The writer thread. Calls change the in-memory state at once and mark the files they
//! touched; the writer takes everything marked so far as one batch (many changes to one
//! session become one rewrite of its file), writes each file atomically, removes files of
//! deleted or renamed sessions, rewrites the indexes, fsyncs the folders, and only then
//! answers the callers and publishes the batch's events.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use stepwise_core::Event;
use stepwise_store::{Result, StoreError};

use crate::Shared;
use crate::disk::{self, INDEX_FILE, LOCAL_TENANT, METADATA_FILE, session_path, stem_of};
use crate::state::{Finish, Key, State};

pub(crate) struct Batch {
    /// Session files and `metadata.json` files, then removals, then indexes.
    writes: Vec<(PathBuf, Vec<u8>)>,
    removals: Vec<PathBuf>,
    indexes: Vec<(PathBuf, Vec<u8>)>,
    dirs: BTreeSet<PathBuf>,
    finishes: Vec<Finish>,
    events: Vec<Arc<Event>>,
    /// What to mark again if the batch fails, so the next one retries it.
    retry_keys: Vec<Key>,
    retry_indexes: Vec<String>,
    retry_removals: Vec<(String, String)>,
    encode_error: Option<String>,
}

/// Takes everything pending and encodes it (under the state lock, so every file is a
/// consistent picture).
pub(crate) fn take_batch(state: &mut State) -> Batch {
    let pending = std::mem::take(&mut state.pending);
    let mut batch = Batch {
        writes: Vec::new(),
        removals: Vec::new(),
        indexes: Vec::new(),
        dirs: BTreeSet::new(),
        finishes: pending.finishes,
        events: pending.events,
        retry_keys: pending.dirty.iter().cloned().collect(),
        retry_indexes: pending.index_dirty.iter().cloned().collect(),
        retry_removals: pending.removals.clone(),
        encode_error: None,
    };
    for key in &pending.dirty {
        let Some(ts) = state.tenants.get(&key.tenant) else {
            continue;
        };
        let (path, encoded) = match key.session {
            Some(id) => {
                // Deleted since it was marked: its removal is queued instead.
                let Some(container) = ts.sessions.get(&id) else {
                    continue;
                };
                let Some(session) = container.session.as_ref() else {
                    continue;
                };
                let Some(path) = session_path(&ts.dir, &stem_of(session)) else {
                    continue;
                };
                (path, disk::encode_container(&key.tenant, container, None))
            }
            None => {
                let keys = (key.tenant == LOCAL_TENANT).then_some(disk::RootKeys {
                    api_keys: &state.api_keys,
                    signing_keys: &state.signing_keys,
                });
                (
                    ts.dir.join(METADATA_FILE),
                    disk::encode_container(&key.tenant, &ts.loose, keys),
                )
            }
        };
        match encoded {
            Ok(bytes) => {
                batch.dirs.insert(ts.dir.clone());
                batch.writes.push((path, bytes));
            }
            Err(e) => batch.encode_error = Some(e.to_string()),
        }
    }
    for (tenant, stem) in pending.removals {
        let Some(ts) = state.tenants.get(&tenant) else {
            continue;
        };
        // The stem may belong to another session by now: then its write replaces the file.
        if ts.stems.contains_key(&stem) || ts.blocked_stems.contains(&stem) {
            continue;
        }
        if let Some(path) = session_path(&ts.dir, &stem) {
            batch.dirs.insert(ts.dir.clone());
            batch.removals.push(path);
        }
    }
    for tenant in &pending.index_dirty {
        let Some(ts) = state.tenants.get(tenant) else {
            continue;
        };
        let index = disk::build_index(tenant, ts.sessions.values());
        match disk::encode_index(&index) {
            Ok(bytes) => {
                batch.dirs.insert(ts.dir.clone());
                batch.indexes.push((ts.dir.join(INDEX_FILE), bytes));
            }
            Err(e) => batch.encode_error = Some(e.to_string()),
        }
    }
    batch
}

impl Batch {
    /// Writes the batch. Returns the new sizes of the files written (`None`: removed).
    pub(crate) fn write(&self) -> std::io::Result<Vec<(PathBuf, Option<u64>)>> {
        if let Some(e) = &self.encode_error {
            return Err(std::io::Error::other(format!("cannot encode a file: {e}")));
        }
        let mut sizes = Vec::new();
        for dir in &self.dirs {
            std::fs::create_dir_all(dir)?;
        }
        for (path, bytes) in &self.writes {
            disk::write_atomic(path, bytes)?;
            sizes.push((path.clone(), Some(bytes.len() as u64)));
        }
        for path in &self.removals {
            match std::fs::remove_file(path) {
                Ok(()) => sizes.push((path.clone(), None)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        for (path, bytes) in &self.indexes {
            disk::write_atomic(path, bytes)?;
            sizes.push((path.clone(), Some(bytes.len() as u64)));
        }
        for dir in &self.dirs {
            disk::sync_dir(dir)?;
            // A new tenant folder must itself be durable in its parent.
            if let Some(parent) = dir.parent()
                && parent.file_name().is_some_and(|n| n == disk::TENANTS_DIR)
            {
                disk::sync_dir(parent)?;
            }
        }
        Ok(sizes)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.writes.is_empty() && self.removals.is_empty() && self.indexes.is_empty()
    }
}

/// Runs one batch now, on this thread (used at open, before the writer starts).
pub(crate) fn write_now(state: &mut State) -> std::io::Result<()> {
    let batch = take_batch(state);
    let sizes = batch.write()?;
    apply_sizes(state, sizes);
    Ok(())
}

fn apply_sizes(state: &mut State, sizes: Vec<(PathBuf, Option<u64>)>) {
    for (path, size) in sizes {
        match size {
            Some(size) => state.file_sizes.insert(path, size),
            None => state.file_sizes.remove(&path),
        };
    }
}

pub(crate) fn run(shared: Arc<Shared>) {
    let mut failures = 0u32;
    loop {
        let batch = {
            let mut state = shared.lock();
            while state.pending.is_empty() && !state.closed {
                state = shared.wake.wait(state).unwrap_or_else(|e| e.into_inner());
            }
            if state.pending.is_empty() {
                return;
            }
            state.in_flight = true;
            take_batch(&mut state)
        };
        let written = if batch.is_empty() {
            Ok(Vec::new())
        } else {
            batch.write()
        };
        let Batch {
            finishes,
            events,
            retry_keys,
            retry_indexes,
            retry_removals,
            ..
        } = batch;
        let result: Result<()> = {
            let mut state = shared.lock();
            state.in_flight = false;
            match written {
                Ok(sizes) => {
                    failures = 0;
                    apply_sizes(&mut state, sizes);
                    shared.writable.store(true, Ordering::Relaxed);
                    Ok(())
                }
                Err(e) => {
                    failures += 1;
                    shared
                        .save_errors
                        .fetch_add(finishes.len().max(1) as u64, Ordering::Relaxed);
                    tracing::error!(error = %e, attempt = failures, "writing session files failed; will retry");
                    let give_up = state.closed && failures >= 3;
                    if !give_up {
                        // Everything marked stays marked: the next batch rewrites it whole.
                        state.pending.dirty.extend(retry_keys);
                        state.pending.index_dirty.extend(retry_indexes);
                        let mut removals = retry_removals;
                        removals.append(&mut state.pending.removals);
                        state.pending.removals = removals;
                        // Events are published once they are durable, after a retry.
                        let mut pending_events = events.clone();
                        pending_events.append(&mut state.pending.events);
                        state.pending.events = pending_events;
                    }
                    if e.kind() == std::io::ErrorKind::StorageFull {
                        shared.writable.store(false, Ordering::Relaxed);
                        Err(StoreError::StorageFull(format!(
                            "cannot write the session files: {e}"
                        )))
                    } else {
                        Err(StoreError::Unavailable(format!(
                            "cannot write the session files: {e}"
                        )))
                    }
                }
            }
        };
        let ok = result.is_ok();
        for finish in finishes {
            finish(result.clone());
        }
        if ok {
            for event in events {
                shared.hub.publish(event);
            }
        } else {
            // Do not spin on a full or broken disk; new work still wakes us at once.
            let backoff = Duration::from_millis(50 * u64::from(failures.min(20)));
            let state = shared.lock();
            let _ = shared.wake.wait_timeout(state, backoff);
        }
    }
}
