//! Executions (runs of an agent in a session) and their lifecycle.

use std::future::Future;

use stepwise_core::{Execution, Id, Message};

use crate::{NewEvent, NewExecution, NewMessage, Result, Tenant, Transition};

pub trait ExecutionStore: Send + Sync {
    fn create_execution(
        &self,
        tenant: &Tenant,
        new: NewExecution,
    ) -> impl Future<Output = Result<Execution>> + Send;

    /// Creates a top-level execution of a session together with messages for it (each
    /// message gets the execution's id; they are stamped in order), each message's
    /// `message.created` event ([`message_created`]) and then `events` (each gets the
    /// execution's id): what a user's message does when it queues a new execution. All or
    /// nothing where the backend can write it at once; the session's last execution and
    /// counters move with it, and the events are published once committed. `Invalid`
    /// without a session, with a parent, or with a message or event of another session;
    /// `NotFound` when the session does not exist for this tenant.
    ///
    /// A backend that cannot write them at once answers with
    /// [`crate::separately::create_execution_with_messages`].
    fn create_execution_with_messages(
        &self,
        tenant: &Tenant,
        new: NewExecution,
        messages: Vec<NewMessage>,
        events: Vec<NewEvent>,
    ) -> impl Future<Output = Result<(Execution, Vec<Message>)>> + Send;

    fn get_execution(
        &self,
        tenant: &Tenant,
        id: Id,
    ) -> impl Future<Output = Result<Option<Execution>>> + Send;

    /// A session's executions (subagents' too), oldest first.
    fn list_executions(
        &self,
        tenant: &Tenant,
        session_id: Id,
    ) -> impl Future<Output = Result<Vec<Execution>>> + Send;

    /// Moves an execution to another status; a move the lifecycle does not allow is
    /// `InvalidState`, an unknown execution `NotFound`.
    fn transition_execution(
        &self,
        tenant: &Tenant,
        id: Id,
        transition: Transition,
    ) -> impl Future<Output = Result<Execution>> + Send;

    /// Hard delete (a rollback, `on_busy: rollback`): the finished executions `ids` of the
    /// session, each with its sub-executions ([`crate::rules::removal_set`]), their steps,
    /// snapshots, messages and events, in one write. The session's last execution, last
    /// snapshot and message count follow what remains. Ids that are no execution of the
    /// session are skipped; an execution not finished is `InvalidState` and nothing is
    /// deleted. Returns how many executions went.
    fn remove_executions(
        &self,
        tenant: &Tenant,
        session_id: Id,
        ids: Vec<Id>,
    ) -> impl Future<Output = Result<u64>> + Send;
}

/// Passes the whole domain through to the wrapped store (see [`crate::Layer`]).
pub trait PassExecutions: crate::Layer {}

impl<L: PassExecutions> ExecutionStore for L {
    fn create_execution(
        &self,
        tenant: &Tenant,
        new: NewExecution,
    ) -> impl Future<Output = Result<Execution>> + Send {
        self.layer_inner().create_execution(tenant, new)
    }

    fn create_execution_with_messages(
        &self,
        tenant: &Tenant,
        new: NewExecution,
        messages: Vec<NewMessage>,
        events: Vec<NewEvent>,
    ) -> impl Future<Output = Result<(Execution, Vec<Message>)>> + Send {
        self.layer_inner()
            .create_execution_with_messages(tenant, new, messages, events)
    }

    fn get_execution(
        &self,
        tenant: &Tenant,
        id: Id,
    ) -> impl Future<Output = Result<Option<Execution>>> + Send {
        self.layer_inner().get_execution(tenant, id)
    }

    fn list_executions(
        &self,
        tenant: &Tenant,
        session_id: Id,
    ) -> impl Future<Output = Result<Vec<Execution>>> + Send {
        self.layer_inner().list_executions(tenant, session_id)
    }

    fn transition_execution(
        &self,
        tenant: &Tenant,
        id: Id,
        transition: Transition,
    ) -> impl Future<Output = Result<Execution>> + Send {
        self.layer_inner()
            .transition_execution(tenant, id, transition)
    }

    fn remove_executions(
        &self,
        tenant: &Tenant,
        session_id: Id,
        ids: Vec<Id>,
    ) -> impl Future<Output = Result<u64>> + Send {
        self.layer_inner()
            .remove_executions(tenant, session_id, ids)
    }
}
