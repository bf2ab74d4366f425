//! `POST /v1/sessions`: creates a session.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde::Deserialize;
use serde_json::Value;
use stepwise_core::name::validate_name;
use stepwise_core::{Session, SessionAgent};
use stepwise_store::{NewSession, SessionPatch, Store};

use super::{MAX_REF_CHARS, MAX_TITLE_CHARS, check_metadata, check_text};
use crate::auth::Caller;
use crate::error::{ApiError, ApiJson, ApiResult, ErrorBody};
use crate::limits::{canonical_url_opt, check_related_type};
use crate::messages::AgentBody;
use crate::{AppState, ServerConfig};

/// A new session (every field optional). Also the `session` of `POST /v1/messages`.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
pub struct CreateSessionBody {
    #[schema(schema_with = crate::schemas::title)]
    pub title: Option<String>,
    #[schema(schema_with = crate::schemas::name)]
    pub name: Option<String>,
    #[schema(schema_with = crate::schemas::reference)]
    pub related_type: Option<String>,
    #[schema(schema_with = crate::schemas::reference)]
    pub related_id: Option<String>,
    #[schema(schema_with = crate::schemas::context_url)]
    pub initial_context_url: Option<String>,
    #[schema(schema_with = crate::schemas::object_or_null)]
    pub metadata: Option<Value>,
    /// The agent a message that names none runs with (default: the server's default).
    pub agent: Option<AgentBody>,
}

impl CreateSessionBody {
    /// Checks the body (field names prefixed with `prefix`) and answers the session to
    /// create, without its user.
    pub(crate) fn validate(&self, config: &ServerConfig, prefix: &str) -> ApiResult<NewSession> {
        let field = |name: &str| format!("{prefix}{name}");
        check_text(&field("title"), &self.title, MAX_TITLE_CHARS)?;
        check_text(&field("related_type"), &self.related_type, MAX_REF_CHARS)?;
        check_related_type(config, &field("related_type"), &self.related_type)?;
        check_text(&field("related_id"), &self.related_id, MAX_REF_CHARS)?;
        let initial_context_url = canonical_url_opt(
            &field("initial_context_url"),
            self.initial_context_url.clone(),
        )?;
        if let Some(name) = &self.name {
            validate_name(name).map_err(|e| ApiError::invalid(&field("name"), e.to_string()))?;
        }
        Ok(NewSession {
            user_id: String::new(),
            name: self.name.clone(),
            title: self.title.clone(),
            related_type: self.related_type.clone(),
            related_id: self.related_id.clone(),
            initial_context_url,
            metadata: check_metadata(&field("metadata"), &self.metadata)?,
        })
    }
}

#[utoipa::path(post, path = "/v1/sessions", tag = "sessions", operation_id = "create_session",
    request_body = CreateSessionBody,
    responses((status = 201, body = stepwise_core::Session), (status = 400, body = ErrorBody), (status = 409, body = ErrorBody)))]
#[allow(dead_code)]
pub(crate) fn doc() {}

pub async fn create<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    ApiJson(body): ApiJson<CreateSessionBody>,
) -> ApiResult<impl IntoResponse> {
    let mut new = body.validate(&state.config, "")?;
    let agent = body
        .agent
        .map(|agent| super::session_agent(&state, agent))
        .transpose()?;
    new.user_id = caller.user_id.clone();
    let session = create_with_agent(&state, &caller, new, agent).await?;
    Ok((StatusCode::CREATED, Json(session)))
}

/// Creates the session, then sets its default agent when there is one.
pub(crate) async fn create_with_agent<S: Store>(
    state: &AppState<S>,
    caller: &Caller,
    new: NewSession,
    agent: Option<SessionAgent>,
) -> ApiResult<Session> {
    let session = state.store().create_session(&caller.tenant, new).await?;
    let Some(agent) = agent else {
        return Ok(session);
    };
    let patch = SessionPatch {
        agent: Some(Some(agent)),
        ..SessionPatch::default()
    };
    Ok(state
        .store()
        .update_session(&caller.tenant, session.id, patch)
        .await?
        .unwrap_or(session))
}
