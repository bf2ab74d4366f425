//! `POST /v1/executions/{id}/cancel`: cancels an execution (202: a running one stops at its
//! next step boundary; 409 when it is already finished).

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use stepwise_core::Execution;
use stepwise_store::Store;

use crate::AppState;
use crate::auth::Caller;
use crate::error::{ApiResult, ErrorBody, path_id};
use crate::schemas::IdPath;

pub async fn cancel<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<impl IntoResponse> {
    let id = path_id(&id, "id")?;
    let execution: Execution = state.engine.cancel(&caller.tenant, id).await?;
    Ok((StatusCode::ACCEPTED, Json(execution)))
}

#[utoipa::path(post, path = "/v1/executions/{id}/cancel", tag = "executions", operation_id = "cancel_execution",
    params(IdPath),
    responses((status = 202, body = Execution), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
#[allow(dead_code)]
pub(crate) fn doc() {}
