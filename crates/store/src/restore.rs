//! Operations every backend gets from the trait: restoring a session's agent memory and
//! exporting a session document.

use stepwise_core::document::FORMAT_VERSION;
use stepwise_core::summary::build_summary;

use stepwise_core::{Id, Memory, Message, Restored, Session, SessionDocument};

use crate::CheckpointStore;
use crate::cached_read::cached_rows;
use crate::{MessageOrder, MessageQuery, Result, StepOrder, Store, StoreError, Tenant};

/// A session's agent memory. `full` when every stored step decoded; when some could not,
/// the valid steps still come back with a context summary built from the session's
/// messages (`summary`), or `empty` when nothing at all could be recovered.
/// `Ok(None)` when the session does not exist for this tenant.
///
/// With the store's [`SessionCache`](crate::SessionCache) the steps already held are not
/// read again: see [`crate::cache`] for why the answer is still exactly what the database
/// holds.
pub async fn restore_memory<S: Store>(
    store: &S,
    tenant: &Tenant,
    session_id: Id,
) -> Result<Option<Memory>> {
    Ok(session_with_memory(store, tenant, session_id)
        .await?
        .map(|(_, memory)| memory))
}

/// The session and its agent memory ([`restore_memory`]) for a caller that needs both, as
/// a worker's claim does: the session is read once. `Ok(None)` when the session does not
/// exist for this tenant.
pub async fn session_with_memory<S: Store>(
    store: &S,
    tenant: &Tenant,
    session_id: Id,
) -> Result<Option<(Session, Memory)>> {
    let Some(session) = store.get_session(tenant, session_id).await? else {
        if let Some(cache) = store.session_cache() {
            cache.remove(tenant, session_id);
        }
        return Ok(None);
    };
    let memory = memory_of(store, tenant, &session).await?;
    Ok(Some((session, memory)))
}

/// The agent memory of a session just read.
async fn memory_of<S: Store>(store: &S, tenant: &Tenant, session: &Session) -> Result<Memory> {
    let session_id = session.id;
    if let Some(cache) = store.session_cache().filter(|c| c.limit_bytes() > 0)
        && let Some(entry) = cached_rows::<S, StepOrder>(store, cache, tenant, session_id).await?
    {
        return Ok(Memory {
            restored: Restored::Full,
            steps: entry.items.clone(),
            summary: None,
        });
    }
    let loaded = store.list_session_steps(tenant, session_id).await?;
    if loaded.skipped == 0 {
        return Ok(Memory {
            restored: Restored::Full,
            steps: loaded.items,
            summary: None,
        });
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
        return Ok(Memory {
            restored: Restored::Empty,
            steps: Vec::new(),
            summary: None,
        });
    }
    let summary = build_summary(&messages, &loaded.items, session.message_count);
    Ok(Memory {
        restored: Restored::Summary,
        steps: loaded.items,
        summary: Some(summary),
    })
}

/// A session's messages as [`MessageStore::list_messages`] answers them (oldest first; after a
/// message, of some roles, up to a limit), through the store's
/// [`SessionCache`](crate::SessionCache) when it keeps one: the messages already held are
/// not read again, and the query is answered in memory. `after` naming a message that is
/// not in this session is `Invalid` on field `after`, as from the backend.
pub async fn list_session_messages<S: Store>(
    store: &S,
    tenant: &Tenant,
    session_id: Id,
    query: MessageQuery,
) -> Result<Vec<Message>> {
    if let Some(cache) = store.session_cache().filter(|c| c.limit_bytes() > 0)
        && let Some(entry) =
            cached_rows::<S, MessageOrder>(store, cache, tenant, session_id).await?
    {
        return select_messages(&entry.items, &query);
    }
    store.list_messages(tenant, session_id, query).await
}

/// `query` over a session's messages held in list order.
fn select_messages(messages: &[Message], query: &MessageQuery) -> Result<Vec<Message>> {
    let start =
        match query.after {
            Some(after) => {
                messages.iter().position(|m| m.id == after).ok_or_else(|| {
                    StoreError::invalid("after", "no such message in this session")
                })? + 1
            }
            None => 0,
        };
    let roles = query.roles.as_deref().filter(|r| !r.is_empty());
    let limit = query.limit.map_or(usize::MAX, |l| l as usize);
    Ok(messages[start..]
        .iter()
        .filter(|m| roles.is_none_or(|roles| roles.contains(&m.role)))
        .take(limit)
        .cloned()
        .collect())
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
    let thread = match store.checkpoints() {
        Some(checkpoints) => checkpoints.export_thread(tenant, session_id).await?,
        None => None,
    };
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
