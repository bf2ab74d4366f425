//! Two stores on one database behave as two nodes: live events cross between them in
//! order without repeats, and concurrent claims never hand out the same execution.

mod common;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use common::{TestDatabases, postgres_or_skip};
use serde_json::json;
use stepwise_core::{Event, EventType, ExecutionStatus, system_clock};
use stepwise_store::prelude::*;
use stepwise_store::{NewEvent, NewExecution, NewSession, Tenant, Transition};
use stepwise_store_postgres::{PgOptions, PgStore};
use tokio::sync::broadcast;

const DEADLINE: Duration = Duration::from_secs(20);

fn run(test: impl std::future::Future<Output = ()>) {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("cannot start a tokio runtime: {e}"))
        .block_on(test);
}

async fn two_nodes(databases: &TestDatabases) -> (PgStore, PgStore) {
    let url = databases.create().await;
    let a = TestDatabases::store(&url, system_clock()).await;
    let b = TestDatabases::store(&url, system_clock()).await;
    (a, b)
}

fn tenant() -> Tenant {
    Tenant::new("acme").unwrap_or_else(|e| panic!("tenant: {e}"))
}

fn event(session_id: stepwise_core::Id, content: String) -> NewEvent {
    NewEvent {
        session_id,
        message_id: None,
        execution_id: None,
        event_type: EventType::StepCompleted,
        content,
        metadata: json!({}),
    }
}

async fn receive(rx: &mut broadcast::Receiver<Arc<Event>>) -> Arc<Event> {
    match tokio::time::timeout(DEADLINE, rx.recv()).await {
        Ok(Ok(event)) => event,
        Ok(Err(e)) => panic!("the subscription ended: {e}"),
        Err(_) => panic!("no live event within {DEADLINE:?}"),
    }
}

#[test]
fn events_appended_on_one_node_reach_subscribers_on_the_other_in_order() {
    let Some(admin) = postgres_or_skip() else {
        return;
    };
    run(async move {
        let databases = TestDatabases::new(admin);
        let (a, b) = two_nodes(&databases).await;
        let acme = tenant();
        let session = a
            .create_session(
                &acme,
                NewSession {
                    user_id: "u".into(),
                    ..NewSession::default()
                },
            )
            .await
            .unwrap_or_else(|e| panic!("create_session: {e}"));
        let mut live = a.subscribe(&acme, session.id);

        // Node B writes, some awaited and some fire-and-forget; node A writes too, so A's
        // own commits interleave with B's and the cursor must keep them in id order.
        let mut expected = Vec::new();
        for i in 0..60 {
            let node = if i % 3 == 2 { &a } else { &b };
            let ack = node
                .append_event(&acme, event(session.id, format!("event {i}")))
                .await
                .unwrap_or_else(|e| panic!("append_event: {e}"));
            if i % 2 == 0 {
                expected.push(ack.await.unwrap_or_else(|e| panic!("ack: {e}")).id);
            } else {
                drop(ack);
            }
        }
        b.flush().await.unwrap_or_else(|e| panic!("flush b: {e}"));
        a.flush().await.unwrap_or_else(|e| panic!("flush a: {e}"));

        let mut seen = Vec::new();
        while seen.len() < 60 {
            let got = receive(&mut live).await;
            assert_eq!(got.session_id, session.id);
            seen.push(got.id);
        }
        assert_eq!(
            seen,
            (1..=60).collect::<Vec<i64>>(),
            "every event once, in id order"
        );
        let stored = a
            .list_events(&acme, session.id, 0, 1000)
            .await
            .unwrap_or_else(|e| panic!("list: {e}"));
        assert_eq!(stored.len(), 60);
        for id in expected {
            assert!(seen.contains(&id));
        }

        // The next thing a subscriber sees is the next event, not a repeat.
        let sentinel = b
            .append_event(&acme, event(session.id, "sentinel".into()))
            .await
            .unwrap_or_else(|e| panic!("append_event: {e}"))
            .await
            .unwrap_or_else(|e| panic!("ack: {e}"));
        assert_eq!(
            receive(&mut live).await.id,
            sentinel.id,
            "no event was delivered twice"
        );
    });
}

#[test]
fn without_notifications_the_poll_still_delivers_every_event_in_order() {
    let Some(admin) = postgres_or_skip() else {
        return;
    };
    run(async move {
        let databases = TestDatabases::new(admin);
        let url = databases.create().await;
        // Node A never hears a notification: as if every one of them were lost.
        let deaf = PgOptions {
            listen: false,
            poll_interval: Duration::from_millis(200),
            ..PgOptions::default()
        };
        let a = PgStore::connect_with(&url, deaf)
            .await
            .unwrap_or_else(|e| panic!("connect a: {e}"));
        let b = TestDatabases::store(&url, system_clock()).await;
        let acme = tenant();
        let session = b
            .create_session(
                &acme,
                NewSession {
                    user_id: "u".into(),
                    ..NewSession::default()
                },
            )
            .await
            .unwrap_or_else(|e| panic!("create_session: {e}"));
        let mut live = a.subscribe(&acme, session.id);
        for i in 0..20 {
            drop(
                b.append_event(&acme, event(session.id, format!("event {i}")))
                    .await
                    .unwrap_or_else(|e| panic!("append: {e}")),
            );
        }
        b.flush().await.unwrap_or_else(|e| panic!("flush: {e}"));
        for expected in 1..=20 {
            assert_eq!(receive(&mut live).await.id, expected);
        }
    });
}

#[test]
fn concurrent_claims_on_two_nodes_never_share_an_execution() {
    let Some(admin) = postgres_or_skip() else {
        return;
    };
    run(async move {
        let databases = TestDatabases::new(admin);
        let (a, b) = two_nodes(&databases).await;
        let acme = tenant();
        let mut created = HashSet::new();
        for s in 0..10 {
            let session = a
                .create_session(
                    &acme,
                    NewSession {
                        user_id: "u".into(),
                        name: Some(format!("s{s}")),
                        ..NewSession::default()
                    },
                )
                .await
                .unwrap_or_else(|e| panic!("create_session: {e}"));
            for _ in 0..4 {
                let execution = b
                    .create_execution(
                        &acme,
                        NewExecution {
                            session_id: Some(session.id),
                            parent_execution_id: None,
                            user_id: "u".into(),
                            agent_type: "demo".into(),
                            agent_config: json!(null),
                            input: json!({}),
                            metadata: json!({}),
                            status: ExecutionStatus::Pending,
                            lease: None,
                        },
                    )
                    .await
                    .unwrap_or_else(|e| panic!("create_execution: {e}"));
                created.insert(execution.id);
            }
        }
        // Four workers on each node claim, run (complete) and claim again until empty.
        let mut workers = Vec::new();
        for w in 0..8 {
            let store = if w % 2 == 0 { a.clone() } else { b.clone() };
            let acme = acme.clone();
            workers.push(tokio::spawn(async move {
                let name = format!("worker-{w}");
                let mut done = Vec::new();
                loop {
                    let claim = store
                        .claim_next(&name, Duration::from_secs(60), 3)
                        .await
                        .unwrap_or_else(|e| panic!("claim_next: {e}"));
                    let Some(claim) = claim else {
                        if store.queue_depth().await.unwrap_or(0) == 0 {
                            return done;
                        }
                        tokio::task::yield_now().await;
                        continue;
                    };
                    done.push((claim.execution.id, claim.execution.session_id));
                    store
                        .transition_execution(
                            &acme,
                            claim.execution.id,
                            Transition::Complete {
                                output: json!("ok"),
                            },
                        )
                        .await
                        .unwrap_or_else(|e| panic!("complete: {e}"));
                }
            }));
        }
        let mut claimed = Vec::new();
        for worker in workers {
            claimed.extend(worker.await.unwrap_or_else(|e| panic!("worker: {e}")));
        }
        let ids: HashSet<_> = claimed.iter().map(|c| c.0).collect();
        assert_eq!(ids.len(), claimed.len(), "an execution was claimed twice");
        assert_eq!(ids, created, "every execution was claimed once");
        for id in created {
            let execution = a
                .get_execution(&acme, id)
                .await
                .ok()
                .flatten()
                .unwrap_or_else(|| panic!("execution {id}"));
            assert_eq!(execution.status, ExecutionStatus::Completed);
            assert_eq!(execution.attempts, 1);
        }
    });
}

#[test]
fn a_lease_left_by_a_stopped_node_is_taken_over_by_the_other() {
    let Some(admin) = postgres_or_skip() else {
        return;
    };
    run(async move {
        let databases = TestDatabases::new(admin);
        let (a, b) = two_nodes(&databases).await;
        let acme = tenant();
        let session = a
            .create_session(
                &acme,
                NewSession {
                    user_id: "u".into(),
                    ..NewSession::default()
                },
            )
            .await
            .unwrap_or_else(|e| panic!("create_session: {e}"));
        let execution = a
            .create_execution(
                &acme,
                NewExecution {
                    session_id: Some(session.id),
                    parent_execution_id: None,
                    user_id: "u".into(),
                    agent_type: "demo".into(),
                    agent_config: json!(null),
                    input: json!({}),
                    metadata: json!({}),
                    status: ExecutionStatus::Pending,
                    lease: None,
                },
            )
            .await
            .unwrap_or_else(|e| panic!("create_execution: {e}"));
        let first = a
            .claim_next("node-a", Duration::from_millis(1), 3)
            .await
            .ok()
            .flatten();
        assert_eq!(first.map(|c| c.execution.id), Some(execution.id));
        drop(a); // node A stops without releasing
        let deadline = tokio::time::Instant::now() + DEADLINE;
        let taken = loop {
            if let Some(claim) = b
                .claim_next("node-b", Duration::from_secs(60), 3)
                .await
                .unwrap_or_else(|e| panic!("claim: {e}"))
            {
                break claim;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the expired lease was never taken over"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        assert_eq!(taken.execution.id, execution.id);
        assert_eq!(
            taken.execution.attempts, 2,
            "the takeover counts as another attempt"
        );
        assert!(
            b.renew_leases("node-a", vec![execution.id], Duration::from_secs(60))
                .await
                .unwrap_or_default()
                == vec![execution.id],
            "node A no longer holds it"
        );
    });
}

#[test]
fn nodes_starting_together_migrate_once() {
    let Some(admin) = postgres_or_skip() else {
        return;
    };
    run(async move {
        let databases = TestDatabases::new(admin);
        let url = databases.create().await;
        let (a, b, c) = tokio::join!(
            PgStore::connect(&url),
            PgStore::connect(&url),
            PgStore::connect(&url)
        );
        let stores = [a, b, c].map(|s| s.unwrap_or_else(|e| panic!("a node failed to start: {e}")));
        let applied: Vec<usize> = stores
            .iter()
            .map(|s| s.applied_migrations().len())
            .collect();
        assert_eq!(
            applied.iter().filter(|n| **n > 0).count(),
            1,
            "one node migrated, the others found it done: {applied:?}"
        );
    });
}

/// The workers' doorbell crosses nodes: a message queued on node A (which runs no
/// workers) is started by node B's workers at once, not at B's next fallback poll (set
/// here far beyond the test's deadline).
#[test]
fn a_message_queued_on_one_node_starts_on_the_other_without_waiting_for_a_poll() {
    use stepwise_engine::{
        AgentRegistry, DEMO_AGENT, DemoAgent, Engine, EngineConfig, MessageInput,
    };
    let Some(admin) = postgres_or_skip() else {
        return;
    };
    run(async move {
        let databases = TestDatabases::new(admin);
        let (a, b) = two_nodes(&databases).await;
        let acme = tenant();
        let engine = |store: PgStore| {
            let mut agents = AgentRegistry::new();
            agents.register(
                DEMO_AGENT,
                DemoAgent::with_step_delay(Duration::from_millis(1)),
            );
            let config = EngineConfig {
                workers: 2,
                // The fallback poll comes after min(30..60 s, lease).
                poll_interval: Duration::from_secs(30),
                lease: Duration::from_secs(60),
                ..EngineConfig::default()
            };
            Engine::new(store, agents, config)
        };
        let node_a = engine(a.clone());
        let node_b = engine(b.clone());
        node_b.spawn_runners();
        let session = a
            .create_session(
                &acme,
                NewSession {
                    user_id: "u".into(),
                    ..NewSession::default()
                },
            )
            .await
            .unwrap_or_else(|e| panic!("create_session: {e}"));
        // The second message is queued after node B's workers have looked once (when they
        // started) and gone back to sleep: only the NOTIFY can wake them in time.
        for n in 0..2 {
            let started = std::time::Instant::now();
            let submitted = node_a
                .submit_message(
                    &acme,
                    "u",
                    session.id,
                    MessageInput {
                        content: "steps: 1".into(),
                        ..MessageInput::default()
                    },
                )
                .await
                .unwrap_or_else(|e| panic!("submit_message: {e}"));
            loop {
                let execution = a
                    .get_execution(&acme, submitted.execution.id)
                    .await
                    .unwrap_or_else(|e| panic!("get_execution: {e}"))
                    .unwrap_or_else(|| panic!("the execution is gone"));
                if execution.status == ExecutionStatus::Completed {
                    break;
                }
                assert!(
                    started.elapsed() < DEADLINE,
                    "message {n} queued on node A did not run on node B before its fallback poll: {execution:?}"
                );
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        assert_eq!(node_a.running_count(), 0);
        node_b.shutdown(Duration::from_secs(5)).await;
    });
}
