//! `POST /v1/executions/{id}/heartbeat`: a worker renews its lease on an execution and
//! learns whether it was cancelled.

use axum::Json;
use axum::extract::{Path, State};
use serde::{Deserialize, Serialize};
use stepwise_core::{Id, Timestamp};
use stepwise_store::Store;

use super::MAX_WORKER_ID_CHARS;
use crate::AppState;
use crate::auth::Caller;
use crate::error::{ApiError, ApiJson, ApiResult, ErrorBody, path_id};
use crate::executions::LeaseHeader;
use crate::schemas::IdPath;

/// The lease to renew (the `Stepwise-Lease` header may carry it instead).
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HeartbeatBody {
    #[serde(default)]
    #[schema(schema_with = crate::schemas::lease_token, required = true)]
    pub lease: Option<String>,
    /// The worker process sending it (counts it as online).
    #[serde(default)]
    #[schema(schema_with = worker_id_or_null)]
    pub worker_id: Option<String>,
}

fn worker_id_or_null() -> utoipa::openapi::schema::Schema {
    crate::schemas::worker_id(true)
}

/// The renewed lease.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct HeartbeatAnswer {
    #[schema(value_type = String, format = Uuid)]
    pub execution_id: Id,
    /// When the lease runs out without another heartbeat (`null` once cancelled).
    pub lease_expires_at: Option<Timestamp>,
    /// The execution was cancelled: stop its agent, write nothing more.
    pub cancel_requested: bool,
}

pub async fn heartbeat<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path(id): Path<String>,
    header: LeaseHeader,
    ApiJson(body): ApiJson<HeartbeatBody>,
) -> ApiResult<Json<HeartbeatAnswer>> {
    let id = path_id(&id, "id")?;
    let Some(lease) = body.lease.or(header.0) else {
        return Err(ApiError::invalid(
            "lease",
            "send the lease of the claim (the body's lease or the Stepwise-Lease header)",
        ));
    };
    if lease.is_empty() || lease.len() > 128 || !lease.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(ApiError::invalid(
            "lease",
            "a lease token is 1-128 printable characters",
        ));
    }
    if let Some(worker_id) = &body.worker_id
        && !super::claim::valid_worker_id(worker_id)
    {
        return Err(ApiError::invalid(
            "worker_id",
            format!("worker_id must be 1-{MAX_WORKER_ID_CHARS} characters of [A-Za-z0-9._:-]"),
        ));
    }
    let beat = state
        .engine
        .worker_heartbeat(&caller.tenant, id, &lease)
        .await?;
    if let Some(worker_id) = body.worker_id {
        state
            .engine
            .note_worker(&caller.tenant, &worker_id, None)
            .await;
    }
    Ok(Json(HeartbeatAnswer {
        execution_id: id,
        lease_expires_at: beat.lease_expires_at,
        cancel_requested: beat.cancel_requested,
    }))
}

#[utoipa::path(post, path = "/v1/executions/{id}/heartbeat", tag = "workers", operation_id = "heartbeat",
    params(IdPath), request_body = HeartbeatBody,
    responses((status = 200, body = HeartbeatAnswer), (status = 404, body = ErrorBody),
              (status = 409, body = ErrorBody, description = "`lease_lost`: the lease is not current")))]
#[allow(dead_code)]
pub(crate) fn doc() {}
