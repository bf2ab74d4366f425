//! `stepwise bench steps`: the agent-step workload of `bench/workload.md`, run through
//! the same save path the server uses (`StepStore::append_step`, awaiting each `Ack` = durable).
//!
//! W1 one session, 1,000 steps; W2 200 sessions × 50 steps round-robin; W2c the same 200
//! sessions writing concurrently; W3 restore of the W1 session (cold, then warm); W4 bytes on
//! disk after W1. Plus a raw rusqlite insert loop of the W1 steps as a yardstick, and W3m:
//! listing as many messages of the W1 session, through the hot-session cache and without.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use serde_json::{Value, json};
use stepwise_core::{ExecutionStatus, Id, Restored, StepBody, StepKind};
use stepwise_store::{NewExecution, NewSession, NewStep, Store, Tenant, restore_memory};
use stepwise_store_sqlite::{Durability, SqliteOptions, SqliteStore};

use corpus::{Corpus, find_corpus, load_corpus};
use stepwise_cli_support::db::{self, DatabaseUrl};
use stepwise_store::prelude::*;

mod corpus;
mod fanout;
mod http;
mod idle;
mod messages;
mod postgres;
mod queue;
mod remote;
mod retention;

/// The corpus as the workload names it, relative to the working directory.
const SHARED_CORPUS: &str = "../shared/bench/steps.jsonl.gz";
/// The project's byte-identical copy, relative to the repository root.
const PROJECT_CORPUS: &str = "bench/steps.jsonl.gz";
const CORPUS_LINES: usize = 1000;

#[derive(Args, Debug, Clone)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub command: BenchCommand,
}

#[derive(Subcommand, Debug, Clone)]
pub enum BenchCommand {
    /// The agent-step workload: W1 append, W2 many sessions, W2c concurrent, W3 restore,
    /// W4 storage. Uses a fresh temporary SQLite database unless --database is given on
    /// this command line (settings from the environment or stepwise.toml are ignored here,
    /// so a benchmark never writes into your real database by accident).
    Steps(StepsArgs),
    /// Deletes N expired sessions (each with a message, an execution, steps and an event)
    /// in one retention pass while a server on the same store keeps serving requests:
    /// delete time and the longest request stall. Fresh temporary SQLite database unless
    /// --database is given on this command line (it must be empty).
    Retention(retention::RetentionArgs),
    /// Messages accepted per second by a running server (`--url`), from this separate
    /// process: N clients, one session each, posting back to back. JSON on stdout.
    Http(http::HttpArgs),
    /// Live fan-out of a running server (`--url`), from this separate process: step ->
    /// viewer latency (p50/p99) with N viewers of one session, and with `--server-pid` the
    /// server's resident memory with N idle viewers. JSON on stdout.
    Fanout(fanout::FanoutArgs),
    /// What an idle running server (`--url`, `--server-pid`) costs, from this separate
    /// process: its claim queries and CPU time over `--seconds` with no traffic, then how
    /// soon a new execution starts after a pause. JSON on stdout.
    Idle(idle::IdleArgs),
    /// The execution queue at depth: claim latency (p50/p99) and the drain rate of K
    /// workers (demo agent, one step) with N executions queued over S sessions, for each
    /// of --depths; then a mixed run (C clients queueing while the workers run) reporting
    /// both rates. A fresh database per run: temporary SQLite, or with --database
    /// postgres://... one created beside it and dropped after. JSON on stdout.
    Queue(queue::QueueArgs),
}

#[derive(Args, Debug, Clone)]
pub struct StepsArgs {
    /// The step corpus (gzipped JSON lines). Default: ../shared/bench/steps.jsonl.gz, then
    /// $STEPWISE_BENCH_STEPS, then the project's bench/steps.jsonl.gz.
    #[arg(long, value_name = "FILE")]
    pub steps: Option<PathBuf>,
    /// Keep the temporary benchmark database and print where it is.
    #[arg(long)]
    pub keep: bool,
    /// W1 steps (the workload: 1000). For quick checks only.
    #[arg(long, hide = true, default_value_t = 1000)]
    pub w1_steps: u32,
    /// W2/W2c sessions (the workload: 200).
    #[arg(long, hide = true, default_value_t = 200)]
    pub sessions: u32,
    /// W2/W2c steps per session (the workload: 50).
    #[arg(long, hide = true, default_value_t = 50)]
    pub steps_per_session: u32,
    /// W3 warm loads (the workload: 20).
    #[arg(long, hide = true, default_value_t = 20)]
    pub warm_loads: u32,
}

/// Runs a benchmark; `steps` on SQLite runs once for each durability level in `levels`.
pub async fn run(
    args: BenchArgs,
    database: Option<&str>,
    levels: &[Durability],
) -> anyhow::Result<()> {
    match args.command {
        BenchCommand::Steps(steps) => run_steps(steps, database, levels).await,
        BenchCommand::Retention(args) => retention::run(args, database).await,
        BenchCommand::Http(args) => http::run(args).await,
        BenchCommand::Fanout(args) => fanout::run(args).await,
        BenchCommand::Idle(args) => idle::run(args).await,
        BenchCommand::Queue(args) => queue::run(args, database, levels).await,
    }
}

// --- measuring ------------------------------------------------------------------------

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Nearest-rank percentile of unsorted samples, in ms.
fn percentile_ms(samples: &[Duration], p: f64) -> f64 {
    if samples.is_empty() {
        return 0.0;
    }
    let mut sorted = samples.to_vec();
    sorted.sort();
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    ms(sorted[rank.clamp(1, sorted.len()) - 1])
}

fn round(x: f64, digits: i32) -> f64 {
    let scale = 10f64.powi(digits);
    (x * scale).round() / scale
}

fn per_s(count: u64, elapsed: Duration) -> f64 {
    let secs = elapsed.as_secs_f64();
    if secs > 0.0 { count as f64 / secs } else { 0.0 }
}

/// Progress lines on stderr; rewritten in place on a terminal.
struct Progress {
    tty: bool,
}

impl Progress {
    fn new() -> Self {
        Progress {
            tty: std::io::stderr().is_terminal(),
        }
    }

    fn update(&self, what: &str, done: u64, total: u64) {
        if self.tty {
            eprint!("\r  {what}: {done}/{total}   ");
            if done == total {
                eprintln!();
            }
        } else if done == total || (total >= 4 && done.is_multiple_of((total / 4).max(1))) {
            eprintln!("  {what}: {done}/{total}");
        }
    }

    fn stage(&self, text: &str) {
        eprintln!("{text}");
    }
}

// --- the backend under test --------------------------------------------------------------

/// Where the benchmark database lives; the temporary directory is removed at the end
/// unless `--keep`.
struct BenchDb {
    path: PathBuf,
    temp: Option<tempfile::TempDir>,
}

impl BenchDb {
    fn bytes_on_disk(&self) -> anyhow::Result<(u64, u64)> {
        // Fold the WAL into the database first, as the workload asks: a checkpoint.
        let conn = rusqlite::Connection::open(&self.path)
            .context("opening the benchmark database to checkpoint it")?;
        conn.busy_timeout(Duration::from_secs(10))?;
        // A checkpoint another connection still reads through answers "busy" and leaves
        // the WAL as it is: try again until it is folded in (the store's last handles
        // close in the background), so the WAL is never counted as the database's size.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let busy: i64 = conn
                .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |row| row.get(0))
                .context("checkpointing the WAL")?;
            if busy == 0 || std::time::Instant::now() >= deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        drop(conn);
        let size = |p: &Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
        let db = size(&self.path);
        let mut wal_path = self.path.clone().into_os_string();
        wal_path.push("-wal");
        Ok((db, size(Path::new(&wal_path))))
    }
}

async fn open_store(db: &BenchDb, durability: Durability) -> anyhow::Result<SqliteStore> {
    open_store_caching(db, durability, stepwise_store::DEFAULT_SESSION_CACHE_BYTES).await
}

/// [`open_store`] with a hot-session cache of `cache_bytes` (0: none).
async fn open_store_caching(
    db: &BenchDb,
    durability: Durability,
    cache_bytes: usize,
) -> anyhow::Result<SqliteStore> {
    db::open_sqlite_with(
        &db.path,
        SqliteOptions {
            durability,
            session_cache_bytes: cache_bytes,
            ..SqliteOptions::default()
        },
    )
    .await
}

// --- the runs -------------------------------------------------------------------------

struct Target {
    session_id: Id,
    execution_id: Id,
}

async fn new_target<S: Store>(store: &S, tenant: &Tenant, label: &str) -> anyhow::Result<Target> {
    let session = store
        .create_session(
            tenant,
            NewSession {
                user_id: "bench".into(),
                title: Some(format!("bench {label}")),
                metadata: json!({}),
                ..NewSession::default()
            },
        )
        .await?;
    let execution = store
        .create_execution(
            tenant,
            NewExecution {
                session_id: Some(session.id),
                parent_execution_id: None,
                user_id: "bench".into(),
                agent_type: "external".into(),
                agent_config: json!({}),
                input: json!({ "workload": label }),
                metadata: json!({}),
                status: ExecutionStatus::Running,
                lease: None,
            },
        )
        .await?;
    Ok(Target {
        session_id: session.id,
        execution_id: execution.id,
    })
}

/// Appends one step and waits until it is durable; returns how long that took.
async fn save_durably<S: Store>(
    store: &S,
    tenant: &Tenant,
    execution_id: Id,
    step_number: u32,
    body: StepBody,
) -> anyhow::Result<Duration> {
    let new = NewStep {
        execution_id,
        step_number,
        kind: StepKind::Action,
        body,
    };
    let started = Instant::now();
    let appended = store.append_step(tenant, new).await?.await?;
    let elapsed = started.elapsed();
    if !appended.created {
        bail!(
            "step {step_number} of execution {execution_id} was already stored: the benchmark needs a fresh session"
        );
    }
    Ok(elapsed)
}

struct W1 {
    session_id: Id,
    execution_id: Id,
    total: Duration,
    latencies: Vec<Duration>,
}

async fn run_w1<S: Store>(
    store: &S,
    tenant: &Tenant,
    corpus: &Corpus,
    n: u32,
    progress: &Progress,
) -> anyhow::Result<W1> {
    let target = new_target(store, tenant, "W1").await?;
    let bodies: Vec<StepBody> = (1..=n as usize).map(|k| corpus.line(k).clone()).collect();
    let mut latencies = Vec::with_capacity(n as usize);
    let started = Instant::now();
    for (k, body) in (1..=n).zip(bodies) {
        latencies.push(save_durably(store, tenant, target.execution_id, k, body).await?);
        if k % 50 == 0 || k == n {
            progress.update("W1 steps", u64::from(k), u64::from(n));
        }
    }
    Ok(W1 {
        session_id: target.session_id,
        execution_id: target.execution_id,
        total: started.elapsed(),
        latencies,
    })
}

/// The corpus line of step `k` of session `s` (0-based), as workload.md defines it.
fn w2_line(s: u32, k: u32, steps_per_session: u32) -> usize {
    ((s as usize * steps_per_session as usize + k as usize - 1) % CORPUS_LINES) + 1
}

async fn run_w2<S: Store>(
    store: &S,
    tenant: &Tenant,
    corpus: &Corpus,
    sessions: u32,
    per: u32,
    progress: &Progress,
) -> anyhow::Result<Duration> {
    let mut targets = Vec::with_capacity(sessions as usize);
    for s in 0..sessions {
        targets.push(new_target(store, tenant, &format!("W2 s{s}")).await?);
    }
    let total = u64::from(sessions) * u64::from(per);
    let started = Instant::now();
    for k in 1..=per {
        for (s, target) in (0..sessions).zip(&targets) {
            let body = corpus.line(w2_line(s, k, per)).clone();
            save_durably(store, tenant, target.execution_id, k, body).await?;
        }
        progress.update("W2 steps", u64::from(k) * u64::from(sessions), total);
    }
    Ok(started.elapsed())
}

async fn run_w2c<S: Store>(
    store: &S,
    tenant: &Tenant,
    corpus: &Corpus,
    sessions: u32,
    per: u32,
    progress: &Progress,
) -> anyhow::Result<(Duration, Vec<Duration>)> {
    let mut work = Vec::with_capacity(sessions as usize);
    for s in 0..sessions {
        let target = new_target(store, tenant, &format!("W2c s{s}")).await?;
        let bodies: Vec<StepBody> = (1..=per)
            .map(|k| corpus.line(w2_line(s, k, per)).clone())
            .collect();
        work.push((target, bodies));
    }
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for (target, bodies) in work {
        let store = store.clone();
        let tenant = tenant.clone();
        tasks.spawn(async move {
            let mut latencies = Vec::with_capacity(bodies.len());
            for (k, body) in (1..).zip(bodies) {
                latencies.push(save_durably(&store, &tenant, target.execution_id, k, body).await?);
            }
            anyhow::Ok(latencies)
        });
    }
    let mut latencies = Vec::with_capacity((sessions * per) as usize);
    let mut done = 0u64;
    while let Some(joined) = tasks.join_next().await {
        latencies.extend(joined.context("a W2c writer task failed")??);
        done += 1;
        progress.update("W2c sessions done", done, u64::from(sessions));
    }
    Ok((started.elapsed(), latencies))
}

/// Loads the whole W1 session as typed steps through the restore path.
async fn restore_w1<S: Store>(
    store: &S,
    tenant: &Tenant,
    session_id: Id,
    expected: u32,
) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let memory = restore_memory(store, tenant, session_id)
        .await?
        .context("the W1 session is gone")?;
    let elapsed = started.elapsed();
    if memory.restored != Restored::Full || memory.steps.len() != expected as usize {
        bail!(
            "restore returned {:?} with {} steps, expected all {expected}",
            memory.restored,
            memory.steps.len()
        );
    }
    Ok(elapsed)
}

/// The `synchronous` setting that gives `level` (what the store sets on its writer).
fn synchronous(level: Durability) -> &'static str {
    match level {
        Durability::Full => "FULL",
        Durability::Process => "NORMAL",
    }
}

/// The yardstick: the W1 steps inserted one row per commit with plain rusqlite, in WAL mode
/// with the `synchronous` setting of the level under test (NORMAL for `process`, FULL for
/// `full`: an fsync per commit).
fn raw_insert(dir: &Path, bodies: Vec<StepBody>, level: Durability) -> anyhow::Result<Duration> {
    let path = dir.join(format!("raw-insert-{}.db", level.as_str()));
    let conn = rusqlite::Connection::open(&path).context("opening the raw insert database")?;
    conn.query_row("PRAGMA journal_mode = WAL", [], |_| Ok(()))?;
    conn.execute_batch(&format!(
        "PRAGMA synchronous = {};
         CREATE TABLE steps (id INTEGER PRIMARY KEY, execution_id TEXT NOT NULL, step_number INTEGER NOT NULL,
                             kind TEXT NOT NULL, body BLOB NOT NULL, created_at INTEGER NOT NULL,
                             UNIQUE (execution_id, step_number));",
        synchronous(level)
    ))?;
    let execution_id = stepwise_core::new_id().to_string();
    let started = Instant::now();
    {
        let mut insert = conn.prepare(
            "INSERT INTO steps (execution_id, step_number, kind, body, created_at) VALUES (?1, ?2, 'action', ?3, ?4)",
        )?;
        for (k, body) in (1u32..).zip(&bodies) {
            let encoded = serde_json::to_vec(body)?;
            // Autocommit: each insert is its own transaction, committed before the next.
            insert.execute(rusqlite::params![
                execution_id,
                k,
                encoded,
                stepwise_core::Timestamp::now().as_micros()
            ])?;
        }
    }
    let elapsed = started.elapsed();
    drop(conn);
    Ok(elapsed)
}

async fn run_steps(
    args: StepsArgs,
    database: Option<&str>,
    levels: &[Durability],
) -> anyhow::Result<()> {
    if args.w1_steps == 0 || args.sessions == 0 || args.steps_per_session == 0 {
        bail!("the workload sizes must be at least 1");
    }
    let progress = Progress::new();
    let corpus_path = find_corpus(args.steps.as_deref())?;
    let corpus = load_corpus(&corpus_path)?;
    if corpus.bodies.len() != CORPUS_LINES {
        eprintln!(
            "note: {} has {} steps; the workload's corpus has {CORPUS_LINES} (lines are reused in order)",
            corpus.path.display(),
            corpus.bodies.len()
        );
    }

    let scratch = tempfile::Builder::new()
        .prefix("stepwise-bench-")
        .tempdir()
        .context("cannot create a temporary directory")?;
    let named = match database {
        Some(text) => match DatabaseUrl::parse(text)? {
            DatabaseUrl::Sqlite(path) => Some(path),
            DatabaseUrl::Postgres(url) => {
                // PostgreSQL acknowledges after its own fsync: there is no level to choose.
                return postgres::run_steps(&args, &url, &corpus, &progress).await;
            }
            DatabaseUrl::Files(_) => bail!(
                "the benchmark runs on SQLite only for now: bench a SQLite database (sqlite://PATH)"
            ),
        },
        None => None,
    };
    let levels = if levels.is_empty() {
        &[Durability::Full][..]
    } else {
        levels
    };
    let mut reports: Vec<(Durability, Value)> = Vec::new();
    let mut rows: Vec<Vec<String>> = Vec::new();
    for &level in levels {
        let bench_db = match &named {
            Some(path) => BenchDb {
                path: path.clone(),
                temp: None,
            },
            None => {
                let dir = tempfile::Builder::new()
                    .prefix("stepwise-bench-db-")
                    .tempdir()
                    .context("cannot create a temporary directory")?;
                BenchDb {
                    path: dir.path().join("bench.db"),
                    temp: Some(dir),
                }
            }
        };
        let (report, level_rows) =
            run_level(&args, bench_db, level, &corpus, &progress, scratch.path()).await?;
        reports.push((level, report));
        rows.extend(level_rows);
    }
    // The first level's figures at the top (as before there was a choice), every level's
    // under `by_durability`.
    let mut top = reports[0].1.clone();
    if reports.len() > 1
        && let Some(object) = top.as_object_mut()
    {
        let by: serde_json::Map<String, Value> = reports
            .iter()
            .map(|(level, report)| (level.as_str().to_string(), report.clone()))
            .collect();
        object.insert("by_durability".into(), Value::Object(by));
    }
    println!("{}", serde_json::to_string(&top)?);
    eprintln!();
    eprint!(
        "{}",
        stepwise_cli_support::table::render(&["RUN", "WHAT", "RESULT", "GOAL"], &rows)
    );
    Ok(())
}

/// One run of the workload at one durability level: its JSON report and its table rows.
async fn run_level(
    args: &StepsArgs,
    bench_db: BenchDb,
    level: Durability,
    corpus: &Corpus,
    progress: &Progress,
    scratch: &Path,
) -> anyhow::Result<(Value, Vec<Vec<String>>)> {
    let fresh = !bench_db.path.exists();
    // A tenant of its own, so a run against an existing database touches nothing else.
    let tenant = Tenant::new(format!("bench-{}", stepwise_core::new_id().simple()))?;
    progress.stage(&format!(
        "stepwise bench steps --durability {}: {} steps from {} into sqlite://{}",
        level.as_str(),
        corpus.bodies.len(),
        corpus.path.display(),
        bench_db.path.display()
    ));

    // The yardstick first, right before W1, so both run under the same conditions.
    progress.stage(&format!(
        "raw: the W1 steps through a plain rusqlite insert loop, synchronous={}",
        synchronous(level)
    ));
    let raw_bodies: Vec<StepBody> = (1..=args.w1_steps as usize)
        .map(|k| corpus.line(k).clone())
        .collect();
    let scratch_path = scratch.to_path_buf();
    let raw_total =
        tokio::task::spawn_blocking(move || raw_insert(&scratch_path, raw_bodies, level))
            .await
            .context("the raw insert task failed")??;

    // W1, then W4 on the database as W1 left it.
    progress.stage(&format!(
        "W1: one session, {} durable appends",
        args.w1_steps
    ));
    let store = open_store(&bench_db, level).await?;
    let w1 = run_w1(&store, &tenant, corpus, args.w1_steps, progress).await?;
    store.flush().await?;
    let store_bytes = store.stats().await?.bytes;
    db::close_sqlite(store)
        .await
        .context("closing the store after W1")?;
    let (db_bytes, wal_bytes) = bench_db.bytes_on_disk()?;
    let w4_bytes = db_bytes + wal_bytes;

    // W2 and W2c on a reopened store.
    let store = open_store(&bench_db, level).await?;
    progress.stage(&format!(
        "W2: {} sessions x {} steps, round-robin, each durable",
        args.sessions, args.steps_per_session
    ));
    let w2_total = run_w2(
        &store,
        &tenant,
        corpus,
        args.sessions,
        args.steps_per_session,
        progress,
    )
    .await?;
    progress.stage(&format!(
        "W2c: {} sessions writing concurrently",
        args.sessions
    ));
    let (w2c_total, w2c_latencies) = run_w2c(
        &store,
        &tenant,
        corpus,
        args.sessions,
        args.steps_per_session,
        progress,
    )
    .await?;
    messages::add(&store, &tenant, w1.session_id, corpus, args.w1_steps).await?;
    db::close_sqlite(store)
        .await
        .context("closing the store after W2c")?;

    // W3: cold on a freshly opened store, then warm.
    progress.stage(&format!(
        "W3: restoring the {}-step W1 session, cold then {} warm",
        args.w1_steps, args.warm_loads
    ));
    let opened = Instant::now();
    let store = open_store(&bench_db, level).await?;
    let cold_open = opened.elapsed();
    let cold = restore_w1(&store, &tenant, w1.session_id, args.w1_steps).await?;
    let mut warm = Vec::with_capacity(args.warm_loads as usize);
    for _ in 0..args.warm_loads {
        warm.push(restore_w1(&store, &tenant, w1.session_id, args.w1_steps).await?);
    }
    // The engine's case: the agent saved one more step since the last restore.
    let next = args.w1_steps + 1;
    save_durably(
        &store,
        &tenant,
        w1.execution_id,
        next,
        corpus.line(1).clone(),
    )
    .await?;
    let after_append = restore_w1(&store, &tenant, w1.session_id, next).await?;
    let mut listings = messages::Listings::run(
        &store,
        &tenant,
        w1.session_id,
        args.w1_steps,
        args.warm_loads,
    )
    .await?;
    let cache = store.session_cache().map(|c| c.stats()).unwrap_or_default();
    db::close_sqlite(store)
        .await
        .context("closing the store after W3")?;
    // The same warm loads without the hot-session cache (every restore decodes every row),
    // for the comparison in the same sitting.
    let store = open_store_caching(&bench_db, level, 0).await?;
    restore_w1(&store, &tenant, w1.session_id, next).await?;
    let mut uncached = Vec::with_capacity(args.warm_loads as usize);
    for _ in 0..args.warm_loads {
        uncached.push(restore_w1(&store, &tenant, w1.session_id, next).await?);
    }
    listings
        .run_uncached(&store, &tenant, w1.session_id, args.warm_loads)
        .await?;
    db::close_sqlite(store)
        .await
        .context("closing the uncached store after W3")?;

    // The figures.
    let w1_steps = u64::from(args.w1_steps);
    let w2_steps = u64::from(args.sessions) * u64::from(args.steps_per_session);
    let window = |from: usize, to: usize| {
        let from = from.min(w1.latencies.len());
        let to = to.min(w1.latencies.len());
        let slice = w1.latencies.get(from.saturating_sub(1)..to).unwrap_or(&[]);
        (percentile_ms(slice, 50.0), percentile_ms(slice, 99.0))
    };
    let n = w1.latencies.len();
    let windows = [
        (1, 10.min(n)),
        ((n / 2).saturating_sub(9).max(1), n / 2),
        (n.saturating_sub(9).max(1), n),
    ];
    let window_figures: Vec<(String, f64, f64)> = windows
        .iter()
        .map(|&(a, b)| {
            let (p50, p99) = window(a, b);
            (format!("{a}-{b}"), p50, p99)
        })
        .collect();
    let w1_steps_per_s = per_s(w1_steps, w1.total);
    let raw_steps_per_s = per_s(w1_steps, raw_total);
    let first_p99 = window_figures.first().map(|w| w.2).unwrap_or(0.0);
    let last_p99 = window_figures.last().map(|w| w.2).unwrap_or(0.0);
    let p99_ratio = if first_p99 > 0.0 {
        last_p99 / first_p99
    } else {
        0.0
    };
    let w1_vs_raw = if raw_steps_per_s > 0.0 {
        w1_steps_per_s / raw_steps_per_s
    } else {
        0.0
    };
    let w2_steps_per_s = per_s(w2_steps, w2_total);
    let w2c_steps_per_s = per_s(w2_steps, w2c_total);
    let warm_median = percentile_ms(&warm, 50.0);
    let bytes_per_step = w4_bytes as f64 / w1_steps as f64;

    let mut windows_json = serde_json::Map::new();
    for (label, p50, p99) in &window_figures {
        windows_json.insert(
            label.clone(),
            json!({ "p50_ms": round(*p50, 4), "p99_ms": round(*p99, 4) }),
        );
    }
    let report = json!({
        "backend": "sqlite",
        "durability": level.as_str(),
        "version": env!("CARGO_PKG_VERSION"),
        "w1": {
            "n": w1_steps,
            "total_s": round(w1.total.as_secs_f64(), 4),
            "steps_per_s": round(w1_steps_per_s, 1),
            "windows": windows_json,
            "p50_ms": round(percentile_ms(&w1.latencies, 50.0), 4),
            "p99_ms": round(percentile_ms(&w1.latencies, 99.0), 4),
        },
        "w2": {
            "sessions": args.sessions,
            "steps_per_session": args.steps_per_session,
            "total_s": round(w2_total.as_secs_f64(), 4),
            "steps_per_s": round(w2_steps_per_s, 1),
        },
        "w2c": {
            "sessions": args.sessions,
            "steps_per_session": args.steps_per_session,
            "total_s": round(w2c_total.as_secs_f64(), 4),
            "steps_per_s": round(w2c_steps_per_s, 1),
            "p50_ms": round(percentile_ms(&w2c_latencies, 50.0), 4),
            "p99_ms": round(percentile_ms(&w2c_latencies, 99.0), 4),
        },
        "w3": {
            "steps_loaded": w1_steps,
            "cold_ms": round(ms(cold), 4),
            "warm_ms_median": round(warm_median, 4),
            "warm_loads": args.warm_loads,
            "cold_open_ms": round(ms(cold_open), 4),
            "warm_after_one_append_ms": round(ms(after_append), 4),
            "warm_uncached_ms_median": round(percentile_ms(&uncached, 50.0), 4),
            "session_cache": {
                "hits": cache.hits,
                "misses": cache.misses,
                "message_hits": cache.message_hits,
                "message_misses": cache.message_misses,
                "evictions": cache.evictions,
                "bytes": cache.bytes,
                "limit_bytes": cache.limit_bytes,
            },
        },
        "w3m": listings.json(),
        "w4": {
            "bytes": w4_bytes,
            "bytes_per_step": round(bytes_per_step, 1),
            "database_bytes": db_bytes,
            "wal_bytes": wal_bytes,
            "store_stats_bytes": store_bytes,
            "fresh_database": fresh,
        },
        "raw_insert": {
            "synchronous": synchronous(level),
            "n": w1_steps,
            "total_s": round(raw_total.as_secs_f64(), 4),
            "steps_per_s": round(raw_steps_per_s, 1),
        },
        "w1_vs_raw": round(w1_vs_raw, 3),
        "w1_p99_ratio": round(p99_ratio, 3),
        "corpus": {
            "path": corpus.path.display().to_string(),
            "steps": corpus.bodies.len(),
            "avg_line_bytes": round(corpus.line_bytes as f64 / corpus.bodies.len() as f64, 1),
        },
    });
    // The human table. With `full` every save waits for a sync, so the goals are the ones
    // for that level: W1 within 0.9 of a raw loop syncing every commit, W2c 20,000/s.
    let full = level == Durability::Full;
    let (raw_goal, w2c_goal) = if full {
        (0.9, 20_000.0)
    } else {
        (0.7, 50_000.0)
    };
    let goal = |met: bool| if met { "met" } else { "NOT met" };
    let mut rows: Vec<Vec<String>> = vec![vec![
        format!("W1 {}", level.as_str()),
        format!("{w1_steps} durable appends, one session"),
        format!(
            "{:.3} s, {:.0} steps/s",
            w1.total.as_secs_f64(),
            w1_steps_per_s
        ),
        if full {
            String::new()
        } else {
            format!(">= 3000/s: {}", goal(w1_steps_per_s >= 3000.0))
        },
    ]];
    for (label, p50, p99) in &window_figures {
        rows.push(vec![
            "".into(),
            format!("per-save latency, steps {label}"),
            format!("p50 {p50:.3} ms, p99 {p99:.3} ms"),
            "".into(),
        ]);
    }
    rows.push(vec![
        "".into(),
        "p99 last window / first window".into(),
        format!("{p99_ratio:.2}"),
        format!("<= 1.5: {}", goal(p99_ratio <= 1.5)),
    ]);
    rows.push(vec![
        "raw".into(),
        format!(
            "rusqlite, one row per commit, synchronous={}",
            synchronous(level)
        ),
        format!("{raw_steps_per_s:.0} steps/s; W1/raw {w1_vs_raw:.2}"),
        format!(">= {raw_goal}: {}", goal(w1_vs_raw >= raw_goal)),
    ]);
    rows.push(vec![
        "W2".into(),
        format!(
            "{} sessions x {}, round-robin",
            args.sessions, args.steps_per_session
        ),
        format!(
            "{:.3} s, {w2_steps_per_s:.0} steps/s",
            w2_total.as_secs_f64()
        ),
        "".into(),
    ]);
    rows.push(vec![
        "W2c".into(),
        format!("{} sessions concurrently", args.sessions),
        format!(
            "{w2c_steps_per_s:.0} steps/s, p50 {:.3} ms, p99 {:.3} ms",
            percentile_ms(&w2c_latencies, 50.0),
            percentile_ms(&w2c_latencies, 99.0)
        ),
        format!(">= {w2c_goal}/s: {}", goal(w2c_steps_per_s >= w2c_goal)),
    ]);
    rows.push(vec![
        "W3".into(),
        format!("restore {w1_steps} steps, cold"),
        format!("{:.3} ms", ms(cold)),
        format!("<= 50 ms: {}", goal(ms(cold) <= 50.0)),
    ]);
    rows.push(vec![
        "".into(),
        format!("warm, median of {}", args.warm_loads),
        format!("{warm_median:.3} ms"),
        format!("<= 5 ms: {}", goal(warm_median <= 5.0)),
    ]);
    rows.push(vec![
        "".into(),
        "warm, one step appended since".into(),
        format!("{:.3} ms", ms(after_append)),
        "".into(),
    ]);
    rows.push(vec![
        "".into(),
        format!(
            "warm without the session cache, median of {}",
            args.warm_loads
        ),
        format!("{:.3} ms", percentile_ms(&uncached, 50.0)),
        "".into(),
    ]);
    rows.extend(listings.rows());
    rows.push(vec![
        "W4".into(),
        "bytes on disk after W1".into(),
        format!("{w4_bytes} bytes, {bytes_per_step:.0} bytes/step"),
        format!("<= 2500: {}", goal(bytes_per_step <= 2500.0)),
    ]);
    if let Some(temp) = bench_db.temp
        && args.keep
    {
        let kept = temp.keep();
        eprintln!("kept the benchmark database in {}", kept.display());
    }
    Ok((report, rows))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn w2_lines_follow_the_workload() {
        assert_eq!(w2_line(0, 1, 50), 1);
        assert_eq!(w2_line(0, 50, 50), 50);
        assert_eq!(w2_line(1, 1, 50), 51);
        assert_eq!(w2_line(19, 50, 50), 1000);
        assert_eq!(w2_line(20, 1, 50), 1);
        assert_eq!(w2_line(199, 50, 50), 1000);
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let samples: Vec<Duration> = (1..=10).map(Duration::from_millis).collect();
        assert_eq!(percentile_ms(&samples, 50.0), 5.0);
        assert_eq!(percentile_ms(&samples, 99.0), 10.0);
        assert_eq!(percentile_ms(&[], 99.0), 0.0);
    }
}
