//! A request id for every HTTP request: the caller's `x-request-id` when it is a sane one
//! (1–128 visible ASCII characters), else a fresh UUIDv7. It is echoed in the response's
//! `x-request-id` header, kept in the request's extensions ([`RequestId`]), and carried by
//! a tracing span around the request, so every log line of the request names it.
//!
//! Only the method, the path and the id go in the span: never headers (API keys), query
//! strings or bodies.

use std::time::Instant;

use axum::extract::Request;
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::Response;
use tracing::Instrument;

pub const REQUEST_ID_HEADER: &str = "x-request-id";

/// Longest request id accepted from a caller.
pub const MAX_REQUEST_ID_LEN: usize = 128;

/// The id of the request being served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestId(pub String);

/// Whether a caller's id can be used as it is: 1–128 visible ASCII characters.
pub fn is_valid(id: &[u8]) -> bool {
    !id.is_empty() && id.len() <= MAX_REQUEST_ID_LEN && id.iter().all(|b| b.is_ascii_graphic())
}

/// Middleware: assigns the id, runs the request inside its span, echoes the id.
pub async fn assign(mut request: Request, next: Next) -> Response {
    let id = request
        .headers()
        .get(REQUEST_ID_HEADER)
        .map(HeaderValue::as_bytes)
        .filter(|given| is_valid(given))
        .and_then(|given| std::str::from_utf8(given).ok())
        .map(str::to_string)
        .unwrap_or_else(|| stepwise_core::new_id().to_string());
    request.extensions_mut().insert(RequestId(id.clone()));
    let span = tracing::info_span!(
        "request",
        request_id = %id,
        method = %request.method(),
        path = %request.uri().path(),
    );
    let started = Instant::now();
    let mut response = next.run(request).instrument(span.clone()).await;
    span.in_scope(|| {
        let status = response.status().as_u16();
        let millis = started.elapsed().as_secs_f64() * 1000.0;
        if status >= 500 {
            tracing::warn!(status, millis, "request failed");
        } else {
            tracing::debug!(status, millis, "request done");
        }
    });
    if let Ok(value) = HeaderValue::from_str(&id) {
        response.headers_mut().insert(REQUEST_ID_HEADER, value);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_short_visible_ascii_ids_are_taken() {
        assert!(is_valid(b"abc-123_XYZ.:/"));
        assert!(is_valid(&[b'a'; MAX_REQUEST_ID_LEN]));
        assert!(!is_valid(&[b'a'; MAX_REQUEST_ID_LEN + 1]));
        assert!(!is_valid(b""));
        assert!(!is_valid(b"has space"));
        assert!(!is_valid(b"tab\there"));
        assert!(!is_valid("caf\u{e9}".as_bytes()));
    }
}
