//! `POST /v1/checkpoints/delete-for-runs`: deletes the checkpoints (and their pending
//! writes) whose metadata `run_id` is one of these, in every thread of the tenant
//! (LangGraph's `delete_for_runs`). Channel values stay: a later checkpoint may build on them.

use axum::Json;
use axum::extract::State;
use serde::Serialize;
use serde_json::Value;
use stepwise_store::Store;

use super::{MAX_ID_CHARS, MAX_ITEMS, check_text, object};
use crate::AppState;
use crate::auth::Caller;
use crate::error::{ApiError, ApiJson, ApiResult, ErrorBody};
use stepwise_store::prelude::*;

#[derive(Debug, utoipa::ToSchema)]
#[allow(dead_code)]
pub struct DeleteForRunsBody {
    #[schema(schema_with = super::schema::run_ids)]
    pub run_ids: Vec<String>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct CheckpointsDeleted {
    /// Checkpoints deleted.
    pub deleted: u64,
}

/// Reads a list of ids (`field`: an array of at most 1,000 strings of 1 to `max` characters).
pub(crate) fn ids(
    map: &serde_json::Map<String, Value>,
    field: &str,
    max: usize,
) -> ApiResult<Vec<String>> {
    let Some(Value::Array(items)) = map.get(field) else {
        return Err(ApiError::invalid(
            field,
            format!("{field} must be an array of strings"),
        ));
    };
    if items.len() > MAX_ITEMS {
        return Err(ApiError::invalid(
            field,
            format!("{field} holds at most {MAX_ITEMS} ids"),
        ));
    }
    items
        .iter()
        .enumerate()
        .map(|(i, item)| match item {
            Value::String(id) => {
                check_text(&format!("{field}[{i}]"), id, 1, max)?;
                Ok(id.clone())
            }
            _ => Err(ApiError::invalid(
                &format!("{field}[{i}]"),
                "every id must be a string",
            )),
        })
        .collect()
}

pub async fn delete_for_runs<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    ApiJson(body): ApiJson<Value>,
) -> ApiResult<Json<CheckpointsDeleted>> {
    let map = object(body)?;
    let run_ids = ids(&map, "run_ids", MAX_ID_CHARS)?;
    let deleted = state
        .checkpoints()?
        .delete_checkpoints_for_runs(&caller.tenant, run_ids)
        .await?;
    Ok(Json(CheckpointsDeleted { deleted }))
}

#[utoipa::path(post, path = "/v1/checkpoints/delete-for-runs", tag = "langgraph checkpoints",
    operation_id = "delete_checkpoints_for_runs",
    request_body = DeleteForRunsBody,
    responses((status = 200, body = CheckpointsDeleted),
              (status = 404, body = ErrorBody, description = "No such thread or checkpoint in the caller's tenant (`not_found`)")))]
#[allow(dead_code)]
pub(crate) fn doc() {}
