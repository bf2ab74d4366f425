//! The execution queue on PostgreSQL: claims from the runnable heads (one per session,
//! kept by a trigger: `migrations/V3__queue_heads.sql`) under the session's advisory lock,
//! tried and never waited for, so a claim costs the same at any queue depth; leases,
//! lease renewal and release; and the `stepwise_queue` NOTIFY that rings other nodes'
//! workers (see `relay::QUEUE_CHANNEL`), coalesced to one in flight per node.

use std::time::Duration;

use stepwise_core::{Execution, Id, Timestamp};
use stepwise_store::rules::{attempts_exhausted, gave_up_message, lease_until};
use stepwise_store::{Claim, ClaimFilter, Result, Tenant};

use crate::PgStore;
use crate::sql::{self, args, count, execution_cols, map_pg, pg};

/// A running execution whose worker stopped renewing its lease. SKIP LOCKED: a row another
/// node is claiming right now is not waited for, it is that node's.
/// `$2`: the agent types the claim may take (`NULL`: any); `$3` its tenant (`NULL`: any).
const NEXT_EXPIRED: &str = "SELECT id, tenant_id, attempts FROM executions WHERE status = 'running' AND lease_owner IS NOT NULL AND lease_expires_at < $1 \
     AND ($2::text[] IS NULL OR agent_type = ANY($2)) AND ($3::text IS NULL OR tenant_id = $3) \
     ORDER BY created_at, id LIMIT 1 FOR UPDATE SKIP LOCKED";
const FAIL_INTERRUPTED: &str = "UPDATE executions SET status = 'failed', error_message = $1, completed_at = $2, updated_at = $2, lease_owner = NULL, lease_expires_at = NULL WHERE id = $3";
const RECLAIM_EXPIRED: &str = concat!(
    "UPDATE executions SET lease_owner = $1, lease_expires_at = $2, attempts = attempts + 1, updated_at = $3 WHERE id = $4 RETURNING ",
    execution_cols!()
);
/// The oldest runnable heads (see `migrations/V3__queue_heads.sql`), read without locks:
/// each is then taken with its session's advisory lock, tried, not waited for.
/// A claim limited to some agent types or a tenant passes over the heads it may not take.
/// `queue_heads` alone, no join (`V9__queue_heads_own_columns.sql`): whatever the planner
/// knows of the tables, the read costs the heads it walks, never the queue's depth.
const NEXT_HEADS: &str = "SELECT queue_key FROM queue_heads WHERE queue_key <> ALL($1) \
     AND ($3::text[] IS NULL OR agent_type = ANY($3)) AND ($4::text IS NULL OR tenant_id = $4) \
     ORDER BY created_at, execution_id LIMIT $2";
/// The session's lock, if no other transaction holds it.
const TRY_LOCK_HEAD: &str = "SELECT pg_try_advisory_xact_lock(queue_head_lock($1)) AS locked";
/// The session's head as it is now (under its lock), with what the claim answers.
const HEAD_OF: &str = "SELECT e.id, e.tenant_id, e.resume_answer FROM queue_heads h JOIN executions e ON e.id = h.execution_id \
     WHERE h.queue_key = $1 AND e.status = 'pending' AND ($2::text[] IS NULL OR e.agent_type = ANY($2)) AND ($3::text IS NULL OR e.tenant_id = $3)";
/// How many heads a claim reads past the ones it needs (others may be taken meanwhile).
const SPARE_HEADS: i64 = 8;
const CLAIM_PENDING: &str = concat!(
    "UPDATE executions SET status = 'running', lease_owner = $1, lease_expires_at = $2, attempts = attempts + 1, \
     resume_answer = NULL, started_at = COALESCE(started_at, $3), updated_at = $3 WHERE id = $4 AND status = 'pending' RETURNING ",
    execution_cols!()
);
const RENEW_LEASES: &str = "UPDATE executions SET lease_expires_at = $1 WHERE id = ANY($2) AND lease_owner = $3 AND status = 'running' RETURNING id";
const LEASE_EXPIRY: &str = "SELECT lease_expires_at FROM executions WHERE id = $1 AND lease_owner = $2 AND status = 'running'";
/// Back to pending (the attempt does not count) and the queue rung, in one statement.
/// `$4`: 1 gives the attempt back (a release), 0 keeps it (a retry).
const RELEASE: &str = "UPDATE executions SET status = 'pending', lease_owner = NULL, lease_expires_at = NULL, attempts = GREATEST(attempts - $4, 0), updated_at = $1 \
     WHERE id = $2 AND lease_owner = $3 AND status = 'running'";
const QUEUE_DEPTH: &str = "SELECT COUNT(*) AS n FROM executions WHERE status = 'pending'";
/// Run by `relay::notify_without_flush`, in a transaction that does not wait for its WAL
/// flush: it holds the notification queue's lock only briefly (see `relay::run_announcer`).
const NOTIFY_QUEUE: &str =
    "SET LOCAL synchronous_commit TO off; SELECT pg_notify('stepwise_queue', '')";

/// Asks for the other nodes' workers to be rung (after the caller's commit). Rings
/// coalesce: at most one `NOTIFY` is in flight per node, and every ask made while it is
/// sent is answered by one more (see [`run_ringer`]). A `NOTIFY` takes a lock on the
/// whole notification queue at commit; one per enqueue would serialize intake.
pub(crate) fn ring(store: &PgStore) {
    store.inner.queue_bell.notify_one();
}

/// Sends the coalesced `NOTIFY`s of [`ring`] until the store is dropped.
pub(crate) async fn run_ringer(
    pool: deadpool_postgres::Pool,
    bell: std::sync::Arc<tokio::sync::Notify>,
    mut stopped: tokio::sync::watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            _ = stopped.changed() => return,
            _ = bell.notified() => {}
        }
        let sent = match pool.get().await {
            Ok(mut client) => crate::relay::notify_without_flush(&mut client, NOTIFY_QUEUE).await,
            Err(e) => Err(e.to_string()),
        };
        if let Err(e) = sent {
            // The other nodes' fallback poll still finds the work.
            tracing::warn!(error = %e, "could not ring the other nodes' workers");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Waits for this node's doorbell (a local enqueue or another node's NOTIFY).
pub(crate) async fn signal(store: &PgStore) {
    store.inner.relay.queue.notified().await
}

/// [`QueueStore::claim_matching`](stepwise_store::QueueStore::claim_matching): the claims one
/// after another in one transaction (each sees the ones before it: a session claimed here
/// has an execution running), one commit.
pub(crate) async fn claim_matching(
    store: &PgStore,
    filter: &ClaimFilter,
    workers: &[String],
    lease: Duration,
    max_attempts: u32,
) -> Result<Vec<Claim>> {
    let now = store.now();
    let until = lease_until(now, lease).0;
    let mut client = store.client().await?;
    let tx = pg(&mut client).transaction().await.map_err(map_pg)?;
    let mut heads = Heads {
        agent_types: filter.agent_types.clone(),
        tenant: filter.tenant.clone(),
        ..Heads::default()
    };
    let mut claimed = Vec::with_capacity(workers.len());
    for (n, worker) in workers.iter().enumerate() {
        let wanted = (workers.len() - n) as i64;
        match claim_one(&tx, &mut heads, wanted, worker, now.0, until, max_attempts).await? {
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

/// The heads one claim transaction has read and not yet tried, and the sessions it has
/// tried (taken or held by another transaction): not read again.
#[derive(Default)]
struct Heads {
    agent_types: Option<Vec<String>>,
    tenant: Option<String>,
    unread_done: bool,
    queued: std::collections::VecDeque<Id>,
    tried: Vec<Id>,
}

impl Heads {
    /// The next session to try; reads more heads when the ones read are used up.
    async fn next(
        &mut self,
        tx: &tokio_postgres::Transaction<'_>,
        wanted: i64,
    ) -> Result<Option<Id>> {
        if self.queued.is_empty() && !self.unread_done {
            let rows = tx
                .query_typed(
                    NEXT_HEADS,
                    args![
                        self.tried.clone(),
                        wanted + SPARE_HEADS,
                        self.agent_types.clone(),
                        self.tenant.clone()
                    ],
                )
                .await
                .map_err(map_pg)?;
            for row in &rows {
                self.queued.push_back(sql::get::<Id>(row, "queue_key")?);
            }
            // Fewer than asked: nothing more to read in this transaction.
            self.unread_done = (rows.len() as i64) < wanted + SPARE_HEADS;
        }
        let next = self.queued.pop_front();
        if let Some(key) = next {
            self.tried.push(key);
        }
        Ok(next)
    }
}

/// One claim inside `tx`: the execution, its tenant and the answer it resumes with.
async fn claim_one(
    tx: &tokio_postgres::Transaction<'_>,
    heads: &mut Heads,
    wanted: i64,
    worker: &str,
    now: i64,
    until: i64,
    max_attempts: u32,
) -> Result<Option<(Execution, String, Option<String>)>> {
    loop {
        let expired = tx
            .query_typed_opt(
                NEXT_EXPIRED,
                args![now, heads.agent_types.clone(), heads.tenant.clone()],
            )
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
    while let Some(key) = heads.next(tx, wanted).await? {
        let locked: bool = sql::get(
            &tx.query_typed_one(TRY_LOCK_HEAD, args![key])
                .await
                .map_err(map_pg)?,
            "locked",
        )?;
        if !locked {
            // Another transaction is changing this session (claiming it, queueing to it).
            continue;
        }
        // Under the lock: the head as it is now (another node may have claimed it since
        // it was read).
        let Some(row) = tx
            .query_typed_opt(
                HEAD_OF,
                args![key, heads.agent_types.clone(), heads.tenant.clone()],
            )
            .await
            .map_err(map_pg)?
        else {
            continue;
        };
        let id: Id = sql::get(&row, "id")?;
        let tenant: String = sql::get(&row, "tenant_id")?;
        let answer: Option<String> = sql::get(&row, "resume_answer")?;
        if let Some(row) = tx
            .query_typed_opt(CLAIM_PENDING, args![worker, until, now, id])
            .await
            .map_err(map_pg)?
        {
            return Ok(Some((sql::execution(&row)?, tenant, answer)));
        }
    }
    Ok(None)
}

/// Back to the queue; `keep_attempt` counts the attempt it was claimed with.
pub(crate) async fn release(
    store: &PgStore,
    worker: &str,
    id: Id,
    keep_attempt: bool,
) -> Result<()> {
    let now = store.now();
    let give_back = i32::from(!keep_attempt);
    let client = store.client().await?;
    let released = client
        .execute_typed(RELEASE, args![now.0, id, worker, give_back])
        .await
        .map_err(map_pg)?;
    if released > 0 {
        ring(store);
    }
    Ok(())
}

impl stepwise_store::QueueStore for PgStore {
    async fn queue_signal(&self) {
        signal(self).await
    }

    async fn claim_matching(
        &self,
        filter: &ClaimFilter,
        workers: &[String],
        lease: Duration,
        max_attempts: u32,
    ) -> Result<Vec<Claim>> {
        claim_matching(self, filter, workers, lease, max_attempts).await
    }

    /// Extends this worker's leases; returns the ids it no longer holds.
    async fn renew_leases(&self, worker: &str, ids: Vec<Id>, lease: Duration) -> Result<Vec<Id>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let until = lease_until(self.now(), lease).0;
        let client = self.client().await?;
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

    async fn lease_expiry(&self, worker: &str, id: Id) -> Result<Option<Timestamp>> {
        let client = self.client().await?;
        let row = client
            .query_typed_opt(LEASE_EXPIRY, args![id, worker])
            .await
            .map_err(map_pg)?;
        Ok(match row {
            Some(row) => sql::get::<Option<i64>>(&row, "lease_expires_at")?.map(Timestamp),
            None => None,
        })
    }

    async fn release(&self, worker: &str, id: Id) -> Result<()> {
        release(self, worker, id, false).await
    }

    async fn requeue(&self, worker: &str, id: Id) -> Result<()> {
        release(self, worker, id, true).await
    }

    async fn queue_depth(&self) -> Result<u64> {
        let client = self.client().await?;
        count(&**client, QUEUE_DEPTH, args![]).await
    }
}
