//! Shapes the OpenAPI document describes that no handler builds as a Rust value: a page of
//! a list, and a frame of a front-end stream. A leaf module: the endpoints that answer with
//! them and the document (`openapi.rs`) that lists them both import from here.

use stepwise_core::{Execution, Message, Session, Snapshot, Step};
use utoipa::ToSchema;
use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};

macro_rules! list_schema {
    ($name:ident, $item:ty) => {
        /// A page of a list: the items and the cursor of the next page (`null` on the last).
        #[derive(ToSchema)]
        #[allow(dead_code)] // the schema of `crate::List`
        pub struct $name {
            pub items: Vec<$item>,
            pub next_cursor: Option<String>,
        }
    };
}

list_schema!(SessionList, Session);
list_schema!(MessageList, Message);
list_schema!(ExecutionList, Execution);
list_schema!(StepList, Step);
list_schema!(SnapshotList, Snapshot);

/// One Server-Sent Event of a front-end stream (AI SDK, AG-UI): `data` a JSON object (the
/// part or event), or `[DONE]` at the end of an AI SDK stream
#[derive(ToSchema)]
#[allow(dead_code)] // the schema of the front-end streams' frames
pub struct DataFrame {
    #[schema(schema_with = json_text)]
    pub data: String,
}

/// `data` of a front-end frame: JSON text.
fn json_text() -> Schema {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .content_media_type("application/json")
        .build()
        .into()
}
