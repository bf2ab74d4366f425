//! LangGraph checkpoints: threads, checkpoints, blobs (full and append chains), pending
//! writes, listing, and the thread operations (delete, copy, delete for runs, prune).

use serde_json::{Map, Value, json};
use stepwise_core::{Clock, SessionStatus};
use stepwise_store::{
    BlobBody, CheckpointQuery, CheckpointRecord, NewBlob, NewCheckpoint, NewWrite, PruneStrategy,
    PutWrites, ResolvedBlob, RetentionPolicy, SessionPatch, Store, Tenant, TypedValue,
};

use crate::Harness;
use crate::assert_err;
use crate::cases::sessions::list_all;
use crate::support::*;
use stepwise_store::prelude::*;

fn typed(data: &str) -> TypedValue {
    TypedValue::new("json", data.as_bytes().to_vec())
}

fn full(channel: &str, version: &str, data: &str) -> NewBlob {
    NewBlob {
        channel: channel.into(),
        version: version.into(),
        body: BlobBody::Full(typed(data)),
    }
}

fn append(channel: &str, version: &str, base: Option<&str>, items: &[&str]) -> NewBlob {
    NewBlob {
        channel: channel.into(),
        version: version.into(),
        body: BlobBody::Append {
            base_version: base.map(str::to_string),
            items: items.iter().map(|i| typed(i)).collect(),
        },
    }
}

/// A checkpoint of `thread` with id `id` (ids sort by their text, like LangGraph's).
fn checkpoint(thread: &str, ns: &str, id: &str, parent: Option<&str>) -> NewCheckpoint {
    NewCheckpoint {
        thread_id: thread.into(),
        user_id: "user-1".into(),
        checkpoint_ns: ns.into(),
        checkpoint_id: id.into(),
        parent_checkpoint_id: parent.map(str::to_string),
        checkpoint: typed(&format!("checkpoint {id}")),
        metadata: json!({"source": "loop", "step": 1}),
        channel_versions: Map::new(),
        blobs: Vec::new(),
    }
}

fn versions(pairs: &[(&str, &str)]) -> Map<String, Value> {
    pairs
        .iter()
        .map(|(c, v)| (c.to_string(), json!(v)))
        .collect()
}

async fn put<S: Store>(store: &S, tenant: &Tenant, new: NewCheckpoint) -> bool {
    ok(
        checkpoints(store).put_checkpoint(tenant, new).await,
        "put_checkpoint",
    )
    .created
}

fn list_of(thread: Option<&str>, ns: Option<&str>, limit: u32) -> CheckpointQuery {
    CheckpointQuery {
        thread_id: thread.map(str::to_string),
        checkpoint_ns: ns.map(str::to_string),
        limit,
        ..CheckpointQuery::default()
    }
}

fn ids(records: &[CheckpointRecord]) -> Vec<String> {
    records.iter().map(|r| r.checkpoint_id.clone()).collect()
}

/// The items of a resolved list blob as text.
fn list_items(blob: &ResolvedBlob) -> (Option<String>, Vec<String>) {
    match blob {
        ResolvedBlob::List { base, items, .. } => (
            base.as_ref()
                .map(|b| String::from_utf8_lossy(&b.data).into_owned()),
            items
                .iter()
                .map(|i| String::from_utf8_lossy(&i.data).into_owned())
                .collect(),
        ),
        ResolvedBlob::Full { .. } | ResolvedBlob::Since { .. } => {
            panic!("expected a list value, got {blob:?}")
        }
    }
}

pub async fn checkpoints_put_get<H: Harness>(harness: &H) {
    let (store, _) = manual_store(harness).await;
    let t = tenant("t1");
    assert!(
        ok(
            checkpoints(&store).get_checkpoint(&t, "th", "", None).await,
            "get of nothing"
        )
        .is_none(),
        "no thread: no checkpoint"
    );
    assert!(ok(checkpoints(&store).get_thread(&t, "th").await, "get_thread").is_none());

    // Step 1: a full blob of `messages`; step 2 appends one message; step 3 two more.
    let mut c1 = checkpoint("th", "", "001", None);
    c1.channel_versions = versions(&[("messages", "1"), ("count", "1")]);
    c1.blobs = vec![full("messages", "1", "[m0]"), full("count", "1", "1")];
    let put1 = ok(
        checkpoints(&store).put_checkpoint(&t, c1.clone()).await,
        "put 1",
    );
    assert!(
        put1.created && put1.thread_created,
        "the first put creates the thread"
    );
    let again = ok(
        checkpoints(&store).put_checkpoint(&t, c1).await,
        "put 1 again",
    );
    assert!(
        !again.created && !again.thread_created,
        "the same put again writes nothing"
    );
    assert_eq!(again.session_id, put1.session_id);

    let mut c2 = checkpoint("th", "", "002", Some("001"));
    c2.channel_versions = versions(&[("messages", "2"), ("count", "1")]);
    c2.blobs = vec![append("messages", "2", Some("1"), &["m1"])];
    assert!(put(&store, &t, c2).await);
    let mut c3 = checkpoint("th", "", "003", Some("002"));
    c3.channel_versions = versions(&[("messages", "3"), ("count", "3")]);
    c3.blobs = vec![
        append("messages", "3", Some("2"), &["m2", "m3"]),
        full("count", "3", "3"),
        // A value that starts from an empty list.
        append("log", "1", None, &["a"]),
    ];
    assert!(put(&store, &t, c3).await);

    let latest = some(
        checkpoints(&store).get_checkpoint(&t, "th", "", None).await,
        "latest",
    );
    assert_eq!(latest.checkpoint_id, "003");
    assert_eq!(latest.parent_checkpoint_id.as_deref(), Some("002"));
    assert_eq!(latest.thread_id, "th");
    assert_eq!(latest.session_id, put1.session_id);
    assert_eq!(latest.checkpoint, typed("checkpoint 003"));
    assert_eq!(latest.metadata, json!({"source": "loop", "step": 1}));
    let channels: Vec<&str> = latest.blobs.iter().map(ResolvedBlob::channel).collect();
    assert_eq!(
        channels,
        vec!["count", "messages"],
        "one value per channel version"
    );
    assert_eq!(
        list_items(&latest.blobs[1]),
        (
            Some("[m0]".to_string()),
            vec!["m1".into(), "m2".into(), "m3".into()]
        ),
        "the append chain resolves down to the full blob"
    );
    assert_eq!(
        latest.blobs[0],
        ResolvedBlob::Full {
            channel: "count".into(),
            version: "3".into(),
            value: typed("3")
        }
    );

    let second = some(
        checkpoints(&store)
            .get_checkpoint(&t, "th", "", Some("002"))
            .await,
        "by id",
    );
    assert_eq!(
        list_items(&second.blobs[1]),
        (Some("[m0]".to_string()), vec!["m1".into()])
    );
    let first = some(
        checkpoints(&store)
            .get_checkpoint(&t, "th", "", Some("001"))
            .await,
        "by id",
    );
    assert!(matches!(&first.blobs[1], ResolvedBlob::Full { value, .. } if *value == typed("[m0]")));
    assert!(
        ok(
            checkpoints(&store)
                .get_checkpoint(&t, "th", "", Some("999"))
                .await,
            "unknown id"
        )
        .is_none()
    );
    assert!(
        ok(
            checkpoints(&store)
                .get_checkpoint(&t, "th", "other", None)
                .await,
            "other ns"
        )
        .is_none()
    );

    // A chain whose link sorts after the wanted version still resolves.
    let mut c4 = checkpoint("th", "", "004", Some("003"));
    c4.channel_versions = versions(&[("odd", "a")]);
    c4.blobs = vec![
        full("odd", "z", "base"),
        append("odd", "a", Some("z"), &["x"]),
    ];
    assert!(put(&store, &t, c4).await);
    let odd = some(
        checkpoints(&store)
            .get_checkpoint(&t, "th", "", Some("004"))
            .await,
        "004",
    );
    assert_eq!(
        list_items(&odd.blobs[0]),
        (Some("base".to_string()), vec!["x".into()])
    );
    // A blob written again is kept as first written.
    let mut c5 = checkpoint("th", "", "005", Some("004"));
    c5.channel_versions = versions(&[("count", "3")]);
    c5.blobs = vec![full("count", "3", "changed")];
    assert!(put(&store, &t, c5).await);
    let c5 = some(
        checkpoints(&store).get_checkpoint(&t, "th", "", None).await,
        "005",
    );
    assert!(matches!(&c5.blobs[0], ResolvedBlob::Full { value, .. } if *value == typed("3")));

    // A reader holding an earlier version of a list gets only what came after it.
    let have = |c: &str, v: &str| [(c.to_string(), v.to_string())].into_iter().collect();
    let since = some(
        checkpoints(&store)
            .get_checkpoint_since(&t, "th", "", Some("003"), &have("messages", "1"))
            .await,
        "since 1",
    );
    let messages = since.blobs.iter().find(|b| b.channel() == "messages");
    let Some(ResolvedBlob::Since {
        since: from,
        items,
        version,
        ..
    }) = messages
    else {
        panic!("expected the items since version 1, got {messages:?}");
    };
    assert_eq!((from.as_str(), version.as_str()), ("1", "3"));
    assert_eq!(items, &vec![typed("m1"), typed("m2"), typed("m3")]);
    let same = some(
        checkpoints(&store)
            .get_checkpoint_since(&t, "th", "", Some("003"), &have("messages", "3"))
            .await,
        "since 3",
    );
    assert!(same.blobs.iter().any(
        |b| matches!(b, ResolvedBlob::Since { channel, items, .. } if channel == "messages" && items.is_empty())
    ));
    for other in ["x", "9"] {
        let full = some(
            checkpoints(&store)
                .get_checkpoint_since(&t, "th", "", Some("003"), &have("messages", other))
                .await,
            "not on the chain",
        );
        assert_eq!(
            full.blobs,
            latest_003_blobs(&store, &t).await,
            "have {other}"
        );
    }

    // An append on a base that is not stored is refused, writing nothing.
    let mut orphan = checkpoint("th", "", "009", Some("005"));
    orphan.channel_versions = versions(&[("messages", "9")]);
    orphan.blobs = vec![append("messages", "9", Some("8"), &["x"])];
    assert_err!(
        checkpoints(&store).put_checkpoint(&t, orphan.clone()).await,
        stepwise_store::StoreError::Conflict(_),
        "an append on a missing base"
    );
    orphan.thread_id = "new-thread".into();
    assert_err!(
        checkpoints(&store).put_checkpoint(&t, orphan).await,
        stepwise_store::StoreError::Conflict(_),
        "an append on a missing base"
    );
    assert!(
        ok(
            checkpoints(&store).get_thread(&t, "new-thread").await,
            "no thread"
        )
        .is_none()
    );
    assert!(
        ok(
            checkpoints(&store)
                .get_checkpoint(&t, "th", "", Some("009"))
                .await,
            "not stored"
        )
        .is_none()
    );

    // The thread is a session named after it, marked with the thread id.
    let info = some(checkpoints(&store).get_thread(&t, "th").await, "get_thread");
    assert_eq!(info.checkpoints, 5);
    let session = some(store.get_session(&t, info.session_id).await, "the session");
    assert_eq!(session.name.as_deref(), Some("th"));
    assert_eq!(session.metadata["langgraph_thread_id"], json!("th"));

    // A thread id that is no valid session name (or a name taken) gets an unnamed session.
    create_session(&store, &t, Some("taken")).await;
    for thread in ["taken", "a thread / with spaces", "ünï"] {
        assert!(put(&store, &t, checkpoint(thread, "", "001", None)).await);
        let info = some(
            checkpoints(&store).get_thread(&t, thread).await,
            "get_thread",
        );
        let session = some(store.get_session(&t, info.session_id).await, "session");
        assert_eq!(session.name, None, "thread {thread:?}");
        assert_eq!(session.metadata["langgraph_thread_id"], json!(thread));
    }

    // Large payloads (compressed by the store) come back byte for byte.
    let big: String = (0..20_000)
        .map(|i| char::from(b'a' + (i % 7) as u8))
        .collect();
    let mut c = checkpoint("big", "", "001", None);
    c.checkpoint = typed(&big);
    c.channel_versions = versions(&[("m", "1")]);
    c.blobs = vec![append("m", "1", None, &[&big, "small"])];
    assert!(put(&store, &t, c).await);
    let got = some(
        checkpoints(&store)
            .get_checkpoint(&t, "big", "", None)
            .await,
        "big",
    );
    assert_eq!(got.checkpoint, typed(&big));
    assert_eq!(list_items(&got.blobs[0]).1, vec![big, "small".to_string()]);
}

async fn latest_003_blobs<S: Store>(store: &S, t: &Tenant) -> Vec<ResolvedBlob> {
    some(
        checkpoints(store)
            .get_checkpoint(t, "th", "", Some("003"))
            .await,
        "003",
    )
    .blobs
}

pub async fn checkpoint_writes<H: Harness>(harness: &H) {
    let (store, _) = manual_store(harness).await;
    let t = tenant("t1");
    assert!(put(&store, &t, checkpoint("th", "", "001", None)).await);
    let writes = |task: &str, path: &str, list: &[(i64, &str, &str)]| PutWrites {
        thread_id: "th".into(),
        user_id: "user-1".into(),
        checkpoint_ns: "".into(),
        checkpoint_id: "001".into(),
        task_id: task.into(),
        task_path: path.into(),
        writes: list
            .iter()
            .map(|(idx, channel, data)| NewWrite {
                idx: *idx,
                channel: channel.to_string(),
                value: typed(data),
            })
            .collect(),
    };
    ok(
        checkpoints(&store)
            .put_checkpoint_writes(
                &t,
                writes("task-b", "~1", &[(0, "a", "b0"), (1, "b", "b1")]),
            )
            .await,
        "writes",
    );
    ok(
        checkpoints(&store)
            .put_checkpoint_writes(
                &t,
                writes("task-a", "~2", &[(0, "a", "a0"), (-1, "__error__", "e1")]),
            )
            .await,
        "writes",
    );
    // idx >= 0 again: ignored; idx < 0 again: replaced.
    ok(
        checkpoints(&store)
            .put_checkpoint_writes(
                &t,
                writes(
                    "task-a",
                    "~2",
                    &[(0, "a", "CHANGED"), (-1, "__error__", "e2")],
                ),
            )
            .await,
        "writes again",
    );
    ok(
        checkpoints(&store)
            .put_checkpoint_writes(&t, writes("task-c", "", &[(0, "c", "c0")]))
            .await,
        "writes without a path",
    );
    let got = some(
        checkpoints(&store).get_checkpoint(&t, "th", "", None).await,
        "get",
    );
    let seen: Vec<(String, i64, String, String, String)> = got
        .pending_writes
        .iter()
        .map(|w| {
            (
                w.task_id.clone(),
                w.idx,
                w.channel.clone(),
                String::from_utf8_lossy(&w.value.data).into_owned(),
                w.task_path.clone(),
            )
        })
        .collect();
    let row = |a: &str, i: i64, c: &str, d: &str, p: &str| {
        (
            a.to_string(),
            i,
            c.to_string(),
            d.to_string(),
            p.to_string(),
        )
    };
    assert_eq!(
        seen,
        vec![
            row("task-c", 0, "c", "c0", ""),
            row("task-b", 0, "a", "b0", "~1"),
            row("task-b", 1, "b", "b1", "~1"),
            row("task-a", -1, "__error__", "e2", "~2"),
            row("task-a", 0, "a", "a0", "~2"),
        ],
        "writes in (task_path, task_id, idx) order, special ones replaced, others kept"
    );
    // Writes belong to their checkpoint: another checkpoint has none.
    assert!(put(&store, &t, checkpoint("th", "", "002", Some("001"))).await);
    let latest = some(
        checkpoints(&store).get_checkpoint(&t, "th", "", None).await,
        "002",
    );
    assert!(latest.pending_writes.is_empty());
    // Writes to a thread that does not exist yet create it.
    let mut w = writes("task", "", &[(0, "x", "1")]);
    w.thread_id = "fresh".into();
    ok(
        checkpoints(&store).put_checkpoint_writes(&t, w).await,
        "writes to a new thread",
    );
    assert_eq!(
        some(checkpoints(&store).get_thread(&t, "fresh").await, "fresh").checkpoints,
        0
    );
}

pub async fn checkpoints_list<H: Harness>(harness: &H) {
    let (store, _) = manual_store(harness).await;
    let t = tenant("t1");
    for i in 1..=12u32 {
        let mut c = checkpoint("th", "", &format!("{i:03}"), None);
        c.metadata = json!({"step": i, "source": if i % 2 == 0 { "loop" } else { "input" }, "tags": {"k": i % 3}});
        c.channel_versions = versions(&[("m", &format!("{i:03}"))]);
        c.blobs = vec![if i == 1 {
            append("m", "001", None, &["1"])
        } else {
            append(
                "m",
                &format!("{i:03}"),
                Some(&format!("{:03}", i - 1)),
                &[&i.to_string()],
            )
        }];
        assert!(put(&store, &t, c).await);
    }
    assert!(put(&store, &t, checkpoint("th", "child:1", "005b", None)).await);
    assert!(put(&store, &t, checkpoint("other", "", "007b", None)).await);

    let all = ok(
        checkpoints(&store)
            .list_checkpoints(&t, list_of(Some("th"), None, 100))
            .await,
        "list",
    );
    let mut expected: Vec<String> = (1..=12).rev().map(|i| format!("{i:03}")).collect();
    expected.insert(7, "005b".into());
    assert_eq!(ids(&all.items), expected, "newest first, every namespace");
    assert_eq!(all.next_cursor, None);
    let root = ok(
        checkpoints(&store)
            .list_checkpoints(&t, list_of(Some("th"), Some(""), 100))
            .await,
        "list",
    );
    assert_eq!(root.items.len(), 12);
    assert_eq!(
        list_items(&root.items[0].blobs[0]).1.len(),
        12,
        "listed checkpoints carry resolved values"
    );
    assert_eq!(
        list_items(&root.items[11].blobs[0]).1,
        vec!["1".to_string()]
    );

    // limit and before
    let mut q = list_of(Some("th"), Some(""), 3);
    q.before = Some("010".into());
    let page = ok(checkpoints(&store).list_checkpoints(&t, q).await, "before");
    assert_eq!(ids(&page.items), vec!["009", "008", "007"]);

    // filter: top-level key equality on JSON values (missing equals null)
    let mut q = list_of(Some("th"), None, 100);
    q.filter = json!({"source": "loop", "tags": {"k": 0}})
        .as_object()
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        ids(&ok(checkpoints(&store).list_checkpoints(&t, q).await, "filter").items),
        vec!["012", "006"]
    );
    let mut q = list_of(Some("th"), None, 100);
    q.filter = json!({"step": 4}).as_object().cloned().unwrap_or_default();
    assert_eq!(
        ids(&ok(checkpoints(&store).list_checkpoints(&t, q).await, "filter").items),
        vec!["004"]
    );
    let mut q = list_of(Some("th"), None, 100);
    q.filter = json!({"step": "4"})
        .as_object()
        .cloned()
        .unwrap_or_default();
    assert!(
        ok(checkpoints(&store).list_checkpoints(&t, q).await, "filter")
            .items
            .is_empty(),
        "4 is not \"4\""
    );
    let mut q = list_of(Some("th"), Some("child:1"), 100);
    q.filter = json!({"missing": null})
        .as_object()
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        ids(&ok(checkpoints(&store).list_checkpoints(&t, q).await, "filter").items),
        vec!["005b"]
    );

    // Cursor pages of every shape cover the list exactly once.
    for (thread, ns) in [
        (Some("th"), None),
        (Some("th"), Some("")),
        (None, None),
        (None, Some("")),
    ] {
        let whole = ok(
            checkpoints(&store)
                .list_checkpoints(&t, list_of(thread, ns, 1000))
                .await,
            "whole",
        );
        let mut q = list_of(thread, ns, 5);
        let mut paged = Vec::new();
        loop {
            let page = ok(
                checkpoints(&store).list_checkpoints(&t, q.clone()).await,
                "page",
            );
            assert!(page.items.len() <= 5);
            paged.extend(ids(&page.items));
            match page.next_cursor {
                Some(cursor) => q.cursor = Some(cursor),
                None => break,
            }
        }
        assert_eq!(paged, ids(&whole.items), "pages of {thread:?} {ns:?}");
    }

    // Across threads: every thread of the tenant, newest first, with its thread id.
    let across = ok(
        checkpoints(&store)
            .list_checkpoints(&t, list_of(None, None, 4))
            .await,
        "across",
    );
    assert_eq!(ids(&across.items), vec!["012", "011", "010", "009"]);
    let across = ok(
        checkpoints(&store)
            .list_checkpoints(&t, list_of(None, Some(""), 1000))
            .await,
        "across",
    );
    assert_eq!(across.items.len(), 13);
    assert!(
        across
            .items
            .iter()
            .any(|r| r.thread_id == "other" && r.checkpoint_id == "007b")
    );
    assert!(
        ok(
            checkpoints(&store)
                .list_checkpoints(&t, list_of(Some("nope"), None, 10))
                .await,
            "unknown"
        )
        .items
        .is_empty()
    );
    let mut bad = list_of(None, None, 10);
    bad.cursor = Some("not a cursor".into());
    assert_err!(
        checkpoints(&store).list_checkpoints(&t, bad).await,
        stepwise_store::StoreError::Invalid { .. },
        "a cursor the server never issued"
    );
}

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
            .cleanup_old_sessions(now, RetentionPolicy::default(), false)
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
