//! Work queued while a node was down is claimed in one batch when it starts: the claimer
//! claims for every free worker with one claim query (`stepwise_claim_queries_total`), and
//! each execution runs on its own worker at the same time.
//! (Its own test binary: the claim counter is per process.)

mod common;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use stepwise_core::ExecutionStatus;
use stepwise_engine::DEMO_AGENT;
use stepwise_server::Metered;
use stepwise_store::{NewExecution, NewSession, Tenant};
use stepwise_store_sqlite::SqliteStore;

use common::{metric, metrics_text, start_metered};
use stepwise_store::prelude::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn executions_queued_before_start_are_claimed_together_in_one_query() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Metered::new(SqliteStore::open(&dir.path().join("stepwise.db")).expect("open"));
    // Three sessions with a queued message each, as a node that stopped would leave them.
    let tenant = Tenant::new("local").expect("tenant");
    let mut queued = Vec::new();
    for n in 0..3 {
        let session = store
            .create_session(
                &tenant,
                NewSession {
                    user_id: format!("user-{n}"),
                    ..Default::default()
                },
            )
            .await
            .expect("session");
        let execution = store
            .create_execution(
                &tenant,
                NewExecution {
                    session_id: Some(session.id),
                    parent_execution_id: None,
                    user_id: format!("user-{n}"),
                    agent_type: DEMO_AGENT.into(),
                    agent_config: Value::Null,
                    input: json!({"message": "steps: 20"}),
                    metadata: Value::Null,
                    status: ExecutionStatus::Pending,
                    lease: None,
                },
            )
            .await
            .expect("execution");
        queued.push(execution.id);
    }
    store.flush().await.expect("flush");

    // Steps slow enough that all three are still running when the test looks; a fallback
    // poll far longer than the test.
    let node = start_metered(
        store,
        4,
        Duration::from_millis(500),
        Duration::from_secs(60),
    )
    .await;
    let base = node.base_url();
    let client = reqwest::Client::new();

    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut running = 0;
        for id in &queued {
            let execution: Value = client
                .get(format!("{base}/v1/executions/{id}"))
                .send()
                .await
                .expect("get")
                .json()
                .await
                .expect("json");
            assert_ne!(
                execution["status"], "completed",
                "an execution finished before the others started: {execution}"
            );
            if execution["status"] == "running" {
                running += 1;
            }
        }
        if running == queued.len() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "only {running} of {} executions started",
            queued.len()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // One query claimed all three for three of the four workers; the claimer then found
    // nothing more and sleeps (nothing has ended yet to ring it).
    assert_eq!(
        metric(
            &metrics_text(&client, &base).await,
            "stepwise_claim_queries_total"
        ),
        1.0,
        "three queued executions took more than one claim query"
    );

    node.shutdown(Duration::from_secs(5)).await;
}
