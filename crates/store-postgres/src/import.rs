//! Importing a session document on PostgreSQL: the plan (validation, re-keying, order)
//! is `stepwise_store::rules::ImportPlan`; this file writes it in one transaction (all or
//! nothing).

use stepwise_core::{Session, SessionDocument};
use stepwise_store::rules::{ImportPlan, name_taken};
use stepwise_store::{Result, Tenant};
use tokio_postgres::Transaction;

use crate::PgStore;
use crate::sql::{args, is_unique_violation, json_text, map_pg, pg};

/// Rows are written as exported (counters, ids and times included).
const INSERT_SESSION: &str = "INSERT INTO sessions (id, tenant_id, user_id, name, title, status, related_type, related_id, initial_context_url, metadata, last_execution_id, last_snapshot_id, message_count, created_at, updated_at, agent) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)";
const INSERT_MESSAGE: &str = "INSERT INTO messages (id, tenant_id, session_id, role, content, execution_id, related_type, related_id, context_url, metadata, created_at) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)";
const INSERT_EXECUTION: &str = "INSERT INTO executions (id, tenant_id, session_id, parent_execution_id, user_id, agent_type, agent_config, status, input, output, metadata, last_snapshot_id, \
     step_count, tokens_input, tokens_output, tokens_total, error_message, attempts, started_at, completed_at, created_at, updated_at) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22)";
const INSERT_STEP: &str = "INSERT INTO steps (execution_id, step_number, id, tenant_id, session_id, kind, created_at, payload) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)";
const INSERT_SNAPSHOT: &str = "INSERT INTO snapshots (id, tenant_id, execution_id, session_id, parent_snapshot_id, agent_id, agent_name, step_number, is_final, debug_mode, state, created_at) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)";

/// Plans the import ([`ImportPlan`]: every refusal happens there, before any write) and
/// writes it in one transaction.
pub(crate) async fn import_document(
    store: &PgStore,
    tenant: &Tenant,
    user_id: &str,
    doc: SessionDocument,
) -> Result<Session> {
    let plan = ImportPlan::new(tenant, user_id, doc, store.now())?;
    // Encode (and compress) before taking a connection.
    let threshold = store.inner.options.compress_threshold;
    let step_payloads = plan.step_payloads(threshold);
    let snapshot_states = plan.snapshot_states(threshold);
    let mut client = store.client().await?;
    let tx = pg(&mut client).transaction().await.map_err(map_pg)?;
    let session = write(&tx, plan, step_payloads, snapshot_states).await?;
    tx.commit().await.map_err(map_pg)?;
    Ok(session)
}

/// Inserts the plan's rows; the payloads are in `doc.steps` and `doc.snapshots` order.
async fn write(
    tx: &Transaction<'_>,
    plan: ImportPlan,
    step_payloads: Vec<Vec<u8>>,
    snapshot_states: Vec<Vec<u8>>,
) -> Result<Session> {
    let ImportPlan { doc, thread, now } = plan;
    let s = &doc.session;
    let tenant = s.tenant_id.as_str();
    crate::sessions::release_deleted_name(tx, tenant, s.name.as_deref()).await?;
    tx.execute_typed(
        INSERT_SESSION,
        args![
            s.id,
            tenant,
            s.user_id,
            s.name,
            s.title,
            s.status.as_str(),
            s.related_type,
            s.related_id,
            s.initial_context_url,
            json_text(&s.metadata),
            s.last_execution_id,
            s.last_snapshot_id,
            s.message_count as i64,
            s.created_at.0,
            s.updated_at.0,
            crate::sql::agent_text(&s.agent)
        ],
    )
    .await
    .map_err(|e| {
        if is_unique_violation(&e) {
            name_taken(s.name.as_deref())
        } else {
            map_pg(e)
        }
    })?;
    for m in &doc.messages {
        tx.execute_typed(
            INSERT_MESSAGE,
            args![
                m.id,
                tenant,
                m.session_id,
                m.role.as_str(),
                m.content,
                m.execution_id,
                m.related_type,
                m.related_id,
                m.context_url,
                json_text(&m.metadata),
                m.created_at.0
            ],
        )
        .await
        .map_err(map_pg)?;
    }
    for e in &doc.executions {
        tx.execute_typed(
            INSERT_EXECUTION,
            args![
                e.id,
                tenant,
                e.session_id,
                e.parent_execution_id,
                e.user_id,
                e.agent_type,
                json_text(&e.agent_config),
                e.status.as_str(),
                json_text(&e.input),
                json_text(&e.output),
                json_text(&e.metadata),
                e.last_snapshot_id,
                e.step_count as i64,
                e.token_usage.input as i64,
                e.token_usage.output as i64,
                e.token_usage.total as i64,
                e.error_message,
                e.attempts as i32,
                e.started_at.map(|t| t.0),
                e.completed_at.map(|t| t.0),
                e.created_at.0,
                e.updated_at.0
            ],
        )
        .await
        .map_err(map_pg)?;
    }
    for (st, payload) in doc.steps.iter().zip(step_payloads) {
        tx.execute_typed(
            INSERT_STEP,
            args![
                st.execution_id,
                st.step_number as i32,
                st.id,
                tenant,
                st.session_id,
                st.kind.as_str(),
                st.created_at.0,
                payload
            ],
        )
        .await
        .map_err(map_pg)?;
    }
    for (sn, state) in doc.snapshots.iter().zip(snapshot_states) {
        tx.execute_typed(
            INSERT_SNAPSHOT,
            args![
                sn.id,
                tenant,
                sn.execution_id,
                s.id,
                sn.parent_snapshot_id,
                sn.agent_id,
                sn.agent_name,
                sn.step_number as i32,
                sn.is_final,
                sn.debug_mode,
                state,
                sn.created_at.0
            ],
        )
        .await
        .map_err(map_pg)?;
    }
    if let Some(rows) = &thread {
        crate::checkpoints::import_thread(tx, tenant, s.id, rows, now).await?;
    }
    Ok(doc.session)
}
