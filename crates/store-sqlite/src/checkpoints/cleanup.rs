//! Deleting checkpoints on SQLite: pruning a thread (`keep_latest` keeps each namespace's
//! newest checkpoint), collecting the blobs no checkpoint needs any more, and copying the
//! values of pending writes into the append items that refer to them before the writes go.

use std::collections::{HashMap, HashSet};

use rusqlite::{Connection, params};
use serde_json::Value;
use stepwise_core::Id;
use stepwise_store::checkpoints::{chain_versions, channel_version_pairs, settle_payload};
use stepwise_store::{PruneStrategy, Result};

use super::{execute, ns_rows, write_value};
use crate::rows::bid;
use crate::writer::map_sqlite;

const APPENDS_OF_NS: &str = "SELECT channel, version, payload FROM checkpoint_blobs \
     WHERE tenant_id = ?1 AND session_id = ?2 AND checkpoint_ns = ?3 AND is_append = 1";
const SET_BLOB_PAYLOAD: &str = "UPDATE checkpoint_blobs SET payload = ?6 \
     WHERE tenant_id = ?1 AND session_id = ?2 AND checkpoint_ns = ?3 AND channel = ?4 AND version = ?5";
const WRITE_CHECKPOINTS_OTHER_THAN: &str = "SELECT DISTINCT checkpoint_id FROM checkpoint_writes \
     WHERE tenant_id = ?1 AND session_id = ?2 AND checkpoint_ns = ?3 AND checkpoint_id <> ?4";
const LATEST_PER_NS: &str = "SELECT checkpoint_ns, MAX(checkpoint_id) FROM checkpoints WHERE tenant_id = ?1 AND session_id = ?2 GROUP BY checkpoint_ns";
const DELETE_OLDER: &str = "DELETE FROM checkpoints WHERE tenant_id = ?1 AND session_id = ?2 AND checkpoint_ns = ?3 AND checkpoint_id < ?4";
const DELETE_OLDER_WRITES: &str = "DELETE FROM checkpoint_writes WHERE tenant_id = ?1 AND session_id = ?2 AND checkpoint_ns = ?3 AND checkpoint_id <> ?4";
const VERSIONS_OF_NS: &str = "SELECT channel_versions FROM checkpoints WHERE tenant_id = ?1 AND session_id = ?2 AND checkpoint_ns = ?3";
const BLOB_LINKS_OF_NS: &str = "SELECT channel, version, base_version FROM checkpoint_blobs WHERE tenant_id = ?1 AND session_id = ?2 AND checkpoint_ns = ?3";
const DELETE_BLOB: &str = "DELETE FROM checkpoint_blobs WHERE tenant_id = ?1 AND session_id = ?2 AND checkpoint_ns = ?3 AND channel = ?4 AND version = ?5";
const DELETE_THREAD_CHECKPOINTS: &str =
    "DELETE FROM checkpoints WHERE tenant_id = ?1 AND session_id = ?2";
const DELETE_THREAD_BLOBS: &str =
    "DELETE FROM checkpoint_blobs WHERE tenant_id = ?1 AND session_id = ?2";
const DELETE_THREAD_WRITES: &str =
    "DELETE FROM checkpoint_writes WHERE tenant_id = ?1 AND session_id = ?2";

/// Before the pending writes of `gone` checkpoints of `(session, ns)` are deleted, the
/// append items that refer to them take a copy of their values.
pub(super) fn settle_writes(
    conn: &Connection,
    tenant: &str,
    session: Id,
    ns: &str,
    gone: &HashSet<String>,
) -> Result<()> {
    if gone.is_empty() {
        return Ok(());
    }
    let appends: Vec<(String, String, Vec<u8>)> =
        ns_rows(conn, APPENDS_OF_NS, tenant, session, ns, |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })?;
    for (channel, version, payload) in appends {
        let settled = settle_payload(&payload, gone, |r| {
            write_value(conn, tenant, session, ns, r)
        })?;
        if let Some(payload) = settled {
            execute(
                conn,
                SET_BLOB_PAYLOAD,
                params![tenant, bid(session), ns, channel, version, payload],
            )?;
        }
    }
    Ok(())
}

/// Deletes the blobs of `(session, ns)` that no remaining checkpoint needs.
fn collect_blobs(conn: &Connection, tenant: &str, session: Id, ns: &str) -> Result<()> {
    let kept: Vec<String> = ns_rows(conn, VERSIONS_OF_NS, tenant, session, ns, |r| r.get(0))?;
    let mut links: HashMap<String, HashMap<String, Option<String>>> = HashMap::new();
    let stored: Vec<(String, String, Option<String>)> =
        ns_rows(conn, BLOB_LINKS_OF_NS, tenant, session, ns, |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })?;
    for (channel, version, base) in &stored {
        links
            .entry(channel.clone())
            .or_default()
            .insert(version.clone(), base.clone());
    }
    let mut needed: HashSet<(String, String)> = HashSet::new();
    for text in kept {
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
    for (channel, version, _) in stored {
        if !needed.contains(&(channel.clone(), version.clone())) {
            execute(
                conn,
                DELETE_BLOB,
                params![tenant, bid(session), ns, channel, version],
            )?;
        }
    }
    Ok(())
}

pub(super) fn prune_thread(
    conn: &Connection,
    tenant: &str,
    session: Id,
    strategy: PruneStrategy,
) -> Result<u64> {
    match strategy {
        PruneStrategy::Delete => {
            let n = execute(
                conn,
                DELETE_THREAD_CHECKPOINTS,
                params![tenant, bid(session)],
            )? as u64;
            execute(conn, DELETE_THREAD_BLOBS, params![tenant, bid(session)])?;
            execute(conn, DELETE_THREAD_WRITES, params![tenant, bid(session)])?;
            Ok(n)
        }
        PruneStrategy::KeepLatest => {
            let latest: Vec<(String, String)> = conn
                .prepare_cached(LATEST_PER_NS)
                .and_then(|mut s| {
                    s.query_map(params![tenant, bid(session)], |r| {
                        Ok((r.get(0)?, r.get(1)?))
                    })?
                    .collect()
                })
                .map_err(map_sqlite)?;
            let mut deleted = 0;
            for (ns, keep) in latest {
                deleted +=
                    execute(conn, DELETE_OLDER, params![tenant, bid(session), ns, keep])? as u64;
                collect_blobs(conn, tenant, session, &ns)?;
                let gone: HashSet<String> = conn
                    .prepare_cached(WRITE_CHECKPOINTS_OTHER_THAN)
                    .and_then(|mut s| {
                        s.query_map(params![tenant, bid(session), ns, keep], |r| r.get(0))?
                            .collect()
                    })
                    .map_err(map_sqlite)?;
                settle_writes(conn, tenant, session, &ns, &gone)?;
                execute(
                    conn,
                    DELETE_OLDER_WRITES,
                    params![tenant, bid(session), ns, keep],
                )?;
            }
            Ok(deleted)
        }
    }
}
