//! Publishing: the one place messages are stored and events queued for a session's
//! subscribers. Publishing never stops a run: a failure is logged.

use serde_json::{Map, Value, json};
use stepwise_core::{EventType, Id, Message, Role};
use stepwise_store::{Ack, NewEvent, NewMessage, Store, Tenant, message_created};

/// What an engine-written message is about, stored as its `metadata` and repeated in its
/// `message.created` event beside `role`, so a client reads the step number, the tool and
/// the kind of line instead of parsing the text.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MessageNote {
    /// The step the line is about.
    pub step_number: Option<u32>,
    /// The (first) tool the step called.
    pub tool: Option<String>,
    /// The step's kind (`action`, `planning`, `final_answer`, `user_input`), `subagent` for
    /// a subagent's step, `status` for a lifecycle line ("Execution queued"...).
    pub kind: String,
}

// The keys a [`MessageNote`] writes are the only message metadata copied to events
// (`stepwise_store::NOTE_KEYS`).

impl MessageNote {
    /// A note of this kind without a step.
    pub fn kind(kind: impl Into<String>) -> Self {
        MessageNote {
            kind: kind.into(),
            ..MessageNote::default()
        }
    }

    /// A note about a step.
    pub fn step(step_number: u32, kind: impl Into<String>, tool: Option<String>) -> Self {
        MessageNote {
            step_number: Some(step_number),
            tool,
            kind: kind.into(),
        }
    }

    /// The note as message metadata: `{"step_number": N, "tool": "name", "kind": "..."}`,
    /// absent parts left out.
    pub fn to_metadata(&self) -> Value {
        let mut map = Map::new();
        if let Some(number) = self.step_number {
            map.insert("step_number".into(), json!(number));
        }
        if let Some(tool) = &self.tool {
            map.insert("tool".into(), json!(tool));
        }
        map.insert("kind".into(), json!(self.kind));
        Value::Object(map)
    }
}

/// An engine-written message of an execution with its [`MessageNote`] as metadata.
fn noted(
    session_id: Id,
    execution_id: Id,
    role: Role,
    content: &str,
    note: &MessageNote,
) -> NewMessage {
    let mut message = NewMessage::new(session_id, role, content).for_execution(execution_id);
    message.metadata = note.to_metadata();
    message
}

/// Stores messages and queues events. Cheap to clone.
#[derive(Clone)]
pub struct Publisher<S> {
    store: S,
}

impl<S: Store> Publisher<S> {
    /// A publisher writing to this store.
    pub fn new(store: S) -> Self {
        Publisher { store }
    }

    /// Stores a plain message of an execution (no metadata) and queues its
    /// `message.created` event.
    pub async fn say(
        &self,
        tenant: &Tenant,
        session_id: Id,
        execution_id: Id,
        role: Role,
        content: &str,
    ) -> Option<Message> {
        self.post(
            tenant,
            NewMessage::new(session_id, role, content).for_execution(execution_id),
        )
        .await
    }

    /// Stores an engine-written message with its [`MessageNote`] as metadata and queues its
    /// `message.created` event (which carries the note's keys beside `role`).
    pub async fn note(
        &self,
        tenant: &Tenant,
        session_id: Id,
        execution_id: Id,
        role: Role,
        content: &str,
        note: &MessageNote,
    ) -> Option<Message> {
        self.post(tenant, noted(session_id, execution_id, role, content, note))
            .await
    }

    /// [`Self::note`] without waiting for the disk: the message is queued, then its
    /// `message.created` event behind it, and the [`Ack`] resolves once the message is
    /// durable (a session's queued writes commit in order). `None` (logged) when the store
    /// refused it.
    pub async fn note_queued(
        &self,
        tenant: &Tenant,
        session_id: Id,
        execution_id: Id,
        role: Role,
        content: &str,
        note: &MessageNote,
    ) -> Option<Ack<Message>> {
        let message = noted(session_id, execution_id, role, content, note);
        match self.store.queue_message(tenant, message).await {
            Ok((message, ack)) => {
                self.message_created(tenant, &message).await;
                Some(ack)
            }
            Err(e) => {
                tracing::warn!(session = %session_id, error = %e, "could not queue a message");
                None
            }
        }
    }

    /// Stores a message and queues its `message.created` event; `None` (logged) when the
    /// store refused it.
    pub async fn post(&self, tenant: &Tenant, message: NewMessage) -> Option<Message> {
        let session_id = message.session_id;
        match self.store.append_message(tenant, message).await {
            Ok(message) => {
                self.message_created(tenant, &message).await;
                Some(message)
            }
            Err(e) => {
                tracing::warn!(session = %session_id, error = %e, "could not store a message");
                None
            }
        }
    }

    /// Queues the `message.created` event of a stored message: its `role`, and the
    /// [`MessageNote`] keys of an engine-written one ([`message_created`]).
    pub async fn message_created(&self, tenant: &Tenant, message: &Message) {
        self.queue(tenant, message_created(message)).await;
    }

    /// Queues an event of a session (nothing without a session). Publishing never waits
    /// for the disk: subscribers get the event once it is committed.
    pub async fn emit(
        &self,
        tenant: &Tenant,
        session_id: Option<Id>,
        execution_id: Option<Id>,
        event_type: EventType,
        content: &str,
        metadata: Value,
    ) {
        let Some(session_id) = session_id else { return };
        self.queue(
            tenant,
            NewEvent {
                session_id,
                message_id: None,
                execution_id,
                event_type,
                content: content.to_string(),
                metadata,
            },
        )
        .await;
    }

    /// Queues a step's event (`step.started`, `tool.called`, `tool.completed`,
    /// `step.completed`) with `{"step_number": N, "tool": "name"}` as metadata.
    #[allow(clippy::too_many_arguments)]
    pub async fn step_event(
        &self,
        tenant: &Tenant,
        session_id: Option<Id>,
        execution_id: Id,
        event_type: EventType,
        step_number: u32,
        content: &str,
        tool: Option<&str>,
    ) {
        let mut metadata = json!({"step_number": step_number});
        if let (Some(tool), Some(map)) = (tool, metadata.as_object_mut()) {
            map.insert("tool".into(), Value::String(tool.to_string()));
        }
        self.emit(
            tenant,
            session_id,
            Some(execution_id),
            event_type,
            content,
            metadata,
        )
        .await;
    }

    async fn queue(&self, tenant: &Tenant, event: NewEvent) {
        // Awaiting queues the event (waiting only while the bounded save queue is full:
        // backpressure); the Ack is dropped, so nothing waits for the disk. Events of one
        // session stay in order because the queue is FIFO.
        match self.store.append_event(tenant, event).await {
            Ok(_ack) => {}
            Err(e) => tracing::warn!(error = %e, "could not queue an event"),
        }
    }
}
