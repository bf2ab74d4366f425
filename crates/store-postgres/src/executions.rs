//! Executions on PostgreSQL: created (pointing their session at them), read, listed, and
//! moved between states under a row lock. Claiming, leases and the queue doorbell are in
//! `queue`.

use stepwise_core::{Execution, ExecutionStatus, Id, Message, Timestamp};
use stepwise_store::rules::{
    BUSY, MoveColumns, check_execution_with_messages, check_transition, removal_set,
};
use stepwise_store::{
    IfBusy, NewEvent, NewExecution, NewMessage, Result, StoreError, Tenant, Transition,
    message_created,
};
use tokio_postgres::GenericClient;

use crate::PgStore;
use crate::queue::ring;
use crate::sql::{self, args, execution_cols, json_text, map_pg, pg};
use stepwise_store::prelude::*;

const POINT_SESSION_AT: &str = "UPDATE sessions SET last_execution_id = $1, updated_at = $2, status = CASE WHEN status = 'abandoned' THEN 'active' ELSE status END WHERE id = $3 AND tenant_id = $4";
const INSERT_EXECUTION: &str = "INSERT INTO executions (id, tenant_id, session_id, parent_execution_id, user_id, agent_type, agent_config, status, input, metadata, started_at, created_at, updated_at, lease_owner, lease_expires_at) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $12, $13, $14)";
macro_rules! execution_by_id {
    () => {
        concat!(
            "SELECT ",
            execution_cols!(),
            " FROM executions WHERE id = $1 AND tenant_id = $2"
        )
    };
}
const EXECUTION_BY_ID: &str = execution_by_id!();
/// Inside a transaction: the row stays locked until it ends.
const LOCK_EXECUTION_BY_ID: &str = concat!(execution_by_id!(), " FOR UPDATE");
const SESSION_EXECUTIONS: &str = concat!(
    "SELECT ",
    execution_cols!(),
    " FROM executions WHERE session_id = $1 AND tenant_id = $2 ORDER BY created_at, id"
);
/// Holds the session's row while its executions are removed (appends to it wait).
const LOCK_SESSION: &str = "SELECT id FROM sessions WHERE id = $1 AND tenant_id = $2 FOR UPDATE";
/// Whether a root execution of the session is queued or running.
const SESSION_BUSY: &str = "SELECT EXISTS (SELECT 1 FROM executions WHERE session_id = $1 AND tenant_id = $2 \
     AND parent_execution_id IS NULL AND status IN ('pending', 'running'))";
/// What goes with removed executions (`$1` their ids, `$2` their session).
const REMOVE_EXECUTION_ROWS: [&str; 5] = [
    "DELETE FROM steps WHERE execution_id = ANY($1) AND $2::uuid IS NOT NULL",
    "DELETE FROM snapshots WHERE execution_id = ANY($1) AND $2::uuid IS NOT NULL",
    "DELETE FROM messages WHERE session_id = $2 AND execution_id = ANY($1)",
    "DELETE FROM events WHERE session_id = $2 AND execution_id = ANY($1)",
    "DELETE FROM executions WHERE session_id = $2 AND id = ANY($1)",
];
/// The session once executions went: its last root execution (`$1`), its message count,
/// and its last snapshot when that one went (the newest of a remaining root execution).
const SESSION_AFTER_REMOVAL: &str = "UPDATE sessions SET last_execution_id = $1, updated_at = $2, \
     message_count = (SELECT COUNT(*) FROM messages WHERE session_id = $3), \
     last_snapshot_id = CASE WHEN last_snapshot_id IS NULL OR EXISTS (SELECT 1 FROM snapshots WHERE id = sessions.last_snapshot_id) \
       THEN last_snapshot_id \
       ELSE (SELECT s.id FROM snapshots s JOIN executions e ON e.id = s.execution_id \
             WHERE e.session_id = $3 AND e.parent_execution_id IS NULL ORDER BY s.created_at DESC, s.id DESC LIMIT 1) END \
     WHERE id = $3 AND tenant_id = $4";
/// A state change; the lease goes, and a pause starts the attempt count afresh.
const TRANSITION_EXECUTION: &str = concat!(
    "UPDATE executions SET status = $1, output = COALESCE($2, output), error_message = COALESCE($3, error_message), \
     resume_answer = $4, completed_at = COALESCE($5, completed_at), lease_owner = NULL, lease_expires_at = NULL, updated_at = $6, \
     attempts = CASE WHEN $1 = 'paused' THEN 0 ELSE attempts END \
     WHERE id = $7 AND tenant_id = $8 RETURNING ",
    execution_cols!()
);

/// One execution of a tenant; `lock` takes its row lock (inside a transaction).
pub(crate) async fn load(
    c: &impl GenericClient,
    tenant: &str,
    id: Id,
    lock: bool,
) -> Result<Option<Execution>> {
    let sql = if lock {
        LOCK_EXECUTION_BY_ID
    } else {
        EXECUTION_BY_ID
    };
    let row = c
        .query_typed_opt(sql, args![id, tenant])
        .await
        .map_err(map_pg)?;
    row.as_ref().map(sql::execution).transpose()
}

/// Moves the execution `id` as `transition` says (checked by the caller, its row locked)
/// and reads it back.
pub(crate) async fn move_row(
    c: &impl GenericClient,
    tenant: &str,
    id: Id,
    transition: &Transition,
    now: Timestamp,
) -> std::result::Result<tokio_postgres::Row, tokio_postgres::Error> {
    let columns = MoveColumns::of(transition, now);
    c.query_typed_one(
        TRANSITION_EXECUTION,
        args![
            transition.target().as_str(),
            columns.output,
            columns.error_message,
            columns.resume_answer,
            columns.completed_at,
            now.0,
            id,
            tenant
        ],
    )
    .await
}

/// Inserts `e` inside `tx` (held by `lease_owner` when it starts leased), pointing its
/// session at it; `NotFound` for a session or parent the tenant does not have.
/// Holds the session's row until the transaction ends; false when the tenant has no such
/// session.
async fn lock_session(
    tx: &tokio_postgres::Transaction<'_>,
    session_id: Id,
    tenant: &str,
) -> Result<bool> {
    Ok(tx
        .query_typed_opt(LOCK_SESSION, args![session_id, tenant])
        .await
        .map_err(map_pg)?
        .is_some())
}

async fn insert(
    tx: &tokio_postgres::Transaction<'_>,
    e: &Execution,
    lease_owner: Option<&str>,
) -> Result<()> {
    if let Some(session_id) = e.session_id {
        let touched = tx
            .execute_typed(
                POINT_SESSION_AT,
                args![e.id, e.created_at.0, session_id, e.tenant_id],
            )
            .await
            .map_err(map_pg)?;
        if touched == 0 {
            return Err(StoreError::NotFound("session"));
        }
    }
    if let Some(parent) = e.parent_execution_id
        && load(tx, &e.tenant_id, parent, false).await?.is_none()
    {
        return Err(StoreError::NotFound("parent execution"));
    }
    tx.execute_typed(
        INSERT_EXECUTION,
        args![
            e.id,
            e.tenant_id,
            e.session_id,
            e.parent_execution_id,
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
        ],
    )
    .await
    .map_err(map_pg)?;
    Ok(())
}

/// Whether a committed move may let a worker claim something: the execution is queued
/// again, or its session may run its next one (a root execution that did not pause).
pub(crate) fn move_rings(moved: &Execution, target: ExecutionStatus) -> bool {
    moved.parent_execution_id.is_none() && target != ExecutionStatus::Paused
}

/// After an execution's commit: rings the queue for a new pending one.
fn created(store: &PgStore, e: &Execution) {
    if e.parent_execution_id.is_none() && e.status == ExecutionStatus::Pending {
        ring(store);
    }
    store.remember(e);
}

impl stepwise_store::ExecutionStore for PgStore {
    async fn create_execution(&self, tenant: &Tenant, new: NewExecution) -> Result<Execution> {
        let now = self.now();
        let lease_owner = new.lease.as_ref().map(|l| l.owner.clone());
        let execution = new.into_execution(tenant, now)?;
        let mut client = self.client().await?;
        let tx = pg(&mut client).transaction().await.map_err(map_pg)?;
        insert(&tx, &execution, lease_owner.as_deref()).await?;
        tx.commit().await.map_err(map_pg)?;
        created(self, &execution);
        Ok(execution)
    }

    /// [`ExecutionStore::create_execution_with_messages`](stepwise_store::ExecutionStore::create_execution_with_messages):
    /// the execution and its messages in one transaction (one commit, not one per row); their
    /// events are queued to the writer after it, in order, as the trait's default does.
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
        // Each stamped in turn (the clock never repeats a time): they list in order.
        let messages: Vec<Message> = messages
            .into_iter()
            .map(|m| m.for_execution(execution.id).into_message(self.now()))
            .collect();
        let mut client = self.client().await?;
        let tx = pg(&mut client).transaction().await.map_err(map_pg)?;
        if if_busy == IfBusy::Refuse {
            // The session's row held first: another such write (on any node) waits for this
            // transaction, then sees what it wrote.
            let owner = tenant.as_str();
            if !lock_session(&tx, session_id, owner).await? {
                return Err(StoreError::NotFound("session"));
            }
            let busy = tx
                .query_typed(SESSION_BUSY, args![session_id, owner])
                .await
                .map_err(map_pg)?
                .first()
                .is_some_and(|row| row.get::<_, bool>(0));
            if busy {
                return Err(StoreError::Busy(BUSY.to_string()));
            }
        }
        insert(&tx, &execution, lease_owner.as_deref()).await?;
        for message in &messages {
            crate::messages::insert(&tx, tenant, message).await?;
        }
        tx.commit().await.map_err(map_pg)?;
        drop(client);
        created(self, &execution);
        let announced = messages.iter().map(message_created);
        let events = events.into_iter().map(|e| NewEvent {
            execution_id: Some(execution.id),
            ..e
        });
        for event in announced.chain(events).collect::<Vec<_>>() {
            // Queued, not awaited: one session's events stay in order (its writer's queue).
            if let Err(e) = self.append_event(tenant, event).await {
                tracing::warn!(error = %e, "could not queue an event");
            }
        }
        Ok((execution, messages))
    }

    async fn get_execution(&self, tenant: &Tenant, id: Id) -> Result<Option<Execution>> {
        let found = load(&**self.client().await?, tenant.as_str(), id, false).await?;
        if let Some(execution) = &found {
            self.remember(execution);
        }
        Ok(found)
    }

    async fn list_executions(&self, tenant: &Tenant, session_id: Id) -> Result<Vec<Execution>> {
        let client = self.client().await?;
        let rows = client
            .query_typed(SESSION_EXECUTIONS, args![session_id, tenant.as_str()])
            .await
            .map_err(map_pg)?;
        sql::collect(&rows, sql::execution)
    }

    async fn remove_executions(
        &self,
        tenant: &Tenant,
        session_id: Id,
        ids: Vec<Id>,
    ) -> Result<u64> {
        // Saves queued before this call land first: none is left to write a removed row back.
        self.inner.writer.flush().await?;
        let now = self.now();
        let mut client = self.client().await?;
        let tx = pg(&mut client).transaction().await.map_err(map_pg)?;
        let owner = tenant.as_str();
        if !lock_session(&tx, session_id, owner).await? {
            return Ok(0);
        }
        let rows = tx
            .query_typed(SESSION_EXECUTIONS, args![session_id, owner])
            .await
            .map_err(map_pg)?;
        let executions = sql::collect(&rows, sql::execution)?;
        let (gone, last_root) = removal_set(&executions, &ids)?;
        if gone.is_empty() {
            return Ok(0);
        }
        for statement in REMOVE_EXECUTION_ROWS {
            tx.query_typed(statement, args![gone.clone(), session_id])
                .await
                .map_err(map_pg)?;
        }
        tx.query_typed(
            SESSION_AFTER_REMOVAL,
            args![last_root, now.0, session_id, owner],
        )
        .await
        .map_err(map_pg)?;
        tx.commit().await.map_err(map_pg)?;
        Ok(gone.len() as u64)
    }

    /// Checks the move against the current state (row locked), applies it and rings the
    /// queue when the execution is queued again or its session may run its next one.
    ///
    /// It does not wait for the writers: whoever queued saves that must land first has
    /// awaited their acks (the engine does, see `finish`), so a move does not wait for every
    /// writer's batch in flight, other sessions' included.
    async fn transition_execution(
        &self,
        tenant: &Tenant,
        id: Id,
        transition: Transition,
    ) -> Result<Execution> {
        let now = self.now();
        let mut client = self.client().await?;
        let tx = pg(&mut client).transaction().await.map_err(map_pg)?;
        let current = load(&tx, tenant.as_str(), id, true)
            .await?
            .ok_or(StoreError::NotFound("execution"))?;
        check_transition(current.status, &transition)?;
        let target = transition.target();
        let row = move_row(&tx, tenant.as_str(), id, &transition, now)
            .await
            .map_err(map_pg)?;
        let execution = sql::execution(&row)?;
        tx.commit().await.map_err(map_pg)?;
        self.strays().forget(id);
        if move_rings(&execution, target) {
            ring(self);
        }
        self.remember(&execution);
        Ok(execution)
    }
}
