//! Column <-> domain conversions.

use rusqlite::Row;
use rusqlite::types::{FromSql, FromSqlError, FromSqlResult, ToSql, ToSqlOutput, ValueRef};
use serde_json::Value;
use stepwise_core::{
    Execution, ExecutionStatus, Id, Message, Role, Session, SessionStatus, Snapshot, Timestamp,
    TokenUsage,
};

/// A UUID stored as its 16 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Bid(pub Id);

impl ToSql for Bid {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::Borrowed(ValueRef::Blob(self.0.as_bytes())))
    }
}

impl FromSql for Bid {
    fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
        let bytes = value.as_blob()?;
        Id::from_slice(bytes)
            .map(Bid)
            .map_err(|e| FromSqlError::Other(Box::new(e)))
    }
}

pub(crate) fn bid(id: Id) -> Bid {
    Bid(id)
}

pub(crate) fn opt_bid(id: Option<Id>) -> Option<Bid> {
    id.map(Bid)
}

fn id(row: &Row<'_>, col: &str) -> rusqlite::Result<Id> {
    Ok(row.get::<_, Bid>(col)?.0)
}

fn opt_id(row: &Row<'_>, col: &str) -> rusqlite::Result<Option<Id>> {
    Ok(row.get::<_, Option<Bid>>(col)?.map(|b| b.0))
}

fn ts(row: &Row<'_>, col: &str) -> rusqlite::Result<Timestamp> {
    Ok(Timestamp(row.get(col)?))
}

fn opt_ts(row: &Row<'_>, col: &str) -> rusqlite::Result<Option<Timestamp>> {
    Ok(row.get::<_, Option<i64>>(col)?.map(Timestamp))
}

/// A JSON column; a value that does not parse reads as `null` (it was validated on write).
fn json(row: &Row<'_>, col: &str) -> rusqlite::Result<Value> {
    let text: String = row.get(col)?;
    Ok(serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// A session's default agent as stored (`NULL` for none).
pub(crate) fn agent_text(agent: &Option<stepwise_core::SessionAgent>) -> Option<String> {
    agent
        .as_ref()
        .and_then(|agent| serde_json::to_string(agent).ok())
}

pub(crate) fn json_text(value: &Value) -> String {
    serde_json::to_string(value).unwrap_or_else(|_| "null".into())
}

fn u64_col(row: &Row<'_>, col: &str) -> rusqlite::Result<u64> {
    Ok(row.get::<_, i64>(col)?.max(0) as u64)
}

fn enum_col<T>(row: &Row<'_>, col: &str, parse: fn(&str) -> Option<T>) -> rusqlite::Result<T> {
    let text: String = row.get(col)?;
    parse(&text).ok_or_else(|| {
        rusqlite::Error::FromSqlConversionFailure(
            0,
            rusqlite::types::Type::Text,
            format!("unknown value {text:?} in {col}").into(),
        )
    })
}

/// The columns [`session`] reads, as a literal for `concat!` in statements.
macro_rules! session_cols {
    () => {
        "id, tenant_id, user_id, name, title, status, related_type, related_id, initial_context_url, metadata, agent, last_execution_id, last_snapshot_id, message_count, created_at, updated_at, (SELECT substr(m.content, 1, 200) FROM messages m WHERE m.session_id = sessions.id AND m.role = 'user' ORDER BY m.created_at, m.id LIMIT 1) AS first_message"
    };
}
pub(crate) use session_cols;

pub(crate) fn session(row: &Row<'_>) -> rusqlite::Result<Session> {
    Ok(Session {
        id: id(row, "id")?,
        tenant_id: row.get("tenant_id")?,
        user_id: row.get("user_id")?,
        name: row.get("name")?,
        title: row.get("title")?,
        status: enum_col(row, "status", SessionStatus::parse)?,
        related_type: row.get("related_type")?,
        related_id: row.get("related_id")?,
        initial_context_url: row.get("initial_context_url")?,
        metadata: json(row, "metadata")?,
        agent: row
            .get::<_, Option<String>>("agent")?
            .and_then(|text| serde_json::from_str(&text).ok()),
        last_execution_id: opt_id(row, "last_execution_id")?,
        last_snapshot_id: opt_id(row, "last_snapshot_id")?,
        message_count: u64_col(row, "message_count")?,
        first_message: row.get("first_message")?,
        created_at: ts(row, "created_at")?,
        updated_at: ts(row, "updated_at")?,
    })
}

/// The columns [`message`] reads, as a literal for `concat!` in statements.
macro_rules! message_cols {
    () => {
        "id, session_id, role, content, execution_id, related_type, related_id, context_url, metadata, created_at"
    };
}
pub(crate) use message_cols;

pub(crate) fn message(row: &Row<'_>) -> rusqlite::Result<Message> {
    Ok(Message {
        id: id(row, "id")?,
        session_id: id(row, "session_id")?,
        role: enum_col(row, "role", Role::parse)?,
        content: row.get("content")?,
        execution_id: opt_id(row, "execution_id")?,
        related_type: row.get("related_type")?,
        related_id: row.get("related_id")?,
        context_url: row.get("context_url")?,
        metadata: json(row, "metadata")?,
        created_at: ts(row, "created_at")?,
    })
}

/// The columns [`execution`] reads, as a literal for `concat!` in statements.
macro_rules! execution_cols {
    () => {
        "id, tenant_id, session_id, parent_execution_id, user_id, agent_type, agent_config, status, input, output, metadata, last_snapshot_id, step_count, tokens_input, tokens_output, tokens_total, error_message, attempts, lease_expires_at, started_at, completed_at, created_at, updated_at"
    };
}
pub(crate) use execution_cols;

pub(crate) fn execution(row: &Row<'_>) -> rusqlite::Result<Execution> {
    Ok(Execution {
        id: id(row, "id")?,
        session_id: opt_id(row, "session_id")?,
        parent_execution_id: opt_id(row, "parent_execution_id")?,
        tenant_id: row.get("tenant_id")?,
        user_id: row.get("user_id")?,
        agent_type: row.get("agent_type")?,
        agent_config: json(row, "agent_config")?,
        status: enum_col(row, "status", ExecutionStatus::parse)?,
        input: json(row, "input")?,
        output: json(row, "output")?,
        last_snapshot_id: opt_id(row, "last_snapshot_id")?,
        step_count: u64_col(row, "step_count")?,
        token_usage: TokenUsage {
            input: u64_col(row, "tokens_input")?,
            output: u64_col(row, "tokens_output")?,
            total: u64_col(row, "tokens_total")?,
        },
        metadata: json(row, "metadata")?,
        error_message: row.get("error_message")?,
        attempts: row.get::<_, i64>("attempts")?.clamp(0, i64::from(u32::MAX)) as u32,
        lease_expires_at: opt_ts(row, "lease_expires_at")?,
        started_at: opt_ts(row, "started_at")?,
        completed_at: opt_ts(row, "completed_at")?,
        created_at: ts(row, "created_at")?,
        updated_at: ts(row, "updated_at")?,
    })
}

/// The columns [`snapshot`] reads, as a literal for `concat!` in statements.
macro_rules! snapshot_cols {
    () => {
        "id, execution_id, parent_snapshot_id, agent_id, agent_name, step_number, is_final, debug_mode, created_at"
    };
}
pub(crate) use snapshot_cols;

/// A snapshot row without its state (`null`).
pub(crate) fn snapshot(row: &Row<'_>) -> rusqlite::Result<Snapshot> {
    Ok(Snapshot {
        id: id(row, "id")?,
        execution_id: id(row, "execution_id")?,
        parent_snapshot_id: opt_id(row, "parent_snapshot_id")?,
        agent_id: row.get("agent_id")?,
        agent_name: row.get("agent_name")?,
        step_number: row
            .get::<_, i64>("step_number")?
            .clamp(0, i64::from(u32::MAX)) as u32,
        is_final: row.get("is_final")?,
        debug_mode: row.get("debug_mode")?,
        state: Value::Null,
        created_at: ts(row, "created_at")?,
    })
}

/// The columns [`event`] reads, as a literal for `concat!` in statements.
macro_rules! event_cols {
    () => {
        "session_id, seq, message_id, execution_id, event_type, content, metadata, created_at"
    };
}
pub(crate) use event_cols;

pub(crate) fn event(row: &Row<'_>) -> rusqlite::Result<stepwise_core::Event> {
    Ok(stepwise_core::Event {
        id: row.get("seq")?,
        session_id: id(row, "session_id")?,
        message_id: opt_id(row, "message_id")?,
        execution_id: opt_id(row, "execution_id")?,
        event_type: enum_col(row, "event_type", stepwise_core::EventType::parse)?,
        content: row.get("content")?,
        metadata: json(row, "metadata")?,
        timestamp: ts(row, "created_at")?,
    })
}

pub(crate) fn api_key(row: &Row<'_>) -> rusqlite::Result<stepwise_store::ApiKeyRecord> {
    Ok(stepwise_store::ApiKeyRecord {
        id: id(row, "id")?,
        name: row.get("name")?,
        tenant_id: row.get("tenant_id")?,
        user_id: row.get("user_id")?,
        role: role(row)?,
        created_at: ts(row, "created_at")?,
        revoked_at: opt_ts(row, "revoked_at")?,
    })
}

/// A key's `role`; a value this version does not know reads as the least privileged.
fn role(row: &Row<'_>) -> rusqlite::Result<stepwise_store::AccessRole> {
    let text: String = row.get("role")?;
    Ok(stepwise_store::AccessRole::parse(&text).unwrap_or(stepwise_store::AccessRole::Worker))
}

pub(crate) fn signing_key(row: &Row<'_>) -> rusqlite::Result<stepwise_store::SigningKey> {
    Ok(stepwise_store::SigningKey {
        id: id(row, "id")?,
        secret: row.get("secret")?,
        created_at: ts(row, "created_at")?,
    })
}
