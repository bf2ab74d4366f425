//! `GET /v1/sessions/{id}`: one session.

use axum::Json;
use axum::extract::{Path, State};
use stepwise_core::Session;
use stepwise_store::Store;

use super::load_session;
use crate::AppState;
use crate::auth::Caller;
use crate::error::{ApiResult, ErrorBody, path_id};
use crate::schemas::IdPath;

#[utoipa::path(get, path = "/v1/sessions/{id}", tag = "sessions", operation_id = "get_session",
    params(IdPath),
    responses((status = 200, body = Session), (status = 404, body = ErrorBody)))]
#[allow(dead_code)]
pub(crate) fn doc() {}

pub async fn get<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<Session>> {
    let id = path_id(&id, "id")?;
    Ok(Json(load_session(&state, &caller, id).await?))
}
