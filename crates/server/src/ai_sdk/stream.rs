//! `GET /v1/ai-sdk/chat/{chat_id}/stream`: the AI SDK's resume (`useChat({resume: true})`, or
//! after a dropped connection): the running turn of the chat's session replayed from its
//! `start`, then live; 204 when nothing runs (or no such chat yet).

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use stepwise_store::Store;

use super::{UiStream, respond};
use crate::AppState;
use crate::auth::Caller;
use crate::error::{ApiResult, ErrorBody};
use crate::runs::{RunFollower, Start, find_session, find_turn, is_live, latest_root_execution};

/// The `{chat_id}` of a chat: a session id or a session name.
pub struct ChatIdPath;

impl utoipa::IntoParams for ChatIdPath {
    fn into_params(
        _: impl Fn() -> Option<utoipa::openapi::path::ParameterIn>,
    ) -> Vec<utoipa::openapi::path::Parameter> {
        vec![
            crate::schemas::param(
                "chat_id",
                utoipa::openapi::path::ParameterIn::Path,
                "A session id or a session name",
                crate::schemas::chat_id(),
            )
            .build(),
        ]
    }
}

#[utoipa::path(get, path = "/v1/ai-sdk/chat/{chat_id}/stream", tag = "front ends", operation_id = "ai_sdk_resume",
    params(ChatIdPath),
    responses((status = 200, content_type = "text/event-stream", body = crate::shapes::DataFrame,
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
    let store = state.store();
    let slot = state
        .limits
        .subscribers
        .acquire(caller.tenant.as_str(), session.id)?;
    // Subscribed before anything is read: what the replay misses arrives live.
    let live = store.subscribe(&caller.tenant, session.id);
    let execution = match latest_root_execution(store, &caller.tenant, &session).await? {
        Some(execution) if is_live(&execution) => execution,
        _ => return Ok(StatusCode::NO_CONTENT.into_response()),
    };
    let (turn, after) = find_turn(store, &caller.tenant, session.id, execution.id).await?;
    let message_id = turn.message_id.unwrap_or(execution.id);
    let follower = RunFollower::new(
        &state,
        caller.tenant,
        session.id,
        turn,
        live,
        Start::After(after),
    );
    Ok(respond(
        follower,
        UiStream::new(execution.id, message_id),
        slot,
    ))
}
