//! What a checkpoint put must satisfy before anything is written (PostgreSQL): text
//! without NUL characters, append bases that are stored, and pending writes that the append
//! items refer to stored with the bytes they name.

use stepwise_core::Id;
use stepwise_store::checkpoints::{StoredRef, WriteRef, check_write, missing_base};
use stepwise_store::{NewCheckpoint, Result, StoreError};
use tokio_postgres::GenericClient;

use crate::sql::{self, args, check_text, count, json_text, map_pg};

const BLOB_EXISTS: &str = "SELECT COUNT(*) AS n FROM checkpoint_blobs \
     WHERE tenant_id = $1 AND session_id = $2 AND checkpoint_ns = $3 AND channel = $4 AND version = $5";
// Locked until the put commits: two puts that refer to one write take turns, and the second
// finds it referenced.
const WRITE_ROW: &str = "SELECT channel, payload, referenced FROM checkpoint_writes \
     WHERE tenant_id = $1 AND session_id = $2 AND checkpoint_ns = $3 AND checkpoint_id = $4 AND task_id = $5 AND idx = $6 \
     FOR UPDATE";
const MARK_REFERENCED: &str = "UPDATE checkpoint_writes SET referenced = TRUE \
     WHERE tenant_id = $1 AND session_id = $2 AND checkpoint_ns = $3 AND checkpoint_id = $4 AND task_id = $5 AND idx = $6";

/// Every append blob's `base_version` is stored or comes in the same put, and every pending
/// write an item refers to is stored on its channel: a `Conflict` otherwise (the writer
/// sends the whole value instead).
pub(super) async fn check_bases(
    c: &impl GenericClient,
    tenant: &str,
    session: Id,
    new: &NewCheckpoint,
) -> Result<()> {
    // The rows are locked in one order (by key), so two puts naming the same writes in other
    // orders wait for each other instead of deadlocking.
    let mut refs: Vec<_> = new.write_refs().collect();
    refs.sort_by(|a, b| (&a.2.task_id, a.2.idx).cmp(&(&b.2.task_id, b.2.idx)));
    for (i, channel, r, item) in refs {
        let key = args![
            tenant,
            session,
            new.checkpoint_ns,
            r.checkpoint_id,
            r.task_id,
            r.idx
        ];
        let row = c.query_typed_opt(WRITE_ROW, key).await.map_err(map_pg)?;
        let stored = match row {
            Some(row) => Some(StoredRef {
                channel: sql::get(&row, "channel")?,
                payload: sql::get(&row, "payload")?,
                referenced: sql::get(&row, "referenced")?,
            }),
            None => None,
        };
        check_write(i, channel, &r, item, stored)?;
        // Seen by the next item of this put too: a write stands for one item.
        c.execute_typed(MARK_REFERENCED, key)
            .await
            .map_err(map_pg)?;
    }
    for (i, channel, base) in new.outside_bases() {
        let stored = count(
            c,
            BLOB_EXISTS,
            args![tenant, session, new.checkpoint_ns, channel, base],
        )
        .await?;
        if stored == 0 {
            return Err(missing_base(i, channel, base));
        }
    }
    Ok(())
}

/// PostgreSQL text cannot hold NUL characters: said before anything is written.
pub(super) fn check_put(new: &NewCheckpoint) -> Result<()> {
    let texts = [
        ("thread_id", new.thread_id.as_str()),
        ("checkpoint_ns", new.checkpoint_ns.as_str()),
        ("checkpoint_id", new.checkpoint_id.as_str()),
        ("checkpoint", new.checkpoint.type_name.as_str()),
    ];
    for (field, text) in texts {
        check_text(field, text)?;
    }
    if let Some(parent) = &new.parent_checkpoint_id {
        check_text("parent_checkpoint_id", parent)?;
    }
    for blob in &new.blobs {
        check_text("blobs", &blob.channel)?;
        check_text("blobs", &blob.version)?;
        if let stepwise_store::BlobBody::Append {
            base_version,
            items,
        } = &blob.body
        {
            if let Some(base) = base_version {
                check_text("blobs", base)?;
            }
            // A reference to a pending write is the store's own item (see `WriteRef`).
            for item in items.iter().filter(|i| WriteRef::of_item(i).is_none()) {
                check_text("blobs", &item.type_name)?;
            }
        }
        if let stepwise_store::BlobBody::Full(value) = &blob.body {
            check_text("blobs", &value.type_name)?;
        }
    }
    if json_text(&new.metadata).contains("\\u0000") {
        return Err(StoreError::invalid(
            "metadata",
            "metadata may not contain NUL characters",
        ));
    }
    Ok(())
}
