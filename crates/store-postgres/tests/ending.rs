//! A run's end on PostgreSQL ([`Store::queue_ending`]): one writer job, committed after the
//! saves queued before it, also when the queue head's lock a move needs is held by another
//! transaction (the end is put off, not waited for with rows held) and when the saves went
//! to another writer (a node that did not know the execution's session).

mod common;

use std::time::Duration;

use common::{TestDatabases, postgres_or_skip};
use serde_json::json;
use stepwise_core::{EventType, ExecutionStatus, Id, Role, StepBody, StepKind, system_clock};
use stepwise_store::prelude::*;
use stepwise_store::{
    Ending, NewEvent, NewExecution, NewMessage, NewSession, NewSnapshot, NewStep, Tenant,
    Transition,
};
use stepwise_store_postgres::PgStore;

const DEADLINE: Duration = Duration::from_secs(20);

fn run(test: impl std::future::Future<Output = ()>) {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("cannot start a tokio runtime: {e}"))
        .block_on(test);
}

fn tenant() -> Tenant {
    Tenant::new("acme").unwrap_or_else(|e| panic!("tenant: {e}"))
}

/// A session with one running execution.
async fn running(store: &PgStore, acme: &Tenant) -> (Id, Id) {
    let session = store
        .create_session(
            acme,
            NewSession {
                user_id: "u".into(),
                ..NewSession::default()
            },
        )
        .await
        .unwrap_or_else(|e| panic!("create_session: {e}"));
    let execution = store
        .create_execution(
            acme,
            NewExecution {
                session_id: Some(session.id),
                parent_execution_id: None,
                user_id: "u".into(),
                agent_type: "demo".into(),
                agent_config: json!(null),
                input: json!({}),
                metadata: json!({}),
                status: ExecutionStatus::Running,
                lease: None,
            },
        )
        .await
        .unwrap_or_else(|e| panic!("create_execution: {e}"));
    (session.id, execution.id)
}

fn step(execution_id: Id, n: u32) -> NewStep {
    NewStep {
        execution_id,
        step_number: n,
        kind: StepKind::Action,
        body: StepBody {
            model_output: Some(format!("step {n}")),
            ..StepBody::default()
        },
    }
}

fn ending(session: Id, execution: Id, steps: u32) -> Ending {
    Ending {
        answer: Some(NewMessage::new(session, Role::Assistant, "done").for_execution(execution)),
        snapshot: Some(NewSnapshot {
            execution_id: execution,
            step_number: steps,
            is_final: true,
            state: json!({"status": "completed"}),
            ..NewSnapshot::default()
        }),
        transition: Transition::Complete {
            output: json!({"answer": "done"}),
        },
        event: Some(NewEvent {
            session_id: session,
            message_id: None,
            execution_id: Some(execution),
            event_type: EventType::ExecutionCompleted,
            content: "done".into(),
            metadata: json!({"step_count": steps}),
        }),
    }
}

/// What the end left: the execution, its steps, its final snapshots and the session's events.
async fn left(
    store: &PgStore,
    acme: &Tenant,
    session: Id,
    execution: Id,
) -> (ExecutionStatus, Vec<u32>, usize, Vec<EventType>) {
    let status = store
        .get_execution(acme, execution)
        .await
        .ok()
        .flatten()
        .map(|e| e.status)
        .unwrap_or_else(|| panic!("the execution is gone"));
    let steps = store
        .list_steps(acme, execution)
        .await
        .unwrap_or_else(|e| panic!("list_steps: {e}"))
        .items
        .iter()
        .map(|s| s.step_number)
        .collect();
    let finals = store
        .list_snapshots(acme, execution)
        .await
        .unwrap_or_else(|e| panic!("list_snapshots: {e}"))
        .iter()
        .filter(|s| s.is_final)
        .count();
    let events = store
        .list_events(acme, session, 0, 100)
        .await
        .unwrap_or_else(|e| panic!("list_events: {e}"))
        .iter()
        .map(|e| e.event_type)
        .collect();
    (status, steps, finals, events)
}

#[test]
fn an_end_whose_queue_head_is_locked_elsewhere_commits_whole_once_the_lock_goes() {
    let Some(admin) = postgres_or_skip() else {
        return;
    };
    run(async move {
        let databases = TestDatabases::new(admin);
        let url = databases.create().await;
        let store = TestDatabases::store(&url, system_clock()).await;
        let acme = tenant();
        let (session, execution) = running(&store, &acme).await;

        // Another transaction holds the session's queue head (as an intake or a claim
        // does for a moment).
        let (mut other, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .unwrap_or_else(|e| panic!("connect: {e}"));
        tokio::spawn(connection);
        let holder = other
            .transaction()
            .await
            .unwrap_or_else(|e| panic!("begin: {e}"));
        holder
            .execute(
                "SELECT pg_advisory_xact_lock(queue_head_lock($1))",
                &[&session],
            )
            .await
            .unwrap_or_else(|e| panic!("lock: {e}"));

        for n in 1..=2 {
            drop(store.append_step(&acme, step(execution, n)).await);
        }
        let ack = store
            .queue_ending(&acme, execution, ending(session, execution, 2))
            .await
            .unwrap_or_else(|e| panic!("queue_ending: {e}"));
        let mut ended = tokio::spawn(ack.into_future());
        // While the lock is held, nothing of the end is visible (it is one commit).
        tokio::time::sleep(Duration::from_millis(300)).await;
        let (status, _, finals, events) = left(&store, &acme, session, execution).await;
        assert_eq!(
            status,
            ExecutionStatus::Running,
            "moved while the head was held"
        );
        assert_eq!(finals, 0, "a final snapshot before the move");
        assert!(events.is_empty(), "events before the move: {events:?}");
        assert!(
            !ended.is_finished(),
            "the end resolved while the head was held"
        );

        holder
            .commit()
            .await
            .unwrap_or_else(|e| panic!("commit: {e}"));
        let moved = tokio::time::timeout(DEADLINE, &mut ended)
            .await
            .unwrap_or_else(|_| panic!("the end never committed after the lock went"))
            .unwrap_or_else(|e| panic!("join: {e}"))
            .unwrap_or_else(|e| panic!("the end failed: {e}"));
        assert_eq!(moved.status, ExecutionStatus::Completed);
        assert_eq!(moved.step_count, 2);
        let (status, steps, finals, events) = left(&store, &acme, session, execution).await;
        assert_eq!(status, ExecutionStatus::Completed);
        assert_eq!(steps, vec![1, 2]);
        assert_eq!(finals, 1);
        assert_eq!(
            events,
            vec![EventType::MessageCreated, EventType::ExecutionCompleted]
        );
    });
}

#[test]
fn an_end_on_a_node_that_did_not_know_the_session_waits_for_the_saves_it_sent_elsewhere() {
    let Some(admin) = postgres_or_skip() else {
        return;
    };
    run(async move {
        let databases = TestDatabases::new(admin);
        let url = databases.create().await;
        let a = TestDatabases::store(&url, system_clock()).await;
        // Node B never read the execution: its saves go to the writer of the execution's
        // own id, its end to the session's.
        let b = TestDatabases::store(&url, system_clock()).await;
        let acme = tenant();
        for _ in 0..8 {
            let (session, execution) = running(&a, &acme).await;
            for n in 1..=5 {
                drop(b.append_step(&acme, step(execution, n)).await);
            }
            let moved = b
                .queue_ending(&acme, execution, ending(session, execution, 5))
                .await
                .unwrap_or_else(|e| panic!("queue_ending: {e}"))
                .await
                .unwrap_or_else(|e| panic!("the end failed: {e}"));
            assert_eq!(
                moved.step_count, 5,
                "the move committed before the steps queued before it"
            );
            let (status, steps, finals, events) = left(&a, &acme, session, execution).await;
            assert_eq!(status, ExecutionStatus::Completed);
            assert_eq!(steps, vec![1, 2, 3, 4, 5]);
            assert_eq!(finals, 1);
            assert_eq!(
                events,
                vec![EventType::MessageCreated, EventType::ExecutionCompleted]
            );
        }
    });
}
