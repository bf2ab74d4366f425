//! `POST /v1/checkpoints/prune`: prunes threads (LangGraph's `prune`). `keep_latest`
//! keeps the latest checkpoint of each namespace with the channel values and writes it
//! needs; `delete` deletes every checkpoint (the threads and their sessions stay).

use axum::Json;
use axum::extract::State;
use serde_json::{Value, json};
use stepwise_store::checkpoints::MAX_THREAD_ID_CHARS;
use stepwise_store::{PruneStrategy, Store};

use super::delete_for_runs::{CheckpointsDeleted, ids};
use super::{MAX_ITEMS, NO_CONTROL, object};
use crate::AppState;
use crate::auth::Caller;
use crate::error::{ApiError, ApiJson, ApiResult};

#[derive(Debug, utoipa::ToSchema)]
#[allow(dead_code)]
pub struct PruneBody {
    pub thread_ids: Vec<String>,
    /// `keep_latest` (default) or `delete`.
    pub strategy: Option<String>,
}

pub(crate) fn harden(doc: &mut Value) {
    if let Some(props) = doc
        .pointer_mut("/components/schemas/PruneBody/properties")
        .and_then(Value::as_object_mut)
    {
        props.insert(
            "thread_ids".into(),
            json!({"type": "array", "maxItems": MAX_ITEMS, "items":
                {"type": "string", "minLength": 1, "maxLength": MAX_THREAD_ID_CHARS, "pattern": NO_CONTROL}}),
        );
        props.insert(
            "strategy".into(),
            json!({"type": ["string", "null"], "enum": ["keep_latest", "delete", null]}),
        );
    }
}

pub async fn prune<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    ApiJson(body): ApiJson<Value>,
) -> ApiResult<Json<CheckpointsDeleted>> {
    let map = object(body)?;
    let thread_ids = ids(&map, "thread_ids", MAX_THREAD_ID_CHARS)?;
    let strategy = match map.get("strategy") {
        None | Some(Value::Null) => PruneStrategy::KeepLatest,
        Some(Value::String(s)) if s == "keep_latest" => PruneStrategy::KeepLatest,
        Some(Value::String(s)) if s == "delete" => PruneStrategy::Delete,
        Some(_) => {
            return Err(ApiError::invalid(
                "strategy",
                "strategy must be keep_latest or delete",
            ));
        }
    };
    let deleted = state
        .store()
        .prune_checkpoints(&caller.tenant, thread_ids, strategy)
        .await?;
    Ok(Json(CheckpointsDeleted { deleted }))
}

#[utoipa::path(post, path = "/v1/checkpoints/prune", tag = "langgraph checkpoints",
    operation_id = "prune_checkpoints",
    request_body = PruneBody,
    responses((status = 200, body = CheckpointsDeleted)))]
#[allow(dead_code)]
pub(crate) fn doc() {}
