//! `POST /v1/ag-ui/connect`: a reconnecting AG-UI client (`connectAgent`): `RUN_STARTED`,
//! a `MESSAGES_SNAPSHOT` of the thread, then the running turn's events from its start to
//! its end; with nothing running, `RUN_FINISHED` at once (outcome `interrupt` with the
//! question when the thread is paused). An unknown thread answers an empty snapshot.

use axum::extract::State;
use axum::response::Response;
use serde_json::{Value, json};
use stepwise_core::ExecutionStatus;
use stepwise_store::Store;

use stepwise_server::{ApiJson, ApiResult, AppState, Caller, ErrorBody};

use super::{AgUiStream, RunAgentInput, run_ended, snapshot};
use crate::follower::{Rejoin, rejoin};
use crate::sessions::find_session;
use crate::sse::{frames, respond};

#[utoipa::path(post, path = "/v1/ag-ui/connect", tag = "front ends", operation_id = "ag_ui_connect",
    request_body = RunAgentInput,
    responses((status = 200, content_type = "text/event-stream", body = stepwise_server::DataFrame,
               description = "`RUN_STARTED`, `MESSAGES_SNAPSHOT`, the running turn's events, `RUN_FINISHED` or `RUN_ERROR`"),
              (status = 400, body = ErrorBody)))]
#[allow(dead_code)]
pub(crate) fn doc() {}

pub async fn connect<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    ApiJson(input): ApiJson<RunAgentInput>,
) -> ApiResult<Response> {
    input.check()?;
    let store = state.store();
    let Some(session) = find_session(&state, &caller, &input.thread_id, "threadId").await? else {
        let view = AgUiStream::new(
            input.thread_id,
            input.run_id,
            stepwise_core::Id::nil(),
            stepwise_core::Id::nil(),
        );
        let events = vec![
            view.run_started(),
            json!({"type": "MESSAGES_SNAPSHOT", "messages": []}),
            view.finish_now(None),
        ];
        return Ok(run_ended::<S>(&events));
    };
    match rejoin(&state, &caller, &session).await? {
        Rejoin::Running {
            turn,
            follower,
            slot,
        } => {
            let view =
                AgUiStream::new(input.thread_id, input.run_id, session.id, turn.execution_id);
            let messages = snapshot(store, &caller.tenant, session.id, turn.message_id).await?;
            let first = [
                view.run_started(),
                json!({"type": "MESSAGES_SNAPSHOT", "messages": messages}),
            ];
            Ok(respond(frames(&first), Some((follower, view, slot))))
        }
        Rejoin::Idle(latest) => {
            let execution_id = latest.as_ref().map(|e| e.id).unwrap_or_default();
            let view = AgUiStream::new(input.thread_id, input.run_id, session.id, execution_id);
            let mut first = vec![view.run_started()];
            let messages = snapshot(store, &caller.tenant, session.id, None).await?;
            first.push(json!({"type": "MESSAGES_SNAPSHOT", "messages": messages}));
            let question = match &latest {
                Some(execution) if execution.status == ExecutionStatus::Paused => Some(
                    paused_question(&state, &caller, execution.id)
                        .await
                        .unwrap_or_default(),
                ),
                _ => None,
            };
            first.push(view.finish_now(question.as_deref()));
            Ok(run_ended::<S>(&first))
        }
    }
}

/// The question a paused execution asked (its last step's `output.question`).
async fn paused_question<S: Store>(
    state: &AppState<S>,
    caller: &Caller,
    execution_id: stepwise_core::Id,
) -> Option<String> {
    let steps = state
        .store()
        .list_steps(&caller.tenant, execution_id)
        .await
        .ok()?;
    steps
        .items
        .last()?
        .output
        .get("question")
        .and_then(Value::as_str)
        .map(str::to_string)
}
