//! The chat-completions wire format, read leniently. Real OpenAI-compatible servers differ
//! in small ways (`finish_reason: ""`, `usage` missing in streams, tool-call arguments as
//! an object instead of a string, reasoning in `reasoning_content` or `reasoning`, ids
//! missing from tool-call deltas), so every field is optional, unknown fields are ignored,
//! and nothing is a strict enum.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A chat-completions request body.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ChatRequest {
    pub model: String,
    pub messages: Vec<ChatMessage>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ToolDefinition>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parallel_tool_calls: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    pub stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream_options: Option<StreamOptions>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct StreamOptions {
    pub include_usage: bool,
}

/// One message of the conversation sent to the model.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ChatMessage {
    pub role: String,
    /// `null` only for an assistant message that carries tool calls and no text.
    pub content: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<WireToolCall>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

impl ChatMessage {
    pub fn system(text: impl Into<String>) -> Self {
        Self::text("system", text)
    }

    pub fn user(text: impl Into<String>) -> Self {
        Self::text("user", text)
    }

    pub fn assistant(text: impl Into<String>) -> Self {
        Self::text("assistant", text)
    }

    pub fn assistant_calls(text: Option<String>, tool_calls: Vec<WireToolCall>) -> Self {
        ChatMessage {
            role: "assistant".into(),
            content: text.filter(|t| !t.is_empty()),
            tool_calls,
            tool_call_id: None,
        }
    }

    pub fn tool_result(call_id: impl Into<String>, text: impl Into<String>) -> Self {
        ChatMessage {
            role: "tool".into(),
            content: Some(text.into()),
            tool_calls: Vec::new(),
            tool_call_id: Some(call_id.into()),
        }
    }

    fn text(role: &str, text: impl Into<String>) -> Self {
        ChatMessage {
            role: role.into(),
            content: Some(text.into()),
            tool_calls: Vec::new(),
            tool_call_id: None,
        }
    }
}

/// A tool call as sent back to the model in an assistant message.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct WireToolCall {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub function: WireFunctionCall,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct WireFunctionCall {
    pub name: String,
    /// A JSON text, as the API wants it.
    pub arguments: String,
}

/// A tool offered to the model.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ToolDefinition {
    #[serde(rename = "type")]
    pub kind: String,
    pub function: FunctionDefinition,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct FunctionDefinition {
    pub name: String,
    pub description: String,
    pub parameters: Value,
}

// --- responses ------------------------------------------------------------------------

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct Usage {
    pub prompt_tokens: Option<u64>,
    pub completion_tokens: Option<u64>,
    pub total_tokens: Option<u64>,
}

/// A non-streamed response.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct ChatResponse {
    pub choices: Vec<ResponseChoice>,
    pub usage: Option<Usage>,
    pub error: Option<Value>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct ResponseChoice {
    pub message: Option<ResponseMessage>,
    pub finish_reason: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct ResponseMessage {
    pub content: Option<Value>,
    pub reasoning_content: Option<String>,
    pub reasoning: Option<String>,
    pub tool_calls: Option<Vec<ToolCallDelta>>,
}

/// One streamed chunk.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct ChatChunk {
    pub choices: Vec<ChunkChoice>,
    pub usage: Option<Usage>,
    pub error: Option<Value>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct ChunkChoice {
    pub index: Option<u32>,
    pub delta: Option<ChunkDelta>,
    pub finish_reason: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct ChunkDelta {
    pub content: Option<Value>,
    pub reasoning_content: Option<String>,
    pub reasoning: Option<String>,
    pub tool_calls: Option<Vec<ToolCallDelta>>,
}

/// A piece of a tool call: streamed ones arrive in many pieces keyed by `index`; a
/// non-streamed one is whole.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct ToolCallDelta {
    pub index: Option<u32>,
    pub id: Option<String>,
    pub function: Option<FunctionDelta>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct FunctionDelta {
    pub name: Option<String>,
    /// Usually a piece of a JSON text; some servers send the whole object.
    pub arguments: Option<Value>,
}

/// Text content: a string, or (some servers) a list of `{type: "text", text}` parts.
pub fn content_text(content: &Option<Value>) -> Option<String> {
    match content {
        None | Some(Value::Null) => None,
        Some(Value::String(text)) => Some(text.clone()),
        Some(Value::Array(parts)) => Some(
            parts
                .iter()
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect::<String>(),
        ),
        Some(other) => Some(other.to_string()),
    }
}

/// A finish reason, with the empty string some servers send read as none.
pub fn finish_reason(reason: &Option<String>) -> Option<String> {
    reason.as_ref().filter(|r| !r.is_empty()).cloned()
}

/// An error object's message (`{"error": {"message": ...}}` or `{"error": "text"}`).
pub fn error_message(error: &Value) -> String {
    match error {
        Value::String(text) => text.clone(),
        Value::Object(map) => map
            .get("message")
            .and_then(Value::as_str)
            .map(str::to_string)
            .unwrap_or_else(|| error.to_string()),
        other => other.to_string(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn chunks_with_odd_fields_parse() {
        let chunk: ChatChunk = serde_json::from_str(
            r#"{"id":"x","object":"chat.completion.chunk","created":1,"system_fingerprint":null,
               "choices":[{"index":0,"delta":{"role":"assistant","content":null,"reasoning_content":"hmm",
               "tool_calls":[{"index":0,"function":{"arguments":"{\"a"}}]},"finish_reason":"","logprobs":null}],
               "x_groq":{"id":"q"}}"#,
        )
        .unwrap();
        let choice = &chunk.choices[0];
        assert_eq!(finish_reason(&choice.finish_reason), None);
        let delta = choice.delta.as_ref().unwrap();
        assert_eq!(delta.reasoning_content.as_deref(), Some("hmm"));
        assert_eq!(content_text(&delta.content), None);
        assert!(chunk.usage.is_none());
    }

    #[test]
    fn content_parts_are_joined() {
        let parts =
            Some(serde_json::json!([{"type":"text","text":"a"},{"type":"text","text":"b"}]));
        assert_eq!(content_text(&parts).as_deref(), Some("ab"));
    }

    #[test]
    fn assistant_calls_serialize_with_null_content() {
        let message = ChatMessage::assistant_calls(
            Some(String::new()),
            vec![WireToolCall {
                id: "c1".into(),
                kind: "function".into(),
                function: WireFunctionCall {
                    name: "clock".into(),
                    arguments: "{}".into(),
                },
            }],
        );
        let json = serde_json::to_value(&message).unwrap();
        assert_eq!(json["content"], Value::Null);
        assert_eq!(json["tool_calls"][0]["type"], "function");
        assert!(json.get("tool_call_id").is_none());
    }
}
