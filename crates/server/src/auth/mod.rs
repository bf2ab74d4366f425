//! Who is calling, and what they may do (`docs/security.md`).
//!
//! A caller shows an API key or an end-user token (JWT) as `Authorization: Bearer ...`
//! (a GET event stream may carry it as `?access_token=` instead, since a browser's
//! `EventSource` cannot set headers). Keys are looked up by hash and cached for a moment (so
//! a revoked key stops working on every node within seconds without a database read per
//! request); tokens are verified by [`jwt::Tokens`]. [`access::guard`] then holds each role
//! to its routes and a `user` to its own sessions.

pub(crate) mod access;
pub(crate) mod cors;
pub(crate) mod jwt;

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::extract::{FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{Method, Uri};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use stepwise_core::Session;
use stepwise_core::apikey::hash_api_key;
use stepwise_store::{AccessRole, Store, Tenant};

use crate::AppState;
use crate::error::ApiError;

/// How long a key lookup (or the count of active keys) is trusted. Revocation reaches a
/// running server within this time.
pub const AUTH_CACHE_TTL: Duration = Duration::from_secs(2);
const MAX_CACHED_KEYS: usize = 10_000;
/// The longest API key read.
const MAX_KEY_BYTES: usize = 256;

pub const LOCAL_TENANT: &str = "local";
pub const LOCAL_USER: &str = "local";

/// What the caller showed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Credential {
    /// Nothing: the open server's `local` caller.
    Open,
    /// An API key.
    Key,
    /// An end-user token (JWT): the app's own or one this deployment minted.
    Token,
}

/// Who is calling: the tenant, user and role of the API key or token (or `local`, an
/// admin, when the server runs open).
#[derive(Debug, Clone)]
pub struct Caller {
    pub tenant: Tenant,
    pub user_id: String,
    /// The API key's id; `None` for a token or the open server's `local` caller.
    pub key_id: Option<stepwise_core::Id>,
    pub role: AccessRole,
    pub credential: Credential,
}

impl Caller {
    /// Whether the caller may see this session of its tenant: an admin sees all of them, a
    /// user only its own, a worker none through the session routes.
    pub fn sees(&self, session: &Session) -> bool {
        self.sees_owner(&session.user_id)
    }

    /// [`Caller::sees`] for a session owned by `owner`.
    pub fn sees_owner(&self, owner: &str) -> bool {
        match self.role {
            AccessRole::Admin => true,
            AccessRole::User => owner == self.user_id,
            AccessRole::Worker => false,
        }
    }

    /// 403 `forbidden` unless the caller is an admin of its tenant.
    pub fn require_admin(&self, what: &str) -> Result<(), ApiError> {
        if self.role == AccessRole::Admin {
            Ok(())
        } else {
            Err(ApiError::forbidden(format!(
                "{what} needs an admin key; this {} is a `{}`",
                self.credential_name(),
                self.role
            )))
        }
    }

    pub fn credential_name(&self) -> &'static str {
        match self.credential {
            Credential::Token => "token",
            _ => "key",
        }
    }

    /// The `user_id` a session list is narrowed to: the caller's own for a `user`, the
    /// asked one (or none) for an admin.
    pub fn session_owner_filter(&self, asked: Option<String>) -> Option<String> {
        match self.role {
            AccessRole::Admin => asked,
            _ => Some(self.user_id.clone()),
        }
    }
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

/// Everything auth keeps between requests.
pub struct Auth {
    keys: Mutex<HashMap<String, (Option<Caller>, Instant)>>,
    active_keys: Mutex<Option<(u64, Instant)>>,
    pub tokens: jwt::Tokens,
    pub owners: access::Owners,
}

impl Auth {
    pub fn new(jwt: jwt::JwtSettings) -> Self {
        Auth {
            keys: Mutex::default(),
            active_keys: Mutex::default(),
            tokens: jwt::Tokens::new(jwt),
            owners: access::Owners::default(),
        }
    }

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
                role: record.role,
                credential: Credential::Key,
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

    /// Whether `/v1` is served without a credential right now: the server may run open
    /// (loopback), no key exists, and it verifies no tokens of its own app.
    async fn is_open<S: Store>(&self, state: &AppState<S>) -> Result<bool, ApiError> {
        Ok(state.config.open_when_no_keys
            && !self.tokens.settings().enabled()
            && self.active_key_count(state.store()).await? == 0)
    }
}

/// Middleware for `/v1`: finds the caller or answers 401.
pub async fn require_caller<S: Store>(
    State(state): State<AppState<S>>,
    mut request: Request,
    next: Next,
) -> Response {
    let presented = match presented_credential(&mut request) {
        Ok(presented) => presented,
        Err(error) => return error.into_response(),
    };
    match identify(&state, presented).await {
        Ok(caller) => {
            request.extensions_mut().insert(caller);
            next.run(request).await
        }
        Err(error) => error.into_response(),
    }
}

/// The credential a request carries: its `Authorization: Bearer` header, or, on a GET event
/// stream, its `access_token` query parameter, which is taken out of the request so that no
/// handler, log or error message ever sees it.
fn presented_credential(request: &mut Request) -> Result<Option<String>, ApiError> {
    if let Some(value) = request.headers().get(axum::http::header::AUTHORIZATION) {
        let text = value
            .to_str()
            .map_err(|_| ApiError::unauthorized("the Authorization header is not valid"))?;
        let secret = text
            .strip_prefix("Bearer ")
            .or_else(|| text.strip_prefix("bearer "))
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .ok_or_else(|| {
                ApiError::unauthorized("use Authorization: Bearer <api-key or token>")
            })?;
        return Ok(Some(secret.to_string()));
    }
    if request.method() != Method::GET || !takes_access_token(request.uri().path()) {
        return Ok(None);
    }
    let Some(query) = request.uri().query() else {
        return Ok(None);
    };
    let mut token = None;
    let mut rest = Vec::new();
    for pair in query.split('&') {
        match pair.strip_prefix("access_token=") {
            Some(value) => token = Some(value.to_string()),
            None => rest.push(pair),
        }
    }
    let Some(token) = token else {
        return Ok(None);
    };
    let token = url::form_urlencoded::parse(format!("t={token}").as_bytes())
        .next()
        .map(|(_, v)| v.into_owned())
        .filter(|t| !t.is_empty())
        .ok_or_else(|| ApiError::unauthorized("access_token is empty"))?;
    let path = request.uri().path().to_string();
    let stripped = if rest.is_empty() {
        path
    } else {
        format!("{path}?{}", rest.join("&"))
    };
    let mut parts = request.uri().clone().into_parts();
    parts.path_and_query = stripped.parse().ok();
    if let Ok(uri) = Uri::from_parts(parts) {
        *request.uri_mut() = uri;
    }
    Ok(Some(token))
}

/// The GET event streams that take `?access_token=` (`/v1` is already stripped).
fn takes_access_token(path: &str) -> bool {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    matches!(
        segments.as_slice(),
        ["sessions", _, "events"] | ["ai-sdk", "chat", _, "stream"]
    )
}

async fn identify<S: Store>(
    state: &AppState<S>,
    presented: Option<String>,
) -> Result<Caller, ApiError> {
    let store = state.engine.store();
    let Some(secret) = presented else {
        return if state.auth.is_open(state).await? {
            local_caller()
        } else {
            Err(ApiError::unauthorized(
                "an API key or token is required: Authorization: Bearer <credential>",
            ))
        };
    };
    if jwt::looks_like_jwt(&secret) {
        return state.auth.tokens.verify(store, &secret).await;
    }
    if secret.len() > MAX_KEY_BYTES {
        return Err(ApiError::unauthorized(
            "the API key is not valid or was revoked",
        ));
    }
    match state.auth.lookup(store, &secret).await? {
        Some(caller) => Ok(caller),
        // With no key configured at all an open server ignores stray headers.
        None if state.auth.is_open(state).await? => local_caller(),
        None => Err(ApiError::unauthorized(
            "the API key is not valid or was revoked",
        )),
    }
}

fn local_caller() -> Result<Caller, ApiError> {
    let tenant = Tenant::new(LOCAL_TENANT)?;
    Ok(Caller {
        tenant,
        user_id: LOCAL_USER.to_string(),
        key_id: None,
        role: AccessRole::Admin,
        credential: Credential::Open,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_event_streams_take_an_access_token() {
        assert!(takes_access_token("/sessions/abc/events"));
        assert!(takes_access_token("/ai-sdk/chat/c1/stream"));
        assert!(!takes_access_token("/sessions/abc"));
        assert!(!takes_access_token("/sessions/abc/messages"));
        assert!(!takes_access_token("/keys"));
    }

    #[test]
    fn the_access_token_leaves_the_request() {
        let mut request = Request::builder()
            .method(Method::GET)
            .uri("/sessions/abc/events?after=3&access_token=a.b%2Ec&x=1")
            .body(axum::body::Body::empty())
            .expect("request");
        let token = presented_credential(&mut request).expect("read");
        assert_eq!(token.as_deref(), Some("a.b.c"));
        assert_eq!(
            request.uri().to_string(),
            "/sessions/abc/events?after=3&x=1"
        );
        let mut post = Request::builder()
            .method(Method::POST)
            .uri("/sessions/abc/events?access_token=t")
            .body(axum::body::Body::empty())
            .expect("request");
        assert_eq!(presented_credential(&mut post).expect("read"), None);
    }
}
