//! LangGraph's store on PostgreSQL: one row per (tenant, namespace, key); the shared rules
//! (`stepwise_store::langgraph_store`) check the input, filter and page.

use stepwise_core::Timestamp;
use stepwise_store::langgraph_store::{
    self as rules, check_key, check_namespace, check_namespace_query, check_put, check_search,
    expiry, namespace_labels, namespace_prefix_text, namespace_text,
};
use stepwise_store::{NamespaceQuery, Result, StoreItem, StoreItemPut, StoreItemSearch, Tenant};
use tokio_postgres::Row;

use crate::PgStore;
use crate::sql::{args, get, json_text, map_pg};

const SWEEP_EXPIRED: &str = "DELETE FROM langgraph_store_items WHERE tenant_id = $1 AND expires_at IS NOT NULL AND expires_at <= $2";
const UPSERT_ITEM: &str = "INSERT INTO langgraph_store_items (tenant_id, namespace, key, value, created_at, updated_at, expires_at, ttl_us) \
    VALUES ($1, $2, $3, $4, $5, $5, $6, $7) \
    ON CONFLICT (tenant_id, namespace, key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at, \
    expires_at = excluded.expires_at, ttl_us = excluded.ttl_us";
const GET_ITEM: &str = "SELECT namespace, key, value, created_at, updated_at, expires_at, ttl_us FROM langgraph_store_items \
    WHERE tenant_id = $1 AND namespace = $2 AND key = $3 AND (expires_at IS NULL OR expires_at > $4)";
const REFRESH_ITEMS: &str = "UPDATE langgraph_store_items SET expires_at = $2 + ttl_us \
    WHERE tenant_id = $1 AND ttl_us IS NOT NULL AND (expires_at IS NULL OR expires_at > $2) \
    AND (namespace, key) IN (SELECT * FROM unnest($3::text[], $4::text[]))";
const DELETE_ITEM: &str =
    "DELETE FROM langgraph_store_items WHERE tenant_id = $1 AND namespace = $2 AND key = $3";
const SEARCH_ITEMS: &str = "SELECT namespace, key, value, created_at, updated_at, expires_at, ttl_us FROM langgraph_store_items \
    WHERE tenant_id = $1 AND (expires_at IS NULL OR expires_at > $2) \
    AND ($3 = '' OR namespace = $4 OR starts_with(namespace, $3))";
const LIVE_NAMESPACES: &str = "SELECT DISTINCT namespace FROM langgraph_store_items \
    WHERE tenant_id = $1 AND (expires_at IS NULL OR expires_at > $2)";

fn item(row: &Row) -> Result<StoreItem> {
    let namespace: &str = get(row, "namespace")?;
    let value: &str = get(row, "value")?;
    Ok(StoreItem {
        namespace: namespace_labels(namespace),
        key: get(row, "key")?,
        value: serde_json::from_str(value).unwrap_or(serde_json::Value::Null),
        created_at: Timestamp(get(row, "created_at")?),
        updated_at: Timestamp(get(row, "updated_at")?),
        expires_at: get::<Option<i64>>(row, "expires_at")?.map(Timestamp),
        ttl_us: get(row, "ttl_us")?,
    })
}

impl PgStore {
    /// Starts the time to live of these items again (those that have one).
    async fn refresh_store_items(
        &self,
        tenant: &Tenant,
        items: Vec<(String, String)>,
        now: Timestamp,
    ) -> Result<()> {
        let (namespaces, keys): (Vec<String>, Vec<String>) = items.into_iter().unzip();
        let client = self.client().await?;
        client
            .execute_typed(
                REFRESH_ITEMS,
                args![tenant.as_str(), now.0, namespaces, keys],
            )
            .await
            .map_err(map_pg)?;
        Ok(())
    }
}

impl stepwise_store::LangGraphStore for PgStore {
    async fn put_store_item(&self, tenant: &Tenant, put: StoreItemPut) -> Result<()> {
        let ttl_us = check_put(&put)?;
        let value = json_text(&put.value);
        let now = self.now();
        let namespace = namespace_text(&put.namespace);
        let client = self.client().await?;
        client
            .execute_typed(SWEEP_EXPIRED, args![tenant.as_str(), now.0])
            .await
            .map_err(map_pg)?;
        client
            .execute_typed(
                UPSERT_ITEM,
                args![
                    tenant.as_str(),
                    namespace,
                    put.key,
                    value,
                    now.0,
                    expiry(now, ttl_us).map(|t| t.0),
                    ttl_us
                ],
            )
            .await
            .map_err(map_pg)?;
        Ok(())
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
        let row = {
            let client = self.client().await?;
            client
                .query_typed_opt(GET_ITEM, args![tenant.as_str(), namespace, key, now.0])
                .await
                .map_err(map_pg)?
        };
        let Some(mut found) = row.as_ref().map(item).transpose()? else {
            return Ok(None);
        };
        if refresh_ttl && found.ttl_us.is_some() {
            self.refresh_store_items(tenant, vec![(namespace, key.to_string())], now)
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
        let namespace = namespace_text(namespace);
        let client = self.client().await?;
        let n = client
            .execute_typed(DELETE_ITEM, args![tenant.as_str(), namespace, key])
            .await
            .map_err(map_pg)?;
        Ok(n > 0)
    }

    async fn search_store_items(
        &self,
        tenant: &Tenant,
        search: StoreItemSearch,
    ) -> Result<Vec<StoreItem>> {
        check_search(&search)?;
        let now = self.now();
        let exact = namespace_text(&search.namespace_prefix);
        let prefix = namespace_prefix_text(&search.namespace_prefix);
        let rows = {
            let client = self.client().await?;
            client
                .query_typed(SEARCH_ITEMS, args![tenant.as_str(), now.0, prefix, exact])
                .await
                .map_err(map_pg)?
        };
        let loaded = rows.iter().map(item).collect::<Result<Vec<_>>>()?;
        let mut page = rules::search_page(loaded, &search);
        let stale: Vec<(String, String)> = page
            .iter()
            .filter(|item| item.ttl_us.is_some())
            .map(|item| (namespace_text(&item.namespace), item.key.clone()))
            .collect();
        if search.refresh_ttl && !stale.is_empty() {
            self.refresh_store_items(tenant, stale, now).await?;
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
        let client = self.client().await?;
        let rows = client
            .query_typed(LIVE_NAMESPACES, args![tenant.as_str(), now.0])
            .await
            .map_err(map_pg)?;
        let namespaces = rows
            .iter()
            .map(|row| get::<String>(row, "namespace"))
            .collect::<Result<Vec<_>>>()?;
        Ok(rules::namespace_page(namespaces, &query))
    }
}
