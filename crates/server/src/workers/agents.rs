//! `GET /v1/agents`: the agent types the caller's tenant can send messages to — the
//! server's built-in ones and those its worker processes announced.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::State;
use serde::Serialize;
use serde_json::Value;
use stepwise_core::Timestamp;
use stepwise_engine::{EXTERNAL_AGENT, WORKER_ONLINE_WITHIN};
use stepwise_store::Store;
use stepwise_store::rules::FORGET_WORKERS_AFTER;

use crate::AppState;
use crate::auth::Caller;
use crate::error::{ApiResult, ErrorBody};

/// One agent type.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct AgentInfo {
    /// The name a message's `agent.type` uses.
    #[serde(rename = "type")]
    pub agent_type: String,
    pub description: String,
    /// Run by the server itself (`true`) or by worker processes (`false`).
    pub builtin: bool,
    /// Worker processes running it seen in the last 60 seconds (`null` for built-in agents).
    pub workers_online: Option<u32>,
    /// The latest call of a worker running it (`null` for built-in agents).
    pub last_seen_at: Option<Timestamp>,
    /// The JSON Schema of its `agent.config`, when its worker announced one.
    pub config_schema: Option<Value>,
}

/// The agent types.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct AgentList {
    pub items: Vec<AgentInfo>,
}

/// What the built-in agents do, for the list.
fn builtin_description(agent_type: &str) -> &'static str {
    match agent_type {
        "demo" => {
            "Stepwise's demo agent: `steps: N`, `ask me`, `delegate: TASK`, arithmetic, `time`"
        }
        "tool-calling" => "An LLM agent with tools (the model configured for this server)",
        _ => "An agent built into this server",
    }
}

pub async fn list<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
) -> ApiResult<Json<AgentList>> {
    let mut items: Vec<AgentInfo> = state
        .engine
        .agents()
        .names()
        .into_iter()
        .filter(|name| name != EXTERNAL_AGENT)
        .map(|name| AgentInfo {
            description: builtin_description(&name).to_string(),
            agent_type: name,
            builtin: true,
            workers_online: None,
            last_seen_at: None,
            config_schema: None,
        })
        .collect();
    let now = Timestamp::now().0;
    let since = Timestamp(now - FORGET_WORKERS_AFTER.as_micros() as i64);
    let online_since = now - WORKER_ONLINE_WITHIN.as_micros() as i64;
    let workers = state.store().list_workers(&caller.tenant, since).await?;
    // Most recent worker first: its description of an agent wins.
    let mut served: BTreeMap<String, AgentInfo> = BTreeMap::new();
    for worker in &workers {
        let online = worker.last_seen_at.0 >= online_since;
        for agent in worker.agents.as_array().into_iter().flatten() {
            let Some(agent_type) = agent.get("type").and_then(Value::as_str) else {
                continue;
            };
            if state.engine.can_run(agent_type) {
                continue;
            }
            let entry = served
                .entry(agent_type.to_string())
                .or_insert_with(|| AgentInfo {
                    agent_type: agent_type.to_string(),
                    description: agent
                        .get("description")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string(),
                    builtin: false,
                    workers_online: Some(0),
                    last_seen_at: Some(worker.last_seen_at),
                    config_schema: agent.get("config_schema").filter(|v| !v.is_null()).cloned(),
                });
            if online {
                entry.workers_online = entry.workers_online.map(|n| n + 1);
            }
        }
    }
    items.extend(served.into_values());
    Ok(Json(AgentList { items }))
}

#[utoipa::path(get, path = "/v1/agents", tag = "workers", operation_id = "list_agents",
    responses((status = 200, body = AgentList), (status = 401, body = ErrorBody)))]
#[allow(dead_code)]
pub(crate) fn doc() {}
