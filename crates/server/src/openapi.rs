//! The OpenAPI 3.1 document served at `/openapi.json`, generated with utoipa from the
//! API's own types (the model of stepwise-core, the request bodies of the handlers). The
//! handlers are generic over the store, so each path is declared on a small stub here.
#![allow(dead_code)]

use std::sync::OnceLock;

use stepwise_core::{
    ContextSummary, Event, EventType, Execution, ExecutionStatus, Memory, Message, Restored, Role,
    Session, SessionDocument, SessionStatus, Snapshot, Step, StepBody, StepError, StepKind,
    TokenUsage, ToolCall,
};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi, ToSchema};

use crate::error::{ErrorBody, ErrorDetail};
use crate::executions::{
    CompleteBody, FailBody, OpenExecutionBody, PauseBody, SnapshotInput, StepInput,
};
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

#[utoipa::path(get, path = "/v1/sessions/{id}/executions", tag = "executions",
    params(("id" = String, Path), ("limit" = Option<u32>, Query), ("cursor" = Option<String>, Query)),
    responses((status = 200, body = ExecutionList), (status = 404, body = ErrorBody)))]
fn list_executions() {}

#[utoipa::path(post, path = "/v1/sessions/{id}/executions", tag = "external agents", params(("id" = String, Path)), request_body = OpenExecutionBody,
    responses((status = 201, body = Execution), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
fn open_execution() {}

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

#[utoipa::path(get, path = "/v1/executions/{id}", tag = "executions", params(("id" = String, Path)),
    responses((status = 200, body = Execution), (status = 404, body = ErrorBody)))]
fn get_execution() {}

#[utoipa::path(post, path = "/v1/executions/{id}/cancel", tag = "executions", params(("id" = String, Path)),
    responses((status = 202, body = Execution), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
fn cancel_execution() {}

#[utoipa::path(get, path = "/v1/executions/{id}/steps", tag = "executions",
    params(("id" = String, Path), ("limit" = Option<u32>, Query), ("cursor" = Option<String>, Query)),
    responses((status = 200, body = StepList), (status = 404, body = ErrorBody)))]
fn list_steps() {}

#[utoipa::path(post, path = "/v1/executions/{id}/steps", tag = "external agents", params(("id" = String, Path)), request_body = StepInput,
    responses((status = 201, body = Step), (status = 200, body = Step, description = "The same step again"),
              (status = 409, body = ErrorBody), (status = 422, body = ErrorBody)))]
fn append_step() {}

#[utoipa::path(get, path = "/v1/executions/{id}/snapshots", tag = "executions",
    params(("id" = String, Path), ("limit" = Option<u32>, Query), ("cursor" = Option<String>, Query)),
    responses((status = 200, body = SnapshotList), (status = 404, body = ErrorBody)))]
fn list_snapshots() {}

#[utoipa::path(post, path = "/v1/executions/{id}/snapshots", tag = "external agents", params(("id" = String, Path)), request_body = SnapshotInput,
    responses((status = 201, body = Snapshot), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
fn save_snapshot() {}

#[utoipa::path(post, path = "/v1/executions/{id}/complete", tag = "external agents", params(("id" = String, Path)), request_body = CompleteBody,
    responses((status = 200, body = Execution), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
fn complete_execution() {}

#[utoipa::path(post, path = "/v1/executions/{id}/fail", tag = "external agents", params(("id" = String, Path)), request_body = FailBody,
    responses((status = 200, body = Execution), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
fn fail_execution() {}

#[utoipa::path(post, path = "/v1/executions/{id}/pause", tag = "external agents", params(("id" = String, Path)), request_body = PauseBody,
    responses((status = 200, body = Execution), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
fn pause_execution() {}

#[utoipa::path(get, path = "/v1/snapshots/{id}", tag = "executions", params(("id" = String, Path)),
    responses((status = 200, body = Snapshot), (status = 404, body = ErrorBody)))]
fn get_snapshot() {}

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
        post_message_new_session, memory, list_executions, open_execution, events, export_session, import_session,
        get_execution, cancel_execution, list_steps, append_step, list_snapshots, save_snapshot, complete_execution,
        fail_execution, pause_execution, get_snapshot, healthz, readyz, metrics
    ),
    components(schemas(
        Session, SessionStatus, Message, Role, Execution, ExecutionStatus, Step, StepKind, StepBody, StepError, ToolCall,
        TokenUsage, Snapshot, Event, EventType, Memory, Restored, ContextSummary, SessionDocument, ErrorBody, ErrorDetail,
        CreateSessionBody, UpdateSessionBody, MessageBody, NewSessionMessageBody, AgentBody, MessageAccepted,
        OpenExecutionBody, StepInput, SnapshotInput, CompleteBody, FailBody, PauseBody,
        SessionList, MessageList, ExecutionList, StepList, SnapshotList
    )),
    modifiers(&BearerAuth),
    security(("bearer" = []))
)]
pub struct ApiDoc;

/// The OpenAPI document as JSON (built once).
pub fn openapi_json() -> String {
    static JSON: OnceLock<String> = OnceLock::new();
    JSON.get_or_init(|| {
        ApiDoc::openapi()
            .to_json()
            .unwrap_or_else(|_| "{}".to_string())
    })
    .clone()
}
