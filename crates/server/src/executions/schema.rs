//! The schemas of the executions' body fields whose rules the derive cannot say alone
//! (nullable types, uuid and text patterns, enums): typed functions named by the fields'
//! `#[schema(schema_with = ...)]`, built from the same constants the handlers check.

use stepwise_core::StepKind;
use utoipa::openapi::schema::{KnownFormat, Object, ObjectBuilder, SchemaFormat, SchemaType, Type};

use crate::sessions::MAX_CONTENT_CHARS;

use crate::schemas::{NO_CONTROL, NOT_BLANK, UUID};

/// Longest `agent_id` / `agent_name` of a snapshot.
pub(super) const MAX_AGENT_CHARS: usize = 256;

fn nullable(kind: Type) -> SchemaType {
    SchemaType::Array(vec![kind, Type::Null])
}

/// `"external"`, the only agent type opened over HTTP.
/// `external`, or a worker's agent type (queued for its workers).
pub(super) fn external_agent_type() -> Object {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .min_length(Some(1))
        .max_length(Some(64))
        .pattern(Some(stepwise_core::name::AGENT_TYPE_PATTERN))
        .description(Some("`external` (a running execution this caller drives), or a worker's agent type (a pending execution its workers claim, e.g. a worker agent's subagent); not a built-in agent type"))
        .build()
}

/// A JSON object or `null`.
pub(super) fn object_or_null() -> Object {
    ObjectBuilder::new()
        .schema_type(nullable(Type::Object))
        .build()
}

/// An id or `null`.
pub(super) fn uuid_or_null() -> Object {
    ObjectBuilder::new()
        .schema_type(nullable(Type::String))
        .format(Some(SchemaFormat::KnownFormat(KnownFormat::Uuid)))
        .pattern(Some(UUID))
        .build()
}

/// `agent_id` / `agent_name`: short text without control characters, or `null`.
pub(super) fn agent_text_or_null() -> Object {
    ObjectBuilder::new()
        .schema_type(nullable(Type::String))
        .max_length(Some(MAX_AGENT_CHARS))
        .pattern(Some(NO_CONTROL))
        .build()
}

/// A snapshot's step number (0 before the first step), or `null` for the current one.
pub(super) fn snapshot_step_number() -> Object {
    ObjectBuilder::new()
        .schema_type(nullable(Type::Integer))
        .minimum(Some(0u64))
        .maximum(Some(u64::from(u32::MAX)))
        .build()
}

/// A posted step's number (from 1), or `null` for the next one.
pub(super) fn step_number() -> Object {
    ObjectBuilder::new()
        .schema_type(nullable(Type::Integer))
        .minimum(Some(1u64))
        .maximum(Some(u64::from(u32::MAX)))
        .build()
}

/// A posted step's kind, or `null` for `action`.
pub(super) fn step_kind() -> Object {
    let mut kinds: Vec<serde_json::Value> = StepKind::ALL
        .iter()
        .map(|k| serde_json::Value::from(k.as_str()))
        .collect();
    kinds.push(serde_json::Value::Null);
    ObjectBuilder::new()
        .schema_type(nullable(Type::String))
        .enum_values(Some(kinds))
        .build()
}

/// `final_message`: the assistant's message, or `null`.
pub(super) fn final_message() -> Object {
    ObjectBuilder::new()
        .schema_type(nullable(Type::String))
        .max_length(Some(MAX_CONTENT_CHARS))
        .build()
}

/// `error_message`: 1 to [`super::MAX_ERROR_CHARS`] characters, not only spaces.
pub(super) fn error_message() -> Object {
    content_text(super::MAX_ERROR_CHARS)
}

/// `question`: 1 to `MAX_CONTENT_CHARS` characters, not only spaces.
pub(super) fn question() -> Object {
    content_text(MAX_CONTENT_CHARS)
}

fn content_text(max: usize) -> Object {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .min_length(Some(1))
        .max_length(Some(max))
        .pattern(Some(NOT_BLANK))
        .build()
}
