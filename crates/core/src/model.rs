//! The data model of product.md and api.md. These are the shapes the HTTP API answers
//! with: every field is always present, absent values are `null`.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use crate::time::Timestamp;
use uuid::Uuid;

macro_rules! string_enum {
    ($(#[$meta:meta])* $name:ident { $($variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        pub enum $name { $(#[serde(rename = $text)] $variant),+ }

        // Written by hand: the derive does not see serde renames that come from a macro.
        impl utoipa::PartialSchema for $name {
            fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
                utoipa::openapi::ObjectBuilder::new()
                    .schema_type(utoipa::openapi::schema::Type::String)
                    .enum_values(Some([$($text),+]))
                    .into()
            }
        }

        impl utoipa::ToSchema for $name {
            fn name() -> std::borrow::Cow<'static, str> {
                std::borrow::Cow::Borrowed(stringify!($name))
            }
        }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }

            pub fn parse(text: &str) -> Option<Self> {
                match text { $($text => Some($name::$variant),)+ _ => None }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

string_enum!(
    /// Lifecycle of a session. `deleted` is a soft delete.
    SessionStatus {
        Active => "active",
        Completed => "completed",
        Error => "error",
        Abandoned => "abandoned",
        Archived => "archived",
        Closed => "closed",
        Deleted => "deleted",
    }
);

impl SessionStatus {
    /// The statuses a client may set with `PATCH /v1/sessions/{id}`.
    pub fn client_settable(self) -> bool {
        matches!(
            self,
            SessionStatus::Active
                | SessionStatus::Completed
                | SessionStatus::Archived
                | SessionStatus::Closed
        )
    }
}

string_enum!(
    /// Who a message is from. `info` and `notification` are the foldable status lines.
    Role {
        User => "user",
        Assistant => "assistant",
        Info => "info",
        Notification => "notification",
    }
);

string_enum!(
    ExecutionStatus {
        Pending => "pending",
        Running => "running",
        Paused => "paused",
        Completed => "completed",
        Failed => "failed",
        Cancelled => "cancelled",
    }
);

impl ExecutionStatus {
    pub fn is_finished(self) -> bool {
        matches!(
            self,
            ExecutionStatus::Completed | ExecutionStatus::Failed | ExecutionStatus::Cancelled
        )
    }

    /// The allowed transitions. A running execution may be claimed again (running →
    /// running) when its worker's lease expired; that is a claim, not a transition.
    pub fn can_become(self, next: ExecutionStatus) -> bool {
        use ExecutionStatus::*;
        matches!(
            (self, next),
            (Pending, Running | Cancelled | Failed)
                | (Running, Paused | Completed | Failed | Cancelled | Pending)
                | (Paused, Running | Pending | Cancelled | Failed)
        )
    }
}

string_enum!(
    /// The kind of an agent memory step.
    StepKind {
        Task => "task",
        SystemPrompt => "system_prompt",
        Planning => "planning",
        Action => "action",
        UserInput => "user_input",
        FinalAnswer => "final_answer",
    }
);

string_enum!(
    EventType {
        MessageCreated => "message.created",
        MessageDelta => "message.delta",
        ExecutionQueued => "execution.queued",
        ExecutionStarted => "execution.started",
        StepStarted => "step.started",
        ToolCalled => "tool.called",
        ToolCompleted => "tool.completed",
        StepCompleted => "step.completed",
        ExecutionPaused => "execution.paused",
        ExecutionCompleted => "execution.completed",
        ExecutionFailed => "execution.failed",
        ExecutionCancelled => "execution.cancelled",
        CheckpointCreated => "checkpoint.created",
    }
);

/// Token counts of a model call, a step or a whole execution.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct TokenUsage {
    #[serde(default)]
    pub input: u64,
    #[serde(default)]
    pub output: u64,
    #[serde(default)]
    pub total: u64,
}

impl TokenUsage {
    /// Counts saturate at `u64::MAX`: they come from agents and stored payloads, and a
    /// nonsense count must not wrap (or panic in a debug build).
    pub fn new(input: u64, output: u64) -> Self {
        TokenUsage {
            input,
            output,
            total: input.saturating_add(output),
        }
    }

    pub fn add(&mut self, other: &TokenUsage) {
        self.input = self.input.saturating_add(other.input);
        self.output = self.output.saturating_add(other.output);
        self.total = self.total.saturating_add(other.total);
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Session {
    pub id: Uuid,
    pub tenant_id: String,
    pub user_id: String,
    pub name: Option<String>,
    pub title: Option<String>,
    pub status: SessionStatus,
    pub related_type: Option<String>,
    pub related_id: Option<String>,
    pub initial_context_url: Option<String>,
    pub metadata: Value,
    /// The agent a message that names none runs with (`null`: the server's default).
    #[serde(default)]
    pub agent: Option<SessionAgent>,
    pub last_execution_id: Option<Uuid>,
    pub last_snapshot_id: Option<Uuid>,
    pub message_count: u64,
    /// The session's first user message, cut to 200 characters (`null` before one).
    #[serde(default)]
    pub first_message: Option<String>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

/// A session's default agent: an agent type and its config.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct SessionAgent {
    /// A built-in agent type or a worker's.
    #[serde(rename = "type")]
    pub agent_type: String,
    #[serde(default)]
    pub config: Value,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Message {
    pub id: Uuid,
    pub session_id: Uuid,
    pub role: Role,
    pub content: String,
    pub execution_id: Option<Uuid>,
    pub related_type: Option<String>,
    pub related_id: Option<String>,
    pub context_url: Option<String>,
    pub metadata: Value,
    pub created_at: Timestamp,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Execution {
    pub id: Uuid,
    pub session_id: Option<Uuid>,
    pub parent_execution_id: Option<Uuid>,
    pub tenant_id: String,
    pub user_id: String,
    pub agent_type: String,
    pub agent_config: Value,
    pub status: ExecutionStatus,
    pub input: Value,
    pub output: Value,
    pub last_snapshot_id: Option<Uuid>,
    pub step_count: u64,
    pub token_usage: TokenUsage,
    pub metadata: Value,
    pub error_message: Option<String>,
    /// How many times a worker claimed this execution.
    pub attempts: u32,
    /// While a worker (a worker process, or the server's own) holds the running execution:
    /// when its lease runs out unless renewed. A worker that went silent loses it then, and
    /// the execution is taken over. `null` otherwise.
    #[serde(default)]
    pub lease_expires_at: Option<Timestamp>,
    pub started_at: Option<Timestamp>,
    pub completed_at: Option<Timestamp>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    /// Parsed JSON arguments (an object for every built-in tool).
    #[serde(default)]
    pub arguments: Value,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct StepError {
    pub kind: String,
    pub message: String,
}

/// What an agent says about one step; the server adds ids and times to make a [`Step`].
/// The most tool calls one step holds (the engine runs no more; the API refuses more). The
/// schema of [`StepBody::tool_calls`] states it as `maxItems`.
pub const MAX_TOOL_CALLS_PER_STEP: usize = 64;
const _: () = assert!(
    MAX_TOOL_CALLS_PER_STEP == 64,
    "keep StepBody's max_items in step"
);

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, ToSchema)]
#[serde(default)]
pub struct StepBody {
    pub model_output: Option<String>,
    /// At most [`MAX_TOOL_CALLS_PER_STEP`] calls.
    #[schema(max_items = 64, default = json!([]))]
    pub tool_calls: Vec<ToolCall>,
    pub code: Option<String>,
    pub observations: Option<String>,
    pub error: Option<StepError>,
    pub output: Value,
    pub token_usage: TokenUsage,
    pub started_at: Option<Timestamp>,
    pub ended_at: Option<Timestamp>,
}

/// One agent memory step. Appended, never rewritten.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Step {
    pub id: Uuid,
    pub execution_id: Uuid,
    pub session_id: Option<Uuid>,
    pub step_number: u32,
    pub kind: StepKind,
    pub model_output: Option<String>,
    pub tool_calls: Vec<ToolCall>,
    pub code: Option<String>,
    pub observations: Option<String>,
    pub error: Option<StepError>,
    pub output: Value,
    pub token_usage: TokenUsage,
    pub started_at: Option<Timestamp>,
    pub ended_at: Option<Timestamp>,
    pub created_at: Timestamp,
}

impl Step {
    pub fn body(&self) -> StepBody {
        StepBody {
            model_output: self.model_output.clone(),
            tool_calls: self.tool_calls.clone(),
            code: self.code.clone(),
            observations: self.observations.clone(),
            error: self.error.clone(),
            output: self.output.clone(),
            token_usage: self.token_usage,
            started_at: self.started_at,
            ended_at: self.ended_at,
        }
    }

    pub fn from_body(
        id: Uuid,
        execution_id: Uuid,
        session_id: Option<Uuid>,
        step_number: u32,
        kind: StepKind,
        body: StepBody,
        created_at: Timestamp,
    ) -> Self {
        Step {
            id,
            execution_id,
            session_id,
            step_number,
            kind,
            model_output: body.model_output,
            tool_calls: body.tool_calls,
            code: body.code,
            observations: body.observations,
            error: body.error,
            output: body.output,
            token_usage: body.token_usage,
            started_at: body.started_at,
            ended_at: body.ended_at,
            created_at,
        }
    }
}

/// A JSON `AgentState` at a point in time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Snapshot {
    pub id: Uuid,
    pub execution_id: Uuid,
    pub parent_snapshot_id: Option<Uuid>,
    pub agent_id: Option<String>,
    pub agent_name: Option<String>,
    pub step_number: u32,
    pub is_final: bool,
    pub debug_mode: bool,
    /// `null` in lists; the whole state from `GET /v1/snapshots/{id}`.
    pub state: Value,
    pub created_at: Timestamp,
}

/// What the UI sees live; durable and replayable per session (except `message.delta`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Event {
    /// Strictly increasing within the session, from 1. `0` for live-only events.
    #[serde(skip)]
    pub id: i64,
    pub session_id: Uuid,
    pub message_id: Option<Uuid>,
    pub execution_id: Option<Uuid>,
    pub event_type: EventType,
    pub content: String,
    pub metadata: Value,
    pub timestamp: Timestamp,
}

/// What restore gives an agent when some of the stored memory could not be decoded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ContextSummary {
    pub user_requests: Vec<String>,
    pub tools_used: Vec<String>,
    pub message_count: u64,
    pub text: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Restored {
    Full,
    Summary,
    Empty,
}

/// A session's agent memory as restored from the store.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Memory {
    pub restored: Restored,
    pub steps: Vec<Step>,
    pub summary: Option<ContextSummary>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn execution_transitions_follow_the_lifecycle() {
        use ExecutionStatus::*;
        assert!(Pending.can_become(Running));
        assert!(Running.can_become(Paused));
        assert!(Paused.can_become(Running));
        assert!(Running.can_become(Completed));
        for done in [Completed, Failed, Cancelled] {
            assert!(done.is_finished());
            for next in ExecutionStatus::ALL {
                assert!(!done.can_become(*next), "{done} must be terminal");
            }
        }
        assert!(!Pending.can_become(Completed));
        assert!(!Pending.can_become(Paused));
    }

    #[test]
    fn enums_round_trip_through_their_wire_names() {
        for kind in StepKind::ALL {
            assert_eq!(StepKind::parse(kind.as_str()), Some(*kind));
            let json = serde_json::to_string(kind).unwrap_or_default();
            assert_eq!(json, format!("\"{}\"", kind.as_str()));
        }
        for ty in EventType::ALL {
            let json = serde_json::to_string(ty).unwrap_or_default();
            assert_eq!(json, format!("\"{}\"", ty.as_str()));
        }
    }
}

#[cfg(test)]
mod schema_tests {
    use super::*;

    #[test]
    fn openapi_enums_use_the_wire_names() {
        let schema = serde_json::to_string(&<SessionStatus as utoipa::PartialSchema>::schema())
            .unwrap_or_default();
        assert!(
            schema.contains("\"active\"") && !schema.contains("\"Active\""),
            "{schema}"
        );
        let schema = serde_json::to_string(&<EventType as utoipa::PartialSchema>::schema())
            .unwrap_or_default();
        assert!(schema.contains("\"step.completed\""), "{schema}");
    }

    #[test]
    fn token_counts_saturate_instead_of_overflowing() {
        // Found by fuzzing (a stored v1 step with a huge prompt count panicked in a debug
        // build); the same sum runs when a step's usage is added to its execution's.
        let mut usage = TokenUsage::new(u64::MAX - 1, 5);
        assert_eq!(usage.total, u64::MAX);
        usage.add(&TokenUsage::new(3, u64::MAX));
        assert_eq!(
            usage,
            TokenUsage {
                input: u64::MAX,
                output: u64::MAX,
                total: u64::MAX
            }
        );
    }
}
