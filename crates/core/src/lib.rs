//! Stepwise's domain: the data model shared by the store, the engine, the server and the
//! CLI, plus the pieces every backend needs (ids, server time, the payload codec, names,
//! context summaries).

pub mod base64;
pub mod codec;
pub mod model;
pub mod name;
pub mod summary;
pub mod time;

pub use model::*;
pub use time::Timestamp;

/// Every id is a UUIDv7: time-ordered, so ids sort in creation order.
pub type Id = uuid::Uuid;

pub fn new_id() -> Id {
    uuid::Uuid::now_v7()
}

/// Parses an id from a path or a body; `None` for anything that is not a UUID.
pub fn parse_id(text: &str) -> Option<Id> {
    uuid::Uuid::try_parse(text).ok()
}

pub mod clock;
pub mod document;
pub mod document_check;
pub use clock::{Clock, ManualClock, SharedClock, SystemClock, system_clock};
pub use document::SessionDocument;
pub mod apikey;
