//! Executions, steps and snapshots, and the endpoints external agents drive.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde::Deserialize;
use serde_json::{Value, json};
use stepwise_core::{
    EventType, Execution, ExecutionStatus, Role, Snapshot, Step, StepBody, StepKind,
};
use stepwise_engine::EXTERNAL_AGENT;
use stepwise_store::{NewExecution, NewSnapshot, NewStep, Store, Transition};

use crate::auth::Caller;
use crate::error::{ApiError, ApiJson, ApiQuery, ApiResult, path_id};
use crate::sessions::{MAX_CONTENT_BYTES, MAX_CONTENT_CHARS, check_metadata, paginate};
use crate::{AppState, List};

/// Longest `error_message` of `POST /v1/executions/{id}/fail`, in characters.
pub const MAX_ERROR_CHARS: usize = 65_536;
pub use crate::limits::MAX_TOOL_CALLS_PER_STEP;

#[derive(Debug, Default, Deserialize)]
pub struct PageQuery {
    pub limit: Option<String>,
    pub cursor: Option<String>,
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct OpenExecutionBody {
    pub agent_type: String,
    #[serde(default)]
    pub input: Value,
    pub agent_config: Option<Value>,
    pub parent_execution_id: Option<String>,
    pub metadata: Option<Value>,
}

/// A step as an external agent sends it: a step without ids.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct StepInput {
    /// Defaults to the next number.
    pub step_number: Option<u32>,
    /// Defaults to `action`.
    pub kind: Option<String>,
    #[serde(flatten)]
    pub body: StepBody,
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct SnapshotInput {
    pub state: Value,
    pub step_number: Option<u32>,
    pub is_final: Option<bool>,
    pub parent_snapshot_id: Option<String>,
    pub agent_id: Option<String>,
    pub agent_name: Option<String>,
    pub debug_mode: Option<bool>,
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct CompleteBody {
    #[serde(default)]
    pub output: Value,
    pub final_message: Option<String>,
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct FailBody {
    pub error_message: String,
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct PauseBody {
    pub question: String,
}

/// Reads a JSON body into `T`, taking whole numbers written as floats (`3.0`, which JSON
/// Schema calls an integer) at the `integers` pointers as integers.
fn typed_body<T: serde::de::DeserializeOwned>(mut body: Value, integers: &[&str]) -> ApiResult<T> {
    for pointer in integers {
        if let Some(number) = body.pointer_mut(pointer)
            && number.is_f64()
            && let Some(f) = number.as_f64()
            && f.fract() == 0.0
            && (0.0..=9_007_199_254_740_992.0).contains(&f)
        {
            *number = Value::from(f as u64);
        }
    }
    serde_json::from_value(body)
        .map_err(|e| ApiError::bad_request(format!("the body is not valid: {e}")))
}

async fn load<S: Store>(state: &AppState<S>, caller: &Caller, id: &str) -> ApiResult<Execution> {
    let id = path_id(id, "id")?;
    state
        .store()
        .get_execution(&caller.tenant, id)
        .await?
        .ok_or_else(|| ApiError::not_found("execution"))
}

async fn load_external<S: Store>(
    state: &AppState<S>,
    caller: &Caller,
    id: &str,
) -> ApiResult<Execution> {
    let execution = load(state, caller, id).await?;
    if execution.agent_type != EXTERNAL_AGENT {
        return Err(ApiError::invalid_state(format!(
            "this execution is run by the server's '{}' agent; only external executions take steps over HTTP",
            execution.agent_type
        )));
    }
    Ok(execution)
}

pub async fn get<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<Execution>> {
    Ok(Json(load(&state, &caller, &id).await?))
}

pub async fn cancel<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<impl IntoResponse> {
    let id = path_id(&id, "id")?;
    let execution = state.engine.cancel(&caller.tenant, id).await?;
    Ok((StatusCode::ACCEPTED, Json(execution)))
}

pub async fn list_for_session<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path(id): Path<String>,
    ApiQuery(query): ApiQuery<PageQuery>,
) -> ApiResult<Json<List<Execution>>> {
    let id = path_id(&id, "id")?;
    state
        .store()
        .get_session(&caller.tenant, id)
        .await?
        .ok_or_else(|| ApiError::not_found("session"))?;
    let executions = state.store().list_executions(&caller.tenant, id).await?;
    Ok(Json(paginate(executions, &query.limit, &query.cursor)?))
}

pub async fn list_steps<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path(id): Path<String>,
    ApiQuery(query): ApiQuery<PageQuery>,
) -> ApiResult<Json<List<Step>>> {
    let execution = load(&state, &caller, &id).await?;
    let steps = state
        .store()
        .list_steps(&caller.tenant, execution.id)
        .await?;
    Ok(Json(paginate(steps.items, &query.limit, &query.cursor)?))
}

pub async fn list_snapshots<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path(id): Path<String>,
    ApiQuery(query): ApiQuery<PageQuery>,
) -> ApiResult<Json<List<Snapshot>>> {
    let execution = load(&state, &caller, &id).await?;
    let snapshots = state
        .store()
        .list_snapshots(&caller.tenant, execution.id)
        .await?;
    Ok(Json(paginate(snapshots, &query.limit, &query.cursor)?))
}

pub async fn get_snapshot<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<Snapshot>> {
    let id = path_id(&id, "id")?;
    let snapshot = state
        .store()
        .get_snapshot(&caller.tenant, id)
        .await?
        .ok_or_else(|| ApiError::not_found("snapshot"))?;
    Ok(Json(snapshot))
}

// --- external agents ------------------------------------------------------------------------

pub async fn open_external<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<OpenExecutionBody>,
) -> ApiResult<impl IntoResponse> {
    let session_id = path_id(&id, "id")?;
    if body.agent_type != EXTERNAL_AGENT {
        return Err(ApiError::invalid(
            "agent_type",
            "agent_type must be \"external\"; other agents run from messages",
        ));
    }
    let agent_config = match body.agent_config {
        None | Some(Value::Null) => Value::Null,
        Some(config @ Value::Object(_)) => config,
        Some(_) => {
            return Err(ApiError::invalid(
                "agent_config",
                "agent_config must be a JSON object",
            ));
        }
    };
    let metadata = check_metadata("metadata", &body.metadata)?;
    let store = state.store();
    let session = store
        .get_session(&caller.tenant, session_id)
        .await?
        .ok_or_else(|| ApiError::not_found("session"))?;
    let parent_execution_id = match &body.parent_execution_id {
        None => None,
        Some(text) => {
            let parent_id = stepwise_core::parse_id(text).ok_or_else(|| {
                ApiError::invalid(
                    "parent_execution_id",
                    "parent_execution_id must be an execution id",
                )
            })?;
            let parent = store.get_execution(&caller.tenant, parent_id).await?;
            if parent.is_none_or(|p| p.session_id != Some(session.id)) {
                return Err(ApiError::new(
                    StatusCode::NOT_FOUND,
                    "not_found",
                    "the parent execution is not in this session",
                )
                .with_field("parent_execution_id"));
            }
            Some(parent_id)
        }
    };
    let execution = store
        .create_execution(
            &caller.tenant,
            NewExecution {
                session_id: Some(session.id),
                parent_execution_id,
                user_id: caller.user_id.clone(),
                agent_type: EXTERNAL_AGENT.to_string(),
                agent_config,
                input: body.input,
                metadata,
                status: ExecutionStatus::Running,
            },
        )
        .await?;
    state
        .engine
        .emit(
            &caller.tenant,
            execution.session_id,
            Some(execution.id),
            EventType::ExecutionStarted,
            "Execution started",
            json!({}),
        )
        .await;
    Ok((StatusCode::CREATED, Json(execution)))
}

pub async fn append_step<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(input): ApiJson<Value>,
) -> ApiResult<impl IntoResponse> {
    let input: StepInput = typed_body(
        input,
        &[
            "/step_number",
            "/token_usage/input",
            "/token_usage/output",
            "/token_usage/total",
        ],
    )?;
    let execution = load_external(&state, &caller, &id).await?;
    let kind = match &input.kind {
        None => StepKind::Action,
        Some(text) => StepKind::parse(text).ok_or_else(|| ApiError::invalid("kind", "kind must be one of task, system_prompt, planning, action, user_input, final_answer"))?,
    };
    let step_number = match input.step_number {
        Some(0) => return Err(ApiError::invalid("step_number", "step numbers start at 1")),
        Some(n) => n,
        None => u32::try_from(execution.step_count + 1)
            .map_err(|_| ApiError::invalid("step_number", "too many steps"))?,
    };
    let mut body = input.body;
    if body.tool_calls.len() > MAX_TOOL_CALLS_PER_STEP {
        return Err(ApiError::invalid(
            "tool_calls",
            format!("a step holds at most {MAX_TOOL_CALLS_PER_STEP} tool calls"),
        ));
    }
    if body.token_usage.total == 0 {
        body.token_usage.total = body.token_usage.input + body.token_usage.output;
    }
    let size = serde_json::to_vec(&body).map(|b| b.len()).unwrap_or(0);
    if size > MAX_CONTENT_BYTES * 2 {
        return Err(ApiError::invalid("body", "the step is larger than 2 MiB"));
    }
    let tool = body.tool_calls.first().map(|c| c.name.clone());
    let ack = state
        .store()
        .append_step(
            &caller.tenant,
            NewStep {
                execution_id: execution.id,
                step_number,
                kind,
                body,
            },
        )
        .await?;
    let appended = ack.await?;
    if appended.created {
        let mut metadata = json!({"step_number": step_number});
        if let (Some(tool), Some(map)) = (tool, metadata.as_object_mut()) {
            map.insert("tool".into(), Value::String(tool));
        }
        state
            .engine
            .emit(
                &caller.tenant,
                execution.session_id,
                Some(execution.id),
                EventType::StepCompleted,
                &format!("Completed step {step_number}"),
                metadata,
            )
            .await;
    }
    let status = if appended.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(appended.step)))
}

pub async fn save_snapshot<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(input): ApiJson<Value>,
) -> ApiResult<impl IntoResponse> {
    let input: SnapshotInput = typed_body(input, &["/step_number"])?;
    let execution = load_external(&state, &caller, &id).await?;
    let parent_snapshot_id = match &input.parent_snapshot_id {
        None => None,
        Some(text) => {
            let parent = stepwise_core::parse_id(text).ok_or_else(|| {
                ApiError::invalid(
                    "parent_snapshot_id",
                    "parent_snapshot_id must be a snapshot id",
                )
            })?;
            if state
                .store()
                .get_snapshot(&caller.tenant, parent)
                .await?
                .is_none()
            {
                return Err(ApiError::not_found("parent snapshot").with_field("parent_snapshot_id"));
            }
            Some(parent)
        }
    };
    crate::sessions::check_text("agent_id", &input.agent_id, 256)?;
    crate::sessions::check_text("agent_name", &input.agent_name, 256)?;
    let new = NewSnapshot {
        execution_id: execution.id,
        parent_snapshot_id,
        agent_id: input.agent_id,
        agent_name: input.agent_name,
        step_number: input
            .step_number
            .unwrap_or(u32::try_from(execution.step_count).unwrap_or(u32::MAX)),
        is_final: input.is_final.unwrap_or(false),
        debug_mode: input.debug_mode.unwrap_or(false),
        state: input.state,
    };
    let snapshot = state
        .store()
        .save_snapshot(&caller.tenant, new)
        .await?
        .await?;
    Ok((StatusCode::CREATED, Json(snapshot)))
}

/// Every finished execution has a final snapshot; an external agent that saved none gets one.
async fn ensure_final_snapshot<S: Store>(
    state: &AppState<S>,
    caller: &Caller,
    execution: &Execution,
    status: &str,
) -> ApiResult<()> {
    let snapshots = state
        .store()
        .list_snapshots(&caller.tenant, execution.id)
        .await?;
    if snapshots.iter().any(|s| s.is_final) {
        return Ok(());
    }
    let new = NewSnapshot {
        execution_id: execution.id,
        parent_snapshot_id: snapshots.last().map(|s| s.id),
        agent_id: Some(execution.id.to_string()),
        agent_name: Some(execution.agent_type.clone()),
        step_number: u32::try_from(execution.step_count).unwrap_or(u32::MAX),
        is_final: true,
        debug_mode: false,
        state: json!({"execution_id": execution.id, "status": status, "output": execution.output, "error_message": execution.error_message}),
    };
    state
        .store()
        .save_snapshot(&caller.tenant, new)
        .await?
        .await?;
    Ok(())
}

pub async fn complete<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<CompleteBody>,
) -> ApiResult<Json<Execution>> {
    let execution = load_external(&state, &caller, &id).await?;
    if let Some(text) = &body.final_message
        && text.chars().count() > MAX_CONTENT_CHARS
    {
        return Err(ApiError::invalid(
            "final_message",
            format!("final_message is longer than {MAX_CONTENT_CHARS} characters"),
        ));
    }
    // Steps queued before this call are durable before the execution reads as finished.
    state.store().flush().await?;
    let done = state
        .store()
        .transition_execution(
            &caller.tenant,
            execution.id,
            Transition::Complete {
                output: body.output,
            },
        )
        .await?;
    if let (Some(text), Some(session_id)) = (&body.final_message, done.session_id) {
        state
            .engine
            .say(&caller.tenant, session_id, done.id, Role::Assistant, text)
            .await;
    }
    ensure_final_snapshot(&state, &caller, &done, "completed").await?;
    let content = body
        .final_message
        .as_deref()
        .unwrap_or("Execution completed");
    state
        .engine
        .emit(
            &caller.tenant,
            done.session_id,
            Some(done.id),
            EventType::ExecutionCompleted,
            content,
            json!({}),
        )
        .await;
    state.engine.ring();
    Ok(Json(
        state
            .store()
            .get_execution(&caller.tenant, done.id)
            .await?
            .unwrap_or(done),
    ))
}

pub async fn fail<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<FailBody>,
) -> ApiResult<Json<Execution>> {
    let execution = load_external(&state, &caller, &id).await?;
    if body.error_message.trim().is_empty() || body.error_message.chars().count() > MAX_ERROR_CHARS
    {
        return Err(ApiError::invalid(
            "error_message",
            format!("error_message must be 1 to {MAX_ERROR_CHARS} characters, not only spaces"),
        ));
    }
    state.store().flush().await?;
    let done = state
        .store()
        .transition_execution(
            &caller.tenant,
            execution.id,
            Transition::Fail {
                error_message: body.error_message.clone(),
            },
        )
        .await?;
    if let Some(session_id) = done.session_id {
        state
            .engine
            .say(
                &caller.tenant,
                session_id,
                done.id,
                Role::Info,
                &format!("Execution failed: {}", body.error_message),
            )
            .await;
    }
    ensure_final_snapshot(&state, &caller, &done, "failed").await?;
    state
        .engine
        .emit(
            &caller.tenant,
            done.session_id,
            Some(done.id),
            EventType::ExecutionFailed,
            &body.error_message,
            json!({}),
        )
        .await;
    state.engine.ring();
    Ok(Json(
        state
            .store()
            .get_execution(&caller.tenant, done.id)
            .await?
            .unwrap_or(done),
    ))
}

pub async fn pause<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<PauseBody>,
) -> ApiResult<Json<Execution>> {
    let execution = load_external(&state, &caller, &id).await?;
    if body.question.trim().is_empty() || body.question.chars().count() > MAX_CONTENT_CHARS {
        return Err(ApiError::invalid(
            "question",
            format!("question must not be empty (and at most {MAX_CONTENT_CHARS} characters)"),
        ));
    }
    state.store().flush().await?;
    let paused = state
        .store()
        .transition_execution(
            &caller.tenant,
            execution.id,
            Transition::Pause {
                question: body.question.clone(),
            },
        )
        .await?;
    let snapshot = NewSnapshot {
        execution_id: paused.id,
        parent_snapshot_id: None,
        agent_id: Some(paused.id.to_string()),
        agent_name: Some(paused.agent_type.clone()),
        step_number: u32::try_from(paused.step_count).unwrap_or(u32::MAX),
        is_final: false,
        debug_mode: false,
        state: json!({"execution_id": paused.id, "status": "paused", "question": body.question}),
    };
    state
        .store()
        .save_snapshot(&caller.tenant, snapshot)
        .await?
        .await?;
    if let Some(session_id) = paused.session_id {
        state
            .engine
            .say(
                &caller.tenant,
                session_id,
                paused.id,
                Role::Assistant,
                &body.question,
            )
            .await;
    }
    state
        .engine
        .emit(
            &caller.tenant,
            paused.session_id,
            Some(paused.id),
            EventType::ExecutionPaused,
            &body.question,
            json!({"question": body.question}),
        )
        .await;
    Ok(Json(
        state
            .store()
            .get_execution(&caller.tenant, paused.id)
            .await?
            .unwrap_or(paused),
    ))
}
