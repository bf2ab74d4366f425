//! `GET /v1/ai-sdk/chat/{chat_id}/stream`: the AI SDK's resume (`useChat({resume: true})`, or
//! after a dropped connection): the running turn of the chat's session replayed from its
//! `start`, then live; 204 when nothing runs (or no such chat yet).

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use stepwise_store::Store;

use stepwise_server::{ApiResult, AppState, Caller, ErrorBody};

use super::UiStream;
use crate::follower::{Rejoin, rejoin};
use crate::sessions::find_session;
use crate::sse::{frame, respond};

/// The `{chat_id}` of a chat: a session id or a session name.
pub struct ChatIdPath;

impl utoipa::IntoParams for ChatIdPath {
    fn into_params(
        _: impl Fn() -> Option<utoipa::openapi::path::ParameterIn>,
    ) -> Vec<utoipa::openapi::path::Parameter> {
        vec![
            stepwise_server::schemas::param(
                "chat_id",
                utoipa::openapi::path::ParameterIn::Path,
                "A session id or a session name",
                stepwise_server::schemas::chat_id(),
            )
            .build(),
        ]
    }
}

#[utoipa::path(get, path = "/v1/ai-sdk/chat/{chat_id}/stream", tag = "front ends", operation_id = "ai_sdk_resume",
    params(ChatIdPath),
    responses((status = 200, content_type = "text/event-stream", body = stepwise_server::DataFrame,
               description = "The running turn from its `start`, as UI message stream parts"),
              (status = 204, description = "Nothing runs in the chat's session (or there is no such chat yet)"),
              (status = 400, body = ErrorBody)))]
#[allow(dead_code)]
pub(crate) fn doc() {}

pub async fn stream<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    let Some(session) = find_session(&state, &caller, &id, "chat_id").await? else {
        return Ok(StatusCode::NO_CONTENT.into_response());
    };
    let Rejoin::Running {
        turn,
        follower,
        slot,
    } = rejoin(&state, &caller, &session).await?
    else {
        return Ok(StatusCode::NO_CONTENT.into_response());
    };
    let message_id = turn.message_id.unwrap_or(turn.execution_id);
    let view = UiStream::new(turn.execution_id, message_id);
    Ok(respond(frame(&view.start()), Some((follower, view, slot))))
}
