//! The storage conformance suite, run against SQLite files in a temporary directory.

use std::sync::atomic::{AtomicU64, Ordering};

use stepwise_core::{Id, SharedClock};
use stepwise_store_sqlite::{SqliteOptions, SqliteStore};
use stepwise_store_tests::{Corruption, Harness};

struct SqliteHarness {
    dir: tempfile::TempDir,
    next: AtomicU64,
}

impl SqliteHarness {
    fn new() -> Self {
        let dir = tempfile::tempdir()
            .unwrap_or_else(|e| panic!("cannot create a temporary directory: {e}"));
        SqliteHarness {
            dir,
            next: AtomicU64::new(0),
        }
    }

    fn open(path: &std::path::Path, clock: SharedClock) -> SqliteStore {
        let options = SqliteOptions {
            clock,
            ..SqliteOptions::default()
        };
        SqliteStore::open_with(path, options)
            .unwrap_or_else(|e| panic!("cannot open {}: {e}", path.display()))
    }
}

impl Harness for SqliteHarness {
    type Store = SqliteStore;

    async fn fresh(&self, clock: SharedClock) -> SqliteStore {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let path = self.dir.path().join(format!("store-{n}.db"));
        tokio::task::spawn_blocking(move || Self::open(&path, clock))
            .await
            .unwrap_or_else(|e| panic!("opening the store panicked: {e}"))
    }

    async fn reopen(&self, store: SqliteStore, clock: SharedClock) -> Option<SqliteStore> {
        let path = store.path().to_path_buf();
        // Dropping the last handle drains the queue and joins the writer thread.
        tokio::task::spawn_blocking(move || {
            drop(store);
            Self::open(&path, clock)
        })
        .await
        .ok()
    }

    async fn corrupt_step(
        &self,
        store: &SqliteStore,
        execution_id: Id,
        step_number: u32,
        how: Corruption,
    ) -> bool {
        let path = store.path().to_path_buf();
        let payload: Vec<u8> = match how {
            Corruption::BadJson => b"{\"version\": 2, \"model_output\": tru".to_vec(),
            Corruption::FutureVersion => {
                b"{\"version\": 99, \"model_output\": \"from the future\"}".to_vec()
            }
            // A zstd frame header declaring 16 bytes, followed by a block that cannot inflate.
            Corruption::BrokenZstd => vec![
                0x28, 0xB5, 0x2F, 0xFD, 0x20, 0x10, 0xFF, 0xFF, 0xFF, 0x07, 0x00,
            ],
        };
        tokio::task::spawn_blocking(move || {
            let conn = rusqlite::Connection::open(&path).ok()?;
            conn.busy_timeout(std::time::Duration::from_secs(5)).ok()?;
            conn.execute(
                "UPDATE steps SET payload = ?1 WHERE execution_id = ?2 AND step_number = ?3",
                rusqlite::params![payload, execution_id.as_bytes().to_vec(), step_number],
            )
            .ok()
        })
        .await
        .ok()
        .flatten()
            == Some(1)
    }
}

stepwise_store_tests::conformance_tests!(SqliteHarness::new());
