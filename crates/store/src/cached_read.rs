//! Reading one of a session's lists (its steps or its messages) through the
//! [`SessionCache`]: the entry held plus the rows appended since, or a whole read when
//! there is no entry or the entry and the database disagree on how many rows the session
//! has (see [`crate::cache`] for why the answer is exactly what the database holds).

use std::sync::Arc;

use stepwise_core::Id;

use crate::{Cached, Result, RowOrder, RowsAfter, START_POSITION, SessionCache, Store, Tenant};

/// The session's list through the cache, put back as the most recently used entry. `None`
/// when some rows cannot be decoded (the caller then answers from an ordinary read; such
/// sessions are not cached).
pub(crate) async fn cached_rows<S: Store, O: RowOrder>(
    store: &S,
    cache: &SessionCache,
    tenant: &Tenant,
    session_id: Id,
) -> Result<Option<Arc<Cached<O>>>> {
    let held = cache.take::<O>(tenant, session_id);
    let after = held.as_ref().map_or(START_POSITION, |h| h.position);
    let read = O::read_after(store, tenant, session_id, after).await?;
    if read.skipped > 0 {
        return Ok(None);
    }
    let updated = match held {
        Some(held) if !read.whole => {
            // Cheap when no other read of this session still holds the entry.
            let mut entry = Arc::try_unwrap(held).unwrap_or_else(|shared| (*shared).clone());
            entry.absorb(read.rows);
            (entry.len() as u64 == read.total).then(|| {
                cache.count_hit(O::PART);
                entry.continue_at(read.next_position);
                entry
            })
        }
        _ => complete_entry(read).inspect(|_| cache.count_miss(O::PART)),
    };
    let entry = match updated {
        Some(entry) => entry,
        // Rows the position did not reach (committed out of order, or by a node whose
        // clock is behind): read the whole list again.
        None => match whole::<S, O>(store, cache, tenant, session_id).await? {
            Some(entry) => entry,
            None => return Ok(None),
        },
    };
    let entry = Arc::new(entry);
    cache.put(tenant, session_id, entry.clone());
    Ok(Some(entry))
}

/// A whole read of the session's rows into a fresh entry (a miss).
async fn whole<S: Store, O: RowOrder>(
    store: &S,
    cache: &SessionCache,
    tenant: &Tenant,
    session_id: Id,
) -> Result<Option<Cached<O>>> {
    cache.count_miss(O::PART);
    let read = O::read_after(store, tenant, session_id, START_POSITION).await?;
    if read.skipped > 0 {
        return Ok(None);
    }
    Ok(complete_entry(read))
}

/// A fresh entry from `read`, when it holds every row of the session.
fn complete_entry<O: RowOrder>(read: RowsAfter<O>) -> Option<Cached<O>> {
    if read.rows.len() as u64 != read.total {
        return None;
    }
    let mut entry = Cached::from_rows(read.rows);
    entry.continue_at(read.next_position);
    Some(entry)
}
