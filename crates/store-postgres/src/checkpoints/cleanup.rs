//! Deleting checkpoints on PostgreSQL: pruning a thread (`keep_latest` keeps each
//! namespace's newest checkpoint), collecting the blobs no checkpoint needs any more, and
//! copying the values of pending writes into the append items that refer to them before
//! the writes go.

use std::collections::{HashMap, HashSet};

use serde_json::Value;
use stepwise_core::Id;
use stepwise_store::checkpoints::{
    WriteRef, chain_versions, channel_version_pairs, refs_to, settle_payload,
};
use stepwise_store::{PruneStrategy, Result, TypedValue};
use tokio_postgres::GenericClient;

use super::write_values;
use crate::sql::{self, args, map_pg};

const APPENDS_OF_NS: &str = "SELECT channel, version, payload FROM checkpoint_blobs \
     WHERE tenant_id = $1 AND session_id = $2 AND checkpoint_ns = $3 AND is_append";
const SET_BLOB_PAYLOAD: &str = "UPDATE checkpoint_blobs SET payload = $6 \
     WHERE tenant_id = $1 AND session_id = $2 AND checkpoint_ns = $3 AND channel = $4 AND version = $5";
const WRITE_CHECKPOINTS_OTHER_THAN: &str = "SELECT DISTINCT checkpoint_id FROM checkpoint_writes \
     WHERE tenant_id = $1 AND session_id = $2 AND checkpoint_ns = $3 AND checkpoint_id <> $4";
const LATEST_PER_NS: &str = "SELECT checkpoint_ns, MAX(checkpoint_id) AS latest FROM checkpoints \
     WHERE tenant_id = $1 AND session_id = $2 GROUP BY checkpoint_ns";
const DELETE_OLDER: &str = "DELETE FROM checkpoints WHERE tenant_id = $1 AND session_id = $2 AND checkpoint_ns = $3 AND checkpoint_id < $4";
const DELETE_OLDER_WRITES: &str = "DELETE FROM checkpoint_writes WHERE tenant_id = $1 AND session_id = $2 AND checkpoint_ns = $3 AND checkpoint_id <> $4";
const VERSIONS_OF_NS: &str = "SELECT channel_versions FROM checkpoints WHERE tenant_id = $1 AND session_id = $2 AND checkpoint_ns = $3";
const BLOB_LINKS_OF_NS: &str = "SELECT channel, version, base_version FROM checkpoint_blobs WHERE tenant_id = $1 AND session_id = $2 AND checkpoint_ns = $3";
const DELETE_BLOBS: &str = "DELETE FROM checkpoint_blobs b USING unnest($4::text[], $5::text[]) AS k(channel, version) \
     WHERE b.tenant_id = $1 AND b.session_id = $2 AND b.checkpoint_ns = $3 AND b.channel = k.channel AND b.version = k.version";
const DELETE_THREAD_CHECKPOINTS: &str =
    "DELETE FROM checkpoints WHERE tenant_id = $1 AND session_id = $2";
const DELETE_THREAD_BLOBS: &str =
    "DELETE FROM checkpoint_blobs WHERE tenant_id = $1 AND session_id = $2";
const DELETE_THREAD_WRITES: &str =
    "DELETE FROM checkpoint_writes WHERE tenant_id = $1 AND session_id = $2";

/// Before the pending writes of `gone` checkpoints of `(session, ns)` are deleted, the
/// append items that refer to them take a copy of their values.
pub(super) async fn settle_writes(
    c: &impl GenericClient,
    tenant: &str,
    session: Id,
    ns: &str,
    gone: &HashSet<String>,
) -> Result<()> {
    if gone.is_empty() {
        return Ok(());
    }
    let appends = c
        .query_typed(APPENDS_OF_NS, args![tenant, session, ns])
        .await
        .map_err(map_pg)?;
    for row in &appends {
        let payload: Vec<u8> = sql::get(row, "payload")?;
        let refs = refs_to(&payload, gone)?;
        if refs.is_empty() {
            continue;
        }
        let values: HashMap<WriteRef, TypedValue> = write_values(c, tenant, session, ns, &refs)
            .await?
            .into_iter()
            .collect();
        if let Some(payload) = settle_payload(&payload, gone, |r| Ok(values.get(r).cloned()))? {
            let (channel, version): (String, String) =
                (sql::get(row, "channel")?, sql::get(row, "version")?);
            c.execute_typed(
                SET_BLOB_PAYLOAD,
                args![tenant, session, ns, channel, version, payload],
            )
            .await
            .map_err(map_pg)?;
        }
    }
    Ok(())
}

/// Deletes the blobs of `(session, ns)` that no remaining checkpoint needs.
async fn collect_blobs(c: &impl GenericClient, tenant: &str, session: Id, ns: &str) -> Result<()> {
    let kept = c
        .query_typed(VERSIONS_OF_NS, args![tenant, session, ns])
        .await
        .map_err(map_pg)?;
    let stored = c
        .query_typed(BLOB_LINKS_OF_NS, args![tenant, session, ns])
        .await
        .map_err(map_pg)?;
    let mut links: HashMap<String, HashMap<String, Option<String>>> = HashMap::new();
    let mut all = Vec::with_capacity(stored.len());
    for r in &stored {
        let (channel, version, base): (String, String, Option<String>) = (
            sql::get(r, "channel")?,
            sql::get(r, "version")?,
            sql::get(r, "base_version")?,
        );
        links
            .entry(channel.clone())
            .or_default()
            .insert(version.clone(), base);
        all.push((channel, version));
    }
    let mut needed: HashSet<(String, String)> = HashSet::new();
    for r in &kept {
        let text: String = sql::get(r, "channel_versions")?;
        let versions: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        for (channel, version) in channel_version_pairs(&versions) {
            let Some(chain) = links.get(&channel) else {
                continue;
            };
            for v in chain_versions(&version, chain) {
                needed.insert((channel.clone(), v));
            }
        }
    }
    let (channels, versions): (Vec<String>, Vec<String>) =
        all.into_iter().filter(|k| !needed.contains(k)).unzip();
    if !channels.is_empty() {
        c.execute_typed(DELETE_BLOBS, args![tenant, session, ns, channels, versions])
            .await
            .map_err(map_pg)?;
    }
    Ok(())
}

pub(super) async fn prune_thread(
    c: &impl GenericClient,
    tenant: &str,
    session: Id,
    strategy: PruneStrategy,
) -> Result<u64> {
    match strategy {
        PruneStrategy::Delete => {
            let n = c
                .execute_typed(DELETE_THREAD_CHECKPOINTS, args![tenant, session])
                .await
                .map_err(map_pg)?;
            for sql in [DELETE_THREAD_BLOBS, DELETE_THREAD_WRITES] {
                c.execute_typed(sql, args![tenant, session])
                    .await
                    .map_err(map_pg)?;
            }
            Ok(n)
        }
        PruneStrategy::KeepLatest => {
            let latest = c
                .query_typed(LATEST_PER_NS, args![tenant, session])
                .await
                .map_err(map_pg)?;
            let mut deleted = 0;
            for r in &latest {
                let ns: String = sql::get(r, "checkpoint_ns")?;
                let keep: String = sql::get(r, "latest")?;
                deleted += c
                    .execute_typed(DELETE_OLDER, args![tenant, session, ns, keep])
                    .await
                    .map_err(map_pg)?;
                collect_blobs(c, tenant, session, &ns).await?;
                let gone = c
                    .query_typed(
                        WRITE_CHECKPOINTS_OTHER_THAN,
                        args![tenant, session, ns, keep],
                    )
                    .await
                    .map_err(map_pg)?
                    .iter()
                    .map(|r| sql::get(r, "checkpoint_id"))
                    .collect::<Result<HashSet<String>>>()?;
                settle_writes(c, tenant, session, &ns, &gone).await?;
                c.execute_typed(DELETE_OLDER_WRITES, args![tenant, session, ns, keep])
                    .await
                    .map_err(map_pg)?;
            }
            Ok(deleted)
        }
    }
}
