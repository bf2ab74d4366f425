//! `GET /v1/threads/{thread_id}/checkpoints/{checkpoint_id}`: one checkpoint with its
//! resolved channel values and pending writes (LangGraph's `get_tuple` with an id).

use axum::Json;
use axum::extract::{Path, State};
use stepwise_store::Store;

use super::{CheckpointTuple, GetParams, checkpoint_id, thread_id};
use crate::AppState;
use crate::auth::Caller;
use crate::error::{ApiError, ApiQuery, ApiResult, ErrorBody};

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
        .store()
        .get_checkpoint_since(&caller.tenant, &thread, &ns, Some(&id), &have)
        .await?
        .ok_or_else(|| ApiError::not_found("checkpoint"))?;
    Ok(Json(record.into()))
}

#[utoipa::path(get, path = "/v1/threads/{thread_id}/checkpoints/{checkpoint_id}", tag = "langgraph checkpoints",
    operation_id = "get_checkpoint",
    params(("thread_id" = String, Path, description = "The LangGraph thread id (percent-encoded)"),
           ("checkpoint_id" = String, Path, description = "A checkpoint id (`latest` is the latest, see get_latest_checkpoint)"),
           ("checkpoint_ns" = Option<String>, Query, description = "Default \"\""),
           ("have" = Option<String>, Query, description = "A JSON object channel -> version the reader holds: a list value whose chain reaches that version is answered as `{type: \"list\", since, items}`, only the items after it")),
    responses((status = 200, body = CheckpointTuple),
              (status = 404, body = ErrorBody, description = "No such thread or checkpoint (`not_found`)")))]
#[allow(dead_code)]
pub(crate) fn doc() {}
