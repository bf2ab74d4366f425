//! `POST /v1/executions/{id}/release`: a worker shutting down hands an execution back to
//! the queue at once, without spending an attempt.

use axum::Json;
use axum::extract::{Path, State};
use stepwise_core::Execution;
use stepwise_store::Store;

use crate::AppState;
use crate::auth::Caller;
use crate::error::{ApiError, ApiResult, ErrorBody, path_id};
use crate::executions::LeaseHeader;
use crate::schemas::IdRequiredLease;

pub async fn release<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path(id): Path<String>,
    lease: LeaseHeader,
) -> ApiResult<Json<Execution>> {
    let id = path_id(&id, "id")?;
    let Some(token) = lease.0.as_deref() else {
        return Err(ApiError::invalid(
            "stepwise-lease",
            "send the lease of the claim in the Stepwise-Lease header",
        ));
    };
    let execution = state
        .engine
        .driven_execution(&caller.tenant, id, Some(token))
        .await?;
    let released = state
        .engine
        .release_for_worker(&caller.tenant, &execution, token)
        .await?;
    Ok(Json(released))
}

#[utoipa::path(post, path = "/v1/executions/{id}/release", tag = "workers", operation_id = "release_execution",
    params(IdRequiredLease),
    responses((status = 200, body = Execution, description = "Back in the queue (`pending`)"), (status = 404, body = ErrorBody),
              (status = 409, body = ErrorBody, description = "`lease_lost`")))]
#[allow(dead_code)]
pub(crate) fn doc() {}
