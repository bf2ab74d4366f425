//! Session events on SQLite: queued appends numbered per session when they commit (and
//! published to subscribers then), replay from the store, and live-only events.

use std::sync::Arc;

use rusqlite::{Connection, OptionalExtension, params};
use stepwise_core::{Event, Id, Timestamp};
use stepwise_store::{Ack, NewEvent, Result, StoreError, Tenant};

use crate::rows::{self, bid, event_cols, json_text, opt_bid};
use crate::writer::{Published, map_sqlite};
use crate::{Inner, SqliteStore, count};
use tokio::sync::broadcast;

const NEXT_SEQ: &str = "UPDATE sessions SET last_event_id = last_event_id + 1 WHERE id = ?1 AND tenant_id = ?2 RETURNING last_event_id";
const INSERT_EVENT: &str = "INSERT INTO events (session_id, seq, tenant_id, message_id, execution_id, event_type, content, metadata, created_at) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)";
const LIST_EVENTS: &str = concat!(
    "SELECT ",
    event_cols!(),
    " FROM events WHERE session_id = ?1 AND tenant_id = ?2 AND seq > ?3 ORDER BY seq LIMIT ?4"
);
const OWNS_SESSION: &str = "SELECT COUNT(*) FROM sessions WHERE id = ?1 AND tenant_id = ?2";

/// Sessions remembered as owned before the set starts over.
const OWNED_SESSIONS_CAP: usize = 100_000;

impl SqliteStore {
    pub(crate) fn event_publish_live(&self, tenant: &Tenant, event: Event) {
        // Live events carry no row to check on commit: drop one aimed at a session the
        // tenant does not own, so nobody can inject into another tenant's stream.
        if self.inner.owns_session(tenant, event.session_id) {
            self.inner.hub.publish_scoped(tenant, Arc::new(event));
        } else {
            tracing::debug!(session = %event.session_id, "dropping a live event for a session of another tenant");
        }
    }
}

impl Inner {
    /// Whether `tenant` owns the session; positive answers are remembered (ownership never
    /// changes), so the per-token cost of a live stream is one set lookup.
    fn owns_session(&self, tenant: &Tenant, session_id: Id) -> bool {
        let key = stepwise_core::apikey::tenant_scoped_id(tenant.as_str(), session_id);
        if self
            .owned_sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&key)
        {
            return true;
        }
        let Ok(conn) = self.take_reader() else {
            return false;
        };
        let owned = count(
            &conn,
            OWNS_SESSION,
            params![bid(session_id), tenant.as_str()],
        )
        .is_ok_and(|n| n > 0);
        self.put_reader(conn);
        if owned {
            let mut known = self
                .owned_sessions
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            if known.len() >= OWNED_SESSIONS_CAP {
                known.clear();
            }
            known.insert(key);
        }
        owned
    }
}

impl stepwise_store::EventStore for SqliteStore {
    async fn append_event(&self, tenant: &Tenant, new: NewEvent) -> Result<Ack<Event>> {
        let tenant = tenant.clone();
        let now = self.now();
        self.inner
            .writer
            .submit(move |conn, published| insert_event(conn, &tenant, new, now, published))
            .await
    }

    async fn list_events(
        &self,
        tenant: &Tenant,
        session_id: Id,
        after: i64,
        limit: u32,
    ) -> Result<Vec<Event>> {
        let tenant = tenant.as_str().to_string();
        self.read(move |conn, _| {
            conn.prepare_cached(LIST_EVENTS)
                .and_then(|mut s| {
                    s.query_map(params![bid(session_id), tenant, after, limit], rows::event)?
                        .collect()
                })
                .map_err(map_sqlite)
        })
        .await
    }

    fn subscribe(&self, tenant: &Tenant, session_id: Id) -> broadcast::Receiver<Arc<Event>> {
        self.inner.hub.subscribe_scoped(tenant, session_id)
    }

    fn publish_live(&self, tenant: &Tenant, event: Event) {
        self.event_publish_live(tenant, event)
    }
}

/// Appends an event on the writer's connection, numbered next in its session, and
/// queues it for the subscribers once the batch commits. `NotFound` without the session.
pub(crate) fn insert_event(
    conn: &Connection,
    tenant: &Tenant,
    new: NewEvent,
    now: Timestamp,
    published: &mut Published,
) -> Result<Event> {
    let seq: Option<i64> = conn
        .prepare_cached(NEXT_SEQ)
        .and_then(|mut s| {
            s.query_row(params![bid(new.session_id), tenant.as_str()], |r| r.get(0))
                .optional()
        })
        .map_err(map_sqlite)?;
    let seq = seq.ok_or(StoreError::NotFound("session"))?;
    conn.prepare_cached(INSERT_EVENT)
        .and_then(|mut s| {
            s.execute(params![
                bid(new.session_id),
                seq,
                tenant.as_str(),
                opt_bid(new.message_id),
                opt_bid(new.execution_id),
                new.event_type.as_str(),
                new.content,
                json_text(&new.metadata),
                now.0
            ])
        })
        .map_err(map_sqlite)?;
    let event = new.into_event(seq, now);
    published.push((tenant.clone(), Arc::new(event.clone())));
    Ok(event)
}
