//! MCP tools over stdio, against a small MCP server written for the test
//! (`tests/fixtures/mcp_server.py`).

#![allow(clippy::unwrap_used)]

mod common;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use serde_json::{Value, json};
use stepwise_core::{ExecutionStatus, StepKind};
use stepwise_engine::{AgentRegistry, Engine, EngineConfig, MessageInput, ToolSet};
use stepwise_llm::agent::{TOOL_CALLING_AGENT, ToolCallingAgent};
use stepwise_llm::client::{ChatClient, ClientSettings};
use stepwise_llm::config::{AgentSettings, McpServerConfig};
use stepwise_llm::mcp::{McpClient, McpError, start_servers};
use stepwise_store::prelude::*;
use stepwise_store::{NewSession, Tenant};
use stepwise_store_sqlite::SqliteStore;

fn fixture(timeout_secs: u64) -> McpServerConfig {
    McpServerConfig {
        name: "fixture".into(),
        command: "python3".into(),
        args: vec![
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures/mcp_server.py")
                .display()
                .to_string(),
        ],
        env: Default::default(),
        cwd: None,
        timeout_secs,
    }
}

#[tokio::test]
async fn tools_are_listed_called_and_their_errors_reported() {
    let client = McpClient::start(&fixture(1)).await.unwrap();
    let tools = client.list_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(
        names,
        ["echo", "add", "fail", "slow", "explode", "clock", "exit"]
    );
    assert_eq!(tools[0].input_schema["required"], json!(["text"]));
    assert_eq!(
        tools[4].input_schema["type"], "object",
        "a schema without a type gets one"
    );

    assert_eq!(
        client
            .call_tool("echo", &json!({"text": "hi"}))
            .await
            .unwrap(),
        "hi"
    );
    assert_eq!(
        client
            .call_tool("add", &json!({"a": 2, "b": 3}))
            .await
            .unwrap(),
        "5"
    );
    assert_eq!(
        client.call_tool("fail", &json!({})).await.unwrap_err(),
        McpError::ToolFailed("the disk is full".into())
    );
    let error = client.call_tool("explode", &json!({})).await.unwrap_err();
    assert!(error.to_string().contains("it exploded"), "{error}");
    let error = client.call_tool("slow", &json!({})).await.unwrap_err();
    assert!(matches!(error, McpError::Timeout { .. }), "{error:?}");
    let error = client
        .call_tool("echo", &json!("not an object"))
        .await
        .unwrap_err();
    assert!(error.to_string().contains("JSON object"), "{error}");
    // Still answering after a timeout.
    assert_eq!(
        client
            .call_tool("echo", &json!({"text": "again"}))
            .await
            .unwrap(),
        "again"
    );
}

#[tokio::test]
async fn a_server_that_cannot_start_is_left_out() {
    let mut tools = ToolSet::builtin();
    let broken = McpServerConfig {
        name: "broken".into(),
        command: "/nonexistent/mcp-server".into(),
        ..fixture(5)
    };
    let (clients, errors) = start_servers(&[broken, fixture(5)], &mut tools).await;
    assert_eq!(clients.len(), 1);
    assert!(
        errors[0]
            .to_string()
            .contains("cannot start the MCP server 'broken'")
    );
    assert!(tools.get("echo").is_some());
    assert!(tools.get("clock").is_some(), "the built-in clock stays");
    let prefixed = tools
        .get("fixture__clock")
        .expect("the server's clock, prefixed");
    assert_eq!(prefixed.call(&json!({})).await.unwrap(), "12:00");
    let failing = tools.get("fail").unwrap();
    assert_eq!(
        failing.call(&json!({})).await.unwrap_err().message,
        "the disk is full"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_lists_and_calls_mcp_tools_and_sees_their_errors() {
    let model = FakeModel::start(|request, _| match tool_results(request).len() {
        0 => stream_tool_calls(&[("c1", "echo", json!({"text": "from MCP"}).to_string())]),
        1 => stream_tool_calls(&[("c2", "fail", "{}".into())]),
        _ => stream_answer("MCP said: from MCP"),
    })
    .await;
    let mut tools = ToolSet::builtin();
    let (_clients, errors) = start_servers(&[fixture(5)], &mut tools).await;
    assert!(errors.is_empty());

    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&dir.path().join("s.db")).unwrap();
    let client = ChatClient::new(ClientSettings {
        base_url: model.base_url.clone(),
        ..ClientSettings::default()
    })
    .unwrap();
    let mut agents = AgentRegistry::new();
    agents.register(
        TOOL_CALLING_AGENT,
        ToolCallingAgent::new(
            Arc::new(client),
            AgentSettings {
                model: "m".into(),
                ..AgentSettings::default()
            },
        ),
    );
    let engine = Engine::with_tools(
        store.clone(),
        agents,
        tools,
        EngineConfig {
            default_agent: TOOL_CALLING_AGENT.into(),
            ..EngineConfig::default()
        },
    );
    engine.spawn_runners();
    let tenant = Tenant::new("t").unwrap();
    let session = store
        .create_session(
            &tenant,
            NewSession {
                user_id: "u".into(),
                metadata: Value::Null,
                ..NewSession::default()
            },
        )
        .await
        .unwrap();
    let id = engine
        .submit_message(
            &tenant,
            "u",
            session.id,
            MessageInput {
                content: "use MCP".into(),
                ..MessageInput::default()
            },
        )
        .await
        .unwrap()
        .execution
        .id;
    wait_until(
        "the execution to complete",
        Duration::from_secs(20),
        async || {
            store
                .get_execution(&tenant, id)
                .await
                .unwrap()
                .is_some_and(|e| e.status == ExecutionStatus::Completed)
        },
    )
    .await;

    let requests = model.requests();
    let listed: Vec<&str> = requests[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert!(
        listed.contains(&"echo") && listed.contains(&"fixture__clock"),
        "{listed:?}"
    );
    let echo = requests[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == "echo")
        .unwrap();
    assert_eq!(
        echo["function"]["parameters"]["properties"]["text"]["type"],
        "string"
    );

    let steps = store.list_steps(&tenant, id).await.unwrap().items;
    assert_eq!(steps[0].observations.as_deref(), Some("from MCP"));
    assert_eq!(steps[1].error.as_ref().unwrap().message, "the disk is full");
    assert_eq!(steps[2].kind, StepKind::FinalAnswer);
    assert_eq!(
        tool_results(&requests[2])[1],
        ("c2".to_string(), "Error: the disk is full".to_string())
    );
}
