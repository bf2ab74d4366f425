//! LangGraph checkpoints on PostgreSQL (see `stepwise_store::checkpoints`): threads,
//! checkpoints, blobs and pending writes. Writes run in one transaction each on a pooled
//! connection; a thread is created under a transaction-scoped advisory lock on its id, so
//! two nodes putting the first checkpoint of a thread at once make one thread. Reads take
//! few round trips: the checkpoint rows (joined with their thread), then every blob row
//! the page's channels need (one query per thread and namespace, up to the newest wanted
//! version; the chains are walked in memory), then the pending writes of the whole page.
//!
//! `checkpoints/checks.rs`: what a put must satisfy before anything is written.
//! `checkpoints/cleanup.rs`: pruning and collecting what no checkpoint needs.
//! `checkpoints/document.rs`: export and import.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde_json::{Value, json};
use stepwise_core::document::DocumentThread;
use stepwise_core::name::validate_name;
use stepwise_core::{Id, Timestamp};
use stepwise_store::checkpoints::{
    CheckpointRow, ResolvedBlobs, StoredBlob, WriteRef, channel_version_pairs, checkpoint_created,
    checkpoint_cursor, pack_payload, resolve_chain, run_id_of, splice_writes, unpack_payload,
    write_refs_of,
};
use stepwise_store::{
    CheckpointPut, CheckpointQuery, CheckpointRecord, NewCheckpoint, NewSession, Page,
    PruneStrategy, PutWrites, Result, StoreError, Tenant, ThreadInfo, TypedValue, WriteRecord,
};
use tokio_postgres::GenericClient;
use tokio_postgres::Row;

mod checks;
mod cleanup;
mod document;

use checks::{check_bases, check_put};
use cleanup::{prune_thread, settle_writes};
use document::export_thread;
pub(crate) use document::import_thread;

use crate::PgStore;
use crate::mirrored::insert_announced;
use crate::sql::{
    self, Params, args, check_text, count, is_unique_violation, json_text, map_pg, pg,
};

const FIND_THREAD: &str = "SELECT session_id FROM threads WHERE tenant_id = $1 AND thread_id = $2";
const LOCK_THREAD: &str = "SELECT pg_advisory_xact_lock(hashtextextended($1, 13))";
const NAME_TAKEN: &str = "SELECT COUNT(*) AS n FROM sessions WHERE tenant_id = $1 AND name = $2";
const INSERT_SESSION: &str = "INSERT INTO sessions (id, tenant_id, user_id, name, title, status, related_type, related_id, initial_context_url, metadata, created_at, updated_at) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $11)";
const INSERT_THREAD: &str =
    "INSERT INTO threads (tenant_id, thread_id, session_id, created_at) VALUES ($1, $2, $3, $4)";
const TOUCH_SESSION: &str = "UPDATE sessions SET updated_at = GREATEST(updated_at, $1), status = CASE WHEN status = 'abandoned' THEN 'active' ELSE status END WHERE id = $2";
const INSERT_CHECKPOINT: &str = "INSERT INTO checkpoints (tenant_id, session_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, payload, metadata, channel_versions, run_id, created_at) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8::jsonb, $9, $10, $11) \
     ON CONFLICT (tenant_id, session_id, checkpoint_ns, checkpoint_id) DO NOTHING";
const INSERT_BLOBS: &str = "INSERT INTO checkpoint_blobs (tenant_id, session_id, checkpoint_ns, channel, version, is_append, base_version, type, payload) \
     SELECT $1, $2, $3, * FROM unnest($4::text[], $5::text[], $6::bool[], $7::text[], $8::text[], $9::bytea[]) \
     ON CONFLICT (tenant_id, session_id, checkpoint_ns, channel, version) DO NOTHING";
const INSERT_WRITES_KEEP: &str = "INSERT INTO checkpoint_writes (tenant_id, session_id, checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel, type, payload) \
     SELECT $1, $2, $3, $4, $5, $6, * FROM unnest($7::int8[], $8::text[], $9::text[], $10::bytea[]) \
     ON CONFLICT (tenant_id, session_id, checkpoint_ns, checkpoint_id, task_id, idx) DO NOTHING";
const INSERT_WRITES_REPLACE: &str = "INSERT INTO checkpoint_writes (tenant_id, session_id, checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel, type, payload) \
     SELECT $1, $2, $3, $4, $5, $6, * FROM unnest($7::int8[], $8::text[], $9::text[], $10::bytea[]) \
     ON CONFLICT (tenant_id, session_id, checkpoint_ns, checkpoint_id, task_id, idx) \
     DO UPDATE SET channel = excluded.channel, type = excluded.type, payload = excluded.payload, task_path = excluded.task_path";
const CHECKPOINT_COLS: &str = "(SELECT t.thread_id FROM threads t WHERE t.tenant_id = c.tenant_id AND t.session_id = c.session_id) AS thread_id, c.session_id, c.checkpoint_ns, c.checkpoint_id, c.parent_checkpoint_id, c.type, c.payload, c.metadata::text AS metadata, c.channel_versions, c.created_at";
/// Only `checkpoints` in FROM (the thread id is a subquery of each row answered), so the
/// order comes from its indexes.
const CHECKPOINT_FROM: &str = "FROM checkpoints c";
const OF_THREAD: &str =
    "c.session_id = (SELECT session_id FROM threads WHERE tenant_id = $1 AND thread_id = $2)";
const BLOBS_UP_TO: &str = "SELECT channel, version, is_append, base_version, type, payload FROM checkpoint_blobs \
     WHERE tenant_id = $1 AND session_id = $2 AND checkpoint_ns = $3 AND channel = ANY($4) AND version <= $5";
const BLOBS_SINCE: &str = "SELECT channel, version, is_append, base_version, type, payload FROM checkpoint_blobs b \
     WHERE tenant_id = $1 AND session_id = $2 AND checkpoint_ns = $3 AND channel = ANY($4) AND version <= $5 \
     AND NOT EXISTS (SELECT 1 FROM unnest($6::text[], $7::text[]) AS h(channel, version) \
                     WHERE h.channel = b.channel AND b.version < h.version COLLATE \"C\")";
const BLOBS_ALL: &str = "SELECT channel, version, is_append, base_version, type, payload FROM checkpoint_blobs \
     WHERE tenant_id = $1 AND session_id = $2 AND checkpoint_ns = $3 AND channel = ANY($4)";
const WRITES_OF: &str = "SELECT w.session_id, w.checkpoint_ns, w.checkpoint_id, w.task_id, w.idx, w.channel, w.type, w.payload, w.task_path \
     FROM checkpoint_writes w JOIN unnest($2::uuid[], $3::text[], $4::text[]) AS k(session_id, checkpoint_ns, checkpoint_id) \
     ON w.session_id = k.session_id AND w.checkpoint_ns = k.checkpoint_ns AND w.checkpoint_id = k.checkpoint_id \
     WHERE w.tenant_id = $1 ORDER BY w.task_path, w.task_id, w.idx";
const WRITE_VALUES: &str = "SELECT w.checkpoint_id, w.task_id, w.idx, w.type, w.payload \
     FROM checkpoint_writes w JOIN unnest($4::text[], $5::text[], $6::int8[]) AS k(checkpoint_id, task_id, idx) \
     ON w.checkpoint_id = k.checkpoint_id AND w.task_id = k.task_id AND w.idx = k.idx \
     WHERE w.tenant_id = $1 AND w.session_id = $2 AND w.checkpoint_ns = $3";
const RUN_CHECKPOINT_KEYS: &str = "SELECT session_id, checkpoint_ns, checkpoint_id FROM checkpoints \
     WHERE tenant_id = $1 AND run_id = ANY($2)";
const COUNT_CHECKPOINTS: &str =
    "SELECT COUNT(*) AS n FROM checkpoints WHERE tenant_id = $1 AND session_id = $2";
/// Whether a thread holds anything a copy would collide with: checkpoints, values or
/// pending writes (writes may be put before their checkpoint).
const COUNT_THREAD_ROWS: &str = "SELECT (SELECT COUNT(*) FROM checkpoints WHERE tenant_id = $1 AND session_id = $2) \
     + (SELECT COUNT(*) FROM checkpoint_blobs WHERE tenant_id = $1 AND session_id = $2) \
     + (SELECT COUNT(*) FROM checkpoint_writes WHERE tenant_id = $1 AND session_id = $2) AS n";
const COPY_CHECKPOINTS: &str = "INSERT INTO checkpoints (tenant_id, session_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, payload, metadata, channel_versions, run_id, created_at) \
     SELECT tenant_id, $3, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, payload, metadata, channel_versions, run_id, created_at \
     FROM checkpoints WHERE tenant_id = $1 AND session_id = $2";
const COPY_BLOBS: &str = "INSERT INTO checkpoint_blobs (tenant_id, session_id, checkpoint_ns, channel, version, is_append, base_version, type, payload) \
     SELECT tenant_id, $3, checkpoint_ns, channel, version, is_append, base_version, type, payload \
     FROM checkpoint_blobs WHERE tenant_id = $1 AND session_id = $2";
const COPY_WRITES: &str = "INSERT INTO checkpoint_writes (tenant_id, session_id, checkpoint_ns, checkpoint_id, task_id, idx, channel, type, payload, task_path, referenced) \
     SELECT tenant_id, $3, checkpoint_ns, checkpoint_id, task_id, idx, channel, type, payload, task_path, referenced \
     FROM checkpoint_writes WHERE tenant_id = $1 AND session_id = $2";
const DELETE_RUN_WRITES: &str = "DELETE FROM checkpoint_writes w USING checkpoints c \
     WHERE c.tenant_id = $1 AND c.run_id = ANY($2) AND w.tenant_id = c.tenant_id AND w.session_id = c.session_id \
     AND w.checkpoint_ns = c.checkpoint_ns AND w.checkpoint_id = c.checkpoint_id";
const DELETE_RUN_CHECKPOINTS: &str =
    "DELETE FROM checkpoints WHERE tenant_id = $1 AND run_id = ANY($2)";
const DELETE_SESSIONS_CHECKPOINTS: &str = "DELETE FROM checkpoints WHERE session_id = ANY($1)";
const DELETE_SESSIONS_BLOBS: &str = "DELETE FROM checkpoint_blobs WHERE session_id = ANY($1)";
const DELETE_SESSIONS_WRITES: &str = "DELETE FROM checkpoint_writes WHERE session_id = ANY($1)";
const DELETE_SESSIONS_THREADS: &str = "DELETE FROM threads WHERE session_id = ANY($1)";
const DELETE_SESSION_ROWS: [&str; 6] = [
    "DELETE FROM steps WHERE execution_id IN (SELECT id FROM executions WHERE session_id = $1)",
    "DELETE FROM snapshots WHERE execution_id IN (SELECT id FROM executions WHERE session_id = $1)",
    "DELETE FROM executions WHERE session_id = $1",
    "DELETE FROM messages WHERE session_id = $1",
    "DELETE FROM events WHERE session_id = $1",
    "DELETE FROM sessions WHERE id = $1",
];

/// Deletes every checkpoint row of these sessions and their thread rows (session deletion
/// and retention call this in their transactions).
#[allow(clippy::ptr_arg)]
pub(crate) async fn delete_sessions_checkpoints(
    c: &impl GenericClient,
    sessions: &Vec<Id>,
) -> Result<()> {
    for sql in [
        DELETE_SESSIONS_CHECKPOINTS,
        DELETE_SESSIONS_BLOBS,
        DELETE_SESSIONS_WRITES,
        DELETE_SESSIONS_THREADS,
    ] {
        c.execute_typed(sql, args![*sessions])
            .await
            .map_err(map_pg)?;
    }
    Ok(())
}

async fn find_thread(c: &impl GenericClient, tenant: &str, thread_id: &str) -> Result<Option<Id>> {
    let row = c
        .query_typed_opt(FIND_THREAD, args![tenant, thread_id])
        .await
        .map_err(map_pg)?;
    row.as_ref()
        .map(|r| sql::get::<Id>(r, "session_id"))
        .transpose()
}

/// The thread's session, created (with its thread row) when the thread is new. Runs in the
/// caller's transaction; creation holds an advisory lock on the thread until it ends.
async fn ensure_thread(
    c: &impl GenericClient,
    tenant: &Tenant,
    thread_id: &str,
    user_id: &str,
    now: Timestamp,
) -> Result<(Id, bool)> {
    let t = tenant.as_str();
    if let Some(id) = find_thread(c, t, thread_id).await? {
        return Ok((id, false));
    }
    let key = format!("{t}\u{1}{thread_id}");
    c.query_typed(LOCK_THREAD, args![key])
        .await
        .map_err(map_pg)?;
    if let Some(id) = find_thread(c, t, thread_id).await? {
        return Ok((id, false));
    }
    let name = (validate_name(thread_id).is_ok()
        && count(c, NAME_TAKEN, args![t, thread_id]).await? == 0)
        .then(|| thread_id.to_string());
    let session = NewSession {
        user_id: user_id.to_string(),
        name,
        metadata: json!({ "langgraph_thread_id": thread_id }),
        ..NewSession::default()
    }
    .into_session(tenant, now);
    let s = &session;
    c.execute_typed(
        INSERT_SESSION,
        args![
            s.id,
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
    .await
    .map_err(|e| {
        if is_unique_violation(&e) {
            StoreError::Conflict(format!(
                "a session named '{thread_id}' was created concurrently; try again"
            ))
        } else {
            map_pg(e)
        }
    })?;
    c.execute_typed(INSERT_THREAD, args![t, thread_id, s.id, now.0])
        .await
        .map_err(map_pg)?;
    Ok((s.id, true))
}

fn checkpoint_row(r: &Row) -> Result<CheckpointRow> {
    Ok(CheckpointRow {
        thread_id: sql::get(r, "thread_id")?,
        session_id: sql::get(r, "session_id")?,
        checkpoint_ns: sql::get(r, "checkpoint_ns")?,
        checkpoint_id: sql::get(r, "checkpoint_id")?,
        parent_checkpoint_id: sql::get(r, "parent_checkpoint_id")?,
        type_name: sql::get(r, "type")?,
        payload: sql::get(r, "payload")?,
        metadata: sql::get(r, "metadata")?,
        channel_versions: sql::get(r, "channel_versions")?,
        created_at: sql::get(r, "created_at")?,
    })
}

/// Blob rows by channel, then version.
type ChannelRows = HashMap<String, HashMap<String, StoredBlob>>;

async fn blob_rows(
    c: &impl GenericClient,
    sql_text: &str,
    params: &[(
        &(dyn tokio_postgres::types::ToSql + Sync),
        tokio_postgres::types::Type,
    )],
) -> Result<ChannelRows> {
    let rows = c.query_typed(sql_text, params).await.map_err(map_pg)?;
    let mut out: ChannelRows = HashMap::new();
    for r in &rows {
        let blob = StoredBlob {
            version: sql::get(r, "version")?,
            is_append: sql::get(r, "is_append")?,
            base_version: sql::get(r, "base_version")?,
            type_name: sql::get(r, "type")?,
            payload: sql::get(r, "payload")?,
        };
        out.entry(sql::get(r, "channel")?)
            .or_default()
            .insert(blob.version.clone(), blob);
    }
    Ok(out)
}

/// Resolves the blobs and reads the writes of checkpoint rows.
async fn complete(
    c: &impl GenericClient,
    tenant: &str,
    rows: Vec<CheckpointRow>,
    have: &BTreeMap<String, String>,
) -> Result<Vec<CheckpointRecord>> {
    // Per (session, namespace): the channels and versions wanted.
    let mut wanted: BTreeMap<(Id, String), Vec<(String, String)>> = BTreeMap::new();
    let mut versions = Vec::with_capacity(rows.len());
    for row in &rows {
        let parsed = row.versions();
        let pairs = channel_version_pairs(&parsed);
        wanted
            .entry((row.session_id, row.checkpoint_ns.clone()))
            .or_default()
            .extend(pairs);
        versions.push(parsed);
    }
    let mut resolved = ResolvedBlobs::new();
    for ((session, ns), pairs) in wanted {
        let Some(top) = pairs.iter().map(|(_, v)| v.clone()).max() else {
            continue;
        };
        let channels: Vec<String> = pairs
            .iter()
            .map(|(c, _)| c.clone())
            .collect::<HashSet<_>>()
            .into_iter()
            .collect();
        let (held_channels, held_versions): (Vec<String>, Vec<String>) = have
            .iter()
            .filter(|(c, _)| channels.contains(c))
            .map(|(c, v)| (c.clone(), v.clone()))
            .unzip();
        // With versions the reader holds, the rows from them up usually make the chains.
        let mut rows = if held_channels.is_empty() {
            blob_rows(c, BLOBS_UP_TO, args![tenant, session, ns, channels, top]).await?
        } else {
            blob_rows(
                c,
                BLOBS_SINCE,
                args![
                    tenant,
                    session,
                    ns,
                    channels,
                    top,
                    held_channels,
                    held_versions
                ],
            )
            .await?
        };
        let mut widened = false;
        for (channel, version) in pairs {
            let key = (session, ns.clone(), channel.clone(), version.clone());
            if resolved.contains_key(&key) {
                continue;
            }
            let empty = HashMap::new();
            let held = have.get(&channel).map(String::as_str);
            let mut found = resolve_chain(
                &channel,
                &version,
                rows.get(&channel).unwrap_or(&empty),
                held,
            )?;
            if found.is_none() && !widened {
                // A link sorts outside the rows read (versions need not be ordered).
                rows = blob_rows(c, BLOBS_ALL, args![tenant, session, ns, channels]).await?;
                widened = true;
                found = resolve_chain(
                    &channel,
                    &version,
                    rows.get(&channel).unwrap_or(&empty),
                    held,
                )?;
            }
            if let Some(blob) = found {
                resolved.insert(key, blob);
            }
        }
    }
    let refs = write_refs_of(&resolved);
    if !refs.is_empty() {
        let mut by_ns: HashMap<(Id, String), Vec<WriteRef>> = HashMap::new();
        for (session, ns, r) in refs {
            by_ns.entry((session, ns)).or_default().push(r);
        }
        let mut values = HashMap::new();
        for ((session, ns), refs) in by_ns {
            for (r, value) in write_values(c, tenant, session, &ns, &refs).await? {
                values.insert((session, ns.clone(), r), value);
            }
        }
        splice_writes(&mut resolved, &values)?;
    }
    let mut writes: HashMap<(Id, String, String), Vec<WriteRecord>> = HashMap::new();
    if !rows.is_empty() {
        let sessions: Vec<Id> = rows.iter().map(|r| r.session_id).collect();
        let namespaces: Vec<String> = rows.iter().map(|r| r.checkpoint_ns.clone()).collect();
        let ids: Vec<String> = rows.iter().map(|r| r.checkpoint_id.clone()).collect();
        let found = c
            .query_typed(WRITES_OF, args![tenant, sessions, namespaces, ids])
            .await
            .map_err(map_pg)?;
        for r in &found {
            let payload: Vec<u8> = sql::get(r, "payload")?;
            writes
                .entry((
                    sql::get(r, "session_id")?,
                    sql::get(r, "checkpoint_ns")?,
                    sql::get(r, "checkpoint_id")?,
                ))
                .or_default()
                .push(WriteRecord {
                    task_id: sql::get(r, "task_id")?,
                    idx: sql::get(r, "idx")?,
                    channel: sql::get(r, "channel")?,
                    value: TypedValue {
                        type_name: sql::get(r, "type")?,
                        data: unpack_payload(&payload)?,
                    },
                    task_path: sql::get(r, "task_path")?,
                });
        }
    }
    let mut out = Vec::with_capacity(rows.len());
    for (row, channel_versions) in rows.into_iter().zip(versions) {
        let pending_writes = writes
            .remove(&(
                row.session_id,
                row.checkpoint_ns.clone(),
                row.checkpoint_id.clone(),
            ))
            .unwrap_or_default();
        out.push(row.into_record(channel_versions, &resolved, pending_writes)?);
    }
    Ok(out)
}

/// The values of pending writes of `(session, ns)` (those stored).
async fn write_values(
    c: &impl GenericClient,
    tenant: &str,
    session: Id,
    ns: &str,
    refs: &[WriteRef],
) -> Result<Vec<(WriteRef, TypedValue)>> {
    let ids: Vec<String> = refs.iter().map(|r| r.checkpoint_id.clone()).collect();
    let tasks: Vec<String> = refs.iter().map(|r| r.task_id.clone()).collect();
    let idxs: Vec<i64> = refs.iter().map(|r| r.idx).collect();
    let found = c
        .query_typed(WRITE_VALUES, args![tenant, session, ns, ids, tasks, idxs])
        .await
        .map_err(map_pg)?;
    found
        .iter()
        .map(|r| {
            let payload: Vec<u8> = sql::get(r, "payload")?;
            Ok((
                WriteRef {
                    checkpoint_id: sql::get(r, "checkpoint_id")?,
                    task_id: sql::get(r, "task_id")?,
                    idx: sql::get(r, "idx")?,
                },
                TypedValue {
                    type_name: sql::get(r, "type")?,
                    data: unpack_payload(&payload)?,
                },
            ))
        })
        .collect()
}

impl PgStore {
    pub(crate) async fn checkpoint_get(
        &self,
        tenant: &Tenant,
        thread_id: &str,
        checkpoint_ns: &str,
        checkpoint_id: Option<&str>,
        have: &BTreeMap<String, String>,
    ) -> Result<Option<CheckpointRecord>> {
        if thread_id.contains('\0')
            || checkpoint_ns.contains('\0')
            || checkpoint_id.is_some_and(|i| i.contains('\0'))
        {
            return Ok(None);
        }
        let t = tenant.as_str();
        let client = self.client().await?;
        let c = &**client;
        let row = match checkpoint_id {
            Some(id) => {
                let sql = format!("SELECT {CHECKPOINT_COLS} {CHECKPOINT_FROM} WHERE c.tenant_id = $1 AND {OF_THREAD} AND c.checkpoint_ns = $3 AND c.checkpoint_id = $4");
                c.query_typed_opt(&sql, args![t, thread_id, checkpoint_ns, id]).await
            }
            None => {
                let sql = format!("SELECT {CHECKPOINT_COLS} {CHECKPOINT_FROM} WHERE c.tenant_id = $1 AND {OF_THREAD} AND c.checkpoint_ns = $3 ORDER BY c.checkpoint_id DESC LIMIT 1");
                c.query_typed_opt(&sql, args![t, thread_id, checkpoint_ns]).await
            }
        }
        .map_err(map_pg)?;
        let Some(row) = row else { return Ok(None) };
        Ok(complete(c, t, vec![checkpoint_row(&row)?], have)
            .await?
            .pop())
    }
}

impl stepwise_store::CheckpointStore for PgStore {
    async fn put_checkpoint(&self, tenant: &Tenant, new: NewCheckpoint) -> Result<CheckpointPut> {
        check_put(&new)?;
        if new.announce {
            // Events queued before this put keep the lower ids (its event is stored below).
            self.inner.writer.flush().await?;
        }
        let now = self.now();
        let t = tenant.as_str();
        let mut client = self.client().await?;
        let tx = pg(&mut client).transaction().await.map_err(map_pg)?;
        let (session, thread_created) =
            ensure_thread(&tx, tenant, &new.thread_id, &new.user_id, now).await?;
        let created = tx
            .execute_typed(
                INSERT_CHECKPOINT,
                args![
                    t,
                    session,
                    new.checkpoint_ns,
                    new.checkpoint_id,
                    new.parent_checkpoint_id,
                    new.checkpoint.type_name,
                    pack_payload(&new.checkpoint.data),
                    json_text(&new.metadata),
                    json_text(&Value::Object(new.channel_versions.clone())),
                    run_id_of(&new.metadata),
                    now.0
                ],
            )
            .await
            .map_err(map_pg)?
            > 0;
        let mut published = Vec::new();
        if created {
            check_bases(&tx, t, session, &new).await?;
            if !new.blobs.is_empty() {
                let mut channels = Vec::with_capacity(new.blobs.len());
                let mut versions = Vec::with_capacity(new.blobs.len());
                let mut appends = Vec::with_capacity(new.blobs.len());
                let mut bases: Vec<Option<String>> = Vec::with_capacity(new.blobs.len());
                let mut types: Vec<Option<String>> = Vec::with_capacity(new.blobs.len());
                let mut payloads = Vec::with_capacity(new.blobs.len());
                for blob in &new.blobs {
                    let (is_append, base, type_name, payload) = blob.columns();
                    channels.push(blob.channel.clone());
                    versions.push(blob.version.clone());
                    appends.push(is_append);
                    bases.push(base.map(str::to_string));
                    types.push(type_name.map(str::to_string));
                    payloads.push(payload);
                }
                tx.execute_typed(
                    INSERT_BLOBS,
                    args![
                        t,
                        session,
                        new.checkpoint_ns,
                        channels,
                        versions,
                        appends,
                        bases,
                        types,
                        payloads
                    ],
                )
                .await
                .map_err(map_pg)?;
            }
            tx.execute_typed(TOUCH_SESSION, args![now.0, session])
                .await
                .map_err(map_pg)?;
            if new.announce {
                let event = checkpoint_created(session, &new);
                published = insert_announced(&tx, tenant, session, &[], vec![event], now).await?;
            }
        }
        tx.commit().await.map_err(map_pg)?;
        self.inner.relay.committed_locally(published);
        Ok(CheckpointPut {
            session_id: session,
            created,
            thread_created,
        })
    }

    async fn put_checkpoint_writes(&self, tenant: &Tenant, put: PutWrites) -> Result<Id> {
        for text in [
            &put.thread_id,
            &put.checkpoint_ns,
            &put.checkpoint_id,
            &put.task_id,
            &put.task_path,
        ] {
            check_text("writes", text)?;
        }
        for w in &put.writes {
            check_text("writes", &w.channel)?;
            check_text("writes", &w.value.type_name)?;
        }
        let now = self.now();
        let t = tenant.as_str();
        let mut client = self.client().await?;
        let tx = pg(&mut client).transaction().await.map_err(map_pg)?;
        let (session, _) = ensure_thread(&tx, tenant, &put.thread_id, &put.user_id, now).await?;
        for special in [true, false] {
            let part: Vec<_> = put
                .writes
                .iter()
                .filter(|w| (w.idx < 0) == special)
                .collect();
            if part.is_empty() {
                continue;
            }
            // One row per (task, idx) in a statement (ON CONFLICT cannot touch a row twice):
            // the last of a replaced index wins, the first of a kept one.
            let mut seen = HashSet::new();
            let part: Vec<_> = if special {
                let mut last: Vec<_> = part
                    .into_iter()
                    .rev()
                    .filter(|w| seen.insert(w.idx))
                    .collect();
                last.reverse();
                last
            } else {
                part.into_iter().filter(|w| seen.insert(w.idx)).collect()
            };
            let idx: Vec<i64> = part.iter().map(|w| w.idx).collect();
            let channels: Vec<String> = part.iter().map(|w| w.channel.clone()).collect();
            let types: Vec<String> = part.iter().map(|w| w.value.type_name.clone()).collect();
            let payloads: Vec<Vec<u8>> = part.iter().map(|w| pack_payload(&w.value.data)).collect();
            let sql = if special {
                INSERT_WRITES_REPLACE
            } else {
                INSERT_WRITES_KEEP
            };
            tx.execute_typed(
                sql,
                args![
                    t,
                    session,
                    put.checkpoint_ns,
                    put.checkpoint_id,
                    put.task_id,
                    put.task_path,
                    idx,
                    channels,
                    types,
                    payloads
                ],
            )
            .await
            .map_err(map_pg)?;
        }
        tx.commit().await.map_err(map_pg)?;
        Ok(session)
    }

    async fn get_checkpoint_since(
        &self,
        tenant: &Tenant,
        thread_id: &str,
        checkpoint_ns: &str,
        checkpoint_id: Option<&str>,
        have: &std::collections::BTreeMap<String, String>,
    ) -> Result<Option<stepwise_store::CheckpointRecord>> {
        self.checkpoint_get(tenant, thread_id, checkpoint_ns, checkpoint_id, have)
            .await
    }

    async fn list_checkpoints(
        &self,
        tenant: &Tenant,
        query: CheckpointQuery,
    ) -> Result<Page<CheckpointRecord>> {
        let after = query
            .cursor
            .as_deref()
            .map(checkpoint_cursor::decode)
            .transpose()?;
        let limit = query.limit();
        let texts = query
            .thread_id
            .iter()
            .chain(&query.checkpoint_ns)
            .chain(&query.before);
        if texts.into_iter().any(|t| t.contains('\0')) {
            return Ok(Page {
                items: Vec::new(),
                next_cursor: None,
            });
        }
        let t = tenant.as_str();
        let client = self.client().await?;
        let c = &**client;
        let mut p = Params::default();
        let mut sql = format!(
            "SELECT {CHECKPOINT_COLS} {CHECKPOINT_FROM} WHERE c.tenant_id = {}",
            p.push(t.to_string())
        );
        if let Some(thread_id) = &query.thread_id {
            let Some(session) = find_thread(c, t, thread_id).await? else {
                return Ok(Page {
                    items: Vec::new(),
                    next_cursor: None,
                });
            };
            sql.push_str(&format!(" AND c.session_id = {}", p.push(session)));
        }
        if let Some(ns) = &query.checkpoint_ns {
            sql.push_str(&format!(" AND c.checkpoint_ns = {}", p.push(ns.clone())));
        }
        if let Some(before) = &query.before {
            sql.push_str(&format!(
                " AND c.checkpoint_id < {}",
                p.push(before.clone())
            ));
        }
        for (key, value) in &query.filter {
            let text = json_text(value);
            if key.contains('\0') || text.contains("\\u0000") {
                return Ok(Page {
                    items: Vec::new(),
                    next_cursor: None,
                });
            }
            sql.push_str(&format!(
                " AND COALESCE(c.metadata -> {}, 'null'::jsonb) = {}::jsonb",
                p.push(key.clone()),
                p.push(text)
            ));
        }
        if let Some((id, session, ns)) = after {
            match (&query.thread_id, &query.checkpoint_ns) {
                (Some(_), Some(_)) => {
                    sql.push_str(&format!(" AND c.checkpoint_id < {}", p.push(id)))
                }
                (Some(_), None) => sql.push_str(&format!(
                    " AND (c.checkpoint_id, c.checkpoint_ns) < ({}, {})",
                    p.push(id),
                    p.push(ns)
                )),
                _ => sql.push_str(&format!(
                    " AND (c.checkpoint_id, c.session_id, c.checkpoint_ns) < ({}, {}, {})",
                    p.push(id),
                    p.push(session),
                    p.push(ns)
                )),
            }
        }
        sql.push_str(&format!(
            " ORDER BY c.checkpoint_id DESC, c.session_id DESC, c.checkpoint_ns DESC LIMIT {}",
            p.push(i64::from(limit) + 1)
        ));
        let found = c.query_typed(&sql, &p.refs()).await.map_err(map_pg)?;
        let mut rows = found
            .iter()
            .map(checkpoint_row)
            .collect::<Result<Vec<_>>>()?;
        let next_cursor = if rows.len() > limit as usize {
            rows.truncate(limit as usize);
            rows.last().map(|r| {
                checkpoint_cursor::encode(&r.checkpoint_id, r.session_id, &r.checkpoint_ns)
            })
        } else {
            None
        };
        Ok(Page {
            items: complete(c, t, rows, &BTreeMap::new()).await?,
            next_cursor,
        })
    }

    async fn get_thread(&self, tenant: &Tenant, thread_id: &str) -> Result<Option<ThreadInfo>> {
        if thread_id.contains('\0') {
            return Ok(None);
        }
        let client = self.client().await?;
        let c = &**client;
        let Some(session) = find_thread(c, tenant.as_str(), thread_id).await? else {
            return Ok(None);
        };
        let checkpoints = count(c, COUNT_CHECKPOINTS, args![tenant.as_str(), session]).await?;
        Ok(Some(ThreadInfo {
            thread_id: thread_id.to_string(),
            session_id: session,
            checkpoints,
        }))
    }

    async fn export_thread(
        &self,
        tenant: &Tenant,
        session_id: Id,
    ) -> Result<Option<DocumentThread>> {
        let client = self.client().await?;
        export_thread(&**client, tenant.as_str(), session_id).await
    }

    async fn delete_thread(&self, tenant: &Tenant, thread_id: &str) -> Result<bool> {
        if thread_id.contains('\0') {
            return Ok(false);
        }
        let mut client = self.client().await?;
        let tx = pg(&mut client).transaction().await.map_err(map_pg)?;
        let Some(session) = find_thread(&tx, tenant.as_str(), thread_id).await? else {
            return Ok(false);
        };
        delete_sessions_checkpoints(&tx, &vec![session]).await?;
        for sql in DELETE_SESSION_ROWS {
            tx.execute_typed(sql, args![session])
                .await
                .map_err(map_pg)?;
        }
        tx.commit().await.map_err(map_pg)?;
        Ok(true)
    }

    async fn copy_thread(
        &self,
        tenant: &Tenant,
        source: &str,
        target: &str,
        user_id: &str,
    ) -> Result<Option<ThreadInfo>> {
        if source.contains('\0') {
            return Ok(None);
        }
        check_text("target_thread_id", target)?;
        let t = tenant.as_str();
        let now = self.now();
        let mut client = self.client().await?;
        let tx = pg(&mut client).transaction().await.map_err(map_pg)?;
        let Some(from) = find_thread(&tx, t, source).await? else {
            return Ok(None);
        };
        if let Some(existing) = find_thread(&tx, t, target).await?
            && count(&tx, COUNT_THREAD_ROWS, args![t, existing]).await? > 0
        {
            return Err(StoreError::Conflict(format!(
                "thread '{target}' already has checkpoints or pending writes"
            )));
        }
        let (to, _) = ensure_thread(&tx, tenant, target, user_id, now).await?;
        if to == from {
            return Err(StoreError::Conflict(
                "a thread cannot be copied onto itself".into(),
            ));
        }
        let checkpoints = tx
            .execute_typed(COPY_CHECKPOINTS, args![t, from, to])
            .await
            .map_err(map_pg)?;
        for sql in [COPY_BLOBS, COPY_WRITES] {
            tx.execute_typed(sql, args![t, from, to])
                .await
                .map_err(map_pg)?;
        }
        tx.execute_typed(TOUCH_SESSION, args![now.0, to])
            .await
            .map_err(map_pg)?;
        tx.commit().await.map_err(|e| {
            if is_unique_violation(&e) {
                StoreError::Conflict(format!("thread '{target}' was written concurrently"))
            } else {
                map_pg(e)
            }
        })?;
        Ok(Some(ThreadInfo {
            thread_id: target.to_string(),
            session_id: to,
            checkpoints,
        }))
    }

    async fn delete_checkpoints_for_runs(
        &self,
        tenant: &Tenant,
        run_ids: Vec<String>,
    ) -> Result<u64> {
        let run_ids: Vec<String> = run_ids.into_iter().filter(|r| !r.contains('\0')).collect();
        if run_ids.is_empty() {
            return Ok(0);
        }
        let t = tenant.as_str();
        let mut client = self.client().await?;
        let tx = pg(&mut client).transaction().await.map_err(map_pg)?;
        let mut gone: BTreeMap<(Id, String), HashSet<String>> = BTreeMap::new();
        for r in tx
            .query_typed(RUN_CHECKPOINT_KEYS, args![t, run_ids])
            .await
            .map_err(map_pg)?
        {
            gone.entry((sql::get(&r, "session_id")?, sql::get(&r, "checkpoint_ns")?))
                .or_default()
                .insert(sql::get(&r, "checkpoint_id")?);
        }
        for ((session, ns), ids) in &gone {
            settle_writes(&tx, t, *session, ns, ids).await?;
        }
        tx.execute_typed(DELETE_RUN_WRITES, args![t, run_ids])
            .await
            .map_err(map_pg)?;
        let n = tx
            .execute_typed(DELETE_RUN_CHECKPOINTS, args![t, run_ids])
            .await
            .map_err(map_pg)?;
        tx.commit().await.map_err(map_pg)?;
        Ok(n)
    }

    async fn prune_checkpoints(
        &self,
        tenant: &Tenant,
        thread_ids: Vec<String>,
        strategy: PruneStrategy,
    ) -> Result<u64> {
        let t = tenant.as_str();
        let mut client = self.client().await?;
        let tx = pg(&mut client).transaction().await.map_err(map_pg)?;
        let mut deleted = 0;
        for thread_id in thread_ids.iter().filter(|t| !t.contains('\0')) {
            if let Some(session) = find_thread(&tx, t, thread_id).await? {
                deleted += prune_thread(&tx, t, session, strategy).await?;
            }
        }
        tx.commit().await.map_err(map_pg)?;
        Ok(deleted)
    }
}
