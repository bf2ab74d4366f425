//! `POST /v1/ai-sdk/chat/{chat_id}/cancel`: cancels the chat session's running (or paused)
//! execution. With `resume` on, `useChat`'s `stop()` only closes the client's connection
//! (the run goes on, so a reload can resume it); this is how a front end stops the run
//! itself. Its streams end with an `abort` part.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use stepwise_core::Execution;
use stepwise_store::Store;

use super::stream::ChatIdPath;
use stepwise_server::{ApiError, ApiResult, AppState, Caller, ErrorBody};

use crate::sessions::{find_session, latest_root_execution};

#[utoipa::path(post, path = "/v1/ai-sdk/chat/{chat_id}/cancel", tag = "front ends", operation_id = "ai_sdk_cancel",
    params(ChatIdPath),
    responses((status = 202, body = Execution, description = "The execution, being cancelled"),
              (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
#[allow(dead_code)]
pub(crate) fn doc() {}

pub async fn cancel<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<impl IntoResponse> {
    let session = find_session(&state, &caller, &id, "chat_id")
        .await?
        .ok_or_else(|| ApiError::not_found("chat"))?;
    let execution = latest_root_execution(state.store(), &caller.tenant, &session)
        .await?
        .filter(|e| !e.status.is_finished())
        .ok_or_else(|| ApiError::conflict("nothing runs in this chat"))?;
    let execution: Execution = state.engine.cancel(&caller.tenant, execution.id).await?;
    Ok((StatusCode::ACCEPTED, Json(execution)))
}
