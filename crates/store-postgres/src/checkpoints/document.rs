//! A LangGraph thread in a session's export document: every checkpoint, blob and pending
//! write row of the session's thread out, and back in for an imported session.

use serde_json::{Value, json};
use stepwise_core::document::DocumentThread;
use stepwise_core::{Id, Timestamp};
use stepwise_store::checkpoints::{
    StoredBlob, StoredCheckpoint, StoredWrite, ThreadRows, thread_document,
};
use stepwise_store::{Result, StoreError};
use tokio_postgres::GenericClient;

use crate::sql::{self, args, json_text, map_pg};

use super::{INSERT_THREAD, LOCK_THREAD, find_thread};

const THREAD_OF_SESSION: &str =
    "SELECT thread_id FROM threads WHERE tenant_id = $1 AND session_id = $2";
const EXPORT_CHECKPOINTS: &str = "SELECT checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, payload, metadata::text AS metadata, channel_versions, created_at \
     FROM checkpoints WHERE tenant_id = $1 AND session_id = $2 ORDER BY checkpoint_ns, checkpoint_id";
const EXPORT_BLOBS: &str = "SELECT checkpoint_ns, channel, version, is_append, base_version, type, payload \
     FROM checkpoint_blobs WHERE tenant_id = $1 AND session_id = $2 ORDER BY checkpoint_ns, channel, version";
const EXPORT_WRITES: &str = "SELECT checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel, type, payload \
     FROM checkpoint_writes WHERE tenant_id = $1 AND session_id = $2 ORDER BY checkpoint_ns, checkpoint_id, task_path, task_id, idx";
const IMPORT_CHECKPOINT: &str = "INSERT INTO checkpoints (tenant_id, session_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, payload, metadata, channel_versions, run_id, created_at) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8::jsonb, $9, $10, $11)";
const IMPORT_BLOB: &str = "INSERT INTO checkpoint_blobs (tenant_id, session_id, checkpoint_ns, channel, version, is_append, base_version, type, payload) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)";
const IMPORT_WRITE: &str = "INSERT INTO checkpoint_writes (tenant_id, session_id, checkpoint_ns, checkpoint_id, task_id, idx, channel, type, payload, task_path) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)";

/// The thread a session is, with every row of it, for the session's export document.
pub(crate) async fn export_thread(
    c: &impl GenericClient,
    tenant: &str,
    session: Id,
) -> Result<Option<DocumentThread>> {
    let Some(row) = c
        .query_typed_opt(THREAD_OF_SESSION, args![tenant, session])
        .await
        .map_err(map_pg)?
    else {
        return Ok(None);
    };
    let thread_id: String = sql::get(&row, "thread_id")?;
    let json = |text: String| serde_json::from_str(&text).unwrap_or_else(|_| json!({}));
    let mut checkpoints = Vec::new();
    for r in &c
        .query_typed(EXPORT_CHECKPOINTS, args![tenant, session])
        .await
        .map_err(map_pg)?
    {
        checkpoints.push(StoredCheckpoint {
            checkpoint_ns: sql::get(r, "checkpoint_ns")?,
            checkpoint_id: sql::get(r, "checkpoint_id")?,
            parent_checkpoint_id: sql::get(r, "parent_checkpoint_id")?,
            type_name: sql::get(r, "type")?,
            payload: sql::get(r, "payload")?,
            metadata: json(sql::get(r, "metadata")?),
            channel_versions: json(sql::get(r, "channel_versions")?),
            created_at: Timestamp(sql::get(r, "created_at")?),
        });
    }
    let mut blobs = Vec::new();
    for r in &c
        .query_typed(EXPORT_BLOBS, args![tenant, session])
        .await
        .map_err(map_pg)?
    {
        blobs.push((
            sql::get(r, "checkpoint_ns")?,
            sql::get(r, "channel")?,
            StoredBlob {
                version: sql::get(r, "version")?,
                is_append: sql::get(r, "is_append")?,
                base_version: sql::get(r, "base_version")?,
                type_name: sql::get(r, "type")?,
                payload: sql::get(r, "payload")?,
            },
        ));
    }
    let mut writes = Vec::new();
    for r in &c
        .query_typed(EXPORT_WRITES, args![tenant, session])
        .await
        .map_err(map_pg)?
    {
        writes.push(StoredWrite {
            checkpoint_ns: sql::get(r, "checkpoint_ns")?,
            checkpoint_id: sql::get(r, "checkpoint_id")?,
            task_id: sql::get(r, "task_id")?,
            task_path: sql::get(r, "task_path")?,
            idx: sql::get(r, "idx")?,
            channel: sql::get(r, "channel")?,
            type_name: sql::get(r, "type")?,
            payload: sql::get(r, "payload")?,
        });
    }
    thread_document(thread_id, checkpoints, blobs, writes).map(Some)
}

/// Writes an imported document's thread for its (new) session, in the caller's
/// transaction: the thread id must be free in the tenant (`Conflict` otherwise).
pub(crate) async fn import_thread(
    c: &impl GenericClient,
    tenant: &str,
    session: Id,
    rows: &ThreadRows,
    now: Timestamp,
) -> Result<()> {
    let key = format!("{tenant}\u{1}{}", rows.thread_id);
    c.query_typed(LOCK_THREAD, args![key])
        .await
        .map_err(map_pg)?;
    if find_thread(c, tenant, &rows.thread_id).await?.is_some() {
        return Err(StoreError::Conflict(format!(
            "thread '{}' already exists; delete it first or import without its checkpoints",
            rows.thread_id
        )));
    }
    c.execute_typed(INSERT_THREAD, args![tenant, rows.thread_id, session, now.0])
        .await
        .map_err(map_pg)?;
    for (cp, run_id, payload) in &rows.checkpoints {
        c.execute_typed(
            IMPORT_CHECKPOINT,
            args![
                tenant,
                session,
                cp.checkpoint_ns,
                cp.checkpoint_id,
                cp.parent_checkpoint_id,
                cp.checkpoint.type_name,
                payload,
                json_text(&cp.metadata),
                json_text(&Value::Object(cp.channel_versions.clone())),
                run_id,
                cp.created_at.0
            ],
        )
        .await
        .map_err(map_pg)?;
    }
    for (ns, blob) in &rows.blobs {
        let (is_append, base, type_name, payload) = blob.columns();
        c.execute_typed(
            IMPORT_BLOB,
            args![
                tenant,
                session,
                ns,
                blob.channel,
                blob.version,
                is_append,
                base,
                type_name,
                payload
            ],
        )
        .await
        .map_err(map_pg)?;
    }
    for (w, payload) in &rows.writes {
        c.execute_typed(
            IMPORT_WRITE,
            args![
                tenant,
                session,
                w.checkpoint_ns,
                w.checkpoint_id,
                w.task_id,
                w.idx,
                w.channel,
                w.type_name,
                payload,
                w.task_path
            ],
        )
        .await
        .map_err(map_pg)?;
    }
    Ok(())
}
