//! In-process fan-out of a session's events to its live subscribers. Backends publish an
//! event here once it is committed (so a subscriber never sees an event that a replay
//! would not also return); `message.delta` events are published directly and never stored.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use stepwise_core::apikey::tenant_scoped_id;
use stepwise_core::{Event, Id};

use crate::Tenant;
use tokio::sync::broadcast;

/// How many events a subscriber may fall behind the live channel of its session. One that
/// falls further behind catches up from the store (the server's event streams do), so this
/// only bounds memory: every session being watched keeps a buffer of this many slots.
pub const SUBSCRIBER_BUFFER: usize = 64;

#[derive(Clone, Default)]
pub struct EventHub {
    channels: Arc<Mutex<HashMap<Id, broadcast::Sender<Arc<Event>>>>>,
}

impl EventHub {
    pub fn new() -> Self {
        Self::default()
    }

    /// A receiver of the session's events from now on.
    pub fn subscribe(&self, session_id: Id) -> broadcast::Receiver<Arc<Event>> {
        let mut channels = self.lock();
        channels
            .entry(session_id)
            .or_insert_with(|| broadcast::channel(SUBSCRIBER_BUFFER).0)
            .subscribe()
    }

    /// A receiver of one tenant's session events: keyed by tenant and session, so another
    /// tenant naming the same session id neither receives nor sends anything here.
    pub fn subscribe_scoped(
        &self,
        tenant: &Tenant,
        session_id: Id,
    ) -> broadcast::Receiver<Arc<Event>> {
        self.subscribe(tenant_scoped_id(tenant.as_str(), session_id))
    }

    /// Sends to the subscribers of `tenant`'s session `event.session_id`; never waits.
    pub fn publish_scoped(&self, tenant: &Tenant, event: Arc<Event>) {
        self.publish_to(tenant_scoped_id(tenant.as_str(), event.session_id), event);
    }

    /// Sends to the session's subscribers, if any; never waits.
    pub fn publish(&self, event: Arc<Event>) {
        self.publish_to(event.session_id, event);
    }

    fn publish_to(&self, key: Id, event: Arc<Event>) {
        let mut channels = self.lock();
        if let Some(tx) = channels.get(&key)
            && tx.send(event).is_err()
        {
            // Nobody listens any more: forget the channel.
            channels.remove(&key);
        }
    }

    /// Whether anyone listens to the session's events (backends that fetch events from
    /// elsewhere, such as other nodes, only do it for these sessions).
    pub fn has_subscribers(&self, session_id: Id) -> bool {
        self.lock()
            .get(&session_id)
            .is_some_and(|tx| tx.receiver_count() > 0)
    }

    pub fn subscriber_count(&self) -> usize {
        self.lock().values().map(|tx| tx.receiver_count()).sum()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Id, broadcast::Sender<Arc<Event>>>> {
        // A panic while holding this lock cannot leave the map inconsistent.
        self.channels.lock().unwrap_or_else(|e| e.into_inner())
    }
}
