//! `PUT /v1/threads/{thread_id}/checkpoints/{checkpoint_id}/writes`: stores a task's
//! pending writes against a checkpoint (LangGraph's `put_writes`). A write with `idx < 0`
//! (LangGraph's special channels: error, scheduled, interrupt, resume) replaces the one
//! stored at the same `(task_id, idx)`; `idx >= 0` keeps a stored one.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde_json::Value;
use stepwise_store::{NewWrite, PutWrites, Store};

use super::{
    MAX_ID_CHARS, MAX_PATH_CHARS, array, checkpoint_id, object, only, required, string, thread_id,
    typed_value,
};
use crate::AppState;
use crate::auth::Caller;
use crate::error::{ApiError, ApiJson, ApiResult, ErrorBody};
use stepwise_store::prelude::*;

/// Lowest and highest `idx`.
const MIN_IDX: i64 = i32::MIN as i64;
const MAX_IDX: i64 = super::MAX_WRITE_IDX;

/// A task's writes.
#[derive(Debug, utoipa::ToSchema)]
#[allow(dead_code)]
pub struct PutWritesBody {
    /// Default "".
    #[schema(schema_with = super::schema::path_or_null)]
    pub checkpoint_ns: Option<String>,
    #[schema(schema_with = super::schema::task_id)]
    pub task_id: String,
    /// Default "" (writes sort by `(task_path, task_id, idx)`).
    #[schema(schema_with = super::schema::path_or_null)]
    pub task_path: Option<String>,
    /// `{idx, channel, type, data}` each.
    #[schema(schema_with = super::schema::writes)]
    pub writes: Vec<Value>,
}

fn idx(value: Option<&Value>, path: &str) -> ApiResult<i64> {
    super::integer(value, path, MIN_IDX, MAX_IDX)
}

pub async fn put_writes<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path((thread, id)): Path<(String, String)>,
    ApiJson(body): ApiJson<Value>,
) -> ApiResult<StatusCode> {
    let thread = thread_id(&thread)?;
    let id = checkpoint_id(&id)?;
    let map = object(body)?;
    let checkpoint_ns =
        string(&map, "checkpoint_ns", "checkpoint_ns", 0, MAX_PATH_CHARS)?.unwrap_or_default();
    let task_id = required(
        string(&map, "task_id", "task_id", 1, MAX_PATH_CHARS)?,
        "task_id",
    )?;
    let task_path = string(&map, "task_path", "task_path", 0, MAX_PATH_CHARS)?.unwrap_or_default();
    if !matches!(map.get("writes"), Some(Value::Array(_))) {
        return Err(ApiError::invalid("writes", "writes must be an array"));
    }
    let mut writes = Vec::new();
    for (i, write) in array(&map, "writes")?.iter().enumerate() {
        let path = format!("writes[{i}]");
        let Value::Object(w) = write else {
            return Err(ApiError::invalid(
                &path,
                format!("{path} must be an object"),
            ));
        };
        only(w, &["idx", "channel", "type", "data"], &path)?;
        let idx = idx(w.get("idx"), &format!("{path}.idx"))?;
        let channel = required(
            string(w, "channel", &format!("{path}.channel"), 1, MAX_ID_CHARS)?,
            &format!("{path}.channel"),
        )?;
        let mut value = serde_json::Map::new();
        for key in ["type", "data"] {
            if let Some(v) = w.get(key) {
                value.insert(key.into(), v.clone());
            }
        }
        let value = typed_value(&Value::Object(value), &path)?;
        writes.push(NewWrite {
            idx,
            channel,
            value,
        });
    }
    state
        .checkpoints()?
        .put_checkpoint_writes(
            &caller.tenant,
            PutWrites {
                thread_id: thread,
                user_id: caller.user_id.clone(),
                checkpoint_ns,
                checkpoint_id: id,
                task_id,
                task_path,
                writes,
            },
        )
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(put, path = "/v1/threads/{thread_id}/checkpoints/{checkpoint_id}/writes", tag = "langgraph checkpoints",
    operation_id = "put_checkpoint_writes",
    params(super::schema::CheckpointPath),
    request_body = PutWritesBody,
    responses((status = 204, description = "Stored (writes at idx >= 0 already stored are kept, idx < 0 replaced)"),
              (status = 400, body = ErrorBody, description = "The body is not valid (`field` names the part); nothing was written"),
              (status = 404, body = ErrorBody, description = "No such thread or checkpoint in the caller's tenant (`not_found`)")))]
#[allow(dead_code)]
pub(crate) fn doc() {}
