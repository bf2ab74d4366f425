//! The web UI: its files embedded in the binary, so a user needs nothing but it, and served
//! with an ETag and (for the page) a Content-Security-Policy. The script is a set of native ES
//! modules under `/js/` (`index.html` loads `js/main.js`, which imports the rest): no build
//! step. Served without a key (the UI asks for one when `/v1` answers 401); a path not listed
//! here is the server's ordinary 404.

use axum::Router;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

/// The UI renders model output; this keeps any script that slipped through from running.
/// `script-src 'self'` allows the page's same-origin modules and nothing inline.
const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
     img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'";

const HTML: &str = "text/html; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";
const JAVASCRIPT: &str = "text/javascript; charset=utf-8";
const SVG: &str = "image/svg+xml";

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

/// One embedded file and how it is served.
struct Asset {
    /// The URL path it is served at.
    path: &'static str,
    body: &'static str,
    content_type: &'static str,
    hash: u64,
    /// Only the page needs the policy: it governs what the page may load and run.
    csp: bool,
}

impl Asset {
    const fn new(path: &'static str, body: &'static str, content_type: &'static str) -> Self {
        Self {
            path,
            body,
            content_type,
            hash: fnv1a(body.as_bytes()),
            csp: false,
        }
    }
}

/// A module of the UI's script, `ui/js/NAME.js`, served at `/js/NAME.js`.
macro_rules! module {
    ($name:literal) => {
        Asset::new(
            concat!("/js/", $name, ".js"),
            include_str!(concat!("../ui/js/", $name, ".js")),
            JAVASCRIPT,
        )
    };
}

const INDEX: Asset = Asset {
    csp: true,
    ..Asset::new("/", include_str!("../ui/index.html"), HTML)
};

/// Every file besides the page: the stylesheet and the script's modules. A module missing here
/// fails to load in the browser (and the `every_module_on_disk_is_served` test).
const FILES: &[Asset] = &[
    Asset::new("/app.css", include_str!("../ui/app.css"), CSS),
    Asset::new("/favicon.svg", include_str!("../ui/favicon.svg"), SVG),
    module!("api"),
    module!("chat"),
    module!("context"),
    module!("dom"),
    module!("format"),
    module!("history"),
    module!("inspector"),
    module!("main"),
    module!("markdown"),
    module!("metadata"),
    module!("steps"),
    module!("stream"),
    module!("view"),
];

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

/// `GET /`, `/index.html`, `/app.css`, `/favicon.svg` and `/js/*.js` (the modules). Merge it into the server's router.
pub fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    let page = get(|request: HeaderMap| async move { serve(&INDEX, &request) });
    let mut router = Router::new()
        .route("/", page.clone())
        .route("/index.html", page);
    for asset in FILES {
        router = router.route(
            asset.path,
            get(move |request: HeaderMap| async move { serve(asset, &request) }),
        );
    }
    router
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
    async fn serves_the_page_the_stylesheet_and_the_modules_with_their_types() -> TestResult {
        let base = serve_ui().await?;
        let client = reqwest::Client::new();
        for (path, content_type, needle) in [
            (
                "/",
                "text/html; charset=utf-8",
                "<script type=\"module\" src=\"js/main.js\"",
            ),
            ("/index.html", "text/html; charset=utf-8", "<title>"),
            (
                "/js/main.js",
                "text/javascript; charset=utf-8",
                "from './chat.js'",
            ),
            (
                "/js/markdown.js",
                "text/javascript; charset=utf-8",
                "export function renderMarkdown",
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
    async fn an_unknown_asset_path_is_not_found() -> TestResult {
        let base = serve_ui().await?;
        let client = reqwest::Client::new();
        for path in ["/js/nope.js", "/js/", "/ui/js/main.js", "/app.js"] {
            let response = client.get(format!("{base}{path}")).send().await?;
            assert_eq!(response.status(), 404, "{path}");
        }
        Ok(())
    }

    #[tokio::test]
    async fn an_unchanged_file_revalidates_to_not_modified() -> TestResult {
        let base = serve_ui().await?;
        let client = reqwest::Client::new();
        for path in ["/js/main.js", "/js/chat.js", "/"] {
            let first = client.get(format!("{base}{path}")).send().await?;
            let etag = first.headers()[header::ETAG].clone();
            let again = client
                .get(format!("{base}{path}"))
                .header(header::IF_NONE_MATCH, etag.clone())
                .send()
                .await?;
            assert_eq!(again.status(), 304, "{path}");
            assert_eq!(again.headers()[header::ETAG], etag, "{path}");
            let stale = client
                .get(format!("{base}{path}"))
                .header(header::IF_NONE_MATCH, "\"0\"")
                .send()
                .await?;
            assert_eq!(stale.status(), 200, "{path}");
        }
        // Each file has its own tag: one module changing does not invalidate the others.
        let main = client.get(format!("{base}/js/main.js")).send().await?;
        let chat = client.get(format!("{base}/js/chat.js")).send().await?;
        assert_ne!(main.headers()[header::ETAG], chat.headers()[header::ETAG]);
        Ok(())
    }

    fn modules() -> impl Iterator<Item = &'static Asset> {
        FILES.iter().filter(|asset| asset.path.starts_with("/js/"))
    }

    /// A module added to `ui/js` but not to `FILES` would 404 in the browser and break the page.
    #[test]
    fn every_module_on_disk_is_served() -> TestResult {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("ui/js");
        let mut on_disk = Vec::new();
        for entry in std::fs::read_dir(dir)? {
            let name = entry?.file_name().to_string_lossy().into_owned();
            if name.ends_with(".js") {
                on_disk.push(format!("/js/{name}"));
            }
        }
        on_disk.sort();
        let mut served: Vec<String> = modules().map(|m| m.path.to_string()).collect();
        served.sort();
        assert_eq!(on_disk, served);
        Ok(())
    }

    /// Every `import ... from './x.js'` names a served module, so the module graph loads.
    #[test]
    fn every_import_names_a_served_module() {
        let served: Vec<&str> = modules().map(|m| m.path).collect();
        let mut imports = 0;
        for module in modules() {
            for (at, _) in module.body.match_indices(" from './") {
                let rest = &module.body[at + " from './".len()..];
                let target = &rest[..rest.find('\'').unwrap_or(rest.len())];
                imports += 1;
                assert!(
                    served.contains(&format!("/js/{target}").as_str()),
                    "{} imports ./{target}, which is not served",
                    module.path
                );
            }
        }
        assert!(imports > 0, "the modules import each other");
    }

    /// Model output reaches the page only through the Markdown renderer, which escapes first:
    /// one `innerHTML` assignment in all the modules, fed by `renderMarkdown`.
    #[test]
    fn model_text_reaches_the_page_only_through_the_escaping_renderer() {
        let all: String = modules().map(|m| m.body).collect();
        assert_eq!(all.matches("innerHTML").count(), 1);
        let chat = modules()
            .find(|m| m.path == "/js/chat.js")
            .map(|m| m.body)
            .unwrap_or_default();
        assert!(chat.contains("body.innerHTML = renderMarkdown(msg.content);"));
        assert!(
            !all.contains("insertAdjacentHTML")
                && !all.contains("outerHTML")
                && !all.contains("document.write")
        );
    }
}
