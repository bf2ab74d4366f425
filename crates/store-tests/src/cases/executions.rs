use serde_json::{Value, json};
use stepwise_core::{EventType, Execution, ExecutionStatus, Id, Role, TokenUsage};
use stepwise_store::{
    Ending, IfBusy, MessageQuery, NewEvent, NewExecution, NewMessage, NewSnapshot, Store,
    StoreError, Tenant, Transition,
};

use crate::Harness;
use crate::assert_err;
use crate::support::*;
use stepwise_store::prelude::*;

/// Create, read, list per session (subagents included), the fields a new one starts with.
pub async fn executions<H: Harness>(harness: &H) {
    let (store, _clock) = manual_store(harness).await;
    let acme = tenant("acme");
    let session = create_session(&store, &acme, Some("work")).await;
    let other = create_session(&store, &acme, Some("elsewhere")).await;

    let new = NewExecution {
        session_id: Some(session.id),
        parent_execution_id: None,
        user_id: "user-7".into(),
        agent_type: "tool-calling".into(),
        agent_config: json!({"model": "m", "max_steps": 5}),
        input: json!({"message": "add 2 and 3"}),
        metadata: json!({"source": "test"}),
        status: ExecutionStatus::Pending,
        lease: None,
    };
    let first = ok(store.create_execution(&acme, new).await, "create_execution");
    assert_eq!(first.session_id, Some(session.id));
    assert_eq!(first.tenant_id, "acme");
    assert_eq!(first.user_id, "user-7");
    assert_eq!(first.agent_type, "tool-calling");
    assert_eq!(first.agent_config, json!({"model": "m", "max_steps": 5}));
    assert_eq!(first.input, json!({"message": "add 2 and 3"}));
    assert_eq!(first.metadata, json!({"source": "test"}));
    assert_eq!(first.status, ExecutionStatus::Pending);
    assert_eq!(first.output, Value::Null, "no output before completion");
    assert_eq!(first.step_count, 0);
    assert_eq!(first.token_usage, TokenUsage::default());
    assert_eq!(first.attempts, 0, "never claimed yet");
    assert_eq!(first.error_message, None);
    assert_eq!(first.last_snapshot_id, None);
    assert_eq!(first.completed_at, None);
    assert_eq!(first.parent_execution_id, None);
    assert_eq!(
        some(store.get_execution(&acme, first.id).await, "get_execution"),
        first
    );
    assert_eq!(
        some(store.get_session(&acme, session.id).await, "session").last_execution_id,
        Some(first.id),
        "the session points at its newest execution"
    );

    // An external agent's execution starts running.
    let external =
        create_execution(&store, &acme, Some(session.id), ExecutionStatus::Running).await;
    assert_eq!(external.status, ExecutionStatus::Running);
    // A subagent carries the parent's session.
    let mut sub = new_execution(Some(session.id), ExecutionStatus::Running);
    sub.parent_execution_id = Some(external.id);
    let subagent = ok(
        store.create_execution(&acme, sub).await,
        "create subagent execution",
    );
    assert_eq!(subagent.parent_execution_id, Some(external.id));
    // A background run has no session.
    let background = create_execution(&store, &acme, None, ExecutionStatus::Pending).await;
    assert_eq!(background.session_id, None);
    assert_eq!(
        some(
            store.get_execution(&acme, background.id).await,
            "get background"
        ),
        background
    );
    let elsewhere = create_execution(&store, &acme, Some(other.id), ExecutionStatus::Pending).await;

    let listed = ok(
        store.list_executions(&acme, session.id).await,
        "list_executions",
    );
    let listed_ids: Vec<_> = listed.iter().map(|e| e.id).collect();
    assert_eq!(
        listed_ids,
        vec![first.id, external.id, subagent.id],
        "a session's executions, oldest first"
    );
    assert_eq!(listed[0], first);
    let listed_other: Vec<_> = ok(store.list_executions(&acme, other.id).await, "list other")
        .iter()
        .map(|e| e.id)
        .collect();
    assert_eq!(listed_other, vec![elsewhere.id]);
    assert!(
        ok(
            store.list_executions(&acme, stepwise_core::new_id()).await,
            "list unknown"
        )
        .is_empty()
    );
    assert_eq!(
        ok(
            store.get_execution(&acme, stepwise_core::new_id()).await,
            "get unknown"
        ),
        None
    );

    assert_err!(
        store
            .create_execution(
                &acme,
                new_execution(Some(stepwise_core::new_id()), ExecutionStatus::Pending)
            )
            .await,
        StoreError::NotFound(_),
        "an execution in an unknown session"
    );
    for finished in [
        ExecutionStatus::Completed,
        ExecutionStatus::Failed,
        ExecutionStatus::Cancelled,
        ExecutionStatus::Paused,
    ] {
        let result = store
            .create_execution(&acme, new_execution(Some(other.id), finished))
            .await;
        assert!(
            result.is_err(),
            "an execution cannot start {finished}: got {result:?}"
        );
    }
    assert_eq!(
        ok(store.list_executions(&acme, other.id).await, "list other").len(),
        1,
        "refused creates wrote nothing"
    );
}

/// Every (status, transition) pair: allowed exactly when `ExecutionStatus::can_become`
/// says so; a refused one is `InvalidState` and changes nothing.
pub async fn execution_transitions<H: Harness>(harness: &H) {
    let (store, _clock) = manual_store(harness).await;
    let acme = tenant("acme");
    let transitions = || {
        vec![
            Transition::Pause {
                question: "Which colour?".into(),
            },
            Transition::Resume {
                answer: json!("blue"),
            },
            Transition::Complete {
                output: json!({"answer": 42}),
            },
            Transition::Fail {
                error_message: "the tool broke".into(),
            },
            Transition::Cancel,
        ]
    };
    for from in ExecutionStatus::ALL.iter().copied() {
        for transition in transitions() {
            let session = create_session(&store, &acme, None).await;
            let execution = reach(&store, &acme, session.id, from).await;
            assert_eq!(execution.status, from);
            let target = transition.target();
            let label = format!("{from} --{transition:?}--> {target}");
            let result = store
                .transition_execution(&acme, execution.id, transition.clone())
                .await;
            if from.can_become(target) {
                let moved = ok(result, &label);
                assert_eq!(moved.status, target, "{label}");
                assert_eq!(moved.id, execution.id);
                assert!(
                    moved.updated_at > execution.updated_at,
                    "{label}: updated_at moves on"
                );
                let read = some(
                    store.get_execution(&acme, execution.id).await,
                    "get after transition",
                );
                assert_eq!(read, moved, "{label}: get_execution agrees with the answer");
                match &transition {
                    Transition::Complete { output } => {
                        assert_eq!(&moved.output, output, "{label}: Complete stores the output");
                        assert!(
                            moved.completed_at.is_some(),
                            "{label}: Complete sets completed_at"
                        );
                        assert_eq!(moved.error_message, None);
                    }
                    Transition::Fail { error_message } => {
                        assert_eq!(
                            moved.error_message.as_ref(),
                            Some(error_message),
                            "{label}: Fail stores the error"
                        );
                    }
                    _ => {}
                }
            } else {
                assert_err!(
                    result,
                    StoreError::InvalidState(_),
                    "{label} is not allowed"
                );
                let read = some(
                    store.get_execution(&acme, execution.id).await,
                    "get after refusal",
                );
                assert_eq!(
                    read, execution,
                    "{label}: a refused transition changes nothing"
                );
            }
        }
    }
    assert_err!(
        store
            .transition_execution(&acme, stepwise_core::new_id(), Transition::Cancel)
            .await,
        StoreError::NotFound(_),
        "transition of an unknown execution"
    );

    // Racing transitions on one execution: exactly one finishes it.
    let session = create_session(&store, &acme, None).await;
    let contested = reach(&store, &acme, session.id, ExecutionStatus::Running).await;
    let mut racers = Vec::new();
    for (i, transition) in [
        Transition::Complete {
            output: json!("first"),
        },
        Transition::Cancel,
        Transition::Fail {
            error_message: "late".into(),
        },
        Transition::Complete {
            output: json!("second"),
        },
    ]
    .into_iter()
    .enumerate()
    {
        let store = store.clone();
        let acme = acme.clone();
        racers.push(tokio::spawn(async move {
            (
                i,
                store
                    .transition_execution(&acme, contested.id, transition)
                    .await,
            )
        }));
    }
    let mut winner = None;
    for racer in racers {
        match ok(racer.await, "racing transition") {
            (_, Ok(execution)) => {
                assert!(
                    winner.is_none(),
                    "two transitions finished the same execution"
                );
                winner = Some(execution);
            }
            (_, Err(StoreError::InvalidState(_))) => {}
            (i, Err(other)) => {
                panic!("racing transition {i}: expected InvalidState, got {other:?}")
            }
        }
    }
    let winner = winner.expect("one racing transition wins");
    assert_eq!(
        some(store.get_execution(&acme, contested.id).await, "contested"),
        winner,
        "the winner's result is stored"
    );

    // Finished executions stay finished, whatever is tried after.
    let session = create_session(&store, &acme, None).await;
    let done = reach(&store, &acme, session.id, ExecutionStatus::Completed).await;
    for transition in transitions() {
        assert_err!(
            store
                .transition_execution(&acme, done.id, transition.clone())
                .await,
            StoreError::InvalidState(_),
            "{transition:?} of a completed execution"
        );
    }
    assert_eq!(
        some(store.get_execution(&acme, done.id).await, "done"),
        done
    );
}

/// `queue_ending`, a run's end: once its ack resolves, the answer with its
/// `message.created` event, the final snapshot, the move and the execution's event are
/// durable, and so is every write queued before it (a backend that orders its writes
/// commits them in one, the others wait for the queue first). A move the lifecycle refuses
/// writes no event and no second move.
pub async fn queued_ending<H: Harness>(harness: &H) {
    let (store, _clock) = manual_store(harness).await;
    let acme = tenant("acme");
    let session = create_session(&store, &acme, None).await;
    let execution =
        create_execution(&store, &acme, Some(session.id), ExecutionStatus::Running).await;

    // The run's steps queued, their acks dropped: only the end is awaited.
    for n in 1..=3 {
        drop(ok(
            store.append_step(&acme, new_step(execution.id, n)).await,
            "queue a step",
        ));
    }
    let ending = |transition, event_type, content: &str| Ending {
        answer: Some(
            NewMessage::new(session.id, Role::Assistant, content).for_execution(execution.id),
        ),
        snapshot: Some(NewSnapshot {
            is_final: true,
            ..new_snapshot(execution.id, 3, None)
        }),
        transition,
        event: Some(NewEvent {
            execution_id: Some(execution.id),
            metadata: json!({"step_count": 3}),
            ..new_event(session.id, event_type, content)
        }),
    };
    let complete = Transition::Complete {
        output: json!({"answer": 42}),
    };
    let moved = ok(
        end_run(
            &store,
            &acme,
            execution.id,
            ending(complete, EventType::ExecutionCompleted, "42"),
        )
        .await,
        "queue_ending",
    );
    assert_eq!(moved.status, ExecutionStatus::Completed);
    assert_eq!(moved.output, json!({"answer": 42}));

    let steps = ok(store.list_steps(&acme, execution.id).await, "list_steps").items;
    assert_eq!(
        steps.iter().map(|s| s.step_number).collect::<Vec<_>>(),
        vec![1, 2, 3],
        "the steps queued before the end are durable with it"
    );
    let answers = |messages: Vec<stepwise_core::Message>| -> Vec<String> {
        messages
            .into_iter()
            .filter(|m| m.role == Role::Assistant && m.execution_id == Some(execution.id))
            .map(|m| m.content)
            .collect()
    };
    let messages = ok(
        store
            .list_messages(&acme, session.id, MessageQuery::default())
            .await,
        "list_messages",
    );
    assert_eq!(answers(messages), vec!["42".to_string()], "the answer");
    let snapshots = ok(
        store.list_snapshots(&acme, execution.id).await,
        "list_snapshots",
    );
    let finals: Vec<_> = snapshots.iter().filter(|s| s.is_final).collect();
    assert_eq!(finals.len(), 1, "the final snapshot");
    let now = some(store.get_execution(&acme, execution.id).await, "get");
    assert_eq!(now.status, ExecutionStatus::Completed);
    assert_eq!(
        now.last_snapshot_id,
        Some(finals[0].id),
        "the final snapshot is the execution's last"
    );
    let events = ok(
        store.list_events(&acme, session.id, 0, 100).await,
        "list_events",
    );
    let types: Vec<EventType> = events.iter().map(|e| e.event_type).collect();
    assert_eq!(
        types,
        vec![EventType::MessageCreated, EventType::ExecutionCompleted],
        "the answer's event, then the execution's"
    );
    assert_eq!(events[1].execution_id, Some(execution.id));
    assert_eq!(events[1].metadata, json!({"step_count": 3}));

    // A move the lifecycle refuses: no second move and no event.
    let fail = Transition::Fail {
        error_message: "too late".into(),
    };
    assert_err!(
        end_run(
            &store,
            &acme,
            execution.id,
            ending(fail, EventType::ExecutionFailed, "too late"),
        )
        .await,
        StoreError::InvalidState(_),
        "the end of a completed execution"
    );
    assert_eq!(
        ok(
            store.list_events(&acme, session.id, 0, 100).await,
            "list_events"
        )
        .iter()
        .filter(|e| e.event_type == EventType::ExecutionFailed)
        .count(),
        0,
        "a refused move writes no event"
    );
    assert_eq!(
        some(store.get_execution(&acme, execution.id).await, "get").status,
        ExecutionStatus::Completed
    );
    if store.orders_transitions() {
        // In one write, a refused move leaves nothing of the end behind.
        let messages = ok(
            store
                .list_messages(&acme, session.id, MessageQuery::default())
                .await,
            "list_messages",
        );
        assert_eq!(
            answers(messages),
            vec!["42".to_string()],
            "no second answer"
        );
        assert_eq!(
            ok(
                store.list_snapshots(&acme, execution.id).await,
                "list_snapshots"
            )
            .len(),
            snapshots.len(),
            "no second snapshot"
        );
    }
    let unknown = Ending {
        answer: None,
        snapshot: None,
        transition: Transition::Cancel,
        event: None,
    };
    assert_err!(
        end_run(&store, &acme, stepwise_core::new_id(), unknown.clone()).await,
        StoreError::NotFound(_),
        "the end of an unknown execution"
    );
    // Another tenant's execution is as unknown as one that does not exist.
    assert_err!(
        end_run(&store, &tenant("globex"), execution.id, unknown).await,
        StoreError::NotFound(_),
        "the end of another tenant's execution"
    );
}

/// `queue_ending` awaited: a refusal comes from the call or from its ack.
async fn end_run<S: Store>(
    store: &S,
    tenant: &Tenant,
    id: stepwise_core::Id,
    ending: Ending,
) -> stepwise_store::Result<Execution> {
    store.queue_ending(tenant, id, ending).await?.await
}

/// A new execution driven to `status` through the public calls only.
async fn reach<S: Store>(
    store: &S,
    tenant: &Tenant,
    session_id: stepwise_core::Id,
    status: ExecutionStatus,
) -> Execution {
    use ExecutionStatus::*;
    let start = if status == Pending || status == Cancelled {
        Pending
    } else {
        Running
    };
    let execution = create_execution(store, tenant, Some(session_id), start).await;
    let transition = match status {
        Pending | Running => return execution,
        Paused => Transition::Pause {
            question: "?".into(),
        },
        Completed => Transition::Complete {
            output: json!("done"),
        },
        Failed => Transition::Fail {
            error_message: "broken".into(),
        },
        Cancelled => Transition::Cancel,
    };
    ok(
        store
            .transition_execution(tenant, execution.id, transition)
            .await,
        &format!("drive an execution to {status}"),
    )
}

/// An execution created with its messages and events: the messages carry its id, in order,
/// each followed by its `message.created` event, then the events with its id; the session
/// points at it with its count moved; a session that is not the tenant's, a parent, or a
/// message of another session writes nothing.
pub async fn execution_with_messages<H: Harness>(harness: &H) {
    let (store, _clock) = manual_store(harness).await;
    let acme = tenant("acme");
    let session = create_session(&store, &acme, Some("asked")).await;
    let other = create_session(&store, &acme, Some("other")).await;
    let pair = |session_id| {
        let mut line = NewMessage::new(session_id, Role::Info, "Execution queued");
        line.metadata = json!({"kind": "status", "private": true});
        vec![
            NewMessage::new(session_id, Role::User, "What is 2+3?"),
            line,
        ]
    };
    let queued = |session_id| {
        vec![NewEvent {
            session_id,
            message_id: None,
            execution_id: None,
            event_type: EventType::ExecutionQueued,
            content: "Execution queued".into(),
            metadata: json!({}),
        }]
    };

    let (execution, messages) = ok(
        store
            .create_execution_with_messages(
                &acme,
                new_execution(Some(session.id), ExecutionStatus::Pending),
                pair(session.id),
                queued(session.id),
                IfBusy::Queue,
            )
            .await,
        "create_execution_with_messages",
    );
    assert_eq!(execution.session_id, Some(session.id));
    assert_eq!(execution.status, ExecutionStatus::Pending);
    let stored = some(
        store.get_execution(&acme, execution.id).await,
        "get_execution",
    );
    assert_eq!(stored, execution, "the execution is stored as answered");
    assert_eq!(messages.len(), 2);
    assert!(
        messages
            .iter()
            .all(|m| m.execution_id == Some(execution.id) && m.session_id == session.id),
        "the messages belong to the new execution"
    );
    assert!(
        messages[0].created_at < messages[1].created_at,
        "stamped in order"
    );
    let listed = ok(
        store
            .list_messages(&acme, session.id, MessageQuery::default())
            .await,
        "list_messages",
    );
    assert_eq!(
        listed, messages,
        "the messages are stored as answered, in order"
    );
    let after = some(store.get_session(&acme, session.id).await, "get_session");
    assert_eq!(after.last_execution_id, Some(execution.id));
    assert_eq!(after.message_count, session.message_count + 2);
    // Events are queued: wait until all three are stored.
    let mut events = Vec::new();
    for _ in 0..200 {
        events = ok(
            store.list_events(&acme, session.id, 0, 100).await,
            "list_events",
        );
        if events.len() >= 3 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let seen: Vec<(EventType, Option<Id>, Option<Id>)> = events
        .iter()
        .map(|e| (e.event_type, e.message_id, e.execution_id))
        .collect();
    assert_eq!(
        seen,
        [
            (
                EventType::MessageCreated,
                Some(messages[0].id),
                Some(execution.id)
            ),
            (
                EventType::MessageCreated,
                Some(messages[1].id),
                Some(execution.id)
            ),
            (EventType::ExecutionQueued, None, Some(execution.id)),
        ],
        "each message's event, then the execution's"
    );
    assert_eq!(events[0].metadata, json!({"role": "user"}));
    assert_eq!(
        events[1].metadata,
        json!({"role": "info", "kind": "status"}),
        "an engine line's event repeats its note keys, nothing else"
    );

    // Refused, writing nothing.
    let globex = tenant("globex");
    assert_err!(
        store
            .create_execution_with_messages(
                &globex,
                new_execution(Some(session.id), ExecutionStatus::Pending),
                pair(session.id),
                queued(session.id),
                IfBusy::Queue,
            )
            .await,
        StoreError::NotFound(_),
        "another tenant's session"
    );
    let mut mixed = pair(session.id);
    mixed.push(NewMessage::new(other.id, Role::User, "elsewhere"));
    assert_err!(
        store
            .create_execution_with_messages(
                &acme,
                new_execution(Some(session.id), ExecutionStatus::Pending),
                mixed,
                queued(session.id),
                IfBusy::Queue,
            )
            .await,
        StoreError::Invalid { .. },
        "a message of another session"
    );
    let mut child = new_execution(Some(session.id), ExecutionStatus::Running);
    child.parent_execution_id = Some(execution.id);
    assert_err!(
        store
            .create_execution_with_messages(
                &acme,
                child,
                pair(session.id),
                Vec::new(),
                IfBusy::Queue,
            )
            .await,
        StoreError::Invalid { .. },
        "a subagent"
    );
    assert_err!(
        store
            .create_execution_with_messages(
                &acme,
                new_execution(None, ExecutionStatus::Pending),
                Vec::new(),
                Vec::new(),
                IfBusy::Queue,
            )
            .await,
        StoreError::Invalid { .. },
        "no session"
    );
    let executions = ok(
        store.list_executions(&acme, session.id).await,
        "list_executions",
    );
    assert_eq!(
        executions,
        vec![execution.clone()],
        "nothing more was created"
    );
    let listed = ok(
        store
            .list_messages(&acme, session.id, MessageQuery::default())
            .await,
        "list_messages",
    );
    assert_eq!(listed.len(), 2, "nothing more was appended");
    for s in [session.id, other.id] {
        let now = some(store.get_session(&acme, s).await, "get_session");
        assert_eq!(
            now.message_count,
            if s == session.id { 2 } else { 0 },
            "the counts moved only with the stored messages"
        );
    }

    // Queued only while the session is idle: its pending execution makes it busy, so the
    // write is refused and writes nothing; once that one is finished, it is written.
    let if_idle = || {
        store.create_execution_with_messages(
            &acme,
            new_execution(Some(session.id), ExecutionStatus::Pending),
            pair(session.id),
            queued(session.id),
            IfBusy::Refuse,
        )
    };
    assert_err!(
        if_idle().await,
        StoreError::Busy(_),
        "a queued execution makes the session busy"
    );
    let executions = ok(store.list_executions(&acme, session.id).await, "list");
    assert_eq!(executions.len(), 1, "nothing was written");
    ok(
        store
            .transition_execution(&acme, execution.id, Transition::Cancel)
            .await,
        "cancel",
    );
    let (queued_execution, _) = ok(if_idle().await, "queued once the other is finished");
    assert_eq!(queued_execution.status, ExecutionStatus::Pending);
    assert_err!(
        if_idle().await,
        StoreError::Busy(_),
        "the one just queued makes it busy"
    );
    let executions = ok(store.list_executions(&acme, session.id).await, "list");
    assert_eq!(executions.len(), 2, "one more, not two");
    assert_err!(
        store
            .create_execution_with_messages(
                &globex,
                new_execution(Some(session.id), ExecutionStatus::Pending),
                pair(session.id),
                queued(session.id),
                IfBusy::Refuse,
            )
            .await,
        StoreError::NotFound(_),
        "another tenant's session, busy or not"
    );
}

/// A rollback's hard delete: finished executions go with their sub-executions, steps,
/// snapshots, messages and events; the session's last execution, last snapshot and message
/// count follow what remains; an unfinished one is refused and nothing goes; another
/// session's execution and another tenant are never reached.
pub async fn remove_executions<H: Harness>(harness: &H) {
    let (store, _clock) = manual_store(harness).await;
    let acme = tenant("acme");
    let session = create_session(&store, &acme, Some("rolled")).await;
    let other = create_session(&store, &acme, Some("kept")).await;
    let finish = |id: Id| {
        let store = &store;
        let acme = &acme;
        async move {
            ok(
                store
                    .transition_execution(acme, id, Transition::Cancel)
                    .await,
                "cancel",
            )
        }
    };
    let kept = create_execution(&store, &acme, Some(session.id), ExecutionStatus::Running).await;
    add_step(&store, &acme, kept.id, 1).await;
    let kept_snapshot = add_snapshot(&store, &acme, kept.id, 1, None).await;
    store.flush().await.ok();
    let mut message = NewMessage::new(session.id, Role::User, "kept");
    message.execution_id = Some(kept.id);
    ok(store.append_message(&acme, message).await, "append_message");
    finish(kept.id).await;

    let gone = create_execution(&store, &acme, Some(session.id), ExecutionStatus::Running).await;
    let mut child = new_execution(Some(session.id), ExecutionStatus::Running);
    child.parent_execution_id = Some(gone.id);
    let child = ok(store.create_execution(&acme, child).await, "subagent");
    add_step(&store, &acme, gone.id, 1).await;
    add_step(&store, &acme, child.id, 1).await;
    add_snapshot(&store, &acme, gone.id, 1, None).await;
    let mut message = NewMessage::new(session.id, Role::User, "gone");
    message.execution_id = Some(gone.id);
    ok(store.append_message(&acme, message).await, "append_message");
    let mut event = new_event(session.id, EventType::StepCompleted, "gone step");
    event.execution_id = Some(gone.id);
    ok(
        append_event_durable(&store, &acme, event).await,
        "append_event",
    );
    let elsewhere = create_execution(&store, &acme, Some(other.id), ExecutionStatus::Running).await;
    store.flush().await.ok();

    // Running: refused, nothing goes.
    assert_err!(
        store
            .remove_executions(&acme, session.id, vec![gone.id])
            .await,
        StoreError::InvalidState(_),
        "a running execution"
    );
    assert!(some(store.get_execution(&acme, gone.id).await, "get").id == gone.id);
    finish(gone.id).await;
    assert_err!(
        store
            .remove_executions(&acme, session.id, vec![gone.id])
            .await,
        StoreError::InvalidState(_),
        "its running sub-execution holds it"
    );
    finish(child.id).await;
    finish(elsewhere.id).await;

    // Another tenant, and another session's execution: nothing.
    let removed = ok(
        store
            .remove_executions(&tenant("other"), session.id, vec![gone.id])
            .await,
        "remove_executions (other tenant)",
    );
    assert_eq!(removed, 0);
    let removed = ok(
        store
            .remove_executions(&acme, session.id, vec![elsewhere.id])
            .await,
        "remove_executions (another session's)",
    );
    assert_eq!(removed, 0);
    assert!(
        store
            .get_execution(&acme, elsewhere.id)
            .await
            .ok()
            .flatten()
            .is_some()
    );

    let removed = ok(
        store
            .remove_executions(&acme, session.id, vec![gone.id])
            .await,
        "remove_executions",
    );
    assert_eq!(removed, 2, "the execution and its subagent");
    for id in [gone.id, child.id] {
        assert!(
            ok(store.get_execution(&acme, id).await, "get_execution").is_none(),
            "removed"
        );
    }
    let listed = ok(store.list_executions(&acme, session.id).await, "list");
    assert_eq!(
        listed.iter().map(|e| e.id).collect::<Vec<_>>(),
        vec![kept.id]
    );
    let messages = ok(
        store
            .list_messages(&acme, session.id, MessageQuery::default())
            .await,
        "list_messages",
    );
    assert_eq!(
        messages
            .iter()
            .map(|m| m.content.as_str())
            .collect::<Vec<_>>(),
        vec!["kept"]
    );
    let steps = ok(store.list_steps(&acme, gone.id).await, "list_steps");
    assert!(steps.items.is_empty(), "its steps went");
    let snapshots = ok(store.list_snapshots(&acme, gone.id).await, "list_snapshots");
    assert!(snapshots.is_empty(), "its snapshots went");
    let events = ok(store.list_events(&acme, session.id, 0, 100).await, "events");
    assert!(events.iter().all(|e| e.execution_id != Some(gone.id)));
    let after = some(store.get_session(&acme, session.id).await, "get_session");
    assert_eq!(after.last_execution_id, Some(kept.id));
    assert_eq!(after.message_count, 1);
    assert!(
        after.last_snapshot_id.is_none() || after.last_snapshot_id == Some(kept_snapshot.id),
        "the last snapshot is one that remains: {:?}",
        after.last_snapshot_id
    );
    assert_eq!(
        ok(store.list_steps(&acme, kept.id).await, "list_steps")
            .items
            .len(),
        1,
        "the kept execution's steps stay"
    );
}
