//! Session events in the files backend: appends numbered per session (published once
//! written), replay, and live-only events for sessions the tenant owns.

use std::sync::Arc;

use stepwise_core::{Event, Id};
use stepwise_store::{Ack, NewEvent, Result, StoreError, Tenant};
use tokio::sync::broadcast;

use crate::state::Key;
use crate::{FileStore, check_depth};

impl FileStore {
    pub(crate) fn event_subscribe(
        &self,
        tenant: &Tenant,
        session_id: Id,
    ) -> broadcast::Receiver<Arc<Event>> {
        if self.owns_session(tenant, session_id) {
            self.inner.shared.hub.subscribe(session_id)
        } else {
            // Another tenant's id behaves like an unknown one: nothing ever arrives.
            self.inner.shared.nowhere.subscribe()
        }
    }

    pub(crate) fn event_publish_live(&self, tenant: &Tenant, event: Event) {
        if self.owns_session(tenant, event.session_id) {
            self.inner.shared.hub.publish(Arc::new(event));
        }
    }
}

impl stepwise_store::EventStore for FileStore {
    async fn append_event(&self, tenant: &Tenant, new: NewEvent) -> Result<Ack<Event>> {
        check_depth("metadata", [&new.metadata])?;
        let mut state = self.lock();
        let now = self.now();
        let Some(container) = state.session_mut(tenant.as_str(), new.session_id) else {
            return Err(StoreError::NotFound("session"));
        };
        container.last_event_id += 1;
        let event = new.into_event(container.last_event_id, now);
        container.events.push(event.clone());
        state.pending.events.push(Arc::new(event.clone()));
        state.touch(
            &Key {
                tenant: tenant.as_str().to_string(),
                session: Some(event.session_id),
            },
            false,
        );
        Ok(self.enqueue(&mut state, event))
    }

    async fn list_events(
        &self,
        tenant: &Tenant,
        session_id: Id,
        after: i64,
        limit: u32,
    ) -> Result<Vec<Event>> {
        let state = self.lock();
        let Some(container) = state.session(tenant.as_str(), session_id) else {
            return Ok(Vec::new());
        };
        // Ids are dense from 1, so the first event after `after` sits at index `after`.
        let start = container.events.partition_point(|e| e.id <= after);
        Ok(container.events[start..]
            .iter()
            .take(limit as usize)
            .cloned()
            .collect())
    }

    fn subscribe(&self, tenant: &Tenant, session_id: Id) -> broadcast::Receiver<Arc<Event>> {
        self.event_subscribe(tenant, session_id)
    }

    fn publish_live(&self, tenant: &Tenant, event: Event) {
        self.event_publish_live(tenant, event)
    }
}
