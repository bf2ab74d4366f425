//! Executions (runs of an agent in a session) and their lifecycle.

use stepwise_core::{Execution, Id, Message};

use crate::{IfBusy, NewEvent, NewExecution, NewMessage, Result, Tenant, Transition};

crate::domain! {
    $
    pub trait ExecutionStore, pass PassExecutions, methods execution_store_methods {
        fn create_execution(&self, tenant: &Tenant, new: NewExecution) -> Result<Execution>;

        /// Creates a top-level execution of a session together with messages for it (each
        /// message gets the execution's id; they are stamped in order), each message's
        /// `message.created` event ([`message_created`]) and then `events` (each gets the
        /// execution's id): what a user's message does when it queues a new execution. All or
        /// nothing where the backend can write it at once; the session's last execution and
        /// counters move with it, and the events are published once committed. `Invalid`
        /// without a session, with a parent, or with a message or event of another session;
        /// `NotFound` when the session does not exist for this tenant. With
        /// [`IfBusy::Refuse`], `Busy` (nothing written) when a root execution of the session is
        /// queued or running, checked in the same step as the write.
        ///
        /// A backend that cannot write them at once answers with
        /// [`crate::separately::create_execution_with_messages`].
        fn create_execution_with_messages(&self, tenant: &Tenant, new: NewExecution, messages: Vec<NewMessage>, events: Vec<NewEvent>, if_busy: IfBusy) -> Result<(Execution, Vec<Message>)>;

        fn get_execution(&self, tenant: &Tenant, id: Id) -> Result<Option<Execution>>;

        /// A session's executions (subagents' too), oldest first.
        fn list_executions(&self, tenant: &Tenant, session_id: Id) -> Result<Vec<Execution>>;

        /// Moves an execution to another status; a move the lifecycle does not allow is
        /// `InvalidState`, an unknown execution `NotFound`. Saves queued before the call
        /// and not yet durable may land after the move: a caller whose steps, snapshots or
        /// messages must be there first awaits their acks (or `flush`) before.
        fn transition_execution(&self, tenant: &Tenant, id: Id, transition: Transition) -> Result<Execution>;

        /// Hard delete (a rollback, `on_busy: rollback`): the finished executions `ids` of the
        /// session, each with its sub-executions ([`crate::rules::removal_set`]), their steps,
        /// snapshots, messages and events, in one write. The session's last execution, last
        /// snapshot and message count follow what remains. Ids that are no execution of the
        /// session are skipped; an execution not finished is `InvalidState` and nothing is
        /// deleted. Returns how many executions went.
        fn remove_executions(&self, tenant: &Tenant, session_id: Id, ids: Vec<Id>) -> Result<u64>;
    }
}
