//! `GET /readyz`: the store answers (503 when the database is not reachable or cannot write).

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;
use stepwise_store::Store;

use crate::AppState;
use crate::error::{ApiError, ErrorBody};

#[utoipa::path(get, path = "/readyz", tag = "operations", operation_id = "readyz", security(),
    responses((status = 200, description = "The database is reachable"), (status = 503, body = ErrorBody)))]
#[allow(dead_code)]
pub(crate) fn doc() {}

pub async fn readyz<S: Store>(State(state): State<AppState<S>>) -> Response {
    match state.store().ping().await {
        Ok(()) => Json(json!({"status": "ready", "backend": state.store().backend_name()}))
            .into_response(),
        Err(e @ stepwise_store::StoreError::StorageFull(_)) => {
            tracing::warn!(error = %e, "not ready: the store cannot write");
            ApiError::storage_full().into_response()
        }
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
