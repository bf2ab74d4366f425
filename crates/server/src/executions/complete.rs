//! `POST /v1/executions/{id}/complete`: an external agent completes its execution; the
//! optional `final_message` becomes the assistant's message to the session.

use axum::Json;
use axum::extract::{Path, State};
use serde::Deserialize;
use serde_json::Value;
use stepwise_core::Execution;
use stepwise_engine::EXTERNAL_AGENT;
use stepwise_store::Store;

use super::{LeaseHeader, load_external, schema};
use crate::AppState;
use crate::auth::Caller;
use crate::error::{ApiError, ApiJson, ApiResult, ErrorBody};
use crate::schemas::IdLease;
use crate::sessions::MAX_CONTENT_CHARS;

/// The execution's output and the answer to show the user.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct CompleteBody {
    #[serde(default)]
    pub output: Value,
    #[schema(schema_with = schema::final_message)]
    pub final_message: Option<String>,
}

pub async fn complete<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path(id): Path<String>,
    lease: LeaseHeader,
    ApiJson(body): ApiJson<CompleteBody>,
) -> ApiResult<Json<Execution>> {
    let execution = load_external(&state, &caller, &id, &lease).await?;
    if let Some(text) = &body.final_message
        && text.chars().count() > MAX_CONTENT_CHARS
    {
        return Err(ApiError::invalid(
            "final_message",
            format!("final_message is longer than {MAX_CONTENT_CHARS} characters"),
        ));
    }
    // A worker's string output is its answer to the user when it names none.
    let final_message = match (&body.final_message, &body.output) {
        (None, Value::String(text)) if execution.agent_type != EXTERNAL_AGENT => {
            Some(stepwise_core::summary::cut_chars(text, MAX_CONTENT_CHARS))
        }
        _ => body.final_message,
    };
    let done = state
        .engine
        .complete_external(&caller.tenant, &execution, body.output, final_message)
        .await?;
    Ok(Json(done))
}

#[utoipa::path(post, path = "/v1/executions/{id}/complete", tag = "external agents", operation_id = "complete_execution",
    params(IdLease), request_body = CompleteBody,
    responses((status = 200, body = Execution), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
#[allow(dead_code)]
pub(crate) fn doc() {}
