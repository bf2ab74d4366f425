//! Snapshots on SQLite: queued saves that become the execution's and session's last
//! snapshot, a listing without states, and one snapshot with its decoded state.

use std::sync::atomic::Ordering;

use rusqlite::{Connection, OptionalExtension, params};
use stepwise_core::codec;
use stepwise_core::{Id, Snapshot, Timestamp};
use stepwise_store::{Ack, NewSnapshot, Result, StoreError, Tenant};

use crate::rows::{self, Bid, bid, opt_bid, snapshot_cols};
use crate::writer::map_sqlite;
use crate::{SqliteStore, count};

const SESSION_OF_EXECUTION: &str =
    "SELECT session_id FROM executions WHERE id = ?1 AND tenant_id = ?2";
const SNAPSHOT_EXISTS: &str = "SELECT COUNT(*) FROM snapshots WHERE id = ?1 AND tenant_id = ?2";
const INSERT_SNAPSHOT: &str = "INSERT INTO snapshots (id, tenant_id, execution_id, session_id, parent_snapshot_id, agent_id, agent_name, step_number, is_final, debug_mode, state, created_at) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)";
const EXECUTION_LAST_SNAPSHOT: &str =
    "UPDATE executions SET last_snapshot_id = ?1, updated_at = ?2 WHERE id = ?3";
/// The session's newest snapshot; an abandoned session is in use again.
const SESSION_LAST_SNAPSHOT: &str = "UPDATE sessions SET last_snapshot_id = ?1, updated_at = CASE WHEN status = 'abandoned' THEN ?3 ELSE updated_at END, status = CASE WHEN status = 'abandoned' THEN 'active' ELSE status END WHERE id = ?2";
/// A replacing snapshot: the execution's earlier snapshots go.
const DELETE_EARLIER_SNAPSHOTS: &str =
    "DELETE FROM snapshots WHERE execution_id = ?1 AND tenant_id = ?2 AND id <> ?3";
const LIST_SNAPSHOTS: &str = concat!(
    "SELECT ",
    snapshot_cols!(),
    " FROM snapshots WHERE execution_id = ?1 AND tenant_id = ?2 ORDER BY created_at, id"
);
const SELECT_SNAPSHOT: &str = concat!(
    "SELECT ",
    snapshot_cols!(),
    ", state FROM snapshots WHERE id = ?1 AND tenant_id = ?2"
);

impl stepwise_store::SnapshotStore for SqliteStore {
    async fn save_snapshot(&self, tenant: &Tenant, new: NewSnapshot) -> Result<Ack<Snapshot>> {
        let tenant = tenant.as_str().to_string();
        let now = self.now();
        let state = codec::encode_value(&new.state, self.inner.options.compress_threshold);
        let replace = new.replace;
        let snapshot = new.into_snapshot(now);
        self.inner
            .writer
            .submit(move |conn, _| {
                insert_snapshot(conn, &tenant, &snapshot, &state, replace, now)?;
                Ok(snapshot)
            })
            .await
    }

    async fn list_snapshots(&self, tenant: &Tenant, execution_id: Id) -> Result<Vec<Snapshot>> {
        let tenant = tenant.as_str().to_string();
        self.read(move |conn, _| {
            conn.prepare_cached(LIST_SNAPSHOTS)
                .and_then(|mut s| {
                    s.query_map(params![bid(execution_id), tenant], rows::snapshot)?
                        .collect()
                })
                .map_err(map_sqlite)
        })
        .await
    }

    async fn get_snapshot(&self, tenant: &Tenant, id: Id) -> Result<Option<Snapshot>> {
        let tenant = tenant.as_str().to_string();
        self.read(move |conn, inner| {
            let found = conn
                .prepare_cached(SELECT_SNAPSHOT)
                .and_then(|mut s| s.query_row(params![bid(id), tenant], |r| Ok((rows::snapshot(r)?, r.get::<_, Vec<u8>>("state")?))).optional())
                .map_err(map_sqlite)?;
            let Some((mut snapshot, state)) = found else { return Ok(None) };
            match codec::decode_value(&state) {
                Ok(state) => {
                    snapshot.state = state;
                    Ok(Some(snapshot))
                }
                Err(e) => {
                    inner.decode_errors.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(snapshot = %id, error = %e, "a stored snapshot cannot be decoded");
                    Ok(None)
                }
            }
        })
        .await
    }
}

/// Inserts a snapshot, which becomes its execution's and session's last (`replace`: the
/// execution's earlier ones go). Refusals (`NotFound`, `Invalid`) come before any write.
pub(crate) fn insert_snapshot(
    conn: &Connection,
    tenant: &str,
    s: &Snapshot,
    state: &[u8],
    replace: bool,
    now: Timestamp,
) -> Result<()> {
    let session: Option<Option<Bid>> = conn
        .prepare_cached(SESSION_OF_EXECUTION)
        .and_then(|mut st| {
            st.query_row(params![bid(s.execution_id), tenant], |r| r.get(0))
                .optional()
        })
        .map_err(map_sqlite)?;
    let session = session.ok_or(StoreError::NotFound("execution"))?;
    if let Some(parent) = s.parent_snapshot_id {
        let found = count(conn, SNAPSHOT_EXISTS, params![bid(parent), tenant])?;
        if found == 0 {
            return Err(StoreError::invalid(
                "parent_snapshot_id",
                "no such snapshot",
            ));
        }
    }
    conn.prepare_cached(INSERT_SNAPSHOT)
        .and_then(|mut st| {
            st.execute(params![
                bid(s.id),
                tenant,
                bid(s.execution_id),
                session,
                opt_bid(s.parent_snapshot_id),
                s.agent_id,
                s.agent_name,
                s.step_number,
                s.is_final,
                s.debug_mode,
                state,
                now.0
            ])
        })
        .map_err(map_sqlite)?;
    conn.prepare_cached(EXECUTION_LAST_SNAPSHOT)
        .and_then(|mut st| st.execute(params![bid(s.id), now.0, bid(s.execution_id)]))
        .map_err(map_sqlite)?;
    if replace {
        conn.prepare_cached(DELETE_EARLIER_SNAPSHOTS)
            .and_then(|mut st| st.execute(params![bid(s.execution_id), tenant, bid(s.id)]))
            .map_err(map_sqlite)?;
    }
    if let Some(session) = session {
        conn.prepare_cached(SESSION_LAST_SNAPSHOT)
            .and_then(|mut st| st.execute(params![bid(s.id), session, now.0]))
            .map_err(map_sqlite)?;
    }
    Ok(())
}
