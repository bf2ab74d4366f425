//! Importing a session document: planned ([`ImportPlan`]: validated, re-keyed, ordered)
//! before the writer sees it, then written here in one transaction (all or nothing).

use rusqlite::{Connection, params};
use stepwise_core::{Session, SessionDocument};
use stepwise_store::rules::{ImportPlan, name_taken};
use stepwise_store::{Result, Tenant};

use crate::messages::insert_message;
use crate::rows::{bid, json_text, opt_bid};
use crate::writer::map_sqlite;
use crate::{SqliteStore, is_unique_violation};

const INSERT_SESSION: &str = "INSERT INTO sessions (id, tenant_id, user_id, name, title, status, related_type, related_id, initial_context_url, metadata, last_execution_id, last_snapshot_id, message_count, created_at, updated_at, agent) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)";
const INSERT_EXECUTION: &str = "INSERT INTO executions (id, tenant_id, session_id, parent_execution_id, user_id, agent_type, agent_config, status, input, output, metadata, last_snapshot_id, \
     step_count, tokens_input, tokens_output, tokens_total, error_message, attempts, started_at, completed_at, created_at, updated_at) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22)";
const INSERT_STEP: &str = "INSERT INTO steps (execution_id, step_number, id, tenant_id, session_id, kind, created_at, payload) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)";
const INSERT_SNAPSHOT: &str = "INSERT INTO snapshots (id, tenant_id, execution_id, session_id, parent_snapshot_id, agent_id, agent_name, step_number, is_final, debug_mode, state, created_at) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)";

impl SqliteStore {
    pub(crate) async fn import_session(
        &self,
        tenant: &Tenant,
        user_id: &str,
        doc: SessionDocument,
    ) -> Result<Session> {
        let plan = ImportPlan::new(tenant, user_id, doc, self.now())?;
        // Encode (and compress) here, off the writer thread.
        let threshold = self.inner.options.compress_threshold;
        let (payloads, states) = (
            plan.step_payloads(threshold),
            plan.snapshot_states(threshold),
        );
        self.write(move |conn, _| write(conn, plan, payloads, states))
            .await
    }
}

/// Writes an [`ImportPlan`] with the payloads it encoded (off the writer thread).
fn write(
    conn: &Connection,
    plan: ImportPlan,
    step_payloads: Vec<Vec<u8>>,
    snapshot_states: Vec<Vec<u8>>,
) -> Result<Session> {
    let ImportPlan { doc, thread, now } = plan;
    let s = &doc.session;
    let tenant = s.tenant_id.as_str();
    crate::sessions::release_deleted_name(conn, tenant, s.name.as_deref())?;
    conn.prepare_cached(INSERT_SESSION)
        .and_then(|mut st| {
            st.execute(params![
                bid(s.id),
                tenant,
                s.user_id,
                s.name,
                s.title,
                s.status.as_str(),
                s.related_type,
                s.related_id,
                s.initial_context_url,
                json_text(&s.metadata),
                opt_bid(s.last_execution_id),
                opt_bid(s.last_snapshot_id),
                s.message_count as i64,
                s.created_at.0,
                s.updated_at.0,
                crate::rows::agent_text(&s.agent)
            ])
        })
        .map_err(|e| {
            if is_unique_violation(&e) {
                name_taken(s.name.as_deref())
            } else {
                map_sqlite(e)
            }
        })?;
    for m in &doc.messages {
        insert_message(conn, tenant, m)?;
    }
    for e in &doc.executions {
        conn.prepare_cached(INSERT_EXECUTION)
            .and_then(|mut st| {
                st.execute(params![
                    bid(e.id),
                    tenant,
                    opt_bid(e.session_id),
                    opt_bid(e.parent_execution_id),
                    e.user_id,
                    e.agent_type,
                    json_text(&e.agent_config),
                    e.status.as_str(),
                    json_text(&e.input),
                    json_text(&e.output),
                    json_text(&e.metadata),
                    opt_bid(e.last_snapshot_id),
                    e.step_count as i64,
                    e.token_usage.input as i64,
                    e.token_usage.output as i64,
                    e.token_usage.total as i64,
                    e.error_message,
                    e.attempts,
                    e.started_at.map(|t| t.0),
                    e.completed_at.map(|t| t.0),
                    e.created_at.0,
                    e.updated_at.0
                ])
            })
            .map_err(map_sqlite)?;
    }
    for (st, payload) in doc.steps.iter().zip(step_payloads) {
        conn.prepare_cached(INSERT_STEP)
            .and_then(|mut q| {
                q.execute(params![
                    bid(st.execution_id),
                    st.step_number,
                    bid(st.id),
                    tenant,
                    opt_bid(st.session_id),
                    st.kind.as_str(),
                    st.created_at.0,
                    payload
                ])
            })
            .map_err(map_sqlite)?;
    }
    for (sn, state) in doc.snapshots.iter().zip(snapshot_states) {
        conn.prepare_cached(INSERT_SNAPSHOT)
            .and_then(|mut q| {
                q.execute(params![
                    bid(sn.id),
                    tenant,
                    bid(sn.execution_id),
                    bid(s.id),
                    opt_bid(sn.parent_snapshot_id),
                    sn.agent_id,
                    sn.agent_name,
                    sn.step_number,
                    sn.is_final,
                    sn.debug_mode,
                    state,
                    sn.created_at.0
                ])
            })
            .map_err(map_sqlite)?;
    }
    if let Some(rows) = &thread {
        crate::checkpoints::import_thread(conn, tenant, s.id, rows, now)?;
    }
    Ok(doc.session)
}
