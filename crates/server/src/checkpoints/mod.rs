//! LangGraph checkpoints (issue 13): a LangGraph thread is a Stepwise session of the
//! caller's tenant, and its checkpoints, channel values (blobs) and pending writes are kept
//! by the store (`stepwise_store::checkpoints`). One file per endpoint, each with its
//! request and response types, their schema rules, its validation, its OpenAPI
//! declaration and its handler; this module holds what they share.
//!
//! Values are opaque: `{type, data}` as LangGraph's serializer made them, `data` in
//! base64. The server never decodes them. An `append` blob names a `base_version` of the
//! same channel and carries only the new items; reads answer the resolved value as
//! `{type: "list", base, items}` (or `{type, data}` for a full blob with nothing on top).

pub(crate) mod copy;
pub(crate) mod delete_for_runs;
pub(crate) mod delete_thread;
pub(crate) mod get;
pub(crate) mod get_latest;
pub(crate) mod get_thread;
pub(crate) mod list;
pub(crate) mod list_all;
pub(crate) mod mirror;
pub(crate) mod prune;
pub(crate) mod put;
pub(crate) mod put_writes;
pub(crate) mod schema;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use stepwise_store::checkpoints::{MAX_CHECKPOINT_PAGE, MAX_THREAD_ID_CHARS};
use stepwise_store::{CheckpointQuery, CheckpointRecord, ResolvedBlob, TypedValue};

use crate::error::{ApiError, ApiResult};

/// Longest checkpoint id, version, channel, run id (characters).
pub const MAX_ID_CHARS: usize = 256;
/// Longest namespace, task id and task path (characters).
pub const MAX_PATH_CHARS: usize = 1024;
/// Longest type tag of a value.
pub const MAX_TYPE_CHARS: usize = 64;
/// Most blobs, writes, mirrored messages, run ids or thread ids in one request.
pub const MAX_ITEMS: usize = 1000;
/// Highest `idx` of a pending write.
pub const MAX_WRITE_IDX: i64 = i32::MAX as i64;
/// A list page when the request names no limit.
pub const DEFAULT_LIMIT: u32 = 100;
/// Text with no control characters at all (thread ids, names, versions).
pub const NO_CONTROL: &str = r"^[^\u0000-\u001F\u007F-\u009F]*$";
/// Standard base64 with padding.
pub const BASE64: &str = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$";
/// The list cursors this server issues: `<hex of the id>.<session>.<hex of the namespace>`.
pub const CURSOR: &str =
    r"^(?:[0-9A-Fa-f]{2}){0,1024}\.[0-9A-Fa-f]{32}\.(?:[0-9A-Fa-f]{2}){0,4096}$";

// --- values ------------------------------------------------------------------------------------

/// A value as LangGraph's serializer made it: a type tag and base64 bytes.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[schema(title = "TypedValue")]
#[serde(deny_unknown_fields)]
pub struct TypedJson {
    #[serde(rename = "type")]
    #[schema(
        min_length = 1,
        max_length = 64,
        pattern = r"^[^\u0000-\u001F\u007F-\u009F]*$"
    )]
    pub type_name: String,
    /// The bytes, base64 (standard alphabet, padded).
    #[schema(
        content_encoding = "base64",
        pattern = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"
    )]
    pub data: String,
}

impl From<&TypedValue> for TypedJson {
    fn from(value: &TypedValue) -> Self {
        TypedJson {
            type_name: value.type_name.clone(),
            data: base64_encode(&value.data),
        }
    }
}

/// An item of a list value. With `splice: true`, `data` is a serialized list whose items go
/// in this item's place: a node's pending write, stored once and referred to by the list.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ListItem {
    #[serde(rename = "type")]
    pub type_name: String,
    /// The bytes, base64 (standard alphabet, padded).
    #[schema(content_encoding = "base64")]
    pub data: String,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub splice: bool,
}

impl From<&TypedValue> for ListItem {
    fn from(value: &TypedValue) -> Self {
        let (type_name, splice) = stepwise_store::checkpoints::item_type(value);
        ListItem {
            type_name: type_name.to_string(),
            data: base64_encode(&value.data),
            splice,
        }
    }
}

/// Standard padded base64, shared with the session document (`stepwise_core::base64`).
pub use stepwise_core::base64::{decode as base64_decode, encode as base64_encode};

// --- reading request bodies --------------------------------------------------------------------

/// The body as a JSON object (400 otherwise).
pub(crate) fn object(body: Value) -> ApiResult<Map<String, Value>> {
    match body {
        Value::Object(map) => Ok(map),
        _ => Err(ApiError::bad_request(
            "the body is not valid: it must be a JSON object",
        )),
    }
}

/// Checks text: `min..=max` characters, none of them control characters.
pub(crate) fn check_text(field: &str, text: &str, min: usize, max: usize) -> ApiResult<()> {
    let chars = text.chars().count();
    if chars < min || chars > max || text.chars().any(char::is_control) {
        return Err(ApiError::invalid(
            field,
            format!("{field} must be {min} to {max} characters, none of them control characters"),
        ));
    }
    Ok(())
}

/// A string member (`None` when absent or null and `required` is false).
pub(crate) fn string(
    map: &Map<String, Value>,
    field: &str,
    path: &str,
    min: usize,
    max: usize,
) -> ApiResult<Option<String>> {
    match map.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => {
            check_text(path, text, min, max)?;
            Ok(Some(text.clone()))
        }
        Some(_) => Err(ApiError::invalid(path, format!("{path} must be a string"))),
    }
}

pub(crate) fn required(value: Option<String>, path: &str) -> ApiResult<String> {
    value.ok_or_else(|| ApiError::invalid(path, format!("{path} is required")))
}

/// An array member of at most [`MAX_ITEMS`] elements (empty when absent or null).
pub(crate) fn array<'a>(map: &'a Map<String, Value>, field: &str) -> ApiResult<&'a [Value]> {
    match map.get(field) {
        None | Some(Value::Null) => Ok(&[]),
        Some(Value::Array(items)) if items.len() <= MAX_ITEMS => Ok(items),
        Some(Value::Array(_)) => Err(ApiError::invalid(
            field,
            format!("{field} holds at most {MAX_ITEMS} entries"),
        )),
        Some(_) => Err(ApiError::invalid(
            field,
            format!("{field} must be an array"),
        )),
    }
}

/// An integer member from `min` to `max` (a JSON number with no fraction, `3.0` too).
pub(crate) fn integer(value: Option<&Value>, path: &str, min: i64, max: i64) -> ApiResult<i64> {
    value
        .and_then(|v| {
            v.as_i64().or_else(|| {
                v.as_f64()
                    .filter(|f| f.fract() == 0.0 && (min as f64..=max as f64).contains(f))
                    .map(|f| f as i64)
            })
        })
        .filter(|n| (min..=max).contains(n))
        .ok_or_else(|| {
            ApiError::invalid(
                path,
                format!("{path} must be an integer from {min} to {max}"),
            )
        })
}

/// Refuses members other than `allowed` (objects whose schema has no other properties).
pub(crate) fn only(map: &Map<String, Value>, allowed: &[&str], path: &str) -> ApiResult<()> {
    match map.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(key) => Err(ApiError::invalid(
            path,
            format!(
                "{path} has an unknown member '{}'",
                crate::error::cut(key, 64)
            ),
        )),
        None => Ok(()),
    }
}

/// A `{type, data}` value.
pub(crate) fn typed_value(value: &Value, path: &str) -> ApiResult<TypedValue> {
    let Value::Object(map) = value else {
        return Err(ApiError::invalid(
            path,
            format!("{path} must be an object {{type, data}}"),
        ));
    };
    only(map, &["type", "data"], path)?;
    let type_name = required(
        string(map, "type", &format!("{path}.type"), 1, MAX_TYPE_CHARS)?,
        &format!("{path}.type"),
    )?;
    let data = match map.get("data") {
        Some(Value::String(text)) => base64_decode(text).ok_or_else(|| {
            ApiError::invalid(
                &format!("{path}.data"),
                "data must be standard base64 with padding",
            )
        })?,
        _ => {
            return Err(ApiError::invalid(
                &format!("{path}.data"),
                "data must be a base64 string",
            ));
        }
    };
    Ok(TypedValue { type_name, data })
}

/// The thread id of a path, checked.
pub(crate) fn thread_id(text: &str) -> ApiResult<String> {
    check_text("thread_id", text, 1, MAX_THREAD_ID_CHARS)?;
    Ok(text.to_string())
}

/// A checkpoint id of a path, checked.
pub(crate) fn checkpoint_id(text: &str) -> ApiResult<String> {
    check_text("checkpoint_id", text, 1, MAX_ID_CHARS)?;
    Ok(text.to_string())
}

// --- answers -----------------------------------------------------------------------------------

/// A channel value: a full blob `{channel, version, type, data}`, or a list
/// `{channel, version, type: "list", base, items}` (`base` null = starts empty).
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum BlobOut {
    Full {
        channel: String,
        version: String,
        #[serde(rename = "type")]
        type_name: String,
        data: String,
    },
    List {
        channel: String,
        version: String,
        #[serde(rename = "type")]
        type_name: &'static str,
        base: Option<TypedJson>,
        items: Vec<ListItem>,
    },
    /// The items appended after `since`, a version the reader said it holds (`have`).
    Since {
        channel: String,
        version: String,
        #[serde(rename = "type")]
        type_name: &'static str,
        since: String,
        items: Vec<ListItem>,
    },
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct PendingWrite {
    pub task_id: String,
    pub idx: i64,
    pub channel: String,
    #[serde(rename = "type")]
    pub type_name: String,
    pub data: String,
    pub task_path: String,
}

/// A checkpoint with its resolved channel values and pending writes.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct CheckpointTuple {
    pub thread_id: String,
    pub checkpoint_ns: String,
    pub checkpoint_id: String,
    pub parent_checkpoint_id: Option<String>,
    pub checkpoint: TypedJson,
    #[schema(value_type = Object)]
    pub metadata: Value,
    #[schema(value_type = Object)]
    pub channel_versions: Value,
    /// The values of `channel_versions` (channels whose value is not stored are left out).
    #[schema(schema_with = schema::blobs_out)]
    pub blobs: Vec<BlobOut>,
    /// In LangGraph's order: `(task_path, task_id, idx)`.
    pub pending_writes: Vec<PendingWrite>,
}

impl From<CheckpointRecord> for CheckpointTuple {
    fn from(record: CheckpointRecord) -> Self {
        let blobs = record
            .blobs
            .iter()
            .map(|blob| match blob {
                ResolvedBlob::Full {
                    channel,
                    version,
                    value,
                } => BlobOut::Full {
                    channel: channel.clone(),
                    version: version.clone(),
                    type_name: value.type_name.clone(),
                    data: base64_encode(&value.data),
                },
                ResolvedBlob::List {
                    channel,
                    version,
                    base,
                    items,
                } => BlobOut::List {
                    channel: channel.clone(),
                    version: version.clone(),
                    type_name: "list",
                    base: base.as_ref().map(TypedJson::from),
                    items: items.iter().map(ListItem::from).collect(),
                },
                ResolvedBlob::Since {
                    channel,
                    version,
                    since,
                    items,
                } => BlobOut::Since {
                    channel: channel.clone(),
                    version: version.clone(),
                    type_name: "list",
                    since: since.clone(),
                    items: items.iter().map(ListItem::from).collect(),
                },
            })
            .collect();
        let pending_writes = record
            .pending_writes
            .iter()
            .map(|w| PendingWrite {
                task_id: w.task_id.clone(),
                idx: w.idx,
                channel: w.channel.clone(),
                type_name: w.value.type_name.clone(),
                data: base64_encode(&w.value.data),
                task_path: w.task_path.clone(),
            })
            .collect();
        CheckpointTuple {
            thread_id: record.thread_id,
            checkpoint_ns: record.checkpoint_ns,
            checkpoint_id: record.checkpoint_id,
            parent_checkpoint_id: record.parent_checkpoint_id,
            checkpoint: TypedJson::from(&record.checkpoint),
            metadata: record.metadata,
            channel_versions: record.channel_versions,
            blobs,
            pending_writes,
        }
    }
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct CheckpointPage {
    pub items: Vec<CheckpointTuple>,
    /// Pass as `cursor` for the next page; null on the last one.
    pub next_cursor: Option<String>,
}

/// The query of both list endpoints.
#[derive(Debug, Default, Deserialize)]
pub struct ListParams {
    pub checkpoint_ns: Option<String>,
    pub before: Option<String>,
    pub limit: Option<String>,
    pub cursor: Option<String>,
    pub filter: Option<String>,
}

impl utoipa::IntoParams for ListParams {
    fn into_params(
        _: impl Fn() -> Option<utoipa::openapi::path::ParameterIn>,
    ) -> Vec<utoipa::openapi::path::Parameter> {
        use crate::schemas::param;
        use utoipa::openapi::path::ParameterIn::Query;
        vec![
            param(
                "checkpoint_ns",
                Query,
                "Only this namespace; absent: every namespace",
                schema::namespace(),
            )
            .build(),
            param(
                "before",
                Query,
                "Only checkpoints with a lower id",
                schema::id(),
            )
            .build(),
            param(
                "limit",
                Query,
                "1-1000, default 100 (follow `next_cursor` for the rest)",
                schema::page_limit(),
            )
            .build(),
            param(
                "cursor",
                Query,
                "`next_cursor` of the previous page",
                schema::cursor(),
            )
            .build(),
            schema::filter_param(),
        ]
    }
}

impl ListParams {
    pub(crate) fn query(self, thread_id: Option<String>) -> ApiResult<CheckpointQuery> {
        if let Some(ns) = &self.checkpoint_ns {
            check_text("checkpoint_ns", ns, 0, MAX_PATH_CHARS)?;
        }
        if let Some(before) = &self.before {
            check_text("before", before, 1, MAX_ID_CHARS)?;
        }
        let limit = match &self.limit {
            None => DEFAULT_LIMIT,
            Some(text) => text
                .parse::<u32>()
                .ok()
                .filter(|n| (1..=MAX_CHECKPOINT_PAGE).contains(n))
                .ok_or_else(|| {
                    ApiError::invalid(
                        "limit",
                        format!("limit must be an integer from 1 to {MAX_CHECKPOINT_PAGE}"),
                    )
                })?,
        };
        if let Some(cursor) = &self.cursor
            && !regex_is_match(CURSOR, cursor)
        {
            return Err(ApiError::invalid(
                "cursor",
                "the cursor is not one this server issued",
            ));
        }
        let filter = match &self.filter {
            None => Map::new(),
            Some(text) => match serde_json::from_str::<Value>(text) {
                Ok(Value::Object(map)) => map,
                _ => {
                    return Err(ApiError::invalid(
                        "filter",
                        "filter must be a JSON object of metadata keys and values",
                    ));
                }
            },
        };
        Ok(CheckpointQuery {
            thread_id,
            checkpoint_ns: self.checkpoint_ns,
            before: self.before,
            filter,
            limit,
            cursor: self.cursor,
        })
    }
}

fn regex_is_match(_pattern: &str, text: &str) -> bool {
    static CURSOR_RE: std::sync::OnceLock<Option<regex::Regex>> = std::sync::OnceLock::new();
    CURSOR_RE
        .get_or_init(|| regex::Regex::new(CURSOR).ok())
        .as_ref()
        .is_some_and(|re| re.is_match(text))
}

/// The query of the get endpoints: `checkpoint_ns`, and `have`, the versions of channels
/// the reader already holds (a JSON object channel -> version).
#[derive(Debug, Default, Deserialize)]
pub struct GetParams {
    pub checkpoint_ns: Option<String>,
    pub have: Option<String>,
}

impl utoipa::IntoParams for GetParams {
    fn into_params(
        _: impl Fn() -> Option<utoipa::openapi::path::ParameterIn>,
    ) -> Vec<utoipa::openapi::path::Parameter> {
        use utoipa::openapi::path::ParameterIn::Query;
        vec![
            crate::schemas::param("checkpoint_ns", Query, "Default \"\"", schema::namespace())
                .build(),
            schema::have_param(),
        ]
    }
}

impl GetParams {
    pub(crate) fn ns(&self) -> ApiResult<String> {
        let ns = self.checkpoint_ns.clone().unwrap_or_default();
        check_text("checkpoint_ns", &ns, 0, MAX_PATH_CHARS)?;
        Ok(ns)
    }

    pub(crate) fn have(&self) -> ApiResult<BTreeMap<String, String>> {
        let Some(text) = &self.have else {
            return Ok(BTreeMap::new());
        };
        let bad = || {
            ApiError::invalid(
                "have",
                "have must be a JSON object of channel -> version (strings)",
            )
        };
        let Ok(Value::Object(map)) = serde_json::from_str::<Value>(text) else {
            return Err(bad());
        };
        if map.len() > MAX_ITEMS {
            return Err(ApiError::invalid(
                "have",
                format!("have names at most {MAX_ITEMS} channels"),
            ));
        }
        let mut have = BTreeMap::new();
        for (channel, version) in map {
            let Value::String(version) = version else {
                return Err(bad());
            };
            check_text("have", &channel, 1, MAX_ID_CHARS)?;
            check_text("have", &version, 1, MAX_ID_CHARS)?;
            have.insert(channel, version);
        }
        Ok(have)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_round_trips_and_refuses_what_is_not() {
        let re = regex::Regex::new(BASE64).unwrap_or_else(|e| panic!("{e}"));
        for bytes in [
            &b""[..],
            b"f",
            b"fo",
            b"foo",
            b"foob",
            b"fooba",
            b"foobar",
            &[0, 255, 128, 7],
        ] {
            let text = base64_encode(bytes);
            assert!(re.is_match(&text), "{text}");
            assert_eq!(base64_decode(&text).as_deref(), Some(bytes));
        }
        assert_eq!(base64_encode(b"foobar"), "Zm9vYmFy");
        assert_eq!(base64_decode("QR=="), Some(vec![0x41]));
        for bad in ["Zg", "Zg=", "Z===", "Zm9v!A==", "=Zm9", "Zg==Zg=="] {
            assert_eq!(base64_decode(bad), None, "{bad}");
        }
    }
}
