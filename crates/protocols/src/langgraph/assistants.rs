//! LangGraph's assistants: the graphs workers serve. A worker's `worker.langgraph("name",
//! graph)` announces its graph once, as the item `name` of the tenant's store namespace
//! `["stepwise", "assistants"]`: `{graph_id, description, graph, input_schema,
//! output_schema, state_schema, config_schema, context_schema}`. Each announced graph is one
//! assistant, as LangGraph's server makes one per graph: its id is
//! `uuid5(6ba7b821-9dad-11d1-80b4-00c04fd430c8, graph_id)`, and a path or run may name it by
//! that id or by the graph's name.
//!
//! - `POST /assistants/search` `{graph_id?, name?, metadata?, limit?, offset?}` → 200 `[Assistant]`
//! - `POST /assistants/count` `{graph_id?, name?}` → 200 a number
//! - `GET /assistants/{id}` → 200 Assistant
//! - `GET /assistants/{id}/graph` → 200 the graph's `get_graph().to_json()`
//! - `GET /assistants/{id}/schemas` → 200 `{graph_id, input_schema, output_schema,
//!   state_schema, config_schema, context_schema}`
//! - `GET /assistants/{id}/subgraphs` → 200 `{}`; `POST /assistants/{id}/versions` → 200 `[Assistant]`

use axum::Json;
use axum::Router;
use axum::extract::{Path, State};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use stepwise_core::Id;
use stepwise_store::prelude::*;
use stepwise_store::{StoreError, StoreItem, StoreItemSearch};

use stepwise_server::{ApiError, ApiJson, ApiResult, AppState, Caller};

/// The store namespace where workers announce their graphs.
pub(crate) const NAMESPACE: [&str; 2] = ["stepwise", "assistants"];

/// LangGraph's namespace for the ids of graphs' own assistants (`NAMESPACE_GRAPH`).
const NAMESPACE_GRAPH: Id = Id::from_u128(0x6ba7b821_9dad_11d1_80b4_00c04fd430c8);

/// The most assistants one search answers.
const MAX_LIMIT: u32 = 1000;

pub(super) fn router<S: Store>() -> Router<AppState<S>> {
    Router::new()
        .route("/assistants/search", post(search::<S>))
        .route("/assistants/count", post(count::<S>))
        .route("/assistants/{id}", get(get_one::<S>))
        .route("/assistants/{id}/graph", get(graph::<S>))
        .route("/assistants/{id}/schemas", get(schemas::<S>))
        .route("/assistants/{id}/subgraphs", get(subgraphs::<S>))
        .route("/assistants/{id}/versions", post(versions::<S>))
}

/// A graph announced by a worker.
pub(crate) struct Announced {
    pub graph_id: String,
    value: Value,
    created_at: String,
    updated_at: String,
}

impl Announced {
    fn new(item: StoreItem) -> Self {
        Announced {
            graph_id: item.key,
            value: item.value,
            created_at: item.created_at.to_rfc3339(),
            updated_at: item.updated_at.to_rfc3339(),
        }
    }

    /// The assistant's id: LangGraph's for a graph's own assistant.
    pub(crate) fn assistant_id(&self) -> String {
        assistant_id(&self.graph_id)
    }

    /// The assistant as LangGraph answers it (`Assistant`).
    fn body(&self) -> Value {
        json!({
            "assistant_id": self.assistant_id(),
            "graph_id": self.graph_id,
            "name": self.graph_id,
            "description": self.value.get("description").cloned().unwrap_or(Value::Null),
            "config": {},
            "context": {},
            "metadata": {"created_by": "system"},
            "version": 1,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
        })
    }

    fn field(&self, key: &str) -> Value {
        self.value.get(key).cloned().unwrap_or(Value::Null)
    }
}

/// LangGraph's id of a graph's own assistant: `uuid5(NAMESPACE_GRAPH, graph_id)`.
pub(crate) fn assistant_id(graph_id: &str) -> String {
    Id::new_v5(&NAMESPACE_GRAPH, graph_id.as_bytes()).to_string()
}

fn namespace() -> Vec<String> {
    NAMESPACE.iter().map(|s| s.to_string()).collect()
}

/// Every graph the tenant's workers announced, by name.
async fn announced<S: Store>(state: &AppState<S>, caller: &Caller) -> ApiResult<Vec<Announced>> {
    let items = match state
        .store()
        .search_store_items(
            &caller.tenant,
            StoreItemSearch {
                namespace_prefix: namespace(),
                filter: None,
                limit: MAX_LIMIT,
                offset: 0,
                refresh_ttl: false,
            },
        )
        .await
    {
        // A backend without LangGraph's store (files) has no announced graphs.
        Err(StoreError::InvalidState(_)) => Vec::new(),
        other => other?,
    };
    let mut found: Vec<Announced> = items
        .into_iter()
        .filter(|item| item.namespace == namespace())
        .map(Announced::new)
        .collect();
    found.sort_by(|a, b| a.graph_id.cmp(&b.graph_id));
    Ok(found)
}

/// The graph an assistant id or graph name names: an announced one, or (for a graph name a
/// worker may serve but has not announced yet) the name itself when it is an agent type
/// messages may name.
pub(crate) async fn resolve<S: Store>(
    state: &AppState<S>,
    caller: &Caller,
    id: &str,
) -> ApiResult<Option<Announced>> {
    let found = match state
        .store()
        .get_store_item(&caller.tenant, &namespace(), id, false)
        .await
    {
        Err(StoreError::InvalidState(_)) => None,
        other => other?,
    };
    if let Some(item) = found {
        return Ok(Some(Announced::new(item)));
    }
    if id.parse::<Id>().is_ok() {
        return Ok(announced(state, caller)
            .await?
            .into_iter()
            .find(|a| a.assistant_id() == id));
    }
    Ok(None)
}

/// The graph (agent type) a run names as `assistant_id`: 404 when none is announced by that
/// id or name and the name is not a worker's agent type.
pub(crate) async fn graph_of<S: Store>(
    state: &AppState<S>,
    caller: &Caller,
    id: &str,
) -> ApiResult<String> {
    if let Some(found) = resolve(state, caller, id).await? {
        return Ok(found.graph_id);
    }
    if id.parse::<Id>().is_err() && state.engine.is_worker_agent(id) {
        return Ok(id.to_string());
    }
    Err(not_found())
}

fn not_found() -> ApiError {
    ApiError::not_found("assistant")
}

async fn one<S: Store>(state: &AppState<S>, caller: &Caller, id: &str) -> ApiResult<Announced> {
    resolve(state, caller, id).await?.ok_or_else(not_found)
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct SearchBody {
    graph_id: Option<String>,
    name: Option<String>,
    metadata: Option<Map<String, Value>>,
    limit: Option<u32>,
    offset: Option<u32>,
}

impl SearchBody {
    fn matches(&self, found: &Announced) -> bool {
        let named = |want: &Option<String>| want.as_ref().is_none_or(|w| *w == found.graph_id);
        let metadata = self.metadata.as_ref().is_none_or(|m| {
            m.iter()
                .all(|(k, v)| k == "created_by" && v.as_str() == Some("system"))
        });
        named(&self.graph_id) && named(&self.name) && metadata
    }
}

async fn search<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    ApiJson(body): ApiJson<SearchBody>,
) -> ApiResult<Json<Vec<Value>>> {
    let limit = body.limit.unwrap_or(10).min(MAX_LIMIT) as usize;
    let offset = body.offset.unwrap_or(0) as usize;
    Ok(Json(
        announced(&state, &caller)
            .await?
            .iter()
            .filter(|a| body.matches(a))
            .skip(offset)
            .take(limit)
            .map(Announced::body)
            .collect(),
    ))
}

async fn count<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    ApiJson(body): ApiJson<SearchBody>,
) -> ApiResult<Json<usize>> {
    Ok(Json(
        announced(&state, &caller)
            .await?
            .iter()
            .filter(|a| body.matches(a))
            .count(),
    ))
}

async fn get_one<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    Ok(Json(one(&state, &caller, &id).await?.body()))
}

async fn versions<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<Vec<Value>>> {
    Ok(Json(vec![one(&state, &caller, &id).await?.body()]))
}

async fn graph<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    let found = one(&state, &caller, &id).await?;
    let graph = found.field("graph");
    Ok(Json(if graph.is_object() {
        graph
    } else {
        json!({"nodes": [], "edges": []})
    }))
}

async fn schemas<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    let found = one(&state, &caller, &id).await?;
    Ok(Json(json!({
        "graph_id": found.graph_id,
        "input_schema": found.field("input_schema"),
        "output_schema": found.field("output_schema"),
        "state_schema": found.field("state_schema"),
        "config_schema": found.field("config_schema"),
        "context_schema": found.field("context_schema"),
    })))
}

async fn subgraphs<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    one(&state, &caller, &id).await?;
    Ok(Json(json!({})))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_graphs_assistant_has_langgraphs_id() {
        // `str(uuid5(UUID("6ba7b821-9dad-11d1-80b4-00c04fd430c8"), "agent"))` in Python.
        assert_eq!(
            assistant_id("agent"),
            "fe096781-5601-53d2-b2f6-0d3403f7e9ca"
        );
    }
}
