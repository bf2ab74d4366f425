//! The embedded SQLite store: one database file in WAL mode, one writer thread that
//! commits queued writes in batches, and a small pool of reader connections used from
//! `spawn_blocking`. With [`Durability::Full`] (the default) each batch's commit is synced
//! to disk before any of its writes is acknowledged (`synchronous=FULL`: an acknowledged
//! write survives a power cut); with [`Durability::Process`] it survives a crash of the
//! process but not of the machine (`synchronous=NORMAL`). Group commit makes one sync
//! cover every write of a batch.

mod checkpoints;
mod import;
mod mirrored;
mod rows;
mod writer;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags, OptionalExtension, params, params_from_iter};
use stepwise_core::codec::{self, DEFAULT_COMPRESS_THRESHOLD};
use stepwise_core::name::validate_name;
use stepwise_core::{
    Event, Execution, ExecutionStatus, Id, Message, Session, SessionDocument, SessionStatus,
    SharedClock, Snapshot, Step, StepBody, Timestamp, new_id, system_clock,
};
use stepwise_store::{
    Ack, ApiKeyRecord, CheckpointPut, CheckpointQuery, CheckpointRecord, Claim, CleanupReport,
    EventHub, Loaded, MessageQuery, NewCheckpoint, NewEvent, NewExecution, NewMessage, NewSession,
    NewSnapshot, NewStep, Page, PageRequest, PruneStrategy, PutWrites, Result, RetentionLock,
    RetentionPolicy, SessionFilter, SessionPatch, StatusCounts, StepAppend, Store, StoreError,
    StoreStats, Tenant, ThreadInfo, Transition, cursor,
};
use tokio::sync::broadcast;

use crate::rows::{bid, json_text, opt_bid};
use crate::writer::{Published, WalPolicy, Writer, map_sqlite};

mod embedded {
    refinery::embed_migrations!("migrations");
}

#[derive(Clone)]
pub struct SqliteOptions {
    /// Server time (injected in tests).
    pub clock: SharedClock,
    /// Step and snapshot payloads larger than this are zstd-compressed.
    pub compress_threshold: usize,
    /// Writes that may wait in the queue before callers are slowed down.
    pub queue_capacity: usize,
    /// Most writes committed in one transaction.
    pub max_batch: usize,
    /// Idle reader connections kept open.
    pub readers: usize,
    /// How long a write waits for another process holding the database lock.
    pub busy_timeout: Duration,
    /// When an acknowledged write is safe: synced to disk, or handed to the OS.
    pub durability: Durability,
    /// The WAL file is checkpointed and truncated by the writer once it passes this size.
    pub wal_limit_bytes: u64,
    /// After this long without a write the WAL is checkpointed and truncated to zero.
    pub wal_idle_truncate: Duration,
}

/// What an acknowledged write survives.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Durability {
    /// A power cut or an OS crash: each group commit is synced (fsync) before its writes
    /// are acknowledged (`PRAGMA synchronous = FULL`).
    #[default]
    Full,
    /// A crash of the process, not of the machine: commits reach the OS, which writes them
    /// out later (`PRAGMA synchronous = NORMAL`).
    Process,
}

impl Durability {
    pub fn as_str(self) -> &'static str {
        match self {
            Durability::Full => "full",
            Durability::Process => "process",
        }
    }

    fn synchronous(self) -> &'static str {
        match self {
            Durability::Full => "FULL",
            Durability::Process => "NORMAL",
        }
    }
}

/// The WAL size past which the writer checkpoints and truncates it (64 MiB).
pub const DEFAULT_WAL_LIMIT_BYTES: u64 = 64 * 1024 * 1024;
/// How long without a write before the WAL is truncated to zero.
pub const DEFAULT_WAL_IDLE_TRUNCATE: Duration = Duration::from_millis(1000);

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions {
            clock: system_clock(),
            compress_threshold: DEFAULT_COMPRESS_THRESHOLD,
            queue_capacity: 4096,
            max_batch: 512,
            readers: 4,
            busy_timeout: Duration::from_secs(5),
            durability: Durability::Full,
            wal_limit_bytes: DEFAULT_WAL_LIMIT_BYTES,
            wal_idle_truncate: DEFAULT_WAL_IDLE_TRUNCATE,
        }
    }
}

/// A handle to one SQLite database; cheap to clone. The writer thread stops, after
/// committing everything queued, when the last handle is dropped.
#[derive(Clone)]
pub struct SqliteStore {
    inner: Arc<Inner>,
}

struct Inner {
    path: PathBuf,
    writer: Writer,
    writer_thread: Mutex<Option<JoinHandle<()>>>,
    readers: Mutex<Vec<Connection>>,
    options: SqliteOptions,
    hub: EventHub,
    decode_errors: AtomicU64,
    applied_migrations: Vec<String>,
    owned_sessions: Mutex<std::collections::HashSet<Id>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Close the queue, then wait for the writer to commit what is left in it.
        self.writer.close();
        let handle = self
            .writer_thread
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(handle) = handle {
            let _ = handle.join();
        }
    }
}

const BATCH_DELETE: usize = 100;

impl SqliteStore {
    pub fn open(path: &Path) -> Result<SqliteStore> {
        Self::open_with(path, SqliteOptions::default())
    }

    /// Opens (creating if needed) and migrates the database at `path`.
    pub fn open_with(path: &Path, options: SqliteOptions) -> Result<SqliteStore> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| {
                StoreError::Unavailable(format!("cannot create {}: {e}", dir.display()))
            })?;
        }
        let mut conn = connect(path, &options, true)?;
        let report = embedded::migrations::runner()
            .run(&mut conn)
            .map_err(|e| StoreError::Backend(format!("migrating {}: {e}", path.display())))?;
        let applied_migrations = report
            .applied_migrations()
            .iter()
            .map(|m| m.to_string())
            .collect();
        let hub = EventHub::new();
        let checkpoints = connect(path, &options, false)?;
        let mut wal_path = path.as_os_str().to_owned();
        wal_path.push("-wal");
        let (writer, handle) = Writer::start(
            conn,
            checkpoints,
            hub.clone(),
            options.queue_capacity,
            options.max_batch,
            WalPolicy {
                wal_path: PathBuf::from(wal_path),
                limit_bytes: options.wal_limit_bytes,
                idle_truncate: options.wal_idle_truncate,
            },
        )
        .map_err(|e| StoreError::Backend(format!("cannot start the writer thread: {e}")))?;
        Ok(SqliteStore {
            inner: Arc::new(Inner {
                path: path.to_path_buf(),
                writer,
                writer_thread: Mutex::new(Some(handle)),
                readers: Mutex::new(Vec::new()),
                options,
                hub,
                decode_errors: AtomicU64::new(0),
                applied_migrations,
                owned_sessions: Mutex::new(Default::default()),
            }),
        })
    }

    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// The migrations this open applied (empty when the schema was already current).
    pub fn applied_migrations(&self) -> &[String] {
        &self.inner.applied_migrations
    }

    fn now(&self) -> Timestamp {
        self.inner.options.clock.now()
    }

    async fn read<T, F>(&self, work: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection, &Inner) -> Result<T> + Send + 'static,
    {
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || {
            let conn = inner.take_reader()?;
            let result = work(&conn, &inner);
            inner.put_reader(conn);
            result
        })
        .await
        .map_err(|e| StoreError::Backend(format!("a read task failed: {e}")))?
    }

    async fn write<T, F>(&self, work: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection, &mut Published) -> Result<T> + Send + 'static,
    {
        self.inner.writer.write(work).await
    }
}

impl Inner {
    fn take_reader(&self) -> Result<Connection> {
        let idle = self.readers.lock().unwrap_or_else(|e| e.into_inner()).pop();
        match idle {
            Some(conn) => Ok(conn),
            None => connect(&self.path, &self.options, false),
        }
    }

    fn put_reader(&self, conn: Connection) {
        let mut idle = self.readers.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < self.options.readers {
            idle.push(conn);
        }
    }

    /// Whether `tenant` owns the session; positive answers are remembered (ownership never
    /// changes), so the per-token cost of a live stream is one set lookup.
    fn owns_session(&self, tenant: &Tenant, session_id: Id) -> bool {
        let key = stepwise_core::apikey::tenant_scoped_id(tenant.as_str(), session_id);
        if self
            .owned_sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&key)
        {
            return true;
        }
        let Ok(conn) = self.take_reader() else {
            return false;
        };
        let owned = count(
            &conn,
            "SELECT COUNT(*) FROM sessions WHERE id = ?1 AND tenant_id = ?2",
            params![bid(session_id), tenant.as_str()],
        )
        .is_ok_and(|n| n > 0);
        self.put_reader(conn);
        if owned {
            let mut known = self
                .owned_sessions
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            if known.len() >= 100_000 {
                known.clear();
            }
            known.insert(key);
        }
        owned
    }

    /// Decodes step rows, skipping (and counting) the ones that cannot be decoded.
    fn decode_steps(&self, rows: Vec<StepRow>) -> Loaded<Step> {
        let decoded = decode_rows(rows);
        let mut items = Vec::with_capacity(decoded.len());
        let mut skipped = 0;
        for step in decoded {
            match step {
                Ok(step) => items.push(step),
                Err((execution, number, e)) => {
                    skipped += 1;
                    tracing::warn!(%execution, step = number, error = %e, "skipping a stored step that cannot be decoded");
                }
            }
        }
        self.decode_errors.fetch_add(skipped, Ordering::Relaxed);
        Loaded { items, skipped }
    }
}

/// Rows from which a long restore is decoded on several threads (below it, one thread is
/// quicker than starting others).
const PARALLEL_DECODE_ROWS: usize = 256;

type Decoded = std::result::Result<Step, (Id, u32, codec::DecodeError)>;

/// Decodes the rows' payloads, in order. Decompressing and parsing is most of a restore's
/// time, and rows are independent: a long session is split over the machine's cores.
fn decode_rows(rows: Vec<StepRow>) -> Vec<Decoded> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(8));
    if rows.len() < PARALLEL_DECODE_ROWS || threads < 2 {
        return rows.into_iter().map(decode_row).collect();
    }
    let chunk = rows.len().div_ceil(threads);
    let mut rows = rows;
    let mut chunks = Vec::with_capacity(threads);
    while rows.len() > chunk {
        let rest = rows.split_off(chunk);
        chunks.push(std::mem::replace(&mut rows, rest));
    }
    chunks.push(rows);
    std::thread::scope(|scope| {
        let mut first = None;
        let mut handles = Vec::with_capacity(chunks.len());
        for (k, part) in chunks.into_iter().enumerate() {
            if k == 0 {
                first = Some(part);
            } else {
                handles.push(
                    scope.spawn(move || part.into_iter().map(decode_row).collect::<Vec<_>>()),
                );
            }
        }
        // This thread decodes the first part while the others decode theirs.
        let mut out: Vec<Decoded> = first
            .unwrap_or_default()
            .into_iter()
            .map(decode_row)
            .collect();
        for handle in handles {
            match handle.join() {
                Ok(part) => out.extend(part),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        out
    })
}

fn decode_row(row: StepRow) -> Decoded {
    match codec::decode_step(&row.payload) {
        Ok(body) => Ok(Step::from_body(
            row.id,
            row.execution_id,
            row.session_id,
            row.step_number,
            row.kind,
            body,
            row.created_at,
        )),
        Err(e) => Err((row.execution_id, row.step_number, e)),
    }
}

fn connect(path: &Path, options: &SqliteOptions, writer: bool) -> Result<Connection> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX
        | OpenFlags::SQLITE_OPEN_URI;
    let conn = Connection::open_with_flags(path, flags)
        .map_err(|e| StoreError::Unavailable(format!("cannot open {}: {e}", path.display())))?;
    conn.busy_timeout(options.busy_timeout)
        .map_err(map_sqlite)?;
    // `synchronous` is per connection: the writer's decides when a commit is synced; the
    // checkpoint connection's, that checkpoints sync the database file (both do at
    // NORMAL and FULL). `journal_size_limit` cuts a WAL that SQLite starts over back to
    // the limit.
    let pragmas = if writer {
        format!(
            "PRAGMA journal_mode = WAL; PRAGMA synchronous = {}; PRAGMA foreign_keys = OFF; \
             PRAGMA wal_autocheckpoint = 0; PRAGMA journal_size_limit = {}; \
             PRAGMA temp_store = MEMORY; PRAGMA cache_size = -16000;",
            options.durability.synchronous(),
            options.wal_limit_bytes.min(i64::MAX as u64)
        )
    } else {
        format!(
            "PRAGMA synchronous = {}; PRAGMA temp_store = MEMORY; PRAGMA cache_size = -16000; \
             PRAGMA mmap_size = 268435456;",
            options.durability.synchronous()
        )
    };
    conn.execute_batch(&pragmas).map_err(map_sqlite)?;
    conn.set_prepared_statement_cache_capacity(64);
    Ok(conn)
}

fn is_unique_violation(e: &rusqlite::Error) -> bool {
    matches!(e, rusqlite::Error::SqliteFailure(f, _) if f.code == rusqlite::ErrorCode::ConstraintViolation)
}

fn check_name(name: &Option<String>) -> Result<()> {
    match name {
        Some(name) => validate_name(name).map_err(StoreError::from),
        None => Ok(()),
    }
}

fn load_session(conn: &Connection, tenant: &str, id: Id) -> Result<Option<Session>> {
    let sql = format!(
        "SELECT {} FROM sessions WHERE id = ?1 AND tenant_id = ?2",
        rows::SESSION_COLS
    );
    conn.prepare_cached(&sql)
        .and_then(|mut s| {
            s.query_row(params![bid(id), tenant], rows::session)
                .optional()
        })
        .map_err(map_sqlite)
}

fn load_execution(conn: &Connection, tenant: &str, id: Id) -> Result<Option<Execution>> {
    let sql = format!(
        "SELECT {} FROM executions WHERE id = ?1 AND tenant_id = ?2",
        rows::EXECUTION_COLS
    );
    conn.prepare_cached(&sql)
        .and_then(|mut s| {
            s.query_row(params![bid(id), tenant], rows::execution)
                .optional()
        })
        .map_err(map_sqlite)
}

struct StepRow {
    id: Id,
    execution_id: Id,
    session_id: Option<Id>,
    step_number: u32,
    kind: stepwise_core::StepKind,
    created_at: Timestamp,
    payload: Vec<u8>,
}

/// A step row of `STEP_COLS`, read by position.
fn step_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<StepRow> {
    let kind = match row.get_ref(4)? {
        rusqlite::types::ValueRef::Text(text) => std::str::from_utf8(text)
            .ok()
            .and_then(stepwise_core::StepKind::parse),
        _ => None,
    };
    Ok(StepRow {
        id: row.get::<_, rows::Bid>(0)?.0,
        execution_id: row.get::<_, rows::Bid>(1)?.0,
        session_id: row.get::<_, Option<rows::Bid>>(2)?.map(|b| b.0),
        step_number: row.get::<_, i64>(3)?.clamp(0, i64::from(u32::MAX)) as u32,
        kind: kind.unwrap_or(stepwise_core::StepKind::Action),
        created_at: Timestamp(row.get(5)?),
        payload: row.get(6)?,
    })
}

const STEP_COLS: &str =
    "s.id, s.execution_id, s.session_id, s.step_number, s.kind, s.created_at, s.payload";

fn count(conn: &Connection, sql: &str, param: impl rusqlite::Params) -> Result<u64> {
    conn.prepare_cached(sql)
        .and_then(|mut s| s.query_row(param, |r| r.get::<_, i64>(0)))
        .map(|n| n.max(0) as u64)
        .map_err(map_sqlite)
}

/// The statuses `cleanup_old_sessions` deletes, with how old each must be.
fn expiry_rules(now: Timestamp, policy: RetentionPolicy) -> [(SessionStatus, Timestamp); 3] {
    [
        (
            SessionStatus::Completed,
            now.minus_days(policy.completed_days),
        ),
        (
            SessionStatus::Abandoned,
            now.minus_days(policy.abandoned_days),
        ),
        (SessionStatus::Deleted, now.minus_days(policy.deleted_days)),
    ]
}

const EXPIRED_WHERE: &str = "(status = 'completed' AND updated_at < ?1) OR (status = 'abandoned' AND updated_at < ?2) OR (status = 'deleted' AND updated_at < ?3)";

/// Deletes one session and every row that belongs to it, adding what went to `report`.
pub(crate) fn delete_session_rows(
    conn: &Connection,
    id: Id,
    report: &mut CleanupReport,
) -> Result<()> {
    checkpoints::delete_session_checkpoints(conn, id)?;
    let run = |sql: &str| -> Result<u64> {
        conn.prepare_cached(sql)
            .and_then(|mut s| s.execute(params![bid(id)]))
            .map(|n| n as u64)
            .map_err(map_sqlite)
    };
    report.steps += run(
        "DELETE FROM steps WHERE execution_id IN (SELECT id FROM executions WHERE session_id = ?1)",
    )?;
    report.snapshots += run(
        "DELETE FROM snapshots WHERE execution_id IN (SELECT id FROM executions WHERE session_id = ?1)",
    )?;
    report.executions += run("DELETE FROM executions WHERE session_id = ?1")?;
    report.messages += run("DELETE FROM messages WHERE session_id = ?1")?;
    report.events += run("DELETE FROM events WHERE session_id = ?1")?;
    report.sessions += run("DELETE FROM sessions WHERE id = ?1")?;
    Ok(())
}

impl Store for SqliteStore {
    async fn create_session(&self, tenant: &Tenant, new: NewSession) -> Result<Session> {
        check_name(&new.name)?;
        let now = self.now();
        let session = new.into_session(tenant, now);
        self.write(move |conn, _| {
            let s = &session;
            conn.prepare_cached(
                "INSERT INTO sessions (id, tenant_id, user_id, name, title, status, related_type, related_id, initial_context_url, metadata, created_at, updated_at) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?11)",
            )
            .and_then(|mut stmt| {
                stmt.execute(params![bid(s.id), s.tenant_id, s.user_id, s.name, s.title, s.status.as_str(), s.related_type, s.related_id, s.initial_context_url, json_text(&s.metadata), now.0])
            })
            .map_err(|e| {
                if is_unique_violation(&e) {
                    StoreError::Conflict(format!("a session named '{}' already exists", s.name.as_deref().unwrap_or_default()))
                } else {
                    map_sqlite(e)
                }
            })?;
            Ok(session)
        })
        .await
    }

    async fn get_session(&self, tenant: &Tenant, id: Id) -> Result<Option<Session>> {
        let tenant = tenant.as_str().to_string();
        self.read(move |conn, _| load_session(conn, &tenant, id))
            .await
    }

    async fn find_session_by_name(&self, tenant: &Tenant, name: &str) -> Result<Option<Session>> {
        let (tenant, name) = (tenant.as_str().to_string(), name.to_string());
        self.read(move |conn, _| {
            let sql = format!(
                "SELECT {} FROM sessions WHERE tenant_id = ?1 AND name = ?2",
                rows::SESSION_COLS
            );
            conn.prepare_cached(&sql)
                .and_then(|mut s| s.query_row(params![tenant, name], rows::session).optional())
                .map_err(map_sqlite)
        })
        .await
    }

    async fn list_sessions(
        &self,
        tenant: &Tenant,
        filter: SessionFilter,
        page: PageRequest,
    ) -> Result<Page<Session>> {
        use rusqlite::types::Value as Sql;
        let after = page.cursor.as_deref().map(cursor::decode).transpose()?;
        let limit = page.limit();
        let mut sql = format!(
            "SELECT {} FROM sessions WHERE tenant_id = ?",
            rows::SESSION_COLS
        );
        let mut args: Vec<Sql> = vec![Sql::Text(tenant.as_str().to_string())];
        match &filter.statuses {
            Some(statuses) if !statuses.is_empty() => {
                sql.push_str(&format!(
                    " AND status IN ({})",
                    vec!["?"; statuses.len()].join(",")
                ));
                args.extend(statuses.iter().map(|s| Sql::Text(s.as_str().into())));
            }
            _ => sql.push_str(" AND status <> 'deleted'"),
        }
        for (column, value) in [
            ("related_type", &filter.related_type),
            ("related_id", &filter.related_id),
            ("user_id", &filter.user_id),
        ] {
            if let Some(value) = value {
                sql.push_str(&format!(" AND {column} = ?"));
                args.push(Sql::Text(value.clone()));
            }
        }
        if let Some((at, id)) = after {
            sql.push_str(" AND (updated_at, id) < (?, ?)");
            args.push(Sql::Integer(at.0));
            args.push(Sql::Blob(id.as_bytes().to_vec()));
        }
        sql.push_str(" ORDER BY updated_at DESC, id DESC LIMIT ?");
        args.push(Sql::Integer(i64::from(limit) + 1));
        self.read(move |conn, _| {
            let mut items = conn
                .prepare_cached(&sql)
                .and_then(|mut s| {
                    s.query_map(params_from_iter(args), rows::session)?
                        .collect::<rusqlite::Result<Vec<_>>>()
                })
                .map_err(map_sqlite)?;
            let next_cursor = if items.len() > limit as usize {
                items.truncate(limit as usize);
                items.last().map(|s| cursor::encode(s.updated_at, s.id))
            } else {
                None
            };
            Ok(Page { items, next_cursor })
        })
        .await
    }

    async fn update_session(
        &self,
        tenant: &Tenant,
        id: Id,
        patch: SessionPatch,
    ) -> Result<Option<Session>> {
        check_name(&patch.name)?;
        let tenant = tenant.as_str().to_string();
        let now = self.now();
        self.write(move |conn, _| {
            let Some(mut session) = load_session(conn, &tenant, id)? else {
                return Ok(None);
            };
            if let Some(title) = patch.title {
                session.title = Some(title);
            }
            if let Some(name) = patch.name {
                session.name = Some(name);
            }
            if let Some(status) = patch.status {
                session.status = status;
            }
            if let Some(metadata) = patch.metadata {
                session.metadata = metadata;
            }
            session.updated_at = now;
            let s = &session;
            conn.prepare_cached("UPDATE sessions SET title = ?1, name = ?2, status = ?3, metadata = ?4, updated_at = ?5 WHERE id = ?6 AND tenant_id = ?7")
                .and_then(|mut stmt| stmt.execute(params![s.title, s.name, s.status.as_str(), json_text(&s.metadata), now.0, bid(id), tenant]))
                .map_err(|e| if is_unique_violation(&e) { StoreError::Conflict("a session with that name already exists".into()) } else { map_sqlite(e) })?;
            Ok(Some(session))
        })
        .await
    }

    async fn delete_session(&self, tenant: &Tenant, id: Id) -> Result<bool> {
        let tenant = tenant.as_str().to_string();
        let now = self.now();
        self.write(move |conn, _| {
            let deleted = conn.prepare_cached("UPDATE sessions SET status = 'deleted', updated_at = ?1 WHERE id = ?2 AND tenant_id = ?3")
                .and_then(|mut s| s.execute(params![now.0, bid(id), tenant]))
                .map(|n| n > 0)
                .map_err(map_sqlite)?;
            if deleted {
                // A deleted session is no thread any more: its checkpoints go with it.
                checkpoints::delete_session_checkpoints(conn, id)?;
            }
            Ok(deleted)
        })
        .await
    }

    async fn append_message(&self, tenant: &Tenant, new: NewMessage) -> Result<Message> {
        let tenant = tenant.as_str().to_string();
        let now = self.now();
        let message = new.into_message(now);
        self.write(move |conn, _| {
            let m = &message;
            let touched = conn
                .prepare_cached("UPDATE sessions SET message_count = message_count + 1, updated_at = ?1 WHERE id = ?2 AND tenant_id = ?3")
                .and_then(|mut s| s.execute(params![now.0, bid(m.session_id), tenant]))
                .map_err(map_sqlite)?;
            if touched == 0 {
                return Err(StoreError::NotFound("session"));
            }
            conn.prepare_cached(
                "INSERT INTO messages (id, tenant_id, session_id, role, content, execution_id, related_type, related_id, context_url, metadata, created_at) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            )
            .and_then(|mut s| s.execute(params![bid(m.id), tenant, bid(m.session_id), m.role.as_str(), m.content, opt_bid(m.execution_id), m.related_type, m.related_id, m.context_url, json_text(&m.metadata), now.0]))
            .map_err(map_sqlite)?;
            Ok(message)
        })
        .await
    }

    async fn list_messages(
        &self,
        tenant: &Tenant,
        session_id: Id,
        query: MessageQuery,
    ) -> Result<Vec<Message>> {
        use rusqlite::types::Value as Sql;
        let tenant = tenant.as_str().to_string();
        self.read(move |conn, _| {
            let mut sql = format!("SELECT {} FROM messages WHERE session_id = ? AND tenant_id = ?", rows::MESSAGE_COLS);
            let mut args: Vec<Sql> = vec![Sql::Blob(session_id.as_bytes().to_vec()), Sql::Text(tenant.clone())];
            if let Some(after) = query.after {
                let at: Option<i64> = conn
                    .prepare_cached("SELECT created_at FROM messages WHERE id = ?1 AND session_id = ?2 AND tenant_id = ?3")
                    .and_then(|mut s| s.query_row(params![bid(after), bid(session_id), tenant], |r| r.get(0)).optional())
                    .map_err(map_sqlite)?;
                let at = at.ok_or_else(|| StoreError::invalid("after", "no such message in this session"))?;
                sql.push_str(" AND (created_at, id) > (?, ?)");
                args.push(Sql::Integer(at));
                args.push(Sql::Blob(after.as_bytes().to_vec()));
            }
            if let Some(roles) = query.roles.as_ref().filter(|r| !r.is_empty()) {
                sql.push_str(&format!(" AND role IN ({})", vec!["?"; roles.len()].join(",")));
                args.extend(roles.iter().map(|r| Sql::Text(r.as_str().into())));
            }
            sql.push_str(" ORDER BY created_at, id");
            if let Some(limit) = query.limit {
                sql.push_str(" LIMIT ?");
                args.push(Sql::Integer(i64::from(limit)));
            }
            conn.prepare_cached(&sql)
                .and_then(|mut s| s.query_map(params_from_iter(args), rows::message)?.collect())
                .map_err(map_sqlite)
        })
        .await
    }

    async fn create_execution(&self, tenant: &Tenant, new: NewExecution) -> Result<Execution> {
        let now = self.now();
        let execution = new.into_execution(tenant, now)?;
        self.write(move |conn, _| {
            let e = &execution;
            if let Some(session_id) = e.session_id
                && load_session(conn, &e.tenant_id, session_id)?.is_none()
            {
                return Err(StoreError::NotFound("session"));
            }
            if let Some(parent) = e.parent_execution_id
                && load_execution(conn, &e.tenant_id, parent)?.is_none()
            {
                return Err(StoreError::NotFound("parent execution"));
            }
            conn.prepare_cached(
                "INSERT INTO executions (id, tenant_id, session_id, parent_execution_id, user_id, agent_type, agent_config, status, input, metadata, started_at, created_at, updated_at) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?12)",
            )
            .and_then(|mut s| s.execute(params![bid(e.id), e.tenant_id, opt_bid(e.session_id), opt_bid(e.parent_execution_id), e.user_id, e.agent_type, json_text(&e.agent_config), e.status.as_str(), json_text(&e.input), json_text(&e.metadata), e.started_at.map(|t| t.0), now.0]))
            .map_err(map_sqlite)?;
            if let Some(session_id) = e.session_id {
                conn.prepare_cached("UPDATE sessions SET last_execution_id = ?1, updated_at = ?2 WHERE id = ?3")
                    .and_then(|mut s| s.execute(params![bid(e.id), now.0, bid(session_id)]))
                    .map_err(map_sqlite)?;
            }
            Ok(execution)
        })
        .await
    }

    async fn get_execution(&self, tenant: &Tenant, id: Id) -> Result<Option<Execution>> {
        let tenant = tenant.as_str().to_string();
        self.read(move |conn, _| load_execution(conn, &tenant, id))
            .await
    }

    async fn list_executions(&self, tenant: &Tenant, session_id: Id) -> Result<Vec<Execution>> {
        let tenant = tenant.as_str().to_string();
        self.read(move |conn, _| {
            let sql = format!("SELECT {} FROM executions WHERE session_id = ?1 AND tenant_id = ?2 ORDER BY created_at, id", rows::EXECUTION_COLS);
            conn.prepare_cached(&sql)
                .and_then(|mut s| s.query_map(params![bid(session_id), tenant], rows::execution)?.collect())
                .map_err(map_sqlite)
        })
        .await
    }

    async fn transition_execution(
        &self,
        tenant: &Tenant,
        id: Id,
        transition: Transition,
    ) -> Result<Execution> {
        let tenant = tenant.as_str().to_string();
        let now = self.now();
        self.write(move |conn, _| {
            let current = load_execution(conn, &tenant, id)?.ok_or(StoreError::NotFound("execution"))?;
            let target = transition.target();
            if !current.status.can_become(target) {
                return Err(StoreError::InvalidState(format!("the execution is {} and cannot become {}", current.status, target)));
            }
            let (output, error, answer, done): (Option<String>, Option<String>, Option<String>, Option<i64>) = match &transition {
                Transition::Pause { .. } => (None, None, None, None),
                Transition::Resume { answer } => (None, None, Some(json_text(answer)), None),
                Transition::Complete { output } => (Some(json_text(output)), None, None, Some(now.0)),
                Transition::Fail { error_message } => (None, Some(error_message.clone()), None, Some(now.0)),
                Transition::Cancel => (None, None, None, Some(now.0)),
            };
            conn.prepare_cached(
                "UPDATE executions SET status = ?1, output = COALESCE(?2, output), error_message = COALESCE(?3, error_message), \
                 resume_answer = ?4, completed_at = COALESCE(?5, completed_at), lease_owner = NULL, lease_expires_at = NULL, updated_at = ?6, \
                 attempts = CASE WHEN ?1 = 'paused' THEN 0 ELSE attempts END \
                 WHERE id = ?7 AND tenant_id = ?8",
            )
            .and_then(|mut s| s.execute(params![target.as_str(), output, error, answer, done, now.0, bid(id), tenant]))
            .map_err(map_sqlite)?;
            load_execution(conn, &tenant, id)?.ok_or(StoreError::NotFound("execution"))
        })
        .await
    }

    async fn claim_next(
        &self,
        worker: &str,
        lease: Duration,
        max_attempts: u32,
    ) -> Result<Option<Claim>> {
        let worker = worker.to_string();
        let now = self.now();
        let until = Timestamp(
            now.0
                .saturating_add(lease.as_micros().min(i64::MAX as u128) as i64),
        );
        self.write(move |conn, _| {
            // A running execution whose worker stopped renewing its lease.
            loop {
                let expired: Option<(rows::Bid, String, i64)> = conn
                    .prepare_cached("SELECT id, tenant_id, attempts FROM executions WHERE status = 'running' AND lease_owner IS NOT NULL AND lease_expires_at < ?1 ORDER BY created_at, id LIMIT 1")
                    .and_then(|mut s| s.query_row(params![now.0], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?))).optional())
                    .map_err(map_sqlite)?;
                let Some((id, tenant, attempts)) = expired else { break };
                if attempts >= i64::from(max_attempts) {
                    let reason = format!("the execution was interrupted {attempts} times (its worker stopped before finishing); giving up");
                    tracing::warn!(execution = %id.0, attempts, "failing an execution whose workers kept stopping");
                    conn.prepare_cached("UPDATE executions SET status = 'failed', error_message = ?1, completed_at = ?2, updated_at = ?2, lease_owner = NULL, lease_expires_at = NULL WHERE id = ?3")
                        .and_then(|mut s| s.execute(params![reason, now.0, id]))
                        .map_err(map_sqlite)?;
                    continue;
                }
                conn.prepare_cached("UPDATE executions SET lease_owner = ?1, lease_expires_at = ?2, attempts = attempts + 1, updated_at = ?3 WHERE id = ?4")
                    .and_then(|mut s| s.execute(params![worker, until.0, now.0, id]))
                    .map_err(map_sqlite)?;
                let execution = load_execution(conn, &tenant, id.0)?.ok_or(StoreError::NotFound("execution"))?;
                return Ok(Some(Claim { execution, tenant: Tenant::new(tenant)?, resume_answer: None }));
            }
            // The oldest pending execution of a session with nothing running, first in its session.
            let pending: Option<(rows::Bid, String, Option<String>)> = conn
                .prepare_cached(
                    "SELECT e.id, e.tenant_id, e.resume_answer FROM executions e WHERE e.status = 'pending' AND e.parent_execution_id IS NULL \
                     AND NOT EXISTS (SELECT 1 FROM executions r WHERE r.session_id = e.session_id AND r.status = 'running') \
                     AND NOT EXISTS (SELECT 1 FROM executions p WHERE p.session_id = e.session_id AND p.status = 'pending' AND (p.created_at, p.id) < (e.created_at, e.id)) \
                     ORDER BY e.created_at, e.id LIMIT 1",
                )
                .and_then(|mut s| s.query_row([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?))).optional())
                .map_err(map_sqlite)?;
            let Some((id, tenant, answer)) = pending else { return Ok(None) };
            conn.prepare_cached(
                "UPDATE executions SET status = 'running', lease_owner = ?1, lease_expires_at = ?2, attempts = attempts + 1, \
                 resume_answer = NULL, started_at = COALESCE(started_at, ?3), updated_at = ?3 WHERE id = ?4",
            )
            .and_then(|mut s| s.execute(params![worker, until.0, now.0, id]))
            .map_err(map_sqlite)?;
            let execution = load_execution(conn, &tenant, id.0)?.ok_or(StoreError::NotFound("execution"))?;
            let resume_answer = answer.and_then(|a| serde_json::from_str(&a).ok());
            Ok(Some(Claim { execution, tenant: Tenant::new(tenant)?, resume_answer }))
        })
        .await
    }

    async fn renew_leases(&self, worker: &str, ids: Vec<Id>, lease: Duration) -> Result<Vec<Id>> {
        let worker = worker.to_string();
        let now = self.now();
        let until = now
            .0
            .saturating_add(lease.as_micros().min(i64::MAX as u128) as i64);
        self.write(move |conn, _| {
            let mut lost = Vec::new();
            for id in ids {
                let held = conn
                    .prepare_cached("UPDATE executions SET lease_expires_at = ?1 WHERE id = ?2 AND lease_owner = ?3 AND status = 'running'")
                    .and_then(|mut s| s.execute(params![until, bid(id), worker]))
                    .map_err(map_sqlite)?;
                if held == 0 {
                    lost.push(id);
                }
            }
            Ok(lost)
        })
        .await
    }

    async fn release(&self, worker: &str, id: Id) -> Result<()> {
        let worker = worker.to_string();
        let now = self.now();
        self.write(move |conn, _| {
            conn.prepare_cached(
                "UPDATE executions SET status = 'pending', lease_owner = NULL, lease_expires_at = NULL, attempts = MAX(attempts - 1, 0), updated_at = ?1 \
                 WHERE id = ?2 AND lease_owner = ?3 AND status = 'running'",
            )
            .and_then(|mut s| s.execute(params![now.0, bid(id), worker]))
            .map(|_| ())
            .map_err(map_sqlite)
        })
        .await
    }

    async fn queue_depth(&self) -> Result<u64> {
        self.read(|conn, _| {
            count(
                conn,
                "SELECT COUNT(*) FROM executions WHERE status = 'pending'",
                [],
            )
        })
        .await
    }

    async fn append_step(&self, tenant: &Tenant, new: NewStep) -> Result<Ack<StepAppend>> {
        if new.step_number == 0 {
            return Err(StoreError::invalid(
                "step_number",
                "step numbers start at 1",
            ));
        }
        let tenant = tenant.as_str().to_string();
        let now = self.now();
        // Encode (and compress) here, off the writer thread.
        let payload = codec::encode_step(&new.body, self.inner.options.compress_threshold);
        let id = new_id();
        self.inner
            .writer
            .submit(move |conn, _| {
                let exec: Option<(Option<rows::Bid>, String)> = conn
                    .prepare_cached("SELECT session_id, status FROM executions WHERE id = ?1 AND tenant_id = ?2")
                    .and_then(|mut s| s.query_row(params![bid(new.execution_id), tenant], |r| Ok((r.get(0)?, r.get(1)?))).optional())
                    .map_err(map_sqlite)?;
                let (session_id, status) = exec.ok_or(StoreError::NotFound("execution"))?;
                let session_id = session_id.map(|b| b.0);
                let finished = ExecutionStatus::parse(&status).is_some_and(ExecutionStatus::is_finished);
                let inserted = if finished {
                    0
                } else {
                    conn.prepare_cached(
                        "INSERT INTO steps (execution_id, step_number, id, tenant_id, session_id, kind, created_at, payload) \
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) ON CONFLICT (execution_id, step_number) DO NOTHING",
                    )
                    .and_then(|mut s| s.execute(params![bid(new.execution_id), new.step_number, bid(id), tenant, opt_bid(session_id), new.kind.as_str(), now.0, payload]))
                    .map_err(map_sqlite)?
                };
                if inserted == 1 {
                    let t = &new.body.token_usage;
                    conn.prepare_cached(
                        "UPDATE executions SET step_count = MAX(step_count, ?1), tokens_input = tokens_input + ?2, tokens_output = tokens_output + ?3, \
                         tokens_total = tokens_total + ?4, updated_at = ?5 WHERE id = ?6",
                    )
                    .and_then(|mut s| s.execute(params![new.step_number, t.input as i64, t.output as i64, t.total as i64, now.0, bid(new.execution_id)]))
                    .map_err(map_sqlite)?;
                    let step = Step::from_body(id, new.execution_id, session_id, new.step_number, new.kind, new.body, now);
                    return Ok(StepAppend { step, created: true });
                }
                // Already there (or the execution is over): the same step again is a no-op.
                let existing = conn
                    .prepare_cached(&format!("SELECT {STEP_COLS} FROM steps s WHERE s.execution_id = ?1 AND s.step_number = ?2"))
                    .and_then(|mut s| s.query_row(params![bid(new.execution_id), new.step_number], step_row).optional())
                    .map_err(map_sqlite)?;
                let Some(existing) = existing else {
                    return Err(StoreError::InvalidState(format!("the execution is {status}; no more steps can be added")));
                };
                let same = existing.kind == new.kind
                    && (existing.payload == payload || codec::decode_step(&existing.payload).is_ok_and(|b| b == new.body));
                if !same {
                    return Err(StoreError::Conflict(format!("step {} of this execution already exists with another body", new.step_number)));
                }
                let body: StepBody = codec::decode_step(&existing.payload).unwrap_or_default();
                let step = Step::from_body(existing.id, existing.execution_id, existing.session_id, existing.step_number, existing.kind, body, existing.created_at);
                Ok(StepAppend { step, created: false })
            })
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
        let tenant = tenant.as_str().to_string();
        self.read(move |conn, inner| {
            let rows = conn
                .prepare_cached(&format!("SELECT {STEP_COLS} FROM steps s WHERE s.execution_id = ?1 AND s.tenant_id = ?2 ORDER BY s.step_number"))
                .and_then(|mut s| s.query_map(params![bid(execution_id), tenant], step_row)?.collect::<rusqlite::Result<Vec<_>>>())
                .map_err(map_sqlite)?;
            Ok(inner.decode_steps(rows))
        })
        .await
    }

    async fn list_session_steps(&self, tenant: &Tenant, session_id: Id) -> Result<Loaded<Step>> {
        let tenant = tenant.as_str().to_string();
        self.read(move |conn, inner| {
            let rows = conn
                .prepare_cached(&format!(
                    "SELECT {STEP_COLS} FROM executions e JOIN steps s ON s.execution_id = e.id \
                     WHERE e.session_id = ?1 AND e.tenant_id = ?2 ORDER BY e.created_at, e.id, s.step_number"
                ))
                .and_then(|mut s| s.query_map(params![bid(session_id), tenant], step_row)?.collect::<rusqlite::Result<Vec<_>>>())
                .map_err(map_sqlite)?;
            Ok(inner.decode_steps(rows))
        })
        .await
    }

    async fn save_snapshot(&self, tenant: &Tenant, new: NewSnapshot) -> Result<Ack<Snapshot>> {
        let tenant = tenant.as_str().to_string();
        let now = self.now();
        let state = codec::encode_value(&new.state, self.inner.options.compress_threshold);
        let snapshot = new.into_snapshot(now);
        self.inner
            .writer
            .submit(move |conn, _| {
                let s = &snapshot;
                let session: Option<Option<rows::Bid>> = conn
                    .prepare_cached("SELECT session_id FROM executions WHERE id = ?1 AND tenant_id = ?2")
                    .and_then(|mut st| st.query_row(params![bid(s.execution_id), tenant], |r| r.get(0)).optional())
                    .map_err(map_sqlite)?;
                let session = session.ok_or(StoreError::NotFound("execution"))?;
                if let Some(parent) = s.parent_snapshot_id {
                    let found = count(conn, "SELECT COUNT(*) FROM snapshots WHERE id = ?1 AND tenant_id = ?2", params![bid(parent), tenant])?;
                    if found == 0 {
                        return Err(StoreError::invalid("parent_snapshot_id", "no such snapshot"));
                    }
                }
                conn.prepare_cached(
                    "INSERT INTO snapshots (id, tenant_id, execution_id, session_id, parent_snapshot_id, agent_id, agent_name, step_number, is_final, debug_mode, state, created_at) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
                )
                .and_then(|mut st| st.execute(params![bid(s.id), tenant, bid(s.execution_id), session, opt_bid(s.parent_snapshot_id), s.agent_id, s.agent_name, s.step_number, s.is_final, s.debug_mode, state, now.0]))
                .map_err(map_sqlite)?;
                conn.prepare_cached("UPDATE executions SET last_snapshot_id = ?1, updated_at = ?2 WHERE id = ?3")
                    .and_then(|mut st| st.execute(params![bid(s.id), now.0, bid(s.execution_id)]))
                    .map_err(map_sqlite)?;
                if let Some(session) = session {
                    conn.prepare_cached("UPDATE sessions SET last_snapshot_id = ?1 WHERE id = ?2")
                        .and_then(|mut st| st.execute(params![bid(s.id), session]))
                        .map_err(map_sqlite)?;
                }
                Ok(snapshot)
            })
            .await
    }

    async fn list_snapshots(&self, tenant: &Tenant, execution_id: Id) -> Result<Vec<Snapshot>> {
        let tenant = tenant.as_str().to_string();
        self.read(move |conn, _| {
            let sql = format!("SELECT {} FROM snapshots WHERE execution_id = ?1 AND tenant_id = ?2 ORDER BY created_at, id", rows::SNAPSHOT_COLS);
            conn.prepare_cached(&sql)
                .and_then(|mut s| s.query_map(params![bid(execution_id), tenant], rows::snapshot)?.collect())
                .map_err(map_sqlite)
        })
        .await
    }

    async fn get_snapshot(&self, tenant: &Tenant, id: Id) -> Result<Option<Snapshot>> {
        let tenant = tenant.as_str().to_string();
        self.read(move |conn, inner| {
            let sql = format!("SELECT {}, state FROM snapshots WHERE id = ?1 AND tenant_id = ?2", rows::SNAPSHOT_COLS);
            let found = conn
                .prepare_cached(&sql)
                .and_then(|mut s| s.query_row(params![bid(id), tenant], |r| Ok((rows::snapshot(r)?, r.get::<_, Vec<u8>>("state")?))).optional())
                .map_err(map_sqlite)?;
            let Some((mut snapshot, state)) = found else { return Ok(None) };
            match codec::decode_value(&state) {
                Ok(state) => {
                    snapshot.state = state;
                    Ok(Some(snapshot))
                }
                Err(e) => {
                    inner.decode_errors.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(snapshot = %id, error = %e, "a stored snapshot cannot be decoded");
                    Ok(None)
                }
            }
        })
        .await
    }

    async fn append_event(&self, tenant: &Tenant, new: NewEvent) -> Result<Ack<Event>> {
        let tenant = tenant.as_str().to_string();
        let now = self.now();
        let metadata = json_text(&new.metadata);
        let tenant_key = Tenant::new(tenant.clone())?;
        self.inner
            .writer
            .submit(move |conn, published| {
                let seq: Option<i64> = conn
                    .prepare_cached("UPDATE sessions SET last_event_id = last_event_id + 1 WHERE id = ?1 AND tenant_id = ?2 RETURNING last_event_id")
                    .and_then(|mut s| s.query_row(params![bid(new.session_id), tenant], |r| r.get(0)).optional())
                    .map_err(map_sqlite)?;
                let seq = seq.ok_or(StoreError::NotFound("session"))?;
                conn.prepare_cached(
                    "INSERT INTO events (session_id, seq, tenant_id, message_id, execution_id, event_type, content, metadata, created_at) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                )
                .and_then(|mut s| s.execute(params![bid(new.session_id), seq, tenant, opt_bid(new.message_id), opt_bid(new.execution_id), new.event_type.as_str(), new.content, metadata, now.0]))
                .map_err(map_sqlite)?;
                let event = Event {
                    id: seq,
                    session_id: new.session_id,
                    message_id: new.message_id,
                    execution_id: new.execution_id,
                    event_type: new.event_type,
                    content: new.content,
                    metadata: new.metadata,
                    timestamp: now,
                };
                published.push((tenant_key, Arc::new(event.clone())));
                Ok(event)
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
        let tenant = tenant.as_str().to_string();
        self.read(move |conn, _| {
            let sql = format!("SELECT {} FROM events WHERE session_id = ?1 AND tenant_id = ?2 AND seq > ?3 ORDER BY seq LIMIT ?4", rows::EVENT_COLS);
            conn.prepare_cached(&sql)
                .and_then(|mut s| s.query_map(params![bid(session_id), tenant, after, limit], rows::event)?.collect())
                .map_err(map_sqlite)
        })
        .await
    }

    fn subscribe(&self, tenant: &Tenant, session_id: Id) -> broadcast::Receiver<Arc<Event>> {
        self.inner.hub.subscribe_scoped(tenant, session_id)
    }

    fn publish_live(&self, tenant: &Tenant, event: Event) {
        // Live events carry no row to check on commit: drop one aimed at a session the
        // tenant does not own, so nobody can inject into another tenant's stream.
        if self.inner.owns_session(tenant, event.session_id) {
            self.inner.hub.publish_scoped(tenant, Arc::new(event));
        } else {
            tracing::debug!(session = %event.session_id, "dropping a live event for a session of another tenant");
        }
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
        self.write(move |conn, _| import::write(conn, plan)).await
    }

    async fn mark_abandoned(&self, cutoff: Timestamp, dry: bool) -> Result<u64> {
        const STALE: &str = "status = 'active' AND updated_at < ?1";
        if dry {
            return self
                .read(move |conn, _| {
                    count(
                        conn,
                        &format!("SELECT COUNT(*) FROM sessions WHERE {STALE}"),
                        params![cutoff.0],
                    )
                })
                .await;
        }
        let now = self.now();
        self.write(move |conn, _| {
            conn.prepare_cached(&format!(
                "UPDATE executions SET status = 'cancelled', completed_at = ?2, updated_at = ?2, lease_owner = NULL, lease_expires_at = NULL \
                 WHERE status = 'paused' AND session_id IN (SELECT id FROM sessions WHERE {STALE})"
            ))
            .and_then(|mut s| s.execute(params![cutoff.0, now.0]))
            .map_err(map_sqlite)?;
            conn.prepare_cached(&format!("UPDATE sessions SET status = 'abandoned', updated_at = ?2 WHERE {STALE}"))
                .and_then(|mut s| s.execute(params![cutoff.0, now.0]))
                .map(|n| n as u64)
                .map_err(map_sqlite)
        })
        .await
    }

    async fn cleanup_old_sessions(
        &self,
        now: Timestamp,
        policy: RetentionPolicy,
        dry: bool,
    ) -> Result<CleanupReport> {
        let [(_, completed), (_, abandoned), (_, deleted)] = expiry_rules(now, policy);
        let cutoffs = [completed.0, abandoned.0, deleted.0];
        if dry {
            return self
                .read(move |conn, _| {
                    let expired = format!("SELECT id FROM sessions WHERE {EXPIRED_WHERE}");
                    let in_executions = format!("SELECT id FROM executions WHERE session_id IN ({expired})");
                    Ok(CleanupReport {
                        sessions: count(conn, &format!("SELECT COUNT(*) FROM sessions WHERE {EXPIRED_WHERE}"), cutoffs)?,
                        messages: count(conn, &format!("SELECT COUNT(*) FROM messages WHERE session_id IN ({expired})"), cutoffs)?,
                        executions: count(conn, &format!("SELECT COUNT(*) FROM executions WHERE session_id IN ({expired})"), cutoffs)?,
                        steps: count(conn, &format!("SELECT COUNT(*) FROM steps WHERE execution_id IN ({in_executions})"), cutoffs)?,
                        snapshots: count(conn, &format!("SELECT COUNT(*) FROM snapshots WHERE execution_id IN ({in_executions})"), cutoffs)?,
                        events: count(conn, &format!("SELECT COUNT(*) FROM events WHERE session_id IN ({expired})"), cutoffs)?,
                    })
                })
                .await;
        }
        let mut total = CleanupReport::default();
        // Small batches, each its own transaction, so the writer never holds the lock long.
        loop {
            let batch = self
                .write(move |conn, _| {
                    let ids: Vec<rows::Bid> = conn
                        .prepare_cached(&format!(
                            "SELECT id FROM sessions WHERE {EXPIRED_WHERE} LIMIT {BATCH_DELETE}"
                        ))
                        .and_then(|mut s| s.query_map(cutoffs, |r| r.get(0))?.collect())
                        .map_err(map_sqlite)?;
                    let mut report = CleanupReport::default();
                    for id in &ids {
                        delete_session_rows(conn, id.0, &mut report)?;
                    }
                    Ok(report)
                })
                .await?;
            if batch.sessions == 0 {
                break;
            }
            total.sessions += batch.sessions;
            total.messages += batch.messages;
            total.executions += batch.executions;
            total.steps += batch.steps;
            total.snapshots += batch.snapshots;
            total.events += batch.events;
        }
        if total.sessions > 0 {
            tracing::info!(?total, "retention cleanup deleted expired sessions");
        }
        Ok(total)
    }

    async fn put_checkpoint(&self, tenant: &Tenant, new: NewCheckpoint) -> Result<CheckpointPut> {
        self.checkpoint_put(tenant, new).await
    }

    async fn put_checkpoint_writes(&self, tenant: &Tenant, writes: PutWrites) -> Result<Id> {
        self.checkpoint_put_writes(tenant, writes).await
    }

    async fn get_checkpoint_since(
        &self,
        tenant: &Tenant,
        thread_id: &str,
        checkpoint_ns: &str,
        checkpoint_id: Option<&str>,
        have: &std::collections::BTreeMap<String, String>,
    ) -> Result<Option<CheckpointRecord>> {
        self.checkpoint_get(tenant, thread_id, checkpoint_ns, checkpoint_id, have)
            .await
    }

    async fn list_checkpoints(
        &self,
        tenant: &Tenant,
        query: CheckpointQuery,
    ) -> Result<Page<CheckpointRecord>> {
        self.checkpoint_list(tenant, query).await
    }

    async fn get_thread(&self, tenant: &Tenant, thread_id: &str) -> Result<Option<ThreadInfo>> {
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
    ) -> Result<Option<ThreadInfo>> {
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
        strategy: PruneStrategy,
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
        let key_hash = key_hash.to_string();
        self.write(move |conn, _| {
            let r = &record;
            conn.prepare_cached("INSERT INTO api_keys (id, tenant_id, user_id, name, key_hash, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)")
                .and_then(|mut s| s.execute(params![bid(r.id), r.tenant_id, r.user_id, r.name, key_hash, r.created_at.0]))
                .map_err(|e| if is_unique_violation(&e) { StoreError::Conflict("that key already exists".into()) } else { map_sqlite(e) })?;
            Ok(record)
        })
        .await
    }

    async fn find_api_key(&self, key_hash: &str) -> Result<Option<ApiKeyRecord>> {
        let key_hash = key_hash.to_string();
        self.read(move |conn, _| {
            conn.prepare_cached("SELECT id, name, tenant_id, user_id, created_at, revoked_at FROM api_keys WHERE key_hash = ?1 AND revoked_at IS NULL")
                .and_then(|mut s| s.query_row(params![key_hash], rows::api_key).optional())
                .map_err(map_sqlite)
        })
        .await
    }

    async fn list_api_keys(&self) -> Result<Vec<ApiKeyRecord>> {
        self.read(|conn, _| {
            conn.prepare_cached("SELECT id, name, tenant_id, user_id, created_at, revoked_at FROM api_keys ORDER BY created_at, id")
                .and_then(|mut s| s.query_map([], rows::api_key)?.collect())
                .map_err(map_sqlite)
        })
        .await
    }

    async fn revoke_api_key(&self, id: Id) -> Result<bool> {
        let now = self.now();
        self.write(move |conn, _| {
            conn.prepare_cached(
                "UPDATE api_keys SET revoked_at = COALESCE(revoked_at, ?1) WHERE id = ?2",
            )
            .and_then(|mut s| s.execute(params![now.0, bid(id)]))
            .map(|n| n > 0)
            .map_err(map_sqlite)
        })
        .await
    }

    async fn count_active_api_keys(&self) -> Result<u64> {
        self.read(|conn, _| {
            count(
                conn,
                "SELECT COUNT(*) FROM api_keys WHERE revoked_at IS NULL",
                [],
            )
        })
        .await
    }

    async fn flush(&self) -> Result<()> {
        self.write(|_, _| Ok(())).await
    }

    async fn ping(&self) -> Result<()> {
        if !self.inner.writer.writable.load(Ordering::Relaxed) {
            return Err(StoreError::StorageFull(format!(
                "the last write to {} failed because the disk is full",
                self.inner.path.display()
            )));
        }
        self.read(|conn, _| count(conn, "SELECT 1", []).map(|_| ()))
            .await
    }

    async fn stats(&self) -> Result<StoreStats> {
        let base = self.inner.path.as_os_str().to_owned();
        let size = |suffix: &str| {
            let mut p = base.clone();
            p.push(suffix);
            std::fs::metadata(PathBuf::from(p))
                .map(|m| m.len())
                .unwrap_or(0)
        };
        Ok(StoreStats {
            bytes: size("") + size("-wal"),
            queue_depth: self.inner.writer.depth(),
            decode_errors: self.inner.decode_errors.load(Ordering::Relaxed),
            save_errors: self.inner.writer.save_errors.load(Ordering::Relaxed),
        })
    }

    async fn count_by_status(&self) -> Result<StatusCounts> {
        self.read(|conn, _| {
            let grouped = |sql: &str| -> Result<Vec<(String, u64)>> {
                conn.prepare_cached(sql)
                    .and_then(|mut s| {
                        s.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))?
                            .map(|row| row.map(|(status, n)| (status, n.max(0) as u64)))
                            .collect()
                    })
                    .map_err(map_sqlite)
            };
            let sessions = grouped("SELECT status, COUNT(*) FROM sessions GROUP BY status")?;
            let executions = grouped("SELECT status, COUNT(*) FROM executions GROUP BY status")?;
            Ok(StatusCounts {
                sessions: sessions
                    .into_iter()
                    .filter_map(|(s, n)| SessionStatus::parse(&s).map(|s| (s, n)))
                    .collect(),
                executions: executions
                    .into_iter()
                    .filter_map(|(s, n)| ExecutionStatus::parse(&s).map(|s| (s, n)))
                    .collect(),
            })
        })
        .await
    }

    async fn try_retention_lock(&self) -> Result<Option<RetentionLock>> {
        // One writer per database file: passes from several processes take turns on the
        // write lock batch by batch, and each batch re-selects what is still expired.
        Ok(Some(RetentionLock::local()))
    }

    fn backend_name(&self) -> &'static str {
        "sqlite"
    }
}

impl SqliteStore {
    /// Folds the WAL into the database file (for size measurements and backups).
    pub async fn checkpoint(&self) -> Result<()> {
        self.flush().await?;
        self.read(|conn, _| {
            conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE);")
                .map_err(map_sqlite)
        })
        .await
    }
}
