//! `POST /v1/executions/{id}/fail`: an external agent fails its execution with a reason.

use axum::Json;
use axum::extract::{Path, State};
use serde::Deserialize;
use stepwise_core::Execution;
use stepwise_store::Store;

use super::{LeaseHeader, MAX_ERROR_CHARS, load_external, schema};
use crate::AppState;
use crate::auth::Caller;
use crate::error::{ApiError, ApiJson, ApiResult, ErrorBody};
use crate::schemas::IdLease;

/// Why the execution failed.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct FailBody {
    #[schema(schema_with = schema::error_message)]
    pub error_message: String,
    /// A worker's execution goes back to the queue to be tried again, while the server's
    /// attempt limit allows (`docs/workers.md`); needs the worker's lease.
    #[serde(default)]
    pub retry: Option<bool>,
}

pub async fn fail<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path(id): Path<String>,
    lease: LeaseHeader,
    ApiJson(body): ApiJson<FailBody>,
) -> ApiResult<Json<Execution>> {
    let execution = load_external(&state, &caller, &id, &lease).await?;
    if body.error_message.trim().is_empty() || body.error_message.chars().count() > MAX_ERROR_CHARS
    {
        return Err(ApiError::invalid(
            "error_message",
            format!("error_message must be 1 to {MAX_ERROR_CHARS} characters, not only spaces"),
        ));
    }
    let done = match (body.retry, lease.0.as_deref()) {
        (Some(true), Some(lease)) => {
            state
                .engine
                .retry_for_worker(&caller.tenant, &execution, lease, body.error_message)
                .await?
        }
        (Some(true), None) => {
            return Err(ApiError::invalid_state(
                "only a worker's execution (with its Stepwise-Lease) is retried",
            )
            .with_field("retry"));
        }
        _ => {
            state
                .engine
                .fail_external(&caller.tenant, &execution, body.error_message)
                .await?
        }
    };
    Ok(Json(done))
}

#[utoipa::path(post, path = "/v1/executions/{id}/fail", tag = "external agents", operation_id = "fail_execution",
    params(IdLease), request_body = FailBody,
    responses((status = 200, body = Execution), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody),
              (status = 409, body = ErrorBody), (status = 422, body = ErrorBody)))]
#[allow(dead_code)]
pub(crate) fn doc() {}
