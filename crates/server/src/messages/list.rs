//! `GET /v1/sessions/{id}/messages`: a session's messages, oldest first, paged.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Deserialize;
use stepwise_core::{Message, Role};
use stepwise_store::{MessageQuery, Store};
use utoipa::IntoParams;
use utoipa::openapi::path::{Parameter, ParameterIn};

use crate::auth::Caller;
use crate::error::{ApiError, ApiQuery, ApiResult, ErrorBody, path_id};
use crate::schemas::IdPath;
use crate::sessions::{load_session, parse_limit};
use crate::shapes::MessageList;
use crate::{AppState, List};

/// Where the page starts and which roles it holds (every parameter optional).
#[derive(Debug, Default, Deserialize)]
pub struct ListMessagesQuery {
    pub after: Option<String>,
    pub roles: Option<String>,
    pub limit: Option<String>,
    pub cursor: Option<String>,
}

impl IntoParams for ListMessagesQuery {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        use crate::schemas::{comma_separated, cursor, page_limit, param, roles, uuid};
        let query = ParameterIn::Query;
        vec![
            param("after", query.clone(), "A message id", uuid()).build(),
            comma_separated(param(
                "roles",
                query.clone(),
                "e.g. user,assistant",
                roles(),
            ))
            .build(),
            param("limit", query.clone(), "", page_limit()).build(),
            param("cursor", query, "", cursor()).build(),
        ]
    }
}

/// Reads `?roles=a,b`: known roles only.
fn parse_roles(roles: &Option<String>) -> ApiResult<Option<Vec<Role>>> {
    let Some(text) = roles else { return Ok(None) };
    let mut roles = Vec::new();
    for part in text.split(',').map(str::trim) {
        roles.push(Role::parse(part).ok_or_else(|| {
            ApiError::invalid(
                "roles",
                format!("unknown role '{}'", crate::error::cut(part, 32)),
            )
        })?);
    }
    Ok((!roles.is_empty()).then_some(roles))
}

#[utoipa::path(get, path = "/v1/sessions/{id}/messages", tag = "messages", operation_id = "list_messages",
    params(IdPath, ListMessagesQuery),
    responses((status = 200, body = MessageList), (status = 404, body = ErrorBody)))]
#[allow(dead_code)]
pub(crate) fn doc() {}

pub async fn list<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path(id): Path<String>,
    ApiQuery(query): ApiQuery<ListMessagesQuery>,
) -> ApiResult<Json<List<Message>>> {
    let id = path_id(&id, "id")?;
    load_session(&state, &caller, id).await?;
    let limit = parse_limit(&query.limit)?;
    let mut after = match &query.after {
        Some(text) => Some(
            stepwise_core::parse_id(text)
                .ok_or_else(|| ApiError::invalid("after", "after must be a message id"))?,
        ),
        None => None,
    };
    if let Some(cursor) = &query.cursor {
        let (_, last) = stepwise_store::cursor::decode(cursor).map_err(ApiError::from)?;
        after = Some(last);
    }
    let roles = parse_roles(&query.roles)?;
    let mut items = stepwise_store::list_session_messages(
        state.store(),
        &caller.tenant,
        id,
        MessageQuery {
            after,
            roles,
            limit: Some(limit + 1),
        },
    )
    .await
    .map_err(|e| match e {
        // A message id that is not in this session: like any unknown id, 404.
        stepwise_store::StoreError::Invalid {
            field: Some("after"),
            message,
        } => ApiError::new(StatusCode::NOT_FOUND, "not_found", message).with_field("after"),
        e => ApiError::from(e),
    })?;
    let next_cursor = if items.len() > limit as usize {
        items.truncate(limit as usize);
        items
            .last()
            .map(|m| stepwise_store::cursor::encode(m.created_at, m.id))
    } else {
        None
    };
    Ok(Json(List { items, next_cursor }))
}
