//! Conversation items: a session's history as a list of JSON objects (the items of the
//! OpenAI Agents SDK's `Session`), kept as steps of the session so it shows in the UI and
//! its event stream like any agent's memory.
//!
//! Storage uses the [`Store`] trait as it is (every backend, no migration): the items live
//! in the session's *conversation executions*, external executions marked with
//! `metadata.conversation = "items"`. Every operation is one step of the newest one
//! (steps are append-only):
//!
//! - an add is a step whose `output` is `{"items_op": "add", "items": [...]}` (the items
//!   exactly as sent) and whose readable fields mirror them (assistant text in
//!   `model_output`, tool calls in `tool_calls`, tool results in `observations`);
//! - a pop is `{"items_op": "pop", "item": {...}}` (the item it removed);
//! - a clear is `{"items_op": "clear", "count": n}`.
//!
//! The items are the fold of those steps (oldest execution first, then by step number), so
//! the history of what was added and removed stays inspectable. Steps that are not items
//! operations (or whose record cannot be decoded) are skipped: they never hide the rest.
//!
//! `version` is the number of steps of the conversation (the sum of its executions' step
//! counts). A write that names `version: V` is written as step V+1: the store makes the same
//! step with the same body again a no-op (a retried request answers the same, never writes
//! twice) and another body at that number a conflict (409: refresh the version and retry).
//! `op_id`, chosen by the client per operation, tells two writers with identical items
//! apart (without it the server picks one, so only the version makes a retry safe).
//!
//! A conversation execution that was cancelled (or otherwise finished) is not written to
//! again: the next write opens a new conversation execution, and the fold goes on over both.
//!
//! Reads are served from a bounded in-process cache of each conversation's folded items
//! (already serialized), keyed by session and checked against the version read from the
//! store on every request, so several server processes on one database stay correct.

pub(crate) mod append;
pub(crate) mod clear;
pub(crate) mod list;
pub(crate) mod pop;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use serde::Deserialize;
use serde_json::{Value, json};
use stepwise_core::{
    EventType, Execution, ExecutionStatus, Id, Role, SessionStatus, StepBody, StepKind,
};
use stepwise_engine::EXTERNAL_AGENT;
use stepwise_store::{NewEvent, NewExecution, NewMessage, NewStep, StepMirror, Store, StoreError};

use crate::AppState;
use crate::auth::Caller;
use crate::error::{ApiError, ApiResult, path_id};

/// The marker of a conversation execution: `metadata.conversation == "items"`.
pub const MARKER_KEY: &str = "conversation";
pub const MARKER_VALUE: &str = "items";
/// Items one add may carry.
pub const MAX_ITEMS_PER_ADD: usize = 10_000;
/// Bytes of one add's items as JSON (413 above).
pub const MAX_ADD_BYTES: usize = 2 * 1024 * 1024;
/// Longest `op_id`.
pub const MAX_OP_ID_CHARS: usize = 64;
/// `op_id`: letters, digits, `.`, `_`, `:` and `-`.
pub const OP_ID_PATTERN: &str = "^[A-Za-z0-9._:-]{1,64}$";
/// Largest `version` (and `limit`) a request may name: JSON's exact integers.
pub const MAX_VERSION: u64 = 9_007_199_254_740_991;
/// Memory the read cache may hold (serialized items).
const CACHE_BYTES: usize = 64 * 1024 * 1024;

/// The `version` and `op_id` of a write, as a body or a query string carries them.
#[derive(Debug, Default, Deserialize)]
pub struct WriteParams {
    pub version: Option<u64>,
    pub op_id: Option<String>,
}

impl WriteParams {
    pub(crate) fn check(&self) -> ApiResult<()> {
        if let Some(version) = self.version
            && version > MAX_VERSION
        {
            return Err(ApiError::invalid(
                "version",
                format!("version must be an integer from 0 to {MAX_VERSION}"),
            ));
        }
        if let Some(op_id) = &self.op_id {
            let ok = !op_id.is_empty()
                && op_id.chars().count() <= MAX_OP_ID_CHARS
                && op_id
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-'));
            if !ok {
                return Err(ApiError::invalid(
                    "op_id",
                    format!(
                        "op_id must be 1 to {MAX_OP_ID_CHARS} letters, digits, '.', '_', ':' or '-'"
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// The fields of a JSON body, which must be an object.
pub(crate) fn body_object(body: &Value) -> ApiResult<&serde_json::Map<String, Value>> {
    body.as_object()
        .ok_or_else(|| ApiError::bad_request("the body is not valid: it must be a JSON object"))
}

/// `version` and `op_id` of a body (absent or `null`: not given). A whole number written as
/// a float (`3.0`, an integer to JSON Schema) is that integer.
pub(crate) fn body_params(body: &serde_json::Map<String, Value>) -> ApiResult<WriteParams> {
    let version = match body.get("version") {
        None | Some(Value::Null) => None,
        Some(number) => {
            let exact = number.as_u64().or_else(|| {
                number
                    .as_f64()
                    .filter(|f| f.fract() == 0.0 && (0.0..=MAX_VERSION as f64).contains(f))
                    .map(|f| f as u64)
            });
            Some(exact.ok_or_else(|| {
                ApiError::invalid(
                    "version",
                    format!("version must be an integer from 0 to {MAX_VERSION}"),
                )
            })?)
        }
    };
    let op_id = match body.get("op_id") {
        None | Some(Value::Null) => None,
        Some(Value::String(text)) => Some(text.clone()),
        Some(_) => return Err(ApiError::invalid("op_id", "op_id must be a string")),
    };
    let params = WriteParams { version, op_id };
    params.check()?;
    Ok(params)
}

// --- the conversation ------------------------------------------------------------------------

/// A session's conversation executions, oldest first.
#[derive(Clone)]
pub(crate) struct Conversation {
    pub session_id: Id,
    /// Whether the session is deleted (read by writes; reads do not look).
    pub deleted: bool,
    pub executions: Vec<Execution>,
}

impl Conversation {
    /// Steps so far: the version a write names to be written next.
    pub fn version(&self) -> u64 {
        self.executions.iter().map(|e| e.step_count).sum()
    }

    /// Where global step `number` (from 1) is: execution index and its step number there.
    fn locate(&self, number: u64) -> Option<(usize, u32)> {
        let mut offset = 0;
        for (i, execution) in self.executions.iter().enumerate() {
            if number <= offset + execution.step_count {
                return Some((i, u32::try_from(number - offset).ok()?));
            }
            offset += execution.step_count;
        }
        None
    }
}

pub(crate) fn is_conversation(execution: &Execution) -> bool {
    execution.agent_type == EXTERNAL_AGENT
        && execution.metadata.get(MARKER_KEY).and_then(Value::as_str) == Some(MARKER_VALUE)
}

/// The session's conversation executions (404 when the session is not the caller's). Reads
/// of a session with a conversation take one query; writes also read the session's status.
pub(crate) async fn load<S: Store>(
    state: &AppState<S>,
    caller: &Caller,
    id: &str,
    for_write: bool,
) -> ApiResult<Conversation> {
    let id = path_id(id, "id")?;
    let executions: Vec<Execution> = state
        .store()
        .list_executions(&caller.tenant, id)
        .await?
        .into_iter()
        .filter(is_conversation)
        .collect();
    let mut deleted = false;
    if for_write || executions.is_empty() {
        let session = state
            .store()
            .get_session(&caller.tenant, id)
            .await?
            .ok_or_else(|| ApiError::not_found("session"))?;
        deleted = session.status == SessionStatus::Deleted;
    }
    Ok(Conversation {
        session_id: id,
        deleted,
        executions,
    })
}

// --- the fold ----------------------------------------------------------------------------------

/// Folded items, each serialized once.
#[derive(Clone, Default)]
pub(crate) struct Items {
    pub items: Vec<Arc<str>>,
    pub bytes: usize,
}

impl Items {
    fn push(&mut self, item: &Value) {
        if item.is_object() {
            let text: Arc<str> = serde_json::to_string(item).unwrap_or_default().into();
            self.bytes += text.len();
            self.items.push(text);
        }
    }

    fn pop(&mut self) -> Option<Arc<str>> {
        let last = self.items.pop()?;
        self.bytes -= last.len();
        Some(last)
    }

    fn clear(&mut self) {
        self.items.clear();
        self.bytes = 0;
    }

    /// Applies one step's output (a no-op for anything that is not an items operation).
    fn apply(&mut self, output: &Value) {
        match output.get("items_op").and_then(Value::as_str) {
            Some("add") => {
                for item in output
                    .get("items")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    self.push(item);
                }
            }
            Some("pop") => match output.get("item") {
                // The item it removed: popped again only when it is the last one, so a lost
                // add before it (a record that could not be decoded) costs nothing else.
                Some(item) if item.is_object() => {
                    let text = serde_json::to_string(item).unwrap_or_default();
                    if self.items.last().is_some_and(|last| **last == *text) {
                        self.pop();
                    }
                }
                _ => {
                    self.pop();
                }
            },
            Some("clear") => self.clear(),
            _ => {}
        }
    }

    /// The last `limit` items (all when `None`), oldest first, as a JSON response body.
    pub fn page_json(&self, limit: Option<usize>, version: u64) -> Vec<u8> {
        let start = limit.map_or(0, |n| self.items.len().saturating_sub(n));
        let page = &self.items[start..];
        let size: usize = page.iter().map(|i| i.len() + 1).sum();
        let mut out = Vec::with_capacity(size + 48);
        out.extend_from_slice(b"{\"items\":[");
        for (i, item) in page.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(item.as_bytes());
        }
        out.extend_from_slice(b"],\"version\":");
        out.extend_from_slice(version.to_string().as_bytes());
        out.push(b'}');
        out
    }
}

/// The items after the conversation's first `version` steps: from the cache when it holds
/// that version, else folded from the stored steps (and cached).
pub(crate) async fn items_at<S: Store>(
    state: &AppState<S>,
    caller: &Caller,
    conversation: &Conversation,
    version: u64,
) -> ApiResult<Items> {
    let key = (caller.tenant.as_str().to_string(), conversation.session_id);
    if let Some(items) = cache().get(&key, version) {
        return Ok(items);
    }
    let mut items = Items::default();
    let mut offset = 0u64;
    'executions: for execution in &conversation.executions {
        if offset >= version {
            break;
        }
        let steps = state
            .store()
            .list_steps(&caller.tenant, execution.id)
            .await?;
        if steps.skipped > 0 {
            tracing::warn!(execution = %execution.id, skipped = steps.skipped,
                "conversation steps that could not be decoded were skipped");
        }
        for step in &steps.items {
            if offset + u64::from(step.step_number) > version {
                break 'executions;
            }
            items.apply(&step.output);
        }
        offset += execution.step_count;
    }
    if version == conversation.version() {
        cache().put(key, version, &items);
    }
    Ok(items)
}

// --- the cache ---------------------------------------------------------------------------------

type CacheKey = (String, Id);

struct CacheEntry {
    version: u64,
    items: Items,
    used: u64,
}

#[derive(Default)]
struct Cache {
    entries: HashMap<CacheKey, CacheEntry>,
    bytes: usize,
    tick: u64,
}

struct SharedCache(Mutex<Cache>);

fn cache() -> &'static SharedCache {
    static CACHE: OnceLock<SharedCache> = OnceLock::new();
    CACHE.get_or_init(|| SharedCache(Mutex::new(Cache::default())))
}

impl SharedCache {
    fn lock(&self) -> std::sync::MutexGuard<'_, Cache> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn get(&self, key: &CacheKey, version: u64) -> Option<Items> {
        let mut cache = self.lock();
        cache.tick += 1;
        let tick = cache.tick;
        let entry = cache.entries.get_mut(key)?;
        if entry.version != version {
            return None;
        }
        entry.used = tick;
        Some(entry.items.clone())
    }

    fn put(&self, key: CacheKey, version: u64, items: &Items) {
        let mut cache = self.lock();
        if let Some(old) = cache.entries.remove(&key) {
            cache.bytes -= old.items.bytes;
        }
        if items.bytes > CACHE_BYTES / 4 {
            return;
        }
        cache.tick += 1;
        let used = cache.tick;
        cache.bytes += items.bytes;
        cache.entries.insert(
            key,
            CacheEntry {
                version,
                items: items.clone(),
                used,
            },
        );
        while cache.bytes > CACHE_BYTES {
            let Some(oldest) = cache
                .entries
                .iter()
                .min_by_key(|(_, e)| e.used)
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            if let Some(old) = cache.entries.remove(&oldest) {
                cache.bytes -= old.items.bytes;
            }
        }
    }

    /// After a write of step `before + 1`: the cached items at `before`, if any, move on.
    fn advance(&self, key: &CacheKey, before: u64, output: &Value) {
        let mut cache = self.lock();
        let Some(entry) = cache.entries.get_mut(key) else {
            return;
        };
        if entry.version != before {
            let old = entry.items.bytes;
            cache.entries.remove(key);
            cache.bytes -= old;
            return;
        }
        let old = entry.items.bytes;
        entry.items.apply(output);
        entry.version = before + 1;
        let new = entry.items.bytes;
        cache.bytes = cache.bytes - old + new;
    }
}

// --- writing -----------------------------------------------------------------------------------

/// What a write asks for, once its step is known.
pub(crate) struct PlannedStep {
    pub kind: StepKind,
    pub body: StepBody,
    /// Messages to mirror when the step is new.
    pub messages: Vec<(Role, String)>,
}

/// What a write did.
pub(crate) struct Written {
    /// The version after the write (the step's number); the version read when there was
    /// nothing to write.
    pub version: u64,
    /// False when the same step was already there (a retried request).
    pub created: bool,
    /// The items before the write (when the write read them).
    pub before: Items,
}

/// Writes one items operation as step `version + 1` of the conversation. `plan` builds the
/// step from the items before it (read only when `needs_items`; `None`: nothing to write).
/// Without `version` the write goes after the latest step, retried a few times when
/// another write takes that number.
pub(crate) async fn write<S: Store>(
    state: &AppState<S>,
    caller: &Caller,
    session_id: &str,
    params: &WriteParams,
    needs_items: bool,
    plan: impl Fn(&Items, &str) -> Option<PlannedStep>,
) -> ApiResult<Written> {
    params.check()?;
    // Without an op_id, one of our own: two writers with the same items stay two writes.
    let op_id = params
        .op_id
        .clone()
        .unwrap_or_else(|| stepwise_core::new_id().simple().to_string());
    let key = (
        caller.tenant.as_str().to_string(),
        path_id(session_id, "id")?,
    );
    // Writes to one conversation go one at a time in this process (other processes race through
    // the store: a conflict, or for a write without version another attempt).
    let _lock = WriteLock::take(write_locks(), &key).await;
    let mut attempt = 0;
    loop {
        attempt += 1;
        // A write at the version this process last wrote skips the reads (the store still
        // refuses it if another process wrote meanwhile: then it reads and goes again).
        let remembered = match params.version {
            Some(version) if attempt == 1 => recent().get(&key, version),
            _ => None,
        };
        let from_memory = remembered.is_some();
        let conversation = match remembered {
            Some(conversation) => conversation,
            None => load(state, caller, session_id, true).await?,
        };
        if conversation.deleted {
            return Err(ApiError::invalid_state("the session is deleted"));
        }
        let current = conversation.version();
        let version = params.version.unwrap_or(current);
        if version > current {
            return Err(ApiError::conflict(format!(
                "version {version} is ahead of the conversation (it is at {current})"
            ))
            .with_field("version"));
        }
        let before = if needs_items {
            items_at(state, caller, &conversation, version).await?
        } else {
            Items::default()
        };
        let Some(planned) = plan(&before, &op_id) else {
            // Nothing to write at that version; at an older one the caller acts on a state
            // that is gone (the items are not what it thinks): read the version again.
            if version < current {
                return Err(stale(version + 1));
            }
            return Ok(Written {
                version,
                created: false,
                before,
            });
        };
        let number = version + 1;
        let mut conversation = conversation;
        let (index, step_number) = match conversation.locate(number) {
            Some(found) => found,
            None => {
                let last = conversation
                    .executions
                    .last()
                    .filter(|e| !e.status.is_finished());
                match last {
                    Some(last) => (
                        conversation.executions.len() - 1,
                        u32::try_from(last.step_count + 1)
                            .map_err(|_| ApiError::invalid_state("the conversation is full"))?,
                    ),
                    None => match open_conversation(state, caller, &conversation).await? {
                        Some(opened) => {
                            conversation.executions.push(opened);
                            (conversation.executions.len() - 1, 1)
                        }
                        // Another request opened one meanwhile: read again.
                        None if attempt < MAX_ATTEMPTS => continue,
                        None => {
                            return Err(ApiError::conflict(
                                "the conversation changed meanwhile; try again",
                            ));
                        }
                    },
                }
            }
        };
        let execution_id = conversation.executions[index].id;
        let output = planned.body.output.clone();
        // The readable side (messages, the step's event) is written with the step, in one
        // write, and only when the step is new.
        let mirror = mirror_of(&planned, conversation.session_id, execution_id, step_number);
        let appended = state
            .store()
            .append_step_mirrored(
                &caller.tenant,
                NewStep {
                    execution_id,
                    step_number,
                    kind: planned.kind,
                    body: planned.body,
                },
                mirror,
            )
            .await?
            .await;
        let appended = match appended {
            Ok(appended) => appended,
            // What this process remembered is out of date: read and go again.
            Err(StoreError::Conflict(_) | StoreError::InvalidState(_)) if from_memory => {
                recent().forget(&key);
                continue;
            }
            // Another write took this number (or the execution finished meanwhile): with no
            // version named, write after it instead.
            Err(StoreError::Conflict(_) | StoreError::InvalidState(_))
                if params.version.is_none() && attempt < MAX_ATTEMPTS =>
            {
                continue;
            }
            Err(StoreError::Conflict(_)) => return Err(stale(number)),
            Err(StoreError::InvalidState(_)) => {
                return Err(ApiError::conflict(
                    "the conversation changed meanwhile; read its version again and retry",
                )
                .with_field("version"));
            }
            Err(e) => return Err(e.into()),
        };
        if appended.created {
            cache().advance(&key, version, &output);
            let execution = &mut conversation.executions[index];
            execution.step_count = execution.step_count.max(u64::from(step_number));
            recent().put(&key, conversation.clone(), from_memory);
        }
        return Ok(Written {
            version: number,
            created: appended.created,
            before,
        });
    }
}

/// Attempts of a write without version when other processes keep taking its number.
const MAX_ATTEMPTS: u32 = 16;

/// The messages and the `step.completed` event that mirror an items step in its session.
fn mirror_of(
    planned: &PlannedStep,
    session_id: Id,
    execution_id: Id,
    step_number: u32,
) -> StepMirror {
    let messages = planned
        .messages
        .iter()
        .map(|(role, content)| {
            NewMessage::new(session_id, *role, content.clone()).for_execution(execution_id)
        })
        .collect();
    let mut metadata = json!({
        "step_number": step_number,
        "items_op": planned.body.output.get("items_op").cloned().unwrap_or(Value::Null),
    });
    if let (Some(call), Some(map)) = (planned.body.tool_calls.first(), metadata.as_object_mut()) {
        map.insert("tool".into(), Value::String(call.name.clone()));
    }
    let completed = NewEvent {
        session_id,
        message_id: None,
        execution_id: Some(execution_id),
        event_type: EventType::StepCompleted,
        content: format!("Completed step {step_number}"),
        metadata,
    };
    StepMirror {
        messages,
        events: vec![completed],
    }
}

/// One conversation's writes in this process, one at a time: a write holds the lock while it
/// writes (each write's step and its mirror are one store write, so the mirrors follow in
/// the order of the writes). Not a chat turn: the front-end protocols' `Turn` is that.
struct WriteLock {
    map: &'static WriteLocks,
    key: CacheKey,
    lock: Arc<tokio::sync::Mutex<()>>,
    guard: Option<tokio::sync::OwnedMutexGuard<()>>,
}

type WriteLocks = Mutex<HashMap<CacheKey, Arc<tokio::sync::Mutex<()>>>>;

fn write_locks() -> &'static WriteLocks {
    static LOCKS: OnceLock<WriteLocks> = OnceLock::new();
    LOCKS.get_or_init(WriteLocks::default)
}

impl WriteLock {
    async fn take(map: &'static WriteLocks, key: &CacheKey) -> WriteLock {
        let lock = map
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(key.clone())
            .or_default()
            .clone();
        let guard = lock.clone().lock_owned().await;
        WriteLock {
            map,
            key: key.clone(),
            lock,
            guard: Some(guard),
        }
    }
}

impl Drop for WriteLock {
    fn drop(&mut self) {
        self.guard = None;
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        // Only the map and this lock hold it: nobody waits, forget it.
        if Arc::strong_count(&self.lock) == 2 {
            map.remove(&self.key);
        }
    }
}

/// How long a write may rely on what this process read of a conversation (the session's
/// status: a session deleted meanwhile refuses writes at most this much later).
const REMEMBER: std::time::Duration = std::time::Duration::from_secs(2);

/// The conversations this process wrote to last, as of their last write.
#[derive(Default)]
struct Recent(Mutex<HashMap<CacheKey, (Conversation, std::time::Instant)>>);

fn recent() -> &'static Recent {
    static RECENT: OnceLock<Recent> = OnceLock::new();
    RECENT.get_or_init(Recent::default)
}

impl Recent {
    fn lock(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<CacheKey, (Conversation, std::time::Instant)>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The conversation at `version`, if this process wrote it last and read it recently.
    fn get(&self, key: &CacheKey, version: u64) -> Option<Conversation> {
        let map = self.lock();
        let (conversation, read_at) = map.get(key)?;
        (read_at.elapsed() < REMEMBER && conversation.version() == version)
            .then(|| conversation.clone())
    }

    /// After a write: `from_memory` keeps the time it was last read from the store.
    fn put(&self, key: &CacheKey, conversation: Conversation, from_memory: bool) {
        let mut map = self.lock();
        let now = std::time::Instant::now();
        let read_at = match map.get(key) {
            Some((_, at)) if from_memory => *at,
            _ => now,
        };
        if map.len() >= 10_000 {
            map.retain(|_, (_, at)| at.elapsed() < REMEMBER);
        }
        map.insert(key.clone(), (conversation, read_at));
    }

    fn forget(&self, key: &CacheKey) {
        self.lock().remove(key);
    }
}

fn stale(number: u64) -> ApiError {
    ApiError::conflict(format!(
        "step {number} of the conversation is another write; read the version again and retry"
    ))
    .with_field("version")
}

/// One conversation execution open at a time per process: a second request waiting here
/// finds the first one's.
fn open_lock() -> &'static tokio::sync::Mutex<()> {
    static LOCK: OnceLock<tokio::sync::Mutex<()>> = OnceLock::new();
    LOCK.get_or_init(|| tokio::sync::Mutex::new(()))
}

/// Opens a new conversation execution after the ones `seen`; `None` when the conversation
/// changed meanwhile (read it again).
async fn open_conversation<S: Store>(
    state: &AppState<S>,
    caller: &Caller,
    seen: &Conversation,
) -> ApiResult<Option<Execution>> {
    let _guard = open_lock().lock().await;
    let session_id = seen.session_id;
    let now: Vec<Id> = state
        .store()
        .list_executions(&caller.tenant, session_id)
        .await?
        .into_iter()
        .filter(|e| is_conversation(e) && !e.status.is_finished())
        .map(|e| e.id)
        .collect();
    if !now.is_empty() {
        return Ok(None);
    }
    let execution = state
        .store()
        .create_execution(
            &caller.tenant,
            NewExecution {
                session_id: Some(session_id),
                parent_execution_id: None,
                user_id: caller.user_id.clone(),
                agent_type: EXTERNAL_AGENT.to_string(),
                agent_config: json!({}),
                input: Value::Null,
                metadata: json!({ MARKER_KEY: MARKER_VALUE }),
                status: ExecutionStatus::Running,
                lease: None,
            },
        )
        .await?;
    state
        .engine
        .publisher()
        .emit(
            &caller.tenant,
            Some(session_id),
            Some(execution.id),
            EventType::ExecutionStarted,
            "Conversation started",
            json!({ MARKER_KEY: MARKER_VALUE }),
        )
        .await;
    Ok(Some(execution))
}

// --- schemas of the items endpoints' fields and parameters ---------------------------------

/// A `version` (or `limit`): 0 to [`MAX_VERSION`].
pub(crate) fn version_schema() -> utoipa::openapi::schema::Schema {
    version_of(false)
}

/// A `version` of a body: 0 to [`MAX_VERSION`], or `null`.
pub(crate) fn version_or_null() -> utoipa::openapi::schema::Schema {
    version_of(true)
}

fn version_of(nullable: bool) -> utoipa::openapi::schema::Schema {
    utoipa::openapi::schema::ObjectBuilder::new()
        .schema_type(crate::schemas::typed(
            utoipa::openapi::schema::Type::Integer,
            nullable,
        ))
        .minimum(Some(0))
        .maximum(Some(MAX_VERSION))
        .build()
        .into()
}

/// An `op_id` query parameter ([`OP_ID_PATTERN`]).
pub(crate) fn op_id_schema() -> utoipa::openapi::schema::Schema {
    op_id_of(false)
}

/// An `op_id` of a body ([`OP_ID_PATTERN`]), or `null`.
pub(crate) fn op_id_or_null() -> utoipa::openapi::schema::Schema {
    op_id_of(true)
}

fn op_id_of(nullable: bool) -> utoipa::openapi::schema::Schema {
    utoipa::openapi::schema::ObjectBuilder::new()
        .schema_type(crate::schemas::typed(
            utoipa::openapi::schema::Type::String,
            nullable,
        ))
        .pattern(Some(OP_ID_PATTERN))
        .build()
        .into()
}

/// A list of items: JSON objects, at most `max` when given.
pub(crate) fn objects(max: Option<usize>) -> utoipa::openapi::schema::Schema {
    utoipa::openapi::schema::ArrayBuilder::new()
        .items(
            utoipa::openapi::schema::ObjectBuilder::new()
                .schema_type(utoipa::openapi::schema::Type::Object),
        )
        .max_items(max)
        .build()
        .into()
}
