//! `POST /v1/executions/{id}/pause`: an external agent asks the user a question; the
//! user's next message in the session resumes the execution with the answer.

use axum::Json;
use axum::extract::{Path, State};
use serde::Deserialize;
use stepwise_core::Execution;
use stepwise_store::Store;

use super::{LeaseHeader, load_external, schema};
use crate::AppState;
use crate::auth::Caller;
use crate::error::{ApiError, ApiJson, ApiResult, ErrorBody};
use crate::schemas::IdLease;
use crate::sessions::MAX_CONTENT_CHARS;

/// The question for the user.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct PauseBody {
    #[schema(schema_with = schema::question)]
    pub question: String,
}

pub async fn pause<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path(id): Path<String>,
    lease: LeaseHeader,
    ApiJson(body): ApiJson<PauseBody>,
) -> ApiResult<Json<Execution>> {
    let execution = load_external(&state, &caller, &id, &lease).await?;
    if body.question.trim().is_empty() || body.question.chars().count() > MAX_CONTENT_CHARS {
        return Err(ApiError::invalid(
            "question",
            format!("question must not be empty (and at most {MAX_CONTENT_CHARS} characters)"),
        ));
    }
    let paused = state
        .engine
        .pause_external(&caller.tenant, &execution, body.question)
        .await?;
    Ok(Json(paused))
}

#[utoipa::path(post, path = "/v1/executions/{id}/pause", tag = "external agents", operation_id = "pause_execution",
    params(IdLease), request_body = PauseBody,
    responses((status = 200, body = Execution), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
#[allow(dead_code)]
pub(crate) fn doc() {}
