//! `GET /v1/retention` and `PUT /v1/retention`: a tenant's own retention, an admin's alone.
//! Each day count a tenant sets overrides the server's policy (`serve --completed-days` and
//! the others) for that tenant's sessions; the cleaner runs each such tenant's pass with its
//! own numbers.

use axum::Json;
use axum::extract::State;
use serde::{Deserialize, Serialize};
use stepwise_store::{RetentionOverride, RetentionPolicy, Store};

use crate::AppState;
use crate::auth::Caller;
use crate::error::{ApiError, ApiJson, ApiResult, ErrorBody};

/// The most days any retention count may be (about 100 years).
pub const MAX_RETENTION_DAYS: u32 = 36_500;

/// Day counts of a retention policy.
#[derive(Debug, Clone, Copy, Serialize, utoipa::ToSchema)]
pub struct RetentionDays {
    /// `completed` sessions are deleted this many days after their last update.
    pub completed_days: u32,
    /// `abandoned` sessions are deleted this many days after their last update.
    pub abandoned_days: u32,
    /// `deleted` (soft-deleted) sessions are removed this many days after their deletion.
    pub deleted_days: u32,
    /// `active` sessions idle this many days become `abandoned`.
    pub mark_abandoned_days: u32,
}

impl From<RetentionPolicy> for RetentionDays {
    fn from(p: RetentionPolicy) -> Self {
        RetentionDays {
            completed_days: p.completed_days,
            abandoned_days: p.abandoned_days,
            deleted_days: p.deleted_days,
            mark_abandoned_days: p.abandon_after_days,
        }
    }
}

/// The tenant's retention: the numbers its sessions go by, the server's, and its own.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Retention {
    /// The numbers the cleaner applies to this tenant's sessions.
    #[serde(flatten)]
    pub effective: RetentionDays,
    /// The server's policy (what a count the tenant leaves unset takes).
    pub server: RetentionDays,
    /// The counts the tenant set (`null` where it keeps the server's).
    #[schema(value_type = RetentionBody)]
    pub own: RetentionOverride,
}

/// A tenant's own day counts: each given (1-36500) overrides the server's; `null` or left
/// out keeps the server's. Every one of them `null` or left out: the server's policy again.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RetentionBody {
    // Read as numbers: JSON Schema's integers include `7.0`.
    #[schema(value_type = Option<u32>, minimum = 1, maximum = 36500)]
    pub completed_days: Option<f64>,
    #[schema(value_type = Option<u32>, minimum = 1, maximum = 36500)]
    pub abandoned_days: Option<f64>,
    #[schema(value_type = Option<u32>, minimum = 1, maximum = 36500)]
    pub deleted_days: Option<f64>,
    #[schema(value_type = Option<u32>, minimum = 1, maximum = 36500)]
    pub mark_abandoned_days: Option<f64>,
}

/// A day count of the body: a whole number from 1 to [`MAX_RETENTION_DAYS`].
fn days(field: &str, value: Option<f64>) -> ApiResult<Option<u32>> {
    match value {
        None => Ok(None),
        Some(d) if d.fract() == 0.0 && (1.0..=f64::from(MAX_RETENTION_DAYS)).contains(&d) => {
            Ok(Some(d as u32))
        }
        Some(_) => Err(ApiError::invalid(
            field,
            format!("{field} is a whole number of days from 1 to {MAX_RETENTION_DAYS}"),
        )),
    }
}

#[utoipa::path(get, path = "/v1/retention", tag = "operations", operation_id = "get_retention",
    responses((status = 200, body = Retention), (status = 403, body = ErrorBody)))]
#[allow(dead_code)]
pub(crate) fn get_doc() {}

#[utoipa::path(put, path = "/v1/retention", tag = "operations", operation_id = "put_retention",
    request_body = RetentionBody,
    responses((status = 200, body = Retention), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody)))]
#[allow(dead_code)]
pub(crate) fn put_doc() {}

pub async fn get<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
) -> ApiResult<Json<Retention>> {
    let own = state
        .store()
        .tenant_retentions()
        .await?
        .into_iter()
        .find_map(|(tenant, own)| (tenant == caller.tenant.as_str()).then_some(own))
        .unwrap_or_default();
    Ok(Json(answer(state.config.retention, own)))
}

pub async fn put<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    ApiJson(body): ApiJson<RetentionBody>,
) -> ApiResult<Json<Retention>> {
    let own = RetentionOverride {
        completed_days: days("completed_days", body.completed_days)?,
        abandoned_days: days("abandoned_days", body.abandoned_days)?,
        deleted_days: days("deleted_days", body.deleted_days)?,
        mark_abandoned_days: days("mark_abandoned_days", body.mark_abandoned_days)?,
    };
    let stored = (own != RetentionOverride::default()).then_some(own);
    state
        .store()
        .set_tenant_retention(&caller.tenant, stored)
        .await?;
    tracing::info!(tenant = %caller.tenant.as_str(), retention = ?own, "a tenant's retention was set");
    Ok(Json(answer(state.config.retention, own)))
}

fn answer(server: RetentionPolicy, own: RetentionOverride) -> Retention {
    Retention {
        effective: own.over(server).into(),
        server: server.into(),
        own,
    }
}
