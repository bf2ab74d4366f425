use std::collections::{HashMap, HashSet};

use serde_json::json;
use stepwise_core::{ExecutionStatus, Id, Role, SessionDocument, SessionStatus};
use stepwise_store::{SessionFilter, Store, StoreError, Tenant, Transition, export_session};

use crate::Harness;
use crate::assert_err;
use crate::cases::sessions::list_all;
use crate::support::*;
use stepwise_store::prelude::*;

/// Export from one tenant, import into another: a new session with new ids throughout
/// and the same content; a bad document is refused and writes nothing.
pub async fn import_document<H: Harness>(harness: &H) {
    let (store, _clock) = manual_store(harness).await;
    let acme = tenant("acme");
    let globex = tenant("globex");
    let original = ok(
        store
            .create_session(
                &acme,
                stepwise_store::NewSession {
                    title: Some("Portable".into()),
                    related_type: Some("ticket".into()),
                    related_id: Some("T-5".into()),
                    metadata: json!({"kept": true}),
                    ..new_session("user-1", Some("portable"))
                },
            )
            .await,
        "create",
    );
    append_message(&store, &acme, original.id, Role::User, "Delegate: count").await;
    let main = create_execution(&store, &acme, Some(original.id), ExecutionStatus::Running).await;
    let mut sub = new_execution(Some(original.id), ExecutionStatus::Running);
    sub.parent_execution_id = Some(main.id);
    let subagent = ok(store.create_execution(&acme, sub).await, "subagent");
    for n in 1..=4 {
        add_step(&store, &acme, main.id, n).await;
    }
    ok(
        append_step(
            &store,
            &acme,
            stepwise_store::NewStep {
                execution_id: subagent.id,
                step_number: 1,
                kind: stepwise_core::StepKind::Action,
                body: large_step_body(1),
            },
        )
        .await,
        "large step",
    );
    let root = add_snapshot(&store, &acme, main.id, 2, None).await;
    let child = add_snapshot(&store, &acme, subagent.id, 1, Some(root.id)).await;
    ok(
        store
            .transition_execution(
                &acme,
                subagent.id,
                Transition::Complete { output: json!("7") },
            )
            .await,
        "complete",
    );
    let last = add_snapshot(&store, &acme, main.id, 4, Some(root.id)).await;
    ok(
        store
            .transition_execution(
                &acme,
                main.id,
                Transition::Complete {
                    output: json!("done"),
                },
            )
            .await,
        "complete",
    );
    append_message(&store, &acme, original.id, Role::Assistant, "7").await;
    let _ = (child, last);

    let doc = some(
        export_session(&store, &acme, original.id).await,
        "export_session",
    );
    assert_eq!(doc.format_version, stepwise_core::document::FORMAT_VERSION);
    assert_eq!(doc.messages.len(), 2);
    assert_eq!(doc.executions.len(), 2);
    assert_eq!(doc.steps.len(), 5);
    assert_eq!(doc.snapshots.len(), 3);
    assert!(
        doc.snapshots.iter().all(|s| !s.state.is_null()),
        "an export carries snapshot states"
    );

    // The document survives a trip through JSON, as it does through a file.
    let text = ok(serde_json::to_string(&doc), "serialize document");
    let doc: SessionDocument = ok(serde_json::from_str(&text), "parse document");

    let imported = ok(
        store.import_document(&globex, "user-9", doc.clone()).await,
        "import_document",
    );
    assert_ne!(imported.id, original.id, "an import gets a new session id");
    assert_eq!(
        imported.tenant_id, "globex",
        "an import belongs to the importing tenant"
    );
    assert_eq!(imported.user_id, "user-9");
    assert_eq!(imported.name.as_deref(), Some("portable"));
    assert_eq!(imported.title.as_deref(), Some("Portable"));
    assert_eq!(imported.related_type.as_deref(), Some("ticket"));
    assert_eq!(imported.related_id.as_deref(), Some("T-5"));
    assert_eq!(imported.metadata, json!({"kept": true}));
    assert_eq!(imported.message_count, 2);
    assert_eq!(
        some(
            store.get_session(&globex, imported.id).await,
            "get imported"
        ),
        imported
    );
    assert_eq!(
        ok(
            store.get_session(&acme, imported.id).await,
            "acme cannot see it"
        ),
        None
    );

    let copy = some(
        export_session(&store, &globex, imported.id).await,
        "export the import",
    );
    assert_same_content(&doc, &copy, imported.id);

    // The original is untouched, and tenant acme got no new session.
    let acme_sessions = list_all(&store, &acme, every_status()).await;
    assert_eq!(acme_sessions.len(), 1);
    assert_eq!(
        some(
            export_session(&store, &acme, original.id).await,
            "re-export"
        ),
        doc
    );

    // Importing the same document again into the same tenant never reuses ids.
    let mut renamed = doc.clone();
    renamed.session.name = Some("portable-2".into());
    let second = ok(
        store.import_document(&globex, "user-9", renamed).await,
        "second import",
    );
    let second_copy = some(
        export_session(&store, &globex, second.id).await,
        "export second",
    );
    assert_same_content(&doc, &second_copy, second.id);
    let first_ids = all_ids(&copy);
    assert!(
        all_ids(&second_copy).is_disjoint(&first_ids),
        "two imports share no ids"
    );

    // Refused documents write nothing.
    let before = count_everything(&store, &globex).await;
    let mut bad_name = doc.clone();
    bad_name.session.name = Some("../../etc/passwd".into());
    assert_err!(
        store.import_document(&globex, "user-9", bad_name).await,
        StoreError::Invalid { .. },
        "a document with an invalid session name"
    );
    let mut future = doc.clone();
    future.format_version = stepwise_core::document::FORMAT_VERSION + 1;
    let result = store.import_document(&globex, "user-9", future).await;
    assert!(
        result.is_err(),
        "a document of a newer format version is refused, got {result:?}"
    );
    let mut dangling = doc.clone();
    dangling.session.name = Some("dangling".into());
    if let Some(step) = dangling.steps.last_mut() {
        step.execution_id = stepwise_core::new_id();
    }
    let result = store.import_document(&globex, "user-9", dangling).await;
    assert!(
        result.is_err(),
        "a step of an execution not in the document is refused, got {result:?}"
    );
    assert_eq!(
        count_everything(&store, &globex).await,
        before,
        "refused imports wrote nothing"
    );
    assert_eq!(
        ok(
            store.find_session_by_name(&globex, "dangling").await,
            "dangling"
        ),
        None
    );
    assert_eq!(
        ok(store.queue_depth().await, "queue_depth"),
        0,
        "an import queues nothing"
    );

    // Exported, deleted, imported again: the deleted original gives its name up.
    assert!(ok(
        store.delete_session(&acme, original.id).await,
        "delete the original"
    ));
    let back = ok(
        store.import_document(&acme, "user-1", doc).await,
        "an import takes a deleted session's name",
    );
    assert_eq!(back.name.as_deref(), Some("portable"));
    assert_eq!(
        some(store.find_session_by_name(&acme, "portable").await, "find").id,
        back.id
    );
}

fn every_status() -> SessionFilter {
    SessionFilter {
        statuses: Some(SessionStatus::ALL.to_vec()),
        ..SessionFilter::default()
    }
}

async fn count_everything<S: Store>(
    store: &S,
    tenant: &Tenant,
) -> (usize, usize, usize, usize, usize) {
    let sessions = list_all(store, tenant, every_status()).await;
    let (mut messages, mut executions, mut steps, mut snapshots) = (0, 0, 0, 0);
    for session in &sessions {
        let doc = some(export_session(store, tenant, session.id).await, "export");
        messages += doc.messages.len();
        executions += doc.executions.len();
        steps += doc.steps.len();
        snapshots += doc.snapshots.len();
    }
    (sessions.len(), messages, executions, steps, snapshots)
}

fn all_ids(doc: &SessionDocument) -> HashSet<Id> {
    let mut ids = HashSet::from([doc.session.id]);
    ids.extend(doc.messages.iter().map(|m| m.id));
    ids.extend(doc.executions.iter().map(|e| e.id));
    ids.extend(doc.steps.iter().map(|s| s.id));
    ids.extend(doc.snapshots.iter().map(|s| s.id));
    ids
}

/// `copy` holds what `doc` holds, under fresh ids with every reference rewritten.
fn assert_same_content(doc: &SessionDocument, copy: &SessionDocument, new_session: Id) {
    assert_eq!(copy.session.id, new_session);
    assert!(all_ids(copy).is_disjoint(&all_ids(doc)), "every id is new");

    assert_eq!(copy.messages.len(), doc.messages.len());
    for (a, b) in doc.messages.iter().zip(&copy.messages) {
        assert_eq!(
            (a.role, &a.content, &a.metadata),
            (b.role, &b.content, &b.metadata),
            "messages in order"
        );
        assert_eq!(b.session_id, new_session);
    }

    assert_eq!(copy.executions.len(), doc.executions.len());
    let mut executions: HashMap<Id, Id> = HashMap::new();
    for (a, b) in doc.executions.iter().zip(&copy.executions) {
        executions.insert(a.id, b.id);
        assert_eq!(b.session_id, Some(new_session));
        assert_eq!(
            (
                a.status,
                &a.agent_type,
                &a.input,
                &a.output,
                a.step_count,
                a.token_usage
            ),
            (
                b.status,
                &b.agent_type,
                &b.input,
                &b.output,
                b.step_count,
                b.token_usage
            ),
            "executions carry over"
        );
    }
    for (a, b) in doc.executions.iter().zip(&copy.executions) {
        assert_eq!(
            b.parent_execution_id,
            a.parent_execution_id.map(|p| executions[&p]),
            "parent executions rewritten"
        );
    }

    assert_eq!(copy.steps.len(), doc.steps.len());
    for (a, b) in doc.steps.iter().zip(&copy.steps) {
        assert_eq!((a.step_number, a.kind), (b.step_number, b.kind));
        assert_eq!(a.body(), b.body(), "step bodies are identical");
        assert_eq!(
            b.execution_id, executions[&a.execution_id],
            "steps point at the new executions"
        );
        assert_eq!(b.session_id, Some(new_session));
    }

    assert_eq!(copy.snapshots.len(), doc.snapshots.len());
    let mut snapshots: HashMap<Id, Id> = HashMap::new();
    for (a, b) in doc.snapshots.iter().zip(&copy.snapshots) {
        snapshots.insert(a.id, b.id);
    }
    for (a, b) in doc.snapshots.iter().zip(&copy.snapshots) {
        assert_eq!(a.state, b.state, "snapshot states are identical");
        assert_eq!(
            (a.step_number, a.is_final, &a.agent_id),
            (b.step_number, b.is_final, &b.agent_id)
        );
        assert_eq!(b.execution_id, executions[&a.execution_id]);
        assert_eq!(
            b.parent_snapshot_id,
            a.parent_snapshot_id.map(|p| snapshots[&p]),
            "lineage rewritten"
        );
    }
    for (a, b) in doc.executions.iter().zip(&copy.executions) {
        assert_eq!(
            b.last_snapshot_id,
            a.last_snapshot_id.map(|s| snapshots[&s]),
            "last_snapshot_id rewritten"
        );
    }
    assert_eq!(
        copy.session.last_snapshot_id,
        doc.session.last_snapshot_id.map(|s| snapshots[&s])
    );
    assert_eq!(
        copy.session.last_execution_id,
        doc.session.last_execution_id.map(|e| executions[&e])
    );
}
