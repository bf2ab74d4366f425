//! Agent memory steps on SQLite: queued appends (idempotent per step number) and reads that
//! decode payloads, on several threads for a long session.

use std::sync::atomic::Ordering;

use rusqlite::{OptionalExtension, params};
use stepwise_core::codec;
use stepwise_core::{ExecutionStatus, Id, Step, StepBody, StepKind, Timestamp, new_id};
use stepwise_store::rules::check_step_number;
use stepwise_store::{Ack, Loaded, NewStep, Result, StepAppend, StoreError, Tenant};

use crate::rows::{Bid, bid, opt_bid};
use crate::writer::map_sqlite;
use crate::{Inner, SqliteStore};

/// The columns [`step_row`] reads, by position.
macro_rules! step_cols {
    () => {
        "s.id, s.execution_id, s.session_id, s.step_number, s.kind, s.created_at, s.payload"
    };
}

/// The step columns, for queries assembled elsewhere (the hot-session cache's read).
pub(crate) const STEP_COLS: &str = step_cols!();
const EXECUTION_OF_STEP: &str =
    "SELECT session_id, status FROM executions WHERE id = ?1 AND tenant_id = ?2";
/// A step in an abandoned session makes it active again (a no-op for any other session).
const REACTIVATE_SESSION: &str =
    "UPDATE sessions SET status = 'active', updated_at = ?1 WHERE id = ?2 AND status = 'abandoned'";
const INSERT_STEP: &str = "INSERT INTO steps (execution_id, step_number, id, tenant_id, session_id, kind, created_at, payload) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) ON CONFLICT (execution_id, step_number) DO NOTHING";
const ADVANCE_EXECUTION: &str = "UPDATE executions SET step_count = MAX(step_count, ?1), tokens_input = tokens_input + ?2, tokens_output = tokens_output + ?3, \
     tokens_total = tokens_total + ?4, updated_at = ?5 WHERE id = ?6";
pub(crate) const SELECT_STEP: &str = concat!(
    "SELECT ",
    step_cols!(),
    " FROM steps s WHERE s.execution_id = ?1 AND s.step_number = ?2"
);
const LIST_STEPS: &str = concat!(
    "SELECT ",
    step_cols!(),
    " FROM steps s WHERE s.execution_id = ?1 AND s.tenant_id = ?2 ORDER BY s.step_number"
);
const LIST_SESSION_STEPS: &str = concat!(
    "SELECT ",
    step_cols!(),
    " FROM executions e JOIN steps s ON s.execution_id = e.id \
     WHERE e.session_id = ?1 AND e.tenant_id = ?2 ORDER BY e.created_at, e.id, s.step_number"
);

/// Rows from which a long restore is decoded on several threads (below it, one thread is
/// quicker than starting others).
const PARALLEL_DECODE_ROWS: usize = 256;

pub(crate) struct StepRow {
    pub(crate) id: Id,
    pub(crate) execution_id: Id,
    pub(crate) session_id: Option<Id>,
    pub(crate) step_number: u32,
    pub(crate) kind: StepKind,
    pub(crate) created_at: Timestamp,
    pub(crate) payload: Vec<u8>,
}

/// A step row of `step_cols!`, read by position.
pub(crate) fn step_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<StepRow> {
    let kind = match row.get_ref(4)? {
        rusqlite::types::ValueRef::Text(text) => {
            std::str::from_utf8(text).ok().and_then(StepKind::parse)
        }
        _ => None,
    };
    Ok(StepRow {
        id: row.get::<_, Bid>(0)?.0,
        execution_id: row.get::<_, Bid>(1)?.0,
        session_id: row.get::<_, Option<Bid>>(2)?.map(|b| b.0),
        step_number: row.get::<_, i64>(3)?.clamp(0, i64::from(u32::MAX)) as u32,
        kind: kind.unwrap_or(StepKind::Action),
        created_at: Timestamp(row.get(5)?),
        payload: row.get(6)?,
    })
}

impl Inner {
    /// Decodes step rows, skipping (and counting) the ones that cannot be decoded.
    fn decode_steps(&self, rows: Vec<StepRow>) -> Loaded<Step> {
        let decoded = decode_rows(rows);
        let mut items = Vec::with_capacity(decoded.len());
        let mut skipped = 0;
        for step in decoded {
            match step {
                Ok(step) => items.push(step),
                Err((execution, number, e)) => {
                    skipped += 1;
                    tracing::warn!(%execution, step = number, error = %e, "skipping a stored step that cannot be decoded");
                }
            }
        }
        self.decode_errors.fetch_add(skipped, Ordering::Relaxed);
        Loaded { items, skipped }
    }
}

pub(crate) type Decoded = std::result::Result<Step, (Id, u32, codec::DecodeError)>;

/// Decodes the rows' payloads, in order. Decompressing and parsing is most of a restore's
/// time, and rows are independent: a long session is split over the machine's cores.
///
/// The helper threads only borrow the rows: the payloads are freed here, by the thread that
/// read them, after every part is decoded (a free from another thread would take the
/// allocator's lock of this thread's heap on every row, while this thread allocates too).
pub(crate) fn decode_rows(rows: Vec<StepRow>) -> Vec<Decoded> {
    let threads = decode_threads();
    if rows.len() < PARALLEL_DECODE_ROWS || threads < 2 {
        return rows.iter().map(decode_row).collect();
    }
    let chunk = rows.len().div_ceil(threads);
    let mut parts = rows.chunks(chunk);
    let first = parts.next().unwrap_or_default();
    std::thread::scope(|scope| {
        let handles: Vec<_> = parts
            .map(|part| scope.spawn(move || part.iter().map(decode_row).collect::<Vec<_>>()))
            .collect();
        // This thread decodes the first part while the others decode theirs.
        let mut out: Vec<Decoded> = Vec::with_capacity(rows.len());
        out.extend(first.iter().map(decode_row));
        for handle in handles {
            match handle.join() {
                Ok(part) => out.extend(part),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        out
    })
}

/// How many threads a long read is decoded on: the cores this process may use, at most 8.
/// Read once: the standard library answers from the cgroup files on every call.
fn decode_threads() -> usize {
    static THREADS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *THREADS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get().min(8)))
}

fn decode_row(row: &StepRow) -> Decoded {
    match codec::decode_step(&row.payload) {
        Ok(body) => Ok(Step::from_body(
            row.id,
            row.execution_id,
            row.session_id,
            row.step_number,
            row.kind,
            body,
            row.created_at,
        )),
        Err(e) => Err((row.execution_id, row.step_number, e)),
    }
}

/// Inserts step `new` unless the same step is stored already (then answers it with
/// `created: false`); another body at that number is a `Conflict`.
pub(crate) fn insert_step(
    conn: &rusqlite::Connection,
    tenant: &str,
    new: NewStep,
    payload: Vec<u8>,
    id: Id,
    now: Timestamp,
) -> Result<StepAppend> {
    let exec: Option<(Option<Bid>, String)> = conn
        .prepare_cached(EXECUTION_OF_STEP)
        .and_then(|mut s| {
            s.query_row(params![bid(new.execution_id), tenant], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .optional()
        })
        .map_err(map_sqlite)?;
    let (session_id, status) = exec.ok_or(StoreError::NotFound("execution"))?;
    let session_id = session_id.map(|b| b.0);
    let finished = ExecutionStatus::parse(&status).is_some_and(ExecutionStatus::is_finished);
    let inserted = if finished {
        0
    } else {
        conn.prepare_cached(INSERT_STEP)
            .and_then(|mut s| {
                s.execute(params![
                    bid(new.execution_id),
                    new.step_number,
                    bid(id),
                    tenant,
                    opt_bid(session_id),
                    new.kind.as_str(),
                    now.0,
                    payload
                ])
            })
            .map_err(map_sqlite)?
    };
    if inserted == 1 {
        let t = &new.body.token_usage;
        conn.prepare_cached(ADVANCE_EXECUTION)
            .and_then(|mut s| {
                s.execute(params![
                    new.step_number,
                    t.input as i64,
                    t.output as i64,
                    t.total as i64,
                    now.0,
                    bid(new.execution_id)
                ])
            })
            .map_err(map_sqlite)?;
        if let Some(session) = session_id {
            conn.prepare_cached(REACTIVATE_SESSION)
                .and_then(|mut s| s.execute(params![now.0, bid(session)]))
                .map_err(map_sqlite)?;
        }
        let step = Step::from_body(
            id,
            new.execution_id,
            session_id,
            new.step_number,
            new.kind,
            new.body,
            now,
        );
        return Ok(StepAppend {
            step,
            created: true,
        });
    }
    // Already there (or the execution is over): the same step again is a no-op.
    let existing = conn
        .prepare_cached(SELECT_STEP)
        .and_then(|mut s| {
            s.query_row(params![bid(new.execution_id), new.step_number], step_row)
                .optional()
        })
        .map_err(map_sqlite)?;
    let Some(existing) = existing else {
        return Err(StoreError::InvalidState(format!(
            "the execution is {status}; no more steps can be added"
        )));
    };
    let same = existing.kind == new.kind
        && (existing.payload == payload
            || codec::decode_step(&existing.payload).is_ok_and(|b| b == new.body));
    if !same {
        return Err(StoreError::Conflict(format!(
            "step {} of this execution already exists with another body",
            new.step_number
        )));
    }
    let body: StepBody = codec::decode_step(&existing.payload).unwrap_or_default();
    let step = Step::from_body(
        existing.id,
        existing.execution_id,
        existing.session_id,
        existing.step_number,
        existing.kind,
        body,
        existing.created_at,
    );
    Ok(StepAppend {
        step,
        created: false,
    })
}

impl stepwise_store::StepStore for SqliteStore {
    async fn append_step(&self, tenant: &Tenant, new: NewStep) -> Result<Ack<StepAppend>> {
        check_step_number(new.step_number)?;
        let tenant = tenant.as_str().to_string();
        let now = self.now();
        // Encode (and compress) here, off the writer thread.
        let payload = codec::encode_step(&new.body, self.inner.options.compress_threshold);
        let id = new_id();
        // insert_step refuses (missing execution, finished, another body) before it
        // writes: no savepoint needed.
        self.inner
            .writer
            .submit_checked(move |conn, _| insert_step(conn, &tenant, new, payload, id, now))
            .await
    }

    async fn append_step_mirrored(
        &self,
        tenant: &Tenant,
        new: NewStep,
        mirror: stepwise_store::StepMirror,
    ) -> Result<Ack<StepAppend>> {
        self.write_step_mirrored(tenant, new, mirror).await
    }

    async fn list_steps(&self, tenant: &Tenant, execution_id: Id) -> Result<Loaded<Step>> {
        let tenant = tenant.as_str().to_string();
        self.read(move |conn, inner| {
            let rows = conn
                .prepare_cached(LIST_STEPS)
                .and_then(|mut s| {
                    s.query_map(params![bid(execution_id), tenant], step_row)?
                        .collect::<rusqlite::Result<Vec<_>>>()
                })
                .map_err(map_sqlite)?;
            Ok(inner.decode_steps(rows))
        })
        .await
    }

    async fn list_session_steps(&self, tenant: &Tenant, session_id: Id) -> Result<Loaded<Step>> {
        let tenant = tenant.as_str().to_string();
        self.read(move |conn, inner| {
            let rows = conn
                .prepare_cached(LIST_SESSION_STEPS)
                .and_then(|mut s| {
                    s.query_map(params![bid(session_id), tenant], step_row)?
                        .collect::<rusqlite::Result<Vec<_>>>()
                })
                .map_err(map_sqlite)?;
            Ok(inner.decode_steps(rows))
        })
        .await
    }

    async fn list_session_steps_after(
        &self,
        tenant: &Tenant,
        session_id: Id,
        after: i64,
    ) -> Result<stepwise_store::StepsAfter> {
        self.session_steps_after(tenant, session_id, after).await
    }
}
