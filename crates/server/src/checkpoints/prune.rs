//! `POST /v1/checkpoints/prune`: prunes threads (LangGraph's `prune`). `keep_latest`
//! keeps the latest checkpoint of each namespace with the channel values and writes it
//! needs; `delete` deletes every checkpoint (the threads and their sessions stay).

use axum::Json;
use axum::extract::State;
use serde_json::Value;
use stepwise_store::checkpoints::MAX_THREAD_ID_CHARS;
use stepwise_store::{PruneStrategy, Store};

use super::delete_for_runs::{CheckpointsDeleted, ids};
use super::object;
use crate::AppState;
use crate::auth::Caller;
use crate::error::{ApiError, ApiJson, ApiResult, ErrorBody};
use stepwise_store::prelude::*;

#[derive(Debug, utoipa::ToSchema)]
#[allow(dead_code)]
pub struct PruneBody {
    #[schema(schema_with = super::schema::thread_ids)]
    pub thread_ids: Vec<String>,
    /// `keep_latest` (default) or `delete`.
    #[schema(schema_with = super::schema::prune_strategy)]
    pub strategy: Option<String>,
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
    // A user prunes its own threads; another user's are as absent as another tenant's.
    let mut own = Vec::with_capacity(thread_ids.len());
    for thread in thread_ids {
        if crate::auth::access::sees_thread(&state, &caller, &thread).await? {
            own.push(thread);
        }
    }
    let deleted = state
        .checkpoints()?
        .prune_checkpoints(&caller.tenant, own, strategy)
        .await?;
    Ok(Json(CheckpointsDeleted { deleted }))
}

#[utoipa::path(post, path = "/v1/checkpoints/prune", tag = "langgraph checkpoints",
    operation_id = "prune_checkpoints",
    request_body = PruneBody,
    responses((status = 200, body = CheckpointsDeleted),
              (status = 404, body = ErrorBody, description = "No such thread or checkpoint in the caller's tenant (`not_found`)")))]
#[allow(dead_code)]
pub(crate) fn doc() {}
