//! `POST /v1/messages`: a user message that starts a new session; answers 202 with the new
//! session's id and the execution queued for the message.

use axum::extract::State;
use serde::Deserialize;
use serde_json::Value;
use stepwise_store::Store;

use super::{AgentBody, MessageAccepted, MessageFields};
use crate::AppState;
use crate::auth::Caller;
use crate::error::{ApiJson, ApiQuery, ApiResult, ErrorBody};
use crate::sessions::create::CreateSessionBody;

/// A user message, the agent that answers it and the session to create (all optional but
/// `content`).
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct NewSessionMessageBody {
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
    pub session: Option<CreateSessionBody>,
}

#[utoipa::path(post, path = "/v1/messages", tag = "messages", operation_id = "post_message_new_session",
    request_body = NewSessionMessageBody,
    responses((status = 202, body = MessageAccepted), (status = 400, body = ErrorBody),
              (status = 422, body = ErrorBody, description = "`unknown_agent`: no worker announced `agent.type` in the last 24 hours (send `agent.wait: true` to queue anyway)")))]
#[allow(dead_code)]
pub(crate) fn doc() {}

pub async fn post_new_session<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    ApiQuery(query): ApiQuery<super::wait::WaitQuery>,
    ApiJson(body): ApiJson<NewSessionMessageBody>,
) -> ApiResult<axum::response::Response> {
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
    // Everything is checked before the session is created, so a bad message writes nothing:
    // the agent type by the engine's own rule, then the session.
    state.engine.choose_agent(&input)?;
    super::check_known_agent(&state, &caller.tenant, &input, agent_wait).await?;
    let session_body = body.session.unwrap_or_default();
    let mut new = session_body.validate(&state.config, "session.")?;
    let agent = session_body
        .agent
        .map(|agent| crate::sessions::session_agent(&state, agent))
        .transpose()
        .map_err(|e| {
            let field = format!("session.{}", e.field.as_deref().unwrap_or("agent"));
            e.with_field(field)
        })?;
    new.user_id = caller.user_id.clone();
    let session = crate::sessions::create::create_with_agent(&state, &caller, new, agent).await?;
    let submitted = state
        .engine
        .submit_message_to(&caller.tenant, &caller.user_id, &session, input)
        .await?;
    super::wait::respond(&state, &caller, MessageAccepted::from(submitted), wait).await
}
