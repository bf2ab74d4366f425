//! `POST /v1/executions/{id}/snapshots`: a snapshot an external agent saves (201).

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde::Deserialize;
use serde_json::Value;
use stepwise_core::{Execution, Id, Snapshot};
use stepwise_engine::ExternalSnapshot;
use stepwise_store::Store;

use super::schema::{self, MAX_AGENT_CHARS};
use super::{LeaseHeader, load_external, typed_body};
use crate::AppState;
use crate::auth::Caller;
use crate::error::{ApiError, ApiJson, ApiResult, ErrorBody};
use crate::schemas::IdLease;
use crate::sessions::check_text;

/// The snapshot to save.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct SnapshotInput {
    pub state: Value,
    #[schema(schema_with = schema::snapshot_step_number)]
    pub step_number: Option<u32>,
    pub is_final: Option<bool>,
    #[schema(schema_with = schema::uuid_or_null)]
    pub parent_snapshot_id: Option<String>,
    #[schema(schema_with = schema::agent_text_or_null)]
    pub agent_id: Option<String>,
    #[schema(schema_with = schema::agent_text_or_null)]
    pub agent_name: Option<String>,
    pub debug_mode: Option<bool>,
    /// This snapshot replaces the execution's earlier ones (deleted in the same write), so a
    /// state saved over and over keeps one row. Default `false`: every snapshot is kept.
    pub replace: Option<bool>,
}

/// The parent snapshot named by the input, which must exist in the caller's tenant.
async fn parent<S: Store>(
    state: &AppState<S>,
    caller: &Caller,
    parent: &Option<String>,
) -> ApiResult<Option<Id>> {
    let Some(text) = parent else { return Ok(None) };
    let parent = stepwise_core::parse_id(text).ok_or_else(|| {
        ApiError::invalid(
            "parent_snapshot_id",
            "parent_snapshot_id must be a snapshot id",
        )
    })?;
    if state
        .store()
        .get_snapshot(&caller.tenant, parent)
        .await?
        .is_none()
    {
        return Err(ApiError::not_found("parent snapshot").with_field("parent_snapshot_id"));
    }
    Ok(Some(parent))
}

fn snapshot(
    execution: &Execution,
    input: SnapshotInput,
    parent_snapshot_id: Option<Id>,
) -> ExternalSnapshot {
    ExternalSnapshot {
        execution_id: execution.id,
        parent_snapshot_id,
        agent_id: input.agent_id,
        agent_name: input.agent_name,
        step_number: input
            .step_number
            .unwrap_or(u32::try_from(execution.step_count).unwrap_or(u32::MAX)),
        is_final: input.is_final.unwrap_or(false),
        debug_mode: input.debug_mode.unwrap_or(false),
        state: input.state,
        replace: input.replace.unwrap_or(false),
    }
}

pub async fn save_snapshot<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path(id): Path<String>,
    lease: LeaseHeader,
    ApiJson(input): ApiJson<Value>,
) -> ApiResult<impl IntoResponse> {
    let input: SnapshotInput = typed_body(input, &["/step_number"])?;
    let execution = load_external(&state, &caller, &id, &lease).await?;
    let parent_snapshot_id = parent(&state, &caller, &input.parent_snapshot_id).await?;
    check_text("agent_id", &input.agent_id, MAX_AGENT_CHARS)?;
    check_text("agent_name", &input.agent_name, MAX_AGENT_CHARS)?;
    let new = snapshot(&execution, input, parent_snapshot_id);
    let saved: Snapshot = state
        .engine
        .save_external_snapshot(&caller.tenant, new)
        .await?;
    Ok((StatusCode::CREATED, Json(saved)))
}

#[utoipa::path(post, path = "/v1/executions/{id}/snapshots", tag = "external agents", operation_id = "save_snapshot",
    params(IdLease), request_body = SnapshotInput,
    responses((status = 201, body = Snapshot), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
#[allow(dead_code)]
pub(crate) fn doc() {}
