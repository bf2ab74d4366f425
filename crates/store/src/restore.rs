//! Operations every backend gets from the trait: restoring a session's agent memory and
//! exporting a session document.

use std::sync::Arc;
use stepwise_core::document::FORMAT_VERSION;
use stepwise_core::summary::build_summary;

use stepwise_core::{Id, Memory, Restored, SessionDocument, Step};

use crate::{
    CachedSteps, MessageQuery, Result, START_POSITION, SessionCache, StepsAfter, Store, Tenant,
};

/// A session's agent memory. `full` when every stored step decoded; when some could not,
/// the valid steps still come back with a context summary built from the session's
/// messages (`summary`), or `empty` when nothing at all could be recovered.
/// `Ok(None)` when the session does not exist for this tenant.
///
/// With the store's [`SessionCache`] the steps already held are not read again: see
/// [`crate::cache`] for why the answer is still exactly what the database holds.
pub async fn restore_memory<S: Store>(
    store: &S,
    tenant: &Tenant,
    session_id: Id,
) -> Result<Option<Memory>> {
    let Some(session) = store.get_session(tenant, session_id).await? else {
        if let Some(cache) = store.session_cache() {
            cache.remove(tenant, session_id);
        }
        return Ok(None);
    };
    if let Some(cache) = store.session_cache().filter(|c| c.limit_bytes() > 0)
        && let Some(steps) = cached_steps(store, cache, tenant, session_id).await?
    {
        return Ok(Some(Memory {
            restored: Restored::Full,
            steps,
            summary: None,
        }));
    }
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

/// The session's steps through the cache: the entry held plus the rows appended since, or
/// a whole read when there is no entry or the entry and the database disagree on how many
/// rows the session has. `None` when some rows cannot be decoded (the caller then builds
/// the context summary from an ordinary read; such sessions are not cached).
async fn cached_steps<S: Store>(
    store: &S,
    cache: &SessionCache,
    tenant: &Tenant,
    session_id: Id,
) -> Result<Option<Vec<Step>>> {
    let held = cache.take(tenant, session_id);
    let after = held.as_ref().map_or(START_POSITION, |h| h.position);
    let read = store
        .list_session_steps_after(tenant, session_id, after)
        .await?;
    if read.skipped > 0 {
        return Ok(None);
    }
    let updated = match held {
        Some(held) if !read.whole => {
            // Cheap when no other restore of this session still holds the entry.
            let mut entry = Arc::try_unwrap(held).unwrap_or_else(|shared| (*shared).clone());
            entry.absorb(read.rows);
            (entry.len() as u64 == read.total).then(|| {
                cache.count_hit();
                entry.continue_at(read.next_position);
                entry
            })
        }
        _ => complete_entry(read).inspect(|_| cache.count_miss()),
    };
    let entry = match updated {
        Some(entry) => entry,
        // Rows the position did not reach (committed out of order, or by a node whose
        // clock is behind): read the whole session again.
        None => match whole(store, cache, tenant, session_id).await? {
            Some(entry) => entry,
            None => return Ok(None),
        },
    };
    let steps = entry.steps.clone();
    cache.put(tenant, session_id, Arc::new(entry));
    Ok(Some(steps))
}

/// A whole read of the session's rows into a fresh entry (a miss).
async fn whole<S: Store>(
    store: &S,
    cache: &SessionCache,
    tenant: &Tenant,
    session_id: Id,
) -> Result<Option<CachedSteps>> {
    cache.count_miss();
    let read = store
        .list_session_steps_after(tenant, session_id, START_POSITION)
        .await?;
    if read.skipped > 0 {
        return Ok(None);
    }
    Ok(complete_entry(read))
}

/// A fresh entry from `read`, when it holds every row of the session.
fn complete_entry(read: StepsAfter) -> Option<CachedSteps> {
    if read.rows.len() as u64 != read.total {
        return None;
    }
    let mut entry = CachedSteps::from_rows(read.rows);
    entry.continue_at(read.next_position);
    Some(entry)
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
