use std::collections::HashSet;
use std::sync::Arc;

use serde_json::json;
use stepwise_core::{Event, EventType, ExecutionStatus, Role};
use stepwise_store::prelude::*;
use stepwise_store::{NewEvent, StoreError};
use tokio::sync::broadcast;

use crate::Harness;
use crate::assert_err;
use crate::support::*;

/// Ids from 1 per session, strictly increasing, also under concurrent appends; replay.
pub async fn events<H: Harness>(harness: &H) {
    let (store, _clock) = manual_store(harness).await;
    let acme = tenant("acme");
    let first = create_session(&store, &acme, Some("one")).await;
    let second = create_session(&store, &acme, Some("two")).await;
    let execution = create_execution(&store, &acme, Some(first.id), ExecutionStatus::Running).await;
    let message = append_message(&store, &acme, first.id, Role::User, "hi").await;

    let new = NewEvent {
        session_id: first.id,
        message_id: Some(message.id),
        execution_id: Some(execution.id),
        event_type: EventType::MessageCreated,
        content: "hi".into(),
        metadata: json!({"step_number": 1, "tool": "search"}),
    };
    let e1 = ok(
        append_event_durable(&store, &acme, new).await,
        "append_event",
    );
    assert_eq!(e1.id, 1, "a session's first event has id 1");
    assert_eq!(e1.session_id, first.id);
    assert_eq!(e1.message_id, Some(message.id));
    assert_eq!(e1.execution_id, Some(execution.id));
    assert_eq!(e1.event_type, EventType::MessageCreated);
    assert_eq!(e1.content, "hi");
    assert_eq!(e1.metadata, json!({"step_number": 1, "tool": "search"}));

    let e2 = add_event(&store, &acme, first.id, "two").await;
    let f1 = add_event(&store, &acme, second.id, "other one").await;
    let e3 = add_event(&store, &acme, first.id, "three").await;
    let f2 = add_event(&store, &acme, second.id, "other two").await;
    assert_eq!((e2.id, e3.id), (2, 3), "ids increase by session");
    assert_eq!((f1.id, f2.id), (1, 2), "every session counts from 1");
    assert!(e3.timestamp >= e2.timestamp);

    let all = ok(
        store.list_events(&acme, first.id, 0, 100).await,
        "list_events",
    );
    assert_eq!(
        all,
        vec![e1.clone(), e2.clone(), e3.clone()],
        "replay returns the stored events, in order"
    );
    assert_eq!(
        ok(store.list_events(&acme, first.id, 1, 100).await, "after 1"),
        vec![e2.clone(), e3.clone()]
    );
    assert_eq!(
        ok(
            store.list_events(&acme, first.id, 1, 1).await,
            "after 1, limit 1"
        ),
        vec![e2.clone()]
    );
    assert!(
        ok(
            store.list_events(&acme, first.id, 3, 100).await,
            "after the last"
        )
        .is_empty()
    );
    assert!(
        ok(
            store.list_events(&acme, first.id, 1000, 100).await,
            "after a future id"
        )
        .is_empty()
    );
    assert_eq!(
        ok(
            store.list_events(&acme, second.id, 0, 100).await,
            "other session"
        ),
        vec![f1, f2]
    );
    assert!(
        ok(
            store
                .list_events(&acme, stepwise_core::new_id(), 0, 100)
                .await,
            "unknown"
        )
        .is_empty()
    );
    assert_err!(
        append_event_durable(
            &store,
            &acme,
            new_event(stepwise_core::new_id(), EventType::StepStarted, "x")
        )
        .await,
        StoreError::NotFound(_),
        "an event of an unknown session"
    );

    // Concurrent appenders: ids stay dense and unique.
    let mut tasks = Vec::new();
    for t in 0..4 {
        let store = store.clone();
        let acme = acme.clone();
        let session_id = second.id;
        tasks.push(tokio::spawn(async move {
            let mut ids = Vec::new();
            for i in 0..25 {
                ids.push(
                    add_event(&store, &acme, session_id, &format!("task {t} event {i}"))
                        .await
                        .id,
                );
            }
            ids
        }));
    }
    let mut ids = HashSet::new();
    for task in tasks {
        for id in ok(task.await, "event task") {
            assert!(ids.insert(id), "event id {id} was handed out twice");
        }
    }
    assert_eq!(
        ids,
        (3..=102).collect::<HashSet<i64>>(),
        "ids 3..=102, no gap, no repeat"
    );
    let replay = ok(store.list_events(&acme, second.id, 0, 1000).await, "replay");
    assert_eq!(
        replay.iter().map(|e| e.id).collect::<Vec<_>>(),
        (1..=102).collect::<Vec<i64>>()
    );
    let limited = ok(store.list_events(&acme, second.id, 50, 10).await, "page");
    assert_eq!(
        limited.iter().map(|e| e.id).collect::<Vec<_>>(),
        (51..=60).collect::<Vec<i64>>()
    );
}

/// Subscribers get committed events with their ids, and live-only events that are never
/// stored; a session's subscribers see only that session.
pub async fn events_live<H: Harness>(harness: &H) {
    let (store, _clock) = manual_store(harness).await;
    let acme = tenant("acme");
    let session = create_session(&store, &acme, Some("live")).await;
    let quiet = create_session(&store, &acme, Some("quiet")).await;
    add_event(&store, &acme, session.id, "before anyone listened").await;

    let mut live = store.subscribe(&acme, session.id);
    let mut quiet_live = store.subscribe(&acme, quiet.id);
    let mut appended = Vec::new();
    for i in 0..5 {
        appended.push(add_event(&store, &acme, session.id, &format!("live {i}")).await);
    }
    for expected in &appended {
        let got = receive_after(&mut live, expected.id - 1).await;
        assert_eq!(
            &*got, expected,
            "a subscriber gets the committed event, id included"
        );
    }
    assert_eq!(
        appended.iter().map(|e| e.id).collect::<Vec<_>>(),
        vec![2, 3, 4, 5, 6]
    );

    // A fire-and-forget event reaches subscribers too, with its id.
    drop(ok(
        store
            .append_event(
                &acme,
                new_event(session.id, EventType::StepStarted, "queued"),
            )
            .await,
        "queue event",
    ));
    let got = receive_after(&mut live, 6).await;
    assert_eq!(got.id, 7);
    assert_eq!(got.content, "queued");

    // Live-only events.
    let delta = Event {
        id: 0,
        session_id: session.id,
        message_id: None,
        execution_id: None,
        event_type: EventType::MessageDelta,
        content: "Hel".into(),
        metadata: json!({}),
        timestamp: stepwise_core::Timestamp::now(),
    };
    store.publish_live(&acme, delta.clone());
    let got = receive_after(&mut live, 7).await;
    assert_eq!(got.event_type, EventType::MessageDelta);
    assert_eq!(got.content, "Hel");
    assert_eq!(got.id, 0, "live-only events have no id");
    ok(store.flush().await, "flush");
    let stored = ok(
        store.list_events(&acme, session.id, 0, 100).await,
        "list_events",
    );
    assert_eq!(stored.len(), 7, "a live-only event is not stored");
    assert!(
        stored
            .iter()
            .all(|e| e.event_type != EventType::MessageDelta)
    );

    // The other session's subscriber saw none of it: its first event is its own.
    let own = add_event(&store, &acme, quiet.id, "quiet one").await;
    let got = receive_after(&mut quiet_live, 0).await;
    assert_eq!(*got, own, "a subscriber gets only its session's events");

    // A subscriber that joins late gets what comes after (replay fills the rest).
    let mut late = store.subscribe(&acme, session.id);
    let next = add_event(&store, &acme, session.id, "late").await;
    assert_eq!(*receive_after(&mut late, 7).await, next);
    assert_eq!(next.id, 8);

    // Subscribe, replay, then follow live while a writer keeps appending: skipping live
    // events already replayed gives every event exactly once, in order.
    let busy = create_session(&store, &acme, Some("busy")).await;
    let writer = {
        let store = store.clone();
        let acme = acme.clone();
        tokio::spawn(async move {
            for i in 0..60 {
                add_event(&store, &acme, busy.id, &format!("busy {i}")).await;
            }
        })
    };
    // Join while the writer is under way (or already done: the protocol holds either way).
    tokio::task::yield_now().await;
    let mut follower = store.subscribe(&acme, busy.id);
    let replayed = ok(store.list_events(&acme, busy.id, 0, 1000).await, "replay");
    let mut seen: Vec<i64> = replayed.iter().map(|e| e.id).collect();
    let mut last = seen.last().copied().unwrap_or(0);
    while last < 60 {
        let event = receive_after(&mut follower, last).await;
        assert_eq!(event.session_id, busy.id);
        seen.push(event.id);
        last = event.id;
    }
    assert_eq!(
        seen,
        (1..=60).collect::<Vec<i64>>(),
        "replay then live: no gap, no duplicate"
    );
    ok(writer.await, "writer task");
}

/// The next live event, skipping stored events with ids up to `replayed`: the documented
/// subscribe-then-replay protocol drops those, since an event committed just before the
/// subscription may still be on its way. Live-only events are never skipped.
async fn receive_after(rx: &mut broadcast::Receiver<Arc<Event>>, replayed: i64) -> Arc<Event> {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Ok(event)) if event.id != 0 && event.id <= replayed => continue,
            Ok(Ok(event)) => return event,
            Ok(Err(e)) => panic!("the live receiver failed: {e}"),
            Err(_) => panic!("no live event arrived within {DEADLINE:?}"),
        }
    }
}
