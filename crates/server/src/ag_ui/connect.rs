//! `POST /v1/ag-ui/connect`: a reconnecting AG-UI client (`connectAgent`): `RUN_STARTED`,
//! a `MESSAGES_SNAPSHOT` of the thread, then the running turn's events from its start to
//! its end; with nothing running, `RUN_FINISHED` at once (outcome `interrupt` with the
//! question when the thread is paused). An unknown thread answers an empty snapshot.

use axum::extract::State;
use axum::response::Response;
use serde_json::{Value, json};
use stepwise_core::ExecutionStatus;
use stepwise_store::Store;

use super::{AgUiStream, RunAgentInput, respond, snapshot};
use crate::AppState;
use crate::auth::Caller;
use crate::error::{ApiJson, ApiResult, ErrorBody};
use crate::runs::{RunFollower, Start, find_session, find_turn, is_live, latest_root_execution};

#[utoipa::path(post, path = "/v1/ag-ui/connect", tag = "front ends", operation_id = "ag_ui_connect",
    request_body = RunAgentInput,
    responses((status = 200, content_type = "text/event-stream", body = crate::shapes::DataFrame,
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
        return Ok(respond::<S>(events, None));
    };
    let slot = state
        .limits
        .subscribers
        .acquire(caller.tenant.as_str(), session.id)?;
    let live = store.subscribe(&caller.tenant, session.id);
    let latest = latest_root_execution(store, &caller.tenant, &session).await?;
    let execution_id = latest.as_ref().map(|e| e.id).unwrap_or_default();
    let view = AgUiStream::new(input.thread_id, input.run_id, session.id, execution_id);
    let mut first = vec![view.run_started()];
    match latest {
        Some(execution) if is_live(&execution) => {
            let (turn, after) = find_turn(store, &caller.tenant, session.id, execution.id).await?;
            let messages = snapshot(store, &caller.tenant, session.id, turn.message_id).await?;
            first.push(json!({"type": "MESSAGES_SNAPSHOT", "messages": messages}));
            let follower = RunFollower::new(
                &state,
                caller.tenant,
                session.id,
                turn,
                live,
                Start::After(after),
            );
            Ok(respond(first, Some((follower, view, slot))))
        }
        latest => {
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
            Ok(respond::<S>(first, None))
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
