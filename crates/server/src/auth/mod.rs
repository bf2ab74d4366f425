//! Bearer API keys. Keys are looked up by hash and cached for a moment (so a revoked key
//! stops working on a running server within seconds without a database read per request).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::extract::{FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use stepwise_core::apikey::hash_api_key;
use stepwise_store::{Store, Tenant};

use crate::AppState;
use crate::error::ApiError;

/// How long a key lookup (or the count of active keys) is trusted. Revocation reaches a
/// running server within this time.
pub const AUTH_CACHE_TTL: Duration = Duration::from_secs(2);
const MAX_CACHED_KEYS: usize = 10_000;

pub const LOCAL_TENANT: &str = "local";
pub const LOCAL_USER: &str = "local";

/// Who is calling: the tenant and user of the API key (or `local` when the server runs open).
#[derive(Debug, Clone)]
pub struct Caller {
    pub tenant: Tenant,
    pub user_id: String,
    /// The API key's id; `None` for the open server's `local` caller.
    pub key_id: Option<stepwise_core::Id>,
}

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        parts
            .extensions
            .get::<Caller>()
            .cloned()
            .ok_or_else(|| ApiError::unauthorized("an API key is required"))
    }
}

#[derive(Default)]
pub struct AuthCache {
    keys: Mutex<HashMap<String, (Option<Caller>, Instant)>>,
    active_keys: Mutex<Option<(u64, Instant)>>,
}

impl AuthCache {
    async fn active_key_count<S: Store>(&self, store: &S) -> Result<u64, ApiError> {
        if let Some((count, at)) = *self.active_keys.lock().unwrap_or_else(|e| e.into_inner())
            && at.elapsed() < AUTH_CACHE_TTL
        {
            return Ok(count);
        }
        let count = store.count_active_api_keys().await?;
        *self.active_keys.lock().unwrap_or_else(|e| e.into_inner()) = Some((count, Instant::now()));
        Ok(count)
    }

    async fn lookup<S: Store>(&self, store: &S, secret: &str) -> Result<Option<Caller>, ApiError> {
        let hash = hash_api_key(secret);
        if let Some((caller, at)) = self
            .keys
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&hash)
            && at.elapsed() < AUTH_CACHE_TTL
        {
            return Ok(caller.clone());
        }
        let record = store.find_api_key(&hash).await?;
        let caller = match record {
            Some(record) => Some(Caller {
                tenant: Tenant::new(record.tenant_id)?,
                user_id: record.user_id,
                key_id: Some(record.id),
            }),
            None => None,
        };
        let mut keys = self.keys.lock().unwrap_or_else(|e| e.into_inner());
        if keys.len() >= MAX_CACHED_KEYS {
            keys.retain(|_, (_, at)| at.elapsed() < AUTH_CACHE_TTL);
            if keys.len() >= MAX_CACHED_KEYS {
                keys.clear();
            }
        }
        keys.insert(hash, (caller.clone(), Instant::now()));
        Ok(caller)
    }
}

/// Middleware for `/v1`: finds the caller or answers 401.
pub async fn require_caller<S: Store>(
    State(state): State<AppState<S>>,
    mut request: Request,
    next: Next,
) -> Response {
    let header = request
        .headers()
        .get(axum::http::header::AUTHORIZATION)
        .cloned();
    match identify(&state, header).await {
        Ok(caller) => {
            request.extensions_mut().insert(caller);
            next.run(request).await
        }
        Err(error) => error.into_response(),
    }
}

async fn identify<S: Store>(
    state: &AppState<S>,
    header: Option<axum::http::HeaderValue>,
) -> Result<Caller, ApiError> {
    let store = state.engine.store();
    match header {
        Some(value) => {
            let text = value
                .to_str()
                .map_err(|_| ApiError::unauthorized("the Authorization header is not valid"))?;
            let secret = text
                .strip_prefix("Bearer ")
                .or_else(|| text.strip_prefix("bearer "))
                .map(str::trim)
                .filter(|s| !s.is_empty() && s.len() <= 256)
                .ok_or_else(|| ApiError::unauthorized("use Authorization: Bearer <api-key>"))?;
            match state.auth.lookup(store, secret).await? {
                Some(caller) => Ok(caller),
                None => {
                    // With no key configured at all an open server ignores stray headers.
                    if state.config.open_when_no_keys
                        && state.auth.active_key_count(store).await? == 0
                    {
                        return local_caller();
                    }
                    Err(ApiError::unauthorized(
                        "the API key is not valid or was revoked",
                    ))
                }
            }
        }
        None => {
            if state.config.open_when_no_keys && state.auth.active_key_count(store).await? == 0 {
                local_caller()
            } else {
                Err(ApiError::unauthorized(
                    "an API key is required: Authorization: Bearer <api-key>",
                ))
            }
        }
    }
}

fn local_caller() -> Result<Caller, ApiError> {
    let tenant = Tenant::new(LOCAL_TENANT)?;
    Ok(Caller {
        tenant,
        user_id: LOCAL_USER.to_string(),
        key_id: None,
    })
}
