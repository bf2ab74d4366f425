//! LangGraph's store is not kept by the files backend: every call answers
//! [`stepwise_store::langgraph_store::unsupported`] (`InvalidState`, a 422 over HTTP).

use stepwise_store::langgraph_store::unsupported;
use stepwise_store::{NamespaceQuery, Result, StoreItem, StoreItemPut, StoreItemSearch, Tenant};

use crate::FileStore;

impl stepwise_store::LangGraphStore for FileStore {
    async fn put_store_item(&self, _tenant: &Tenant, _put: StoreItemPut) -> Result<()> {
        Err(unsupported())
    }

    async fn get_store_item(
        &self,
        _tenant: &Tenant,
        _namespace: &[String],
        _key: &str,
        _refresh_ttl: bool,
    ) -> Result<Option<StoreItem>> {
        Err(unsupported())
    }

    async fn delete_store_item(
        &self,
        _tenant: &Tenant,
        _namespace: &[String],
        _key: &str,
    ) -> Result<bool> {
        Err(unsupported())
    }

    async fn search_store_items(
        &self,
        _tenant: &Tenant,
        _search: StoreItemSearch,
    ) -> Result<Vec<StoreItem>> {
        Err(unsupported())
    }

    async fn list_store_namespaces(
        &self,
        _tenant: &Tenant,
        _query: NamespaceQuery,
    ) -> Result<Vec<Vec<String>>> {
        Err(unsupported())
    }
}
