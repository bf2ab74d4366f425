//! The Stepwise execution engine: a queue of executions (one at a time per session, FIFO),
//! workers that claim them with leases and heartbeats, and the step loop that drives an
//! [`Agent`] one step at a time — saving every step, publishing every event, pausing for
//! the user, running subagents, and turning cancellation, errors and panics into saved,
//! finished executions.
//!
//! ```ignore
//! let mut agents = AgentRegistry::new();
//! agents.register("demo", DemoAgent::from_env());
//! let engine = Engine::new(store, agents, EngineConfig::default());
//! engine.spawn_runners();
//! ```

pub mod agent;
pub mod calc;
pub mod demo;
mod engine;
pub mod tools;

use std::future::Future;
use std::pin::Pin;

pub use agent::{Agent, AgentContext, AgentError, AgentRegistry, Decision, DeltaSink};
pub use demo::{DEMO_AGENT, DemoAgent};
pub use engine::{
    AgentChoice, EXTERNAL_AGENT, Engine, EngineConfig, ExternalSnapshot, ExternalStep, Heartbeat,
    MAX_TOOL_CALLS_PER_STEP, MessageInput, MessageNote, OpenExternal, OpenedExternal, Publisher,
    Submitted, UnknownAgent, WORKER_ONLINE_WITHIN, WorkerClaim, latest_root_execution,
};
pub use tools::{Tool, ToolError, ToolSet, ToolSpec};

/// A boxed, sendable future: what agent and tool methods return (so they can be trait
/// objects in a registry).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;
