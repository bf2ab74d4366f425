//! The storage API, one trait per domain. A backend implements each domain's trait in its
//! own file for that domain; [`crate::Store`] is all of them together.
//!
//! Each domain is declared once with [`crate::domain!`] (`declare.rs`): its trait, the
//! pass-through of a layer, and the list of its methods the binary's dispatch is generated
//! from. Adding a domain: a module here with its declaration (every call takes the
//! [`crate::Tenant`] unless the domain serves every tenant, like the queue and retention), a
//! supertrait of [`crate::Store`], an `impl` in each backend's file for it, its line in the
//! binary's dispatch and in the server's metering, and cases in the conformance suite.

mod checkpoints;
mod declare;
mod events;
mod executions;
mod keys;
mod langgraph_store;
mod messages;
mod operations;
mod queue;
mod retention;
mod sessions;
mod snapshots;
mod steps;
mod workers;

pub use checkpoints::{CheckpointStore, CheckpointStoreExt, NoCheckpoints};
pub use events::{EventStore, PassEvents};
pub use executions::{ExecutionStore, PassExecutions};
pub use keys::{KeyStore, PassKeys};
pub use langgraph_store::{LangGraphStore, PassLangGraphStore};
pub use messages::{MessageStore, PassMessages};
pub use operations::{OperationsStore, PassOperations};
pub use queue::{PassQueue, QueueStore, QueueStoreExt};
pub use retention::{PassRetention, RetentionStore};
pub use sessions::{PassSessions, SessionStore};
pub use snapshots::{PassSnapshots, SnapshotStore};
pub use steps::{PassSteps, StepStore};
pub use workers::{PassWorkers, WorkerStore};
