//! Operations: durability, health and counts.

use std::future::Future;

use crate::{Result, StatusCounts, StoreStats};

pub trait OperationsStore: Send + Sync {
    /// Waits until everything queued before this call is durable.
    fn flush(&self) -> impl Future<Output = Result<()>> + Send;

    /// Whether the database answers (for `/readyz`).
    fn ping(&self) -> impl Future<Output = Result<()>> + Send;

    fn stats(&self) -> impl Future<Output = Result<StoreStats>> + Send;

    /// Sessions and executions by status over every tenant (a cheap grouped count).
    fn count_by_status(&self) -> impl Future<Output = Result<StatusCounts>> + Send;
}

/// Passes the whole domain through to the wrapped store (see [`crate::Layer`]).
pub trait PassOperations: crate::Layer {}

impl<L: PassOperations> OperationsStore for L {
    fn flush(&self) -> impl Future<Output = Result<()>> + Send {
        self.layer_inner().flush()
    }

    fn ping(&self) -> impl Future<Output = Result<()>> + Send {
        self.layer_inner().ping()
    }

    fn stats(&self) -> impl Future<Output = Result<StoreStats>> + Send {
        self.layer_inner().stats()
    }

    fn count_by_status(&self) -> impl Future<Output = Result<StatusCounts>> + Send {
        self.layer_inner().count_by_status()
    }
}
