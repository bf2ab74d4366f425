//! The cases. Each takes a [`Harness`](crate::Harness), makes its own fresh stores, and
//! panics with what it expected when the store disagrees.

mod api_keys;
mod cache;
mod checkpoints;
mod corruption;
mod events;
mod executions;
mod import;
mod isolation;
mod langgraph_store;
mod messages;
mod mirrored;
mod queue;
mod reopen;
mod retention;
pub(crate) mod sessions;
mod snapshots;
mod steps;
mod workers;

pub use api_keys::{api_keys, operations, signing_keys};
pub use cache::{session_cache, session_message_cache};
pub use checkpoints::{
    checkpoint_events, checkpoint_export_import, checkpoint_isolation, checkpoint_threads,
    checkpoint_write_refs, checkpoint_writes, checkpoints_list, checkpoints_put_get,
};
pub use corruption::corruption_recovery;
pub use events::{events, events_live};
pub use executions::{
    execution_transitions, execution_with_messages, executions, queued_ending, remove_executions,
};
pub use import::import_document;
pub use isolation::tenant_isolation;
pub use langgraph_store::{
    langgraph_store_isolation, langgraph_store_items, langgraph_store_search, langgraph_store_ttl,
};
pub use messages::{messages, queued_messages};
pub use mirrored::step_mirrored;
pub use queue::{
    queue_claim_batch, queue_claims, queue_concurrent_claim_batches, queue_concurrent_claims,
    queue_deep, queue_leases, queue_model, queue_pause_is_not_an_attempt, queue_resume,
};
pub use reopen::restore_after_reopen;
pub use retention::{
    retention_abandoned_comes_back, retention_cleanup, retention_mark_abandoned,
    retention_per_tenant,
};
pub use sessions::{list_sessions, list_sessions_pagination, session_names, sessions};
pub use snapshots::snapshots;
pub use steps::{concurrent_step_writers, fire_and_forget, steps};
pub use workers::{queue_claim_filter, session_agent, workers_seen};
