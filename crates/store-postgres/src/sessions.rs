//! Sessions on PostgreSQL: create, read, list (filtered, keyset-paged), patch and
//! soft-delete. A session's name is unique per tenant (a unique index says so).

use stepwise_core::{Id, Session};
use stepwise_store::rules::{check_name, name_taken, rename_taken};
use stepwise_store::{
    NewSession, Page, PageRequest, Result, SessionFilter, SessionPatch, Tenant, cursor,
};
use tokio_postgres::GenericClient;

use crate::import;
use crate::sql::{self, Params, args, is_unique_violation, json_text, map_pg, pg, session_cols};
use crate::{PgStore, checkpoints};
use stepwise_core::SessionDocument;

const INSERT_SESSION: &str = "INSERT INTO sessions (id, tenant_id, user_id, name, title, status, related_type, related_id, initial_context_url, metadata, created_at, updated_at) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $11)";
const SESSION_BY_ID: &str = concat!(
    "SELECT ",
    session_cols!(),
    " FROM sessions WHERE id = $1 AND tenant_id = $2"
);
const SESSION_BY_NAME: &str = concat!(
    "SELECT ",
    session_cols!(),
    " FROM sessions WHERE tenant_id = $1 AND name = $2"
);
/// The start of a listing; filters, order and limit are appended with their parameters.
const LIST_SESSIONS: &str = concat!(
    "SELECT ",
    session_cols!(),
    " FROM sessions WHERE tenant_id = $1"
);
/// A patch: each field is kept when its parameter is NULL; the agent when `$8` is false.
const UPDATE_SESSION: &str = concat!(
    "UPDATE sessions SET title = COALESCE($1, title), name = COALESCE($2, name), status = COALESCE($3, status), \
     metadata = COALESCE($4, metadata), updated_at = $5, agent = CASE WHEN $8 THEN $9 ELSE agent END \
     WHERE id = $6 AND tenant_id = $7 RETURNING ",
    session_cols!()
);
/// A deleted session gives its name up to a session that takes it (it keeps no name).
const RELEASE_DELETED_NAME: &str =
    "UPDATE sessions SET name = NULL WHERE tenant_id = $1 AND name = $2 AND status = 'deleted'";
const SOFT_DELETE_SESSION: &str =
    "UPDATE sessions SET status = 'deleted', updated_at = $1 WHERE id = $2 AND tenant_id = $3";
/// Listing without a status filter hides deleted sessions.
const NOT_DELETED: &str = " AND status <> 'deleted'";
const NEWEST_FIRST: &str = " ORDER BY updated_at DESC, id DESC";

/// One session of a tenant, on any connection or transaction.
/// Frees `name` when a deleted session holds it, for a session about to take it: a deleted
/// session's name is anyone's again.
pub(crate) async fn release_deleted_name(
    c: &impl GenericClient,
    tenant: &str,
    name: Option<&str>,
) -> Result<()> {
    if let Some(name) = name {
        c.execute_typed(RELEASE_DELETED_NAME, args![tenant, name])
            .await
            .map_err(map_pg)?;
    }
    Ok(())
}

pub(crate) async fn load(c: &impl GenericClient, tenant: &str, id: Id) -> Result<Option<Session>> {
    let row = c
        .query_typed_opt(SESSION_BY_ID, args![id, tenant])
        .await
        .map_err(map_pg)?;
    row.as_ref().map(sql::session).transpose()
}

impl stepwise_store::SessionStore for PgStore {
    async fn create_session(&self, tenant: &Tenant, new: NewSession) -> Result<Session> {
        check_name(new.name.as_deref())?;
        let now = self.now();
        let session = new.into_session(tenant, now);
        let s = &session;
        let client = self.client().await?;
        release_deleted_name(&**client, &s.tenant_id, s.name.as_deref()).await?;
        client
            .execute_typed(
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
                    name_taken(s.name.as_deref())
                } else {
                    map_pg(e)
                }
            })?;
        Ok(session)
    }

    async fn get_session(&self, tenant: &Tenant, id: Id) -> Result<Option<Session>> {
        load(&**self.client().await?, tenant.as_str(), id).await
    }

    async fn find_session_by_name(&self, tenant: &Tenant, name: &str) -> Result<Option<Session>> {
        let client = self.client().await?;
        let row = client
            .query_typed_opt(SESSION_BY_NAME, args![tenant.as_str(), name])
            .await
            .map_err(map_pg)?;
        row.as_ref().map(sql::session).transpose()
    }

    /// Newest first (`updated_at`, then id), one row more than the page to know whether
    /// another page follows.
    async fn list_sessions(
        &self,
        tenant: &Tenant,
        filter: SessionFilter,
        page: PageRequest,
    ) -> Result<Page<Session>> {
        let after = page.cursor.as_deref().map(cursor::decode).transpose()?;
        let limit = page.limit();
        let mut p = Params::default();
        p.push(tenant.as_str().to_string());
        let mut sql = LIST_SESSIONS.to_string();
        match &filter.statuses {
            Some(statuses) if !statuses.is_empty() => {
                let list: Vec<String> = statuses.iter().map(|s| s.as_str().to_string()).collect();
                sql.push_str(&format!(" AND status = ANY({})", p.push(list)));
            }
            _ => sql.push_str(NOT_DELETED),
        }
        for (column, value) in [
            ("related_type", &filter.related_type),
            ("related_id", &filter.related_id),
            ("user_id", &filter.user_id),
        ] {
            if let Some(value) = value {
                sql.push_str(&format!(" AND {column} = {}", p.push(value.clone())));
            }
        }
        for (key, text) in &filter.metadata {
            // As `metadata_value_matches`: `->>` gives a string's text, a number's or a
            // boolean's JSON text.
            let (key, text) = (p.push(key.clone()), p.push(text.clone()));
            sql.push_str(&format!(
                " AND jsonb_typeof(metadata::jsonb -> {key}) IN ('string', 'number', 'boolean') AND metadata::jsonb ->> {key} = {text}"
            ));
        }
        if let Some((at, id)) = after {
            sql.push_str(&format!(
                " AND (updated_at, id) < ({}, {})",
                p.push(at.0),
                p.push(id)
            ));
        }
        sql.push_str(NEWEST_FIRST);
        sql.push_str(&format!(" LIMIT {}", p.push(i64::from(limit) + 1)));
        let client = self.client().await?;
        let rows = client.query_typed(&sql, &p.refs()).await.map_err(map_pg)?;
        let mut items = sql::collect(&rows, sql::session)?;
        let next_cursor = if items.len() > limit as usize {
            items.truncate(limit as usize);
            items.last().map(|s| cursor::encode(s.updated_at, s.id))
        } else {
            None
        };
        Ok(Page { items, next_cursor })
    }

    async fn update_session(
        &self,
        tenant: &Tenant,
        id: Id,
        patch: SessionPatch,
    ) -> Result<Option<Session>> {
        patch.check()?;
        let now = self.now();
        let metadata = patch.metadata.as_ref().map(json_text);
        let status = patch.status.map(|s| s.as_str().to_string());
        let set_agent = patch.agent.is_some();
        let agent = patch.agent.as_ref().and_then(crate::sql::agent_text);
        let client = self.client().await?;
        release_deleted_name(&**client, tenant.as_str(), patch.name.as_deref()).await?;
        let row = client
            .query_typed_opt(
                UPDATE_SESSION,
                args![
                    patch.title,
                    patch.name,
                    status,
                    metadata,
                    now.0,
                    id,
                    tenant.as_str(),
                    set_agent,
                    agent
                ],
            )
            .await
            .map_err(|e| {
                if is_unique_violation(&e) {
                    rename_taken()
                } else {
                    map_pg(e)
                }
            })?;
        row.as_ref().map(sql::session).transpose()
    }

    /// Marks the session deleted (retention removes its rows later) and drops its
    /// checkpoints, in one transaction.
    async fn delete_session(&self, tenant: &Tenant, id: Id) -> Result<bool> {
        let now = self.now();
        let mut client = self.client().await?;
        let tx = pg(&mut client).transaction().await.map_err(map_pg)?;
        let n = tx
            .execute_typed(SOFT_DELETE_SESSION, args![now.0, id, tenant.as_str()])
            .await
            .map_err(map_pg)?;
        if n > 0 {
            // A deleted session is no thread any more: its checkpoints go with it.
            checkpoints::delete_sessions_checkpoints(&tx, &vec![id]).await?;
        }
        tx.commit().await.map_err(map_pg)?;
        Ok(n > 0)
    }

    async fn import_document(
        &self,
        tenant: &Tenant,
        user_id: &str,
        doc: SessionDocument,
    ) -> Result<Session> {
        import::import_document(self, tenant, user_id, doc).await
    }
}
