//! Sessions: create, read, list, patch, soft-delete, and import a whole session document.

use std::future::Future;

use stepwise_core::{Id, Session, SessionDocument};

use crate::{NewSession, Page, PageRequest, Result, SessionFilter, SessionPatch, Tenant};

pub trait SessionStore: Send + Sync {
    /// Creates an `active` session. A name already used in the tenant is a conflict.
    fn create_session(
        &self,
        tenant: &Tenant,
        new: NewSession,
    ) -> impl Future<Output = Result<Session>> + Send;

    fn get_session(
        &self,
        tenant: &Tenant,
        id: Id,
    ) -> impl Future<Output = Result<Option<Session>>> + Send;

    fn find_session_by_name(
        &self,
        tenant: &Tenant,
        name: &str,
    ) -> impl Future<Output = Result<Option<Session>>> + Send;

    /// Newest `updated_at` first, keyset-paginated.
    fn list_sessions(
        &self,
        tenant: &Tenant,
        filter: SessionFilter,
        page: PageRequest,
    ) -> impl Future<Output = Result<Page<Session>>> + Send;

    fn update_session(
        &self,
        tenant: &Tenant,
        id: Id,
        patch: SessionPatch,
    ) -> impl Future<Output = Result<Option<Session>>> + Send;

    /// Soft delete: the status becomes `deleted`. `false` when there is no such session.
    fn delete_session(&self, tenant: &Tenant, id: Id) -> impl Future<Output = Result<bool>> + Send;

    /// Writes a whole session document in one transaction, with fresh ids throughout
    /// (references inside the document are rewritten). All or nothing.
    fn import_document(
        &self,
        tenant: &Tenant,
        user_id: &str,
        doc: SessionDocument,
    ) -> impl Future<Output = Result<Session>> + Send;
}

/// Passes the whole domain through to the wrapped store (see [`crate::Layer`]).
pub trait PassSessions: crate::Layer {}

impl<L: PassSessions> SessionStore for L {
    fn create_session(
        &self,
        tenant: &Tenant,
        new: NewSession,
    ) -> impl Future<Output = Result<Session>> + Send {
        self.layer_inner().create_session(tenant, new)
    }

    fn get_session(
        &self,
        tenant: &Tenant,
        id: Id,
    ) -> impl Future<Output = Result<Option<Session>>> + Send {
        self.layer_inner().get_session(tenant, id)
    }

    fn find_session_by_name(
        &self,
        tenant: &Tenant,
        name: &str,
    ) -> impl Future<Output = Result<Option<Session>>> + Send {
        self.layer_inner().find_session_by_name(tenant, name)
    }

    fn list_sessions(
        &self,
        tenant: &Tenant,
        filter: SessionFilter,
        page: PageRequest,
    ) -> impl Future<Output = Result<Page<Session>>> + Send {
        self.layer_inner().list_sessions(tenant, filter, page)
    }

    fn update_session(
        &self,
        tenant: &Tenant,
        id: Id,
        patch: SessionPatch,
    ) -> impl Future<Output = Result<Option<Session>>> + Send {
        self.layer_inner().update_session(tenant, id, patch)
    }

    fn delete_session(&self, tenant: &Tenant, id: Id) -> impl Future<Output = Result<bool>> + Send {
        self.layer_inner().delete_session(tenant, id)
    }

    fn import_document(
        &self,
        tenant: &Tenant,
        user_id: &str,
        doc: SessionDocument,
    ) -> impl Future<Output = Result<Session>> + Send {
        self.layer_inner().import_document(tenant, user_id, doc)
    }
}
