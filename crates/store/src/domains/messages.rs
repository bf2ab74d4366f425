//! A session's messages (its readable history).

use std::future::Future;

use stepwise_core::{Id, Message};

use crate::{MessageQuery, MessagesAfter, NewMessage, Result, Tenant};

pub trait MessageStore: Send + Sync {
    /// Appends a message and bumps the session's `message_count` and `updated_at`.
    fn append_message(
        &self,
        tenant: &Tenant,
        new: NewMessage,
    ) -> impl Future<Output = Result<Message>> + Send;

    /// Oldest first (server time in microseconds, id as tie-break).
    fn list_messages(
        &self,
        tenant: &Tenant,
        session_id: Id,
        query: MessageQuery,
    ) -> impl Future<Output = Result<Vec<Message>>> + Send;

    /// The session's message rows past `after` (a position from an earlier answer, or
    /// [`START_POSITION`](crate::START_POSITION)), with the number of messages the session
    /// has, read together: what the [`SessionCache`](crate::SessionCache) asks on each
    /// [`list_session_messages`](crate::list_session_messages). A backend without a cache
    /// may answer every message as new ([`crate::cache::whole_messages`]).
    fn list_session_messages_after(
        &self,
        tenant: &Tenant,
        session_id: Id,
        after: i64,
    ) -> impl Future<Output = Result<MessagesAfter>> + Send;
}

/// Passes the whole domain through to the wrapped store (see [`crate::Layer`]).
pub trait PassMessages: crate::Layer {}

impl<L: PassMessages> MessageStore for L {
    fn append_message(
        &self,
        tenant: &Tenant,
        new: NewMessage,
    ) -> impl Future<Output = Result<Message>> + Send {
        self.layer_inner().append_message(tenant, new)
    }

    fn list_messages(
        &self,
        tenant: &Tenant,
        session_id: Id,
        query: MessageQuery,
    ) -> impl Future<Output = Result<Vec<Message>>> + Send {
        self.layer_inner().list_messages(tenant, session_id, query)
    }

    fn list_session_messages_after(
        &self,
        tenant: &Tenant,
        session_id: Id,
        after: i64,
    ) -> impl Future<Output = Result<MessagesAfter>> + Send {
        self.layer_inner()
            .list_session_messages_after(tenant, session_id, after)
    }
}
