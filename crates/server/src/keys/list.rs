//! `GET /v1/keys`: the API keys of the caller's tenant that still work (never a secret).

use axum::Json;
use axum::extract::State;
use serde::Serialize;
use stepwise_store::Store;

use super::KeyInfo;
use crate::AppState;
use crate::auth::Caller;
use crate::error::{ApiResult, ErrorBody};

/// `{items, next_cursor}`: every active key of the tenant, oldest first, on one page.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct KeyList {
    pub items: Vec<KeyInfo>,
    /// Always `null`: the list is one page.
    #[schema(nullable)]
    pub next_cursor: Option<String>,
}

#[utoipa::path(get, path = "/v1/keys", tag = "credentials", operation_id = "list_keys",
    responses((status = 200, body = KeyList),
              (status = 403, body = ErrorBody, description = "Only an admin lists keys (`forbidden`)")))]
#[allow(dead_code)]
pub(crate) fn doc() {}

pub async fn list<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
) -> ApiResult<Json<KeyList>> {
    caller.require_admin("listing API keys")?;
    let items = state
        .store()
        .list_api_keys()
        .await?
        .into_iter()
        .filter(|k| k.tenant_id == caller.tenant.as_str() && k.revoked_at.is_none())
        .map(KeyInfo::from)
        .collect();
    Ok(Json(KeyList {
        items,
        next_cursor: None,
    }))
}
