//! `POST /v1/sessions/{id}/items/pop`: removes the latest item and answers it.

use axum::Json;
use axum::extract::{Path, State};
use axum::response::IntoResponse;
use serde::Serialize;
use serde_json::{Value, json};
use stepwise_core::{StepBody, StepKind};
use stepwise_store::Store;

use super::{PlannedStep, body_object, body_params, write};
use crate::AppState;
use crate::auth::Caller;
use crate::error::{ApiJson, ApiResult, ErrorBody};

/// With `version`, the pop is written as step `version + 1` (sent again, it removes nothing
/// more and answers the same item).
#[derive(Debug, utoipa::ToSchema)]
#[allow(dead_code)] // the schema of a body read field by field
pub struct PopItemBody {
    #[schema(schema_with = super::version_or_null)]
    pub version: Option<u64>,
    #[schema(schema_with = super::op_id_or_null)]
    pub op_id: Option<String>,
}

/// The removed item (`null` when there was none) and the version after it.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct PoppedItem {
    #[schema(schema_with = crate::schemas::object_or_null)]
    pub item: Option<Value>,
    pub version: u64,
}

pub async fn pop<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<Value>,
) -> ApiResult<impl IntoResponse> {
    let params = body_params(body_object(&body)?)?;
    let written = write(&state, &caller, &id, &params, true, |before, op_id| {
        let item: Value = serde_json::from_str(before.items.last()?).ok()?;
        Some(PlannedStep {
            kind: StepKind::Action,
            body: StepBody {
                observations: Some(format!("Removed the latest item: {}", describe(&item))),
                output: json!({"items_op": "pop", "item": item, "op_id": op_id}),
                ..StepBody::default()
            },
            messages: Vec::new(),
        })
    })
    .await?;
    let item = written
        .before
        .items
        .last()
        .and_then(|text| serde_json::from_str::<Value>(text).ok());
    Ok(Json(PoppedItem {
        item,
        version: written.version,
    }))
}

#[utoipa::path(post, path = "/v1/sessions/{id}/items/pop", tag = "conversation items", operation_id = "pop_item",
    params(crate::schemas::IdPath), request_body = PopItemBody,
    responses((status = 200, body = PoppedItem),
              (status = 404, body = ErrorBody),
              (status = 409, body = ErrorBody, description = "Another write is at that version (`conflict`): read the version again"),
              (status = 422, body = ErrorBody, description = "The session is deleted (`invalid_state`)")))]
#[allow(dead_code)]
pub(crate) fn doc() {}

/// A short description of an item for a pop step (`message (user)`, `function_call`).
fn describe(item: &Value) -> String {
    use crate::error::cut;
    let kind = item
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("message");
    match item.get("role").and_then(Value::as_str) {
        Some(role) => format!("{} ({})", cut(kind, 64), cut(role, 32)),
        None => cut(kind, 64),
    }
}
