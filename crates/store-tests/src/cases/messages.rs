use serde_json::json;
use stepwise_core::{ExecutionStatus, Id, Message, Role};
use stepwise_store::prelude::*;
use stepwise_store::{MessageQuery, NewMessage, StoreError};

use crate::Harness;
use crate::assert_err;
use crate::support::*;

/// Append bumps the session; list is oldest first; `after`, `roles` and `limit` filter.
pub async fn messages<H: Harness>(harness: &H) {
    let (store, _clock) = manual_store(harness).await;
    let acme = tenant("acme");
    let session = create_session(&store, &acme, Some("chat")).await;
    let other = create_session(&store, &acme, Some("other")).await;
    let execution =
        create_execution(&store, &acme, Some(session.id), ExecutionStatus::Pending).await;

    // first_message: none before a user message; an agent's lines do not count; the first
    // user message, cut to 200 characters, and later ones do not change it.
    assert_eq!(session.first_message, None);
    let opener = create_session(&store, &acme, Some("opener")).await.id;
    ok(
        store
            .append_message(
                &acme,
                NewMessage::new(opener, Role::Info, "Execution queued"),
            )
            .await,
        "append_message",
    );
    assert_eq!(
        some(store.get_session(&acme, opener).await, "get_session").first_message,
        None
    );
    let long = format!("é{}", "x".repeat(300));
    for content in [long.as_str(), "a later question"] {
        ok(
            store
                .append_message(&acme, NewMessage::new(opener, Role::User, content))
                .await,
            "append_message",
        );
    }
    let expected: String = long.chars().take(200).collect();
    assert_eq!(
        some(store.get_session(&acme, opener).await, "get_session").first_message,
        Some(expected.clone())
    );
    let listed = ok(
        store
            .list_sessions(
                &acme,
                stepwise_store::SessionFilter::default(),
                stepwise_store::PageRequest::first(100),
            )
            .await,
        "list_sessions",
    );
    let found = listed
        .items
        .iter()
        .find(|s| s.id == opener)
        .expect("listed");
    assert_eq!(found.first_message, Some(expected));

    let mut before = session.clone();
    let mut appended: Vec<Message> = Vec::new();
    let script = [
        (Role::User, "What is 2+3?"),
        (Role::Info, "Execution queued"),
        (Role::Notification, "Step 1: called calculator"),
        (Role::Assistant, "5"),
        (Role::User, "And 4*4? ✓ ünïcödé"),
        (Role::Assistant, "16"),
    ];
    for (i, (role, content)) in script.into_iter().enumerate() {
        let mut new = NewMessage::new(session.id, role, content);
        if role == Role::Assistant {
            new = new.for_execution(execution.id);
        }
        if i == 0 {
            new.related_type = Some("ticket".into());
            new.related_id = Some("T-9".into());
            new.context_url = Some("https://example.com/page".into());
            new.metadata = json!({"client": "cli", "n": 1});
        }
        let message = ok(store.append_message(&acme, new).await, "append_message");
        assert_eq!(message.session_id, session.id);
        assert_eq!(message.role, role);
        assert_eq!(message.content, content);
        if role == Role::Assistant {
            assert_eq!(message.execution_id, Some(execution.id));
        } else {
            assert_eq!(message.execution_id, None);
        }
        if let Some(last) = appended.last() {
            assert!(
                message.created_at > last.created_at,
                "messages get increasing server times"
            );
        }
        let after = some(store.get_session(&acme, session.id).await, "get_session");
        assert_eq!(
            after.message_count,
            before.message_count + 1,
            "append bumps message_count"
        );
        assert!(
            after.updated_at > before.updated_at,
            "append bumps updated_at"
        );
        before = after;
        appended.push(message);
    }
    assert_eq!(appended[0].related_type.as_deref(), Some("ticket"));
    assert_eq!(appended[0].related_id.as_deref(), Some("T-9"));
    assert_eq!(
        appended[0].context_url.as_deref(),
        Some("https://example.com/page")
    );
    assert_eq!(appended[0].metadata, json!({"client": "cli", "n": 1}));

    let listed = ok(
        store
            .list_messages(&acme, session.id, MessageQuery::default())
            .await,
        "list_messages",
    );
    assert_eq!(
        listed, appended,
        "list returns every message as appended, oldest first"
    );

    let after_second = ok(
        store
            .list_messages(
                &acme,
                session.id,
                MessageQuery {
                    after: Some(appended[1].id),
                    ..MessageQuery::default()
                },
            )
            .await,
        "list after",
    );
    assert_eq!(
        after_second,
        appended[2..].to_vec(),
        "`after` returns only later messages"
    );
    let after_last = ok(
        store
            .list_messages(
                &acme,
                session.id,
                MessageQuery {
                    after: Some(appended[5].id),
                    ..MessageQuery::default()
                },
            )
            .await,
        "list after the last",
    );
    assert!(after_last.is_empty());

    let users = ok(
        store
            .list_messages(
                &acme,
                session.id,
                MessageQuery {
                    roles: Some(vec![Role::User]),
                    ..MessageQuery::default()
                },
            )
            .await,
        "list users",
    );
    assert_eq!(ids(&users), vec![appended[0].id, appended[4].id]);
    let chat = ok(
        store
            .list_messages(
                &acme,
                session.id,
                MessageQuery {
                    roles: Some(vec![Role::User, Role::Assistant]),
                    ..MessageQuery::default()
                },
            )
            .await,
        "list users and assistants",
    );
    assert_eq!(
        ids(&chat),
        vec![
            appended[0].id,
            appended[3].id,
            appended[4].id,
            appended[5].id
        ]
    );
    let combined = ok(
        store
            .list_messages(
                &acme,
                session.id,
                MessageQuery {
                    after: Some(appended[0].id),
                    roles: Some(vec![Role::User]),
                    limit: None,
                },
            )
            .await,
        "after and roles",
    );
    assert_eq!(ids(&combined), vec![appended[4].id]);

    let first_two = ok(
        store
            .list_messages(
                &acme,
                session.id,
                MessageQuery {
                    limit: Some(2),
                    ..MessageQuery::default()
                },
            )
            .await,
        "limit",
    );
    assert_eq!(
        ids(&first_two),
        vec![appended[0].id, appended[1].id],
        "a limit keeps the oldest, so `after` pages forward"
    );
    let next_two = ok(
        store
            .list_messages(
                &acme,
                session.id,
                MessageQuery {
                    after: Some(appended[1].id),
                    limit: Some(2),
                    roles: None,
                },
            )
            .await,
        "after and limit",
    );
    assert_eq!(ids(&next_two), vec![appended[2].id, appended[3].id]);

    // Concurrent appends: no lost update of message_count.
    let busy = create_session(&store, &acme, Some("busy")).await;
    let mut writers = Vec::new();
    for w in 0..4 {
        let store = store.clone();
        let acme = acme.clone();
        writers.push(tokio::spawn(async move {
            for i in 0..25 {
                let content = format!("writer {w} message {i}");
                ok(
                    store
                        .append_message(&acme, NewMessage::new(busy.id, Role::User, content))
                        .await,
                    "append",
                );
            }
        }));
    }
    for writer in writers {
        ok(writer.await, "writer task");
    }
    assert_eq!(
        some(store.get_session(&acme, busy.id).await, "busy").message_count,
        100,
        "no append is lost"
    );
    let listed = ok(
        store
            .list_messages(&acme, busy.id, MessageQuery::default())
            .await,
        "list busy",
    );
    assert_eq!(listed.len(), 100);
    for pair in listed.windows(2) {
        assert!(
            (pair[0].created_at, pair[0].id) < (pair[1].created_at, pair[1].id),
            "oldest first, id breaking ties"
        );
    }

    // Messages belong to their session only.
    assert!(
        ok(
            store
                .list_messages(&acme, other.id, MessageQuery::default())
                .await,
            "other session"
        )
        .is_empty()
    );
    assert_eq!(
        some(store.get_session(&acme, other.id).await, "other").message_count,
        0
    );
    assert!(
        ok(
            store
                .list_messages(&acme, stepwise_core::new_id(), MessageQuery::default())
                .await,
            "unknown"
        )
        .is_empty()
    );
    assert_err!(
        store
            .append_message(
                &acme,
                NewMessage::new(stepwise_core::new_id(), Role::User, "hi")
            )
            .await,
        StoreError::NotFound(_),
        "append_message to an unknown session"
    );
    assert_eq!(
        some(store.get_session(&acme, session.id).await, "session").message_count,
        6
    );
}

fn ids(messages: &[Message]) -> Vec<Id> {
    messages.iter().map(|m| m.id).collect()
}

/// Queued messages: answered at once as they will be stored, durable once their acks
/// resolve, in the order queued with the session's events between them; the session's
/// count moves with them; a session that does not exist for the tenant (another tenant's
/// included) is `NotFound`, from the call or its ack, and nothing is written.
pub async fn queued_messages<H: Harness>(harness: &H) {
    let (store, _clock) = manual_store(harness).await;
    let acme = tenant("acme");
    let other = tenant("other");
    let session = create_session(&store, &acme, Some("queued")).await;
    let execution =
        create_execution(&store, &acme, Some(session.id), ExecutionStatus::Running).await;

    let mut queued = Vec::new();
    let mut acks = Vec::new();
    for n in 1..=20 {
        let new = NewMessage::new(session.id, Role::Info, format!("Step {n}: done"))
            .for_execution(execution.id);
        let (message, ack) = ok(store.queue_message(&acme, new).await, "queue_message");
        assert_eq!(message.content, format!("Step {n}: done"));
        assert_eq!(message.execution_id, Some(execution.id));
        // Its event behind it, as the engine queues them.
        drop(ok(
            store
                .append_event(&acme, stepwise_store::message_created(&message))
                .await,
            "queue its event",
        ));
        queued.push(message);
        acks.push(ack);
    }
    for (ack, message) in acks.into_iter().zip(&queued) {
        let stored = ok(ack.await, "a queued message's ack");
        assert_eq!(&stored, message, "the ack answers the message as stored");
    }
    let listed = ok(
        store
            .list_messages(&acme, session.id, MessageQuery::default())
            .await,
        "list_messages",
    );
    assert_eq!(
        listed, queued,
        "queued messages are stored in the order queued"
    );
    assert_eq!(
        some(store.get_session(&acme, session.id).await, "session").message_count,
        20
    );
    ok(store.flush().await, "flush");
    let events = ok(
        store.list_events(&acme, session.id, 0, 100).await,
        "list_events",
    );
    let announced: Vec<Option<Id>> = events.iter().map(|e| e.message_id).collect();
    let expected: Vec<Option<Id>> = queued.iter().map(|m| Some(m.id)).collect();
    assert_eq!(
        announced, expected,
        "each event follows its message, in order"
    );

    // Another tenant, and a session that does not exist: nothing is written.
    for (who, session_id) in [(&other, session.id), (&acme, stepwise_core::new_id())] {
        let refused = match store
            .queue_message(who, NewMessage::new(session_id, Role::Info, "not yours"))
            .await
        {
            Ok((_, ack)) => ack.await.map(|_| ()),
            Err(e) => Err(e),
        };
        assert!(
            matches!(refused, Err(StoreError::NotFound(_))),
            "a message to a session the tenant does not have: {refused:?}"
        );
    }
    ok(store.flush().await, "flush");
    assert_eq!(
        some(store.get_session(&acme, session.id).await, "session").message_count,
        20,
        "a refused message moves no count"
    );
    assert_eq!(
        ok(
            store
                .list_messages(&acme, session.id, MessageQuery::default())
                .await,
            "list_messages",
        )
        .len(),
        20
    );
}
