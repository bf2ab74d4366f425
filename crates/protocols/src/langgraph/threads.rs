//! LangGraph's threads: Stepwise sessions. A thread created with a `thread_id` is the session
//! named that id (so a LangGraph client's own ids work); one created without is a new session,
//! whose id is the thread's. A `user` caller sees only its own threads, as on `/v1`.
//!
//! A thread's state is what the graph's worker saved with each run: the snapshot
//! `{"langgraph": {values, next, tasks, interrupts, checkpoint, parent_checkpoint, metadata,
//! created_at, stream}}` (`stepwise.worker`'s LangGraph agents save one when a run ends or
//! pauses).
//!
//! - `POST /threads` `{thread_id?, metadata?, if_exists?: "raise" | "do_nothing"}` → 200 Thread
//! - `GET /threads/{id}`, `PATCH /threads/{id}` `{metadata}` (merged), `DELETE /threads/{id}`
//! - `POST /threads/search` `{metadata?, ids?, status?, limit?, offset?}` → 200 `[Thread]`,
//!   newest first; `POST /threads/count` → a number
//! - `GET /threads/{id}/state` → ThreadState; `POST /threads/{id}/history` `{limit?, before?}`
//!   → `[ThreadState]`, newest first; `GET /threads/{id}/state/{checkpoint_id}` and `POST
//!   /threads/{id}/state/checkpoint` `{checkpoint: {checkpoint_id}}` → the saved state at that
//!   checkpoint (404 for one no run saved)
//! - `POST /threads/{id}/copy` → 200 the new Thread: the session forked whole (its runs,
//!   states and the graph's checkpoints), the caller's
//! - `POST /threads/{id}/state` `{values, as_node?, checkpoint_id?}` → `{checkpoint}`: written
//!   by a worker of the thread's graph (an execution queued for it, waited for)
//! - `POST /threads/prune` `{thread_ids, strategy?: "delete"}` → 200 `{pruned_count}` (the
//!   caller's threads among them deleted; `keep_latest` is 400: the checkpoints are the worker's)

use axum::Json;
use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use stepwise_core::{Execution, ExecutionStatus, Id, Session, SessionStatus};
use stepwise_engine::OpenExternal;
use stepwise_store::prelude::*;
use stepwise_store::{NewSession, PageRequest, SessionFilter, SessionPatch, Tenant};

use stepwise_server::limits::check_metadata;
use stepwise_server::{ApiError, ApiJson, ApiResult, AppState, Caller};

use crate::follower::{RunFollower, Start, Turn};
use crate::sessions::{check_chat_id, find_session, latest_root_execution, lookup_session};

/// The most threads one search answers, and the most sessions it reads.
const MAX_LIMIT: u32 = 1000;
const MAX_SCANNED: usize = 10_000;
/// The most states one history answers.
const MAX_HISTORY: u32 = 1000;
/// The most runs read back for a thread's latest state.
const MAX_RUNS_READ: usize = 50;

pub(super) fn router<S: Store>() -> Router<AppState<S>> {
    Router::new()
        .route("/threads", post(create::<S>))
        .route("/threads/search", post(search::<S>))
        .route("/threads/prune", post(prune::<S>))
        .route("/threads/count", post(count::<S>))
        .route(
            "/threads/{thread_id}",
            get(get_one::<S>).patch(update::<S>).delete(delete::<S>),
        )
        .route(
            "/threads/{thread_id}/state",
            get(get_state::<S>).post(update_state::<S>),
        )
        .route(
            "/threads/{thread_id}/state/checkpoint",
            post(post_state_at::<S>),
        )
        .route(
            "/threads/{thread_id}/state/{checkpoint_id}",
            get(get_state_at::<S>),
        )
        .route("/threads/{thread_id}/history", post(history::<S>))
        .route("/threads/{thread_id}/copy", post(copy::<S>))
}

/// A thread's id: the name it was created with when that is a UUID, else the session's id.
pub(crate) fn thread_id(session: &Session) -> String {
    match &session.name {
        Some(name) if name.parse::<Id>().is_ok() => name.clone(),
        _ => session.id.to_string(),
    }
}

/// Whether the session only holds a worker's graph checkpoints (`StepwiseSaver` keeps a
/// thread's checkpoints in a session of their own, with metadata `langgraph_thread_id`): not a
/// thread of its own for LangGraph's clients.
fn is_checkpoint_store(session: &Session) -> bool {
    session.metadata.get("langgraph_thread_id").is_some()
}

/// The thread (session) `id` names, if the caller sees it and it is not deleted.
pub(crate) async fn find<S: Store>(
    state: &AppState<S>,
    caller: &Caller,
    id: &str,
) -> ApiResult<Option<Session>> {
    Ok(find_session(state, caller, id, "thread_id")
        .await?
        .filter(|s| s.status != SessionStatus::Deleted))
}

/// The thread `id` names, or 404.
pub(crate) async fn load<S: Store>(
    state: &AppState<S>,
    caller: &Caller,
    id: &str,
) -> ApiResult<Session> {
    find(state, caller, id)
        .await?
        .ok_or_else(|| ApiError::not_found("thread"))
}

/// A new thread: the session named `thread_id`, or a new unnamed one.
pub(crate) async fn create_thread<S: Store>(
    state: &AppState<S>,
    caller: &Caller,
    thread_id: Option<&str>,
    metadata: Value,
) -> ApiResult<Session> {
    if let Some(id) = thread_id {
        check_chat_id(id, "thread_id")?;
        // A session whose id (or name) this is already, whoever's: a second thread of the
        // same id would be another's (a name is unique; an id the store cannot tell).
        if lookup_session(state, caller, id, "thread_id")
            .await?
            .is_some()
        {
            return Err(ApiError::conflict(
                "a thread (or another user's session) already has this id",
            ));
        }
    }
    let new = NewSession {
        user_id: caller.user_id.clone(),
        name: thread_id.map(str::to_string),
        title: None,
        related_type: None,
        related_id: None,
        initial_context_url: None,
        metadata,
    };
    Ok(state.store().create_session(&caller.tenant, new).await?)
}

/// A thread's status from its latest run and the state saved last: `interrupted` also
/// when the run ended with nodes still to run (a breakpoint of `interrupt_before` or
/// `interrupt_after`: the thread waits to go on), as LangGraph's server says.
pub(crate) fn status_of(latest: Option<&Execution>, saved: Option<&Value>) -> &'static str {
    let waits_to_go_on = saved
        .and_then(|s| s.get("next"))
        .and_then(Value::as_array)
        .is_some_and(|next| !next.is_empty());
    match latest.map(|e| e.status) {
        Some(ExecutionStatus::Pending | ExecutionStatus::Running) => "busy",
        Some(ExecutionStatus::Paused) => "interrupted",
        Some(ExecutionStatus::Failed) => "error",
        Some(ExecutionStatus::Completed) if waits_to_go_on => "interrupted",
        _ => "idle",
    }
}

/// What the graph's worker saved of a thread at a snapshot (`state.langgraph`), if anything.
pub(crate) async fn saved_state<S: Store>(
    state: &AppState<S>,
    tenant: &Tenant,
    snapshot: Option<Id>,
) -> ApiResult<Option<Value>> {
    let Some(id) = snapshot else { return Ok(None) };
    Ok(state
        .store()
        .get_snapshot(tenant, id)
        .await?
        .and_then(|s| s.state.get("langgraph").cloned())
        .filter(Value::is_object))
}

/// The newest state the graph's worker saved with this run (the server's own snapshots, of
/// a pause or a completion, come after it and are passed over).
pub(crate) async fn run_state<S: Store>(
    state: &AppState<S>,
    tenant: &Tenant,
    execution: Id,
) -> ApiResult<Option<Value>> {
    let mut snapshots = state.store().list_snapshots(tenant, execution).await?;
    snapshots.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(b.id.cmp(&a.id)));
    for snapshot in snapshots {
        if let Some(saved) = saved_state(state, tenant, Some(snapshot.id)).await? {
            return Ok(Some(saved));
        }
    }
    Ok(None)
}

/// The thread's runs (root executions), newest first.
pub(crate) async fn runs_of<S: Store>(
    state: &AppState<S>,
    caller: &Caller,
    session: &Session,
) -> ApiResult<Vec<Execution>> {
    let mut runs = state
        .store()
        .list_executions(&caller.tenant, session.id)
        .await?;
    runs.retain(|e| e.parent_execution_id.is_none());
    runs.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(b.id.cmp(&a.id)));
    Ok(runs)
}

/// Whether the execution is an `update_state`'s (which writes the thread's state through a
/// worker of its graph), not a run of the graph.
pub(crate) fn is_state_update(execution: &Execution) -> bool {
    execution
        .input
        .pointer("/langgraph/update_state")
        .is_some_and(|u| !u.is_null())
}

/// The thread's latest saved state: that of its newest run that saved one.
async fn latest_state<S: Store>(
    state: &AppState<S>,
    caller: &Caller,
    session: &Session,
) -> ApiResult<Option<Value>> {
    for run in runs_of(state, caller, session)
        .await?
        .iter()
        .take(MAX_RUNS_READ)
    {
        if let Some(saved) = run_state(state, &caller.tenant, run.id).await? {
            return Ok(Some(saved));
        }
    }
    Ok(None)
}

/// `ThreadState` from a saved state (or an empty thread's when none).
pub(crate) fn state_body(session: &Session, saved: Option<&Value>) -> Value {
    let field = |key: &str, empty: Value| {
        saved
            .and_then(|s| s.get(key))
            .filter(|v| !v.is_null())
            .cloned()
            .unwrap_or(empty)
    };
    let thread = thread_id(session);
    let with_thread = |checkpoint: Value| match checkpoint {
        Value::Object(mut map) => {
            map.insert("thread_id".into(), Value::String(thread.clone()));
            map.entry("checkpoint_ns").or_insert_with(|| json!(""));
            map.entry("checkpoint_map").or_insert(Value::Null);
            Value::Object(map)
        }
        other => other,
    };
    json!({
        "values": field("values", json!({})),
        "next": field("next", json!([])),
        "tasks": field("tasks", json!([])),
        "interrupts": field("interrupts", json!([])),
        "checkpoint": with_thread(field("checkpoint", json!({"thread_id": thread, "checkpoint_ns": "", "checkpoint_id": null}))),
        "parent_checkpoint": with_thread(field("parent_checkpoint", Value::Null)),
        "metadata": field("metadata", json!({})),
        "created_at": field("created_at", Value::Null),
    })
}

/// The thread as LangGraph answers it (`Thread`).
pub(crate) async fn thread_body<S: Store>(
    state: &AppState<S>,
    caller: &Caller,
    session: &Session,
) -> ApiResult<Value> {
    let latest = latest_root_execution(state.store(), &caller.tenant, session).await?;
    let saved = latest_state(state, caller, session).await?;
    let values = saved
        .as_ref()
        .and_then(|s| s.get("values"))
        .cloned()
        .unwrap_or_else(|| json!({}));
    let interrupts = interrupts_by_task(saved.as_ref());
    let error = latest
        .as_ref()
        .filter(|e| e.status == ExecutionStatus::Failed)
        .and_then(|e| e.error_message.clone());
    Ok(json!({
        "thread_id": thread_id(session),
        "created_at": session.created_at.to_rfc3339(),
        "updated_at": session.updated_at.to_rfc3339(),
        "state_updated_at": session.updated_at.to_rfc3339(),
        "metadata": metadata_object(&session.metadata),
        "status": status_of(latest.as_ref(), saved.as_ref()),
        "values": values,
        "interrupts": interrupts,
        "config": {},
        "error": error,
    }))
}

/// `{task_id: [interrupt]}` of a saved state's tasks.
fn interrupts_by_task(saved: Option<&Value>) -> Value {
    let mut out = Map::new();
    let tasks = saved.and_then(|s| s.get("tasks")).and_then(Value::as_array);
    for task in tasks.into_iter().flatten() {
        let found = task.get("interrupts").and_then(Value::as_array);
        if let (Some(id), Some(found)) = (task.get("id").and_then(Value::as_str), found)
            && !found.is_empty()
        {
            out.insert(id.to_string(), Value::Array(found.clone()));
        }
    }
    Value::Object(out)
}

fn metadata_object(metadata: &Value) -> Value {
    if metadata.is_object() {
        metadata.clone()
    } else {
        json!({})
    }
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct CreateBody {
    thread_id: Option<String>,
    metadata: Option<Value>,
    if_exists: Option<String>,
}

async fn create<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    ApiJson(body): ApiJson<CreateBody>,
) -> ApiResult<Json<Value>> {
    let metadata = check_metadata("metadata", &body.metadata)?;
    if let Some(id) = body.thread_id.as_deref()
        && let Some(existing) = find(&state, &caller, id).await?
    {
        return match body.if_exists.as_deref() {
            Some("do_nothing") => Ok(Json(thread_body(&state, &caller, &existing).await?)),
            _ => Err(ApiError::conflict(format!("thread {id} already exists"))),
        };
    }
    let session = create_thread(&state, &caller, body.thread_id.as_deref(), metadata)
        .await
        .map_err(|e| {
            if e.status == StatusCode::CONFLICT {
                ApiError::conflict("a thread (or another user's session) already has this id")
            } else {
                e
            }
        })?;
    Ok(Json(thread_body(&state, &caller, &session).await?))
}

async fn get_one<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    let session = load(&state, &caller, &id).await?;
    Ok(Json(thread_body(&state, &caller, &session).await?))
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct UpdateBody {
    metadata: Option<Value>,
}

async fn update<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<UpdateBody>,
) -> ApiResult<Json<Value>> {
    let session = load(&state, &caller, &id).await?;
    let added = check_metadata("metadata", &body.metadata)?;
    let mut merged = metadata_object(&session.metadata);
    if let (Some(into), Value::Object(added)) = (merged.as_object_mut(), added) {
        into.extend(added);
    }
    stepwise_server::limits::check_metadata_limits("metadata", &merged)?;
    let patch = SessionPatch {
        metadata: Some(merged),
        ..SessionPatch::default()
    };
    let session = state
        .store()
        .update_session(&caller.tenant, session.id, patch)
        .await?
        .ok_or_else(|| ApiError::not_found("thread"))?;
    Ok(Json(thread_body(&state, &caller, &session).await?))
}

async fn delete<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    let session = load(&state, &caller, &id).await?;
    remove(&state, &caller, &session).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The most threads one prune names.
const MAX_PRUNE: usize = 1000;

#[derive(Deserialize, Default)]
#[serde(default)]
struct PruneBody {
    thread_ids: Vec<String>,
    strategy: Option<String>,
}

/// `threads.prune`: the threads named are deleted (`strategy: "delete"`, the default); those
/// the caller cannot see, or that are gone already, are not counted.
async fn prune<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    ApiJson(body): ApiJson<PruneBody>,
) -> ApiResult<Json<Value>> {
    match body.strategy.as_deref() {
        None | Some("delete") => {}
        Some("keep_latest") => {
            return Err(ApiError::invalid(
                "strategy",
                "keep_latest is not served: a thread's checkpoints are its worker's; prune with strategy delete",
            ));
        }
        Some(other) => {
            return Err(ApiError::invalid(
                "strategy",
                format!("strategy '{other}' is neither delete nor keep_latest"),
            ));
        }
    }
    if body.thread_ids.len() > MAX_PRUNE {
        return Err(ApiError::invalid(
            "thread_ids",
            format!("at most {MAX_PRUNE} threads at once"),
        ));
    }
    let mut pruned = 0;
    for id in &body.thread_ids {
        if let Some(session) = find(&state, &caller, id).await? {
            remove(&state, &caller, &session).await?;
            pruned += 1;
        }
    }
    Ok(Json(json!({"pruned_count": pruned})))
}

/// Removes a thread: its runs stop first (a worker's at its next step).
async fn remove<S: Store>(
    state: &AppState<S>,
    caller: &Caller,
    session: &Session,
) -> ApiResult<()> {
    for busy in state
        .engine
        .busy_executions(&caller.tenant, session.id)
        .await?
    {
        // Its runs stop first (a worker's at its next step).
        if let Err(e) = state.engine.cancel(&caller.tenant, busy.id).await {
            tracing::debug!(execution = %busy.id, error = %e, "a deleted thread's run was not cancelled");
        }
    }
    state
        .store()
        .delete_session(&caller.tenant, session.id)
        .await?;
    Ok(())
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct SearchBody {
    metadata: Option<Map<String, Value>>,
    /// Threads whose state holds each of these keys with exactly this value.
    values: Option<Map<String, Value>>,
    ids: Option<Vec<String>>,
    status: Option<String>,
    limit: Option<u32>,
    offset: Option<u32>,
}

/// The threads a search finds, newest first: `skip` of them passed over, at most `take`.
async fn found<S: Store>(
    state: &AppState<S>,
    caller: &Caller,
    body: &SearchBody,
    skip: usize,
    take: usize,
) -> ApiResult<Vec<Value>> {
    let mut filter = SessionFilter {
        user_id: caller.session_owner_filter(None),
        ..SessionFilter::default()
    };
    let mut exact: Vec<(String, Value)> = Vec::new();
    for (key, value) in body.metadata.iter().flatten() {
        match value {
            Value::String(s) => filter.metadata.push((key.clone(), s.clone())),
            Value::Number(_) | Value::Bool(_) => {
                filter.metadata.push((key.clone(), value.to_string()))
            }
            other => exact.push((key.clone(), other.clone())),
        }
    }
    let mut out = Vec::new();
    let mut skipped = 0;
    let mut scanned = 0;
    let mut cursor = None;
    loop {
        let page = state
            .store()
            .list_sessions(
                &caller.tenant,
                filter.clone(),
                PageRequest {
                    limit: 200,
                    cursor: cursor.take(),
                },
            )
            .await?;
        for session in &page.items {
            scanned += 1;
            if !caller.sees(session)
                || is_checkpoint_store(session)
                || exact
                    .iter()
                    .any(|(k, v)| session.metadata.get(k) != Some(v))
                || body
                    .ids
                    .as_ref()
                    .is_some_and(|ids| !ids.contains(&thread_id(session)))
            {
                continue;
            }
            let thread = thread_body(state, caller, session).await?;
            if body
                .status
                .as_deref()
                .is_some_and(|want| thread["status"] != want)
                || body
                    .values
                    .iter()
                    .flatten()
                    .any(|(k, v)| thread["values"].get(k) != Some(v))
            {
                continue;
            }
            if skipped < skip {
                skipped += 1;
                continue;
            }
            out.push(thread);
            if out.len() >= take {
                return Ok(out);
            }
        }
        match page.next_cursor {
            Some(next) if scanned < MAX_SCANNED => cursor = Some(next),
            _ => return Ok(out),
        }
    }
}

async fn search<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    ApiJson(body): ApiJson<SearchBody>,
) -> ApiResult<Json<Vec<Value>>> {
    let limit = body.limit.unwrap_or(10).min(MAX_LIMIT) as usize;
    let offset = body.offset.unwrap_or(0) as usize;
    Ok(Json(found(&state, &caller, &body, offset, limit).await?))
}

async fn count<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    ApiJson(body): ApiJson<SearchBody>,
) -> ApiResult<Json<usize>> {
    Ok(Json(
        found(&state, &caller, &body, 0, MAX_SCANNED).await?.len(),
    ))
}

async fn get_state<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    let session = load(&state, &caller, &id).await?;
    let saved = latest_state(&state, &caller, &session).await?;
    Ok(Json(state_body(&session, saved.as_ref())))
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct HistoryBody {
    limit: Option<u32>,
    before: Option<Value>,
}

/// The checkpoint id a `before` config names (`{configurable: {checkpoint_id}}`,
/// `{checkpoint_id}`, or the id itself).
fn checkpoint_id_of(config: &Value) -> Option<&str> {
    if let Some(id) = config.as_str() {
        return Some(id);
    }
    config
        .get("configurable")
        .unwrap_or(config)
        .get("checkpoint_id")
        .and_then(Value::as_str)
}

/// Hands the thread's saved states (as `ThreadState`), newest first, to `visit` until it
/// answers `false`.
async fn visit_states<S: Store>(
    state: &AppState<S>,
    caller: &Caller,
    session: &Session,
    mut visit: impl FnMut(Value) -> bool,
) -> ApiResult<()> {
    for execution in runs_of(state, caller, session).await? {
        let mut snapshots = state
            .store()
            .list_snapshots(&caller.tenant, execution.id)
            .await?;
        snapshots.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(b.id.cmp(&a.id)));
        for snapshot in snapshots {
            let Some(saved) = saved_state(state, &caller.tenant, Some(snapshot.id)).await? else {
                continue;
            };
            if !visit(state_body(session, Some(&saved))) {
                return Ok(());
            }
        }
    }
    Ok(())
}

async fn history<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<HistoryBody>,
) -> ApiResult<Json<Vec<Value>>> {
    let session = load(&state, &caller, &id).await?;
    let limit = body.limit.unwrap_or(10).min(MAX_HISTORY) as usize;
    let mut before = body.before.as_ref().and_then(checkpoint_id_of);
    let mut out = Vec::new();
    if limit == 0 {
        return Ok(Json(out));
    }
    visit_states(&state, &caller, &session, |body| {
        if let Some(wanted) = before {
            if body["checkpoint"]["checkpoint_id"].as_str() == Some(wanted) {
                before = None;
            }
            return true;
        }
        out.push(body);
        out.len() < limit
    })
    .await?;
    Ok(Json(out))
}

/// The thread's saved state at `checkpoint_id`, or 404.
async fn state_at<S: Store>(
    state: &AppState<S>,
    caller: &Caller,
    id: &str,
    checkpoint_id: &str,
) -> ApiResult<Json<Value>> {
    let session = load(state, caller, id).await?;
    let mut found = None;
    visit_states(state, caller, &session, |body| {
        if body["checkpoint"]["checkpoint_id"].as_str() == Some(checkpoint_id) {
            found = Some(body);
        }
        found.is_none()
    })
    .await?;
    found
        .map(Json)
        .ok_or_else(|| ApiError::not_found("checkpoint"))
}

/// `threads.get_state(thread_id, checkpoint_id=...)`.
async fn get_state_at<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path((id, checkpoint_id)): Path<(String, String)>,
) -> ApiResult<Json<Value>> {
    state_at(&state, &caller, &id, &checkpoint_id).await
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct StateAtBody {
    /// `{checkpoint_id, checkpoint_ns?}` (`subgraphs` is accepted and has no use here).
    checkpoint: Value,
}

/// `threads.get_state(thread_id, checkpoint={checkpoint_id, ...})`.
async fn post_state_at<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<StateAtBody>,
) -> ApiResult<Json<Value>> {
    let checkpoint_id = checkpoint_id_of(&body.checkpoint)
        .ok_or_else(|| ApiError::invalid("checkpoint", "checkpoint must name a checkpoint_id"))?;
    state_at(&state, &caller, &id, checkpoint_id).await
}

/// How long `update_state` waits for a worker of the thread's graph.
const UPDATE_PATIENCE: std::time::Duration = std::time::Duration::from_secs(60);

#[derive(Deserialize, Default)]
#[serde(default)]
struct UpdateStateBody {
    values: Value,
    as_node: Option<String>,
    checkpoint_id: Option<String>,
    checkpoint: Option<Value>,
}

/// `threads.update_state`: the values are written to the thread by a worker of its graph (the
/// graph of its latest run), in an execution queued for it; answers the new checkpoint.
async fn update_state<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<UpdateStateBody>,
) -> ApiResult<Json<Value>> {
    let session = load(&state, &caller, &id).await?;
    let graph = runs_of(&state, &caller, &session)
        .await?
        .first()
        .map(|run| run.agent_type.clone())
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "invalid_state",
                "the thread has had no run: its graph, which writes its state, is not known yet",
            )
        })?;
    let checkpoint_id = body.checkpoint_id.or_else(|| {
        body.checkpoint
            .as_ref()
            .and_then(|c| c.get("checkpoint_id"))
            .and_then(Value::as_str)
            .map(str::to_string)
    });
    let input = json!({
        "message": "update_state",
        "langgraph": {
            "update_state": {"values": body.values, "as_node": body.as_node, "checkpoint_id": checkpoint_id},
            "thread_id": thread_id(&session),
        },
    });
    let slot = state.stream_slot(&caller.tenant, session.id)?;
    let live = state.store().subscribe(&caller.tenant, session.id);
    let execution = state
        .engine
        .queue_for_worker(
            &caller.tenant,
            OpenExternal {
                session_id: session.id,
                parent_execution_id: None,
                user_id: caller.user_id.clone(),
                agent_config: Value::Null,
                input,
                metadata: Value::Null,
                leased: false,
            },
            graph.clone(),
        )
        .await?;
    let turn = Turn {
        execution_id: execution.id,
        message_id: None,
    };
    let mut follower = RunFollower::new(
        &state,
        caller.tenant.clone(),
        session.id,
        turn,
        live,
        Start::Live,
    );
    let waited = tokio::time::timeout(UPDATE_PATIENCE, async {
        while follower.next().await.is_some() {}
    })
    .await;
    drop(slot);
    if waited.is_err() {
        if let Err(e) = state.engine.cancel(&caller.tenant, execution.id).await {
            tracing::debug!(execution = %execution.id, error = %e, "an update_state nobody ran was not cancelled");
        }
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            format!(
                "no worker of graph '{graph}' wrote the state within {} s",
                UPDATE_PATIENCE.as_secs()
            ),
        ));
    }
    let done = state
        .store()
        .get_execution(&caller.tenant, execution.id)
        .await?
        .ok_or_else(|| ApiError::not_found("thread"))?;
    if done.status != ExecutionStatus::Completed {
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_state",
            format!(
                "the state was not written: {}",
                done.error_message
                    .unwrap_or_else(|| done.status.to_string())
            ),
        ));
    }
    let mut checkpoint = done
        .output
        .get("checkpoint")
        .cloned()
        .unwrap_or_else(|| json!({}));
    if let Some(map) = checkpoint.as_object_mut() {
        map.insert("thread_id".into(), Value::String(thread_id(&session)));
    }
    Ok(Json(json!({"checkpoint": checkpoint})))
}

async fn copy<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    let session = load(&state, &caller, &id).await?;
    let copied = stepwise_server::fork_session(
        &state,
        &caller,
        session.id,
        stepwise_store::rules::ForkPoint::default(),
        None,
    )
    .await?;
    Ok(Json(thread_body(&state, &caller, &copied).await?))
}
