use stepwise_core::{ExecutionStatus, SessionStatus};
use stepwise_store::{AccessRole, Store, StoreStats};

use crate::Harness;
use crate::support::*;
use stepwise_store::prelude::*;

/// Create, find by hash, list, revoke, count.
pub async fn api_keys<H: Harness>(harness: &H) {
    let (store, _clock) = manual_store(harness).await;
    let acme = tenant("acme");
    let globex = tenant("globex");
    assert_eq!(ok(store.count_active_api_keys().await, "count"), 0);
    assert!(ok(store.list_api_keys().await, "list").is_empty());

    let laptop = ok(
        store
            .create_api_key(
                &acme,
                "user-1",
                AccessRole::Admin,
                Some("laptop".into()),
                "hash-laptop",
            )
            .await,
        "create",
    );
    assert_eq!(laptop.tenant_id, "acme");
    assert_eq!(laptop.user_id, "user-1");
    assert_eq!(laptop.name.as_deref(), Some("laptop"));
    assert_eq!(laptop.revoked_at, None);
    let ci = ok(
        store
            .create_api_key(&globex, "bot", AccessRole::Worker, None, "hash-ci")
            .await,
        "create unnamed",
    );
    assert_eq!(ci.name, None);
    assert_eq!(laptop.role, AccessRole::Admin);
    assert_eq!(
        ci.role,
        AccessRole::Worker,
        "a key keeps the role it was made with"
    );
    assert_ne!(ci.id, laptop.id);

    assert_eq!(
        some(store.find_api_key("hash-laptop").await, "find"),
        laptop
    );
    assert_eq!(some(store.find_api_key("hash-ci").await, "find"), ci);
    assert_eq!(
        ok(store.find_api_key("hash-unknown").await, "find unknown"),
        None
    );
    assert_eq!(ok(store.find_api_key("").await, "find empty"), None);
    assert_eq!(ok(store.count_active_api_keys().await, "count"), 2);
    let listed = ok(store.list_api_keys().await, "list");
    assert_eq!(listed.len(), 2);
    assert!(listed.contains(&laptop) && listed.contains(&ci));

    assert!(ok(store.revoke_api_key(laptop.id).await, "revoke"));
    assert_eq!(
        ok(store.find_api_key("hash-laptop").await, "find revoked"),
        None,
        "a revoked key no longer authenticates"
    );
    assert_eq!(ok(store.count_active_api_keys().await, "count"), 1);
    let listed = ok(store.list_api_keys().await, "list");
    let revoked = listed
        .iter()
        .find(|k| k.id == laptop.id)
        .expect("a revoked key is still listed");
    assert!(
        revoked.revoked_at.is_some(),
        "a listed revoked key says when"
    );
    assert_eq!(
        some(store.find_api_key("hash-ci").await, "others unaffected"),
        ci
    );
    assert!(
        !ok(
            store.revoke_api_key(stepwise_core::new_id()).await,
            "revoke unknown"
        ),
        "unknown key: false"
    );
    let _ = store.revoke_api_key(laptop.id).await;
    assert_eq!(
        ok(store.count_active_api_keys().await, "count"),
        1,
        "revoking twice counts once"
    );
}

/// Token signing keys: none at first, each added one listed oldest first with its secret,
/// and all of them there after a reopen (tokens they signed must keep verifying).
pub async fn signing_keys<H: Harness>(harness: &H) {
    let (store, clock) = manual_store(harness).await;
    assert!(ok(store.list_signing_keys().await, "list").is_empty());
    let first = ok(store.add_signing_key(&"a".repeat(64)).await, "add");
    clock.advance_secs(1);
    let second = ok(store.add_signing_key(&"b".repeat(64)).await, "add another");
    assert_ne!(first.id, second.id);
    let listed = ok(store.list_signing_keys().await, "list");
    assert_eq!(listed, vec![first.clone(), second.clone()], "oldest first");
    assert_eq!(
        listed[1].secret,
        "b".repeat(64),
        "the secret is kept as given"
    );
    assert!(
        !format!("{:?}", listed[0]).contains(&"a".repeat(64)),
        "Debug never shows a secret"
    );
    let Some(store) = harness.reopen(store, clock.clone()).await else {
        return;
    };
    assert_eq!(
        ok(store.list_signing_keys().await, "list after reopen"),
        vec![first, second],
        "signing keys survive a reopen"
    );
}

/// ping, flush, stats and the backend's name.
pub async fn operations<H: Harness>(harness: &H) {
    let (store, _clock) = manual_store(harness).await;
    ok(store.ping().await, "ping");
    ok(store.flush().await, "flush on an idle store");
    assert!(!store.backend_name().is_empty(), "a backend has a name");
    let stats: StoreStats = ok(store.stats().await, "stats");
    assert_eq!(stats.queue_depth, 0);
    assert_eq!(stats.decode_errors, 0);
    assert_eq!(stats.save_errors, 0);

    let acme = tenant("acme");
    let session = create_session(&store, &acme, Some("ops")).await;
    create_execution(&store, &acme, Some(session.id), ExecutionStatus::Pending).await;
    create_execution(&store, &acme, Some(session.id), ExecutionStatus::Pending).await;
    assert_eq!(ok(store.queue_depth().await, "queue_depth"), 2);
    ok(store.stats().await, "stats with work queued");

    // Counts cover every tenant; other cases may share the database, so at least.
    let counts = ok(store.count_by_status().await, "count_by_status");
    let active = counts
        .sessions
        .iter()
        .find(|(status, _)| *status == SessionStatus::Active)
        .map_or(0, |(_, n)| *n);
    assert!(active >= 1, "the active session is counted: {counts:?}");
    let pending = counts
        .executions
        .iter()
        .find(|(status, _)| *status == ExecutionStatus::Pending)
        .map_or(0, |(_, n)| *n);
    assert!(
        pending >= 2,
        "the pending executions are counted: {counts:?}"
    );
    // Whether it is granted depends on other nodes; asking must work.
    drop(ok(store.try_retention_lock().await, "try_retention_lock"));
}
