use serde_json::{Value, json};
use stepwise_core::ExecutionStatus;
use stepwise_store::prelude::*;
use stepwise_store::{NewSnapshot, StoreError};

use crate::Harness;
use crate::assert_err;
use crate::support::*;

/// Save, list without state, get with state, lineage, last-snapshot pointers.
pub async fn snapshots<H: Harness>(harness: &H) {
    let (store, _clock) = manual_store(harness).await;
    let acme = tenant("acme");
    let session = create_session(&store, &acme, Some("snaps")).await;
    let execution =
        create_execution(&store, &acme, Some(session.id), ExecutionStatus::Running).await;

    let root = add_snapshot(&store, &acme, execution.id, 1, None).await;
    assert_eq!(root.execution_id, execution.id);
    assert_eq!(root.parent_snapshot_id, None);
    assert_eq!(root.agent_id.as_deref(), Some("agent-1"));
    assert_eq!(root.agent_name.as_deref(), Some("demo"));
    assert_eq!(root.step_number, 1);
    assert!(!root.is_final);
    assert!(root.debug_mode);
    assert_eq!(
        some(store.get_execution(&acme, execution.id).await, "execution").last_snapshot_id,
        Some(root.id)
    );
    assert_eq!(
        some(store.get_session(&acme, session.id).await, "session").last_snapshot_id,
        Some(root.id)
    );

    let big_state =
        json!({"history": (0..2000).map(|i| format!("entry {i}")).collect::<Vec<_>>(), "ok": true});
    let second = ok(
        save_snapshot_durable(
            &store,
            &acme,
            NewSnapshot {
                state: big_state.clone(),
                ..new_snapshot(execution.id, 2, None)
            },
        )
        .await,
        "save a large snapshot",
    );
    let last = ok(
        save_snapshot_durable(
            &store,
            &acme,
            NewSnapshot {
                is_final: true,
                ..new_snapshot(execution.id, 3, None)
            },
        )
        .await,
        "save the final snapshot",
    );
    assert!(last.is_final);

    // A subagent's snapshot points at the parent's.
    let mut sub = new_execution(Some(session.id), ExecutionStatus::Running);
    sub.parent_execution_id = Some(execution.id);
    let subagent = ok(store.create_execution(&acme, sub).await, "create subagent");
    let child = add_snapshot(&store, &acme, subagent.id, 1, Some(second.id)).await;
    assert_eq!(child.parent_snapshot_id, Some(second.id));
    assert_eq!(
        some(store.get_execution(&acme, subagent.id).await, "subagent").last_snapshot_id,
        Some(child.id)
    );
    assert_eq!(
        some(store.get_execution(&acme, execution.id).await, "parent").last_snapshot_id,
        Some(last.id),
        "the subagent's snapshot is not the parent execution's"
    );
    assert_eq!(
        some(store.get_session(&acme, session.id).await, "session").last_snapshot_id,
        Some(child.id),
        "the session points at its newest snapshot"
    );

    let listed = ok(
        store.list_snapshots(&acme, execution.id).await,
        "list_snapshots",
    );
    assert_eq!(
        listed.iter().map(|s| s.id).collect::<Vec<_>>(),
        vec![root.id, second.id, last.id],
        "oldest first"
    );
    assert!(
        listed.iter().all(|s| s.state == Value::Null),
        "lists leave the state out"
    );
    assert_eq!(listed[0].agent_id, root.agent_id);
    assert!(listed[2].is_final);
    assert_eq!(listed[1].step_number, 2);

    let full = some(store.get_snapshot(&acme, root.id).await, "get_snapshot");
    assert_eq!(
        full.state,
        new_snapshot(execution.id, 1, None).state,
        "get_snapshot returns the state"
    );
    assert_eq!(full.id, root.id);
    assert_eq!(full.created_at, root.created_at);
    assert_eq!(full.debug_mode, root.debug_mode);
    assert_eq!(
        some(store.get_snapshot(&acme, second.id).await, "get large").state,
        big_state,
        "large states round-trip"
    );
    let child_read = some(store.get_snapshot(&acme, child.id).await, "get child");
    assert_eq!(child_read.parent_snapshot_id, Some(second.id));
    assert_eq!(child_read.execution_id, subagent.id);
    let listed_sub = ok(
        store.list_snapshots(&acme, subagent.id).await,
        "list subagent",
    );
    assert_eq!(listed_sub.len(), 1);

    assert_eq!(
        ok(
            store.get_snapshot(&acme, stepwise_core::new_id()).await,
            "get unknown"
        ),
        None
    );
    assert!(
        ok(
            store.list_snapshots(&acme, stepwise_core::new_id()).await,
            "list unknown"
        )
        .is_empty()
    );
    assert_err!(
        save_snapshot_durable(
            &store,
            &acme,
            new_snapshot(stepwise_core::new_id(), 1, None)
        )
        .await,
        StoreError::NotFound(_),
        "a snapshot of an unknown execution"
    );

    // A replacing snapshot leaves its execution one row, whatever the number of saves; the
    // subagent's snapshot is another execution's and stays.
    let mut kept = None;
    for n in 0..5u32 {
        let saved = ok(
            save_snapshot_durable(
                &store,
                &acme,
                NewSnapshot {
                    replace: true,
                    state: json!({"turn": n}),
                    ..new_snapshot(execution.id, 10 + n, None)
                },
            )
            .await,
            "save a replacing snapshot",
        );
        kept = Some(saved);
    }
    let kept = kept.expect("saved");
    let listed = ok(store.list_snapshots(&acme, execution.id).await, "list");
    assert_eq!(
        listed.iter().map(|s| s.id).collect::<Vec<_>>(),
        vec![kept.id],
        "one snapshot is left"
    );
    assert_eq!(
        some(store.get_snapshot(&acme, kept.id).await, "the kept one").state,
        json!({"turn": 4})
    );
    assert_eq!(
        ok(store.get_snapshot(&acme, root.id).await, "replaced"),
        None
    );
    assert_eq!(
        some(store.get_execution(&acme, execution.id).await, "execution").last_snapshot_id,
        Some(kept.id)
    );
    assert_eq!(
        ok(store.list_snapshots(&acme, subagent.id).await, "subagent").len(),
        1
    );
}
