//! Sessions: create, read, list, patch, soft-delete, and import a whole session document.

use stepwise_core::{Id, Session, SessionDocument};

use crate::{NewSession, Page, PageRequest, Result, SessionFilter, SessionPatch, Tenant};

crate::domain! {
    $
    pub trait SessionStore, pass PassSessions, methods session_store_methods {
        /// Creates an `active` session. A name already used in the tenant is a conflict.
        fn create_session(&self, tenant: &Tenant, new: NewSession) -> Result<Session>;

        fn get_session(&self, tenant: &Tenant, id: Id) -> Result<Option<Session>>;

        fn find_session_by_name(&self, tenant: &Tenant, name: &str) -> Result<Option<Session>>;

        /// Newest `updated_at` first, keyset-paginated.
        fn list_sessions(&self, tenant: &Tenant, filter: SessionFilter, page: PageRequest) -> Result<Page<Session>>;

        fn update_session(&self, tenant: &Tenant, id: Id, patch: SessionPatch) -> Result<Option<Session>>;

        /// Soft delete: the status becomes `deleted`. `false` when there is no such session.
        fn delete_session(&self, tenant: &Tenant, id: Id) -> Result<bool>;

        /// Writes a whole session document in one transaction, with fresh ids throughout
        /// (references inside the document are rewritten). All or nothing.
        fn import_document(&self, tenant: &Tenant, user_id: &str, doc: SessionDocument) -> Result<Session>;
    }
}
