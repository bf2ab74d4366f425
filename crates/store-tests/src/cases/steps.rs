use std::collections::HashSet;

use stepwise_core::{EventType, ExecutionStatus, Id, Restored, Step, StepKind, TokenUsage};
use stepwise_store::prelude::*;
use stepwise_store::{NewStep, StoreError, restore_memory};

use crate::Harness;
use crate::assert_err;
use crate::support::*;

/// Idempotent appends, conflicts, ordering, per-session memory, execution counters.
pub async fn steps<H: Harness>(harness: &H) {
    let (store, _clock) = manual_store(harness).await;
    let acme = tenant("acme");
    let session = create_session(&store, &acme, Some("memory")).await;
    let execution =
        create_execution(&store, &acme, Some(session.id), ExecutionStatus::Running).await;

    let new = NewStep {
        execution_id: execution.id,
        step_number: 1,
        kind: StepKind::Task,
        body: step_body(1),
    };
    let first = ok(append_step(&store, &acme, new.clone()).await, "append_step");
    assert!(first.created, "a new step is created");
    let step = first.step.clone();
    assert_eq!(step.execution_id, execution.id);
    assert_eq!(
        step.session_id,
        Some(session.id),
        "a step carries its execution's session"
    );
    assert_eq!(step.step_number, 1);
    assert_eq!(step.kind, StepKind::Task);
    assert_eq!(step.body(), step_body(1), "the body is stored as given");

    let again = ok(
        append_step(&store, &acme, new.clone()).await,
        "append the same step again",
    );
    assert!(!again.created, "the same step again is not created twice");
    assert_eq!(
        again.step, step,
        "the same step again answers the stored step"
    );

    let mut other_body = new.clone();
    other_body.body.observations = Some("something else".into());
    assert_err!(
        append_step(&store, &acme, other_body).await,
        StoreError::Conflict(_),
        "step 1 again with another body"
    );
    let mut other_kind = new.clone();
    other_kind.kind = StepKind::FinalAnswer;
    assert_err!(
        append_step(&store, &acme, other_kind).await,
        StoreError::Conflict(_),
        "step 1 again with another kind"
    );

    // Out-of-order appends are listed by step number; a large body round-trips.
    let s3 = add_step(&store, &acme, execution.id, 3).await;
    let big = NewStep {
        execution_id: execution.id,
        step_number: 2,
        kind: StepKind::Action,
        body: large_step_body(2),
    };
    let s2 = ok(
        append_step(&store, &acme, big.clone()).await,
        "append a large step",
    )
    .step;
    assert_eq!(s2.body(), large_step_body(2));
    let s4 = add_step(&store, &acme, execution.id, 4).await;
    let again_big = ok(
        append_step(&store, &acme, big).await,
        "append the large step again",
    );
    assert!(
        !again_big.created,
        "the same large step again is not created twice"
    );

    let listed = ok(store.list_steps(&acme, execution.id).await, "list_steps");
    assert_eq!(listed.skipped, 0);
    assert_eq!(
        listed.items,
        vec![step.clone(), s2.clone(), s3.clone(), s4.clone()],
        "ordered by step number"
    );

    let after = some(
        store.get_execution(&acme, execution.id).await,
        "get_execution",
    );
    assert_eq!(
        after.step_count, 4,
        "step_count counts distinct steps, not repeated appends"
    );
    let mut usage = TokenUsage::default();
    for n in 1..=4 {
        usage.add(&step_body(n).token_usage);
    }
    assert_eq!(
        after.token_usage, usage,
        "token_usage is the sum over the stored steps"
    );

    // A session's memory: only its own steps, its executions in order, even when
    // appends of two sessions interleave.
    let other_session = create_session(&store, &acme, Some("other")).await;
    let other_exec = create_execution(
        &store,
        &acme,
        Some(other_session.id),
        ExecutionStatus::Running,
    )
    .await;
    let second_exec =
        create_execution(&store, &acme, Some(session.id), ExecutionStatus::Running).await;
    let mut mine_second = Vec::new();
    let mut theirs = Vec::new();
    for n in 1..=5 {
        theirs.push(add_step(&store, &acme, other_exec.id, n).await);
        mine_second.push(add_step(&store, &acme, second_exec.id, n).await);
    }
    let memory = ok(
        store.list_session_steps(&acme, session.id).await,
        "list_session_steps",
    );
    assert_eq!(memory.skipped, 0);
    let mut expected = listed.items.clone();
    expected.extend(mine_second.clone());
    assert_eq!(
        memory.items, expected,
        "the session's steps, execution by execution, by step number"
    );
    let other_memory = ok(
        store.list_session_steps(&acme, other_session.id).await,
        "other session steps",
    );
    assert_eq!(
        other_memory.items, theirs,
        "another session's memory holds only its own steps"
    );
    assert!(
        other_memory
            .items
            .iter()
            .all(|s| s.session_id == Some(other_session.id))
    );

    // A session without any damaged step restores in full.
    let memory = some(
        restore_memory(&store, &acme, session.id).await,
        "restore_memory",
    );
    assert_eq!(memory.restored, Restored::Full);
    assert_eq!(memory.steps, expected);
    assert_eq!(memory.summary, None);
    let empty_session = create_session(&store, &acme, Some("nothing-yet")).await;
    let memory = some(
        restore_memory(&store, &acme, empty_session.id).await,
        "restore an empty session",
    );
    assert_eq!(
        memory.restored,
        Restored::Full,
        "no steps and nothing damaged is a full (empty) memory"
    );
    assert!(memory.steps.is_empty());
    assert_eq!(
        ok(
            restore_memory(&store, &acme, stepwise_core::new_id()).await,
            "restore unknown"
        ),
        None
    );

    // A step of a background execution has no session.
    let background = create_execution(&store, &acme, None, ExecutionStatus::Running).await;
    let lone = add_step(&store, &acme, background.id, 1).await;
    assert_eq!(lone.session_id, None);

    // Unknown executions.
    assert_err!(
        append_step(&store, &acme, new_step(stepwise_core::new_id(), 1)).await,
        StoreError::NotFound(_),
        "a step of an unknown execution"
    );
    let unknown = ok(
        store.list_steps(&acme, stepwise_core::new_id()).await,
        "list unknown",
    );
    assert!(unknown.items.is_empty());
    assert_eq!(unknown.skipped, 0);
    assert!(
        ok(
            store
                .list_session_steps(&acme, stepwise_core::new_id())
                .await,
            "unknown session"
        )
        .items
        .is_empty()
    );
}

/// Eight writers append disjoint step numbers to one execution at once, and re-send some
/// of each other's steps with identical bodies: exactly one stored step per number.
pub async fn concurrent_step_writers<H: Harness>(harness: &H) {
    const WRITERS: u32 = 8;
    const STEPS: u32 = 200;
    let (store, _clock) = manual_store(harness).await;
    let acme = tenant("acme");
    let session = create_session(&store, &acme, Some("busy")).await;
    let execution =
        create_execution(&store, &acme, Some(session.id), ExecutionStatus::Running).await;

    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let store = store.clone();
        let acme = acme.clone();
        writers.push(tokio::spawn(async move {
            let mut created = 0u32;
            let mut n = w + 1;
            while n <= STEPS {
                let mut numbers = vec![n];
                // Every third step is also sent by the next writer: a retried save.
                let retried = n + 1;
                if n % 3 == 0 && retried <= STEPS {
                    numbers.push(retried);
                }
                for number in numbers {
                    let appended = ok(
                        append_step(&store, &acme, new_step(execution.id, number)).await,
                        "append_step",
                    );
                    assert_eq!(appended.step.step_number, number);
                    assert_eq!(appended.step.body(), step_body(number));
                    if appended.created {
                        created += 1;
                    }
                }
                n += WRITERS;
            }
            created
        }));
    }
    let mut created = 0;
    for writer in writers {
        created += ok(writer.await, "writer task");
    }
    assert_eq!(
        created, STEPS,
        "exactly one append per step number reports `created`"
    );
    let listed = ok(store.list_steps(&acme, execution.id).await, "list_steps");
    assert_eq!(listed.skipped, 0);
    let numbers: Vec<u32> = listed.items.iter().map(|s| s.step_number).collect();
    assert_eq!(
        numbers,
        (1..=STEPS).collect::<Vec<_>>(),
        "no step lost, none stored twice"
    );
    let ids: HashSet<Id> = listed.items.iter().map(|s| s.id).collect();
    assert_eq!(ids.len(), STEPS as usize);
    let execution = some(
        store.get_execution(&acme, execution.id).await,
        "get_execution",
    );
    assert_eq!(execution.step_count, u64::from(STEPS));
    let mut usage = TokenUsage::default();
    for n in 1..=STEPS {
        usage.add(&step_body(n).token_usage);
    }
    assert_eq!(execution.token_usage, usage);

    // Failing writes queued among good ones fail alone: conflicting re-sends of stored
    // steps and steps of an unknown execution, racing 160 valid appends.
    let second = create_execution(&store, &acme, Some(session.id), ExecutionStatus::Running).await;
    for n in 1..=20 {
        add_step(&store, &acme, second.id, n).await;
    }
    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        let store = store.clone();
        let acme = acme.clone();
        tasks.push(tokio::spawn(async move {
            let mut n = 21 + w;
            while n <= 180 {
                let appended = ok(
                    append_step(&store, &acme, new_step(second.id, n)).await,
                    "valid append",
                );
                assert!(appended.created);
                n += WRITERS;
            }
        }));
    }
    for saboteur in 0..2u32 {
        let store = store.clone();
        let acme = acme.clone();
        tasks.push(tokio::spawn(async move {
            for n in 1..=20 {
                let mut conflicting = new_step(second.id, n);
                conflicting.body.observations = Some(format!("rewritten by saboteur {saboteur}"));
                crate::assert_err!(
                    append_step(&store, &acme, conflicting).await,
                    StoreError::Conflict(_),
                    "a conflicting re-send of stored step {n}"
                );
                crate::assert_err!(
                    append_step(&store, &acme, new_step(stepwise_core::new_id(), n)).await,
                    StoreError::NotFound(_),
                    "a step of an unknown execution"
                );
            }
        }));
    }
    for task in tasks {
        ok(task.await, "writer task");
    }
    let listed = ok(store.list_steps(&acme, second.id).await, "list_steps");
    assert_eq!(listed.skipped, 0);
    assert_eq!(
        listed
            .items
            .iter()
            .map(|s| s.step_number)
            .collect::<Vec<_>>(),
        (1..=180).collect::<Vec<_>>(),
        "failing writes in a batch did not take valid ones down with them"
    );
    for step in &listed.items {
        assert_eq!(
            step.body(),
            step_body(step.step_number),
            "stored steps were not rewritten"
        );
    }
    assert_eq!(
        some(store.get_execution(&acme, second.id).await, "second").step_count,
        180
    );
}

/// Writes whose acknowledgements are dropped still land; `flush` waits for them.
pub async fn fire_and_forget<H: Harness>(harness: &H) {
    let (store, _clock) = manual_store(harness).await;
    let acme = tenant("acme");
    let session = create_session(&store, &acme, Some("fast")).await;
    let execution =
        create_execution(&store, &acme, Some(session.id), ExecutionStatus::Running).await;

    for n in 1..=300 {
        let ack = ok(
            store.append_step(&acme, new_step(execution.id, n)).await,
            "queue a step",
        );
        drop(ack);
        if n % 10 == 0 {
            let ack = ok(
                store
                    .append_event(
                        &acme,
                        new_event(session.id, EventType::StepCompleted, &format!("step {n}")),
                    )
                    .await,
                "queue an event",
            );
            drop(ack);
            let ack = ok(
                store
                    .save_snapshot(&acme, new_snapshot(execution.id, n, None))
                    .await,
                "queue a snapshot",
            );
            drop(ack);
        }
    }
    ok(store.flush().await, "flush");

    let steps: Vec<Step> = ok(store.list_steps(&acme, execution.id).await, "list_steps").items;
    assert_eq!(
        steps.len(),
        300,
        "every fire-and-forget step is stored after flush"
    );
    assert!(
        steps
            .iter()
            .zip(1..)
            .all(|(s, n)| s.step_number == n && s.body() == step_body(n))
    );
    let events = ok(
        store.list_events(&acme, session.id, 0, 1000).await,
        "list_events",
    );
    assert_eq!(events.len(), 30);
    assert_eq!(
        events.iter().map(|e| e.id).collect::<Vec<_>>(),
        (1..=30).collect::<Vec<i64>>()
    );
    assert_eq!(
        ok(
            store.list_snapshots(&acme, execution.id).await,
            "list_snapshots"
        )
        .len(),
        30
    );
    assert_eq!(
        some(store.get_execution(&acme, execution.id).await, "execution").step_count,
        300
    );
    ok(store.flush().await, "a second flush with nothing queued");
}
