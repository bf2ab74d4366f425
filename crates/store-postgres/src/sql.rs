//! Statements without session state: every statement is sent with its parameter types
//! (`query_typed`: one round trip, an unnamed statement), so nothing is prepared on the
//! connection and the store works behind a transaction-pooling proxy. Also the column to
//! domain conversions and the error mapping.

use serde_json::Value;
use stepwise_core::{
    Event, EventType, Execution, ExecutionStatus, Id, Message, Role, Session, SessionStatus,
    Snapshot, Timestamp, TokenUsage,
};
use stepwise_store::{ApiKeyRecord, StoreError};
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{FromSql, ToSql, Type};
use tokio_postgres::{GenericClient, Row};

/// A Rust value with the PostgreSQL type it is sent as.
pub(crate) trait Pg: ToSql + Sync {
    const TYPE: Type;
}

macro_rules! pg_type {
    ($($t:ty => $pg:ident),* $(,)?) => {
        $(impl Pg for $t { const TYPE: Type = Type::$pg; })*
    };
}

pg_type! {
    i64 => INT8,
    i32 => INT4,
    bool => BOOL,
    String => TEXT,
    &str => TEXT,
    Id => UUID,
    Vec<u8> => BYTEA,
    &[u8] => BYTEA,
    Vec<Id> => UUID_ARRAY,
    Vec<Option<Id>> => UUID_ARRAY,
    Vec<i64> => INT8_ARRAY,
    Vec<i32> => INT4_ARRAY,
    Vec<bool> => BOOL_ARRAY,
    Vec<String> => TEXT_ARRAY,
    Vec<Option<String>> => TEXT_ARRAY,
    Vec<Vec<u8>> => BYTEA_ARRAY,
}

impl<T: Pg> Pg for Option<T> {
    const TYPE: Type = T::TYPE;
}

impl<T: Pg> Pg for &T {
    const TYPE: Type = T::TYPE;
}

pub(crate) fn type_of<T: Pg>(_: &T) -> Type {
    T::TYPE
}

/// Typed parameters for `query_typed`: `args![a, b]`.
macro_rules! args {
    ($($v:expr),* $(,)?) => {
        &[$((&$v as &(dyn tokio_postgres::types::ToSql + Sync), $crate::sql::type_of(&$v))),*]
    };
}
pub(crate) use args;

type Param = (Box<dyn ToSql + Sync + Send>, Type);

/// Parameters built up with the statement text (for filters), numbered as pushed.
#[derive(Default)]
pub(crate) struct Params(Vec<Param>);

impl Params {
    /// Adds a parameter and returns its placeholder (`$n`).
    pub(crate) fn push<T: Pg + Send + 'static>(&mut self, value: T) -> String {
        self.0.push((Box::new(value), T::TYPE));
        format!("${}", self.0.len())
    }

    pub(crate) fn refs(&self) -> Vec<(&(dyn ToSql + Sync), Type)> {
        self.0
            .iter()
            .map(|(v, t)| (v.as_ref() as &(dyn ToSql + Sync), t.clone()))
            .collect()
    }
}

/// The driver's client under the pool's wrapper (its transactions are plain ones).
pub(crate) fn pg(client: &mut deadpool_postgres::Object) -> &mut tokio_postgres::Client {
    client
}

/// Runs a `SELECT COUNT(*) AS n ...` statement.
pub(crate) async fn count(
    c: &impl GenericClient,
    sql: &str,
    params: &[(&(dyn ToSql + Sync), Type)],
) -> Result<u64, StoreError> {
    let row = c.query_typed_one(sql, params).await.map_err(map_pg)?;
    Ok(get::<i64>(&row, "n")?.max(0) as u64)
}

/// Maps a database error to the store's kinds: unreachable or shut down is `Unavailable`,
/// bad input data is `Invalid`, everything else a backend error.
pub(crate) fn map_pg(e: tokio_postgres::Error) -> StoreError {
    if e.is_closed() {
        return StoreError::Unavailable(format!("the database connection closed: {e}"));
    }
    let Some(db) = e.as_db_error() else {
        return StoreError::Unavailable(e.to_string());
    };
    let code = db.code().code();
    if code == SqlState::DISK_FULL.code() {
        StoreError::StorageFull(db.message().to_string())
    } else if code.starts_with("08") || code.starts_with("57") || code.starts_with("53") {
        StoreError::Unavailable(db.message().to_string())
    } else if code.starts_with("22") {
        StoreError::Invalid {
            field: None,
            message: format!("the database refused the value: {}", db.message()),
        }
    } else {
        StoreError::Backend(format!("{} ({code})", db.message()))
    }
}

pub(crate) fn map_pool(e: deadpool_postgres::PoolError) -> StoreError {
    StoreError::Unavailable(format!("no database connection: {e}"))
}

pub(crate) fn is_unique_violation(e: &tokio_postgres::Error) -> bool {
    e.code() == Some(&SqlState::UNIQUE_VIOLATION)
}

/// A failure worth retrying the whole transaction for (another node held the rows).
pub(crate) fn is_retryable(e: &tokio_postgres::Error) -> bool {
    matches!(
        e.code(),
        Some(c) if *c == SqlState::T_R_DEADLOCK_DETECTED || *c == SqlState::T_R_SERIALIZATION_FAILURE
    )
}

pub(crate) fn json_text(value: &Value) -> String {
    serde_json::to_string(value).unwrap_or_else(|_| "null".into())
}

/// Text PostgreSQL cannot store (a NUL character) is bad input, said before queueing.
pub(crate) fn check_text(field: &'static str, text: &str) -> Result<(), StoreError> {
    if text.contains('\0') {
        return Err(StoreError::invalid(
            field,
            "text may not contain NUL characters",
        ));
    }
    Ok(())
}

pub(crate) fn get<'a, T: FromSql<'a>>(row: &'a Row, col: &str) -> Result<T, StoreError> {
    row.try_get(col)
        .map_err(|e| StoreError::Backend(format!("reading column {col}: {e}")))
}

fn ts(row: &Row, col: &str) -> Result<Timestamp, StoreError> {
    Ok(Timestamp(get(row, col)?))
}

fn opt_ts(row: &Row, col: &str) -> Result<Option<Timestamp>, StoreError> {
    Ok(get::<Option<i64>>(row, col)?.map(Timestamp))
}

/// A JSON column; a value that does not parse reads as `null` (it was validated on write).
fn json(row: &Row, col: &str) -> Result<Value, StoreError> {
    let text: &str = get(row, col)?;
    Ok(serde_json::from_str(text).unwrap_or(Value::Null))
}

/// A session's default agent as stored (`NULL` for none).
pub(crate) fn agent_text(agent: &Option<stepwise_core::SessionAgent>) -> Option<String> {
    agent
        .as_ref()
        .and_then(|agent| serde_json::to_string(agent).ok())
}

fn u64_col(row: &Row, col: &str) -> Result<u64, StoreError> {
    Ok(get::<i64>(row, col)?.max(0) as u64)
}

fn u32_col(row: &Row, col: &str) -> Result<u32, StoreError> {
    Ok(get::<i32>(row, col)?.max(0) as u32)
}

fn enum_col<T>(row: &Row, col: &str, parse: fn(&str) -> Option<T>) -> Result<T, StoreError> {
    let text: &str = get(row, col)?;
    parse(text).ok_or_else(|| StoreError::Backend(format!("unknown value {text:?} in {col}")))
}

/// The columns [`session`] reads, as a literal for `concat!`.
macro_rules! session_cols {
    () => {
        "id, tenant_id, user_id, name, title, status, related_type, related_id, initial_context_url, metadata, agent, last_execution_id, last_snapshot_id, message_count, created_at, updated_at, (SELECT left(m.content, 200) FROM messages m WHERE m.session_id = sessions.id AND m.role = 'user' ORDER BY m.created_at, m.id LIMIT 1) AS first_message"
    };
}
pub(crate) use session_cols;

pub(crate) fn session(row: &Row) -> Result<Session, StoreError> {
    Ok(Session {
        id: get(row, "id")?,
        tenant_id: get(row, "tenant_id")?,
        user_id: get(row, "user_id")?,
        name: get(row, "name")?,
        title: get(row, "title")?,
        status: enum_col(row, "status", SessionStatus::parse)?,
        related_type: get(row, "related_type")?,
        related_id: get(row, "related_id")?,
        initial_context_url: get(row, "initial_context_url")?,
        metadata: json(row, "metadata")?,
        agent: get::<Option<String>>(row, "agent")?
            .and_then(|text| serde_json::from_str(&text).ok()),
        last_execution_id: get(row, "last_execution_id")?,
        last_snapshot_id: get(row, "last_snapshot_id")?,
        message_count: u64_col(row, "message_count")?,
        first_message: get(row, "first_message")?,
        created_at: ts(row, "created_at")?,
        updated_at: ts(row, "updated_at")?,
    })
}

/// The columns [`message`] reads, as a literal for `concat!`.
macro_rules! message_cols {
    () => {
        "id, session_id, role, content, execution_id, related_type, related_id, context_url, metadata, created_at"
    };
}
pub(crate) use message_cols;

pub(crate) fn message(row: &Row) -> Result<Message, StoreError> {
    Ok(Message {
        id: get(row, "id")?,
        session_id: get(row, "session_id")?,
        role: enum_col(row, "role", Role::parse)?,
        content: get(row, "content")?,
        execution_id: get(row, "execution_id")?,
        related_type: get(row, "related_type")?,
        related_id: get(row, "related_id")?,
        context_url: get(row, "context_url")?,
        metadata: json(row, "metadata")?,
        created_at: ts(row, "created_at")?,
    })
}

/// The columns [`execution`] reads, as a literal for `concat!`.
macro_rules! execution_cols {
    () => {
        "id, tenant_id, session_id, parent_execution_id, user_id, agent_type, agent_config, status, input, output, metadata, last_snapshot_id, step_count, tokens_input, tokens_output, tokens_total, error_message, attempts, lease_expires_at, started_at, completed_at, created_at, updated_at"
    };
}
pub(crate) use execution_cols;

pub(crate) fn execution(row: &Row) -> Result<Execution, StoreError> {
    Ok(Execution {
        id: get(row, "id")?,
        session_id: get(row, "session_id")?,
        parent_execution_id: get(row, "parent_execution_id")?,
        tenant_id: get(row, "tenant_id")?,
        user_id: get(row, "user_id")?,
        agent_type: get(row, "agent_type")?,
        agent_config: json(row, "agent_config")?,
        status: enum_col(row, "status", ExecutionStatus::parse)?,
        input: json(row, "input")?,
        output: json(row, "output")?,
        last_snapshot_id: get(row, "last_snapshot_id")?,
        step_count: u64_col(row, "step_count")?,
        token_usage: TokenUsage {
            input: u64_col(row, "tokens_input")?,
            output: u64_col(row, "tokens_output")?,
            total: u64_col(row, "tokens_total")?,
        },
        metadata: json(row, "metadata")?,
        error_message: get(row, "error_message")?,
        attempts: u32_col(row, "attempts")?,
        lease_expires_at: opt_ts(row, "lease_expires_at")?,
        started_at: opt_ts(row, "started_at")?,
        completed_at: opt_ts(row, "completed_at")?,
        created_at: ts(row, "created_at")?,
        updated_at: ts(row, "updated_at")?,
    })
}

/// The columns [`snapshot`] reads, as a literal for `concat!`.
macro_rules! snapshot_cols {
    () => {
        "id, execution_id, parent_snapshot_id, agent_id, agent_name, step_number, is_final, debug_mode, created_at"
    };
}
pub(crate) use snapshot_cols;

/// A snapshot row without its state (`null`).
pub(crate) fn snapshot(row: &Row) -> Result<Snapshot, StoreError> {
    Ok(Snapshot {
        id: get(row, "id")?,
        execution_id: get(row, "execution_id")?,
        parent_snapshot_id: get(row, "parent_snapshot_id")?,
        agent_id: get(row, "agent_id")?,
        agent_name: get(row, "agent_name")?,
        step_number: u32_col(row, "step_number")?,
        is_final: get(row, "is_final")?,
        debug_mode: get(row, "debug_mode")?,
        state: Value::Null,
        created_at: ts(row, "created_at")?,
    })
}

/// The columns [`event`] reads, as a literal for `concat!`.
macro_rules! event_cols {
    () => {
        "session_id, seq, message_id, execution_id, event_type, content, metadata, created_at"
    };
}
pub(crate) use event_cols;
pub(crate) const EVENT_COLS: &str = event_cols!();

pub(crate) fn event(row: &Row) -> Result<Event, StoreError> {
    Ok(Event {
        id: get(row, "seq")?,
        session_id: get(row, "session_id")?,
        message_id: get(row, "message_id")?,
        execution_id: get(row, "execution_id")?,
        event_type: enum_col(row, "event_type", EventType::parse)?,
        content: get(row, "content")?,
        metadata: json(row, "metadata")?,
        timestamp: ts(row, "created_at")?,
    })
}

/// The columns [`api_key`] reads, as a literal for `concat!`.
macro_rules! api_key_cols {
    () => {
        "id, name, tenant_id, user_id, role, created_at, revoked_at"
    };
}
pub(crate) use api_key_cols;

pub(crate) fn api_key(row: &Row) -> Result<ApiKeyRecord, StoreError> {
    Ok(ApiKeyRecord {
        id: get(row, "id")?,
        name: get(row, "name")?,
        tenant_id: get(row, "tenant_id")?,
        user_id: get(row, "user_id")?,
        // A role this version does not know reads as the narrowest one.
        role: stepwise_store::AccessRole::parse(&get::<String>(row, "role")?)
            .unwrap_or(stepwise_store::AccessRole::Worker),
        created_at: ts(row, "created_at")?,
        revoked_at: opt_ts(row, "revoked_at")?,
    })
}

pub(crate) fn signing_key(row: &Row) -> Result<stepwise_store::SigningKey, StoreError> {
    Ok(stepwise_store::SigningKey {
        id: get(row, "id")?,
        secret: get(row, "secret")?,
        created_at: ts(row, "created_at")?,
    })
}

/// The columns [`step_row`] reads, as a literal for `concat!`.
macro_rules! step_cols {
    () => {
        "s.id, s.execution_id, s.session_id, s.step_number, s.kind, s.created_at, s.payload"
    };
}
pub(crate) use step_cols;
pub(crate) const STEP_COLS: &str = step_cols!();

pub(crate) struct StepRow {
    pub id: Id,
    pub execution_id: Id,
    pub session_id: Option<Id>,
    pub step_number: u32,
    pub kind: stepwise_core::StepKind,
    pub created_at: Timestamp,
    pub payload: Vec<u8>,
}

pub(crate) fn step_row(row: &Row) -> Result<StepRow, StoreError> {
    let kind: &str = get(row, "kind")?;
    Ok(StepRow {
        id: get(row, "id")?,
        execution_id: get(row, "execution_id")?,
        session_id: get(row, "session_id")?,
        step_number: u32_col(row, "step_number")?,
        kind: stepwise_core::StepKind::parse(kind).unwrap_or(stepwise_core::StepKind::Action),
        created_at: ts(row, "created_at")?,
        payload: get(row, "payload")?,
    })
}

pub(crate) fn collect<T>(
    rows: &[Row],
    convert: fn(&Row) -> Result<T, StoreError>,
) -> Result<Vec<T>, StoreError> {
    rows.iter().map(convert).collect()
}
