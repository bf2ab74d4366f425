//! CORS for `/v1` (`serve --cors-origin`): a page on one of the listed origins may call
//! the API from the browser. Preflights are answered here, before auth (a browser sends them
//! without credentials); every answer to a listed origin carries
//! `Access-Control-Allow-Origin` with that origin. No origin is allowed by default, and `*`
//! is never taken: a credentialed API must name its callers.

use std::sync::Arc;

use axum::extract::Request;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;

/// Request headers a page may send.
const ALLOW_HEADERS: &str =
    "authorization, content-type, last-event-id, x-request-id, stepwise-lease, accept";
/// Response headers a page may read (the stream resume ones among them).
const EXPOSE_HEADERS: &str =
    "x-request-id, retry-after, location, content-type, x-vercel-ai-ui-message-stream";
const ALLOW_METHODS: &str = "GET, POST, PUT, PATCH, DELETE, OPTIONS";
/// How long a browser may keep a preflight's answer, in seconds.
const MAX_AGE_SECS: &str = "600";

/// The origins that may call `/v1` from a page.
#[derive(Debug, Clone, Default)]
pub struct CorsOrigins(Arc<Vec<String>>);

impl CorsOrigins {
    /// Checks and normalizes the listed origins (`scheme://host[:port]`, no path; `*` is
    /// refused).
    pub fn new(origins: &[String]) -> Result<Self, String> {
        let mut checked = Vec::new();
        for origin in origins.iter().map(|o| o.trim()).filter(|o| !o.is_empty()) {
            if origin == "*" {
                return Err("--cors-origin `*` is not taken: list each origin that may call Stepwise (e.g. https://app.example.com)".into());
            }
            let url = url::Url::parse(origin).map_err(|_| {
                format!("--cors-origin `{origin}` is not an origin like https://app.example.com")
            })?;
            if !matches!(url.scheme(), "http" | "https")
                || url.host_str().is_none()
                || url.path() != "/"
                || url.query().is_some()
                || origin.ends_with('/') && origin.matches('/').count() > 2
            {
                return Err(format!(
                    "--cors-origin `{origin}` must be scheme://host[:port], with no path"
                ));
            }
            checked.push(url.origin().ascii_serialization());
        }
        Ok(CorsOrigins(Arc::new(checked)))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn allows(&self, origin: &str) -> bool {
        self.0.iter().any(|o| o == origin)
    }
}

/// Middleware for `/v1`, outside auth.
pub async fn cors(origins: CorsOrigins, request: Request, next: Next) -> Response {
    let origin = request
        .headers()
        .get(header::ORIGIN)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let Some(origin) = origin.filter(|_| !origins.is_empty()) else {
        return next.run(request).await;
    };
    let allowed = origins.allows(&origin);
    let preflight = request.method() == Method::OPTIONS
        && request
            .headers()
            .contains_key(header::ACCESS_CONTROL_REQUEST_METHOD);
    if preflight {
        if !allowed {
            return ApiError::forbidden(format!(
                "the origin {} may not call this server (see --cors-origin)",
                crate::error::cut(&origin, 200)
            ))
            .into_response();
        }
        let mut response = StatusCode::NO_CONTENT.into_response();
        let headers = response.headers_mut();
        allow(headers, &origin);
        headers.insert(
            header::ACCESS_CONTROL_ALLOW_METHODS,
            HeaderValue::from_static(ALLOW_METHODS),
        );
        headers.insert(
            header::ACCESS_CONTROL_ALLOW_HEADERS,
            HeaderValue::from_static(ALLOW_HEADERS),
        );
        headers.insert(
            header::ACCESS_CONTROL_MAX_AGE,
            HeaderValue::from_static(MAX_AGE_SECS),
        );
        return response;
    }
    let mut response = next.run(request).await;
    if allowed {
        let headers = response.headers_mut();
        allow(headers, &origin);
        headers.insert(
            header::ACCESS_CONTROL_EXPOSE_HEADERS,
            HeaderValue::from_static(EXPOSE_HEADERS),
        );
    }
    response
}

fn allow(headers: &mut HeaderMap, origin: &str) {
    if let Ok(value) = HeaderValue::from_str(origin) {
        headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, value);
    }
    headers.append(header::VARY, HeaderValue::from_static("origin"));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_are_checked() {
        assert!(CorsOrigins::new(&["*".into()]).is_err());
        assert!(CorsOrigins::new(&["app.example.com".into()]).is_err());
        assert!(CorsOrigins::new(&["https://app.example.com/path".into()]).is_err());
        assert!(CorsOrigins::new(&["ftp://app.example.com".into()]).is_err());
        let ok = CorsOrigins::new(&[
            "https://app.example.com".into(),
            "http://127.0.0.1:5173".into(),
        ])
        .expect("valid origins");
        assert!(ok.allows("https://app.example.com"));
        assert!(ok.allows("http://127.0.0.1:5173"));
        assert!(!ok.allows("https://evil.example.com"));
        assert!(!ok.allows("http://127.0.0.1:5174"));
    }
}
