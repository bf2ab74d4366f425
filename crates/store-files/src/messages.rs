//! Messages in the files backend: append (bumping the session's count) and list in
//! server-time order.

use stepwise_core::{Id, Message};
use stepwise_store::{Ack, MessageQuery, NewMessage, Result, StoreError, Tenant};

use crate::state::Key;
use crate::{FileStore, check_depth};

impl stepwise_store::MessageStore for FileStore {
    async fn append_message(&self, tenant: &Tenant, new: NewMessage) -> Result<Message> {
        self.queue_message(tenant, new).await?.1.await
    }

    async fn queue_message(
        &self,
        tenant: &Tenant,
        new: NewMessage,
    ) -> Result<(Message, Ack<Message>)> {
        check_depth("metadata", [&new.metadata])?;
        let session_id = new.session_id;
        let (queued, ack) = {
            let mut state = self.lock();
            // Read the clock under the lock, so concurrent appends are stored in time order.
            let now = self.now();
            let message = new.into_message(now);
            let Some(container) = state.session_mut(tenant.as_str(), session_id) else {
                return Err(StoreError::NotFound("session"));
            };
            container.messages.push(message.clone());
            if let Some(session) = container.session.as_mut() {
                session.message_count += 1;
                if session.first_message.is_none() && message.role == stepwise_core::Role::User {
                    session.first_message = Some(first_message_of(&message.content));
                }
                session.updated_at = now;
                crate::state::reactivate(session, now);
            }
            state.touch(
                &Key {
                    tenant: tenant.as_str().to_string(),
                    session: Some(session_id),
                },
                true,
            );
            (message.clone(), self.enqueue(&mut state, message))
        };
        Ok((queued, ack))
    }

    /// No session cache here: every message of the session is new.
    async fn list_session_messages_after(
        &self,
        tenant: &Tenant,
        session_id: Id,
        _after: i64,
    ) -> Result<stepwise_store::MessagesAfter> {
        let messages = self
            .list_messages(tenant, session_id, MessageQuery::default())
            .await?;
        Ok(stepwise_store::cache::whole_messages(messages))
    }

    async fn list_messages(
        &self,
        tenant: &Tenant,
        session_id: Id,
        query: MessageQuery,
    ) -> Result<Vec<Message>> {
        let state = self.lock();
        let Some(container) = state.session(tenant.as_str(), session_id) else {
            return Ok(Vec::new());
        };
        let after = match query.after {
            Some(after) => {
                let found = container
                    .messages
                    .iter()
                    .find(|m| m.id == after)
                    .ok_or_else(|| {
                        StoreError::invalid("after", "no such message in this session")
                    })?;
                Some((found.created_at, found.id))
            }
            None => None,
        };
        let roles = query.roles.filter(|r| !r.is_empty());
        let matching = container
            .messages
            .iter()
            .filter(|m| after.is_none_or(|a| (m.created_at, m.id) > a))
            .filter(|m| roles.as_ref().is_none_or(|r| r.contains(&m.role)))
            .take(query.limit.map_or(usize::MAX, |l| l as usize))
            .cloned()
            .collect();
        Ok(matching)
    }
}

/// A session's `first_message`: its first user message, cut to 200 characters.
pub(crate) fn first_message_of(content: &str) -> String {
    content
        .chars()
        .take(stepwise_core::summary::MAX_REQUEST_CHARS)
        .collect()
}
