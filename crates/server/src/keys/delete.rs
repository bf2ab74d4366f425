//! `DELETE /v1/keys/{id}`: revokes an API key of the caller's tenant; every node refuses it
//! within a few seconds (`AUTH_CACHE_TTL`).

use axum::extract::{Path, State};
use axum::http::StatusCode;
use stepwise_store::Store;

use crate::AppState;
use crate::auth::Caller;
use crate::error::{ApiError, ApiResult, ErrorBody, path_id};
use crate::schemas::IdPath;

#[utoipa::path(delete, path = "/v1/keys/{id}", tag = "credentials", operation_id = "delete_key",
    params(IdPath),
    responses((status = 204, description = "Revoked: refused on every node within 5 s"),
              (status = 403, body = ErrorBody, description = "Only an admin deletes keys (`forbidden`)"),
              (status = 404, body = ErrorBody, description = "No such key in the caller's tenant (`not_found`)")))]
#[allow(dead_code)]
pub(crate) fn doc() {}

pub async fn delete<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    caller.require_admin("deleting an API key")?;
    let id = path_id(&id, "id")?;
    let store = state.store();
    let ours =
        store.list_api_keys().await?.into_iter().find(|k| {
            k.id == id && k.tenant_id == caller.tenant.as_str() && k.revoked_at.is_none()
        });
    let Some(key) = ours else {
        return Err(ApiError::not_found("key"));
    };
    if !store.revoke_api_key(id).await? {
        return Err(ApiError::not_found("key"));
    }
    tracing::info!(
        tenant = %caller.tenant,
        by_user = %caller.user_id,
        by_key = ?caller.key_id,
        key = %id,
        user = %key.user_id,
        role = %key.role,
        "API key deleted"
    );
    Ok(StatusCode::NO_CONTENT)
}
