//! The queue on SQLite: claims (an expired lease first, else the oldest runnable head of
//! `queue_heads`), lease renewal, release and requeue, and the queue's depth.

use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, params};
use stepwise_core::{Id, Timestamp};
use stepwise_store::rules::{attempts_exhausted, gave_up_message, lease_until};
use stepwise_store::{Claim, ClaimFilter, Result, StoreError, Tenant};

use crate::executions::load_execution;
use crate::rows::{Bid, bid};
use crate::writer::map_sqlite;
use crate::{SqliteStore, count};

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
const LEASE_EXPIRY: &str = "SELECT lease_expires_at FROM executions WHERE id = ?1 AND lease_owner = ?2 AND status = 'running'";
/// `?4`: 1 gives the attempt back (a release), 0 keeps it (a retry).
const RELEASE: &str = "UPDATE executions SET status = 'pending', lease_owner = NULL, lease_expires_at = NULL, attempts = MAX(attempts - ?4, 0), updated_at = ?1 \
     WHERE id = ?2 AND lease_owner = ?3 AND status = 'running'";
const QUEUE_DEPTH: &str = "SELECT COUNT(*) FROM executions WHERE status = 'pending'";
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

    async fn lease_expiry(&self, worker: &str, id: Id) -> Result<Option<Timestamp>> {
        let worker = worker.to_string();
        self.read(move |conn, _| {
            conn.prepare_cached(LEASE_EXPIRY)
                .and_then(|mut s| {
                    s.query_row(params![bid(id), worker], |r| r.get::<_, Option<i64>>(0))
                        .optional()
                })
                .map(|until| until.flatten().map(Timestamp))
                .map_err(map_sqlite)
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

    /// One process owns the file: its runners hear of new work from the in-process
    /// doorbell, never from here.
    async fn queue_signal(&self) {
        std::future::pending().await
    }
}
