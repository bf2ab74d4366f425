//! The Stepwise HTTP server: the JSON API and Server-Sent Events of api.md over an
//! [`Engine`], the OpenAPI document, health and metrics, and the web UI.
//!
//! [`app`] builds the router; [`launch`] serves it on a listener until a shutdown future
//! resolves, so tests run the real server on port 0.

mod auth;
mod checkpoints;
pub mod cleaner;
mod connections;
mod error;
mod events;
mod executions;
mod http_metrics;
mod items;
mod keys;
pub mod limits;
mod listeners;
mod messages;
mod metered;
mod node;
mod openapi;
mod ops;
mod request_id;
pub mod schemas;
mod sessions;
mod shapes;
pub mod step_cache;
pub mod store_index;
mod ui_assets;
mod workers;

use std::future::Future;
use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::StatusCode;
use axum::middleware;
use axum::routing::{delete, get, post, put};
use serde::Serialize;
use stepwise_core::Id;
use stepwise_engine::Engine;
use stepwise_store::{Store, Tenant};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub use auth::cors::CorsOrigins;
pub use auth::jwt::JwtSettings;
pub use auth::{AUTH_CACHE_TTL, Caller, Credential, LOCAL_TENANT, LOCAL_USER};
pub use connections::{
    ConnectionConfig, ConnectionCounts, DEFAULT_BODY_TIMEOUT_SECS, DEFAULT_HEADER_TIMEOUT_SECS,
    DEFAULT_IDLE_TIMEOUT_SECS, FD_RESERVE, connection_counts, default_max_connections,
};
pub use error::{ApiError, ApiJson, ApiQuery, ApiResult, ErrorBody};
pub use events::KEEP_ALIVE;
pub use limits::SubscriberSlot;
#[cfg(unix)]
pub use listeners::UnixSocket;
pub use listeners::{BoundAddr, Listener, UnixBindError};
pub use messages::{AgentBody, MessageFields};
pub use metered::Metered;
pub use node::{CleanerSettings, Listen, Node, NodeError, NodeSettings, Stopped};
pub use openapi::{openapi_json, openapi_json_with};
pub use ops::{record_retention_failure, record_retention_pass, record_retention_skipped};
pub use request_id::{REQUEST_ID_HEADER, RequestId};
pub use sessions::fork::fork_session;
pub use sessions::import::check_document_context;
pub use shapes::DataFrame;

/// The default request body limit (api.md: 4 MiB).
pub const DEFAULT_BODY_LIMIT: usize = 4 * 1024 * 1024;

#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Serve `/v1` without a key (as tenant `local`) while no API key exists. True on a
    /// loopback address (or with `--insecure-no-auth`).
    pub open_when_no_keys: bool,
    pub body_limit: usize,
    /// Requests per second per API key (per tenant when open) on `/v1`; 0 = no limit.
    pub rate_limit_per_sec: f64,
    /// Requests a key may send at once before the rate applies.
    pub rate_limit_burst: u32,
    /// Open event streams per session / per tenant; 0 = no limit.
    pub max_sse_per_session: usize,
    pub max_sse_per_tenant: usize,
    /// When set, the only `related_type` values accepted.
    pub related_types: Option<Vec<String>>,
    /// How the app's own end-user tokens are verified (none by default).
    pub jwt: JwtSettings,
    /// The origins whose pages may call `/v1` (none by default).
    pub cors_origins: CorsOrigins,
    /// The server's retention policy (`GET /v1/retention` answers it for a tenant without
    /// one of its own); the node sets it from its cleaner's.
    pub retention: stepwise_store::RetentionPolicy,
    /// The LangGraph store's embedding model, for searches with a `query` (none by default).
    pub store_index: Option<store_index::StoreIndex>,
}

/// `stepwise serve`'s defaults for the limits (a [`ServerConfig::default`] has none, for
/// embedding and benchmarks).
pub const DEFAULT_RATE_LIMIT_PER_SEC: f64 = 1000.0;
pub const DEFAULT_RATE_LIMIT_BURST: u32 = 2000;
pub const DEFAULT_MAX_SSE_PER_SESSION: usize = 2000;
pub const DEFAULT_MAX_SSE_PER_TENANT: usize = 10_000;

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            open_when_no_keys: true,
            body_limit: DEFAULT_BODY_LIMIT,
            rate_limit_per_sec: 0.0,
            rate_limit_burst: 0,
            max_sse_per_session: 0,
            max_sse_per_tenant: 0,
            related_types: None,
            jwt: JwtSettings {
                tenant_claim: "tenant".into(),
                ..JwtSettings::default()
            },
            cors_origins: CorsOrigins::default(),
            retention: stepwise_store::RetentionPolicy::default(),
            store_index: None,
        }
    }
}

/// What every handler shares.
pub struct AppState<S: Store> {
    pub engine: Engine<S>,
    pub config: Arc<ServerConfig>,
    auth: Arc<auth::Auth>,
    limits: Arc<limits::Limits>,
    /// Sessions and executions by status, kept a few seconds so scrapes stay cheap.
    status_cache: Arc<ops::StatusCache>,
    /// Cancelled when the server shuts down: live event streams end so connections close.
    shutdown: CancellationToken,
    /// What a crate above the server adds to it (the front-end protocols).
    mounts: Mounts<S>,
}

/// Routes a crate above the server adds to it: the front-end protocols over sessions
/// (`stepwise-protocols`: the AI SDK, AG-UI and LangGraph's API). The server is the core API,
/// its auth and its limits; the binary mounts the protocols on it ([`Node::start_with`]).
pub struct Mounts<S: Store> {
    /// Adds routes to `/v1`, where they get its auth, rate limit and access guard (each role
    /// to its routes, a user to its own sessions: `auth/access.rs` names the paths).
    pub v1: fn(Router<AppState<S>>) -> Router<AppState<S>>,
    /// Routers nested at the top level, each at its path, with their own auth
    /// ([`authenticated`]).
    pub nested: fn(&AppState<S>) -> Vec<Nested<S>>,
    /// Adds the mounted operations and their schemas to the OpenAPI document.
    pub openapi: fn(&mut utoipa::openapi::OpenApi),
}

/// A router and the path it is nested at.
pub type Nested<S> = (&'static str, Router<AppState<S>>);

impl<S: Store> Mounts<S> {
    /// Nothing mounted: the core API alone.
    pub fn none() -> Self {
        Mounts {
            v1: |router| router,
            nested: |_| Vec::new(),
            openapi: |_| {},
        }
    }
}

impl<S: Store> Clone for Mounts<S> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<S: Store> Copy for Mounts<S> {}

impl<S: Store> Clone for AppState<S> {
    fn clone(&self) -> Self {
        AppState {
            engine: self.engine.clone(),
            config: self.config.clone(),
            auth: self.auth.clone(),
            limits: self.limits.clone(),
            status_cache: self.status_cache.clone(),
            shutdown: self.shutdown.clone(),
            mounts: self.mounts,
        }
    }
}

impl<S: Store> AppState<S> {
    /// The core API alone; [`AppState::with_mounts`] adds the front-end protocols.
    pub fn new(engine: Engine<S>, config: ServerConfig) -> Self {
        AppState {
            engine,
            limits: Arc::new(limits::Limits::new(&config)),
            auth: Arc::new(auth::Auth::new(config.jwt.clone())),
            config: Arc::new(config),
            status_cache: Arc::default(),
            shutdown: CancellationToken::new(),
            mounts: Mounts::none(),
        }
    }

    /// This state with `mounts` served beside the core API.
    pub fn with_mounts(mut self, mounts: Mounts<S>) -> Self {
        self.mounts = mounts;
        self
    }

    /// A place for one more event stream of `session` (given back when dropped), or 429
    /// when the session or the tenant has its limit of streams open already.
    pub fn stream_slot(&self, tenant: &Tenant, session: Id) -> ApiResult<SubscriberSlot> {
        self.limits.subscribers.acquire(tenant.as_str(), session)
    }

    /// Fires when the server shuts down: live streams end on it so connections close.
    pub fn closing(&self) -> &CancellationToken {
        &self.shutdown
    }

    pub fn store(&self) -> &S {
        self.engine.store()
    }

    /// The store's LangGraph checkpoints: on a backend that keeps none (JSON files), every
    /// checkpoint endpoint answers 422 `invalid_state`.
    pub fn checkpoints(&self) -> Result<&S::Checkpoints, error::ApiError> {
        self.store()
            .checkpoints()
            .ok_or_else(|| stepwise_store::checkpoints::unsupported().into())
    }

    /// Ends live event streams (done by [`launch`] when its shutdown future resolves).
    pub fn close_streams(&self) {
        self.shutdown.cancel();
    }
}

/// A page of a list: `{items, next_cursor}`.
#[derive(Debug, Serialize)]
pub struct List<T> {
    pub items: Vec<T>,
    pub next_cursor: Option<String>,
}

/// The whole router: `/v1` (behind auth), health, metrics, OpenAPI and the UI.
pub fn app<S: Store>(state: AppState<S>) -> Router {
    let v1 = Router::new()
        .route(
            "/sessions",
            post(sessions::create::create::<S>).get(sessions::list::list::<S>),
        )
        .route("/sessions/import", post(sessions::import::import::<S>))
        .route(
            "/sessions/{id}",
            get(sessions::get::get::<S>)
                .patch(sessions::update::update::<S>)
                .delete(sessions::delete::delete::<S>),
        )
        .route(
            "/sessions/{id}/messages",
            get(messages::list::list::<S>).post(messages::post::post::<S>),
        )
        .route(
            "/messages",
            post(messages::post_new_session::post_new_session::<S>),
        )
        .route("/sessions/{id}/memory", get(sessions::memory::memory::<S>))
        .route(
            "/sessions/{id}/executions",
            get(executions::list::list::<S>).post(executions::open::open::<S>),
        )
        .route("/sessions/{id}/events", get(events::stream::<S>))
        .route("/sessions/{id}/export", get(sessions::export::export::<S>))
        .route("/sessions/{id}/fork", post(sessions::fork::fork::<S>))
        .route(
            "/sessions/{id}/items",
            get(items::list::list::<S>)
                .post(items::append::append::<S>)
                .delete(items::clear::clear::<S>),
        )
        .route("/sessions/{id}/items/pop", post(items::pop::pop::<S>))
        .route(
            "/threads/{thread_id}",
            get(checkpoints::get_thread::get_thread::<S>)
                .delete(checkpoints::delete_thread::delete_thread::<S>),
        )
        .route(
            "/threads/{thread_id}/checkpoints",
            get(checkpoints::list::list::<S>),
        )
        .route(
            "/threads/{thread_id}/checkpoints/latest",
            get(checkpoints::get_latest::get_latest::<S>),
        )
        .route(
            "/threads/{thread_id}/checkpoints/{checkpoint_id}",
            get(checkpoints::get::get::<S>).put(checkpoints::put::put::<S>),
        )
        .route(
            "/threads/{thread_id}/checkpoints/{checkpoint_id}/writes",
            put(checkpoints::put_writes::put_writes::<S>),
        )
        .route(
            "/threads/{thread_id}/copy",
            post(checkpoints::copy::copy::<S>),
        )
        .route("/checkpoints", get(checkpoints::list_all::list_all::<S>))
        .route(
            "/checkpoints/delete-for-runs",
            post(checkpoints::delete_for_runs::delete_for_runs::<S>),
        )
        .route("/checkpoints/prune", post(checkpoints::prune::prune::<S>))
        .route("/executions/{id}", get(executions::get::get::<S>))
        .route(
            "/executions/{id}/cancel",
            post(executions::cancel::cancel::<S>),
        )
        .route(
            "/executions/{id}/steps",
            get(executions::list_steps::list_steps::<S>)
                .post(executions::append_step::append_step::<S>),
        )
        .route(
            "/executions/{id}/steps/batch",
            post(executions::append_steps::append_steps::<S>),
        )
        .route(
            "/executions/{id}/snapshots",
            get(executions::list_snapshots::list_snapshots::<S>)
                .post(executions::save_snapshot::save_snapshot::<S>),
        )
        .route(
            "/executions/{id}/complete",
            post(executions::complete::complete::<S>),
        )
        .route("/executions/{id}/fail", post(executions::fail::fail::<S>))
        .route(
            "/executions/{id}/pause",
            post(executions::pause::pause::<S>),
        )
        .route(
            "/executions/{id}/messages",
            post(executions::post_message::post_message::<S>),
        )
        .route(
            "/snapshots/{id}",
            get(executions::get_snapshot::get_snapshot::<S>),
        )
        .route("/agents", get(workers::agents::list::<S>))
        .route("/workers/claim", post(workers::claim::claim::<S>))
        .route("/workers/{worker_id}", delete(workers::stop::stop::<S>))
        .route(
            "/executions/{id}/heartbeat",
            post(workers::heartbeat::heartbeat::<S>),
        )
        .route(
            "/executions/{id}/deltas",
            post(workers::deltas::deltas::<S>),
        )
        .route(
            "/executions/{id}/release",
            post(workers::release::release::<S>),
        )
        .route(
            "/keys",
            post(keys::create::create::<S>).get(keys::list::list::<S>),
        )
        .route("/keys/{id}", delete(keys::delete::delete::<S>))
        .route("/tokens", post(keys::tokens::create::<S>))
        .route("/limits", get(ops::limits::limits::<S>))
        .route(
            "/retention",
            get(ops::retention::get::<S>).put(ops::retention::put::<S>),
        )
        .method_not_allowed_fallback(method_not_allowed)
        .fallback(not_found);
    // Innermost: each role to its routes, a user to its own sessions; around it the rate
    // limit, which reads the caller that auth, outermost, found.
    let v1 = (state.mounts.v1)(v1).route_layer(middleware::from_fn_with_state(
        state.clone(),
        auth::access::guard::<S>,
    ));
    let v1 = authenticated(&state, v1);

    let mut root = Router::new().nest("/v1", v1);
    for (path, router) in (state.mounts.nested)(&state) {
        root = root.nest(path, router);
    }
    root.route("/healthz", get(ops::healthz::healthz))
        .route("/readyz", get(ops::readyz::readyz::<S>))
        .route("/metrics", get(ops::metrics::metrics::<S>))
        .route("/openapi.json", get(ops::openapi::openapi::<S>))
        // Counts every routed request (the `/v1` routes too), by matched path.
        .route_layer(middleware::from_fn(http_metrics::track))
        .merge(ui_assets::router())
        .method_not_allowed_fallback(method_not_allowed)
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(state.config.body_limit))
        // A 413 names the limit (`error::too_large`).
        .layer(axum::Extension(error::BodyLimit(state.config.body_limit)))
        // Outside auth: a browser's preflight carries no credential.
        .layer(middleware::from_fn({
            let origins = state.config.cors_origins.clone();
            move |request, next| auth::cors::cors(origins.clone(), request, next)
        }))
        // Outermost: every request (fallbacks too) gets a request id and a span with it.
        .layer(middleware::from_fn(request_id::assign))
        .with_state(state)
}

/// `/metrics` alone, for a separate metrics listener (`serve --metrics-listen`).
pub fn metrics_app<S: Store>(state: AppState<S>) -> Router {
    Router::new()
        .route("/metrics", get(ops::metrics::metrics::<S>))
        .fallback(not_found)
        .with_state(state)
}

/// Serves [`metrics_app`] on `listener` until `shutdown` resolves.
pub async fn launch_metrics<S: Store>(
    listener: TcpListener,
    state: AppState<S>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    connections::serve(
        vec![listener.into()],
        metrics_app(state),
        ConnectionConfig::default(),
        shutdown,
    )
    .await
}

/// `router` behind the auth and rate limit of `/v1` (the rate limit inside auth: the caller
/// is known when its bucket is read). `/v1` adds its access guard, which knows the paths of
/// `/v1` only; a router a crate above nests at the top level ([`Mounts`]) has this alone.
pub fn authenticated<S: Store>(
    state: &AppState<S>,
    router: Router<AppState<S>>,
) -> Router<AppState<S>> {
    router
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            limits::rate_limit::<S>,
        ))
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            auth::require_caller::<S>,
        ))
}

/// 405 `method_not_allowed`, the JSON error of a known path with another method.
pub async fn method_not_allowed() -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "this method is not allowed on this path",
    )
}

/// 404 `not_found`, the JSON error of an unknown path.
pub async fn not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such endpoint")
}

/// Serves the app on `listener` until `shutdown` resolves; then live streams end and
/// in-flight requests finish. Starting and stopping the engine's workers is the caller's.
/// Connections get the default timeouts and cap ([`ConnectionConfig::default`]).
pub async fn launch<S: Store>(
    listener: TcpListener,
    state: AppState<S>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    launch_with(
        vec![listener.into()],
        state,
        ConnectionConfig::default(),
        shutdown,
    )
    .await
}

/// [`launch`] on several listeners (TCP and Unix sockets) with the given connection
/// timeouts and cap.
pub async fn launch_with<S: Store>(
    listeners: Vec<Listener>,
    state: AppState<S>,
    connections: ConnectionConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let router = app(state.clone());
    connections::serve(listeners, router, connections, async move {
        shutdown.await;
        state.close_streams();
    })
    .await
}
