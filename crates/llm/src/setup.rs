//! Wiring for `stepwise serve`: when a model server is configured, the `tool-calling`
//! agent is registered (and becomes the default agent) and the configured MCP servers'
//! tools join the tool set.

use std::sync::Arc;

use stepwise_engine::{AgentRegistry, ToolSet};
use stepwise_store::Store;

use crate::agent::{StoreHistory, TOOL_CALLING_AGENT, ToolCallingAgent};
use crate::client::{ChatClient, LlmError};
use crate::config::LlmSettings;
use crate::mcp::{McpClient, start_servers};

/// What [`install`] set up. Keep it for as long as the engine runs: it owns the MCP
/// server processes.
pub struct Installed {
    /// The agent type new messages should get by default, when the LLM agent is served.
    pub default_agent: Option<String>,
    pub mcp_clients: Vec<Arc<McpClient>>,
}

/// Registers `tool-calling` when a base URL is configured, with MCP tools added to
/// `tools`. Without a base URL nothing changes (and MCP servers are not started).
pub async fn install<S: Store>(
    settings: &LlmSettings,
    store: &S,
    agents: &mut AgentRegistry,
    tools: &mut ToolSet,
) -> Result<Installed, LlmError> {
    if !settings.is_configured() {
        if !settings.mcp_servers.is_empty() {
            tracing::warn!(
                "MCP servers are configured but no model server is (STEPWISE_LLM_BASE_URL): they are not started"
            );
        }
        return Ok(Installed {
            default_agent: None,
            mcp_clients: Vec::new(),
        });
    }
    let client = ChatClient::new(settings.client.clone())?;
    let (mcp_clients, _errors) = start_servers(&settings.mcp_servers, tools).await;
    let agent = ToolCallingAgent::new(Arc::new(client), settings.agent.clone())
        .with_history(Arc::new(StoreHistory(store.clone())));
    agents.register(TOOL_CALLING_AGENT, agent);
    tracing::info!(
        base_url = %settings.client.base_url,
        model = %settings.agent.model,
        "the tool-calling agent is served"
    );
    Ok(Installed {
        default_agent: Some(TOOL_CALLING_AGENT.to_string()),
        mcp_clients,
    })
}
