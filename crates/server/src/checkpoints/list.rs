//! `GET /v1/threads/{thread_id}/checkpoints`: a thread's checkpoints, newest first
//! (`checkpoint_id` descending), in keyset pages (LangGraph's `list` with a thread).

use axum::Json;
use axum::extract::{Path, State};
use stepwise_store::Store;

use super::{CheckpointPage, ListParams, thread_id};
use crate::AppState;
use crate::auth::Caller;
use crate::error::{ApiQuery, ApiResult};

pub async fn list<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path(thread): Path<String>,
    ApiQuery(params): ApiQuery<ListParams>,
) -> ApiResult<Json<CheckpointPage>> {
    let thread = thread_id(&thread)?;
    let query = params.query(Some(thread))?;
    let page = state
        .store()
        .list_checkpoints(&caller.tenant, query)
        .await?;
    Ok(Json(CheckpointPage {
        items: page.items.into_iter().map(Into::into).collect(),
        next_cursor: page.next_cursor,
    }))
}

#[utoipa::path(get, path = "/v1/threads/{thread_id}/checkpoints", tag = "langgraph checkpoints",
    operation_id = "list_checkpoints",
    params(("thread_id" = String, Path, description = "The LangGraph thread id (percent-encoded); an unknown thread has no checkpoints"),
           ("checkpoint_ns" = Option<String>, Query, description = "Only this namespace; absent: every namespace"),
           ("before" = Option<String>, Query, description = "Only checkpoints with a lower id"),
           ("limit" = Option<u32>, Query, description = "1-1000, default 100 (follow `next_cursor` for the rest)"),
           ("cursor" = Option<String>, Query, description = "`next_cursor` of the previous page"),
           ("filter" = Option<String>, Query, description = "A JSON object: top-level metadata keys and the values they must equal")),
    responses((status = 200, body = CheckpointPage)))]
#[allow(dead_code)]
pub(crate) fn doc() {}
