//! A session's messages (its readable history).

use stepwise_core::{Id, Message};

use crate::{Ack, MessageQuery, MessagesAfter, NewMessage, Result, Tenant};

crate::domain! {
    $
    pub trait MessageStore, pass PassMessages, methods message_store_methods {
        /// Appends a message and bumps the session's `message_count` and `updated_at`.
        fn append_message(&self, tenant: &Tenant, new: NewMessage) -> Result<Message>;

        /// [`Self::append_message`] queued, not awaited: the message is stamped and checked
        /// now and answered as it will be stored, with an [`Ack`] that resolves once it is
        /// durable (`NotFound` when the session does not exist for this tenant). A session's queued writes (its messages, steps
        /// and events) commit in the order they were queued, so a run's lines cost it no
        /// wait for the disk; it awaits the last one before its status changes.
        fn queue_message(&self, tenant: &Tenant, new: NewMessage) -> Result<(Message, Ack<Message>)>;

        /// Oldest first (server time in microseconds, id as tie-break).
        fn list_messages(&self, tenant: &Tenant, session_id: Id, query: MessageQuery) -> Result<Vec<Message>>;

        /// The session's message rows past `after` (a position from an earlier answer, or
        /// [`START_POSITION`](crate::START_POSITION)), with the number of messages the session
        /// has, read together: what the [`SessionCache`](crate::SessionCache) asks on each
        /// [`list_session_messages`](crate::list_session_messages). A backend without a cache
        /// may answer every message as new ([`crate::cache::whole_messages`]).
        fn list_session_messages_after(&self, tenant: &Tenant, session_id: Id, after: i64) -> Result<MessagesAfter>;
    }
}
