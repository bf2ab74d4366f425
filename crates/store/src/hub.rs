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
        // Send outside the map's lock: waking a thousand subscribers of one session must
        // not hold up subscribing to, or publishing in, every other session.
        let Some(tx) = self.lock().get(&key).cloned() else {
            return;
        };
        if tx.send(event).is_err() {
            // Nobody listens any more: forget the channel (unless someone subscribed since).
            let mut channels = self.lock();
            if channels
                .get(&key)
                .is_some_and(|tx| tx.receiver_count() == 0)
            {
                channels.remove(&key);
            }
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

#[cfg(test)]
mod tests {
    use super::*;
    use stepwise_core::{EventType, Timestamp, new_id};

    fn event(session_id: Id, id: i64) -> Arc<Event> {
        Arc::new(Event {
            id,
            session_id,
            message_id: None,
            execution_id: None,
            event_type: EventType::StepCompleted,
            content: String::new(),
            metadata: serde_json::Value::Null,
            timestamp: Timestamp(0),
        })
    }

    #[test]
    fn sends_to_subscribers_and_forgets_sessions_nobody_watches() {
        let hub = EventHub::new();
        let session = new_id();
        let mut first = hub.subscribe(session);
        let mut second = hub.subscribe(session);
        hub.publish(event(session, 1));
        assert_eq!(first.try_recv().map(|e| e.id).ok(), Some(1));
        assert_eq!(second.try_recv().map(|e| e.id).ok(), Some(1));
        hub.publish(event(new_id(), 9));
        assert!(
            first.try_recv().is_err(),
            "another session's event is not sent here"
        );

        drop((first, second));
        hub.publish(event(session, 2));
        assert_eq!(
            hub.lock().len(),
            0,
            "a channel nobody listens to is forgotten"
        );
        let mut again = hub.subscribe(session);
        hub.publish(event(session, 3));
        assert_eq!(again.try_recv().map(|e| e.id).ok(), Some(3));
        assert_eq!(hub.subscriber_count(), 1);
    }
}
