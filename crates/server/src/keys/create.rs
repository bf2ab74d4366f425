//! `POST /v1/keys`: an admin makes an API key of its tenant for a user, with a role; the
//! secret is in this answer only.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use stepwise_core::apikey::{generate_api_key, hash_api_key};
use stepwise_core::{Id, Timestamp};
use stepwise_store::{AccessRole, Store, StoreError};

use super::{MAX_KEY_NAME_CHARS, check_user_id};
use crate::AppState;
use crate::auth::Caller;
use crate::error::{ApiError, ApiJson, ApiResult, ErrorBody};
use crate::limits::check_text;

#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct CreateKeyBody {
    /// The user the key acts as.
    #[schema(schema_with = super::user_id_schema)]
    pub user_id: String,
    /// `admin`, `user` or `worker`.
    #[schema(schema_with = super::role_schema)]
    pub role: String,
    /// A label to tell keys apart.
    #[schema(schema_with = name_schema)]
    pub name: Option<String>,
}

/// A new key: its secret, shown only here.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct CreatedKey {
    #[schema(value_type = String, format = Uuid)]
    pub id: Id,
    /// The secret: `Authorization: Bearer <key>`.
    pub key: String,
    pub user_id: String,
    #[schema(schema_with = super::role_schema)]
    pub role: AccessRole,
    pub name: Option<String>,
    pub created_at: Timestamp,
}

/// A key's label: up to 200 characters, no control characters, or `null`.
fn name_schema() -> utoipa::openapi::schema::Schema {
    crate::schemas::text_of(MAX_KEY_NAME_CHARS, true)
        .build()
        .into()
}

#[utoipa::path(post, path = "/v1/keys", tag = "credentials", operation_id = "create_key",
    request_body = CreateKeyBody,
    responses((status = 201, body = CreatedKey),
              (status = 403, body = ErrorBody, description = "Only an admin makes keys (`forbidden`)")))]
#[allow(dead_code)]
pub(crate) fn doc() {}

pub async fn create<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    ApiJson(body): ApiJson<CreateKeyBody>,
) -> ApiResult<(StatusCode, Json<CreatedKey>)> {
    caller.require_admin("making an API key")?;
    check_user_id(&body.user_id)?;
    let role = AccessRole::parse(&body.role)
        .ok_or_else(|| ApiError::invalid("role", "role must be admin, user or worker"))?;
    check_text("name", &body.name, MAX_KEY_NAME_CHARS)?;
    let name = body.name.filter(|n| !n.trim().is_empty());
    let secret = generate_api_key().map_err(|e| {
        ApiError::from(StoreError::Backend(format!(
            "cannot get random bytes from the OS: {e}"
        )))
    })?;
    let record = state
        .store()
        .create_api_key(
            &caller.tenant,
            &body.user_id,
            role,
            name,
            &hash_api_key(&secret),
        )
        .await?;
    tracing::info!(
        tenant = %caller.tenant,
        by_user = %caller.user_id,
        by_key = ?caller.key_id,
        key = %record.id,
        user_id = %record.user_id,
        role = %record.role,
        "API key created"
    );
    Ok((
        StatusCode::CREATED,
        Json(CreatedKey {
            id: record.id,
            key: secret,
            user_id: record.user_id,
            role: record.role,
            name: record.name,
            created_at: record.created_at,
        }),
    ))
}
