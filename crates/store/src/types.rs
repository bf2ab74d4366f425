//! Inputs and outputs of the storage calls.

use serde_json::Value;
use stepwise_core::{
    ExecutionStatus, Id, Role, Session, SessionStatus, Step, StepBody, StepKind, Timestamp,
};

use crate::error::{Result, StoreError};

/// The tenant every storage call is scoped to. Never empty: there is no wildcard tenant.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Tenant(String);

pub const MAX_TENANT_LEN: usize = 128;

impl Tenant {
    pub fn new(id: impl Into<String>) -> Result<Self> {
        let id = id.into();
        if id.trim().is_empty() || id.len() > MAX_TENANT_LEN || id.chars().any(char::is_control) {
            return Err(StoreError::InvalidTenant);
        }
        Ok(Tenant(id))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for Tenant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

#[derive(Debug, Clone, Default)]
pub struct NewSession {
    pub user_id: String,
    pub name: Option<String>,
    pub title: Option<String>,
    pub related_type: Option<String>,
    pub related_id: Option<String>,
    pub initial_context_url: Option<String>,
    pub metadata: Value,
}

/// A partial update; `None` leaves a field as it is.
#[derive(Debug, Clone, Default)]
pub struct SessionPatch {
    pub title: Option<String>,
    pub name: Option<String>,
    pub status: Option<SessionStatus>,
    pub metadata: Option<Value>,
    /// `Some(None)` clears the session's default agent.
    pub agent: Option<Option<stepwise_core::SessionAgent>>,
}

#[derive(Debug, Clone, Default)]
pub struct SessionFilter {
    /// `None`: every status but `deleted`.
    pub statuses: Option<Vec<SessionStatus>>,
    pub related_type: Option<String>,
    pub related_id: Option<String>,
    pub user_id: Option<String>,
    /// Top-level metadata keys and the values they must hold (all of them): a string equal
    /// to the value, or a number or boolean whose JSON text is it.
    pub metadata: Vec<(String, String)>,
}

/// Whether a top-level metadata value matches a filter's text (see
/// [`SessionFilter::metadata`]).
pub fn metadata_value_matches(value: Option<&Value>, text: &str) -> bool {
    match value {
        Some(Value::String(s)) => s == text,
        Some(Value::Number(n)) => n.to_string() == text,
        Some(Value::Bool(b)) => {
            if *b {
                text == "true"
            } else {
                text == "false"
            }
        }
        _ => false,
    }
}

impl SessionFilter {
    /// Whether a session passes the filter (what `list_sessions` applies in its query).
    pub fn matches(&self, session: &Session) -> bool {
        let status_ok = match &self.statuses {
            Some(statuses) if !statuses.is_empty() => statuses.contains(&session.status),
            _ => session.status != SessionStatus::Deleted,
        };
        status_ok
            && self
                .related_type
                .as_ref()
                .is_none_or(|t| session.related_type.as_ref() == Some(t))
            && self
                .related_id
                .as_ref()
                .is_none_or(|r| session.related_id.as_ref() == Some(r))
            && self.user_id.as_ref().is_none_or(|u| &session.user_id == u)
            && self
                .metadata
                .iter()
                .all(|(key, text)| metadata_value_matches(session.metadata.get(key), text))
    }
}

pub const DEFAULT_PAGE_LIMIT: u32 = 50;
pub const MAX_PAGE_LIMIT: u32 = 500;

#[derive(Debug, Clone)]
pub struct PageRequest {
    pub limit: u32,
    pub cursor: Option<String>,
}

impl Default for PageRequest {
    fn default() -> Self {
        PageRequest {
            limit: DEFAULT_PAGE_LIMIT,
            cursor: None,
        }
    }
}

impl PageRequest {
    pub fn first(limit: u32) -> Self {
        PageRequest {
            limit,
            cursor: None,
        }
    }

    /// The limit clamped to 1..=500 (the HTTP layer rejects values outside it first).
    pub fn limit(&self) -> u32 {
        self.limit.clamp(1, MAX_PAGE_LIMIT)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Page<T> {
    pub items: Vec<T>,
    pub next_cursor: Option<String>,
}

/// A keyset position `(time, id)` encoded as an opaque string.
pub mod cursor {
    use super::*;

    pub fn encode(at: Timestamp, id: Id) -> String {
        let raw = format!("{}:{}", at.as_micros(), id.simple());
        raw.bytes().map(|b| format!("{b:02x}")).collect()
    }

    pub fn decode(cursor: &str) -> Result<(Timestamp, Id)> {
        let bad = || StoreError::invalid("cursor", "the cursor is not one this server issued");
        if !cursor.len().is_multiple_of(2) || cursor.len() > 200 {
            return Err(bad());
        }
        let bytes: Option<Vec<u8>> = (0..cursor.len())
            .step_by(2)
            .map(|i| {
                cursor
                    .get(i..i + 2)
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
            })
            .collect();
        let text = String::from_utf8(bytes.ok_or_else(bad)?).map_err(|_| bad())?;
        let (at, id) = text.split_once(':').ok_or_else(bad)?;
        let at = at.parse::<i64>().map_err(|_| bad())?;
        let id = stepwise_core::parse_id(id).ok_or_else(bad)?;
        Ok((Timestamp(at), id))
    }
}

#[derive(Debug, Clone)]
pub struct NewMessage {
    pub session_id: Id,
    pub role: Role,
    pub content: String,
    pub execution_id: Option<Id>,
    pub related_type: Option<String>,
    pub related_id: Option<String>,
    pub context_url: Option<String>,
    pub metadata: Value,
}

impl NewMessage {
    pub fn new(session_id: Id, role: Role, content: impl Into<String>) -> Self {
        NewMessage {
            session_id,
            role,
            content: content.into(),
            execution_id: None,
            related_type: None,
            related_id: None,
            context_url: None,
            metadata: Value::Null,
        }
    }

    pub fn for_execution(mut self, execution_id: Id) -> Self {
        self.execution_id = Some(execution_id);
        self
    }
}

#[derive(Debug, Clone, Default)]
pub struct MessageQuery {
    /// Only messages after this one (by server time, then id).
    pub after: Option<Id>,
    pub roles: Option<Vec<Role>>,
    pub limit: Option<u32>,
}

#[derive(Debug, Clone)]
pub struct NewExecution {
    pub session_id: Option<Id>,
    pub parent_execution_id: Option<Id>,
    pub user_id: String,
    pub agent_type: String,
    pub agent_config: Value,
    pub input: Value,
    pub metadata: Value,
    /// `pending` for the queue; `running` for external agents and inline subagents.
    pub status: ExecutionStatus,
    /// A running execution held under a lease from its start (an external agent's
    /// recorder): it runs out unless renewed, and the server's workers then fail it.
    pub lease: Option<NewLease>,
}

/// What queueing a new root execution does when the session has one queued or running
/// already (a `paused` one does not count: the next message is its answer).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IfBusy {
    /// Queue it behind them.
    #[default]
    Queue,
    /// Write nothing and answer [`crate::StoreError::Busy`]: the check and the write are one
    /// step, so of two such writes to an idle session one is refused.
    Refuse,
}

/// The lease a new running execution starts under.
#[derive(Debug, Clone)]
pub struct NewLease {
    /// The lease token (its owner), renewed with it.
    pub owner: String,
    /// How long it holds without a renewal.
    pub duration: std::time::Duration,
}

/// A change of an execution's status and the fields that go with it.
#[derive(Debug, Clone)]
pub enum Transition {
    Pause {
        question: String,
    },
    /// A paused execution gets the user's answer and goes back to the queue.
    Resume {
        answer: Value,
    },
    Complete {
        output: Value,
    },
    Fail {
        error_message: String,
    },
    Cancel,
}

impl Transition {
    pub fn target(&self) -> ExecutionStatus {
        match self {
            Transition::Pause { .. } => ExecutionStatus::Paused,
            Transition::Resume { .. } => ExecutionStatus::Pending,
            Transition::Complete { .. } => ExecutionStatus::Completed,
            Transition::Fail { .. } => ExecutionStatus::Failed,
            Transition::Cancel => ExecutionStatus::Cancelled,
        }
    }
}

/// The end of a run, written with its move by [`crate::Store::queue_ending`]: the
/// answer (with its `message.created` event), the final snapshot, the move and the
/// execution's event.
#[derive(Debug, Clone)]
pub struct Ending {
    /// The assistant's message to the session.
    pub answer: Option<NewMessage>,
    /// The snapshot the run leaves (final unless it paused).
    pub snapshot: Option<NewSnapshot>,
    pub transition: Transition,
    /// The execution's event (`execution.completed`...), of its session.
    pub event: Option<NewEvent>,
}

/// Which executions a claim may take.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ClaimFilter {
    /// Only executions of these agent types (`None`: any type).
    pub agent_types: Option<Vec<String>>,
    /// Only this tenant's executions (`None`: every tenant, as the server's own workers).
    pub tenant: Option<String>,
}

impl ClaimFilter {
    /// Any execution of any tenant.
    pub fn any() -> Self {
        ClaimFilter::default()
    }

    /// Whether an execution of this tenant and agent type may be claimed.
    pub fn allows(&self, tenant: &str, agent_type: &str) -> bool {
        self.tenant.as_deref().is_none_or(|t| t == tenant)
            && self
                .agent_types
                .as_ref()
                .is_none_or(|types| types.iter().any(|t| t == agent_type))
    }

    /// The agent types as a JSON array (for SQL `json_each`), `None` for any type.
    pub fn agent_types_json(&self) -> Option<String> {
        self.agent_types
            .as_ref()
            .map(|types| serde_json::to_string(types).unwrap_or_else(|_| "[]".into()))
    }
}

/// A worker process seen by the server: what it runs and when it last called.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerSeen {
    pub worker_id: String,
    /// The agent types it announced: `[{type, description, config_schema}]`.
    pub agents: Value,
    pub last_seen_at: Timestamp,
}

/// An execution handed to a worker, with what it needs to continue.
#[derive(Debug, Clone)]
pub struct Claim {
    pub execution: stepwise_core::Execution,
    pub tenant: Tenant,
    /// The user's answer when this claim resumes a paused execution.
    pub resume_answer: Option<Value>,
}

#[derive(Debug, Clone)]
pub struct NewStep {
    pub execution_id: Id,
    pub step_number: u32,
    pub kind: StepKind,
    pub body: StepBody,
}

/// What an append did: `created` is false when the same step was already stored.
#[derive(Debug, Clone, PartialEq)]
pub struct StepAppend {
    pub step: Step,
    pub created: bool,
}

/// Rows read back, with the number of stored records that could not be decoded and
/// were skipped (logged and counted, never an error).
#[derive(Debug, Clone, PartialEq)]
pub struct Loaded<T> {
    pub items: Vec<T>,
    pub skipped: u64,
}

#[derive(Debug, Clone, Default)]
pub struct NewSnapshot {
    pub execution_id: Id,
    pub parent_snapshot_id: Option<Id>,
    pub agent_id: Option<String>,
    pub agent_name: Option<String>,
    pub step_number: u32,
    pub is_final: bool,
    pub debug_mode: bool,
    pub state: Value,
    /// The execution keeps this snapshot alone: its earlier snapshots are deleted in the
    /// same write (a state that is saved over and over stays one row).
    pub replace: bool,
}

#[derive(Debug, Clone)]
pub struct NewEvent {
    pub session_id: Id,
    pub message_id: Option<Id>,
    pub execution_id: Option<Id>,
    pub event_type: stepwise_core::EventType,
    pub content: String,
    pub metadata: Value,
}

impl NewEvent {
    /// The event as stored: with its id in the session and the time it was written.
    pub fn into_event(self, id: i64, timestamp: stepwise_core::Timestamp) -> stepwise_core::Event {
        stepwise_core::Event {
            id,
            session_id: self.session_id,
            message_id: self.message_id,
            execution_id: self.execution_id,
            event_type: self.event_type,
            content: self.content,
            metadata: self.metadata,
            timestamp,
        }
    }
}

/// A tenant's own retention (`PUT /v1/retention`): each day count it gives overrides the
/// server's for that tenant's sessions; one it leaves out keeps the server's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RetentionOverride {
    pub completed_days: Option<u32>,
    pub abandoned_days: Option<u32>,
    pub deleted_days: Option<u32>,
    pub mark_abandoned_days: Option<u32>,
}

impl RetentionOverride {
    /// The server's policy with this tenant's day counts in place.
    pub fn over(&self, base: RetentionPolicy) -> RetentionPolicy {
        RetentionPolicy {
            abandon_after_days: self.mark_abandoned_days.unwrap_or(base.abandon_after_days),
            completed_days: self.completed_days.unwrap_or(base.completed_days),
            abandoned_days: self.abandoned_days.unwrap_or(base.abandoned_days),
            deleted_days: self.deleted_days.unwrap_or(base.deleted_days),
        }
    }
}

/// The tenants a retention pass covers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum TenantScope {
    #[default]
    All,
    /// This tenant alone (one with a retention of its own).
    Only(String),
    /// Every tenant but these (those with a retention of their own).
    AllBut(Vec<String>),
}

impl TenantScope {
    /// The SQL condition (` AND tenant_id ...`, empty for every tenant) that keeps a
    /// statement on `sessions` to the scope's tenants. Tenant ids are checked names; each is
    /// quoted as an SQL literal all the same (SQLite and PostgreSQL quote alike).
    pub fn sql_condition(&self) -> String {
        let quote = |t: &str| format!("'{}'", t.replace('\'', "''"));
        match self {
            TenantScope::All => String::new(),
            TenantScope::Only(tenant) => format!(" AND tenant_id = {}", quote(tenant)),
            TenantScope::AllBut(others) if others.is_empty() => String::new(),
            TenantScope::AllBut(others) => format!(
                " AND tenant_id NOT IN ({})",
                others
                    .iter()
                    .map(|t| quote(t))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }

    /// `sql` with its one `{}` replaced by [`Self::sql_condition`].
    pub fn scoped(&self, sql: &str) -> String {
        sql.replacen("{}", &self.sql_condition(), 1)
    }

    /// Whether the pass covers this tenant's sessions.
    pub fn covers(&self, tenant: &str) -> bool {
        match self {
            TenantScope::All => true,
            TenantScope::Only(only) => only == tenant,
            TenantScope::AllBut(others) => !others.iter().any(|o| o == tenant),
        }
    }
}

/// Seed 003's retention rules; every number configurable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetentionPolicy {
    pub abandon_after_days: u32,
    pub completed_days: u32,
    pub abandoned_days: u32,
    pub deleted_days: u32,
}

impl Default for RetentionPolicy {
    fn default() -> Self {
        RetentionPolicy {
            abandon_after_days: 30,
            completed_days: 90,
            abandoned_days: 30,
            deleted_days: 30,
        }
    }
}

/// What one cleanup pass deleted (or, dry, would delete).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct CleanupReport {
    pub sessions: u64,
    pub messages: u64,
    pub executions: u64,
    pub steps: u64,
    pub snapshots: u64,
    pub events: u64,
}

/// What a credential may do (`docs/security.md`): `admin` everything in its tenant, `user`
/// only its own sessions and what is under them, `worker` only claims and the executions
/// it holds a lease on.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum AccessRole {
    #[default]
    Admin,
    User,
    Worker,
}

impl AccessRole {
    pub const ALL: [AccessRole; 3] = [AccessRole::Admin, AccessRole::User, AccessRole::Worker];

    pub fn as_str(self) -> &'static str {
        match self {
            AccessRole::Admin => "admin",
            AccessRole::User => "user",
            AccessRole::Worker => "worker",
        }
    }

    /// `admin`, `user` or `worker`; `None` for anything else.
    pub fn parse(text: &str) -> Option<AccessRole> {
        AccessRole::ALL.into_iter().find(|r| r.as_str() == text)
    }
}

impl std::fmt::Display for AccessRole {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ApiKeyRecord {
    pub id: Id,
    pub name: Option<String>,
    pub tenant_id: String,
    pub user_id: String,
    pub role: AccessRole,
    pub created_at: Timestamp,
    pub revoked_at: Option<Timestamp>,
}

/// A key the deployment signs its own tokens with (`POST /v1/tokens`): shared by every
/// node through the store. The newest signs; every one verifies until it is removed.
#[derive(Clone, PartialEq)]
pub struct SigningKey {
    pub id: Id,
    /// The HMAC secret (text, at least 32 bytes).
    pub secret: String,
    pub created_at: Timestamp,
}

impl std::fmt::Debug for SigningKey {
    /// Never prints the secret.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningKey")
            .field("id", &self.id)
            .field("created_at", &self.created_at)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct StoreStats {
    pub bytes: u64,
    /// Writes waiting in the save queue (not executions waiting to run).
    pub queue_depth: u64,
    pub decode_errors: u64,
    pub save_errors: u64,
}

/// How many sessions and executions are in each status, over every tenant (for metrics).
/// Statuses with no rows may be left out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StatusCounts {
    pub sessions: Vec<(SessionStatus, u64)>,
    pub executions: Vec<(ExecutionStatus, u64)>,
}

/// Held while this node runs a retention pass. On PostgreSQL it holds a session-level
/// advisory lock on a connection of its own, so only one node runs a pass at a time;
/// dropping it releases the lock. Single-process backends hand one out every time.
#[must_use = "the retention lock is released when this is dropped"]
pub struct RetentionLock {
    _held: Option<Box<dyn Send + Sync>>,
}

impl RetentionLock {
    /// A lock that holds nothing (backends with one process per database).
    pub fn local() -> Self {
        RetentionLock { _held: None }
    }

    /// A lock that holds `guard` until it is dropped.
    pub fn holding(guard: impl Send + Sync + 'static) -> Self {
        RetentionLock {
            _held: Some(Box::new(guard)),
        }
    }
}

impl std::fmt::Debug for RetentionLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RetentionLock")
    }
}
