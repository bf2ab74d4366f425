//! `GET /v1/checkpoints`: the checkpoints of every thread of the caller's tenant, newest
//! first (LangGraph's `list(None, ...)`).

use axum::Json;
use axum::extract::State;
use stepwise_store::Store;

use super::{CheckpointPage, ListParams};
use crate::AppState;
use crate::auth::Caller;
use crate::error::{ApiQuery, ApiResult};

pub async fn list_all<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    ApiQuery(params): ApiQuery<ListParams>,
) -> ApiResult<Json<CheckpointPage>> {
    let query = params.query(None)?;
    let page = state
        .store()
        .list_checkpoints(&caller.tenant, query)
        .await?;
    Ok(Json(CheckpointPage {
        items: page.items.into_iter().map(Into::into).collect(),
        next_cursor: page.next_cursor,
    }))
}

#[utoipa::path(get, path = "/v1/checkpoints", tag = "langgraph checkpoints",
    operation_id = "list_all_checkpoints",
    params(("checkpoint_ns" = Option<String>, Query, description = "Only this namespace; absent: every namespace"),
           ("before" = Option<String>, Query, description = "Only checkpoints with a lower id"),
           ("limit" = Option<u32>, Query, description = "1-1000, default 100 (follow `next_cursor` for the rest)"),
           ("cursor" = Option<String>, Query, description = "`next_cursor` of the previous page"),
           ("filter" = Option<String>, Query, description = "A JSON object: top-level metadata keys and the values they must equal")),
    responses((status = 200, body = super::CheckpointPage)))]
#[allow(dead_code)]
pub(crate) fn doc() {}
