//! The agents and tools `stepwise serve` and the in-process `stepwise chat` run: the demo
//! agent and the built-in tools, and, with a model server configured (stepwise.toml or
//! `STEPWISE_LLM_*`), the `tool-calling` agent with its MCP tools, which is then the default.

use anyhow::Context;
use stepwise_engine::{AgentRegistry, DEMO_AGENT, DemoAgent, ToolSet};
use stepwise_store::Store;

/// What [`install`] set up.
pub struct Agents {
    pub registry: AgentRegistry,
    pub tools: ToolSet,
    /// The agent type of a message that names none.
    pub default_agent: String,
    /// Owns the MCP server processes: keep it until the node has stopped.
    pub llm: stepwise_llm::setup::Installed,
}

/// The demo agent, the built-in tools and whatever the LLM settings add. `store` is the one
/// the node runs on (the tool-calling agent reads a session's history from it).
pub async fn install<S: Store>(store: &S) -> anyhow::Result<Agents> {
    let mut registry = AgentRegistry::new();
    registry.register(DEMO_AGENT, DemoAgent::from_env());
    let mut tools = ToolSet::builtin();
    let (settings_path, _) = crate::config::config_path();
    let llm_settings = stepwise_llm::LlmSettings::load(&settings_path).context("LLM settings")?;
    let llm = stepwise_llm::setup::install(&llm_settings, store, &mut registry, &mut tools)
        .await
        .context("cannot set up the LLM agent")?;
    let default_agent = llm
        .default_agent
        .clone()
        .unwrap_or_else(|| DEMO_AGENT.to_string());
    Ok(Agents {
        registry,
        tools,
        default_agent,
        llm,
    })
}
