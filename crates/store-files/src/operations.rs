//! Operating the files backend: readiness, sizes and counts for metrics.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use stepwise_core::{ExecutionStatus, SessionStatus};
use stepwise_store::{Result, StatusCounts, StoreError, StoreStats};

use crate::FileStore;

impl stepwise_store::OperationsStore for FileStore {
    async fn flush(&self) -> Result<()> {
        let ack = {
            let mut state = self.lock();
            self.enqueue(&mut state, ())
        };
        ack.await
    }

    async fn ping(&self) -> Result<()> {
        let root = &self.inner.shared.root;
        if !self.inner.shared.writable.load(Ordering::Relaxed) {
            return Err(StoreError::StorageFull(format!(
                "the last write to {} failed because the disk is full",
                root.display()
            )));
        }
        match std::fs::metadata(root) {
            Ok(m) if m.is_dir() => Ok(()),
            Ok(_) => Err(StoreError::Unavailable(format!(
                "{} is not a folder",
                root.display()
            ))),
            Err(e) => Err(StoreError::Unavailable(format!(
                "{} cannot be reached: {e}",
                root.display()
            ))),
        }
    }

    async fn stats(&self) -> Result<StoreStats> {
        let (bytes, queue_depth) = {
            let state = self.lock();
            let bytes = state.file_sizes.values().sum();
            let depth = state
                .all_executions()
                .filter(|(_, e)| e.execution.status == ExecutionStatus::Pending)
                .count() as u64;
            (bytes, depth)
        };
        Ok(StoreStats {
            bytes,
            queue_depth,
            decode_errors: self.inner.shared.decode_errors.load(Ordering::Relaxed),
            save_errors: self.inner.shared.save_errors.load(Ordering::Relaxed),
        })
    }

    async fn count_by_status(&self) -> Result<StatusCounts> {
        let state = self.lock();
        let mut sessions: BTreeMap<&'static str, (SessionStatus, u64)> = BTreeMap::new();
        for tenant in state.tenants.values() {
            for session in tenant.sessions.values().filter_map(|c| c.session.as_ref()) {
                sessions
                    .entry(session.status.as_str())
                    .or_insert((session.status, 0))
                    .1 += 1;
            }
        }
        let mut executions: BTreeMap<&'static str, (ExecutionStatus, u64)> = BTreeMap::new();
        for (_, entry) in state.all_executions() {
            let status = entry.execution.status;
            executions.entry(status.as_str()).or_insert((status, 0)).1 += 1;
        }
        Ok(StatusCounts {
            sessions: sessions.into_values().collect(),
            executions: executions.into_values().collect(),
        })
    }
}
