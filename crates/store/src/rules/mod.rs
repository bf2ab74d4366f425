//! The rules every backend applies, written once. A backend keeps only its I/O (SQL, or
//! the files backend's in-memory state); what a patch changes, when a session expires, when
//! a lease runs out, which names are valid and how an imported document is laid out are
//! decided here, so the backends cannot drift apart.

mod executions;
mod fork;
mod import_plan;
mod lease;
mod names;
mod patch;
mod retention;

pub use executions::{
    BUSY, MoveColumns, check_execution_with_messages, check_step_number, check_transition,
    refuse_if_busy, removal_set,
};
pub use fork::{CHECKPOINT_EXECUTION_KEY, ForkCut, ForkPoint, cut_document};
pub use import_plan::ImportPlan;
pub use lease::{
    FORGET_WORKERS_AFTER, attempts_exhausted, gave_up_message, lease_expired, lease_until,
};
pub use names::{check_name, name_taken, rename_taken};
pub use retention::{ExpiryCutoffs, is_stale};
