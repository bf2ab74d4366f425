//! The OpenAPI 3.1 document served at `/openapi.json`, generated with utoipa from the
//! API's own types (the model of stepwise-core, the request bodies of the handlers). The
//! handlers are generic over the store, so each path is declared on a small stub here.
#![allow(dead_code)]

use std::sync::OnceLock;

use serde_json::{Value, json};
use stepwise_core::{
    ContextSummary, Event, EventType, Execution, ExecutionStatus, Memory, Message, Restored, Role,
    Session, SessionDocument, SessionStatus, Snapshot, Step, StepBody, StepError, StepKind,
    TokenUsage, ToolCall,
};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi, ToSchema};

use crate::error::{ErrorBody, ErrorDetail};
use crate::sessions::{
    AgentBody, CreateSessionBody, MessageAccepted, MessageBody, NewSessionMessageBody,
    UpdateSessionBody,
};

macro_rules! list_schema {
    ($name:ident, $item:ty) => {
        #[derive(ToSchema)]
        pub struct $name {
            pub items: Vec<$item>,
            pub next_cursor: Option<String>,
        }
    };
}

list_schema!(SessionList, Session);
list_schema!(MessageList, Message);
list_schema!(ExecutionList, Execution);
list_schema!(StepList, Step);
list_schema!(SnapshotList, Snapshot);

#[utoipa::path(post, path = "/v1/sessions", tag = "sessions", request_body = CreateSessionBody,
    responses((status = 201, body = Session), (status = 400, body = ErrorBody), (status = 409, body = ErrorBody)))]
fn create_session() {}

#[utoipa::path(get, path = "/v1/sessions", tag = "sessions",
    params(("status" = Option<String>, Query, description = "Comma-separated statuses; default all but deleted"),
           ("name" = Option<String>, Query, description = "The session with this name (unique per tenant): at most one item"),
           ("related_type" = Option<String>, Query), ("related_id" = Option<String>, Query),
           ("limit" = Option<u32>, Query, description = "1-500, default 50"), ("cursor" = Option<String>, Query)),
    responses((status = 200, body = SessionList), (status = 400, body = ErrorBody)))]
fn list_sessions() {}

#[utoipa::path(get, path = "/v1/sessions/{id}", tag = "sessions", params(("id" = String, Path)),
    responses((status = 200, body = Session), (status = 404, body = ErrorBody)))]
fn get_session() {}

#[utoipa::path(patch, path = "/v1/sessions/{id}", tag = "sessions", params(("id" = String, Path)), request_body = UpdateSessionBody,
    responses((status = 200, body = Session), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
fn update_session() {}

#[utoipa::path(delete, path = "/v1/sessions/{id}", tag = "sessions", params(("id" = String, Path)),
    responses((status = 204, description = "Soft-deleted"), (status = 404, body = ErrorBody)))]
fn delete_session() {}

#[utoipa::path(get, path = "/v1/sessions/{id}/messages", tag = "messages",
    params(("id" = String, Path), ("after" = Option<String>, Query, description = "A message id"),
           ("roles" = Option<String>, Query, description = "e.g. user,assistant"),
           ("limit" = Option<u32>, Query), ("cursor" = Option<String>, Query)),
    responses((status = 200, body = MessageList), (status = 404, body = ErrorBody)))]
fn list_messages() {}

#[utoipa::path(post, path = "/v1/sessions/{id}/messages", tag = "messages", params(("id" = String, Path)), request_body = MessageBody,
    responses((status = 202, body = MessageAccepted), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
fn post_message() {}

#[utoipa::path(post, path = "/v1/messages", tag = "messages", request_body = NewSessionMessageBody,
    responses((status = 202, body = MessageAccepted), (status = 400, body = ErrorBody)))]
fn post_message_new_session() {}

#[utoipa::path(get, path = "/v1/sessions/{id}/memory", tag = "sessions", params(("id" = String, Path)),
    responses((status = 200, body = Memory), (status = 404, body = ErrorBody)))]
fn memory() {}

#[utoipa::path(get, path = "/v1/sessions/{id}/events", tag = "events",
    params(("id" = String, Path), ("after" = Option<i64>, Query, description = "Replay events after this id"),
           ("Last-Event-ID" = Option<i64>, Header, description = "Replay events after this id")),
    responses((status = 200, content_type = "text/event-stream", body = Event,
               description = "Server-Sent Events: `id:` the event id, `event:` the event type, `data:` the Event JSON"),
              (status = 404, body = ErrorBody)))]
fn events() {}

#[utoipa::path(get, path = "/v1/sessions/{id}/export", tag = "sessions", params(("id" = String, Path)),
    responses((status = 200, body = SessionDocument), (status = 404, body = ErrorBody)))]
fn export_session() {}

#[utoipa::path(post, path = "/v1/sessions/import", tag = "sessions", request_body = SessionDocument,
    responses((status = 201, body = Session), (status = 400, body = ErrorBody)))]
fn import_session() {}

#[utoipa::path(get, path = "/healthz", tag = "operations", responses((status = 200, description = "The process is up")))]
fn healthz() {}

#[utoipa::path(get, path = "/readyz", tag = "operations",
    responses((status = 200, description = "The database is reachable"), (status = 503, body = ErrorBody)))]
fn readyz() {}

#[utoipa::path(get, path = "/metrics", tag = "operations", responses((status = 200, content_type = "text/plain", body = String)))]
fn metrics() {}

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

#[derive(OpenApi)]
#[openapi(
    info(title = "Stepwise", description = "Durable sessions for AI agents"),
    paths(
        create_session, list_sessions, get_session, update_session, delete_session, list_messages, post_message,
        post_message_new_session, memory, crate::executions::list::doc, crate::executions::open::doc, events,
        export_session, import_session, crate::executions::get::doc, crate::executions::cancel::doc,
        crate::executions::list_steps::doc, crate::executions::append_step::doc, crate::executions::list_snapshots::doc,
        crate::executions::save_snapshot::doc, crate::executions::complete::doc, crate::executions::fail::doc,
        crate::executions::pause::doc, crate::executions::get_snapshot::doc, healthz, readyz, metrics,
        crate::items::list::doc, crate::items::append::doc, crate::items::pop::doc, crate::items::clear::doc,
        crate::checkpoints::put::doc, crate::checkpoints::get_latest::doc, crate::checkpoints::get::doc,
        crate::checkpoints::list::doc, crate::checkpoints::list_all::doc, crate::checkpoints::put_writes::doc,
        crate::checkpoints::get_thread::doc, crate::checkpoints::delete_thread::doc, crate::checkpoints::copy::doc,
        crate::checkpoints::delete_for_runs::doc, crate::checkpoints::prune::doc
    ),
    components(schemas(
        Session, SessionStatus, Message, Role, Execution, ExecutionStatus, Step, StepKind, StepBody, StepError, ToolCall,
        TokenUsage, Snapshot, Event, EventType, Memory, Restored, ContextSummary, SessionDocument, ErrorBody, ErrorDetail,
        CreateSessionBody, UpdateSessionBody, MessageBody, NewSessionMessageBody, AgentBody, MessageAccepted,
        crate::executions::open::OpenExecutionBody, crate::executions::append_step::StepInput,
        crate::executions::save_snapshot::SnapshotInput, crate::executions::complete::CompleteBody,
        crate::executions::fail::FailBody, crate::executions::pause::PauseBody,
        SessionList, MessageList, ExecutionList, StepList, SnapshotList,
        crate::items::list::ItemsPage, crate::items::append::AppendItemsBody, crate::items::append::ItemsAdded,
        crate::items::pop::PopItemBody, crate::items::pop::PoppedItem, crate::items::clear::ItemsCleared,
        crate::checkpoints::TypedJson, crate::checkpoints::PendingWrite, crate::checkpoints::CheckpointTuple,
        crate::checkpoints::CheckpointPage, crate::checkpoints::put::PutCheckpointBody, crate::checkpoints::put::CheckpointStored,
        crate::checkpoints::mirror::MirrorMessage, crate::checkpoints::put_writes::PutWritesBody,
        crate::checkpoints::get_thread::Thread, crate::checkpoints::copy::CopyThreadBody, crate::checkpoints::copy::ThreadCopied,
        crate::checkpoints::delete_for_runs::DeleteForRunsBody, crate::checkpoints::delete_for_runs::CheckpointsDeleted,
        crate::checkpoints::prune::PruneBody
    )),
    modifiers(&BearerAuth),
    security(("bearer" = []))
)]
pub struct ApiDoc;

/// The OpenAPI document as JSON (built once): utoipa's document of the types above, made
/// exact by [`harden`] so a schema-driven client or fuzzer (Schemathesis) sees the rules the
/// server enforces.
pub fn openapi_json() -> String {
    static JSON: OnceLock<String> = OnceLock::new();
    JSON.get_or_init(|| {
        let mut doc = serde_json::to_value(ApiDoc::openapi()).unwrap_or(Value::Null);
        harden(&mut doc);
        crate::items::harden(&mut doc);
        crate::checkpoints::harden(&mut doc);
        serde_json::to_string(&doc).unwrap_or_else(|_| "{}".to_string())
    })
    .clone()
}

/// Text fields: no control characters other than tab, newline and carriage return.
const NO_CONTROL: &str = r"^[^\u0000-\u0008\u000B\u000C\u000E-\u001F\u007F-\u009F]*$";
/// Text that is not only white space (Rust's `char::is_whitespace`).
const NOT_BLANK: &str =
    r"[^\t\n\u000B\u000C\r \u0085\u00A0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]";
/// Session names (seed 004): `[A-Za-z0-9._-]`, 1–64, no `..`, not a reserved name.
const NAME: &str = concat!(
    r"^(?![Ii][Nn][Dd][Ee][Xx]$)(?![Mm][Ee][Tt][Aa][Dd][Aa][Tt][Aa]$)(?!\.$)",
    r"(?!([Cc][Oo][Nn]|[Pp][Rr][Nn]|[Aa][Uu][Xx]|[Nn][Uu][Ll]|([Cc][Oo][Mm]|[Ll][Pp][Tt])[1-9])(\.|$))",
    r"(?!.*\.\.)[A-Za-z0-9._-]{1,64}$"
);
/// The cursors this server issues: hex of `<microseconds>:<uuid without dashes>`.
const CURSOR: &str = r"^(3[0-9]){1,18}3[aA](3[0-9]|6[1-6]|4[1-6]){32}$";

fn error_response(description: &str) -> Value {
    json!({
        "description": description,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}
    })
}

fn text(max: usize) -> Value {
    json!({"type": "string", "maxLength": max, "pattern": NO_CONTROL})
}

fn nullable(mut schema: Value) -> Value {
    if let Some(Value::String(t)) = schema.get("type").cloned() {
        schema["type"] = json!([t, "null"]);
        if let Some(values) = schema.get_mut("enum").and_then(Value::as_array_mut) {
            values.push(Value::Null);
        }
        schema
    } else {
        json!({"oneOf": [{"type": "null"}, schema]})
    }
}

const UUID: &str = "^[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}$";

fn uuid() -> Value {
    json!({"type": "string", "format": "uuid", "pattern": UUID})
}

fn object_or_null() -> Value {
    json!({"type": ["object", "null"]})
}

fn content_text(max: usize) -> Value {
    json!({"type": "string", "minLength": 1, "maxLength": max, "pattern": NOT_BLANK})
}

fn url() -> Value {
    json!({"type": "string", "maxLength": crate::limits::MAX_URL_CHARS, "pattern": crate::limits::URL_PATTERN})
}

fn set_props(doc: &mut Value, schema: &str, props: &[(&str, Value)]) {
    let Some(properties) = doc
        .pointer_mut(&format!("/components/schemas/{schema}/properties"))
        .and_then(Value::as_object_mut)
    else {
        return;
    };
    for (name, value) in props {
        properties.insert((*name).to_string(), value.clone());
    }
}

/// Makes the generated document say what the server enforces: auth only on `/v1`, every
/// error status an operation can answer, uuid ids, list bounds, text limits and patterns.
fn harden(doc: &mut Value) {
    use crate::sessions::{MAX_CONTENT_CHARS, MAX_REF_CHARS, MAX_TITLE_CHARS};
    let session_status_settable =
        json!({"type": "string", "enum": ["active", "completed", "archived", "closed"]});
    let agent_types = json!({"type": "string", "enum": ["demo", "tool-calling"],
        "description": "`demo`, `tool-calling` when a model server is configured, or an agent type the embedding application registered"});
    let session_body = [
        ("title", nullable(text(MAX_TITLE_CHARS))),
        (
            "name",
            nullable(json!({"type": "string", "minLength": 1, "maxLength": 64, "pattern": NAME})),
        ),
        ("related_type", nullable(text(MAX_REF_CHARS))),
        ("related_id", nullable(text(MAX_REF_CHARS))),
        ("initial_context_url", nullable(url())),
        ("metadata", object_or_null()),
    ];
    set_props(doc, "CreateSessionBody", &session_body);
    set_props(
        doc,
        "UpdateSessionBody",
        &[
            ("title", nullable(text(MAX_TITLE_CHARS))),
            (
                "name",
                nullable(
                    json!({"type": "string", "minLength": 1, "maxLength": 64, "pattern": NAME}),
                ),
            ),
            ("status", nullable(session_status_settable)),
            ("metadata", object_or_null()),
        ],
    );
    let message_body = [
        ("content", content_text(MAX_CONTENT_CHARS)),
        ("related_type", nullable(text(MAX_REF_CHARS))),
        ("related_id", nullable(text(MAX_REF_CHARS))),
        ("context_url", nullable(url())),
        ("metadata", object_or_null()),
    ];
    set_props(doc, "MessageBody", &message_body);
    set_props(doc, "NewSessionMessageBody", &message_body);
    set_props(
        doc,
        "AgentBody",
        &[("type", agent_types), ("config", object_or_null())],
    );
    set_props(
        doc,
        "StepBody",
        &[(
            "tool_calls",
            json!({"type": "array", "items": {"$ref": "#/components/schemas/ToolCall"},
                   "maxItems": crate::executions::MAX_TOOL_CALLS_PER_STEP, "default": []}),
        )],
    );

    // Export writes the current format; import also reads seed 004's files (format 0).
    if let Some(version) =
        doc.pointer_mut("/components/schemas/SessionDocument/properties/format_version")
    {
        *version = json!({"type": "integer", "enum": [stepwise_core::document::FORMAT_VERSION]});
    }
    if let Some(schemas) = doc
        .pointer_mut("/components/schemas")
        .and_then(Value::as_object_mut)
    {
        let legacy_text = |key: &str| json!({"required": [key], "properties": {key: {"type": ["string", "array"]}}});
        schemas.insert(
            "LegacySessionFile".into(),
            json!({
                "type": "object",
                "description": "A session file of seed 004's terminal agent (format_version 0 or absent); imported as a new session with its messages",
                "properties": {
                    "format_version": {"enum": [0, null]},
                    "name": nullable(json!({"type": "string", "minLength": 1, "maxLength": 64, "pattern": NAME})),
                    "description": nullable(text(MAX_TITLE_CHARS)),
                    "created_at": {"type": ["string", "null"]},
                    "updated_at": {"type": ["string", "null"]},
                    "thread": {
                        "type": ["object", "null"],
                        "properties": {
                            "messages": {"type": ["array", "null"], "items": {
                                "type": "object",
                                "anyOf": [legacy_text("content"), legacy_text("text"), legacy_text("contents")]
                            }}
                        }
                    }
                }
            }),
        );
        schemas.insert(
            "SseFrame".into(),
            json!({
                "type": "object",
                "description": "One Server-Sent Event: `id` the event id (none on `message.delta`), `event` the event type, `data` an Event as JSON",
                "required": ["data"],
                "properties": {
                    "id": {"type": "string", "pattern": "^[0-9]+$"},
                    "event": {"$ref": "#/components/schemas/EventType"},
                    "data": {"type": "string", "contentMediaType": "application/json",
                             "contentSchema": {"$ref": "#/components/schemas/Event"}}
                }
            }),
        );
    }
    if let Some(body) = doc.pointer_mut(
        "/paths/~1v1~1sessions~1import/post/requestBody/content/application~1json/schema",
    ) {
        *body = json!({"oneOf": [
            {"$ref": "#/components/schemas/SessionDocument"},
            {"$ref": "#/components/schemas/LegacySessionFile"}
        ]});
    }
    if let Some(events) = doc.pointer_mut(
        "/paths/~1v1~1sessions~1{id}~1events/get/responses/200/content/text~1event-stream/schema",
    ) {
        *events = json!({"$ref": "#/components/schemas/SseFrame"});
    }

    let error = |d: &str| error_response(d);
    let Some(paths) = doc.get_mut("paths").and_then(Value::as_object_mut) else {
        return;
    };
    paths.insert(
        "/openapi.json".into(),
        json!({"get": {"tags": ["operations"], "operationId": "openapi", "security": [],
            "responses": {"200": {"description": "This document",
                "content": {"application/json": {"schema": {"type": "object"}}}}}}}),
    );
    for (path, item) in paths.iter_mut() {
        let Some(item) = item.as_object_mut() else {
            continue;
        };
        for (method, operation) in item.iter_mut() {
            if !matches!(method.as_str(), "get" | "post" | "patch" | "put" | "delete") {
                continue;
            }
            let v1 = path.starts_with("/v1/");
            if !v1 {
                operation["security"] = json!([]);
                continue;
            }
            harden_parameters(path, operation);
            let has_body = operation.get("requestBody").is_some();
            let responses = operation
                .as_object_mut()
                .and_then(|o| o.get_mut("responses"))
                .and_then(Value::as_object_mut);
            let Some(responses) = responses else { continue };
            let mut add = |code: &str, description: &str| {
                responses
                    .entry(code.to_string())
                    .or_insert_with(|| error(description));
            };
            add(
                "400",
                "The request is not valid (`invalid_request`, `field` names the part)",
            );
            add(
                "401",
                "No API key, or a key that is not valid or was revoked (`unauthorized`)",
            );
            if path.contains("{id}") {
                add(
                    "404",
                    "No such resource in the caller's tenant (`not_found`)",
                );
            }
            if has_body {
                add(
                    "413",
                    "The body is larger than the server accepts (`payload_too_large`)",
                );
                add(
                    "415",
                    "The body is not `application/json` (`unsupported_media_type`)",
                );
            }
            if method != "get" {
                add(
                    "409",
                    "The request conflicts with the resource's state (`conflict`)",
                );
                add(
                    "422",
                    "Not possible in the resource's state (`invalid_state`)",
                );
            }
            responses.insert(
                "429".into(),
                json!({
                    "description": "Over the caller's rate limit, or too many open event streams (`rate_limited`)",
                    "headers": {"Retry-After": {"description": "Whole seconds to wait", "required": true,
                        "schema": {"type": "integer", "minimum": 1}}},
                    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}
                }),
            );
        }
    }
}

/// Path ids are uuids; list bounds and filters as the handlers read them.
fn harden_parameters(path: &str, operation: &mut Value) {
    let Some(parameters) = operation
        .get_mut("parameters")
        .and_then(Value::as_array_mut)
    else {
        return;
    };
    let statuses: Vec<&str> = SessionStatus::ALL.iter().map(|s| s.as_str()).collect();
    let roles: Vec<&str> = Role::ALL.iter().map(|s| s.as_str()).collect();
    for parameter in parameters.iter_mut() {
        let name = parameter["name"].as_str().unwrap_or_default().to_string();
        let location = parameter["in"].as_str().unwrap_or_default().to_string();
        let schema = match (location.as_str(), name.as_str()) {
            ("path", "id") => uuid(),
            ("query", "limit") => {
                json!({"type": "integer", "minimum": 1, "maximum": stepwise_store::MAX_PAGE_LIMIT})
            }
            ("query", "cursor") => json!({"type": "string", "pattern": CURSOR}),
            ("query", "after") if path.ends_with("/events") => {
                json!({"type": "integer", "minimum": 0, "maximum": i64::MAX})
            }
            ("header", "Last-Event-ID") => {
                json!({"type": "integer", "minimum": 0, "maximum": i64::MAX})
            }
            ("query", "after") => uuid(),
            ("query", "status") => {
                parameter["style"] = json!("form");
                parameter["explode"] = json!(false);
                json!({"type": "array", "minItems": 1, "items": {"type": "string", "enum": statuses}})
            }
            ("query", "roles") => {
                parameter["style"] = json!("form");
                parameter["explode"] = json!(false);
                json!({"type": "array", "minItems": 1, "items": {"type": "string", "enum": roles}})
            }
            ("query", "related_type" | "related_id") => text(crate::sessions::MAX_REF_CHARS),
            ("query", "name") => {
                json!({"type": "string", "minLength": 1, "maxLength": 64, "pattern": NAME})
            }
            _ => continue,
        };
        parameter["schema"] = schema;
    }
}
