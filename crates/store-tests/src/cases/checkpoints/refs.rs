//! Append items that refer to a pending write of the parent checkpoint (a node's output,
//! stored once as the write): read back in place, kept through deletes, exports and copies.

// The cases share the helpers of `checkpoints.rs` (puts, typed values, listings).
use super::*;
use std::collections::BTreeMap;
use stepwise_store::checkpoints::{WriteRef, item_type};

/// A reference to pending write `(task, 0)` of checkpoint `id`.
fn write_ref(id: &str, task: &str) -> TypedValue {
    WriteRef {
        checkpoint_id: id.into(),
        task_id: task.into(),
        idx: 0,
    }
    .to_item()
}

fn append_refs(version: &str, base: &str, items: Vec<TypedValue>) -> NewBlob {
    NewBlob {
        channel: "messages".into(),
        version: version.into(),
        body: BlobBody::Append {
            base_version: Some(base.into()),
            items,
        },
    }
}

fn writes(id: &str, task: &str, channel: &str, data: &str) -> PutWrites {
    PutWrites {
        thread_id: "refs".into(),
        user_id: "user-1".into(),
        checkpoint_ns: "".into(),
        checkpoint_id: id.into(),
        task_id: task.into(),
        task_path: format!("~{task}"),
        writes: vec![NewWrite {
            idx: 0,
            channel: channel.into(),
            value: typed(data),
        }],
    }
}

/// The `messages` items of the latest checkpoint of `thread`: `(type, data, spliced)` each.
async fn latest_items<S: Store>(
    store: &S,
    t: &Tenant,
    thread: &str,
) -> Vec<(String, String, bool)> {
    let latest = some(
        checkpoints(store).get_checkpoint(t, thread, "", None).await,
        "latest",
    );
    let Some(ResolvedBlob::List { items, .. }) =
        latest.blobs.iter().find(|b| b.channel() == "messages")
    else {
        panic!("messages is a list: {:?}", latest.blobs);
    };
    items
        .iter()
        .map(|i| {
            let (type_name, spliced) = item_type(i);
            (
                type_name.to_string(),
                String::from_utf8_lossy(&i.data).into_owned(),
                spliced,
            )
        })
        .collect()
}

/// A checkpoint `id` of `thread` forked from 002 (sorting before 003, the latest), whose
/// `messages` append on version 2 holds `refs`.
fn fork(thread: &str, id: &str, refs: Vec<TypedValue>) -> NewCheckpoint {
    let mut c = checkpoint(thread, "", id, Some("002"));
    c.channel_versions = versions(&[("messages", id)]);
    c.blobs = vec![append_refs(id, "2", refs)];
    c
}

fn item(data: &str, spliced: bool) -> (String, String, bool) {
    ("json".into(), data.into(), spliced)
}

pub async fn checkpoint_write_refs<H: Harness>(harness: &H) {
    let (store, _) = manual_store(harness).await;
    let (t, other) = (tenant("t1"), tenant("t2"));
    let mut c1 = checkpoint("refs", "", "001", None);
    c1.metadata = json!({"source": "loop", "step": 1, "run_id": "run-1"});
    c1.channel_versions = versions(&[("messages", "1")]);
    c1.blobs = vec![full("messages", "1", "[m0]")];
    assert!(put(&store, &t, c1).await);
    for w in [
        writes("001", "task-a", "messages", "[m1a,m1b]"),
        writes("001", "task-b", "count", "7"),
    ] {
        ok(
            checkpoints(&store).put_checkpoint_writes(&t, w).await,
            "writes",
        );
    }

    // A reference to a write that is not stored, or is on another channel: a conflict,
    // and the checkpoint is not stored.
    let checked = |bytes: &str| {
        WriteRef {
            checkpoint_id: "001".into(),
            task_id: "task-a".into(),
            idx: 0,
        }
        .to_checked_item(&stepwise_store::checkpoints::sha256_hex(bytes.as_bytes()))
    };
    for (missing, what) in [
        (write_ref("001", "task-z"), "an unknown task"),
        (write_ref("000", "task-a"), "another checkpoint"),
        (write_ref("001", "task-b"), "a write on another channel"),
        (checked("[m1a]"), "a digest of other bytes"),
    ] {
        let mut bad = checkpoint("refs", "", "002", Some("001"));
        bad.channel_versions = versions(&[("messages", "2")]);
        bad.blobs = vec![append_refs("2", "1", vec![missing])];
        assert_err!(
            checkpoints(&store).put_checkpoint(&t, bad).await,
            stepwise_store::StoreError::Conflict(_),
            "{what}"
        );
        assert!(
            ok(
                checkpoints(&store)
                    .get_checkpoint(&t, "refs", "", Some("002"))
                    .await,
                "refused put"
            )
            .is_none(),
            "{what}: nothing stored"
        );
    }

    let mut c2 = checkpoint("refs", "", "002", Some("001"));
    c2.channel_versions = versions(&[("messages", "2")]);
    c2.blobs = vec![append_refs(
        "2",
        "1",
        vec![checked("[m1a,m1b]"), typed("m2")],
    )];
    assert!(put(&store, &t, c2).await);
    ok(
        checkpoints(&store)
            .put_checkpoint_writes(&t, writes("002", "task-c", "messages", "[m3]"))
            .await,
        "writes",
    );
    let mut c3 = checkpoint("refs", "", "003", Some("002"));
    c3.channel_versions = versions(&[("messages", "3")]);
    c3.blobs = vec![append_refs("3", "2", vec![write_ref("002", "task-c")])];
    assert!(put(&store, &t, c3).await);

    // A write stands for one item, so reading or settling a thread costs what was sent: a
    // fork of 002 that refers to task-c's write again is refused, and so is a put naming
    // one write twice (which then marks nothing: the write can be referred to once after).
    ok(
        checkpoints(&store)
            .put_checkpoint_writes(&t, writes("002", "task-d", "messages", "[m4]"))
            .await,
        "writes",
    );
    for (refs, what) in [
        (
            vec![write_ref("002", "task-c")],
            "a write another checkpoint refers to",
        ),
        (
            vec![write_ref("002", "task-d"), write_ref("002", "task-d")],
            "one write twice",
        ),
    ] {
        assert_err!(
            checkpoints(&store)
                .put_checkpoint(&t, fork("refs", "002a", refs))
                .await,
            stepwise_store::StoreError::Conflict(_),
            "{what}"
        );
    }
    assert!(
        put(
            &store,
            &t,
            fork("refs", "002a", vec![write_ref("002", "task-d")])
        )
        .await
    );

    // Read back: the write's value in the item's place, marked as a list to splice.
    let expected = vec![
        item("[m1a,m1b]", true),
        item("m2", false),
        item("[m3]", true),
    ];
    assert_eq!(latest_items(&store, &t, "refs").await, expected);
    // Since a version the reader holds: only what came after it, resolved the same way.
    let since = some(
        checkpoints(&store)
            .get_checkpoint_since(
                &t,
                "refs",
                "",
                None,
                &BTreeMap::from([("messages".to_string(), "2".to_string())]),
            )
            .await,
        "since",
    );
    match since.blobs.iter().find(|b| b.channel() == "messages") {
        Some(ResolvedBlob::Since { items, .. }) => {
            assert_eq!(items.len(), 1);
            assert_eq!(item_type(&items[0]), ("json", true));
            assert_eq!(items[0].data, b"[m3]");
        }
        other => panic!("expected the items since version 2, got {other:?}"),
    }

    // A copy and an export/import carry the values with them.
    some(
        checkpoints(&store)
            .copy_thread(&t, "refs", "refs-copy", "user-1")
            .await,
        "copy",
    );
    assert_eq!(latest_items(&store, &t, "refs-copy").await, expected);
    // The copy's writes are referred to as the original's are.
    assert_err!(
        checkpoints(&store)
            .put_checkpoint(
                &t,
                fork("refs-copy", "002b", vec![write_ref("002", "task-c")])
            )
            .await,
        stepwise_store::StoreError::Conflict(_),
        "a copied write its copied item refers to"
    );
    let session_id = some(checkpoints(&store).get_thread(&t, "refs").await, "thread").session_id;
    let doc = some(
        stepwise_store::export_session(&store, &t, session_id).await,
        "export",
    );
    let thread = doc.thread.clone().expect("the thread is exported");
    let v2 = thread
        .checkpoint_blobs
        .iter()
        .find(|b| b.channel == "messages" && b.version == "2")
        .expect("version 2 exported");
    assert_eq!(
        v2.items
            .iter()
            .map(|i| (i.type_name.as_str(), i.splice))
            .collect::<Vec<_>>(),
        vec![("json", true), ("json", false)],
        "a reference is exported as the write's value, to splice"
    );
    ok(store.import_document(&other, "user-2", doc).await, "import");
    assert_eq!(latest_items(&store, &other, "refs").await, expected);

    // Deleting the run of checkpoint 001 (in the thread and its copy) deletes its writes:
    // the items that referred to them keep their values.
    assert_eq!(
        ok(
            checkpoints(&store)
                .delete_checkpoints_for_runs(&t, vec!["run-1".into()])
                .await,
            "delete for runs"
        ),
        2
    );
    assert_eq!(latest_items(&store, &t, "refs").await, expected);
    assert_eq!(latest_items(&store, &t, "refs-copy").await, expected);
    // Pruning to the latest deletes the writes of 002: the same.
    ok(
        checkpoints(&store)
            .prune_checkpoints(&t, vec!["refs".into()], PruneStrategy::KeepLatest)
            .await,
        "prune",
    );
    assert_eq!(latest_items(&store, &t, "refs").await, expected);
    // The copy and the import were left as they were.
    assert_eq!(latest_items(&store, &t, "refs-copy").await, expected);
    assert_eq!(latest_items(&store, &other, "refs").await, expected);
    let pruned = some(checkpoints(&store).get_thread(&t, "refs").await, "pruned");
    assert_eq!(pruned.checkpoints, 1);
}
