//! Executions on SQLite, with the queue the workers claim them from: create, read,
//! transition, and claim / renew / release leases.

use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, params};
use stepwise_core::{Execution, Id, Message, Timestamp};
use stepwise_store::rules::{
    attempts_exhausted, check_execution_with_messages, check_transition, gave_up_message,
    lease_until,
};
use stepwise_store::{
    Claim, ClaimFilter, NewEvent, NewExecution, NewMessage, Result, StoreError, Tenant, Transition,
};

use crate::mirrored::insert_announced;
use crate::rows::{self, Bid, bid, execution_cols, json_text, opt_bid};
use crate::sessions::load_session;
use crate::writer::map_sqlite;
use crate::{SqliteStore, count};
use stepwise_store::WorkerSeen;

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
const SESSION_LAST_EXECUTION_OF_TENANT: &str = "UPDATE sessions SET last_execution_id = ?1, updated_at = ?2, status = CASE WHEN status = 'abandoned' THEN 'active' ELSE status END WHERE id = ?3 AND tenant_id = ?4";
const TRANSITION: &str = "UPDATE executions SET status = ?1, output = COALESCE(?2, output), error_message = COALESCE(?3, error_message), \
     resume_answer = ?4, completed_at = COALESCE(?5, completed_at), lease_owner = NULL, lease_expires_at = NULL, updated_at = ?6, \
     attempts = CASE WHEN ?1 = 'paused' THEN 0 ELSE attempts END \
     WHERE id = ?7 AND tenant_id = ?8";
/// `?2`: the agent types a claim may take as a JSON array (`NULL`: any); `?3` its tenant
/// (`NULL`: any).
const NEXT_EXPIRED_LEASE: &str = "SELECT id, tenant_id, attempts FROM executions WHERE status = 'running' AND lease_owner IS NOT NULL AND lease_expires_at < ?1 \
     AND (?2 IS NULL OR agent_type IN (SELECT value FROM json_each(?2))) AND (?3 IS NULL OR tenant_id = ?3) ORDER BY created_at, id LIMIT 1";
const FAIL_INTERRUPTED: &str = "UPDATE executions SET status = 'failed', error_message = ?1, completed_at = ?2, updated_at = ?2, lease_owner = NULL, lease_expires_at = NULL WHERE id = ?3";
const TAKE_OVER: &str = "UPDATE executions SET lease_owner = ?1, lease_expires_at = ?2, attempts = attempts + 1, updated_at = ?3 WHERE id = ?4";
/// The oldest runnable head (see `migrations/V3__queue_heads.sql`): a session's oldest
/// pending top-level execution while nothing of it runs. One index probe at any depth;
/// `CROSS JOIN` keeps the heads' order as the outer loop whatever the statistics say.
/// A claim limited to some agent types or a tenant passes over the heads it may not take
/// (one primary-key probe each).
const NEXT_PENDING: &str = "SELECT e.id, e.tenant_id, e.resume_answer FROM queue_heads h CROSS JOIN executions e \
     WHERE e.id = h.execution_id AND (?1 IS NULL OR e.agent_type IN (SELECT value FROM json_each(?1))) AND (?2 IS NULL OR e.tenant_id = ?2) \
     ORDER BY h.created_at, h.execution_id LIMIT 1";
const START: &str = "UPDATE executions SET status = 'running', lease_owner = ?1, lease_expires_at = ?2, attempts = attempts + 1, \
     resume_answer = NULL, started_at = COALESCE(started_at, ?3), updated_at = ?3 WHERE id = ?4";
const RENEW: &str = "UPDATE executions SET lease_expires_at = ?1 WHERE id = ?2 AND lease_owner = ?3 AND status = 'running'";
/// `?4`: 1 gives the attempt back (a release), 0 keeps it (a retry).
const RELEASE: &str = "UPDATE executions SET status = 'pending', lease_owner = NULL, lease_expires_at = NULL, attempts = MAX(attempts - ?4, 0), updated_at = ?1 \
     WHERE id = ?2 AND lease_owner = ?3 AND status = 'running'";
const QUEUE_DEPTH: &str = "SELECT COUNT(*) FROM executions WHERE status = 'pending'";

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

impl SqliteStore {
    /// Back to the queue; `keep_attempt` counts the attempt it was claimed with.
    pub(crate) async fn queue_release(
        &self,
        worker: &str,
        id: Id,
        keep_attempt: bool,
    ) -> Result<()> {
        let worker = worker.to_string();
        let now = self.now();
        let give_back = i64::from(!keep_attempt);
        self.write(move |conn, _| {
            conn.prepare_cached(RELEASE)
                .and_then(|mut s| s.execute(params![now.0, bid(id), worker, give_back]))
                .map(|_| ())
                .map_err(map_sqlite)
        })
        .await
    }
}

/// One claim inside the caller's transaction: a running execution whose worker stopped
/// renewing its lease first (failing those interrupted too often), else the oldest pending
/// execution of a session with nothing running. `None` when there is nothing to run.
fn claim_one(
    conn: &Connection,
    (agent_types, tenant): (Option<&str>, Option<&str>),
    worker: &str,
    now: Timestamp,
    until: Timestamp,
    max_attempts: u32,
) -> Result<Option<Claim>> {
    loop {
        let expired: Option<(Bid, String, i64)> = conn
            .prepare_cached(NEXT_EXPIRED_LEASE)
            .and_then(|mut s| {
                s.query_row(params![now.0, agent_types, tenant], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?))
                })
                .optional()
            })
            .map_err(map_sqlite)?;
        let Some((id, tenant, attempts)) = expired else {
            break;
        };
        let attempts = u32::try_from(attempts.max(0)).unwrap_or(u32::MAX);
        if attempts_exhausted(attempts, max_attempts) {
            tracing::warn!(execution = %id.0, attempts, "failing an execution whose workers kept stopping");
            conn.prepare_cached(FAIL_INTERRUPTED)
                .and_then(|mut s| s.execute(params![gave_up_message(attempts), now.0, id]))
                .map_err(map_sqlite)?;
            continue;
        }
        conn.prepare_cached(TAKE_OVER)
            .and_then(|mut s| s.execute(params![worker, until.0, now.0, id]))
            .map_err(map_sqlite)?;
        let execution =
            load_execution(conn, &tenant, id.0)?.ok_or(StoreError::NotFound("execution"))?;
        return Ok(Some(Claim {
            execution,
            tenant: Tenant::new(tenant)?,
            resume_answer: None,
        }));
    }
    let pending: Option<(Bid, String, Option<String>)> = conn
        .prepare_cached(NEXT_PENDING)
        .and_then(|mut s| {
            s.query_row(params![agent_types, tenant], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })
            .optional()
        })
        .map_err(map_sqlite)?;
    let Some((id, tenant, answer)) = pending else {
        return Ok(None);
    };
    conn.prepare_cached(START)
        .and_then(|mut s| s.execute(params![worker, until.0, now.0, id]))
        .map_err(map_sqlite)?;
    let execution =
        load_execution(conn, &tenant, id.0)?.ok_or(StoreError::NotFound("execution"))?;
    let resume_answer = answer.and_then(|a| serde_json::from_str(&a).ok());
    Ok(Some(Claim {
        execution,
        tenant: Tenant::new(tenant)?,
        resume_answer,
    }))
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

    async fn transition_execution(
        &self,
        tenant: &Tenant,
        id: Id,
        transition: Transition,
    ) -> Result<Execution> {
        let tenant = tenant.as_str().to_string();
        let now = self.now();
        self.write(move |conn, _| {
            let current =
                load_execution(conn, &tenant, id)?.ok_or(StoreError::NotFound("execution"))?;
            check_transition(current.status, &transition)?;
            let target = transition.target();
            let (output, error, answer, done): (
                Option<String>,
                Option<String>,
                Option<String>,
                Option<i64>,
            ) = match &transition {
                Transition::Pause { .. } => (None, None, None, None),
                Transition::Resume { answer } => (None, None, Some(json_text(answer)), None),
                Transition::Complete { output } => {
                    (Some(json_text(output)), None, None, Some(now.0))
                }
                Transition::Fail { error_message } => {
                    (None, Some(error_message.clone()), None, Some(now.0))
                }
                Transition::Cancel => (None, None, None, Some(now.0)),
            };
            conn.prepare_cached(TRANSITION)
                .and_then(|mut s| {
                    s.execute(params![
                        target.as_str(),
                        output,
                        error,
                        answer,
                        done,
                        now.0,
                        bid(id),
                        tenant
                    ])
                })
                .map_err(map_sqlite)?;
            load_execution(conn, &tenant, id)?.ok_or(StoreError::NotFound("execution"))
        })
        .await
    }
}

impl stepwise_store::QueueStore for SqliteStore {
    /// [`QueueStore::claim_matching`](stepwise_store::QueueStore::claim_matching): the claims one
    /// after another in one writer job (one transaction, one commit).
    async fn claim_matching(
        &self,
        filter: &ClaimFilter,
        workers: &[String],
        lease: Duration,
        max_attempts: u32,
    ) -> Result<Vec<Claim>> {
        let workers = workers.to_vec();
        let agent_types = filter.agent_types_json();
        let tenant = filter.tenant.clone();
        let now = self.now();
        let until = lease_until(now, lease);
        self.write(move |conn, _| {
            let filter = (agent_types.as_deref(), tenant.as_deref());
            let mut claims = Vec::with_capacity(workers.len());
            for worker in &workers {
                match claim_one(conn, filter, worker, now, until, max_attempts)? {
                    Some(claim) => claims.push(claim),
                    None => break,
                }
            }
            Ok(claims)
        })
        .await
    }

    async fn record_worker(&self, tenant: &Tenant, worker: WorkerSeen) -> Result<()> {
        self.worker_record(tenant, worker).await
    }

    async fn worker_offline(
        &self,
        tenant: &Tenant,
        worker_id: &str,
        at: Timestamp,
    ) -> Result<bool> {
        SqliteStore::worker_offline(self, tenant, worker_id, at).await
    }

    async fn list_workers(&self, tenant: &Tenant, since: Timestamp) -> Result<Vec<WorkerSeen>> {
        self.worker_list(tenant, since).await
    }

    async fn renew_leases(&self, worker: &str, ids: Vec<Id>, lease: Duration) -> Result<Vec<Id>> {
        let worker = worker.to_string();
        let until = lease_until(self.now(), lease);
        self.write(move |conn, _| {
            let mut lost = Vec::new();
            for id in ids {
                let held = conn
                    .prepare_cached(RENEW)
                    .and_then(|mut s| s.execute(params![until.0, bid(id), worker]))
                    .map_err(map_sqlite)?;
                if held == 0 {
                    lost.push(id);
                }
            }
            Ok(lost)
        })
        .await
    }

    async fn release(&self, worker: &str, id: Id) -> Result<()> {
        self.queue_release(worker, id, false).await
    }

    async fn requeue(&self, worker: &str, id: Id) -> Result<()> {
        self.queue_release(worker, id, true).await
    }

    async fn queue_depth(&self) -> Result<u64> {
        self.read(|conn, _| count(conn, QUEUE_DEPTH, [])).await
    }
}
