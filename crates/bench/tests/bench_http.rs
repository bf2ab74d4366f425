//! The HTTP benchmark runs end to end (tiny sizes here; the real figures come from
//! `cargo test --release -p stepwise-bench --test bench_http -- --ignored --nocapture`).

use std::time::Duration;

use stepwise_bench::http_figures::{HttpBenchOptions, run_http_bench};
use stepwise_store_sqlite::SqliteStore;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http_benchmark_measures_every_figure() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = SqliteStore::open(&dir.path().join("bench.db")).expect("store");
    let options = HttpBenchOptions {
        clients: 4,
        accept_duration: Duration::from_millis(300),
        subscriber_counts: vec![1, 5],
        latency_events: 10,
        event_interval: Duration::from_millis(1),
        idle_subscribers: 5,
    };
    let report = run_http_bench(store, &options).await.expect("bench");
    assert!(report.messages.accepted > 0);
    assert_eq!(report.messages.errors, 0);
    assert_eq!(report.latency.len(), 2);
    assert_eq!(report.latency[0].samples, 10);
    assert_eq!(
        report.latency[1].samples, 50,
        "every subscriber got every event"
    );
    assert_eq!(report.idle.subscribers, 5);
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "the full-size benchmark; run explicitly"]
async fn full_http_benchmark() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = SqliteStore::open(&dir.path().join("bench.db")).expect("store");
    let report = run_http_bench(store, &HttpBenchOptions::default())
        .await
        .expect("bench");
    println!(
        "{}",
        serde_json::to_string_pretty(&report).unwrap_or_default()
    );
}

/// Memory of a separately started server: `STEPWISE_BENCH_URL=http://127.0.0.1:PORT
/// STEPWISE_BENCH_PID=PID cargo test --release -p stepwise-bench --test bench_http -- --ignored idle`.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs a running server; run explicitly"]
async fn idle_subscribers_rss_of_a_running_server() {
    let (Ok(url), Ok(pid)) = (
        std::env::var("STEPWISE_BENCH_URL"),
        std::env::var("STEPWISE_BENCH_PID"),
    ) else {
        return;
    };
    let pid: u32 = pid.parse().expect("a pid");
    let figure = stepwise_bench::http_figures::idle_server_rss(&url, pid, 1000)
        .await
        .expect("bench");
    println!(
        "{}",
        serde_json::to_string_pretty(&figure).unwrap_or_default()
    );
}
