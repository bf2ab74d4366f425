//! `POST /v1/executions/{id}/steps/batch`: several steps of an external agent (or a
//! worker) in one request and one durable commit: 201 with each stored step and whether it
//! was new (the same step again writes nothing; another body at a stored number is 409 and
//! stops the batch there, the steps before it saved). With `?items=false` the answer
//! leaves the stored steps out (`items` is empty): for a sender that does not read them,
//! the server does not write them back.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use stepwise_core::Step;
use stepwise_engine::ExternalStep;
use stepwise_store::Store;
use utoipa::IntoParams;
use utoipa::openapi::path::{Parameter, ParameterIn};

use super::append_step::{StepInput, StepWire, check};
use super::{LeaseHeader, load_external, typed_body};
use crate::AppState;
use crate::auth::Caller;
use crate::error::{ApiError, ApiQuery, ApiResult, ErrorBody, JsonBody};
use crate::schemas::{IdLease, param};

/// Most steps one batch takes.
pub const MAX_BATCH_STEPS: usize = 1_000;

// The request's schema only: requests are read as `BatchWire`.
/// Steps in order; one without `step_number` takes the number after the step before it
/// (the first: after the execution's last step).
#[derive(Debug, utoipa::ToSchema)]
#[allow(dead_code)]
pub struct StepBatch {
    /// 1 to 1,000 steps.
    #[schema(min_items = 1, max_items = 1000)]
    pub steps: Vec<StepInput>,
}

/// `?items=false`: answer without the stored steps.
#[derive(Debug, Default, Deserialize)]
pub struct BatchQuery {
    #[serde(default)]
    pub items: Option<bool>,
}

impl IntoParams for BatchQuery {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        let schema = utoipa::openapi::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::Boolean)
            .default(Some(Value::Bool(true)));
        vec![
            param(
                "items",
                ParameterIn::Query,
                "false: the answer's `items` is empty (the steps are stored all the same)",
                schema,
            )
            .build(),
        ]
    }
}

/// A [`StepBatch`] as a request holds it (see [`StepWire`]).
#[derive(Debug, Deserialize)]
pub struct BatchWire {
    steps: Vec<StepWire>,
}

/// The stored steps, in the batch's order.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct StepsAppended {
    /// The stored steps (empty with `?items=false`).
    pub items: Vec<Step>,
    /// How many of them were new (the others were stored already with the same body).
    pub created: u32,
}

pub async fn append_steps<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path(id): Path<String>,
    lease: LeaseHeader,
    ApiQuery(query): ApiQuery<BatchQuery>,
    body: JsonBody<BatchWire>,
) -> ApiResult<(StatusCode, Json<StepsAppended>)> {
    let batch = match body {
        JsonBody::Typed(batch) => {
            check_count(batch.steps.len())?;
            batch
        }
        JsonBody::Value(body) => read_batch(body)?,
    };
    let execution = load_external(&state, &caller, &id, &lease).await?;
    let steps = check_steps(batch.steps, execution.step_count)?;
    let appended = state
        .engine
        .append_external_steps(&caller.tenant, &execution, steps)
        .await?;
    let created = appended.iter().filter(|a| a.created).count() as u32;
    let items = if query.items.unwrap_or(true) {
        appended.into_iter().map(|a| a.step).collect()
    } else {
        Vec::new()
    };
    Ok((StatusCode::CREATED, Json(StepsAppended { items, created })))
}

/// Checks a request's `steps` in order (each without a number takes the one after the
/// step before it, the first after `last`), naming a bad one's field as `steps[N].field`.
pub(super) fn check_steps(inputs: Vec<StepWire>, mut last: u64) -> ApiResult<Vec<ExternalStep>> {
    let mut steps = Vec::with_capacity(inputs.len());
    for (n, input) in inputs.into_iter().enumerate() {
        let step = check(input.into(), last).map_err(|e| {
            let field = format!("steps[{n}].{}", e.field.as_deref().unwrap_or("step"));
            e.with_field(field)
        })?;
        last = u64::from(step.step_number);
        steps.push(step);
    }
    Ok(steps)
}

fn check_count(count: usize) -> ApiResult<()> {
    if count == 0 || count > MAX_BATCH_STEPS {
        return Err(ApiError::invalid(
            "steps",
            format!("a batch holds 1 to {MAX_BATCH_STEPS} steps"),
        ));
    }
    Ok(())
}

/// A batch not read straight into [`BatchWire`]: checked as JSON first (`steps` an array
/// of 1 to 1,000), whole numbers written as floats taken, then read.
fn read_batch(body: Value) -> ApiResult<BatchWire> {
    let count = body
        .get("steps")
        .and_then(Value::as_array)
        .map(Vec::len)
        .ok_or_else(|| ApiError::invalid("steps", "steps must be an array of steps"))?;
    check_count(count)?;
    let pointers = step_integers(count);
    let pointers: Vec<&str> = pointers.iter().map(String::as_str).collect();
    typed_body(body, &pointers)
}

/// The pointers of the integers of a body's `steps` (the first `count`), where a whole
/// number written as a float (`3.0`) is taken.
pub(super) fn step_integers(count: usize) -> Vec<String> {
    let mut pointers = Vec::with_capacity(count * 4);
    for n in 0..count {
        for field in [
            "step_number",
            "token_usage/input",
            "token_usage/output",
            "token_usage/total",
        ] {
            pointers.push(format!("/steps/{n}/{field}"));
        }
    }
    pointers
}

#[utoipa::path(post, path = "/v1/executions/{id}/steps/batch", tag = "external agents", operation_id = "append_steps",
    params(IdLease, BatchQuery), request_body = StepBatch,
    responses((status = 201, body = StepsAppended), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody),
              (status = 409, body = ErrorBody), (status = 422, body = ErrorBody)))]
#[allow(dead_code)]
pub(crate) fn doc() {}
