//! `DELETE /v1/sessions/{id}`: soft-deletes a session (the retention cleaner removes it later).

use axum::extract::{Path, State};
use axum::http::StatusCode;
use stepwise_store::Store;

use crate::AppState;
use crate::auth::Caller;
use crate::error::{ApiError, ApiResult, ErrorBody, path_id};
use crate::schemas::IdPath;

#[utoipa::path(delete, path = "/v1/sessions/{id}", tag = "sessions", operation_id = "delete_session",
    params(IdPath),
    responses((status = 204, description = "Soft-deleted"), (status = 404, body = ErrorBody)))]
#[allow(dead_code)]
pub(crate) fn doc() {}

pub async fn delete<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    let id = path_id(&id, "id")?;
    if state.store().delete_session(&caller.tenant, id).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::not_found("session"))
    }
}
