//! `GET /v1/snapshots/{id}`: one snapshot with its state.

use axum::Json;
use axum::extract::{Path, State};
use stepwise_core::Snapshot;
use stepwise_store::Store;

use crate::AppState;
use crate::auth::Caller;
use crate::error::{ApiError, ApiResult, ErrorBody, path_id};
use crate::schemas::IdPath;

pub async fn get_snapshot<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<Snapshot>> {
    let id = path_id(&id, "id")?;
    let snapshot = state
        .store()
        .get_snapshot(&caller.tenant, id)
        .await?
        .ok_or_else(|| ApiError::not_found("snapshot"))?;
    Ok(Json(snapshot))
}

#[utoipa::path(get, path = "/v1/snapshots/{id}", tag = "executions", operation_id = "get_snapshot",
    params(IdPath),
    responses((status = 200, body = Snapshot), (status = 404, body = ErrorBody)))]
#[allow(dead_code)]
pub(crate) fn doc() {}
