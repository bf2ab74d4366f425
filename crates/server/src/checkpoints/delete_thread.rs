//! `DELETE /v1/threads/{thread_id}`: deletes a thread for real (LangGraph's
//! `delete_thread`): its checkpoints, blobs and writes, and its session with every row.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use stepwise_store::Store;

use super::thread_id;
use crate::AppState;
use crate::auth::Caller;
use crate::error::{ApiError, ApiResult, ErrorBody};
use stepwise_store::prelude::*;

pub async fn delete_thread<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path(thread): Path<String>,
) -> ApiResult<StatusCode> {
    let thread = thread_id(&thread)?;
    if state
        .checkpoints()?
        .delete_thread(&caller.tenant, &thread)
        .await?
    {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::not_found("thread"))
    }
}

#[utoipa::path(delete, path = "/v1/threads/{thread_id}", tag = "langgraph checkpoints",
    operation_id = "delete_thread",
    params(super::schema::ThreadPath),
    responses((status = 204, description = "Deleted, with its session and every row of it (not a soft delete)"),
              (status = 404, body = ErrorBody, description = "No such thread (`not_found`)")))]
#[allow(dead_code)]
pub(crate) fn doc() {}
