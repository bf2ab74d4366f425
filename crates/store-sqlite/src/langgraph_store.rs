//! LangGraph's store on SQLite: one row per (tenant, namespace, key); the shared rules
//! (`stepwise_store::langgraph_store`) check the input, filter and page.

use rusqlite::{Connection, OptionalExtension, Row, params};
use stepwise_core::Timestamp;
use stepwise_store::langgraph_store::{
    self as rules, check_key, check_namespace, check_namespace_query, check_put, check_search,
    expiry, namespace_labels, namespace_prefix_text, namespace_text,
};
use stepwise_store::{NamespaceQuery, Result, StoreItem, StoreItemPut, StoreItemSearch, Tenant};

use crate::SqliteStore;
use crate::writer::map_sqlite;

const SWEEP_EXPIRED: &str = "DELETE FROM langgraph_store_items WHERE tenant_id = ?1 AND expires_at IS NOT NULL AND expires_at <= ?2";
const UPSERT_ITEM: &str = "INSERT INTO langgraph_store_items (tenant_id, namespace, key, value, created_at, updated_at, expires_at, ttl_us) \
    VALUES (?1, ?2, ?3, ?4, ?5, ?5, ?6, ?7) \
    ON CONFLICT (tenant_id, namespace, key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at, \
    expires_at = excluded.expires_at, ttl_us = excluded.ttl_us";
const ITEM_COLS: &str = "namespace, key, value, created_at, updated_at, expires_at, ttl_us";
const GET_ITEM: &str = "SELECT namespace, key, value, created_at, updated_at, expires_at, ttl_us FROM langgraph_store_items \
    WHERE tenant_id = ?1 AND namespace = ?2 AND key = ?3 AND (expires_at IS NULL OR expires_at > ?4)";
const REFRESH_ITEM: &str = "UPDATE langgraph_store_items SET expires_at = ?4 + ttl_us \
    WHERE tenant_id = ?1 AND namespace = ?2 AND key = ?3 AND ttl_us IS NOT NULL AND (expires_at IS NULL OR expires_at > ?4)";
const DELETE_ITEM: &str =
    "DELETE FROM langgraph_store_items WHERE tenant_id = ?1 AND namespace = ?2 AND key = ?3";
const LIVE_NAMESPACES: &str = "SELECT DISTINCT namespace FROM langgraph_store_items \
    WHERE tenant_id = ?1 AND (expires_at IS NULL OR expires_at > ?2)";

fn item(row: &Row) -> rusqlite::Result<StoreItem> {
    let namespace: String = row.get(0)?;
    let value: String = row.get(2)?;
    Ok(StoreItem {
        namespace: namespace_labels(&namespace),
        key: row.get(1)?,
        value: serde_json::from_str(&value).unwrap_or(serde_json::Value::Null),
        created_at: Timestamp(row.get(3)?),
        updated_at: Timestamp(row.get(4)?),
        expires_at: row.get::<_, Option<i64>>(5)?.map(Timestamp),
        ttl_us: row.get(6)?,
    })
}

/// Starts the time to live of these items again (those that have one).
fn refresh(
    conn: &Connection,
    tenant: &str,
    items: &[(String, String)],
    now: Timestamp,
) -> Result<()> {
    let mut statement = conn.prepare_cached(REFRESH_ITEM).map_err(map_sqlite)?;
    for (namespace, key) in items {
        statement
            .execute(params![tenant, namespace, key, now.0])
            .map_err(map_sqlite)?;
    }
    Ok(())
}

impl stepwise_store::LangGraphStore for SqliteStore {
    async fn put_store_item(&self, tenant: &Tenant, put: StoreItemPut) -> Result<()> {
        let ttl_us = check_put(&put)?;
        let now = self.now();
        let tenant = tenant.as_str().to_string();
        let namespace = namespace_text(&put.namespace);
        let value = serde_json::to_string(&put.value).unwrap_or_else(|_| "{}".into());
        self.write(move |conn, _| {
            conn.prepare_cached(SWEEP_EXPIRED)
                .and_then(|mut s| s.execute(params![tenant, now.0]))
                .map_err(map_sqlite)?;
            conn.prepare_cached(UPSERT_ITEM)
                .and_then(|mut s| {
                    s.execute(params![
                        tenant,
                        namespace,
                        put.key,
                        value,
                        now.0,
                        expiry(now, ttl_us).map(|t| t.0),
                        ttl_us
                    ])
                })
                .map_err(map_sqlite)?;
            Ok(())
        })
        .await
    }

    async fn get_store_item(
        &self,
        tenant: &Tenant,
        namespace: &[String],
        key: &str,
        refresh_ttl: bool,
    ) -> Result<Option<StoreItem>> {
        check_namespace("namespace", namespace, false)?;
        check_key(key)?;
        let now = self.now();
        let namespace = namespace_text(namespace);
        let found = self.read_point(|conn| {
            conn.prepare_cached(GET_ITEM)
                .and_then(|mut s| {
                    s.query_row(params![tenant.as_str(), namespace, key, now.0], item)
                        .optional()
                })
                .map_err(map_sqlite)
        })?;
        let Some(mut found) = found else {
            return Ok(None);
        };
        if refresh_ttl && found.ttl_us.is_some() {
            let tenant = tenant.as_str().to_string();
            let target = vec![(namespace, key.to_string())];
            self.write(move |conn, _| refresh(conn, &tenant, &target, now))
                .await?;
            found.expires_at = expiry(now, found.ttl_us);
        }
        Ok(Some(found))
    }

    async fn delete_store_item(
        &self,
        tenant: &Tenant,
        namespace: &[String],
        key: &str,
    ) -> Result<bool> {
        check_namespace("namespace", namespace, false)?;
        check_key(key)?;
        let tenant = tenant.as_str().to_string();
        let namespace = namespace_text(namespace);
        let key = key.to_string();
        self.write(move |conn, _| {
            conn.prepare_cached(DELETE_ITEM)
                .and_then(|mut s| s.execute(params![tenant, namespace, key]))
                .map(|n| n > 0)
                .map_err(map_sqlite)
        })
        .await
    }

    async fn search_store_items(
        &self,
        tenant: &Tenant,
        search: StoreItemSearch,
    ) -> Result<Vec<StoreItem>> {
        check_search(&search)?;
        let now = self.now();
        let owner = tenant.as_str().to_string();
        let exact = namespace_text(&search.namespace_prefix);
        let prefix = namespace_prefix_text(&search.namespace_prefix);
        let loaded = self
            .read(move |conn, _| {
                let sql = format!(
                    "SELECT {ITEM_COLS} FROM langgraph_store_items WHERE tenant_id = ?1 \
                     AND (expires_at IS NULL OR expires_at > ?2) \
                     AND (?3 = '' OR namespace = ?4 OR substr(namespace, 1, length(?3)) = ?3)"
                );
                conn.prepare_cached(&sql)
                    .and_then(|mut s| {
                        s.query_map(params![owner, now.0, prefix, exact], item)?
                            .collect::<rusqlite::Result<Vec<_>>>()
                    })
                    .map_err(map_sqlite)
            })
            .await?;
        let mut page = rules::search_page(loaded, &search);
        let stale: Vec<(String, String)> = page
            .iter()
            .filter(|item| item.ttl_us.is_some())
            .map(|item| (namespace_text(&item.namespace), item.key.clone()))
            .collect();
        if search.refresh_ttl && !stale.is_empty() {
            let owner = tenant.as_str().to_string();
            self.write(move |conn, _| refresh(conn, &owner, &stale, now))
                .await?;
            for item in &mut page {
                item.expires_at = expiry(now, item.ttl_us);
            }
        }
        Ok(page)
    }

    async fn list_store_namespaces(
        &self,
        tenant: &Tenant,
        query: NamespaceQuery,
    ) -> Result<Vec<Vec<String>>> {
        check_namespace_query(&query)?;
        let now = self.now();
        let owner = tenant.as_str().to_string();
        let namespaces = self
            .read(move |conn, _| {
                conn.prepare_cached(LIVE_NAMESPACES)
                    .and_then(|mut s| {
                        s.query_map(params![owner, now.0], |row| row.get::<_, String>(0))?
                            .collect::<rusqlite::Result<Vec<_>>>()
                    })
                    .map_err(map_sqlite)
            })
            .await?;
        Ok(rules::namespace_page(namespaces, &query))
    }
}
