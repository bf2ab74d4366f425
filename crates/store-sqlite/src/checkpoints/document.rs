//! A thread's rows in a session's export document, and back (SQLite).

use rusqlite::{Connection, OptionalExtension, params};
use serde_json::{Value, json};
use stepwise_core::document::DocumentThread;
use stepwise_core::{Id, Timestamp};
use stepwise_store::checkpoints::{StoredCheckpoint, StoredWrite, ThreadRows, thread_document};
use stepwise_store::{Result, StoreError};

use super::{INSERT_THREAD, execute, find_thread, stored_blob};
use crate::rows::{bid, json_text};
use crate::writer::map_sqlite;

const THREAD_OF_SESSION: &str =
    "SELECT thread_id FROM threads WHERE tenant_id = ?1 AND session_id = ?2";
const EXPORT_CHECKPOINTS: &str = "SELECT checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, payload, metadata, channel_versions, created_at \
     FROM checkpoints WHERE tenant_id = ?1 AND session_id = ?2 ORDER BY checkpoint_ns, checkpoint_id";
const EXPORT_BLOBS: &str = "SELECT version, is_append, base_version, type, payload, checkpoint_ns, channel \
     FROM checkpoint_blobs WHERE tenant_id = ?1 AND session_id = ?2 ORDER BY checkpoint_ns, channel, version";
const EXPORT_WRITES: &str = "SELECT checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel, type, payload \
     FROM checkpoint_writes WHERE tenant_id = ?1 AND session_id = ?2 ORDER BY checkpoint_ns, checkpoint_id, task_path, task_id, idx";
const IMPORT_CHECKPOINT: &str = "INSERT INTO checkpoints (tenant_id, session_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, payload, metadata, channel_versions, run_id, created_at) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)";
const IMPORT_BLOB: &str = "INSERT INTO checkpoint_blobs (tenant_id, session_id, checkpoint_ns, channel, version, is_append, base_version, type, payload) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)";
const IMPORT_WRITE: &str = "INSERT INTO checkpoint_writes (tenant_id, session_id, checkpoint_ns, checkpoint_id, task_id, idx, channel, type, payload, task_path) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)";

/// The thread a session is, with every row of it, for the session's export document.
pub(crate) fn export_thread(
    conn: &Connection,
    tenant: &str,
    session: Id,
) -> Result<Option<DocumentThread>> {
    let thread_id: Option<String> = conn
        .prepare_cached(THREAD_OF_SESSION)
        .and_then(|mut s| {
            s.query_row(params![tenant, bid(session)], |r| r.get(0))
                .optional()
        })
        .map_err(map_sqlite)?;
    let Some(thread_id) = thread_id else {
        return Ok(None);
    };
    let checkpoints = conn
        .prepare_cached(EXPORT_CHECKPOINTS)
        .and_then(|mut s| {
            s.query_map(params![tenant, bid(session)], |r| {
                let json = |text: String| serde_json::from_str(&text).unwrap_or_else(|_| json!({}));
                Ok(StoredCheckpoint {
                    checkpoint_ns: r.get(0)?,
                    checkpoint_id: r.get(1)?,
                    parent_checkpoint_id: r.get(2)?,
                    type_name: r.get(3)?,
                    payload: r.get(4)?,
                    metadata: json(r.get(5)?),
                    channel_versions: json(r.get(6)?),
                    created_at: Timestamp(r.get(7)?),
                })
            })?
            .collect::<rusqlite::Result<Vec<_>>>()
        })
        .map_err(map_sqlite)?;
    let blobs = conn
        .prepare_cached(EXPORT_BLOBS)
        .and_then(|mut s| {
            s.query_map(params![tenant, bid(session)], |r| {
                Ok((r.get(5)?, r.get(6)?, stored_blob(r)?))
            })?
            .collect::<rusqlite::Result<Vec<_>>>()
        })
        .map_err(map_sqlite)?;
    let writes = conn
        .prepare_cached(EXPORT_WRITES)
        .and_then(|mut s| {
            s.query_map(params![tenant, bid(session)], |r| {
                Ok(StoredWrite {
                    checkpoint_ns: r.get(0)?,
                    checkpoint_id: r.get(1)?,
                    task_id: r.get(2)?,
                    task_path: r.get(3)?,
                    idx: r.get(4)?,
                    channel: r.get(5)?,
                    type_name: r.get(6)?,
                    payload: r.get(7)?,
                })
            })?
            .collect::<rusqlite::Result<Vec<_>>>()
        })
        .map_err(map_sqlite)?;
    thread_document(thread_id, checkpoints, blobs, writes).map(Some)
}

/// Writes an imported document's thread for its (new) session: the thread id must be free
/// in the tenant (`Conflict` otherwise; the caller's transaction then writes nothing).
pub(crate) fn import_thread(
    conn: &Connection,
    tenant: &str,
    session: Id,
    rows: &ThreadRows,
    now: Timestamp,
) -> Result<()> {
    if find_thread(conn, tenant, &rows.thread_id)?.is_some() {
        return Err(StoreError::Conflict(format!(
            "thread '{}' already exists; delete it first or import without its checkpoints",
            rows.thread_id
        )));
    }
    execute(
        conn,
        INSERT_THREAD,
        params![tenant, rows.thread_id, bid(session), now.0],
    )?;
    for (c, run_id, payload) in &rows.checkpoints {
        execute(
            conn,
            IMPORT_CHECKPOINT,
            params![
                tenant,
                bid(session),
                c.checkpoint_ns,
                c.checkpoint_id,
                c.parent_checkpoint_id,
                c.checkpoint.type_name,
                payload,
                json_text(&c.metadata),
                json_text(&Value::Object(c.channel_versions.clone())),
                run_id,
                c.created_at.0
            ],
        )?;
    }
    for (ns, blob) in &rows.blobs {
        let (is_append, base, type_name, payload) = blob.columns();
        execute(
            conn,
            IMPORT_BLOB,
            params![
                tenant,
                bid(session),
                ns,
                blob.channel,
                blob.version,
                is_append,
                base,
                type_name,
                payload
            ],
        )?;
    }
    for (w, payload) in &rows.writes {
        execute(
            conn,
            IMPORT_WRITE,
            params![
                tenant,
                bid(session),
                w.checkpoint_ns,
                w.checkpoint_id,
                w.task_id,
                w.idx,
                w.channel,
                w.type_name,
                payload,
                w.task_path
            ],
        )?;
    }
    Ok(())
}
