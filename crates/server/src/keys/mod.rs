//! Credentials over HTTP, an admin's alone (`docs/security.md`): API keys of the caller's
//! tenant (`POST/GET /v1/keys`, `DELETE /v1/keys/{id}`) and end-user tokens minted for one
//! user (`POST /v1/tokens`). Each is logged (who, for whom, which role) without its secret.

pub(crate) mod create;
pub(crate) mod delete;
pub(crate) mod list;
pub(crate) mod tokens;

use serde::Serialize;
use stepwise_core::{Id, Timestamp};
use stepwise_store::{AccessRole, ApiKeyRecord};

use crate::error::{ApiError, ApiResult};

/// The longest `user_id` a key or token is made for, in characters.
pub const MAX_USER_ID_CHARS: usize = 256;
/// The longest key `name`, in characters.
pub const MAX_KEY_NAME_CHARS: usize = 200;

/// A key as listed (never its secret).
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct KeyInfo {
    #[schema(value_type = String, format = Uuid)]
    pub id: Id,
    pub user_id: String,
    #[schema(schema_with = role_schema)]
    pub role: AccessRole,
    pub name: Option<String>,
    pub created_at: Timestamp,
}

impl From<ApiKeyRecord> for KeyInfo {
    fn from(record: ApiKeyRecord) -> Self {
        KeyInfo {
            id: record.id,
            user_id: record.user_id,
            role: record.role,
            name: record.name,
            created_at: record.created_at,
        }
    }
}

/// `admin`, `user` or `worker`.
pub fn role_schema() -> utoipa::openapi::schema::Schema {
    use utoipa::openapi::schema::{ObjectBuilder, Type};
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(AccessRole::ALL.map(AccessRole::as_str)))
        .build()
        .into()
}

/// A user id for a key or token: 1 to 256 characters, no control characters, not blank.
pub fn check_user_id(user_id: &str) -> ApiResult<()> {
    if user_id.trim().is_empty() {
        return Err(ApiError::invalid("user_id", "user_id must not be empty"));
    }
    if user_id.chars().count() > MAX_USER_ID_CHARS {
        return Err(ApiError::invalid(
            "user_id",
            format!("user_id is longer than {MAX_USER_ID_CHARS} characters"),
        ));
    }
    if user_id.chars().any(char::is_control) {
        return Err(ApiError::invalid(
            "user_id",
            "user_id contains control characters",
        ));
    }
    Ok(())
}

/// A user id's schema (as [`check_user_id`] takes it).
pub fn user_id_schema() -> utoipa::openapi::schema::Schema {
    use utoipa::openapi::schema::{ObjectBuilder, Type};
    ObjectBuilder::new()
        .schema_type(Type::String)
        .min_length(Some(1))
        .max_length(Some(MAX_USER_ID_CHARS))
        .pattern(Some(
            r"^[^\u0000-\u001f\u007f-\u009f]*\S[^\u0000-\u001f\u007f-\u009f]*$",
        ))
        .build()
        .into()
}
