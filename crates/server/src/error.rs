//! The one API error type: every status code of an error answer is chosen here, and every
//! rejection of axum's extractors is turned into the error shape of api.md:
//! `{"error": {"code", "message", "field"}}`.

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde::de::DeserializeOwned;
use stepwise_core::Id;
use stepwise_store::StoreError;

#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    pub field: Option<String>,
    /// Whole seconds for a `Retry-After` header (429 answers).
    pub retry_after: Option<u64>,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct ErrorDetail {
    pub code: String,
    pub message: String,
    pub field: Option<String>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
            field: None,
            retry_after: None,
        }
    }

    pub fn with_field(mut self, field: impl Into<String>) -> Self {
        self.field = Some(field.into());
        self
    }

    pub fn invalid(field: &str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request", message).with_field(field)
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request", message)
    }

    pub fn not_found(what: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("{what} not found"),
        )
    }

    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
    }

    /// 403 `forbidden`: the caller's role may not do this (`docs/security.md`).
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "forbidden", message)
    }

    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, "conflict", message)
    }

    pub fn invalid_state(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_state", message)
    }

    /// 503 `storage_full`: the database's disk is full. Like `unavailable`, the request may
    /// succeed later (once space is freed), so it is a 503; the code tells an operator
    /// what to fix.
    pub fn storage_full() -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "storage_full",
            "the server's storage is full: nothing can be saved until space is freed; reads still work",
        )
    }

    /// 429 `rate_limited` with `Retry-After: seconds` (at least 1).
    pub fn rate_limited(seconds: u64, message: impl Into<String>) -> Self {
        let mut error = Self::new(StatusCode::TOO_MANY_REQUESTS, "rate_limited", message);
        error.retry_after = Some(seconds.max(1));
        error
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let retry_after = self.retry_after;
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code.to_string(),
                message: self.message,
                field: self.field,
            },
        };
        let mut response = (self.status, axum::Json(body)).into_response();
        if let Some(seconds) = retry_after {
            response.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from(seconds.max(1)),
            );
        }
        if self.status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                axum::http::header::WWW_AUTHENTICATE,
                axum::http::HeaderValue::from_static("Bearer"),
            );
        }
        response
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::InvalidTenant => ApiError::unauthorized("the API key has no valid tenant"),
            StoreError::Invalid { field, message } => {
                let error = ApiError::bad_request(message);
                match field {
                    Some(field) => error.with_field(field),
                    None => error,
                }
            }
            StoreError::Conflict(message) => ApiError::conflict(message),
            StoreError::Busy(message) => {
                ApiError::new(StatusCode::CONFLICT, "session_busy", message)
            }
            StoreError::InvalidState(message) => ApiError::invalid_state(message),
            StoreError::LeaseLost(message) => {
                ApiError::new(StatusCode::CONFLICT, "lease_lost", message)
            }
            StoreError::NotFound(what) => ApiError::not_found(what),
            StoreError::Unavailable(message) => {
                tracing::error!(%message, "storage unavailable");
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "unavailable",
                    "the database is not available; try again",
                )
            }
            StoreError::StorageFull(message) => {
                tracing::error!(%message, "storage full: writes fail until space is freed");
                ApiError::storage_full()
            }
            StoreError::Backend(message) => {
                tracing::error!(%message, "storage error");
                ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal",
                    "an internal error occurred",
                )
            }
        }
    }
}

pub type ApiResult<T> = Result<T, ApiError>;

/// A JSON body whose rejections use the error shape: 415 without a JSON content type,
/// 413 over the size limit, 400 for malformed JSON or a body of the wrong shape.
pub struct ApiJson<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        check_charset(req.headers())?;
        let limit = body_limit(&req);
        match axum::Json::<T>::from_request(req, state).await {
            Ok(axum::Json(value)) => Ok(ApiJson(value)),
            Err(rejection) if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                Err(too_large(limit))
            }
            Err(rejection) => Err(json_rejection(rejection)),
        }
    }
}

/// A JSON body read straight into `T` when it is a `T` as written, else as a [`Value`]
/// (for a handler that also takes what `T` does not, like whole numbers written as `3.0`,
/// and whose errors name the field): the usual request is parsed once, not into a `Value`
/// and then again. The rejections of [`ApiJson`].
pub enum JsonBody<T> {
    Typed(T),
    Value(serde_json::Value),
}

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        check_charset(req.headers())?;
        if !json_content_type(req.headers()) {
            return Err(not_json());
        }
        let limit = body_limit(&req);
        let bytes = axum::body::Bytes::from_request(req, state)
            .await
            .map_err(|rejection| {
                if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                    too_large(limit)
                } else {
                    ApiError::bad_request(format!("the body could not be read: {rejection}"))
                }
            })?;
        if let Ok(typed) = serde_json::from_slice::<T>(&bytes) {
            return Ok(JsonBody::Typed(typed));
        }
        match axum::Json::<serde_json::Value>::from_bytes(&bytes) {
            Ok(axum::Json(value)) => Ok(JsonBody::Value(value)),
            Err(rejection) => Err(json_rejection(rejection)),
        }
    }
}

/// Whether the `Content-Type` is JSON (`application/json` or `application/*+json`), as
/// axum's `Json` requires.
fn json_content_type(headers: &axum::http::HeaderMap) -> bool {
    let Some(value) = headers.get(axum::http::header::CONTENT_TYPE) else {
        return false;
    };
    let Ok(text) = value.to_str() else {
        return false;
    };
    let essence = text
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    essence == "application/json"
        || essence
            .strip_prefix("application/")
            .is_some_and(|sub| sub.ends_with("+json"))
}

fn not_json() -> ApiError {
    ApiError::new(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "unsupported_media_type",
        "the body must be JSON with Content-Type: application/json",
    )
}

/// The request body limit in force (`serve --max-body-bytes`), which the router puts in
/// every request's extensions so that a 413 can name it.
#[derive(Debug, Clone, Copy)]
pub struct BodyLimit(pub usize);

fn body_limit(req: &Request) -> Option<usize> {
    req.extensions().get::<BodyLimit>().map(|l| l.0)
}

/// 413 `payload_too_large`, naming the limit when it is known.
pub(crate) fn too_large(limit: Option<usize>) -> ApiError {
    let message = match limit {
        Some(bytes) => format!(
            "the body is larger than this server accepts: at most {bytes} bytes (serve --max-body-bytes)"
        ),
        None => "the body is larger than this server accepts".to_string(),
    };
    ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large", message)
}

/// 415 `unsupported_media_type` when the `Content-Type` names a charset other than UTF-8
/// (JSON is UTF-8; `charset=utf-8` in any case, quoted or not, is accepted).
pub(crate) fn check_charset(headers: &axum::http::HeaderMap) -> Result<(), ApiError> {
    let Some(value) = headers.get(axum::http::header::CONTENT_TYPE) else {
        return Ok(());
    };
    let text = String::from_utf8_lossy(value.as_bytes());
    for param in text.split(';').skip(1) {
        let Some((name, charset)) = param.split_once('=') else {
            continue;
        };
        if !name.trim().eq_ignore_ascii_case("charset") {
            continue;
        }
        let charset = charset.trim().trim_matches('"');
        if !charset.eq_ignore_ascii_case("utf-8") && !charset.eq_ignore_ascii_case("utf8") {
            return Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                format!("the body must be UTF-8 JSON; charset={charset} is not accepted"),
            ));
        }
    }
    Ok(())
}

fn json_rejection(rejection: JsonRejection) -> ApiError {
    match rejection.status() {
        StatusCode::UNSUPPORTED_MEDIA_TYPE => not_json(),
        StatusCode::PAYLOAD_TOO_LARGE => too_large(None),
        _ => {
            let text = rejection.body_text();
            let detail = without_type_names(
                text.split_once(": ")
                    .map_or(text.as_str(), |(_, rest)| rest),
            );
            let mut error = ApiError::bad_request(format!("the body is not valid: {detail}"));
            if let Some(field) = field_of(&detail) {
                error = error.with_field(field);
            }
            error
        }
    }
}

/// A serde error without the server's own type names: `expected struct NewSessionBody with
/// 7 elements` reads `expected a JSON object`.
fn without_type_names(detail: &str) -> String {
    let mut out = String::with_capacity(detail.len());
    let mut rest = detail;
    while let Some(at) = rest.find("struct ") {
        out.push_str(&rest[..at]);
        let after = &rest[at + "struct ".len()..];
        let name_len = after
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(after.len());
        if name_len == 0 || !after.starts_with(|c: char| c.is_ascii_uppercase()) {
            out.push_str("struct ");
            rest = after;
            continue;
        }
        out.push_str("a JSON object");
        rest = &after[name_len..];
        // `with N elements` (serde's count of a struct's fields, read as a sequence).
        if let Some(tail) = rest.strip_prefix(" with ")
            && let Some(end) = tail.find(" element")
            && tail[..end].chars().all(|c| c.is_ascii_digit())
        {
            let words = &tail[end + " element".len()..];
            rest = words.strip_prefix('s').unwrap_or(words);
        }
    }
    out.push_str(rest);
    out
}

/// The field a serde error names: `missing field `content`` or a path like `agent.type: ...`.
fn field_of(detail: &str) -> Option<String> {
    if let Some(start) = detail.find("missing field `") {
        let rest = &detail[start + "missing field `".len()..];
        return rest.split('`').next().map(str::to_string);
    }
    let (path, _) = detail.split_once(": ")?;
    let path = path.trim();
    (!path.is_empty() && !path.contains(' ') && path != ".").then(|| path.to_string())
}

/// Query parameters whose rejections use the error shape (400).
pub struct ApiQuery<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match axum::extract::Query::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Query(value)) => Ok(ApiQuery(value)),
            Err(rejection) => Err(query_rejection(rejection)),
        }
    }
}

fn query_rejection(rejection: QueryRejection) -> ApiError {
    let text = rejection.body_text();
    let detail = text
        .split_once(": ")
        .map_or(text.as_str(), |(_, rest)| rest);
    ApiError::bad_request(format!("the query string is not valid: {detail}"))
}

/// A path id: not a UUID is a 400 naming the parameter.
pub fn path_id(text: &str, field: &str) -> ApiResult<Id> {
    stepwise_core::parse_id(text)
        .ok_or_else(|| ApiError::invalid(field, format!("'{}' is not a valid id", cut(text, 64))))
}

pub fn cut(text: &str, max: usize) -> String {
    stepwise_core::summary::cut_chars(text, max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_field_of_serde_errors() {
        assert_eq!(
            field_of("missing field `content` at line 1 column 2"),
            Some("content".into())
        );
        assert_eq!(
            field_of(
                "agent.type: invalid type: integer `3`, expected a string at line 1 column 20"
            ),
            Some("agent.type".into())
        );
        assert_eq!(field_of("expected value at line 1 column 1"), None);
    }

    #[test]
    fn errors_name_no_type_of_the_server() {
        assert_eq!(
            without_type_names(
                "invalid length 0, expected struct NewSessionMessageBody with 7 elements at line 1 column 2"
            ),
            "invalid length 0, expected a JSON object at line 1 column 2"
        );
        assert_eq!(
            without_type_names("invalid type: string \"x\", expected struct AgentBody"),
            "invalid type: string \"x\", expected a JSON object"
        );
        assert_eq!(
            without_type_names("a struct of words, a struct"),
            "a struct of words, a struct"
        );
    }
}
