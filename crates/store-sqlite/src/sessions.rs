//! Sessions on SQLite: create, read, list (keyset-paginated), patch and soft-delete.

use rusqlite::types::Value as Sql;
use rusqlite::{Connection, OptionalExtension, params, params_from_iter};
use stepwise_core::{Id, Session};
use stepwise_store::rules::{check_name, name_taken, rename_taken};
use stepwise_store::{
    NewSession, Page, PageRequest, Result, SessionFilter, SessionPatch, Tenant, cursor,
};

use crate::rows::{self, agent_text, bid, json_text, session_cols};
use crate::writer::map_sqlite;
use crate::{SqliteStore, checkpoints, is_unique_violation};
use stepwise_core::SessionDocument;

const INSERT_SESSION: &str = "INSERT INTO sessions (id, tenant_id, user_id, name, title, status, related_type, related_id, initial_context_url, metadata, created_at, updated_at) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?11)";
const SELECT_SESSION: &str = concat!(
    "SELECT ",
    session_cols!(),
    " FROM sessions WHERE id = ?1 AND tenant_id = ?2"
);
const SELECT_BY_NAME: &str = concat!(
    "SELECT ",
    session_cols!(),
    " FROM sessions WHERE tenant_id = ?1 AND name = ?2"
);
/// The start of `list_sessions`' statement; the filters and the page are appended to it.
const LIST_SESSIONS: &str = concat!(
    "SELECT ",
    session_cols!(),
    " FROM sessions WHERE tenant_id = ?"
);
const UPDATE_SESSION: &str = "UPDATE sessions SET title = ?1, name = ?2, status = ?3, metadata = ?4, updated_at = ?5, agent = ?8 WHERE id = ?6 AND tenant_id = ?7";
/// A deleted session gives its name up to a session that takes it (it keeps no name).
const RELEASE_DELETED_NAME: &str =
    "UPDATE sessions SET name = NULL WHERE tenant_id = ?1 AND name = ?2 AND status = 'deleted'";
const SOFT_DELETE: &str =
    "UPDATE sessions SET status = 'deleted', updated_at = ?1 WHERE id = ?2 AND tenant_id = ?3";

/// Frees `name` when a deleted session holds it, for a session about to take it (in the
/// same transaction): a deleted session's name is anyone's again.
pub(crate) fn release_deleted_name(
    conn: &Connection,
    tenant: &str,
    name: Option<&str>,
) -> Result<()> {
    if let Some(name) = name {
        conn.prepare_cached(RELEASE_DELETED_NAME)
            .and_then(|mut s| s.execute(params![tenant, name]))
            .map_err(map_sqlite)?;
    }
    Ok(())
}

pub(crate) fn load_session(conn: &Connection, tenant: &str, id: Id) -> Result<Option<Session>> {
    conn.prepare_cached(SELECT_SESSION)
        .and_then(|mut s| {
            s.query_row(params![bid(id), tenant], rows::session)
                .optional()
        })
        .map_err(map_sqlite)
}

impl stepwise_store::SessionStore for SqliteStore {
    async fn create_session(&self, tenant: &Tenant, new: NewSession) -> Result<Session> {
        check_name(new.name.as_deref())?;
        let now = self.now();
        let session = new.into_session(tenant, now);
        self.write(move |conn, _| {
            let s = &session;
            release_deleted_name(conn, &s.tenant_id, s.name.as_deref())?;
            conn.prepare_cached(INSERT_SESSION)
                .and_then(|mut stmt| {
                    stmt.execute(params![
                        bid(s.id),
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
                    ])
                })
                .map_err(|e| {
                    if is_unique_violation(&e) {
                        name_taken(s.name.as_deref())
                    } else {
                        map_sqlite(e)
                    }
                })?;
            Ok(session)
        })
        .await
    }

    async fn get_session(&self, tenant: &Tenant, id: Id) -> Result<Option<Session>> {
        self.read_point(|conn| load_session(conn, tenant.as_str(), id))
    }

    async fn find_session_by_name(&self, tenant: &Tenant, name: &str) -> Result<Option<Session>> {
        self.read_point(|conn| {
            conn.prepare_cached(SELECT_BY_NAME)
                .and_then(|mut s| {
                    s.query_row(params![tenant.as_str(), name], rows::session)
                        .optional()
                })
                .map_err(map_sqlite)
        })
    }

    async fn list_sessions(
        &self,
        tenant: &Tenant,
        filter: SessionFilter,
        page: PageRequest,
    ) -> Result<Page<Session>> {
        let after = page.cursor.as_deref().map(cursor::decode).transpose()?;
        let limit = page.limit();
        let mut sql = LIST_SESSIONS.to_string();
        let mut args: Vec<Sql> = vec![Sql::Text(tenant.as_str().to_string())];
        match &filter.statuses {
            Some(statuses) if !statuses.is_empty() => {
                sql.push_str(&format!(
                    " AND status IN ({})",
                    vec!["?"; statuses.len()].join(",")
                ));
                args.extend(statuses.iter().map(|s| Sql::Text(s.as_str().into())));
            }
            _ => sql.push_str(" AND status <> 'deleted'"),
        }
        for (column, value) in [
            ("related_type", &filter.related_type),
            ("related_id", &filter.related_id),
            ("user_id", &filter.user_id),
        ] {
            if let Some(value) = value {
                sql.push_str(&format!(" AND {column} = ?"));
                args.push(Sql::Text(value.clone()));
            }
        }
        for (key, text) in &filter.metadata {
            // The key is a JSON path member, quoted; the value's text as `metadata_value_matches`.
            sql.push_str(
                " AND CASE json_type(metadata, ?1) WHEN 'text' THEN json_extract(metadata, ?1) \
                 WHEN 'integer' THEN CAST(json_extract(metadata, ?1) AS TEXT) WHEN 'real' THEN CAST(json_extract(metadata, ?1) AS TEXT) \
                 WHEN 'true' THEN 'true' WHEN 'false' THEN 'false' END = ?"
                    .replace("?1", &format!("?{}", args.len() + 1))
                    .as_str(),
            );
            args.push(Sql::Text(format!("$.\"{key}\"")));
            args.push(Sql::Text(text.clone()));
        }
        if let Some((at, id)) = after {
            sql.push_str(" AND (updated_at, id) < (?, ?)");
            args.push(Sql::Integer(at.0));
            args.push(Sql::Blob(id.as_bytes().to_vec()));
        }
        sql.push_str(" ORDER BY updated_at DESC, id DESC LIMIT ?");
        args.push(Sql::Integer(i64::from(limit) + 1));
        self.read(move |conn, _| {
            let mut items = conn
                .prepare_cached(&sql)
                .and_then(|mut s| {
                    s.query_map(params_from_iter(args), rows::session)?
                        .collect::<rusqlite::Result<Vec<_>>>()
                })
                .map_err(map_sqlite)?;
            let next_cursor = if items.len() > limit as usize {
                items.truncate(limit as usize);
                items.last().map(|s| cursor::encode(s.updated_at, s.id))
            } else {
                None
            };
            Ok(Page { items, next_cursor })
        })
        .await
    }

    async fn update_session(
        &self,
        tenant: &Tenant,
        id: Id,
        patch: SessionPatch,
    ) -> Result<Option<Session>> {
        patch.check()?;
        let tenant = tenant.as_str().to_string();
        let now = self.now();
        self.write(move |conn, _| {
            let Some(mut session) = load_session(conn, &tenant, id)? else {
                return Ok(None);
            };
            let renames = patch.name.is_some();
            patch.apply(&mut session, now);
            let s = &session;
            if renames {
                release_deleted_name(conn, &tenant, s.name.as_deref())?;
            }
            conn.prepare_cached(UPDATE_SESSION)
                .and_then(|mut stmt| {
                    stmt.execute(params![
                        s.title,
                        s.name,
                        s.status.as_str(),
                        json_text(&s.metadata),
                        now.0,
                        bid(id),
                        tenant,
                        agent_text(&s.agent)
                    ])
                })
                .map_err(|e| {
                    if is_unique_violation(&e) {
                        rename_taken()
                    } else {
                        map_sqlite(e)
                    }
                })?;
            Ok(Some(session))
        })
        .await
    }

    async fn delete_session(&self, tenant: &Tenant, id: Id) -> Result<bool> {
        let tenant = tenant.as_str().to_string();
        let now = self.now();
        self.write(move |conn, _| {
            let deleted = conn
                .prepare_cached(SOFT_DELETE)
                .and_then(|mut s| s.execute(params![now.0, bid(id), tenant]))
                .map(|n| n > 0)
                .map_err(map_sqlite)?;
            if deleted {
                // A deleted session is no thread any more: its checkpoints go with it.
                checkpoints::delete_session_checkpoints(conn, id)?;
            }
            Ok(deleted)
        })
        .await
    }

    async fn import_document(
        &self,
        tenant: &Tenant,
        user_id: &str,
        doc: SessionDocument,
    ) -> Result<Session> {
        self.import_session(tenant, user_id, doc).await
    }
}
