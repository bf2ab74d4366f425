//! The PostgreSQL store, for several `stepwise serve` nodes on one database.
//!
//! - Statements are sent with their parameter types and no prepared statements, and no
//!   session state is kept between statements outside a transaction, so the pool may sit
//!   behind a transaction-pooling proxy. The LISTEN connection and the migration lock
//!   need a session: they use their own direct connections.
//! - Steps, snapshots and events go through the group-commit writer (see `writer`).
//! - Executions are claimed with `FOR UPDATE SKIP LOCKED` and leases, so two workers on
//!   any nodes never hold the same execution.
//! - Live events cross nodes with LISTEN/NOTIFY and a polling fallback (see `relay`).
//! - Migrations run under `pg_advisory_lock`, so nodes starting together take turns.

mod checkpoints;
mod import;
mod mirrored;
mod relay;
mod sql;
mod writer;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use stepwise_core::codec::{self, DEFAULT_COMPRESS_THRESHOLD};
use stepwise_core::name::validate_name;
use stepwise_core::{
    Event, Execution, ExecutionStatus, Id, Message, Session, SessionDocument, SessionStatus,
    SharedClock, Snapshot, Step, Timestamp, new_id, system_clock,
};
use stepwise_store::{
    Ack, ApiKeyRecord, Claim, CleanupReport, Loaded, MessageQuery, NewEvent, NewExecution,
    NewMessage, NewSession, NewSnapshot, NewStep, Page, PageRequest, Result, RetentionLock,
    RetentionPolicy, SessionFilter, SessionPatch, StatusCounts, StepAppend, Store, StoreError,
    StoreStats, Tenant, Transition, cursor,
};
use tokio::sync::{broadcast, watch};
use tokio_postgres::GenericClient;
use tokio_postgres::types::{ToSql, Type};

use crate::relay::Relay;
use crate::sql::{args, is_unique_violation, json_text, map_pg, map_pool};
use crate::writer::{EventJob, SnapshotJob, StepJob, Writer};

mod embedded {
    refinery::embed_migrations!("migrations");
}

/// The key of the advisory lock migrations run under ("stepwise" in ASCII).
const MIGRATION_LOCK: i64 = 0x7374_6570_7769_7365;
/// The key of the advisory lock a retention pass runs under ("retentio" in ASCII).
const RETENTION_LOCK: i64 = 0x7265_7465_6e74_696f;

#[derive(Clone)]
pub struct PgOptions {
    /// Server time (injected in tests).
    pub clock: SharedClock,
    /// Step and snapshot payloads larger than this are zstd-compressed.
    pub compress_threshold: usize,
    /// Saves that may wait in the queue before callers are slowed down.
    pub queue_capacity: usize,
    /// Most saves committed in one transaction.
    pub max_batch: usize,
    /// Writer tasks committing concurrently (each session's saves go to one of them).
    pub writers: usize,
    /// Connections in the pool (the LISTEN connection is extra).
    pub pool_size: usize,
    /// How often sessions with live subscribers are checked for events a lost
    /// notification did not announce.
    pub poll_interval: Duration,
    /// Whether to LISTEN for other nodes' events (off only to test the polling fallback).
    pub listen: bool,
}

impl Default for PgOptions {
    fn default() -> Self {
        PgOptions {
            clock: system_clock(),
            compress_threshold: DEFAULT_COMPRESS_THRESHOLD,
            queue_capacity: 4096,
            max_batch: 512,
            writers: 4,
            pool_size: 16,
            poll_interval: Duration::from_secs(1),
            listen: true,
        }
    }
}

/// A handle to one PostgreSQL database; cheap to clone. Background tasks (the writer,
/// the LISTEN connection, the live-event fetcher) stop when the last handle is dropped;
/// call [`Store::flush`] first so queued saves are committed.
#[derive(Clone)]
pub struct PgStore {
    inner: Arc<Inner>,
}

struct Inner {
    pool: Pool,
    writer: Writer,
    relay: Arc<Relay>,
    options: PgOptions,
    decode_errors: AtomicU64,
    applied_migrations: Vec<String>,
    /// The session of executions this process has seen, so their saves go to the writer
    /// of their session (see `shard_key`).
    session_of: std::sync::Mutex<std::collections::HashMap<Id, Id>>,
    /// For connections of their own (the retention lock needs a session).
    config: tokio_postgres::Config,
    _stop: watch::Sender<bool>,
}

impl PgStore {
    /// Connects with the default options, migrating the schema first.
    pub async fn connect(url: &str) -> Result<PgStore> {
        Self::connect_with(url, PgOptions::default()).await
    }

    /// Connects to `url` (`postgres://user:pass@host:port/db`), migrates the schema under an
    /// advisory lock, and starts the writer and the live-event relay.
    pub async fn connect_with(url: &str, options: PgOptions) -> Result<PgStore> {
        let config: tokio_postgres::Config = url
            .parse()
            .map_err(|e| StoreError::invalid("database", format!("not a PostgreSQL URL: {e}")))?;
        let applied_migrations = migrate(&config).await?;
        let manager = Manager::from_config(
            config.clone(),
            tokio_postgres::NoTls,
            ManagerConfig {
                // No query on checkout: nothing to reset, as no session state is kept.
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(options.pool_size.max(2))
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(Duration::from_secs(30)))
            .create_timeout(Some(Duration::from_secs(10)))
            .build()
            .map_err(|e| StoreError::Backend(format!("cannot build the connection pool: {e}")))?;
        let relay = Arc::new(Relay::new(options.clock.clone()));
        let writer = Writer::start(
            pool.clone(),
            relay.clone(),
            options.queue_capacity,
            options.max_batch,
            options.writers,
        );
        let (stop, stopped) = watch::channel(false);
        if options.listen {
            tokio::spawn(relay::run_listener(
                relay.clone(),
                config.clone(),
                stopped.clone(),
            ));
        }
        tokio::spawn(relay::run_fetcher(
            relay.clone(),
            pool.clone(),
            options.poll_interval,
            stopped,
        ));
        Ok(PgStore {
            inner: Arc::new(Inner {
                pool,
                writer,
                relay,
                options,
                decode_errors: AtomicU64::new(0),
                applied_migrations,
                session_of: std::sync::Mutex::new(std::collections::HashMap::new()),
                config: config.clone(),
                _stop: stop,
            }),
        })
    }

    /// The migrations this connect applied (empty when the schema was already current).
    pub fn applied_migrations(&self) -> &[String] {
        &self.inner.applied_migrations
    }

    /// Commits everything queued; the background tasks stop once every handle is dropped.
    pub async fn close(self) -> Result<()> {
        self.inner.writer.flush().await
    }

    fn now(&self) -> Timestamp {
        self.inner.options.clock.now()
    }

    fn remember(&self, execution: &Execution) {
        const MAX_REMEMBERED: usize = 100_000;
        if let Some(session_id) = execution.session_id {
            let mut map = self
                .inner
                .session_of
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            if map.len() >= MAX_REMEMBERED {
                map.clear();
            }
            map.insert(execution.id, session_id);
        }
    }

    /// Which writer an execution's saves go to: its session's when known (always for
    /// executions this process created, claimed or read), else its own id.
    fn shard_key(&self, execution_id: Id) -> Id {
        let map = self
            .inner
            .session_of
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        map.get(&execution_id).copied().unwrap_or(execution_id)
    }

    async fn client(&self) -> Result<deadpool_postgres::Object> {
        self.inner.pool.get().await.map_err(map_pool)
    }

    fn decode_steps(&self, rows: Vec<sql::StepRow>) -> Loaded<Step> {
        let mut items = Vec::with_capacity(rows.len());
        let mut skipped = 0;
        for row in rows {
            match codec::decode_step(&row.payload) {
                Ok(body) => items.push(Step::from_body(
                    row.id,
                    row.execution_id,
                    row.session_id,
                    row.step_number,
                    row.kind,
                    body,
                    row.created_at,
                )),
                Err(e) => {
                    skipped += 1;
                    tracing::warn!(execution = %row.execution_id, step = row.step_number, error = %e, "skipping a stored step that cannot be decoded");
                }
            }
        }
        self.inner
            .decode_errors
            .fetch_add(skipped, Ordering::Relaxed);
        Loaded { items, skipped }
    }
}

/// The connection holding the retention lock; dropping the client closes it, which
/// releases the lock.
struct HeldLock {
    _client: tokio_postgres::Client,
    _driver: tokio::task::JoinHandle<()>,
}

/// Runs the migrations on a direct connection holding a session advisory lock, so nodes
/// that start together migrate one after the other.
async fn migrate(config: &tokio_postgres::Config) -> Result<Vec<String>> {
    let (mut client, connection) = config
        .connect(tokio_postgres::NoTls)
        .await
        .map_err(|e| StoreError::Unavailable(format!("cannot connect to PostgreSQL: {e}")))?;
    let driver = tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::warn!(error = %e, "the migration connection failed");
        }
    });
    let result = async {
        client
            .execute_typed("SELECT pg_advisory_lock($1)", args![MIGRATION_LOCK])
            .await
            .map_err(map_pg)?;
        let report = embedded::migrations::runner()
            .run_async(&mut client)
            .await
            .map_err(|e| StoreError::Backend(format!("migrating the PostgreSQL schema: {e}")));
        // Closing the connection would release the lock too; say it explicitly.
        let _ = client
            .execute_typed("SELECT pg_advisory_unlock($1)", args![MIGRATION_LOCK])
            .await;
        report
    }
    .await;
    drop(client);
    let _ = driver.await;
    Ok(result?
        .applied_migrations()
        .iter()
        .map(|m| m.to_string())
        .collect())
}

/// The driver's client under the pool's wrapper (its transactions are plain ones).
fn pg(client: &mut deadpool_postgres::Object) -> &mut tokio_postgres::Client {
    client
}

fn check_name(name: &Option<String>) -> Result<()> {
    match name {
        Some(name) => validate_name(name).map_err(StoreError::from),
        None => Ok(()),
    }
}

type Param = (Box<dyn ToSql + Sync + Send>, Type);

/// Parameters built up with the statement text (for filters), numbered as pushed.
#[derive(Default)]
struct Params(Vec<Param>);

impl Params {
    fn push<T: sql::Pg + Send + 'static>(&mut self, value: T) -> String {
        self.0.push((Box::new(value), T::TYPE));
        format!("${}", self.0.len())
    }

    fn refs(&self) -> Vec<(&(dyn ToSql + Sync), Type)> {
        self.0
            .iter()
            .map(|(v, t)| (v.as_ref() as &(dyn ToSql + Sync), t.clone()))
            .collect()
    }
}

async fn load_session(c: &impl GenericClient, tenant: &str, id: Id) -> Result<Option<Session>> {
    let sql = format!(
        "SELECT {} FROM sessions WHERE id = $1 AND tenant_id = $2",
        sql::SESSION_COLS
    );
    let row = c
        .query_typed_opt(&sql, args![id, tenant])
        .await
        .map_err(map_pg)?;
    row.as_ref().map(sql::session).transpose()
}

async fn load_execution(
    c: &impl GenericClient,
    tenant: &str,
    id: Id,
    lock: bool,
) -> Result<Option<Execution>> {
    let sql = format!(
        "SELECT {} FROM executions WHERE id = $1 AND tenant_id = $2{}",
        sql::EXECUTION_COLS,
        if lock { " FOR UPDATE" } else { "" }
    );
    let row = c
        .query_typed_opt(&sql, args![id, tenant])
        .await
        .map_err(map_pg)?;
    row.as_ref().map(sql::execution).transpose()
}

async fn count(
    c: &impl GenericClient,
    sql: &str,
    params: &[(&(dyn ToSql + Sync), Type)],
) -> Result<u64> {
    let row = c.query_typed_one(sql, params).await.map_err(map_pg)?;
    Ok(sql::get::<i64>(&row, "n")?.max(0) as u64)
}

fn lease_until(now: Timestamp, lease: Duration) -> i64 {
    now.0
        .saturating_add(lease.as_micros().min(i64::MAX as u128) as i64)
}

const BATCH_DELETE: i64 = 100;

const EXPIRED_WHERE: &str = "(status = 'completed' AND updated_at < $1) OR (status = 'abandoned' AND updated_at < $2) OR (status = 'deleted' AND updated_at < $3)";

impl Store for PgStore {
    async fn create_session(&self, tenant: &Tenant, new: NewSession) -> Result<Session> {
        check_name(&new.name)?;
        let now = self.now();
        let session = new.into_session(tenant, now);
        let s = &session;
        let client = self.client().await?;
        client
            .execute_typed(
                "INSERT INTO sessions (id, tenant_id, user_id, name, title, status, related_type, related_id, initial_context_url, metadata, created_at, updated_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $11)",
                args![s.id, s.tenant_id, s.user_id, s.name, s.title, s.status.as_str(), s.related_type, s.related_id, s.initial_context_url, json_text(&s.metadata), now.0],
            )
            .await
            .map_err(|e| {
                if is_unique_violation(&e) {
                    StoreError::Conflict(format!("a session named '{}' already exists", s.name.as_deref().unwrap_or_default()))
                } else {
                    map_pg(e)
                }
            })?;
        Ok(session)
    }

    async fn get_session(&self, tenant: &Tenant, id: Id) -> Result<Option<Session>> {
        load_session(&**self.client().await?, tenant.as_str(), id).await
    }

    async fn find_session_by_name(&self, tenant: &Tenant, name: &str) -> Result<Option<Session>> {
        let sql = format!(
            "SELECT {} FROM sessions WHERE tenant_id = $1 AND name = $2",
            sql::SESSION_COLS
        );
        let client = self.client().await?;
        let row = client
            .query_typed_opt(&sql, args![tenant.as_str(), name])
            .await
            .map_err(map_pg)?;
        row.as_ref().map(sql::session).transpose()
    }

    async fn list_sessions(
        &self,
        tenant: &Tenant,
        filter: SessionFilter,
        page: PageRequest,
    ) -> Result<Page<Session>> {
        let after = page.cursor.as_deref().map(cursor::decode).transpose()?;
        let limit = page.limit();
        let mut p = Params::default();
        let mut sql = format!(
            "SELECT {} FROM sessions WHERE tenant_id = {}",
            sql::SESSION_COLS,
            p.push(tenant.as_str().to_string())
        );
        match &filter.statuses {
            Some(statuses) if !statuses.is_empty() => {
                let list: Vec<String> = statuses.iter().map(|s| s.as_str().to_string()).collect();
                sql.push_str(&format!(" AND status = ANY({})", p.push(list)));
            }
            _ => sql.push_str(" AND status <> 'deleted'"),
        }
        for (column, value) in [
            ("related_type", &filter.related_type),
            ("related_id", &filter.related_id),
            ("user_id", &filter.user_id),
        ] {
            if let Some(value) = value {
                sql.push_str(&format!(" AND {column} = {}", p.push(value.clone())));
            }
        }
        if let Some((at, id)) = after {
            sql.push_str(&format!(
                " AND (updated_at, id) < ({}, {})",
                p.push(at.0),
                p.push(id)
            ));
        }
        sql.push_str(&format!(
            " ORDER BY updated_at DESC, id DESC LIMIT {}",
            p.push(i64::from(limit) + 1)
        ));
        let client = self.client().await?;
        let rows = client.query_typed(&sql, &p.refs()).await.map_err(map_pg)?;
        let mut items = sql::collect(&rows, sql::session)?;
        let next_cursor = if items.len() > limit as usize {
            items.truncate(limit as usize);
            items.last().map(|s| cursor::encode(s.updated_at, s.id))
        } else {
            None
        };
        Ok(Page { items, next_cursor })
    }

    async fn update_session(
        &self,
        tenant: &Tenant,
        id: Id,
        patch: SessionPatch,
    ) -> Result<Option<Session>> {
        check_name(&patch.name)?;
        let now = self.now();
        let metadata = patch.metadata.as_ref().map(json_text);
        let status = patch.status.map(|s| s.as_str().to_string());
        let sql = format!(
            "UPDATE sessions SET title = COALESCE($1, title), name = COALESCE($2, name), status = COALESCE($3, status), \
             metadata = COALESCE($4, metadata), updated_at = $5 WHERE id = $6 AND tenant_id = $7 RETURNING {}",
            sql::SESSION_COLS
        );
        let client = self.client().await?;
        let row = client
            .query_typed_opt(
                &sql,
                args![
                    patch.title,
                    patch.name,
                    status,
                    metadata,
                    now.0,
                    id,
                    tenant.as_str()
                ],
            )
            .await
            .map_err(|e| {
                if is_unique_violation(&e) {
                    StoreError::Conflict("a session with that name already exists".into())
                } else {
                    map_pg(e)
                }
            })?;
        row.as_ref().map(sql::session).transpose()
    }

    async fn delete_session(&self, tenant: &Tenant, id: Id) -> Result<bool> {
        let now = self.now();
        let mut client = self.client().await?;
        let tx = pg(&mut client).transaction().await.map_err(map_pg)?;
        let n = tx
            .execute_typed(
                "UPDATE sessions SET status = 'deleted', updated_at = $1 WHERE id = $2 AND tenant_id = $3",
                args![now.0, id, tenant.as_str()],
            )
            .await
            .map_err(map_pg)?;
        if n > 0 {
            // A deleted session is no thread any more: its checkpoints go with it.
            checkpoints::delete_sessions_checkpoints(&tx, &vec![id]).await?;
        }
        tx.commit().await.map_err(map_pg)?;
        Ok(n > 0)
    }

    async fn append_message(&self, tenant: &Tenant, new: NewMessage) -> Result<Message> {
        let now = self.now();
        let message = new.into_message(now);
        let m = &message;
        // One statement: the session row is bumped only if it exists for this tenant, and
        // the message is inserted only then.
        let client = self.client().await?;
        let rows = client
            .query_typed(
                "WITH touched AS (UPDATE sessions SET message_count = message_count + 1, updated_at = $11 WHERE id = $3 AND tenant_id = $2 RETURNING id) \
                 INSERT INTO messages (id, tenant_id, session_id, role, content, execution_id, related_type, related_id, context_url, metadata, created_at) \
                 SELECT $1, $2, touched.id, $4, $5, $6, $7, $8, $9, $10, $11 FROM touched RETURNING id",
                args![m.id, tenant.as_str(), m.session_id, m.role.as_str(), m.content, m.execution_id, m.related_type, m.related_id, m.context_url, json_text(&m.metadata), now.0],
            )
            .await
            .map_err(map_pg)?;
        if rows.is_empty() {
            return Err(StoreError::NotFound("session"));
        }
        Ok(message)
    }

    async fn list_messages(
        &self,
        tenant: &Tenant,
        session_id: Id,
        query: MessageQuery,
    ) -> Result<Vec<Message>> {
        let client = self.client().await?;
        let mut p = Params::default();
        let mut sql = format!(
            "SELECT {} FROM messages WHERE session_id = {} AND tenant_id = {}",
            sql::MESSAGE_COLS,
            p.push(session_id),
            p.push(tenant.as_str().to_string())
        );
        if let Some(after) = query.after {
            let row = client
                .query_typed_opt(
                    "SELECT created_at FROM messages WHERE id = $1 AND session_id = $2 AND tenant_id = $3",
                    args![after, session_id, tenant.as_str()],
                )
                .await
                .map_err(map_pg)?;
            let row =
                row.ok_or_else(|| StoreError::invalid("after", "no such message in this session"))?;
            let at: i64 = sql::get(&row, "created_at")?;
            sql.push_str(&format!(
                " AND (created_at, id) > ({}, {})",
                p.push(at),
                p.push(after)
            ));
        }
        if let Some(roles) = query.roles.as_ref().filter(|r| !r.is_empty()) {
            let list: Vec<String> = roles.iter().map(|r| r.as_str().to_string()).collect();
            sql.push_str(&format!(" AND role = ANY({})", p.push(list)));
        }
        sql.push_str(" ORDER BY created_at, id");
        if let Some(limit) = query.limit {
            sql.push_str(&format!(" LIMIT {}", p.push(i64::from(limit))));
        }
        let rows = client.query_typed(&sql, &p.refs()).await.map_err(map_pg)?;
        sql::collect(&rows, sql::message)
    }

    async fn create_execution(&self, tenant: &Tenant, new: NewExecution) -> Result<Execution> {
        let now = self.now();
        let execution = new.into_execution(tenant, now)?;
        let e = &execution;
        let mut client = self.client().await?;
        let tx = pg(&mut client).transaction().await.map_err(map_pg)?;
        if let Some(session_id) = e.session_id {
            let touched = tx
                .execute_typed(
                    "UPDATE sessions SET last_execution_id = $1, updated_at = $2 WHERE id = $3 AND tenant_id = $4",
                    args![e.id, now.0, session_id, e.tenant_id],
                )
                .await
                .map_err(map_pg)?;
            if touched == 0 {
                return Err(StoreError::NotFound("session"));
            }
        }
        if let Some(parent) = e.parent_execution_id
            && load_execution(&tx, &e.tenant_id, parent, false)
                .await?
                .is_none()
        {
            return Err(StoreError::NotFound("parent execution"));
        }
        tx.execute_typed(
            "INSERT INTO executions (id, tenant_id, session_id, parent_execution_id, user_id, agent_type, agent_config, status, input, metadata, started_at, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $12)",
            args![e.id, e.tenant_id, e.session_id, e.parent_execution_id, e.user_id, e.agent_type, json_text(&e.agent_config), e.status.as_str(), json_text(&e.input), json_text(&e.metadata), e.started_at.map(|t| t.0), now.0],
        )
        .await
        .map_err(map_pg)?;
        if e.parent_execution_id.is_none() && e.status == ExecutionStatus::Pending {
            notify_queue(&tx).await?;
        }
        tx.commit().await.map_err(map_pg)?;
        self.remember(&execution);
        Ok(execution)
    }

    async fn get_execution(&self, tenant: &Tenant, id: Id) -> Result<Option<Execution>> {
        let found = load_execution(&**self.client().await?, tenant.as_str(), id, false).await?;
        if let Some(execution) = &found {
            self.remember(execution);
        }
        Ok(found)
    }

    async fn list_executions(&self, tenant: &Tenant, session_id: Id) -> Result<Vec<Execution>> {
        let sql = format!(
            "SELECT {} FROM executions WHERE session_id = $1 AND tenant_id = $2 ORDER BY created_at, id",
            sql::EXECUTION_COLS
        );
        let client = self.client().await?;
        let rows = client
            .query_typed(&sql, args![session_id, tenant.as_str()])
            .await
            .map_err(map_pg)?;
        sql::collect(&rows, sql::execution)
    }

    async fn transition_execution(
        &self,
        tenant: &Tenant,
        id: Id,
        transition: Transition,
    ) -> Result<Execution> {
        // Saves queued before this call land before the move (steps before `completed`).
        self.inner.writer.flush().await?;
        let now = self.now();
        let mut client = self.client().await?;
        let tx = pg(&mut client).transaction().await.map_err(map_pg)?;
        let current = load_execution(&tx, tenant.as_str(), id, true)
            .await?
            .ok_or(StoreError::NotFound("execution"))?;
        let target = transition.target();
        if !current.status.can_become(target) {
            return Err(StoreError::InvalidState(format!(
                "the execution is {} and cannot become {}",
                current.status, target
            )));
        }
        let (output, error, answer, done): (
            Option<String>,
            Option<String>,
            Option<String>,
            Option<i64>,
        ) = match &transition {
            Transition::Pause { .. } => (None, None, None, None),
            Transition::Resume { answer } => (None, None, Some(json_text(answer)), None),
            Transition::Complete { output } => (Some(json_text(output)), None, None, Some(now.0)),
            Transition::Fail { error_message } => {
                (None, Some(error_message.clone()), None, Some(now.0))
            }
            Transition::Cancel => (None, None, None, Some(now.0)),
        };
        let sql = format!(
            "UPDATE executions SET status = $1, output = COALESCE($2, output), error_message = COALESCE($3, error_message), \
             resume_answer = $4, completed_at = COALESCE($5, completed_at), lease_owner = NULL, lease_expires_at = NULL, updated_at = $6, \
             attempts = CASE WHEN $1 = 'paused' THEN 0 ELSE attempts END \
             WHERE id = $7 AND tenant_id = $8 RETURNING {}",
            sql::EXECUTION_COLS
        );
        let row = tx
            .query_typed_one(
                &sql,
                args![
                    target.as_str(),
                    output,
                    error,
                    answer,
                    done,
                    now.0,
                    id,
                    tenant.as_str()
                ],
            )
            .await
            .map_err(map_pg)?;
        let execution = sql::execution(&row)?;
        if execution.parent_execution_id.is_none() && target != ExecutionStatus::Paused {
            // Queued again, or the session's next execution may run now.
            notify_queue(&tx).await?;
        }
        tx.commit().await.map_err(map_pg)?;
        self.remember(&execution);
        Ok(execution)
    }

    async fn queue_signal(&self) {
        self.inner.relay.queue.notified().await
    }

    async fn claim_next(
        &self,
        worker: &str,
        lease: Duration,
        max_attempts: u32,
    ) -> Result<Option<Claim>> {
        let now = self.now();
        let until = lease_until(now, lease);
        let mut client = self.client().await?;
        let tx = pg(&mut client).transaction().await.map_err(map_pg)?;
        // A running execution whose worker stopped renewing its lease. SKIP LOCKED: a row
        // another node is claiming right now is not waited for, it is that node's.
        loop {
            let expired = tx
                .query_typed_opt(
                    "SELECT id, tenant_id, attempts FROM executions WHERE status = 'running' AND lease_owner IS NOT NULL AND lease_expires_at < $1 \
                     ORDER BY created_at, id LIMIT 1 FOR UPDATE SKIP LOCKED",
                    args![now.0],
                )
                .await
                .map_err(map_pg)?;
            let Some(row) = expired else { break };
            let id: Id = sql::get(&row, "id")?;
            let tenant: String = sql::get(&row, "tenant_id")?;
            let attempts: i32 = sql::get(&row, "attempts")?;
            if i64::from(attempts) >= i64::from(max_attempts) {
                let reason = format!(
                    "the execution was interrupted {attempts} times (its worker stopped before finishing); giving up"
                );
                tracing::warn!(execution = %id, attempts, "failing an execution whose workers kept stopping");
                tx.execute_typed(
                    "UPDATE executions SET status = 'failed', error_message = $1, completed_at = $2, updated_at = $2, lease_owner = NULL, lease_expires_at = NULL WHERE id = $3",
                    args![reason, now.0, id],
                )
                .await
                .map_err(map_pg)?;
                continue;
            }
            let sql = format!(
                "UPDATE executions SET lease_owner = $1, lease_expires_at = $2, attempts = attempts + 1, updated_at = $3 WHERE id = $4 RETURNING {}",
                sql::EXECUTION_COLS
            );
            let row = tx
                .query_typed_one(&sql, args![worker, until, now.0, id])
                .await
                .map_err(map_pg)?;
            let execution = sql::execution(&row)?;
            tx.commit().await.map_err(map_pg)?;
            self.remember(&execution);
            return Ok(Some(Claim {
                execution,
                tenant: Tenant::new(tenant)?,
                resume_answer: None,
            }));
        }
        // The oldest pending execution of a session with nothing running, first in its
        // session. A row locked by another claimer is skipped; its younger siblings stay
        // behind it (they still see it pending), so FIFO per session holds across nodes.
        let pending = tx
            .query_typed_opt(
                "SELECT e.id, e.tenant_id, e.resume_answer FROM executions e WHERE e.status = 'pending' AND e.parent_execution_id IS NULL \
                 AND NOT EXISTS (SELECT 1 FROM executions r WHERE r.session_id = e.session_id AND r.status = 'running') \
                 AND NOT EXISTS (SELECT 1 FROM executions p WHERE p.session_id = e.session_id AND p.status = 'pending' AND (p.created_at, p.id) < (e.created_at, e.id)) \
                 ORDER BY e.created_at, e.id LIMIT 1 FOR UPDATE OF e SKIP LOCKED",
                args![],
            )
            .await
            .map_err(map_pg)?;
        let Some(row) = pending else {
            tx.commit().await.map_err(map_pg)?;
            return Ok(None);
        };
        let id: Id = sql::get(&row, "id")?;
        let tenant: String = sql::get(&row, "tenant_id")?;
        let answer: Option<String> = sql::get(&row, "resume_answer")?;
        let sql = format!(
            "UPDATE executions SET status = 'running', lease_owner = $1, lease_expires_at = $2, attempts = attempts + 1, \
             resume_answer = NULL, started_at = COALESCE(started_at, $3), updated_at = $3 WHERE id = $4 AND status = 'pending' RETURNING {}",
            sql::EXECUTION_COLS
        );
        let row = tx
            .query_typed_opt(&sql, args![worker, until, now.0, id])
            .await
            .map_err(map_pg)?;
        let Some(row) = row else {
            // Changed under us (cancelled) after the snapshot was taken: nothing claimed.
            tx.commit().await.map_err(map_pg)?;
            return Ok(None);
        };
        let execution = sql::execution(&row)?;
        tx.commit().await.map_err(map_pg)?;
        let resume_answer = answer.and_then(|a| serde_json::from_str(&a).ok());
        self.remember(&execution);
        Ok(Some(Claim {
            execution,
            tenant: Tenant::new(tenant)?,
            resume_answer,
        }))
    }

    async fn renew_leases(&self, worker: &str, ids: Vec<Id>, lease: Duration) -> Result<Vec<Id>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let until = lease_until(self.now(), lease);
        let client = self.client().await?;
        let rows = client
            .query_typed(
                "UPDATE executions SET lease_expires_at = $1 WHERE id = ANY($2) AND lease_owner = $3 AND status = 'running' RETURNING id",
                args![until, ids, worker],
            )
            .await
            .map_err(map_pg)?;
        let mut held = std::collections::HashSet::new();
        for row in &rows {
            held.insert(sql::get::<Id>(row, "id")?);
        }
        Ok(ids.into_iter().filter(|id| !held.contains(id)).collect())
    }

    async fn release(&self, worker: &str, id: Id) -> Result<()> {
        let now = self.now();
        let client = self.client().await?;
        client
            .execute_typed(
                "WITH released AS (UPDATE executions SET status = 'pending', lease_owner = NULL, lease_expires_at = NULL, attempts = GREATEST(attempts - 1, 0), updated_at = $1 \
                 WHERE id = $2 AND lease_owner = $3 AND status = 'running' RETURNING id) \
                 SELECT pg_notify('stepwise_queue', '') FROM released",
                args![now.0, id, worker],
            )
            .await
            .map_err(map_pg)?;
        Ok(())
    }

    async fn queue_depth(&self) -> Result<u64> {
        let client = self.client().await?;
        count(
            &**client,
            "SELECT COUNT(*) AS n FROM executions WHERE status = 'pending'",
            args![],
        )
        .await
    }

    async fn append_step(&self, tenant: &Tenant, new: NewStep) -> Result<Ack<StepAppend>> {
        if new.step_number == 0 {
            return Err(StoreError::invalid(
                "step_number",
                "step numbers start at 1",
            ));
        }
        if new.step_number > i32::MAX as u32 {
            return Err(StoreError::invalid(
                "step_number",
                "the step number is too large",
            ));
        }
        // Encode (and compress) here, off the writer task.
        let payload = codec::encode_step(&new.body, self.inner.options.compress_threshold);
        self.inner
            .writer
            .step(
                self.shard_key(new.execution_id),
                StepJob {
                    tenant: tenant.as_str().to_string(),
                    new,
                    payload,
                    id: new_id(),
                    now: self.now(),
                },
            )
            .await
    }

    async fn append_step_mirrored(
        &self,
        tenant: &Tenant,
        new: NewStep,
        mirror: stepwise_store::StepMirror,
    ) -> Result<Ack<StepAppend>> {
        self.write_step_mirrored(tenant, new, mirror).await
    }

    async fn list_steps(&self, tenant: &Tenant, execution_id: Id) -> Result<Loaded<Step>> {
        let sql = format!(
            "SELECT {} FROM steps s WHERE s.execution_id = $1 AND s.tenant_id = $2 ORDER BY s.step_number",
            sql::STEP_COLS
        );
        let client = self.client().await?;
        let rows = client
            .query_typed(&sql, args![execution_id, tenant.as_str()])
            .await
            .map_err(map_pg)?;
        Ok(self.decode_steps(sql::collect(&rows, sql::step_row)?))
    }

    async fn list_session_steps(&self, tenant: &Tenant, session_id: Id) -> Result<Loaded<Step>> {
        let sql = format!(
            "SELECT {} FROM executions e JOIN steps s ON s.execution_id = e.id \
             WHERE e.session_id = $1 AND e.tenant_id = $2 ORDER BY e.created_at, e.id, s.step_number",
            sql::STEP_COLS
        );
        let client = self.client().await?;
        let rows = client
            .query_typed(&sql, args![session_id, tenant.as_str()])
            .await
            .map_err(map_pg)?;
        Ok(self.decode_steps(sql::collect(&rows, sql::step_row)?))
    }

    async fn save_snapshot(&self, tenant: &Tenant, new: NewSnapshot) -> Result<Ack<Snapshot>> {
        for (field, text) in [("agent_id", &new.agent_id), ("agent_name", &new.agent_name)] {
            if let Some(text) = text {
                sql::check_text(field, text)?;
            }
        }
        if new.step_number > i32::MAX as u32 {
            return Err(StoreError::invalid(
                "step_number",
                "the step number is too large",
            ));
        }
        let state = codec::encode_value(&new.state, self.inner.options.compress_threshold);
        let snapshot = new.into_snapshot(self.now());
        self.inner
            .writer
            .snapshot(
                self.shard_key(snapshot.execution_id),
                SnapshotJob {
                    tenant: tenant.as_str().to_string(),
                    snapshot,
                    state,
                },
            )
            .await
    }

    async fn list_snapshots(&self, tenant: &Tenant, execution_id: Id) -> Result<Vec<Snapshot>> {
        let sql = format!(
            "SELECT {} FROM snapshots WHERE execution_id = $1 AND tenant_id = $2 ORDER BY created_at, id",
            sql::SNAPSHOT_COLS
        );
        let client = self.client().await?;
        let rows = client
            .query_typed(&sql, args![execution_id, tenant.as_str()])
            .await
            .map_err(map_pg)?;
        sql::collect(&rows, sql::snapshot)
    }

    async fn get_snapshot(&self, tenant: &Tenant, id: Id) -> Result<Option<Snapshot>> {
        let sql = format!(
            "SELECT {}, state FROM snapshots WHERE id = $1 AND tenant_id = $2",
            sql::SNAPSHOT_COLS
        );
        let client = self.client().await?;
        let Some(row) = client
            .query_typed_opt(&sql, args![id, tenant.as_str()])
            .await
            .map_err(map_pg)?
        else {
            return Ok(None);
        };
        let mut snapshot = sql::snapshot(&row)?;
        let state: Vec<u8> = sql::get(&row, "state")?;
        match codec::decode_value(&state) {
            Ok(state) => {
                snapshot.state = state;
                Ok(Some(snapshot))
            }
            Err(e) => {
                self.inner.decode_errors.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(snapshot = %id, error = %e, "a stored snapshot cannot be decoded");
                Ok(None)
            }
        }
    }

    async fn append_event(&self, tenant: &Tenant, new: NewEvent) -> Result<Ack<Event>> {
        sql::check_text("content", &new.content)?;
        let metadata = json_text(&new.metadata);
        self.inner
            .writer
            .event(EventJob {
                tenant: tenant.as_str().to_string(),
                new,
                metadata,
                now: self.now(),
            })
            .await
    }

    async fn list_events(
        &self,
        tenant: &Tenant,
        session_id: Id,
        after: i64,
        limit: u32,
    ) -> Result<Vec<Event>> {
        let sql = format!(
            "SELECT {} FROM events WHERE session_id = $1 AND tenant_id = $2 AND seq > $3 ORDER BY seq LIMIT $4",
            sql::EVENT_COLS
        );
        let client = self.client().await?;
        let rows = client
            .query_typed(
                &sql,
                args![session_id, tenant.as_str(), after, i64::from(limit)],
            )
            .await
            .map_err(map_pg)?;
        sql::collect(&rows, sql::event)
    }

    fn subscribe(&self, tenant: &Tenant, session_id: Id) -> broadcast::Receiver<Arc<Event>> {
        self.inner.relay.subscribe(tenant.as_str(), session_id)
    }

    fn publish_live(&self, tenant: &Tenant, event: Event) {
        self.inner.relay.publish_live(tenant.as_str(), event);
    }

    async fn import_document(
        &self,
        tenant: &Tenant,
        user_id: &str,
        doc: SessionDocument,
    ) -> Result<Session> {
        let plan = import::plan(
            tenant,
            user_id,
            doc,
            self.now(),
            self.inner.options.compress_threshold,
        )?;
        let mut client = self.client().await?;
        let tx = pg(&mut client).transaction().await.map_err(map_pg)?;
        let session = import::write(&tx, plan).await?;
        tx.commit().await.map_err(map_pg)?;
        Ok(session)
    }

    async fn mark_abandoned(&self, cutoff: Timestamp, dry: bool) -> Result<u64> {
        let client = self.client().await?;
        if dry {
            return count(
                &**client,
                "SELECT COUNT(*) AS n FROM sessions WHERE status = 'active' AND updated_at < $1",
                args![cutoff.0],
            )
            .await;
        }
        let now = self.now();
        let mut client = client;
        let tx = pg(&mut client).transaction().await.map_err(map_pg)?;
        tx.execute_typed(
            "UPDATE executions SET status = 'cancelled', completed_at = $2, updated_at = $2, lease_owner = NULL, lease_expires_at = NULL \
             WHERE status = 'paused' AND session_id IN (SELECT id FROM sessions WHERE status = 'active' AND updated_at < $1)",
            args![cutoff.0, now.0],
        )
        .await
        .map_err(map_pg)?;
        let n = tx
            .execute_typed(
                "UPDATE sessions SET status = 'abandoned', updated_at = $2 WHERE status = 'active' AND updated_at < $1",
                args![cutoff.0, now.0],
            )
            .await
            .map_err(map_pg)?;
        tx.commit().await.map_err(map_pg)?;
        Ok(n)
    }

    async fn cleanup_old_sessions(
        &self,
        now: Timestamp,
        policy: RetentionPolicy,
        dry: bool,
    ) -> Result<CleanupReport> {
        let completed = now.minus_days(policy.completed_days).0;
        let abandoned = now.minus_days(policy.abandoned_days).0;
        let deleted = now.minus_days(policy.deleted_days).0;
        let mut client = self.client().await?;
        if dry {
            let expired = format!("SELECT id FROM sessions WHERE {EXPIRED_WHERE}");
            let in_executions =
                format!("SELECT id FROM executions WHERE session_id IN ({expired})");
            let c = &**client;
            let params = args![completed, abandoned, deleted];
            return Ok(CleanupReport {
                sessions: count(c, &format!("SELECT COUNT(*) AS n FROM sessions WHERE {EXPIRED_WHERE}"), params).await?,
                messages: count(c, &format!("SELECT COUNT(*) AS n FROM messages WHERE session_id IN ({expired})"), params).await?,
                executions: count(c, &format!("SELECT COUNT(*) AS n FROM executions WHERE session_id IN ({expired})"), params).await?,
                steps: count(c, &format!("SELECT COUNT(*) AS n FROM steps WHERE execution_id IN ({in_executions})"), params).await?,
                snapshots: count(c, &format!("SELECT COUNT(*) AS n FROM snapshots WHERE execution_id IN ({in_executions})"), params).await?,
                events: count(c, &format!("SELECT COUNT(*) AS n FROM events WHERE session_id IN ({expired})"), params).await?,
            });
        }
        let mut total = CleanupReport::default();
        // Small batches, each its own transaction, so no lock is held long.
        loop {
            let tx = pg(&mut client).transaction().await.map_err(map_pg)?;
            let rows = tx
                .query_typed(
                    &format!("SELECT id FROM sessions WHERE {EXPIRED_WHERE} ORDER BY id LIMIT $4 FOR UPDATE SKIP LOCKED"),
                    args![completed, abandoned, deleted, BATCH_DELETE],
                )
                .await
                .map_err(map_pg)?;
            let ids = rows
                .iter()
                .map(|r| sql::get::<Id>(r, "id"))
                .collect::<Result<Vec<Id>>>()?;
            if ids.is_empty() {
                tx.commit().await.map_err(map_pg)?;
                break;
            }
            let run = |sql: &'static str| {
                let tx = &tx;
                let ids = &ids;
                async move { tx.execute_typed(sql, args![*ids]).await.map_err(map_pg) }
            };
            checkpoints::delete_sessions_checkpoints(&tx, &ids).await?;
            total.steps += run("DELETE FROM steps WHERE execution_id IN (SELECT id FROM executions WHERE session_id = ANY($1))").await?;
            total.snapshots += run("DELETE FROM snapshots WHERE execution_id IN (SELECT id FROM executions WHERE session_id = ANY($1))").await?;
            total.executions += run("DELETE FROM executions WHERE session_id = ANY($1)").await?;
            total.messages += run("DELETE FROM messages WHERE session_id = ANY($1)").await?;
            total.events += run("DELETE FROM events WHERE session_id = ANY($1)").await?;
            total.sessions += run("DELETE FROM sessions WHERE id = ANY($1)").await?;
            tx.commit().await.map_err(map_pg)?;
        }
        if total.sessions > 0 {
            tracing::info!(?total, "retention cleanup deleted expired sessions");
        }
        Ok(total)
    }

    async fn put_checkpoint(
        &self,
        tenant: &Tenant,
        new: stepwise_store::NewCheckpoint,
    ) -> Result<stepwise_store::CheckpointPut> {
        self.checkpoint_put(tenant, new).await
    }

    async fn put_checkpoint_writes(
        &self,
        tenant: &Tenant,
        writes: stepwise_store::PutWrites,
    ) -> Result<Id> {
        self.checkpoint_put_writes(tenant, writes).await
    }

    async fn get_checkpoint_since(
        &self,
        tenant: &Tenant,
        thread_id: &str,
        checkpoint_ns: &str,
        checkpoint_id: Option<&str>,
        have: &std::collections::BTreeMap<String, String>,
    ) -> Result<Option<stepwise_store::CheckpointRecord>> {
        self.checkpoint_get(tenant, thread_id, checkpoint_ns, checkpoint_id, have)
            .await
    }

    async fn list_checkpoints(
        &self,
        tenant: &Tenant,
        query: stepwise_store::CheckpointQuery,
    ) -> Result<Page<stepwise_store::CheckpointRecord>> {
        self.checkpoint_list(tenant, query).await
    }

    async fn get_thread(
        &self,
        tenant: &Tenant,
        thread_id: &str,
    ) -> Result<Option<stepwise_store::ThreadInfo>> {
        self.checkpoint_thread(tenant, thread_id).await
    }

    async fn export_thread(
        &self,
        tenant: &Tenant,
        session_id: Id,
    ) -> Result<Option<stepwise_core::document::DocumentThread>> {
        self.checkpoint_export(tenant, session_id).await
    }

    async fn delete_thread(&self, tenant: &Tenant, thread_id: &str) -> Result<bool> {
        self.checkpoint_delete_thread(tenant, thread_id).await
    }

    async fn copy_thread(
        &self,
        tenant: &Tenant,
        source: &str,
        target: &str,
        user_id: &str,
    ) -> Result<Option<stepwise_store::ThreadInfo>> {
        self.checkpoint_copy_thread(tenant, source, target, user_id)
            .await
    }

    async fn delete_checkpoints_for_runs(
        &self,
        tenant: &Tenant,
        run_ids: Vec<String>,
    ) -> Result<u64> {
        self.checkpoint_delete_for_runs(tenant, run_ids).await
    }

    async fn prune_checkpoints(
        &self,
        tenant: &Tenant,
        thread_ids: Vec<String>,
        strategy: stepwise_store::PruneStrategy,
    ) -> Result<u64> {
        self.checkpoint_prune(tenant, thread_ids, strategy).await
    }

    async fn create_api_key(
        &self,
        tenant: &Tenant,
        user_id: &str,
        name: Option<String>,
        key_hash: &str,
    ) -> Result<ApiKeyRecord> {
        let record = ApiKeyRecord::new(tenant, user_id, name, self.now());
        let r = &record;
        let client = self.client().await?;
        client
            .execute_typed(
                "INSERT INTO api_keys (id, tenant_id, user_id, name, key_hash, created_at) VALUES ($1, $2, $3, $4, $5, $6)",
                args![r.id, r.tenant_id, r.user_id, r.name, key_hash, r.created_at.0],
            )
            .await
            .map_err(|e| {
                if is_unique_violation(&e) {
                    StoreError::Conflict("that key already exists".into())
                } else {
                    map_pg(e)
                }
            })?;
        Ok(record)
    }

    async fn find_api_key(&self, key_hash: &str) -> Result<Option<ApiKeyRecord>> {
        let sql = format!(
            "SELECT {} FROM api_keys WHERE key_hash = $1 AND revoked_at IS NULL",
            sql::API_KEY_COLS
        );
        let client = self.client().await?;
        let row = client
            .query_typed_opt(&sql, args![key_hash])
            .await
            .map_err(map_pg)?;
        row.as_ref().map(sql::api_key).transpose()
    }

    async fn list_api_keys(&self) -> Result<Vec<ApiKeyRecord>> {
        let sql = format!(
            "SELECT {} FROM api_keys ORDER BY created_at, id",
            sql::API_KEY_COLS
        );
        let client = self.client().await?;
        let rows = client.query_typed(&sql, args![]).await.map_err(map_pg)?;
        sql::collect(&rows, sql::api_key)
    }

    async fn revoke_api_key(&self, id: Id) -> Result<bool> {
        let now = self.now();
        let client = self.client().await?;
        let n = client
            .execute_typed(
                "UPDATE api_keys SET revoked_at = COALESCE(revoked_at, $1) WHERE id = $2",
                args![now.0, id],
            )
            .await
            .map_err(map_pg)?;
        Ok(n > 0)
    }

    async fn count_active_api_keys(&self) -> Result<u64> {
        let client = self.client().await?;
        count(
            &**client,
            "SELECT COUNT(*) AS n FROM api_keys WHERE revoked_at IS NULL",
            args![],
        )
        .await
    }

    async fn flush(&self) -> Result<()> {
        self.inner.writer.flush().await
    }

    async fn ping(&self) -> Result<()> {
        let client = self.client().await?;
        client
            .query_typed("SELECT 1", args![])
            .await
            .map_err(map_pg)?;
        Ok(())
    }

    async fn stats(&self) -> Result<StoreStats> {
        let client = self.client().await?;
        let row = client
            .query_typed_one(
                "SELECT COALESCE(SUM(pg_total_relation_size(to_regclass(t))), 0)::int8 AS bytes, \
                 (SELECT COUNT(*) FROM executions WHERE status = 'pending') AS pending \
                 FROM unnest(ARRAY['sessions', 'messages', 'executions', 'steps', 'snapshots', 'events', 'api_keys']) AS t",
                args![],
            )
            .await
            .map_err(map_pg)?;
        Ok(StoreStats {
            bytes: sql::get::<i64>(&row, "bytes")?.max(0) as u64,
            queue_depth: sql::get::<i64>(&row, "pending")?.max(0) as u64,
            decode_errors: self.inner.decode_errors.load(Ordering::Relaxed),
            save_errors: self.inner.writer.save_errors.load(Ordering::Relaxed),
        })
    }

    async fn count_by_status(&self) -> Result<StatusCounts> {
        let client = self.client().await?;
        let rows = client
            .query_typed(
                "SELECT 'session' AS kind, status, COUNT(*) AS n FROM sessions GROUP BY status \
                 UNION ALL SELECT 'execution', status, COUNT(*) FROM executions GROUP BY status",
                args![],
            )
            .await
            .map_err(map_pg)?;
        let mut counts = StatusCounts::default();
        for row in rows {
            let kind: String = sql::get(&row, "kind")?;
            let status: String = sql::get(&row, "status")?;
            let n = sql::get::<i64>(&row, "n")?.max(0) as u64;
            if kind == "session" {
                if let Some(status) = SessionStatus::parse(&status) {
                    counts.sessions.push((status, n));
                }
            } else if let Some(status) = ExecutionStatus::parse(&status) {
                counts.executions.push((status, n));
            }
        }
        Ok(counts)
    }

    async fn try_retention_lock(&self) -> Result<Option<RetentionLock>> {
        // A session-level advisory lock on a connection of its own: it locks no rows, and
        // it goes away with the connection, so a node that dies mid-pass releases it.
        let (client, connection) = self
            .inner
            .config
            .connect(tokio_postgres::NoTls)
            .await
            .map_err(|e| StoreError::Unavailable(format!("cannot connect to PostgreSQL: {e}")))?;
        let driver = tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "the retention lock connection ended");
            }
        });
        let row = client
            .query_typed_one(
                "SELECT pg_try_advisory_lock($1) AS locked",
                args![RETENTION_LOCK],
            )
            .await
            .map_err(map_pg)?;
        if sql::get::<bool>(&row, "locked")? {
            Ok(Some(RetentionLock::holding(HeldLock {
                _client: client,
                _driver: driver,
            })))
        } else {
            drop(client);
            let _ = driver.await;
            Ok(None)
        }
    }

    fn backend_name(&self) -> &'static str {
        "postgres"
    }
}

impl PgStore {
    /// Tells handles of the same store (clones) from handles of other stores.
    pub fn identity(&self) -> usize {
        Arc::as_ptr(&self.inner) as usize
    }

    /// Live subscribers in this process (for metrics).
    pub fn subscriber_count(&self) -> usize {
        self.inner.relay.subscriber_count()
    }

    /// Saves waiting in this process's queue (not yet committed).
    pub fn save_queue_depth(&self) -> u64 {
        self.inner.writer.depth()
    }
}

/// Rings the other nodes' workers when the transaction commits (see `relay::QUEUE_CHANNEL`).
async fn notify_queue(tx: &tokio_postgres::Transaction<'_>) -> Result<()> {
    tx.execute_typed("SELECT pg_notify('stepwise_queue', '')", &[])
        .await
        .map_err(map_pg)?;
    Ok(())
}
