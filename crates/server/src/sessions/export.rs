//! `GET /v1/sessions/{id}/export`: the session as a document (its messages, executions,
//! steps and snapshots) that `POST /v1/sessions/import` reads back.

use axum::Json;
use axum::extract::{Path, State};
use stepwise_core::SessionDocument;
use stepwise_store::{Store, export_session};

use crate::AppState;
use crate::auth::Caller;
use crate::error::{ApiError, ApiResult, ErrorBody, path_id};
use crate::schemas::IdPath;

#[utoipa::path(get, path = "/v1/sessions/{id}/export", tag = "sessions", operation_id = "export_session",
    params(IdPath),
    responses((status = 200, body = SessionDocument), (status = 404, body = ErrorBody)))]
#[allow(dead_code)]
pub(crate) fn doc() {}

pub async fn export<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<SessionDocument>> {
    let id = path_id(&id, "id")?;
    let document = export_session(state.store(), &caller.tenant, id)
        .await?
        .ok_or_else(|| ApiError::not_found("session"))?;
    Ok(Json(document))
}
