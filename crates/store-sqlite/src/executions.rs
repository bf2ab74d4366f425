//! Executions on SQLite: create, read and transition (the queue that claims them is
//! `queue.rs`).

use rusqlite::{Connection, OptionalExtension, params};
use stepwise_core::{Execution, Id, Message, Timestamp};
use stepwise_store::rules::{
    BUSY, MoveColumns, check_execution_with_messages, check_transition, removal_set,
};
use stepwise_store::{
    IfBusy, NewEvent, NewExecution, NewMessage, Result, StoreError, Tenant, Transition,
};

use crate::SqliteStore;
use crate::mirrored::insert_announced;
use crate::rows::{self, bid, execution_cols, json_text, opt_bid};
use crate::sessions::load_session;
use crate::writer::map_sqlite;

const SELECT_EXECUTION: &str = concat!(
    "SELECT ",
    execution_cols!(),
    " FROM executions WHERE id = ?1 AND tenant_id = ?2"
);
const LIST_EXECUTIONS: &str = concat!(
    "SELECT ",
    execution_cols!(),
    " FROM executions WHERE session_id = ?1 AND tenant_id = ?2 ORDER BY created_at, id"
);
const INSERT_EXECUTION: &str = "INSERT INTO executions (id, tenant_id, session_id, parent_execution_id, user_id, agent_type, agent_config, status, input, metadata, started_at, created_at, updated_at, lease_owner, lease_expires_at) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?12, ?13, ?14)";
const SESSION_LAST_EXECUTION: &str = "UPDATE sessions SET last_execution_id = ?1, updated_at = ?2, status = CASE WHEN status = 'abandoned' THEN 'active' ELSE status END WHERE id = ?3";
/// Whether a root execution of the session is queued or running.
const SESSION_BUSY: &str = "SELECT EXISTS (SELECT 1 FROM executions WHERE session_id = ?1 AND tenant_id = ?2 \
     AND parent_execution_id IS NULL AND status IN ('pending', 'running'))";
const SESSION_LAST_EXECUTION_OF_TENANT: &str = "UPDATE sessions SET last_execution_id = ?1, updated_at = ?2, status = CASE WHEN status = 'abandoned' THEN 'active' ELSE status END WHERE id = ?3 AND tenant_id = ?4";
const TRANSITION: &str = "UPDATE executions SET status = ?1, output = COALESCE(?2, output), error_message = COALESCE(?3, error_message), \
     resume_answer = ?4, completed_at = COALESCE(?5, completed_at), lease_owner = NULL, lease_expires_at = NULL, updated_at = ?6, \
     attempts = CASE WHEN ?1 = 'paused' THEN 0 ELSE attempts END \
     WHERE id = ?7 AND tenant_id = ?8";

/// What goes with a removed execution (`?1` its id, `?2` its session).
const REMOVE_EXECUTION_ROWS: [&str; 6] = [
    "DELETE FROM steps WHERE execution_id = ?1 AND ?2 IS NOT NULL",
    "DELETE FROM snapshots WHERE execution_id = ?1 AND ?2 IS NOT NULL",
    "DELETE FROM messages WHERE session_id = ?2 AND execution_id = ?1",
    "DELETE FROM events WHERE session_id = ?2 AND execution_id = ?1",
    "DELETE FROM queue_heads WHERE execution_id = ?1 AND ?2 IS NOT NULL",
    "DELETE FROM executions WHERE id = ?1 AND session_id = ?2",
];
/// The session once executions went: its last root execution (`?1`), its message count,
/// and its last snapshot when that one went (the newest of a remaining root execution).
const SESSION_AFTER_REMOVAL: &str = "UPDATE sessions SET last_execution_id = ?1, updated_at = ?2, \
     message_count = (SELECT COUNT(*) FROM messages WHERE session_id = ?3), \
     last_snapshot_id = CASE WHEN last_snapshot_id IS NULL OR EXISTS (SELECT 1 FROM snapshots WHERE id = sessions.last_snapshot_id) \
       THEN last_snapshot_id \
       ELSE (SELECT s.id FROM snapshots s JOIN executions e ON e.id = s.execution_id \
             WHERE e.session_id = ?3 AND e.parent_execution_id IS NULL ORDER BY s.created_at DESC, s.id DESC LIMIT 1) END \
     WHERE id = ?3 AND tenant_id = ?4";

/// Inserts `e`, held by `lease_owner` until its `lease_expires_at` when it starts leased.
fn insert_execution(conn: &Connection, e: &Execution, lease_owner: Option<&str>) -> Result<()> {
    conn.prepare_cached(INSERT_EXECUTION)
        .and_then(|mut s| {
            s.execute(params![
                bid(e.id),
                e.tenant_id,
                opt_bid(e.session_id),
                opt_bid(e.parent_execution_id),
                e.user_id,
                e.agent_type,
                json_text(&e.agent_config),
                e.status.as_str(),
                json_text(&e.input),
                json_text(&e.metadata),
                e.started_at.map(|t| t.0),
                e.created_at.0,
                lease_owner,
                lease_owner.and(e.lease_expires_at).map(|t| t.0)
            ])
        })
        .map(|_| ())
        .map_err(map_sqlite)
}

pub(crate) fn load_execution(conn: &Connection, tenant: &str, id: Id) -> Result<Option<Execution>> {
    conn.prepare_cached(SELECT_EXECUTION)
        .and_then(|mut s| {
            s.query_row(params![bid(id), tenant], rows::execution)
                .optional()
        })
        .map_err(map_sqlite)
}

impl stepwise_store::ExecutionStore for SqliteStore {
    async fn create_execution(&self, tenant: &Tenant, new: NewExecution) -> Result<Execution> {
        let now = self.now();
        let lease_owner = new.lease.as_ref().map(|l| l.owner.clone());
        let execution = new.into_execution(tenant, now)?;
        self.write(move |conn, _| {
            let e = &execution;
            if let Some(session_id) = e.session_id
                && load_session(conn, &e.tenant_id, session_id)?.is_none()
            {
                return Err(StoreError::NotFound("session"));
            }
            if let Some(parent) = e.parent_execution_id
                && load_execution(conn, &e.tenant_id, parent)?.is_none()
            {
                return Err(StoreError::NotFound("parent execution"));
            }
            insert_execution(conn, e, lease_owner.as_deref())?;
            if let Some(session_id) = e.session_id {
                conn.prepare_cached(SESSION_LAST_EXECUTION)
                    .and_then(|mut s| s.execute(params![bid(e.id), now.0, bid(session_id)]))
                    .map_err(map_sqlite)?;
            }
            Ok(execution)
        })
        .await
    }

    /// See [`stepwise_store::ExecutionStore::create_execution_with_messages`]: one writer job, with
    /// the session's counters moved by one statement for the messages and events.
    async fn create_execution_with_messages(
        &self,
        tenant: &Tenant,
        new: NewExecution,
        messages: Vec<NewMessage>,
        events: Vec<NewEvent>,
        if_busy: IfBusy,
    ) -> Result<(Execution, Vec<Message>)> {
        let session_id = check_execution_with_messages(&new, &messages, &events)?;
        let lease_owner = new.lease.as_ref().map(|l| l.owner.clone());
        let execution = new.into_execution(tenant, self.now())?;
        // Each message stamped in turn (the clock never repeats a time): they list in order.
        let messages: Vec<Message> = messages
            .into_iter()
            .map(|m| m.for_execution(execution.id).into_message(self.now()))
            .collect();
        let events: Vec<NewEvent> = events
            .into_iter()
            .map(|e| NewEvent {
                execution_id: Some(execution.id),
                ..e
            })
            .collect();
        let now = self.now();
        let tenant = tenant.clone();
        // New work: it yields to the executions already running (see `writer`).
        self.inner
            .writer
            .write_intake(move |conn, published| {
                // In the writer's job: no other write comes between the check and the insert.
                if if_busy == IfBusy::Refuse {
                    let busy: bool = conn
                        .prepare_cached(SESSION_BUSY)
                        .and_then(|mut s| {
                            s.query_row(params![bid(session_id), tenant.as_str()], |r| r.get(0))
                        })
                        .map_err(map_sqlite)?;
                    if busy {
                        return Err(StoreError::Busy(BUSY.to_string()));
                    }
                }
                let touched = conn
                    .prepare_cached(SESSION_LAST_EXECUTION_OF_TENANT)
                    .and_then(|mut s| {
                        s.execute(params![
                            bid(execution.id),
                            execution.created_at.0,
                            bid(session_id),
                            tenant.as_str()
                        ])
                    })
                    .map_err(map_sqlite)?;
                if touched == 0 {
                    return Err(StoreError::NotFound("session"));
                }
                insert_execution(conn, &execution, lease_owner.as_deref())?;
                insert_announced(conn, &tenant, &messages, events, now, published)?;
                Ok((execution, messages))
            })
            .await
    }

    async fn get_execution(&self, tenant: &Tenant, id: Id) -> Result<Option<Execution>> {
        self.read_point(|conn| load_execution(conn, tenant.as_str(), id))
    }

    async fn list_executions(&self, tenant: &Tenant, session_id: Id) -> Result<Vec<Execution>> {
        let tenant = tenant.as_str().to_string();
        self.read(move |conn, _| {
            conn.prepare_cached(LIST_EXECUTIONS)
                .and_then(|mut s| {
                    s.query_map(params![bid(session_id), tenant], rows::execution)?
                        .collect()
                })
                .map_err(map_sqlite)
        })
        .await
    }

    async fn remove_executions(
        &self,
        tenant: &Tenant,
        session_id: Id,
        ids: Vec<Id>,
    ) -> Result<u64> {
        let now = self.now();
        let owner = tenant.as_str().to_string();
        let removed = self
            .write(move |conn, _| {
                let executions: Vec<Execution> = conn
                    .prepare_cached(LIST_EXECUTIONS)
                    .and_then(|mut s| {
                        s.query_map(params![bid(session_id), owner], rows::execution)?
                            .collect()
                    })
                    .map_err(map_sqlite)?;
                let (gone, last_root) = removal_set(&executions, &ids)?;
                if gone.is_empty() {
                    return Ok(0);
                }
                for id in &gone {
                    for sql in REMOVE_EXECUTION_ROWS {
                        conn.prepare_cached(sql)
                            .and_then(|mut s| s.execute(params![bid(*id), bid(session_id)]))
                            .map_err(map_sqlite)?;
                    }
                }
                conn.prepare_cached(SESSION_AFTER_REMOVAL)
                    .and_then(|mut s| {
                        s.execute(params![opt_bid(last_root), now.0, bid(session_id), owner])
                    })
                    .map_err(map_sqlite)?;
                Ok(gone.len() as u64)
            })
            .await?;
        if removed > 0 {
            // Rows went from the middle of the session's lists: its cached lists are stale.
            self.inner.session_cache.remove(tenant, session_id);
        }
        Ok(removed)
    }

    async fn transition_execution(
        &self,
        tenant: &Tenant,
        id: Id,
        transition: Transition,
    ) -> Result<Execution> {
        let tenant = tenant.as_str().to_string();
        let now = self.now();
        self.write(move |conn, _| move_execution(conn, &tenant, id, &transition, now))
            .await
    }
}

/// Moves an execution to another status on the writer's connection (the lifecycle checked
/// first, so a refused move writes nothing) and answers it as it is now.
pub(crate) fn move_execution(
    conn: &Connection,
    tenant: &str,
    id: Id,
    transition: &Transition,
    now: Timestamp,
) -> Result<Execution> {
    check_move(conn, tenant, id, transition)?;
    write_move(conn, tenant, id, transition, now)
}

/// Refuses a move the lifecycle does not allow (`InvalidState`) or of an execution that is
/// not the tenant's (`NotFound`), before anything is written.
pub(crate) fn check_move(
    conn: &Connection,
    tenant: &str,
    id: Id,
    transition: &Transition,
) -> Result<()> {
    let current = load_execution(conn, tenant, id)?.ok_or(StoreError::NotFound("execution"))?;
    check_transition(current.status, transition)
}

/// Writes a move [`check_move`] allowed in this transaction, and answers the execution as
/// it is now.
pub(crate) fn write_move(
    conn: &Connection,
    tenant: &str,
    id: Id,
    transition: &Transition,
    now: Timestamp,
) -> Result<Execution> {
    let target = transition.target();
    let columns = MoveColumns::of(transition, now);
    conn.prepare_cached(TRANSITION)
        .and_then(|mut s| {
            s.execute(params![
                target.as_str(),
                columns.output,
                columns.error_message,
                columns.resume_answer,
                columns.completed_at,
                now.0,
                bid(id),
                tenant
            ])
        })
        .map_err(map_sqlite)?;
    load_execution(conn, tenant, id)?.ok_or(StoreError::NotFound("execution"))
}
