//! Importing a session document: validated and re-keyed before the writer sees it, then
//! written in one transaction (all or nothing).

use std::collections::HashMap;

use rusqlite::{Connection, params};
use stepwise_core::codec;
use stepwise_core::document::FORMAT_VERSION;
use stepwise_core::name::validate_name;
use stepwise_core::{Id, Session, SessionDocument, SessionStatus, Timestamp, new_id};
use stepwise_store::{Result, StoreError, Tenant};

use crate::rows::{bid, json_text, opt_bid};
use crate::writer::map_sqlite;

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
        m.id = ids[&m.id];
        m.session_id = session_id;
        m.execution_id = map(m.execution_id);
    }
    let known: std::collections::HashSet<Id> = doc.executions.iter().map(|e| e.id).collect();
    for e in &mut doc.executions {
        e.id = ids[&e.id];
        e.session_id = Some(session_id);
        e.parent_execution_id = map(e.parent_execution_id);
        e.last_snapshot_id = map(e.last_snapshot_id);
        e.tenant_id = tenant.as_str().to_string();
        e.user_id = user_id.to_string();
        if !e.status.is_finished() && e.status != stepwise_core::ExecutionStatus::Paused {
            // An imported run has no worker: it cannot be half-way through.
            e.status = stepwise_core::ExecutionStatus::Cancelled;
            e.completed_at.get_or_insert(now);
        }
    }
    let mut seen_steps = std::collections::HashSet::new();
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
        st.execution_id = ids[&st.execution_id];
        st.session_id = Some(session_id);
    }
    for sn in &mut doc.snapshots {
        if !known.contains(&sn.execution_id) {
            return Err(StoreError::invalid(
                "snapshots",
                "a snapshot refers to an execution that is not in the document",
            ));
        }
        sn.id = ids[&sn.id];
        sn.execution_id = ids[&sn.execution_id];
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

pub(crate) fn write(conn: &Connection, plan: Plan) -> Result<Session> {
    let Plan {
        doc,
        step_payloads,
        snapshot_states,
    } = plan;
    let s = &doc.session;
    let tenant = s.tenant_id.as_str();
    conn.prepare_cached(
        "INSERT INTO sessions (id, tenant_id, user_id, name, title, status, related_type, related_id, initial_context_url, metadata, last_execution_id, last_snapshot_id, message_count, created_at, updated_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)",
    )
    .and_then(|mut st| st.execute(params![bid(s.id), tenant, s.user_id, s.name, s.title, s.status.as_str(), s.related_type, s.related_id, s.initial_context_url, json_text(&s.metadata), opt_bid(s.last_execution_id), opt_bid(s.last_snapshot_id), s.message_count as i64, s.created_at.0, s.updated_at.0]))
    .map_err(|e| match e {
        rusqlite::Error::SqliteFailure(f, _) if f.code == rusqlite::ErrorCode::ConstraintViolation => {
            StoreError::Conflict(format!("a session named '{}' already exists", s.name.as_deref().unwrap_or_default()))
        }
        e => map_sqlite(e),
    })?;
    for m in &doc.messages {
        conn.prepare_cached(
            "INSERT INTO messages (id, tenant_id, session_id, role, content, execution_id, related_type, related_id, context_url, metadata, created_at) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
        )
        .and_then(|mut st| st.execute(params![bid(m.id), tenant, bid(m.session_id), m.role.as_str(), m.content, opt_bid(m.execution_id), m.related_type, m.related_id, m.context_url, json_text(&m.metadata), m.created_at.0]))
        .map_err(map_sqlite)?;
    }
    for e in &doc.executions {
        conn.prepare_cached(
            "INSERT INTO executions (id, tenant_id, session_id, parent_execution_id, user_id, agent_type, agent_config, status, input, output, metadata, last_snapshot_id, \
             step_count, tokens_input, tokens_output, tokens_total, error_message, attempts, started_at, completed_at, created_at, updated_at) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22)",
        )
        .and_then(|mut st| {
            st.execute(params![
                bid(e.id), tenant, opt_bid(e.session_id), opt_bid(e.parent_execution_id), e.user_id, e.agent_type, json_text(&e.agent_config), e.status.as_str(),
                json_text(&e.input), json_text(&e.output), json_text(&e.metadata), opt_bid(e.last_snapshot_id), e.step_count as i64,
                e.token_usage.input as i64, e.token_usage.output as i64, e.token_usage.total as i64, e.error_message, e.attempts,
                e.started_at.map(|t| t.0), e.completed_at.map(|t| t.0), e.created_at.0, e.updated_at.0
            ])
        })
        .map_err(map_sqlite)?;
    }
    for (st, payload) in doc.steps.iter().zip(step_payloads) {
        conn.prepare_cached("INSERT INTO steps (execution_id, step_number, id, tenant_id, session_id, kind, created_at, payload) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)")
            .and_then(|mut q| q.execute(params![bid(st.execution_id), st.step_number, bid(st.id), tenant, opt_bid(st.session_id), st.kind.as_str(), st.created_at.0, payload]))
            .map_err(map_sqlite)?;
    }
    for (sn, state) in doc.snapshots.iter().zip(snapshot_states) {
        conn.prepare_cached(
            "INSERT INTO snapshots (id, tenant_id, execution_id, session_id, parent_snapshot_id, agent_id, agent_name, step_number, is_final, debug_mode, state, created_at) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
        )
        .and_then(|mut q| q.execute(params![bid(sn.id), tenant, bid(sn.execution_id), bid(s.id), opt_bid(sn.parent_snapshot_id), sn.agent_id, sn.agent_name, sn.step_number, sn.is_final, sn.debug_mode, state, sn.created_at.0]))
        .map_err(map_sqlite)?;
    }
    Ok(doc.session)
}
