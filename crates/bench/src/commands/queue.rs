//! `stepwise bench queue`: the execution queue at depth. For each depth N it queues N
//! messages (each a pending execution of the demo agent, through the engine's own submit
//! path) over S sessions in a fresh database, then times single claims at that depth
//! (p50/p99) and the drain rate of K workers running the demo agent (one step, no delay)
//! for a fixed time. A mixed run then queues messages from C concurrent clients while the K
//! workers run them, and reports both rates: whether execution keeps up with intake.
//!
//! SQLite: a fresh temporary database per run. PostgreSQL (`--database postgres://...`): a
//! fresh database per run, created beside the one named (the role needs CREATEDB) and
//! dropped afterwards, so every run starts as a new database under a burst does: empty,
//! without statistics.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use serde_json::{Value, json};
use stepwise_core::Id;
use stepwise_engine::{AgentRegistry, DEMO_AGENT, DemoAgent, Engine, EngineConfig, MessageInput};
use stepwise_store::{NewSession, Store, Tenant};
use stepwise_store_postgres::PgStore;
use stepwise_store_sqlite::{Durability, SqliteOptions};

use super::{Progress, ms, per_s, percentile_ms, round};

use stepwise_cli_support::db::{self, DatabaseUrl, OpenedStore};
use stepwise_store::prelude::*;

#[derive(Args, Debug, Clone)]
pub struct QueueArgs {
    /// Queue depths to measure at (pending executions), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1000,10000,100000")]
    pub depths: Vec<u64>,
    /// Sessions the queued executions are spread over (round-robin).
    #[arg(long, default_value_t = 1000)]
    pub sessions: u64,
    /// Workers draining the queue (K), as `serve --workers`.
    #[arg(long, default_value_t = 8)]
    pub workers: usize,
    /// Single claims timed at each depth.
    #[arg(long, default_value_t = 200)]
    pub claims: usize,
    /// How long the drain is timed at each depth, in seconds.
    #[arg(long, default_value_t = 10)]
    pub drain_seconds: u64,
    /// Concurrent clients queueing messages in the mixed run (0 skips the mixed run).
    #[arg(long, default_value_t = 64)]
    pub intake_clients: usize,
    /// How long the mixed run lasts, in seconds.
    #[arg(long, default_value_t = 10)]
    pub mixed_seconds: u64,
    /// Messages queued at once by the engine, as `serve --intake-concurrency` (0: its default).
    #[arg(long, default_value_t = 0)]
    pub intake_concurrency: usize,
    /// Clients queueing the N executions before a depth is measured.
    #[arg(long, default_value_t = 32)]
    pub fill_clients: usize,
}

/// Where one run's fresh database is.
enum Backend {
    Sqlite {
        durability: Durability,
    },
    Postgres {
        /// The database named on the command line: where runs' databases are made.
        admin: String,
    },
}

pub async fn run(
    args: QueueArgs,
    database: Option<&str>,
    levels: &[Durability],
) -> anyhow::Result<()> {
    if args.workers == 0 || args.sessions == 0 || args.drain_seconds == 0 {
        bail!("--workers, --sessions and --drain-seconds must be at least 1");
    }
    if args.depths.iter().any(|&d| d == 0 || d > 10_000_000) {
        bail!("each of --depths must be between 1 and 10,000,000");
    }
    let backend = match database.map(DatabaseUrl::parse).transpose()? {
        None => Backend::Sqlite {
            durability: levels.first().copied().unwrap_or(Durability::Full),
        },
        Some(DatabaseUrl::Sqlite(_)) => bail!(
            "bench queue makes a fresh SQLite database for each run; give no --database for SQLite"
        ),
        Some(DatabaseUrl::Postgres(url)) => Backend::Postgres { admin: url },
        Some(DatabaseUrl::Files(_)) => {
            bail!("bench queue measures SQLite or PostgreSQL, not the files backend")
        }
    };
    let progress = Progress::new();
    let backend_name = match &backend {
        Backend::Sqlite { durability } => format!("sqlite ({})", durability_name(*durability)),
        Backend::Postgres { .. } => "postgres".to_string(),
    };
    progress.stage(&format!(
        "stepwise bench queue on {backend_name}: depths {:?} over {} sessions, {} workers",
        args.depths, args.sessions, args.workers
    ));
    let mut depths = Vec::new();
    for &depth in &args.depths {
        let figure = with_fresh_store(&backend, &format!("depth {depth}"), |store| {
            measure_depth(store, &args, depth, &progress)
        })
        .await?;
        depths.push(figure);
    }
    let mixed = if args.intake_clients > 0 && args.mixed_seconds > 0 {
        Some(
            with_fresh_store(&backend, "mixed", |store| {
                measure_mixed(store, &args, &progress)
            })
            .await?,
        )
    } else {
        None
    };
    let report = json!({
        "benchmark": "queue",
        "backend": backend_name,
        "sessions": args.sessions,
        "workers": args.workers,
        "depths": depths,
        "mixed": mixed,
    });
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(())
}

/// The pause between queueing and measuring.
const SETTLE: Duration = Duration::from_secs(2);

fn durability_name(level: Durability) -> &'static str {
    match level {
        Durability::Full => "full",
        Durability::Process => "process",
    }
}

/// Runs `measure` on a store over a fresh database, then removes the database.
async fn with_fresh_store<F, Fut>(
    backend: &Backend,
    label: &str,
    measure: F,
) -> anyhow::Result<Value>
where
    F: FnOnce(OpenedStore) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Value>>,
{
    match backend {
        Backend::Sqlite { durability } => {
            let dir = tempfile::tempdir().context("creating a temporary directory")?;
            let store = db::open_sqlite_with(
                &dir.path().join("queue.db"),
                SqliteOptions {
                    durability: *durability,
                    ..SqliteOptions::default()
                },
            )
            .await?;
            let result = measure(OpenedStore::Sqlite(store.clone())).await;
            store.flush().await.ok();
            drop(store);
            result
        }
        Backend::Postgres { admin } => {
            let name = format!(
                "stepwise_bench_queue_{}",
                &stepwise_core::new_id().simple().to_string()[20..]
            );
            let admin_config: tokio_postgres::Config = admin
                .parse()
                .context("--database is not a PostgreSQL URL")?;
            let (client, connection) = admin_config
                .connect(tokio_postgres::NoTls)
                .await
                .with_context(|| {
                    format!("connecting to {admin} to create a database for {label}")
                })?;
            let driver = tokio::spawn(connection);
            client
                .batch_execute(&format!("CREATE DATABASE {name}"))
                .await
                .with_context(|| {
                    format!("creating the database {name} (the role needs CREATEDB)")
                })?;
            let mut config = admin_config.clone();
            config.dbname(&name);
            let url = postgres_url(&config, &name);
            let outcome = async {
                let store = PgStore::connect(&url)
                    .await
                    .with_context(|| format!("opening {name}"))?;
                let result = measure(OpenedStore::Postgres(store.clone())).await;
                store.close().await.ok();
                result
            }
            .await;
            // The dropped store's background tasks close their connections as they notice;
            // give them a moment, then force off any that linger.
            tokio::time::sleep(Duration::from_millis(500)).await;
            let dropped = client
                .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                .await;
            if let Err(e) = dropped {
                eprintln!("  could not drop the benchmark database {name}: {e}");
            }
            drop(client);
            driver.abort();
            outcome
        }
    }
}

/// `config`'s URL with another database name.
fn postgres_url(config: &tokio_postgres::Config, dbname: &str) -> String {
    let host = config
        .get_hosts()
        .first()
        .map(|h| match h {
            tokio_postgres::config::Host::Tcp(name) => name.clone(),
            tokio_postgres::config::Host::Unix(path) => path.display().to_string(),
        })
        .unwrap_or_else(|| "127.0.0.1".into());
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let user = config.get_user().unwrap_or("postgres");
    let password = config
        .get_password()
        .map(|p| format!(":{}", String::from_utf8_lossy(p)))
        .unwrap_or_default();
    format!("postgres://{user}{password}@{host}:{port}/{dbname}")
}

/// The engine `serve` runs (its store metered), with the demo agent at full speed.
fn demo_engine<S: Store>(
    store: S,
    workers: usize,
    intake_concurrency: usize,
) -> Engine<stepwise_server::Metered<S>> {
    let mut agents = AgentRegistry::new();
    agents.register(DEMO_AGENT, DemoAgent::with_step_delay(Duration::ZERO));
    Engine::new(
        stepwise_server::Metered::new(store),
        agents,
        EngineConfig {
            workers,
            intake_concurrency,
            ..EngineConfig::default()
        },
    )
}

fn message(n: u64) -> MessageInput {
    MessageInput {
        content: format!("hello {n}"),
        ..MessageInput::default()
    }
}

async fn create_sessions<S: Store>(
    store: &S,
    tenant: &Tenant,
    count: u64,
) -> anyhow::Result<Vec<Id>> {
    let mut sessions = Vec::with_capacity(count as usize);
    for n in 0..count {
        let session = store
            .create_session(
                tenant,
                NewSession {
                    user_id: "bench".into(),
                    title: Some(format!("queue bench {n}")),
                    ..NewSession::default()
                },
            )
            .await?;
        sessions.push(session.id);
    }
    Ok(sessions)
}

async fn measure_depth(
    store: OpenedStore,
    args: &QueueArgs,
    depth: u64,
    progress: &Progress,
) -> anyhow::Result<Value> {
    let tenant = Tenant::new("bench-queue")?;
    let sessions = Arc::new(create_sessions(&store, &tenant, args.sessions.min(depth)).await?);
    // An engine without workers queues; the drain below starts another with workers.
    // (Its intake is not what is measured here: as many at once as there are clients.)
    let intake = demo_engine(store.clone(), args.workers, args.fill_clients.max(1));
    progress.stage(&format!(
        "depth {depth}: queueing {depth} messages over {} sessions",
        sessions.len()
    ));
    let next = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut fillers = Vec::new();
    for _ in 0..args.fill_clients.max(1) {
        let (intake, tenant, sessions, next) = (
            intake.clone(),
            tenant.clone(),
            sessions.clone(),
            next.clone(),
        );
        fillers.push(tokio::spawn(async move {
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= depth {
                    return anyhow::Ok(());
                }
                let session = sessions[(n % sessions.len() as u64) as usize];
                intake
                    .submit_message(&tenant, "bench", session, message(n))
                    .await?;
            }
        }));
    }
    for filler in fillers {
        filler.await??;
    }
    let fill = started.elapsed();
    let queued = store.queue_depth().await?;
    // Let the fill's writes settle (SQLite checkpoints and truncates an idle WAL after a
    // second): the figures below are the queue's, not the end of the fill's.
    tokio::time::sleep(SETTLE).await;
    progress.stage(&format!(
        "depth {depth}: queued in {:.1} s ({:.0}/s); timing {} claims",
        fill.as_secs_f64(),
        per_s(depth, fill),
        args.claims
    ));

    // Single claims at this depth, each finished before the next (so the depth stays).
    let mut latencies = Vec::with_capacity(args.claims);
    for _ in 0..args.claims {
        let begun = Instant::now();
        let claim = store
            .claim_next("bench-claimer", Duration::from_secs(60), 5)
            .await?;
        latencies.push(begun.elapsed());
        let Some(claim) = claim else { break };
        store
            .transition_execution(
                &tenant,
                claim.execution.id,
                stepwise_store::Transition::Complete {
                    output: json!("claimed by the benchmark"),
                },
            )
            .await?;
    }
    let claimed = latencies.len() as u64;

    progress.stage(&format!(
        "depth {depth}: draining with {} workers for {} s",
        args.workers, args.drain_seconds
    ));
    let before = store.queue_depth().await?;
    let engine = demo_engine(store.clone(), args.workers, args.intake_concurrency);
    let began = Instant::now();
    engine.spawn_runners();
    // Until the time is up or the queue is empty (a shallow queue may drain sooner); the
    // workers' running executions (at most K) count as done.
    let deadline = began + Duration::from_secs(args.drain_seconds);
    // Counting a deep queue costs a scan: look often only when it may end soon.
    let poll = if before <= 5_000 {
        Duration::from_millis(50)
    } else {
        Duration::from_secs(1)
    };
    let mut after = before;
    while Instant::now() < deadline && after > 0 {
        tokio::time::sleep(poll.min(deadline.saturating_duration_since(Instant::now()))).await;
        after = store.queue_depth().await?;
    }
    let drained_for = began.elapsed();
    engine.shutdown(Duration::from_secs(30)).await;
    let completed = before.saturating_sub(after);
    Ok(json!({
        "depth": depth,
        "queued": queued,
        "fill_per_sec": per_s(depth, fill).round(),
        "claim": {
            "count": claimed,
            "p50_ms": round(percentile_ms(&latencies, 50.0), 3),
            "p99_ms": round(percentile_ms(&latencies, 99.0), 3),
            "max_ms": round(latencies.iter().max().map(|d| ms(*d)).unwrap_or(0.0), 3),
        },
        "drain": {
            "workers": args.workers,
            "seconds": round(drained_for.as_secs_f64(), 3),
            "completed": completed,
            "per_sec": per_s(completed, drained_for).round(),
            "left": after,
        },
    }))
}

async fn measure_mixed(
    store: OpenedStore,
    args: &QueueArgs,
    progress: &Progress,
) -> anyhow::Result<Value> {
    let tenant = Tenant::new("bench-queue")?;
    let sessions = create_sessions(&store, &tenant, args.intake_clients as u64).await?;
    progress.stage(&format!(
        "mixed: {} clients queue messages while {} workers run them, for {} s",
        args.intake_clients, args.workers, args.mixed_seconds
    ));
    let engine = demo_engine(store.clone(), args.workers, args.intake_concurrency);
    engine.spawn_runners();
    let stop = Arc::new(AtomicBool::new(false));
    let accepted = Arc::new(AtomicU64::new(0));
    let began = Instant::now();
    let mut clients = Vec::new();
    for (c, session) in sessions.into_iter().enumerate() {
        let (engine, tenant, stop, accepted) = (
            engine.clone(),
            tenant.clone(),
            stop.clone(),
            accepted.clone(),
        );
        clients.push(tokio::spawn(async move {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                engine
                    .submit_message(&tenant, "bench", session, message(c as u64 * 1_000_000 + n))
                    .await?;
                accepted.fetch_add(1, Ordering::Relaxed);
                n += 1;
            }
            anyhow::Ok(())
        }));
    }
    tokio::time::sleep(Duration::from_secs(args.mixed_seconds)).await;
    stop.store(true, Ordering::Relaxed);
    for client in clients {
        client.await??;
    }
    let elapsed = began.elapsed();
    // What is still queued when intake stops; the workers' running executions (at most
    // K) count as done.
    let left = store.queue_depth().await?;
    let (intake_limit, intake_waited) = (engine.intake_limit(), engine.intake_waited());
    engine.shutdown(Duration::from_secs(30)).await;
    let accepted = accepted.load(Ordering::Relaxed);
    let completed = accepted.saturating_sub(left);
    let accepted_per_sec = per_s(accepted, elapsed);
    let completed_per_sec = per_s(completed, elapsed);
    Ok(json!({
        "clients": args.intake_clients,
        "workers": args.workers,
        "seconds": round(elapsed.as_secs_f64(), 3),
        "accepted": accepted,
        "accepted_per_sec": accepted_per_sec.round(),
        "completed": completed,
        "completed_per_sec": completed_per_sec.round(),
        "completed_to_accepted": if accepted_per_sec > 0.0 { round(completed_per_sec / accepted_per_sec, 3) } else { 0.0 },
        "left_pending": left,
        "intake_limit_at_end": intake_limit,
        "intake_waited": intake_waited,
    }))
}
