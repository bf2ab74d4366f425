//! The web UI: three static files embedded in the binary, so a user needs nothing but it.
//! Served without a key (the UI asks for one when `/v1` answers 401).

use axum::Router;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

const INDEX_HTML: &str = include_str!("../ui/index.html");
const APP_JS: &str = include_str!("../ui/app.js");
const APP_CSS: &str = include_str!("../ui/app.css");

/// The UI renders model output; this keeps any script that slipped through from running.
const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
     img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'";

/// FNV-1a, at compile time: the ETag changes exactly when the file does.
const fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut i = 0;
    while i < bytes.len() {
        hash ^= bytes[i] as u64;
        hash = hash.wrapping_mul(0x0100_0000_01b3);
        i += 1;
    }
    hash
}

struct Asset {
    body: &'static str,
    content_type: &'static str,
    hash: u64,
    csp: bool,
}

const INDEX: Asset = Asset {
    body: INDEX_HTML,
    content_type: "text/html; charset=utf-8",
    hash: fnv1a(INDEX_HTML.as_bytes()),
    csp: true,
};
const SCRIPT: Asset = Asset {
    body: APP_JS,
    content_type: "text/javascript; charset=utf-8",
    hash: fnv1a(APP_JS.as_bytes()),
    csp: false,
};
const STYLE: Asset = Asset {
    body: APP_CSS,
    content_type: "text/css; charset=utf-8",
    hash: fnv1a(APP_CSS.as_bytes()),
    csp: false,
};

fn serve(asset: &Asset, request: &HeaderMap) -> Response {
    let etag = format!("\"{:016x}\"", asset.hash);
    let fresh = request
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split(',')
                .any(|tag| tag.trim() == etag || tag.trim() == "*")
        });
    let mut headers = HeaderMap::new();
    // Names are not content-hashed, so browsers revalidate each load; the ETag makes that a 304.
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    if let Ok(value) = HeaderValue::from_str(&etag) {
        headers.insert(header::ETAG, value);
    }
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    if asset.csp {
        headers.insert(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CONTENT_SECURITY_POLICY),
        );
    }
    if fresh {
        return (StatusCode::NOT_MODIFIED, headers).into_response();
    }
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(asset.content_type),
    );
    (StatusCode::OK, headers, asset.body).into_response()
}

async fn index(request: HeaderMap) -> Response {
    serve(&INDEX, &request)
}

async fn script(request: HeaderMap) -> Response {
    serve(&SCRIPT, &request)
}

async fn style(request: HeaderMap) -> Response {
    serve(&STYLE, &request)
}

/// `GET /`, `/index.html`, `/app.js`, `/app.css`. Merge it into the server's router.
pub fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/", get(index))
        .route("/index.html", get(index))
        .route("/app.js", get(script))
        .route("/app.css", get(style))
}

#[cfg(test)]
mod tests {
    use super::*;

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    async fn serve_ui() -> Result<String, Box<dyn std::error::Error>> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?;
        tokio::spawn(async move { axum::serve(listener, router::<()>()).await });
        Ok(format!("http://{address}"))
    }

    #[tokio::test]
    async fn serves_the_three_files_with_their_types() -> TestResult {
        let base = serve_ui().await?;
        let client = reqwest::Client::new();
        for (path, content_type, needle) in [
            ("/", "text/html; charset=utf-8", "<script src=\"app.js\""),
            (
                "/app.js",
                "text/javascript; charset=utf-8",
                "renderMarkdown",
            ),
            (
                "/app.css",
                "text/css; charset=utf-8",
                "prefers-color-scheme: dark",
            ),
        ] {
            let response = client.get(format!("{base}{path}")).send().await?;
            assert_eq!(response.status(), 200, "{path}");
            assert_eq!(
                response.headers()[header::CONTENT_TYPE],
                content_type,
                "{path}"
            );
            assert_eq!(
                response.headers()[header::CACHE_CONTROL],
                "no-cache",
                "{path}"
            );
            assert!(response.text().await?.contains(needle), "{path}");
        }
        let index = client.get(format!("{base}/")).send().await?;
        let csp = index.headers()[header::CONTENT_SECURITY_POLICY].to_str()?;
        assert!(
            csp.contains("script-src 'self'"),
            "inline script must not run: {csp}"
        );
        Ok(())
    }

    #[tokio::test]
    async fn an_unchanged_file_revalidates_to_not_modified() -> TestResult {
        let base = serve_ui().await?;
        let client = reqwest::Client::new();
        let first = client.get(format!("{base}/app.js")).send().await?;
        let etag = first.headers()[header::ETAG].clone();
        let again = client
            .get(format!("{base}/app.js"))
            .header(header::IF_NONE_MATCH, etag.clone())
            .send()
            .await?;
        assert_eq!(again.status(), 304);
        assert_eq!(again.headers()[header::ETAG], etag);
        let stale = client
            .get(format!("{base}/app.js"))
            .header(header::IF_NONE_MATCH, "\"0\"")
            .send()
            .await?;
        assert_eq!(stale.status(), 200);
        Ok(())
    }

    /// Model output reaches the page only through the Markdown renderer, which escapes first:
    /// one `innerHTML` assignment in the whole script, fed by `renderMarkdown`.
    #[test]
    fn model_text_reaches_the_page_only_through_the_escaping_renderer() {
        assert_eq!(APP_JS.matches("innerHTML").count(), 1);
        assert!(APP_JS.contains("body.innerHTML = renderMarkdown(msg.content);"));
        assert!(
            !APP_JS.contains("insertAdjacentHTML")
                && !APP_JS.contains("outerHTML")
                && !APP_JS.contains("document.write")
        );
    }
}
