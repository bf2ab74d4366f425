//! `GET /v1/sessions/{id}/memory`: the memory an agent resumes the session with.

use axum::Json;
use axum::extract::{Path, State};
use stepwise_core::Memory;
use stepwise_store::{Store, restore_memory};

use crate::AppState;
use crate::auth::Caller;
use crate::error::{ApiError, ApiResult, ErrorBody, path_id};
use crate::schemas::IdPath;

#[utoipa::path(get, path = "/v1/sessions/{id}/memory", tag = "sessions", operation_id = "memory",
    params(IdPath),
    responses((status = 200, body = Memory), (status = 404, body = ErrorBody)))]
#[allow(dead_code)]
pub(crate) fn doc() {}

pub async fn memory<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<Memory>> {
    let id = path_id(&id, "id")?;
    let memory = restore_memory(state.store(), &caller.tenant, id)
        .await?
        .ok_or_else(|| ApiError::not_found("session"))?;
    Ok(Json(memory))
}
