//! `POST /v1/executions/{id}/complete`: an external agent completes its execution; the
//! optional `final_message` becomes the assistant's message to the session. The optional
//! `steps` are its last steps, saved first (as `POST /v1/executions/{id}/steps/batch`
//! saves them) under the same lease check: a one-step agent's step and its answer in one
//! request.

use axum::Json;
use axum::extract::{Path, State};
use serde::Deserialize;
use serde_json::Value;
use stepwise_core::Execution;
use stepwise_engine::EXTERNAL_AGENT;
use stepwise_store::Store;

use super::append_step::{StepInput, StepWire};
use super::append_steps::{MAX_BATCH_STEPS, check_steps, step_integers};
use super::{LeaseHeader, load_external, schema, typed_body};
use crate::AppState;
use crate::auth::Caller;
use crate::error::{ApiError, ApiResult, ErrorBody, JsonBody};
use crate::schemas::IdLease;
use crate::sessions::MAX_CONTENT_CHARS;

/// The execution's output and the answer to show the user.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct CompleteBody {
    #[serde(default)]
    pub output: Value,
    #[schema(schema_with = schema::final_message)]
    pub final_message: Option<String>,
    /// The agent's last steps (1 to 1,000), saved before it completes, in order, as
    /// `POST /v1/executions/{id}/steps/batch` saves them; one without `step_number` takes the
    /// number after the step before it.
    #[serde(default)]
    #[schema(value_type = Option<Vec<StepInput>>, min_items = 1, max_items = 1000)]
    pub steps: Option<Vec<StepWire>>,
}

pub async fn complete<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path(id): Path<String>,
    lease: LeaseHeader,
    body: JsonBody<CompleteBody>,
) -> ApiResult<Json<Execution>> {
    let body = match body {
        JsonBody::Typed(body) => body,
        // Not a `CompleteBody` as written: its steps' whole numbers may be floats (`3.0`).
        JsonBody::Value(body) => {
            let count = body
                .get("steps")
                .and_then(Value::as_array)
                .map_or(0, |steps| steps.len().min(MAX_BATCH_STEPS + 1));
            let pointers = step_integers(count);
            let pointers: Vec<&str> = pointers.iter().map(String::as_str).collect();
            typed_body(body, &pointers)?
        }
    };
    if let Some(steps) = &body.steps
        && (steps.is_empty() || steps.len() > MAX_BATCH_STEPS)
    {
        return Err(ApiError::invalid(
            "steps",
            format!("steps holds 1 to {MAX_BATCH_STEPS} steps"),
        ));
    }
    let execution = load_external(&state, &caller, &id, &lease).await?;
    if let Some(text) = &body.final_message
        && text.chars().count() > MAX_CONTENT_CHARS
    {
        return Err(ApiError::invalid(
            "final_message",
            format!("final_message is longer than {MAX_CONTENT_CHARS} characters"),
        ));
    }
    // Every step is checked before anything is written.
    let steps = check_steps(body.steps.unwrap_or_default(), execution.step_count)?;
    // A worker's string output is its answer to the user when it names none.
    let final_message = match (&body.final_message, &body.output) {
        (None, Value::String(text)) if execution.agent_type != EXTERNAL_AGENT => {
            Some(stepwise_core::summary::cut_chars(text, MAX_CONTENT_CHARS))
        }
        _ => body.final_message,
    };
    let done = if steps.is_empty() {
        state
            .engine
            .complete_external(&caller.tenant, &execution, body.output, final_message)
            .await?
    } else {
        state
            .engine
            .complete_external_with_steps(
                &caller.tenant,
                &execution,
                steps,
                body.output,
                final_message,
            )
            .await?
    };
    Ok(Json(done))
}

#[utoipa::path(post, path = "/v1/executions/{id}/complete", tag = "external agents", operation_id = "complete_execution",
    params(IdLease), request_body = CompleteBody,
    responses((status = 200, body = Execution), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody),
              (status = 409, body = ErrorBody), (status = 422, body = ErrorBody)))]
#[allow(dead_code)]
pub(crate) fn doc() {}
