//! `PATCH /v1/sessions/{id}`: changes a session's title, name, status, metadata or default
//! agent.

use axum::Json;
use axum::extract::{Path, State};
use serde::Deserialize;
use serde_json::Value;
use stepwise_core::name::validate_name;
use stepwise_core::{Session, SessionStatus};
use stepwise_store::{SessionPatch, Store};

use super::{MAX_TITLE_CHARS, check_metadata, check_text};
use crate::AppState;
use crate::auth::Caller;
use crate::error::{ApiError, ApiJson, ApiResult, ErrorBody, path_id};
use crate::messages::AgentBody;
use crate::schemas::IdPath;

/// The statuses a client may set.
const SETTABLE_STATUSES: [&str; 4] = ["active", "completed", "archived", "closed"];

/// The fields to change (absent: unchanged).
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct UpdateSessionBody {
    #[schema(schema_with = crate::schemas::title)]
    pub title: Option<String>,
    #[schema(schema_with = crate::schemas::name)]
    pub name: Option<String>,
    /// `active`, `completed`, `archived` or `closed`.
    #[schema(schema_with = settable_status)]
    pub status: Option<String>,
    #[schema(schema_with = crate::schemas::object_or_null)]
    pub metadata: Option<Value>,
    /// The session's default agent; `null` clears it.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<AgentBody>, nullable)]
    pub agent: Option<Option<AgentBody>>,
}

/// A field that is present: `null` is `Some(None)`, absent stays `None` (`default`).
fn present<'de, D, T>(deserializer: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(deserializer).map(Some)
}

/// `status`: one of [`SETTABLE_STATUSES`], or `null`.
fn settable_status() -> utoipa::openapi::schema::Schema {
    crate::schemas::string_enum_or_null(&SETTABLE_STATUSES)
}

#[utoipa::path(patch, path = "/v1/sessions/{id}", tag = "sessions", operation_id = "update_session",
    params(IdPath), request_body = UpdateSessionBody,
    responses((status = 200, body = Session), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
#[allow(dead_code)]
pub(crate) fn doc() {}

pub async fn update<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<UpdateSessionBody>,
) -> ApiResult<Json<Session>> {
    let id = path_id(&id, "id")?;
    check_text("title", &body.title, MAX_TITLE_CHARS)?;
    if let Some(name) = &body.name {
        validate_name(name).map_err(|e| ApiError::invalid("name", e.to_string()))?;
    }
    let status = match &body.status {
        None => None,
        Some(text) => match SessionStatus::parse(text) {
            Some(status) if status.client_settable() => Some(status),
            _ => {
                return Err(ApiError::invalid(
                    "status",
                    "status must be one of active, completed, archived, closed",
                ));
            }
        },
    };
    let metadata = match &body.metadata {
        None => None,
        some => Some(check_metadata("metadata", some)?),
    };
    let agent = match body.agent {
        None => None,
        Some(None) => Some(None),
        Some(Some(agent)) => Some(Some(super::session_agent(&state, agent)?)),
    };
    let patch = SessionPatch {
        title: body.title,
        name: body.name,
        status,
        metadata,
        agent,
    };
    let session = state
        .store()
        .update_session(&caller.tenant, id, patch)
        .await?
        .ok_or_else(|| ApiError::not_found("session"))?;
    Ok(Json(session))
}
