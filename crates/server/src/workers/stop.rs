//! `DELETE /v1/workers/{worker_id}`: a worker process stopping cleanly says so, and is
//! offline at once (`GET /v1/agents` counts it no more; its agent types stay known for a
//! day, so messages naming them still queue).

use axum::extract::{Path, State};
use axum::http::StatusCode;
use stepwise_store::Store;

use super::MAX_WORKER_ID_CHARS;
use super::claim::valid_worker_id;
use crate::AppState;
use crate::auth::Caller;
use crate::error::{ApiError, ApiResult, ErrorBody};

pub async fn stop<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path(worker_id): Path<String>,
) -> ApiResult<StatusCode> {
    if !valid_worker_id(&worker_id) {
        return Err(ApiError::invalid(
            "worker_id",
            format!("worker_id must be 1-{MAX_WORKER_ID_CHARS} characters of [A-Za-z0-9._:-]"),
        ));
    }
    if state
        .engine
        .worker_stopped(&caller.tenant, &worker_id)
        .await?
    {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::not_found("worker"))
    }
}

#[utoipa::path(delete, path = "/v1/workers/{worker_id}", tag = "workers", operation_id = "stop_worker",
    params(crate::schemas::WorkerIdPath),
    responses((status = 204, description = "Offline at once; its agent types stay known for a day"),
              (status = 400, body = ErrorBody), (status = 404, body = ErrorBody, description = "The tenant has no such worker")))]
#[allow(dead_code)]
pub(crate) fn doc() {}
