//! `GET /openapi.json`: the OpenAPI document of this server (built by `crate::openapi`).

use axum::http::header;
use axum::response::{IntoResponse, Response};

#[utoipa::path(get, path = "/openapi.json", tag = "operations", operation_id = "openapi", security(),
    responses((status = 200, description = "This document", body = Object)))]
#[allow(dead_code)]
pub(crate) fn doc() {}

pub async fn openapi() -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        crate::openapi::openapi_json(),
    )
        .into_response()
}
