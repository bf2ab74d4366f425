use std::collections::HashSet;

use serde_json::json;
use stepwise_core::{Event, EventType, ExecutionStatus, Id, Role, SessionStatus};
use stepwise_store::{
    MessageQuery, NewEvent, NewMessage, PageRequest, SessionFilter, SessionPatch, Store,
    StoreError, Tenant, Transition, export_session, restore_memory,
};
use tokio::sync::broadcast::error::TryRecvError;

use crate::Harness;
use crate::assert_err;
use crate::cases::sessions::list_all;
use crate::support::*;

const SEEDS: u64 = 16;
const OPS_PER_SEED: usize = 40;

/// What one tenant's session should hold, kept alongside the store.
#[derive(Debug, Clone)]
struct SessionModel {
    id: Id,
    name: String,
    execution: Id,
    snapshot: Id,
    title: String,
    messages: u64,
    steps: u32,
    events: i64,
    snapshots: usize,
}

struct Side {
    tenant: Tenant,
    sessions: Vec<SessionModel>,
}

/// Random operations by two tenants over their own and each other's ids (a seeded
/// sequence, replayable from the seed printed on failure). Another tenant's id must
/// behave exactly like an unknown one: reads find nothing, writes are refused, and
/// nothing the other tenant owns changes.
pub async fn tenant_isolation<H: Harness>(harness: &H) {
    // One store for every seed, each seed with its own pair of tenants: the tenants of
    // earlier seeds are more neighbours whose rows must stay out of sight.
    let (store, _clock) = manual_store(harness).await;
    for seed in 1..=SEEDS {
        eprintln!("tenant_isolation: seed {seed}");
        run_seed(&store, seed).await;
    }
}

async fn run_seed<S: Store>(store: &S, seed: u64) {
    let store = store.clone();
    let mut rng = Rng::new(seed);
    let mut sides = [
        setup_side(&store, &format!("tenant-a-{seed}")).await,
        setup_side(&store, &format!("tenant-b-{seed}")).await,
    ];

    for op_index in 0..OPS_PER_SEED {
        let actor = rng.below(2);
        let owner = 1 - actor;
        let mine = rng.below(sides[actor].sessions.len());
        let theirs = sides[owner].sessions[rng.below(sides[owner].sessions.len())].clone();
        let me = sides[actor].tenant.clone();
        let them = sides[owner].tenant.clone();
        let op = rng.below(15);
        eprintln!(
            "  seed {seed} op {op_index}: {me} does #{op} (their session {})",
            theirs.id
        );
        let what = format!("seed {seed}, op {op_index} (#{op}) by {me} on {them}'s ids");
        match op {
            // Ordinary work on one's own rows, which the model follows.
            0 => {
                let model = &mut sides[actor].sessions[mine];
                append_message(
                    &store,
                    &me,
                    model.id,
                    Role::User,
                    &format!("message {op_index}"),
                )
                .await;
                model.messages += 1;
            }
            1 => {
                let model = &mut sides[actor].sessions[mine];
                model.steps += 1;
                add_step(&store, &me, model.execution, model.steps).await;
            }
            2 => {
                let model = &mut sides[actor].sessions[mine];
                model.events += 1;
                let event = add_event(&store, &me, model.id, "own").await;
                assert_eq!(event.id, model.events, "{what}: own event ids continue");
            }
            3 => {
                let model = &mut sides[actor].sessions[mine];
                model.snapshots += 1;
                add_snapshot(
                    &store,
                    &me,
                    model.execution,
                    model.snapshots as u32,
                    Some(model.snapshot),
                )
                .await;
            }
            4 => {
                let model = &mut sides[actor].sessions[mine];
                model.title = format!("title {op_index}");
                let patch = SessionPatch {
                    title: Some(model.title.clone()),
                    ..SessionPatch::default()
                };
                some(
                    store.update_session(&me, model.id, patch).await,
                    "update own session",
                );
            }
            // Reaching for the other tenant's rows.
            5 => {
                assert_eq!(
                    ok(store.get_session(&me, theirs.id).await, &what),
                    None,
                    "{what}: get_session"
                );
                if theirs.name != "shared" {
                    assert_eq!(
                        ok(store.find_session_by_name(&me, &theirs.name).await, &what),
                        None,
                        "{what}: find by name"
                    );
                }
                let shared = some(store.find_session_by_name(&me, "shared").await, &what);
                assert_eq!(
                    shared.tenant_id,
                    me.as_str(),
                    "{what}: a shared name finds one's own session"
                );
            }
            6 => {
                let every_status = SessionFilter {
                    statuses: Some(SessionStatus::ALL.to_vec()),
                    ..SessionFilter::default()
                };
                let listed: HashSet<Id> = list_all(&store, &me, every_status)
                    .await
                    .iter()
                    .map(|s| s.id)
                    .collect();
                let own: HashSet<Id> = sides[actor].sessions.iter().map(|s| s.id).collect();
                assert_eq!(
                    listed, own,
                    "{what}: list_sessions shows exactly one's own sessions"
                );
                let related = SessionFilter {
                    related_type: Some("ticket".into()),
                    ..SessionFilter::default()
                };
                let listed = ok(
                    store
                        .list_sessions(&me, related, PageRequest::first(500))
                        .await,
                    &what,
                );
                assert!(
                    listed.items.iter().all(|s| s.tenant_id == me.as_str()),
                    "{what}: filtered list"
                );
            }
            7 => {
                assert!(
                    ok(
                        store
                            .list_messages(&me, theirs.id, MessageQuery::default())
                            .await,
                        &what
                    )
                    .is_empty()
                );
                assert_err!(
                    store
                        .append_message(&me, NewMessage::new(theirs.id, Role::User, "intrusion"))
                        .await,
                    StoreError::NotFound(_),
                    "{what}: append_message"
                );
            }
            8 => {
                let patch = SessionPatch {
                    title: Some("hijacked".into()),
                    status: Some(SessionStatus::Completed),
                    name: Some("hijacked".into()),
                    metadata: Some(json!({"evil": true})),
                    agent: Some(Some(stepwise_core::SessionAgent {
                        agent_type: "evil".into(),
                        config: json!({}),
                    })),
                };
                assert_eq!(
                    ok(store.update_session(&me, theirs.id, patch).await, &what),
                    None,
                    "{what}: update"
                );
                assert!(
                    !ok(store.delete_session(&me, theirs.id).await, &what),
                    "{what}: delete"
                );
            }
            9 => {
                assert_eq!(
                    ok(store.get_execution(&me, theirs.execution).await, &what),
                    None,
                    "{what}: get_execution"
                );
                assert!(
                    ok(store.list_executions(&me, theirs.id).await, &what).is_empty(),
                    "{what}: list_executions"
                );
                let choices = [
                    Transition::Cancel,
                    Transition::Complete {
                        output: json!("stolen"),
                    },
                    Transition::Fail {
                        error_message: "sabotage".into(),
                    },
                    Transition::Pause {
                        question: "?".into(),
                    },
                ];
                let transition = rng.pick(&choices);
                assert_err!(
                    store
                        .transition_execution(&me, theirs.execution, transition.clone())
                        .await,
                    StoreError::NotFound(_),
                    "{what}: transition_execution"
                );
                assert_err!(
                    store
                        .create_execution(
                            &me,
                            new_execution(Some(theirs.id), ExecutionStatus::Running)
                        )
                        .await,
                    StoreError::NotFound(_),
                    "{what}: create_execution in their session"
                );
            }
            10 => {
                let steps = ok(store.list_steps(&me, theirs.execution).await, &what);
                assert!(
                    steps.items.is_empty() && steps.skipped == 0,
                    "{what}: list_steps"
                );
                let memory = ok(store.list_session_steps(&me, theirs.id).await, &what);
                assert!(
                    memory.items.is_empty() && memory.skipped == 0,
                    "{what}: list_session_steps"
                );
                assert_err!(
                    append_step(&store, &me, new_step(theirs.execution, theirs.steps + 1)).await,
                    StoreError::NotFound(_),
                    "{what}: append_step"
                );
                assert_err!(
                    append_step(&store, &me, new_step(theirs.execution, 1)).await,
                    StoreError::NotFound(_),
                    "{what}: append_step over their step 1"
                );
            }
            11 => {
                assert!(
                    ok(store.list_snapshots(&me, theirs.execution).await, &what).is_empty(),
                    "{what}: list_snapshots"
                );
                assert_eq!(
                    ok(store.get_snapshot(&me, theirs.snapshot).await, &what),
                    None,
                    "{what}: get_snapshot"
                );
                assert_err!(
                    save_snapshot_durable(&store, &me, new_snapshot(theirs.execution, 99, None))
                        .await,
                    StoreError::NotFound(_),
                    "{what}: save_snapshot"
                );
            }
            12 => {
                assert!(
                    ok(store.list_events(&me, theirs.id, 0, 1000).await, &what).is_empty(),
                    "{what}: list_events"
                );
                assert_err!(
                    append_event_durable(
                        &store,
                        &me,
                        new_event(theirs.id, EventType::StepStarted, "intrusion")
                    )
                    .await,
                    StoreError::NotFound(_),
                    "{what}: append_event"
                );
            }
            13 => {
                assert_eq!(
                    ok(restore_memory(&store, &me, theirs.id).await, &what),
                    None,
                    "{what}: restore_memory"
                );
                assert_eq!(
                    ok(export_session(&store, &me, theirs.id).await, &what),
                    None,
                    "{what}: export_session"
                );
            }
            _ => {
                // Live events: the owner's subscriber gets the owner's event; a subscription
                // by the other tenant to the same id gets nothing, and its live-only events
                // do not reach the owner.
                let mut owner_rx = store.subscribe(&them, theirs.id);
                let mut intruder_rx = store.subscribe(&me, theirs.id);
                store.publish_live(&me, delta(theirs.id, "spoofed"));
                let owner_model = sides[owner].sessions.iter_mut().find(|s| s.id == theirs.id);
                let Some(owner_model) = owner_model else {
                    panic!("{what}: model lost a session")
                };
                owner_model.events += 1;
                let event = add_event(&store, &them, theirs.id, "owner's").await;
                let got = receive_until(&mut owner_rx, event.id, &what).await;
                assert_eq!(
                    got, event,
                    "{what}: the owner's subscriber gets the owner's event, not the intruder's delta"
                );
                assert!(
                    matches!(intruder_rx.try_recv(), Err(TryRecvError::Empty)),
                    "{what}: another tenant's subscription to this id received something"
                );
            }
        }
    }

    // Nobody's rows changed except by their owner's own calls.
    for side in &sides {
        let t = &side.tenant;
        let listed: HashSet<Id> = list_all(&store, t, SessionFilter::default())
            .await
            .iter()
            .map(|s| s.id)
            .collect();
        assert_eq!(
            listed,
            side.sessions.iter().map(|s| s.id).collect::<HashSet<_>>(),
            "seed {seed}: {t}'s sessions"
        );
        for model in &side.sessions {
            let what = format!("seed {seed}: {t}'s session {}", model.name);
            let session = some(store.get_session(t, model.id).await, &what);
            assert_eq!(
                session.title.as_deref(),
                Some(model.title.as_str()),
                "{what}: title"
            );
            assert_eq!(
                session.name.as_deref(),
                Some(model.name.as_str()),
                "{what}: name"
            );
            assert_eq!(session.status, SessionStatus::Active, "{what}: status");
            assert_eq!(session.metadata, json!({}), "{what}: metadata");
            assert_eq!(
                session.message_count, model.messages,
                "{what}: message_count"
            );
            let messages = ok(
                store
                    .list_messages(t, model.id, MessageQuery::default())
                    .await,
                &what,
            );
            assert_eq!(messages.len() as u64, model.messages, "{what}: messages");
            assert!(messages.iter().all(|m| m.content != "intrusion"));
            let execution = some(store.get_execution(t, model.execution).await, &what);
            assert_eq!(
                execution.status,
                ExecutionStatus::Running,
                "{what}: execution status"
            );
            assert_eq!(
                execution.step_count,
                u64::from(model.steps),
                "{what}: step_count"
            );
            let steps = ok(store.list_steps(t, model.execution).await, &what);
            assert_eq!(steps.items.len(), model.steps as usize, "{what}: steps");
            let events = ok(store.list_events(t, model.id, 0, 10_000).await, &what);
            assert_eq!(
                events.iter().map(|e| e.id).collect::<Vec<_>>(),
                (1..=model.events).collect::<Vec<_>>(),
                "{what}: events"
            );
            let snapshots = ok(store.list_snapshots(t, model.execution).await, &what);
            assert_eq!(snapshots.len(), model.snapshots, "{what}: snapshots");
            assert_eq!(
                ok(store.list_executions(t, model.id).await, &what).len(),
                1,
                "{what}: executions"
            );
        }
    }

    // References to the other tenant's rows inside one's own writes are treated exactly
    // like references to rows that do not exist.
    for actor in 0..2 {
        let me = sides[actor].tenant.clone();
        let theirs = sides[1 - actor].sessions[1].clone();
        let scratch = create_session(&store, &me, None).await;
        let scratch_exec =
            create_execution(&store, &me, Some(scratch.id), ExecutionStatus::Running).await;
        let what = format!("seed {seed}: {me} referencing the other tenant's ids");

        let with_parent = |parent: Id| {
            let mut new = new_execution(Some(scratch.id), ExecutionStatus::Running);
            new.parent_execution_id = Some(parent);
            new
        };
        let unknown = store
            .create_execution(&me, with_parent(stepwise_core::new_id()))
            .await;
        let foreign = store
            .create_execution(&me, with_parent(theirs.execution))
            .await;
        assert_same_outcome(&unknown, &foreign, &format!("{what}: parent_execution_id"));

        let with_parent_snapshot = |parent: Id| stepwise_store::NewSnapshot {
            parent_snapshot_id: Some(parent),
            ..new_snapshot(scratch_exec.id, 1, None)
        };
        let unknown =
            save_snapshot_durable(&store, &me, with_parent_snapshot(stepwise_core::new_id())).await;
        let foreign =
            save_snapshot_durable(&store, &me, with_parent_snapshot(theirs.snapshot)).await;
        assert_same_outcome(&unknown, &foreign, &format!("{what}: parent_snapshot_id"));
        if let Ok(snapshot) = &foreign {
            assert_eq!(
                ok(store.get_snapshot(&me, theirs.snapshot).await, &what),
                None,
                "{what}: linking to a snapshot does not make it readable ({snapshot:?})"
            );
        }

        let message = |execution_id: Id| {
            NewMessage::new(scratch.id, Role::Assistant, "ref").for_execution(execution_id)
        };
        let unknown = store
            .append_message(&me, message(stepwise_core::new_id()))
            .await;
        let foreign = store.append_message(&me, message(theirs.execution)).await;
        assert_same_outcome(
            &unknown,
            &foreign,
            &format!("{what}: a message's execution_id"),
        );

        let event = |message_id: Id, execution_id: Id| NewEvent {
            message_id: Some(message_id),
            execution_id: Some(execution_id),
            ..new_event(scratch.id, EventType::StepCompleted, "ref")
        };
        let unknown = append_event_durable(
            &store,
            &me,
            event(stepwise_core::new_id(), stepwise_core::new_id()),
        )
        .await;
        let their_message = stepwise_core::new_id();
        let foreign =
            append_event_durable(&store, &me, event(their_message, theirs.execution)).await;
        assert_same_outcome(
            &unknown,
            &foreign,
            &format!("{what}: an event's execution_id"),
        );

        // The other tenant's session saw none of it.
        let untouched = some(
            store.get_session(&sides[1 - actor].tenant, theirs.id).await,
            &what,
        );
        assert_eq!(
            untouched.message_count, theirs.messages,
            "{what}: their message_count"
        );
        let their_events = ok(
            store
                .list_events(&sides[1 - actor].tenant, theirs.id, 0, 10_000)
                .await,
            &what,
        );
        assert_eq!(
            their_events.len() as i64,
            theirs.events,
            "{what}: their events"
        );
    }
}

async fn setup_side<S: Store>(store: &S, tenant_id: &str) -> Side {
    let t = tenant(tenant_id);
    let mut sessions = Vec::new();
    for name in ["shared".to_string(), format!("own-{tenant_id}")] {
        let mut new = new_session("user-1", Some(&name));
        new.related_type = Some("ticket".into());
        let session = ok(store.create_session(&t, new).await, "create_session");
        let execution =
            create_execution(store, &t, Some(session.id), ExecutionStatus::Running).await;
        append_message(store, &t, session.id, Role::User, "hello").await;
        add_step(store, &t, execution.id, 1).await;
        let snapshot = add_snapshot(store, &t, execution.id, 1, None).await;
        add_event(store, &t, session.id, "first").await;
        sessions.push(SessionModel {
            id: session.id,
            title: session.title.clone().unwrap_or_default(),
            name,
            execution: execution.id,
            snapshot: snapshot.id,
            messages: 1,
            steps: 1,
            events: 1,
            snapshots: 1,
        });
    }
    Side {
        tenant: t,
        sessions,
    }
}

/// Both answers are Ok, or both the same kind of error.
fn assert_same_outcome<T: std::fmt::Debug>(
    unknown: &stepwise_store::Result<T>,
    foreign: &stepwise_store::Result<T>,
    what: &str,
) {
    let same = match (unknown, foreign) {
        (Ok(_), Ok(_)) => true,
        (Err(a), Err(b)) => std::mem::discriminant(a) == std::mem::discriminant(b),
        _ => false,
    };
    assert!(
        same,
        "{what}: another tenant's id must behave like an unknown id; unknown id gave {unknown:?}, theirs gave {foreign:?}"
    );
}

fn delta(session_id: Id, content: &str) -> Event {
    Event {
        id: 0,
        session_id,
        message_id: None,
        execution_id: None,
        event_type: EventType::MessageDelta,
        content: content.to_string(),
        metadata: json!({}),
        timestamp: stepwise_core::Timestamp::now(),
    }
}

/// The stored event `id` from `rx`, skipping the owner's earlier stored events (they may
/// still be in flight from before the subscription). A live-only event here means another
/// tenant's delta leaked in.
async fn receive_until(
    rx: &mut tokio::sync::broadcast::Receiver<std::sync::Arc<Event>>,
    id: i64,
    what: &str,
) -> Event {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Ok(event)) if event.id != 0 && event.id < id => continue,
            Ok(Ok(event)) => return (*event).clone(),
            Ok(Err(e)) => panic!("{what}: the live receiver failed: {e}"),
            Err(_) => panic!("{what}: no live event arrived within {DEADLINE:?}"),
        }
    }
}
