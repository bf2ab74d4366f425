//! HTTP requests by route, method and status, with a latency histogram, for `/metrics`.
//! Routes are the matched path templates (`/v1/sessions/{id}`), so the label set stays small.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::middleware::Next;
use axum::response::Response;

/// Upper bounds of the latency buckets, in seconds (time to the response head; for event
/// streams that is when the stream opens).
const BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
];

#[derive(Default)]
struct Latency {
    buckets: [u64; BUCKETS.len()],
    count: u64,
    sum_secs: f64,
}

#[derive(Default)]
struct HttpFigures {
    /// (method, route, status) -> requests
    requests: BTreeMap<(String, String, u16), u64>,
    /// (method, route) -> latency
    latency: BTreeMap<(String, String), Latency>,
}

static FIGURES: Mutex<Option<HttpFigures>> = Mutex::new(None);

fn figures() -> MutexGuard<'static, Option<HttpFigures>> {
    // A panic while holding the lock leaves counters that are still usable.
    FIGURES
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Middleware (a route layer, so the matched path is known) counting every routed request.
pub async fn track(request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|path| path.as_str().to_string())
        .unwrap_or_else(|| "unmatched".to_string());
    let method = request.method().as_str().to_string();
    let started = Instant::now();
    let response = next.run(request).await;
    let secs = started.elapsed().as_secs_f64();
    let status = response.status().as_u16();
    let mut guard = figures();
    let figures = guard.get_or_insert_with(HttpFigures::default);
    *figures
        .requests
        .entry((method.clone(), route.clone(), status))
        .or_default() += 1;
    let latency = figures.latency.entry((method, route)).or_default();
    latency.count += 1;
    latency.sum_secs += secs;
    for (bucket, bound) in latency.buckets.iter_mut().zip(BUCKETS) {
        if secs <= bound {
            *bucket += 1;
        }
    }
    response
}

/// Appends the HTTP figures in Prometheus text format.
pub fn write_metrics(text: &mut String) {
    let guard = figures();
    let empty = HttpFigures::default();
    let figures = guard.as_ref().unwrap_or(&empty);
    let name = "stepwise_http_requests_total";
    text.push_str(&format!(
        "# HELP {name} HTTP requests by method, route and status.\n# TYPE {name} counter\n"
    ));
    for ((method, route, status), count) in &figures.requests {
        text.push_str(&format!(
            "{name}{{method=\"{method}\",route=\"{}\",status=\"{status}\"}} {count}\n",
            escape(route)
        ));
    }
    let name = "stepwise_http_request_duration_seconds";
    text.push_str(&format!(
        "# HELP {name} Time to the response head, by method and route.\n# TYPE {name} histogram\n"
    ));
    for ((method, route), latency) in &figures.latency {
        let labels = format!("method=\"{method}\",route=\"{}\"", escape(route));
        for (bound, count) in BUCKETS.iter().zip(latency.buckets) {
            text.push_str(&format!(
                "{name}_bucket{{{labels},le=\"{bound}\"}} {count}\n"
            ));
        }
        text.push_str(&format!(
            "{name}_bucket{{{labels},le=\"+Inf\"}} {}\n{name}_sum{{{labels}}} {}\n{name}_count{{{labels}}} {}\n",
            latency.count, latency.sum_secs, latency.count
        ));
    }
}

/// Label values escape backslash, quote and newline (route templates never hold them, but
/// a label must never break the format).
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}
