//! What every backend does to a session document before importing it: check what the
//! storage relies on, and give every record a fresh id in the importing tenant.

use std::collections::{HashMap, HashSet};

use stepwise_core::document::{DocumentLimits, FORMAT_VERSION, validate_thread};
use stepwise_core::name::validate_name;
use stepwise_core::{ExecutionStatus, Id, SessionDocument, SessionStatus, Timestamp, new_id};

use crate::{Result, StoreError, Tenant};

/// The document as a new session of `tenant` owned by `user_id`: fresh ids throughout,
/// references inside the document rewritten, references to anything outside it dropped
/// (never followed). A deleted session comes back active; an execution that was half-way
/// (pending or running) is cancelled, since an imported run has no worker. Refused: another
/// `format_version`, a name breaking the rules, steps or snapshots of an execution the
/// document does not hold, a step number that is 0 or repeated, a LangGraph thread whose
/// checkpoints break the rules of [`validate_thread`]. The thread id is kept (the backend
/// refuses it with `Conflict` when the tenant already has that thread), except a thread
/// named after its session (a worker's LangGraph thread): it takes the new session's id.
pub fn rekey_document(
    tenant: &Tenant,
    user_id: &str,
    mut doc: SessionDocument,
    now: Timestamp,
) -> Result<SessionDocument> {
    if doc.format_version != FORMAT_VERSION {
        return Err(StoreError::invalid(
            "format_version",
            format!(
                "unsupported format_version {} (this build reads {FORMAT_VERSION})",
                doc.format_version
            ),
        ));
    }
    if let Some(name) = &doc.session.name {
        validate_name(name)?;
    }
    if let Some(thread) = &doc.thread {
        validate_thread(thread, &DocumentLimits::default())
            .map_err(|e| StoreError::invalid("thread", e.to_string()))?;
    }
    let mut ids: HashMap<Id, Id> = HashMap::new();
    let mut fresh = |old: Id| *ids.entry(old).or_insert_with(new_id);
    let session_id = fresh(doc.session.id);
    for e in &doc.executions {
        fresh(e.id);
    }
    for s in &doc.snapshots {
        fresh(s.id);
    }
    for m in &doc.messages {
        fresh(m.id);
    }
    let map = |old: Option<Id>| old.and_then(|o| ids.get(&o).copied());
    let renamed = |old: Id| ids.get(&old).copied().unwrap_or(old);

    // A thread named after its session (a worker's LangGraph thread) follows the session.
    if let Some(thread) = doc.thread.as_mut()
        && thread.thread_id == doc.session.id.to_string()
    {
        thread.thread_id = session_id.to_string();
    }
    let s = &mut doc.session;
    s.id = session_id;
    s.tenant_id = tenant.as_str().to_string();
    s.user_id = user_id.to_string();
    s.last_execution_id = map(s.last_execution_id);
    s.last_snapshot_id = map(s.last_snapshot_id);
    s.message_count = doc.messages.len() as u64;
    if s.status == SessionStatus::Deleted {
        s.status = SessionStatus::Active;
    }
    s.updated_at = now;
    for m in &mut doc.messages {
        m.id = renamed(m.id);
        m.session_id = session_id;
        m.execution_id = map(m.execution_id);
    }
    let known: HashSet<Id> = doc.executions.iter().map(|e| e.id).collect();
    for e in &mut doc.executions {
        e.id = renamed(e.id);
        e.session_id = Some(session_id);
        e.parent_execution_id = map(e.parent_execution_id);
        e.last_snapshot_id = map(e.last_snapshot_id);
        e.tenant_id = tenant.as_str().to_string();
        e.user_id = user_id.to_string();
        if !e.status.is_finished() && e.status != ExecutionStatus::Paused {
            e.status = ExecutionStatus::Cancelled;
            e.completed_at.get_or_insert(now);
        }
    }
    let mut seen_steps = HashSet::new();
    for st in &mut doc.steps {
        if !known.contains(&st.execution_id) {
            return Err(StoreError::invalid(
                "steps",
                "a step refers to an execution that is not in the document",
            ));
        }
        if st.step_number == 0 || !seen_steps.insert((st.execution_id, st.step_number)) {
            return Err(StoreError::invalid(
                "steps",
                format!("step number {} is missing or repeated", st.step_number),
            ));
        }
        st.id = new_id();
        st.execution_id = renamed(st.execution_id);
        st.session_id = Some(session_id);
    }
    for sn in &mut doc.snapshots {
        if !known.contains(&sn.execution_id) {
            return Err(StoreError::invalid(
                "snapshots",
                "a snapshot refers to an execution that is not in the document",
            ));
        }
        sn.id = renamed(sn.id);
        sn.execution_id = renamed(sn.execution_id);
        sn.parent_snapshot_id = map(sn.parent_snapshot_id);
    }
    Ok(doc)
}
