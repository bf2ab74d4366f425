//! LangGraph's store: a tenant's JSON items by namespace and key, with an optional time to
//! live ([`crate::langgraph_store`] holds its types and shared rules). Not to be confused
//! with the OpenAI Agents session items of the session routes.

use crate::{NamespaceQuery, Result, StoreItem, StoreItemPut, StoreItemSearch, Tenant};

crate::domain! {
    $
    /// Every call checks its input with the shared rules (`Invalid` errors), reads only the
    /// tenant's rows and never answers an expired item. A backend that keeps no such store
    /// answers [`crate::langgraph_store::unsupported`].
    pub trait LangGraphStore, pass PassLangGraphStore, methods langgraph_store_methods {
        /// Creates or replaces the item (keeping its `created_at` on a replace); the
        /// tenant's expired items may be deleted meanwhile.
        fn put_store_item(&self, tenant: &Tenant, put: StoreItemPut) -> Result<()>;

        /// The live item, its time to live started again when `refresh_ttl` and it has one.
        fn get_store_item(&self, tenant: &Tenant, namespace: &[String], key: &str, refresh_ttl: bool) -> Result<Option<StoreItem>>;

        /// `false` when there was no such item.
        fn delete_store_item(&self, tenant: &Tenant, namespace: &[String], key: &str) -> Result<bool>;

        /// A page of the live items under the prefix that pass the filter
        /// ([`crate::langgraph_store::search_page`]).
        fn search_store_items(&self, tenant: &Tenant, search: StoreItemSearch) -> Result<Vec<StoreItem>>;

        /// A page of the namespaces holding live items
        /// ([`crate::langgraph_store::namespace_page`]).
        fn list_store_namespaces(&self, tenant: &Tenant, query: NamespaceQuery) -> Result<Vec<Vec<String>>>;
    }
}
