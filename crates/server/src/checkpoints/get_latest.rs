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
        .store()
        .get_checkpoint_since(&caller.tenant, &thread, &ns, None, &have)
        .await?
        .ok_or_else(|| ApiError::not_found("checkpoint"))?;
    Ok(Json(record.into()))
}

#[utoipa::path(get, path = "/v1/threads/{thread_id}/checkpoints/latest", tag = "langgraph checkpoints",
    operation_id = "get_latest_checkpoint",
    params(("thread_id" = String, Path, description = "The LangGraph thread id (percent-encoded)"),
           ("checkpoint_ns" = Option<String>, Query, description = "Default \"\""),
           ("have" = Option<String>, Query, description = "A JSON object channel -> version the reader holds: a list value whose chain reaches that version is answered as `{type: \"list\", since, items}`, only the items after it")),
    responses((status = 200, body = CheckpointTuple),
              (status = 404, body = ErrorBody, description = "No such thread, or no checkpoint in that namespace (`not_found`)")))]
#[allow(dead_code)]
pub(crate) fn doc() {}
