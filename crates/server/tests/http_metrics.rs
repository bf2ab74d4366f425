//! `/metrics` counts HTTP requests by method, matched route and status, with latency.

mod common;

use common::TestServer;

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
