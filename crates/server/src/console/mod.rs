//! The management console: a web UI served at `/_console/` from files embedded in the
//! binary, so a deployment is still one file.
//!
//! The console is a page that calls the public HTTP API (the admin API and the application
//! form) with the token its user signs in with; this module only serves its files. They
//! are plain ES modules and CSS (no build step, no Node): `assets/index.html`, `app.css`,
//! `app.js` and one module per page under `assets/pages/`. Every answer carries a strict
//! Content-Security-Policy (scripts and styles from this origin only, no inline script,
//! nothing fetched from another origin) and refuses framing, so a page elsewhere cannot
//! overlay it. Routes are explicit paths: an explicit route another module adds under
//! `/_console/` (such as the API reference at `/_console/api`) wins over the catch-all.
//!
//! What the console shows and how it is tested: `docs/console.md`.

use axum::{
    Router,
    extract::Path,
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::{IntoResponse, Redirect, Response},
    routing::get,
};
use quintet_core::Error;

use crate::{error::ApiError, state::AppState};

/// The console's Content-Security-Policy: this origin only, nothing inline, no framing.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
    img-src 'self' data: blob:; connect-src 'self'; font-src 'self'; form-action 'none'; \
    base-uri 'none'; frame-ancestors 'none'";

/// One embedded file.
struct Asset {
    path: &'static str,
    content_type: &'static str,
    body: &'static str,
}

macro_rules! asset {
    ($path:literal, $type:expr) => {
        Asset {
            path: $path,
            content_type: $type,
            body: include_str!(concat!("assets/", $path)),
        }
    };
}

const JS: &str = "text/javascript; charset=utf-8";

/// Every file of the console, by its path under `/_console/`.
static ASSETS: &[Asset] = &[
    asset!("index.html", "text/html; charset=utf-8"),
    asset!("app.css", "text/css; charset=utf-8"),
    asset!("app.js", JS),
    asset!("api.js", JS),
    asset!("ui.js", JS),
    asset!("live.js", JS),
    asset!("pages/overview.js", JS),
    asset!("pages/accounts.js", JS),
    asset!("pages/apps.js", JS),
    asset!("pages/keys.js", JS),
    asset!("pages/instances.js", JS),
    asset!("pages/data.js", JS),
    asset!("pages/cache.js", JS),
    asset!("pages/search.js", JS),
    asset!("pages/queue.js", JS),
    asset!("pages/storage.js", JS),
    asset!("pages/backups.js", JS),
    asset!("favicon.svg", "image/svg+xml"),
];

/// The console's routes: `/_console` redirects to `/_console/`, which is the page; every
/// other path under it is a file or 404.
pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route(
            "/_console",
            get(|| async { Redirect::permanent("/_console/") }),
        )
        .route("/_console/", get(|| async { file("index.html") }))
        .route("/_console/{*path}", get(asset))
}

async fn asset(Path(path): Path<String>) -> Response {
    file(&path)
}

/// The headers every console answer carries.
pub fn protect(headers: &mut HeaderMap) {
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    // The files change with the binary; revalidating is cheap on loopback and never stale.
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
}

fn file(path: &str) -> Response {
    let mut res = match ASSETS.iter().find(|a| a.path == path) {
        Some(a) => {
            let mut res = (StatusCode::OK, a.body).into_response();
            res.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static(a.content_type),
            );
            res
        }
        None => ApiError(Error::NotFound(format!(
            "the console has no file {:?}: open /_console/",
            path.chars().take(100).collect::<String>()
        )))
        .into_response(),
    };
    protect(res.headers_mut());
    res
}

/// The paths of every embedded file and their sizes in bytes, for tests and docs.
pub fn files() -> impl Iterator<Item = (&'static str, usize)> {
    ASSETS.iter().map(|a| (a.path, a.body.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_module_an_asset_imports_is_embedded() {
        // A page module imported but not listed would load in development and 404 in the
        // binary; this reads the import lines of every script.
        for a in ASSETS.iter().filter(|a| a.content_type == JS) {
            let dir = a.path.rsplit_once('/').map_or("", |(d, _)| d);
            for line in a.body.lines() {
                let Some(rest) = line.split(" from '").nth(1) else {
                    continue;
                };
                let Some(target) = rest.split('\'').next() else {
                    continue;
                };
                let mut parts: Vec<&str> = if dir.is_empty() {
                    Vec::new()
                } else {
                    dir.split('/').collect()
                };
                for seg in target.split('/') {
                    match seg {
                        "." => {}
                        ".." => {
                            parts.pop();
                        }
                        s => parts.push(s),
                    }
                }
                let resolved = parts.join("/");
                assert!(
                    ASSETS.iter().any(|x| x.path == resolved),
                    "{} imports {target} ({resolved}), which is not embedded",
                    a.path
                );
            }
        }
    }

    #[test]
    fn no_inline_script_or_style_in_the_page() {
        let index = ASSETS.iter().find(|a| a.path == "index.html").unwrap();
        assert!(!index.body.contains("<script>"));
        assert!(!index.body.contains(" style="));
        let handler = index.body.split(" on").skip(1).any(|rest| {
            let name: String = rest.chars().take_while(char::is_ascii_lowercase).collect();
            !name.is_empty() && rest[name.len()..].starts_with('=')
        });
        assert!(!handler, "no inline event handlers");
        assert!(!index.body.contains("http://") && !index.body.contains("https://"));
    }
}
