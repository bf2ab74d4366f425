//! `GET /v1/sessions/{id}/items?limit=N`: the latest `limit` items (all without it), oldest
//! first, with the conversation's version.

use axum::extract::{Path, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use stepwise_store::Store;

use super::{Items, MAX_VERSION, items_at, load};
use crate::AppState;
use crate::auth::Caller;
use crate::error::{ApiError, ApiQuery, ApiResult, ErrorBody};
use crate::schemas::IdPath;

/// How many of the latest items to read.
#[derive(Debug, Default, Deserialize)]
pub struct ListItemsQuery {
    pub limit: Option<String>,
}

impl utoipa::IntoParams for ListItemsQuery {
    fn into_params(
        _: impl Fn() -> Option<utoipa::openapi::path::ParameterIn>,
    ) -> Vec<utoipa::openapi::path::Parameter> {
        vec![
            crate::schemas::param(
                "limit",
                utoipa::openapi::path::ParameterIn::Query,
                "The latest this many items (all when absent; 0 reads only the version)",
                super::version_schema(),
            )
            .build(),
        ]
    }
}

/// The items, oldest first, and the version a write names to go after them.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ItemsPage {
    #[schema(schema_with = all_objects)]
    pub items: Vec<Value>,
    pub version: u64,
}

/// `items`: JSON objects.
fn all_objects() -> utoipa::openapi::schema::Schema {
    super::objects(None)
}

fn parse_limit(limit: &Option<String>) -> ApiResult<Option<usize>> {
    let Some(text) = limit else { return Ok(None) };
    match text.trim().parse::<u64>() {
        Ok(n) if n <= MAX_VERSION => Ok(Some(usize::try_from(n).unwrap_or(usize::MAX))),
        _ => Err(ApiError::invalid(
            "limit",
            format!("limit must be an integer from 0 to {MAX_VERSION}"),
        )),
    }
}

pub async fn list<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path(id): Path<String>,
    ApiQuery(query): ApiQuery<ListItemsQuery>,
) -> ApiResult<Response> {
    let limit = parse_limit(&query.limit)?;
    let conversation = load(&state, &caller, &id, false).await?;
    let version = conversation.version();
    let items = if limit == Some(0) {
        Items::default()
    } else {
        items_at(&state, &caller, &conversation, version).await?
    };
    let body = items.page_json(limit, version);
    Ok(([(header::CONTENT_TYPE, "application/json")], body).into_response())
}

#[utoipa::path(get, path = "/v1/sessions/{id}/items", tag = "conversation items", operation_id = "list_items",
    params(IdPath, ListItemsQuery),
    responses((status = 200, body = ItemsPage), (status = 404, body = ErrorBody)))]
#[allow(dead_code)]
pub(crate) fn doc() {}
