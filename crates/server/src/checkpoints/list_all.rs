//! `GET /v1/checkpoints`: the checkpoints of every thread of the caller's tenant, newest
//! first (LangGraph's `list(None, ...)`).

use axum::Json;
use axum::extract::State;
use stepwise_store::Store;

use super::{CheckpointPage, ListParams};
use crate::AppState;
use crate::auth::Caller;
use crate::error::{ApiQuery, ApiResult, ErrorBody};
use stepwise_store::prelude::*;

pub async fn list_all<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    ApiQuery(params): ApiQuery<ListParams>,
) -> ApiResult<Json<CheckpointPage>> {
    let query = params.query(None)?;
    let page = state
        .checkpoints()?
        .list_checkpoints(&caller.tenant, query)
        .await?;
    // A user's page keeps its own threads' checkpoints (it may hold fewer than `limit`;
    // the cursor still goes on).
    let mut items = Vec::with_capacity(page.items.len());
    let mut seen: std::collections::HashMap<String, bool> = std::collections::HashMap::new();
    for item in page.items {
        let visible = match seen.get(&item.thread_id) {
            Some(visible) => *visible,
            None => {
                let visible =
                    crate::auth::access::sees_thread(&state, &caller, &item.thread_id).await?;
                seen.insert(item.thread_id.clone(), visible);
                visible
            }
        };
        if visible {
            items.push(item.into());
        }
    }
    Ok(Json(CheckpointPage {
        items,
        next_cursor: page.next_cursor,
    }))
}

#[utoipa::path(get, path = "/v1/checkpoints", tag = "langgraph checkpoints",
    operation_id = "list_all_checkpoints",
    params(super::ListParams),
    responses((status = 200, body = super::CheckpointPage),
              (status = 404, body = ErrorBody, description = "No such thread or checkpoint in the caller's tenant (`not_found`)"),
              (status = 422, body = ErrorBody, description = "Checkpoints need the SQLite or PostgreSQL backend (`invalid_state`)")))]
#[allow(dead_code)]
pub(crate) fn doc() {}
