//! The model's input, built from saved steps only (so a resumed run asks exactly what an
//! uninterrupted one would have), and the context-window policy.
//!
//! Order: the system prompt; this session's earlier tasks, each with its steps and answer
//! (from the restored memory; subagents' steps are left out); this execution's task; its
//! steps so far (assistant tool calls, each followed by its tool result).
//!
//! Policy when the estimate (4 characters a token, plus a little per message and the tool
//! schemas) exceeds the window less the room kept for the answer: the system prompt and
//! this task are always kept. First the oldest earlier tasks are dropped, and their
//! requests are listed in one line of the system prompt; then this execution's oldest
//! steps are dropped (a tool call always with its results), and the task says how many
//! and which tools they used; the latest step is always kept, its tool results cut to fit
//! if needed. Any single tool result is cut to `max_observation_chars`. Nothing here
//! fails: a request always goes out.

use std::collections::BTreeMap;

use serde_json::Value;
use stepwise_core::summary::cut_chars;
use stepwise_core::{Id, Memory, Restored, Step, StepKind};

use crate::config::AgentSettings;
use crate::wire::{ChatMessage, ToolDefinition, WireFunctionCall, WireToolCall};

pub const DEFAULT_SYSTEM_PROMPT: &str = "You are a helpful assistant that solves the user's task step by step. \
Use the tools when they help, and call several at once when they do not depend on each other. \
When you know the final answer, reply with it directly without calling a tool. \
Ask the user with the user_input tool only when you cannot go on without them.";

pub const PLANNING_PROMPT: &str = "Before going on, write a short plan: the facts known so far, \
what is still missing, and the next steps. Do not call tools now.";

/// A task of this session before the current one: the execution and its input text.
#[derive(Debug, Clone, PartialEq)]
pub struct PriorTask {
    pub execution_id: Id,
    pub task: String,
}

/// The messages to send and what the policy did to fit them.
#[derive(Debug, Clone, PartialEq)]
pub struct BuiltInput {
    pub messages: Vec<ChatMessage>,
    pub estimated_tokens: u64,
    pub dropped_prior_tasks: usize,
    pub dropped_steps: usize,
}

pub struct InputParts<'a> {
    pub settings: &'a AgentSettings,
    pub memory: Option<&'a Memory>,
    /// Earlier top-level tasks of the session, oldest first (`None`: unknown, then the
    /// memory's steps are grouped by execution without their tasks).
    pub prior_tasks: Option<&'a [PriorTask]>,
    pub execution_id: Id,
    pub task: &'a str,
    pub steps: &'a [Step],
    pub tools: &'a [ToolDefinition],
    /// A planning turn: ends with the planning request.
    pub planning: bool,
    /// Where the message came from: its execution's `input.context` (`related_type`,
    /// `related_id`, `context_url`, `metadata`), when it has one.
    pub context: Option<&'a Value>,
}

/// Messages that stay together (an assistant tool call and its results).
#[derive(Debug, Clone)]
struct Group {
    messages: Vec<ChatMessage>,
    tools_used: Vec<String>,
}

pub fn estimate_text(text: &str) -> u64 {
    (text.len() as u64).div_ceil(4)
}

fn estimate_message(message: &ChatMessage) -> u64 {
    let mut n = 4 + message.content.as_deref().map_or(0, estimate_text);
    for call in &message.tool_calls {
        n += 8 + estimate_text(&call.function.name) + estimate_text(&call.function.arguments);
    }
    n
}

fn estimate_groups(groups: &[Group]) -> u64 {
    groups
        .iter()
        .flat_map(|g| &g.messages)
        .map(estimate_message)
        .sum()
}

/// The system prompt's words about the page a message came from: `template` with its
/// placeholders filled (`{context_url}`, `{related_type}`, `{related_id}`, `{metadata}`), or,
/// for an empty template, one line per part the message has. Empty when it has none.
pub fn context_prompt(template: &str, context: &Value) -> String {
    let text = |key: &str| {
        context
            .get(key)
            .and_then(Value::as_str)
            .map(|s| cut_chars(s, 2000))
            .unwrap_or_default()
    };
    let metadata = context
        .get("metadata")
        .filter(|m| m.as_object().is_some_and(|o| !o.is_empty()))
        .map(|m| cut_chars(&m.to_string(), 4000))
        .unwrap_or_default();
    let (url, kind, id) = (
        text("context_url"),
        text("related_type"),
        text("related_id"),
    );
    if !template.is_empty() {
        return template
            .replace("{context_url}", &url)
            .replace("{related_type}", &kind)
            .replace("{related_id}", &id)
            .replace("{metadata}", &metadata);
    }
    let mut lines = Vec::new();
    if !url.is_empty() {
        lines.push(format!("- page: {url}"));
    }
    match (kind.is_empty(), id.is_empty()) {
        (false, false) => lines.push(format!("- about: {kind} {id}")),
        (false, true) => lines.push(format!("- about: {kind}")),
        (true, false) => lines.push(format!("- about: {id}")),
        (true, true) => {}
    }
    if !metadata.is_empty() {
        lines.push(format!("- details: {metadata}"));
    }
    if lines.is_empty() {
        return String::new();
    }
    format!(
        "The user sent this message from a page of the application:\n{}",
        lines.join("\n")
    )
}

pub fn build_input(parts: &InputParts<'_>) -> BuiltInput {
    let settings = parts.settings;
    let max_obs = settings.max_observation_chars;
    let reserve = settings
        .max_tokens
        .unwrap_or((settings.context_tokens / 8).min(4096));
    let budget = settings.context_tokens.saturating_sub(reserve).max(256);
    let tools_cost: u64 = parts
        .tools
        .iter()
        .map(|t| {
            12 + estimate_text(&t.function.name)
                + estimate_text(&t.function.description)
                + estimate_text(&t.function.parameters.to_string())
        })
        .sum();

    let mut system = settings
        .system_prompt
        .clone()
        .unwrap_or_else(|| DEFAULT_SYSTEM_PROMPT.to_string());
    if let (Some(template), Some(context)) = (&settings.context_prompt, parts.context) {
        let said = context_prompt(template, context);
        if !said.is_empty() {
            system.push_str("\n\n");
            system.push_str(&said);
        }
    }
    let mut prior: Vec<(String, Group)> = Vec::new();
    if let Some(memory) = parts.memory {
        if memory.restored == Restored::Summary
            && let Some(summary) = &memory.summary
        {
            system.push_str(
                "\n\nSome of this session's history could not be restored; a summary of it: ",
            );
            system.push_str(&cut_chars(&summary.text, 2000));
        }
        prior = prior_groups(memory, parts.prior_tasks, parts.execution_id, max_obs);
    }
    let mut steps = step_groups(parts.steps, max_obs);

    let fixed = |system: &str, task: &str| {
        estimate_text(system)
            + estimate_text(task)
            + 8
            + tools_cost
            + if parts.planning {
                estimate_text(PLANNING_PROMPT) + 4
            } else {
                0
            }
    };
    let mut total = fixed(&system, parts.task)
        + prior
            .iter()
            .map(|(_, g)| estimate_groups(std::slice::from_ref(g)))
            .sum::<u64>()
        + estimate_groups(&steps);

    let mut dropped_tasks = Vec::new();
    while total > budget && !prior.is_empty() {
        let (task, group) = prior.remove(0);
        total -= estimate_groups(std::slice::from_ref(&group));
        dropped_tasks.push(task);
    }
    let mut dropped_steps = 0;
    let mut dropped_tools: BTreeMap<String, usize> = BTreeMap::new();
    while total > budget && steps.len() > 1 {
        let group = steps.remove(0);
        total -= estimate_groups(std::slice::from_ref(&group));
        dropped_steps += 1;
        for tool in group.tools_used {
            *dropped_tools.entry(tool).or_default() += 1;
        }
    }

    if !dropped_tasks.is_empty() {
        let listed: Vec<String> = dropped_tasks
            .iter()
            .filter(|t| !t.is_empty())
            .map(|t| format!("\"{}\"", cut_chars(t, 120)))
            .collect();
        system.push_str(&format!(
            "\n\nEarlier in this session (left out to fit the context window) the user asked: {}.",
            if listed.is_empty() {
                "(unknown)".to_string()
            } else {
                listed.join("; ")
            }
        ));
    }
    let mut task = parts.task.to_string();
    if dropped_steps > 0 {
        let tools: Vec<String> = dropped_tools
            .iter()
            .map(|(name, n)| {
                if *n > 1 {
                    format!("{name} ×{n}")
                } else {
                    name.clone()
                }
            })
            .collect();
        task.push_str(&format!(
            "\n\n[{dropped_steps} earlier step(s) of this task were left out to fit the context window{}.]",
            if tools.is_empty() { String::new() } else { format!("; they used: {}", tools.join(", ")) }
        ));
    }
    // Still too long with one step left: cut that step's tool results.
    total = fixed(&system, &task)
        + prior
            .iter()
            .map(|(_, g)| estimate_groups(std::slice::from_ref(g)))
            .sum::<u64>()
        + estimate_groups(&steps);
    if total > budget
        && let Some(last) = steps.last_mut()
    {
        let over = (total - budget) as usize * 4;
        for message in last.messages.iter_mut().filter(|m| m.role == "tool") {
            if let Some(content) = &mut message.content {
                let keep = content.chars().count().saturating_sub(over).max(200);
                if keep < content.chars().count() {
                    *content = format!(
                        "{} […cut to fit the context window]",
                        cut_chars(content, keep)
                    );
                }
            }
        }
    }

    let mut messages = vec![ChatMessage::system(system)];
    for (_, group) in prior {
        messages.extend(group.messages);
    }
    messages.push(ChatMessage::user(task));
    for group in steps {
        messages.extend(group.messages);
    }
    if parts.planning {
        messages.push(ChatMessage::user(PLANNING_PROMPT));
    }
    let estimated_tokens = messages.iter().map(estimate_message).sum::<u64>() + tools_cost;
    BuiltInput {
        messages,
        estimated_tokens,
        dropped_prior_tasks: dropped_tasks.len(),
        dropped_steps,
    }
}

/// Earlier tasks of the session with their steps, one group each, oldest first.
fn prior_groups(
    memory: &Memory,
    tasks: Option<&[PriorTask]>,
    current: Id,
    max_obs: usize,
) -> Vec<(String, Group)> {
    let mut by_execution: BTreeMap<Id, Vec<Step>> = BTreeMap::new();
    let mut order: Vec<Id> = Vec::new();
    for step in memory.steps.iter().filter(|s| s.execution_id != current) {
        if !by_execution.contains_key(&step.execution_id) {
            order.push(step.execution_id);
        }
        by_execution
            .entry(step.execution_id)
            .or_default()
            .push(step.clone());
    }
    let listed: Vec<(Id, String)> = match tasks {
        Some(tasks) => tasks
            .iter()
            .filter(|t| t.execution_id != current)
            .map(|t| (t.execution_id, t.task.clone()))
            .collect(),
        None => order.iter().map(|id| (*id, String::new())).collect(),
    };
    let mut groups = Vec::new();
    for (id, task) in listed {
        let mut steps = by_execution.remove(&id).unwrap_or_default();
        steps.sort_by_key(|s| s.step_number);
        let mut messages = Vec::new();
        if !task.is_empty() {
            messages.push(ChatMessage::user(task.clone()));
        }
        let mut tools_used = Vec::new();
        for group in step_groups(&steps, max_obs) {
            tools_used.extend(group.tools_used);
            messages.extend(group.messages);
        }
        if messages.is_empty() {
            continue;
        }
        // An earlier task that never answered (failed, cancelled): say so, so the model
        // does not read its tool calls as still open.
        if !steps.iter().any(|s| s.kind == StepKind::FinalAnswer) && !task.is_empty() {
            messages.push(ChatMessage::assistant(
                "(This earlier task ended without an answer.)",
            ));
        }
        groups.push((
            task,
            Group {
                messages,
                tools_used,
            },
        ));
    }
    groups
}

/// One group per model turn of saved steps.
fn step_groups(steps: &[Step], max_obs: usize) -> Vec<Group> {
    let mut groups = Vec::new();
    let mut i = 0;
    while i < steps.len() {
        let step = &steps[i];
        i += 1;
        match step.kind {
            StepKind::Action if !step.tool_calls.is_empty() => {
                let calls: Vec<WireToolCall> = step
                    .tool_calls
                    .iter()
                    .enumerate()
                    .map(|(k, call)| WireToolCall {
                        id: call_id(step, k),
                        kind: "function".into(),
                        function: WireFunctionCall {
                            name: call.name.clone(),
                            arguments: arguments_text(&call.arguments),
                        },
                    })
                    .collect();
                let mut results = call_results(step);
                // The answer to `user_input` is the next step.
                if let Some(k) = step
                    .tool_calls
                    .iter()
                    .position(|c| c.name == stepwise_engine::tools::USER_INPUT)
                    && let Some(next) = steps.get(i).filter(|s| s.kind == StepKind::UserInput)
                {
                    results[k] = next.observations.clone().unwrap_or_default();
                    i += 1;
                }
                let mut messages = vec![ChatMessage::assistant_calls(
                    step.model_output.clone(),
                    calls.clone(),
                )];
                for (call, result) in calls.iter().zip(results) {
                    messages.push(ChatMessage::tool_result(
                        call.id.clone(),
                        cut_observation(&result, max_obs),
                    ));
                }
                groups.push(Group {
                    messages,
                    tools_used: step.tool_calls.iter().map(|c| c.name.clone()).collect(),
                });
            }
            // A plan or a thought without tools.
            StepKind::Action | StepKind::Planning => {
                if step.error.is_none()
                    && let Some(text) = step.model_output.as_ref().filter(|t| !t.is_empty())
                {
                    groups.push(Group {
                        messages: vec![ChatMessage::assistant(text.clone())],
                        tools_used: Vec::new(),
                    });
                }
            }
            StepKind::UserInput | StepKind::Task => {
                let text = step
                    .observations
                    .clone()
                    .or_else(|| step.output.as_str().map(str::to_string))
                    .unwrap_or_default();
                if !text.is_empty() {
                    groups.push(Group {
                        messages: vec![ChatMessage::user(text)],
                        tools_used: Vec::new(),
                    });
                }
            }
            StepKind::FinalAnswer => {
                let text = match &step.output {
                    Value::String(text) => text.clone(),
                    Value::Null => String::new(),
                    other => other.to_string(),
                };
                groups.push(Group {
                    messages: vec![ChatMessage::assistant(text)],
                    tools_used: Vec::new(),
                });
            }
            StepKind::SystemPrompt => {}
        }
    }
    groups
}

/// The id a saved tool call goes back to the model with.
pub fn call_id(step: &Step, index: usize) -> String {
    match step.tool_calls.get(index) {
        Some(call) if !call.id.is_empty() => call.id.clone(),
        _ => format!("call_{}_{}", step.step_number, index + 1),
    }
}

pub fn arguments_text(arguments: &Value) -> String {
    match arguments {
        Value::String(raw) => raw.clone(),
        Value::Null => "{}".into(),
        other => other.to_string(),
    }
}

fn cut_observation(text: &str, max: usize) -> String {
    if text.chars().count() > max {
        format!("{} […cut: the result was longer]", cut_chars(text, max))
    } else {
        text.to_string()
    }
}

/// Each call's own result, as the engine records it for a step with several calls
/// (`output.tool_results`: `{id, name, observation, error}` in call order).
fn recorded_results(step: &Step) -> Option<Vec<String>> {
    let recorded = step.output.get("tool_results")?.as_array()?;
    if recorded.len() != step.tool_calls.len() {
        return None;
    }
    recorded
        .iter()
        .map(|result| {
            if let Some(text) = result.get("observation").and_then(Value::as_str) {
                return Some(text.to_string());
            }
            let message = result.get("error")?.get("message")?.as_str()?;
            Some(format!("Error: {message}"))
        })
        .collect()
}

/// Each tool call's result. A step without per-call results (an external agent's, or one
/// saved by an older version, which ran the calls in order and stopped at the first error)
/// has them joined by newlines in `observations`: they are split back by line when the
/// line count fits, else the whole text goes with the first call.
pub fn call_results(step: &Step) -> Vec<String> {
    let n = step.tool_calls.len();
    if let Some(results) = recorded_results(step) {
        return results;
    }
    let error = step.error.as_ref().map(|e| format!("Error: {}", e.message));
    let observations = step.observations.as_deref();
    if n == 1 {
        return vec![match (observations, error) {
            (_, Some(error)) => error,
            (Some(text), None) => text.to_string(),
            (None, None) => "(no output)".to_string(),
        }];
    }
    let lines: Vec<&str> = observations
        .map(|o| o.split('\n').collect())
        .unwrap_or_default();
    // How many calls returned before the error (all of them without one).
    let returned = match &error {
        None => n,
        Some(_) if lines.len() < n => lines.len(),
        Some(_) => n - 1,
    };
    let mut results = Vec::with_capacity(n);
    if lines.len() == returned {
        results.extend(lines.iter().map(|l| l.to_string()));
    } else if returned > 0 {
        results.push(observations.unwrap_or_default().to_string());
        results.extend(
            (1..returned).map(|_| "(its result is included with the first call's)".to_string()),
        );
    }
    if let Some(error) = error {
        results.push(error);
    }
    while results.len() < n {
        results.push("Not run: an earlier call of this step failed.".to_string());
    }
    results.truncate(n);
    results
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;
    use stepwise_core::{StepBody, StepError, Timestamp, ToolCall, new_id};

    fn step(number: u32, kind: StepKind, body: StepBody) -> Step {
        Step::from_body(
            new_id(),
            Id::nil(),
            None,
            number,
            kind,
            body,
            Timestamp::now(),
        )
    }

    fn call(id: &str, name: &str, args: Value) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: name.into(),
            arguments: args,
        }
    }

    #[test]
    fn results_split_back_per_call() {
        let body = StepBody {
            tool_calls: vec![
                call("a", "calculator", json!({})),
                call("b", "clock", json!({})),
                call("c", "calculator", json!({})),
            ],
            observations: Some("3\nnoon".into()),
            error: Some(StepError {
                kind: "tool_error".into(),
                message: "division by zero".into(),
            }),
            ..StepBody::default()
        };
        let results = call_results(&step(1, StepKind::Action, body));
        assert_eq!(results, vec!["3", "noon", "Error: division by zero"]);

        let body = StepBody {
            tool_calls: vec![call("a", "x", json!({})), call("b", "y", json!({}))],
            observations: Some("line1\nline2\nline3".into()),
            ..StepBody::default()
        };
        let results = call_results(&step(1, StepKind::Action, body));
        assert_eq!(results[0], "line1\nline2\nline3");
        assert_eq!(results.len(), 2);
    }

    #[test]
    fn the_oldest_earlier_tasks_go_first_and_are_named() {
        let settings = AgentSettings {
            context_tokens: 1200,
            max_tokens: Some(100),
            ..AgentSettings::default()
        };
        let executions: Vec<Id> = (0..5).map(|_| new_id()).collect();
        let memory_steps: Vec<Step> = executions
            .iter()
            .map(|id| {
                let mut answer = step(
                    1,
                    StepKind::FinalAnswer,
                    StepBody {
                        output: Value::String("y".repeat(1200)),
                        ..StepBody::default()
                    },
                );
                answer.execution_id = *id;
                answer
            })
            .collect();
        let memory = Memory {
            restored: Restored::Full,
            steps: memory_steps,
            summary: None,
        };
        let tasks: Vec<PriorTask> = executions
            .iter()
            .enumerate()
            .map(|(n, id)| PriorTask {
                execution_id: *id,
                task: format!("question {n}"),
            })
            .collect();
        let built = build_input(&InputParts {
            settings: &settings,
            memory: Some(&memory),
            prior_tasks: Some(&tasks),
            execution_id: Id::nil(),
            task: "the current task",
            steps: &[],
            tools: &[],
            planning: false,
            context: None,
        });
        assert!(built.dropped_prior_tasks >= 2, "{built:?}");
        let system = built.messages[0].content.as_deref().unwrap_or_default();
        assert!(
            system.contains("\"question 0\"; \"question 1\""),
            "{system}"
        );
        // What is left is the newest earlier tasks, then the current one.
        let users: Vec<&str> = built
            .messages
            .iter()
            .filter(|m| m.role == "user")
            .filter_map(|m| m.content.as_deref())
            .collect();
        assert_eq!(users.last(), Some(&"the current task"));
        assert!(users.contains(&"question 4"));
        assert!(!users.contains(&"question 0"));
    }

    #[test]
    fn the_page_a_message_came_from_goes_into_the_system_prompt_unless_turned_off() {
        let context = json!({"context_url": "https://shop.example/orders/42", "related_type": "order",
            "related_id": "42", "metadata": {"plan": "pro"}});
        let system = |settings: &AgentSettings, context: Option<&Value>| {
            let built = build_input(&InputParts {
                settings,
                memory: None,
                prior_tasks: None,
                execution_id: Id::nil(),
                task: "where is my parcel?",
                steps: &[],
                tools: &[],
                planning: false,
                context,
            });
            built.messages[0].content.clone().unwrap_or_default()
        };
        let default = AgentSettings::default();
        let said = system(&default, Some(&context));
        assert!(said.starts_with(DEFAULT_SYSTEM_PROMPT), "{said}");
        assert!(
            said.contains("- page: https://shop.example/orders/42"),
            "{said}"
        );
        assert!(said.contains("- about: order 42"), "{said}");
        assert!(said.contains(r#"- details: {"plan":"pro"}"#), "{said}");
        assert_eq!(system(&default, None), DEFAULT_SYSTEM_PROMPT);
        let off = default
            .with_overrides(&json!({"context_prompt": false}))
            .expect("false turns it off");
        assert_eq!(system(&off, Some(&context)), DEFAULT_SYSTEM_PROMPT);
        let own = default
            .with_overrides(&json!({"context_prompt": "Order {related_id} at {context_url}."}))
            .expect("a template");
        assert!(
            system(&own, Some(&context))
                .ends_with("\n\nOrder 42 at https://shop.example/orders/42.")
        );
        assert!(
            default
                .with_overrides(&json!({"context_prompt": 3}))
                .is_err()
        );
    }

    #[test]
    fn the_policy_keeps_system_task_and_latest_step() {
        let settings = AgentSettings {
            context_tokens: 1000,
            max_tokens: Some(100),
            ..AgentSettings::default()
        };
        let steps: Vec<Step> = (1..=30)
            .map(|n| {
                step(
                    n,
                    StepKind::Action,
                    StepBody {
                        tool_calls: vec![call(
                            &format!("c{n}"),
                            "calculator",
                            json!({"expression": "1+1"}),
                        )],
                        observations: Some("x".repeat(400)),
                        ..StepBody::default()
                    },
                )
            })
            .collect();
        let built = build_input(&InputParts {
            settings: &settings,
            memory: None,
            prior_tasks: None,
            execution_id: Id::nil(),
            task: "the task",
            steps: &steps,
            tools: &[],
            planning: false,
            context: None,
        });
        assert!(built.dropped_steps > 0);
        assert!(built.estimated_tokens <= 900, "{}", built.estimated_tokens);
        assert_eq!(built.messages[0].role, "system");
        let task = built.messages[1].content.as_deref().unwrap_or_default();
        assert!(
            task.starts_with("the task") && task.contains("calculator ×"),
            "{task}"
        );
        let last = built.messages.last().unwrap();
        assert_eq!(last.tool_call_id.as_deref(), Some("c30"));
        // Every tool result follows its call.
        assert_eq!(built.messages[2].role, "assistant");
    }
}
