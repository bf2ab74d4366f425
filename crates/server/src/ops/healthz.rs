//! `GET /healthz`: the process is up (nothing else is checked).

use axum::Json;
use serde_json::json;

#[utoipa::path(get, path = "/healthz", tag = "operations", operation_id = "healthz", security(),
    responses((status = 200, description = "The process is up")))]
#[allow(dead_code)]
pub(crate) fn doc() {}

pub async fn healthz() -> Json<serde_json::Value> {
    Json(json!({"status": "ok"}))
}
