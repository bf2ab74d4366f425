//! The session document: one versioned, human-readable JSON form of a whole session, used
//! by export/import and by the JSON files backend.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::model::{Execution, Message, Session, Snapshot, Step};
use crate::time::Timestamp;

pub const FORMAT_VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SessionDocument {
    /// Export writes [`FORMAT_VERSION`]; import also reads seed 004's files (format 0,
    /// described apart by the server's OpenAPI document).
    #[schema(schema_with = format_version_schema)]
    pub format_version: u32,
    pub session: Session,
    pub messages: Vec<Message>,
    pub executions: Vec<Execution>,
    pub steps: Vec<Step>,
    pub snapshots: Vec<Snapshot>,
    /// The LangGraph thread this session is, with its checkpoints; absent for an ordinary
    /// session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread: Option<DocumentThread>,
}

/// `format_version` in the OpenAPI document: the one version export writes.
fn format_version_schema() -> utoipa::openapi::schema::Object {
    utoipa::openapi::schema::ObjectBuilder::new()
        .schema_type(utoipa::openapi::schema::Type::Integer)
        .enum_values(Some([FORMAT_VERSION]))
        .build()
}

/// A LangGraph thread's checkpoints, as the store holds them (see the checkpoint calls of
/// `stepwise_store`): present only in the export of a thread's session. Bytes are standard
/// padded base64; `checkpoint_blobs` and `checkpoint_writes` refer to the checkpoints (and
/// blobs) of this same document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DocumentThread {
    pub thread_id: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checkpoints: Vec<DocumentCheckpoint>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checkpoint_blobs: Vec<DocumentBlob>,
    /// In the order they were written (LangGraph reads pending writes in that order).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checkpoint_writes: Vec<DocumentWrite>,
}

/// A value as LangGraph's serializer produced it: a type tag and base64 bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DocumentTyped {
    #[serde(rename = "type")]
    pub type_name: String,
    pub data: String,
    /// On an append blob's item: `data` is a list whose items go in this item's place.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub splice: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DocumentCheckpoint {
    pub checkpoint_ns: String,
    pub checkpoint_id: String,
    pub parent_checkpoint_id: Option<String>,
    pub checkpoint: DocumentTyped,
    /// A JSON object.
    pub metadata: Value,
    /// Channel -> version.
    pub channel_versions: Map<String, Value>,
    pub created_at: Timestamp,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum BlobKind {
    /// The whole value: `type` and `data`.
    Full,
    /// `items` appended to the list at `base_version` (an empty list when null).
    Append,
}

/// A channel value, written once per `(checkpoint_ns, channel, version)`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DocumentBlob {
    pub checkpoint_ns: String,
    pub channel: String,
    pub version: String,
    pub kind: BlobKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_version: Option<String>,
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub type_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub items: Vec<DocumentTyped>,
}

/// A pending write of a task against a checkpoint of the document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DocumentWrite {
    pub checkpoint_ns: String,
    pub checkpoint_id: String,
    pub task_id: String,
    pub task_path: String,
    pub idx: i64,
    pub channel: String,
    #[serde(rename = "type")]
    pub type_name: String,
    pub data: String,
}

pub use crate::document_check::{
    DocumentError, DocumentLimits, check_structure, parse_document, validate_document,
    validate_thread,
};
