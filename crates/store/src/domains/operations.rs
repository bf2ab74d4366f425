//! Operations: durability, health and counts.

use crate::{Result, StatusCounts, StoreStats};

crate::domain! {
    $
    pub trait OperationsStore, pass PassOperations, methods operations_store_methods {
        /// Waits until everything queued before this call is durable.
        fn flush(&self) -> Result<()>;

        /// Whether the database answers (for `/readyz`).
        fn ping(&self) -> Result<()>;

        fn stats(&self) -> Result<StoreStats>;

        /// Sessions and executions by status over every tenant (a cheap grouped count).
        fn count_by_status(&self) -> Result<StatusCounts>;
    }
}
