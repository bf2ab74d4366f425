//! `GET /metrics`: Prometheus text of the queue, the running executions, the event streams,
//! the connections, the store and the retention cleaner (served on the main listener and on
//! `serve --metrics-listen`).

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use stepwise_core::{ExecutionStatus, SessionStatus};
use stepwise_store::{CleanupReport, StatusCounts, Store};

use crate::AppState;

/// Retention cleaner figures since start: the cleaner (`crate::cleaner`) reports each pass here.
static RETENTION_PASSES: AtomicU64 = AtomicU64::new(0);
static RETENTION_FAILURES: AtomicU64 = AtomicU64::new(0);
static RETENTION_MARKED: AtomicU64 = AtomicU64::new(0);
/// sessions, messages, executions, steps, snapshots, events
static RETENTION_DELETED: [AtomicU64; 6] = [const { AtomicU64::new(0) }; 6];
const RETENTION_KINDS: [&str; 6] = [
    "sessions",
    "messages",
    "executions",
    "steps",
    "snapshots",
    "events",
];

/// Counts one retention pass for `/metrics`.
pub fn record_retention_pass(marked_abandoned: u64, deleted: &CleanupReport) {
    RETENTION_PASSES.fetch_add(1, Ordering::Relaxed);
    RETENTION_MARKED.fetch_add(marked_abandoned, Ordering::Relaxed);
    let counts = [
        deleted.sessions,
        deleted.messages,
        deleted.executions,
        deleted.steps,
        deleted.snapshots,
        deleted.events,
    ];
    for (total, n) in RETENTION_DELETED.iter().zip(counts) {
        total.fetch_add(n, Ordering::Relaxed);
    }
}

static RETENTION_SKIPPED: AtomicU64 = AtomicU64::new(0);

/// Counts a pass skipped because another node held the retention lock.
pub fn record_retention_skipped() {
    RETENTION_SKIPPED.fetch_add(1, Ordering::Relaxed);
}

/// Counts a retention pass that failed (the store answered an error).
pub fn record_retention_failure() {
    RETENTION_PASSES.fetch_add(1, Ordering::Relaxed);
    RETENTION_FAILURES.fetch_add(1, Ordering::Relaxed);
}

fn retention_metrics(text: &mut String) {
    let mut counter = |name: &str, help: &str, value: u64| {
        text.push_str(&format!(
            "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}\n"
        ));
    };
    counter(
        "stepwise_retention_passes_total",
        "Retention cleaner passes run.",
        RETENTION_PASSES.load(Ordering::Relaxed),
    );
    counter(
        "stepwise_retention_failures_total",
        "Retention cleaner passes that failed.",
        RETENTION_FAILURES.load(Ordering::Relaxed),
    );
    counter(
        "stepwise_retention_skipped_total",
        "Retention passes skipped because another node held the retention lock.",
        RETENTION_SKIPPED.load(Ordering::Relaxed),
    );
    counter(
        "stepwise_retention_marked_abandoned_total",
        "Idle active sessions the cleaner marked abandoned.",
        RETENTION_MARKED.load(Ordering::Relaxed),
    );
    let name = "stepwise_retention_deleted_total";
    text.push_str(&format!(
        "# HELP {name} Rows the retention cleaner deleted, by kind.\n# TYPE {name} counter\n"
    ));
    for (kind, total) in RETENTION_KINDS.iter().zip(&RETENTION_DELETED) {
        let value = total.load(Ordering::Relaxed);
        text.push_str(&format!("{name}{{kind=\"{kind}\"}} {value}\n"));
    }
}

/// How long a count of sessions and executions by status is served from memory.
pub const STATUS_CACHE_TTL: Duration = Duration::from_secs(5);

/// The last count by status and when it was taken.
#[derive(Default)]
pub struct StatusCache(tokio::sync::Mutex<Option<(Instant, StatusCounts)>>);

impl StatusCache {
    /// The cached counts while fresh, else a new count (one scrape at a time asks the
    /// store; the others wait for its answer). `None` when the store cannot answer.
    async fn get<S: Store>(&self, store: &S) -> Option<StatusCounts> {
        let mut cached = self.0.lock().await;
        if let Some((at, counts)) = cached.as_ref()
            && at.elapsed() < STATUS_CACHE_TTL
        {
            return Some(counts.clone());
        }
        match store.count_by_status().await {
            Ok(counts) => {
                *cached = Some((Instant::now(), counts.clone()));
                Some(counts)
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot count sessions and executions by status");
                None
            }
        }
    }
}

fn status_gauges(text: &mut String, counts: &StatusCounts) {
    let name = "stepwise_sessions_by_status";
    text.push_str(&format!(
        "# HELP {name} Sessions in each status (every tenant).\n# TYPE {name} gauge\n"
    ));
    for status in SessionStatus::ALL {
        let n: u64 = counts
            .sessions
            .iter()
            .filter(|(s, _)| s == status)
            .map(|(_, n)| n)
            .sum();
        text.push_str(&format!("{name}{{status=\"{}\"}} {n}\n", status.as_str()));
    }
    let name = "stepwise_executions_by_status";
    text.push_str(&format!(
        "# HELP {name} Executions in each status (every tenant).\n# TYPE {name} gauge\n"
    ));
    for status in ExecutionStatus::ALL {
        let n: u64 = counts
            .executions
            .iter()
            .filter(|(s, _)| s == status)
            .map(|(_, n)| n)
            .sum();
        text.push_str(&format!("{name}{{status=\"{}\"}} {n}\n", status.as_str()));
    }
}

#[utoipa::path(get, path = "/metrics", tag = "operations", operation_id = "metrics", security(),
    responses((status = 200, content_type = "text/plain", body = String)))]
#[allow(dead_code)]
pub(crate) fn doc() {}

/// Prometheus text: queue depth, running executions, SSE subscribers, store figures.
pub async fn metrics<S: Store>(State(state): State<AppState<S>>) -> Response {
    let store = state.store();
    let mut text = String::new();
    let mut gauge = |name: &str, help: &str, value: u64| {
        // Prometheus convention: a `_total` series only goes up, so it is a counter.
        let kind = if name.ends_with("_total") {
            "counter"
        } else {
            "gauge"
        };
        text.push_str(&format!(
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}\n"
        ));
    };
    if let Ok(depth) = store.queue_depth().await {
        gauge("stepwise_queue_depth", "Executions waiting to run.", depth);
    }
    gauge(
        "stepwise_executions_running",
        "Executions running in this process.",
        state.engine.running_count() as u64,
    );
    gauge(
        "stepwise_intake_limit",
        "Messages this process queues at once while its executions work (measured: it rises while cores are free and falls when executions wait for one).",
        state.engine.intake_limit() as u64,
    );
    gauge(
        "stepwise_intake_waited_total",
        "Messages that waited for their turn to be queued while executions worked.",
        state.engine.intake_waited(),
    );
    gauge(
        "stepwise_sse_subscribers",
        "Open event streams.",
        crate::events::subscriber_count() as u64,
    );
    let connections = crate::connections::connection_counts();
    gauge(
        "stepwise_http_connections",
        "Open HTTP connections.",
        connections.open as u64,
    );
    gauge(
        "stepwise_http_connections_refused_total",
        "New connections answered 503 and closed at the connection cap (every connection had a request in flight).",
        connections.shed,
    );
    gauge(
        "stepwise_http_connections_evicted_total",
        "Connections waiting without a request closed to make room at the connection cap or when out of file descriptors.",
        connections.evicted,
    );
    gauge(
        "stepwise_http_connections_timed_out_total",
        "Connections closed by the header, body or idle timeout.",
        connections.timed_out,
    );
    // 0 while the store cannot save (its last write failed for a full disk, or the
    // database does not answer); 1 again once a write succeeds.
    let writable = store.ping().await.is_ok();
    gauge(
        "stepwise_store_writable",
        "1 when the store can save, 0 when its writes fail (disk full, database down).",
        u64::from(writable),
    );
    if let Ok(stats) = store.stats().await {
        gauge(
            "stepwise_store_bytes",
            "Bytes stored by the database.",
            stats.bytes,
        );
        gauge(
            "stepwise_save_queue_depth",
            "Writes waiting in the save queue.",
            stats.queue_depth,
        );
        gauge(
            "stepwise_decode_errors_total",
            "Stored records that could not be decoded.",
            stats.decode_errors,
        );
        gauge(
            "stepwise_save_errors_total",
            "Writes that failed.",
            stats.save_errors,
        );
    }
    if let Some(cache) = store.session_cache() {
        let c = cache.stats();
        gauge(
            "stepwise_session_cache_hits_total",
            "Restores answered from the hot-session cache.",
            c.hits,
        );
        gauge(
            "stepwise_session_cache_misses_total",
            "Restores that read the whole session from the database.",
            c.misses,
        );
        gauge(
            "stepwise_session_cache_message_hits_total",
            "Message listings answered from the hot-session cache.",
            c.message_hits,
        );
        gauge(
            "stepwise_session_cache_message_misses_total",
            "Message listings that read all the session's messages from the database.",
            c.message_misses,
        );
        gauge(
            "stepwise_session_cache_evictions_total",
            "Sessions dropped from the cache to stay within its bound.",
            c.evictions,
        );
        gauge(
            "stepwise_session_cache_bytes",
            "Decoded agent memory and messages the cache holds (estimated bytes).",
            c.bytes,
        );
    }
    if let Some(counts) = state.status_cache.get(store).await {
        status_gauges(&mut text, &counts);
    }
    retention_metrics(&mut text);
    crate::metered::write_metrics(&mut text);
    crate::http_metrics::write_metrics(&mut text);
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retention_passes_add_up_in_the_metrics_text() {
        let before = RETENTION_PASSES.load(Ordering::Relaxed);
        record_retention_pass(
            2,
            &CleanupReport {
                sessions: 3,
                messages: 7,
                ..CleanupReport::default()
            },
        );
        record_retention_failure();
        let mut text = String::new();
        retention_metrics(&mut text);
        assert!(text.contains(&format!("stepwise_retention_passes_total {}\n", before + 2)));
        assert!(text.contains("# TYPE stepwise_retention_deleted_total counter\n"));
        assert!(text.contains("stepwise_retention_deleted_total{kind=\"messages\"} "));
        assert!(text.contains("stepwise_retention_failures_total "));
    }
}
