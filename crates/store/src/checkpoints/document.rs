//! A thread's rows as the session export document holds them, and back.

use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value};
use stepwise_core::Timestamp;
use stepwise_core::base64;
use stepwise_core::document::{
    BlobKind, DocumentBlob, DocumentCheckpoint, DocumentThread, DocumentTyped, DocumentWrite,
};

use super::refs::dangling;
use super::{
    BlobBody, NewBlob, StoredBlob, TypedValue, WriteRef, item_type, pack_payload, run_id_of,
    unframe_items, unpack_payload,
};
use crate::error::{Result, StoreError};

/// A checkpoint row as stored, for a session's export document.
#[derive(Debug, Clone)]
pub struct StoredCheckpoint {
    pub checkpoint_ns: String,
    pub checkpoint_id: String,
    pub parent_checkpoint_id: Option<String>,
    pub type_name: String,
    /// As stored (see [`pack_payload`]).
    pub payload: Vec<u8>,
    pub metadata: Value,
    pub channel_versions: Value,
    pub created_at: Timestamp,
}

/// A pending write row as stored, for a session's export document.
#[derive(Debug, Clone)]
pub struct StoredWrite {
    pub checkpoint_ns: String,
    pub checkpoint_id: String,
    pub task_id: String,
    pub task_path: String,
    pub idx: i64,
    pub channel: String,
    pub type_name: String,
    pub payload: Vec<u8>,
}

/// The export document's form of a thread's rows. Writes against a checkpoint that is not
/// stored (no read can reach them) are left out, so the document imports as it is.
pub fn thread_document(
    thread_id: String,
    checkpoints: Vec<StoredCheckpoint>,
    blobs: Vec<(String, String, StoredBlob)>,
    writes: Vec<StoredWrite>,
) -> Result<DocumentThread> {
    let typed = |type_name: String, data: &[u8]| DocumentTyped {
        type_name,
        data: base64::encode(data),
        splice: false,
    };
    // Append items that refer to a pending write carry its value in the document.
    let mut written: HashMap<(&str, WriteRef), (&str, &[u8])> = HashMap::new();
    for w in &writes {
        let key = WriteRef {
            checkpoint_id: w.checkpoint_id.clone(),
            task_id: w.task_id.clone(),
            idx: w.idx,
        };
        written.insert((w.checkpoint_ns.as_str(), key), (&w.type_name, &w.payload));
    }
    let item = |ns: &str, item: TypedValue| -> Result<DocumentTyped> {
        if let Some(r) = WriteRef::of_item(&item) {
            let (type_name, payload) = written.get(&(ns, r.clone())).ok_or_else(|| dangling(&r))?;
            return Ok(DocumentTyped {
                type_name: type_name.to_string(),
                data: base64::encode(&unpack_payload(payload)?),
                splice: true,
            });
        }
        let (type_name, splice) = item_type(&item);
        Ok(DocumentTyped {
            type_name: type_name.to_string(),
            data: base64::encode(&item.data),
            splice,
        })
    };
    let keys: HashSet<(String, String)> = checkpoints
        .iter()
        .map(|c| (c.checkpoint_ns.clone(), c.checkpoint_id.clone()))
        .collect();
    let checkpoints = checkpoints
        .into_iter()
        .map(|c| {
            Ok(DocumentCheckpoint {
                checkpoint: typed(c.type_name, &unpack_payload(&c.payload)?),
                checkpoint_ns: c.checkpoint_ns,
                checkpoint_id: c.checkpoint_id,
                parent_checkpoint_id: c.parent_checkpoint_id,
                metadata: c.metadata,
                channel_versions: match c.channel_versions {
                    Value::Object(map) => map,
                    _ => Map::new(),
                },
                created_at: c.created_at,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let checkpoint_blobs = blobs
        .into_iter()
        .map(|(checkpoint_ns, channel, b)| {
            let bytes = unpack_payload(&b.payload)?;
            Ok(if b.is_append {
                DocumentBlob {
                    channel,
                    version: b.version,
                    kind: BlobKind::Append,
                    base_version: b.base_version,
                    type_name: None,
                    data: None,
                    items: unframe_items(&bytes)?
                        .into_iter()
                        .map(|i| item(&checkpoint_ns, i))
                        .collect::<Result<_>>()?,
                    checkpoint_ns,
                }
            } else {
                DocumentBlob {
                    checkpoint_ns,
                    channel,
                    version: b.version,
                    kind: BlobKind::Full,
                    base_version: None,
                    type_name: Some(b.type_name.unwrap_or_default()),
                    data: Some(base64::encode(&bytes)),
                    items: Vec::new(),
                }
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let checkpoint_writes = writes
        .into_iter()
        .filter(|w| keys.contains(&(w.checkpoint_ns.clone(), w.checkpoint_id.clone())))
        .map(|w| {
            Ok(DocumentWrite {
                data: base64::encode(&unpack_payload(&w.payload)?),
                checkpoint_ns: w.checkpoint_ns,
                checkpoint_id: w.checkpoint_id,
                task_id: w.task_id,
                task_path: w.task_path,
                idx: w.idx,
                channel: w.channel,
                type_name: w.type_name,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(DocumentThread {
        thread_id,
        checkpoints,
        checkpoint_blobs,
        checkpoint_writes,
    })
}

/// A document's thread as the rows a backend inserts (payloads packed as stored).
#[derive(Debug, Clone, Default)]
pub struct ThreadRows {
    pub thread_id: String,
    /// `(checkpoint, run_id, packed payload)`.
    pub checkpoints: Vec<(DocumentCheckpoint, Option<String>, Vec<u8>)>,
    /// `(namespace, new blob)`: its [`NewBlob::columns`] are what is stored.
    pub blobs: Vec<(String, NewBlob)>,
    /// `(write, packed payload)`.
    pub writes: Vec<(DocumentWrite, Vec<u8>)>,
}

/// Decodes a (validated) document thread into the rows to insert.
pub fn thread_rows(thread: DocumentThread) -> Result<ThreadRows> {
    let bytes = |field: &'static str, text: &str| {
        base64::decode(text)
            .ok_or_else(|| StoreError::invalid(field, "must be standard padded base64"))
    };
    let mut rows = ThreadRows {
        thread_id: thread.thread_id,
        ..ThreadRows::default()
    };
    for c in thread.checkpoints {
        let payload = pack_payload(&bytes("thread.checkpoints", &c.checkpoint.data)?);
        let run_id = run_id_of(&c.metadata);
        rows.checkpoints.push((c, run_id, payload));
    }
    for b in thread.checkpoint_blobs {
        let body = match b.kind {
            BlobKind::Full => BlobBody::Full(TypedValue {
                type_name: b.type_name.unwrap_or_default(),
                data: bytes(
                    "thread.checkpoint_blobs",
                    b.data.as_deref().unwrap_or_default(),
                )?,
            }),
            BlobKind::Append => BlobBody::Append {
                base_version: b.base_version,
                items: b
                    .items
                    .into_iter()
                    .map(|i| {
                        let value = TypedValue {
                            data: bytes("thread.checkpoint_blobs", &i.data)?,
                            type_name: i.type_name,
                        };
                        Ok(if i.splice {
                            WriteRef::spliced(value)
                        } else {
                            value
                        })
                    })
                    .collect::<Result<Vec<_>>>()?,
            },
        };
        rows.blobs.push((
            b.checkpoint_ns,
            NewBlob {
                channel: b.channel,
                version: b.version,
                body,
            },
        ));
    }
    for w in thread.checkpoint_writes {
        let payload = pack_payload(&bytes("thread.checkpoint_writes", &w.data)?);
        rows.writes.push((w, payload));
    }
    Ok(rows)
}
