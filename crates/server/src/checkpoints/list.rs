//! `GET /v1/threads/{thread_id}/checkpoints`: a thread's checkpoints, newest first
//! (`checkpoint_id` descending), in keyset pages (LangGraph's `list` with a thread).

use axum::Json;
use axum::extract::{Path, State};
use stepwise_store::Store;

use super::{CheckpointPage, ListParams, thread_id};
use crate::AppState;
use crate::auth::Caller;
use crate::error::{ApiQuery, ApiResult, ErrorBody};
use stepwise_store::prelude::*;

/// `{thread_id}` of the list.
pub struct ListThreadPath;

impl utoipa::IntoParams for ListThreadPath {
    fn into_params(
        _: impl Fn() -> Option<utoipa::openapi::path::ParameterIn>,
    ) -> Vec<utoipa::openapi::path::Parameter> {
        vec![super::schema::thread_param(
            "The LangGraph thread id (percent-encoded); an unknown thread has no checkpoints",
        )]
    }
}

pub async fn list<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path(thread): Path<String>,
    ApiQuery(params): ApiQuery<ListParams>,
) -> ApiResult<Json<CheckpointPage>> {
    let thread = thread_id(&thread)?;
    let query = params.query(Some(thread))?;
    let page = state
        .checkpoints()?
        .list_checkpoints(&caller.tenant, query)
        .await?;
    Ok(Json(CheckpointPage {
        items: page.items.into_iter().map(Into::into).collect(),
        next_cursor: page.next_cursor,
    }))
}

#[utoipa::path(get, path = "/v1/threads/{thread_id}/checkpoints", tag = "langgraph checkpoints",
    operation_id = "list_checkpoints",
    params(ListThreadPath, ListParams),
    responses((status = 200, body = CheckpointPage),
              (status = 404, body = ErrorBody, description = "No such thread or checkpoint in the caller's tenant (`not_found`)"),
              (status = 422, body = ErrorBody, description = "Checkpoints need the SQLite or PostgreSQL backend (`invalid_state`)")))]
#[allow(dead_code)]
pub(crate) fn doc() {}
