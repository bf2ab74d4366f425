//! `PUT /v1/threads/{thread_id}/checkpoints/{checkpoint_id}`: stores a checkpoint and the
//! channel values it introduces (LangGraph's `put`). The first put of a thread creates it.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde::Serialize;
use serde_json::{Map, Value};
use stepwise_store::{BlobBody, NewBlob, NewCheckpoint, Store};

use super::mirror::{MirrorMessage, parse_mirror};
use super::{
    MAX_ID_CHARS, MAX_ITEMS, MAX_PATH_CHARS, MAX_WRITE_IDX, array, checkpoint_id, integer, object,
    only, required, string, thread_id, typed_value,
};
use crate::AppState;
use crate::auth::Caller;
use crate::error::{ApiError, ApiJson, ApiResult, ErrorBody};
use stepwise_core::Id;
use stepwise_store::TypedValue;
use stepwise_store::checkpoints::{WriteRef, checkpoint_created};
use stepwise_store::prelude::*;

/// A checkpoint to store. `checkpoint` is LangGraph's checkpoint serialized without its
/// `channel_values`; the values are `blobs`, each written once per `(channel, version)`.
#[derive(Debug, utoipa::ToSchema)]
#[allow(dead_code)]
pub struct PutCheckpointBody {
    /// Default "".
    #[schema(schema_with = super::schema::path_or_null)]
    pub checkpoint_ns: Option<String>,
    #[schema(schema_with = super::schema::id_or_null)]
    pub parent_checkpoint_id: Option<String>,
    #[schema(schema_with = super::schema::typed_ref)]
    pub checkpoint: Value,
    /// LangGraph's checkpoint metadata; its `run_id` (a string) is what
    /// `POST /v1/checkpoints/delete-for-runs` matches, its top-level keys what `filter` does.
    #[schema(schema_with = super::schema::object_or_null)]
    pub metadata: Option<Value>,
    /// Channel -> version: the values this checkpoint's state is made of.
    #[schema(schema_with = super::schema::versions_or_null)]
    pub channel_versions: Option<Value>,
    /// New channel values: `{channel, version, type, data}` (a whole value) or
    /// `{channel, version, base_version, items}` (`items` appended to the list at
    /// `base_version` of the same channel; `base_version` null starts from an empty list).
    #[schema(schema_with = super::schema::blobs_in)]
    pub blobs: Option<Value>,
    /// New messages of the graph's `messages` channel, appended to the thread's session
    /// (once, when the checkpoint is new) so it reads like any Stepwise conversation.
    #[schema(schema_with = super::schema::mirror)]
    pub mirror: Option<Vec<MirrorMessage>>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct CheckpointStored {
    pub thread_id: String,
    pub checkpoint_ns: String,
    pub checkpoint_id: String,
    /// The thread's session.
    #[schema(value_type = String, format = Uuid)]
    pub session_id: stepwise_core::Id,
}

/// An append item: `{type, data}`, or `{write: {task_id, idx, sha256}}` for the list a pending
/// write of the parent checkpoint holds (stored once, as the write; `sha256` is the hex digest
/// of its bytes, checked against the stored write).
fn append_item(item: &Value, path: &str, parent: &Option<String>) -> ApiResult<TypedValue> {
    let Some(Value::Object(write)) = item.as_object().and_then(|m| m.get("write")) else {
        return typed_value(item, path);
    };
    if let Some(map) = item.as_object() {
        only(map, &["write"], path)?;
    }
    let at = format!("{path}.write");
    only(write, &["task_id", "idx", "sha256"], &at)?;
    let task_id = required(
        string(write, "task_id", &format!("{at}.task_id"), 1, MAX_ID_CHARS)?,
        &format!("{at}.task_id"),
    )?;
    let idx = integer(write.get("idx"), &format!("{at}.idx"), 0, MAX_WRITE_IDX)?;
    let sha256 = match write.get("sha256") {
        Some(Value::String(hex))
            if hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) =>
        {
            hex
        }
        _ => {
            return Err(ApiError::invalid(
                &format!("{at}.sha256"),
                "sha256 must be the SHA-256 of the write's bytes, as 64 lowercase hex digits",
            ));
        }
    };
    let Some(checkpoint_id) = parent.clone() else {
        // Well-formed, but there is no parent checkpoint whose write it could be.
        return Err(ApiError::conflict(
            "an item that refers to a pending write needs the parent_checkpoint_id it was written against",
        )
        .with_field(at));
    };
    Ok(WriteRef {
        checkpoint_id,
        task_id,
        idx,
    }
    .to_checked_item(sha256))
}

/// Reads and checks the whole body (nothing is written when any of it is wrong).
fn parse(
    thread: String,
    id: String,
    user_id: &str,
    body: Value,
) -> ApiResult<(NewCheckpoint, Vec<super::mirror::Mirrored>)> {
    let map = object(body)?;
    let checkpoint_ns =
        string(&map, "checkpoint_ns", "checkpoint_ns", 0, MAX_PATH_CHARS)?.unwrap_or_default();
    let parent_checkpoint_id = string(
        &map,
        "parent_checkpoint_id",
        "parent_checkpoint_id",
        1,
        MAX_ID_CHARS,
    )?;
    let checkpoint = typed_value(map.get("checkpoint").unwrap_or(&Value::Null), "checkpoint")?;
    let metadata = match map.get("metadata") {
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(m @ Value::Object(_)) => m.clone(),
        Some(_) => {
            return Err(ApiError::invalid(
                "metadata",
                "metadata must be a JSON object",
            ));
        }
    };
    let channel_versions = match map.get("channel_versions") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(versions)) => {
            if versions.len() > MAX_ITEMS {
                return Err(ApiError::invalid(
                    "channel_versions",
                    format!("channel_versions names at most {MAX_ITEMS} channels"),
                ));
            }
            for (channel, version) in versions {
                super::check_text("channel_versions", channel, 1, MAX_ID_CHARS)?;
                match version {
                    Value::String(v) => super::check_text("channel_versions", v, 1, MAX_ID_CHARS)?,
                    _ => {
                        return Err(ApiError::invalid(
                            "channel_versions",
                            "every version in channel_versions must be a string",
                        ));
                    }
                }
            }
            versions.clone()
        }
        Some(_) => {
            return Err(ApiError::invalid(
                "channel_versions",
                "channel_versions must be a JSON object of channel -> version",
            ));
        }
    };
    let mut blobs = Vec::new();
    for (i, blob) in array(&map, "blobs")?.iter().enumerate() {
        let path = format!("blobs[{i}]");
        let Value::Object(b) = blob else {
            return Err(ApiError::invalid(
                &path,
                format!("{path} must be an object"),
            ));
        };
        let channel = required(
            string(b, "channel", &format!("{path}.channel"), 1, MAX_ID_CHARS)?,
            &format!("{path}.channel"),
        )?;
        let version = required(
            string(b, "version", &format!("{path}.version"), 1, MAX_ID_CHARS)?,
            &format!("{path}.version"),
        )?;
        let body = if b.contains_key("items") {
            only(b, &["channel", "version", "base_version", "items"], &path)?;
            let base_version = string(
                b,
                "base_version",
                &format!("{path}.base_version"),
                1,
                MAX_ID_CHARS,
            )?;
            let items = match b.get("items") {
                Some(Value::Array(items)) if items.len() <= MAX_ITEMS => items
                    .iter()
                    .enumerate()
                    .map(|(k, item)| {
                        append_item(item, &format!("{path}.items[{k}]"), &parent_checkpoint_id)
                    })
                    .collect::<ApiResult<Vec<_>>>()?,
                _ => {
                    return Err(ApiError::invalid(
                        &format!("{path}.items"),
                        format!(
                            "items must be an array of at most {MAX_ITEMS} {{type, data}} values"
                        ),
                    ));
                }
            };
            BlobBody::Append {
                base_version,
                items,
            }
        } else {
            only(b, &["channel", "version", "type", "data"], &path)?;
            let mut value = Map::new();
            for key in ["type", "data"] {
                if let Some(v) = b.get(key) {
                    value.insert(key.into(), v.clone());
                }
            }
            BlobBody::Full(typed_value(&Value::Object(value), &path)?)
        };
        blobs.push(NewBlob {
            channel,
            version,
            body,
        });
    }
    let mirror = parse_mirror(map.get("mirror"))?;
    Ok((
        NewCheckpoint {
            thread_id: thread,
            user_id: user_id.to_string(),
            checkpoint_ns,
            checkpoint_id: id,
            parent_checkpoint_id,
            checkpoint,
            metadata,
            channel_versions,
            blobs,
            // A put that mirrors messages publishes its event after them (see `put`).
            announce: mirror.is_empty(),
        },
        mirror,
    ))
}

pub async fn put<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path((thread, id)): Path<(String, String)>,
    ApiJson(body): ApiJson<Value>,
) -> ApiResult<impl IntoResponse> {
    let thread = thread_id(&thread)?;
    let id = checkpoint_id(&id)?;
    let (new, mirror) = parse(thread, id, &caller.user_id, body)?;
    let event = (!new.announce).then(|| checkpoint_created(Id::nil(), &new));
    let stored = CheckpointStored {
        thread_id: new.thread_id.clone(),
        checkpoint_ns: new.checkpoint_ns.clone(),
        checkpoint_id: new.checkpoint_id.clone(),
        session_id: stepwise_core::Id::nil(),
    };
    let put = state
        .checkpoints()?
        .put_checkpoint(&caller.tenant, new)
        .await?;
    let stored = CheckpointStored {
        session_id: put.session_id,
        ..stored
    };
    if !put.created {
        return Ok((StatusCode::OK, Json(stored)));
    }
    // Without a mirror, the checkpoint's `checkpoint.created` event was stored with it, in
    // the put's transaction. With one, the event follows the mirrored conversation's, so a
    // client that sees it finds the turn's messages and steps already stored.
    if let Some(event) = event {
        super::mirror::append(&state, &caller, put.session_id, mirror).await;
        state
            .engine
            .publisher()
            .emit(
                &caller.tenant,
                Some(put.session_id),
                None,
                event.event_type,
                &event.content,
                event.metadata,
            )
            .await;
    }
    Ok((StatusCode::CREATED, Json(stored)))
}

#[utoipa::path(put, path = "/v1/threads/{thread_id}/checkpoints/{checkpoint_id}", tag = "langgraph checkpoints",
    operation_id = "put_checkpoint",
    params(super::schema::CheckpointPath),
    request_body = PutCheckpointBody,
    responses((status = 201, body = CheckpointStored, description = "Stored (the thread is created by its first checkpoint)"),
              (status = 200, body = CheckpointStored, description = "Already stored: nothing was written"),
              (status = 400, body = ErrorBody, description = "The body is not valid (`field` names the part); nothing was written"),
              (status = 404, body = ErrorBody, description = "No such thread or checkpoint in the caller's tenant (`not_found`)"),
              (status = 409, body = ErrorBody, description = "An `append` blob's base is not stored, or a pending write an item refers to is not stored on its channel with those bytes, or another item refers to it already (`conflict`); nothing was written: send the items, or the whole value"),
              (status = 422, body = ErrorBody, description = "Checkpoints need the SQLite or PostgreSQL backend (`invalid_state`)")))]
#[allow(dead_code)]
pub(crate) fn doc() {}
