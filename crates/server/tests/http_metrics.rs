//! `/metrics` counts HTTP requests by method, matched route and status, with latency;
//! times saves and loads; counts sessions and executions by status. Request ids.

mod common;

use std::time::{Duration, Instant};

use common::TestServer;
use serde_json::{Value, json};
use stepwise_server::{Metered, Node};
use stepwise_store_sqlite::SqliteStore;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_are_counted_by_route_template_and_status() {
    let server = TestServer::start().await;
    let (status, _) = server.get("/v1/sessions").await;
    assert_eq!(status, 200);
    let missing = "/v1/sessions/01a203c7-9719-73c1-8b5b-59d3d1e216c0";
    let (status, _) = server.get(missing).await;
    assert_eq!(status, 404);
    let text = server
        .client
        .get(server.url("/metrics"))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("metrics text");
    for line in [
        "# TYPE stepwise_http_requests_total counter",
        "stepwise_http_requests_total{method=\"GET\",route=\"/v1/sessions\",status=\"200\"} ",
        "stepwise_http_requests_total{method=\"GET\",route=\"/v1/sessions/{id}\",status=\"404\"} ",
        "# TYPE stepwise_http_request_duration_seconds histogram",
        "stepwise_http_request_duration_seconds_bucket{method=\"GET\",route=\"/v1/sessions/{id}\",le=\"+Inf\"} ",
        "stepwise_http_request_duration_seconds_count{method=\"GET\",route=\"/v1/sessions\"} ",
    ] {
        assert!(text.contains(line), "missing {line:?} in:\n{text}");
    }
    // The id itself is never a label: one series per route template.
    assert!(!text.contains("01a203c7-9719"), "{text}");
    server.stop().await;
}

/// A real node whose store is wrapped in [`Metered`], as `stepwise serve` runs it.
struct MeteredServer {
    base: String,
    client: reqwest::Client,
    node: Node<Metered<SqliteStore>>,
    _dir: tempfile::TempDir,
}

impl MeteredServer {
    async fn start() -> MeteredServer {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Metered::new(SqliteStore::open(&dir.path().join("stepwise.db")).expect("open"));
        let node = common::start_metered(
            store,
            2,
            Duration::from_millis(5),
            Duration::from_millis(50),
        )
        .await;
        MeteredServer {
            base: node.base_url(),
            client: reqwest::Client::new(),
            node,
            _dir: dir,
        }
    }

    async fn get_json(&self, path: &str) -> Value {
        self.client
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .expect("request")
            .json()
            .await
            .expect("json")
    }

    async fn metrics(&self) -> String {
        self.client
            .get(format!("{}/metrics", self.base))
            .send()
            .await
            .expect("metrics")
            .text()
            .await
            .expect("metrics text")
    }

    async fn stop(self) {
        self.node.shutdown(Duration::from_secs(5)).await;
    }
}

/// The value of the series `name` (with its labels) in a metrics text.
fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or_else(|| panic!("no series {series} in:\n{text}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_message_shows_in_save_latency_and_status_counts() {
    let server = MeteredServer::start().await;
    let answer: Value = server
        .client
        .post(format!("{}/v1/messages", server.base))
        .json(&json!({"content": "steps: 2"}))
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
    let session = answer["session_id"]
        .as_str()
        .expect("session id")
        .to_string();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let current = server
            .get_json(&format!("/v1/executions/{execution}"))
            .await;
        if current["status"] == "completed" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the execution did not complete: {current}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let memory = server
        .get_json(&format!("/v1/sessions/{session}/memory"))
        .await;
    assert_eq!(memory["restored"], "full", "{memory}");

    let text = server.metrics().await;
    assert!(
        text.contains("# TYPE stepwise_save_duration_seconds histogram"),
        "{text}"
    );
    assert!(
        sample(&text, "stepwise_save_duration_seconds_count{kind=\"step\"}") >= 3.0,
        "two action steps and a final answer were saved: {text}"
    );
    assert!(
        sample(
            &text,
            "stepwise_save_duration_seconds_count{kind=\"event\"}"
        ) > 0.0
    );
    assert!(
        sample(
            &text,
            "stepwise_save_duration_seconds_count{kind=\"message\"}"
        ) > 0.0
    );
    assert!(
        sample(
            &text,
            "stepwise_load_duration_seconds_count{kind=\"memory\"}"
        ) > 0.0
    );
    assert!(sample(&text, "stepwise_sessions_by_status{status=\"active\"}") >= 1.0);
    assert!(sample(&text, "stepwise_executions_by_status{status=\"completed\"}") >= 1.0);
    for series in [
        "stepwise_queue_depth",
        "stepwise_executions_running",
        "stepwise_intake_limit",
        "stepwise_intake_waited_total",
        "stepwise_sse_subscribers",
        "stepwise_store_bytes",
        "stepwise_save_errors_total",
        "stepwise_decode_errors_total",
    ] {
        sample(&text, series);
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_ids_are_echoed_or_generated() {
    let server = TestServer::start().await;
    let given = server
        .client
        .get(server.url("/v1/sessions"))
        .header("x-request-id", "trace-abc.123")
        .send()
        .await
        .expect("request");
    assert_eq!(given.status(), 200);
    assert_eq!(
        given
            .headers()
            .get("x-request-id")
            .and_then(|v| v.to_str().ok()),
        Some("trace-abc.123")
    );

    // None given, or one that is not 1-128 visible ASCII characters: a fresh one.
    let too_long = "x".repeat(129);
    for header in [None, Some("has space"), Some(too_long.as_str())] {
        let mut request = server.client.get(server.url("/healthz"));
        if let Some(value) = header {
            request = request.header("x-request-id", value);
        }
        let response = request.send().await.expect("request");
        let id = response
            .headers()
            .get("x-request-id")
            .and_then(|v| v.to_str().ok())
            .expect("a generated request id")
            .to_string();
        assert!(!id.is_empty() && id.len() <= 128, "{id}");
        assert_ne!(Some(id.as_str()), header);
    }
    // Errors carry one too.
    let missing = server
        .client
        .get(server.url("/v1/no-such-thing"))
        .send()
        .await
        .expect("request");
    assert_eq!(missing.status(), 404);
    assert!(missing.headers().contains_key("x-request-id"));
    server.stop().await;
}
