//! LangGraph checkpoints on SQLite (see `stepwise_store::checkpoints`): threads, checkpoints,
//! blobs and pending writes. Writes go through the writer thread like every other write;
//! reads use the reader pool. Append chains are resolved with one query per channel (the
//! channel's rows up to the wanted version), then walked in memory.
//!
//! `cleanup.rs`: pruning and collecting what no checkpoint needs. `document.rs`: export
//! and import.

use std::collections::{BTreeMap, HashMap, HashSet};

use rusqlite::types::Value as Sql;
use rusqlite::{Connection, OptionalExtension, params, params_from_iter};
use serde_json::{Value, json};
use stepwise_core::document::DocumentThread;
use stepwise_core::name::validate_name;
use stepwise_core::{Id, Timestamp};
use stepwise_store::checkpoints::{
    CheckpointRow, ResolvedBlobs, StoredBlob, StoredRef, WriteRef, channel_version_pairs,
    check_write, checkpoint_created, checkpoint_cursor, missing_base, pack_payload, resolve_chain,
    run_id_of, splice_writes, unpack_payload, write_refs_of,
};
use stepwise_store::{
    CheckpointPut, CheckpointQuery, CheckpointRecord, NewCheckpoint, NewSession, Page,
    PruneStrategy, PutWrites, Result, StoreError, Tenant, ThreadInfo, TypedValue, WriteRecord,
};

use crate::mirrored::insert_announced;
use crate::rows::{Bid, bid, json_text};
use crate::writer::map_sqlite;
use crate::{SqliteStore, is_unique_violation};

mod cleanup;
mod document;

use cleanup::{prune_thread, settle_writes};
pub(crate) use document::{export_thread, import_thread};

const FIND_THREAD: &str = "SELECT session_id FROM threads WHERE tenant_id = ?1 AND thread_id = ?2";
const NAME_TAKEN: &str = "SELECT COUNT(*) FROM sessions WHERE tenant_id = ?1 AND name = ?2";
const INSERT_SESSION: &str = "INSERT INTO sessions (id, tenant_id, user_id, name, title, status, related_type, related_id, initial_context_url, metadata, created_at, updated_at) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?11)";
const INSERT_THREAD: &str =
    "INSERT INTO threads (tenant_id, thread_id, session_id, created_at) VALUES (?1, ?2, ?3, ?4)";
const TOUCH_SESSION: &str = "UPDATE sessions SET updated_at = MAX(updated_at, ?1), status = CASE WHEN status = 'abandoned' THEN 'active' ELSE status END WHERE id = ?2";
const INSERT_CHECKPOINT: &str = "INSERT INTO checkpoints (tenant_id, session_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, payload, metadata, channel_versions, run_id, created_at) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11) \
     ON CONFLICT (tenant_id, session_id, checkpoint_ns, checkpoint_id) DO NOTHING";
const INSERT_BLOB: &str = "INSERT INTO checkpoint_blobs (tenant_id, session_id, checkpoint_ns, channel, version, is_append, base_version, type, payload) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9) \
     ON CONFLICT (tenant_id, session_id, checkpoint_ns, channel, version) DO NOTHING";
const INSERT_WRITE_KEEP: &str = "INSERT INTO checkpoint_writes (tenant_id, session_id, checkpoint_ns, checkpoint_id, task_id, idx, channel, type, payload, task_path) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10) \
     ON CONFLICT (tenant_id, session_id, checkpoint_ns, checkpoint_id, task_id, idx) DO NOTHING";
const INSERT_WRITE_REPLACE: &str = "INSERT INTO checkpoint_writes (tenant_id, session_id, checkpoint_ns, checkpoint_id, task_id, idx, channel, type, payload, task_path) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10) \
     ON CONFLICT (tenant_id, session_id, checkpoint_ns, checkpoint_id, task_id, idx) \
     DO UPDATE SET channel = excluded.channel, type = excluded.type, payload = excluded.payload, task_path = excluded.task_path";
const CHECKPOINT_COLS: &str = "(SELECT t.thread_id FROM threads t WHERE t.tenant_id = c.tenant_id AND t.session_id = c.session_id) AS thread_id, c.session_id, c.checkpoint_ns, c.checkpoint_id, c.parent_checkpoint_id, c.type, c.payload, c.metadata, c.channel_versions, c.created_at";
/// Only `checkpoints` in FROM (the thread id is a subquery of each row answered), so the
/// order comes from its indexes.
const CHECKPOINT_FROM: &str = "FROM checkpoints c";
const BLOBS_UP_TO: &str = "SELECT version, is_append, base_version, type, payload FROM checkpoint_blobs \
     WHERE tenant_id = ?1 AND session_id = ?2 AND checkpoint_ns = ?3 AND channel = ?4 AND version <= ?5";
const BLOBS_BETWEEN: &str = "SELECT version, is_append, base_version, type, payload FROM checkpoint_blobs \
     WHERE tenant_id = ?1 AND session_id = ?2 AND checkpoint_ns = ?3 AND channel = ?4 AND version <= ?5 AND version >= ?6";
const BLOB_EXISTS: &str = "SELECT COUNT(*) FROM checkpoint_blobs \
     WHERE tenant_id = ?1 AND session_id = ?2 AND checkpoint_ns = ?3 AND channel = ?4 AND version = ?5";
const BLOBS_ALL: &str = "SELECT version, is_append, base_version, type, payload FROM checkpoint_blobs \
     WHERE tenant_id = ?1 AND session_id = ?2 AND checkpoint_ns = ?3 AND channel = ?4";
const WRITES_OF: &str = "SELECT task_id, idx, channel, type, payload, task_path FROM checkpoint_writes \
     WHERE tenant_id = ?1 AND session_id = ?2 AND checkpoint_ns = ?3 AND checkpoint_id = ?4 \
     ORDER BY task_path, task_id, idx";
const WRITE_VALUE: &str = "SELECT type, payload FROM checkpoint_writes \
     WHERE tenant_id = ?1 AND session_id = ?2 AND checkpoint_ns = ?3 AND checkpoint_id = ?4 AND task_id = ?5 AND idx = ?6";
const WRITE_ROW: &str = "SELECT channel, payload, referenced FROM checkpoint_writes \
     WHERE tenant_id = ?1 AND session_id = ?2 AND checkpoint_ns = ?3 AND checkpoint_id = ?4 AND task_id = ?5 AND idx = ?6";
const MARK_REFERENCED: &str = "UPDATE checkpoint_writes SET referenced = 1 \
     WHERE tenant_id = ?1 AND session_id = ?2 AND checkpoint_ns = ?3 AND checkpoint_id = ?4 AND task_id = ?5 AND idx = ?6";
const COUNT_CHECKPOINTS: &str =
    "SELECT COUNT(*) FROM checkpoints WHERE tenant_id = ?1 AND session_id = ?2";
/// Whether a thread holds anything a copy would collide with: checkpoints, values or
/// pending writes (writes may be put before their checkpoint).
const COUNT_THREAD_ROWS: &str = "SELECT (SELECT COUNT(*) FROM checkpoints WHERE tenant_id = ?1 AND session_id = ?2) \
     + (SELECT COUNT(*) FROM checkpoint_blobs WHERE tenant_id = ?1 AND session_id = ?2) \
     + (SELECT COUNT(*) FROM checkpoint_writes WHERE tenant_id = ?1 AND session_id = ?2)";
const DELETE_SESSION_CHECKPOINTS: &str = "DELETE FROM checkpoints WHERE session_id = ?1";
const DELETE_SESSION_BLOBS: &str = "DELETE FROM checkpoint_blobs WHERE session_id = ?1";
const DELETE_SESSION_WRITES: &str = "DELETE FROM checkpoint_writes WHERE session_id = ?1";
const DELETE_SESSION_THREADS: &str = "DELETE FROM threads WHERE session_id = ?1";
const COPY_CHECKPOINTS: &str = "INSERT INTO checkpoints (tenant_id, session_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, payload, metadata, channel_versions, run_id, created_at) \
     SELECT tenant_id, ?3, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, payload, metadata, channel_versions, run_id, created_at \
     FROM checkpoints WHERE tenant_id = ?1 AND session_id = ?2";
const COPY_BLOBS: &str = "INSERT INTO checkpoint_blobs (tenant_id, session_id, checkpoint_ns, channel, version, is_append, base_version, type, payload) \
     SELECT tenant_id, ?3, checkpoint_ns, channel, version, is_append, base_version, type, payload \
     FROM checkpoint_blobs WHERE tenant_id = ?1 AND session_id = ?2";
const COPY_WRITES: &str = "INSERT INTO checkpoint_writes (tenant_id, session_id, checkpoint_ns, checkpoint_id, task_id, idx, channel, type, payload, task_path, referenced) \
     SELECT tenant_id, ?3, checkpoint_ns, checkpoint_id, task_id, idx, channel, type, payload, task_path, referenced \
     FROM checkpoint_writes WHERE tenant_id = ?1 AND session_id = ?2";
const RUN_CHECKPOINTS: &str = "SELECT session_id, checkpoint_ns, checkpoint_id FROM checkpoints WHERE tenant_id = ?1 AND run_id = ?2";
const DELETE_CHECKPOINT: &str = "DELETE FROM checkpoints WHERE tenant_id = ?1 AND session_id = ?2 AND checkpoint_ns = ?3 AND checkpoint_id = ?4";
const DELETE_CHECKPOINT_WRITES: &str = "DELETE FROM checkpoint_writes WHERE tenant_id = ?1 AND session_id = ?2 AND checkpoint_ns = ?3 AND checkpoint_id = ?4";

fn execute(conn: &Connection, sql: &str, params: impl rusqlite::Params) -> Result<usize> {
    conn.prepare_cached(sql)
        .and_then(|mut s| s.execute(params))
        .map_err(map_sqlite)
}

fn find_thread(conn: &Connection, tenant: &str, thread_id: &str) -> Result<Option<Id>> {
    conn.prepare_cached(FIND_THREAD)
        .and_then(|mut s| {
            s.query_row(params![tenant, thread_id], |r| r.get::<_, Bid>(0))
                .optional()
        })
        .map(|b| b.map(|b| b.0))
        .map_err(map_sqlite)
}

fn count(conn: &Connection, sql: &str, params: impl rusqlite::Params) -> Result<u64> {
    conn.prepare_cached(sql)
        .and_then(|mut s| s.query_row(params, |r| r.get::<_, i64>(0)))
        .map(|n| n.max(0) as u64)
        .map_err(map_sqlite)
}

/// The thread's session, created (with its thread row) when the thread is new.
fn ensure_thread(
    conn: &Connection,
    tenant: &Tenant,
    thread_id: &str,
    user_id: &str,
    now: Timestamp,
) -> Result<(Id, bool)> {
    if let Some(id) = find_thread(conn, tenant.as_str(), thread_id)? {
        return Ok((id, false));
    }
    let name = (validate_name(thread_id).is_ok()
        && count(conn, NAME_TAKEN, params![tenant.as_str(), thread_id])? == 0)
        .then(|| thread_id.to_string());
    let session = NewSession {
        user_id: user_id.to_string(),
        name,
        metadata: json!({ "langgraph_thread_id": thread_id }),
        ..NewSession::default()
    }
    .into_session(tenant, now);
    let s = &session;
    execute(
        conn,
        INSERT_SESSION,
        params![
            bid(s.id),
            s.tenant_id,
            s.user_id,
            s.name,
            s.title,
            s.status.as_str(),
            s.related_type,
            s.related_id,
            s.initial_context_url,
            json_text(&s.metadata),
            now.0
        ],
    )
    .map_err(|e| match e {
        StoreError::Backend(m) => {
            StoreError::Backend(format!("creating the thread's session: {m}"))
        }
        other => other,
    })?;
    conn.prepare_cached(INSERT_THREAD)
        .and_then(|mut st| st.execute(params![tenant.as_str(), thread_id, bid(s.id), now.0]))
        .map_err(|e| {
            if is_unique_violation(&e) {
                StoreError::Conflict(format!("thread '{thread_id}' was created concurrently"))
            } else {
                map_sqlite(e)
            }
        })?;
    Ok((s.id, true))
}

/// Deletes every checkpoint row of a session and its thread row (session deletion and
/// retention call this; the session's own rows are theirs to delete).
pub(crate) fn delete_session_checkpoints(conn: &Connection, session_id: Id) -> Result<u64> {
    let n = execute(conn, DELETE_SESSION_CHECKPOINTS, params![bid(session_id)])? as u64;
    execute(conn, DELETE_SESSION_BLOBS, params![bid(session_id)])?;
    execute(conn, DELETE_SESSION_WRITES, params![bid(session_id)])?;
    execute(conn, DELETE_SESSION_THREADS, params![bid(session_id)])?;
    Ok(n)
}

fn checkpoint_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<CheckpointRow> {
    Ok(CheckpointRow {
        thread_id: r.get(0)?,
        session_id: r.get::<_, Bid>(1)?.0,
        checkpoint_ns: r.get(2)?,
        checkpoint_id: r.get(3)?,
        parent_checkpoint_id: r.get(4)?,
        type_name: r.get(5)?,
        payload: r.get(6)?,
        metadata: r.get(7)?,
        channel_versions: r.get(8)?,
        created_at: r.get(9)?,
    })
}

fn stored_blob(r: &rusqlite::Row<'_>) -> rusqlite::Result<StoredBlob> {
    Ok(StoredBlob {
        version: r.get(0)?,
        is_append: r.get::<_, i64>(1)? != 0,
        base_version: r.get(2)?,
        type_name: r.get(3)?,
        payload: r.get(4)?,
    })
}

fn blob_rows(
    conn: &Connection,
    sql: &str,
    params: impl rusqlite::Params,
) -> Result<HashMap<String, StoredBlob>> {
    conn.prepare_cached(sql)
        .and_then(|mut s| {
            s.query_map(params, stored_blob)?
                .map(|row| row.map(|b| (b.version.clone(), b)))
                .collect()
        })
        .map_err(map_sqlite)
}

/// Resolves the blobs and reads the writes of checkpoint rows.
fn complete(
    conn: &Connection,
    tenant: &str,
    rows: Vec<CheckpointRow>,
    have: &BTreeMap<String, String>,
) -> Result<Vec<CheckpointRecord>> {
    // Every (session, namespace, channel) once, with the versions wanted of it.
    let mut wanted: BTreeMap<(Id, String, String), Vec<String>> = BTreeMap::new();
    let mut versions = Vec::with_capacity(rows.len());
    for row in &rows {
        let parsed = row.versions();
        for (channel, version) in channel_version_pairs(&parsed) {
            wanted
                .entry((row.session_id, row.checkpoint_ns.clone(), channel))
                .or_default()
                .push(version);
        }
        versions.push(parsed);
    }
    let mut resolved = ResolvedBlobs::new();
    for ((session, ns, channel), versions) in wanted {
        let Some(top) = versions.iter().max() else {
            continue;
        };
        let held = have.get(&channel);
        // With a version the reader holds, the rows from it up usually make the chain.
        let mut rows = match held {
            Some(low) => blob_rows(
                conn,
                BLOBS_BETWEEN,
                params![tenant, bid(session), ns, channel, top, low],
            )?,
            None => blob_rows(
                conn,
                BLOBS_UP_TO,
                params![tenant, bid(session), ns, channel, top],
            )?,
        };
        let mut widened = false;
        for version in versions {
            let key = (session, ns.clone(), channel.clone(), version.clone());
            if resolved.contains_key(&key) {
                continue;
            }
            let held = held.map(String::as_str);
            let mut found = resolve_chain(&channel, &version, &rows, held)?;
            if found.is_none() && !widened {
                // A link sorts outside the rows read (versions need not be ordered).
                rows = blob_rows(conn, BLOBS_ALL, params![tenant, bid(session), ns, channel])?;
                widened = true;
                found = resolve_chain(&channel, &version, &rows, held)?;
            }
            if let Some(blob) = found {
                resolved.insert(key, blob);
            }
        }
    }
    let refs = write_refs_of(&resolved);
    if !refs.is_empty() {
        let mut values = HashMap::new();
        for key in refs {
            if let Some(value) = write_value(conn, tenant, key.0, &key.1, &key.2)? {
                values.insert(key, value);
            }
        }
        splice_writes(&mut resolved, &values)?;
    }
    let mut out = Vec::with_capacity(rows.len());
    for (row, channel_versions) in rows.into_iter().zip(versions) {
        let pending_writes = conn
            .prepare_cached(WRITES_OF)
            .and_then(|mut s| {
                s.query_map(
                    params![
                        tenant,
                        bid(row.session_id),
                        row.checkpoint_ns,
                        row.checkpoint_id
                    ],
                    |r| {
                        Ok((
                            r.get::<_, String>(0)?,
                            r.get::<_, i64>(1)?,
                            r.get::<_, String>(2)?,
                            r.get::<_, String>(3)?,
                            r.get::<_, Vec<u8>>(4)?,
                            r.get::<_, String>(5)?,
                        ))
                    },
                )?
                .collect::<rusqlite::Result<Vec<_>>>()
            })
            .map_err(map_sqlite)?
            .into_iter()
            .map(|(task_id, idx, channel, type_name, payload, task_path)| {
                Ok(WriteRecord {
                    task_id,
                    idx,
                    channel,
                    value: TypedValue {
                        type_name,
                        data: unpack_payload(&payload)?,
                    },
                    task_path,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        out.push(row.into_record(channel_versions, &resolved, pending_writes)?);
    }
    Ok(out)
}

/// The value of one pending write.
fn write_value(
    conn: &Connection,
    tenant: &str,
    session: Id,
    ns: &str,
    r: &WriteRef,
) -> Result<Option<TypedValue>> {
    let row: Option<(String, Vec<u8>)> = conn
        .prepare_cached(WRITE_VALUE)
        .and_then(|mut s| {
            s.query_row(
                params![tenant, bid(session), ns, r.checkpoint_id, r.task_id, r.idx],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .optional()
        })
        .map_err(map_sqlite)?;
    row.map(|(type_name, payload)| {
        Ok(TypedValue {
            type_name,
            data: unpack_payload(&payload)?,
        })
    })
    .transpose()
}

/// The rows `sql` answers for one `(tenant, session, ns)`.
fn ns_rows<T>(
    conn: &Connection,
    sql: &str,
    tenant: &str,
    session: Id,
    ns: &str,
    row: impl FnMut(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
) -> Result<Vec<T>> {
    conn.prepare_cached(sql)
        .and_then(|mut s| {
            s.query_map(params![tenant, bid(session), ns], row)?
                .collect()
        })
        .map_err(map_sqlite)
}

/// Every append blob's `base_version` is stored or comes in the same put, and every pending
/// write an item refers to is stored on its channel: a `Conflict` otherwise (the writer
/// sends the whole value instead).
fn check_bases(conn: &Connection, tenant: &str, session: Id, new: &NewCheckpoint) -> Result<()> {
    for (i, channel, r, item) in new.write_refs() {
        let key = params![
            tenant,
            bid(session),
            new.checkpoint_ns,
            r.checkpoint_id,
            r.task_id,
            r.idx
        ];
        let stored = conn
            .prepare_cached(WRITE_ROW)
            .and_then(|mut s| {
                s.query_row(key, |row| {
                    Ok(StoredRef {
                        channel: row.get(0)?,
                        payload: row.get(1)?,
                        referenced: row.get(2)?,
                    })
                })
                .optional()
            })
            .map_err(map_sqlite)?;
        check_write(i, channel, &r, item, stored)?;
        // Seen by the next item of this put too: a write stands for one item.
        execute(conn, MARK_REFERENCED, key)?;
    }
    for (i, channel, base) in new.outside_bases() {
        let stored = count(
            conn,
            BLOB_EXISTS,
            params![tenant, bid(session), new.checkpoint_ns, channel, base],
        )?;
        if stored == 0 {
            return Err(missing_base(i, channel, base));
        }
    }
    Ok(())
}

impl SqliteStore {
    pub(crate) async fn checkpoint_get(
        &self,
        tenant: &Tenant,
        thread_id: &str,
        checkpoint_ns: &str,
        checkpoint_id: Option<&str>,
        have: &BTreeMap<String, String>,
    ) -> Result<Option<CheckpointRecord>> {
        let have = have.clone();
        let (tenant, thread_id, ns) = (
            tenant.as_str().to_string(),
            thread_id.to_string(),
            checkpoint_ns.to_string(),
        );
        let checkpoint_id = checkpoint_id.map(str::to_string);
        self.read(move |conn, _| {
            let Some(session) = find_thread(conn, &tenant, &thread_id)? else {
                return Ok(None);
            };
            let sql = match checkpoint_id {
                Some(_) => format!(
                    "SELECT {CHECKPOINT_COLS} {CHECKPOINT_FROM} WHERE c.tenant_id = ?1 AND c.session_id = ?2 AND c.checkpoint_ns = ?3 AND c.checkpoint_id = ?4"
                ),
                None => format!(
                    "SELECT {CHECKPOINT_COLS} {CHECKPOINT_FROM} WHERE c.tenant_id = ?1 AND c.session_id = ?2 AND c.checkpoint_ns = ?3 AND ?4 IS NULL ORDER BY c.checkpoint_id DESC LIMIT 1"
                ),
            };
            let row = conn
                .prepare_cached(&sql)
                .and_then(|mut s| {
                    s.query_row(
                        params![tenant, bid(session), ns, checkpoint_id],
                        checkpoint_row,
                    )
                    .optional()
                })
                .map_err(map_sqlite)?;
            Ok(complete(conn, &tenant, row.into_iter().collect(), &have)?.pop())
        })
        .await
    }
}

impl stepwise_store::CheckpointStore for SqliteStore {
    async fn put_checkpoint(&self, tenant: &Tenant, new: NewCheckpoint) -> Result<CheckpointPut> {
        let tenant = tenant.clone();
        let now = self.now();
        let checkpoint_payload = pack_payload(&new.checkpoint.data);
        self.write(move |conn, published| {
            let (session, thread_created) =
                ensure_thread(conn, &tenant, &new.thread_id, &new.user_id, now)?;
            let t = tenant.as_str();
            let created = execute(
                conn,
                INSERT_CHECKPOINT,
                params![
                    t,
                    bid(session),
                    new.checkpoint_ns,
                    new.checkpoint_id,
                    new.parent_checkpoint_id,
                    new.checkpoint.type_name,
                    checkpoint_payload,
                    json_text(&new.metadata),
                    json_text(&Value::Object(new.channel_versions.clone())),
                    run_id_of(&new.metadata),
                    now.0
                ],
            )? > 0;
            if created {
                check_bases(conn, t, session, &new)?;
                for blob in &new.blobs {
                    let (is_append, base, type_name, payload) = blob.columns();
                    execute(
                        conn,
                        INSERT_BLOB,
                        params![
                            t,
                            bid(session),
                            new.checkpoint_ns,
                            blob.channel,
                            blob.version,
                            is_append,
                            base,
                            type_name,
                            payload
                        ],
                    )?;
                }
                execute(conn, TOUCH_SESSION, params![now.0, bid(session)])?;
                if new.announce {
                    let event = checkpoint_created(session, &new);
                    insert_announced(conn, &tenant, &[], vec![event], now, published)?;
                }
            }
            Ok(CheckpointPut {
                session_id: session,
                created,
                thread_created,
            })
        })
        .await
    }

    async fn put_checkpoint_writes(&self, tenant: &Tenant, put: PutWrites) -> Result<Id> {
        let tenant = tenant.clone();
        let now = self.now();
        self.write(move |conn, _| {
            let (session, _) = ensure_thread(conn, &tenant, &put.thread_id, &put.user_id, now)?;
            for write in &put.writes {
                let sql = if write.idx < 0 {
                    INSERT_WRITE_REPLACE
                } else {
                    INSERT_WRITE_KEEP
                };
                execute(
                    conn,
                    sql,
                    params![
                        tenant.as_str(),
                        bid(session),
                        put.checkpoint_ns,
                        put.checkpoint_id,
                        put.task_id,
                        write.idx,
                        write.channel,
                        write.value.type_name,
                        pack_payload(&write.value.data),
                        put.task_path
                    ],
                )?;
            }
            Ok(session)
        })
        .await
    }

    async fn get_checkpoint_since(
        &self,
        tenant: &Tenant,
        thread_id: &str,
        checkpoint_ns: &str,
        checkpoint_id: Option<&str>,
        have: &std::collections::BTreeMap<String, String>,
    ) -> Result<Option<CheckpointRecord>> {
        self.checkpoint_get(tenant, thread_id, checkpoint_ns, checkpoint_id, have)
            .await
    }

    async fn list_checkpoints(
        &self,
        tenant: &Tenant,
        query: CheckpointQuery,
    ) -> Result<Page<CheckpointRecord>> {
        let tenant = tenant.as_str().to_string();
        let after = query
            .cursor
            .as_deref()
            .map(checkpoint_cursor::decode)
            .transpose()?;
        let limit = query.limit();
        self.read(move |conn, _| {
            let mut sql = format!("SELECT {CHECKPOINT_COLS} {CHECKPOINT_FROM} WHERE c.tenant_id = ?");
            let mut args: Vec<Sql> = vec![Sql::Text(tenant.clone())];
            if let Some(thread_id) = &query.thread_id {
                let Some(session) = find_thread(conn, &tenant, thread_id)? else {
                    return Ok(Page { items: Vec::new(), next_cursor: None });
                };
                sql.push_str(" AND c.session_id = ?");
                args.push(Sql::Blob(session.as_bytes().to_vec()));
            }
            if let Some(ns) = &query.checkpoint_ns {
                sql.push_str(" AND c.checkpoint_ns = ?");
                args.push(Sql::Text(ns.clone()));
            }
            if let Some(before) = &query.before {
                sql.push_str(" AND c.checkpoint_id < ?");
                args.push(Sql::Text(before.clone()));
            }
            for (key, value) in &query.filter {
                sql.push_str(" AND (SELECT value FROM json_each(c.metadata) WHERE key = ?) IS json_extract(?, '$')");
                args.push(Sql::Text(key.clone()));
                args.push(Sql::Text(json_text(value)));
            }
            if let Some((id, session, ns)) = after {
                // The narrowest keyset the query's equalities allow (an index range).
                match (&query.thread_id, &query.checkpoint_ns) {
                    (Some(_), Some(_)) => {
                        sql.push_str(" AND c.checkpoint_id < ?");
                        args.push(Sql::Text(id));
                    }
                    (Some(_), None) => {
                        sql.push_str(" AND (c.checkpoint_id, c.checkpoint_ns) < (?, ?)");
                        args.push(Sql::Text(id));
                        args.push(Sql::Text(ns));
                    }
                    _ => {
                        sql.push_str(" AND (c.checkpoint_id, c.session_id, c.checkpoint_ns) < (?, ?, ?)");
                        args.push(Sql::Text(id));
                        args.push(Sql::Blob(session.as_bytes().to_vec()));
                        args.push(Sql::Text(ns));
                    }
                }
            }
            sql.push_str(" ORDER BY c.checkpoint_id DESC, c.session_id DESC, c.checkpoint_ns DESC LIMIT ?");
            args.push(Sql::Integer(i64::from(limit) + 1));
            let mut rows = conn
                .prepare_cached(&sql)
                .and_then(|mut s| s.query_map(params_from_iter(args), checkpoint_row)?.collect::<rusqlite::Result<Vec<_>>>())
                .map_err(map_sqlite)?;
            let next_cursor = if rows.len() > limit as usize {
                rows.truncate(limit as usize);
                rows.last().map(|r| checkpoint_cursor::encode(&r.checkpoint_id, r.session_id, &r.checkpoint_ns))
            } else {
                None
            };
            Ok(Page { items: complete(conn, &tenant, rows, &BTreeMap::new())?, next_cursor })
        })
        .await
    }

    async fn get_thread(&self, tenant: &Tenant, thread_id: &str) -> Result<Option<ThreadInfo>> {
        let (tenant, thread_id) = (tenant.as_str().to_string(), thread_id.to_string());
        self.read(move |conn, _| {
            let Some(session) = find_thread(conn, &tenant, &thread_id)? else {
                return Ok(None);
            };
            let checkpoints = count(conn, COUNT_CHECKPOINTS, params![tenant, bid(session)])?;
            Ok(Some(ThreadInfo {
                thread_id,
                session_id: session,
                checkpoints,
            }))
        })
        .await
    }

    async fn export_thread(
        &self,
        tenant: &Tenant,
        session_id: Id,
    ) -> Result<Option<DocumentThread>> {
        let tenant = tenant.as_str().to_string();
        self.read(move |conn, _| export_thread(conn, &tenant, session_id))
            .await
    }

    async fn delete_thread(&self, tenant: &Tenant, thread_id: &str) -> Result<bool> {
        let (tenant, thread_id) = (tenant.as_str().to_string(), thread_id.to_string());
        self.write(move |conn, _| {
            let Some(session) = find_thread(conn, &tenant, &thread_id)? else {
                return Ok(false);
            };
            delete_session_checkpoints(conn, session)?;
            crate::delete_session_rows(conn, session, &mut Default::default())?;
            Ok(true)
        })
        .await
    }

    async fn copy_thread(
        &self,
        tenant: &Tenant,
        source: &str,
        target: &str,
        user_id: &str,
    ) -> Result<Option<ThreadInfo>> {
        let tenant = tenant.clone();
        let (source, target, user_id) =
            (source.to_string(), target.to_string(), user_id.to_string());
        let now = self.now();
        self.write(move |conn, _| {
            let t = tenant.as_str();
            let Some(from) = find_thread(conn, t, &source)? else {
                return Ok(None);
            };
            if let Some(existing) = find_thread(conn, t, &target)?
                && count(conn, COUNT_THREAD_ROWS, params![t, bid(existing)])? > 0
            {
                return Err(StoreError::Conflict(format!(
                    "thread '{target}' already has checkpoints or pending writes"
                )));
            }
            let (to, _) = ensure_thread(conn, &tenant, &target, &user_id, now)?;
            if to == from {
                return Err(StoreError::Conflict(
                    "a thread cannot be copied onto itself".into(),
                ));
            }
            let checkpoints =
                execute(conn, COPY_CHECKPOINTS, params![t, bid(from), bid(to)])? as u64;
            execute(conn, COPY_BLOBS, params![t, bid(from), bid(to)])?;
            execute(conn, COPY_WRITES, params![t, bid(from), bid(to)])?;
            execute(conn, TOUCH_SESSION, params![now.0, bid(to)])?;
            Ok(Some(ThreadInfo {
                thread_id: target,
                session_id: to,
                checkpoints,
            }))
        })
        .await
    }

    async fn delete_checkpoints_for_runs(
        &self,
        tenant: &Tenant,
        run_ids: Vec<String>,
    ) -> Result<u64> {
        let tenant = tenant.as_str().to_string();
        self.write(move |conn, _| {
            let mut deleted = 0;
            for run_id in run_ids {
                let rows: Vec<(Bid, String, String)> = conn
                    .prepare_cached(RUN_CHECKPOINTS)
                    .and_then(|mut s| {
                        s.query_map(params![tenant, run_id], |r| {
                            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
                        })?
                        .collect()
                    })
                    .map_err(map_sqlite)?;
                let mut gone: BTreeMap<(Id, String), HashSet<String>> = BTreeMap::new();
                for (session, ns, id) in rows {
                    gone.entry((session.0, ns)).or_default().insert(id);
                }
                for ((session, ns), ids) in gone {
                    settle_writes(conn, &tenant, session, &ns, &ids)?;
                    for id in ids {
                        let key = (tenant.as_str(), bid(session), ns.as_str(), id.as_str());
                        execute(conn, DELETE_CHECKPOINT_WRITES, key)?;
                        deleted += execute(conn, DELETE_CHECKPOINT, key)? as u64;
                    }
                }
            }
            Ok(deleted)
        })
        .await
    }

    async fn prune_checkpoints(
        &self,
        tenant: &Tenant,
        thread_ids: Vec<String>,
        strategy: PruneStrategy,
    ) -> Result<u64> {
        let tenant = tenant.as_str().to_string();
        self.write(move |conn, _| {
            let mut deleted = 0;
            for thread_id in thread_ids {
                if let Some(session) = find_thread(conn, &tenant, &thread_id)? {
                    deleted += prune_thread(conn, &tenant, session, strategy)?;
                }
            }
            Ok(deleted)
        })
        .await
    }
}
