//! `POST /v1/ag-ui`: runs a `RunAgentInput` on its thread's session and answers the run as
//! AG-UI events. The turn is the last user message (like `POST /v1/sessions/{id}/messages`:
//! it queues a new execution); on a paused thread a `resume` entry's `payload` (or, without
//! one, the last user message) answers the question and the paused execution goes on; a
//! `cancelled` resume entry cancels it.

use axum::extract::State;
use axum::response::Response;
use serde_json::Value;
use stepwise_core::{ExecutionStatus, SessionStatus};
use stepwise_store::Store;

use stepwise_server::{ApiError, ApiJson, ApiResult, AppState, Caller, ErrorBody};

use super::{AgUiStream, ResumeStatus, RunAgentInput, run_ended};
use crate::sessions::{
    find_session, latest_root_execution, post_turn, session_for_turn, turn_message,
};
use crate::sse::{frame, respond};

#[utoipa::path(post, path = "/v1/ag-ui", tag = "front ends", operation_id = "ag_ui_run",
    request_body = RunAgentInput,
    responses((status = 200, content_type = "text/event-stream", body = stepwise_server::DataFrame,
               description = "The run as AG-UI events (`data:` lines): `RUN_STARTED` ... `RUN_FINISHED` or `RUN_ERROR`"),
              (status = 400, body = ErrorBody), (status = 422, body = ErrorBody)))]
#[allow(dead_code)]
pub(crate) fn doc() {}

/// A resume entry's payload as the user's answer: text as it is, `{answer}` or `{text}`'s
/// text, anything else as JSON text.
fn answer_text(payload: &Value) -> String {
    match payload {
        Value::String(text) => text.clone(),
        Value::Object(map) => match map
            .get("answer")
            .or_else(|| map.get("text"))
            .and_then(Value::as_str)
        {
            Some(text) => text.to_string(),
            None => payload.to_string(),
        },
        other => other.to_string(),
    }
}

pub async fn run<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    ApiJson(input): ApiJson<RunAgentInput>,
) -> ApiResult<Response> {
    input.check()?;
    let agent = input.agent()?;
    // Everything is checked before anything is written (the session, a cancel).
    let existing = find_session(&state, &caller, &input.thread_id, "threadId").await?;
    let latest = match &existing {
        Some(session) => latest_root_execution(state.store(), &caller.tenant, session).await?,
        None => None,
    };
    let paused = latest
        .as_ref()
        .filter(|e| e.status == ExecutionStatus::Paused);
    // The entry that answers the paused execution (its interrupt id is the execution's),
    // else the first.
    let entry = input.resume.as_ref().and_then(|entries| {
        entries
            .iter()
            .find(|e| paused.is_some_and(|p| p.id.to_string() == e.interrupt_id))
            .or_else(|| entries.first())
    });
    let mut content = input.last_user_text();
    let mut cancel = None;
    if let (Some(paused), Some(entry)) = (paused, entry) {
        if entry.status == ResumeStatus::Cancelled {
            // The interrupt is dropped: the paused execution is cancelled, and the thread
            // goes on with an ordinary run when the input brings a new message (its last
            // one is the user's; an earlier one was an earlier turn's).
            cancel = Some(paused.id);
            if !input.ends_with_user_message() {
                content.clear();
            }
        } else if let Some(payload) = entry.payload.as_ref().filter(|p| !p.is_null()) {
            content = answer_text(payload);
        }
    }
    if content.trim().is_empty() {
        if let (Some(execution_id), Some(session)) = (cancel, &existing) {
            state.engine.cancel(&caller.tenant, execution_id).await?;
            let view = AgUiStream::new(input.thread_id, input.run_id, session.id, execution_id);
            let events = vec![
                view.run_started(),
                view.finished(serde_json::json!({"type": "cancelled"}), None),
            ];
            return Ok(run_ended::<S>(&events));
        }
        return Err(ApiError::invalid(
            "messages",
            "the input has no user message with text (nor a resume payload)",
        ));
    }
    let message = turn_message(&state, content, agent)?;
    let session = match existing {
        Some(session) if session.status == SessionStatus::Deleted => {
            return Err(ApiError::invalid_state("the session is deleted"));
        }
        Some(session) => session,
        None => session_for_turn(&state, &caller, &input.thread_id, "threadId").await?,
    };
    if let Some(execution_id) = cancel {
        state.engine.cancel(&caller.tenant, execution_id).await?;
    }
    let (turn, follower, slot) = post_turn(&state, caller, &session, message).await?;
    let view = AgUiStream::new(input.thread_id, input.run_id, session.id, turn.execution_id);
    Ok(respond(
        frame(&view.run_started()),
        Some((follower, view, slot)),
    ))
}
