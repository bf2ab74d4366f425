//! `GET /v1/executions/{id}`: one execution.

use axum::Json;
use axum::extract::{Path, State};
use stepwise_core::Execution;
use stepwise_store::Store;

use super::load;
use crate::AppState;
use crate::auth::Caller;
use crate::error::{ApiResult, ErrorBody};
use crate::schemas::IdPath;

pub async fn get<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<Execution>> {
    Ok(Json(load(&state, &caller, &id).await?))
}

#[utoipa::path(get, path = "/v1/executions/{id}", tag = "executions", operation_id = "get_execution",
    params(IdPath),
    responses((status = 200, body = Execution), (status = 404, body = ErrorBody)))]
#[allow(dead_code)]
pub(crate) fn doc() {}
