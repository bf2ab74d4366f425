//! Operations every backend gets from the trait: restoring a session's agent memory and
//! exporting a session document.

use stepwise_core::document::FORMAT_VERSION;
use stepwise_core::summary::build_summary;
use stepwise_core::{Id, Memory, Restored, SessionDocument};

use crate::{MessageQuery, Result, Store, Tenant};

/// A session's agent memory. `full` when every stored step decoded; when some could not,
/// the valid steps still come back with a context summary built from the session's
/// messages (`summary`), or `empty` when nothing at all could be recovered.
/// `Ok(None)` when the session does not exist for this tenant.
pub async fn restore_memory<S: Store>(
    store: &S,
    tenant: &Tenant,
    session_id: Id,
) -> Result<Option<Memory>> {
    let Some(session) = store.get_session(tenant, session_id).await? else {
        return Ok(None);
    };
    let loaded = store.list_session_steps(tenant, session_id).await?;
    if loaded.skipped == 0 {
        return Ok(Some(Memory {
            restored: Restored::Full,
            steps: loaded.items,
            summary: None,
        }));
    }
    tracing::warn!(
        session = %session_id,
        skipped = loaded.skipped,
        "restore skipped undecodable steps; answering with a context summary"
    );
    let messages = store
        .list_messages(tenant, session_id, MessageQuery::default())
        .await?;
    if messages.is_empty() && loaded.items.is_empty() {
        return Ok(Some(Memory {
            restored: Restored::Empty,
            steps: Vec::new(),
            summary: None,
        }));
    }
    let summary = build_summary(&messages, &loaded.items, session.message_count);
    Ok(Some(Memory {
        restored: Restored::Summary,
        steps: loaded.items,
        summary: Some(summary),
    }))
}

/// The whole session as one document (`format_version`, session, messages, executions,
/// steps, snapshots with their state, and for a LangGraph thread's session the thread with
/// its checkpoints, blobs and writes). `Ok(None)` when the session does not exist.
pub async fn export_session<S: Store>(
    store: &S,
    tenant: &Tenant,
    session_id: Id,
) -> Result<Option<SessionDocument>> {
    let Some(session) = store.get_session(tenant, session_id).await? else {
        return Ok(None);
    };
    let messages = store
        .list_messages(tenant, session_id, MessageQuery::default())
        .await?;
    let executions = store.list_executions(tenant, session_id).await?;
    let mut steps = Vec::new();
    let mut snapshots = Vec::new();
    for execution in &executions {
        steps.extend(store.list_steps(tenant, execution.id).await?.items);
        for listed in store.list_snapshots(tenant, execution.id).await? {
            if let Some(full) = store.get_snapshot(tenant, listed.id).await? {
                snapshots.push(full);
            }
        }
    }
    let thread = store.export_thread(tenant, session_id).await?;
    Ok(Some(SessionDocument {
        format_version: FORMAT_VERSION,
        session,
        messages,
        executions,
        steps,
        snapshots,
        thread,
    }))
}
