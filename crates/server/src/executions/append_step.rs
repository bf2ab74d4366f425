//! `POST /v1/executions/{id}/steps`: an external agent's step (201; the same step again is
//! 200 and writes nothing; another body at its number is 409).

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde::Deserialize;
use serde_json::Value;
use stepwise_core::{Step, StepBody, StepError, StepKind, Timestamp, TokenUsage, ToolCall};
use stepwise_engine::ExternalStep;
use stepwise_store::Store;

use super::{LeaseHeader, MAX_TOOL_CALLS_PER_STEP, load_external, schema, typed_body};
use crate::AppState;
use crate::auth::Caller;
use crate::error::{ApiError, ApiResult, ErrorBody, JsonBody};
use crate::schemas::IdLease;
use crate::sessions::MAX_CONTENT_BYTES;

/// A step as an external agent sends it: a step without ids.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct StepInput {
    /// Defaults to the next number.
    #[schema(schema_with = schema::step_number)]
    pub step_number: Option<u32>,
    /// Defaults to `action`.
    #[schema(schema_with = schema::step_kind)]
    pub kind: Option<String>,
    #[serde(flatten)]
    pub body: StepBody,
}

/// A [`StepInput`] as a request holds it, read field by field: the same fields and defaults,
/// without `#[serde(flatten)]`, which buffers every field of every step before reading it.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct StepWire {
    step_number: Option<u32>,
    kind: Option<String>,
    model_output: Option<String>,
    tool_calls: Vec<ToolCall>,
    code: Option<String>,
    observations: Option<String>,
    error: Option<StepError>,
    output: Value,
    token_usage: TokenUsage,
    started_at: Option<Timestamp>,
    ended_at: Option<Timestamp>,
}

impl From<StepWire> for StepInput {
    fn from(w: StepWire) -> Self {
        StepInput {
            step_number: w.step_number,
            kind: w.kind,
            body: StepBody {
                model_output: w.model_output,
                tool_calls: w.tool_calls,
                code: w.code,
                observations: w.observations,
                error: w.error,
                output: w.output,
                token_usage: w.token_usage,
                started_at: w.started_at,
                ended_at: w.ended_at,
            },
        }
    }
}

/// Counts the bytes written to it (the JSON size of a step, without keeping the JSON).
#[derive(Default)]
struct Counter(usize);

impl std::io::Write for Counter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len();
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The step to save, checked: its kind, its number, its size.
pub(super) fn check(input: StepInput, step_count: u64) -> ApiResult<ExternalStep> {
    let kind = match &input.kind {
        None => StepKind::Action,
        Some(text) => StepKind::parse(text).ok_or_else(|| {
            ApiError::invalid(
                "kind",
                "kind must be one of task, system_prompt, planning, action, user_input, final_answer",
            )
        })?,
    };
    let step_number = match input.step_number {
        Some(0) => return Err(ApiError::invalid("step_number", "step numbers start at 1")),
        Some(n) => n,
        None => u32::try_from(step_count + 1)
            .map_err(|_| ApiError::invalid("step_number", "too many steps"))?,
    };
    let mut body = input.body;
    if body.tool_calls.len() > MAX_TOOL_CALLS_PER_STEP {
        return Err(ApiError::invalid(
            "tool_calls",
            format!("a step holds at most {MAX_TOOL_CALLS_PER_STEP} tool calls"),
        ));
    }
    if body.token_usage.total == 0 {
        body.token_usage.total = body.token_usage.input + body.token_usage.output;
    }
    let mut size = Counter::default();
    let size = serde_json::to_writer(&mut size, &body).map_or(0, |()| size.0);
    if size > MAX_CONTENT_BYTES * 2 {
        return Err(ApiError::invalid("body", "the step is larger than 2 MiB"));
    }
    Ok(ExternalStep {
        step_number,
        kind,
        body,
    })
}

pub async fn append_step<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path(id): Path<String>,
    lease: LeaseHeader,
    input: JsonBody<StepWire>,
) -> ApiResult<impl IntoResponse> {
    let input: StepWire = match input {
        JsonBody::Typed(input) => input,
        JsonBody::Value(input) => typed_body(
            input,
            &[
                "/step_number",
                "/token_usage/input",
                "/token_usage/output",
                "/token_usage/total",
            ],
        )?,
    };
    let execution = load_external(&state, &caller, &id, &lease).await?;
    let step = check(input.into(), execution.step_count)?;
    let appended = state
        .engine
        .append_external_step(&caller.tenant, &execution, step)
        .await?;
    let status = if appended.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(appended.step)))
}

#[utoipa::path(post, path = "/v1/executions/{id}/steps", tag = "external agents", operation_id = "append_step",
    params(IdLease), request_body = StepInput,
    responses((status = 201, body = Step), (status = 200, body = Step, description = "The same step again"),
              (status = 409, body = ErrorBody), (status = 422, body = ErrorBody)))]
#[allow(dead_code)]
pub(crate) fn doc() {}
