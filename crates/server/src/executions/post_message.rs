//! `POST /v1/executions/{id}/messages`: an agent outside the server (an external agent, or a
//! worker with its lease) posts an `info` or `notification` line to its session, shown in the
//! web UI and on the event stream like the engine's own info lines.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Deserialize;
use stepwise_core::{Message, Role};
use stepwise_store::Store;

use super::{LeaseHeader, load_external, schema};
use crate::AppState;
use crate::auth::Caller;
use crate::error::{ApiError, ApiJson, ApiResult, ErrorBody};
use crate::schemas::IdLease;
use crate::sessions::MAX_CONTENT_CHARS;

/// A line for the session.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct AgentLineBody {
    /// `info` (a status line) or `notification` (something the user should see).
    #[schema(schema_with = line_role)]
    pub role: String,
    #[schema(schema_with = schema::question)]
    pub content: String,
}

fn line_role() -> utoipa::openapi::schema::Schema {
    utoipa::openapi::schema::ObjectBuilder::new()
        .schema_type(utoipa::openapi::schema::Type::String)
        .enum_values(Some(["info", "notification"]))
        .build()
        .into()
}

pub async fn post_message<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path(id): Path<String>,
    lease: LeaseHeader,
    ApiJson(body): ApiJson<AgentLineBody>,
) -> ApiResult<(StatusCode, Json<Message>)> {
    let role = match body.role.as_str() {
        "info" => Role::Info,
        "notification" => Role::Notification,
        _ => {
            return Err(ApiError::invalid(
                "role",
                "role must be info or notification",
            ));
        }
    };
    if body.content.trim().is_empty() || body.content.chars().count() > MAX_CONTENT_CHARS {
        return Err(ApiError::invalid(
            "content",
            format!("content must not be empty (and at most {MAX_CONTENT_CHARS} characters)"),
        ));
    }
    let execution = load_external(&state, &caller, &id, &lease).await?;
    let message = state
        .engine
        .post_agent_line(&caller.tenant, &execution, role, body.content)
        .await?;
    Ok((StatusCode::CREATED, Json(message)))
}

#[utoipa::path(post, path = "/v1/executions/{id}/messages", tag = "external agents", operation_id = "post_execution_message",
    params(IdLease), request_body = AgentLineBody,
    responses((status = 201, body = Message), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
#[allow(dead_code)]
pub(crate) fn doc() {}
