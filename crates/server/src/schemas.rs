//! Typed OpenAPI schemas for the rules a plain Rust type cannot carry (a pattern on a
//! nullable string, a set of allowed values, a page bound). Endpoint types name them from
//! their own attributes (`#[schema(schema_with = crate::schemas::title)]`,
//! `#[param(schema_with = crate::schemas::page_limit)]`), so each rule sits on the field it
//! constrains and moves with it when the field is renamed.

use utoipa::IntoParams;
use utoipa::openapi::path::{Parameter, ParameterBuilder, ParameterIn, ParameterStyle};
use utoipa::openapi::schema::{
    ArrayBuilder, KnownFormat, ObjectBuilder, Schema, SchemaFormat, SchemaType, Type,
};
use utoipa::openapi::{RefOr, Required};

use crate::limits::{MAX_CONTENT_CHARS, MAX_URL_CHARS, URL_PATTERN};
use crate::sessions::{MAX_REF_CHARS, MAX_TITLE_CHARS};

/// Text fields: no control characters other than tab, newline and carriage return.
pub const NO_CONTROL: &str = r"^[^\u0000-\u0008\u000B\u000C\u000E-\u001F\u007F-\u009F]*$";
/// Text that is not only white space (Rust's `char::is_whitespace`).
pub const NOT_BLANK: &str =
    r"[^\t\n\u000B\u000C\r \u0085\u00A0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]";
/// Session names (seed 004): `[A-Za-z0-9._-]`, 1–64, no `..`, not a reserved name.
pub const NAME: &str = concat!(
    r"^(?![Ii][Nn][Dd][Ee][Xx]$)(?![Mm][Ee][Tt][Aa][Dd][Aa][Tt][Aa]$)(?!\.$)",
    r"(?!([Cc][Oo][Nn]|[Pp][Rr][Nn]|[Aa][Uu][Xx]|[Nn][Uu][Ll]|([Cc][Oo][Mm]|[Ll][Pp][Tt])[1-9])(\.|$))",
    r"(?!.*\.\.)[A-Za-z0-9._-]{1,64}$"
);
/// The cursors this server issues: hex of `<microseconds>:<uuid without dashes>`.
pub const CURSOR: &str = r"^(3[0-9]){1,18}3[aA](3[0-9]|6[1-6]|4[1-6]){32}$";
/// A uuid in its hyphenated form.
pub const UUID: &str =
    "^[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}$";

/// `type: T` when `nullable` is false, `type: [T, "null"]` when it is true.
pub fn typed(t: Type, nullable: bool) -> SchemaType {
    if nullable {
        SchemaType::Array(vec![t, Type::Null])
    } else {
        SchemaType::Type(t)
    }
}

/// A string of at most `max` characters without control characters.
pub fn text_of(max: usize, nullable: bool) -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(typed(Type::String, nullable))
        .max_length(Some(max))
        .pattern(Some(NO_CONTROL))
}

/// A session name, or `null`.
pub fn name_of(nullable: bool) -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(typed(Type::String, nullable))
        .min_length(Some(1))
        .max_length(Some(64))
        .pattern(Some(NAME))
}

/// A uuid string.
pub fn uuid_of(nullable: bool) -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(typed(Type::String, nullable))
        .format(Some(SchemaFormat::KnownFormat(KnownFormat::Uuid)))
        .pattern(Some(UUID))
}

/// Text that is not blank, 1 to `max` characters.
pub fn content_of(max: usize) -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .min_length(Some(1))
        .max_length(Some(max))
        .pattern(Some(NOT_BLANK))
}

/// A JSON object or `null` (metadata, agent configuration).
pub fn object_or_null() -> Schema {
    ObjectBuilder::new()
        .schema_type(typed(Type::Object, true))
        .build()
        .into()
}

/// A session title, or `null`.
pub fn title() -> Schema {
    text_of(MAX_TITLE_CHARS, true).build().into()
}

/// `related_type` / `related_id` of a body, or `null`.
pub fn reference() -> Schema {
    text_of(MAX_REF_CHARS, true).build().into()
}

/// `related_type` / `related_id` as a query filter.
pub fn reference_filter() -> Schema {
    text_of(MAX_REF_CHARS, false).build().into()
}

/// A session name, or `null`.
pub fn name() -> Schema {
    name_of(true).build().into()
}

/// A session name as a query filter.
pub fn name_filter() -> Schema {
    name_of(false).build().into()
}

/// A context URL (http or https with a host), or `null`.
pub fn context_url() -> Schema {
    ObjectBuilder::new()
        .schema_type(typed(Type::String, true))
        .max_length(Some(MAX_URL_CHARS))
        .pattern(Some(URL_PATTERN))
        .build()
        .into()
}

/// A message's `content`: not blank, at most [`MAX_CONTENT_CHARS`] characters.
pub fn message_content() -> Schema {
    content_of(MAX_CONTENT_CHARS).build().into()
}

/// A uuid path parameter or query value.
pub fn uuid() -> Schema {
    uuid_of(false).build().into()
}

/// A uuid, or `null`.
pub fn uuid_or_null() -> Schema {
    uuid_of(true).build().into()
}

/// `limit` of a list: 1 to [`stepwise_store::MAX_PAGE_LIMIT`].
pub fn page_limit() -> Schema {
    ObjectBuilder::new()
        .schema_type(Type::Integer)
        .minimum(Some(1))
        .maximum(Some(stepwise_store::MAX_PAGE_LIMIT))
        .build()
        .into()
}

/// `cursor` of a list: a cursor this server issued.
pub fn cursor() -> Schema {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .pattern(Some(CURSOR))
        .build()
        .into()
}

/// An event id (`after`, `Last-Event-ID`): 0 to `i64::MAX`.
pub fn event_id() -> Schema {
    ObjectBuilder::new()
        .schema_type(Type::Integer)
        .minimum(Some(0))
        .maximum(Some(i64::MAX))
        .build()
        .into()
}

/// A comma-separated list of at least one of `values` (the parameter is `style: form`,
/// `explode: false`).
pub fn one_or_more(values: &[&str]) -> Schema {
    ArrayBuilder::new()
        .min_items(Some(1))
        .items(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .enum_values(Some(values.iter().copied())),
        )
        .build()
        .into()
}

/// An enum of strings, or `null` (the `null` among the values too).
pub fn string_enum_or_null(values: &[&str]) -> Schema {
    let values = values
        .iter()
        .map(|v| serde_json::Value::from(*v))
        .chain([serde_json::Value::Null]);
    ObjectBuilder::new()
        .schema_type(typed(Type::String, true))
        .enum_values(Some(values))
        .build()
        .into()
}

/// A parameter of an endpoint's `doc()`: required in the path, optional elsewhere, with
/// its description (none when empty) and schema. utoipa's `#[derive(IntoParams)]` drops
/// the description, `required` and `style` of a field that has `schema_with`, so the
/// parameter types of the endpoints implement `IntoParams` with this instead.
pub fn param(
    name: &str,
    location: ParameterIn,
    description: &str,
    schema: impl Into<RefOr<Schema>>,
) -> ParameterBuilder {
    let required = if matches!(location, ParameterIn::Path) {
        Required::True
    } else {
        Required::False
    };
    ParameterBuilder::new()
        .name(name)
        .parameter_in(location)
        .required(required)
        .description((!description.is_empty()).then(|| description.to_string()))
        .schema(Some(schema))
}

/// A comma-separated list parameter (`style: form`, `explode: false`).
pub fn comma_separated(builder: ParameterBuilder) -> ParameterBuilder {
    builder
        .style(Some(ParameterStyle::Form))
        .explode(Some(false))
}

/// The `{id}` path parameter of a session, execution or snapshot: a uuid. For the `doc()`
/// of an endpoint (`params(IdPath)`); the handler reads the id with `path_id`.
pub struct IdPath;

impl IntoParams for IdPath {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        vec![param("id", ParameterIn::Path, "", uuid()).build()]
    }
}

/// A lease token (`docs/workers.md`): 1 to 128 characters.
pub fn lease_token() -> Schema {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .min_length(Some(1))
        .max_length(Some(128))
        .pattern(Some(LEASE_PATTERN))
        .build()
        .into()
}

/// What a lease header may hold: printable ASCII (an HTTP header value).
pub const LEASE_PATTERN: &str = "^[!-~]{1,128}$";

/// A worker process's name: `[A-Za-z0-9._:-]`, 1 to 128 characters.
pub fn worker_id(nullable: bool) -> Schema {
    ObjectBuilder::new()
        .schema_type(typed(Type::String, nullable))
        .min_length(Some(1))
        .max_length(Some(128))
        .pattern(Some(WORKER_ID_PATTERN))
        .build()
        .into()
}

/// The `{worker_id}` path parameter (`DELETE /v1/workers/{worker_id}`): a [`worker_id`].
pub struct WorkerIdPath;

impl IntoParams for WorkerIdPath {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        vec![
            param(
                "worker_id",
                ParameterIn::Path,
                "The `worker_id` its claims sent",
                worker_id(false),
            )
            .build(),
        ]
    }
}

/// [`worker_id`] as a regular expression.
pub const WORKER_ID_PATTERN: &str = "^[A-Za-z0-9._:-]{1,128}$";

/// `{id}` and the optional `Stepwise-Lease` header of a write an external agent or a worker
/// makes (a worker's execution needs it).
pub struct IdLease;

impl IntoParams for IdLease {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        id_and_lease(
            "The lease of a worker's claim (required for a worker's execution)",
            Required::False,
        )
    }
}

/// `{id}` and the required `Stepwise-Lease` header.
pub struct IdRequiredLease;

impl IntoParams for IdRequiredLease {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        id_and_lease("The lease of the worker's claim", Required::True)
    }
}

/// The execution's `{id}` and its `Stepwise-Lease` header.
fn id_and_lease(description: &str, required: Required) -> Vec<Parameter> {
    vec![
        param("id", ParameterIn::Path, "", uuid()).build(),
        param(
            "Stepwise-Lease",
            ParameterIn::Header,
            description,
            lease_token(),
        )
        .required(required)
        .build(),
    ]
}

/// `limit` and `cursor` of a list paged by cursor.
pub struct PageParams;

impl IntoParams for PageParams {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        vec![
            param("limit", ParameterIn::Query, "", page_limit()).build(),
            param("cursor", ParameterIn::Query, "", cursor()).build(),
        ]
    }
}

/// `status` filter of the session list: one or more session statuses.
pub fn session_statuses() -> Schema {
    let statuses: Vec<&str> = stepwise_core::SessionStatus::ALL
        .iter()
        .map(|s| s.as_str())
        .collect();
    one_or_more(&statuses)
}

/// `roles` filter of the message list: one or more roles.
pub fn roles() -> Schema {
    let roles: Vec<&str> = stepwise_core::Role::ALL
        .iter()
        .map(|s| s.as_str())
        .collect();
    one_or_more(&roles)
}

/// A chat's id on the front-end paths: a session id or a session name (a uuid is a valid
/// name too).
pub fn chat_id() -> Schema {
    name_of(false).build().into()
}

/// An AG-UI run id: 1 to 128 characters.
pub fn run_id() -> Schema {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .min_length(Some(1))
        .max_length(Some(128))
        .build()
        .into()
}
