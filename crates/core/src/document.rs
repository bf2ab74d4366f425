//! The session document: one versioned, human-readable JSON form of a whole session, used
//! by export/import and by the JSON files backend.

use serde::{Deserialize, Serialize};

use crate::model::{Execution, Message, Session, Snapshot, Step};

pub const FORMAT_VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SessionDocument {
    pub format_version: u32,
    pub session: Session,
    pub messages: Vec<Message>,
    pub executions: Vec<Execution>,
    pub steps: Vec<Step>,
    pub snapshots: Vec<Snapshot>,
}

pub use crate::document_check::{
    DocumentError, DocumentLimits, check_structure, parse_document, validate_document,
};
