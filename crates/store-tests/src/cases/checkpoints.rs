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

mod documents;
mod events;
mod refs;
mod threads;

pub use documents::checkpoint_export_import;
pub use events::checkpoint_events;
pub use refs::checkpoint_write_refs;
pub use threads::{checkpoint_isolation, checkpoint_threads};

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
        announce: true,
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
