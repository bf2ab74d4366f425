//! A thread in a session's export document, and back in by an import.

// The cases share the helpers of `checkpoints.rs` (puts, typed values, listings).
use super::*;

/// A record read back from another copy of the thread: the same except for its session.
fn without_session(mut record: CheckpointRecord) -> CheckpointRecord {
    record.session_id = stepwise_core::Id::nil();
    record
}

/// A thread's session exports with its checkpoints, blobs (full and append chains, several
/// namespaces) and pending writes; importing the document into another tenant makes a new
/// thread that reads back exactly like the original. Importing where the thread id is taken
/// is a conflict, and a document with a broken chain is refused; neither writes anything.
pub async fn checkpoint_export_import<H: Harness>(harness: &H) {
    use stepwise_core::document::{DocumentLimits, parse_document};
    use stepwise_store::{SessionFilter, export_session};

    let (store, _) = manual_store(harness).await;
    let (acme, globex) = (tenant("acme"), tenant("globex"));
    let mut c1 = checkpoint("portable", "", "001", None);
    c1.channel_versions = versions(&[("messages", "1"), ("count", "1")]);
    c1.blobs = vec![full("messages", "1", "[m0]"), full("count", "1", "1")];
    let mut c2 = checkpoint("portable", "", "002", Some("001"));
    c2.metadata = json!({"source": "loop", "step": 2, "run_id": "run-7"});
    c2.channel_versions = versions(&[("messages", "2"), ("count", "2")]);
    c2.blobs = vec![
        append("messages", "2", Some("1"), &["m1", "m2"]),
        full("count", "2", "2"),
    ];
    let mut c3 = checkpoint("portable", "", "003", Some("002"));
    c3.channel_versions = versions(&[("messages", "3"), ("count", "2")]);
    c3.blobs = vec![append("messages", "3", Some("2"), &["m3"])];
    let mut child = checkpoint("portable", "tools:1", "002a", None);
    child.channel_versions = versions(&[("log", "1")]);
    child.blobs = vec![append("log", "1", None, &["started"])];
    let session_id = ok(checkpoints(&store).put_checkpoint(&acme, c1).await, "c1").session_id;
    for c in [c2, c3, child] {
        ok(checkpoints(&store).put_checkpoint(&acme, c).await, "put");
    }
    for (ns, id, task, writes) in [
        (
            "",
            "003",
            "task-a",
            vec![(0, "messages", "w0"), (-1, "__error__", "boom")],
        ),
        ("", "003", "task-b", vec![(0, "count", "w1")]),
        ("tools:1", "002a", "task-c", vec![(0, "log", "w2")]),
    ] {
        let put = PutWrites {
            thread_id: "portable".into(),
            user_id: "user-1".into(),
            checkpoint_ns: ns.into(),
            checkpoint_id: id.into(),
            task_id: task.into(),
            task_path: format!("path-{task}"),
            writes: writes
                .into_iter()
                .map(|(idx, channel, data)| NewWrite {
                    idx,
                    channel: channel.into(),
                    value: typed(data),
                })
                .collect(),
        };
        ok(
            checkpoints(&store).put_checkpoint_writes(&acme, put).await,
            "writes",
        );
    }

    let doc = some(export_session(&store, &acme, session_id).await, "export");
    let thread = doc
        .thread
        .clone()
        .expect("a thread's session exports its thread");
    assert_eq!(thread.thread_id, "portable");
    assert_eq!(
        (
            thread.checkpoints.len(),
            thread.checkpoint_blobs.len(),
            thread.checkpoint_writes.len()
        ),
        (4, 6, 4)
    );
    // What export writes, import reads: the JSON form parses and validates unchanged.
    let bytes = serde_json::to_vec(&doc).expect("serialises");
    let parsed = ok(parse_document(&bytes, &DocumentLimits::default()), "parse");
    assert_eq!(parsed, doc);

    let sessions = |t: Tenant| {
        let store = &store;
        async move { list_all(store, &t, SessionFilter::default()).await.len() }
    };
    // The thread id is taken in acme (and so is the session name): a conflict, nothing written.
    let before = sessions(acme.clone()).await;
    let mut renamed = doc.clone();
    renamed.session.name = None;
    assert_err!(
        store
            .import_document(&acme, "user-1", renamed.clone())
            .await,
        stepwise_store::StoreError::Conflict(_),
        "import where the thread id is taken"
    );
    assert_eq!(sessions(acme.clone()).await, before);
    // A chain whose base is not in the document is refused, nothing written.
    let mut broken = renamed.clone();
    if let Some(t) = broken.thread.as_mut() {
        t.thread_id = "other".into();
        t.checkpoint_blobs
            .retain(|b| !(b.channel == "messages" && b.version == "1"));
    }
    assert_err!(
        store.import_document(&acme, "user-1", broken).await,
        stepwise_store::StoreError::Invalid { .. },
        "import of a broken append chain"
    );
    assert_eq!(sessions(acme.clone()).await, before);
    assert!(
        ok(
            checkpoints(&store).get_thread(&acme, "other").await,
            "other"
        )
        .is_none()
    );

    // Into another tenant: a new thread that reads back like the original.
    let imported = ok(
        store.import_document(&globex, "user-2", doc.clone()).await,
        "import",
    );
    assert_ne!(imported.id, session_id);
    let info = some(
        checkpoints(&store).get_thread(&globex, "portable").await,
        "imported thread",
    );
    assert_eq!((info.session_id, info.checkpoints), (imported.id, 4));
    for ns in ["", "tools:1"] {
        let original = some(
            checkpoints(&store)
                .get_checkpoint(&acme, "portable", ns, None)
                .await,
            "orig",
        );
        let copy = some(
            checkpoints(&store)
                .get_checkpoint(&globex, "portable", ns, None)
                .await,
            "copy",
        );
        assert_eq!(copy.session_id, imported.id);
        assert_eq!(
            without_session(copy),
            without_session(original),
            "latest of {ns:?}"
        );
    }
    let latest = some(
        checkpoints(&store)
            .get_checkpoint(&globex, "portable", "", None)
            .await,
        "latest",
    );
    let messages = latest.blobs.iter().find(|b| b.channel() == "messages");
    assert_eq!(
        messages.map(list_items),
        Some((
            Some("[m0]".into()),
            vec!["m1".into(), "m2".into(), "m3".into()]
        ))
    );
    assert_eq!(latest.pending_writes.len(), 3);
    let all = |t: Tenant| {
        let store = &store;
        async move {
            ok(
                checkpoints(store)
                    .list_checkpoints(&t, list_of(Some("portable"), None, 100))
                    .await,
                "list",
            )
            .items
            .into_iter()
            .map(without_session)
            .collect::<Vec<_>>()
        }
    };
    assert_eq!(all(globex.clone()).await, all(acme.clone()).await);
    // By run: the imported checkpoints keep their run id.
    assert_eq!(
        ok(
            checkpoints(&store)
                .delete_checkpoints_for_runs(&globex, vec!["run-7".into()])
                .await,
            "delete for runs"
        ),
        1
    );
    // Exporting the imported session gives the same thread back (less the deleted run).
    let again = some(
        export_session(&store, &globex, imported.id).await,
        "re-export",
    );
    let mut expected = thread.clone();
    expected.checkpoints.retain(|c| c.checkpoint_id != "002");
    assert_eq!(
        again.thread.map(|t| t.checkpoints),
        Some(expected.checkpoints)
    );

    // An ordinary session exports no thread, and its JSON has no `thread` member.
    let plain = create_session(&store, &acme, Some("plain")).await;
    let plain_doc = some(export_session(&store, &acme, plain.id).await, "plain");
    assert!(plain_doc.thread.is_none());
    let text = serde_json::to_string(&plain_doc).expect("serialises");
    assert!(!text.contains("\"thread\""), "{text}");
}
