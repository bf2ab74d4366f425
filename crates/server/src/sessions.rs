//! Sessions, their messages, memory and documents.

use std::collections::{HashMap, HashSet};

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::http::{HeaderMap, header};
use axum::response::IntoResponse;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use stepwise_core::document::FORMAT_VERSION;
use stepwise_core::document_check::{DocumentLimits, parse_document};
use stepwise_core::name::validate_name;
use stepwise_core::{
    Execution, Id, Memory, Message, Role, Session, SessionDocument, SessionStatus,
};
use stepwise_engine::{AgentChoice, MessageInput};
use stepwise_store::{
    MessageQuery, NewSession, PageRequest, SessionFilter, SessionPatch, Store, export_session,
    restore_memory,
};

use crate::auth::Caller;
use crate::error::{ApiError, ApiJson, ApiQuery, ApiResult, path_id};
use crate::limits::{canonical_url, canonical_url_opt, check_related_type};
use crate::{AppState, List, ServerConfig};

pub const MAX_TITLE_CHARS: usize = 500;
pub const MAX_REF_CHARS: usize = 256;
pub use crate::limits::MAX_CONTENT_CHARS;
pub use crate::limits::MAX_URL_CHARS;
/// Longest free text an external agent sends (a step, a final message, a question).
pub const MAX_CONTENT_BYTES: usize = 1024 * 1024;
/// Rows a document may hold per kind (the body limit bounds it too).
pub const MAX_DOCUMENT_ROWS: usize = 100_000;

#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
pub struct CreateSessionBody {
    pub title: Option<String>,
    pub name: Option<String>,
    pub related_type: Option<String>,
    pub related_id: Option<String>,
    pub initial_context_url: Option<String>,
    pub metadata: Option<Value>,
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct UpdateSessionBody {
    pub title: Option<String>,
    pub name: Option<String>,
    /// `active`, `completed`, `archived` or `closed`.
    pub status: Option<String>,
    pub metadata: Option<Value>,
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct AgentBody {
    #[serde(rename = "type")]
    pub agent_type: String,
    pub config: Option<Value>,
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct MessageBody {
    pub content: String,
    pub related_type: Option<String>,
    pub related_id: Option<String>,
    pub context_url: Option<String>,
    pub metadata: Option<Value>,
    pub agent: Option<AgentBody>,
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct NewSessionMessageBody {
    pub content: String,
    pub related_type: Option<String>,
    pub related_id: Option<String>,
    pub context_url: Option<String>,
    pub metadata: Option<Value>,
    pub agent: Option<AgentBody>,
    pub session: Option<CreateSessionBody>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct MessageAccepted {
    #[schema(value_type = String, format = Uuid)]
    pub session_id: Id,
    pub message: Message,
    pub execution: Execution,
}

#[derive(Debug, Default, Deserialize)]
pub struct ListSessionsQuery {
    pub status: Option<String>,
    /// The session with this name (names are unique per tenant): a list of at most one.
    pub name: Option<String>,
    pub related_type: Option<String>,
    pub related_id: Option<String>,
    pub limit: Option<String>,
    pub cursor: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
pub struct ListMessagesQuery {
    pub after: Option<String>,
    pub roles: Option<String>,
    pub limit: Option<String>,
    pub cursor: Option<String>,
}

// --- validation helpers ---------------------------------------------------------------

pub fn check_text(field: &str, value: &Option<String>, max_chars: usize) -> ApiResult<()> {
    if let Some(text) = value {
        if text.chars().count() > max_chars {
            return Err(ApiError::invalid(
                field,
                format!("{field} is longer than {max_chars} characters"),
            ));
        }
        if text
            .chars()
            .any(|c| c.is_control() && c != '\n' && c != '\t' && c != '\r')
        {
            return Err(ApiError::invalid(
                field,
                format!("{field} contains control characters"),
            ));
        }
    }
    Ok(())
}

pub fn check_metadata(field: &str, value: &Option<Value>) -> ApiResult<Value> {
    match value {
        None | Some(Value::Null) => Ok(Value::Null),
        Some(object @ Value::Object(_)) => {
            crate::limits::check_metadata_limits(field, object)?;
            Ok(object.clone())
        }
        Some(_) => Err(ApiError::invalid(
            field,
            format!("{field} must be a JSON object"),
        )),
    }
}

pub fn parse_limit(limit: &Option<String>) -> ApiResult<u32> {
    match limit {
        None => Ok(stepwise_store::DEFAULT_PAGE_LIMIT),
        Some(text) => match text.trim().parse::<u32>() {
            Ok(n) if (1..=stepwise_store::MAX_PAGE_LIMIT).contains(&n) => Ok(n),
            _ => Err(ApiError::invalid(
                "limit",
                "limit must be an integer from 1 to 500",
            )),
        },
    }
}

/// Pages a list held in memory; the cursor is the position of the next item.
pub fn paginate<T>(
    items: Vec<T>,
    limit: &Option<String>,
    cursor: &Option<String>,
) -> ApiResult<List<T>> {
    let limit = parse_limit(limit)? as usize;
    let start = match cursor {
        None => 0,
        Some(text) => {
            let (at, _) = stepwise_store::cursor::decode(text).map_err(ApiError::from)?;
            usize::try_from(at.as_micros()).map_err(|_| {
                ApiError::invalid("cursor", "the cursor is not one this server issued")
            })?
        }
    };
    let total = items.len();
    let page: Vec<T> = items.into_iter().skip(start).take(limit).collect();
    let next = start + page.len();
    let next_cursor = (next < total).then(|| {
        stepwise_store::cursor::encode(
            stepwise_core::Timestamp(i64::try_from(next).unwrap_or(i64::MAX)),
            Id::nil(),
        )
    });
    Ok(List {
        items: page,
        next_cursor,
    })
}

fn validate_session_body(
    config: &ServerConfig,
    prefix: &str,
    body: &CreateSessionBody,
) -> ApiResult<NewSession> {
    let field = |name: &str| format!("{prefix}{name}");
    check_text(&field("title"), &body.title, MAX_TITLE_CHARS)?;
    check_text(&field("related_type"), &body.related_type, MAX_REF_CHARS)?;
    check_related_type(config, &field("related_type"), &body.related_type)?;
    check_text(&field("related_id"), &body.related_id, MAX_REF_CHARS)?;
    let initial_context_url = canonical_url_opt(
        &field("initial_context_url"),
        body.initial_context_url.clone(),
    )?;
    if let Some(name) = &body.name {
        validate_name(name).map_err(|e| ApiError::invalid(&field("name"), e.to_string()))?;
    }
    Ok(NewSession {
        user_id: String::new(),
        name: body.name.clone(),
        title: body.title.clone(),
        related_type: body.related_type.clone(),
        related_id: body.related_id.clone(),
        initial_context_url,
        metadata: check_metadata(&field("metadata"), &body.metadata)?,
    })
}

async fn load_session<S: Store>(
    state: &AppState<S>,
    caller: &Caller,
    id: Id,
) -> ApiResult<Session> {
    state
        .store()
        .get_session(&caller.tenant, id)
        .await?
        .ok_or_else(|| ApiError::not_found("session"))
}

// --- sessions -----------------------------------------------------------------------------

pub async fn create<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    ApiJson(body): ApiJson<CreateSessionBody>,
) -> ApiResult<impl IntoResponse> {
    let mut new = validate_session_body(&state.config, "", &body)?;
    new.user_id = caller.user_id.clone();
    let session = state.store().create_session(&caller.tenant, new).await?;
    Ok((StatusCode::CREATED, Json(session)))
}

pub async fn list<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    ApiQuery(query): ApiQuery<ListSessionsQuery>,
) -> ApiResult<Json<List<Session>>> {
    let statuses = match &query.status {
        None => None,
        Some(text) => {
            let mut statuses = Vec::new();
            // An empty part (`?status=`, `?status=active,`) names no status: refused like any
            // unknown one, as the OpenAPI document says (at least one item, each from the enum).
            for part in text.split(',').map(str::trim) {
                statuses.push(SessionStatus::parse(part).ok_or_else(|| {
                    ApiError::invalid(
                        "status",
                        format!("unknown session status '{}'", crate::error::cut(part, 32)),
                    )
                })?);
            }
            (!statuses.is_empty()).then_some(statuses)
        }
    };
    check_text("related_type", &query.related_type, MAX_REF_CHARS)?;
    check_text("related_id", &query.related_id, MAX_REF_CHARS)?;
    let filter = SessionFilter {
        statuses,
        related_type: query.related_type,
        related_id: query.related_id,
        user_id: None,
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

pub async fn get<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<Session>> {
    let id = path_id(&id, "id")?;
    Ok(Json(load_session(&state, &caller, id).await?))
}

pub async fn update<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<UpdateSessionBody>,
) -> ApiResult<Json<Session>> {
    let id = path_id(&id, "id")?;
    check_text("title", &body.title, MAX_TITLE_CHARS)?;
    if let Some(name) = &body.name {
        validate_name(name).map_err(|e| ApiError::invalid("name", e.to_string()))?;
    }
    let status = match &body.status {
        None => None,
        Some(text) => match SessionStatus::parse(text) {
            Some(status) if status.client_settable() => Some(status),
            _ => {
                return Err(ApiError::invalid(
                    "status",
                    "status must be one of active, completed, archived, closed",
                ));
            }
        },
    };
    let metadata = match &body.metadata {
        None => None,
        some => Some(check_metadata("metadata", some)?),
    };
    let patch = SessionPatch {
        title: body.title,
        name: body.name,
        status,
        metadata,
    };
    let session = state
        .store()
        .update_session(&caller.tenant, id, patch)
        .await?
        .ok_or_else(|| ApiError::not_found("session"))?;
    Ok(Json(session))
}

pub async fn delete<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    let id = path_id(&id, "id")?;
    if state.store().delete_session(&caller.tenant, id).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::not_found("session"))
    }
}

// --- messages -----------------------------------------------------------------------------

pub async fn list_messages<S: Store>(
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
    let roles = match &query.roles {
        None => None,
        Some(text) => {
            let mut roles = Vec::new();
            for part in text.split(',').map(str::trim) {
                roles.push(Role::parse(part).ok_or_else(|| {
                    ApiError::invalid(
                        "roles",
                        format!("unknown role '{}'", crate::error::cut(part, 32)),
                    )
                })?);
            }
            (!roles.is_empty()).then_some(roles)
        }
    };
    let mut items = state
        .store()
        .list_messages(
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

#[allow(clippy::too_many_arguments)]
fn message_input(
    config: &ServerConfig,
    content: String,
    related_type: Option<String>,
    related_id: Option<String>,
    context_url: Option<String>,
    metadata: Option<Value>,
    agent: Option<AgentBody>,
) -> ApiResult<MessageInput> {
    if content.trim().is_empty() {
        return Err(ApiError::invalid("content", "content must not be empty"));
    }
    if content.chars().count() > MAX_CONTENT_CHARS {
        return Err(ApiError::invalid(
            "content",
            format!("content is longer than {MAX_CONTENT_CHARS} characters"),
        ));
    }
    check_text("related_type", &related_type, MAX_REF_CHARS)?;
    check_related_type(config, "related_type", &related_type)?;
    check_text("related_id", &related_id, MAX_REF_CHARS)?;
    let context_url = canonical_url_opt("context_url", context_url)?;
    let agent = match agent {
        None => None,
        Some(agent) => {
            check_text("agent.type", &Some(agent.agent_type.clone()), 64)?;
            let config = match agent.config {
                None | Some(Value::Null) => Value::Null,
                Some(config @ Value::Object(_)) => config,
                Some(_) => {
                    return Err(ApiError::invalid(
                        "agent.config",
                        "agent.config must be a JSON object",
                    ));
                }
            };
            Some(AgentChoice {
                agent_type: agent.agent_type,
                config,
            })
        }
    };
    Ok(MessageInput {
        content,
        related_type,
        related_id,
        context_url,
        metadata: check_metadata("metadata", &metadata)?,
        agent,
    })
}

pub async fn post_message<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<MessageBody>,
) -> ApiResult<impl IntoResponse> {
    let id = path_id(&id, "id")?;
    let input = message_input(
        &state.config,
        body.content,
        body.related_type,
        body.related_id,
        body.context_url,
        body.metadata,
        body.agent,
    )?;
    let session = load_session(&state, &caller, id).await?;
    if session.status == SessionStatus::Deleted {
        return Err(ApiError::invalid_state("the session is deleted"));
    }
    let submitted = state
        .engine
        .submit_message_to(&caller.tenant, &caller.user_id, &session, input)
        .await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(MessageAccepted {
            session_id: submitted.session_id,
            message: submitted.message,
            execution: submitted.execution,
        }),
    ))
}

pub async fn post_message_new_session<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    ApiJson(body): ApiJson<NewSessionMessageBody>,
) -> ApiResult<impl IntoResponse> {
    let input = message_input(
        &state.config,
        body.content,
        body.related_type,
        body.related_id,
        body.context_url,
        body.metadata,
        body.agent,
    )?;
    // Everything is checked before the session is created, so a bad message writes nothing.
    if let Some(agent) = &input.agent
        && (!state.engine.can_run(&agent.agent_type)
            || agent.agent_type == stepwise_engine::EXTERNAL_AGENT)
    {
        return Err(ApiError::invalid(
            "agent.type",
            format!(
                "unknown agent type '{}'",
                crate::error::cut(&agent.agent_type, 64)
            ),
        ));
    }
    let mut new =
        validate_session_body(&state.config, "session.", &body.session.unwrap_or_default())?;
    new.user_id = caller.user_id.clone();
    let session = state.store().create_session(&caller.tenant, new).await?;
    let submitted = state
        .engine
        .submit_message_to(&caller.tenant, &caller.user_id, &session, input)
        .await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(MessageAccepted {
            session_id: submitted.session_id,
            message: submitted.message,
            execution: submitted.execution,
        }),
    ))
}

// --- memory and documents -----------------------------------------------------------------

pub async fn memory<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<Memory>> {
    let id = path_id(&id, "id")?;
    let memory = restore_memory(state.store(), &caller.tenant, id)
        .await?
        .ok_or_else(|| ApiError::not_found("session"))?;
    Ok(Json(memory))
}

pub async fn export<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<SessionDocument>> {
    let id = path_id(&id, "id")?;
    let document = export_session(state.store(), &caller.tenant, id)
        .await?
        .ok_or_else(|| ApiError::not_found("session"))?;
    Ok(Json(document))
}

pub async fn import<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<impl IntoResponse> {
    let is_json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| {
            let v = v.trim().to_ascii_lowercase();
            v == "application/json" || (v.starts_with("application/") && v.ends_with("+json"))
        });
    if !is_json {
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "the body must be JSON with Content-Type: application/json",
        ));
    }
    crate::error::check_charset(&headers)?;
    let body = body.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "payload_too_large",
                "the body is larger than this server accepts",
            )
        } else {
            ApiError::bad_request("the body could not be read")
        }
    })?;
    let limits = DocumentLimits {
        max_bytes: state.config.body_limit,
        ..DocumentLimits::default()
    };
    let document = parse_document(&body, &limits).map_err(|e| {
        let error = if e.is_too_large() {
            ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "payload_too_large",
                e.to_string(),
            )
        } else {
            ApiError::bad_request(e.to_string())
        };
        match e.field() {
            Some(field) => error.with_field(field),
            None => error,
        }
    })?;
    let mut document = document;
    validate_document(&document)?;
    check_document_context(&state.config, &mut document)?;
    let session = state
        .store()
        .import_document(&caller.tenant, &caller.user_id, document)
        .await?;
    Ok((StatusCode::CREATED, Json(session)))
}

/// The seed 002 context of an imported document: `related_type`s from the allow-list, context
/// URLs valid and made canonical (the document's size limit bounds its metadata).
pub fn check_document_context(config: &ServerConfig, doc: &mut SessionDocument) -> ApiResult<()> {
    let session = &mut doc.session;
    check_related_type(config, "session.related_type", &session.related_type)?;
    if let Some(url) = &session.initial_context_url {
        session.initial_context_url = Some(canonical_url("session.initial_context_url", url)?);
    }
    for (i, message) in doc.messages.iter_mut().enumerate() {
        check_text(
            &format!("messages[{i}].related_type"),
            &message.related_type,
            MAX_REF_CHARS,
        )?;
        check_related_type(
            config,
            &format!("messages[{i}].related_type"),
            &message.related_type,
        )?;
        check_text(
            &format!("messages[{i}].related_id"),
            &message.related_id,
            MAX_REF_CHARS,
        )?;
        if let Some(url) = &message.context_url {
            message.context_url = Some(canonical_url(&format!("messages[{i}].context_url"), url)?);
        }
    }
    Ok(())
}

/// Checks a session document before anything is written: version, sizes, names, and that
/// every reference inside it points to a row of the same document.
pub fn validate_document(doc: &SessionDocument) -> ApiResult<()> {
    if doc.format_version == 0 || doc.format_version > FORMAT_VERSION {
        return Err(ApiError::invalid(
            "format_version",
            format!("format_version must be 1 to {FORMAT_VERSION}"),
        ));
    }
    let session = &doc.session;
    if let Some(name) = &session.name {
        validate_name(name).map_err(|e| ApiError::invalid("session.name", e.to_string()))?;
    }
    check_text("session.title", &session.title, MAX_TITLE_CHARS)?;
    check_text("session.related_type", &session.related_type, MAX_REF_CHARS)?;
    check_text("session.related_id", &session.related_id, MAX_REF_CHARS)?;
    check_text(
        "session.initial_context_url",
        &session.initial_context_url,
        MAX_URL_CHARS,
    )?;
    for (field, len) in [
        ("messages", doc.messages.len()),
        ("executions", doc.executions.len()),
        ("steps", doc.steps.len()),
        ("snapshots", doc.snapshots.len()),
    ] {
        if len > MAX_DOCUMENT_ROWS {
            return Err(ApiError::invalid(
                field,
                format!("a document holds at most {MAX_DOCUMENT_ROWS} {field}"),
            ));
        }
    }
    let mut message_ids = HashSet::new();
    for message in &doc.messages {
        if message.session_id != session.id {
            return Err(ApiError::invalid(
                "messages",
                "a message belongs to another session",
            ));
        }
        if !message_ids.insert(message.id) {
            return Err(ApiError::invalid("messages", "two messages share an id"));
        }
    }
    let execution_ids: HashSet<Id> = doc.executions.iter().map(|e| e.id).collect();
    if execution_ids.len() != doc.executions.len() {
        return Err(ApiError::invalid(
            "executions",
            "two executions share an id",
        ));
    }
    for execution in &doc.executions {
        if execution.session_id.is_some_and(|s| s != session.id) {
            return Err(ApiError::invalid(
                "executions",
                "an execution belongs to another session",
            ));
        }
        if execution
            .parent_execution_id
            .is_some_and(|p| !execution_ids.contains(&p))
        {
            return Err(ApiError::invalid(
                "executions",
                "an execution's parent is not in the document",
            ));
        }
        check_text(
            "executions.agent_type",
            &Some(execution.agent_type.clone()),
            64,
        )?;
    }
    for message in &doc.messages {
        if message
            .execution_id
            .is_some_and(|e| !execution_ids.contains(&e))
        {
            return Err(ApiError::invalid(
                "messages",
                "a message refers to an execution that is not in the document",
            ));
        }
    }
    let mut numbers: HashMap<Id, HashSet<u32>> = HashMap::new();
    for step in &doc.steps {
        if !execution_ids.contains(&step.execution_id) {
            return Err(ApiError::invalid(
                "steps",
                "a step belongs to an execution that is not in the document",
            ));
        }
        if step.step_number == 0 {
            return Err(ApiError::invalid("steps", "step numbers start at 1"));
        }
        if !numbers
            .entry(step.execution_id)
            .or_default()
            .insert(step.step_number)
        {
            return Err(ApiError::invalid(
                "steps",
                "two steps of one execution share a step number",
            ));
        }
    }
    let snapshot_ids: HashSet<Id> = doc.snapshots.iter().map(|s| s.id).collect();
    for snapshot in &doc.snapshots {
        if !execution_ids.contains(&snapshot.execution_id) {
            return Err(ApiError::invalid(
                "snapshots",
                "a snapshot belongs to an execution that is not in the document",
            ));
        }
        if snapshot
            .parent_snapshot_id
            .is_some_and(|p| !snapshot_ids.contains(&p))
        {
            return Err(ApiError::invalid(
                "snapshots",
                "a snapshot's parent is not in the document",
            ));
        }
    }
    Ok(())
}
