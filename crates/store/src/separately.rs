//! The writes that span domains, done as separate writes in order: what a backend that
//! cannot commit them together (the JSON files backend) answers with.

use stepwise_core::{Execution, Message};

use crate::{
    Ack, EventStore, ExecutionStore, IfBusy, MessageStore, NewEvent, NewExecution, NewMessage,
    NewStep, Result, StepAppend, StepMirror, StepStore, StoreError, Tenant, message_created, rules,
};

/// [`ExecutionStore::create_execution_with_messages`] as separate writes: the execution,
/// then the messages, then the events queued. With [`IfBusy::Refuse`] the session's
/// executions are read first: the caller makes that read and the writes one step (the files
/// backend holds a lock over them).
pub async fn create_execution_with_messages<S>(
    store: &S,
    tenant: &Tenant,
    new: NewExecution,
    messages: Vec<NewMessage>,
    events: Vec<NewEvent>,
    if_busy: IfBusy,
) -> Result<(Execution, Vec<Message>)>
where
    S: ExecutionStore + MessageStore + EventStore,
{
    let session_id = rules::check_execution_with_messages(&new, &messages, &events)?;
    if if_busy == IfBusy::Refuse {
        let executions = store.list_executions(tenant, session_id).await?;
        rules::refuse_if_busy(executions.iter().map(|e| (e.parent_execution_id, e.status)))?;
    }
    let execution = store.create_execution(tenant, new).await?;
    // Appended at once, first polled in order: each is stamped when first polled, so they
    // keep their order.
    let stored = futures_util::future::try_join_all(
        messages
            .into_iter()
            .map(|m| store.append_message(tenant, m.for_execution(execution.id))),
    )
    .await?;
    let announced = stored.iter().map(message_created);
    let events = events.into_iter().map(|e| NewEvent {
        execution_id: Some(execution.id),
        ..e
    });
    for event in announced.chain(events).collect::<Vec<_>>() {
        // Queued, not awaited: events of one session stay in order (FIFO queue).
        if let Err(e) = store.append_event(tenant, event).await {
            tracing::warn!(error = %e, "could not queue an event");
        }
    }
    Ok((execution, stored))
}

/// [`StepStore::append_step_mirrored`] as separate writes: the step first, then the mirror
/// (a failing mirror write is logged, the step stays).
pub async fn append_step_mirrored<S>(
    store: &S,
    tenant: &Tenant,
    new: NewStep,
    mirror: StepMirror,
) -> Result<Ack<StepAppend>>
where
    S: StepStore + ExecutionStore + MessageStore + EventStore,
{
    if !mirror.is_empty() {
        let execution = store.get_execution(tenant, new.execution_id).await?;
        let execution = execution.ok_or(StoreError::NotFound("execution"))?;
        mirror.check_session(execution.session_id)?;
    }
    let appended = store.append_step(tenant, new).await?.await?;
    if appended.created {
        write_mirror(store, tenant, mirror).await;
    }
    Ok(Ack::ready(Ok(appended)))
}

/// The mirror as separate writes: each message, its event, then the events, queued in
/// order. A write that fails is logged and skipped.
async fn write_mirror<S: MessageStore + EventStore>(
    store: &S,
    tenant: &Tenant,
    mirror: StepMirror,
) {
    for new in mirror.messages {
        match store.append_message(tenant, new).await {
            Ok(message) => queue_event(store, tenant, message_created(&message)).await,
            Err(e) => tracing::warn!(error = %e, "could not store a step's mirrored message"),
        }
    }
    for event in mirror.events {
        queue_event(store, tenant, event).await;
    }
}

async fn queue_event<S: EventStore>(store: &S, tenant: &Tenant, event: NewEvent) {
    // Queued, not awaited: events of one session stay in order (the save queue is FIFO).
    if let Err(e) = store.append_event(tenant, event).await {
        tracing::warn!(error = %e, "could not queue a step's mirrored event");
    }
}
