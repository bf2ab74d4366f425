//! A session's event log and its live subscribers.

use std::future::Future;
use std::sync::Arc;

use stepwise_core::{Event, Id};
use tokio::sync::broadcast;

use crate::{Ack, NewEvent, Result, Tenant};

pub trait EventStore: Send + Sync {
    /// Queues an event; its id (strictly increasing per session, from 1) is assigned when
    /// it commits, and subscribers get it then.
    fn append_event(
        &self,
        tenant: &Tenant,
        new: NewEvent,
    ) -> impl Future<Output = Result<Ack<Event>>> + Send;

    /// Stored events with id greater than `after`, in order, at most `limit`.
    fn list_events(
        &self,
        tenant: &Tenant,
        session_id: Id,
        after: i64,
        limit: u32,
    ) -> impl Future<Output = Result<Vec<Event>>> + Send;

    /// Live events of a session from now on. Subscribe first, then replay from the store,
    /// then skip live events already replayed: that is gap-free and duplicate-free.
    fn subscribe(&self, tenant: &Tenant, session_id: Id) -> broadcast::Receiver<Arc<Event>>;

    /// A live-only event (`message.delta`): sent to subscribers, never stored.
    fn publish_live(&self, tenant: &Tenant, event: Event);
}

/// Passes the whole domain through to the wrapped store (see [`crate::Layer`]).
pub trait PassEvents: crate::Layer {}

impl<L: PassEvents> EventStore for L {
    fn append_event(
        &self,
        tenant: &Tenant,
        new: NewEvent,
    ) -> impl Future<Output = Result<Ack<Event>>> + Send {
        self.layer_inner().append_event(tenant, new)
    }

    fn list_events(
        &self,
        tenant: &Tenant,
        session_id: Id,
        after: i64,
        limit: u32,
    ) -> impl Future<Output = Result<Vec<Event>>> + Send {
        self.layer_inner()
            .list_events(tenant, session_id, after, limit)
    }

    fn subscribe(&self, tenant: &Tenant, session_id: Id) -> broadcast::Receiver<Arc<Event>> {
        self.layer_inner().subscribe(tenant, session_id)
    }

    fn publish_live(&self, tenant: &Tenant, event: Event) {
        self.layer_inner().publish_live(tenant, event)
    }
}
