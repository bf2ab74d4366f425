//! A session's messages: listing them, and posting a user message (to a session, or to a
//! new session with `POST /v1/messages`), which queues the execution that answers it. One
//! file per endpoint; here what the two posts share: the agent choice, the accepted answer
//! and the checks of a message.

pub(crate) mod list;
pub(crate) mod post;
pub(crate) mod post_new_session;
pub(crate) mod wait;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use stepwise_core::{Execution, Id, Message};
use stepwise_engine::{AgentChoice, MessageInput};

use crate::ServerConfig;
use crate::error::{ApiError, ApiResult};
use crate::limits::{
    MAX_CONTENT_CHARS, canonical_url_opt, check_metadata, check_related_type, check_text,
};
use crate::sessions::MAX_REF_CHARS;

/// The agent that answers a message (the server's default when absent).
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct AgentBody {
    #[serde(rename = "type")]
    #[schema(schema_with = agent_type)]
    pub agent_type: String,
    #[schema(schema_with = crate::schemas::object_or_null)]
    pub config: Option<Value>,
    /// Messages only: queue the message even when no worker of this tenant announced
    /// `type` in the last 24 hours (without it such a message is 422 `unknown_agent`).
    /// Ignored where an agent is a session's default.
    #[serde(default)]
    pub wait: Option<bool>,
}

/// `agent.type`: a built-in agent type or a worker's.
pub(crate) fn agent_type() -> utoipa::openapi::schema::Schema {
    utoipa::openapi::schema::ObjectBuilder::new()
        .schema_type(utoipa::openapi::schema::Type::String)
        .min_length(Some(1))
        .max_length(Some(64))
        .pattern(Some(stepwise_core::name::AGENT_TYPE_PATTERN))
        .description(Some("`demo`, `tool-calling` when a model server is configured, an agent type the embedding application registered, or a worker's agent type (`GET /v1/agents`; queued until a worker of it claims it). Not `external`."))
        .build()
        .into()
}

impl AgentBody {
    /// The agent as the engine takes it: its type checked for size, its config an object
    /// or `null` (fields named under `field`). Whether the type can run is the engine's
    /// to say (`Engine::choose_agent`).
    pub(crate) fn checked(self, field: &str) -> ApiResult<AgentChoice> {
        check_text(&format!("{field}.type"), &Some(self.agent_type.clone()), 64)?;
        let config = match self.config {
            None | Some(Value::Null) => Value::Null,
            Some(config @ Value::Object(_)) => config,
            Some(_) => {
                return Err(ApiError::invalid(
                    &format!("{field}.config"),
                    format!("{field}.config must be a JSON object"),
                ));
            }
        };
        Ok(AgentChoice {
            agent_type: self.agent_type,
            config,
        })
    }
}

/// 422 `unknown_agent` for a message naming an agent type that is neither built in nor
/// announced by a worker process of the caller's tenant in the last 24 hours, unless it
/// says `agent.wait: true` (then it queues until a worker of it claims it). The message
/// names the closest known types ("did you mean greeter?").
pub(crate) async fn check_known_agent<S: stepwise_store::Store>(
    state: &crate::AppState<S>,
    tenant: &stepwise_store::Tenant,
    input: &MessageInput,
    wait: bool,
) -> ApiResult<()> {
    let Some(agent) = &input.agent else {
        return Ok(());
    };
    if wait {
        return Ok(());
    }
    let Some(unknown) = state
        .engine
        .unknown_agent(tenant, &agent.agent_type)
        .await?
    else {
        return Ok(());
    };
    let hint = match unknown.closest.as_slice() {
        [] => {
            let mut known = unknown.known.clone();
            known.truncate(10);
            format!("known agent types: {}", known.join(", "))
        }
        [one] => format!("did you mean {one}?"),
        many => format!("did you mean {}?", many.join(" or ")),
    };
    Err(ApiError::new(
        axum::http::StatusCode::UNPROCESSABLE_ENTITY,
        "unknown_agent",
        format!(
            "no worker of this tenant announced agent type '{}' in the last 24 hours and it is not built in: {hint} (send agent.wait: true to queue the message until a worker of it claims it)",
            agent.agent_type
        ),
    )
    .with_field("agent.type"))
}

/// The answer of a post: the stored message and the execution queued for it.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct MessageAccepted {
    #[schema(value_type = String, format = Uuid)]
    pub session_id: Id,
    pub message: Message,
    pub execution: Execution,
}

impl From<stepwise_engine::Submitted> for MessageAccepted {
    fn from(submitted: stepwise_engine::Submitted) -> Self {
        MessageAccepted {
            session_id: submitted.session_id,
            message: submitted.message,
            execution: submitted.execution,
        }
    }
}

/// The fields of a message both posts carry, and a front-end protocol's turn.
pub struct MessageFields {
    pub content: String,
    pub related_type: Option<String>,
    pub related_id: Option<String>,
    pub context_url: Option<String>,
    pub metadata: Option<Value>,
    pub agent: Option<AgentBody>,
}

impl MessageFields {
    /// Checks the message and answers the engine's input. Whether the agent type can run
    /// is the engine's to say (`Engine::choose_agent`).
    pub fn validate(self, config: &ServerConfig) -> ApiResult<MessageInput> {
        let MessageFields {
            content,
            related_type,
            related_id,
            context_url,
            metadata,
            agent,
        } = self;
        if content.trim().is_empty() {
            return Err(ApiError::invalid("content", "content must not be empty"));
        }
        if content.chars().count() > MAX_CONTENT_CHARS {
            return Err(ApiError::invalid(
                "content",
                format!("content is longer than {MAX_CONTENT_CHARS} characters"),
            ));
        }
        check_text("related_type", &related_type, MAX_REF_CHARS)?;
        check_related_type(config, "related_type", &related_type)?;
        check_text("related_id", &related_id, MAX_REF_CHARS)?;
        let context_url = canonical_url_opt("context_url", context_url)?;
        let agent = agent.map(|agent| agent.checked("agent")).transpose()?;
        Ok(MessageInput {
            content,
            related_type,
            related_id,
            context_url,
            metadata: check_metadata("metadata", &metadata)?,
            agent,
            ..MessageInput::default()
        })
    }
}
