//! The storage conformance suite. Every backend runs these cases unchanged; together they
//! are the executable specification of [`stepwise_store::Store`].
//!
//! A backend provides a [`Harness`] and expands the suite in one of its integration tests:
//!
//! ```ignore
//! stepwise_store_tests::conformance_tests!(MyHarness::new());
//! // or, for a backend that cannot do some of it:
//! stepwise_store_tests::conformance_tests!(MyHarness::new(); skip = [corruption_recovery]);
//! ```
//!
//! That expands to one `#[test]` per case (see [`CASES`]), each on its own multi-threaded
//! tokio runtime with two workers, so every case shows up and fails on its own.
//!
//! This crate is test code: a broken expectation panics with what was expected and what
//! the store answered.

use std::future::Future;

use stepwise_core::{Id, SharedClock};

pub mod cases;
pub mod support;

/// What a backend provides to be tested.
pub trait Harness: Send + Sync + 'static {
    type Store: stepwise_store::Store;

    /// A fresh, empty store whose server time comes from `clock`.
    fn fresh(&self, clock: SharedClock) -> impl Future<Output = Self::Store> + Send;

    /// Closes `store` (draining its queue) and opens the same database again; `None` if
    /// the backend cannot.
    fn reopen(
        &self,
        store: Self::Store,
        clock: SharedClock,
    ) -> impl Future<Output = Option<Self::Store>> + Send;

    /// Damages the stored payload of one step in place (the backend knows its tables);
    /// `false` if unsupported.
    fn corrupt_step(
        &self,
        store: &Self::Store,
        execution_id: Id,
        step_number: u32,
        how: Corruption,
    ) -> impl Future<Output = bool> + Send;
}

/// How [`Harness::corrupt_step`] damages a stored step payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Corruption {
    /// Bytes that are not JSON at all.
    BadJson,
    /// A well-formed document whose schema version is newer than this build knows.
    FutureVersion,
    /// Bytes that start like a zstd frame but cannot be inflated.
    BrokenZstd,
}

impl Corruption {
    pub const ALL: [Corruption; 3] = [
        Corruption::BadJson,
        Corruption::FutureVersion,
        Corruption::BrokenZstd,
    ];
}

/// The one list of cases; [`CASES`] and [`conformance_tests!`] are both generated from it.
#[doc(hidden)]
#[macro_export]
macro_rules! __with_cases {
    ($callback:ident ! $args:tt) => {
        $crate::$callback! { $args
            sessions
            session_names
            list_sessions
            list_sessions_pagination
            messages
            queued_messages
            executions
            execution_transitions
            queued_ending
            execution_with_messages
            remove_executions
            queue_claims
            queue_leases
            queue_resume
            queue_pause_is_not_an_attempt
            queue_concurrent_claims
            queue_claim_batch
            queue_concurrent_claim_batches
            queue_deep
            queue_model
            queue_claim_filter
            session_agent
            workers_seen
            steps
            concurrent_step_writers
            session_cache
            session_message_cache
            fire_and_forget
            step_mirrored
            snapshots
            events
            events_live
            tenant_isolation
            retention_mark_abandoned
            retention_abandoned_comes_back
            retention_per_tenant
            retention_cleanup
            corruption_recovery
            restore_after_reopen
            import_document
            api_keys
            signing_keys
            operations
            checkpoints_put_get
            checkpoint_writes
            checkpoints_list
            checkpoint_threads
            checkpoint_isolation
            checkpoint_export_import
            checkpoint_write_refs
            checkpoint_events
            langgraph_store_items
            langgraph_store_search
            langgraph_store_ttl
            langgraph_store_isolation
        }
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __case_names {
    (() $($case:ident)*) => {
        /// Every case of the suite, by name (the names of the generated tests).
        pub const CASES: &[&str] = &[$(stringify!($case)),*];
    };
}

__with_cases!(__case_names!());

#[doc(hidden)]
#[macro_export]
macro_rules! __case_tests {
    (($harness:expr; $skip:expr) $($case:ident)*) => {
        $(
            #[test]
            fn $case() {
                $crate::run_case(stringify!($case), $skip, async {
                    let harness = $harness;
                    $crate::cases::$case(&harness).await;
                });
            }
        )*

        #[test]
        fn conformance_skip_list_names_known_cases() {
            for name in $skip {
                assert!(
                    $crate::CASES.contains(name),
                    "the skip list names `{name}`, which is not a conformance case"
                );
            }
        }
    };
}

/// Expands to one test per conformance case, each calling
/// `stepwise_store_tests::cases::<name>(&harness).await` on a multi-threaded runtime.
/// The harness expression is evaluated once per test. An optional skip list names cases
/// the backend does not support; they pass with a note on stderr.
#[macro_export]
macro_rules! conformance_tests {
    ($harness:expr $(,)?) => {
        $crate::__with_cases!(__case_tests!($harness; &[] as &[&str]));
    };
    ($harness:expr; skip = [$($skip:ident),* $(,)?] $(,)?) => {
        $crate::__with_cases!(__case_tests!($harness; &[$(stringify!($skip)),*] as &[&str]));
    };
}

/// Runs one case on its own runtime (two worker threads, as the stores will see in a
/// server). The macro's tests call this; a backend that must decide per test whether to
/// run at all (a database server that may be absent) can call it from its own tests,
/// checking its list against [`CASES`].
pub fn run_case(name: &str, skip: &[&str], case: impl Future<Output = ()>) {
    if skip.contains(&name) {
        eprintln!("conformance case `{name}` skipped by this backend");
        return;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("cannot start a tokio runtime: {e}"));
    runtime.block_on(case);
}
