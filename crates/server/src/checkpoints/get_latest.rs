//! `GET /v1/threads/{thread_id}/checkpoints/latest`: the newest checkpoint of a namespace
//! (highest `checkpoint_id`) with its resolved channel values and pending writes
//! (LangGraph's `get_tuple` without an id).

use axum::Json;
use axum::extract::{Path, State};
use stepwise_store::Store;

use super::{CheckpointTuple, GetParams, thread_id};
use crate::AppState;
use crate::auth::Caller;
use crate::error::{ApiError, ApiQuery, ApiResult, ErrorBody};
use stepwise_store::prelude::*;

pub async fn get_latest<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path(thread): Path<String>,
    ApiQuery(params): ApiQuery<GetParams>,
) -> ApiResult<Json<CheckpointTuple>> {
    let thread = thread_id(&thread)?;
    let ns = params.ns()?;
    let have = params.have()?;
    let record = state
        .checkpoints()?
        .get_checkpoint_since(&caller.tenant, &thread, &ns, None, &have)
        .await?
        .ok_or_else(|| ApiError::not_found("checkpoint"))?;
    Ok(Json(record.into()))
}

#[utoipa::path(get, path = "/v1/threads/{thread_id}/checkpoints/latest", tag = "langgraph checkpoints",
    operation_id = "get_latest_checkpoint",
    params(super::schema::ThreadPath, GetParams),
    responses((status = 200, body = CheckpointTuple),
              (status = 404, body = ErrorBody, description = "No such thread, or no checkpoint in that namespace (`not_found`)"),
              (status = 422, body = ErrorBody, description = "Checkpoints need the SQLite or PostgreSQL backend (`invalid_state`)")))]
#[allow(dead_code)]
pub(crate) fn doc() {}
