//! What a stored step says to the user, as the front-end protocols show it: its text, its
//! answer, its tool results, and the streamed tokens it holds ([`LiveText`]).

use serde_json::Value;
use stepwise_core::{Step, StepKind};

/// The kinds of steps whose `model_output` is the agent's text to the user.
pub(crate) fn says_text(step: &Step) -> Option<&str> {
    match step.kind {
        StepKind::Action | StepKind::Planning => step
            .model_output
            .as_deref()
            .filter(|t| !t.trim().is_empty()),
        _ => None,
    }
}

/// A final answer step's answer.
pub(crate) fn final_answer(step: &Step) -> Option<String> {
    if step.kind != StepKind::FinalAnswer {
        return None;
    }
    match &step.output {
        Value::String(text) => Some(text.clone()),
        Value::Null => step.model_output.clone(),
        other => Some(other.to_string()),
    }
}

/// One tool call's result in a step: `Ok(observation)` or `Err(error message)`; `None`
/// when the call has none (the `user_input` call of a pause).
pub(crate) fn tool_result(step: &Step, index: usize) -> Option<Result<String, String>> {
    if let Some(results) = step.output.get("tool_results").and_then(Value::as_array)
        && let Some(result) = results.get(index)
    {
        if let Some(error) = result.get("error").filter(|e| !e.is_null()) {
            let message = error
                .get("message")
                .and_then(Value::as_str)
                .map(str::to_string)
                .unwrap_or_else(|| error.to_string());
            return Some(Err(message));
        }
        let observation = result
            .get("observation")
            .and_then(Value::as_str)
            .unwrap_or_default();
        return Some(Ok(observation.to_string()));
    }
    if step.tool_calls.len() > 1 {
        return None;
    }
    if let Some(error) = &step.error {
        return Some(Err(error.message.clone()));
    }
    step.observations.clone().map(Ok)
}

/// Streamed tokens shown as they came, not yet matched with the stored step that holds
/// them. Deltas are live and stored events are committed in batches, so a step's tokens may
/// arrive before its `step.started`, or even before the previous step's `step.completed`: a
/// stored text that was streamed is recognised by its content and not sent again.
#[derive(Debug, Default)]
pub(crate) struct LiveText {
    /// The open text part (message) the deltas go to.
    pub(crate) id: Option<String>,
    buffer: String,
}

/// Whether a stored text was already streamed.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Streamed {
    /// No: send it.
    No,
    /// Yes, and the open text ends with it: close the text part.
    Whole,
    /// Yes, and more tokens (of the next step) follow it: keep the text part open.
    Prefix,
}

impl LiveText {
    /// Adds a delta (to the open text part, which the caller named in `id`).
    pub(crate) fn push(&mut self, delta: &str) {
        self.buffer.push_str(delta);
    }

    /// Whether `text` was streamed; consumes it from the streamed tokens.
    pub(crate) fn take(&mut self, text: &str) -> Streamed {
        let text = text.trim();
        if self.id.is_none() || text.is_empty() {
            return Streamed::No;
        }
        let buffer = self.buffer.trim_start();
        if buffer.trim_end() == text {
            self.buffer.clear();
            return Streamed::Whole;
        }
        if let Some(rest) = buffer.strip_prefix(text) {
            self.buffer = rest.to_string();
            return Streamed::Prefix;
        }
        Streamed::No
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_streamed_text_is_recognised_whole_or_as_a_prefix() {
        let mut live = LiveText::default();
        assert_eq!(live.take("Hello"), Streamed::No, "nothing streamed");
        live.id = Some("t".into());
        live.push("Hel");
        live.push("lo");
        assert_eq!(live.take("Goodbye"), Streamed::No);
        assert_eq!(live.take(" Hello "), Streamed::Whole);
        live.push("First.");
        live.push(" Second");
        assert_eq!(live.take("First."), Streamed::Prefix);
        assert_eq!(live.take("Second"), Streamed::Whole);
        assert_eq!(live.take(""), Streamed::No);
    }
}
