//! Importing a session document: validated and re-keyed before anything is written, then
//! written in one transaction (all or nothing). The same rules as the SQLite store.

use std::collections::{HashMap, HashSet};

use stepwise_core::codec;
use stepwise_core::document::FORMAT_VERSION;
use stepwise_core::name::validate_name;
use stepwise_core::{
    ExecutionStatus, Id, Session, SessionDocument, SessionStatus, Timestamp, new_id,
};
use stepwise_store::{Result, StoreError, Tenant};
use tokio_postgres::Transaction;

use crate::sql::{args, is_unique_violation, json_text, map_pg};

pub(crate) struct Plan {
    doc: SessionDocument,
    step_payloads: Vec<Vec<u8>>,
    snapshot_states: Vec<Vec<u8>>,
}

/// Checks the document and gives every record a fresh id in `tenant`. References to ids
/// that are not in the document are dropped, never followed.
pub(crate) fn plan(
    tenant: &Tenant,
    user_id: &str,
    mut doc: SessionDocument,
    now: Timestamp,
    threshold: usize,
) -> Result<Plan> {
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
            // An imported run has no worker: it cannot be half-way through.
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
    let step_payloads = doc
        .steps
        .iter()
        .map(|s| codec::encode_step(&s.body(), threshold))
        .collect();
    let snapshot_states = doc
        .snapshots
        .iter()
        .map(|s| codec::encode_value(&s.state, threshold))
        .collect();
    Ok(Plan {
        doc,
        step_payloads,
        snapshot_states,
    })
}

pub(crate) async fn write(tx: &Transaction<'_>, plan: Plan) -> Result<Session> {
    let Plan {
        doc,
        step_payloads,
        snapshot_states,
    } = plan;
    let s = &doc.session;
    let tenant = s.tenant_id.as_str();
    tx.execute_typed(
        "INSERT INTO sessions (id, tenant_id, user_id, name, title, status, related_type, related_id, initial_context_url, metadata, last_execution_id, last_snapshot_id, message_count, created_at, updated_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)",
        args![s.id, tenant, s.user_id, s.name, s.title, s.status.as_str(), s.related_type, s.related_id, s.initial_context_url, json_text(&s.metadata), s.last_execution_id, s.last_snapshot_id, s.message_count as i64, s.created_at.0, s.updated_at.0],
    )
    .await
    .map_err(|e| {
        if is_unique_violation(&e) {
            StoreError::Conflict(format!("a session named '{}' already exists", s.name.as_deref().unwrap_or_default()))
        } else {
            map_pg(e)
        }
    })?;
    for m in &doc.messages {
        tx.execute_typed(
            "INSERT INTO messages (id, tenant_id, session_id, role, content, execution_id, related_type, related_id, context_url, metadata, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
            args![m.id, tenant, m.session_id, m.role.as_str(), m.content, m.execution_id, m.related_type, m.related_id, m.context_url, json_text(&m.metadata), m.created_at.0],
        )
        .await
        .map_err(map_pg)?;
    }
    for e in &doc.executions {
        tx.execute_typed(
            "INSERT INTO executions (id, tenant_id, session_id, parent_execution_id, user_id, agent_type, agent_config, status, input, output, metadata, last_snapshot_id, \
             step_count, tokens_input, tokens_output, tokens_total, error_message, attempts, started_at, completed_at, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22)",
            args![
                e.id, tenant, e.session_id, e.parent_execution_id, e.user_id, e.agent_type, json_text(&e.agent_config), e.status.as_str(),
                json_text(&e.input), json_text(&e.output), json_text(&e.metadata), e.last_snapshot_id, e.step_count as i64,
                e.token_usage.input as i64, e.token_usage.output as i64, e.token_usage.total as i64, e.error_message, e.attempts as i32,
                e.started_at.map(|t| t.0), e.completed_at.map(|t| t.0), e.created_at.0, e.updated_at.0
            ],
        )
        .await
        .map_err(map_pg)?;
    }
    for (st, payload) in doc.steps.iter().zip(step_payloads) {
        tx.execute_typed(
            "INSERT INTO steps (execution_id, step_number, id, tenant_id, session_id, kind, created_at, payload) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            args![st.execution_id, st.step_number as i32, st.id, tenant, st.session_id, st.kind.as_str(), st.created_at.0, payload],
        )
        .await
        .map_err(map_pg)?;
    }
    for (sn, state) in doc.snapshots.iter().zip(snapshot_states) {
        tx.execute_typed(
            "INSERT INTO snapshots (id, tenant_id, execution_id, session_id, parent_snapshot_id, agent_id, agent_name, step_number, is_final, debug_mode, state, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
            args![sn.id, tenant, sn.execution_id, s.id, sn.parent_snapshot_id, sn.agent_id, sn.agent_name, sn.step_number as i32, sn.is_final, sn.debug_mode, state, sn.created_at.0],
        )
        .await
        .map_err(map_pg)?;
    }
    Ok(doc.session)
}
