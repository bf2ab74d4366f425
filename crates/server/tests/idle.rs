//! An idle node does not poll the queue: its workers sleep on a doorbell (rung when a
//! message is queued or a run ends) with a slow fallback poll, so `/metrics` shows no
//! claim queries while nothing happens, and a posted message still starts at once.
//! (Its own test binary: the claim counter is per process.)

mod common;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use stepwise_server::Metered;
use stepwise_store_sqlite::SqliteStore;

use common::{metric, metrics_text, start_metered};

async fn claim_queries(client: &reqwest::Client, base: &str) -> f64 {
    metric(
        &metrics_text(client, base).await,
        "stepwise_claim_queries_total",
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_node_sends_no_claim_queries_and_a_message_still_starts_at_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Metered::new(SqliteStore::open(&dir.path().join("stepwise.db")).expect("open"));
    // A fallback poll far longer than this test: any claim below was rung for.
    let node = start_metered(store, 8, Duration::from_millis(1), Duration::from_secs(60)).await;
    let base = node.base_url();
    let client = reqwest::Client::new();

    // The workers look once when they start (work queued before a restart)...
    let deadline = Instant::now() + Duration::from_secs(30);
    while claim_queries(&client, &base).await < 1.0 {
        assert!(
            Instant::now() < deadline,
            "the workers never looked for work"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let at_start = claim_queries(&client, &base).await;
    // ...and then not again while nothing happens (8 workers used to poll every 300 ms).
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        claim_queries(&client, &base).await,
        at_start,
        "an idle node sent claim queries"
    );

    // A posted message rings the doorbell: it runs without waiting for the fallback poll.
    let answer: Value = client
        .post(format!("{base}/v1/messages"))
        .json(&json!({"content": "steps: 1"}))
        .send()
        .await
        .expect("post")
        .json()
        .await
        .expect("json");
    let execution = answer["execution"]["id"]
        .as_str()
        .expect("execution id")
        .to_string();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let current: Value = client
            .get(format!("{base}/v1/executions/{execution}"))
            .send()
            .await
            .expect("get")
            .json()
            .await
            .expect("json");
        if current["status"] == "completed" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the execution did not complete: {current}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // One claim for the message, one look when its run ended (and maybe one more for a
    // ring that arrived while claiming): a handful, not a poll.
    let after = claim_queries(&client, &base).await;
    assert!(
        after - at_start <= 4.0,
        "{} claim queries for one message",
        after - at_start
    );

    node.shutdown(Duration::from_secs(5)).await;
}
