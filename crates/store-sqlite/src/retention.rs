//! Retention on SQLite: marking stale sessions abandoned, and deleting expired sessions
//! with every row that belongs to them, in small batches.

use rusqlite::{Connection, params};
use stepwise_core::{Id, Timestamp};
use stepwise_store::{
    CleanupReport, Result, RetentionOverride, RetentionPolicy, StoreError, Tenant, TenantScope,
};

use crate::rows::{Bid, bid};
use crate::writer::map_sqlite;
use crate::{SqliteStore, checkpoints, count};
use stepwise_store::RetentionLock;

/// Active sessions not updated since `?1` (see `stepwise_store::rules::is_stale`).
macro_rules! stale_where {
    () => {
        "status = 'active' AND updated_at < ?1"
    };
}

/// Sessions past their status's cutoff, `?1..?3` being `ExpiryCutoffs::as_micros`.
macro_rules! expired_where {
    () => {
        "(status = 'completed' AND updated_at < ?1) OR (status = 'abandoned' AND updated_at < ?2) OR (status = 'deleted' AND updated_at < ?3)"
    };
}

/// Sessions deleted per transaction, so the writer never holds the lock long.
const BATCH_DELETE: i64 = 100;

/// `{}` is where the pass's tenant scope goes (see `TenantScope::scoped`).
const COUNT_STALE: &str = concat!("SELECT COUNT(*) FROM sessions WHERE ", stale_where!(), "{}");
const CANCEL_STALE_PAUSED: &str = concat!(
    "UPDATE executions SET status = 'cancelled', completed_at = ?2, updated_at = ?2, lease_owner = NULL, lease_expires_at = NULL \
     WHERE status = 'paused' AND session_id IN (SELECT id FROM sessions WHERE ",
    stale_where!(),
    "{})"
);
const ABANDON_STALE: &str = concat!(
    "UPDATE sessions SET status = 'abandoned', updated_at = ?2 WHERE ",
    stale_where!(),
    "{}"
);

const EXPIRED_BATCH: &str = concat!(
    "SELECT id FROM sessions WHERE (",
    expired_where!(),
    "){} LIMIT ?4"
);
const COUNT_EXPIRED_SESSIONS: &str = concat!(
    "SELECT COUNT(*) FROM sessions WHERE (",
    expired_where!(),
    "){}"
);
const COUNT_EXPIRED_MESSAGES: &str = concat!(
    "SELECT COUNT(*) FROM messages WHERE session_id IN (SELECT id FROM sessions WHERE (",
    expired_where!(),
    "){})"
);
const COUNT_EXPIRED_EXECUTIONS: &str = concat!(
    "SELECT COUNT(*) FROM executions WHERE session_id IN (SELECT id FROM sessions WHERE (",
    expired_where!(),
    "){})"
);
const COUNT_EXPIRED_STEPS: &str = concat!(
    "SELECT COUNT(*) FROM steps WHERE execution_id IN (SELECT id FROM executions WHERE session_id IN (SELECT id FROM sessions WHERE (",
    expired_where!(),
    "){}))"
);
const COUNT_EXPIRED_SNAPSHOTS: &str = concat!(
    "SELECT COUNT(*) FROM snapshots WHERE execution_id IN (SELECT id FROM executions WHERE session_id IN (SELECT id FROM sessions WHERE (",
    expired_where!(),
    "){}))"
);
const COUNT_EXPIRED_EVENTS: &str = concat!(
    "SELECT COUNT(*) FROM events WHERE session_id IN (SELECT id FROM sessions WHERE (",
    expired_where!(),
    "){})"
);

const LIST_TENANT_RETENTION: &str =
    "SELECT tenant_id, retention FROM tenant_retention ORDER BY tenant_id";
const PUT_TENANT_RETENTION: &str = "INSERT INTO tenant_retention (tenant_id, retention, updated_at) VALUES (?1, ?2, ?3) \
     ON CONFLICT (tenant_id) DO UPDATE SET retention = excluded.retention, updated_at = excluded.updated_at";
const DELETE_TENANT_RETENTION: &str = "DELETE FROM tenant_retention WHERE tenant_id = ?1";

const DELETE_STEPS: &str =
    "DELETE FROM steps WHERE execution_id IN (SELECT id FROM executions WHERE session_id = ?1)";
const DELETE_SNAPSHOTS: &str =
    "DELETE FROM snapshots WHERE execution_id IN (SELECT id FROM executions WHERE session_id = ?1)";
const DELETE_EXECUTIONS: &str = "DELETE FROM executions WHERE session_id = ?1";
const DELETE_MESSAGES: &str = "DELETE FROM messages WHERE session_id = ?1";
const DELETE_EVENTS: &str = "DELETE FROM events WHERE session_id = ?1";
const DELETE_SESSION: &str = "DELETE FROM sessions WHERE id = ?1";

/// Deletes one session and every row that belongs to it, adding what went to `report`.
pub(crate) fn delete_session_rows(
    conn: &Connection,
    id: Id,
    report: &mut CleanupReport,
) -> Result<()> {
    checkpoints::delete_session_checkpoints(conn, id)?;
    let run = |sql: &str| -> Result<u64> {
        conn.prepare_cached(sql)
            .and_then(|mut s| s.execute(params![bid(id)]))
            .map(|n| n as u64)
            .map_err(map_sqlite)
    };
    report.steps += run(DELETE_STEPS)?;
    report.snapshots += run(DELETE_SNAPSHOTS)?;
    report.executions += run(DELETE_EXECUTIONS)?;
    report.messages += run(DELETE_MESSAGES)?;
    report.events += run(DELETE_EVENTS)?;
    report.sessions += run(DELETE_SESSION)?;
    Ok(())
}

impl stepwise_store::RetentionStore for SqliteStore {
    async fn mark_abandoned(
        &self,
        cutoff: Timestamp,
        dry: bool,
        scope: TenantScope,
    ) -> Result<u64> {
        if dry {
            let sql = scope.scoped(COUNT_STALE);
            return self
                .read(move |conn, _| count(conn, &sql, params![cutoff.0]))
                .await;
        }
        let now = self.now();
        let (cancel, abandon) = (
            scope.scoped(CANCEL_STALE_PAUSED),
            scope.scoped(ABANDON_STALE),
        );
        self.write(move |conn, _| {
            conn.prepare_cached(&cancel)
                .and_then(|mut s| s.execute(params![cutoff.0, now.0]))
                .map_err(map_sqlite)?;
            conn.prepare_cached(&abandon)
                .and_then(|mut s| s.execute(params![cutoff.0, now.0]))
                .map(|n| n as u64)
                .map_err(map_sqlite)
        })
        .await
    }

    async fn cleanup_old_sessions(
        &self,
        now: Timestamp,
        policy: RetentionPolicy,
        dry: bool,
        scope: TenantScope,
    ) -> Result<CleanupReport> {
        let cutoffs = policy.cutoffs(now).as_micros();
        if dry {
            return self
                .read(move |conn, _| {
                    let n = |sql: &str| count(conn, &scope.scoped(sql), cutoffs);
                    Ok(CleanupReport {
                        sessions: n(COUNT_EXPIRED_SESSIONS)?,
                        messages: n(COUNT_EXPIRED_MESSAGES)?,
                        executions: n(COUNT_EXPIRED_EXECUTIONS)?,
                        steps: n(COUNT_EXPIRED_STEPS)?,
                        snapshots: n(COUNT_EXPIRED_SNAPSHOTS)?,
                        events: n(COUNT_EXPIRED_EVENTS)?,
                    })
                })
                .await;
        }
        let expired_batch = scope.scoped(EXPIRED_BATCH);
        let [completed, abandoned, deleted] = cutoffs;
        let mut total = CleanupReport::default();
        // Small batches, each its own transaction, so the writer never holds the lock long.
        loop {
            let sql = expired_batch.clone();
            let batch = self
                .write(move |conn, _| {
                    let ids: Vec<Bid> = conn
                        .prepare_cached(&sql)
                        .and_then(|mut s| {
                            s.query_map(
                                params![completed, abandoned, deleted, BATCH_DELETE],
                                |r| r.get(0),
                            )?
                            .collect()
                        })
                        .map_err(map_sqlite)?;
                    let mut report = CleanupReport::default();
                    for id in &ids {
                        delete_session_rows(conn, id.0, &mut report)?;
                    }
                    Ok(report)
                })
                .await?;
            if batch.sessions == 0 {
                break;
            }
            total.add(batch);
        }
        if total.sessions > 0 {
            tracing::info!(?total, "retention cleanup deleted expired sessions");
        }
        Ok(total)
    }

    async fn tenant_retentions(&self) -> Result<Vec<(String, RetentionOverride)>> {
        self.read(|conn, _| {
            let rows: Vec<(String, String)> = conn
                .prepare_cached(LIST_TENANT_RETENTION)
                .and_then(|mut s| s.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?.collect())
                .map_err(map_sqlite)?;
            Ok(rows
                .into_iter()
                .filter_map(|(tenant, text)| Some((tenant, serde_json::from_str(&text).ok()?)))
                .collect())
        })
        .await
    }

    async fn set_tenant_retention(
        &self,
        tenant: &Tenant,
        retention: Option<RetentionOverride>,
    ) -> Result<()> {
        let tenant = tenant.as_str().to_string();
        let now = self.now();
        let text = retention
            .map(|r| serde_json::to_string(&r))
            .transpose()
            .map_err(|e| StoreError::Backend(e.to_string()))?;
        self.write(move |conn, _| {
            match text {
                Some(text) => conn
                    .prepare_cached(PUT_TENANT_RETENTION)
                    .and_then(|mut s| s.execute(params![tenant, text, now.0])),
                None => conn
                    .prepare_cached(DELETE_TENANT_RETENTION)
                    .and_then(|mut s| s.execute(params![tenant])),
            }
            .map(|_| ())
            .map_err(map_sqlite)
        })
        .await
    }

    async fn try_retention_lock(&self) -> Result<Option<RetentionLock>> {
        // One writer per database file: passes from several processes take turns on the
        // write lock batch by batch, and each batch re-selects what is still expired.
        Ok(Some(RetentionLock::local()))
    }
}
