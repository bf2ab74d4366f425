//! Submitting a user message: it resumes the session's paused execution, or queues a new
//! execution behind any running one.

use serde_json::{Value, json};
use stepwise_core::{EventType, Execution, ExecutionStatus, Id, Role, Session};
use stepwise_store::{
    IfBusy, NewEvent, NewExecution, NewMessage, Result, Store, StoreError, Tenant, Transition,
};

use super::{
    AgentChoice, EXTERNAL_AGENT, Engine, MAX_SUBAGENT_DEPTH, MessageInput, MessageNote, Submitted,
};

impl<S: Store> Engine<S> {
    /// Stores a user message in a session and queues the execution that answers it: the
    /// paused execution of the session resumes with the message as the user's answer;
    /// otherwise a new `pending` execution queues behind any running one.
    pub async fn submit_message(
        &self,
        tenant: &Tenant,
        user_id: &str,
        session_id: Id,
        input: MessageInput,
    ) -> Result<Submitted> {
        let store = &self.inner.store;
        let agent = self.choose_agent(&input)?;
        let session = store
            .get_session(tenant, session_id)
            .await?
            .ok_or(StoreError::NotFound("session"))?;
        self.submit_to_session(tenant, user_id, &session, input, agent, IfBusy::Queue)
            .await
    }

    /// [`Engine::submit_message`] for a session the caller has just read.
    pub async fn submit_message_to(
        &self,
        tenant: &Tenant,
        user_id: &str,
        session: &Session,
        input: MessageInput,
    ) -> Result<Submitted> {
        let agent = self.choose_agent(&input)?;
        self.submit_to_session(tenant, user_id, session, input, agent, IfBusy::Queue)
            .await
    }

    /// [`Engine::submit_message_to`] that queues a new execution only while the session has
    /// none queued or running: else `StoreError::Busy` and nothing is written (the check and
    /// the write are one step of the store, so of two at once one is refused). A paused
    /// execution is answered as always.
    pub async fn submit_message_if_idle(
        &self,
        tenant: &Tenant,
        user_id: &str,
        session: &Session,
        input: MessageInput,
    ) -> Result<Submitted> {
        let agent = self.choose_agent(&input)?;
        self.submit_to_session(tenant, user_id, session, input, agent, IfBusy::Refuse)
            .await
    }

    /// The agent a message asks for, checked (see [`Engine::check_agent_type`]), else the
    /// server's default (a session's default agent replaces that when it is submitted).
    pub fn choose_agent(&self, input: &MessageInput) -> Result<AgentChoice> {
        match &input.agent {
            Some(choice) => {
                self.check_agent_type(&choice.agent_type)?;
                Ok(choice.clone())
            }
            None => Ok(AgentChoice {
                agent_type: self.inner.config.default_agent.clone(),
                config: Value::Null,
            }),
        }
    }

    /// Whether messages may name this agent type: a built-in one, or a worker's (queued
    /// until a worker of it claims it); never `external`.
    pub fn check_agent_type(&self, agent_type: &str) -> Result<()> {
        if agent_type == EXTERNAL_AGENT {
            return Err(StoreError::invalid(
                "agent.type",
                "external executions are opened with POST /v1/sessions/{id}/executions",
            ));
        }
        if !self.can_run(agent_type) && !self.is_worker_agent(agent_type) {
            return Err(StoreError::invalid(
                "agent.type",
                format!(
                    "'{}' is not an agent type: built-in ones are {}; a worker's is 1-64 characters of [A-Za-z0-9._-] starting with a letter or digit",
                    agent_type,
                    self.inner.agents.names().join(", ")
                ),
            ));
        }
        Ok(())
    }

    async fn submit_to_session(
        &self,
        tenant: &Tenant,
        user_id: &str,
        session: &Session,
        input: MessageInput,
        agent: AgentChoice,
        if_busy: IfBusy,
    ) -> Result<Submitted> {
        let store = &self.inner.store;
        let publisher = &self.inner.publisher;
        let session_id = session.id;
        // A message that names no agent runs with its session's default agent.
        let agent = match (&input.agent, &session.agent) {
            (None, Some(default)) => AgentChoice {
                agent_type: default.agent_type.clone(),
                config: default.config.clone(),
            },
            _ => agent,
        };
        let _turn = self
            .inner
            .intake
            .turn(self.runs_working(), || store.write_backlog())
            .await;

        if let Some(latest) = self
            .latest_root_execution(tenant, session.last_execution_id)
            .await?
            && latest.status == ExecutionStatus::Paused
        {
            let answer = input
                .answer
                .clone()
                .unwrap_or_else(|| Value::String(input.content.clone()));
            match store
                .transition_execution(tenant, latest.id, Transition::Resume { answer })
                .await
            {
                Ok(execution) => {
                    let message = store
                        .append_message(
                            tenant,
                            user_message(session_id, &input).for_execution(execution.id),
                        )
                        .await?;
                    publisher.message_created(tenant, &message).await;
                    self.say_status(tenant, session_id, execution.id, "Execution resumed")
                        .await;
                    publisher
                        .emit(
                            tenant,
                            Some(session_id),
                            Some(execution.id),
                            EventType::ExecutionQueued,
                            "Execution resumed",
                            json!({}),
                        )
                        .await;
                    self.ring();
                    return Ok(Submitted {
                        session_id,
                        message,
                        execution,
                    });
                }
                // Resumed or cancelled by someone else meanwhile: queue a new execution.
                Err(StoreError::InvalidState(_)) => {}
                Err(e) => return Err(e),
            }
        }

        // The execution, the user's message, the "queued" line and their events are one
        // write (one commit).
        let queued_text = self.queued_text(tenant, &agent.agent_type).await;
        let mut queued_line = NewMessage::new(session_id, Role::Info, queued_text.clone());
        queued_line.metadata = MessageNote::kind("status").to_metadata();
        let queued = NewEvent {
            session_id,
            message_id: None,
            execution_id: None,
            event_type: EventType::ExecutionQueued,
            content: queued_text,
            metadata: json!({}),
        };
        let (execution, messages) = store
            .create_execution_with_messages(
                tenant,
                NewExecution {
                    session_id: Some(session_id),
                    parent_execution_id: None,
                    user_id: user_id.to_string(),
                    agent_type: agent.agent_type,
                    agent_config: agent.config,
                    input: execution_input(&input),
                    metadata: Value::Null,
                    status: ExecutionStatus::Pending,
                    lease: None,
                },
                vec![user_message(session_id, &input), queued_line],
                vec![queued],
                if_busy,
            )
            .await?;
        let message = messages
            .into_iter()
            .next()
            .ok_or_else(|| StoreError::Backend("the user's message was not stored".into()))?;
        self.ring();
        Ok(Submitted {
            session_id,
            message,
            execution,
        })
    }

    /// The "queued" line: for a worker's agent, whether a worker of it is online (else the
    /// execution waits for one).
    async fn queued_text(&self, tenant: &Tenant, agent_type: &str) -> String {
        if !self.is_worker_agent(agent_type) {
            return "Execution queued".into();
        }
        match self.worker_online(tenant, agent_type).await {
            Ok(false) => format!(
                "Execution queued for agent '{agent_type}': no worker of it is online; it runs when one connects"
            ),
            _ => format!("Execution queued for agent '{agent_type}'"),
        }
    }

    /// The session's latest top-level execution (a subagent's parent, not the subagent).
    async fn latest_root_execution(
        &self,
        tenant: &Tenant,
        last: Option<Id>,
    ) -> Result<Option<Execution>> {
        latest_root_execution(&self.inner.store, tenant, last).await
    }
}

/// The top-level execution above `last` (a session's last execution): `last` itself, or the
/// parent a subagent was started by, up the chain ([`MAX_SUBAGENT_DEPTH`] deep at most).
pub async fn latest_root_execution<S: Store>(
    store: &S,
    tenant: &Tenant,
    last: Option<Id>,
) -> Result<Option<Execution>> {
    let mut next = last;
    for _ in 0..=MAX_SUBAGENT_DEPTH + 1 {
        let Some(id) = next else { return Ok(None) };
        let Some(execution) = store.get_execution(tenant, id).await? else {
            return Ok(None);
        };
        match execution.parent_execution_id {
            Some(parent) => next = Some(parent),
            None => return Ok(Some(execution)),
        }
    }
    Ok(None)
}

/// What the execution answering a message gets: `{message}`, and `context` with the page the
/// message came from (`related_type`, `related_id`, `context_url`, `metadata`) when it says
/// any of them (absent parts are `null`), and a protocol's `extra_input` under its key.
fn execution_input(input: &MessageInput) -> Value {
    let metadata = input
        .metadata
        .as_object()
        .filter(|m| !m.is_empty())
        .map(|m| Value::Object(m.clone()));
    let mut out = json!({"message": input.content});
    if input.related_type.is_some()
        || input.related_id.is_some()
        || input.context_url.is_some()
        || metadata.is_some()
    {
        out["context"] = json!({
            "related_type": input.related_type,
            "related_id": input.related_id,
            "context_url": input.context_url,
            "metadata": metadata,
        });
    }
    if let Some((key, extra)) = &input.extra_input {
        out[*key] = extra.clone();
    }
    out
}

/// The user's message as stored: its text, context fields and metadata as sent (the
/// execution answering it is set by the caller or the store).
fn user_message(session_id: Id, input: &MessageInput) -> NewMessage {
    NewMessage {
        session_id,
        role: Role::User,
        content: input.content.clone(),
        execution_id: None,
        related_type: input.related_type.clone(),
        related_id: input.related_id.clone(),
        context_url: input.context_url.clone(),
        metadata: input.metadata.clone(),
    }
}
