//! The storage conformance suite against PostgreSQL, every store in a fresh database.

mod common;

use std::collections::HashMap;
use std::sync::Mutex;

use common::{TestDatabases, postgres_or_skip};
use stepwise_core::{Id, SharedClock};
use stepwise_store_postgres::PgStore;
use stepwise_store_tests::{Corruption, Harness};

struct PgHarness {
    databases: TestDatabases,
    urls: Mutex<HashMap<usize, String>>,
}

impl PgHarness {
    fn new(admin: String) -> Self {
        PgHarness {
            databases: TestDatabases::new(admin),
            urls: Mutex::new(HashMap::new()),
        }
    }
}

impl Harness for PgHarness {
    type Store = PgStore;

    async fn fresh(&self, clock: SharedClock) -> PgStore {
        let url = self.databases.create().await;
        let store = TestDatabases::store(&url, clock).await;
        self.urls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(store.identity(), url);
        store
    }

    async fn reopen(&self, store: PgStore, clock: SharedClock) -> Option<PgStore> {
        let url = self
            .urls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&store.identity())
            .cloned()?;
        store.close().await.ok()?;
        let reopened = TestDatabases::store(&url, clock).await;
        self.urls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(reopened.identity(), url);
        Some(reopened)
    }

    async fn corrupt_step(
        &self,
        store: &PgStore,
        execution_id: Id,
        step_number: u32,
        how: Corruption,
    ) -> bool {
        let Some(url) = self
            .urls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&store.identity())
            .cloned()
        else {
            return false;
        };
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
        let Ok((client, connection)) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await
        else {
            return false;
        };
        tokio::spawn(async move {
            let _ = connection.await;
        });
        client
            .execute(
                "UPDATE steps SET payload = $1 WHERE execution_id = $2 AND step_number = $3",
                &[&payload, &execution_id, &(step_number as i32)],
            )
            .await
            .ok()
            == Some(1)
    }
}

/// One test per conformance case, each skipped loudly when PostgreSQL is not there (and
/// failing under CI). The list is checked against the suite's own below.
macro_rules! pg_conformance {
    ($($case:ident)*) => {
        $(
            #[test]
            fn $case() {
                let Some(admin) = postgres_or_skip() else { return };
                stepwise_store_tests::run_case(stringify!($case), &[], async move {
                    let harness = PgHarness::new(admin);
                    stepwise_store_tests::cases::$case(&harness).await;
                });
            }
        )*

        #[test]
        fn every_conformance_case_runs_on_postgres() {
            let ours: &[&str] = &[$(stringify!($case)),*];
            for case in stepwise_store_tests::CASES {
                assert!(ours.contains(case), "the conformance case `{case}` is not run against PostgreSQL");
            }
        }
    };
}

pg_conformance! {
    sessions
    session_names
    list_sessions
    list_sessions_pagination
    messages
    executions
    execution_transitions
    queued_ending
    execution_with_messages
    remove_executions
    queue_claims
    queue_leases
    queue_resume
    queue_pause_is_not_an_attempt
    queue_concurrent_claims
    queue_claim_batch
    queue_concurrent_claim_batches
    queue_deep
    queue_model
    queue_claim_filter
    session_agent
    workers_seen
    steps
    concurrent_step_writers
    session_cache
    session_message_cache
    fire_and_forget
    queued_messages
    step_mirrored
    snapshots
    events
    events_live
    tenant_isolation
    retention_mark_abandoned
    retention_abandoned_comes_back
    retention_per_tenant
    retention_cleanup
    corruption_recovery
    restore_after_reopen
    import_document
    api_keys
    signing_keys
    operations
    checkpoints_put_get
    checkpoint_writes
    checkpoints_list
    checkpoint_threads
    checkpoint_isolation
    checkpoint_export_import
    checkpoint_write_refs
    checkpoint_events
    langgraph_store_items
    langgraph_store_search
    langgraph_store_ttl
    langgraph_store_isolation
}
