//! The `tool-calling` agent: one model turn per step. The model sees the session's earlier
//! tasks and this execution's saved steps, and the tools with their JSON schemas; a turn
//! with tool calls is an action step (the engine runs the tools and saves the results), a
//! turn with plain text is the final answer. Every decision is made from saved steps only,
//! so a run resumed after a crash never asks the model again for a recorded turn.

use std::sync::Arc;

use serde_json::Value;
use stepwise_core::{Id, StepKind, TokenUsage, ToolCall};
use stepwise_engine::tools::{ToolSpec, USER_INPUT};
use stepwise_engine::{Agent, AgentContext, AgentError, BoxFuture, Decision};
use stepwise_store::{Store, Tenant};

use crate::client::{ChatModel, ChatOutcome, StreamEvent};
use crate::config::AgentSettings;
use crate::context::{InputParts, PriorTask, build_input, estimate_text};
use crate::wire::{ChatRequest, FunctionDefinition, StreamOptions, ToolDefinition};

pub const TOOL_CALLING_AGENT: &str = "tool-calling";

/// Where the agent finds the session's earlier tasks (the inputs of its executions).
pub trait SessionHistory: Send + Sync + 'static {
    /// The session's top-level executions created before `current`, oldest first.
    fn prior_tasks<'a>(
        &'a self,
        tenant: &'a Tenant,
        session_id: Id,
        current: Id,
    ) -> BoxFuture<'a, Result<Vec<PriorTask>, String>>;
}

/// [`SessionHistory`] read from a store.
pub struct StoreHistory<S>(pub S);

impl<S: Store> SessionHistory for StoreHistory<S> {
    fn prior_tasks<'a>(
        &'a self,
        tenant: &'a Tenant,
        session_id: Id,
        current: Id,
    ) -> BoxFuture<'a, Result<Vec<PriorTask>, String>> {
        Box::pin(async move {
            let executions = self
                .0
                .list_executions(tenant, session_id)
                .await
                .map_err(|e| e.to_string())?;
            let mut tasks = Vec::new();
            for execution in executions {
                if execution.id == current {
                    break;
                }
                if execution.parent_execution_id.is_some() {
                    continue;
                }
                tasks.push(PriorTask {
                    execution_id: execution.id,
                    task: input_text(&execution.input),
                });
            }
            Ok(tasks)
        })
    }
}

fn input_text(input: &Value) -> String {
    match input {
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

/// The `tool-calling` agent.
pub struct ToolCallingAgent {
    model: Arc<dyn ChatModel>,
    settings: AgentSettings,
    history: Option<Arc<dyn SessionHistory>>,
}

impl ToolCallingAgent {
    pub fn new(model: Arc<dyn ChatModel>, settings: AgentSettings) -> Self {
        ToolCallingAgent {
            model,
            settings,
            history: None,
        }
    }

    /// Lets the model see the session's earlier tasks (not only their steps).
    pub fn with_history(mut self, history: Arc<dyn SessionHistory>) -> Self {
        self.history = Some(history);
        self
    }

    pub fn settings(&self) -> &AgentSettings {
        &self.settings
    }

    async fn decide(&self, ctx: &AgentContext) -> Result<Decision, AgentError> {
        let settings = self
            .settings
            .with_overrides(&ctx.execution.agent_config)
            .map_err(|e| AgentError::new("invalid_config", e.0))?;
        let turns = ctx
            .steps
            .iter()
            .filter(|s| s.kind == StepKind::Action && !s.tool_calls.is_empty())
            .count() as u32;
        if turns >= settings.max_steps {
            return Ok(Decision::Fail {
                error_message: format!(
                    "the agent took {} steps (max_steps) without reaching a final answer",
                    settings.max_steps
                ),
            });
        }
        let is_child = ctx.execution.parent_execution_id.is_some();
        let planning = match settings.planning_interval {
            Some(n) => turns.is_multiple_of(n) && !ctx.steps.last().is_some_and(is_plan),
            None => false,
        };

        let memory = if is_child { None } else { ctx.memory.as_ref() };
        let prior_tasks = match (&self.history, memory, ctx.execution.session_id) {
            (Some(history), Some(_), Some(session_id)) => {
                match history
                    .prior_tasks(&ctx.tenant, session_id, ctx.execution.id)
                    .await
                {
                    Ok(tasks) => Some(tasks),
                    Err(e) => {
                        tracing::warn!(error = %e, "could not read the session's earlier tasks; using their steps only");
                        None
                    }
                }
            }
            _ => None,
        };
        let tools: Vec<ToolDefinition> = if planning {
            Vec::new()
        } else {
            ctx.tools
                .specs()
                .into_iter()
                // A subagent cannot pause for the user.
                .filter(|spec| !(is_child && spec.name == USER_INPUT))
                .map(tool_definition)
                .collect()
        };
        let task = ctx.input_text();
        let built = build_input(&InputParts {
            settings: &settings,
            memory,
            prior_tasks: prior_tasks.as_deref(),
            execution_id: ctx.execution.id,
            task: &task,
            steps: &ctx.steps,
            tools: &tools,
            planning,
            context: ctx.execution.input.get("context"),
        });
        if built.dropped_steps > 0 || built.dropped_prior_tasks > 0 {
            tracing::info!(
                execution = %ctx.execution.id,
                dropped_steps = built.dropped_steps,
                dropped_prior_tasks = built.dropped_prior_tasks,
                "context cut to fit the model's window"
            );
        }
        let request = ChatRequest {
            model: settings.model.clone(),
            messages: built.messages,
            tools,
            tool_choice: None,
            parallel_tool_calls: None,
            temperature: settings.temperature,
            max_tokens: settings.max_tokens,
            stream: settings.stream,
            stream_options: settings.stream.then_some(StreamOptions {
                include_usage: true,
            }),
        };

        let deltas = ctx.deltas.clone();
        let mut on_event = move |event: StreamEvent<'_>| {
            if let StreamEvent::Content(text) = event {
                deltas.send(text);
            }
        };
        let outcome = self
            .model
            .chat(&request, &ctx.cancel, &mut on_event)
            .await
            .map_err(|e| AgentError::new(e.kind(), format!("the model call failed: {e}")))?;
        Ok(decision_from(
            outcome,
            built.estimated_tokens,
            ctx.next_step_number(),
            planning,
        ))
    }
}

/// A plan: an action step without tool calls that did not fail (a turn with text and no
/// tool calls is otherwise a final answer).
fn is_plan(step: &stepwise_core::Step) -> bool {
    step.kind == StepKind::Planning
        || (step.kind == StepKind::Action && step.tool_calls.is_empty() && step.error.is_none())
}

fn tool_definition(spec: ToolSpec) -> ToolDefinition {
    ToolDefinition {
        kind: "function".into(),
        function: FunctionDefinition {
            name: spec.name,
            description: spec.description,
            parameters: spec.parameters,
        },
    }
}

/// Turns the model's answer into the step to record.
pub fn decision_from(
    outcome: ChatOutcome,
    estimated_input: u64,
    step_number: u32,
    planning: bool,
) -> Decision {
    let usage = match &outcome.usage {
        Some(usage) if usage.prompt_tokens.is_some() || usage.completion_tokens.is_some() => {
            TokenUsage::new(
                usage.prompt_tokens.unwrap_or(0),
                usage.completion_tokens.unwrap_or(0),
            )
        }
        // The server did not say: an estimate (4 characters a token).
        _ => {
            let output = estimate_text(&outcome.content)
                + estimate_text(&outcome.reasoning)
                + outcome
                    .tool_calls
                    .iter()
                    .map(|c| estimate_text(&c.name) + estimate_text(&c.arguments))
                    .sum::<u64>();
            TokenUsage::new(estimated_input, output)
        }
    };
    let reasoning = (!outcome.reasoning.trim().is_empty()).then(|| outcome.reasoning.clone());
    if planning {
        let plan = if outcome.content.trim().is_empty() {
            reasoning.unwrap_or_default()
        } else {
            outcome.content
        };
        return Decision::Plan {
            plan: plan.trim().to_string(),
            token_usage: usage,
        };
    }
    if outcome.tool_calls.is_empty() {
        return Decision::Finish {
            answer: outcome.content.trim().to_string(),
            model_output: reasoning,
            token_usage: usage,
        };
    }
    let tool_calls = outcome
        .tool_calls
        .into_iter()
        .enumerate()
        .map(|(k, call)| ToolCall {
            id: call
                .id
                .filter(|id| !id.is_empty())
                .unwrap_or_else(|| format!("call_{step_number}_{}", k + 1)),
            name: call.name,
            arguments: parse_arguments(&call.arguments),
        })
        .collect();
    let thought = if outcome.content.trim().is_empty() {
        reasoning
    } else {
        Some(outcome.content)
    };
    Decision::Act {
        model_output: thought,
        tool_calls,
        token_usage: usage,
    }
}

/// The arguments as JSON; text that is not JSON is kept as a string (the tool then
/// reports the bad arguments and the model sees that).
fn parse_arguments(text: &str) -> Value {
    let text = text.trim();
    if text.is_empty() {
        return Value::Object(Default::default());
    }
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_string()))
}

impl Agent for ToolCallingAgent {
    fn next_step<'a>(
        &'a self,
        ctx: &'a AgentContext,
    ) -> BoxFuture<'a, Result<Decision, AgentError>> {
        Box::pin(self.decide(ctx))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::client::AssembledCall;

    #[test]
    fn answers_become_steps() {
        let outcome = ChatOutcome {
            content: String::new(),
            reasoning: "thinking".into(),
            tool_calls: vec![
                AssembledCall {
                    id: None,
                    name: "calculator".into(),
                    arguments: "{\"expression\":\"2+2\"}".into(),
                },
                AssembledCall {
                    id: Some("x".into()),
                    name: "clock".into(),
                    arguments: String::new(),
                },
            ],
            ..ChatOutcome::default()
        };
        let Decision::Act {
            model_output,
            tool_calls,
            token_usage,
        } = decision_from(outcome, 100, 4, false)
        else {
            panic!("expected an action")
        };
        assert_eq!(model_output.as_deref(), Some("thinking"));
        assert_eq!(tool_calls[0].id, "call_4_1");
        assert_eq!(tool_calls[0].arguments["expression"], "2+2");
        assert_eq!(tool_calls[1].arguments, serde_json::json!({}));
        assert_eq!(token_usage.input, 100);

        let answer = ChatOutcome {
            content: " 42 ".into(),
            ..ChatOutcome::default()
        };
        assert!(matches!(
            decision_from(answer, 1, 1, false),
            Decision::Finish { answer, .. } if answer == "42"
        ));
    }
}
