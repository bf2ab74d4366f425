//! `GET /v1/sessions`: the caller's sessions, newest first, filtered and paged.

use axum::Json;
use axum::extract::{RawQuery, State};
use serde::Deserialize;
use stepwise_core::name::validate_name;
use stepwise_core::{Session, SessionStatus};
use stepwise_store::{PageRequest, SessionFilter, Store};
use utoipa::IntoParams;
use utoipa::openapi::path::{Parameter, ParameterIn};

use super::{MAX_REF_CHARS, check_text, parse_limit};
use crate::auth::Caller;
use crate::error::{ApiError, ApiQuery, ApiResult, ErrorBody};
use crate::schemas::{reference_filter, session_statuses};
use crate::shapes::SessionList;
use crate::{AppState, List};

/// The filters and page of the list (every parameter optional).
#[derive(Debug, Default, Deserialize)]
pub struct ListSessionsQuery {
    pub status: Option<String>,
    /// The session with this name (names are unique per tenant): a list of at most one.
    pub name: Option<String>,
    pub related_type: Option<String>,
    pub related_id: Option<String>,
    /// The sessions of this user (an admin's filter; a `user` caller sees only its own).
    pub user_id: Option<String>,
    pub limit: Option<String>,
    pub cursor: Option<String>,
}

impl IntoParams for ListSessionsQuery {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        use crate::schemas::{comma_separated, cursor, name_filter, page_limit, param};
        let query = ParameterIn::Query;
        let status = param(
            "status",
            query.clone(),
            "Comma-separated statuses; default all but deleted",
            session_statuses(),
        );
        vec![
            comma_separated(status).build(),
            param(
                "name",
                query.clone(),
                "The session with this name (unique per tenant): at most one item",
                name_filter(),
            )
            .build(),
            param("related_type", query.clone(), "", reference_filter()).build(),
            param("related_id", query.clone(), "", reference_filter()).build(),
            param(
                "user_id",
                query.clone(),
                "The sessions of this user; a `user` caller sees only its own whatever this says",
                reference_filter(),
            )
            .build(),
            param("limit", query.clone(), "1-500, default 50", page_limit()).build(),
            param("cursor", query, "", cursor()).build(),
        ]
    }
}

/// Reads `?status=a,b`: at least one known status when present. An empty part
/// (`?status=`, `?status=active,`) names no status: refused like any unknown one, as the
/// OpenAPI document says (at least one item, each from the enum).
fn parse_statuses(status: &Option<String>) -> ApiResult<Option<Vec<SessionStatus>>> {
    let Some(text) = status else { return Ok(None) };
    let mut statuses = Vec::new();
    for part in text.split(',').map(str::trim) {
        statuses.push(SessionStatus::parse(part).ok_or_else(|| {
            ApiError::invalid(
                "status",
                format!("unknown session status '{}'", crate::error::cut(part, 32)),
            )
        })?);
    }
    Ok((!statuses.is_empty()).then_some(statuses))
}

#[utoipa::path(get, path = "/v1/sessions", tag = "sessions", operation_id = "list_sessions",
    params(ListSessionsQuery),
    responses((status = 200, body = SessionList), (status = 400, body = ErrorBody)))]
#[allow(dead_code)]
pub(crate) fn doc() {}

/// Most `metadata.KEY=VALUE` filters one list takes.
pub const MAX_METADATA_FILTERS: usize = 8;
/// Longest metadata key and value a filter names, in characters.
const MAX_METADATA_KEY_CHARS: usize = 64;
const MAX_METADATA_VALUE_CHARS: usize = 256;

/// The `metadata.KEY=VALUE` parameters of the query: exact matches on top-level keys.
fn parse_metadata_filters(raw: Option<&str>) -> ApiResult<Vec<(String, String)>> {
    let mut filters = Vec::new();
    let Some(raw) = raw else { return Ok(filters) };
    for (name, value) in url::form_urlencoded::parse(raw.as_bytes()) {
        let Some(key) = name.strip_prefix("metadata.") else {
            continue;
        };
        let field = format!(
            "metadata.{}",
            crate::error::cut(key, MAX_METADATA_KEY_CHARS)
        );
        if key.is_empty()
            || key.chars().count() > MAX_METADATA_KEY_CHARS
            || !key
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'))
        {
            return Err(ApiError::invalid(
                &field,
                format!(
                    "a metadata filter's key is 1-{MAX_METADATA_KEY_CHARS} characters of [A-Za-z0-9_-]"
                ),
            ));
        }
        if value.chars().count() > MAX_METADATA_VALUE_CHARS {
            return Err(ApiError::invalid(
                &field,
                format!(
                    "a metadata filter's value is at most {MAX_METADATA_VALUE_CHARS} characters"
                ),
            ));
        }
        filters.push((key.to_string(), value.into_owned()));
    }
    if filters.len() > MAX_METADATA_FILTERS {
        return Err(ApiError::invalid(
            "metadata",
            format!("at most {MAX_METADATA_FILTERS} metadata.KEY=VALUE filters"),
        ));
    }
    Ok(filters)
}

pub async fn list<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    RawQuery(raw): RawQuery,
    ApiQuery(query): ApiQuery<ListSessionsQuery>,
) -> ApiResult<Json<List<Session>>> {
    let statuses = parse_statuses(&query.status)?;
    let metadata = parse_metadata_filters(raw.as_deref())?;
    check_text("related_type", &query.related_type, MAX_REF_CHARS)?;
    check_text("related_id", &query.related_id, MAX_REF_CHARS)?;
    check_text("user_id", &query.user_id, MAX_REF_CHARS)?;
    // A user sees its own sessions only; asking for another user's finds none.
    let asked = query.user_id.clone();
    if caller.role != stepwise_store::AccessRole::Admin
        && asked.as_ref().is_some_and(|u| *u != caller.user_id)
    {
        return Ok(Json(List {
            items: Vec::new(),
            next_cursor: None,
        }));
    }
    let filter = SessionFilter {
        statuses,
        related_type: query.related_type,
        related_id: query.related_id,
        user_id: caller.session_owner_filter(asked),
        metadata,
    };
    let page = PageRequest {
        limit: parse_limit(&query.limit)?,
        cursor: query.cursor,
    };
    if let Some(name) = &query.name {
        // Names are unique per tenant: a lookup, not a scan. The other filters still apply.
        validate_name(name).map_err(|e| ApiError::invalid("name", e.to_string()))?;
        if let Some(cursor) = &page.cursor {
            // The one match is on the first page; a cursor reads past it.
            stepwise_store::cursor::decode(cursor)?;
        }
        let found = state
            .store()
            .find_session_by_name(&caller.tenant, name)
            .await?
            .filter(|s| filter.matches(s) && page.cursor.is_none());
        return Ok(Json(List {
            items: found.into_iter().collect(),
            next_cursor: None,
        }));
    }
    let page = state
        .store()
        .list_sessions(&caller.tenant, filter, page)
        .await?;
    Ok(Json(List {
        items: page.items,
        next_cursor: page.next_cursor,
    }))
}
