//! `GET /v1/limits`: the input limits of this server, so a client (the web UI) refuses
//! over-long input before sending it, with the number the server would give.

use axum::Json;
use axum::extract::State;
use serde::Serialize;
use stepwise_store::Store;

use crate::AppState;
use crate::auth::Caller;
use crate::limits::{MAX_CONTENT_CHARS, MAX_METADATA_BYTES, MAX_URL_CHARS};
use crate::sessions::{MAX_REF_CHARS, MAX_TITLE_CHARS};

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Limits {
    /// A message's `content`, in characters.
    pub max_content_chars: usize,
    /// A request body, in bytes (`serve --max-body-bytes`).
    pub max_body_bytes: usize,
    /// A session title, in characters.
    pub max_title_chars: usize,
    /// `metadata` as JSON, in bytes.
    pub max_metadata_bytes: usize,
    /// `related_type` and `related_id`, in characters.
    pub max_ref_chars: usize,
    /// `context_url` and `initial_context_url`, in characters.
    pub max_url_chars: usize,
}

#[utoipa::path(get, path = "/v1/limits", tag = "operations", operation_id = "get_limits",
    responses((status = 200, body = Limits)))]
#[allow(dead_code)]
pub(crate) fn doc() {}

pub async fn limits<S: Store>(State(state): State<AppState<S>>, _caller: Caller) -> Json<Limits> {
    Json(Limits {
        max_content_chars: MAX_CONTENT_CHARS,
        max_body_bytes: state.config.body_limit,
        max_title_chars: MAX_TITLE_CHARS,
        max_metadata_bytes: MAX_METADATA_BYTES,
        max_ref_chars: MAX_REF_CHARS,
        max_url_chars: MAX_URL_CHARS,
    })
}
