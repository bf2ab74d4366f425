//! `POST /v1/workers/claim`: a worker process takes up to `slots` queued executions of
//! the agent types it runs, waiting up to `wait_s` (long poll) when none is runnable.

use std::time::Duration;

use axum::Json;
use axum::extract::State;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use stepwise_core::{Execution, Memory, Session, Snapshot, Step, Timestamp};
use stepwise_engine::WorkerClaim;
use stepwise_store::Store;

use super::{
    MAX_AGENTS, MAX_CONFIG_SCHEMA_BYTES, MAX_DESCRIPTION_CHARS, MAX_SLOTS, MAX_WAIT_SECS,
    MAX_WORKER_ID_CHARS,
};
use crate::AppState;
use crate::auth::Caller;
use crate::error::{ApiError, ApiJson, ApiResult, ErrorBody};

/// An agent type a worker runs.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AgentAnnouncement {
    /// `[A-Za-z0-9._-]`, 1-64 characters, not a built-in agent's name (422).
    #[serde(rename = "type")]
    #[schema(schema_with = crate::messages::agent_type)]
    pub agent_type: String,
    /// Up to 1,000 characters.
    #[serde(default)]
    #[schema(max_length = 1000)]
    pub description: Option<String>,
    /// The JSON Schema of its `agent.config` (an object, up to 64 KiB).
    #[serde(default)]
    #[schema(schema_with = crate::schemas::object_or_null)]
    pub config_schema: Option<Value>,
}

/// A claim.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ClaimBody {
    /// The worker process's name: `[A-Za-z0-9._:-]`, 1-128 characters.
    #[schema(schema_with = worker_id_schema)]
    pub worker_id: String,
    /// The agent types it runs (1-64).
    #[schema(min_items = 1, max_items = 64)]
    pub agents: Vec<AgentAnnouncement>,
    /// How many executions it can take now (0-256; 0 only says it is alive).
    #[schema(minimum = 0, maximum = 256)]
    pub slots: u32,
    /// Seconds to wait when nothing is runnable (0-25, default 25).
    #[serde(default)]
    #[schema(minimum = 0, maximum = 25)]
    pub wait_s: Option<f64>,
}

/// An execution handed to a worker (see `docs/workers.md`).
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ClaimedExecution {
    pub execution: Execution,
    pub session: Option<Session>,
    /// 1 for the first run, more after a lost worker.
    pub attempt: u32,
    /// The lease token: the `Stepwise-Lease` header of every write and heartbeat.
    pub lease: String,
    pub lease_expires_at: Timestamp,
    /// The lease's length in seconds.
    pub lease_s: f64,
    /// How often to renew the lease, in seconds (a third of it).
    pub heartbeat_interval_s: f64,
    /// The execution's input (`{"message": ...}` for a user's message).
    pub input: Value,
    /// The input's text (its `message`), when it has one.
    pub input_text: Option<String>,
    /// The user's answer when this claim resumes a pause.
    pub resume_answer: Option<Value>,
    /// The steps this execution saved so far.
    pub steps: Vec<Step>,
    /// The session's agent memory, as `GET /v1/sessions/{id}/memory`.
    pub memory: Option<Memory>,
    /// This execution's latest snapshot.
    pub snapshot: Option<Snapshot>,
    /// Always `true`: this server's `POST /v1/executions/{id}/complete` takes `steps` (the
    /// last steps, saved with the completion), which an older server would ignore.
    pub complete_takes_steps: bool,
}

/// The claimed executions, oldest first (empty when none was runnable within `wait_s`).
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ClaimList {
    pub items: Vec<ClaimedExecution>,
}

fn worker_id_schema() -> utoipa::openapi::schema::Schema {
    crate::schemas::worker_id(false)
}

/// Whether a worker id follows the rule: `[A-Za-z0-9._:-]`, 1-128 characters.
pub(crate) fn valid_worker_id(id: &str) -> bool {
    !id.is_empty()
        && id.chars().count() <= MAX_WORKER_ID_CHARS
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | ':'))
}

/// The body checked: the agent types (as announced and as names), slots and wait.
fn check<S: Store>(
    state: &AppState<S>,
    body: &ClaimBody,
) -> ApiResult<(Vec<String>, Value, usize, Duration)> {
    if !valid_worker_id(&body.worker_id) {
        return Err(ApiError::invalid(
            "worker_id",
            format!("worker_id must be 1-{MAX_WORKER_ID_CHARS} characters of [A-Za-z0-9._:-]"),
        ));
    }
    if body.agents.is_empty() || body.agents.len() > MAX_AGENTS {
        return Err(ApiError::invalid(
            "agents",
            format!("agents must list 1-{MAX_AGENTS} agent types"),
        ));
    }
    let mut types = Vec::with_capacity(body.agents.len());
    let mut announced = Vec::with_capacity(body.agents.len());
    for (n, agent) in body.agents.iter().enumerate() {
        let field = format!("agents[{n}].type");
        if !state.engine.is_worker_agent(&agent.agent_type) {
            if state.engine.can_run(&agent.agent_type) || agent.agent_type == "external" {
                // A well-formed name this server keeps for itself.
                return Err(ApiError::invalid_state(format!(
                    "'{}' is an agent type of the server itself; a worker runs agent types of its own",
                    agent.agent_type
                ))
                .with_field(field));
            }
            return Err(ApiError::invalid(
                &field,
                "an agent type is 1-64 characters of [A-Za-z0-9._-] starting with a letter or digit",
            ));
        }
        let description = agent.description.clone().unwrap_or_default();
        if description.chars().count() > MAX_DESCRIPTION_CHARS {
            return Err(ApiError::invalid(
                &format!("agents[{n}].description"),
                format!("a description is at most {MAX_DESCRIPTION_CHARS} characters"),
            ));
        }
        let schema = agent.config_schema.clone().filter(|v| !v.is_null());
        if let Some(schema) = &schema
            && (!schema.is_object()
                || serde_json::to_vec(schema).map_or(0, |b| b.len()) > MAX_CONFIG_SCHEMA_BYTES)
        {
            return Err(ApiError::invalid(
                &format!("agents[{n}].config_schema"),
                "config_schema must be a JSON object of at most 64 KiB",
            ));
        }
        if !types.contains(&agent.agent_type) {
            types.push(agent.agent_type.clone());
            announced.push(json!({
                "type": agent.agent_type,
                "description": description,
                "config_schema": schema,
            }));
        }
    }
    if body.slots > MAX_SLOTS {
        return Err(ApiError::invalid(
            "slots",
            format!("slots must be 0-{MAX_SLOTS}"),
        ));
    }
    let wait = match body.wait_s {
        None => MAX_WAIT_SECS as f64,
        Some(w) if w.is_finite() && (0.0..=MAX_WAIT_SECS as f64).contains(&w) => w,
        Some(_) => {
            return Err(ApiError::invalid(
                "wait_s",
                format!("wait_s must be 0-{MAX_WAIT_SECS} seconds"),
            ));
        }
    };
    Ok((
        types,
        Value::Array(announced),
        body.slots as usize,
        Duration::from_secs_f64(wait),
    ))
}

pub async fn claim<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    ApiJson(body): ApiJson<Value>,
) -> ApiResult<Json<ClaimList>> {
    let body: ClaimBody = crate::executions::typed_body(body, &["/slots"])?;
    let (types, announced, slots, wait) = check(&state, &body)?;
    state
        .engine
        .note_worker(&caller.tenant, &body.worker_id, Some(&announced))
        .await;
    let claims = state
        .engine
        .claim_for_worker(&caller.tenant, types, slots, wait)
        .await?;
    let lease = state.engine.config().lease;
    let items = claims
        .into_iter()
        .map(|claim| answer(claim, lease))
        .collect();
    Ok(Json(ClaimList { items }))
}

fn answer(claim: WorkerClaim, lease: Duration) -> ClaimedExecution {
    let input = claim.execution.input.clone();
    let input_text = match &input {
        Value::String(s) => Some(s.clone()),
        other => other
            .get("message")
            .and_then(Value::as_str)
            .map(str::to_string),
    };
    ClaimedExecution {
        attempt: claim.attempt,
        lease: claim.lease,
        lease_expires_at: claim.lease_expires_at,
        lease_s: lease.as_secs_f64(),
        heartbeat_interval_s: super::heartbeat_interval_s(lease),
        input,
        input_text,
        resume_answer: claim.resume_answer,
        steps: claim.steps,
        memory: claim.memory,
        snapshot: claim.snapshot,
        complete_takes_steps: true,
        session: claim.session,
        execution: claim.execution,
    }
}

#[utoipa::path(post, path = "/v1/workers/claim", tag = "workers", operation_id = "claim_executions",
    request_body = ClaimBody,
    responses((status = 200, body = ClaimList), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
              (status = 422, body = ErrorBody, description = "An agent type of the server itself")))]
#[allow(dead_code)]
pub(crate) fn doc() {}
