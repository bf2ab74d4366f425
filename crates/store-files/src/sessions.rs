//! Sessions in the files backend: create, read, list (keyset-paginated), patch (renaming
//! the session file with its name) and soft-delete.

use stepwise_core::{Id, Session, SessionStatus};
use stepwise_store::rules::{check_name, name_taken, rename_taken};
use stepwise_store::{
    NewSession, Page, PageRequest, Result, SessionFilter, SessionPatch, StoreError, Tenant, cursor,
};

use crate::disk::stem_of;
use crate::state::{Container, Key, State, TenantState};
use crate::{FileStore, check_depth, tenant_state};
use stepwise_core::SessionDocument;

/// Frees `name` when a deleted session holds it, for a session about to take it: a deleted
/// session's name is anyone's again. The deleted session keeps no name, and its file is
/// written under its id (the file of the name is the new session's, or removed).
pub(crate) fn release_deleted_name(
    state: &mut State,
    root: &std::path::Path,
    tenant: &str,
    name: Option<&str>,
) {
    let Some(name) = name else { return };
    let ts = tenant_state(state, root, tenant);
    let Some(&holder) = ts.names.get(name) else {
        return;
    };
    let Some(session) = ts
        .sessions
        .get_mut(&holder)
        .and_then(|c| c.session.as_mut())
    else {
        return;
    };
    if session.status != SessionStatus::Deleted {
        return;
    }
    let old_stem = stem_of(session);
    session.name = None;
    let new_stem = stem_of(session);
    ts.names.remove(name);
    ts.stems.remove(&old_stem);
    ts.stems.insert(new_stem, holder);
    state.pending.removals.push((tenant.to_string(), old_stem));
    state.touch(
        &Key {
            tenant: tenant.to_string(),
            session: Some(holder),
        },
        true,
    );
}

/// Whether `stem` can be given to session `id`: not another session's file, not a file
/// that could not be read.
pub(crate) fn stem_free(ts: &TenantState, stem: &str, id: Id) -> Result<()> {
    if ts.blocked_stems.contains(stem) {
        return Err(StoreError::Conflict(format!(
            "{stem}.json exists but could not be read; fix or move that file first"
        )));
    }
    if ts.stems.get(stem).is_some_and(|other| *other != id) {
        return Err(StoreError::Conflict(format!(
            "a session named '{stem}' already exists"
        )));
    }
    Ok(())
}

impl stepwise_store::SessionStore for FileStore {
    async fn create_session(&self, tenant: &Tenant, new: NewSession) -> Result<Session> {
        check_depth("metadata", [&new.metadata])?;
        check_name(new.name.as_deref())?;
        let now = self.now();
        let session = new.into_session(tenant, now);
        let ack = {
            let mut state = self.lock();
            let root = &self.inner.shared.root;
            release_deleted_name(&mut state, root, tenant.as_str(), session.name.as_deref());
            let ts = tenant_state(&mut state, root, tenant.as_str());
            if let Some(name) = &session.name
                && ts.names.contains_key(name)
            {
                return Err(name_taken(Some(name)));
            }
            let stem = stem_of(&session);
            stem_free(ts, &stem, session.id)?;
            if let Some(name) = &session.name {
                ts.names.insert(name.clone(), session.id);
            }
            ts.stems.insert(stem, session.id);
            ts.sessions.insert(
                session.id,
                Container {
                    session: Some(session.clone()),
                    ..Container::default()
                },
            );
            let key = Key {
                tenant: tenant.as_str().to_string(),
                session: Some(session.id),
            };
            state.touch(&key, true);
            self.enqueue(&mut state, session)
        };
        ack.await
    }

    async fn get_session(&self, tenant: &Tenant, id: Id) -> Result<Option<Session>> {
        Ok(self
            .lock()
            .session(tenant.as_str(), id)
            .and_then(|c| c.session.clone()))
    }

    async fn find_session_by_name(&self, tenant: &Tenant, name: &str) -> Result<Option<Session>> {
        let state = self.lock();
        let Some(ts) = state.tenant(tenant.as_str()) else {
            return Ok(None);
        };
        Ok(ts
            .names
            .get(name)
            .and_then(|id| ts.sessions.get(id))
            .and_then(|c| c.session.clone()))
    }

    async fn list_sessions(
        &self,
        tenant: &Tenant,
        filter: SessionFilter,
        page: PageRequest,
    ) -> Result<Page<Session>> {
        let after = page.cursor.as_deref().map(cursor::decode).transpose()?;
        let limit = page.limit() as usize;
        let state = self.lock();
        let Some(ts) = state.tenant(tenant.as_str()) else {
            return Ok(Page {
                items: Vec::new(),
                next_cursor: None,
            });
        };
        let mut items: Vec<&Session> = ts
            .sessions
            .values()
            .filter_map(|c| c.session.as_ref())
            .filter(|s| filter.matches(s))
            .filter(|s| after.is_none_or(|(at, id)| (s.updated_at, s.id) < (at, id)))
            .collect();
        items.sort_by_key(|x| std::cmp::Reverse((x.updated_at, x.id)));
        let next_cursor = (items.len() > limit)
            .then(|| {
                items
                    .get(limit - 1)
                    .map(|s| cursor::encode(s.updated_at, s.id))
            })
            .flatten();
        items.truncate(limit);
        Ok(Page {
            items: items.into_iter().cloned().collect(),
            next_cursor,
        })
    }

    async fn update_session(
        &self,
        tenant: &Tenant,
        id: Id,
        patch: SessionPatch,
    ) -> Result<Option<Session>> {
        patch.check()?;
        check_depth("metadata", patch.metadata.iter())?;
        let now = self.now();
        let ack = {
            let mut state = self.lock();
            let root = self.inner.shared.root.clone();
            if patch.name.as_ref().is_some_and(|n| {
                state
                    .tenant(tenant.as_str())
                    .and_then(|ts| ts.names.get(n))
                    .is_some_and(|holder| *holder != id)
            }) {
                release_deleted_name(&mut state, &root, tenant.as_str(), patch.name.as_deref());
            }
            let ts = tenant_state(&mut state, &root, tenant.as_str());
            let Some(current) = ts.sessions.get(&id).and_then(|c| c.session.clone()) else {
                return Ok(None);
            };
            let mut session = current.clone();
            patch.apply(&mut session, now);
            let (old_stem, new_stem) = (stem_of(&current), stem_of(&session));
            if let Some(name) = &session.name
                && ts.names.get(name).is_some_and(|other| *other != id)
            {
                return Err(rename_taken());
            }
            stem_free(ts, &new_stem, id)?;
            if old_stem != new_stem {
                if let Some(old) = &current.name {
                    ts.names.remove(old);
                }
                if let Some(name) = &session.name {
                    ts.names.insert(name.clone(), id);
                }
                ts.stems.remove(&old_stem);
                ts.stems.insert(new_stem, id);
                state
                    .pending
                    .removals
                    .push((tenant.as_str().to_string(), old_stem));
            }
            let Some(container) = state.session_mut(tenant.as_str(), id) else {
                return Ok(None);
            };
            container.session = Some(session.clone());
            state.touch(
                &Key {
                    tenant: tenant.as_str().to_string(),
                    session: Some(id),
                },
                true,
            );
            self.enqueue(&mut state, Some(session))
        };
        ack.await
    }

    async fn delete_session(&self, tenant: &Tenant, id: Id) -> Result<bool> {
        let now = self.now();
        let ack = {
            let mut state = self.lock();
            let Some(session) = state
                .session_mut(tenant.as_str(), id)
                .and_then(|c| c.session.as_mut())
            else {
                return Ok(false);
            };
            session.status = SessionStatus::Deleted;
            session.updated_at = now;
            state.touch(
                &Key {
                    tenant: tenant.as_str().to_string(),
                    session: Some(id),
                },
                true,
            );
            self.enqueue(&mut state, true)
        };
        ack.await
    }

    async fn import_document(
        &self,
        tenant: &Tenant,
        user_id: &str,
        doc: SessionDocument,
    ) -> Result<Session> {
        self.import_document_as_session(tenant, user_id, doc).await
    }
}
