//! `POST /v1/sessions/{id}/messages`: a user message to a session; answers 202 with the
//! execution queued for it.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::Value;
use stepwise_core::{Execution, Session, SessionStatus};
use stepwise_store::{Store, StoreError};

use super::{AgentBody, MessageAccepted, MessageFields};
use crate::AppState;
use crate::auth::Caller;
use crate::error::{ApiError, ApiJson, ApiQuery, ApiResult, ErrorBody, path_id};
use crate::schemas::IdPath;
use crate::sessions::load_session;

/// A user message and, optionally, the agent that answers it.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct MessageBody {
    #[schema(schema_with = crate::schemas::message_content)]
    pub content: String,
    #[schema(schema_with = crate::schemas::reference)]
    pub related_type: Option<String>,
    #[schema(schema_with = crate::schemas::reference)]
    pub related_id: Option<String>,
    #[schema(schema_with = crate::schemas::context_url)]
    pub context_url: Option<String>,
    #[schema(schema_with = crate::schemas::object_or_null)]
    pub metadata: Option<Value>,
    pub agent: Option<AgentBody>,
    /// What the message does while the session has an execution queued or running:
    /// `enqueue` (the default) queues it behind them; `reject` answers 409
    /// `session_busy`; `interrupt` cancels them (a running one at its next step
    /// boundary; both kept) and the new one runs next; `rollback` cancels them and removes
    /// them with everything they wrote, then the new one runs. A paused execution is not
    /// busy: the message is its answer.
    #[serde(default)]
    pub on_busy: Option<OnBusy>,
}

/// What a message does while its session has an execution queued or running (see
/// `on_busy` of a message).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum OnBusy {
    #[default]
    Enqueue,
    Reject,
    Interrupt,
    Rollback,
}

#[utoipa::path(post, path = "/v1/sessions/{id}/messages", tag = "messages", operation_id = "post_message",
    params(IdPath), request_body = MessageBody,
    responses((status = 202, body = MessageAccepted), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody),
              (status = 409, body = ErrorBody, description = "`session_busy`: `on_busy` is `reject` and an execution of the session is queued or running"),
              (status = 422, body = ErrorBody, description = "`unknown_agent`: no worker announced `agent.type` in the last 24 hours (send `agent.wait: true` to queue anyway); `invalid_state`: the session is deleted")))]
#[allow(dead_code)]
pub(crate) fn doc() {}

pub async fn post<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path(id): Path<String>,
    ApiQuery(query): ApiQuery<super::wait::WaitQuery>,
    ApiJson(body): ApiJson<MessageBody>,
) -> ApiResult<axum::response::Response> {
    let id = path_id(&id, "id")?;
    let wait = query.duration()?;
    let agent_wait = body.agent.as_ref().and_then(|a| a.wait).unwrap_or(false);
    let on_busy = body.on_busy.unwrap_or_default();
    let input = MessageFields {
        content: body.content,
        related_type: body.related_type,
        related_id: body.related_id,
        context_url: body.context_url,
        metadata: body.metadata,
        agent: body.agent,
    }
    .validate(&state.config)?;
    let session = load_session(&state, &caller, id).await?;
    super::check_known_agent(&state, &caller.tenant, &input, agent_wait).await?;
    if session.status == SessionStatus::Deleted {
        return Err(ApiError::invalid_state("the session is deleted"));
    }
    let session = make_room(&state, &caller, session, on_busy).await?;
    let engine = &state.engine;
    let submitted = match on_busy {
        // Found idle above; queued only if it still is when written (a `reject` at the same
        // instant may have queued meanwhile).
        OnBusy::Reject => {
            engine
                .submit_message_if_idle(&caller.tenant, &caller.user_id, &session, input)
                .await
        }
        _ => {
            engine
                .submit_message_to(&caller.tenant, &caller.user_id, &session, input)
                .await
        }
    };
    let submitted = match submitted {
        Err(StoreError::Busy(_)) => {
            return Err(busy_error(
                state.engine.busy_executions(&caller.tenant, id).await?,
            ));
        }
        other => other?,
    };
    super::wait::respond(&state, &caller, MessageAccepted::from(submitted), wait).await
}

/// 409 `session_busy`, naming the executions that make the session busy.
fn busy_error(busy: Vec<Execution>) -> ApiError {
    let ids: Vec<String> = busy
        .iter()
        .map(|e| format!("{} ({})", e.id, e.status))
        .collect();
    ApiError::new(
        StatusCode::CONFLICT,
        "session_busy",
        format!(
            "the session is busy: execution {} (send on_busy: enqueue, interrupt or rollback to go on)",
            ids.join(", ")
        ),
    )
}

/// Applies `on_busy` to the session's queued and running executions; answers the session
/// as the new message finds it.
async fn make_room<S: Store>(
    state: &AppState<S>,
    caller: &Caller,
    session: Session,
    on_busy: OnBusy,
) -> ApiResult<Session> {
    if on_busy == OnBusy::Enqueue {
        return Ok(session);
    }
    let engine = &state.engine;
    let busy = engine.busy_executions(&caller.tenant, session.id).await?;
    if busy.is_empty() {
        return Ok(session);
    }
    match on_busy {
        OnBusy::Enqueue => return Ok(session),
        OnBusy::Reject => return Err(busy_error(busy)),
        OnBusy::Interrupt => {
            engine
                .make_room(&caller.tenant, session.id, &busy, false)
                .await?
        }
        OnBusy::Rollback => {
            engine
                .make_room(&caller.tenant, session.id, &busy, true)
                .await?
        }
    }
    load_session(state, caller, session.id).await
}
