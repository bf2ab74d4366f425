//! The storage conformance suite, run against folders of JSON files.
//!
//! Every case runs. One corruption kind does not apply: `Corruption::BrokenZstd` damages a
//! compressed payload, and this backend stores steps as plain JSON (human-readable by
//! design), so `corrupt_step` answers `false` for it and `corruption_recovery` checks the
//! other two kinds (a step whose fields have the wrong types, and a step of a kind from a
//! newer build). Damage is done the way a person would do it: edit the file on disk, then
//! `FileStore::reload` picks the edit up.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Value, json};
use stepwise_core::{Id, SharedClock};
use stepwise_store::prelude::*;
use stepwise_store_files::{FileOptions, FileStore};
use stepwise_store_tests::{Corruption, Harness};

struct FilesHarness {
    dir: tempfile::TempDir,
    next: AtomicU64,
}

impl FilesHarness {
    fn new() -> Self {
        let dir = tempfile::tempdir()
            .unwrap_or_else(|e| panic!("cannot create a temporary directory: {e}"));
        FilesHarness {
            dir,
            next: AtomicU64::new(0),
        }
    }

    fn open(path: &Path, clock: SharedClock) -> FileStore {
        FileStore::open_with(path, FileOptions { clock })
            .unwrap_or_else(|e| panic!("cannot open {}: {e}", path.display()))
    }
}

/// Every `.json` file under `dir`, tenant folders included.
fn json_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(json_files(&path));
        } else if path.extension().is_some_and(|e| e == "json") {
            out.push(path);
        }
    }
    out
}

fn damage_step(dir: &Path, execution_id: Id, step_number: u32, how: Corruption) -> bool {
    let exec = execution_id.to_string();
    for path in json_files(dir) {
        let Ok(bytes) = std::fs::read(&path) else {
            continue;
        };
        let Ok(mut doc) = serde_json::from_slice::<Value>(&bytes) else {
            continue;
        };
        let Some(steps) = doc.get_mut("steps").and_then(Value::as_array_mut) else {
            continue;
        };
        let Some(step) = steps
            .iter_mut()
            .find(|s| s["execution_id"] == json!(exec) && s["step_number"] == json!(step_number))
        else {
            continue;
        };
        match how {
            // A hand edit gone wrong: the fields no longer have their types.
            Corruption::BadJson => {
                step["tool_calls"] = json!("{\"name\": tru");
                step["token_usage"] = json!(false);
            }
            // A step written by a newer build, with a kind this one does not know.
            Corruption::FutureVersion => {
                step["kind"] = json!("teleport");
                step["format_version"] = json!(99);
            }
            Corruption::BrokenZstd => return false,
        }
        let Ok(text) = serde_json::to_vec_pretty(&doc) else {
            return false;
        };
        return std::fs::write(&path, text).is_ok();
    }
    false
}

impl Harness for FilesHarness {
    type Store = FileStore;

    async fn fresh(&self, clock: SharedClock) -> FileStore {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let path = self.dir.path().join(format!("store-{n}"));
        tokio::task::spawn_blocking(move || Self::open(&path, clock))
            .await
            .unwrap_or_else(|e| panic!("opening the store panicked: {e}"))
    }

    async fn reopen(&self, store: FileStore, clock: SharedClock) -> Option<FileStore> {
        let path = store.dir().to_path_buf();
        store.close().await.ok()?;
        tokio::task::spawn_blocking(move || Self::open(&path, clock))
            .await
            .ok()
    }

    async fn corrupt_step(
        &self,
        store: &FileStore,
        execution_id: Id,
        step_number: u32,
        how: Corruption,
    ) -> bool {
        if how == Corruption::BrokenZstd {
            return false;
        }
        if store.flush().await.is_err() {
            return false;
        }
        let dir = store.dir().to_path_buf();
        let damaged =
            tokio::task::spawn_blocking(move || damage_step(&dir, execution_id, step_number, how))
                .await
                .unwrap_or(false);
        damaged && store.reload().await.is_ok()
    }
}

// Checkpoints and the store (LangGraph) need the SQLite or PostgreSQL backend: this one
// answers every checkpoint call with `InvalidState` (see `files_refuse_checkpoints` in
// tests/files.rs), and every store call too (`langgraph_store.rs`).
stepwise_store_tests::conformance_tests!(FilesHarness::new(); skip = [
    checkpoints_put_get,
    checkpoint_writes,
    checkpoints_list,
    checkpoint_threads,
    checkpoint_isolation,
    checkpoint_export_import,
    checkpoint_write_refs,
    checkpoint_events,
    langgraph_store_items,
    langgraph_store_search,
    langgraph_store_ttl,
    langgraph_store_isolation,
]);
