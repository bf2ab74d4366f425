//! Messages on SQLite: append (bumping the session's count) and list in server-time order.

use rusqlite::types::Value as Sql;
use rusqlite::{OptionalExtension, params, params_from_iter};
use stepwise_core::{Id, Message, Timestamp};
use stepwise_store::{Ack, MessageQuery, NewMessage, Result, StoreError, Tenant};

use crate::SqliteStore;
use crate::rows::{self, bid, json_text, message_cols, opt_bid};
use crate::writer::map_sqlite;

const BUMP_SESSION: &str = "UPDATE sessions SET message_count = message_count + 1, updated_at = ?1, status = CASE WHEN status = 'abandoned' THEN 'active' ELSE status END WHERE id = ?2 AND tenant_id = ?3";
const INSERT_MESSAGE: &str = "INSERT INTO messages (id, tenant_id, session_id, role, content, execution_id, related_type, related_id, context_url, metadata, created_at) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)";
const MESSAGE_TIME: &str =
    "SELECT created_at FROM messages WHERE id = ?1 AND session_id = ?2 AND tenant_id = ?3";
/// The start of `list_messages`' statement; the query's filters are appended to it.
const LIST_MESSAGES: &str = concat!(
    "SELECT ",
    message_cols!(),
    " FROM messages WHERE session_id = ? AND tenant_id = ?"
);

/// Inserts a stored message row (its session's counter is the caller's to move).
pub(crate) fn insert_message(conn: &rusqlite::Connection, tenant: &str, m: &Message) -> Result<()> {
    conn.prepare_cached(INSERT_MESSAGE)
        .and_then(|mut s| {
            s.execute(params![
                bid(m.id),
                tenant,
                bid(m.session_id),
                m.role.as_str(),
                m.content,
                opt_bid(m.execution_id),
                m.related_type,
                m.related_id,
                m.context_url,
                json_text(&m.metadata),
                m.created_at.0
            ])
        })
        .map(|_| ())
        .map_err(map_sqlite)
}

/// Inserts a message and moves its session's count; `NotFound` (nothing written) when the
/// session is not the tenant's.
pub(crate) fn write_message(
    conn: &rusqlite::Connection,
    tenant: &str,
    m: &Message,
    now: Timestamp,
) -> Result<()> {
    let touched = conn
        .prepare_cached(BUMP_SESSION)
        .and_then(|mut s| s.execute(params![now.0, bid(m.session_id), tenant]))
        .map_err(map_sqlite)?;
    if touched == 0 {
        return Err(StoreError::NotFound("session"));
    }
    insert_message(conn, tenant, m)
}

impl stepwise_store::MessageStore for SqliteStore {
    async fn append_message(&self, tenant: &Tenant, new: NewMessage) -> Result<Message> {
        self.queue_message(tenant, new).await?.1.await
    }

    async fn queue_message(
        &self,
        tenant: &Tenant,
        new: NewMessage,
    ) -> Result<(Message, Ack<Message>)> {
        let tenant = tenant.as_str().to_string();
        let now = self.now();
        let message = new.into_message(now);
        let queued = message.clone();
        let ack = self
            .inner
            .writer
            .submit(move |conn, _| {
                write_message(conn, &tenant, &message, now)?;
                Ok(message)
            })
            .await?;
        Ok((queued, ack))
    }

    async fn list_messages(
        &self,
        tenant: &Tenant,
        session_id: Id,
        query: MessageQuery,
    ) -> Result<Vec<Message>> {
        let tenant = tenant.as_str().to_string();
        self.read(move |conn, _| {
            let mut sql = LIST_MESSAGES.to_string();
            let mut args: Vec<Sql> = vec![
                Sql::Blob(session_id.as_bytes().to_vec()),
                Sql::Text(tenant.clone()),
            ];
            if let Some(after) = query.after {
                let at: Option<i64> = conn
                    .prepare_cached(MESSAGE_TIME)
                    .and_then(|mut s| {
                        s.query_row(params![bid(after), bid(session_id), tenant], |r| r.get(0))
                            .optional()
                    })
                    .map_err(map_sqlite)?;
                let at = at.ok_or_else(|| {
                    StoreError::invalid("after", "no such message in this session")
                })?;
                sql.push_str(" AND (created_at, id) > (?, ?)");
                args.push(Sql::Integer(at));
                args.push(Sql::Blob(after.as_bytes().to_vec()));
            }
            if let Some(roles) = query.roles.as_ref().filter(|r| !r.is_empty()) {
                sql.push_str(&format!(
                    " AND role IN ({})",
                    vec!["?"; roles.len()].join(",")
                ));
                args.extend(roles.iter().map(|r| Sql::Text(r.as_str().into())));
            }
            sql.push_str(" ORDER BY created_at, id");
            if let Some(limit) = query.limit {
                sql.push_str(" LIMIT ?");
                args.push(Sql::Integer(i64::from(limit)));
            }
            conn.prepare_cached(&sql)
                .and_then(|mut s| {
                    s.query_map(params_from_iter(args), rows::message)?
                        .collect()
                })
                .map_err(map_sqlite)
        })
        .await
    }

    async fn list_session_messages_after(
        &self,
        tenant: &Tenant,
        session_id: Id,
        after: i64,
    ) -> Result<stepwise_store::MessagesAfter> {
        self.session_messages_after(tenant, session_id, after).await
    }
}
