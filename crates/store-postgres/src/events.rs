//! A session's events on PostgreSQL: appended through the group-commit writer (which
//! numbers them and announces them to other nodes), listed after a sequence number, and
//! the live stream of this node (see `relay`).

use std::sync::Arc;

use stepwise_core::{Event, Id};
use stepwise_store::{Ack, NewEvent, Result, Tenant};
use tokio::sync::broadcast;

use crate::PgStore;
use crate::sql::{self, args, event_cols, json_text, map_pg};
use crate::writer::EventJob;

const EVENTS_AFTER: &str = concat!(
    "SELECT ",
    event_cols!(),
    " FROM events WHERE session_id = $1 AND tenant_id = $2 AND seq > $3 ORDER BY seq LIMIT $4"
);

pub(crate) fn subscribe(
    store: &PgStore,
    tenant: &Tenant,
    session_id: Id,
) -> broadcast::Receiver<Arc<Event>> {
    store.inner.relay.subscribe(tenant.as_str(), session_id)
}

pub(crate) fn publish_live(store: &PgStore, tenant: &Tenant, event: Event) {
    store.inner.relay.publish_live(tenant.as_str(), event);
}

impl PgStore {
    /// An event checked and stamped, ready for the writer (which numbers it).
    pub(crate) fn event_job(&self, tenant: &Tenant, new: NewEvent) -> Result<EventJob> {
        sql::check_text("content", &new.content)?;
        Ok(EventJob {
            tenant: tenant.as_str().to_string(),
            metadata: json_text(&new.metadata),
            new,
            now: self.now(),
        })
    }
}

impl stepwise_store::EventStore for PgStore {
    async fn append_event(&self, tenant: &Tenant, new: NewEvent) -> Result<Ack<Event>> {
        let job = self.event_job(tenant, new)?;
        self.inner.writer.event(job).await
    }

    async fn list_events(
        &self,
        tenant: &Tenant,
        session_id: Id,
        after: i64,
        limit: u32,
    ) -> Result<Vec<Event>> {
        let client = self.client().await?;
        let rows = client
            .query_typed(
                EVENTS_AFTER,
                args![session_id, tenant.as_str(), after, i64::from(limit)],
            )
            .await
            .map_err(map_pg)?;
        sql::collect(&rows, sql::event)
    }

    fn subscribe(&self, tenant: &Tenant, session_id: Id) -> broadcast::Receiver<Arc<Event>> {
        subscribe(self, tenant, session_id)
    }

    fn publish_live(&self, tenant: &Tenant, event: Event) {
        publish_live(self, tenant, event)
    }
}
