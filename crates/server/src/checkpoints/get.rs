//! `GET /v1/threads/{thread_id}/checkpoints/{checkpoint_id}`: one checkpoint with its
//! resolved channel values and pending writes (LangGraph's `get_tuple` with an id).

use axum::Json;
use axum::extract::{Path, State};
use stepwise_store::Store;

use super::{CheckpointTuple, GetParams, checkpoint_id, thread_id};
use crate::AppState;
use crate::auth::Caller;
use crate::error::{ApiError, ApiQuery, ApiResult, ErrorBody};
use stepwise_store::prelude::*;

/// `{thread_id}/checkpoints/{checkpoint_id}` of a read.
pub struct GetCheckpointPath;

impl utoipa::IntoParams for GetCheckpointPath {
    fn into_params(
        _: impl Fn() -> Option<utoipa::openapi::path::ParameterIn>,
    ) -> Vec<utoipa::openapi::path::Parameter> {
        use super::schema::{THREAD_ID, checkpoint_param, thread_param};
        vec![
            thread_param(THREAD_ID),
            checkpoint_param("A checkpoint id (`latest` is the latest, see get_latest_checkpoint)"),
        ]
    }
}

pub async fn get<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path((thread, id)): Path<(String, String)>,
    ApiQuery(params): ApiQuery<GetParams>,
) -> ApiResult<Json<CheckpointTuple>> {
    let thread = thread_id(&thread)?;
    let id = checkpoint_id(&id)?;
    let ns = params.ns()?;
    let have = params.have()?;
    let record = state
        .checkpoints()?
        .get_checkpoint_since(&caller.tenant, &thread, &ns, Some(&id), &have)
        .await?
        .ok_or_else(|| ApiError::not_found("checkpoint"))?;
    Ok(Json(record.into()))
}

#[utoipa::path(get, path = "/v1/threads/{thread_id}/checkpoints/{checkpoint_id}", tag = "langgraph checkpoints",
    operation_id = "get_checkpoint",
    params(GetCheckpointPath, GetParams),
    responses((status = 200, body = CheckpointTuple),
              (status = 404, body = ErrorBody, description = "No such thread or checkpoint (`not_found`)"),
              (status = 422, body = ErrorBody, description = "Checkpoints need the SQLite or PostgreSQL backend (`invalid_state`)")))]
#[allow(dead_code)]
pub(crate) fn doc() {}
