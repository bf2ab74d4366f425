//! Reading a session document from untrusted bytes (an HTTP import, a file a user hands
//! to the CLI, a file the JSON files backend finds on disk): size, nesting and array
//! length limits are checked before anything big is built, the shape is checked by the
//! typed deserializer, then names and the references inside the document. Older
//! `format_version`s are upgraded; newer ones are refused.
//!
//! Format versions:
//! - **0** (no `format_version`, or `0`): a session file of seed 004's terminal agent:
//!   `{name, description, created_at, updated_at, message_count, first_message,
//!   thread: {messages: [{role, content}], metadata}}`. It becomes a session with its
//!   messages (roles other than user/assistant become `info` lines); it has no agent
//!   memory to carry over.
//! - **1**: [`SessionDocument`] as exported today.

use std::collections::HashSet;

use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::document::{BlobKind, DocumentThread, FORMAT_VERSION, SessionDocument};
use crate::model::{Role, SessionStatus};
use crate::name::validate_name;
use crate::time::Timestamp;
use crate::{Id, new_id};

/// Limits on a document read from outside. The defaults fit any real session while
/// keeping a hostile document from costing more than a bounded amount of memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DocumentLimits {
    pub max_bytes: usize,
    /// Arrays and objects nested in each other; a document needs about 10.
    pub max_depth: usize,
    pub max_messages: usize,
    pub max_executions: usize,
    pub max_steps: usize,
    pub max_snapshots: usize,
    pub max_tool_calls_per_step: usize,
    /// A LangGraph thread's arrays (`thread.checkpoints`, `thread.checkpoint_blobs`,
    /// `thread.checkpoint_writes`).
    pub max_checkpoints: usize,
    pub max_checkpoint_blobs: usize,
    pub max_checkpoint_writes: usize,
}

impl Default for DocumentLimits {
    fn default() -> Self {
        DocumentLimits {
            max_bytes: 64 * 1024 * 1024,
            max_depth: 64,
            max_messages: 100_000,
            max_executions: 10_000,
            max_steps: 100_000,
            max_snapshots: 10_000,
            max_tool_calls_per_step: 256,
            max_checkpoints: 100_000,
            max_checkpoint_blobs: 500_000,
            max_checkpoint_writes: 500_000,
        }
    }
}

/// Why a document was refused. The message is meant for the person who sent it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DocumentError {
    #[error("the document is {size} bytes; the limit is {max} bytes")]
    TooLarge { size: usize, max: usize },
    #[error("the document nests arrays and objects deeper than {max} levels")]
    TooDeep { max: usize },
    #[error("{field}: more than {max} entries")]
    TooMany { field: String, max: usize },
    #[error("the document is not valid JSON: {0}")]
    Syntax(String),
    #[error("the document is not a session document: {0}")]
    Shape(String),
    #[error(
        "format_version {found} is newer than this build of Stepwise reads (up to {supported}); upgrade Stepwise to import it"
    )]
    NewerVersion { found: u64, supported: u32 },
    #[error("{field}: {message}")]
    Invalid { field: String, message: String },
}

impl DocumentError {
    fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        DocumentError::Invalid {
            field: field.into(),
            message: message.into(),
        }
    }

    /// The part of the document the error is about, when there is one.
    pub fn field(&self) -> Option<&str> {
        match self {
            DocumentError::TooMany { field, .. } | DocumentError::Invalid { field, .. } => {
                Some(field)
            }
            DocumentError::NewerVersion { .. } => Some("format_version"),
            _ => None,
        }
    }

    /// Whether the document was refused for its size alone (HTTP 413 rather than 400).
    pub fn is_too_large(&self) -> bool {
        matches!(self, DocumentError::TooLarge { .. })
    }
}

/// Reads a session document from untrusted bytes: checks size, nesting and array lengths
/// first, then the shape, upgrades an older `format_version`, and validates names and the
/// references between the document's records. Never panics; every refusal says why.
pub fn parse_document(
    bytes: &[u8],
    limits: &DocumentLimits,
) -> Result<SessionDocument, DocumentError> {
    if bytes.len() > limits.max_bytes {
        return Err(DocumentError::TooLarge {
            size: bytes.len(),
            max: limits.max_bytes,
        });
    }
    check_structure(bytes, limits)?;
    let version = peek_version(bytes)?;
    let doc = match version {
        Some(v) if v == u64::from(FORMAT_VERSION) => {
            serde_json::from_slice::<SessionDocument>(bytes).map_err(json_error)?
        }
        Some(v) if v > u64::from(FORMAT_VERSION) => {
            return Err(DocumentError::NewerVersion {
                found: v,
                supported: FORMAT_VERSION,
            });
        }
        // Version 0: seed 004's session file.
        _ => {
            let value: Value = serde_json::from_slice(bytes).map_err(json_error)?;
            let upgraded = upgrade_v0(value)?;
            serde_json::from_value::<SessionDocument>(upgraded).map_err(json_error)?
        }
    };
    validate_document(&doc, limits)?;
    Ok(doc)
}

/// Checks an already typed document: current version, array lengths, names, and that
/// every record belongs to this document (steps and snapshots to its executions,
/// messages and executions to its session; step numbers from 1, never repeated).
pub fn validate_document(
    doc: &SessionDocument,
    limits: &DocumentLimits,
) -> Result<(), DocumentError> {
    if u64::from(doc.format_version) > u64::from(FORMAT_VERSION) {
        return Err(DocumentError::NewerVersion {
            found: u64::from(doc.format_version),
            supported: FORMAT_VERSION,
        });
    }
    if doc.format_version < FORMAT_VERSION {
        return Err(DocumentError::invalid(
            "format_version",
            format!(
                "format_version {} must be upgraded first (read the document with parse_document)",
                doc.format_version
            ),
        ));
    }
    for (field, count, max) in [
        ("messages", doc.messages.len(), limits.max_messages),
        ("executions", doc.executions.len(), limits.max_executions),
        ("steps", doc.steps.len(), limits.max_steps),
        ("snapshots", doc.snapshots.len(), limits.max_snapshots),
    ] {
        if count > max {
            return Err(DocumentError::TooMany {
                field: field.to_string(),
                max,
            });
        }
    }
    if let Some(name) = &doc.session.name {
        validate_name(name)
            .map_err(|e| DocumentError::invalid("session.name", format!("{e} (got {name:?})")))?;
    }
    let session_id = doc.session.id;
    let mut seen: HashSet<Id> = HashSet::from([session_id]);
    let mut duplicate = |id: Id, field: &str| -> Result<(), DocumentError> {
        if seen.insert(id) {
            Ok(())
        } else {
            Err(DocumentError::invalid(
                field,
                format!("the id {id} appears twice in the document"),
            ))
        }
    };
    for (i, m) in doc.messages.iter().enumerate() {
        duplicate(m.id, &format!("messages[{i}].id"))?;
        if m.session_id != session_id {
            return Err(DocumentError::invalid(
                format!("messages[{i}].session_id"),
                "a message belongs to another session than the document's",
            ));
        }
    }
    let executions: HashSet<Id> = doc.executions.iter().map(|e| e.id).collect();
    for (i, e) in doc.executions.iter().enumerate() {
        duplicate(e.id, &format!("executions[{i}].id"))?;
        if e.session_id.is_some_and(|s| s != session_id) {
            return Err(DocumentError::invalid(
                format!("executions[{i}].session_id"),
                "an execution belongs to another session than the document's",
            ));
        }
    }
    let mut step_numbers: HashSet<(Id, u32)> = HashSet::new();
    for (i, s) in doc.steps.iter().enumerate() {
        duplicate(s.id, &format!("steps[{i}].id"))?;
        if !executions.contains(&s.execution_id) {
            return Err(DocumentError::invalid(
                format!("steps[{i}].execution_id"),
                "a step refers to an execution that is not in the document",
            ));
        }
        if s.step_number == 0 || !step_numbers.insert((s.execution_id, s.step_number)) {
            return Err(DocumentError::invalid(
                format!("steps[{i}].step_number"),
                format!(
                    "step number {} is 0 or repeated within its execution",
                    s.step_number
                ),
            ));
        }
        if s.tool_calls.len() > limits.max_tool_calls_per_step {
            return Err(DocumentError::TooMany {
                field: format!("steps[{i}].tool_calls"),
                max: limits.max_tool_calls_per_step,
            });
        }
    }
    for (i, s) in doc.snapshots.iter().enumerate() {
        duplicate(s.id, &format!("snapshots[{i}].id"))?;
        if !executions.contains(&s.execution_id) {
            return Err(DocumentError::invalid(
                format!("snapshots[{i}].execution_id"),
                "a snapshot refers to an execution that is not in the document",
            ));
        }
    }
    if let Some(thread) = &doc.thread {
        validate_thread(thread, limits)?;
    }
    Ok(())
}

/// Most items one append blob of a document holds.
pub const MAX_BLOB_ITEMS: usize = 100_000;

/// Checks text of the checkpoint arrays: `min..=max` characters, no control characters.
fn check_text(field: &str, text: &str, min: usize, max: usize) -> Result<(), DocumentError> {
    let chars = text.chars().count();
    if chars < min || chars > max || text.chars().any(char::is_control) {
        return Err(DocumentError::invalid(
            field,
            format!("must be {min} to {max} characters, none of them control characters"),
        ));
    }
    Ok(())
}

fn check_bytes(field: &str, text: &str) -> Result<(), DocumentError> {
    if crate::base64::is_canonical(text) {
        Ok(())
    } else {
        Err(DocumentError::invalid(
            field,
            "must be standard padded base64",
        ))
    }
}

/// A LangGraph thread's checkpoints: the limits the checkpoint calls apply, unique keys,
/// blobs whose `base_version` is a blob of the document (same namespace and channel, no
/// loop), writes against checkpoints of the document, bytes in canonical base64.
pub fn validate_thread(
    thread: &DocumentThread,
    limits: &DocumentLimits,
) -> Result<(), DocumentError> {
    for (field, count, max) in [
        (
            "thread.checkpoints",
            thread.checkpoints.len(),
            limits.max_checkpoints,
        ),
        (
            "thread.checkpoint_blobs",
            thread.checkpoint_blobs.len(),
            limits.max_checkpoint_blobs,
        ),
        (
            "thread.checkpoint_writes",
            thread.checkpoint_writes.len(),
            limits.max_checkpoint_writes,
        ),
    ] {
        if count > max {
            return Err(DocumentError::TooMany {
                field: field.to_string(),
                max,
            });
        }
    }
    check_text("thread.thread_id", &thread.thread_id, 1, 256)?;
    let mut checkpoints: HashSet<(&str, &str)> = HashSet::new();
    for (i, c) in thread.checkpoints.iter().enumerate() {
        let at = |f: &str| format!("thread.checkpoints[{i}].{f}");
        check_text(&at("checkpoint_ns"), &c.checkpoint_ns, 0, 1024)?;
        check_text(&at("checkpoint_id"), &c.checkpoint_id, 1, 256)?;
        if let Some(parent) = &c.parent_checkpoint_id {
            check_text(&at("parent_checkpoint_id"), parent, 1, 256)?;
        }
        check_text(&at("checkpoint.type"), &c.checkpoint.type_name, 1, 64)?;
        check_bytes(&at("checkpoint.data"), &c.checkpoint.data)?;
        if !c.metadata.is_object() {
            return Err(DocumentError::invalid(at("metadata"), "must be an object"));
        }
        for (channel, version) in &c.channel_versions {
            check_text(&at("channel_versions"), channel, 1, 256)?;
            match version {
                Value::String(v) => check_text(&at("channel_versions"), v, 1, 256)?,
                Value::Number(_) => {}
                _ => {
                    return Err(DocumentError::invalid(
                        at("channel_versions"),
                        "a version must be a string",
                    ));
                }
            }
        }
        if !checkpoints.insert((&c.checkpoint_ns, &c.checkpoint_id)) {
            return Err(DocumentError::invalid(
                at("checkpoint_id"),
                "the checkpoint appears twice in its namespace",
            ));
        }
    }
    let mut bases: std::collections::HashMap<(&str, &str, &str), Option<&str>> =
        std::collections::HashMap::new();
    for (i, b) in thread.checkpoint_blobs.iter().enumerate() {
        let at = |f: &str| format!("thread.checkpoint_blobs[{i}].{f}");
        check_text(&at("checkpoint_ns"), &b.checkpoint_ns, 0, 1024)?;
        check_text(&at("channel"), &b.channel, 1, 256)?;
        check_text(&at("version"), &b.version, 1, 256)?;
        match b.kind {
            BlobKind::Full => {
                let (Some(type_name), Some(data)) = (&b.type_name, &b.data) else {
                    return Err(DocumentError::invalid(
                        at("kind"),
                        "a full blob has `type` and `data`",
                    ));
                };
                if b.base_version.is_some() || !b.items.is_empty() {
                    return Err(DocumentError::invalid(
                        at("kind"),
                        "a full blob has no `base_version` or `items`",
                    ));
                }
                check_text(&at("type"), type_name, 1, 64)?;
                check_bytes(&at("data"), data)?;
            }
            BlobKind::Append => {
                if b.type_name.is_some() || b.data.is_some() {
                    return Err(DocumentError::invalid(
                        at("kind"),
                        "an append blob has `items`, not `type` and `data`",
                    ));
                }
                if b.items.len() > MAX_BLOB_ITEMS {
                    return Err(DocumentError::TooMany {
                        field: at("items"),
                        max: MAX_BLOB_ITEMS,
                    });
                }
                if let Some(base) = &b.base_version {
                    check_text(&at("base_version"), base, 1, 256)?;
                }
                for (k, item) in b.items.iter().enumerate() {
                    check_text(&at(&format!("items[{k}].type")), &item.type_name, 1, 64)?;
                    check_bytes(&at(&format!("items[{k}].data")), &item.data)?;
                }
            }
        }
        let key = (
            b.checkpoint_ns.as_str(),
            b.channel.as_str(),
            b.version.as_str(),
        );
        if bases.insert(key, b.base_version.as_deref()).is_some() {
            return Err(DocumentError::invalid(
                at("version"),
                "the blob appears twice (namespace, channel and version)",
            ));
        }
    }
    for (i, b) in thread.checkpoint_blobs.iter().enumerate() {
        let mut seen = HashSet::from([b.version.as_str()]);
        let mut next = b.base_version.as_deref();
        while let Some(version) = next {
            let Some(base) = bases.get(&(b.checkpoint_ns.as_str(), b.channel.as_str(), version))
            else {
                return Err(DocumentError::invalid(
                    format!("thread.checkpoint_blobs[{i}].base_version"),
                    "the base version is not a blob of the same namespace and channel in the document",
                ));
            };
            if !seen.insert(version) {
                return Err(DocumentError::invalid(
                    format!("thread.checkpoint_blobs[{i}].base_version"),
                    "the append chain loops",
                ));
            }
            next = *base;
        }
    }
    let mut writes: HashSet<(&str, &str, &str, i64)> = HashSet::new();
    for (i, w) in thread.checkpoint_writes.iter().enumerate() {
        let at = |f: &str| format!("thread.checkpoint_writes[{i}].{f}");
        check_text(&at("checkpoint_ns"), &w.checkpoint_ns, 0, 1024)?;
        check_text(&at("checkpoint_id"), &w.checkpoint_id, 1, 256)?;
        check_text(&at("task_id"), &w.task_id, 1, 1024)?;
        check_text(&at("task_path"), &w.task_path, 0, 1024)?;
        check_text(&at("channel"), &w.channel, 1, 256)?;
        check_text(&at("type"), &w.type_name, 1, 64)?;
        check_bytes(&at("data"), &w.data)?;
        if !checkpoints.contains(&(w.checkpoint_ns.as_str(), w.checkpoint_id.as_str())) {
            return Err(DocumentError::invalid(
                at("checkpoint_id"),
                "a write refers to a checkpoint that is not in the document",
            ));
        }
        if !writes.insert((&w.checkpoint_ns, &w.checkpoint_id, &w.task_id, w.idx)) {
            return Err(DocumentError::invalid(
                at("idx"),
                "the write appears twice (checkpoint, task and idx)",
            ));
        }
    }
    Ok(())
}

fn json_error(e: serde_json::Error) -> DocumentError {
    match e.classify() {
        serde_json::error::Category::Data => DocumentError::Shape(e.to_string()),
        _ => DocumentError::Syntax(e.to_string()),
    }
}

/// Reads only `format_version` (everything else is skipped without being built).
fn peek_version(bytes: &[u8]) -> Result<Option<u64>, DocumentError> {
    #[derive(Deserialize)]
    struct Head {
        #[serde(default)]
        format_version: Option<Value>,
    }
    // A struct also deserializes from an array: insist on an object first.
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        serde_json::from_slice::<serde::de::IgnoredAny>(bytes).map_err(json_error)?;
        return Err(DocumentError::Shape(
            "the document must be a JSON object".into(),
        ));
    }
    let head: Head = serde_json::from_slice(bytes).map_err(json_error)?;
    match head.format_version {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => n.as_u64().map(Some).ok_or_else(|| {
            DocumentError::invalid("format_version", "must be a whole number from 0")
        }),
        Some(_) => Err(DocumentError::invalid(
            "format_version",
            "must be a whole number from 0",
        )),
    }
}

/// One pass over the raw bytes, before anything is built: refuses nesting deeper than
/// the limit and top-level arrays (and a step's tool calls) longer than theirs. Malformed
/// JSON is left for the parser to report.
pub fn check_structure(bytes: &[u8], limits: &DocumentLimits) -> Result<(), DocumentError> {
    let top_caps: [(&'static str, usize); 4] = [
        ("messages", limits.max_messages),
        ("executions", limits.max_executions),
        ("steps", limits.max_steps),
        ("snapshots", limits.max_snapshots),
    ];
    let thread_caps: [(&'static str, usize); 3] = [
        ("thread.checkpoints", limits.max_checkpoints),
        ("thread.checkpoint_blobs", limits.max_checkpoint_blobs),
        ("thread.checkpoint_writes", limits.max_checkpoint_writes),
    ];
    let mut stack: Vec<Frame> = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        // A value starting inside an array counts towards its length.
        if let Some(top) = stack.last_mut()
            && top.array
            && top.expecting
            && b != b']'
        {
            top.expecting = false;
            top.count += 1;
            if let Some((field, max)) = top.cap
                && top.count > max
            {
                return Err(DocumentError::TooMany {
                    field: field.to_string(),
                    max,
                });
            }
        }
        match b {
            b'{' | b'[' => {
                if stack.len() >= limits.max_depth {
                    return Err(DocumentError::TooDeep {
                        max: limits.max_depth,
                    });
                }
                let array = b == b'[';
                let cap = if array {
                    array_cap(&stack, bytes, &top_caps, &thread_caps, limits)
                } else {
                    None
                };
                stack.push(Frame {
                    array,
                    expecting: true,
                    count: 0,
                    cap,
                    last_key: (0, 0),
                });
            }
            b'}' | b']' if stack.pop().is_none() => return Ok(()),
            b'}' | b']' => {}
            b',' => {
                if let Some(top) = stack.last_mut() {
                    top.expecting = true;
                }
            }
            b':' => {}
            b'"' => {
                let start = i + 1;
                let mut j = start;
                while j < bytes.len() && bytes[j] != b'"' {
                    j += if bytes[j] == b'\\' { 2 } else { 1 };
                }
                if let Some(top) = stack.last_mut()
                    && !top.array
                    && top.expecting
                {
                    top.expecting = false;
                    top.last_key = (start, j.min(bytes.len()));
                }
                i = j + 1;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    Ok(())
}

/// The limit of an array that starts under `stack`: a top-level record list, or the
/// tool calls of a step.
fn array_cap(
    stack: &[Frame],
    bytes: &[u8],
    top_caps: &[(&'static str, usize); 4],
    thread_caps: &[(&'static str, usize); 3],
    limits: &DocumentLimits,
) -> Option<(&'static str, usize)> {
    let key = |frame: &Frame| {
        bytes
            .get(frame.last_key.0..frame.last_key.1)
            .unwrap_or_default()
    };
    match stack {
        [top] if !top.array => top_caps
            .iter()
            .find(|(name, _)| key(top) == name.as_bytes())
            .copied(),
        [top, thread] if !top.array && !thread.array && key(top) == b"thread" => thread_caps
            .iter()
            .find(|(name, _)| key(thread) == &name.as_bytes()["thread.".len()..])
            .copied(),
        [top, steps, step] if !top.array && steps.array && !step.array => {
            let in_steps = steps.cap.is_some_and(|(name, _)| name == "steps");
            (in_steps && key(step) == b"tool_calls")
                .then_some(("steps[].tool_calls", limits.max_tool_calls_per_step))
        }
        _ => None,
    }
}

/// One open array or object while [`check_structure`] scans.
struct Frame {
    array: bool,
    /// Array: a value may start next. Object: a key is expected next.
    expecting: bool,
    count: usize,
    cap: Option<(&'static str, usize)>,
    /// The span of the last key read in this object.
    last_key: (usize, usize),
}

/// Upgrades a seed 004 session file (format 0) to the current document.
fn upgrade_v0(value: Value) -> Result<Value, DocumentError> {
    let Value::Object(old) = value else {
        return Err(DocumentError::Shape(
            "the document must be a JSON object".into(),
        ));
    };
    let text = |key: &str| -> Result<Option<String>, DocumentError> {
        match old.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(DocumentError::invalid(key, "must be a string")),
        }
    };
    let time = |key: &str| -> Result<Option<Timestamp>, DocumentError> {
        match text(key)? {
            None => Ok(None),
            Some(t) => parse_legacy_time(&t).map(Some).ok_or_else(|| {
                DocumentError::invalid(key, format!("{t:?} is not a date and time"))
            }),
        }
    };
    let created_at = time("created_at")?.unwrap_or_default();
    let updated_at = time("updated_at")?.unwrap_or(created_at).max(created_at);
    let session_id = new_id();
    // A legacy session file is recognised by its `thread`; anything else (`{"hello": "world"}`)
    // is not a session document at all, and importing it must not make an empty session.
    match old.get("thread") {
        Some(Value::Object(_)) => {}
        None | Some(Value::Null) => {
            return Err(DocumentError::invalid(
                "format_version",
                "this is not a session document: a Stepwise export has `format_version` and `session`, a legacy session file has `thread`",
            ));
        }
        Some(_) => return Err(DocumentError::invalid("thread", "must be an object")),
    }
    let empty = Vec::new();
    let old_messages = match old.get("thread").and_then(|t| t.get("messages")) {
        None | Some(Value::Null) => &empty,
        Some(Value::Array(items)) => items,
        Some(_) => {
            return Err(DocumentError::invalid(
                "thread.messages",
                "must be an array",
            ));
        }
    };
    let mut messages = Vec::with_capacity(old_messages.len());
    for (i, m) in old_messages.iter().enumerate() {
        let role = match m.get("role").and_then(Value::as_str) {
            Some("user") => Role::User,
            Some("assistant") => Role::Assistant,
            _ => Role::Info,
        };
        let content = legacy_content(m).ok_or_else(|| {
            DocumentError::invalid(
                format!("thread.messages[{i}]"),
                "a message needs its text in `content`, `text` or `contents`",
            )
        })?;
        // The old format has no message times: keep their order after the session's start
        // (never past the last writable time).
        let created = Timestamp(created_at.0.saturating_add(i as i64 + 1)).min(Timestamp::MAX);
        messages.push(json!({
            "id": new_id(),
            "session_id": session_id,
            "role": role,
            "content": content,
            "execution_id": null,
            "related_type": null,
            "related_id": null,
            "context_url": null,
            "metadata": {},
            "created_at": created,
        }));
    }
    let mut metadata = Map::new();
    metadata.insert("upgraded_from_format".into(), json!(0));
    if let Some(Value::Object(thread_meta)) = old.get("thread").and_then(|t| t.get("metadata")) {
        metadata.insert("thread_metadata".into(), Value::Object(thread_meta.clone()));
    }
    Ok(json!({
        "format_version": FORMAT_VERSION,
        "session": {
            "id": session_id,
            "tenant_id": "",
            "user_id": "",
            "name": text("name")?,
            "title": text("description")?,
            "status": SessionStatus::Active,
            "related_type": null,
            "related_id": null,
            "initial_context_url": null,
            "metadata": metadata,
            "last_execution_id": null,
            "last_snapshot_id": null,
            "message_count": messages.len(),
            "created_at": created_at,
            "updated_at": updated_at,
        },
        "messages": messages,
        "executions": [],
        "steps": [],
        "snapshots": [],
    }))
}

/// Seed 004 wrote local times without an offset (`2025-01-15T10:30:00`); read them as UTC.
fn parse_legacy_time(text: &str) -> Option<Timestamp> {
    Timestamp::parse(text).or_else(|| Timestamp::parse(&format!("{text}Z")))
}

/// A legacy message's text: `content` as a string or a list of parts, `text`, or
/// `contents` (a list of `{type, text}` parts).
fn legacy_content(message: &Value) -> Option<String> {
    fn parts(items: &[Value]) -> String {
        let texts: Vec<&str> = items
            .iter()
            .filter_map(|p| p.as_str().or_else(|| p.get("text").and_then(Value::as_str)))
            .collect();
        texts.join("\n")
    }
    for key in ["content", "text", "contents"] {
        match message.get(key) {
            Some(Value::String(s)) => return Some(s.clone()),
            Some(Value::Array(items)) => return Some(parts(items)),
            _ => {}
        }
    }
    None
}
