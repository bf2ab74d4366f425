//! A step with its mirrored messages and events in one transaction (one commit):
//! [`StepStore::append_step_mirrored`](stepwise_store::StepStore::append_step_mirrored).
//!
//! The transaction locks the execution, then the session (the writer's order, so it cannot
//! deadlock with a batch), and runs after the writer's queue is flushed: events queued
//! before this call keep the lower ids.

use std::sync::Arc;

use stepwise_core::codec;
use stepwise_core::{Event, ExecutionStatus, Id, Message, Step, StepBody, Timestamp, new_id};
use stepwise_store::{
    Ack, NewEvent, NewStep, Result, StepAppend, StepMirror, StoreError, Tenant, message_created,
};

use crate::PgStore;
use crate::sql::{self, args, map_pg, map_pool};

impl PgStore {
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
        if new.step_number > i32::MAX as u32 {
            return Err(StoreError::invalid(
                "step_number",
                "the step number is too large",
            ));
        }
        let payload = codec::encode_step(&new.body, self.inner.options.compress_threshold);
        self.inner.writer.flush().await?;
        let now = self.now();
        let id = new_id();
        let mut client = self.inner.pool.get().await.map_err(map_pool)?;
        let pg: &mut tokio_postgres::Client = &mut client;
        let tx = pg.transaction().await.map_err(map_pg)?;
        let exec = tx
            .query_typed(
                "SELECT session_id, status FROM executions WHERE id = $1 AND tenant_id = $2 FOR NO KEY UPDATE",
                args![new.execution_id, tenant.as_str()],
            )
            .await
            .map_err(map_pg)?;
        let exec = exec.first().ok_or(StoreError::NotFound("execution"))?;
        let session_id: Option<Id> = sql::get(exec, "session_id")?;
        let status: String = sql::get(exec, "status")?;
        let finished = ExecutionStatus::parse(&status).is_some_and(ExecutionStatus::is_finished);
        let inserted = if finished {
            0
        } else {
            tx.execute_typed(
                "INSERT INTO steps (execution_id, step_number, id, tenant_id, session_id, kind, created_at, payload) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (execution_id, step_number) DO NOTHING",
                args![new.execution_id, new.step_number as i32, id, tenant.as_str(), session_id, new.kind.as_str(), now.0, payload.clone()],
            )
            .await
            .map_err(map_pg)?
        };
        if inserted == 0 {
            // Already there (or the execution is over): the same step again is a no-op.
            let rows = tx
                .query_typed(
                    &format!(
                        "SELECT {} FROM steps s WHERE s.execution_id = $1 AND s.step_number = $2",
                        sql::STEP_COLS
                    ),
                    args![new.execution_id, new.step_number as i32],
                )
                .await
                .map_err(map_pg)?;
            let Some(row) = rows.first() else {
                return Err(StoreError::InvalidState(format!(
                    "the execution is {status}; no more steps can be added"
                )));
            };
            let r = sql::step_row(row)?;
            let same = r.kind == new.kind
                && (r.payload == payload
                    || codec::decode_step(&r.payload).is_ok_and(|b| b == new.body));
            if !same {
                return Err(StoreError::Conflict(format!(
                    "step {} of this execution already exists with another body",
                    new.step_number
                )));
            }
            let body: StepBody = codec::decode_step(&r.payload).unwrap_or_default();
            let step = Step::from_body(
                r.id,
                r.execution_id,
                r.session_id,
                r.step_number,
                r.kind,
                body,
                r.created_at,
            );
            return Ok(Ack::ready(Ok(StepAppend {
                step,
                created: false,
            })));
        }
        mirror.check_session(session_id)?;
        let t = &new.body.token_usage;
        tx.execute_typed(
            "UPDATE executions SET step_count = GREATEST(step_count, $1), tokens_input = tokens_input + $2, \
             tokens_output = tokens_output + $3, tokens_total = tokens_total + $4, updated_at = $5 WHERE id = $6",
            args![i64::from(new.step_number), t.input as i64, t.output as i64, t.total as i64, now.0, new.execution_id],
        )
        .await
        .map_err(map_pg)?;
        let mut published = Vec::new();
        if let Some(session_id) = session_id.filter(|_| !mirror.is_empty()) {
            let messages: Vec<_> = mirror
                .messages
                .into_iter()
                .map(|m| m.into_message(now))
                .collect();
            published =
                insert_announced(&tx, tenant, session_id, &messages, mirror.events, now).await?;
        }
        tx.commit().await.map_err(map_pg)?;
        self.inner.relay.committed_locally(published);
        let step = Step::from_body(
            id,
            new.execution_id,
            session_id,
            new.step_number,
            new.kind,
            new.body,
            now,
        );
        Ok(Ack::ready(Ok(StepAppend {
            step,
            created: true,
        })))
    }
}

/// Inserts stored messages of one session (checked by the caller), each followed by its
/// `message.created` event, then `more` events of the session, in the caller's transaction:
/// the session's counters move once, and other nodes are rung at the commit. Returns the
/// events to hand to [`Relay::committed_locally`](crate::relay::Relay::committed_locally)
/// once the transaction has committed. The transaction must run after the writer's queue
/// is flushed, so that events queued before it keep the lower ids.
pub(crate) async fn insert_announced(
    tx: &tokio_postgres::Transaction<'_>,
    tenant: &Tenant,
    session_id: Id,
    messages: &[Message],
    more: Vec<NewEvent>,
    now: Timestamp,
) -> Result<Vec<(String, Arc<Event>)>> {
    let mut events = Vec::with_capacity(messages.len() + more.len());
    events.extend(messages.iter().map(message_created));
    events.extend(more);
    let rows = tx
        .query_typed(
            "UPDATE sessions SET message_count = message_count + $1, last_event_id = last_event_id + $2, \
             updated_at = CASE WHEN $1 > 0 OR status = 'abandoned' THEN $3 ELSE updated_at END, \
             status = CASE WHEN status = 'abandoned' THEN 'active' ELSE status END \
             WHERE id = $4 AND tenant_id = $5 RETURNING last_event_id",
            args![messages.len() as i64, events.len() as i64, now.0, session_id, tenant.as_str()],
        )
        .await
        .map_err(map_pg)?;
    let row = rows.first().ok_or(StoreError::NotFound("session"))?;
    let last: i64 = sql::get(row, "last_event_id")?;
    for m in messages {
        tx.execute_typed(
            "INSERT INTO messages (id, tenant_id, session_id, role, content, execution_id, related_type, related_id, context_url, metadata, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
            args![m.id, tenant.as_str(), m.session_id, m.role.as_str(), m.content, m.execution_id, m.related_type, m.related_id, m.context_url, sql::json_text(&m.metadata), now.0],
        )
        .await
        .map_err(map_pg)?;
    }
    let mut published = Vec::with_capacity(events.len());
    let first = last - events.len() as i64 + 1;
    for (seq, new) in (first..).zip(events) {
        tx.execute_typed(
            "INSERT INTO events (session_id, seq, tenant_id, message_id, execution_id, event_type, content, metadata, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
            args![session_id, seq, tenant.as_str(), new.message_id, new.execution_id, new.event_type.as_str(), new.content, sql::json_text(&new.metadata), now.0],
        )
        .await
        .map_err(map_pg)?;
        published.push((
            tenant.as_str().to_string(),
            Arc::new(Event {
                session_id,
                ..new.into_event(seq, now)
            }),
        ));
    }
    // The doorbell for other nodes, delivered at commit (as the writer rings it).
    tx.execute_typed(
        "SELECT pg_notify('stepwise_events', $1)",
        args![format!("{}:{last}", session_id.simple())],
    )
    .await
    .map_err(map_pg)?;
    Ok(published)
}
