//! The reads behind the hot-session cache: a session's step rows, or its messages, past a
//! row id, with the session's row count, in one read transaction (one snapshot of the WAL).
//!
//! The position is the steps (or messages) table's `rowid`. The one writer thread inserts rows one
//! after another and commits in that order, so every snapshot a reader sees holds a prefix
//! of the rowids; a new row's rowid is above every row still stored, so above every row of
//! a session that still exists. The row count read in the same snapshot is the cache's
//! check all the same (see `stepwise_store::cache`).

use std::sync::atomic::Ordering;

use rusqlite::{TransactionBehavior, params};
use stepwise_core::{Id, Timestamp};
use stepwise_store::{
    MessageOrder, MessagesAfter, PositionedMessage, PositionedStep, Result, StepOrder, StepsAfter,
    Tenant,
};

use crate::{SqliteStore, count};

const COUNT_SESSION_STEPS: &str = "SELECT COUNT(*) FROM executions e JOIN steps s ON s.execution_id = e.id \
     WHERE e.session_id = ?1 AND e.tenant_id = ?2";
const COUNT_SESSION_MESSAGES: &str =
    "SELECT COUNT(*) FROM messages WHERE session_id = ?1 AND tenant_id = ?2";
const MESSAGES_AFTER: &str = concat!(
    "SELECT ",
    message_cols!(),
    ", rowid FROM messages WHERE session_id = ?1 AND tenant_id = ?2 AND rowid > ?3 ORDER BY rowid"
);
use crate::rows::{self, bid, message_cols};
use crate::steps::{STEP_COLS, decode_rows, step_row};
use crate::writer::map_sqlite;

impl SqliteStore {
    /// See [`stepwise_store::StepStore::list_session_steps_after`].
    pub(crate) async fn session_steps_after(
        &self,
        tenant: &Tenant,
        session_id: Id,
        after: i64,
    ) -> Result<StepsAfter> {
        let tenant = tenant.as_str().to_string();
        self.read(move |conn, inner| {
            let tx = rusqlite::Transaction::new_unchecked(conn, TransactionBehavior::Deferred)
                .map_err(map_sqlite)?;
            let total = count(&tx, COUNT_SESSION_STEPS, params![bid(session_id), tenant])?;
            let rows = tx
                .prepare_cached(&format!(
                    "SELECT {STEP_COLS}, e.created_at, s.rowid FROM executions e JOIN steps s ON s.execution_id = e.id \
                     WHERE e.session_id = ?1 AND e.tenant_id = ?2 AND s.rowid > ?3 ORDER BY s.rowid"
                ))
                .and_then(|mut s| {
                    s.query_map(params![bid(session_id), tenant, after], |r| {
                        // The step columns, then the execution's time and the rowid.
                        let step = step_row(r)?;
                        Ok((r.get::<_, i64>(7)?, r.get::<_, i64>(8)?, step))
                    })?
                    .collect::<rusqlite::Result<Vec<_>>>()
                })
                .map_err(map_sqlite)?;
            tx.finish().map_err(map_sqlite)?;
            let mut meta = Vec::with_capacity(rows.len());
            let mut step_rows = Vec::with_capacity(rows.len());
            for (executed, position, step) in rows {
                meta.push((executed, position));
                step_rows.push(step);
            }
            let mut read = StepsAfter {
                total,
                rows: Vec::with_capacity(step_rows.len()),
                skipped: 0,
                whole: false,
                // Rowids follow commit order (one writer): the highest one read is exact.
                next_position: None,
            };
            for ((executed, position), decoded) in meta.into_iter().zip(decode_rows(step_rows)) {
                match decoded {
                    Ok(step) => read.rows.push(PositionedStep {
                        position,
                        order: StepOrder {
                            execution_created_at: Timestamp(executed),
                            execution_id: step.execution_id,
                            step_number: step.step_number,
                        },
                        item: step,
                    }),
                    Err((execution, number, e)) => {
                        read.skipped += 1;
                        tracing::warn!(%execution, step = number, error = %e, "skipping a stored step that cannot be decoded");
                    }
                }
            }
            inner.decode_errors.fetch_add(read.skipped, Ordering::Relaxed);
            Ok(read)
        })
        .await
    }

    /// See [`stepwise_store::MessageStore::list_session_messages_after`].
    pub(crate) async fn session_messages_after(
        &self,
        tenant: &Tenant,
        session_id: Id,
        after: i64,
    ) -> Result<MessagesAfter> {
        let tenant = tenant.as_str().to_string();
        self.read(move |conn, _| {
            let tx = rusqlite::Transaction::new_unchecked(conn, TransactionBehavior::Deferred)
                .map_err(map_sqlite)?;
            let total = count(
                &tx,
                COUNT_SESSION_MESSAGES,
                params![bid(session_id), tenant],
            )?;
            let rows = tx
                .prepare_cached(MESSAGES_AFTER)
                .and_then(|mut s| {
                    s.query_map(params![bid(session_id), tenant, after], |r| {
                        let item = rows::message(r)?;
                        Ok(PositionedMessage {
                            position: r.get(10)?,
                            order: MessageOrder::of(&item),
                            item,
                        })
                    })?
                    .collect::<rusqlite::Result<Vec<_>>>()
                })
                .map_err(map_sqlite)?;
            tx.finish().map_err(map_sqlite)?;
            Ok(MessagesAfter {
                total,
                rows,
                skipped: 0,
                whole: false,
                // Rowids follow commit order (one writer): the highest one read is exact.
                next_position: None,
            })
        })
        .await
    }
}
