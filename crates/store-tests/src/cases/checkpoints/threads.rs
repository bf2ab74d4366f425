//! The thread operations (delete, copy, delete for runs, prune) and tenant isolation.

// The cases share the helpers of `checkpoints.rs` (puts, typed values, listings).
use super::*;

pub async fn checkpoint_threads<H: Harness>(harness: &H) {
    let (store, clock) = manual_store(harness).await;
    let t = tenant("t1");
    let write = |thread: &str, id: &str| PutWrites {
        thread_id: thread.into(),
        user_id: "user-1".into(),
        checkpoint_ns: "".into(),
        checkpoint_id: id.into(),
        task_id: "task".into(),
        task_path: "".into(),
        writes: vec![NewWrite {
            idx: 0,
            channel: "ch".into(),
            value: typed("w"),
        }],
    };
    let with_run =
        |thread: &str, ns: &str, id: &str, run: &str, version: &str, base: Option<&str>| {
            let mut c = checkpoint(thread, ns, id, None);
            c.metadata = json!({"run_id": run});
            c.channel_versions = versions(&[("m", version)]);
            c.blobs = vec![append("m", version, base, &[id])];
            c
        };
    for (id, run, version, base) in [
        ("001", "run-1", "1", None),
        ("002", "run-1", "2", Some("1")),
        ("003", "run-2", "3", Some("2")),
    ] {
        assert!(put(&store, &t, with_run("src", "", id, run, version, base)).await);
        ok(
            checkpoints(&store)
                .put_checkpoint_writes(&t, write("src", id))
                .await,
            "writes",
        );
    }
    assert!(
        put(
            &store,
            &t,
            with_run("src", "sub", "002", "run-1", "1", None)
        )
        .await
    );

    // copy_thread: every checkpoint, blob and write; the source unchanged.
    let copy = some(
        checkpoints(&store)
            .copy_thread(&t, "src", "dst", "user-1")
            .await,
        "copy",
    );
    assert_eq!(copy.checkpoints, 4);
    let src = ok(
        checkpoints(&store)
            .list_checkpoints(&t, list_of(Some("src"), None, 100))
            .await,
        "src",
    );
    let dst = ok(
        checkpoints(&store)
            .list_checkpoints(&t, list_of(Some("dst"), None, 100))
            .await,
        "dst",
    );
    assert_eq!(ids(&src.items), ids(&dst.items));
    for (a, b) in src.items.iter().zip(&dst.items) {
        assert_eq!(
            (&a.blobs, &a.pending_writes, &a.metadata),
            (&b.blobs, &b.pending_writes, &b.metadata)
        );
        assert_eq!(b.thread_id, "dst");
    }
    assert_ne!(
        copy.session_id,
        some(checkpoints(&store).get_thread(&t, "src").await, "src").session_id
    );
    assert_err!(
        checkpoints(&store)
            .copy_thread(&t, "src", "dst", "user-1")
            .await,
        stepwise_store::StoreError::Conflict(_),
        "copy onto a thread with checkpoints"
    );
    assert!(
        ok(
            checkpoints(&store)
                .copy_thread(&t, "nope", "dst2", "user-1")
                .await,
            "no source"
        )
        .is_none()
    );
    assert!(
        ok(
            checkpoints(&store).get_thread(&t, "dst2").await,
            "no target made"
        )
        .is_none()
    );
    // A thread with pending writes only (put before their checkpoint) is no empty target.
    ok(
        checkpoints(&store)
            .put_checkpoint_writes(&t, write("only-writes", "001"))
            .await,
        "writes before their checkpoint",
    );
    if ok(
        checkpoints(&store).get_thread(&t, "only-writes").await,
        "only-writes",
    )
    .is_some()
    {
        assert_err!(
            checkpoints(&store)
                .copy_thread(&t, "src", "only-writes", "user-1")
                .await,
            stepwise_store::StoreError::Conflict(_),
            "copy onto a thread with pending writes"
        );
    }

    // delete_checkpoints_for_runs: those checkpoints and their writes, in every namespace.
    assert_eq!(
        ok(
            checkpoints(&store)
                .delete_checkpoints_for_runs(&t, vec!["run-1".into(), "nope".into()])
                .await,
            "for runs"
        ),
        3 + 3
    );
    assert_eq!(
        ok(
            checkpoints(&store)
                .delete_checkpoints_for_runs(&t, vec![])
                .await,
            "none"
        ),
        0
    );
    let left = ok(
        checkpoints(&store)
            .list_checkpoints(&t, list_of(Some("src"), None, 100))
            .await,
        "src",
    );
    assert_eq!(ids(&left.items), vec!["003"]);
    assert_eq!(
        list_items(&left.items[0].blobs[0]).1,
        vec!["001", "002", "003"],
        "blobs stay"
    );

    // prune keep_latest: the latest checkpoint of each namespace with what it needs.
    let mut base = with_run("p", "", "003", "run-3", "3", None);
    base.blobs = vec![full("m", "3", "[base]"), full("junk", "9", "x")];
    assert!(put(&store, &t, base).await);
    for (id, version, base) in [("004", "4", Some("3")), ("005", "5", Some("4"))] {
        assert!(put(&store, &t, with_run("p", "", id, "run-3", version, base)).await);
        ok(
            checkpoints(&store)
                .put_checkpoint_writes(&t, write("p", id))
                .await,
            "writes",
        );
    }
    assert!(put(&store, &t, with_run("p", "sub", "001", "run-3", "1", None)).await);
    assert!(
        put(
            &store,
            &t,
            with_run("p", "sub", "002", "run-3", "2", Some("1"))
        )
        .await
    );
    assert_eq!(
        ok(
            checkpoints(&store)
                .prune_checkpoints(
                    &t,
                    vec!["p".into(), "nope".into()],
                    PruneStrategy::KeepLatest
                )
                .await,
            "prune"
        ),
        3
    );
    let kept = ok(
        checkpoints(&store)
            .list_checkpoints(&t, list_of(Some("p"), None, 100))
            .await,
        "kept",
    );
    assert_eq!(ids(&kept.items), vec!["005", "002"]);
    assert_eq!(
        list_items(&kept.items[0].blobs[0]),
        (Some("[base]".to_string()), vec!["004".into(), "005".into()])
    );
    assert_eq!(list_items(&kept.items[1].blobs[0]).1, vec!["001", "002"]);
    assert_eq!(
        kept.items[0].pending_writes.len(),
        1,
        "the kept checkpoint's writes stay"
    );
    assert_eq!(
        ok(
            checkpoints(&store)
                .prune_checkpoints(&t, vec![], PruneStrategy::KeepLatest)
                .await,
            "empty"
        ),
        0
    );
    // prune delete: every checkpoint; the thread stays (empty).
    assert_eq!(
        ok(
            checkpoints(&store)
                .prune_checkpoints(&t, vec!["p".into()], PruneStrategy::Delete)
                .await,
            "delete"
        ),
        2
    );
    assert_eq!(
        some(checkpoints(&store).get_thread(&t, "p").await, "p").checkpoints,
        0
    );
    assert!(
        ok(
            checkpoints(&store).get_checkpoint(&t, "p", "", None).await,
            "none"
        )
        .is_none()
    );

    // delete_thread: the checkpoints and the session with its rows, for real.
    let session = some(checkpoints(&store).get_thread(&t, "dst").await, "dst").session_id;
    append_message(&store, &t, session, stepwise_core::Role::User, "hello").await;
    assert!(ok(
        checkpoints(&store).delete_thread(&t, "dst").await,
        "delete"
    ));
    assert!(!ok(
        checkpoints(&store).delete_thread(&t, "dst").await,
        "again"
    ));
    assert!(ok(checkpoints(&store).get_thread(&t, "dst").await, "gone").is_none());
    assert!(ok(store.get_session(&t, session).await, "session gone").is_none());
    assert!(
        ok(
            checkpoints(&store)
                .list_checkpoints(&t, list_of(Some("dst"), None, 100))
                .await,
            "gone"
        )
        .items
        .is_empty()
    );
    // The id is free again: a new put starts a new thread.
    let again = ok(
        checkpoints(&store)
            .put_checkpoint(&t, checkpoint("dst", "", "001", None))
            .await,
        "put",
    );
    assert!(again.thread_created && again.session_id != session);

    // Deleting the session (soft) deletes its thread rows; so does retention.
    let session = some(checkpoints(&store).get_thread(&t, "src").await, "src").session_id;
    assert!(ok(
        store.delete_session(&t, session).await,
        "delete session"
    ));
    assert!(ok(checkpoints(&store).get_thread(&t, "src").await, "src gone").is_none());
    let session = some(checkpoints(&store).get_thread(&t, "dst").await, "dst").session_id;
    let patch = SessionPatch {
        status: Some(SessionStatus::Completed),
        ..SessionPatch::default()
    };
    ok(store.update_session(&t, session, patch).await, "complete");
    clock.advance_days(200);
    let now = clock.now();
    ok(
        store
            .cleanup_old_sessions(
                now,
                RetentionPolicy::default(),
                false,
                stepwise_store::TenantScope::All,
            )
            .await,
        "cleanup",
    );
    assert!(ok(checkpoints(&store).get_thread(&t, "dst").await, "dst gone").is_none());
    let left = ok(
        checkpoints(&store)
            .list_checkpoints(&t, list_of(None, None, 100))
            .await,
        "left",
    );
    assert!(
        left.items.iter().all(|r| r.thread_id == "p"),
        "only p is left: {:?}",
        ids(&left.items)
    );
}

pub async fn checkpoint_isolation<H: Harness>(harness: &H) {
    let (store, _) = manual_store(harness).await;
    let (a, b) = (tenant("tenant-a"), tenant("tenant-b"));
    let mut ca = checkpoint("shared", "", "001", None);
    ca.metadata = json!({"run_id": "run"});
    ca.channel_versions = versions(&[("m", "1")]);
    ca.blobs = vec![full("m", "1", "a's")];
    let mut cb = ca.clone();
    cb.blobs = vec![full("m", "1", "b's")];
    let pa = ok(checkpoints(&store).put_checkpoint(&a, ca).await, "a");
    let pb = ok(checkpoints(&store).put_checkpoint(&b, cb).await, "b");
    assert!(pa.created && pb.created && pa.thread_created && pb.thread_created);
    assert_ne!(pa.session_id, pb.session_id);
    let got = some(
        checkpoints(&store)
            .get_checkpoint(&b, "shared", "", None)
            .await,
        "b's",
    );
    assert!(matches!(&got.blobs[0], ResolvedBlob::Full { value, .. } if *value == typed("b's")));
    let c = tenant("tenant-c");
    assert!(ok(checkpoints(&store).get_thread(&c, "shared").await, "c").is_none());
    assert!(
        ok(
            checkpoints(&store)
                .list_checkpoints(&c, list_of(None, None, 100))
                .await,
            "c"
        )
        .items
        .is_empty()
    );
    assert_eq!(
        ok(
            checkpoints(&store)
                .list_checkpoints(&a, list_of(None, None, 100))
                .await,
            "a"
        )
        .items
        .len(),
        1
    );
    assert_eq!(
        ok(
            checkpoints(&store)
                .delete_checkpoints_for_runs(&c, vec!["run".into()])
                .await,
            "c"
        ),
        0
    );
    assert_eq!(
        ok(
            checkpoints(&store)
                .prune_checkpoints(&c, vec!["shared".into()], PruneStrategy::Delete)
                .await,
            "c"
        ),
        0
    );
    assert!(!ok(
        checkpoints(&store).delete_thread(&c, "shared").await,
        "c"
    ));
    assert!(
        ok(
            checkpoints(&store)
                .copy_thread(&c, "shared", "mine", "u")
                .await,
            "c"
        )
        .is_none()
    );
    assert!(ok(
        checkpoints(&store).delete_thread(&a, "shared").await,
        "a deletes its own"
    ));
    assert!(
        some(
            checkpoints(&store)
                .get_checkpoint(&b, "shared", "", None)
                .await,
            "b's stays"
        )
        .blobs
        .len()
            == 1
    );
    assert!(ok(store.get_session(&b, pb.session_id).await, "b's session").is_some());
}
