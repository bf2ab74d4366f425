//! A session's event log and its live subscribers.

use std::sync::Arc;

use stepwise_core::{Event, Id};
use tokio::sync::broadcast;

use crate::{Ack, NewEvent, Result, Tenant};

crate::domain! {
    $
    pub trait EventStore, pass PassEvents, methods event_store_methods {
        /// Queues an event; its id (strictly increasing per session, from 1) is assigned when
        /// it commits, and subscribers get it then.
        fn append_event(&self, tenant: &Tenant, new: NewEvent) -> Result<Ack<Event>>;

        /// Stored events with id greater than `after`, in order, at most `limit`.
        fn list_events(&self, tenant: &Tenant, session_id: Id, after: i64, limit: u32) -> Result<Vec<Event>>;
        sync {
            /// Live events of a session from now on. Subscribe first, then replay from the store,
            /// then skip live events already replayed: that is gap-free and duplicate-free.
            fn subscribe(&self, tenant: &Tenant, session_id: Id) -> broadcast::Receiver<Arc<Event>>;

            /// A live-only event (`message.delta`): sent to subscribers, never stored.
            fn publish_live(&self, tenant: &Tenant, event: Event);
        }
    }
}
