//! The context summary of seed 004, given to an agent when its stored memory could not
//! be fully restored: the user's recent requests, the tools used, the message count and
//! an instruction to continue.

use crate::model::{ContextSummary, Message, Role, Step};

pub const MAX_REQUESTS: usize = 5;
pub const MAX_REQUEST_CHARS: usize = 200;

/// Builds the summary from a session's messages (oldest first) and whatever steps could
/// still be decoded. Keeps the last five user requests, each cut to 200 characters.
pub fn build_summary(messages: &[Message], steps: &[Step], message_count: u64) -> ContextSummary {
    let requests: Vec<String> = messages
        .iter()
        .filter(|m| m.role == Role::User)
        .map(|m| cut_chars(&m.content, MAX_REQUEST_CHARS))
        .collect();
    let user_requests = requests[requests.len().saturating_sub(MAX_REQUESTS)..].to_vec();

    let mut tools_used: Vec<String> = Vec::new();
    for call in steps.iter().flat_map(|s| &s.tool_calls) {
        if !tools_used.contains(&call.name) {
            tools_used.push(call.name.clone());
        }
    }

    let mut text = String::from(
        "Previous conversation summary (the full agent memory could not be restored).\n",
    );
    if user_requests.is_empty() {
        text.push_str("The user has made no requests yet.\n");
    } else {
        text.push_str("Recent user requests:\n");
        for (i, request) in user_requests.iter().enumerate() {
            text.push_str(&format!("{}. {}\n", i + 1, request));
        }
    }
    if !tools_used.is_empty() {
        text.push_str(&format!("Tools used: {}\n", tools_used.join(", ")));
    }
    text.push_str(&format!("Messages in this session: {message_count}\n"));
    text.push_str("Continue the conversation from here, using this context.");

    ContextSummary {
        user_requests,
        tools_used,
        message_count,
        text,
    }
}

/// The first `max` characters of `text` (characters, not bytes, so no UTF-8 is split).
pub fn cut_chars(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((end, _)) => text[..end].to_string(),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{StepBody, StepKind, ToolCall};
    use crate::time::Timestamp;
    use crate::{Id, new_id};
    use serde_json::Value;

    fn message(role: Role, content: &str) -> Message {
        Message {
            id: new_id(),
            session_id: Id::nil(),
            role,
            content: content.to_string(),
            execution_id: None,
            related_type: None,
            related_id: None,
            context_url: None,
            metadata: Value::Null,
            created_at: Timestamp::now(),
        }
    }

    #[test]
    fn keeps_last_five_user_requests_cut_to_200_chars() {
        let mut messages = Vec::new();
        for i in 0..7 {
            messages.push(message(
                Role::User,
                &format!("request {i} {}", "é".repeat(300)),
            ));
            messages.push(message(Role::Assistant, "answer"));
        }
        let step = Step::from_body(
            new_id(),
            new_id(),
            None,
            1,
            StepKind::Action,
            StepBody {
                tool_calls: vec![
                    ToolCall {
                        id: "1".into(),
                        name: "calculator".into(),
                        arguments: Value::Null,
                    },
                    ToolCall {
                        id: "2".into(),
                        name: "calculator".into(),
                        arguments: Value::Null,
                    },
                    ToolCall {
                        id: "3".into(),
                        name: "clock".into(),
                        arguments: Value::Null,
                    },
                ],
                ..StepBody::default()
            },
            Timestamp::now(),
        );
        let summary = build_summary(&messages, &[step], 14);
        assert_eq!(summary.user_requests.len(), 5);
        assert!(summary.user_requests[0].starts_with("request 2 "));
        assert!(
            summary
                .user_requests
                .iter()
                .all(|r| r.chars().count() == 200)
        );
        assert_eq!(summary.tools_used, vec!["calculator", "clock"]);
        assert_eq!(summary.message_count, 14);
        assert!(summary.text.contains("Continue the conversation"));
        assert!(summary.text.contains("Tools used: calculator, clock"));
    }
}
