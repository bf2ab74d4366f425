//! `POST /v1/sessions/{id}/items`: appends a batch of items as one step (all or nothing).

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde::Serialize;
use serde_json::{Value, json};
use stepwise_core::{Role, StepBody, StepKind};
use stepwise_store::Store;

use super::{MAX_ADD_BYTES, MAX_ITEMS_PER_ADD, PlannedStep, body_object, body_params, load, write};
use crate::AppState;
use crate::auth::Caller;
use crate::error::{ApiError, ApiJson, ApiResult, ErrorBody};

/// Tool calls mirrored into one step's `tool_calls` (the step limit); the rest are only in
/// `output`.
const MAX_MIRRORED_CALLS: usize = crate::limits::MAX_TOOL_CALLS_PER_STEP;
/// Characters of mirrored text per field (the exact items are in `output`).
const MAX_MIRROR_CHARS: usize = 64 * 1024;
/// Tool call arguments longer than this are mirrored as a cut string, not parsed.
const MAX_MIRRORED_ARGUMENT_CHARS: usize = 8 * 1024;

/// Items to append (each a JSON object). With `version`, the batch is written as step
/// `version + 1`: sent again, it is not written twice.
#[derive(Debug, utoipa::ToSchema)]
#[allow(dead_code)] // the schema of a body read field by field
pub struct AppendItemsBody {
    #[schema(schema_with = items_schema)]
    pub items: Vec<Value>,
    /// The version the client last read or wrote.
    #[schema(schema_with = super::version_or_null)]
    pub version: Option<u64>,
    /// The client's id for this operation (a retry sends the same).
    #[schema(schema_with = super::op_id_or_null)]
    pub op_id: Option<String>,
}

/// `items`: at most [`MAX_ITEMS_PER_ADD`] JSON objects.
fn items_schema() -> utoipa::openapi::schema::Schema {
    super::objects(Some(MAX_ITEMS_PER_ADD))
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ItemsAdded {
    pub added: usize,
    pub version: u64,
}

fn check_items(items: &[Value]) -> ApiResult<()> {
    if items.len() > MAX_ITEMS_PER_ADD {
        return Err(ApiError::invalid(
            "items",
            format!("one add carries at most {MAX_ITEMS_PER_ADD} items"),
        ));
    }
    if let Some(i) = items.iter().position(|item| !item.is_object()) {
        return Err(ApiError::invalid(
            &format!("items[{i}]"),
            "every item must be a JSON object",
        ));
    }
    let bytes = serde_json::to_vec(items).map(|b| b.len()).unwrap_or(0);
    if bytes > MAX_ADD_BYTES {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            format!("the items of one add are at most {MAX_ADD_BYTES} bytes as JSON"),
        )
        .with_field("items"));
    }
    Ok(())
}

pub async fn append<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<Value>,
) -> ApiResult<impl IntoResponse> {
    let fields = body_object(&body)?;
    let items = match fields.get("items") {
        Some(Value::Array(items)) => items,
        Some(_) => {
            return Err(ApiError::invalid(
                "items",
                "items must be an array of JSON objects",
            ));
        }
        None => return Err(ApiError::invalid("items", "missing field `items`")),
    };
    check_items(items)?;
    let params = body_params(fields)?;
    if items.is_empty() {
        let conversation = load(&state, &caller, &id, false).await?;
        let added = ItemsAdded {
            added: 0,
            version: conversation.version(),
        };
        return Ok((StatusCode::OK, Json(added)));
    }
    let written = write(&state, &caller, &id, &params, false, |_, op_id| {
        Some(add_step(items, op_id))
    })
    .await?;
    let status = if written.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    let added = ItemsAdded {
        added: items.len(),
        version: written.version,
    };
    Ok((status, Json(added)))
}

#[utoipa::path(post, path = "/v1/sessions/{id}/items", tag = "conversation items", operation_id = "append_items",
    params(crate::schemas::IdPath), request_body = AppendItemsBody,
    responses((status = 201, body = ItemsAdded),
              (status = 200, body = ItemsAdded, description = "The same add again (nothing written), or no items"),
              (status = 404, body = ErrorBody),
              (status = 409, body = ErrorBody, description = "Another write is at that version (`conflict`): read the version again"),
              (status = 413, body = ErrorBody, description = "The items are over 2 MiB as JSON (`payload_too_large`)"),
              (status = 422, body = ErrorBody, description = "The session is deleted (`invalid_state`)")))]
#[allow(dead_code)]
pub(crate) fn doc() {}

// --- mirroring items as readable step fields ---------------------------------------------------

/// The text of a message item's `content` (a string, or parts with `text`).
fn content_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|part| match part {
                Value::String(text) => Some(text.as_str()),
                Value::Object(map) => map.get("text").and_then(Value::as_str),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// The role of a message item (`{"role", "content"}`, with or without `"type": "message"`).
fn message_role(item: &Value) -> Option<&str> {
    let kind = item.get("type").and_then(Value::as_str);
    if kind.is_some_and(|t| t != "message") {
        return None;
    }
    item.get("role").and_then(Value::as_str)
}

/// A tool call item's name and arguments: `function_call` (JSON text arguments) and the
/// hosted and custom tools' `*_call` items.
fn tool_call(item: &Value) -> Option<stepwise_core::ToolCall> {
    let kind = item.get("type").and_then(Value::as_str)?;
    if !kind.ends_with("_call") {
        return None;
    }
    let id = item
        .get("call_id")
        .or_else(|| item.get("id"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    let name = item
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or(kind)
        .to_string();
    let raw = item
        .get("arguments")
        .or_else(|| item.get("input"))
        .or_else(|| item.get("action"));
    let arguments = match raw {
        Some(Value::String(text)) if text.chars().count() <= MAX_MIRRORED_ARGUMENT_CHARS => {
            serde_json::from_str::<Value>(text).unwrap_or_else(|_| Value::String(text.clone()))
        }
        Some(Value::String(text)) => Value::String(cut(text, MAX_MIRRORED_ARGUMENT_CHARS)),
        Some(other) => {
            let text = other.to_string();
            if text.chars().count() <= MAX_MIRRORED_ARGUMENT_CHARS {
                other.clone()
            } else {
                Value::String(cut(&text, MAX_MIRRORED_ARGUMENT_CHARS))
            }
        }
        None => Value::Object(Default::default()),
    };
    Some(stepwise_core::ToolCall {
        id: cut(id, 256),
        name: cut(&name, 256),
        arguments,
    })
}

/// A tool result item's text (`function_call_output` and the other `*_call_output` items).
fn tool_output(item: &Value) -> Option<String> {
    let kind = item.get("type").and_then(Value::as_str)?;
    if !kind.ends_with("_call_output") {
        return None;
    }
    Some(match item.get("output") {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(_)) => content_text(item.get("output")),
        Some(other) => other.to_string(),
        None => String::new(),
    })
}

fn cut(text: &str, max: usize) -> String {
    crate::error::cut(text, max)
}

fn join_cut(parts: &[String]) -> Option<String> {
    let text = parts
        .iter()
        .filter(|p| !p.trim().is_empty())
        .cloned()
        .collect::<Vec<_>>()
        .join("\n\n");
    (!text.trim().is_empty()).then(|| cut(&text, MAX_MIRROR_CHARS))
}

/// The step of an add: the exact items in `output`, readable mirrors beside them, and the
/// user and assistant messages to mirror as session messages.
fn add_step(items: &[Value], op_id: &str) -> PlannedStep {
    let mut said = Vec::new();
    let mut observations = Vec::new();
    let mut tool_calls = Vec::new();
    let mut messages = Vec::new();
    let mut only_input = true;
    for item in items {
        if let Some(role) = message_role(item) {
            let text = content_text(item.get("content"));
            match role {
                "user" if !text.trim().is_empty() => {
                    messages.push((Role::User, cut(&text, crate::limits::MAX_CONTENT_CHARS)));
                }
                "assistant" => {
                    only_input = false;
                    if !text.trim().is_empty() {
                        messages.push((
                            Role::Assistant,
                            cut(&text, crate::limits::MAX_CONTENT_CHARS),
                        ));
                        said.push(text);
                    }
                }
                _ => {}
            }
            continue;
        }
        only_input = false;
        if let Some(call) = tool_call(item) {
            if tool_calls.len() < MAX_MIRRORED_CALLS {
                tool_calls.push(call);
            }
        } else if let Some(text) = tool_output(item) {
            observations.push(text);
        }
    }
    let kind = if only_input && !items.is_empty() {
        StepKind::UserInput
    } else {
        StepKind::Action
    };
    PlannedStep {
        kind,
        body: StepBody {
            model_output: join_cut(&said),
            tool_calls,
            observations: join_cut(&observations),
            output: json!({"items_op": "add", "items": items, "op_id": op_id}),
            ..StepBody::default()
        },
        messages,
    }
}
