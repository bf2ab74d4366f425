//! The LangGraph Server API, mounted at `/langgraph`, so that `langgraph_sdk.get_client(
//! url="http://host:7777/langgraph", api_key=...)` (and `useStream`) talks to Stepwise
//! unchanged: assistants are the graphs workers serve (`assistants.rs`), threads are
//! sessions (`threads.rs`), runs are executions queued for those workers (`runs.rs`), and a
//! run's stream is rebuilt from what the worker stored (`stream.rs`), so it can be joined
//! again on any node; the store is `store.rs`. It is
//! LangGraph's contract, not Stepwise's (so it is not in `/openapi.json`; docs/api.md lists
//! it): its paths, bodies and answers are those of `langgraph-sdk`.
//!
//! Callers are who they are on `/v1` (an API key or token, or the open server's `local`
//! admin); the SDK sends its key as `x-api-key`, which is taken as `Authorization: Bearer`
//! when the request has no `Authorization` header.

mod assistants;
mod runs;
mod store;
mod stream;
mod threads;

use axum::Router;
use axum::extract::Request;
use axum::http::{HeaderValue, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use stepwise_store::{AccessRole, Store};

use stepwise_server::{ApiError, AppState, Caller, authenticated, method_not_allowed, not_found};

/// The LangGraph SDK's key header.
const X_API_KEY: &str = "x-api-key";

/// The routes under `/langgraph`, with auth and the rate limit of `/v1`.
pub(crate) fn router<S: Store>(state: &AppState<S>) -> Router<AppState<S>> {
    // Threads and runs are an admin's and its users'; a worker reaches the store and the
    // assistants (and its own executions on `/v1`), as on `/v1` where sessions are 403 to it.
    let conversations = threads::router::<S>()
        .merge(runs::router::<S>())
        .route_layer(middleware::from_fn(no_workers));
    let routes = store::router::<S>()
        .merge(assistants::router::<S>())
        .merge(conversations)
        .method_not_allowed_fallback(method_not_allowed)
        .fallback(not_found);
    authenticated(state, routes).route_layer(middleware::from_fn(x_api_key_as_bearer))
}

/// 403 `forbidden` for a `worker` caller.
async fn no_workers(request: Request, next: Next) -> Response {
    if request
        .extensions()
        .get::<Caller>()
        .is_some_and(|caller| caller.role == AccessRole::Worker)
    {
        return ApiError::forbidden(
            "LangGraph's threads and runs need an admin key or a user's key or token; this key is a `worker`",
        )
        .into_response();
    }
    next.run(request).await
}

/// Takes the SDK's `x-api-key` as the request's `Authorization: Bearer` (an `Authorization`
/// header already there wins).
async fn x_api_key_as_bearer(mut request: Request, next: Next) -> Response {
    let headers = request.headers_mut();
    if !headers.contains_key(header::AUTHORIZATION)
        && let Some(key) = headers.get(X_API_KEY).and_then(|v| v.to_str().ok())
        && let Ok(value) = HeaderValue::from_str(&format!("Bearer {}", key.trim()))
    {
        headers.insert(header::AUTHORIZATION, value);
    }
    next.run(request).await
}
