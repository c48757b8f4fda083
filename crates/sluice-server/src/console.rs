//! The web console: a page served by the broker itself at `/`.
//!
//! The assets are hand-written HTML, CSS and JavaScript (ES modules, no framework), embedded
//! in the binary with `include_str!`: nothing to build, no toolchain besides cargo, no CDN,
//! and the console always matches the broker that serves it. The page calls the same v1 API
//! as every other client, with the key the operator gives it, so the broker enforces every
//! permission exactly as it does for the CLI.
//!
//! Every console response carries a strict Content-Security-Policy (scripts and styles from
//! this origin only, no inline script, no framing), `X-Content-Type-Options: nosniff` and no
//! referrer, so a message body shown on the page can never run as script.

use axum::Router;
use axum::extract::Path;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::http::error::ApiError;

/// The policy every console response carries.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

const INDEX: &str = include_str!("../console/index.html");

/// The assets under `/console/`: path, content type, content. The page loads `app.js`,
/// which imports the rest as ES modules (the page preloads them all at once).
const ASSETS: &[(&str, &str, &str)] = &[
    ("app.js", JS, include_str!("../console/app.js")),
    ("api.js", JS, include_str!("../console/api.js")),
    ("dom.js", JS, include_str!("../console/dom.js")),
    ("format.js", JS, include_str!("../console/format.js")),
    ("human.js", JS, include_str!("../console/human.js")),
    ("page.js", JS, include_str!("../console/page.js")),
    ("session.js", JS, include_str!("../console/session.js")),
    ("charts.js", JS, include_str!("../console/charts.js")),
    (
        "pages/overview.js",
        JS,
        include_str!("../console/pages/overview.js"),
    ),
    (
        "pages/queue.js",
        JS,
        include_str!("../console/pages/queue.js"),
    ),
    ("pages/dlq.js", JS, include_str!("../console/pages/dlq.js")),
    (
        "pages/flow.js",
        JS,
        include_str!("../console/pages/flow.js"),
    ),
    (
        "pages/keys.js",
        JS,
        include_str!("../console/pages/keys.js"),
    ),
    (
        "pages/message.js",
        JS,
        include_str!("../console/pages/message.js"),
    ),
    (
        "pages/redrives.js",
        JS,
        include_str!("../console/pages/redrives.js"),
    ),
    (
        "pages/tasks.js",
        JS,
        include_str!("../console/pages/tasks.js"),
    ),
    (
        "pages/audit.js",
        JS,
        include_str!("../console/pages/audit.js"),
    ),
    (
        "style.css",
        "text/css; charset=utf-8",
        include_str!("../console/style.css"),
    ),
];

const JS: &str = "text/javascript; charset=utf-8";

fn asset(content_type: &'static str, body: &'static str) -> Response {
    let mut resp = body.into_response();
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    // Small and served from memory: always fresh after an upgrade.
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    resp
}

/// One asset, or the API's 404 for a path that names none.
async fn console_asset(Path(path): Path<String>) -> Response {
    match ASSETS.iter().find(|(p, _, _)| *p == path) {
        Some((_, kind, body)) => asset(kind, body),
        None => ApiError::new(
            sluice_core::ErrorCode::NotFound,
            format!("the console has no asset {path:?}; open / for the console"),
        )
        .into_response(),
    }
}

/// The console's routes: the page and its assets.
pub fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route(
            "/",
            get(|| async { asset("text/html; charset=utf-8", INDEX) }),
        )
        .route("/console/{*path}", get(console_asset))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every module the page preloads or imports is served, so a new page file cannot be
    /// forgotten in [`ASSETS`].
    #[test]
    fn every_module_named_by_the_console_is_served() {
        let served: Vec<&str> = ASSETS.iter().map(|(p, _, _)| *p).collect();
        let mut named = Vec::new();
        for text in std::iter::once(INDEX).chain(ASSETS.iter().map(|(_, _, b)| *b)) {
            for part in text.split('"').skip(1).step_by(2) {
                if let Some(p) = part.strip_prefix("/console/") {
                    named.push(p.to_owned());
                }
            }
        }
        for (path, _, body) in ASSETS {
            let dir = path.rsplit_once('/').map_or("", |(d, _)| d);
            for line in body.lines().filter(|l| l.starts_with("import ")) {
                let target = line.split('"').nth(1).expect("an import names a module");
                let mut parts: Vec<&str> = if dir.is_empty() { vec![] } else { vec![dir] };
                for seg in target.split('/') {
                    match seg {
                        "." => {}
                        ".." => {
                            parts.pop();
                        }
                        s => parts.push(s),
                    }
                }
                named.push(parts.join("/"));
            }
        }
        for n in &named {
            assert!(served.contains(&n.as_str()), "{n} is named but not served");
        }
        for s in &served {
            assert!(
                named.iter().any(|n| n == s),
                "{s} is served but never loaded"
            );
        }
    }
}
