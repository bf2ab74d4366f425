//! Append items that stand for a pending write of the parent checkpoint ([`WriteRef`]):
//! checking them on a put, reading them back spliced, and copying the writes' values into
//! them before the writes are deleted.

use std::collections::{HashMap, HashSet};

use super::{
    ResolvedBlob, ResolvedBlobs, TypedValue, frame_items, pack_payload, unframe_items,
    unpack_payload,
};
use crate::error::{Result, StoreError};
use stepwise_core::Id;

/// A pending write as a put's reference finds it stored.
#[derive(Debug, Clone)]
pub struct StoredRef {
    pub channel: String,
    /// The write's payload as stored (see [`pack_payload`]).
    pub payload: Vec<u8>,
    /// Whether an append item of a stored checkpoint (or an earlier item of this put)
    /// refers to it already.
    pub referenced: bool,
}

/// Checks a reference of a put against the write it names, as stored (`None` when it is
/// not): the write must be on the blob's channel, not referred to by any other item (so a
/// write is read in place of one item only, and a value copied into one item when the write
/// goes: a thread's size stays what was sent) and, where the item names the SHA-256 of the
/// bytes it stands for, hold those bytes. A `Conflict` otherwise (the writer sends the
/// items instead). The backend then marks the write referenced, in the put's transaction.
pub fn check_write(
    index: usize,
    channel: &str,
    write: &WriteRef,
    item: &TypedValue,
    stored: Option<StoredRef>,
) -> Result<()> {
    let refuse = |why: &str| {
        Err(StoreError::Conflict(format!(
            "blobs[{index}]: pending write (task '{}', idx {}) of checkpoint '{}' {why}; send the items",
            write.task_id, write.idx, write.checkpoint_id
        )))
    };
    let Some(stored) = stored.filter(|s| s.channel == channel) else {
        return refuse(&format!("is not stored on channel '{channel}'"));
    };
    if stored.referenced {
        return refuse("is referred to by another append item already");
    }
    match WriteRef::digest_of(item) {
        Some(digest) if digest != sha256_hex(&unpack_payload(&stored.payload)?) => {
            refuse("holds other bytes than the item names")
        }
        _ => Ok(()),
    }
}

/// Lowercase hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The type name of an append item that stands for a pending write (see [`WriteRef`]).
/// Serializers' type names hold no control characters, and the API refuses them.
pub const WRITE_REF_TYPE: &str = "\u{0}write";
/// The type-name prefix of an append item whose data is a list to splice in its place
/// (the value of a [`WriteRef`], copied when its write went away). Read back, the item
/// is `{type, data, splice: true}`.
pub const SPLICE_PREFIX: &str = "\u{0}splice:";

/// A pending write of a checkpoint in the same thread and namespace. As an append item,
/// it stands for the items of the list that write holds (LangGraph's `operator.add`
/// channels append exactly what a node wrote), so a message is stored once, as the write.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct WriteRef {
    pub checkpoint_id: String,
    pub task_id: String,
    pub idx: i64,
}

impl WriteRef {
    /// The append item that stands for this write (as stored).
    pub fn to_item(&self) -> TypedValue {
        TypedValue::new(
            WRITE_REF_TYPE,
            format!("{}\n{}\n{}", self.checkpoint_id, self.task_id, self.idx),
        )
    }

    /// The item of a put that stands for this write and names the SHA-256 (hex) of the
    /// bytes it holds, checked against the stored write before the put is stored.
    pub fn to_checked_item(&self, sha256: &str) -> TypedValue {
        let mut item = self.to_item();
        item.data
            .extend_from_slice(format!("\n{sha256}").as_bytes());
        item
    }

    /// The write an append item stands for (`None` for an item that holds its value).
    pub fn of_item(item: &TypedValue) -> Option<WriteRef> {
        if item.type_name != WRITE_REF_TYPE {
            return None;
        }
        let text = std::str::from_utf8(&item.data).ok()?;
        let mut parts = text.splitn(4, '\n');
        Some(WriteRef {
            checkpoint_id: parts.next()?.to_string(),
            task_id: parts.next()?.to_string(),
            idx: parts.next()?.parse().ok()?,
        })
    }

    /// The SHA-256 a put's item names (see [`WriteRef::to_checked_item`]).
    fn digest_of(item: &TypedValue) -> Option<&str> {
        let text = std::str::from_utf8(&item.data).ok()?;
        text.splitn(4, '\n').nth(3)
    }

    /// The item that holds the write's value in place of the reference.
    pub fn spliced(value: TypedValue) -> TypedValue {
        TypedValue {
            type_name: format!("{SPLICE_PREFIX}{}", value.type_name),
            data: value.data,
        }
    }
}

/// An append item as read back: its serializer's type, and whether its data is a list
/// whose items go in its place.
pub fn item_type(item: &TypedValue) -> (&str, bool) {
    match item.type_name.strip_prefix(SPLICE_PREFIX) {
        Some(type_name) => (type_name, true),
        None => (&item.type_name, false),
    }
}

/// A pending write of one thread (session) and namespace.
pub type WriteKey = (Id, String, WriteRef);

/// Every write the append items of `blobs` refer to.
pub fn write_refs_of(blobs: &ResolvedBlobs) -> HashSet<WriteKey> {
    let mut out = HashSet::new();
    for ((session, ns, _, _), blob) in blobs {
        if let ResolvedBlob::List { items, .. } | ResolvedBlob::Since { items, .. } = blob {
            for r in items.iter().filter_map(WriteRef::of_item) {
                out.insert((*session, ns.clone(), r));
            }
        }
    }
    out
}

/// Puts the values of the writes the items of `blobs` refer to in their place (as spliced
/// items). A write that is not in `values` is a store fault: before writes are deleted,
/// their values are copied into the items that name them ([`settle_payload`]).
pub fn splice_writes(
    blobs: &mut ResolvedBlobs,
    values: &HashMap<WriteKey, TypedValue>,
) -> Result<()> {
    for ((session, ns, _, _), blob) in blobs.iter_mut() {
        if let ResolvedBlob::List { items, .. } | ResolvedBlob::Since { items, .. } = blob {
            splice_items(items, |r| {
                values.get(&(*session, ns.clone(), r.clone())).cloned()
            })?;
        }
    }
    Ok(())
}

/// Replaces the references among `items` with the values `value_of` finds, spliced.
pub fn splice_items(
    items: &mut [TypedValue],
    mut value_of: impl FnMut(&WriteRef) -> Option<TypedValue>,
) -> Result<()> {
    for item in items.iter_mut() {
        if let Some(r) = WriteRef::of_item(item) {
            *item = WriteRef::spliced(value_of(&r).ok_or_else(|| dangling(&r))?);
        }
    }
    Ok(())
}

pub(super) fn dangling(r: &WriteRef) -> StoreError {
    StoreError::Backend(format!(
        "an append blob refers to pending write (task '{}', idx {}) of checkpoint '{}', which is not stored",
        r.task_id, r.idx, r.checkpoint_id
    ))
}

/// An append blob's stored payload with its references to writes of `gone` checkpoints
/// replaced by the writes' values (before those writes are deleted): `None` when it has
/// none. `value_of` reads a write.
pub fn settle_payload(
    payload: &[u8],
    gone: &HashSet<String>,
    mut value_of: impl FnMut(&WriteRef) -> Result<Option<TypedValue>>,
) -> Result<Option<Vec<u8>>> {
    let mut items = unframe_items(&unpack_payload(payload)?)?;
    let mut changed = false;
    for item in items.iter_mut() {
        let Some(r) = WriteRef::of_item(item) else {
            continue;
        };
        if gone.contains(&r.checkpoint_id) {
            *item = WriteRef::spliced(value_of(&r)?.ok_or_else(|| dangling(&r))?);
            changed = true;
        }
    }
    Ok(changed.then(|| pack_payload(&frame_items(&items))))
}

/// The references to writes of `gone` checkpoints in a stored append payload (to read
/// those writes before [`settle_payload`], where a backend cannot read inside it).
pub fn refs_to(payload: &[u8], gone: &HashSet<String>) -> Result<Vec<WriteRef>> {
    Ok(unframe_items(&unpack_payload(payload)?)?
        .iter()
        .filter_map(WriteRef::of_item)
        .filter(|r| gone.contains(&r.checkpoint_id))
        .collect())
}
