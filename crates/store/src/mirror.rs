//! The readable side of a step written with it: the session messages and events that
//! mirror a step (see [`StepStore::append_step_mirrored`](crate::StepStore::append_step_mirrored)).

use serde_json::{Map, Value, json};
use stepwise_core::{EventType, Id, Message, Role};

use crate::{NewEvent, NewMessage, Result, StoreError};

/// Messages and events that mirror a step in its session's readable history. Each message
/// is followed by its `message.created` event; the events come after the messages. They
/// all belong to the step's session.
#[derive(Debug, Clone, Default)]
pub struct StepMirror {
    pub messages: Vec<NewMessage>,
    pub events: Vec<NewEvent>,
}

impl StepMirror {
    pub fn is_empty(&self) -> bool {
        self.messages.is_empty() && self.events.is_empty()
    }

    /// Checks that every message and event belongs to `session` (the step's session),
    /// before anything is written.
    pub fn check_session(&self, session: Option<Id>) -> Result<()> {
        if self.is_empty() {
            return Ok(());
        }
        let belongs = |id: Id| session == Some(id);
        if !self.messages.iter().all(|m| belongs(m.session_id))
            || !self.events.iter().all(|e| belongs(e.session_id))
        {
            return Err(StoreError::invalid(
                "session_id",
                "a step's mirrored messages and events belong to the step's session",
            ));
        }
        Ok(())
    }
}

/// The keys of a stored message's metadata its `message.created` event repeats, for a
/// message the engine wrote (not a user's): what the UI draws a step's line from.
pub const NOTE_KEYS: [&str; 3] = ["step_number", "tool", "kind"];

/// The `message.created` event announcing a stored message: its `role`, and for a message
/// that is not a user's the [`NOTE_KEYS`] of its metadata.
pub fn message_created(message: &Message) -> NewEvent {
    let mut metadata = Map::new();
    metadata.insert("role".into(), json!(message.role));
    if message.role != Role::User
        && let Value::Object(stored) = &message.metadata
    {
        for key in NOTE_KEYS {
            if let Some(value) = stored.get(key) {
                metadata.insert(key.into(), value.clone());
            }
        }
    }
    NewEvent {
        session_id: message.session_id,
        message_id: Some(message.id),
        execution_id: message.execution_id,
        event_type: EventType::MessageCreated,
        content: message.content.clone(),
        metadata: Value::Object(metadata),
    }
}
