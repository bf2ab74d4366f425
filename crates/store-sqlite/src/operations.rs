//! Operating the SQLite store: flush, readiness, sizes and counts for metrics.

use std::path::PathBuf;
use std::sync::atomic::Ordering;

use stepwise_core::{ExecutionStatus, SessionStatus};
use stepwise_store::{Result, StatusCounts, StoreError, StoreStats};

use crate::writer::map_sqlite;
use crate::{SqliteStore, count};
use stepwise_store::prelude::*;

const PING: &str = "SELECT 1";
const SESSIONS_BY_STATUS: &str = "SELECT status, COUNT(*) FROM sessions GROUP BY status";
const EXECUTIONS_BY_STATUS: &str = "SELECT status, COUNT(*) FROM executions GROUP BY status";

impl SqliteStore {
    pub(crate) fn operations_stats(&self) -> StoreStats {
        let base = self.inner.path.as_os_str().to_owned();
        let size = |suffix: &str| {
            let mut p = base.clone();
            p.push(suffix);
            std::fs::metadata(PathBuf::from(p))
                .map(|m| m.len())
                .unwrap_or(0)
        };
        StoreStats {
            bytes: size("") + size("-wal"),
            queue_depth: self.inner.writer.depth(),
            decode_errors: self.inner.decode_errors.load(Ordering::Relaxed),
            save_errors: self.inner.writer.save_errors.load(Ordering::Relaxed),
        }
    }

    /// Folds the WAL into the database file (for size measurements and backups).
    pub async fn checkpoint(&self) -> Result<()> {
        self.flush().await?;
        self.read(|conn, _| {
            conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE);")
                .map_err(map_sqlite)
        })
        .await
    }
}

impl stepwise_store::OperationsStore for SqliteStore {
    async fn flush(&self) -> Result<()> {
        self.write(|_, _| Ok(())).await
    }

    async fn ping(&self) -> Result<()> {
        if !self.inner.writer.writable.load(Ordering::Relaxed) {
            return Err(StoreError::StorageFull(format!(
                "the last write to {} failed because the disk is full",
                self.inner.path.display()
            )));
        }
        self.read(|conn, _| count(conn, PING, []).map(|_| ())).await
    }

    async fn stats(&self) -> Result<StoreStats> {
        Ok(self.operations_stats())
    }

    async fn count_by_status(&self) -> Result<StatusCounts> {
        self.read(|conn, _| {
            let grouped = |sql: &str| -> Result<Vec<(String, u64)>> {
                conn.prepare_cached(sql)
                    .and_then(|mut s| {
                        s.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))?
                            .map(|row| row.map(|(status, n)| (status, n.max(0) as u64)))
                            .collect()
                    })
                    .map_err(map_sqlite)
            };
            let sessions = grouped(SESSIONS_BY_STATUS)?;
            let executions = grouped(EXECUTIONS_BY_STATUS)?;
            Ok(StatusCounts {
                sessions: sessions
                    .into_iter()
                    .filter_map(|(s, n)| SessionStatus::parse(&s).map(|s| (s, n)))
                    .collect(),
                executions: executions
                    .into_iter()
                    .filter_map(|(s, n)| ExecutionStatus::parse(&s).map(|s| (s, n)))
                    .collect(),
            })
        })
        .await
    }
}
