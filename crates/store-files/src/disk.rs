//! The files: where each one lives, what is in it, how it is written (atomically) and
//! read back (leniently: a record that cannot be decoded is kept aside and counted).
//!
//! ```text
//! DIR/
//! ├── index.json            sessions of tenant `local`: name, description, times, counts
//! ├── alpha.json            one session document per session, named by the session's
//! ├── 0199…-….json          name, or by its id when it has none
//! ├── metadata.json         executions without a session, and the API keys (hashes only)
//! └── tenants/<tenant>/     the same layout for every other tenant
//! ```
//!
//! `metadata.json` and `index.json` use reserved names, so no session file can take
//! their place; names follow seed 004's rules, so no session file can leave its folder.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};
use stepwise_core::document::FORMAT_VERSION;
use stepwise_core::name::validate_name;
use stepwise_core::summary::MAX_REQUEST_CHARS;
use stepwise_core::{
    Event, EventType, Execution, Id, Message, Role, Session, SessionStatus, Snapshot, Step,
    Timestamp,
};
use stepwise_store::{AccessRole, ApiKeyRecord, SigningKey};

use crate::state::{Container, ExecEntry, KeyEntry, Lease, StoredStep};

pub const LOCAL_TENANT: &str = "local";
pub const INDEX_FILE: &str = "index.json";
pub const METADATA_FILE: &str = "metadata.json";
pub const TENANTS_DIR: &str = "tenants";
pub const LOCK_FILE: &str = ".lock";

/// The folder of a tenant's files: the root for `local` (the single user), else
/// `tenants/<tenant>` when the tenant id is itself a safe name, else `tenants/~<hash>`
/// (`~` never starts a valid name, so the two kinds cannot collide).
pub fn tenant_dir(root: &Path, tenant: &str) -> PathBuf {
    if tenant == LOCAL_TENANT {
        return root.to_path_buf();
    }
    root.join(TENANTS_DIR).join(tenant_dir_name(tenant))
}

pub fn tenant_dir_name(tenant: &str) -> String {
    if validate_name(tenant).is_ok() && tenant != LOCAL_TENANT {
        return tenant.to_string();
    }
    let digest = Sha256::digest(tenant.as_bytes());
    let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    format!("~{hex}")
}

/// The stem of a session's file: its name, or its id when it has none.
pub fn stem_of(session: &Session) -> String {
    match &session.name {
        Some(name) => name.clone(),
        None => session.id.to_string(),
    }
}

/// A session file's path. The stem is a validated name or an id; anything else would be
/// a bug, and is refused rather than joined onto the folder.
pub fn session_path(dir: &Path, stem: &str) -> Option<PathBuf> {
    let is_id = stepwise_core::parse_id(stem).is_some_and(|id| id.to_string() == stem);
    (is_id || validate_name(stem).is_ok()).then(|| dir.join(format!("{stem}.json")))
}

// --- what is in a file -----------------------------------------------------------------

/// An event as stored: the event with its id, without the session id (the file says it).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FileEvent {
    pub id: i64,
    pub message_id: Option<Id>,
    pub execution_id: Option<Id>,
    pub event_type: EventType,
    pub content: String,
    pub metadata: Value,
    pub timestamp: Timestamp,
}

/// What the queue needs of an execution beyond its public fields.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Runtime {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_owner: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_expires_at: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume_answer: Option<Value>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StoredKey {
    #[serde(flatten)]
    pub record: ApiKeyRecordFile,
    pub key_hash: String,
}

/// [`ApiKeyRecord`] as a file holds it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ApiKeyRecordFile {
    pub id: Id,
    pub name: Option<String>,
    pub tenant_id: String,
    pub user_id: String,
    /// Keys written before roles existed are admins of their tenant.
    #[serde(default)]
    pub role: AccessRole,
    pub created_at: Timestamp,
    pub revoked_at: Option<Timestamp>,
}

/// [`SigningKey`] as the root `metadata.json` holds it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SigningKeyFile {
    pub id: Id,
    pub secret: String,
    pub created_at: Timestamp,
}

/// What the root `metadata.json` holds besides its container: the API keys and the token
/// signing keys.
#[derive(Clone, Copy)]
pub struct RootKeys<'a> {
    pub api_keys: &'a [KeyEntry],
    pub signing_keys: &'a [SigningKey],
}

#[derive(Serialize)]
#[serde(untagged)]
enum StepOut<'a> {
    Decoded(&'a Step),
    Damaged(&'a Value),
}

/// A session document (readable by `parse_document` and so by any import) plus what the
/// store keeps beside it: the event log and the queue's bookkeeping.
#[derive(Serialize)]
struct FileOut<'a> {
    format_version: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    tenant_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    session: Option<&'a Session>,
    messages: &'a [Message],
    executions: Vec<&'a Execution>,
    steps: Vec<StepOut<'a>>,
    snapshots: &'a [Snapshot],
    events: Vec<FileEvent>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    runtime: BTreeMap<Id, Runtime>,
    #[serde(skip_serializing_if = "Option::is_none")]
    api_keys: Option<Vec<StoredKey>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    signing_keys: Option<Vec<SigningKeyFile>>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    damaged: &'a BTreeMap<String, Vec<Value>>,
}

/// The bytes of a container's file. `keys` only for the root `metadata.json`.
pub fn encode_container(
    tenant: &str,
    container: &Container,
    keys: Option<RootKeys<'_>>,
) -> serde_json::Result<Vec<u8>> {
    let mut runtime = BTreeMap::new();
    for e in &container.executions {
        if e.lease.is_some() || e.resume_answer.is_some() {
            runtime.insert(
                e.execution.id,
                Runtime {
                    lease_owner: e.lease.as_ref().map(|l| l.owner.clone()),
                    lease_expires_at: e.lease.as_ref().map(|l| l.expires_at),
                    resume_answer: e.resume_answer.clone(),
                },
            );
        }
    }
    let out = FileOut {
        format_version: FORMAT_VERSION,
        tenant_id: container.session.is_none().then_some(tenant),
        session: container.session.as_ref(),
        messages: &container.messages,
        executions: container.executions.iter().map(|e| &e.execution).collect(),
        steps: container
            .executions
            .iter()
            .flat_map(|e| e.steps.values())
            .map(|s| match s {
                StoredStep::Decoded(step) => StepOut::Decoded(step),
                StoredStep::Damaged(raw) => StepOut::Damaged(raw),
            })
            .collect(),
        snapshots: &container.snapshots,
        events: container
            .events
            .iter()
            .map(|e| FileEvent {
                id: e.id,
                message_id: e.message_id,
                execution_id: e.execution_id,
                event_type: e.event_type,
                content: e.content.clone(),
                metadata: e.metadata.clone(),
                timestamp: e.timestamp,
            })
            .collect(),
        runtime,
        signing_keys: keys.filter(|k| !k.signing_keys.is_empty()).map(|keys| {
            keys.signing_keys
                .iter()
                .map(|k| SigningKeyFile {
                    id: k.id,
                    secret: k.secret.clone(),
                    created_at: k.created_at,
                })
                .collect()
        }),
        api_keys: keys.map(|keys| {
            keys.api_keys
                .iter()
                .map(|k| StoredKey {
                    record: ApiKeyRecordFile {
                        id: k.record.id,
                        name: k.record.name.clone(),
                        tenant_id: k.record.tenant_id.clone(),
                        user_id: k.record.user_id.clone(),
                        role: k.record.role,
                        created_at: k.record.created_at,
                        revoked_at: k.record.revoked_at,
                    },
                    key_hash: k.hash.clone(),
                })
                .collect()
        }),
        damaged: &container.damaged,
    };
    let mut bytes = serde_json::to_vec_pretty(&out)?;
    bytes.push(b'\n');
    Ok(bytes)
}

#[derive(Deserialize)]
struct FileIn {
    format_version: u64,
    #[serde(default)]
    tenant_id: Option<String>,
    #[serde(default)]
    session: Option<Value>,
    #[serde(default)]
    messages: Vec<Value>,
    #[serde(default)]
    executions: Vec<Value>,
    #[serde(default)]
    steps: Vec<Value>,
    #[serde(default)]
    snapshots: Vec<Value>,
    #[serde(default)]
    events: Vec<Value>,
    #[serde(default)]
    runtime: BTreeMap<String, Value>,
    #[serde(default)]
    api_keys: Vec<Value>,
    #[serde(default)]
    signing_keys: Vec<Value>,
    #[serde(default)]
    damaged: BTreeMap<String, Vec<Value>>,
}

/// A file read back: its records, and how many could not be decoded.
pub struct Decoded {
    pub tenant_id: Option<String>,
    pub container: Container,
    pub api_keys: Vec<KeyEntry>,
    pub signing_keys: Vec<SigningKey>,
    pub damaged_records: u64,
}

/// Why a whole file was skipped.
#[derive(Debug, Clone, PartialEq)]
pub struct Unreadable(pub String);

/// Reads a container file. A record that cannot be decoded is kept aside (a step in
/// place, anything else under `damaged`) and counted; the file as a whole is refused
/// only when it is not JSON, is of a newer format, or (a session file) has no session.
pub fn decode_container(bytes: &[u8], expect_session: bool) -> Result<Decoded, Unreadable> {
    let file: FileIn = serde_json::from_slice(bytes).map_err(|e| Unreadable(e.to_string()))?;
    if file.format_version > u64::from(FORMAT_VERSION) {
        return Err(Unreadable(format!(
            "format_version {} is newer than this build reads ({FORMAT_VERSION})",
            file.format_version
        )));
    }
    let mut damaged = file.damaged;
    let mut count = 0u64;
    let mut put_aside = |kind: &str, raw: Value, count: &mut u64| {
        *count += 1;
        damaged.entry(kind.to_string()).or_default().push(raw);
    };
    let session = match file.session {
        Some(raw) => Some(
            Session::deserialize(&raw)
                .map_err(|e| Unreadable(format!("the session record cannot be read: {e}")))?,
        ),
        None if expect_session => return Err(Unreadable("the file has no session".into())),
        None => None,
    };
    let mut container = Container {
        session,
        ..Container::default()
    };
    for raw in file.messages {
        match Message::deserialize(&raw) {
            Ok(m) => container.messages.push(m),
            Err(_) => put_aside("messages", raw, &mut count),
        }
    }
    container.messages.sort_by_key(|x| (x.created_at, x.id));
    if let Some(session) = container.session.as_mut() {
        session.first_message = container
            .messages
            .iter()
            .find(|m| m.role == Role::User)
            .map(|m| crate::messages::first_message_of(&m.content));
    }
    for raw in file.executions {
        match Execution::deserialize(&raw) {
            Ok(mut execution) => {
                let runtime = file
                    .runtime
                    .get(&execution.id.to_string())
                    .and_then(|r| Runtime::deserialize(r).ok())
                    .unwrap_or_default();
                let lease = match (runtime.lease_owner, runtime.lease_expires_at) {
                    (Some(owner), Some(expires_at)) => Some(Lease { owner, expires_at }),
                    _ => None,
                };
                execution.lease_expires_at = lease.as_ref().map(|l| l.expires_at);
                container.executions.push(ExecEntry {
                    execution,
                    steps: BTreeMap::new(),
                    lease,
                    resume_answer: runtime.resume_answer,
                });
            }
            Err(_) => put_aside("executions", raw, &mut count),
        }
    }
    container.executions.sort_by(|a, b| {
        (a.execution.created_at, a.execution.id).cmp(&(b.execution.created_at, b.execution.id))
    });
    for raw in file.steps {
        match Step::deserialize(&raw) {
            Ok(step) => match container.exec_mut(step.execution_id) {
                Some(entry) => {
                    entry
                        .steps
                        .insert(step.step_number, StoredStep::Decoded(step));
                }
                None => put_aside("steps", raw, &mut count),
            },
            Err(_) => {
                // Still counted against its execution when it says which one it is.
                let exec = raw
                    .get("execution_id")
                    .and_then(Value::as_str)
                    .and_then(stepwise_core::parse_id);
                let number = raw
                    .get("step_number")
                    .and_then(Value::as_u64)
                    .and_then(|n| u32::try_from(n).ok());
                match (exec.and_then(|id| container.exec_mut(id)), number) {
                    (Some(entry), Some(n)) if !entry.steps.contains_key(&n) => {
                        count += 1;
                        entry.steps.insert(n, StoredStep::Damaged(raw));
                    }
                    _ => put_aside("steps", raw, &mut count),
                }
            }
        }
    }
    for raw in file.snapshots {
        match Snapshot::deserialize(&raw) {
            Ok(s) if container.exec(s.execution_id).is_some() => container.snapshots.push(s),
            _ => put_aside("snapshots", raw, &mut count),
        }
    }
    container.snapshots.sort_by_key(|x| (x.created_at, x.id));
    if let Some(session) = &container.session {
        for raw in file.events {
            match FileEvent::deserialize(&raw) {
                Ok(e) => container.events.push(Event {
                    id: e.id,
                    session_id: session.id,
                    message_id: e.message_id,
                    execution_id: e.execution_id,
                    event_type: e.event_type,
                    content: e.content,
                    metadata: e.metadata,
                    timestamp: e.timestamp,
                }),
                Err(_) => put_aside("events", raw, &mut count),
            }
        }
    }
    container.events.sort_by_key(|e| e.id);
    container.events.dedup_by_key(|e| e.id);
    container.last_event_id = container.events.last().map_or(0, |e| e.id);
    let mut api_keys = Vec::new();
    for raw in file.api_keys {
        match StoredKey::deserialize(&raw) {
            Ok(k) => api_keys.push(KeyEntry {
                record: ApiKeyRecord {
                    id: k.record.id,
                    name: k.record.name,
                    tenant_id: k.record.tenant_id,
                    user_id: k.record.user_id,
                    role: k.record.role,
                    created_at: k.record.created_at,
                    revoked_at: k.record.revoked_at,
                },
                hash: k.key_hash,
            }),
            Err(_) => put_aside("api_keys", raw, &mut count),
        }
    }
    let mut signing_keys = Vec::new();
    for raw in file.signing_keys {
        match SigningKeyFile::deserialize(&raw) {
            Ok(k) => signing_keys.push(SigningKey {
                id: k.id,
                secret: k.secret,
                created_at: k.created_at,
            }),
            Err(_) => put_aside("signing_keys", raw, &mut count),
        }
    }
    container.damaged = damaged;
    Ok(Decoded {
        tenant_id: file.tenant_id,
        container,
        api_keys,
        signing_keys,
        damaged_records: count,
    })
}

// --- index.json ------------------------------------------------------------------------

/// One line of `index.json` (seed 004's metadata index).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IndexEntry {
    pub name: Option<String>,
    pub id: Id,
    /// The session document's file name, next to `index.json`.
    pub file: String,
    /// The session's title.
    pub description: Option<String>,
    pub status: SessionStatus,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    pub message_count: u64,
    /// The first user message, cut to 200 characters.
    pub first_message: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IndexFile {
    pub format_version: u32,
    pub tenant_id: String,
    /// Newest `updated_at` first.
    pub sessions: Vec<IndexEntry>,
}

pub fn index_entry(container: &Container) -> Option<IndexEntry> {
    let session = container.session.as_ref()?;
    Some(IndexEntry {
        name: session.name.clone(),
        id: session.id,
        file: format!("{}.json", stem_of(session)),
        description: session.title.clone(),
        status: session.status,
        created_at: session.created_at,
        updated_at: session.updated_at,
        message_count: session.message_count,
        first_message: container
            .messages
            .iter()
            .find(|m| m.role == Role::User)
            .map(|m| m.content.chars().take(MAX_REQUEST_CHARS).collect()),
    })
}

pub fn build_index<'a>(tenant: &str, containers: impl Iterator<Item = &'a Container>) -> IndexFile {
    let mut sessions: Vec<IndexEntry> = containers.filter_map(index_entry).collect();
    sessions.sort_by_key(|x| std::cmp::Reverse((x.updated_at, x.id)));
    IndexFile {
        format_version: FORMAT_VERSION,
        tenant_id: tenant.to_string(),
        sessions,
    }
}

pub fn encode_index(index: &IndexFile) -> serde_json::Result<Vec<u8>> {
    let mut bytes = serde_json::to_vec_pretty(index)?;
    bytes.push(b'\n');
    Ok(bytes)
}

// --- atomic writes -----------------------------------------------------------------------

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Replaces `path` with `bytes` so that a crash leaves either the old file or the new
/// one, never a mix: write a temporary file in the same folder, fsync it, rename it over.
/// The caller fsyncs the folder once for a whole batch.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let temp = dir.join(format!(
        ".{file_name}.{}-{}.tmp",
        std::process::id(),
        TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let result = (|| {
        let mut file = File::create(&temp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        drop(file);
        std::fs::rename(&temp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    result
}

/// Makes the renames and removals in `dir` durable.
pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Whether a directory entry is a temporary file left by an interrupted write.
pub fn is_temp_file(name: &str) -> bool {
    name.starts_with('.') && name.ends_with(".tmp")
}
