//! The hot-session cache: a restore or a message listing served from the cache is exactly
//! what the database holds, after appends, across executions, and per tenant.

use stepwise_core::{ExecutionStatus, Id, Message, Restored, Role, Step, StepKind};
use stepwise_store::{
    MessageQuery, NewMessage, NewStep, StepMirror, Store, StoreError, Tenant,
    list_session_messages, restore_memory,
};

use crate::Harness;
use crate::assert_err;
use crate::support::*;
use stepwise_store::prelude::*;

async fn save<S: Store>(store: &S, tenant: &stepwise_store::Tenant, execution: Id, n: u32) {
    let new = NewStep {
        execution_id: execution,
        step_number: n,
        kind: StepKind::Action,
        body: step_body(n),
    };
    ok(append_step(store, tenant, new).await, "append_step");
}

/// The restore's steps, checked against an uncached read of the same session.
async fn restored<S: Store>(store: &S, tenant: &stepwise_store::Tenant, session: Id) -> Vec<Step> {
    let memory = some(
        restore_memory(store, tenant, session).await,
        "restore_memory",
    );
    assert_eq!(memory.restored, Restored::Full, "every step decodes");
    let stored = ok(
        store.list_session_steps(tenant, session).await,
        "list_session_steps",
    );
    assert_eq!(
        memory.steps, stored.items,
        "the restore answers what the database holds, in execution order"
    );
    memory.steps
}

/// Restores after appends see every new step in place; the cache answers repeated
/// restores (counted as hits) and never another tenant's.
pub async fn session_cache<H: Harness>(harness: &H) {
    let (store, clock) = manual_store(harness).await;
    let acme = tenant("acme");
    let session = create_session(&store, &acme, Some("cached")).await;

    // An empty session, then its first steps.
    assert!(restored(&store, &acme, session.id).await.is_empty());
    let first = create_execution(&store, &acme, Some(session.id), ExecutionStatus::Running).await;
    for n in 1..=3 {
        save(&store, &acme, first.id, n).await;
    }
    assert_eq!(restored(&store, &acme, session.id).await.len(), 3);

    let before = store.session_cache().map(|c| c.stats());
    save(&store, &acme, first.id, 4).await;
    assert_eq!(restored(&store, &acme, session.id).await.len(), 4);
    assert_eq!(restored(&store, &acme, session.id).await.len(), 4);
    if let (Some(before), Some(cache)) = (before, store.session_cache()) {
        let after = cache.stats();
        assert_eq!(
            after.hits,
            before.hits + 2,
            "a restore after an append and a repeated restore are hits"
        );
        assert_eq!(after.misses, before.misses, "no whole read was needed");
        assert!(after.bytes > 0 && after.bytes <= after.limit_bytes);
    }

    // A later execution (a subagent), then a step of the earlier one: the earlier
    // execution's step goes before the later execution's steps.
    clock.advance_secs(1);
    let second = create_execution(&store, &acme, Some(session.id), ExecutionStatus::Running).await;
    save(&store, &acme, second.id, 1).await;
    let steps = restored(&store, &acme, session.id).await;
    assert_eq!(steps.len(), 5);
    save(&store, &acme, first.id, 5).await;
    let steps = restored(&store, &acme, session.id).await;
    let order: Vec<(Id, u32)> = steps
        .iter()
        .map(|s| (s.execution_id, s.step_number))
        .collect();
    let mut expected: Vec<(Id, u32)> = (1..=5).map(|n| (first.id, n)).collect();
    expected.push((second.id, 1));
    assert_eq!(order, expected);

    // Another tenant's restore of this session finds nothing, cached or not.
    let globex = tenant("globex");
    assert!(
        ok(
            restore_memory(&store, &globex, session.id).await,
            "restore_memory"
        )
        .is_none(),
        "another tenant's session is not found"
    );
    // And a session of its own with steps is its own entry.
    let theirs = create_session(&store, &globex, Some("cached")).await;
    let exec = create_execution(&store, &globex, Some(theirs.id), ExecutionStatus::Running).await;
    save(&store, &globex, exec.id, 1).await;
    assert_eq!(restored(&store, &globex, theirs.id).await.len(), 1);
    assert_eq!(restored(&store, &acme, session.id).await.len(), 6);
}

/// The queries a message listing asks, for a session whose messages are `listed`.
fn message_queries(listed: &[Message]) -> Vec<MessageQuery> {
    let mut queries = vec![
        MessageQuery::default(),
        MessageQuery {
            roles: Some(vec![Role::User]),
            ..MessageQuery::default()
        },
        MessageQuery {
            roles: Some(vec![Role::User, Role::Assistant]),
            limit: Some(2),
            ..MessageQuery::default()
        },
        MessageQuery {
            limit: Some(0),
            ..MessageQuery::default()
        },
    ];
    for message in [listed.first(), listed.get(1), listed.last()]
        .into_iter()
        .flatten()
    {
        queries.push(MessageQuery {
            after: Some(message.id),
            limit: Some(3),
            ..MessageQuery::default()
        });
        queries.push(MessageQuery {
            after: Some(message.id),
            roles: Some(vec![Role::Assistant]),
            ..MessageQuery::default()
        });
    }
    queries
}

/// Every query through the cache, checked against the backend's own answer; returns the
/// whole list.
async fn listed<S: Store>(store: &S, tenant: &Tenant, session: Id) -> Vec<Message> {
    let all = ok(
        list_session_messages(store, tenant, session, MessageQuery::default()).await,
        "list_session_messages",
    );
    for query in message_queries(&all) {
        let cached = ok(
            list_session_messages(store, tenant, session, query.clone()).await,
            "list_session_messages",
        );
        let stored = ok(
            store.list_messages(tenant, session, query.clone()).await,
            "list_messages",
        );
        assert_eq!(
            cached, stored,
            "the listing answers what the database holds: {query:?}"
        );
    }
    all
}

/// Message listings through the cache answer what the database holds after appends
/// (plain and mirrored with a step), for every filter, per tenant; an `after` that is not
/// in the session is the backend's error; repeated listings are hits.
pub async fn session_message_cache<H: Harness>(harness: &H) {
    let (store, clock) = manual_store(harness).await;
    let acme = tenant("acme");
    let session = create_session(&store, &acme, Some("cached-messages")).await;
    assert!(listed(&store, &acme, session.id).await.is_empty());

    for (role, text) in [
        (Role::User, "What is 2+3?"),
        (Role::Info, "Execution queued"),
        (Role::Assistant, "5"),
    ] {
        append_message(&store, &acme, session.id, role, text).await;
    }
    assert_eq!(listed(&store, &acme, session.id).await.len(), 3);

    // Appends after the entry was made: a message, then a step with its mirrored messages.
    let before = store.session_cache().map(|c| c.stats());
    clock.advance_secs(1);
    append_message(&store, &acme, session.id, Role::User, "And 4*4?").await;
    let execution =
        create_execution(&store, &acme, Some(session.id), ExecutionStatus::Running).await;
    let mirror = StepMirror {
        messages: vec![
            NewMessage::new(session.id, Role::Notification, "Step 1: called calculator")
                .for_execution(execution.id),
            NewMessage::new(session.id, Role::Assistant, "16").for_execution(execution.id),
        ],
        events: Vec::new(),
    };
    let new = NewStep {
        execution_id: execution.id,
        step_number: 1,
        kind: StepKind::Action,
        body: step_body(1),
    };
    let ack = ok(
        store.append_step_mirrored(&acme, new, mirror).await,
        "append_step_mirrored",
    );
    ok(ack.await, "the mirrored step is saved");
    let all = listed(&store, &acme, session.id).await;
    let contents: Vec<&str> = all.iter().map(|m| m.content.as_str()).collect();
    assert_eq!(
        contents,
        [
            "What is 2+3?",
            "Execution queued",
            "5",
            "And 4*4?",
            "Step 1: called calculator",
            "16"
        ]
    );
    if let (Some(before), Some(cache)) = (before, store.session_cache()) {
        let after = cache.stats();
        assert!(
            after.message_hits > before.message_hits,
            "listings after appends are answered from the entry"
        );
        assert_eq!(
            after.message_misses, before.message_misses,
            "no whole read was needed"
        );
        assert_eq!(after.hits, before.hits, "message listings are not restores");
    }

    // An `after` that is not a message of this session.
    let stranger = stepwise_core::new_id();
    let query = MessageQuery {
        after: Some(stranger),
        ..MessageQuery::default()
    };
    assert_err!(
        list_session_messages(&store, &acme, session.id, query).await,
        StoreError::Invalid {
            field: Some("after"),
            ..
        },
        "an after outside the session"
    );

    // The agent memory of the same session is its own entry.
    assert_eq!(restored(&store, &acme, session.id).await.len(), 1);
    assert_eq!(listed(&store, &acme, session.id).await.len(), 6);

    // Another tenant sees none of these messages, cached or not; its own are its own.
    let globex = tenant("globex");
    assert!(listed(&store, &globex, session.id).await.is_empty());
    let theirs = create_session(&store, &globex, Some("cached-messages")).await;
    append_message(&store, &globex, theirs.id, Role::User, "theirs").await;
    assert_eq!(listed(&store, &globex, theirs.id).await.len(), 1);
    assert_eq!(listed(&store, &acme, session.id).await.len(), 6);
}
