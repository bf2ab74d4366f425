//! Stepwise's front-end protocols over sessions: what chat front ends and framework clients
//! speak, each mapped onto the core API's sessions, messages and executions, so that they
//! work for every agent, built-in or run by a worker:
//!
//! - the Vercel AI SDK's UI message stream (`ai_sdk/`, under `/v1/ai-sdk`);
//! - AG-UI (`ag_ui/`, under `/v1/ag-ui`);
//! - LangGraph's server API (`langgraph/`, at `/langgraph`: its store today).
//!
//! A chat turn is the same for every protocol: it is posted (`sessions::post_turn`) or
//! rejoined (`follower::rejoin`), followed through the session's events
//! (`follower::RunFollower`), written in the protocol's frames in one order
//! (`render::TurnFrames` over a `render::Protocol`) and answered as one event stream
//! (`sse::respond`).
//!
//! [`mounts`] is what the binary hands the server (`stepwise_server::Node::start_with`): the
//! protocols' routes, behind the core API's auth and limits, and their OpenAPI operations.

#![cfg_attr(test, allow(clippy::unwrap_used))]

mod ag_ui;
mod ai_sdk;
mod follower;
mod langgraph;
mod render;
mod sessions;
mod sse;
mod steps;

use axum::routing::{get, post};
use stepwise_server::{AppState, Mounts, Node, NodeError, NodeSettings};
use stepwise_store::Store;
use utoipa::OpenApi;

pub use ai_sdk::PROTOCOL_HEADER;

/// The front-end protocols, for [`stepwise_server::Node::start_with`] or
/// [`AppState::with_mounts`].
pub fn mounts<S: Store>() -> Mounts<S> {
    Mounts {
        v1: |router| {
            router
                .route("/ai-sdk/chat", post(ai_sdk::chat::chat::<S>))
                .route(
                    "/ai-sdk/chat/{chat_id}/stream",
                    get(ai_sdk::stream::stream::<S>),
                )
                .route(
                    "/ai-sdk/chat/{chat_id}/cancel",
                    post(ai_sdk::cancel::cancel::<S>),
                )
                .route("/ag-ui", post(ag_ui::run::run::<S>))
                .route("/ag-ui/connect", post(ag_ui::connect::connect::<S>))
        },
        nested: |state: &AppState<S>| vec![("/langgraph", langgraph::router(state))],
        openapi: |doc| doc.merge(ProtocolsDoc::openapi()),
    }
}

/// A node serving the core API with the front-end protocols mounted: what `stepwise serve`
/// runs ([`Node::start`] with [`mounts`]).
pub async fn start_node<S: Store>(settings: NodeSettings, store: S) -> Result<Node<S>, NodeError> {
    Node::start_with(settings, store, mounts()).await
}

/// The whole OpenAPI document as JSON: the core API's with the protocols' operations (what
/// `/openapi.json` answers on a node started with [`mounts`]).
pub fn openapi_json() -> String {
    stepwise_server::openapi_json_with(|doc| doc.merge(ProtocolsDoc::openapi()))
}

/// The protocols' operations and the schemas of their bodies. LangGraph's API is its own
/// contract and is not listed (docs/api.md names it).
#[derive(OpenApi)]
#[openapi(
    paths(
        ai_sdk::chat::doc,
        ai_sdk::stream::doc,
        ai_sdk::cancel::doc,
        ag_ui::run::doc,
        ag_ui::connect::doc,
    ),
    components(schemas(
        ai_sdk::chat::ChatBody,
        ai_sdk::chat::UiMessage,
        ai_sdk::chat::UiPart,
        ag_ui::RunAgentInput,
        ag_ui::AgUiMessage,
        ag_ui::ResumeEntry,
        ag_ui::ResumeStatus,
    ))
)]
struct ProtocolsDoc;
