//! The `demo` agent of product.md: offline and deterministic, it uses the real tools by
//! simple rules so a new user sees the whole pipeline with no LLM. The rules are a
//! contract (outside tests drive them): case-insensitive, the first rule that fits wins.
//!
//! Like every agent it decides from the steps saved so far, so a run that resumes after a
//! crash continues where it stopped.

use std::time::Duration;

use serde_json::json;
use stepwise_core::{StepKind, TokenUsage, ToolCall};

use crate::BoxFuture;
use crate::agent::{Agent, AgentContext, AgentError, Decision};
use crate::tools::{CALCULATOR, CLOCK, SUBAGENT, USER_INPUT};

pub const DEMO_AGENT: &str = "demo";
pub const STEP_MS_ENV: &str = "STEPWISE_DEMO_STEP_MS";
pub const DEFAULT_STEP_MS: u64 = 250;
pub const MAX_DEMO_STEPS: u32 = 1000;
pub const ASK_QUESTION: &str = "What should I use?";

#[derive(Debug, Clone)]
pub struct DemoAgent {
    /// How long each step of `steps: N` takes.
    pub step_delay: Duration,
}

impl Default for DemoAgent {
    fn default() -> Self {
        DemoAgent {
            step_delay: Duration::from_millis(DEFAULT_STEP_MS),
        }
    }
}

impl DemoAgent {
    pub fn with_step_delay(step_delay: Duration) -> Self {
        DemoAgent { step_delay }
    }

    /// The step delay from `STEPWISE_DEMO_STEP_MS` (default 250 ms).
    pub fn from_env() -> Self {
        let ms = std::env::var(STEP_MS_ENV)
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(DEFAULT_STEP_MS);
        DemoAgent {
            step_delay: Duration::from_millis(ms),
        }
    }
}

/// Which rule a message fits.
#[derive(Debug, Clone, PartialEq)]
pub enum DemoRule {
    Steps(u32),
    AskMe,
    Delegate(String),
    Fail,
    Arithmetic(String),
    Time,
    Echo,
}

impl DemoRule {
    pub fn for_message(message: &str) -> DemoRule {
        let lower = message.to_lowercase();
        if let Some(n) = steps_count(&lower) {
            return DemoRule::Steps(n);
        }
        if lower.contains("ask me") {
            return DemoRule::AskMe;
        }
        if let Some(task) = delegate_task(message, &lower) {
            return DemoRule::Delegate(task);
        }
        if has_word(&lower, "fail") {
            return DemoRule::Fail;
        }
        if is_arithmetic(message) {
            return DemoRule::Arithmetic(message.trim().to_string());
        }
        if has_word(&lower, "time") {
            return DemoRule::Time;
        }
        DemoRule::Echo
    }
}

fn steps_count(lower: &str) -> Option<u32> {
    let at = lower.find("steps:")?;
    let rest = lower[at + "steps:".len()..].trim_start();
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let n = digits.parse::<u32>().ok()?;
    (1..=MAX_DEMO_STEPS).contains(&n).then_some(n)
}

fn delegate_task(message: &str, lower: &str) -> Option<String> {
    let at = lower.find("delegate:")?;
    // Lowercasing can change byte lengths outside ASCII; only slice the original when the
    // prefix lines up.
    let task = if lower.len() == message.len() {
        &message[at + "delegate:".len()..]
    } else {
        &lower[at + "delegate:".len()..]
    };
    let task = task.trim();
    (!task.is_empty()).then(|| task.to_string())
}

fn has_word(lower: &str, word: &str) -> bool {
    lower
        .split(|c: char| !c.is_alphanumeric())
        .any(|w| w == word)
}

fn is_arithmetic(message: &str) -> bool {
    let text = message.trim();
    !text.is_empty()
        && text.chars().any(|c| c.is_ascii_digit())
        && text
            .chars()
            .all(|c| c.is_ascii_digit() || c.is_whitespace() || "+-*/%^().".contains(c))
}

fn call(id: String, name: &str, arguments: serde_json::Value) -> ToolCall {
    ToolCall {
        id,
        name: name.to_string(),
        arguments,
    }
}

fn words(text: &str) -> u64 {
    text.split_whitespace().count() as u64
}

impl Agent for DemoAgent {
    fn needs_session_memory(&self) -> bool {
        false
    }

    fn next_step<'a>(
        &'a self,
        ctx: &'a AgentContext,
    ) -> BoxFuture<'a, Result<Decision, AgentError>> {
        Box::pin(async move {
            // A tool error in the last step ends the run with that error.
            if let Some(error) = ctx.steps.last().and_then(|s| s.error.as_ref()) {
                return Ok(Decision::Fail {
                    error_message: error.message.clone(),
                });
            }
            let message = ctx.input_text();
            let number = ctx.next_step_number();
            let call_id = format!("call_{number}");
            let usage = |out: &str| TokenUsage::new(words(&message), words(out));
            let last_observation = ctx
                .steps
                .last()
                .and_then(|s| s.observations.clone())
                .unwrap_or_default();
            let first = ctx.steps.is_empty();

            let decision = match DemoRule::for_message(&message) {
                DemoRule::Steps(n) => {
                    let done = ctx.steps_of_kind(StepKind::Action).count() as u32;
                    if done < n {
                        tokio::time::sleep(self.step_delay).await;
                        let step = done + 1;
                        let thought = format!("Step {step} of {n}: computing {step}.");
                        Decision::Act {
                            token_usage: usage(&thought),
                            model_output: Some(thought),
                            tool_calls: vec![call(
                                call_id,
                                CALCULATOR,
                                json!({"expression": step.to_string()}),
                            )],
                        }
                    } else {
                        Decision::finish(format!("Done: {n} steps"))
                    }
                }
                DemoRule::AskMe => match ctx.steps_of_kind(StepKind::UserInput).last() {
                    Some(answer) => {
                        let answer = answer.observations.clone().unwrap_or_default();
                        let text = format!("You said: {answer}");
                        Decision::Finish {
                            token_usage: usage(&text),
                            answer: text,
                            model_output: None,
                        }
                    }
                    None => Decision::Act {
                        model_output: Some("I need to ask the user.".into()),
                        tool_calls: vec![call(
                            call_id,
                            USER_INPUT,
                            json!({"question": ASK_QUESTION}),
                        )],
                        token_usage: usage(ASK_QUESTION),
                    },
                },
                DemoRule::Delegate(task) if first => Decision::Act {
                    model_output: Some(format!("Delegating to a subagent: {task}")),
                    tool_calls: vec![call(call_id, SUBAGENT, json!({"task": task}))],
                    token_usage: usage(&task),
                },
                DemoRule::Fail if first => Decision::Act {
                    model_output: Some("Trying something that cannot work.".into()),
                    tool_calls: vec![call(call_id, CALCULATOR, json!({"expression": "1/0"}))],
                    token_usage: usage("1/0"),
                },
                DemoRule::Arithmetic(expression) if first => Decision::Act {
                    model_output: Some(format!("Computing {expression}.")),
                    tool_calls: vec![call(call_id, CALCULATOR, json!({"expression": expression}))],
                    token_usage: usage(&expression),
                },
                DemoRule::Time if first => Decision::Act {
                    model_output: Some("Reading the clock.".into()),
                    tool_calls: vec![call(call_id, CLOCK, json!({}))],
                    token_usage: usage("time"),
                },
                DemoRule::Echo if first => {
                    let thought = format!("The user said: {message}. I will echo it.");
                    Decision::Act {
                        token_usage: usage(&thought),
                        model_output: Some(thought),
                        tool_calls: Vec::new(),
                    }
                }
                DemoRule::Echo => {
                    let text = format!("Echo: {message}");
                    Decision::Finish {
                        token_usage: usage(&text),
                        answer: text,
                        model_output: None,
                    }
                }
                DemoRule::Fail => Decision::Fail {
                    error_message: "the demo agent was asked to fail".into(),
                },
                // Delegate, arithmetic and time answer with their one tool's result.
                DemoRule::Delegate(_) | DemoRule::Arithmetic(_) | DemoRule::Time => {
                    Decision::Finish {
                        token_usage: usage(&last_observation),
                        answer: last_observation,
                        model_output: None,
                    }
                }
            };
            Ok(decision)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_match_in_order_and_ignore_case() {
        assert_eq!(DemoRule::for_message("steps: 3"), DemoRule::Steps(3));
        assert_eq!(DemoRule::for_message("STEPS:  12"), DemoRule::Steps(12));
        assert_eq!(DemoRule::for_message("steps: 1001"), DemoRule::Echo);
        assert_eq!(DemoRule::for_message("steps: 0"), DemoRule::Echo);
        assert_eq!(
            DemoRule::for_message("please Ask Me something"),
            DemoRule::AskMe
        );
        assert_eq!(
            DemoRule::for_message("delegate: 2+3"),
            DemoRule::Delegate("2+3".into())
        );
        assert_eq!(
            DemoRule::for_message("Delegate: Find X"),
            DemoRule::Delegate("Find X".into())
        );
        assert_eq!(DemoRule::for_message("this will FAIL now"), DemoRule::Fail);
        assert_eq!(
            DemoRule::for_message("failure is not fail-safe"),
            DemoRule::Fail
        );
        assert_eq!(DemoRule::for_message("failure"), DemoRule::Echo);
        assert_eq!(
            DemoRule::for_message("2+3*4"),
            DemoRule::Arithmetic("2+3*4".into())
        );
        assert_eq!(
            DemoRule::for_message(" (1 + 2) / 3 "),
            DemoRule::Arithmetic("(1 + 2) / 3".into())
        );
        assert_eq!(DemoRule::for_message("what time is it?"), DemoRule::Time);
        assert_eq!(DemoRule::for_message("timeless"), DemoRule::Echo);
        assert_eq!(DemoRule::for_message("hello"), DemoRule::Echo);
        assert_eq!(
            DemoRule::for_message("ask me what time it is"),
            DemoRule::AskMe
        );
    }
}
