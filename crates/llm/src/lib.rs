//! Stepwise's LLM agent.
//!
//! - [`client`]: an OpenAI-compatible chat-completions client (streaming, tool calls,
//!   timeouts, retries with backoff honouring `Retry-After`, cancellation) over lenient
//!   wire types ([`wire`]) and a small SSE parser ([`sse`]).
//! - [`agent`]: the `tool-calling` agent, an [`stepwise_engine::Agent`] that records one
//!   action step per model turn; its input and context-window policy are in [`context`].
//! - [`mcp`]: tools from MCP servers over stdio.
//! - [`config`]: `[llm]` / `[mcp.servers.NAME]` in `stepwise.toml` and `STEPWISE_LLM_*`.
//! - [`setup`]: what `stepwise serve` calls to serve the agent.

pub mod agent;
pub mod client;
pub mod config;
pub mod context;
pub mod mcp;
pub mod setup;
pub mod sse;
pub mod wire;

pub use agent::{SessionHistory, StoreHistory, TOOL_CALLING_AGENT, ToolCallingAgent};
pub use client::{ChatClient, ChatModel, ChatOutcome, ClientSettings, LlmError, StreamEvent};
pub use config::{AgentSettings, LlmSettings, McpServerConfig};
