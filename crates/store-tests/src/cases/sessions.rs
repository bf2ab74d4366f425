use std::collections::HashSet;

use serde_json::json;
use stepwise_core::{Id, Role, Session, SessionStatus};
use stepwise_store::{
    NewSession, PageRequest, SessionFilter, SessionPatch, Store, StoreError, Tenant, cursor,
};

use crate::Harness;
use crate::assert_err;
use crate::support::*;
use stepwise_store::prelude::*;

/// Create, read, find by name, update, soft delete.
pub async fn sessions<H: Harness>(harness: &H) {
    let (store, _clock) = manual_store(harness).await;
    let acme = tenant("acme");

    let new = NewSession {
        user_id: "user-1".into(),
        name: Some("alpha".into()),
        title: Some("First task".into()),
        related_type: Some("ticket".into()),
        related_id: Some("T-1".into()),
        initial_context_url: Some("https://example.com/context".into()),
        metadata: json!({"priority": 2, "tags": ["a", "b"]}),
    };
    let created = ok(store.create_session(&acme, new).await, "create_session");
    assert_eq!(created.tenant_id, "acme");
    assert_eq!(created.user_id, "user-1");
    assert_eq!(created.name.as_deref(), Some("alpha"));
    assert_eq!(created.title.as_deref(), Some("First task"));
    assert_eq!(
        created.status,
        SessionStatus::Active,
        "a new session is active"
    );
    assert_eq!(created.related_type.as_deref(), Some("ticket"));
    assert_eq!(created.related_id.as_deref(), Some("T-1"));
    assert_eq!(
        created.initial_context_url.as_deref(),
        Some("https://example.com/context")
    );
    assert_eq!(created.metadata, json!({"priority": 2, "tags": ["a", "b"]}));
    assert_eq!(created.message_count, 0);
    assert_eq!(created.last_execution_id, None);
    assert_eq!(created.last_snapshot_id, None);
    assert!(created.updated_at >= created.created_at);

    let read = some(store.get_session(&acme, created.id).await, "get_session");
    assert_eq!(
        read, created,
        "get_session returns what create_session returned"
    );
    let by_name = some(
        store.find_session_by_name(&acme, "alpha").await,
        "find_session_by_name",
    );
    assert_eq!(by_name, created);
    assert_eq!(
        ok(
            store.find_session_by_name(&acme, "beta").await,
            "find unknown name"
        ),
        None
    );
    assert_eq!(
        ok(
            store.get_session(&acme, stepwise_core::new_id()).await,
            "get unknown id"
        ),
        None
    );

    // Sessions without a name do not collide with each other.
    let unnamed_a = create_session(&store, &acme, None).await;
    let unnamed_b = create_session(&store, &acme, None).await;
    assert_ne!(unnamed_a.id, unnamed_b.id);
    assert_eq!(unnamed_a.name, None);

    // Updates: each field on its own, the rest untouched, updated_at moves on.
    let titled = some(
        store
            .update_session(
                &acme,
                created.id,
                SessionPatch {
                    title: Some("Renamed".into()),
                    ..SessionPatch::default()
                },
            )
            .await,
        "update title",
    );
    assert_eq!(titled.title.as_deref(), Some("Renamed"));
    assert_eq!(titled.name.as_deref(), Some("alpha"));
    assert_eq!(titled.status, SessionStatus::Active);
    assert_eq!(titled.metadata, created.metadata);
    assert_eq!(titled.created_at, created.created_at);
    assert!(
        titled.updated_at > created.updated_at,
        "an update moves updated_at on"
    );

    let completed = some(
        store
            .update_session(
                &acme,
                created.id,
                SessionPatch {
                    status: Some(SessionStatus::Completed),
                    ..SessionPatch::default()
                },
            )
            .await,
        "update status",
    );
    assert_eq!(completed.status, SessionStatus::Completed);
    assert_eq!(completed.title.as_deref(), Some("Renamed"));

    let with_metadata = some(
        store
            .update_session(
                &acme,
                created.id,
                SessionPatch {
                    metadata: Some(json!({"k": "v"})),
                    ..SessionPatch::default()
                },
            )
            .await,
        "update metadata",
    );
    assert_eq!(
        with_metadata.metadata,
        json!({"k": "v"}),
        "metadata is replaced"
    );
    assert_eq!(with_metadata.status, SessionStatus::Completed);

    let empty_patch = some(
        store
            .update_session(&acme, created.id, SessionPatch::default())
            .await,
        "empty patch",
    );
    assert_eq!(empty_patch.title, with_metadata.title);
    assert_eq!(empty_patch.status, with_metadata.status);
    assert_eq!(empty_patch.metadata, with_metadata.metadata);

    let read = some(
        store.get_session(&acme, created.id).await,
        "get after updates",
    );
    assert_eq!(read.title.as_deref(), Some("Renamed"));
    assert_eq!(read.status, SessionStatus::Completed);
    assert_eq!(read.metadata, json!({"k": "v"}));

    assert_eq!(
        ok(
            store
                .update_session(&acme, stepwise_core::new_id(), SessionPatch::default())
                .await,
            "update unknown"
        ),
        None
    );

    // Soft delete.
    assert!(ok(
        store.delete_session(&acme, unnamed_a.id).await,
        "delete_session"
    ));
    let deleted = some(
        store.get_session(&acme, unnamed_a.id).await,
        "a deleted session is still readable",
    );
    assert_eq!(deleted.status, SessionStatus::Deleted);
    let listed = ids(&ok(
        store
            .list_sessions(&acme, SessionFilter::default(), PageRequest::first(100))
            .await,
        "list",
    )
    .items);
    assert!(
        !listed.contains(&unnamed_a.id),
        "deleted sessions are not listed by default"
    );
    assert!(listed.contains(&unnamed_b.id) && listed.contains(&created.id));
    let only_deleted = ok(
        store
            .list_sessions(
                &acme,
                SessionFilter {
                    statuses: Some(vec![SessionStatus::Deleted]),
                    ..SessionFilter::default()
                },
                PageRequest::first(100),
            )
            .await,
        "list deleted",
    );
    assert_eq!(
        ids(&only_deleted.items),
        vec![unnamed_a.id],
        "listed with statuses=[deleted]"
    );
    assert!(
        !ok(
            store.delete_session(&acme, stepwise_core::new_id()).await,
            "delete unknown"
        ),
        "unknown id: false"
    );
}

/// Names are unique per tenant, validated, and tenants are never empty.
pub async fn session_names<H: Harness>(harness: &H) {
    let (store, _clock) = manual_store(harness).await;
    let acme = tenant("acme");
    let globex = tenant("globex");

    let first = create_session(&store, &acme, Some("shared-name")).await;
    assert_err!(
        store
            .create_session(&acme, new_session("user-2", Some("shared-name")))
            .await,
        StoreError::Conflict(_),
        "a second session named `shared-name` in one tenant"
    );
    let other_tenant = ok(
        store
            .create_session(&globex, new_session("user-1", Some("shared-name")))
            .await,
        "the same name in another tenant is fine",
    );
    assert_ne!(other_tenant.id, first.id);
    assert_eq!(
        some(
            store.find_session_by_name(&acme, "shared-name").await,
            "find acme"
        )
        .id,
        first.id
    );
    assert_eq!(
        some(
            store.find_session_by_name(&globex, "shared-name").await,
            "find globex"
        )
        .id,
        other_tenant.id
    );

    let too_long = "x".repeat(65);
    for bad in [
        "../escape",
        "a/b",
        "a b",
        "a..b",
        "index",
        "CON",
        "lpt1.txt",
        "é",
        too_long.as_str(),
    ] {
        assert_err!(
            store
                .create_session(&acme, new_session("user-1", Some(bad)))
                .await,
            StoreError::Invalid { .. },
            "create_session with the invalid name {bad:?}"
        );
        assert_err!(
            store
                .update_session(
                    &acme,
                    first.id,
                    SessionPatch {
                        name: Some(bad.to_string()),
                        ..SessionPatch::default()
                    }
                )
                .await,
            StoreError::Invalid { .. },
            "rename to the invalid name {bad:?}"
        );
    }
    let longest = "y".repeat(64);
    ok(
        store
            .create_session(&acme, new_session("user-1", Some(&longest)))
            .await,
        "a 64-character name is valid",
    );

    // Two creates racing for one name: exactly one wins.
    let mut racers = Vec::new();
    for user in 0..4 {
        let store = store.clone();
        let acme = acme.clone();
        racers.push(tokio::spawn(async move {
            store
                .create_session(
                    &acme,
                    new_session(&format!("racer-{user}"), Some("contested")),
                )
                .await
        }));
    }
    let mut winners = 0;
    for racer in racers {
        match ok(racer.await, "racing create") {
            Ok(_) => winners += 1,
            Err(StoreError::Conflict(_)) => {}
            Err(other) => {
                panic!("a create that lost the race for a name is a Conflict, got {other:?}")
            }
        }
    }
    assert_eq!(
        winners, 1,
        "exactly one of four racing creates gets the name"
    );

    // Renames keep the uniqueness rule.
    let second = create_session(&store, &acme, Some("second")).await;
    assert_err!(
        store
            .update_session(
                &acme,
                second.id,
                SessionPatch {
                    name: Some("shared-name".into()),
                    ..SessionPatch::default()
                }
            )
            .await,
        StoreError::Conflict(_),
        "renaming onto a name used in the tenant"
    );
    let renamed = some(
        store
            .update_session(
                &acme,
                second.id,
                SessionPatch {
                    name: Some("third".into()),
                    ..SessionPatch::default()
                },
            )
            .await,
        "rename",
    );
    assert_eq!(renamed.name.as_deref(), Some("third"));
    assert_eq!(
        ok(
            store.find_session_by_name(&acme, "second").await,
            "old name"
        ),
        None
    );
    assert_eq!(
        some(store.find_session_by_name(&acme, "third").await, "new name").id,
        second.id
    );
    // Nothing was half-written by the refused calls.
    assert_eq!(
        some(store.get_session(&acme, first.id).await, "first")
            .name
            .as_deref(),
        Some("shared-name")
    );

    // A deleted session gives its name up: a new session, then a rename, takes it, and the
    // deleted session stays (deleted, with no name) for retention to remove.
    let gone = create_session(&store, &acme, Some("reused")).await;
    assert!(ok(store.delete_session(&acme, gone.id).await, "delete"));
    let again = ok(
        store
            .create_session(&acme, new_session("user-2", Some("reused")))
            .await,
        "a new session takes a deleted session's name",
    );
    assert_eq!(
        some(store.find_session_by_name(&acme, "reused").await, "find").id,
        again.id
    );
    let kept = some(store.get_session(&acme, gone.id).await, "the deleted one");
    assert_eq!(kept.status, SessionStatus::Deleted);
    assert_eq!(kept.name, None);
    assert!(ok(store.delete_session(&acme, again.id).await, "delete"));
    let taken = some(
        store
            .update_session(
                &acme,
                second.id,
                SessionPatch {
                    name: Some("reused".into()),
                    ..SessionPatch::default()
                },
            )
            .await,
        "a rename takes a deleted session's name",
    );
    assert_eq!(taken.name.as_deref(), Some("reused"));
    assert_eq!(
        some(store.get_session(&acme, again.id).await, "deleted").name,
        None
    );

    assert_eq!(Tenant::new(""), Err(StoreError::InvalidTenant));
    assert_eq!(Tenant::new("   "), Err(StoreError::InvalidTenant));
    assert_eq!(Tenant::new("a\nb"), Err(StoreError::InvalidTenant));
    assert_eq!(Tenant::new("t".repeat(129)), Err(StoreError::InvalidTenant));
    assert!(Tenant::new("t".repeat(128)).is_ok());
}

/// Order, status filter, related filter, user filter.
pub async fn list_sessions<H: Harness>(harness: &H) {
    let (store, _clock) = manual_store(harness).await;
    let acme = tenant("acme");
    let mut created = Vec::new();
    for i in 0..7 {
        let mut new = new_session(
            if i % 2 == 0 { "user-even" } else { "user-odd" },
            Some(&format!("s{i}")),
        );
        if i < 3 {
            new.related_type = Some("ticket".into());
            new.related_id = Some(format!("T-{}", i % 2));
        }
        created.push(ok(store.create_session(&acme, new).await, "create_session"));
    }
    let all = list_all(&store, &acme, SessionFilter::default()).await;
    let newest_first: Vec<Id> = created.iter().rev().map(|s| s.id).collect();
    assert_eq!(ids(&all), newest_first, "newest updated_at first");
    assert_sorted_by_updated_at(&all);

    // A message moves the oldest session to the top.
    append_message(&store, &acme, created[0].id, Role::User, "bump").await;
    let all = list_all(&store, &acme, SessionFilter::default()).await;
    assert_eq!(
        all[0].id, created[0].id,
        "a session that got a message is the most recently updated"
    );
    assert_sorted_by_updated_at(&all);

    // An update moves a session to the top too.
    some(
        store
            .update_session(
                &acme,
                created[3].id,
                SessionPatch {
                    status: Some(SessionStatus::Completed),
                    ..SessionPatch::default()
                },
            )
            .await,
        "complete s3",
    );
    some(
        store
            .update_session(
                &acme,
                created[5].id,
                SessionPatch {
                    status: Some(SessionStatus::Archived),
                    ..SessionPatch::default()
                },
            )
            .await,
        "archive s5",
    );
    let all = list_all(&store, &acme, SessionFilter::default()).await;
    assert_eq!(all[0].id, created[5].id);
    assert_eq!(all[1].id, created[3].id);
    assert_eq!(
        all.len(),
        7,
        "every status but deleted is listed by default"
    );

    let filter = |statuses: Vec<SessionStatus>| SessionFilter {
        statuses: Some(statuses),
        ..SessionFilter::default()
    };
    let completed = list_all(&store, &acme, filter(vec![SessionStatus::Completed])).await;
    assert_eq!(ids(&completed), vec![created[3].id]);
    let done = list_all(
        &store,
        &acme,
        filter(vec![SessionStatus::Completed, SessionStatus::Archived]),
    )
    .await;
    assert_eq!(ids(&done), vec![created[5].id, created[3].id]);
    let active = list_all(&store, &acme, filter(vec![SessionStatus::Active])).await;
    assert_eq!(active.len(), 5);
    assert!(active.iter().all(|s| s.status == SessionStatus::Active));
    assert!(
        list_all(&store, &acme, filter(vec![SessionStatus::Abandoned]))
            .await
            .is_empty()
    );

    let tickets = list_all(
        &store,
        &acme,
        SessionFilter {
            related_type: Some("ticket".into()),
            ..SessionFilter::default()
        },
    )
    .await;
    assert_eq!(
        as_set(&tickets),
        HashSet::from([created[0].id, created[1].id, created[2].id])
    );
    let ticket_zero = list_all(
        &store,
        &acme,
        SessionFilter {
            related_type: Some("ticket".into()),
            related_id: Some("T-0".into()),
            ..SessionFilter::default()
        },
    )
    .await;
    assert_eq!(
        as_set(&ticket_zero),
        HashSet::from([created[0].id, created[2].id])
    );
    let other_type = list_all(
        &store,
        &acme,
        SessionFilter {
            related_type: Some("invoice".into()),
            ..SessionFilter::default()
        },
    )
    .await;
    assert!(other_type.is_empty());

    let odd = list_all(
        &store,
        &acme,
        SessionFilter {
            user_id: Some("user-odd".into()),
            ..SessionFilter::default()
        },
    )
    .await;
    assert_eq!(
        as_set(&odd),
        HashSet::from([created[1].id, created[3].id, created[5].id])
    );

    // Metadata filters: exact matches on top-level keys, all of them; a number or a
    // boolean matches its JSON text; a missing key or a nested value matches nothing.
    let tagged = |metadata: serde_json::Value| NewSession {
        metadata,
        ..new_session("user-meta", None)
    };
    let mut meta = Vec::new();
    for metadata in [
        json!({"state": "greeting", "skill_name": "billing", "turns": 3, "vip": true}),
        json!({"state": "greeting", "skill_name": "returns"}),
        json!({"state": {"nested": "greeting"}, "skill_name": "billing"}),
    ] {
        meta.push(ok(
            store.create_session(&acme, tagged(metadata)).await,
            "create tagged",
        ));
    }
    let by_metadata = |pairs: &[(&str, &str)]| SessionFilter {
        metadata: pairs
            .iter()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
            .collect(),
        ..SessionFilter::default()
    };
    let greeting = list_all(&store, &acme, by_metadata(&[("state", "greeting")])).await;
    assert_eq!(as_set(&greeting), HashSet::from([meta[0].id, meta[1].id]));
    let billing_greeting = list_all(
        &store,
        &acme,
        by_metadata(&[("state", "greeting"), ("skill_name", "billing")]),
    )
    .await;
    assert_eq!(ids(&billing_greeting), vec![meta[0].id]);
    for (pairs, what) in [
        (&[("turns", "3")][..], "a number"),
        (&[("vip", "true")][..], "a boolean"),
    ] {
        let found = list_all(&store, &acme, by_metadata(pairs)).await;
        assert_eq!(
            ids(&found),
            vec![meta[0].id],
            "{what} matches its JSON text"
        );
    }
    assert!(
        list_all(&store, &acme, by_metadata(&[("missing", "greeting")]))
            .await
            .is_empty()
    );
    assert!(
        list_all(&store, &acme, by_metadata(&[("turns", "4")]))
            .await
            .is_empty()
    );
    for session in &meta {
        ok(
            store.delete_session(&acme, session.id).await,
            "delete tagged",
        );
    }

    // Other tenants see none of it.
    let empty = ok(
        store
            .list_sessions(
                &tenant("globex"),
                SessionFilter::default(),
                PageRequest::default(),
            )
            .await,
        "list",
    );
    assert!(empty.items.is_empty());
    assert_eq!(empty.next_cursor, None);
}

/// Keyset pagination: every session exactly once, also while sessions are being added;
/// a cursor the store did not issue is refused.
pub async fn list_sessions_pagination<H: Harness>(harness: &H) {
    let (store, _clock) = manual_store(harness).await;
    let acme = tenant("acme");
    let mut created = Vec::new();
    for i in 0..23 {
        created.push(create_session(&store, &acme, Some(&format!("p{i:02}"))).await);
    }
    let expected: Vec<Id> = created.iter().rev().map(|s| s.id).collect();

    for limit in [1, 5, 7, 23, 50] {
        let mut seen = Vec::new();
        let mut cursor = None;
        let mut pages = 0;
        loop {
            pages += 1;
            assert!(pages <= 30, "pagination with limit {limit} does not end");
            let page = ok(
                store
                    .list_sessions(
                        &acme,
                        SessionFilter::default(),
                        PageRequest {
                            limit,
                            cursor: cursor.clone(),
                        },
                    )
                    .await,
                "list page",
            );
            assert!(
                page.items.len() <= limit as usize,
                "a page holds at most `limit` items"
            );
            if page.next_cursor.is_some() {
                assert_eq!(
                    page.items.len(),
                    limit as usize,
                    "only a full page may have a next cursor"
                );
            }
            seen.extend(ids(&page.items));
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        assert_eq!(
            seen, expected,
            "limit {limit}: every session exactly once, newest first"
        );
    }

    // Limits are clamped to 1..=500.
    let one = ok(
        store
            .list_sessions(&acme, SessionFilter::default(), PageRequest::first(0))
            .await,
        "limit 0",
    );
    assert_eq!(one.items.len(), 1, "a limit of 0 is clamped to 1");
    let big = ok(
        store
            .list_sessions(&acme, SessionFilter::default(), PageRequest::first(100_000))
            .await,
        "huge limit",
    );
    assert_eq!(big.items.len(), 23);

    // New sessions arriving between page fetches: no skip, no repeat among the originals.
    let mut seen = Vec::new();
    let mut cursor = None;
    let mut added = 0;
    loop {
        let page = ok(
            store
                .list_sessions(
                    &acme,
                    SessionFilter::default(),
                    PageRequest {
                        limit: 4,
                        cursor: cursor.clone(),
                    },
                )
                .await,
            "list page while inserting",
        );
        seen.extend(ids(&page.items));
        for _ in 0..3 {
            create_session(&store, &acme, Some(&format!("late{added}"))).await;
            added += 1;
        }
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
        assert!(added < 200, "pagination while inserting does not end");
    }
    let originals: HashSet<Id> = expected.iter().copied().collect();
    let seen_originals: Vec<Id> = seen
        .iter()
        .copied()
        .filter(|id| originals.contains(id))
        .collect();
    assert_eq!(
        seen_originals, expected,
        "every original session once, in order, despite the inserts"
    );
    let unique: HashSet<Id> = seen.iter().copied().collect();
    assert_eq!(unique.len(), seen.len(), "no session is listed twice");

    // Cursors the store never issued.
    let garbage = [
        "zzz".to_string(),
        "not a cursor".to_string(),
        "abc".to_string(),
        "00".repeat(150),
        "deadbeef".to_string(),
        hex("12345:not-an-id"),
        hex("soon:018f3c9a-0000-7000-8000-000000000000"),
    ];
    for bad in garbage {
        assert_err!(
            store
                .list_sessions(
                    &acme,
                    SessionFilter::default(),
                    PageRequest {
                        limit: 5,
                        cursor: Some(bad.clone())
                    }
                )
                .await,
            StoreError::Invalid { .. },
            "list_sessions with the cursor {bad:?}"
        );
    }
    // A well-formed cursor past every row is simply the end.
    let past = cursor::encode(stepwise_core::Timestamp(1), stepwise_core::new_id());
    let page = ok(
        store
            .list_sessions(
                &acme,
                SessionFilter::default(),
                PageRequest {
                    limit: 5,
                    cursor: Some(past),
                },
            )
            .await,
        "a cursor before every row",
    );
    assert!(page.items.is_empty());
    assert_eq!(page.next_cursor, None);
}

fn hex(text: &str) -> String {
    text.bytes().map(|b| format!("{b:02x}")).collect()
}

pub(crate) fn ids(sessions: &[Session]) -> Vec<Id> {
    sessions.iter().map(|s| s.id).collect()
}

fn as_set(sessions: &[Session]) -> HashSet<Id> {
    sessions.iter().map(|s| s.id).collect()
}

fn assert_sorted_by_updated_at(sessions: &[Session]) {
    for pair in sessions.windows(2) {
        assert!(
            pair[0].updated_at >= pair[1].updated_at,
            "sessions are listed newest updated_at first"
        );
    }
}

/// Every session matching `filter`, following cursors to the end.
pub(crate) async fn list_all<S: Store>(
    store: &S,
    tenant: &Tenant,
    filter: SessionFilter,
) -> Vec<Session> {
    let mut all = Vec::new();
    let mut cursor = None;
    for _ in 0..1000 {
        let page = ok(
            store
                .list_sessions(
                    tenant,
                    filter.clone(),
                    PageRequest {
                        limit: 100,
                        cursor: cursor.clone(),
                    },
                )
                .await,
            "list_sessions",
        );
        all.extend(page.items);
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => return all,
        }
    }
    panic!("list_sessions pagination never ended");
}
