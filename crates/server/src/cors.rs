//! Which web pages may call quintet from a browser (CORS), and the refusal of
//! cross-origin requests the domain form cannot authenticate.
//!
//! Browsers send `Origin` with every cross-origin request (and same-origin writes). What
//! an origin may do depends on what the request carries as its credential:
//!
//! | request | origins answered |
//! |---|---|
//! | application form `/<app>/…`, domain form with `--auth jwt` | every origin: a bearer token is the credential, and a page cannot send one it does not hold |
//! | pre-signed URLs `/_presigned/…` | every origin: the signature in the URL is the credential |
//! | everything else: domain form with `--auth none`, `/_admin`, the console, `/`, `/_health`… | the server's own origin and `--cors-origins` |
//!
//! For the last row a request from any other origin is refused with 403 before a handler
//! runs, preflight or not: with `--auth none` the domain form has no credential at all, so
//! a page on any site could otherwise write to a developer's local quintet with a simple
//! request that needs no preflight (a `text/plain` POST, or a form). JSON calls also
//! refuse the content types such requests can carry (see [`crate::extract::Json`]).

use axum::{
    extract::{Request, State},
    http::{HeaderMap, HeaderValue, Method, StatusCode, header},
    middleware::Next,
    response::{IntoResponse, Response},
};
use quintet_core::{Error, object::presign::PRESIGNED_PREFIX};

use crate::{config::DomainAuth, error::ApiError, hosts, scope, state::AppState};

/// Methods a preflight allows.
const METHODS: &str = "GET, HEAD, POST, PUT, PATCH, DELETE";
/// How long browsers may cache a preflight's answer, in seconds.
const MAX_AGE: &str = "3600";

/// Who may call a request's path from a browser.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Audience {
    /// Any origin (the request carries its own credential).
    Anyone,
    /// The server's own origin and the configured ones.
    Listed,
}

/// The audience of `path` under `auth` (the table in the module documentation).
pub fn audience(path: &str, auth: &DomainAuth) -> Audience {
    let presigned = path == PRESIGNED_PREFIX
        || path
            .strip_prefix(PRESIGNED_PREFIX)
            .is_some_and(|r| r.starts_with('/'));
    let first = path.trim_start_matches('/').split('/').next().unwrap_or("");
    let domain_form = quintet_core::ServiceType::parse(first).is_some();
    if presigned
        || scope::split_app_form(path).is_some()
        || (domain_form && *auth != DomainAuth::None)
    {
        Audience::Anyone
    } else {
        Audience::Listed
    }
}

/// The configured origins, and the server's own.
#[derive(Debug, Clone)]
pub struct OriginPolicy {
    any: bool,
    listed: Vec<String>,
    scheme: &'static str,
    public_origin: Option<String>,
}

impl OriginPolicy {
    /// `listed` origins (lower-case `scheme://host[:port]`, or `*`); `tls` says which
    /// scheme the server's own origin has; `public_url` is another name of it.
    pub fn new(listed: &[String], tls: bool, public_url: Option<&str>) -> Self {
        let public_origin = public_url.map(|u| {
            let (scheme, rest) = u.split_once("://").unwrap_or(("https", u));
            let authority = rest.split('/').next().unwrap_or_default();
            format!("{scheme}://{authority}").to_ascii_lowercase()
        });
        Self {
            any: listed.iter().any(|o| o == "*"),
            listed: listed.iter().filter(|o| *o != "*").cloned().collect(),
            scheme: if tls { "https" } else { "http" },
            public_origin,
        }
    }

    /// Whether a page of `origin` may make a request whose host is `host` and whose
    /// audience is `audience`.
    pub fn allows(&self, origin: &str, host: Option<&str>, audience: Audience) -> bool {
        if audience == Audience::Anyone || self.any {
            return true;
        }
        let origin = origin.to_ascii_lowercase();
        let own =
            host.is_some_and(|h| origin == format!("{}://{}", self.scheme, h.to_ascii_lowercase()));
        own || self.public_origin.as_deref() == Some(origin.as_str())
            || self.listed.contains(&origin)
    }
}

fn refused(origin: &str) -> Response {
    let shown: String = origin.chars().take(100).collect();
    ApiError(Error::Forbidden(format!(
        "requests from web pages of {shown:?} are refused: this call answers only the \
         server's own pages and the origins listed in --cors-origins (add yours there, e.g. \
         --cors-origins http://localhost:5173)"
    )))
    .into_response()
}

fn add_vary(headers: &mut HeaderMap) {
    headers.append(header::VARY, HeaderValue::from_static("Origin"));
}

/// The layer: answers preflights, refuses requests from origins their audience excludes,
/// and adds the CORS headers to allowed cross-origin answers.
pub async fn cors(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let Some(origin) = req
        .headers()
        .get(header::ORIGIN)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
    else {
        return next.run(req).await;
    };
    let audience = audience(req.uri().path(), &state.config.domain_auth);
    let host = hosts::request_host(&req);
    let allowed = state.origins.allows(&origin, host.as_deref(), audience);
    let preflight = req.method() == Method::OPTIONS
        && req
            .headers()
            .contains_key(header::ACCESS_CONTROL_REQUEST_METHOD);
    if !allowed {
        return refused(&origin);
    }
    let Ok(origin_value) = HeaderValue::from_str(&origin) else {
        return refused(&origin);
    };
    if preflight {
        let mut res = StatusCode::NO_CONTENT.into_response();
        let h = res.headers_mut();
        h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin_value);
        h.insert(
            header::ACCESS_CONTROL_ALLOW_METHODS,
            HeaderValue::from_static(METHODS),
        );
        if let Some(asked) = req.headers().get(header::ACCESS_CONTROL_REQUEST_HEADERS) {
            h.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, asked.clone());
        }
        h.insert(
            header::ACCESS_CONTROL_MAX_AGE,
            HeaderValue::from_static(MAX_AGE),
        );
        add_vary(h);
        return res;
    }
    let mut res = next.run(req).await;
    let h = res.headers_mut();
    h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin_value);
    h.insert(
        header::ACCESS_CONTROL_EXPOSE_HEADERS,
        HeaderValue::from_static("*"),
    );
    add_vary(h);
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn audiences() {
        let none = DomainAuth::None;
        let jwt = DomainAuth::Jwt {
            secret: quintet_core::keys::Secret::from_stored("s"),
            sub: None,
            aud: None,
        };
        let cases = [
            ("/data/movies", &none, Audience::Listed),
            ("/data/movies", &jwt, Audience::Anyone),
            ("/shop/data/movies", &none, Audience::Anyone),
            ("/_presigned/storage/f/a.png", &none, Audience::Anyone),
            ("/_presignedx", &none, Audience::Listed),
            ("/_admin/apps", &jwt, Audience::Listed),
            ("/_console/", &jwt, Audience::Listed),
            ("/", &jwt, Audience::Listed),
            ("/_health", &none, Audience::Listed),
        ];
        for (path, auth, expected) in cases {
            assert_eq!(audience(path, auth), expected, "{path}");
        }
    }

    #[test]
    fn origins() {
        let p = OriginPolicy::new(
            &["http://localhost:5173".into()],
            false,
            Some("https://q.example.com"),
        );
        let host = Some("127.0.0.1:6363");
        let cases = [
            ("http://127.0.0.1:6363", true),
            ("https://127.0.0.1:6363", false),
            ("http://localhost:5173", true),
            ("HTTP://LOCALHOST:5173", true),
            ("http://localhost:5174", false),
            ("https://q.example.com", true),
            ("https://evil.example", false),
            ("null", false),
        ];
        for (origin, ok) in cases {
            assert_eq!(p.allows(origin, host, Audience::Listed), ok, "{origin}");
            assert!(p.allows(origin, host, Audience::Anyone));
        }
        let any = OriginPolicy::new(&["*".into()], true, None);
        assert!(any.allows("https://evil.example", host, Audience::Listed));
    }
}
