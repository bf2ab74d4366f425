use serde_json::json;
use stepwise_core::{ExecutionStatus, Restored, Role, StepKind};
use stepwise_store::prelude::*;
use stepwise_store::{MessageQuery, NewStep, Transition, export_session, restore_memory};

use crate::Harness;
use crate::support::*;

/// Everything written before a close is there after reopening: the whole session, its
/// memory (`full`), its events (and their numbering goes on), queued writes included.
pub async fn restore_after_reopen<H: Harness>(harness: &H) {
    let (store, clock) = manual_store(harness).await;
    let acme = tenant("acme");
    let session = create_session(&store, &acme, Some("durable")).await;
    for (role, content) in [
        (Role::User, "Count to fifty"),
        (Role::Info, "Execution queued"),
        (Role::Assistant, "Done"),
    ] {
        append_message(&store, &acme, session.id, role, content).await;
    }
    let execution =
        create_execution(&store, &acme, Some(session.id), ExecutionStatus::Running).await;
    let mut parent = None;
    for n in 1..=50 {
        let body = if n % 10 == 0 {
            large_step_body(n)
        } else {
            step_body(n)
        };
        let kind = if n == 50 {
            StepKind::FinalAnswer
        } else {
            StepKind::Action
        };
        ok(
            append_step(
                &store,
                &acme,
                NewStep {
                    execution_id: execution.id,
                    step_number: n,
                    kind,
                    body,
                },
            )
            .await,
            "append",
        );
        if n % 10 == 0 {
            parent = Some(
                add_snapshot(&store, &acme, execution.id, n, parent)
                    .await
                    .id,
            );
        }
        if n % 5 == 0 {
            add_event(&store, &acme, session.id, &format!("step {n}")).await;
        }
    }
    ok(
        store
            .transition_execution(
                &acme,
                execution.id,
                Transition::Complete {
                    output: json!({"count": 50}),
                },
            )
            .await,
        "complete",
    );
    // A second execution whose writes are only queued when the store closes.
    let queued = create_execution(&store, &acme, Some(session.id), ExecutionStatus::Running).await;
    for n in 1..=40 {
        drop(ok(
            store.append_step(&acme, new_step(queued.id, n)).await,
            "queue a step",
        ));
    }
    drop(ok(
        store
            .append_event(
                &acme,
                new_event(session.id, stepwise_core::EventType::StepCompleted, "last"),
            )
            .await,
        "queue",
    ));

    let pending = create_session(&store, &acme, Some("waiting")).await;
    let waiting = create_execution(&store, &acme, Some(pending.id), ExecutionStatus::Pending).await;

    let Some(store) = harness.reopen(store, clock.clone()).await else {
        eprintln!("restore_after_reopen: the backend cannot reopen a store; skipped");
        return;
    };

    let memory = some(
        restore_memory(&store, &acme, session.id).await,
        "restore_memory",
    );
    assert_eq!(
        memory.restored,
        Restored::Full,
        "every step decodes after a reopen"
    );
    assert_eq!(memory.summary, None);
    let first_exec: Vec<_> = memory
        .steps
        .iter()
        .filter(|s| s.execution_id == execution.id)
        .collect();
    assert_eq!(first_exec.len(), 50);
    for (step, n) in first_exec.iter().zip(1..) {
        let body = if n % 10 == 0 {
            large_step_body(n)
        } else {
            step_body(n)
        };
        assert_eq!(step.step_number, n);
        assert_eq!(step.body(), body, "step {n} is identical after reopening");
    }
    assert_eq!(
        memory.steps.last().map(|s| s.execution_id),
        Some(queued.id),
        "executions in order"
    );
    let queued_steps = ok(store.list_steps(&acme, queued.id).await, "queued steps");
    assert_eq!(
        queued_steps.items.len(),
        40,
        "writes still queued at close were drained, not lost"
    );
    assert_eq!(queued_steps.skipped, 0);

    let doc = some(export_session(&store, &acme, session.id).await, "export");
    assert_eq!(doc.session.message_count, 3);
    assert_eq!(doc.messages.len(), 3);
    assert_eq!(doc.executions.len(), 2);
    assert_eq!(doc.executions[0].status, ExecutionStatus::Completed);
    assert_eq!(doc.executions[0].output, json!({"count": 50}));
    assert_eq!(doc.executions[0].step_count, 50);
    assert_eq!(doc.executions[0].last_snapshot_id, parent);
    assert_eq!(doc.session.last_snapshot_id, parent);
    assert_eq!(doc.snapshots.len(), 5);
    assert_eq!(
        doc.snapshots[4].state,
        new_snapshot(execution.id, 50, None).state
    );
    let messages = ok(
        store
            .list_messages(&acme, session.id, MessageQuery::default())
            .await,
        "messages",
    );
    assert_eq!(
        messages
            .iter()
            .map(|m| m.content.as_str())
            .collect::<Vec<_>>(),
        ["Count to fifty", "Execution queued", "Done"]
    );

    let events = ok(
        store.list_events(&acme, session.id, 0, 1000).await,
        "replay after reopen",
    );
    assert_eq!(
        events.iter().map(|e| e.id).collect::<Vec<_>>(),
        (1..=11).collect::<Vec<i64>>(),
        "events still replay"
    );
    assert_eq!(events[0].content, "step 5");
    assert_eq!(events[10].content, "last");
    let next = add_event(&store, &acme, session.id, "after reopen").await;
    assert_eq!(next.id, 12, "event numbering goes on after a reopen");

    // The queue survives too.
    let claim = ok(
        store
            .claim_next("w1", std::time::Duration::from_secs(30), 3)
            .await,
        "claim",
    )
    .expect("still queued");
    assert_eq!(claim.execution.id, waiting.id);
    assert_eq!(
        some(store.get_session(&acme, session.id).await, "session")
            .name
            .as_deref(),
        Some("durable")
    );
    assert!(
        some(
            store.find_session_by_name(&acme, "durable").await,
            "by name"
        )
        .id == session.id
    );
}
