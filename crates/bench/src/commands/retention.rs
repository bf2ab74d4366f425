//! `stepwise bench retention`: the time to delete N expired sessions' data while the server
//! keeps serving, and the longest request stall during it.
//!
//! 1. Setup, with the store's clock set 100 days back: N completed sessions, each with a
//!    user message, a completed execution with three steps, and an event (one session is
//!    built through the store, the others are imports of its document: one write each).
//! 2. The clock moves to now; a real server (API and two workers running the demo agent)
//!    listens on loopback over the same store.
//! 3. Before: a few clients, each alternating `GET /v1/sessions` and
//!    `POST /v1/sessions/{id}/messages` on its own session, paced, for a few seconds
//!    (after one unmeasured second of the same).
//! 4. During: the same clients while one retention pass (the one `stepwise cleanup` and the
//!    server's cleaner run) deletes the N sessions.
//!
//! JSON on stdout: sessions deleted (and the rows with them), total delete time, deletes/s,
//! and request latency (p50, p99, max = the longest stall) before and during the pass.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use stepwise_store::prelude::*;

use anyhow::{Context, bail};
use clap::Args;
use serde_json::{Value, json};
use stepwise_core::{
    Clock, ExecutionStatus, ManualClock, Role, SessionStatus, SharedClock, StepBody, StepKind,
    Timestamp, TokenUsage, ToolCall,
};
use stepwise_engine::{AgentRegistry, DEMO_AGENT, DemoAgent, EngineConfig};
use stepwise_server::cleaner::retention_pass;
use stepwise_server::{LOCAL_TENANT, LOCAL_USER, Node, NodeSettings};
use stepwise_store::{
    NewEvent, NewExecution, NewMessage, NewSession, NewStep, RetentionPolicy, SessionPatch, Store,
    Tenant, Transition, export_session,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use stepwise_cli_support::db::DatabaseUrl;

#[derive(Args, Debug, Clone)]
pub struct RetentionArgs {
    /// Expired sessions to create and delete.
    #[arg(long, default_value_t = 100_000)]
    pub sessions: u64,
    /// Concurrent HTTP clients while measuring.
    #[arg(long, default_value_t = 4)]
    pub clients: usize,
    /// Milliseconds between two requests of one client.
    #[arg(long, default_value_t = 10)]
    pub request_interval_ms: u64,
    /// Seconds of requests measured before the pass.
    #[arg(long, default_value_t = 5)]
    pub baseline_secs: u64,
    /// Keep the temporary database and print where it is.
    #[arg(long)]
    pub keep: bool,
}

/// Concurrent imports during setup.
const SETUP_CONCURRENCY: usize = 64;

pub async fn run(args: RetentionArgs, database: Option<&str>) -> anyhow::Result<()> {
    let clock = ManualClock::new(Timestamp::now().minus_days(100));
    let shared: SharedClock = clock.clone();
    let dir = tempfile::tempdir().context("cannot create a temporary directory")?;
    let url = match database {
        Some(text) => DatabaseUrl::parse(text)?,
        None => DatabaseUrl::Sqlite(dir.path().join("retention.db")),
    };
    let report = match &url {
        DatabaseUrl::Sqlite(path) => {
            let path = path.clone();
            let store = tokio::task::spawn_blocking(move || {
                stepwise_store_sqlite::SqliteStore::open_with(
                    &path,
                    stepwise_store_sqlite::SqliteOptions {
                        clock: shared,
                        ..Default::default()
                    },
                )
            })
            .await
            .context("the database open task failed")?
            .context("cannot open the SQLite database")?;
            // As the opened store: the one type the binary's server is compiled for.
            let store = stepwise_cli_support::db::OpenedStore::Sqlite(store);
            let report = measure(&store, &clock, &args, "sqlite").await;
            store.close().await?;
            report?
        }
        DatabaseUrl::Postgres(text) => {
            let store = stepwise_store_postgres::PgStore::connect_with(
                text,
                stepwise_store_postgres::PgOptions {
                    clock: shared,
                    ..Default::default()
                },
            )
            .await
            .context("cannot open the PostgreSQL database")?;
            let store = stepwise_cli_support::db::OpenedStore::Postgres(store);
            let report = measure(&store, &clock, &args, "postgres").await;
            store.close().await?;
            report?
        }
        DatabaseUrl::Files(_) => bail!("bench retention runs on sqlite:// or postgres:// only"),
    };
    println!("{}", serde_json::to_string_pretty(&report)?);
    if args.keep && database.is_none() {
        let kept = dir.keep();
        eprintln!("kept the database in {}", kept.display());
    }
    Ok(())
}

async fn measure(
    store: &stepwise_cli_support::db::OpenedStore,
    clock: &Arc<ManualClock>,
    args: &RetentionArgs,
    backend: &str,
) -> anyhow::Result<Value> {
    // The pass deletes every expired session of the database: only ever on an empty one.
    let counts = store.count_by_status().await?;
    if counts.sessions.iter().any(|(_, n)| *n > 0) {
        bail!("bench retention needs an empty database (it deletes every expired session)");
    }
    let tenant = Tenant::new(LOCAL_TENANT)?;

    eprintln!("setup: {} expired sessions", args.sessions);
    let started = Instant::now();
    setup(store, &tenant, args.sessions).await?;
    let setup_secs = started.elapsed().as_secs_f64();
    eprintln!("setup took {setup_secs:.1} s");

    // From here on it is today: the sessions above are 100 days old.
    clock.set(Timestamp::now());
    let mut agents = AgentRegistry::new();
    agents.register(DEMO_AGENT, DemoAgent::with_step_delay(Duration::ZERO));
    let node = Node::start(
        NodeSettings {
            engine: EngineConfig {
                workers: 2,
                ..EngineConfig::default()
            },
            ..NodeSettings::new(agents)
        },
        // Metered, as `serve` runs it.
        stepwise_server::Metered::new(store.clone()),
    )
    .await?;
    let addr = node.local_addr().to_string();

    let mut sessions = Vec::new();
    for i in 0..args.clients {
        let (status, body) = http(
            &addr,
            "POST",
            "/v1/sessions",
            Some(&json!({"title": format!("client {i}")}).to_string()),
        )
        .await?;
        if status != 201 {
            bail!("creating a client session answered {status}: {body}");
        }
        let parsed: Value = serde_json::from_str(&body)?;
        let id = parsed["id"].as_str().context("a session id")?.to_string();
        sessions.push(id);
    }
    let interval = Duration::from_millis(args.request_interval_ms);

    // A second of unmeasured requests first: the setup's last checkpoint and the first
    // connections are not what the figure is about.
    let stop = Arc::new(AtomicBool::new(false));
    let load = spawn_load(&addr, &sessions, interval, stop.clone());
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, Ordering::SeqCst);
    collect(load).await?;

    eprintln!(
        "before: {} clients for {} s",
        args.clients, args.baseline_secs
    );
    let stop = Arc::new(AtomicBool::new(false));
    let load = spawn_load(&addr, &sessions, interval, stop.clone());
    tokio::time::sleep(Duration::from_secs(args.baseline_secs)).await;
    stop.store(true, Ordering::SeqCst);
    let before = collect(load).await?;

    eprintln!("during: the retention pass");
    let stop = Arc::new(AtomicBool::new(false));
    let load = spawn_load(&addr, &sessions, interval, stop.clone());
    // Let the clients get going first.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = Instant::now();
    let outcome = retention_pass(store, RetentionPolicy::default(), clock.now(), false).await?;
    let delete_secs = started.elapsed().as_secs_f64();
    stop.store(true, Ordering::SeqCst);
    let during = collect(load).await?;

    node.shutdown(Duration::from_secs(5)).await;

    let left = store.count_by_status().await?;
    let completed_left: u64 = left
        .sessions
        .iter()
        .filter(|(s, _)| *s == SessionStatus::Completed)
        .map(|(_, n)| n)
        .sum();
    Ok(json!({
        "benchmark": "retention",
        "backend": backend,
        "sessions": args.sessions,
        "setup_secs": round(setup_secs),
        "deleted": outcome.deleted,
        "marked_abandoned": outcome.marked_abandoned,
        "expired_sessions_left": completed_left,
        "delete_secs": round(delete_secs),
        "deletes_per_sec": round(outcome.deleted.sessions as f64 / delete_secs.max(1e-9)),
        "clients": args.clients,
        "request_interval_ms": args.request_interval_ms,
        "requests": "GET /v1/sessions?limit=20 and POST /v1/sessions/{id}/messages, alternating",
        "before": before,
        "during": during,
    }))
}

/// One completed session built through the store, then imported `n - 1` more times.
async fn setup<S: Store>(store: &S, tenant: &Tenant, n: u64) -> anyhow::Result<()> {
    if n == 0 {
        return Ok(());
    }
    let session = store
        .create_session(
            tenant,
            NewSession {
                user_id: LOCAL_USER.into(),
                title: Some("an old task".into()),
                ..NewSession::default()
            },
        )
        .await?;
    store
        .append_message(
            tenant,
            NewMessage::new(session.id, Role::User, "please add these numbers: 2+3*4"),
        )
        .await?;
    let execution = store
        .create_execution(
            tenant,
            NewExecution {
                session_id: Some(session.id),
                parent_execution_id: None,
                user_id: LOCAL_USER.into(),
                agent_type: DEMO_AGENT.into(),
                agent_config: Value::Null,
                input: json!("please add these numbers: 2+3*4"),
                metadata: Value::Null,
                status: ExecutionStatus::Running,
                lease: None,
            },
        )
        .await?;
    for step_number in 1..=3u32 {
        let body = StepBody {
            model_output: Some(format!("Step {step_number}: I will use the calculator.")),
            tool_calls: vec![ToolCall {
                id: format!("call_{step_number}"),
                name: "calculator".into(),
                arguments: json!({"expression": "2+3*4"}),
            }],
            observations: Some("14".into()),
            token_usage: TokenUsage {
                input: 120,
                output: 30,
                total: 150,
            },
            ..StepBody::default()
        };
        store
            .append_step(
                tenant,
                NewStep {
                    execution_id: execution.id,
                    step_number,
                    kind: StepKind::Action,
                    body,
                },
            )
            .await?
            .await?;
    }
    store
        .transition_execution(
            tenant,
            execution.id,
            Transition::Complete {
                output: json!("14"),
            },
        )
        .await?;
    store
        .update_session(
            tenant,
            session.id,
            SessionPatch {
                status: Some(SessionStatus::Completed),
                ..SessionPatch::default()
            },
        )
        .await?;
    let doc = export_session(store, tenant, session.id)
        .await?
        .context("the template session")?;
    append_event(store, tenant, session.id).await?;

    let doc = Arc::new(doc);
    let mut next = 1u64;
    let mut running = tokio::task::JoinSet::new();
    let mut done = 1u64;
    let mut reported = Instant::now();
    while next < n || !running.is_empty() {
        while next < n && running.len() < SETUP_CONCURRENCY {
            let store = store.clone();
            let tenant = tenant.clone();
            let doc = doc.clone();
            running.spawn(async move {
                let imported = store
                    .import_document(&tenant, LOCAL_USER, (*doc).clone())
                    .await?;
                append_event(&store, &tenant, imported.id).await
            });
            next += 1;
        }
        if let Some(joined) = running.join_next().await {
            joined.context("a setup task failed")??;
            done += 1;
            if reported.elapsed() > Duration::from_secs(5) {
                eprintln!("  {done}/{n}");
                reported = Instant::now();
            }
        }
    }
    store.flush().await?;
    Ok(())
}

async fn append_event<S: Store>(
    store: &S,
    tenant: &Tenant,
    session_id: stepwise_core::Id,
) -> anyhow::Result<()> {
    // Queued; the flush at the end of the setup makes every event durable.
    drop(
        store
            .append_event(
                tenant,
                NewEvent {
                    session_id,
                    message_id: None,
                    execution_id: None,
                    event_type: stepwise_core::EventType::ExecutionCompleted,
                    content: "Execution completed".into(),
                    metadata: Value::Null,
                },
            )
            .await?,
    );
    Ok(())
}

type Load = Vec<tokio::task::JoinHandle<anyhow::Result<Vec<Duration>>>>;

/// Clients alternating a list and a message on their own session every `interval`.
fn spawn_load(addr: &str, sessions: &[String], interval: Duration, stop: Arc<AtomicBool>) -> Load {
    sessions
        .iter()
        .map(|session| {
            let addr = addr.to_string();
            let post_path = format!("/v1/sessions/{session}/messages");
            let stop = stop.clone();
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                let mut ticker = tokio::time::interval(interval);
                ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                let mut turn = 0u64;
                while !stop.load(Ordering::SeqCst) {
                    ticker.tick().await;
                    let started = Instant::now();
                    let (status, body) = if turn.is_multiple_of(2) {
                        http(&addr, "GET", "/v1/sessions?limit=20", None).await?
                    } else {
                        let message = json!({"content": format!("hello {turn}")}).to_string();
                        http(&addr, "POST", &post_path, Some(&message)).await?
                    };
                    latencies.push(started.elapsed());
                    if status >= 300 {
                        bail!("a request answered {status}: {body}");
                    }
                    turn += 1;
                }
                Ok(latencies)
            })
        })
        .collect()
}

async fn collect(load: Load) -> anyhow::Result<Value> {
    let mut all = Vec::new();
    for client in load {
        all.extend(client.await.context("a client task failed")??);
    }
    all.sort();
    let ms = |d: Duration| round(d.as_secs_f64() * 1000.0);
    let at = |q: f64| {
        let index = ((all.len() as f64 * q).ceil() as usize).clamp(1, all.len().max(1)) - 1;
        all.get(index).copied().unwrap_or_default()
    };
    Ok(json!({
        "requests": all.len(),
        "p50_ms": ms(at(0.50)),
        "p99_ms": ms(at(0.99)),
        "max_ms": ms(all.last().copied().unwrap_or_default()),
    }))
}

fn round(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// One HTTP/1.1 request on a fresh loopback connection: the status and the body.
async fn http(
    addr: &str,
    method: &str,
    path: &str,
    body: Option<&str>,
) -> anyhow::Result<(u16, String)> {
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    let body = body.unwrap_or("");
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await?;
    let text = String::from_utf8_lossy(&answer);
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .context("not an HTTP answer")?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_string())
        .unwrap_or_default();
    Ok((status, body))
}
