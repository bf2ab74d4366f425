//! LangGraph checkpoints: inputs and outputs of the checkpoint calls, and the pieces every
//! backend shares (payload encoding, append-chain resolution, the list cursor).
//!
//! A LangGraph thread is a session of the tenant (the `threads` rows map a thread id to
//! its session). Values are opaque to the server: a `{type, data}` pair as LangGraph's
//! serializer produced it, stored byte for byte (zstd-compressed over a threshold).
//!
//! Channel values (blobs) are written once per `(thread, namespace, channel, version)`.
//! An `append` blob stores only the items added on top of `base_version` of the same
//! channel, so a message list that grows by one message per step stores one message per
//! step; reading resolves the chain down to a `full` blob (or an append with no base).
//!
//! `refs.rs`: append items that stand for a pending write of the parent checkpoint (a
//! node's output stored once). `document.rs`: a thread's rows in the export document.

use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value, json};
use stepwise_core::{EventType, Id, Timestamp};

use crate::NewEvent;
use crate::error::{Result, StoreError};

mod document;
mod refs;

pub use document::{StoredCheckpoint, StoredWrite, ThreadRows, thread_document, thread_rows};
pub use refs::{
    SPLICE_PREFIX, StoredRef, WRITE_REF_TYPE, WriteKey, WriteRef, check_write, item_type, refs_to,
    settle_payload, sha256_hex, splice_items, splice_writes, write_refs_of,
};

/// Most checkpoints one list page holds.
pub const MAX_CHECKPOINT_PAGE: u32 = 1000;
/// Longest thread id (characters).
pub const MAX_THREAD_ID_CHARS: usize = 256;
/// Payloads longer than this are stored zstd-compressed.
pub const BLOB_COMPRESS_THRESHOLD: usize = 1024;

/// A value as LangGraph's serializer produced it (`dumps_typed`): a type tag and bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypedValue {
    pub type_name: String,
    pub data: Vec<u8>,
}

impl TypedValue {
    pub fn new(type_name: impl Into<String>, data: impl Into<Vec<u8>>) -> Self {
        TypedValue {
            type_name: type_name.into(),
            data: data.into(),
        }
    }
}

/// What a blob stores: the whole value, or items appended to an earlier version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BlobBody {
    Full(TypedValue),
    /// The list at `base_version` (an empty list when `None`) followed by `items`.
    Append {
        base_version: Option<String>,
        items: Vec<TypedValue>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewBlob {
    pub channel: String,
    pub version: String,
    pub body: BlobBody,
}

/// A checkpoint to store (a put). The thread and its session are created on the first one.
#[derive(Debug, Clone)]
pub struct NewCheckpoint {
    pub thread_id: String,
    /// Owner of the session when the put creates it.
    pub user_id: String,
    pub checkpoint_ns: String,
    pub checkpoint_id: String,
    pub parent_checkpoint_id: Option<String>,
    pub checkpoint: TypedValue,
    /// A JSON object; its `run_id` (a string) is what `delete_checkpoints_for_runs` matches.
    pub metadata: Value,
    /// Channel -> version (strings): the blobs this checkpoint's state is made of.
    pub channel_versions: Map<String, Value>,
    pub blobs: Vec<NewBlob>,
    /// Whether the put stores its [`checkpoint_created`] event in its own transaction.
    /// False when the caller publishes the event itself, after what must come before it
    /// on the session's stream (the conversation a put mirrors).
    pub announce: bool,
}

impl NewCheckpoint {
    /// The append blobs whose `base_version` is not in this put, as `(index, channel, base)`:
    /// each must already be stored, or the put is refused with [`missing_base`].
    pub fn outside_bases(&self) -> impl Iterator<Item = (usize, &str, &str)> {
        self.blobs.iter().enumerate().filter_map(|(i, blob)| {
            let BlobBody::Append {
                base_version: Some(base),
                ..
            } = &blob.body
            else {
                return None;
            };
            let in_put = self
                .blobs
                .iter()
                .any(|b| b.channel == blob.channel && &b.version == base);
            (!in_put).then_some((i, blob.channel.as_str(), base.as_str()))
        })
    }
}

impl NewCheckpoint {
    /// The append items that stand for a pending write of the parent checkpoint, as
    /// `(blob index, channel, reference, item)`: each write must be stored, on the blob's
    /// channel, with the bytes the item names (see [`check_write`]).
    pub fn write_refs(&self) -> impl Iterator<Item = (usize, &str, WriteRef, &TypedValue)> {
        self.blobs.iter().enumerate().flat_map(|(i, blob)| {
            let items: &[TypedValue] = match &blob.body {
                BlobBody::Append { items, .. } => items,
                BlobBody::Full(_) => &[],
            };
            items
                .iter()
                .filter_map(|item| WriteRef::of_item(item).map(|r| (r, item)))
                .map(move |(r, item)| (i, blob.channel.as_str(), r, item))
        })
    }
}

/// The refusal of an append blob whose base is neither stored nor in the same put (the
/// writer sends the whole value instead).
pub fn missing_base(index: usize, channel: &str, base: &str) -> StoreError {
    StoreError::Conflict(format!(
        "blobs[{index}]: base_version '{base}' of channel '{channel}' is not stored; send the whole value"
    ))
}

/// A checkpoint as a backend reads its row, before its blobs and writes are added.
pub struct CheckpointRow {
    pub thread_id: String,
    pub session_id: Id,
    pub checkpoint_ns: String,
    pub checkpoint_id: String,
    pub parent_checkpoint_id: Option<String>,
    pub type_name: String,
    /// As [`pack_payload`] stored it.
    pub payload: Vec<u8>,
    /// JSON text.
    pub metadata: String,
    /// JSON text of the channel -> version object.
    pub channel_versions: String,
    pub created_at: i64,
}

/// Resolved channel values by `(session, namespace, channel, version)`.
pub type ResolvedBlobs = HashMap<(Id, String, String, String), ResolvedBlob>;

impl CheckpointRow {
    /// Its `channel_versions` (`null` when the stored text cannot be read).
    pub fn versions(&self) -> Value {
        serde_json::from_str(&self.channel_versions).unwrap_or(Value::Null)
    }

    /// The record: the blobs of `channel_versions` (its [`versions`](Self::versions)) that
    /// `resolved` holds, and its pending writes.
    pub fn into_record(
        self,
        channel_versions: Value,
        resolved: &ResolvedBlobs,
        pending_writes: Vec<WriteRecord>,
    ) -> Result<CheckpointRecord> {
        let blobs = channel_version_pairs(&channel_versions)
            .into_iter()
            .filter_map(|(channel, version)| {
                resolved
                    .get(&(
                        self.session_id,
                        self.checkpoint_ns.clone(),
                        channel,
                        version,
                    ))
                    .cloned()
            })
            .collect();
        Ok(CheckpointRecord {
            thread_id: self.thread_id,
            session_id: self.session_id,
            checkpoint_ns: self.checkpoint_ns,
            checkpoint_id: self.checkpoint_id,
            parent_checkpoint_id: self.parent_checkpoint_id,
            checkpoint: TypedValue {
                type_name: self.type_name,
                data: unpack_payload(&self.payload)?,
            },
            metadata: serde_json::from_str(&self.metadata).unwrap_or(Value::Null),
            channel_versions,
            created_at: Timestamp(self.created_at),
            blobs,
            pending_writes,
        })
    }
}

/// The `checkpoint.created` event of a put that stored its checkpoint: `Checkpoint {id}`,
/// with `{thread_id, checkpoint_ns, checkpoint_id, step}` as metadata (`step` from the
/// checkpoint's metadata, `null` without one). For a put that [announces](NewCheckpoint::announce)
/// it, a backend inserts it in the put's own transaction: the checkpoint is never stored
/// without its event (a crash between the two), and the event costs no commit of its own.
pub fn checkpoint_created(session_id: Id, new: &NewCheckpoint) -> NewEvent {
    NewEvent {
        session_id,
        message_id: None,
        execution_id: None,
        event_type: EventType::CheckpointCreated,
        content: format!("Checkpoint {}", new.checkpoint_id),
        metadata: json!({
            "thread_id": new.thread_id,
            "checkpoint_ns": new.checkpoint_ns,
            "checkpoint_id": new.checkpoint_id,
            "step": new.metadata.get("step").cloned().unwrap_or(Value::Null),
        }),
    }
}

/// What a put did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckpointPut {
    pub session_id: Id,
    /// False when the checkpoint was already stored (nothing was written).
    pub created: bool,
    /// True when this put created the thread (and its session).
    pub thread_created: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewWrite {
    /// LangGraph's index; negative for its special channels (a write there replaces).
    pub idx: i64,
    pub channel: String,
    pub value: TypedValue,
}

/// Pending writes of one task against one checkpoint.
#[derive(Debug, Clone)]
pub struct PutWrites {
    pub thread_id: String,
    pub user_id: String,
    pub checkpoint_ns: String,
    pub checkpoint_id: String,
    pub task_id: String,
    pub task_path: String,
    pub writes: Vec<NewWrite>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteRecord {
    pub task_id: String,
    pub idx: i64,
    pub channel: String,
    pub value: TypedValue,
    pub task_path: String,
}

/// A channel value read back, its append chain resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResolvedBlob {
    /// A full blob with nothing appended on top.
    Full {
        channel: String,
        version: String,
        value: TypedValue,
    },
    /// A list: `base` (a full value; `None` = an empty list) followed by `items`.
    List {
        channel: String,
        version: String,
        base: Option<TypedValue>,
        items: Vec<TypedValue>,
    },
    /// The items appended after version `since`, which the reader already holds (see
    /// `CheckpointStore::get_checkpoint_since`).
    Since {
        channel: String,
        version: String,
        since: String,
        items: Vec<TypedValue>,
    },
}

impl ResolvedBlob {
    pub fn channel(&self) -> &str {
        match self {
            ResolvedBlob::Full { channel, .. }
            | ResolvedBlob::List { channel, .. }
            | ResolvedBlob::Since { channel, .. } => channel,
        }
    }
}

/// A stored checkpoint with its resolved channel values and pending writes.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckpointRecord {
    pub thread_id: String,
    pub session_id: Id,
    pub checkpoint_ns: String,
    pub checkpoint_id: String,
    pub parent_checkpoint_id: Option<String>,
    pub checkpoint: TypedValue,
    pub metadata: Value,
    pub channel_versions: Value,
    pub created_at: Timestamp,
    /// One per channel of `channel_versions` whose blob is stored, by channel name.
    pub blobs: Vec<ResolvedBlob>,
    /// In LangGraph's order: `(task_path, task_id, idx)`.
    pub pending_writes: Vec<WriteRecord>,
}

/// What `list_checkpoints` returns, newest (`checkpoint_id` descending) first.
#[derive(Debug, Clone, Default)]
pub struct CheckpointQuery {
    /// `None`: every thread of the tenant.
    pub thread_id: Option<String>,
    /// `None`: every namespace.
    pub checkpoint_ns: Option<String>,
    /// Only checkpoints with an id lower than this one.
    pub before: Option<String>,
    /// Top-level metadata keys and the JSON value each must equal (a missing key equals
    /// `null`).
    pub filter: Map<String, Value>,
    /// 1 to [`MAX_CHECKPOINT_PAGE`].
    pub limit: u32,
    pub cursor: Option<String>,
}

impl CheckpointQuery {
    pub fn limit(&self) -> u32 {
        self.limit.clamp(1, MAX_CHECKPOINT_PAGE)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadInfo {
    pub thread_id: String,
    pub session_id: Id,
    pub checkpoints: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PruneStrategy {
    /// Keep the latest checkpoint of each namespace (and the blobs and writes it needs).
    KeepLatest,
    /// Delete every checkpoint of the threads.
    Delete,
}

/// What a backend that keeps no checkpoints answers to every checkpoint call.
pub fn unsupported() -> StoreError {
    StoreError::InvalidState("checkpoints need the SQLite or PostgreSQL backend".into())
}

/// The `run_id` a checkpoint's metadata names.
pub fn run_id_of(metadata: &Value) -> Option<String> {
    metadata
        .get("run_id")
        .and_then(Value::as_str)
        .map(str::to_string)
}

/// Checks a thread id: 1 to 256 characters, no control characters.
pub fn check_thread_id(thread_id: &str, field: &'static str) -> Result<()> {
    let chars = thread_id.chars().count();
    if chars == 0 || chars > MAX_THREAD_ID_CHARS || thread_id.chars().any(char::is_control) {
        return Err(StoreError::invalid(
            field,
            format!(
                "a thread id is 1 to {MAX_THREAD_ID_CHARS} characters, none of them control characters"
            ),
        ));
    }
    Ok(())
}

// --- payloads ----------------------------------------------------------------------------------

const RAW: u8 = 0;
const ZSTD: u8 = 1;

/// Stored bytes of a payload: a marker byte, then the bytes (zstd over the threshold).
pub fn pack_payload(bytes: &[u8]) -> Vec<u8> {
    let packed = stepwise_core::codec::pack(bytes.to_vec(), BLOB_COMPRESS_THRESHOLD);
    let compressed = packed.len() < bytes.len();
    let mut out = Vec::with_capacity(packed.len() + 1);
    out.push(if compressed { ZSTD } else { RAW });
    out.extend_from_slice(&packed);
    out
}

/// The bytes [`pack_payload`] stored.
pub fn unpack_payload(stored: &[u8]) -> Result<Vec<u8>> {
    match stored.split_first() {
        Some((&RAW, rest)) => Ok(rest.to_vec()),
        Some((&ZSTD, rest)) => stepwise_core::codec::unpack(rest)
            .map(|b| b.into_owned())
            .map_err(|e| StoreError::Backend(format!("a stored checkpoint payload: {e}"))),
        _ => Err(StoreError::Backend(
            "a stored checkpoint payload has an unknown encoding".into(),
        )),
    }
}

/// The items of an append blob as one payload: `(type length, type, data length, data)`
/// per item, lengths as 4-byte little-endian integers.
pub fn frame_items(items: &[TypedValue]) -> Vec<u8> {
    let size: usize = items
        .iter()
        .map(|i| 8 + i.type_name.len() + i.data.len())
        .sum();
    let mut out = Vec::with_capacity(size);
    for item in items {
        out.extend_from_slice(&(item.type_name.len() as u32).to_le_bytes());
        out.extend_from_slice(item.type_name.as_bytes());
        out.extend_from_slice(&(item.data.len() as u32).to_le_bytes());
        out.extend_from_slice(&item.data);
    }
    out
}

pub fn unframe_items(mut bytes: &[u8]) -> Result<Vec<TypedValue>> {
    let bad = || StoreError::Backend("a stored append blob is truncated".into());
    let take = |bytes: &mut &[u8]| -> Result<Vec<u8>> {
        let (len, rest) = bytes.split_first_chunk::<4>().ok_or_else(bad)?;
        let len = u32::from_le_bytes(*len) as usize;
        if rest.len() < len {
            return Err(bad());
        }
        let (value, rest) = rest.split_at(len);
        *bytes = rest;
        Ok(value.to_vec())
    };
    let mut items = Vec::new();
    while !bytes.is_empty() {
        let type_name = String::from_utf8(take(&mut bytes)?).map_err(|_| bad())?;
        let data = take(&mut bytes)?;
        items.push(TypedValue { type_name, data });
    }
    Ok(items)
}

/// A blob row as stored: `type_name` is `None` for an append.
#[derive(Debug, Clone)]
pub struct StoredBlob {
    pub version: String,
    pub base_version: Option<String>,
    pub is_append: bool,
    pub type_name: Option<String>,
    /// As stored (see [`pack_payload`]).
    pub payload: Vec<u8>,
}

impl NewBlob {
    /// The columns a backend stores: `(is_append, base_version, type_name, payload)`.
    pub fn columns(&self) -> (bool, Option<&str>, Option<&str>, Vec<u8>) {
        match &self.body {
            BlobBody::Full(value) => (
                false,
                None,
                Some(value.type_name.as_str()),
                pack_payload(&value.data),
            ),
            BlobBody::Append {
                base_version,
                items,
            } => {
                // A reference is stored without the digest its put was checked with.
                let framed = if items.iter().any(|i| WriteRef::of_item(i).is_some()) {
                    let items: Vec<TypedValue> = items
                        .iter()
                        .map(|i| WriteRef::of_item(i).map_or_else(|| i.clone(), |r| r.to_item()))
                        .collect();
                    frame_items(&items)
                } else {
                    frame_items(items)
                };
                (true, base_version.as_deref(), None, pack_payload(&framed))
            }
        }
    }
}

/// Resolves `version` of `channel` from its stored rows (any superset of the chain):
/// `Ok(None)` when a link is missing (the caller may read more rows and try again).
///
/// With `have` (a version the reader holds), a chain that reaches it before a full blob
/// resolves to [`ResolvedBlob::Since`]: the items appended after it.
pub fn resolve_chain(
    channel: &str,
    version: &str,
    rows: &HashMap<String, StoredBlob>,
    have: Option<&str>,
) -> Result<Option<ResolvedBlob>> {
    let mut chain: Vec<&StoredBlob> = Vec::new();
    let mut seen = HashSet::new();
    let mut next = Some(version.to_string());
    let mut base = None;
    while let Some(v) = next.take() {
        if have == Some(v.as_str()) {
            let mut items = Vec::new();
            for row in chain.iter().rev() {
                items.extend(unframe_items(&unpack_payload(&row.payload)?)?);
            }
            return Ok(Some(ResolvedBlob::Since {
                channel: channel.to_string(),
                version: version.to_string(),
                since: v,
                items,
            }));
        }
        if !seen.insert(v.clone()) {
            return Err(StoreError::Backend(format!(
                "the append chain of channel '{channel}' loops at version '{v}'"
            )));
        }
        let Some(row) = rows.get(&v) else {
            return Ok(None);
        };
        if row.is_append {
            chain.push(row);
            next = row.base_version.clone();
        } else {
            base = Some(TypedValue {
                type_name: row.type_name.clone().unwrap_or_default(),
                data: unpack_payload(&row.payload)?,
            });
        }
    }
    if chain.is_empty() {
        return Ok(base.map(|value| ResolvedBlob::Full {
            channel: channel.to_string(),
            version: version.to_string(),
            value,
        }));
    }
    let mut items = Vec::new();
    for row in chain.iter().rev() {
        items.extend(unframe_items(&unpack_payload(&row.payload)?)?);
    }
    Ok(Some(ResolvedBlob::List {
        channel: channel.to_string(),
        version: version.to_string(),
        base,
        items,
    }))
}

/// The versions a chain from `version` goes through (for garbage collection): every
/// version reached, the missing ones included.
pub fn chain_versions(version: &str, links: &HashMap<String, Option<String>>) -> Vec<String> {
    let mut out = Vec::new();
    let mut next = Some(version.to_string());
    while let Some(v) = next.take() {
        if out.contains(&v) {
            break;
        }
        next = links.get(&v).cloned().flatten();
        out.push(v);
    }
    out
}

/// The `(channel, version)` pairs of a `channel_versions` object (string versions only;
/// numbers are taken by their JSON text), sorted by channel.
pub fn channel_version_pairs(channel_versions: &Value) -> Vec<(String, String)> {
    let mut pairs: Vec<(String, String)> = channel_versions
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(channel, version)| {
            let version = match version {
                Value::String(s) => s.clone(),
                Value::Number(n) => n.to_string(),
                _ => return None,
            };
            Some((channel.clone(), version))
        })
        .collect();
    pairs.sort();
    pairs
}

// --- the list cursor ---------------------------------------------------------------------------

/// The keyset position of a checkpoint in a list: `(checkpoint_id, session, namespace)`,
/// written `<hex of the id>.<session uuid, 32 hex digits>.<hex of the namespace>`. Any text of
/// that shape decodes (bytes that are not UTF-8 are replaced), so a cursor is easy to check.
pub mod checkpoint_cursor {
    use super::*;

    fn hex(text: &str) -> String {
        text.bytes().map(|b| format!("{b:02x}")).collect()
    }

    fn unhex(text: &str) -> Option<String> {
        if !text.len().is_multiple_of(2) {
            return None;
        }
        let bytes: Option<Vec<u8>> = (0..text.len())
            .step_by(2)
            .map(|i| {
                text.get(i..i + 2)
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
            })
            .collect();
        Some(String::from_utf8_lossy(&bytes?).into_owned())
    }

    pub fn encode(checkpoint_id: &str, session_id: Id, checkpoint_ns: &str) -> String {
        format!(
            "{}.{}.{}",
            hex(checkpoint_id),
            session_id.simple(),
            hex(checkpoint_ns)
        )
    }

    pub fn decode(cursor: &str) -> Result<(String, Id, String)> {
        let bad = || StoreError::invalid("cursor", "the cursor is not one this server issued");
        let mut parts = cursor.split('.');
        let (Some(id), Some(session), Some(ns), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(bad());
        };
        if session.len() != 32 || cursor.len() > 16_384 {
            return Err(bad());
        }
        let session = stepwise_core::parse_id(session).ok_or_else(bad)?;
        Ok((
            unhex(id).ok_or_else(bad)?,
            session,
            unhex(ns).ok_or_else(bad)?,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(version: &str, base: Option<&str>, items: &[&str]) -> StoredBlob {
        let items: Vec<TypedValue> = items
            .iter()
            .map(|i| TypedValue::new("json", i.as_bytes()))
            .collect();
        StoredBlob {
            version: version.into(),
            base_version: base.map(str::to_string),
            is_append: true,
            type_name: None,
            payload: pack_payload(&frame_items(&items)),
        }
    }

    #[test]
    fn chains_resolve_down_to_a_full_blob_or_an_empty_start() {
        let mut rows = HashMap::new();
        rows.insert(
            "1".to_string(),
            StoredBlob {
                version: "1".into(),
                base_version: None,
                is_append: false,
                type_name: Some("msgpack".into()),
                payload: pack_payload(b"base"),
            },
        );
        rows.insert("2".into(), row("2", Some("1"), &["a"]));
        rows.insert("3".into(), row("3", Some("2"), &["b", "c"]));
        rows.insert("x".into(), row("x", None, &["z"]));
        let resolved = resolve_chain("m", "3", &rows, None).ok().flatten();
        let Some(ResolvedBlob::List { base, items, .. }) = resolved else {
            panic!("expected a list, got {resolved:?}");
        };
        assert_eq!(base, Some(TypedValue::new("msgpack", b"base".to_vec())));
        let texts: Vec<_> = items.iter().map(|i| i.data.clone()).collect();
        assert_eq!(texts, vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec()]);
        assert!(matches!(
            resolve_chain("m", "1", &rows, None),
            Ok(Some(ResolvedBlob::Full { .. }))
        ));
        assert!(matches!(
            resolve_chain("m", "x", &rows, None),
            Ok(Some(ResolvedBlob::List { base: None, .. }))
        ));
        assert!(matches!(resolve_chain("m", "9", &rows, None), Ok(None)));
        let since = resolve_chain("m", "3", &rows, Some("1")).ok().flatten();
        let Some(ResolvedBlob::Since { since, items, .. }) = since else {
            panic!("expected the items since 1, got {since:?}");
        };
        assert_eq!((since.as_str(), items.len()), ("1", 3));
        let same = resolve_chain("m", "3", &rows, Some("3")).ok().flatten();
        assert!(matches!(same, Some(ResolvedBlob::Since { items, .. }) if items.is_empty()));
        let off_chain = resolve_chain("m", "3", &rows, Some("x")).ok().flatten();
        assert!(matches!(off_chain, Some(ResolvedBlob::List { .. })));
    }

    #[test]
    fn payloads_round_trip_compressed_or_not() {
        for bytes in [b"small".to_vec(), vec![7u8; 10_000]] {
            let packed = pack_payload(&bytes);
            assert_eq!(unpack_payload(&packed).ok(), Some(bytes));
        }
        let cursor = checkpoint_cursor::encode("1ef-ab", stepwise_core::new_id(), "ns:1");
        assert!(checkpoint_cursor::decode(&cursor).is_ok());
        assert!(checkpoint_cursor::decode("zz").is_err());
    }
}
