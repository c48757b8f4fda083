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
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

/// The policy every console response carries.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

const INDEX: &str = include_str!("../console/index.html");
const APP: &str = include_str!("../console/app.js");
const CHARTS: &str = include_str!("../console/charts.js");
const STYLE: &str = include_str!("../console/style.css");

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

/// The console's routes: the page and its assets.
pub fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route(
            "/",
            get(|| async { asset("text/html; charset=utf-8", INDEX) }),
        )
        .route(
            "/console/app.js",
            get(|| async { asset("text/javascript; charset=utf-8", APP) }),
        )
        .route(
            "/console/charts.js",
            get(|| async { asset("text/javascript; charset=utf-8", CHARTS) }),
        )
        .route(
            "/console/style.css",
            get(|| async { asset("text/css; charset=utf-8", STYLE) }),
        )
}
