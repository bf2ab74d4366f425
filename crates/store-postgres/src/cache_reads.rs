//! The reads behind the hot-session cache: a session's step rows, or its messages,
//! appended after a position, with the session's row count, in one statement (one
//! snapshot).
//!
//! The position is the steps' (or messages') `created_at`, stamped by the node that saved
//! them. With
//! several nodes and several writer tasks, rows do not commit in that order: a row stamped
//! earlier may commit after a reader saw a later one, and another node's clock may be
//! behind. So the next read does not start at the newest row read but at the time this
//! read began less [`RESEND_MICROS`] (`StepsAfter::next_position`; the cache skips rows
//! it holds), and the row count read in the same statement catches whatever is still
//! missing: the cache then reads the whole session (see `stepwise_store::cache`). A
//! session written in a burst is therefore read in full once, not on every restore.

use std::sync::atomic::Ordering;

use stepwise_core::{Id, Step, Timestamp, codec};
use stepwise_store::{MessageOrder, MessagesAfter, PositionedMessage};
use stepwise_store::{PositionedStep, Result, StepOrder, StepsAfter, Tenant};

use crate::PgStore;
use crate::sql::{self, args, map_pg, message_cols};

/// The commit lag (and clock skew) a read allows for: the next read starts this long
/// before the time this one began (one second).
const RESEND_MICROS: i64 = 1_000_000;

/// The session's message count (a row with no message when none is past `$3`) and its
/// messages appended after `$3`.
const MESSAGES_AFTER: &str = concat!(
    "WITH c AS (SELECT count(*) AS total FROM messages WHERE session_id = $1 AND tenant_id = $2) \
     SELECT c.total, ",
    message_cols!(),
    " FROM c LEFT JOIN messages m ON m.session_id = $1 AND m.tenant_id = $2 AND m.created_at > $3"
);

impl PgStore {
    /// See [`stepwise_store::StepStore::list_session_steps_after`].
    pub(crate) async fn session_steps_after(
        &self,
        tenant: &Tenant,
        session_id: Id,
        after: i64,
    ) -> Result<StepsAfter> {
        let sql = format!(
            "WITH c AS (SELECT count(*) AS total FROM executions e JOIN steps s ON s.execution_id = e.id \
                        WHERE e.session_id = $1 AND e.tenant_id = $2) \
             SELECT c.total, e.created_at AS execution_created_at, {} \
             FROM c LEFT JOIN (executions e JOIN steps s ON s.execution_id = e.id AND s.created_at > $3) \
                    ON e.session_id = $1 AND e.tenant_id = $2",
            sql::STEP_COLS
        );
        let started = self.now().0;
        let client = self.client().await?;
        let rows = client
            .query_typed(&sql, args![session_id, tenant.as_str(), after])
            .await
            .map_err(map_pg)?;
        let mut read = StepsAfter {
            next_position: Some(started.saturating_sub(RESEND_MICROS)),
            ..StepsAfter::default()
        };
        for row in &rows {
            read.total = row.try_get::<_, i64>("total").map_err(map_pg)?.max(0) as u64;
            let Some(executed) = row
                .try_get::<_, Option<i64>>("execution_created_at")
                .map_err(map_pg)?
            else {
                // The count's own row: no step after the position.
                continue;
            };
            let stored = sql::step_row(row)?;
            match codec::decode_step(&stored.payload) {
                Ok(body) => read.rows.push(PositionedStep {
                    position: stored.created_at.0,
                    order: StepOrder {
                        execution_created_at: Timestamp(executed),
                        execution_id: stored.execution_id,
                        step_number: stored.step_number,
                    },
                    item: Step::from_body(
                        stored.id,
                        stored.execution_id,
                        stored.session_id,
                        stored.step_number,
                        stored.kind,
                        body,
                        stored.created_at,
                    ),
                }),
                Err(e) => {
                    read.skipped += 1;
                    tracing::warn!(execution = %stored.execution_id, step = stored.step_number, error = %e, "skipping a stored step that cannot be decoded");
                }
            }
        }
        self.inner
            .decode_errors
            .fetch_add(read.skipped, Ordering::Relaxed);
        Ok(read)
    }

    /// See [`stepwise_store::MessageStore::list_session_messages_after`].
    pub(crate) async fn session_messages_after(
        &self,
        tenant: &Tenant,
        session_id: Id,
        after: i64,
    ) -> Result<MessagesAfter> {
        let started = self.now().0;
        let client = self.client().await?;
        let rows = client
            .query_typed(MESSAGES_AFTER, args![session_id, tenant.as_str(), after])
            .await
            .map_err(map_pg)?;
        let mut read = MessagesAfter {
            next_position: Some(started.saturating_sub(RESEND_MICROS)),
            ..MessagesAfter::default()
        };
        for row in &rows {
            read.total = row.try_get::<_, i64>("total").map_err(map_pg)?.max(0) as u64;
            if sql::get::<Option<Id>>(row, "id")?.is_none() {
                // The count's own row: no message after the position.
                continue;
            }
            let item = sql::message(row)?;
            read.rows.push(PositionedMessage {
                position: item.created_at.0,
                order: MessageOrder::of(&item),
                item,
            });
        }
        Ok(read)
    }
}
