//! LangGraph's runs: executions of the assistant's graph, queued for the workers that serve
//! it, leased and resumed like every execution. A run posts the user's turn to the thread's
//! session (its text: the last human message of `input`, else the input as JSON) with the
//! run's body under the execution input's `langgraph` key, which the worker's graph runs
//! with. A run whose `command.resume` answers an interrupted thread resumes that run (on any
//! worker) with the resume value.
//!
//! - `POST /threads/{id}/runs` (background) → 200 Run; `/runs/stream` → the run's stream
//!   (see `stream.rs`); `/runs/wait` → 200 the thread's values when the run ends (with
//!   `__interrupt__` when it paused, `{"__error__": {...}}` when it failed). The same three
//!   under `/runs` without a thread make one (a stateless run: its thread is kept).
//! - `multitask_strategy` on a busy thread: `enqueue`, `reject` (409), `interrupt`,
//!   `rollback` (`on_busy` of a message); `if_not_exists: "create"` makes the thread;
//!   `on_disconnect: "cancel"` cancels a streamed run whose client leaves.
//! - `GET /threads/{id}/runs` `?limit&offset&status`, `GET /threads/{id}/runs/{run}`,
//!   `DELETE` it (the run and what it wrote), `POST .../cancel?wait&action=interrupt|rollback`,
//!   `GET .../join` (its values once ended), `GET .../stream` (its stream again: from its
//!   start, or after `Last-Event-ID`).
//! - `POST /runs/batch` `[RunCreate]` → 200 `[Run]` (stateless background runs, at most 100);
//!   `POST /runs/cancel?action` `{thread_id, run_ids}` or `{status: pending | running | all}`
//!   → 204 (the caller's runs only).

use axum::Json;
use axum::Router;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::{Value, json};
use stepwise_core::{Execution, ExecutionStatus, Id, Session};
use stepwise_engine::{AgentChoice, MessageInput};
use stepwise_store::prelude::*;
use stepwise_store::{PageRequest, SessionFilter, StoreError};

use stepwise_server::{AgentBody, ApiError, ApiJson, ApiResult, AppState, Caller};

use super::assistants;
use super::stream::{CancelOnDrop, Modes, Streamed, error_body, respond};
use super::threads::{self, thread_id};
use crate::follower::{RunFollower, Start, Turn, find_turn, is_live};
use crate::sessions::{latest_root_execution, turn_message};

/// The most runs one listing answers.
const MAX_LIST: u32 = 1000;

pub(super) fn router<S: Store>() -> Router<AppState<S>> {
    Router::new()
        .route(
            "/threads/{thread_id}/runs",
            post(create::<S>).get(list::<S>),
        )
        .route("/threads/{thread_id}/runs/stream", post(stream::<S>))
        .route("/threads/{thread_id}/runs/wait", post(wait::<S>))
        .route(
            "/threads/{thread_id}/runs/{run_id}",
            get(get_one::<S>).delete(delete::<S>),
        )
        .route(
            "/threads/{thread_id}/runs/{run_id}/cancel",
            post(cancel::<S>),
        )
        .route("/threads/{thread_id}/runs/{run_id}/join", get(join::<S>))
        .route(
            "/threads/{thread_id}/runs/{run_id}/stream",
            get(join_stream::<S>),
        )
        .route("/runs", post(create::<S>))
        .route("/runs/batch", post(batch::<S>))
        .route("/runs/cancel", post(cancel_many::<S>))
        .route("/runs/{run_id}/stream", get(join_stream_of_run::<S>))
        .route("/runs/stream", post(stream::<S>))
        .route("/runs/wait", post(wait::<S>))
}

/// A run's body (`RunCreate` of the SDK). Fields the SDK sends that Stepwise has no use for
/// (`webhook`, `feedback_keys`, `after_seconds`, `durability`, ...) are accepted.
#[derive(Deserialize, Default)]
#[serde(default)]
struct RunBody {
    assistant_id: Option<String>,
    input: Option<Value>,
    command: Option<Value>,
    stream_mode: Option<Value>,
    stream_subgraphs: Option<bool>,
    config: Option<Value>,
    context: Option<Value>,
    metadata: Option<Value>,
    checkpoint_id: Option<String>,
    checkpoint: Option<Value>,
    interrupt_before: Option<Value>,
    interrupt_after: Option<Value>,
    multitask_strategy: Option<String>,
    if_not_exists: Option<String>,
    on_disconnect: Option<String>,
}

/// What `multitask_strategy` does while the thread has a run queued or running.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Multitask {
    Enqueue,
    Reject,
    Interrupt,
    Rollback,
}

impl Multitask {
    fn parse(text: Option<&str>) -> ApiResult<Self> {
        match text {
            None | Some("reject") => Ok(Multitask::Reject),
            Some("enqueue") => Ok(Multitask::Enqueue),
            Some("interrupt") => Ok(Multitask::Interrupt),
            Some("rollback") => Ok(Multitask::Rollback),
            Some(other) => Err(ApiError::invalid(
                "multitask_strategy",
                format!(
                    "multitask_strategy '{other}' is none of reject, enqueue, interrupt, rollback"
                ),
            )),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Multitask::Enqueue => "enqueue",
            Multitask::Reject => "reject",
            Multitask::Interrupt => "interrupt",
            Multitask::Rollback => "rollback",
        }
    }
}

/// The text of the turn a run posts: the last human message of `input.messages` (a string, a
/// `{role|type, content}` object or a `[role, content]` pair), else the input (or command)
/// as JSON.
fn turn_text(input: Option<&Value>, command: Option<&Value>) -> String {
    let human = |message: &Value| -> Option<String> {
        let (role, content) = match message {
            Value::String(text) => return Some(text.clone()),
            Value::Array(pair) if pair.len() == 2 => (pair[0].as_str(), &pair[1]),
            Value::Object(map) => (
                map.get("role")
                    .or_else(|| map.get("type"))
                    .and_then(Value::as_str),
                map.get("content")?,
            ),
            _ => return None,
        };
        if !matches!(role, Some("human" | "user")) {
            return None;
        }
        match content {
            Value::String(text) => Some(text.clone()),
            Value::Array(parts) => Some(
                parts
                    .iter()
                    .filter_map(|p| p.get("text").and_then(Value::as_str))
                    .collect::<Vec<_>>()
                    .join(""),
            ),
            _ => None,
        }
    };
    let from_messages = input
        .and_then(|i| i.get("messages"))
        .and_then(Value::as_array)
        .and_then(|list| list.iter().rev().find_map(human))
        .filter(|t| !t.trim().is_empty());
    if let Some(text) = from_messages {
        return text;
    }
    let resume = command.and_then(|c| c.get("resume"));
    match resume.or(input).or(command) {
        Some(Value::String(text)) if !text.trim().is_empty() => text.clone(),
        Some(value) if !value.is_null() => value.to_string(),
        _ => "(continue)".into(),
    }
}

/// What a `command` answers a paused run with: its `resume` value, or, when it also has an
/// `update` or a `goto`, the whole command under [`COMMAND_KEY`] (the worker resumes the graph
/// with all of it, as LangGraph does).
fn resume_answer(command: &Value) -> Option<Value> {
    let more = ["update", "goto"]
        .iter()
        .any(|key| command.get(key).is_some_and(|v| !v.is_null()));
    if more {
        Some(json!({ COMMAND_KEY: command }))
    } else {
        command.get("resume").cloned()
    }
}

/// The key of a whole LangGraph command in a resume answer (`stepwise.worker` reads it).
const COMMAND_KEY: &str = "__langgraph_command__";

/// The run as LangGraph answers it (`Run`).
fn run_body(execution: &Execution, thread: &str) -> Value {
    let lg = execution.input.get("langgraph");
    let field = |key: &str| lg.and_then(|l| l.get(key)).cloned().unwrap_or(Value::Null);
    let status = match execution.status {
        ExecutionStatus::Pending => "pending",
        ExecutionStatus::Running => "running",
        ExecutionStatus::Paused | ExecutionStatus::Cancelled => "interrupted",
        ExecutionStatus::Completed => "success",
        ExecutionStatus::Failed => "error",
    };
    let metadata = match field("metadata") {
        Value::Object(map) => Value::Object(map),
        _ => json!({}),
    };
    let assistant = match field("assistant_id") {
        Value::Null => Value::String(assistants::assistant_id(&execution.agent_type)),
        other => other,
    };
    json!({
        "run_id": execution.id.to_string(),
        "thread_id": thread,
        "assistant_id": assistant,
        "created_at": execution.created_at.to_rfc3339(),
        "updated_at": execution.completed_at.or(execution.started_at).unwrap_or(execution.created_at).to_rfc3339(),
        "status": status,
        "metadata": metadata,
        "multitask_strategy": field("multitask_strategy"),
        "kwargs": run_kwargs(lg),
    })
}

/// A run's `kwargs` as LangGraph's server answers them: what the run was created with
/// (`input`, `command`, `config`, `context`, `stream_mode`, the breakpoints, the fork point).
fn run_kwargs(lg: Option<&Value>) -> Value {
    const KEPT: [&str; 8] = [
        "input",
        "command",
        "config",
        "context",
        "stream_mode",
        "interrupt_before",
        "interrupt_after",
        "checkpoint_id",
    ];
    let mut kwargs = serde_json::Map::new();
    for key in KEPT {
        if let Some(value) = lg.and_then(|l| l.get(key)).filter(|v| !v.is_null()) {
            kwargs.insert(key.to_string(), value.clone());
        }
    }
    Value::Object(kwargs)
}

/// A run just started: its thread, its execution, and its follower when it is streamed.
struct Started<S: Store> {
    session: Session,
    execution: Execution,
    follower: Option<(RunFollower<S>, stepwise_server::SubscriberSlot)>,
}

/// Starts a run on the thread `thread` names (a new one when `None`).
async fn start<S: Store>(
    state: &AppState<S>,
    caller: &Caller,
    thread: Option<&str>,
    body: &RunBody,
    follow: bool,
) -> ApiResult<Started<S>> {
    let assistant = body
        .assistant_id
        .as_deref()
        .ok_or_else(|| ApiError::invalid("assistant_id", "assistant_id is required"))?;
    let assistant = assistants::run_assistant(state, caller, assistant).await?;
    let graph = assistant.graph.clone();
    let multitask = Multitask::parse(body.multitask_strategy.as_deref())?;
    if body.input.is_some() && body.command.is_some() {
        return Err(ApiError::bad_request("send input or command, not both"));
    }
    let session = match thread {
        None => threads::create_thread(state, caller, None, json!({})).await?,
        Some(id) => match threads::find(state, caller, id).await? {
            Some(session) => session,
            None if body.if_not_exists.as_deref() == Some("create") => {
                threads::create_thread(state, caller, Some(id), json!({})).await?
            }
            None => return Err(ApiError::not_found("thread")),
        },
    };
    let lg = json!({
        "input": body.input,
        "command": body.command,
        "config": assistants::merged_config(&assistant.config, body.config.as_ref()),
        "context": assistants::merged_context(&assistant.context, body.context.as_ref()),
        "metadata": body.metadata,
        "checkpoint_id": body.checkpoint_id.clone().or_else(|| body
            .checkpoint
            .as_ref()
            .and_then(|c| c.get("checkpoint_id"))
            .and_then(Value::as_str)
            .map(str::to_string)),
        "interrupt_before": body.interrupt_before,
        "interrupt_after": body.interrupt_after,
        "stream_mode": body.stream_mode,
        "thread_id": thread_id(&session),
        "assistant_id": assistant.assistant_id,
        "multitask_strategy": multitask.name(),
    });
    stepwise_server::limits::check_metadata_limits(
        "metadata",
        body.metadata.as_ref().unwrap_or(&Value::Null),
    )?;
    let agent = AgentBody {
        agent_type: graph.clone(),
        config: None,
        wait: None,
    };
    let mut input: MessageInput = turn_message(
        state,
        turn_text(body.input.as_ref(), body.command.as_ref()),
        Some(agent),
    )?;
    input.agent = Some(AgentChoice {
        agent_type: graph,
        config: Value::Null,
    });
    input.answer = body.command.as_ref().and_then(resume_answer);
    input.extra_input = Some(("langgraph", lg));

    // New input on a thread paused in an `interrupt()` starts a new run from that input, as
    // LangGraph does (the pending interrupt is dropped, the paused run ends cancelled); only a
    // `command` answers the interrupt.
    if body.command.is_none()
        && body.input.as_ref().is_some_and(|i| !i.is_null())
        && let Some(paused) = latest_root_execution(state.store(), &caller.tenant, &session)
            .await?
            .filter(|e| e.status == ExecutionStatus::Paused)
    {
        match state.engine.cancel(&caller.tenant, paused.id).await {
            // (Resumed or ended meanwhile: the new input queues behind it as usual.)
            Ok(_) | Err(StoreError::Conflict(_) | StoreError::InvalidState(_)) => {}
            Err(e) => return Err(e.into()),
        }
    }
    let busy = state
        .engine
        .busy_executions(&caller.tenant, session.id)
        .await?;
    if !busy.is_empty() {
        match multitask {
            Multitask::Enqueue | Multitask::Reject => {}
            Multitask::Interrupt | Multitask::Rollback => {
                let remove = multitask == Multitask::Rollback;
                state
                    .engine
                    .make_room(&caller.tenant, session.id, &busy, remove)
                    .await?;
            }
        }
    }
    let session = threads::load(state, caller, &session.id.to_string()).await?;
    let slot = if follow {
        Some(state.stream_slot(&caller.tenant, session.id)?)
    } else {
        None
    };
    let live = state.store().subscribe(&caller.tenant, session.id);
    let engine = &state.engine;
    let submitted = if multitask == Multitask::Reject {
        engine
            .submit_message_if_idle(&caller.tenant, &caller.user_id, &session, input)
            .await
    } else {
        engine
            .submit_message_to(&caller.tenant, &caller.user_id, &session, input)
            .await
    };
    let submitted = match submitted {
        Err(StoreError::Busy(_)) => {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "session_busy",
                "the thread has a run queued or running (multitask_strategy: reject); send enqueue, interrupt or rollback to go on",
            ));
        }
        other => other?,
    };
    let follower = slot.map(|slot| {
        let turn = Turn {
            execution_id: submitted.execution.id,
            message_id: Some(submitted.message.id),
        };
        let follower = RunFollower::new(
            state,
            caller.tenant.clone(),
            session.id,
            turn,
            live,
            Start::Live,
        );
        (follower, slot)
    });
    Ok(Started {
        session,
        execution: submitted.execution,
        follower,
    })
}

/// `Content-Location` naming the run, as LangGraph's server answers a new run.
fn with_location(mut response: Response, thread: &str, run: Id) -> Response {
    if let Ok(value) = header::HeaderValue::from_str(&format!("/threads/{thread}/runs/{run}")) {
        response
            .headers_mut()
            .insert(header::CONTENT_LOCATION, value);
    }
    response
}

async fn create_run<S: Store>(
    state: &AppState<S>,
    caller: &Caller,
    thread: Option<&str>,
    body: RunBody,
) -> ApiResult<Response> {
    let started = start(state, caller, thread, &body, false).await?;
    let thread = thread_id(&started.session);
    let response = Json(run_body(&started.execution, &thread)).into_response();
    Ok(with_location(response, &thread, started.execution.id))
}

async fn stream_run<S: Store>(
    state: AppState<S>,
    caller: Caller,
    thread: Option<&str>,
    body: RunBody,
) -> ApiResult<Response> {
    let started = start(&state, &caller, thread, &body, true).await?;
    let modes = Modes::new(
        body.stream_mode.as_ref(),
        body.stream_subgraphs.unwrap_or(false),
    );
    let thread_id = thread_id(&started.session);
    Ok(respond(Streamed {
        tenant: caller.tenant.clone(),
        execution: started.execution,
        thread_id,
        modes,
        follower: started.follower,
        cancel_on_disconnect: body.on_disconnect.as_deref() == Some("cancel"),
        state,
    }))
}

async fn wait_run<S: Store>(
    state: &AppState<S>,
    caller: &Caller,
    thread: Option<&str>,
    body: RunBody,
) -> ApiResult<Response> {
    let started = start(state, caller, thread, &body, true).await?;
    let thread = thread_id(&started.session);
    let run = started.execution.id;
    // `on_disconnect: "cancel"`: a client that leaves before the run ends drops this
    // request, and the run is cancelled.
    let mut guard = (body.on_disconnect.as_deref() == Some("cancel"))
        .then(|| CancelOnDrop::new(state, &caller.tenant, run));
    if let Some((mut follower, _slot)) = started.follower {
        while follower.next().await.is_some() {}
    }
    if let Some(guard) = &mut guard {
        guard.disarm();
    }
    let values = outcome(state, caller, run).await?;
    Ok(with_location(Json(values).into_response(), &thread, run))
}

/// What `wait` and `join` answer once a run has ended: the thread's values as the run left
/// them (with `__interrupt__` when it paused), or `{"__error__": {error, message}}`.
async fn outcome<S: Store>(state: &AppState<S>, caller: &Caller, run: Id) -> ApiResult<Value> {
    let execution = state
        .store()
        .get_execution(&caller.tenant, run)
        .await?
        .ok_or_else(|| ApiError::not_found("run"))?;
    if execution.status == ExecutionStatus::Failed {
        let failure = execution.error_message.unwrap_or_default();
        return Ok(json!({"__error__": error_body(&failure)}));
    }
    let saved = threads::run_state(state, &caller.tenant, execution.id).await?;
    let mut values = saved
        .as_ref()
        .and_then(|s| s.get("values"))
        .cloned()
        .unwrap_or_else(|| json!({}));
    let interrupts = saved
        .as_ref()
        .and_then(|s| s.get("interrupts"))
        .and_then(Value::as_array)
        .filter(|list| !list.is_empty());
    if execution.status == ExecutionStatus::Paused
        && let (Some(map), Some(interrupts)) = (values.as_object_mut(), interrupts)
    {
        map.insert("__interrupt__".into(), Value::Array(interrupts.clone()));
    }
    Ok(values)
}

// Each of these serves its path under a thread and without one (a stateless run).

async fn create<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    thread: Option<Path<String>>,
    ApiJson(body): ApiJson<RunBody>,
) -> ApiResult<Response> {
    let thread = thread.map(|Path(t)| t);
    create_run(&state, &caller, thread.as_deref(), body).await
}

async fn stream<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    thread: Option<Path<String>>,
    ApiJson(body): ApiJson<RunBody>,
) -> ApiResult<Response> {
    let thread = thread.map(|Path(t)| t);
    stream_run(state, caller, thread.as_deref(), body).await
}

async fn wait<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    thread: Option<Path<String>>,
    ApiJson(body): ApiJson<RunBody>,
) -> ApiResult<Response> {
    let thread = thread.map(|Path(t)| t);
    wait_run(&state, &caller, thread.as_deref(), body).await
}

/// The thread and one of its runs (a root execution of its session), or 404.
async fn load_run<S: Store>(
    state: &AppState<S>,
    caller: &Caller,
    thread: &str,
    run: &str,
) -> ApiResult<(Session, Execution)> {
    let session = threads::load(state, caller, thread).await?;
    let id = run.parse::<Id>().map_err(|_| ApiError::not_found("run"))?;
    let execution = state
        .store()
        .get_execution(&caller.tenant, id)
        .await?
        .filter(|e| e.session_id == Some(session.id) && e.parent_execution_id.is_none())
        .ok_or_else(|| ApiError::not_found("run"))?;
    Ok((session, execution))
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ListQuery {
    limit: Option<u32>,
    offset: Option<u32>,
    status: Option<String>,
}

async fn list<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path(thread): Path<String>,
    stepwise_server::ApiQuery(query): stepwise_server::ApiQuery<ListQuery>,
) -> ApiResult<Json<Vec<Value>>> {
    let session = threads::load(&state, &caller, &thread).await?;
    let thread = thread_id(&session);
    let runs = threads::runs_of(&state, &caller, &session).await?;
    let limit = query.limit.unwrap_or(10).min(MAX_LIST) as usize;
    Ok(Json(
        runs.iter()
            // `update_state` writes a checkpoint through an execution of its own: not a run.
            .filter(|e| !threads::is_state_update(e))
            .map(|e| run_body(e, &thread))
            .filter(|r| query.status.as_deref().is_none_or(|s| r["status"] == s))
            .skip(query.offset.unwrap_or(0) as usize)
            .take(limit)
            .collect(),
    ))
}

async fn get_one<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path((thread, run)): Path<(String, String)>,
) -> ApiResult<Json<Value>> {
    let (session, execution) = load_run(&state, &caller, &thread, &run).await?;
    Ok(Json(run_body(&execution, &thread_id(&session))))
}

/// Removes a run and everything it wrote (cancelling it first when it still runs).
async fn delete<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path((thread, run)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    let (session, execution) = load_run(&state, &caller, &thread, &run).await?;
    state
        .engine
        .make_room(&caller.tenant, session.id, &[execution], true)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct CancelQuery {
    wait: Option<String>,
    action: Option<String>,
}

fn truthy(flag: Option<&str>) -> bool {
    matches!(flag, Some("1" | "true" | "True"))
}

async fn cancel<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path((thread, run)): Path<(String, String)>,
    stepwise_server::ApiQuery(query): stepwise_server::ApiQuery<CancelQuery>,
) -> ApiResult<Response> {
    let (session, execution) = load_run(&state, &caller, &thread, &run).await?;
    let rollback = rollback_of(query.action.as_deref())?;
    let id = execution.id;
    // A rollback waits for the run to stop before removing it; `wait` waits for it too.
    let wait = rollback || truthy(query.wait.as_deref());
    if wait {
        state
            .engine
            .make_room(&caller.tenant, session.id, &[execution], rollback)
            .await?;
        return Ok(StatusCode::NO_CONTENT.into_response());
    }
    match state.engine.cancel(&caller.tenant, id).await {
        Ok(_) | Err(StoreError::Conflict(_)) => Ok(StatusCode::ACCEPTED.into_response()),
        Err(e) => Err(e.into()),
    }
}

/// The action of a cancel: `interrupt` (the default) or `rollback`.
fn rollback_of(action: Option<&str>) -> ApiResult<bool> {
    match action {
        None | Some("interrupt") => Ok(false),
        Some("rollback") => Ok(true),
        Some(other) => Err(ApiError::invalid(
            "action",
            format!("action '{other}' is neither interrupt nor rollback"),
        )),
    }
}

/// The most runs one batch makes.
const MAX_BATCH: usize = 100;

/// `runs.create_batch`: stateless background runs, each on a new thread, made in order; the
/// first that cannot be made answers its error (the ones before it stay made).
async fn batch<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    ApiJson(bodies): ApiJson<Vec<RunBody>>,
) -> ApiResult<Json<Vec<Value>>> {
    if bodies.len() > MAX_BATCH {
        return Err(ApiError::invalid(
            "runs",
            format!("at most {MAX_BATCH} runs in one batch"),
        ));
    }
    let mut made = Vec::with_capacity(bodies.len());
    for body in &bodies {
        let started = start(&state, &caller, None, body, false).await?;
        made.push(run_body(&started.execution, &thread_id(&started.session)));
    }
    Ok(Json(made))
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct CancelManyBody {
    thread_id: Option<String>,
    run_ids: Option<Vec<String>>,
    status: Option<String>,
}

/// The most threads a cancel by status looks through.
const MAX_CANCEL_SCAN: usize = 10_000;

/// `runs.cancel_many`: the runs named on a thread (`thread_id` and `run_ids`), or every run
/// of the caller's threads that is `pending`, `running` or either (`status: all`). 204.
async fn cancel_many<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    stepwise_server::ApiQuery(query): stepwise_server::ApiQuery<CancelQuery>,
    ApiJson(body): ApiJson<CancelManyBody>,
) -> ApiResult<StatusCode> {
    let rollback = rollback_of(query.action.as_deref())?;
    let mut chosen: Vec<(Session, Vec<Execution>)> = Vec::new();
    match (&body.thread_id, &body.run_ids, body.status.as_deref()) {
        (Some(thread), Some(runs), None) => {
            let session = threads::load(&state, &caller, thread).await?;
            let mut executions = Vec::new();
            for run in runs {
                executions.push(load_run(&state, &caller, thread, run).await?.1);
            }
            chosen.push((session, executions));
        }
        (None, None, Some(status @ ("pending" | "running" | "all"))) => {
            let wanted = |e: &Execution| match status {
                "pending" => e.status == ExecutionStatus::Pending,
                "running" => e.status == ExecutionStatus::Running,
                _ => true,
            };
            let mut cursor = None;
            let mut scanned = 0;
            loop {
                let filter = SessionFilter {
                    user_id: caller.session_owner_filter(None),
                    ..SessionFilter::default()
                };
                let page = state
                    .store()
                    .list_sessions(
                        &caller.tenant,
                        filter,
                        PageRequest {
                            limit: 200,
                            cursor: cursor.take(),
                        },
                    )
                    .await?;
                for session in page.items {
                    scanned += 1;
                    if !caller.sees(&session) {
                        continue;
                    }
                    let busy: Vec<Execution> = state
                        .engine
                        .busy_executions(&caller.tenant, session.id)
                        .await?
                        .into_iter()
                        .filter(|e| e.parent_execution_id.is_none() && wanted(e))
                        .collect();
                    if !busy.is_empty() {
                        chosen.push((session, busy));
                    }
                }
                match page.next_cursor {
                    Some(next) if scanned < MAX_CANCEL_SCAN => cursor = Some(next),
                    _ => break,
                }
            }
        }
        _ => {
            return Err(ApiError::bad_request(
                "name the runs (thread_id and run_ids) or a status (pending, running or all)",
            ));
        }
    }
    for (session, executions) in chosen {
        if rollback {
            state
                .engine
                .make_room(&caller.tenant, session.id, &executions, true)
                .await?;
            continue;
        }
        for execution in executions {
            match state.engine.cancel(&caller.tenant, execution.id).await {
                Ok(_) | Err(StoreError::Conflict(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(StatusCode::NO_CONTENT)
}

async fn join<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path((thread, run)): Path<(String, String)>,
    RawQuery(raw): RawQuery,
) -> ApiResult<Json<Value>> {
    let (session, execution) = load_run(&state, &caller, &thread, &run).await?;
    if is_live(&execution) {
        // `cancel_on_disconnect`: a client that leaves before the run ends drops this
        // request, and the run is cancelled.
        let (_, _, cancel_on_disconnect) = join_query(raw.as_deref());
        let (mut follower, _slot) = follow(&state, &caller, &session, &execution).await?;
        let mut guard =
            cancel_on_disconnect.then(|| CancelOnDrop::new(&state, &caller.tenant, execution.id));
        while follower.next().await.is_some() {}
        if let Some(guard) = &mut guard {
            guard.disarm();
        }
    }
    Ok(Json(outcome(&state, &caller, execution.id).await?))
}

/// A follower of `execution` from the start of its latest turn (subscribed first, so what
/// the replay misses arrives live), with a place among the session's streams.
async fn follow<S: Store>(
    state: &AppState<S>,
    caller: &Caller,
    session: &Session,
    execution: &Execution,
) -> ApiResult<(RunFollower<S>, stepwise_server::SubscriberSlot)> {
    let slot = state.stream_slot(&caller.tenant, session.id)?;
    let live = state.store().subscribe(&caller.tenant, session.id);
    let (turn, after) = find_turn(state.store(), &caller.tenant, session.id, execution.id).await?;
    let follower = RunFollower::new(
        state,
        caller.tenant.clone(),
        session.id,
        turn,
        live,
        Start::After(after),
    );
    Ok((follower, slot))
}

/// `stream_mode` (repeated or once), `stream_subgraphs` and `cancel_on_disconnect` of a
/// join's query.
fn join_query(raw: Option<&str>) -> (Vec<String>, bool, bool) {
    let mut modes = Vec::new();
    let (mut subgraphs, mut cancel) = (false, false);
    for pair in raw.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let value = value.replace('+', " ");
        match key {
            // (An empty value names no mode: the SDK's join sends `stream_mode=` when given none.)
            "stream_mode" | "stream_mode[]" if !value.is_empty() => {
                modes.push(percent_decoded(&value))
            }
            "stream_subgraphs" => subgraphs = truthy(Some(value.as_str())),
            "cancel_on_disconnect" => cancel = truthy(Some(value.as_str())),
            _ => {}
        }
    }
    (modes, subgraphs, cancel)
}

/// `%XX` decoded (stream modes are ASCII words; anything else stays as sent).
fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let Ok(byte) = u8::from_str_radix(&text[i + 1..i + 3], 16)
        {
            out.push(byte);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

async fn join_stream<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path((thread, run)): Path<(String, String)>,
    RawQuery(raw): RawQuery,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let (session, execution) = load_run(&state, &caller, &thread, &run).await?;
    stream_again(state, caller, session, execution, raw.as_deref(), &headers).await
}

/// `GET /runs/{run_id}/stream`: a run's stream joined by its id alone (the SDK's
/// `joinStream(null, runId)`); another user's run, or one of no thread, is 404.
async fn join_stream_of_run<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path(run): Path<String>,
    RawQuery(raw): RawQuery,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let id = run.parse::<Id>().map_err(|_| ApiError::not_found("run"))?;
    let session_id = state
        .store()
        .get_execution(&caller.tenant, id)
        .await?
        .and_then(|e| e.session_id)
        .ok_or_else(|| ApiError::not_found("run"))?;
    let (session, execution) = load_run(&state, &caller, &session_id.to_string(), &run).await?;
    stream_again(state, caller, session, execution, raw.as_deref(), &headers).await
}

/// A run's stream again: from its start, or after `Last-Event-ID`.
async fn stream_again<S: Store>(
    state: AppState<S>,
    caller: Caller,
    session: Session,
    execution: Execution,
    raw: Option<&str>,
    headers: &HeaderMap,
) -> ApiResult<Response> {
    let (modes, subgraphs, cancel_on_disconnect) = join_query(raw);
    // A join that names no mode streams the run's own (`values` when it named none either).
    let modes = if modes.is_empty() {
        Modes::new(execution.input.pointer("/langgraph/stream_mode"), subgraphs)
    } else {
        Modes::from_list(modes, subgraphs)
    };
    let last_event_id = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    let follower = Some(follow(&state, &caller, &session, &execution).await?);
    Ok(respond(Streamed {
        tenant: caller.tenant.clone(),
        thread_id: thread_id(&session),
        modes: modes.after(last_event_id),
        follower,
        cancel_on_disconnect: cancel_on_disconnect && is_live(&execution),
        execution,
        state,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_runs_turn_is_its_last_human_message() {
        let input = json!({"messages": [
            {"role": "user", "content": "first"},
            {"type": "ai", "content": "answer"},
            ["human", "second"],
        ]});
        assert_eq!(turn_text(Some(&input), None), "second");
        assert_eq!(
            turn_text(Some(&json!({"topic": "x"})), None),
            r#"{"topic":"x"}"#
        );
        assert_eq!(turn_text(None, Some(&json!({"resume": "yes"}))), "yes");
        assert_eq!(turn_text(None, None), "(continue)");
    }

    #[test]
    fn a_failed_runs_error_is_the_exceptions_type_and_text() {
        assert_eq!(
            error_body("ValueError: boom: twice"),
            json!({"error": "ValueError", "message": "boom: twice"})
        );
        assert_eq!(
            error_body("the lease expired 3 times"),
            json!({"error": "RunError", "message": "the lease expired 3 times"})
        );
        assert_eq!(
            error_body("no agent of type 'x': gone"),
            json!({"error": "RunError", "message": "no agent of type 'x': gone"})
        );
    }

    #[test]
    fn a_joins_query_takes_repeated_modes() {
        let (modes, subgraphs, cancel) = join_query(Some(
            "stream_mode=values&stream_mode=messages-tuple&cancel_on_disconnect=true",
        ));
        assert_eq!(modes, vec!["values", "messages-tuple"]);
        assert!(!subgraphs);
        assert!(cancel);
        let (modes, _, _) = join_query(Some("stream_mode=&cancel_on_disconnect=false"));
        assert!(modes.is_empty(), "an empty stream_mode names no mode");
    }
}
