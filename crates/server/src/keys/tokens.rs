//! `POST /v1/tokens`: an admin mints a short-lived token for one of its tenant's users, for
//! an app without an identity provider to hand to that user's browser. It is a JWT (HS256)
//! signed with the deployment's signing key, which lives in the store, so every node takes it.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use stepwise_core::Timestamp;
use stepwise_store::Store;

use super::check_user_id;
use crate::AppState;
use crate::auth::Caller;
use crate::error::{ApiError, ApiJson, ApiResult, ErrorBody};

/// The shortest and longest lifetime of a minted token, and the default, in seconds.
pub const MIN_TTL_S: u64 = 60;
pub const MAX_TTL_S: u64 = 86_400;
pub const DEFAULT_TTL_S: u64 = 3_600;

#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct MintTokenBody {
    /// The user the token acts as (a `user`: that user's own sessions only).
    #[schema(schema_with = super::user_id_schema)]
    pub user_id: String,
    /// Seconds the token is valid: 60 to 86,400, default 3,600.
    #[schema(minimum = 60, maximum = 86400, nullable)]
    pub ttl_s: Option<u64>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct MintedToken {
    /// `Authorization: Bearer <token>`, or `?access_token=` on an event stream.
    pub token: String,
    pub user_id: String,
    pub expires_at: Timestamp,
}

#[utoipa::path(post, path = "/v1/tokens", tag = "credentials", operation_id = "create_token",
    request_body = MintTokenBody,
    responses((status = 201, body = MintedToken),
              (status = 403, body = ErrorBody, description = "Only an admin mints tokens (`forbidden`)")))]
#[allow(dead_code)]
pub(crate) fn doc() {}

pub async fn create<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    ApiJson(body): ApiJson<serde_json::Value>,
) -> ApiResult<(StatusCode, Json<MintedToken>)> {
    caller.require_admin("minting a token")?;
    // `ttl_s` written as `3600.0` is a whole number too (JSON Schema's integer).
    let body: MintTokenBody = crate::executions::typed_body(body, &["/ttl_s"])?;
    check_user_id(&body.user_id)?;
    let ttl_s = body.ttl_s.unwrap_or(DEFAULT_TTL_S);
    if !(MIN_TTL_S..=MAX_TTL_S).contains(&ttl_s) {
        return Err(ApiError::invalid(
            "ttl_s",
            format!("ttl_s must be {MIN_TTL_S} to {MAX_TTL_S} seconds"),
        ));
    }
    let (token, expires_at) = state
        .auth
        .tokens
        .mint(state.store(), &caller.tenant, &body.user_id, ttl_s)
        .await?;
    tracing::info!(
        tenant = %caller.tenant,
        by_user = %caller.user_id,
        by_key = ?caller.key_id,
        user_id = %body.user_id,
        ttl_s,
        "token minted"
    );
    Ok((
        StatusCode::CREATED,
        Json(MintedToken {
            token,
            user_id: body.user_id,
            expires_at,
        }),
    ))
}
