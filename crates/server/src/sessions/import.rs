//! `POST /v1/sessions/import`: a session document (an export, or a session file of seed
//! 004's terminal agent) becomes a new session of the caller's tenant. Everything is checked
//! before anything is written.

use std::collections::{HashMap, HashSet};

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use stepwise_core::document::FORMAT_VERSION;
use stepwise_core::document_check::{DocumentLimits, parse_document};
use stepwise_core::name::validate_name;
use stepwise_core::{Id, Session, SessionDocument};
use stepwise_store::Store;
use utoipa::openapi::schema::{
    AnyOfBuilder, ArrayBuilder, ObjectBuilder, Schema, SchemaType, Type,
};

use super::{MAX_DOCUMENT_ROWS, MAX_REF_CHARS, MAX_TITLE_CHARS, MAX_URL_CHARS, check_text};
use crate::auth::Caller;
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::limits::{canonical_url, check_related_type};
use crate::{AppState, ServerConfig};

/// What the import reads: a document of the current format, or a legacy session file.
#[derive(utoipa::ToSchema)]
#[serde(untagged)]
#[allow(dead_code, clippy::large_enum_variant)] // the schema of a body parsed by `parse_document`
pub enum ImportBody {
    Current(SessionDocument),
    Legacy(LegacySessionFile),
}

/// A session file of seed 004's terminal agent (format_version 0 or absent); imported as a new session with its messages
#[derive(utoipa::ToSchema)]
#[allow(dead_code)] // the schema of a body parsed by `parse_document`
pub struct LegacySessionFile {
    #[schema(schema_with = legacy_format_version)]
    pub format_version: Option<u32>,
    #[schema(schema_with = crate::schemas::name)]
    pub name: Option<String>,
    #[schema(schema_with = crate::schemas::title)]
    pub description: Option<String>,
    #[schema(schema_with = string_or_null)]
    pub created_at: Option<String>,
    #[schema(schema_with = string_or_null)]
    pub updated_at: Option<String>,
    #[schema(schema_with = legacy_thread)]
    pub thread: Option<serde_json::Value>,
}

/// `format_version`: 0 or `null`.
fn legacy_format_version() -> Schema {
    ObjectBuilder::new()
        .schema_type(SchemaType::AnyValue)
        .enum_values(Some([serde_json::json!(0), serde_json::Value::Null]))
        .build()
        .into()
}

fn string_or_null() -> Schema {
    ObjectBuilder::new()
        .schema_type(crate::schemas::typed(Type::String, true))
        .build()
        .into()
}

/// `thread.messages`: objects with their text in `content`, `text` or `contents` (a string
/// or a list of parts).
fn legacy_thread() -> Schema {
    let text_in = |key: &str| {
        ObjectBuilder::new()
            .schema_type(SchemaType::AnyValue)
            .property(
                key,
                ObjectBuilder::new()
                    .schema_type(SchemaType::Array(vec![Type::String, Type::Array])),
            )
            .required(key)
    };
    let message = AnyOfBuilder::new()
        .schema_type(Type::Object)
        .item(text_in("content"))
        .item(text_in("text"))
        .item(text_in("contents"));
    let messages = ArrayBuilder::new()
        .schema_type(crate::schemas::typed(Type::Array, true))
        .items(message);
    ObjectBuilder::new()
        .schema_type(crate::schemas::typed(Type::Object, true))
        .property("messages", messages)
        .build()
        .into()
}

#[utoipa::path(post, path = "/v1/sessions/import", tag = "sessions", operation_id = "import_session",
    request_body = inline(ImportBody),
    responses((status = 201, body = Session), (status = 400, body = ErrorBody)))]
#[allow(dead_code)]
pub(crate) fn doc() {}

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
            crate::error::too_large(Some(state.config.body_limit))
        } else {
            ApiError::bad_request("the body could not be read")
        }
    })?;
    let limits = DocumentLimits {
        max_bytes: state.config.body_limit,
        ..DocumentLimits::default()
    };
    let mut document = parse_document(&body, &limits).map_err(|e| {
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
