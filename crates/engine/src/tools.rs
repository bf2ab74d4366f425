//! Tools the agents call. `calculator` and `clock` run here; `user_input` (pause and ask the
//! user) and `subagent` (run a child execution) are carried out by the engine itself, but
//! their specs are listed with the others so a model sees every tool.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};
use stepwise_core::Timestamp;

use crate::BoxFuture;

pub const CALCULATOR: &str = "calculator";
pub const CLOCK: &str = "clock";
pub const USER_INPUT: &str = "user_input";
pub const SUBAGENT: &str = "subagent";

/// What a model is told about a tool: its name, what it does, and a JSON schema of its
/// arguments.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    pub parameters: Value,
}

/// A tool call that failed; the message is recorded as the step's error.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct ToolError {
    pub message: String,
}

impl ToolError {
    pub fn new(message: impl Into<String>) -> Self {
        ToolError {
            message: message.into(),
        }
    }
}

/// A tool the engine can run for an agent. Implement it to add your own.
pub trait Tool: Send + Sync + 'static {
    fn spec(&self) -> ToolSpec;
    /// Runs the tool; the `String` is the observation given back to the agent.
    fn call<'a>(&'a self, arguments: &'a Value) -> BoxFuture<'a, Result<String, ToolError>>;
}

/// The tools available to agents, by name.
#[derive(Clone)]
pub struct ToolSet {
    tools: BTreeMap<String, Arc<dyn Tool>>,
}

impl Default for ToolSet {
    fn default() -> Self {
        Self::builtin()
    }
}

impl ToolSet {
    /// `calculator` and `clock`.
    pub fn builtin() -> Self {
        let mut set = ToolSet {
            tools: BTreeMap::new(),
        };
        set.register(Calculator);
        set.register(Clock);
        set
    }

    pub fn register(&mut self, tool: impl Tool) {
        self.tools.insert(tool.spec().name, Arc::new(tool));
    }

    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.tools.get(name)
    }

    /// Every tool's spec, including the engine-handled `user_input` and `subagent`.
    pub fn specs(&self) -> Vec<ToolSpec> {
        let mut specs: Vec<ToolSpec> = self.tools.values().map(|t| t.spec()).collect();
        specs.push(user_input_spec());
        specs.push(subagent_spec());
        specs
    }
}

pub fn user_input_spec() -> ToolSpec {
    ToolSpec {
        name: USER_INPUT.into(),
        description: "Ask the user a question and wait for the answer.".into(),
        parameters: json!({
            "type": "object",
            "properties": {"question": {"type": "string", "description": "The question to ask the user"}},
            "required": ["question"]
        }),
    }
}

pub fn subagent_spec() -> ToolSpec {
    ToolSpec {
        name: SUBAGENT.into(),
        description: "Hand a task to a subagent and get its answer.".into(),
        parameters: json!({
            "type": "object",
            "properties": {"task": {"type": "string", "description": "The task for the subagent"}},
            "required": ["task"]
        }),
    }
}

/// Reads a string argument of a tool call.
pub fn string_argument<'a>(arguments: &'a Value, name: &str) -> Result<&'a str, ToolError> {
    arguments
        .get(name)
        .and_then(Value::as_str)
        .ok_or_else(|| ToolError::new(format!("the argument '{name}' (a string) is required")))
}

pub struct Calculator;

impl Tool for Calculator {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: CALCULATOR.into(),
            description: "Evaluate an arithmetic expression (+ - * / % ^, parentheses, decimals)."
                .into(),
            parameters: json!({
                "type": "object",
                "properties": {"expression": {"type": "string", "description": "For example 2+3*4"}},
                "required": ["expression"]
            }),
        }
    }

    fn call<'a>(&'a self, arguments: &'a Value) -> BoxFuture<'a, Result<String, ToolError>> {
        Box::pin(async move {
            let expression = string_argument(arguments, "expression")?;
            crate::calc::calculate(expression).map_err(|e| ToolError::new(e.to_string()))
        })
    }
}

pub struct Clock;

impl Tool for Clock {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: CLOCK.into(),
            description: "The current UTC time (RFC 3339).".into(),
            parameters: json!({"type": "object", "properties": {}}),
        }
    }

    fn call<'a>(&'a self, _arguments: &'a Value) -> BoxFuture<'a, Result<String, ToolError>> {
        Box::pin(async move { Ok(Timestamp::now().to_rfc3339()) })
    }
}
