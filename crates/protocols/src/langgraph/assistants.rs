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
//!
//! Assistants of one's own (`assistants.create`): a graph with a `config`, `context`,
//! `metadata`, `name` and `description` of its own, each change a new version. They are kept
//! in the store namespace `["stepwise", "assistants", "custom"]` (key: the assistant's id,
//! value `{assistant, versions}`); a run of one gets its config and context under the run's
//! own. An `admin` or `worker` makes, changes and removes them; a `user` finds and runs them
//! (403 otherwise).
//!
//! - `POST /assistants` `{graph_id, assistant_id?, config?, context?, metadata?, if_exists?:
//!   raise | do_nothing, name?, description?}` → 200 Assistant (409 when the id exists and
//!   `if_exists` is `raise`, 404 for a graph no worker announced)
//! - `PATCH /assistants/{id}` `{graph_id?, config?, context?, metadata?, name?, description?}`
//!   → 200 the new version (metadata is merged, the others replaced when given); a graph's own
//!   assistant is changed the same way
//! - `DELETE /assistants/{id}` → 204 (a graph's own assistant goes back to what its worker
//!   announced; 409 when it was never changed)
//! - `POST /assistants/{id}/latest` `{version}` → 200 that version, now the assistant
use axum::Json;
use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use stepwise_core::Id;
use stepwise_store::prelude::*;
use stepwise_store::{AccessRole, StoreError, StoreItem, StoreItemPut, StoreItemSearch};

use stepwise_server::{ApiError, ApiJson, ApiResult, AppState, Caller};

/// The store namespace where workers announce their graphs.
pub(crate) const NAMESPACE: [&str; 2] = ["stepwise", "assistants"];

/// LangGraph's namespace for the ids of graphs' own assistants (`NAMESPACE_GRAPH`).
const NAMESPACE_GRAPH: Id = Id::from_u128(0x6ba7b821_9dad_11d1_80b4_00c04fd430c8);

/// Where assistants of one's own are kept.
const CUSTOM: [&str; 3] = ["stepwise", "assistants", "custom"];

/// The most versions one assistant keeps (the oldest go).
const MAX_VERSIONS: usize = 100;

/// The most assistants one search answers.
const MAX_LIMIT: u32 = 1000;

pub(super) fn router<S: Store>() -> Router<AppState<S>> {
    Router::new()
        .route("/assistants", post(create::<S>))
        .route("/assistants/search", post(search::<S>))
        .route("/assistants/count", post(count::<S>))
        .route(
            "/assistants/{id}",
            get(get_one::<S>).patch(patch::<S>).delete(delete::<S>),
        )
        .route("/assistants/{id}/latest", post(set_latest::<S>))
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

/// The tenant's store items under `prefix` (none on a backend without LangGraph's store:
/// files).
async fn items_under<S: Store>(
    state: &AppState<S>,
    caller: &Caller,
    prefix: Vec<String>,
) -> ApiResult<Vec<StoreItem>> {
    let search = StoreItemSearch {
        namespace_prefix: prefix,
        filter: None,
        limit: MAX_LIMIT,
        offset: 0,
        refresh_ttl: false,
    };
    match state
        .store()
        .search_store_items(&caller.tenant, search)
        .await
    {
        Err(StoreError::InvalidState(_)) => Ok(Vec::new()),
        other => Ok(other?),
    }
}

/// Every graph the tenant's workers announced, by name.
async fn announced<S: Store>(state: &AppState<S>, caller: &Caller) -> ApiResult<Vec<Announced>> {
    let items = items_under(state, caller, namespace()).await?;
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

fn custom_namespace() -> Vec<String> {
    CUSTOM.iter().map(|s| s.to_string()).collect()
}

/// An assistant of one's own as kept: `{assistant, versions}` (newest version last).
async fn custom<S: Store>(
    state: &AppState<S>,
    caller: &Caller,
    id: &str,
) -> ApiResult<Option<Value>> {
    if id.parse::<Id>().is_err() {
        return Ok(None);
    }
    Ok(
        match state
            .store()
            .get_store_item(&caller.tenant, &custom_namespace(), id, false)
            .await
        {
            Err(StoreError::InvalidState(_)) => None,
            other => other?.map(|item| item.value),
        },
    )
}

/// Every assistant of one's own of the tenant.
async fn customs<S: Store>(state: &AppState<S>, caller: &Caller) -> ApiResult<Vec<Value>> {
    let items = items_under(state, caller, custom_namespace()).await?;
    Ok(items
        .into_iter()
        .filter_map(|item| item.value.get("assistant").cloned())
        .collect())
}

/// The assistant `id` names (its id, or a graph's name): one of one's own, else a graph's.
async fn find<S: Store>(
    state: &AppState<S>,
    caller: &Caller,
    id: &str,
) -> ApiResult<Option<Value>> {
    if let Some(kept) = custom(state, caller, id).await?
        && let Some(assistant) = kept.get("assistant")
    {
        return Ok(Some(assistant.clone()));
    }
    Ok(resolve(state, caller, id).await?.map(|a| a.body()))
}

async fn one<S: Store>(state: &AppState<S>, caller: &Caller, id: &str) -> ApiResult<Value> {
    find(state, caller, id).await?.ok_or_else(not_found)
}

/// The graph an assistant runs, as its worker announced it.
async fn graph_details<S: Store>(
    state: &AppState<S>,
    caller: &Caller,
    id: &str,
) -> ApiResult<(String, Option<Announced>)> {
    let assistant = one(state, caller, id).await?;
    let graph_id = assistant
        .get("graph_id")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let announced = resolve(state, caller, &graph_id).await?;
    Ok((graph_id, announced))
}

/// What a run of an assistant runs: the graph, the assistant's id, and the config and
/// context the run's own go over.
pub(crate) struct RunAssistant {
    pub graph: String,
    pub assistant_id: String,
    pub config: Value,
    pub context: Value,
}

/// The assistant a run names as `assistant_id` (one of one's own, a graph's by id or name,
/// or a graph a worker serves but has not announced yet): 404 when there is none.
pub(crate) async fn run_assistant<S: Store>(
    state: &AppState<S>,
    caller: &Caller,
    id: &str,
) -> ApiResult<RunAssistant> {
    if let Some(kept) = custom(state, caller, id).await?
        && let Some(assistant) = kept.get("assistant")
    {
        let field = |key: &str| assistant.get(key).cloned().unwrap_or(Value::Null);
        return Ok(RunAssistant {
            graph: field("graph_id").as_str().unwrap_or_default().to_string(),
            assistant_id: id.to_string(),
            config: field("config"),
            context: field("context"),
        });
    }
    let graph = graph_of(state, caller, id).await?;
    Ok(RunAssistant {
        assistant_id: assistant_id(&graph),
        graph,
        config: Value::Null,
        context: Value::Null,
    })
}

/// `base` with `over` on it, as LangGraph merges an assistant's config under a run's: the
/// keys of `over` win, and `configurable` (and `metadata`) are merged one level down.
pub(crate) fn merged_config(base: &Value, over: Option<&Value>) -> Value {
    let Some(base) = base.as_object() else {
        return over.cloned().unwrap_or(Value::Null);
    };
    let over = over.and_then(Value::as_object);
    let mut merged = base.clone();
    for (key, value) in over.into_iter().flatten() {
        match (merged.get_mut(key), value) {
            (Some(Value::Object(have)), Value::Object(more))
                if key == "configurable" || key == "metadata" =>
            {
                have.extend(more.iter().map(|(k, v)| (k.clone(), v.clone())));
            }
            _ => {
                merged.insert(key.clone(), value.clone());
            }
        }
    }
    Value::Object(merged)
}

/// A shallow merge of two JSON objects (`over`'s keys win); either may be absent.
pub(crate) fn merged_context(base: &Value, over: Option<&Value>) -> Value {
    match (base.as_object(), over.and_then(Value::as_object)) {
        (Some(base), Some(over)) => {
            let mut merged = base.clone();
            merged.extend(over.iter().map(|(k, v)| (k.clone(), v.clone())));
            Value::Object(merged)
        }
        (_, Some(_)) => over.cloned().unwrap_or(Value::Null),
        (Some(_), None) => base.clone(),
        (None, None) => over.cloned().unwrap_or(Value::Null),
    }
}

/// 403 for a `user`: assistants are the tenant's.
fn require_tenant_caller(caller: &Caller) -> ApiResult<()> {
    if caller.role == AccessRole::User {
        return Err(ApiError::forbidden(format!(
            "assistants are the tenant's: making or changing one needs an admin or worker key; this {} is a `user`",
            caller.credential_name()
        )));
    }
    Ok(())
}

/// Keeps an assistant of one's own (`{assistant, versions}`).
async fn keep<S: Store>(
    state: &AppState<S>,
    caller: &Caller,
    id: &str,
    kept: Value,
) -> ApiResult<()> {
    state
        .store()
        .put_store_item(
            &caller.tenant,
            StoreItemPut {
                namespace: custom_namespace(),
                key: id.to_string(),
                value: kept,
                ttl_minutes: None,
            },
        )
        .await
        .map_err(|e| match e {
            StoreError::InvalidState(_) => ApiError::invalid_state(
                "this server's storage keeps no LangGraph store: assistants of one's own need SQLite or PostgreSQL",
            ),
            other => other.into(),
        })
}

fn now() -> String {
    stepwise_core::Timestamp::now().to_rfc3339()
}

/// A JSON object field of a body: absent or null → `{}`; anything else but an object → 422.
fn object_field(value: Option<&Value>, field: &str) -> ApiResult<Option<Value>> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(map)) => {
            stepwise_server::limits::check_metadata_limits(field, &Value::Object(map.clone()))?;
            Ok(Some(Value::Object(map.clone())))
        }
        Some(_) => Err(ApiError::invalid(
            field,
            format!("{field} must be a JSON object"),
        )),
    }
}

fn text_field(value: Option<&Value>, field: &str) -> ApiResult<Option<String>> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) if text.chars().count() <= 1000 => Ok(Some(text.clone())),
        Some(_) => Err(ApiError::invalid(
            field,
            format!("{field} is a string of at most 1000 characters"),
        )),
    }
}

/// The graph a worker announced by that name (or its assistant's id): 404 otherwise.
async fn announced_graph<S: Store>(
    state: &AppState<S>,
    caller: &Caller,
    graph_id: &str,
) -> ApiResult<String> {
    match resolve(state, caller, graph_id).await? {
        Some(found) => Ok(found.graph_id),
        None => Err(ApiError::not_found(
            "graph: no worker has announced a graph by that name (`worker.langgraph(name, graph)`)",
        )),
    }
}

async fn create<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    ApiJson(body): ApiJson<Map<String, Value>>,
) -> ApiResult<Json<Value>> {
    require_tenant_caller(&caller)?;
    let graph_id = body
        .get("graph_id")
        .and_then(Value::as_str)
        .ok_or_else(|| ApiError::invalid("graph_id", "graph_id is required"))?;
    let graph = announced_graph(&state, &caller, graph_id).await?;
    let id = match body.get("assistant_id") {
        None | Some(Value::Null) => stepwise_core::new_id().to_string(),
        Some(Value::String(id)) => id
            .parse::<Id>()
            .map_err(|_| ApiError::invalid("assistant_id", "assistant_id must be a UUID"))?
            .to_string(),
        Some(_) => {
            return Err(ApiError::invalid(
                "assistant_id",
                "assistant_id must be a UUID",
            ));
        }
    };
    let if_exists = body
        .get("if_exists")
        .and_then(Value::as_str)
        .unwrap_or("raise");
    if !matches!(if_exists, "raise" | "do_nothing") {
        return Err(ApiError::invalid(
            "if_exists",
            "if_exists is raise or do_nothing",
        ));
    }
    if let Some(existing) = find(&state, &caller, &id).await? {
        if if_exists == "do_nothing" {
            return Ok(Json(existing));
        }
        return Err(ApiError::conflict(format!("assistant {id} already exists")));
    }
    let created = now();
    let assistant = json!({
        "assistant_id": id,
        "graph_id": graph,
        "name": text_field(body.get("name"), "name")?.unwrap_or_else(|| "Untitled".to_string()),
        "description": text_field(body.get("description"), "description")?,
        "config": object_field(body.get("config"), "config")?.unwrap_or_else(|| json!({})),
        "context": object_field(body.get("context"), "context")?.unwrap_or_else(|| json!({})),
        "metadata": object_field(body.get("metadata"), "metadata")?.unwrap_or_else(|| json!({})),
        "version": 1,
        "created_at": created,
        "updated_at": created,
    });
    let kept = json!({"assistant": assistant, "versions": [assistant]});
    keep(&state, &caller, &id, kept).await?;
    Ok(Json(assistant))
}

async fn patch<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<Map<String, Value>>,
) -> ApiResult<Json<Value>> {
    require_tenant_caller(&caller)?;
    let (id, mut kept) = match custom(&state, &caller, &id).await? {
        Some(kept) => (id, kept),
        None => {
            // A graph's own assistant: changed from what its worker announced.
            let graphs = resolve(&state, &caller, &id).await?.ok_or_else(not_found)?;
            let assistant = graphs.body();
            (
                graphs.assistant_id(),
                json!({"assistant": assistant, "versions": [assistant]}),
            )
        }
    };
    let mut assistant = kept.get("assistant").cloned().unwrap_or_else(|| json!({}));
    if let Some(graph_id) = body.get("graph_id").and_then(Value::as_str) {
        let graph = announced_graph(&state, &caller, graph_id).await?;
        assistant["graph_id"] = Value::String(graph);
    }
    for key in ["config", "context"] {
        if let Some(value) = object_field(body.get(key), key)? {
            assistant[key] = value;
        }
    }
    if let Some(Value::Object(more)) = object_field(body.get("metadata"), "metadata")? {
        let mut metadata = assistant["metadata"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        metadata.extend(more);
        assistant["metadata"] = Value::Object(metadata);
    }
    for key in ["name", "description"] {
        if let Some(text) = text_field(body.get(key), key)? {
            assistant[key] = Value::String(text);
        }
    }
    let versions = kept["versions"].as_array().cloned().unwrap_or_default();
    let latest = versions
        .iter()
        .filter_map(|v| v.get("version").and_then(Value::as_u64))
        .max()
        .unwrap_or(1);
    assistant["version"] = json!(latest + 1);
    assistant["updated_at"] = Value::String(now());
    let mut versions = versions;
    versions.push(assistant.clone());
    if versions.len() > MAX_VERSIONS {
        versions.drain(..versions.len() - MAX_VERSIONS);
    }
    kept["assistant"] = assistant.clone();
    kept["versions"] = Value::Array(versions);
    keep(&state, &caller, &id, kept).await?;
    Ok(Json(assistant))
}

async fn delete<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    require_tenant_caller(&caller)?;
    let id = match custom(&state, &caller, &id).await? {
        Some(_) => id,
        None => match resolve(&state, &caller, &id).await? {
            Some(graphs) => {
                let own = graphs.assistant_id();
                if custom(&state, &caller, &own).await?.is_none() {
                    return Err(ApiError::conflict(
                        "a graph's own assistant is the graph its worker serves: it cannot be removed",
                    ));
                }
                own
            }
            None => return Err(not_found()),
        },
    };
    state
        .store()
        .delete_store_item(&caller.tenant, &custom_namespace(), &id)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Latest {
    version: Option<u64>,
}

async fn set_latest<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<Latest>,
) -> ApiResult<Json<Value>> {
    require_tenant_caller(&caller)?;
    let version = body
        .version
        .ok_or_else(|| ApiError::invalid("version", "version is required"))?;
    let mut kept = custom(&state, &caller, &id).await?.ok_or_else(not_found)?;
    let chosen = kept["versions"]
        .as_array()
        .and_then(|list| {
            list.iter()
                .find(|v| v.get("version").and_then(Value::as_u64) == Some(version))
        })
        .cloned()
        .ok_or_else(|| ApiError::not_found("assistant version"))?;
    kept["assistant"] = chosen.clone();
    keep(&state, &caller, &id, kept).await?;
    Ok(Json(chosen))
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
    fn matches(&self, found: &Value) -> bool {
        let text = |key: &str| found.get(key).and_then(Value::as_str).unwrap_or_default();
        let graph = self.graph_id.as_ref().is_none_or(|g| g == text("graph_id"));
        let name = self
            .name
            .as_ref()
            .is_none_or(|n| text("name").to_lowercase().contains(&n.to_lowercase()));
        let metadata = self.metadata.as_ref().is_none_or(|m| {
            m.iter()
                .all(|(k, v)| found.get("metadata").and_then(|have| have.get(k)) == Some(v))
        });
        graph && name && metadata
    }
}

/// Every assistant of the tenant: the graphs' own (as changed, where they were), then the
/// tenant's own, newest first.
async fn every<S: Store>(state: &AppState<S>, caller: &Caller) -> ApiResult<Vec<Value>> {
    let mut own = customs(state, caller).await?;
    own.sort_by(|a, b| {
        let at = |v: &Value| {
            v.get("created_at")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        at(b).cmp(&at(a))
    });
    let mut all: Vec<Value> = Vec::new();
    for graph in announced(state, caller).await? {
        let id = graph.assistant_id();
        let changed = own
            .iter()
            .position(|a| a.get("assistant_id").and_then(Value::as_str) == Some(id.as_str()));
        all.push(match changed {
            Some(at) => own.remove(at),
            None => graph.body(),
        });
    }
    all.extend(own);
    Ok(all)
}

async fn search<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    ApiJson(body): ApiJson<SearchBody>,
) -> ApiResult<Json<Vec<Value>>> {
    let limit = body.limit.unwrap_or(10).min(MAX_LIMIT) as usize;
    let offset = body.offset.unwrap_or(0) as usize;
    Ok(Json(
        every(&state, &caller)
            .await?
            .into_iter()
            .filter(|a| body.matches(a))
            .skip(offset)
            .take(limit)
            .collect(),
    ))
}

async fn count<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    ApiJson(body): ApiJson<SearchBody>,
) -> ApiResult<Json<usize>> {
    Ok(Json(
        every(&state, &caller)
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
    Ok(Json(one(&state, &caller, &id).await?))
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct VersionsBody {
    metadata: Option<Map<String, Value>>,
    limit: Option<u32>,
    offset: Option<u32>,
}

/// An assistant's versions, newest first.
async fn versions<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path(id): Path<String>,
    raw: axum::body::Bytes,
) -> ApiResult<Json<Vec<Value>>> {
    // The SDK sends `{limit, offset, metadata?}`; an empty body asks for the defaults.
    let body: VersionsBody = if raw.iter().all(u8::is_ascii_whitespace) {
        VersionsBody::default()
    } else {
        serde_json::from_slice(&raw)
            .map_err(|e| ApiError::bad_request(format!("invalid JSON body: {e}")))?
    };
    let mut versions = match custom(&state, &caller, &id).await? {
        Some(kept) => kept["versions"].as_array().cloned().unwrap_or_default(),
        None => vec![one(&state, &caller, &id).await?],
    };
    versions.reverse();
    let limit = body.limit.unwrap_or(10).min(MAX_LIMIT) as usize;
    let offset = body.offset.unwrap_or(0) as usize;
    Ok(Json(
        versions
            .into_iter()
            .filter(|v| {
                body.metadata.as_ref().is_none_or(|m| {
                    m.iter().all(|(k, want)| {
                        v.get("metadata").and_then(|have| have.get(k)) == Some(want)
                    })
                })
            })
            .skip(offset)
            .take(limit)
            .collect(),
    ))
}

async fn graph<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    let (_, found) = graph_details(&state, &caller, &id).await?;
    let graph = found.map(|f| f.field("graph")).unwrap_or(Value::Null);
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
    let (graph_id, found) = graph_details(&state, &caller, &id).await?;
    let field = |key: &str| found.as_ref().map(|f| f.field(key)).unwrap_or(Value::Null);
    Ok(Json(json!({
        "graph_id": graph_id,
        "input_schema": field("input_schema"),
        "output_schema": field("output_schema"),
        "state_schema": field("state_schema"),
        "config_schema": field("config_schema"),
        "context_schema": field("context_schema"),
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
