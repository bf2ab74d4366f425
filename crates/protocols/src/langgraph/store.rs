//! LangGraph's store (`client.store` of `langgraph-sdk`): items by namespace and key, kept
//! per tenant ([`stepwise_store::LangGraphStore`]). The tenant's `admin` and `worker`
//! callers reach it; a `user` (an end-user token or key) gets 403 `forbidden`.
//!
//! - `PUT /store/items` `{namespace, key, value, index?, ttl?}` → 204 (`ttl` in minutes;
//!   `index`: `false`, or the fields to embed, when the server has an embedding model).
//! - `GET /store/items?namespace=a.b&key=k&refresh_ttl=` → 200 the item, or `null`.
//! - `DELETE /store/items` `{namespace, key}` → 204.
//! - `POST /store/items/search` `{namespace_prefix, filter?, limit?, offset?, query?,
//!   refresh_ttl?}` → 200 `{"items": [...]}`; with a `query`, the items ranked by how close
//!   their embedded fields are to it (`score`, the cosine similarity), when the server has an
//!   embedding model (`stepwise serve --store-embed-model`; 400 otherwise).
//!
//! The vectors of an item are kept in its value under `__stepwise_index__`, which no answer
//! shows.
//! - `POST /store/namespaces` `{prefix?, suffix?, max_depth?, limit?, offset?}` → 200
//!   `{"namespaces": [[...]]}`.
//!
//! Bodies take fields they do not know (as LangGraph's server does), so a newer SDK that
//! sends one more optional field still works.

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{post, put};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use stepwise_server::store_index::{StoreIndex, cosine};
use stepwise_store::prelude::*;
use stepwise_store::{AccessRole, NamespaceQuery, StoreItem, StoreItemPut, StoreItemSearch};

use stepwise_server::{ApiError, ApiJson, ApiQuery, ApiResult, AppState, Caller};

/// A search answers 10 items unless asked, a listing 100 (the SDK's defaults).
const DEFAULT_SEARCH_LIMIT: u32 = 10;
const DEFAULT_NAMESPACE_LIMIT: u32 = 100;
/// Where an item's vectors are kept in its value.
const VECTORS: &str = "__stepwise_index__";
/// The most items a search with a `query` ranks.
const MAX_RANKED: u32 = 10_000;

/// `value` without the vectors kept in it.
fn shown(mut value: Value) -> Value {
    if let Value::Object(map) = &mut value {
        map.remove(VECTORS);
    }
    value
}

/// The vectors kept in an item's value.
fn vectors_of(value: &Value) -> Vec<Vec<f32>> {
    value
        .get(VECTORS)
        .and_then(|v| v.get("vectors"))
        .and_then(Value::as_array)
        .map(|list| {
            list.iter()
                .filter_map(Value::as_array)
                .map(|v| {
                    v.iter()
                        .filter_map(Value::as_f64)
                        .map(|x| x as f32)
                        .collect()
                })
                .collect()
        })
        .unwrap_or_default()
}

/// 503 `unavailable`: the embedding model did not answer (nothing was written).
fn embedding_failed(message: String) -> ApiError {
    tracing::warn!(error = %message, "the store's embedding model failed");
    ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", message)
}

pub(super) fn router<S: Store>() -> Router<AppState<S>> {
    Router::new()
        .route(
            "/store/items",
            put(put_item::<S>)
                .get(get_item::<S>)
                .delete(delete_item::<S>),
        )
        .route("/store/items/search", post(search_items::<S>))
        .route("/store/namespaces", post(list_namespaces::<S>))
}

/// 403 for a `user`: the store is the tenant's, shared by its agents, not one user's.
fn require_tenant_caller(caller: &Caller) -> ApiResult<()> {
    if caller.role == AccessRole::User {
        return Err(ApiError::forbidden(format!(
            "the LangGraph store is the tenant's: it needs an admin or worker key; this {} is a `user`",
            caller.credential_name()
        )));
    }
    Ok(())
}

/// An item as LangGraph answers it (`Item`; a search's also carries `score`).
#[derive(Serialize)]
struct ItemBody {
    namespace: Vec<String>,
    key: String,
    value: Value,
    created_at: String,
    updated_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    score: Option<Option<f64>>,
}

impl ItemBody {
    fn new(item: StoreItem, searched: bool) -> Self {
        ItemBody {
            namespace: item.namespace,
            key: item.key,
            value: shown(item.value),
            created_at: item.created_at.to_rfc3339(),
            updated_at: item.updated_at.to_rfc3339(),
            score: searched.then_some(None),
        }
    }
}

#[derive(Deserialize)]
struct PutItem {
    namespace: Vec<String>,
    key: String,
    value: Value,
    /// `false`: not embedded; a list: the fields embedded (else the server's).
    #[serde(default)]
    index: Option<Value>,
    #[serde(default)]
    ttl: Option<f64>,
}

async fn put_item<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    ApiJson(body): ApiJson<PutItem>,
) -> ApiResult<StatusCode> {
    require_tenant_caller(&caller)?;
    let mut value = body.value;
    if let Value::Object(map) = &mut value {
        map.remove(VECTORS);
    }
    let fields: Option<Vec<String>> = match body.index {
        None | Some(Value::Null) | Some(Value::Bool(true)) => None,
        Some(Value::Bool(false)) => Some(Vec::new()),
        Some(Value::Array(list)) => Some(
            list.iter()
                .map(|f| f.as_str().map(str::to_string))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| {
                    ApiError::invalid("index", "index is false or a list of field paths")
                })?,
        ),
        Some(_) => {
            return Err(ApiError::invalid(
                "index",
                "index is false or a list of field paths",
            ));
        }
    };
    if let Some(index) = &state.config.store_index
        && value.is_object()
    {
        let texts = StoreIndex::texts(&value, fields.as_deref().unwrap_or(index.fields()));
        if !texts.is_empty() {
            let vectors = index.embed(&texts).await.map_err(embedding_failed)?;
            value[VECTORS] = json!({"vectors": vectors});
        }
    }
    let put = StoreItemPut {
        namespace: body.namespace,
        key: body.key,
        value,
        ttl_minutes: body.ttl,
    };
    state.store().put_store_item(&caller.tenant, put).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize)]
struct GetItem {
    namespace: Option<String>,
    key: Option<String>,
    refresh_ttl: Option<String>,
}

/// A query flag as httpx writes a Python bool (`true`/`false`), or `1`/`0`.
fn flag(field: &str, text: Option<&str>, default: bool) -> ApiResult<bool> {
    match text.map(str::to_ascii_lowercase).as_deref() {
        None => Ok(default),
        Some("true" | "1") => Ok(true),
        Some("false" | "0") => Ok(false),
        Some(_) => Err(ApiError::invalid(
            field,
            format!("{field} is true or false"),
        )),
    }
}

/// A namespace as the SDK sends it in a query: its labels joined with `.`.
fn split_namespace(text: &str) -> Vec<String> {
    if text.is_empty() {
        Vec::new()
    } else {
        text.split('.').map(str::to_string).collect()
    }
}

async fn get_item<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    ApiQuery(query): ApiQuery<GetItem>,
) -> ApiResult<Json<Option<ItemBody>>> {
    require_tenant_caller(&caller)?;
    let namespace = split_namespace(query.namespace.as_deref().unwrap_or(""));
    let key = query
        .key
        .ok_or_else(|| ApiError::invalid("key", "key is required"))?;
    let refresh = flag("refresh_ttl", query.refresh_ttl.as_deref(), true)?;
    let item = state
        .store()
        .get_store_item(&caller.tenant, &namespace, &key, refresh)
        .await?;
    Ok(Json(item.map(|item| ItemBody::new(item, false))))
}

#[derive(Deserialize)]
struct DeleteItem {
    namespace: Vec<String>,
    key: String,
}

async fn delete_item<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    ApiJson(body): ApiJson<DeleteItem>,
) -> ApiResult<StatusCode> {
    require_tenant_caller(&caller)?;
    state
        .store()
        .delete_store_item(&caller.tenant, &body.namespace, &body.key)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize)]
struct SearchItems {
    #[serde(default)]
    namespace_prefix: Vec<String>,
    #[serde(default)]
    filter: Option<Map<String, Value>>,
    #[serde(default)]
    limit: Option<u32>,
    #[serde(default)]
    offset: Option<u32>,
    #[serde(default)]
    query: Option<String>,
    #[serde(default)]
    refresh_ttl: Option<bool>,
}

#[derive(Serialize)]
struct SearchAnswer {
    items: Vec<ItemBody>,
}

async fn search_items<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    ApiJson(body): ApiJson<SearchItems>,
) -> ApiResult<Json<SearchAnswer>> {
    require_tenant_caller(&caller)?;
    if let Some(query) = body.query.clone().filter(|q| !q.trim().is_empty()) {
        let Some(index) = state.config.store_index.clone() else {
            return Err(ApiError::invalid(
                "query",
                "semantic search (query) needs an embedding model, and this server has none (stepwise serve --store-embed-model): search by namespace_prefix and filter",
            ));
        };
        return ranked(&state, &caller, &index, &query, body)
            .await
            .map(Json);
    }
    let search = StoreItemSearch {
        namespace_prefix: body.namespace_prefix,
        filter: body.filter,
        limit: body.limit.unwrap_or(DEFAULT_SEARCH_LIMIT),
        offset: body.offset.unwrap_or(0),
        refresh_ttl: body.refresh_ttl.unwrap_or(true),
    };
    let items = state
        .store()
        .search_store_items(&caller.tenant, search)
        .await?;
    Ok(Json(SearchAnswer {
        items: items
            .into_iter()
            .map(|item| ItemBody::new(item, true))
            .collect(),
    }))
}

/// A search with a `query`: the items under the prefix that pass the filter, ranked by their
/// best cosine similarity to the query (those without vectors last, with no score).
async fn ranked<S: Store>(
    state: &AppState<S>,
    caller: &Caller,
    index: &StoreIndex,
    query: &str,
    body: SearchItems,
) -> ApiResult<SearchAnswer> {
    let wanted = index
        .embed(&[query.to_string()])
        .await
        .map_err(embedding_failed)?
        .pop()
        .unwrap_or_default();
    let mut scored: Vec<(Option<f64>, StoreItem)> = Vec::new();
    let mut offset = 0;
    while offset < MAX_RANKED {
        let page = state
            .store()
            .search_store_items(
                &caller.tenant,
                StoreItemSearch {
                    namespace_prefix: body.namespace_prefix.clone(),
                    filter: body.filter.clone(),
                    limit: stepwise_store::langgraph_store::MAX_STORE_LIMIT,
                    offset,
                    refresh_ttl: false,
                },
            )
            .await?;
        let full = page.len() as u32 == stepwise_store::langgraph_store::MAX_STORE_LIMIT;
        offset += page.len() as u32;
        for item in page {
            let score = vectors_of(&item.value)
                .iter()
                .map(|v| cosine(&wanted, v))
                .fold(None, |best: Option<f64>, s| {
                    Some(best.map_or(s, |b| b.max(s)))
                });
            scored.push((score, item));
        }
        if !full {
            break;
        }
    }
    scored.sort_by(|(a, _), (b, _)| match (a, b) {
        (Some(a), Some(b)) => b.total_cmp(a),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => std::cmp::Ordering::Equal,
    });
    let limit = body.limit.unwrap_or(DEFAULT_SEARCH_LIMIT) as usize;
    let skip = body.offset.unwrap_or(0) as usize;
    let refresh = body.refresh_ttl.unwrap_or(true);
    let mut items = Vec::new();
    for (score, item) in scored.into_iter().skip(skip).take(limit) {
        if refresh {
            // The time to live of what a search answers starts again, as without a query.
            state
                .store()
                .get_store_item(&caller.tenant, &item.namespace, &item.key, true)
                .await?;
        }
        let mut shown = ItemBody::new(item, true);
        shown.score = Some(score);
        items.push(shown);
    }
    Ok(SearchAnswer { items })
}

#[derive(Deserialize)]
struct ListNamespaces {
    #[serde(default)]
    prefix: Option<Vec<String>>,
    #[serde(default)]
    suffix: Option<Vec<String>>,
    #[serde(default)]
    max_depth: Option<u32>,
    #[serde(default)]
    limit: Option<u32>,
    #[serde(default)]
    offset: Option<u32>,
}

#[derive(Serialize)]
struct NamespacesAnswer {
    namespaces: Vec<Vec<String>>,
}

async fn list_namespaces<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    ApiJson(body): ApiJson<ListNamespaces>,
) -> ApiResult<Json<NamespacesAnswer>> {
    require_tenant_caller(&caller)?;
    let query = NamespaceQuery {
        prefix: body.prefix,
        suffix: body.suffix,
        max_depth: body.max_depth,
        limit: body.limit.unwrap_or(DEFAULT_NAMESPACE_LIMIT),
        offset: body.offset.unwrap_or(0),
    };
    let namespaces = state
        .store()
        .list_store_namespaces(&caller.tenant, query)
        .await?;
    Ok(Json(NamespacesAnswer { namespaces }))
}
