//! The agent interface. The engine drives an agent one step at a time: it hands the agent
//! a context (the execution, the steps so far, the user's answer after a pause, the
//! tools) and the agent decides the next step. The engine runs the tool calls, saves the
//! step, publishes the events, and handles pausing, subagents, cancellation and failure,
//! so an agent is a pure "what next?" function of its context — which is also what makes
//! an execution resumable from its last saved step after a crash.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;
use stepwise_core::{Execution, Memory, Step, StepKind, TokenUsage, ToolCall};
use stepwise_store::Tenant;
use tokio_util::sync::CancellationToken;

use crate::BoxFuture;
use crate::tools::ToolSet;

/// Sends streamed model tokens to the session's live subscribers (`message.delta`).
#[derive(Clone)]
pub struct DeltaSink(Arc<dyn Fn(&str) + Send + Sync>);

impl DeltaSink {
    pub fn new(send: impl Fn(&str) + Send + Sync + 'static) -> Self {
        DeltaSink(Arc::new(send))
    }

    /// A sink that drops everything (executions with no session).
    pub fn discard() -> Self {
        DeltaSink(Arc::new(|_| {}))
    }

    pub fn send(&self, text: &str) {
        (self.0)(text)
    }
}

/// Everything an agent sees when it decides its next step.
pub struct AgentContext {
    pub tenant: Tenant,
    pub execution: Execution,
    /// The session's agent memory as restored when this run started (only loaded when the
    /// agent asks for it with [`Agent::needs_session_memory`]).
    pub memory: Option<Memory>,
    /// This execution's steps so far, by step number (the saved ones after a restart).
    pub steps: Vec<Step>,
    /// The user's answer, when this run resumes a paused execution. It is also stored as
    /// a `user_input` step in `steps`.
    pub resume_answer: Option<Value>,
    pub tools: Arc<ToolSet>,
    /// Cancelled when the execution is cancelled; a long model call should stop on it
    /// (the engine also drops the step's future).
    pub cancel: CancellationToken,
    pub deltas: DeltaSink,
}

impl AgentContext {
    /// The user's text that started this execution (`input.message`, or `input` itself
    /// when it is a string).
    pub fn input_text(&self) -> String {
        match &self.execution.input {
            Value::String(text) => text.clone(),
            Value::Object(map) => map
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            Value::Null => String::new(),
            other => other.to_string(),
        }
    }

    pub fn next_step_number(&self) -> u32 {
        self.steps.last().map_or(1, |s| s.step_number + 1)
    }

    pub fn steps_of_kind(&self, kind: StepKind) -> impl Iterator<Item = &Step> {
        self.steps.iter().filter(move |s| s.kind == kind)
    }
}

/// What an agent decided to do next.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// An action step: the model's output (thought) and the tools to call, possibly none.
    /// A `user_input` call pauses the execution; a `subagent` call runs a child execution.
    Act {
        model_output: Option<String>,
        tool_calls: Vec<ToolCall>,
        token_usage: TokenUsage,
    },
    /// The final answer: saved as a `final_answer` step and as the assistant's message.
    Finish {
        answer: String,
        model_output: Option<String>,
        token_usage: TokenUsage,
    },
    /// A planning step (smolagents' planning): the model's plan for the steps ahead, saved
    /// as a `planning` step; no tool runs and the execution goes on.
    Plan {
        plan: String,
        token_usage: TokenUsage,
    },
    /// Give up: the execution fails with this reason (no step is added; an agent that
    /// fails because of a tool error has that error in its last step already).
    Fail { error_message: String },
}

impl Decision {
    pub fn act(tool_calls: Vec<ToolCall>) -> Self {
        Decision::Act {
            model_output: None,
            tool_calls,
            token_usage: TokenUsage::default(),
        }
    }

    pub fn finish(answer: impl Into<String>) -> Self {
        Decision::Finish {
            answer: answer.into(),
            model_output: None,
            token_usage: TokenUsage::default(),
        }
    }
}

/// An agent failed to decide (a model call failed, its answer could not be parsed...):
/// recorded as a failed step, and the execution fails with this message.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct AgentError {
    pub kind: String,
    pub message: String,
}

impl AgentError {
    pub fn new(kind: impl Into<String>, message: impl Into<String>) -> Self {
        AgentError {
            kind: kind.into(),
            message: message.into(),
        }
    }
}

/// An agent type. Register implementations in an [`AgentRegistry`] under a name; an
/// execution's `agent_type` picks the agent.
pub trait Agent: Send + Sync + 'static {
    /// Decides the next step. Called once per step; must be resumable, i.e. decide from
    /// the context alone (the steps so far), not from state kept in `self`.
    fn next_step<'a>(
        &'a self,
        ctx: &'a AgentContext,
    ) -> BoxFuture<'a, Result<Decision, AgentError>>;

    /// Whether the engine should restore the session's memory into the context.
    fn needs_session_memory(&self) -> bool {
        true
    }
}

/// Agent types by name.
#[derive(Clone, Default)]
pub struct AgentRegistry {
    agents: HashMap<String, Arc<dyn Agent>>,
}

impl AgentRegistry {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn register(&mut self, agent_type: impl Into<String>, agent: impl Agent) -> &mut Self {
        self.agents.insert(agent_type.into(), Arc::new(agent));
        self
    }

    pub fn register_arc(
        &mut self,
        agent_type: impl Into<String>,
        agent: Arc<dyn Agent>,
    ) -> &mut Self {
        self.agents.insert(agent_type.into(), agent);
        self
    }

    pub fn get(&self, agent_type: &str) -> Option<Arc<dyn Agent>> {
        self.agents.get(agent_type).cloned()
    }

    pub fn contains(&self, agent_type: &str) -> bool {
        self.agents.contains_key(agent_type)
    }

    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.agents.keys().cloned().collect();
        names.sort();
        names
    }
}
