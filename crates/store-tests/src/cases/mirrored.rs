//! A step written with its mirror (`append_step_mirrored`): the step, its messages and its
//! events are stored together when the step is new, and none of the mirror otherwise.

use std::time::Duration;

use serde_json::json;
use stepwise_core::{EventType, ExecutionStatus, Id, Role, StepKind};
use stepwise_store::{
    MessageQuery, NewEvent, NewMessage, NewStep, StepAppend, StepMirror, Store, StoreError, Tenant,
};

use crate::Harness;
use crate::assert_err;
use crate::support::*;
use stepwise_store::prelude::*;

fn mirror(session_id: Id, execution_id: Id, step_number: u32) -> StepMirror {
    StepMirror {
        messages: vec![
            NewMessage::new(session_id, Role::User, "what is 2+2?").for_execution(execution_id),
            NewMessage::new(session_id, Role::Assistant, "4").for_execution(execution_id),
        ],
        events: vec![NewEvent {
            session_id,
            message_id: None,
            execution_id: Some(execution_id),
            event_type: EventType::StepCompleted,
            content: format!("Completed step {step_number}"),
            metadata: json!({"step_number": step_number}),
        }],
    }
}

async fn append<S: Store>(
    store: &S,
    tenant: &Tenant,
    new: NewStep,
    mirror: StepMirror,
) -> stepwise_store::Result<StepAppend> {
    store.append_step_mirrored(tenant, new, mirror).await?.await
}

/// New step: step, messages, `message.created` events and the mirror's events, in order;
/// the same step again, a conflicting one, another tenant's and a mirror of another
/// session write nothing of the mirror.
pub async fn step_mirrored<H: Harness>(harness: &H) {
    let (store, _clock) = manual_store(harness).await;
    let acme = tenant("acme");
    let session = create_session(&store, &acme, Some("mirrored")).await;
    let other = create_session(&store, &acme, Some("other")).await;
    let execution =
        create_execution(&store, &acme, Some(session.id), ExecutionStatus::Running).await;
    let before = add_event(&store, &acme, session.id, "before").await;
    let mut live = store.subscribe(&acme, session.id);

    let new = NewStep {
        execution_id: execution.id,
        step_number: 1,
        kind: StepKind::Action,
        body: step_body(1),
    };
    let first = ok(
        append(
            &store,
            &acme,
            new.clone(),
            mirror(session.id, execution.id, 1),
        )
        .await,
        "append_step_mirrored",
    );
    assert!(first.created, "a new step is created");
    assert_eq!(
        first.step.body(),
        step_body(1),
        "the body is stored as given"
    );
    let steps = ok(store.list_steps(&acme, execution.id).await, "list_steps");
    assert_eq!(steps.items.len(), 1, "the step is stored");

    let messages = ok(
        store
            .list_messages(&acme, session.id, MessageQuery::default())
            .await,
        "list_messages",
    );
    let said: Vec<_> = messages
        .iter()
        .map(|m| (m.role, m.content.as_str(), m.execution_id))
        .collect();
    assert_eq!(
        said,
        vec![
            (Role::User, "what is 2+2?", Some(execution.id)),
            (Role::Assistant, "4", Some(execution.id)),
        ],
        "the mirror's messages are stored in order, with their execution"
    );
    let stored = some(store.get_session(&acme, session.id).await, "get_session");
    assert_eq!(stored.message_count, 2, "the session counts the messages");

    let events = ok(
        store.list_events(&acme, session.id, before.id, 100).await,
        "list_events",
    );
    let seen: Vec<_> = events
        .iter()
        .map(|e| (e.id, e.event_type, e.message_id, e.content.as_str()))
        .collect();
    assert_eq!(
        seen,
        vec![
            (
                before.id + 1,
                EventType::MessageCreated,
                Some(messages[0].id),
                "what is 2+2?"
            ),
            (
                before.id + 2,
                EventType::MessageCreated,
                Some(messages[1].id),
                "4"
            ),
            (
                before.id + 3,
                EventType::StepCompleted,
                None,
                "Completed step 1"
            ),
        ],
        "each message's event, then the mirror's events, with the next ids"
    );
    assert_eq!(events[0].metadata, json!({"role": "user"}));
    assert_eq!(events[2].metadata, json!({"step_number": 1}));
    let mut received = Vec::new();
    while received.len() < events.len() {
        let got = tokio::time::timeout(Duration::from_secs(10), live.recv()).await;
        let got = ok(ok(got, "a live event within 10 s"), "live event");
        // A subscriber may still see events committed just before it subscribed.
        if got.id > before.id {
            received.push((*got).clone());
        }
    }
    assert_eq!(
        received, events,
        "subscribers get the committed events in order"
    );

    // The same step again: answered as stored, nothing of the mirror again.
    let again = ok(
        append(
            &store,
            &acme,
            new.clone(),
            mirror(session.id, execution.id, 1),
        )
        .await,
        "the same step again",
    );
    assert!(!again.created, "the same step again is not created twice");
    assert_eq!(again.step, first.step);
    let mut other_body = new.clone();
    other_body.body.observations = Some("something else".into());
    assert_err!(
        append(
            &store,
            &acme,
            other_body,
            mirror(session.id, execution.id, 1)
        )
        .await,
        StoreError::Conflict(_),
        "step 1 again with another body"
    );
    // A mirror of another session: refused before anything is written.
    assert_err!(
        append(
            &store,
            &acme,
            NewStep {
                step_number: 2,
                ..new.clone()
            },
            mirror(other.id, execution.id, 2)
        )
        .await,
        StoreError::Invalid { .. },
        "a mirror of another session"
    );
    // Another tenant's execution is no execution.
    assert_err!(
        append(
            &store,
            &tenant("globex"),
            NewStep {
                step_number: 2,
                ..new.clone()
            },
            StepMirror::default()
        )
        .await,
        StoreError::NotFound(_),
        "another tenant's execution"
    );
    let steps = ok(store.list_steps(&acme, execution.id).await, "list_steps");
    assert_eq!(
        steps.items.len(),
        1,
        "no step was added by the refused writes"
    );
    let after = ok(
        store
            .list_messages(&acme, session.id, MessageQuery::default())
            .await,
        "list_messages",
    );
    assert_eq!(
        after.len(),
        2,
        "no message was added by the repeated or refused writes"
    );
    let events_after = ok(
        store.list_events(&acme, session.id, before.id, 100).await,
        "list_events",
    );
    assert_eq!(
        events_after, events,
        "no event was added by the repeated or refused writes"
    );

    // An empty mirror is a plain append.
    let plain = ok(
        append(
            &store,
            &acme,
            NewStep {
                step_number: 2,
                ..new
            },
            StepMirror::default(),
        )
        .await,
        "a step with an empty mirror",
    );
    assert!(plain.created);
    let events_plain = ok(
        store.list_events(&acme, session.id, before.id, 100).await,
        "list_events",
    );
    assert_eq!(events_plain.len(), 3, "an empty mirror adds no event");
}
