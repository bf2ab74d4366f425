//! The save path of the SQLite store: group commit, durability across reopen, events
//! reaching subscribers only once committed.

use serde_json::json;
use stepwise_core::{EventType, ExecutionStatus, StepBody, StepKind, TokenUsage, ToolCall};
use stepwise_store::prelude::*;
use stepwise_store::{NewEvent, NewExecution, NewSession, NewStep, Tenant};
use stepwise_store_sqlite::SqliteStore;

fn body(i: u32) -> StepBody {
    StepBody {
        model_output: Some(format!("thinking about step {i} ").repeat(30)),
        tool_calls: vec![ToolCall {
            id: format!("call_{i}"),
            name: "calculator".into(),
            arguments: json!({"expression": format!("{i}+1")}),
        }],
        observations: Some(format!("{}", i + 1)),
        token_usage: TokenUsage::new(10, 2),
        ..StepBody::default()
    }
}

async fn execution(store: &SqliteStore, tenant: &Tenant) -> (stepwise_core::Id, stepwise_core::Id) {
    let session = store
        .create_session(
            tenant,
            NewSession {
                user_id: "u".into(),
                ..Default::default()
            },
        )
        .await
        .expect("session");
    let exec = store
        .create_execution(
            tenant,
            NewExecution {
                session_id: Some(session.id),
                parent_execution_id: None,
                user_id: "u".into(),
                agent_type: "demo".into(),
                agent_config: json!(null),
                input: json!("hi"),
                metadata: json!(null),
                status: ExecutionStatus::Running,
                lease: None,
            },
        )
        .await
        .expect("execution");
    (session.id, exec.id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fire_and_forget_steps_survive_dropping_the_store() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("s.db");
    let tenant = Tenant::new("t1").expect("tenant");
    let (session_id, exec_id) = {
        let store = SqliteStore::open(&path).expect("open");
        let ids = execution(&store, &tenant).await;
        for i in 1..=300 {
            // Queued, never awaited: dropping the store must still commit them.
            let _ack = store
                .append_step(
                    &tenant,
                    NewStep {
                        execution_id: ids.1,
                        step_number: i,
                        kind: StepKind::Action,
                        body: body(i),
                    },
                )
                .await
                .expect("queued");
        }
        ids
    };
    let store = SqliteStore::open(&path).expect("reopen");
    let steps = store.list_steps(&tenant, exec_id).await.expect("steps");
    assert_eq!(steps.skipped, 0);
    assert_eq!(steps.items.len(), 300);
    assert!(
        steps
            .items
            .iter()
            .enumerate()
            .all(|(i, s)| s.step_number == i as u32 + 1 && s.body() == body(s.step_number))
    );
    let exec = store
        .get_execution(&tenant, exec_id)
        .await
        .expect("read")
        .expect("exists");
    assert_eq!(exec.step_count, 300);
    assert_eq!(
        exec.token_usage,
        TokenUsage {
            input: 3000,
            output: 600,
            total: 3600
        }
    );
    let memory = stepwise_store::restore_memory(&store, &tenant, session_id)
        .await
        .expect("restore")
        .expect("session");
    assert_eq!(memory.steps.len(), 300);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribers_get_events_after_commit_with_increasing_ids() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = SqliteStore::open(&dir.path().join("s.db")).expect("open");
    let tenant = Tenant::new("t1").expect("tenant");
    let (session_id, exec_id) = execution(&store, &tenant).await;
    let mut live = store.subscribe(&tenant, session_id);
    let mut acks = Vec::new();
    for i in 0..50 {
        let event = NewEvent {
            session_id,
            message_id: None,
            execution_id: Some(exec_id),
            event_type: EventType::StepCompleted,
            content: format!("Completed step {i}"),
            metadata: json!({"step_number": i}),
        };
        acks.push(store.append_event(&tenant, event).await.expect("queued"));
    }
    for (i, ack) in acks.into_iter().enumerate() {
        assert_eq!(ack.await.expect("durable").id, i as i64 + 1);
    }
    for i in 1..=50 {
        let event = live.recv().await.expect("live event");
        assert_eq!(event.id, i);
    }
    let stored = store
        .list_events(&tenant, session_id, 45, 100)
        .await
        .expect("list");
    assert_eq!(
        stored.iter().map(|e| e.id).collect::<Vec<_>>(),
        vec![46, 47, 48, 49, 50]
    );
}

/// Saves never checkpoint the WAL themselves (that would stall them for a sync); a
/// thread of the store does it in the background, so committed pages reach the database
/// file while the store stays open and the WAL does not grow without end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wal_is_checkpointed_in_the_background_while_the_store_is_open() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("s.db");
    let store = SqliteStore::open(&path).expect("open");
    let tenant = Tenant::new("t1").expect("tenant");
    let (_, exec_id) = execution(&store, &tenant).await;
    let db_size = || std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    let before = db_size();
    for i in 1..=1000u32 {
        let ack = store
            .append_step(
                &tenant,
                NewStep {
                    execution_id: exec_id,
                    step_number: i,
                    kind: StepKind::Action,
                    body: body(i),
                },
            )
            .await
            .expect("queued");
        if i % 100 == 0 {
            ack.await.expect("durable");
        }
    }
    // One more commit after the checkpointer's pause, so it runs over all of the above.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let mut step = 1000u32;
    while db_size() < before + 500_000 {
        assert!(
            std::time::Instant::now() < deadline,
            "the database file stayed at {} bytes (from {before}): nothing was checkpointed",
            db_size()
        );
        step += 1;
        store
            .append_step(
                &tenant,
                NewStep {
                    execution_id: exec_id,
                    step_number: step,
                    kind: StepKind::Action,
                    body: body(step),
                },
            )
            .await
            .expect("queued")
            .await
            .expect("durable");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let wal = std::fs::metadata(dir.path().join("s.db-wal")).map_or(0, |m| m.len());
    assert!(wal > 0, "the store is still open: its WAL exists");
}
