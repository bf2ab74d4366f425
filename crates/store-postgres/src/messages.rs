//! A session's messages on PostgreSQL: appended with the session's counter bumped in the
//! same statement, listed in order (after a message, by role, up to a limit).

use stepwise_core::{Id, Message};
use stepwise_store::{Ack, MessageQuery, NewMessage, Result, StoreError, Tenant};

use tokio_postgres::GenericClient;

use crate::PgStore;
use crate::sql::{self, Params, args, json_text, map_pg, message_cols};
use crate::writer::MessageJob;

/// One statement: the session row is bumped only if it exists for this tenant, and the
/// message is inserted only then (no row returned: no such session).
const APPEND_MESSAGE: &str = "WITH touched AS (UPDATE sessions SET message_count = message_count + 1, updated_at = $11, status = CASE WHEN status = 'abandoned' THEN 'active' ELSE status END WHERE id = $3 AND tenant_id = $2 RETURNING id) \
     INSERT INTO messages (id, tenant_id, session_id, role, content, execution_id, related_type, related_id, context_url, metadata, created_at) \
     SELECT $1, $2, touched.id, $4, $5, $6, $7, $8, $9, $10, $11 FROM touched RETURNING id";
/// Where listing resumes after the message `after`.
const MESSAGE_POSITION: &str =
    "SELECT created_at FROM messages WHERE id = $1 AND session_id = $2 AND tenant_id = $3";
/// The start of a listing; filters, order and limit are appended with their parameters.
const LIST_MESSAGES: &str = concat!(
    "SELECT ",
    message_cols!(),
    " FROM messages WHERE session_id = $1 AND tenant_id = $2"
);
const OLDEST_FIRST: &str = " ORDER BY created_at, id";

/// Inserts `m` and bumps its session's count (on `c`, inside the caller's transaction
/// when it is one); `NotFound` when the tenant has no such session.
pub(crate) async fn insert(c: &impl GenericClient, tenant: &Tenant, m: &Message) -> Result<()> {
    let rows = c
        .query_typed(
            APPEND_MESSAGE,
            args![
                m.id,
                tenant.as_str(),
                m.session_id,
                m.role.as_str(),
                m.content,
                m.execution_id,
                m.related_type,
                m.related_id,
                m.context_url,
                json_text(&m.metadata),
                m.created_at.0
            ],
        )
        .await
        .map_err(map_pg)?;
    if rows.is_empty() {
        return Err(StoreError::NotFound("session"));
    }
    Ok(())
}

/// A stamped message checked for what PostgreSQL's text refuses, ready for the writer.
pub(crate) fn message_job(tenant: &Tenant, message: Message) -> Result<MessageJob> {
    for (field, text) in [
        ("content", Some(&message.content)),
        ("related_type", message.related_type.as_ref()),
        ("related_id", message.related_id.as_ref()),
        ("context_url", message.context_url.as_ref()),
    ] {
        if let Some(text) = text {
            sql::check_text(field, text)?;
        }
    }
    Ok(MessageJob {
        tenant: tenant.as_str().to_string(),
        message,
    })
}

impl stepwise_store::MessageStore for PgStore {
    /// Through the group-commit writer of the message's session (see
    /// [`Self::queue_message`]), answered once committed.
    async fn append_message(&self, tenant: &Tenant, new: NewMessage) -> Result<Message> {
        self.queue_message(tenant, new).await?.1.await
    }

    /// On the writer of the message's session: it commits with the session's events and
    /// the batch's other writes, in one transaction that locks the session's row once (a
    /// statement of its own waited for the writer's lock of that row), after the writes
    /// the session queued before it.
    async fn queue_message(
        &self,
        tenant: &Tenant,
        new: NewMessage,
    ) -> Result<(Message, Ack<Message>)> {
        let job = message_job(tenant, new.into_message(self.now()))?;
        let message = job.message.clone();
        let ack = self.inner.writer.message(job).await?;
        Ok((message, ack))
    }

    async fn list_messages(
        &self,
        tenant: &Tenant,
        session_id: Id,
        query: MessageQuery,
    ) -> Result<Vec<Message>> {
        let client = self.client().await?;
        let mut p = Params::default();
        p.push(session_id);
        p.push(tenant.as_str().to_string());
        let mut sql = LIST_MESSAGES.to_string();
        if let Some(after) = query.after {
            let row = client
                .query_typed_opt(MESSAGE_POSITION, args![after, session_id, tenant.as_str()])
                .await
                .map_err(map_pg)?;
            let row =
                row.ok_or_else(|| StoreError::invalid("after", "no such message in this session"))?;
            let at: i64 = sql::get(&row, "created_at")?;
            sql.push_str(&format!(
                " AND (created_at, id) > ({}, {})",
                p.push(at),
                p.push(after)
            ));
        }
        if let Some(roles) = query.roles.as_ref().filter(|r| !r.is_empty()) {
            let list: Vec<String> = roles.iter().map(|r| r.as_str().to_string()).collect();
            sql.push_str(&format!(" AND role = ANY({})", p.push(list)));
        }
        sql.push_str(OLDEST_FIRST);
        if let Some(limit) = query.limit {
            sql.push_str(&format!(" LIMIT {}", p.push(i64::from(limit))));
        }
        let rows = client.query_typed(&sql, &p.refs()).await.map_err(map_pg)?;
        sql::collect(&rows, sql::message)
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
