//! Operations endpoints: health, readiness, metrics and the OpenAPI document.

use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use stepwise_store::Store;

use crate::AppState;
use crate::error::ApiError;

pub async fn healthz() -> Json<serde_json::Value> {
    Json(json!({"status": "ok"}))
}

pub async fn readyz<S: Store>(State(state): State<AppState<S>>) -> Response {
    match state.store().ping().await {
        Ok(()) => Json(json!({"status": "ready", "backend": state.store().backend_name()}))
            .into_response(),
        Err(e) => {
            tracing::warn!(error = %e, "not ready");
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
                "the database is not reachable",
            )
            .into_response()
        }
    }
}

/// Prometheus text: queue depth, running executions, SSE subscribers, store figures.
pub async fn metrics<S: Store>(State(state): State<AppState<S>>) -> Response {
    let store = state.store();
    let mut text = String::new();
    let mut gauge = |name: &str, help: &str, value: u64| {
        text.push_str(&format!(
            "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}\n"
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
        "stepwise_sse_subscribers",
        "Open event streams.",
        crate::events::subscriber_count() as u64,
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
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}

pub async fn openapi() -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        crate::openapi::openapi_json(),
    )
        .into_response()
}
