//! `stepwise serve`: the HTTP server and the execution workers over one store, until
//! SIGTERM/SIGINT; then a graceful stop: no new requests or claims, running executions
//! stop at a step boundary and go back to the queue (resumable), the save queue drains.

use std::io::Write;
use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

use anyhow::Context;
use stepwise_engine::EngineConfig;
use stepwise_server::{CleanerSettings, Listen, NodeSettings, ServerConfig};
use stepwise_store::Store;

/// Exit status when a non-loopback server would run without API keys.
pub const EXIT_NO_KEYS: i32 = 2;

#[derive(clap::Args, Debug, Clone)]
pub struct ServeArgs {
    /// Address to listen on: HOST:PORT, or unix:PATH for a Unix socket (mode 0600; a dead
    /// server's socket file is replaced). Give it several times to listen on several (in
    /// STEPWISE_LISTEN, separated by commas). A non-loopback address needs an API key
    /// (`stepwise keys create`).
    #[arg(
        long,
        env = "STEPWISE_LISTEN",
        default_value = "127.0.0.1:7777",
        value_name = "ADDR",
        value_delimiter = ','
    )]
    pub listen: Vec<String>,
    /// Serve without API keys on a non-loopback address (anyone who can reach it is tenant `local`).
    #[arg(long, env = "STEPWISE_INSECURE_NO_AUTH")]
    pub insecure_no_auth: bool,
    /// Worker tasks running executions (each runs one at a time).
    #[arg(long, env = "STEPWISE_WORKERS", default_value_t = 8, value_name = "N")]
    pub workers: usize,
    /// Messages this node queues at once while its executions work; the others wait their
    /// turn, so a burst of messages cannot take the cores (and the SQLite writer) from
    /// running executions (0: measured: the limit rises while cores are free and falls to a
    /// quarter of --workers when executions wait for one).
    #[arg(
        long,
        env = "STEPWISE_INTAKE_CONCURRENCY",
        default_value_t = 0,
        value_name = "N"
    )]
    pub intake_concurrency: usize,
    /// Seconds an execution's claim lasts without a heartbeat (a crashed server's executions
    /// resume after this).
    #[arg(
        long,
        env = "STEPWISE_LEASE_SECS",
        default_value_t = 15,
        value_name = "SECS"
    )]
    pub lease_secs: u64,
    /// Claims after which an execution whose workers keep dying fails.
    #[arg(
        long,
        env = "STEPWISE_MAX_ATTEMPTS",
        default_value_t = 5,
        value_name = "N"
    )]
    pub max_attempts: u32,
    /// Largest request body accepted, in bytes.
    #[arg(long, env = "STEPWISE_MAX_BODY_BYTES", default_value_t = stepwise_server::DEFAULT_BODY_LIMIT, value_name = "BYTES")]
    pub max_body_bytes: usize,
    /// Requests per second each API key (or, without keys, the whole `local` tenant) may send
    /// to `/v1`; over it, 429 with Retry-After. Fractions are allowed; 0 turns the limit off.
    #[arg(long, env = "STEPWISE_RATE_LIMIT_PER_SEC", default_value_t = stepwise_server::DEFAULT_RATE_LIMIT_PER_SEC, value_name = "N")]
    pub rate_limit_per_sec: f64,
    /// Requests a key may send at once before the per-second rate applies.
    #[arg(long, env = "STEPWISE_RATE_LIMIT_BURST", default_value_t = stepwise_server::DEFAULT_RATE_LIMIT_BURST, value_name = "N")]
    pub rate_limit_burst: u32,
    /// Open event streams (SSE) per session; 0 = no limit.
    #[arg(long, env = "STEPWISE_MAX_SSE_PER_SESSION", default_value_t = stepwise_server::DEFAULT_MAX_SSE_PER_SESSION, value_name = "N")]
    pub max_sse_per_session: usize,
    /// Open event streams (SSE) per tenant; 0 = no limit.
    #[arg(long, env = "STEPWISE_MAX_SSE_PER_TENANT", default_value_t = stepwise_server::DEFAULT_MAX_SSE_PER_TENANT, value_name = "N")]
    pub max_sse_per_tenant: usize,
    /// The only `related_type` values accepted, comma-separated (default: any).
    #[arg(long, env = "STEPWISE_RELATED_TYPES", value_name = "A,B,...")]
    pub related_types: Option<String>,
    /// Seconds between two runs of the retention cleaner (the first runs at start); 0 turns
    /// it off.
    #[arg(long, env = "STEPWISE_CLEANUP_INTERVAL_SECS", default_value_t = stepwise_server::cleaner::DEFAULT_INTERVAL_SECS, value_name = "SECS")]
    pub cleanup_interval_secs: u64,
    /// Run the retention cleaner once a day at this time, UTC (`HH:MM`), instead of at start
    /// and every interval; a failed pass is tried again after the interval.
    #[arg(long, env = "STEPWISE_CLEANUP_AT", value_name = "HH:MM", value_parser = parse_cleanup_at)]
    pub cleanup_at: Option<u32>,
    /// Also serve `GET /metrics` alone on this address (for a scraper on an internal
    /// network); `/metrics` stays on the main address too.
    #[arg(long, env = "STEPWISE_METRICS_LISTEN", value_name = "ADDR")]
    pub metrics_listen: Option<String>,
    /// Seconds a connection has to send a request's complete headers, from when it opens or
    /// starts sending the request; then it is closed.
    #[arg(long, env = "STEPWISE_HEADER_TIMEOUT_SECS", default_value_t = stepwise_server::DEFAULT_HEADER_TIMEOUT_SECS, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..))]
    pub header_timeout_secs: u64,
    /// Seconds a request body has to arrive in full after its headers; then 408 and the
    /// connection closes.
    #[arg(long, env = "STEPWISE_BODY_TIMEOUT_SECS", default_value_t = stepwise_server::DEFAULT_BODY_TIMEOUT_SECS, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..))]
    pub body_timeout_secs: u64,
    /// Seconds a keep-alive connection may sit idle between requests (an open event stream
    /// is not idle).
    #[arg(long, env = "STEPWISE_IDLE_TIMEOUT_SECS", default_value_t = stepwise_server::DEFAULT_IDLE_TIMEOUT_SECS, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..))]
    pub idle_timeout_secs: u64,
    /// Open HTTP connections at most; over it new connections get 503 and are closed.
    /// Default: the open-file limit (`ulimit -n`) minus 256; 0 = no limit.
    #[arg(long, env = "STEPWISE_MAX_CONNECTIONS", value_name = "N")]
    pub max_connections: Option<usize>,
    #[command(flatten)]
    pub retention: crate::cleanup::RetentionArgs,
    #[command(flatten)]
    pub end_users: EndUserArgs,
    #[command(flatten)]
    pub store_index: StoreIndexArgs,
}

/// Semantic search in the LangGraph store (`/langgraph/store`, `StepwiseStore`): an
/// embedding model behind an OpenAI-compatible `/embeddings` endpoint.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct StoreIndexArgs {
    /// The embedding model (as LangGraph's `store.index.embed`): turns semantic search on.
    #[arg(long, env = "STEPWISE_STORE_EMBED_MODEL", value_name = "MODEL")]
    pub store_embed_model: Option<String>,
    /// Its OpenAI-compatible base URL (`.../v1`); default: STEPWISE_LLM_BASE_URL.
    #[arg(long, env = "STEPWISE_STORE_EMBED_URL", value_name = "URL")]
    pub store_embed_url: Option<String>,
    /// The vectors' length, checked on each answer (any when unset).
    #[arg(long, env = "STEPWISE_STORE_EMBED_DIMS", value_name = "N")]
    pub store_embed_dims: Option<usize>,
    /// The value fields embedded when a put names none (`$`, the whole value, by default).
    #[arg(
        long,
        env = "STEPWISE_STORE_INDEX_FIELDS",
        value_delimiter = ',',
        value_name = "FIELD"
    )]
    pub store_index_fields: Vec<String>,
}

impl StoreIndexArgs {
    /// The index these settings turn on (the key from STEPWISE_STORE_EMBED_API_KEY, else
    /// STEPWISE_LLM_API_KEY); `None` without a model.
    pub fn index(&self) -> anyhow::Result<Option<stepwise_server::store_index::StoreIndex>> {
        let Some(model) = self
            .store_embed_model
            .as_deref()
            .filter(|m| !m.trim().is_empty())
        else {
            return Ok(None);
        };
        let env = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let url = self
            .store_embed_url
            .clone()
            .or_else(|| env("STEPWISE_LLM_BASE_URL"))
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "--store-embed-model needs the model's URL: --store-embed-url (or STEPWISE_LLM_BASE_URL)"
                )
            })?;
        let key = env("STEPWISE_STORE_EMBED_API_KEY").or_else(|| env("STEPWISE_LLM_API_KEY"));
        let fields = self
            .store_index_fields
            .iter()
            .map(|f| f.trim().to_string())
            .filter(|f| !f.is_empty())
            .collect();
        stepwise_server::store_index::StoreIndex::new(
            &url,
            model,
            key,
            fields,
            self.store_embed_dims,
        )
        .map(Some)
        .map_err(|e| anyhow::anyhow!(e))
    }
}

/// End users: the app's own tokens (JWT) and the pages that may call from a browser
/// (`docs/security.md`).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct EndUserArgs {
    /// Verify the app's HS256 tokens with this shared secret (at least 32 bytes).
    #[arg(
        long,
        env = "STEPWISE_JWT_SECRET",
        value_name = "SECRET",
        hide_env_values = true
    )]
    pub jwt_secret: Option<String>,
    /// Verify the app's RS256, ES256 and EdDSA tokens with this JWKS: a file's path or an
    /// https:// URL (fetched again for an unknown `kid`, at most once a minute).
    #[arg(long, env = "STEPWISE_JWT_JWKS", value_name = "PATH|URL")]
    pub jwt_jwks: Option<String>,
    /// The `aud` a token must carry (not checked when unset).
    #[arg(long, env = "STEPWISE_JWT_AUDIENCE", value_name = "AUD")]
    pub jwt_audience: Option<String>,
    /// The `iss` a token must carry (not checked when unset).
    #[arg(long, env = "STEPWISE_JWT_ISSUER", value_name = "ISS")]
    pub jwt_issuer: Option<String>,
    /// The claim that names a token's tenant.
    #[arg(
        long,
        env = "STEPWISE_JWT_TENANT_CLAIM",
        default_value = "tenant",
        value_name = "CLAIM"
    )]
    pub jwt_tenant_claim: String,
    /// The tenant of a token without the tenant claim (without this, such a token is refused).
    #[arg(long, env = "STEPWISE_JWT_DEFAULT_TENANT", value_name = "TENANT")]
    pub jwt_default_tenant: Option<String>,
    /// A page origin (scheme://host[:port]) that may call /v1 from a browser; repeat it for
    /// several (comma-separated in the environment). None by default; `*` is refused.
    #[arg(
        id = "cors_origin",
        long = "cors-origin",
        env = "STEPWISE_CORS_ORIGINS",
        value_delimiter = ',',
        value_name = "ORIGIN"
    )]
    pub cors_origins: Vec<String>,
}

impl EndUserArgs {
    fn jwt(&self) -> stepwise_server::JwtSettings {
        let set = |v: &Option<String>| v.clone().filter(|t| !t.is_empty());
        stepwise_server::JwtSettings {
            secret: set(&self.jwt_secret),
            jwks: set(&self.jwt_jwks),
            audience: set(&self.jwt_audience),
            issuer: set(&self.jwt_issuer),
            tenant_claim: self.jwt_tenant_claim.clone(),
            default_tenant: set(&self.jwt_default_tenant),
        }
    }
}

impl ServeArgs {
    /// The connection timeouts and cap.
    pub fn connections(&self) -> stepwise_server::ConnectionConfig {
        stepwise_server::ConnectionConfig {
            header_timeout: Duration::from_secs(self.header_timeout_secs),
            body_timeout: Duration::from_secs(self.body_timeout_secs),
            idle_timeout: Duration::from_secs(self.idle_timeout_secs),
            max_connections: self
                .max_connections
                .unwrap_or_else(stepwise_server::default_max_connections),
        }
    }
}

fn resolve(listen: &str) -> anyhow::Result<SocketAddr> {
    if let Ok(addr) = listen.parse::<SocketAddr>() {
        return Ok(addr);
    }
    listen
        .to_socket_addrs()
        .with_context(|| format!("cannot resolve the listen address '{listen}'"))?
        .next()
        .with_context(|| format!("the listen address '{listen}' resolves to nothing"))
}

/// A `--listen` value: `unix:PATH`, or a TCP address.
fn listen_on(listen: &str) -> anyhow::Result<Listen> {
    match listen.strip_prefix("unix:") {
        Some("") => anyhow::bail!("--listen unix: needs a path (unix:/path/to/stepwise.sock)"),
        Some(path) => Ok(Listen::Unix(path.into())),
        None => resolve(listen).map(Listen::Addr),
    }
}

pub async fn run<S: Store>(store: S, args: ServeArgs) -> anyhow::Result<()> {
    let mut listens = args
        .listen
        .iter()
        .map(|l| listen_on(l.trim()))
        .collect::<anyhow::Result<Vec<_>>>()?;
    if listens.is_empty() {
        anyhow::bail!("--listen needs an address (HOST:PORT or unix:PATH)");
    }
    // A Unix socket is private to the server's user (mode 0600): as local as loopback.
    let public: Vec<SocketAddr> = listens
        .iter()
        .filter_map(|l| match l {
            Listen::Addr(addr) if !addr.ip().is_loopback() => Some(*addr),
            _ => None,
        })
        .collect();
    let loopback = public.is_empty();
    let addr = public
        .iter()
        .map(SocketAddr::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    let jwt = args.end_users.jwt();
    jwt.check().map_err(anyhow::Error::msg)?;
    let jwt_enabled = jwt.enabled();
    let cors_origins = stepwise_server::CorsOrigins::new(&args.end_users.cors_origins)
        .map_err(anyhow::Error::msg)?;
    let keys = store
        .count_active_api_keys()
        .await
        .context("cannot count API keys")?;
    if !loopback && keys == 0 && !jwt.enabled() && !args.insecure_no_auth {
        eprintln!(
            "error: refusing to listen on {addr} without API keys: no active API key exists. \
             Create one with `stepwise keys create --tenant TENANT --user USER`, listen on 127.0.0.1, \
             or pass --insecure-no-auth."
        );
        let _ = std::io::stderr().flush();
        std::process::exit(EXIT_NO_KEYS);
    }
    if !loopback && args.insecure_no_auth {
        let warning = if keys == 0 {
            format!(
                "serving {addr} WITHOUT AUTHENTICATION (--insecure-no-auth): anyone who can reach it reads and writes tenant `local`. Create an API key to close it."
            )
        } else {
            format!(
                "--insecure-no-auth is given for {addr}, but API keys exist, so every request still needs one"
            )
        };
        eprintln!("warning: {warning}");
        tracing::warn!("{warning}");
    }
    // Everything below (engine, handlers, cleaner) saves and loads through the timings
    // `/metrics` reports.
    let store = stepwise_server::Metered::new(store);
    let agents = crate::agents::install(&store).await?;
    let metrics_listen = args.metrics_listen.as_deref().map(resolve).transpose()?;
    let settings = NodeSettings {
        engine: EngineConfig {
            workers: args.workers.max(1),
            lease: Duration::from_secs(args.lease_secs.max(1)),
            max_attempts: args.max_attempts.max(1),
            intake_concurrency: args.intake_concurrency,
            default_agent: agents.default_agent.clone(),
            ..EngineConfig::default()
        },
        tools: agents.tools,
        server: ServerConfig {
            open_when_no_keys: loopback || args.insecure_no_auth,
            body_limit: args.max_body_bytes,
            rate_limit_per_sec: args.rate_limit_per_sec.max(0.0),
            rate_limit_burst: args.rate_limit_burst,
            max_sse_per_session: args.max_sse_per_session,
            max_sse_per_tenant: args.max_sse_per_tenant,
            related_types: args.related_types.as_deref().and_then(|list| {
                let types: Vec<String> = list
                    .split(',')
                    .map(str::trim)
                    .filter(|t| !t.is_empty())
                    .map(str::to_string)
                    .collect();
                (!types.is_empty()).then_some(types)
            }),
            jwt,
            cors_origins,
            retention: args.retention.policy(),
            store_index: args.store_index.index()?,
        },
        connections: args.connections(),
        listen: listens.remove(0),
        also_listen: listens,
        metrics_listen,
        cleaner: (args.cleanup_interval_secs > 0).then(|| CleanerSettings {
            interval: Duration::from_secs(args.cleanup_interval_secs),
            daily_at: args.cleanup_at,
            policy: args.retention.policy(),
            clock: stepwise_core::system_clock(),
        }),
        ..NodeSettings::new(agents.registry)
    };
    let node = stepwise_protocols::start_node(settings, store).await?;
    for address in node.addresses() {
        println!("Stepwise listening on {address}");
    }
    println!("Default agent: {}", agents.default_agent);
    if let Some(metrics_local) = node.metrics_addr() {
        println!("Metrics on http://{metrics_local}/metrics");
    }
    if keys == 0 && !jwt_enabled {
        println!(
            "No API keys exist: the API is open as tenant 'local' (create one with `stepwise keys create`)."
        );
    } else if keys == 0 {
        println!(
            "No API keys exist: requests need an end-user token (JWT); create an admin key with `stepwise keys create`."
        );
    }
    let _ = std::io::stdout().flush();

    shutdown_signal().await;
    tracing::info!("shutting down: finishing steps in flight, draining the save queue");
    node.shutdown(Duration::from_secs(6)).await;
    drop(agents.llm);
    println!("Stepwise stopped");
    Ok(())
}

/// Resolves when the process that started this server is gone (it was re-parented), for a
/// server embedded by a library (`Stepwise.local()` sets `STEPWISE_EXIT_WITH_PARENT=1`), so
/// a killed parent leaves no server behind. Never resolves otherwise.
async fn parent_gone() {
    #[cfg(unix)]
    if std::env::var("STEPWISE_EXIT_WITH_PARENT").is_ok_and(|v| v == "1") {
        let parent = std::os::unix::process::parent_id();
        loop {
            tokio::time::sleep(Duration::from_millis(500)).await;
            if std::os::unix::process::parent_id() != parent {
                tracing::info!("the process that started this server is gone: stopping");
                return;
            }
        }
    }
    std::future::pending::<()>().await
}

async fn shutdown_signal() {
    tokio::select! {
        _ = parent_gone() => {}
        _ = termination() => {}
    }
}

async fn termination() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// `--cleanup-at HH:MM` (UTC) as seconds after midnight.
fn parse_cleanup_at(text: &str) -> Result<u32, String> {
    match stepwise_server::cleaner::Schedule::daily_at(text, Duration::ZERO) {
        Some(stepwise_server::cleaner::Schedule::DailyAt { second_of_day, .. }) => {
            Ok(second_of_day)
        }
        _ => Err(format!(
            "'{text}' is not a time of day: give HH:MM, UTC, from 00:00 to 23:59"
        )),
    }
}
