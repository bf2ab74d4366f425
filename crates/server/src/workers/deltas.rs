//! `POST /v1/executions/{id}/deltas`: live tokens of a worker's (or an external agent's)
//! run, sent to the session's subscribers as `message.delta` and never stored. A delta may
//! carry `metadata` (a JSON object) for the protocols that stream more than text: a LangGraph
//! graph's worker sends its stream chunks under `metadata.langgraph`.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};
use stepwise_store::Store;

use crate::AppState;
use crate::auth::Caller;
use crate::error::{ApiError, ApiJson, ApiResult, ErrorBody, path_id};
use crate::executions::LeaseHeader;
use crate::schemas::IdLease;

/// Longest text of one delta, in characters.
const MAX_DELTA_CHARS: usize = 65_536;
/// Largest `metadata` of one delta, serialised.
const MAX_DELTA_METADATA_BYTES: usize = 2 * 1024 * 1024;

/// Text the agent is producing.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DeltaBody {
    /// Up to 65,536 characters.
    #[schema(max_length = 65536)]
    pub text: String,
    /// What the live subscribers get besides the text (a JSON object of up to 2 MiB), as the
    /// `message.delta` event's `metadata`. A delta with metadata may have empty text.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<Value>,
}

pub async fn deltas<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path(id): Path<String>,
    lease: LeaseHeader,
    ApiJson(body): ApiJson<DeltaBody>,
) -> ApiResult<(StatusCode, Json<Value>)> {
    if body.text.chars().count() > MAX_DELTA_CHARS {
        return Err(ApiError::invalid(
            "text",
            format!("a delta is at most {MAX_DELTA_CHARS} characters"),
        ));
    }
    let metadata = match body.metadata {
        None | Some(Value::Null) => json!({}),
        Some(Value::Object(map)) => {
            if serde_json::to_vec(&map).map_or(usize::MAX, |v| v.len()) > MAX_DELTA_METADATA_BYTES {
                return Err(ApiError::invalid(
                    "metadata",
                    format!(
                        "a delta's metadata is at most {MAX_DELTA_METADATA_BYTES} bytes of JSON"
                    ),
                ));
            }
            Value::Object(map)
        }
        Some(_) => {
            return Err(ApiError::invalid(
                "metadata",
                "metadata must be a JSON object",
            ));
        }
    };
    let id = path_id(&id, "id")?;
    let execution = state
        .engine
        .driven_execution(&caller.tenant, id, lease.0.as_deref())
        .await?;
    if execution.status != stepwise_core::ExecutionStatus::Running {
        return Err(ApiError::invalid_state(format!(
            "the execution is {}: only a running execution streams text",
            execution.status
        )));
    }
    state
        .engine
        .publish_delta(&caller.tenant, &execution, &body.text, metadata);
    Ok((StatusCode::ACCEPTED, Json(json!({}))))
}

#[utoipa::path(post, path = "/v1/executions/{id}/deltas", tag = "workers", operation_id = "send_delta",
    params(IdLease), request_body = DeltaBody,
    responses((status = 202, description = "Sent to the session's live subscribers"), (status = 404, body = ErrorBody),
              (status = 400, body = ErrorBody, description = "Text or metadata over its limit"),
              (status = 409, body = ErrorBody, description = "`lease_lost`"), (status = 422, body = ErrorBody)))]
#[allow(dead_code)]
pub(crate) fn doc() {}
