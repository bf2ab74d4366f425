//! What a person sees in the folder, and what the folder survives: seed 004's layout
//! (index.json + one readable `<name>.json` per session), renames and deletions moving
//! files, a damaged file skipped while the others load, names that could escape the
//! folder refused, one process at a time.

#![allow(clippy::unwrap_used)]

use std::path::Path;

use serde_json::{Value, json};
use stepwise_core::document::{DocumentLimits, parse_document};
use stepwise_core::{ExecutionStatus, Role, SessionStatus, StepBody, StepKind, Timestamp};
use stepwise_store::prelude::*;
use stepwise_store::{
    NewExecution, NewMessage, NewSession, NewStep, RetentionPolicy, SessionPatch, Store,
    StoreError, Tenant, TenantScope, export_session,
};
use stepwise_store_files::{FileStore, INDEX_FILE, IndexFile, METADATA_FILE};

fn local() -> Tenant {
    Tenant::new("local").unwrap_or_else(|e| panic!("{e}"))
}

fn named(name: &str) -> NewSession {
    NewSession {
        user_id: "me".into(),
        name: Some(name.into()),
        title: Some(format!("About {name}")),
        metadata: json!({}),
        ..NewSession::default()
    }
}

fn read_index(dir: &Path) -> IndexFile {
    let bytes = std::fs::read(dir.join(INDEX_FILE)).unwrap_or_else(|e| panic!("index: {e}"));
    serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("index: {e}"))
}

fn file_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".json"))
        .collect();
    names.sort();
    names
}

async fn open(dir: &Path) -> FileStore {
    let dir = dir.to_path_buf();
    tokio::task::spawn_blocking(move || FileStore::open(&dir))
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|e| panic!("open: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_folder_holds_an_index_and_one_readable_document_per_session() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let store = open(dir.path()).await;
    let t = local();
    let alpha = store
        .create_session(&t, named("alpha"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    for (role, text) in [
        (Role::Info, "Execution queued"),
        (Role::User, &"Hello, I need help with ".repeat(20)[..]),
        (Role::Assistant, "Sure"),
    ] {
        store
            .append_message(&t, NewMessage::new(alpha.id, role, text))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
    let execution = store
        .create_execution(
            &t,
            NewExecution {
                session_id: Some(alpha.id),
                parent_execution_id: None,
                user_id: "me".into(),
                agent_type: "demo".into(),
                agent_config: json!(null),
                input: json!("2+3"),
                metadata: json!({}),
                status: ExecutionStatus::Running,
                lease: None,
            },
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let step = NewStep {
        execution_id: execution.id,
        step_number: 1,
        kind: StepKind::Action,
        body: StepBody {
            model_output: Some("add them".into()),
            ..StepBody::default()
        },
    };
    store
        .append_step(&t, step)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let unnamed = store
        .create_session(
            &t,
            NewSession {
                user_id: "me".into(),
                ..NewSession::default()
            },
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    store.flush().await.unwrap_or_else(|e| panic!("{e}"));

    assert_eq!(
        file_names(dir.path()),
        {
            let mut expected = vec![
                INDEX_FILE.to_string(),
                "alpha.json".to_string(),
                format!("{}.json", unnamed.id),
            ];
            expected.sort();
            expected
        },
        "index.json, one file per session (named by name, or by id without one)"
    );
    let index = read_index(dir.path());
    assert_eq!(index.tenant_id, "local");
    assert_eq!(index.sessions.len(), 2);
    let entry = index
        .sessions
        .iter()
        .find(|e| e.id == alpha.id)
        .unwrap_or_else(|| panic!("alpha is indexed"));
    let now = store
        .get_session(&t, alpha.id)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let now = now.unwrap_or_else(|| panic!("alpha exists"));
    assert_eq!(entry.name.as_deref(), Some("alpha"));
    assert_eq!(entry.file, "alpha.json");
    assert_eq!(entry.description.as_deref(), Some("About alpha"));
    assert_eq!(entry.message_count, 3);
    assert_eq!(entry.created_at, now.created_at);
    assert_eq!(entry.updated_at, now.updated_at);
    let first = entry.first_message.clone().unwrap_or_default();
    assert!(
        first.starts_with("Hello, I need help"),
        "the first user message: {first}"
    );
    assert_eq!(first.chars().count(), 200, "cut to 200 characters");

    // The session file is a session document: pretty, and importable as it is.
    let text = std::fs::read_to_string(dir.path().join("alpha.json")).unwrap_or_default();
    assert!(
        text.contains("\n  \"session\": {"),
        "human-readable (indented)"
    );
    let doc = parse_document(text.as_bytes(), &DocumentLimits::default())
        .unwrap_or_else(|e| panic!("alpha.json is a session document: {e}"));
    let exported = export_session(&store, &t, alpha.id)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|| panic!("exported"));
    assert_eq!(doc, exported, "the file is what an export gives");
    let raw: Value = serde_json::from_str(&text).unwrap_or_default();
    assert_eq!(
        raw["events"],
        json!([]),
        "the event log lives in the session file"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renames_and_cleanup_move_and_remove_files() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let store = open(dir.path()).await;
    let t = local();
    let first = store
        .create_session(&t, named("first"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let unnamed = store
        .create_session(
            &t,
            NewSession {
                user_id: "me".into(),
                ..NewSession::default()
            },
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let rename = |name: &str| SessionPatch {
        name: Some(name.into()),
        ..SessionPatch::default()
    };
    store
        .update_session(&t, first.id, rename("second"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    store
        .update_session(&t, unnamed.id, rename("named-now"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    store.flush().await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        file_names(dir.path()),
        vec![INDEX_FILE, "named-now.json", "second.json"],
        "a rename moves the file"
    );
    // The freed name can be taken again at once.
    store
        .create_session(&t, named("first"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));

    let done = SessionPatch {
        status: Some(SessionStatus::Completed),
        ..SessionPatch::default()
    };
    store
        .update_session(&t, first.id, done)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let later = Timestamp::now().plus_secs(200 * 86_400);
    let report = store
        .cleanup_old_sessions(later, RetentionPolicy::default(), false, TenantScope::All)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(report.sessions, 1);
    assert_eq!(
        file_names(dir.path()),
        vec!["first.json", INDEX_FILE, "named-now.json"],
        "a deleted session's file is gone"
    );
    assert_eq!(read_index(dir.path()).sessions.len(), 2);
    drop(store);

    // Everything reads back the same after a reopen.
    let store = open(dir.path()).await;
    let found = store
        .find_session_by_name(&t, "named-now")
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|| panic!("named-now is back"));
    assert_eq!(found.id, unnamed.id);
    assert_eq!(store.open_report().sessions, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_session_file_is_reported_and_skipped_while_the_others_load() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let t = local();
    {
        let store = open(dir.path()).await;
        for name in ["good", "broken", "other"] {
            let s = store
                .create_session(&t, named(name))
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            store
                .append_message(
                    &t,
                    NewMessage::new(s.id, Role::User, format!("hi from {name}")),
                )
                .await
                .unwrap_or_else(|e| panic!("{e}"));
        }
        store.close().await.unwrap_or_else(|e| panic!("{e}"));
    }
    let broken = dir.path().join("broken.json");
    let mut bytes = std::fs::read(&broken).unwrap_or_default();
    bytes.truncate(bytes.len() / 2);
    std::fs::write(&broken, &bytes).unwrap_or_else(|e| panic!("{e}"));
    // A stale index (as a crash between a session file and the index could leave).
    std::fs::write(
        dir.path().join(INDEX_FILE),
        b"{\"format_version\": 1, \"tenant_id\": \"local\", \"sessions\": []}",
    )
    .unwrap_or_else(|e| panic!("{e}"));

    let store = open(dir.path()).await;
    let report = store.open_report();
    assert_eq!(report.sessions, 2, "the other sessions load");
    assert_eq!(report.skipped.len(), 1);
    assert_eq!(report.skipped[0].path, broken);
    assert!(!report.skipped[0].reason.is_empty());
    let stats = store.stats().await.unwrap_or_else(|e| panic!("{e}"));
    assert!(stats.decode_errors >= 1, "the skipped file is counted");
    for name in ["good", "other"] {
        assert!(
            store
                .find_session_by_name(&t, name)
                .await
                .unwrap_or_else(|e| panic!("{e}"))
                .is_some(),
            "{name} loaded"
        );
    }
    // The damaged file is never overwritten: its name stays taken until someone fixes it.
    let err = store.create_session(&t, named("broken")).await.unwrap_err();
    assert!(matches!(err, StoreError::Conflict(_)), "{err:?}");
    assert_eq!(std::fs::read(&broken).unwrap_or_default(), bytes);
    // The index was rebuilt from the files at open.
    let index = read_index(dir.path());
    let mut names: Vec<_> = index
        .sessions
        .iter()
        .filter_map(|e| e.name.clone())
        .collect();
    names.sort();
    assert_eq!(names, vec!["good", "other"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_that_could_leave_the_folder_are_refused() {
    let root = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let dir = root.path().join("sessions");
    let store = open(&dir).await;
    let t = local();
    let ok = store
        .create_session(&t, named("fine"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let too_long = "x".repeat(65);
    for bad in [
        "../x",
        "a/b",
        "index",
        "CON",
        "..",
        too_long.as_str(),
        "",
        "metadata",
        "a\\b",
        "/abs",
    ] {
        let err = store.create_session(&t, named(bad)).await.unwrap_err();
        assert!(
            matches!(err, StoreError::Invalid { .. }),
            "create {bad:?}: {err:?}"
        );
        let patch = SessionPatch {
            name: Some(bad.into()),
            ..SessionPatch::default()
        };
        let err = store.update_session(&t, ok.id, patch).await.unwrap_err();
        assert!(
            matches!(err, StoreError::Invalid { .. }),
            "rename to {bad:?}: {err:?}"
        );
    }
    let mut doc = export_session(&store, &t, ok.id)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|| panic!("exported"));
    doc.session.name = Some("../../escape".into());
    assert!(store.import_document(&t, "me", doc).await.is_err());
    // A tenant id that is not a safe folder name gets a hashed folder inside the root.
    let odd = Tenant::new("../../etc/passwd").unwrap_or_else(|e| panic!("{e}"));
    store
        .create_session(&odd, named("inside"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    store.flush().await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(file_names(&dir), vec!["fine.json", INDEX_FILE]);
    let outside: Vec<_> = std::fs::read_dir(root.path())
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        outside,
        vec!["sessions"],
        "nothing was written outside the folder"
    );
    let tenants: Vec<_> = std::fs::read_dir(dir.join("tenants"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(tenants.len(), 1);
    assert!(tenants[0].starts_with('~'), "{tenants:?}");
    drop(store);

    // A planted file whose session name breaks the rules is skipped, never followed.
    let text = std::fs::read_to_string(dir.join("fine.json")).unwrap_or_default();
    let mut planted: Value = serde_json::from_str(&text).unwrap_or_default();
    planted["session"]["name"] = json!("../planted");
    planted["session"]["id"] = json!(stepwise_core::new_id());
    std::fs::write(dir.join("planted.json"), planted.to_string()).unwrap_or_else(|e| panic!("{e}"));
    let store = open(&dir).await;
    assert_eq!(store.open_report().skipped.len(), 1);
    assert!(
        store
            .find_session_by_name(&odd, "inside")
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .is_some()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_process_at_a_time() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let store = open(dir.path()).await;
    let second = FileStore::open(dir.path());
    assert!(
        matches!(&second, Err(StoreError::Unavailable(m)) if m.contains("another Stepwise process")),
        "a second open is refused while the first holds the folder"
    );
    store.close().await.unwrap_or_else(|e| panic!("{e}"));
    let again = open(dir.path()).await;
    assert!(
        again
            .dir()
            .ends_with(dir.path().file_name().unwrap_or_default())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn background_executions_and_api_keys_live_in_metadata_json() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let t = local();
    let (exec_id, key_id) = {
        let store = open(dir.path()).await;
        let exec = store
            .create_execution(
                &t,
                NewExecution {
                    session_id: None,
                    parent_execution_id: None,
                    user_id: "me".into(),
                    agent_type: "demo".into(),
                    agent_config: json!(null),
                    input: json!("nightly"),
                    metadata: json!({}),
                    status: ExecutionStatus::Pending,
                    lease: None,
                },
            )
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let key = store
            .create_api_key(
                &t,
                "me",
                stepwise_store::AccessRole::Admin,
                Some("laptop".into()),
                "hash-of-the-secret",
            )
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        store.close().await.unwrap_or_else(|e| panic!("{e}"));
        (exec.id, key.id)
    };
    let text = std::fs::read_to_string(dir.path().join(METADATA_FILE)).unwrap_or_default();
    assert!(text.contains("hash-of-the-secret") && text.contains("nightly"));
    let store = open(dir.path()).await;
    assert!(
        store
            .get_execution(&t, exec_id)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .is_some()
    );
    let found = store
        .find_api_key("hash-of-the-secret")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(found.map(|k| k.id), Some(key_id));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_too_deep_to_read_back_are_refused_and_the_rest_survive_a_reopen() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let t = local();
    let nested = |depth: usize| {
        let mut v = json!("bottom");
        for _ in 1..depth {
            v = json!([v]);
        }
        v
    };
    let id = {
        let store = open(dir.path()).await;
        let mut deep = named("deep");
        deep.metadata = nested(150);
        let err = store.create_session(&t, deep).await.unwrap_err();
        assert!(matches!(err, StoreError::Invalid { .. }), "{err:?}");
        let mut fine = named("fine");
        fine.metadata = nested(100);
        let s = store
            .create_session(&t, fine)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        store.close().await.unwrap_or_else(|e| panic!("{e}"));
        s.id
    };
    let store = open(dir.path()).await;
    assert!(store.open_report().skipped.is_empty());
    let s = store
        .get_session(&t, id)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(s.map(|s| s.metadata), Some(nested(100)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_rename_and_a_file_renamed_by_hand_are_sorted_out_at_open() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let t = local();
    let (old_id, kept_id) = {
        let store = open(dir.path()).await;
        let old = store
            .create_session(&t, named("old"))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let kept = store
            .create_session(&t, named("kept"))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        store.close().await.unwrap_or_else(|e| panic!("{e}"));
        (old.id, kept.id)
    };
    // A rename of `old` to `new` cut short after the new file was written: both exist.
    let text = std::fs::read_to_string(dir.path().join("old.json")).unwrap_or_default();
    let mut renamed: Value = serde_json::from_str(&text).unwrap_or_default();
    renamed["session"]["name"] = json!("new");
    renamed["session"]["updated_at"] = json!("2099-01-01T00:00:00.000000Z");
    std::fs::write(dir.path().join("new.json"), renamed.to_string())
        .unwrap_or_else(|e| panic!("{e}"));
    // Someone renamed kept.json by hand; the document inside still says `kept`.
    std::fs::rename(
        dir.path().join("kept.json"),
        dir.path().join("moved-by-hand.json"),
    )
    .unwrap_or_else(|e| panic!("{e}"));

    let store = open(dir.path()).await;
    assert!(store.open_report().skipped.is_empty());
    assert_eq!(
        store.open_report().removed_leftovers,
        vec![dir.path().join("old.json")]
    );
    let new = store
        .find_session_by_name(&t, "new")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(new.map(|s| s.id), Some(old_id), "the newer copy wins");
    assert_eq!(
        store
            .find_session_by_name(&t, "old")
            .await
            .unwrap_or_else(|e| panic!("{e}")),
        None
    );
    let kept = store
        .find_session_by_name(&t, "kept")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(kept.map(|s| s.id), Some(kept_id));
    assert_eq!(
        file_names(dir.path()),
        vec![INDEX_FILE, "kept.json", "new.json"],
        "every session back in the file named after it"
    );
    let mut listed: Vec<_> = read_index(dir.path())
        .sessions
        .iter()
        .map(|e| e.file.clone())
        .collect();
    listed.sort();
    assert_eq!(listed, vec!["kept.json", "new.json"]);
}

/// LangGraph checkpoints need the SQLite or PostgreSQL backend: this one has no checkpoint
/// store (the HTTP layer answers 422 `invalid_state` to every checkpoint call).
#[tokio::test]
async fn files_keep_no_checkpoints() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path()).await;
    assert!(store.checkpoints().is_none());
}

/// LangGraph's store needs the SQLite or PostgreSQL backend: every call of this one answers
/// `InvalidState` (the HTTP layer answers 422).
#[tokio::test]
async fn files_keep_no_langgraph_store() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path()).await;
    let put = stepwise_store::StoreItemPut {
        namespace: vec!["mem".into()],
        key: "k".into(),
        value: json!({}),
        ttl_minutes: None,
    };
    let refused = |e: StoreError| matches!(e, StoreError::InvalidState(_));
    assert!(refused(
        store.put_store_item(&local(), put).await.unwrap_err()
    ));
    let namespace = vec!["mem".to_string()];
    assert!(refused(
        store
            .get_store_item(&local(), &namespace, "k", true)
            .await
            .unwrap_err()
    ));
    let search = stepwise_store::StoreItemSearch {
        limit: 10,
        ..Default::default()
    };
    assert!(refused(
        store
            .search_store_items(&local(), search)
            .await
            .unwrap_err()
    ));
}

/// A document carrying a LangGraph thread's checkpoints is refused with `InvalidState` (the
/// HTTP layer answers 422) and writes nothing; this backend's own exports carry no thread.
#[tokio::test]
async fn files_refuse_a_document_with_checkpoints() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path()).await;
    let session = store
        .create_session(&local(), named("plain"))
        .await
        .unwrap();
    let mut doc = export_session(&store, &local(), session.id)
        .await
        .unwrap()
        .unwrap();
    assert!(doc.thread.is_none());
    doc.session.name = None;
    doc.thread = Some(stepwise_core::document::DocumentThread {
        thread_id: "t".into(),
        checkpoints: Vec::new(),
        checkpoint_blobs: Vec::new(),
        checkpoint_writes: Vec::new(),
    });
    let refused = store.import_document(&local(), "me", doc).await;
    assert!(
        matches!(&refused, Err(StoreError::InvalidState(m)) if m.contains("SQLite or PostgreSQL")),
        "{refused:?}"
    );
    let all = store
        .list_sessions(&local(), Default::default(), Default::default())
        .await
        .unwrap();
    assert_eq!(all.items.len(), 1, "nothing was imported");
}
