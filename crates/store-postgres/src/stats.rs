//! What operators see of the PostgreSQL store: reachability, size on disk, queue depth,
//! error counters and rows per status.

use std::sync::atomic::Ordering;

use stepwise_core::{ExecutionStatus, SessionStatus};
use stepwise_store::{Result, StatusCounts, StoreStats};

use crate::PgStore;
use crate::sql::{self, args, map_pg};

const PING: &str = "SELECT 1";
/// The size of Stepwise's tables with their indexes and TOAST, and the pending executions.
const SIZE_AND_DEPTH: &str = "SELECT COALESCE(SUM(pg_total_relation_size(to_regclass(t))), 0)::int8 AS bytes, \
     (SELECT COUNT(*) FROM executions WHERE status = 'pending') AS pending \
     FROM unnest(ARRAY['sessions', 'messages', 'executions', 'steps', 'snapshots', 'events', 'api_keys']) AS t";
const COUNT_BY_STATUS: &str = "SELECT 'session' AS kind, status, COUNT(*) AS n FROM sessions GROUP BY status \
     UNION ALL SELECT 'execution', status, COUNT(*) FROM executions GROUP BY status";

impl stepwise_store::OperationsStore for PgStore {
    async fn flush(&self) -> Result<()> {
        self.inner.writer.flush().await
    }

    async fn ping(&self) -> Result<()> {
        let client = self.client().await?;
        client.query_typed(PING, args![]).await.map_err(map_pg)?;
        Ok(())
    }

    async fn stats(&self) -> Result<StoreStats> {
        let client = self.client().await?;
        let row = client
            .query_typed_one(SIZE_AND_DEPTH, args![])
            .await
            .map_err(map_pg)?;
        Ok(StoreStats {
            bytes: sql::get::<i64>(&row, "bytes")?.max(0) as u64,
            queue_depth: sql::get::<i64>(&row, "pending")?.max(0) as u64,
            decode_errors: self.inner.decode_errors.load(Ordering::Relaxed),
            save_errors: self.inner.writer.save_errors.load(Ordering::Relaxed),
        })
    }

    /// Sessions and executions per status (statuses this version does not know are left out).
    async fn count_by_status(&self) -> Result<StatusCounts> {
        let client = self.client().await?;
        let rows = client
            .query_typed(COUNT_BY_STATUS, args![])
            .await
            .map_err(map_pg)?;
        let mut counts = StatusCounts::default();
        for row in rows {
            let kind: String = sql::get(&row, "kind")?;
            let status: String = sql::get(&row, "status")?;
            let n = sql::get::<i64>(&row, "n")?.max(0) as u64;
            if kind == "session" {
                if let Some(status) = SessionStatus::parse(&status) {
                    counts.sessions.push((status, n));
                }
            } else if let Some(status) = ExecutionStatus::parse(&status) {
                counts.executions.push((status, n));
            }
        }
        Ok(counts)
    }
}
