//! The execution queue on PostgreSQL: claims with `FOR UPDATE SKIP LOCKED` and leases,
//! lease renewal and release, and the `stepwise_queue` NOTIFY that rings other nodes'
//! workers (see `relay::QUEUE_CHANNEL`).

use std::time::Duration;

use stepwise_core::{Execution, Id};
use stepwise_store::rules::{attempts_exhausted, gave_up_message, lease_until};
use stepwise_store::{Claim, Result, Tenant};

use crate::PgStore;
use crate::sql::{self, args, count, execution_cols, map_pg, pg};

/// A running execution whose worker stopped renewing its lease. SKIP LOCKED: a row another
/// node is claiming right now is not waited for, it is that node's.
const NEXT_EXPIRED: &str = "SELECT id, tenant_id, attempts FROM executions WHERE status = 'running' AND lease_owner IS NOT NULL AND lease_expires_at < $1 \
     ORDER BY created_at, id LIMIT 1 FOR UPDATE SKIP LOCKED";
const FAIL_INTERRUPTED: &str = "UPDATE executions SET status = 'failed', error_message = $1, completed_at = $2, updated_at = $2, lease_owner = NULL, lease_expires_at = NULL WHERE id = $3";
const RECLAIM_EXPIRED: &str = concat!(
    "UPDATE executions SET lease_owner = $1, lease_expires_at = $2, attempts = attempts + 1, updated_at = $3 WHERE id = $4 RETURNING ",
    execution_cols!()
);
/// The oldest pending execution of a session with nothing running, first in its session.
/// A row locked by another claimer is skipped; its younger siblings stay behind it (they
/// still see it pending), so FIFO per session holds across nodes.
const NEXT_PENDING: &str = "SELECT e.id, e.tenant_id, e.resume_answer FROM executions e WHERE e.status = 'pending' AND e.parent_execution_id IS NULL \
     AND NOT EXISTS (SELECT 1 FROM executions r WHERE r.session_id = e.session_id AND r.status = 'running') \
     AND NOT EXISTS (SELECT 1 FROM executions p WHERE p.session_id = e.session_id AND p.status = 'pending' AND (p.created_at, p.id) < (e.created_at, e.id)) \
     ORDER BY e.created_at, e.id LIMIT 1 FOR UPDATE OF e SKIP LOCKED";
const CLAIM_PENDING: &str = concat!(
    "UPDATE executions SET status = 'running', lease_owner = $1, lease_expires_at = $2, attempts = attempts + 1, \
     resume_answer = NULL, started_at = COALESCE(started_at, $3), updated_at = $3 WHERE id = $4 AND status = 'pending' RETURNING ",
    execution_cols!()
);
const RENEW_LEASES: &str = "UPDATE executions SET lease_expires_at = $1 WHERE id = ANY($2) AND lease_owner = $3 AND status = 'running' RETURNING id";
/// Back to pending (the attempt does not count) and the queue rung, in one statement.
const RELEASE: &str = "WITH released AS (UPDATE executions SET status = 'pending', lease_owner = NULL, lease_expires_at = NULL, attempts = GREATEST(attempts - 1, 0), updated_at = $1 \
     WHERE id = $2 AND lease_owner = $3 AND status = 'running' RETURNING id) \
     SELECT pg_notify('stepwise_queue', '') FROM released";
const QUEUE_DEPTH: &str = "SELECT COUNT(*) AS n FROM executions WHERE status = 'pending'";
const NOTIFY_QUEUE: &str = "SELECT pg_notify('stepwise_queue', '')";

/// Rings the other nodes' workers when the transaction commits.
pub(crate) async fn notify_queue(tx: &tokio_postgres::Transaction<'_>) -> Result<()> {
    tx.execute_typed(NOTIFY_QUEUE, &[]).await.map_err(map_pg)?;
    Ok(())
}

/// Waits for this node's doorbell (a local enqueue or another node's NOTIFY).
pub(crate) async fn signal(store: &PgStore) {
    store.inner.relay.queue.notified().await
}

/// An expired lease first (failing executions interrupted too often), else the next
/// pending execution; `None` when there is nothing to run.
pub(crate) async fn claim_next(
    store: &PgStore,
    worker: &str,
    lease: Duration,
    max_attempts: u32,
) -> Result<Option<Claim>> {
    let mut claims = claim_batch(
        store,
        std::slice::from_ref(&worker.to_string()),
        lease,
        max_attempts,
    )
    .await?;
    Ok(claims.pop())
}

/// [`Store::claim_batch`](stepwise_store::Store::claim_batch): the claims one after
/// another in one transaction (each sees the ones before it: a session claimed here has
/// an execution running), one commit.
pub(crate) async fn claim_batch(
    store: &PgStore,
    workers: &[String],
    lease: Duration,
    max_attempts: u32,
) -> Result<Vec<Claim>> {
    let now = store.now();
    let until = lease_until(now, lease).0;
    let mut client = store.client().await?;
    let tx = pg(&mut client).transaction().await.map_err(map_pg)?;
    let mut claimed = Vec::with_capacity(workers.len());
    for worker in workers {
        match claim_one(&tx, worker, now.0, until, max_attempts).await? {
            Some(claim) => claimed.push(claim),
            None => break,
        }
    }
    tx.commit().await.map_err(map_pg)?;
    let mut claims = Vec::with_capacity(claimed.len());
    for (execution, tenant, answer) in claimed {
        store.remember(&execution);
        claims.push(Claim {
            execution,
            tenant: Tenant::new(tenant)?,
            resume_answer: answer.and_then(|a| serde_json::from_str(&a).ok()),
        });
    }
    Ok(claims)
}

/// One claim inside `tx`: the execution, its tenant and the answer it resumes with.
async fn claim_one(
    tx: &tokio_postgres::Transaction<'_>,
    worker: &str,
    now: i64,
    until: i64,
    max_attempts: u32,
) -> Result<Option<(Execution, String, Option<String>)>> {
    loop {
        let expired = tx
            .query_typed_opt(NEXT_EXPIRED, args![now])
            .await
            .map_err(map_pg)?;
        let Some(row) = expired else { break };
        let id: Id = sql::get(&row, "id")?;
        let tenant: String = sql::get(&row, "tenant_id")?;
        let attempts = sql::get::<i32>(&row, "attempts")?.max(0) as u32;
        if attempts_exhausted(attempts, max_attempts) {
            let reason = gave_up_message(attempts);
            tracing::warn!(execution = %id, attempts, "failing an execution whose workers kept stopping");
            tx.execute_typed(FAIL_INTERRUPTED, args![reason, now, id])
                .await
                .map_err(map_pg)?;
            continue;
        }
        let row = tx
            .query_typed_one(RECLAIM_EXPIRED, args![worker, until, now, id])
            .await
            .map_err(map_pg)?;
        return Ok(Some((sql::execution(&row)?, tenant, None)));
    }
    let pending = tx
        .query_typed_opt(NEXT_PENDING, args![])
        .await
        .map_err(map_pg)?;
    let Some(row) = pending else {
        return Ok(None);
    };
    let id: Id = sql::get(&row, "id")?;
    let tenant: String = sql::get(&row, "tenant_id")?;
    let answer: Option<String> = sql::get(&row, "resume_answer")?;
    let row = tx
        .query_typed_opt(CLAIM_PENDING, args![worker, until, now, id])
        .await
        .map_err(map_pg)?;
    // `None`: changed under us (cancelled) after the snapshot was taken: nothing claimed.
    row.map(|row| Ok((sql::execution(&row)?, tenant, answer)))
        .transpose()
}

/// Extends this worker's leases; returns the ids it no longer holds.
pub(crate) async fn renew_leases(
    store: &PgStore,
    worker: &str,
    ids: Vec<Id>,
    lease: Duration,
) -> Result<Vec<Id>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let until = lease_until(store.now(), lease).0;
    let client = store.client().await?;
    let rows = client
        .query_typed(RENEW_LEASES, args![until, ids, worker])
        .await
        .map_err(map_pg)?;
    let mut held = std::collections::HashSet::new();
    for row in &rows {
        held.insert(sql::get::<Id>(row, "id")?);
    }
    Ok(ids.into_iter().filter(|id| !held.contains(id)).collect())
}

pub(crate) async fn release(store: &PgStore, worker: &str, id: Id) -> Result<()> {
    let now = store.now();
    let client = store.client().await?;
    client
        .execute_typed(RELEASE, args![now.0, id, worker])
        .await
        .map_err(map_pg)?;
    Ok(())
}

pub(crate) async fn depth(store: &PgStore) -> Result<u64> {
    let client = store.client().await?;
    count(&**client, QUEUE_DEPTH, args![]).await
}
