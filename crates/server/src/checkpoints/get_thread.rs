//! `GET /v1/threads/{thread_id}`: a LangGraph thread: its session and how many checkpoints
//! it holds.

use axum::Json;
use axum::extract::{Path, State};
use serde::Serialize;
use stepwise_core::Session;
use stepwise_store::Store;

use super::thread_id;
use crate::AppState;
use crate::auth::Caller;
use crate::error::{ApiError, ApiResult, ErrorBody};
use stepwise_store::prelude::*;

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Thread {
    pub thread_id: String,
    /// The session that holds the thread.
    pub session: Session,
    /// Checkpoints over every namespace.
    pub checkpoints: u64,
}

pub async fn get_thread<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path(thread): Path<String>,
) -> ApiResult<Json<Thread>> {
    let thread = thread_id(&thread)?;
    let store = state.store();
    let info = state
        .checkpoints()?
        .get_thread(&caller.tenant, &thread)
        .await?
        .ok_or_else(|| ApiError::not_found("thread"))?;
    let session = store
        .get_session(&caller.tenant, info.session_id)
        .await?
        .ok_or_else(|| ApiError::not_found("thread"))?;
    Ok(Json(Thread {
        thread_id: info.thread_id,
        session,
        checkpoints: info.checkpoints,
    }))
}

#[utoipa::path(get, path = "/v1/threads/{thread_id}", tag = "langgraph checkpoints",
    operation_id = "get_thread",
    params(super::schema::ThreadPath),
    responses((status = 200, body = Thread), (status = 404, body = ErrorBody, description = "No such thread (`not_found`)"),
              (status = 422, body = ErrorBody, description = "Checkpoints need the SQLite or PostgreSQL backend (`invalid_state`)")))]
#[allow(dead_code)]
pub(crate) fn doc() {}
