//! `POST /v1/threads/{thread_id}/copy`: copies every checkpoint, blob and write of a
//! thread to another (LangGraph's `copy_thread`); the target is created like a put creates
//! a thread.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde::Serialize;
use serde_json::Value;
use stepwise_store::Store;
use stepwise_store::checkpoints::MAX_THREAD_ID_CHARS;

use super::{object, required, string, thread_id};
use crate::AppState;
use crate::auth::Caller;
use crate::error::{ApiError, ApiJson, ApiResult, ErrorBody};
use stepwise_store::prelude::*;

#[derive(Debug, utoipa::ToSchema)]
#[allow(dead_code)]
pub struct CopyThreadBody {
    #[schema(schema_with = super::schema::thread_id)]
    pub target_thread_id: String,
}

/// `{thread_id}` of the copy: the source.
pub struct SourceThreadPath;

impl utoipa::IntoParams for SourceThreadPath {
    fn into_params(
        _: impl Fn() -> Option<utoipa::openapi::path::ParameterIn>,
    ) -> Vec<utoipa::openapi::path::Parameter> {
        vec![super::schema::thread_param(
            "The source thread id (percent-encoded)",
        )]
    }
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ThreadCopied {
    /// The target thread.
    pub thread_id: String,
    #[schema(value_type = String, format = Uuid)]
    pub session_id: stepwise_core::Id,
    /// Checkpoints copied.
    pub checkpoints: u64,
}

pub async fn copy<S: Store>(
    State(state): State<AppState<S>>,
    caller: Caller,
    Path(thread): Path<String>,
    ApiJson(body): ApiJson<Value>,
) -> ApiResult<impl IntoResponse> {
    let source = thread_id(&thread)?;
    let map = object(body)?;
    let target = required(
        string(
            &map,
            "target_thread_id",
            "target_thread_id",
            1,
            MAX_THREAD_ID_CHARS,
        )?,
        "target_thread_id",
    )?;
    if target == source {
        return Err(ApiError::conflict("a thread cannot be copied onto itself"));
    }
    // Another user's thread is not a target (the source is checked with the route).
    crate::auth::access::check_thread(&state, &caller, &target).await?;
    let copied = state
        .checkpoints()?
        .copy_thread(&caller.tenant, &source, &target, &caller.user_id)
        .await?
        .ok_or_else(|| ApiError::not_found("thread"))?;
    Ok((
        StatusCode::CREATED,
        Json(ThreadCopied {
            thread_id: copied.thread_id,
            session_id: copied.session_id,
            checkpoints: copied.checkpoints,
        }),
    ))
}

#[utoipa::path(post, path = "/v1/threads/{thread_id}/copy", tag = "langgraph checkpoints",
    operation_id = "copy_thread",
    params(SourceThreadPath),
    request_body = CopyThreadBody,
    responses((status = 201, body = ThreadCopied),
              (status = 404, body = ErrorBody, description = "No such source thread (`not_found`)"),
              (status = 409, body = ErrorBody, description = "The target already has checkpoints, or is the source (`conflict`)")))]
#[allow(dead_code)]
pub(crate) fn doc() {}
