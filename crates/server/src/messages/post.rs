//! `POST /v1/sessions/{id}/messages`: a user message to a session; answers 202 with the
//! execution queued for it.

use axum::extract::{Path, State};
use serde::Deserialize;
use serde_json::Value;
use stepwise_core::SessionStatus;
use stepwise_store::Store;

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
}

#[utoipa::path(post, path = "/v1/sessions/{id}/messages", tag = "messages", operation_id = "post_message",
    params(IdPath), request_body = MessageBody,
    responses((status = 202, body = MessageAccepted), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody),
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
    let submitted = state
        .engine
        .submit_message_to(&caller.tenant, &caller.user_id, &session, input)
        .await?;
    super::wait::respond(&state, &caller, MessageAccepted::from(submitted), wait).await
}
