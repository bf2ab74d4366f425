use stepwise_core::summary::build_summary;
use stepwise_core::{ExecutionStatus, Restored, Role};
use stepwise_store::prelude::*;
use stepwise_store::{MessageQuery, export_session, restore_memory};

use crate::support::*;
use crate::{Corruption, Harness};

/// Damaged step payloads are skipped and counted, never an error: restore falls back to
/// a context summary built from the messages, or to `empty` when nothing is left.
pub async fn corruption_recovery<H: Harness>(harness: &H) {
    let (store, _clock) = manual_store(harness).await;
    for how in Corruption::ALL {
        one_corrupt_step(harness, &store, how).await;
        everything_corrupt(harness, &store, how).await;
    }
}

async fn one_corrupt_step<H: Harness>(harness: &H, store: &H::Store, how: Corruption) {
    let store = store.clone();
    let acme = tenant(&format!("acme-{how:?}"));
    let session = create_session(&store, &acme, Some("damaged")).await;
    append_message(&store, &acme, session.id, Role::User, "Please add 2 and 3").await;
    append_message(&store, &acme, session.id, Role::Assistant, "5").await;
    append_message(
        &store,
        &acme,
        session.id,
        Role::User,
        "Now what time is it?",
    )
    .await;
    let execution =
        create_execution(&store, &acme, Some(session.id), ExecutionStatus::Running).await;
    let steps = [
        add_step(&store, &acme, execution.id, 1).await,
        add_step(&store, &acme, execution.id, 2).await,
        add_step(&store, &acme, execution.id, 3).await,
    ];
    ok(store.flush().await, "flush");
    if !harness.corrupt_step(&store, execution.id, 2, how).await {
        eprintln!("corruption_recovery: the backend cannot damage a step with {how:?}; skipped");
        return;
    }
    let what = format!("{how:?} on step 2 of 3");
    let decode_errors_before = ok(store.stats().await, "stats").decode_errors;

    let listed = ok(store.list_steps(&acme, execution.id).await, &what);
    assert_eq!(
        listed.items,
        vec![steps[0].clone(), steps[2].clone()],
        "{what}: the valid steps still come back"
    );
    assert_eq!(listed.skipped, 1, "{what}: the damaged step is counted");
    let memory_steps = ok(store.list_session_steps(&acme, session.id).await, &what);
    assert_eq!(
        memory_steps.items, listed.items,
        "{what}: list_session_steps"
    );
    assert_eq!(
        memory_steps.skipped, 1,
        "{what}: list_session_steps counts it too"
    );
    assert!(
        ok(store.stats().await, "stats").decode_errors > decode_errors_before,
        "{what}: decode errors are counted in stats"
    );

    let memory = some(restore_memory(&store, &acme, session.id).await, &what);
    assert_eq!(
        memory.restored,
        Restored::Summary,
        "{what}: restore answers with a summary"
    );
    assert_eq!(
        memory.steps, listed.items,
        "{what}: restore keeps the valid steps"
    );
    let messages = ok(
        store
            .list_messages(&acme, session.id, MessageQuery::default())
            .await,
        &what,
    );
    let session_now = some(store.get_session(&acme, session.id).await, &what);
    let expected = build_summary(&messages, &listed.items, session_now.message_count);
    let summary = memory
        .summary
        .unwrap_or_else(|| panic!("{what}: a summary restore carries a summary"));
    assert_eq!(
        summary, expected,
        "{what}: the summary is built from the session's messages"
    );
    assert_eq!(
        summary.user_requests,
        vec![
            "Please add 2 and 3".to_string(),
            "Now what time is it?".to_string()
        ]
    );
    assert_eq!(summary.message_count, 3);

    // The rest of the session is still usable.
    let execution_now = some(store.get_execution(&acme, execution.id).await, &what);
    assert_eq!(execution_now.status, ExecutionStatus::Running);
    let doc = some(export_session(&store, &acme, session.id).await, &what);
    assert_eq!(doc.steps.len(), 2, "{what}: export carries the valid steps");
    let fourth = add_step(&store, &acme, execution.id, 4).await;
    let listed = ok(store.list_steps(&acme, execution.id).await, &what);
    assert_eq!(
        listed.items.last(),
        Some(&fourth),
        "{what}: appending goes on after a damaged step"
    );
    assert_eq!(listed.skipped, 1);
}

async fn everything_corrupt<H: Harness>(harness: &H, store: &H::Store, how: Corruption) {
    let store = store.clone();
    let acme = tenant(&format!("acme-{how:?}"));
    let silent = create_session(&store, &acme, Some("silent")).await;
    let execution =
        create_execution(&store, &acme, Some(silent.id), ExecutionStatus::Running).await;
    add_step(&store, &acme, execution.id, 1).await;
    add_step(&store, &acme, execution.id, 2).await;

    let chatty = create_session(&store, &acme, Some("chatty")).await;
    append_message(
        &store,
        &acme,
        chatty.id,
        Role::User,
        "Remember the number 7",
    )
    .await;
    let chatty_exec =
        create_execution(&store, &acme, Some(chatty.id), ExecutionStatus::Running).await;
    add_step(&store, &acme, chatty_exec.id, 1).await;
    ok(store.flush().await, "flush");

    for (exec, n) in [(execution.id, 1), (execution.id, 2), (chatty_exec.id, 1)] {
        if !harness.corrupt_step(&store, exec, n, how).await {
            eprintln!(
                "corruption_recovery: the backend cannot damage a step with {how:?}; skipped"
            );
            return;
        }
    }
    let what = format!("{how:?} on every step");
    let listed = ok(store.list_steps(&acme, execution.id).await, &what);
    assert!(listed.items.is_empty(), "{what}: nothing decodes");
    assert_eq!(listed.skipped, 2, "{what}: both damaged steps are counted");

    let memory = some(restore_memory(&store, &acme, silent.id).await, &what);
    assert_eq!(
        memory.restored,
        Restored::Empty,
        "{what}, no messages: nothing could be recovered"
    );
    assert!(memory.steps.is_empty());
    assert_eq!(memory.summary, None);

    let memory = some(restore_memory(&store, &acme, chatty.id).await, &what);
    assert_eq!(
        memory.restored,
        Restored::Summary,
        "{what}, with messages: a summary"
    );
    assert!(memory.steps.is_empty());
    let summary = memory
        .summary
        .unwrap_or_else(|| panic!("{what}: a summary restore carries a summary"));
    assert_eq!(
        summary.user_requests,
        vec!["Remember the number 7".to_string()]
    );
    assert_eq!(summary.message_count, 1);
}
