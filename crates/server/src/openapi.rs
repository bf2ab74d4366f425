//! The OpenAPI 3.1 document served at `/openapi.json`, generated with utoipa from the
//! API's own types. Each endpoint's file holds its `doc()` (`#[utoipa::path]`) and its types
//! with their constraints as `#[schema]`/`#[param]` attributes; this file lists them, adds
//! the bearer scheme and the answers the `/v1` middleware gives every operation
//! ([`MiddlewareResponses`]). Nothing here looks a schema up by name.

use std::sync::Mutex;

use serde_json::Value;
use stepwise_core::{
    ContextSummary, Event, EventType, Execution, ExecutionStatus, Memory, Message, Restored, Role,
    Session, SessionDocument, SessionStatus, Snapshot, Step, StepBody, StepError, StepKind,
    TokenUsage, ToolCall,
};
use utoipa::openapi::extensions::Extensions;
use utoipa::openapi::path::{Operation, ParameterIn, PathItem};
use utoipa::openapi::response::{Response, ResponseBuilder};
use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{ContentBuilder, Ref, RefOr};
use utoipa::{Modify, OpenApi, ToSchema};

use crate::error::{ErrorBody, ErrorDetail};
use crate::schemas::IdPath;
use crate::shapes::{DataFrame, ExecutionList, MessageList, SessionList, SnapshotList, StepList};

// --- stubs of endpoints whose files do not hold their doc yet ---------------------------

/// One Server-Sent Event: `id` the event id (none on `message.delta`), `event` the event type, `data` an Event as JSON
#[derive(ToSchema)]
#[allow(dead_code)] // the schema of the event stream's frames
pub struct SseFrame {
    #[schema(pattern = "^[0-9]+$")]
    #[serde(default)]
    pub id: String,
    #[serde(default)]
    pub event: EventType,
    #[schema(schema_with = event_json)]
    pub data: String,
}

/// `data` of an event frame: an [`Event`] as JSON text.
fn event_json() -> Schema {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .content_media_type("application/json")
        .extensions(Some(Extensions::from_iter([(
            "contentSchema",
            serde_json::json!({"$ref": format!("#/components/schemas/{}", Event::name())}),
        )])))
        .build()
        .into()
}

/// Where a reconnecting event stream resumes (`?after=` or `Last-Event-ID`), and what its
/// events carry besides (`?include=step`).
pub struct EventsParams;

impl utoipa::IntoParams for EventsParams {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<utoipa::openapi::path::Parameter> {
        use crate::schemas::{event_id, param};
        let description = "Replay events after this id";
        vec![
            param("after", ParameterIn::Query, description, event_id()).build(),
            param(
                "Last-Event-ID",
                ParameterIn::Header,
                description,
                event_id(),
            )
            .build(),
            param(
                "include",
                ParameterIn::Query,
                "`step`: each `step.completed` carries the whole Step in `metadata.step`",
                utoipa::openapi::schema::ObjectBuilder::new()
                    .schema_type(utoipa::openapi::schema::Type::String)
                    .enum_values(Some(["step"]))
                    .build(),
            )
            .build(),
        ]
    }
}

#[utoipa::path(get, path = "/v1/sessions/{id}/events", tag = "events", operation_id = "events",
    params(IdPath, EventsParams),
    responses((status = 200, content_type = "text/event-stream", body = SseFrame,
               description = "Server-Sent Events: `id:` the event id, `event:` the event type, `data:` the Event JSON"),
              (status = 404, body = ErrorBody)))]
#[allow(dead_code)]
fn events() {}

// --- the document -------------------------------------------------------------------------

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

/// The answers every `/v1` operation can give whatever its handler does, because of the
/// layers `crate::app` puts around them: 401 (auth), 429 (rate limit, event stream slots),
/// 400 (extractors), 404 when the path names a resource, 413/415 when it reads a body
/// (body limit, `ApiJson`), 409/422 on writes. An answer the endpoint's own `doc()` declares
/// stays as it is (429 excepted: its `Retry-After` header is always described).
struct MiddlewareResponses;

impl MiddlewareResponses {
    fn error(description: &str) -> RefOr<Response> {
        ResponseBuilder::new()
            .description(description)
            .content(
                "application/json",
                ContentBuilder::new()
                    .schema(Some(Ref::from_schema_name(ErrorBody::name())))
                    .build(),
            )
            .build()
            .into()
    }

    /// 429 with its required `Retry-After` header. utoipa's `Header` has no `required`, so
    /// the header map is written as the response's extension (it serializes in place of
    /// the empty `headers` field).
    fn rate_limited() -> RefOr<Response> {
        let mut response = match Self::error(
            "Over the caller's rate limit, or too many open event streams (`rate_limited`)",
        ) {
            RefOr::T(response) => response,
            RefOr::Ref(_) => return Self::error("rate_limited"),
        };
        response.extensions = Some(Extensions::from_iter([(
            "headers",
            serde_json::json!({"Retry-After": {"description": "Whole seconds to wait", "required": true,
                "schema": {"type": "integer", "minimum": 1}}}),
        )]));
        response.into()
    }

    fn add_to(operation: &mut Operation, is_get: bool) {
        let names_resource = operation
            .parameters
            .iter()
            .flatten()
            .any(|p| p.parameter_in == ParameterIn::Path);
        let has_body = operation.request_body.is_some();
        let responses = &mut operation.responses.responses;
        let mut add = |code: &str, description: &str| {
            responses
                .entry(code.to_string())
                .or_insert_with(|| Self::error(description));
        };
        add(
            "400",
            "The request is not valid (`invalid_request`, `field` names the part)",
        );
        add(
            "401",
            "No API key or token, or one that is not valid, expired or revoked (`unauthorized`)",
        );
        add(
            "403",
            "The credential's role may not do this (`forbidden`, docs/security.md)",
        );
        if names_resource {
            add(
                "404",
                "No such resource in the caller's tenant, or another user's (`not_found`)",
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
        if !is_get {
            add(
                "409",
                "The request conflicts with the resource's state (`conflict`)",
            );
            add(
                "422",
                "Not possible in the resource's state (`invalid_state`)",
            );
        }
        responses.insert("429".into(), Self::rate_limited());
    }
}

impl Modify for MiddlewareResponses {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        for (path, item) in openapi.paths.paths.iter_mut() {
            // Only `/v1` sits behind the auth and rate-limit layers.
            if !path.starts_with("/v1/") {
                continue;
            }
            let PathItem {
                get,
                put,
                post,
                delete,
                patch,
                ..
            } = item;
            if let Some(operation) = get {
                Self::add_to(operation, true);
            }
            for operation in [put, post, delete, patch].into_iter().flatten() {
                Self::add_to(operation, false);
            }
        }
    }
}

#[derive(OpenApi)]
#[openapi(
    info(title = "Stepwise", description = "Durable sessions for AI agents"),
    paths(
        crate::sessions::create::doc, crate::sessions::list::doc, crate::sessions::get::doc,
        crate::sessions::update::doc, crate::sessions::delete::doc, crate::sessions::import::doc,
        crate::sessions::export::doc, crate::sessions::fork::doc, crate::sessions::memory::doc,
        crate::messages::list::doc, crate::messages::post::doc, crate::messages::post_new_session::doc,
        events,
        crate::executions::list::doc, crate::executions::open::doc, crate::executions::get::doc,
        crate::executions::cancel::doc, crate::executions::list_steps::doc, crate::executions::append_step::doc, crate::executions::append_steps::doc,
        crate::executions::list_snapshots::doc, crate::executions::save_snapshot::doc,
        crate::executions::complete::doc, crate::executions::fail::doc, crate::executions::pause::doc,
        crate::executions::post_message::doc,
        crate::executions::get_snapshot::doc,
        crate::ops::healthz::doc, crate::ops::readyz::doc, crate::ops::metrics::doc, crate::ops::openapi::doc,
        crate::items::list::doc, crate::items::append::doc, crate::items::pop::doc, crate::items::clear::doc,
        crate::checkpoints::put::doc, crate::checkpoints::get_latest::doc, crate::checkpoints::get::doc,
        crate::checkpoints::list::doc, crate::checkpoints::list_all::doc, crate::checkpoints::put_writes::doc,
        crate::checkpoints::get_thread::doc, crate::checkpoints::delete_thread::doc, crate::checkpoints::copy::doc,
        crate::checkpoints::delete_for_runs::doc, crate::checkpoints::prune::doc,
        crate::workers::agents::doc, crate::workers::claim::doc, crate::workers::heartbeat::doc,
        crate::workers::deltas::doc, crate::workers::release::doc, crate::workers::stop::doc,
        crate::keys::create::doc, crate::keys::list::doc, crate::keys::delete::doc,
        crate::keys::tokens::doc, crate::ops::limits::doc, crate::ops::retention::get_doc, crate::ops::retention::put_doc
    ),
    components(schemas(
        Session, SessionStatus, Message, Role, Execution, ExecutionStatus, Step, StepKind, StepBody, StepError, ToolCall,
        TokenUsage, Snapshot, Event, EventType, Memory, Restored, ContextSummary, SessionDocument, ErrorBody, ErrorDetail,
        crate::sessions::create::CreateSessionBody, crate::sessions::update::UpdateSessionBody,
        crate::sessions::import::LegacySessionFile, crate::sessions::fork::ForkBody,
        crate::messages::post::MessageBody, crate::messages::post::OnBusy, crate::messages::post_new_session::NewSessionMessageBody,
        crate::messages::AgentBody, crate::messages::MessageAccepted, SseFrame,
        crate::executions::open::OpenExecutionBody, crate::executions::open::OpenedExecution, crate::executions::append_step::StepInput,
        crate::executions::append_steps::StepBatch, crate::executions::append_steps::StepsAppended,
        crate::executions::save_snapshot::SnapshotInput, crate::executions::complete::CompleteBody,
        crate::executions::fail::FailBody, crate::executions::pause::PauseBody,
        crate::executions::post_message::AgentLineBody,
        SessionList, MessageList, ExecutionList, StepList, SnapshotList,
        crate::items::list::ItemsPage, crate::items::append::AppendItemsBody, crate::items::append::ItemsAdded,
        crate::items::pop::PopItemBody, crate::items::pop::PoppedItem, crate::items::clear::ItemsCleared,
        crate::checkpoints::TypedJson, crate::checkpoints::ListItem, crate::checkpoints::PendingWrite, crate::checkpoints::CheckpointTuple,
        crate::checkpoints::CheckpointPage, crate::checkpoints::put::PutCheckpointBody, crate::checkpoints::put::CheckpointStored,
        crate::checkpoints::mirror::MirrorMessage, crate::checkpoints::put_writes::PutWritesBody,
        crate::checkpoints::get_thread::Thread, crate::checkpoints::copy::CopyThreadBody, crate::checkpoints::copy::ThreadCopied,
        crate::checkpoints::delete_for_runs::DeleteForRunsBody, crate::checkpoints::delete_for_runs::CheckpointsDeleted,
        crate::checkpoints::prune::PruneBody, crate::checkpoints::schema::FullBlob, crate::checkpoints::schema::AppendBlob,
        crate::checkpoints::schema::ResolvedBlob,
        DataFrame,
        crate::workers::agents::AgentInfo, crate::workers::agents::AgentList,
        crate::workers::claim::AgentAnnouncement, crate::workers::claim::ClaimBody,
        crate::workers::claim::ClaimedExecution, crate::workers::claim::ClaimList,
        crate::workers::heartbeat::HeartbeatBody, crate::workers::heartbeat::HeartbeatAnswer,
        crate::workers::deltas::DeltaBody,
        crate::keys::KeyInfo, crate::keys::list::KeyList, crate::keys::create::CreateKeyBody,
        crate::keys::create::CreatedKey, crate::keys::tokens::MintTokenBody, crate::keys::tokens::MintedToken,
        crate::ops::limits::Limits, crate::ops::retention::Retention, crate::ops::retention::RetentionDays, crate::ops::retention::RetentionBody
    )),
    modifiers(&BearerAuth),
    security(("bearer" = []))
)]
pub struct ApiDoc;

/// The OpenAPI document of the core API as JSON (built once).
pub fn openapi_json() -> String {
    openapi_json_with(|_| {})
}

/// The OpenAPI document as JSON with what `extend` adds (the mounted protocols' operations:
/// `crate::Mounts::openapi`), built once for each `extend`. The answers of the `/v1`
/// middleware are added to every operation, the mounted ones too.
pub fn openapi_json_with(extend: fn(&mut utoipa::openapi::OpenApi)) -> String {
    type Built = Vec<(fn(&mut utoipa::openapi::OpenApi), String)>;
    static BUILT: Mutex<Built> = Mutex::new(Vec::new());
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, json)) = built.iter().find(|(f, _)| std::ptr::fn_addr_eq(*f, extend)) {
        return json.clone();
    }
    let mut openapi = ApiDoc::openapi();
    extend(&mut openapi);
    MiddlewareResponses.modify(&mut openapi);
    let mut doc = serde_json::to_value(openapi).unwrap_or(Value::Null);
    exclude_builtin_agents(&mut doc);
    let json = serde_json::to_string(&doc).unwrap_or_else(|_| "{}".to_string());
    built.push((extend, json.clone()));
    json
}

/// The agent types of the server's own agents, which `POST /v1/sessions/{id}/executions`
/// refuses (400: they run from messages). utoipa has no `not`, so it is added here.
const BUILTIN_AGENT_TYPES: [&str; 2] = ["demo", "tool-calling"];

fn exclude_builtin_agents(doc: &mut Value) {
    if let Some(agent_type) =
        doc.pointer_mut("/components/schemas/OpenExecutionBody/properties/agent_type")
        && let Some(schema) = agent_type.as_object_mut()
    {
        schema.insert(
            "not".into(),
            serde_json::json!({"enum": BUILTIN_AGENT_TYPES}),
        );
    }
}
