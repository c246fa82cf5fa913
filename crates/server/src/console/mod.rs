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
//! Files are sent gzipped to clients that accept it: each is compressed once, at the first
//! request for any of them, and kept. Every answer has a strong `ETag` (one per
//! representation) and `Cache-Control: no-cache`, so a browser revalidates each load and
//! gets `304 Not Modified` for what it has.
//!
//! What the console shows and how it is tested: `docs/console.md`.

use std::{io::Write as _, sync::LazyLock};

use axum::{
    Router,
    extract::Path,
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::{IntoResponse, Redirect, Response},
    routing::get,
};
use quintet_core::Error;
use sha2::{Digest as _, Sha256};

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
        .route(
            "/_console/",
            get(|headers: HeaderMap| async move { file("index.html", &headers) }),
        )
        .route("/_console/{*path}", get(asset))
}

async fn asset(Path(path): Path<String>, headers: HeaderMap) -> Response {
    file(&path, &headers)
}

/// An embedded file ready to send: its gzipped bytes (when smaller) and entity tags.
struct Prepared {
    asset: &'static Asset,
    /// The file gzipped, `None` where that is not smaller.
    gzip: Option<Vec<u8>>,
    /// The entity tag of the plain bytes, quoted.
    etag: String,
    /// The entity tag of the gzipped bytes, quoted.
    etag_gzip: String,
}

/// Every file, compressed once at the first request.
static PREPARED: LazyLock<Vec<Prepared>> = LazyLock::new(|| ASSETS.iter().map(prepare).collect());

fn prepare(asset: &'static Asset) -> Prepared {
    let digest = Sha256::digest(asset.body.as_bytes());
    let tag = hex::encode(&digest[..12]);
    let gzip = gzip(asset.body.as_bytes()).filter(|z| z.len() < asset.body.len());
    Prepared {
        asset,
        gzip,
        etag: format!("\"{tag}\""),
        etag_gzip: format!("\"{tag}-gzip\""),
    }
}

/// `bytes` gzipped at the best level; `None` only if the encoder fails, which writing to
/// memory does not (the file is then sent plain).
fn gzip(bytes: &[u8]) -> Option<Vec<u8>> {
    let mut z = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    z.write_all(bytes).ok()?;
    z.finish().ok()
}

/// Whether `Accept-Encoding` accepts gzip: `gzip`, `x-gzip` or `*` with a quality above 0.
pub fn accepts_gzip(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|item| {
            let mut parts = item.split(';');
            let name = parts.next().unwrap_or("").trim();
            let accepted = ["gzip", "x-gzip", "*"]
                .iter()
                .any(|n| name.eq_ignore_ascii_case(n));
            let zero = parts.any(|p| {
                p.trim()
                    .strip_prefix("q=")
                    .and_then(|q| q.trim().parse::<f32>().ok())
                    .is_some_and(|q| q <= 0.0)
            });
            accepted && !zero
        })
}

/// Whether `If-None-Match` names `etag` (or is `*`): the client has this representation.
fn not_modified(headers: &HeaderMap, etag: &str) -> bool {
    headers
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .any(|t| t == "*" || t.strip_prefix("W/").unwrap_or(t) == etag)
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

fn file(path: &str, req: &HeaderMap) -> Response {
    let Some(p) = PREPARED.iter().find(|p| p.asset.path == path) else {
        let mut res = ApiError(Error::NotFound(format!(
            "the console has no file {:?}: open /_console/",
            path.chars().take(100).collect::<String>()
        )))
        .into_response();
        protect(res.headers_mut());
        return res;
    };
    let gzip = p.gzip.as_deref().filter(|_| accepts_gzip(req));
    let etag = if gzip.is_some() {
        &p.etag_gzip
    } else {
        &p.etag
    };
    let mut res = if not_modified(req, etag) {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        let body = gzip.map_or_else(
            || axum::body::Body::from(p.asset.body),
            |z| axum::body::Body::from(z.to_vec()),
        );
        let mut res = (StatusCode::OK, body).into_response();
        res.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(p.asset.content_type),
        );
        if gzip.is_some() {
            res.headers_mut()
                .insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        }
        res
    };
    let h = res.headers_mut();
    if let Ok(v) = HeaderValue::from_str(etag) {
        h.insert(header::ETAG, v);
    }
    // Caches must keep the plain and the gzipped file apart.
    h.insert(header::VARY, HeaderValue::from_static("accept-encoding"));
    protect(h);
    res
}

/// The paths of every embedded file and their sizes in bytes, for tests and docs.
pub fn files() -> impl Iterator<Item = (&'static str, usize)> {
    ASSETS.iter().map(|a| (a.path, a.body.len()))
}

/// The bytes of the embedded file at `path` under `/_console/`, as written.
pub fn content(path: &str) -> Option<&'static str> {
    ASSETS.iter().find(|a| a.path == path).map(|a| a.body)
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
    fn accept_encoding_is_read_with_its_qualities() {
        let with = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::ACCEPT_ENCODING, HeaderValue::from_str(v).unwrap());
            accepts_gzip(&h)
        };
        assert!(with("gzip"));
        assert!(with("br, gzip;q=0.8, deflate"));
        assert!(with("GZIP"));
        assert!(with("*"));
        assert!(!with("gzip;q=0"));
        assert!(!with("gzip; q=0.0, br"));
        assert!(!with("identity"));
        assert!(!with("br, deflate"));
        assert!(!accepts_gzip(&HeaderMap::new()));
    }

    #[test]
    fn every_file_is_gzipped_smaller_except_tiny_ones() {
        for p in PREPARED.iter() {
            if let Some(z) = &p.gzip {
                let mut out = String::new();
                std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(&z[..]), &mut out)
                    .unwrap();
                assert_eq!(out, p.asset.body, "{}", p.asset.path);
            } else {
                assert!(
                    p.asset.body.len() < 1024,
                    "{} is not compressed",
                    p.asset.path
                );
            }
            assert_ne!(p.etag, p.etag_gzip);
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
