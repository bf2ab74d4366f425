//! Steps (agent memory): the save path, an execution's steps and a session's memory.

use stepwise_core::{Id, Step};

use crate::{Ack, Loaded, NewStep, Result, StepAppend, StepMirror, StepsAfter, Tenant};

crate::domain! {
    $
    pub trait StepStore, pass PassSteps, methods step_store_methods {
        /// Queues a step. The same `(execution, step_number)` with the same body again
        /// resolves to the stored step with `created: false`; another body is a `Conflict`.
        /// Also advances the execution's `step_count` and `token_usage`.
        fn append_step(&self, tenant: &Tenant, new: NewStep) -> Result<Ack<StepAppend>>;

        /// [`Self::append_step`] with the step's readable side in the same write: when the
        /// step is new, `mirror`'s messages (each with its `message.created` event) and then its
        /// events are stored with it, in one transaction on backends that have them; when the
        /// same step was already there (`created: false`) or the append fails, none of the
        /// mirror is written. The mirror belongs to the step's session (else `Invalid`).
        ///
        /// A backend without transactions answers with [`crate::separately::append_step_mirrored`]
        /// (the step first, then the mirror as separate writes).
        fn append_step_mirrored(&self, tenant: &Tenant, new: NewStep, mirror: StepMirror) -> Result<Ack<StepAppend>>;

        /// An execution's steps by step number.
        fn list_steps(&self, tenant: &Tenant, execution_id: Id) -> Result<Loaded<Step>>;

        /// A session's agent memory: the steps of its executions, in execution order.
        fn list_session_steps(&self, tenant: &Tenant, session_id: Id) -> Result<Loaded<Step>>;

        /// The session's step rows past `after` (a position from an earlier answer, or
        /// [`START_POSITION`](crate::START_POSITION)), with the number of rows the session has,
        /// read together: what the [`SessionCache`](crate::SessionCache) asks on each restore.
        /// A backend without a cache may answer every row as new
        /// ([`crate::cache::whole_session`]); backends with one answer with an indexed query.
        fn list_session_steps_after(&self, tenant: &Tenant, session_id: Id, after: i64) -> Result<StepsAfter>;
    }
}
