//! Retention on PostgreSQL: idle sessions marked abandoned, expired sessions deleted with
//! all their rows in small batches, and the advisory lock that lets one node at a time
//! run a pass.

use stepwise_core::{Id, Timestamp};
use stepwise_store::{
    CleanupReport, Result, RetentionLock, RetentionOverride, RetentionPolicy, StoreError, Tenant,
    TenantScope,
};

use crate::sql::{self, args, count, map_pg, pg};
use crate::{PgStore, checkpoints};

/// The key of the advisory lock a retention pass runs under ("retentio" in ASCII).
const RETENTION_LOCK: i64 = 0x7265_7465_6e74_696f;
const TRY_RETENTION_LOCK: &str = "SELECT pg_try_advisory_lock($1) AS locked";

/// Sessions deleted per transaction, so no lock is held long.
const BATCH_DELETE: i64 = 100;

// `{}` in the statements below is where a pass's tenant scope goes (`TenantScope::scoped`).
const COUNT_IDLE: &str =
    "SELECT COUNT(*) AS n FROM sessions WHERE status = 'active' AND updated_at < $1{}";
/// A paused execution of an abandoned session will never be answered.
const CANCEL_IDLE_PAUSED: &str = "UPDATE executions SET status = 'cancelled', completed_at = $2, updated_at = $2, lease_owner = NULL, lease_expires_at = NULL \
     WHERE status = 'paused' AND session_id IN (SELECT id FROM sessions WHERE status = 'active' AND updated_at < $1{})";
const ABANDON_IDLE: &str = "UPDATE sessions SET status = 'abandoned', updated_at = $2 WHERE status = 'active' AND updated_at < $1{}";
const LIST_TENANT_RETENTION: &str =
    "SELECT tenant_id, retention FROM tenant_retention ORDER BY tenant_id";
const PUT_TENANT_RETENTION: &str = "INSERT INTO tenant_retention (tenant_id, retention, updated_at) VALUES ($1, $2, $3) \
     ON CONFLICT (tenant_id) DO UPDATE SET retention = excluded.retention, updated_at = excluded.updated_at";
const DELETE_TENANT_RETENTION: &str = "DELETE FROM tenant_retention WHERE tenant_id = $1";

/// The sessions past their retention: $1, $2, $3 are the completed, abandoned and
/// deleted cutoffs (a macro so the statements below are constants).
macro_rules! expired {
    () => {
        "(status = 'completed' AND updated_at < $1) OR (status = 'abandoned' AND updated_at < $2) OR (status = 'deleted' AND updated_at < $3)"
    };
}
macro_rules! expired_ids {
    () => {
        concat!("SELECT id FROM sessions WHERE (", expired!(), "){}")
    };
}
macro_rules! expired_executions {
    () => {
        concat!(
            "SELECT id FROM executions WHERE session_id IN (",
            expired_ids!(),
            ")"
        )
    };
}
const COUNT_EXPIRED_SESSIONS: &str = concat!(
    "SELECT COUNT(*) AS n FROM sessions WHERE (",
    expired!(),
    "){}"
);
const COUNT_EXPIRED_MESSAGES: &str = concat!(
    "SELECT COUNT(*) AS n FROM messages WHERE session_id IN (",
    expired_ids!(),
    ")"
);
const COUNT_EXPIRED_EXECUTIONS: &str = concat!(
    "SELECT COUNT(*) AS n FROM executions WHERE session_id IN (",
    expired_ids!(),
    ")"
);
const COUNT_EXPIRED_STEPS: &str = concat!(
    "SELECT COUNT(*) AS n FROM steps WHERE execution_id IN (",
    expired_executions!(),
    ")"
);
const COUNT_EXPIRED_SNAPSHOTS: &str = concat!(
    "SELECT COUNT(*) AS n FROM snapshots WHERE execution_id IN (",
    expired_executions!(),
    ")"
);
const COUNT_EXPIRED_EVENTS: &str = concat!(
    "SELECT COUNT(*) AS n FROM events WHERE session_id IN (",
    expired_ids!(),
    ")"
);
/// The next batch ($4 sessions); rows another pass holds are skipped.
const LOCK_EXPIRED_BATCH: &str = concat!(
    expired_ids!(),
    " ORDER BY id LIMIT $4 FOR UPDATE SKIP LOCKED"
);
const DELETE_BATCH_STEPS: &str = "DELETE FROM steps WHERE execution_id IN (SELECT id FROM executions WHERE session_id = ANY($1))";
const DELETE_BATCH_SNAPSHOTS: &str = "DELETE FROM snapshots WHERE execution_id IN (SELECT id FROM executions WHERE session_id = ANY($1))";
const DELETE_BATCH_EXECUTIONS: &str = "DELETE FROM executions WHERE session_id = ANY($1)";
const DELETE_BATCH_MESSAGES: &str = "DELETE FROM messages WHERE session_id = ANY($1)";
const DELETE_BATCH_EVENTS: &str = "DELETE FROM events WHERE session_id = ANY($1)";
const DELETE_BATCH_SESSIONS: &str = "DELETE FROM sessions WHERE id = ANY($1)";

/// The connection holding the retention lock; dropping the client closes it, which
/// releases the lock.
struct HeldLock {
    _client: tokio_postgres::Client,
    _driver: tokio::task::JoinHandle<()>,
}

impl stepwise_store::RetentionStore for PgStore {
    /// Marks active sessions idle since before `cutoff` abandoned (cancelling their paused
    /// executions); `dry` only counts them.
    async fn mark_abandoned(
        &self,
        cutoff: Timestamp,
        dry: bool,
        scope: TenantScope,
    ) -> Result<u64> {
        let mut client = self.client().await?;
        if dry {
            return count(&**client, &scope.scoped(COUNT_IDLE), args![cutoff.0]).await;
        }
        let now = self.now();
        let tx = pg(&mut client).transaction().await.map_err(map_pg)?;
        tx.execute_typed(&scope.scoped(CANCEL_IDLE_PAUSED), args![cutoff.0, now.0])
            .await
            .map_err(map_pg)?;
        let n = tx
            .execute_typed(&scope.scoped(ABANDON_IDLE), args![cutoff.0, now.0])
            .await
            .map_err(map_pg)?;
        tx.commit().await.map_err(map_pg)?;
        Ok(n)
    }

    /// Deletes the sessions past the policy's cutoffs with every row they own; `dry` only
    /// counts what would go.
    async fn cleanup_old_sessions(
        &self,
        now: Timestamp,
        policy: RetentionPolicy,
        dry: bool,
        scope: TenantScope,
    ) -> Result<CleanupReport> {
        let [completed, abandoned, deleted] = policy.cutoffs(now).as_micros();
        let mut client = self.client().await?;
        if dry {
            let c = &**client;
            let params = args![completed, abandoned, deleted];
            let s = |sql: &str| scope.scoped(sql);
            return Ok(CleanupReport {
                sessions: count(c, &s(COUNT_EXPIRED_SESSIONS), params).await?,
                messages: count(c, &s(COUNT_EXPIRED_MESSAGES), params).await?,
                executions: count(c, &s(COUNT_EXPIRED_EXECUTIONS), params).await?,
                steps: count(c, &s(COUNT_EXPIRED_STEPS), params).await?,
                snapshots: count(c, &s(COUNT_EXPIRED_SNAPSHOTS), params).await?,
                events: count(c, &s(COUNT_EXPIRED_EVENTS), params).await?,
            });
        }
        let lock_batch = scope.scoped(LOCK_EXPIRED_BATCH);
        let mut total = CleanupReport::default();
        // Small batches, each its own transaction, so no lock is held long.
        loop {
            let tx = pg(&mut client).transaction().await.map_err(map_pg)?;
            let rows = tx
                .query_typed(
                    &lock_batch,
                    args![completed, abandoned, deleted, BATCH_DELETE],
                )
                .await
                .map_err(map_pg)?;
            let ids = rows
                .iter()
                .map(|r| sql::get::<Id>(r, "id"))
                .collect::<Result<Vec<Id>>>()?;
            if ids.is_empty() {
                tx.commit().await.map_err(map_pg)?;
                break;
            }
            let run = |sql: &'static str| {
                let tx = &tx;
                let ids = &ids;
                async move { tx.execute_typed(sql, args![*ids]).await.map_err(map_pg) }
            };
            checkpoints::delete_sessions_checkpoints(&tx, &ids).await?;
            total.steps += run(DELETE_BATCH_STEPS).await?;
            total.snapshots += run(DELETE_BATCH_SNAPSHOTS).await?;
            total.executions += run(DELETE_BATCH_EXECUTIONS).await?;
            total.messages += run(DELETE_BATCH_MESSAGES).await?;
            total.events += run(DELETE_BATCH_EVENTS).await?;
            total.sessions += run(DELETE_BATCH_SESSIONS).await?;
            tx.commit().await.map_err(map_pg)?;
        }
        if total.sessions > 0 {
            tracing::info!(?total, "retention cleanup deleted expired sessions");
        }
        Ok(total)
    }

    async fn tenant_retentions(&self) -> Result<Vec<(String, RetentionOverride)>> {
        let client = self.client().await?;
        let rows = client
            .query_typed(LIST_TENANT_RETENTION, &[])
            .await
            .map_err(map_pg)?;
        let mut out = Vec::with_capacity(rows.len());
        for row in &rows {
            let text: String = sql::get(row, "retention")?;
            if let Ok(retention) = serde_json::from_str(&text) {
                out.push((sql::get(row, "tenant_id")?, retention));
            }
        }
        Ok(out)
    }

    async fn set_tenant_retention(
        &self,
        tenant: &Tenant,
        retention: Option<RetentionOverride>,
    ) -> Result<()> {
        let client = self.client().await?;
        match retention {
            Some(retention) => {
                let text = serde_json::to_string(&retention)
                    .map_err(|e| StoreError::Backend(e.to_string()))?;
                client
                    .execute_typed(
                        PUT_TENANT_RETENTION,
                        args![tenant.as_str().to_string(), text, self.now().0],
                    )
                    .await
            }
            None => {
                client
                    .execute_typed(DELETE_TENANT_RETENTION, args![tenant.as_str().to_string()])
                    .await
            }
        }
        .map_err(map_pg)?;
        Ok(())
    }

    /// The retention lock if no other node holds it.
    async fn try_retention_lock(&self) -> Result<Option<RetentionLock>> {
        // A session-level advisory lock on a connection of its own: it locks no rows, and
        // it goes away with the connection, so a node that dies mid-pass releases it.
        let (client, connection) = self
            .inner
            .config
            .connect(tokio_postgres::NoTls)
            .await
            .map_err(|e| StoreError::Unavailable(format!("cannot connect to PostgreSQL: {e}")))?;
        let driver = tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "the retention lock connection ended");
            }
        });
        let row = client
            .query_typed_one(TRY_RETENTION_LOCK, args![RETENTION_LOCK])
            .await
            .map_err(map_pg)?;
        if sql::get::<bool>(&row, "locked")? {
            Ok(Some(RetentionLock::holding(HeldLock {
                _client: client,
                _driver: driver,
            })))
        } else {
            drop(client);
            let _ = driver.await;
            Ok(None)
        }
    }
}
