//! `DELETE /v1/sessions/{id}/items?version=V&op_id=X`: removes every item (one step that
//! says so; the steps before it stay).

use axum::Json;
use axum::extract::{Path, State};
use axum::response::IntoResponse;
use serde::{Deserialize, Serialize};
use serde_json::json;
use stepwise_core::{Role, StepBody, StepKind};
use stepwise_store::Store;

use super::{MAX_VERSION, PlannedStep, WriteParams, write};
use crate::AppState;
use crate::auth::Caller;
use crate::error::{ApiError, ApiQuery, ApiResult, ErrorBody};
use crate::schemas::IdPath;

/// Where the clear goes (both optional).
#[derive(Debug, Default, Deserialize)]
pub struct ClearQuery {
    pub version: Option<String>,
    pub op_id: Option<String>,
}

impl utoipa::IntoParams for ClearQuery {
    fn into_params(
        _: impl Fn() -> Option<utoipa::openapi::path::ParameterIn>,
    ) -> Vec<utoipa::openapi::path::Parameter> {
        use crate::schemas::param;
        use utoipa::openapi::path::ParameterIn;
        vec![
            param("version", ParameterIn::Query, "The version the client last read or wrote: the clear is written as the next step (sent again, it is not written twice)", super::version_schema()).build(),
            param("op_id", ParameterIn::Query, "The client's id for this operation", super::op_id_schema()).build(),
        ]
    }
}

/// How many items the clear removed and the version after it.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ItemsCleared {
    pub cleared: usize,
    pub version: u64,
}

pub async fn clear<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path(id): Path<String>,
    ApiQuery(query): ApiQuery<ClearQuery>,
) -> ApiResult<impl IntoResponse> {
    let version = match &query.version {
        None => None,
        Some(text) => Some(
            text.trim()
                .parse::<u64>()
                .ok()
                .filter(|v| *v <= MAX_VERSION)
                .ok_or_else(|| {
                    ApiError::invalid(
                        "version",
                        format!("version must be an integer from 0 to {MAX_VERSION}"),
                    )
                })?,
        ),
    };
    let params = WriteParams {
        version,
        op_id: query.op_id,
    };
    let written = write(&state, &caller, &id, &params, true, |before, op_id| {
        let count = before.items.len();
        (count > 0).then(|| PlannedStep {
            kind: StepKind::Action,
            body: StepBody {
                observations: Some(format!(
                    "Cleared the conversation's items ({count} removed)"
                )),
                output: json!({"items_op": "clear", "count": count, "op_id": op_id}),
                ..StepBody::default()
            },
            messages: vec![(
                Role::Info,
                "The conversation's history was cleared".to_string(),
            )],
        })
    })
    .await?;
    Ok(Json(ItemsCleared {
        cleared: written.before.items.len(),
        version: written.version,
    }))
}

#[utoipa::path(delete, path = "/v1/sessions/{id}/items", tag = "conversation items", operation_id = "clear_items",
    params(IdPath, ClearQuery),
    responses((status = 200, body = ItemsCleared),
              (status = 404, body = ErrorBody),
              (status = 409, body = ErrorBody, description = "Another write is at that version (`conflict`): read the version again"),
              (status = 422, body = ErrorBody, description = "The session is deleted (`invalid_state`)")))]
#[allow(dead_code)]
pub(crate) fn doc() {}
