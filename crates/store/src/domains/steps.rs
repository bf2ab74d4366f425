//! Steps (agent memory): the save path, an execution's steps and a session's memory.

use std::future::Future;

use stepwise_core::{Id, Step};

use crate::{Ack, Loaded, NewStep, Result, StepAppend, StepMirror, StepsAfter, Tenant};

pub trait StepStore: Send + Sync {
    /// Queues a step. The same `(execution, step_number)` with the same body again
    /// resolves to the stored step with `created: false`; another body is a `Conflict`.
    /// Also advances the execution's `step_count` and `token_usage`.
    fn append_step(
        &self,
        tenant: &Tenant,
        new: NewStep,
    ) -> impl Future<Output = Result<Ack<StepAppend>>> + Send;

    /// [`Self::append_step`] with the step's readable side in the same write: when the
    /// step is new, `mirror`'s messages (each with its `message.created` event) and then its
    /// events are stored with it, in one transaction on backends that have them; when the
    /// same step was already there (`created: false`) or the append fails, none of the
    /// mirror is written. The mirror belongs to the step's session (else `Invalid`).
    ///
    /// A backend without transactions answers with [`crate::separately::append_step_mirrored`]
    /// (the step first, then the mirror as separate writes).
    fn append_step_mirrored(
        &self,
        tenant: &Tenant,
        new: NewStep,
        mirror: StepMirror,
    ) -> impl Future<Output = Result<Ack<StepAppend>>> + Send;

    /// An execution's steps by step number.
    fn list_steps(
        &self,
        tenant: &Tenant,
        execution_id: Id,
    ) -> impl Future<Output = Result<Loaded<Step>>> + Send;

    /// A session's agent memory: the steps of its executions, in execution order.
    fn list_session_steps(
        &self,
        tenant: &Tenant,
        session_id: Id,
    ) -> impl Future<Output = Result<Loaded<Step>>> + Send;

    /// The session's step rows past `after` (a position from an earlier answer, or
    /// [`START_POSITION`](crate::START_POSITION)), with the number of rows the session has,
    /// read together: what the [`SessionCache`](crate::SessionCache) asks on each restore.
    /// A backend without a cache may answer every row as new
    /// ([`crate::cache::whole_session`]); backends with one answer with an indexed query.
    fn list_session_steps_after(
        &self,
        tenant: &Tenant,
        session_id: Id,
        after: i64,
    ) -> impl Future<Output = Result<StepsAfter>> + Send;
}

/// Passes the whole domain through to the wrapped store (see [`crate::Layer`]).
pub trait PassSteps: crate::Layer {}

impl<L: PassSteps> StepStore for L {
    fn append_step(
        &self,
        tenant: &Tenant,
        new: NewStep,
    ) -> impl Future<Output = Result<Ack<StepAppend>>> + Send {
        self.layer_inner().append_step(tenant, new)
    }

    fn append_step_mirrored(
        &self,
        tenant: &Tenant,
        new: NewStep,
        mirror: StepMirror,
    ) -> impl Future<Output = Result<Ack<StepAppend>>> + Send {
        self.layer_inner().append_step_mirrored(tenant, new, mirror)
    }

    fn list_steps(
        &self,
        tenant: &Tenant,
        execution_id: Id,
    ) -> impl Future<Output = Result<Loaded<Step>>> + Send {
        self.layer_inner().list_steps(tenant, execution_id)
    }

    fn list_session_steps(
        &self,
        tenant: &Tenant,
        session_id: Id,
    ) -> impl Future<Output = Result<Loaded<Step>>> + Send {
        self.layer_inner().list_session_steps(tenant, session_id)
    }

    fn list_session_steps_after(
        &self,
        tenant: &Tenant,
        session_id: Id,
        after: i64,
    ) -> impl Future<Output = Result<StepsAfter>> + Send {
        self.layer_inner()
            .list_session_steps_after(tenant, session_id, after)
    }
}
