//! A step with its mirrored messages and events in one writer job (one transaction, one
//! synced commit): [`StepStore::append_step_mirrored`](stepwise_store::StepStore::append_step_mirrored).

use std::sync::Arc;

use rusqlite::{Connection, OptionalExtension, params};
use stepwise_core::codec;
use stepwise_core::{Message, Timestamp, new_id};
use stepwise_store::{
    Ack, NewEvent, NewStep, Result, StepAppend, StepMirror, StoreError, Tenant, message_created,
};

use crate::SqliteStore;
use crate::messages::insert_message;
use crate::rows::{bid, json_text, opt_bid};
use crate::steps::insert_step;
use crate::writer::{Published, map_sqlite};

impl SqliteStore {
    pub(crate) async fn write_step_mirrored(
        &self,
        tenant: &Tenant,
        new: NewStep,
        mirror: StepMirror,
    ) -> Result<Ack<StepAppend>> {
        if new.step_number == 0 {
            return Err(StoreError::invalid(
                "step_number",
                "step numbers start at 1",
            ));
        }
        let tenant_key = tenant.clone();
        let now = self.now();
        // Encode (and compress) here, off the writer thread.
        let payload = codec::encode_step(&new.body, self.inner.options.compress_threshold);
        let id = new_id();
        self.inner
            .writer
            .submit(move |conn, published| {
                let tenant = tenant_key.as_str();
                let appended = insert_step(conn, tenant, new, payload, id, now)?;
                if appended.created && !mirror.is_empty() {
                    mirror.check_session(appended.step.session_id)?;
                    insert_mirror(conn, &tenant_key, mirror, now, published)?;
                }
                Ok(appended)
            })
            .await
    }
}

/// Inserts the mirror's messages and events (all of one session, checked by the caller),
/// moving the session's counters once; the events are published after the commit.
fn insert_mirror(
    conn: &Connection,
    tenant: &Tenant,
    mirror: StepMirror,
    now: Timestamp,
    published: &mut Published,
) -> Result<()> {
    let messages: Vec<_> = mirror
        .messages
        .into_iter()
        .map(|m| m.into_message(now))
        .collect();
    insert_announced(conn, tenant, &messages, mirror.events, now, published)
}

/// Inserts stored messages (all of one session, checked by the caller), each followed by
/// its `message.created` event, then `more` events of the session, moving the session's
/// counters once; the events are stamped `now` and published after the commit.
pub(crate) fn insert_announced(
    conn: &Connection,
    tenant: &Tenant,
    messages: &[Message],
    more: Vec<NewEvent>,
    now: Timestamp,
    published: &mut Published,
) -> Result<()> {
    let session_id = match (messages.first(), more.first()) {
        (Some(m), _) => m.session_id,
        (None, Some(e)) => e.session_id,
        (None, None) => return Ok(()),
    };
    let mut events = Vec::with_capacity(messages.len() + more.len());
    events.extend(messages.iter().map(message_created));
    events.extend(more);
    // One statement moves both counters and tells where the event ids start.
    let last: Option<i64> = conn
        .prepare_cached(
            "UPDATE sessions SET message_count = message_count + ?1, last_event_id = last_event_id + ?2, \
             updated_at = CASE WHEN ?1 > 0 OR status = 'abandoned' THEN ?3 ELSE updated_at END, \
             status = CASE WHEN status = 'abandoned' THEN 'active' ELSE status END \
             WHERE id = ?4 AND tenant_id = ?5 RETURNING last_event_id",
        )
        .and_then(|mut s| {
            s.query_row(
                params![messages.len() as i64, events.len() as i64, now.0, bid(session_id), tenant.as_str()],
                |r| r.get(0),
            )
            .optional()
        })
        .map_err(map_sqlite)?;
    let last = last.ok_or(StoreError::NotFound("session"))?;
    for m in messages {
        insert_message(conn, tenant.as_str(), m)?;
    }
    let first = last - events.len() as i64 + 1;
    for (seq, new) in (first..).zip(events) {
        conn.prepare_cached(
            "INSERT INTO events (session_id, seq, tenant_id, message_id, execution_id, event_type, content, metadata, created_at) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
        )
        .and_then(|mut s| {
            s.execute(params![bid(new.session_id), seq, tenant.as_str(), opt_bid(new.message_id), opt_bid(new.execution_id), new.event_type.as_str(), new.content, json_text(&new.metadata), now.0])
        })
        .map_err(map_sqlite)?;
        let event = new.into_event(seq, now);
        published.push((tenant.clone(), Arc::new(event)));
    }
    Ok(())
}
