//! The shapes of checkpoint values in the OpenAPI document, as typed schemas: the
//! endpoint types name them from their `#[schema(schema_with = ...)]` attributes, and the
//! blob shapes are components of their own ([`FullBlob`], [`AppendBlob`], [`ResolvedBlob`]).

use std::borrow::Cow;

use utoipa::openapi::extensions::Extensions;
use utoipa::openapi::schema::{
    AdditionalProperties, ArrayBuilder, ObjectBuilder, OneOfBuilder, Schema, SchemaType, Type,
};
use utoipa::openapi::{Ref, RefOr};
use utoipa::{PartialSchema, ToSchema};

use super::{
    BASE64, MAX_ID_CHARS, MAX_ITEMS, MAX_PATH_CHARS, MAX_TYPE_CHARS, MAX_WRITE_IDX, NO_CONTROL,
};
use crate::schemas::typed;

/// Text of `min..=max` characters without control characters.
pub(crate) fn text(min: usize, max: usize) -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .min_length(Some(min))
        .max_length(Some(max))
        .pattern(Some(NO_CONTROL))
}

/// Standard padded base64.
fn base64() -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .content_encoding("base64")
        .pattern(Some(BASE64))
}

/// `{type, data}` of a value, inline.
fn typed_value() -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::Object)
        .required("type")
        .required("data")
        .additional_properties(Some(AdditionalProperties::FreeForm(false)))
        .property("type", text(1, MAX_TYPE_CHARS))
        .property("data", base64())
}

/// An append item that stands for a pending write of the parent checkpoint.
fn write_ref() -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::Object)
        .required("write")
        .additional_properties(Some(AdditionalProperties::FreeForm(false)))
        .property(
            "write",
            ObjectBuilder::new()
                .schema_type(Type::Object)
                .required("task_id")
                .required("idx")
                .required("sha256")
                .additional_properties(Some(AdditionalProperties::FreeForm(false)))
                .property("task_id", text(1, MAX_ID_CHARS))
                .property(
                    "sha256",
                    ObjectBuilder::new()
                        .schema_type(Type::String)
                        .pattern(Some("^[0-9a-f]{64}$"))
                        .description(Some("SHA-256 of the write's bytes (`data` decoded), hex")),
                )
                .property(
                    "idx",
                    ObjectBuilder::new()
                        .schema_type(Type::Integer)
                        .minimum(Some(0))
                        .maximum(Some(MAX_WRITE_IDX)),
                ),
        )
}

/// A namespace (`checkpoint_ns`, `task_path` of a body): at most [`MAX_PATH_CHARS`], or `null`.
pub(crate) fn path_or_null() -> Schema {
    ObjectBuilder::new()
        .schema_type(typed(Type::String, true))
        .max_length(Some(MAX_PATH_CHARS))
        .pattern(Some(NO_CONTROL))
        .build()
        .into()
}

/// A checkpoint id or version, or `null`.
pub(crate) fn id_or_null() -> Schema {
    ObjectBuilder::new()
        .schema_type(typed(Type::String, true))
        .min_length(Some(1))
        .max_length(Some(MAX_ID_CHARS))
        .pattern(Some(NO_CONTROL))
        .build()
        .into()
}

/// A checkpoint id, version, channel or run id: 1 to [`MAX_ID_CHARS`].
pub(crate) fn id() -> Schema {
    text(1, MAX_ID_CHARS).build().into()
}

/// A thread id.
pub(crate) fn thread_id() -> Schema {
    text(1, stepwise_store::checkpoints::MAX_THREAD_ID_CHARS)
        .build()
        .into()
}

/// A namespace query parameter (may be empty).
pub(crate) fn namespace() -> Schema {
    text(0, MAX_PATH_CHARS).build().into()
}

/// A task id.
pub(crate) fn task_id() -> Schema {
    text(1, MAX_PATH_CHARS).build().into()
}

/// `limit` of a checkpoint list.
pub(crate) fn page_limit() -> Schema {
    ObjectBuilder::new()
        .schema_type(Type::Integer)
        .minimum(Some(1))
        .maximum(Some(stepwise_store::checkpoints::MAX_CHECKPOINT_PAGE))
        .build()
        .into()
}

/// `cursor` of a checkpoint list.
pub(crate) fn cursor() -> Schema {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .pattern(Some(super::CURSOR))
        .build()
        .into()
}

/// Channel -> version (at most [`MAX_ITEMS`] entries).
fn versions_of(nullable: bool) -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(typed(Type::Object, nullable))
        .max_properties(Some(MAX_ITEMS))
        .property_names(Some(text(1, MAX_ID_CHARS).build()))
        .additional_properties(Some(text(1, MAX_ID_CHARS)))
}

/// `channel_versions` of a body: channel -> version, or `null`.
pub(crate) fn versions_or_null() -> Schema {
    versions_of(true).build().into()
}

/// The `have` query parameter's JSON: channel -> version the reader holds.
pub(crate) fn versions() -> Schema {
    versions_of(false).build().into()
}

/// A checkpoint's `checkpoint`: a typed value.
pub(crate) fn typed_ref() -> RefOr<Schema> {
    Ref::from_schema_name(super::TypedJson::name()).into()
}

/// `blobs` of a body: whole values and appends, or `null`.
pub(crate) fn blobs_in() -> Schema {
    ArrayBuilder::new()
        .schema_type(typed(Type::Array, true))
        .max_items(Some(MAX_ITEMS))
        .items(
            OneOfBuilder::new()
                .item(Ref::from_schema_name(FullBlob::name()))
                .item(Ref::from_schema_name(AppendBlob::name())),
        )
        .build()
        .into()
}

/// `blobs` of a checkpoint read: resolved values.
pub(crate) fn blobs_out() -> Schema {
    ArrayBuilder::new()
        .items(Ref::from_schema_name(ResolvedBlob::name()))
        .build()
        .into()
}

/// `mirror` of a body: messages to append to the thread's session, or `null`.
pub(crate) fn mirror() -> Schema {
    ArrayBuilder::new()
        .schema_type(typed(Type::Array, true))
        .max_items(Some(MAX_ITEMS))
        .items(Ref::from_schema_name(super::mirror::MirrorMessage::name()))
        .build()
        .into()
}

/// `metadata` of a body: an object or `null`.
pub(crate) fn object_or_null() -> Schema {
    crate::schemas::object_or_null()
}

/// `writes` of a pending-writes body.
pub(crate) fn writes() -> Schema {
    let idx = ObjectBuilder::new()
        .schema_type(Type::Integer)
        .minimum(Some(i64::from(i32::MIN)))
        .maximum(Some(i64::from(i32::MAX)));
    ArrayBuilder::new()
        .max_items(Some(MAX_ITEMS))
        .items(
            ObjectBuilder::new()
                .schema_type(Type::Object)
                .required("idx")
                .required("channel")
                .required("type")
                .required("data")
                .additional_properties(Some(AdditionalProperties::FreeForm(false)))
                .property("idx", idx)
                .property("channel", text(1, MAX_ID_CHARS))
                .property("type", text(1, MAX_TYPE_CHARS))
                .property("data", base64()),
        )
        .build()
        .into()
}

/// A list of ids of 1 to `max` characters, at most [`MAX_ITEMS`].
pub(crate) fn ids(max: usize) -> Schema {
    ArrayBuilder::new()
        .max_items(Some(MAX_ITEMS))
        .items(text(1, max))
        .build()
        .into()
}

/// `run_ids` of delete-for-runs.
pub(crate) fn run_ids() -> Schema {
    ids(MAX_ID_CHARS)
}

/// `thread_ids` of prune.
pub(crate) fn thread_ids() -> Schema {
    ids(stepwise_store::checkpoints::MAX_THREAD_ID_CHARS)
}

/// `strategy` of prune: `keep_latest`, `delete` or `null`.
pub(crate) fn prune_strategy() -> Schema {
    crate::schemas::string_enum_or_null(&["keep_latest", "delete"])
}

/// A whole channel value as a checkpoint write sends it.
pub struct FullBlob;

impl PartialSchema for FullBlob {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::Object)
            .required("channel")
            .required("version")
            .required("type")
            .required("data")
            .additional_properties(Some(AdditionalProperties::FreeForm(false)))
            .property("channel", text(1, MAX_ID_CHARS))
            .property("version", text(1, MAX_ID_CHARS))
            .property("type", text(1, MAX_TYPE_CHARS))
            .property("data", base64())
            .into()
    }
}

impl ToSchema for FullBlob {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("FullBlob")
    }
}

/// Items appended to the list value at `base_version` of the same channel.
pub struct AppendBlob;

impl PartialSchema for AppendBlob {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::Object)
            .required("channel")
            .required("version")
            .required("items")
            .additional_properties(Some(AdditionalProperties::FreeForm(false)))
            .property("channel", text(1, MAX_ID_CHARS))
            .property("version", text(1, MAX_ID_CHARS))
            .property("base_version", id_or_null())
            .property(
                "items",
                ArrayBuilder::new().max_items(Some(MAX_ITEMS)).items(
                    OneOfBuilder::new()
                        .item(typed_value())
                        .item(write_ref())
                        .description(Some(
                            "An item `{type, data}`, or `{write: {task_id, idx, sha256}}`: the \
                             items of the list that the parent checkpoint's pending write \
                             (task_id, idx) on this channel holds, whose bytes have that SHA-256",
                        )),
                ),
            )
            .into()
    }
}

impl ToSchema for AppendBlob {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("AppendBlob")
    }
}

/// A channel value as a read answers it: whole (`{type, data}`), resolved list
/// (`{type: "list", base, items}`) or the items after a version the reader holds
/// (`{type: "list", since, items}`).
pub struct ResolvedBlob;

impl ResolvedBlob {
    fn string() -> ObjectBuilder {
        ObjectBuilder::new().schema_type(Type::String)
    }

    fn list_tag() -> ObjectBuilder {
        ObjectBuilder::new()
            .schema_type(SchemaType::AnyValue)
            .extensions(Some(Extensions::from_iter([("const", "list")])))
    }

    fn typed_items() -> ArrayBuilder {
        ArrayBuilder::new().items(Ref::from_schema_name(super::ListItem::name()))
    }
}

impl PartialSchema for ResolvedBlob {
    fn schema() -> RefOr<Schema> {
        let full = ObjectBuilder::new()
            .schema_type(Type::Object)
            .required("channel")
            .required("version")
            .required("type")
            .required("data")
            .property("channel", Self::string())
            .property("version", Self::string())
            .property("type", Self::string())
            .property("data", Self::string().content_encoding("base64"));
        let list = ObjectBuilder::new()
            .schema_type(Type::Object)
            .required("channel")
            .required("version")
            .required("type")
            .required("base")
            .required("items")
            .property("channel", Self::string())
            .property("version", Self::string())
            .property("type", Self::list_tag())
            .property(
                "base",
                OneOfBuilder::new()
                    .item(ObjectBuilder::new().schema_type(Type::Null))
                    .item(Ref::from_schema_name(super::TypedJson::name())),
            )
            .property("items", Self::typed_items());
        let since = ObjectBuilder::new()
            .schema_type(Type::Object)
            .required("channel")
            .required("version")
            .required("type")
            .required("since")
            .required("items")
            .property("channel", Self::string())
            .property("version", Self::string())
            .property("type", Self::list_tag())
            .property("since", Self::string())
            .property("items", Self::typed_items());
        OneOfBuilder::new().item(full).item(list).item(since).into()
    }
}

impl ToSchema for ResolvedBlob {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("ResolvedBlob")
    }
}

/// A query parameter whose value is JSON text (`content: application/json` in place of a
/// `schema`). utoipa's `Parameter` has no `content`, so it is written as the parameter's
/// extension and the schema is left out.
pub(crate) fn json_query_param(
    name: &str,
    description: &str,
    schema: Schema,
) -> utoipa::openapi::path::Parameter {
    let mut parameter = utoipa::openapi::path::ParameterBuilder::new()
        .name(name)
        .parameter_in(utoipa::openapi::path::ParameterIn::Query)
        .required(utoipa::openapi::Required::False)
        .description(Some(description))
        .build();
    parameter.schema = None;
    parameter.extensions = Some(Extensions::from_iter([(
        "content",
        serde_json::json!({"application/json": {"schema": schema}}),
    )]));
    parameter
}

/// `have` of the get endpoints: channel -> version the reader holds, as JSON.
pub(crate) fn have_param() -> utoipa::openapi::path::Parameter {
    json_query_param(
        "have",
        "A JSON object channel -> version the reader holds: a list value whose chain reaches that version is answered as `{type: \"list\", since, items}`, only the items after it",
        versions(),
    )
}

/// `filter` of the list endpoints: metadata keys and values, as JSON.
pub(crate) fn filter_param() -> utoipa::openapi::path::Parameter {
    json_query_param(
        "filter",
        "A JSON object: top-level metadata keys and the values they must equal",
        ObjectBuilder::new()
            .schema_type(Type::Object)
            .build()
            .into(),
    )
}

/// A `{thread_id}` path parameter with its description.
pub(crate) fn thread_param(description: &str) -> utoipa::openapi::path::Parameter {
    crate::schemas::param(
        "thread_id",
        utoipa::openapi::path::ParameterIn::Path,
        description,
        thread_id(),
    )
    .build()
}

/// A `{checkpoint_id}` path parameter with its description (none when empty).
pub(crate) fn checkpoint_param(description: &str) -> utoipa::openapi::path::Parameter {
    crate::schemas::param(
        "checkpoint_id",
        utoipa::openapi::path::ParameterIn::Path,
        description,
        id(),
    )
    .build()
}

/// The thread id's description on most endpoints.
pub(crate) const THREAD_ID: &str = "The LangGraph thread id (percent-encoded)";

/// `{thread_id}` of the thread endpoints.
pub struct ThreadPath;

impl utoipa::IntoParams for ThreadPath {
    fn into_params(
        _: impl Fn() -> Option<utoipa::openapi::path::ParameterIn>,
    ) -> Vec<utoipa::openapi::path::Parameter> {
        vec![thread_param(THREAD_ID)]
    }
}

/// `{thread_id}/checkpoints/{checkpoint_id}` of the writing endpoints.
pub struct CheckpointPath;

impl utoipa::IntoParams for CheckpointPath {
    fn into_params(
        _: impl Fn() -> Option<utoipa::openapi::path::ParameterIn>,
    ) -> Vec<utoipa::openapi::path::Parameter> {
        vec![thread_param(THREAD_ID), checkpoint_param("")]
    }
}
