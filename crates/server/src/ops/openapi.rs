//! `GET /openapi.json`: the OpenAPI document of this server (built by `crate::openapi`).

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use stepwise_store::Store;

use crate::AppState;

#[utoipa::path(get, path = "/openapi.json", tag = "operations", operation_id = "openapi", security(),
    responses((status = 200, description = "This document", body = Object)))]
#[allow(dead_code)]
pub(crate) fn doc() {}

pub async fn openapi<S: Store>(State(state): State<AppState<S>>) -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        crate::openapi::openapi_json_with(state.mounts.openapi),
    )
        .into_response()
}
