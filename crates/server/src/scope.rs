//! The two address forms, resolved before routing.
//!
//! The domain form `/<type>/<instance>/...` is served by the routes directly, for the
//! built-in domain application. The application form `/<app>/<type>/<instance>/...` is
//! rewritten to the domain form's path with the application recorded as a [`Scope`]
//! extension, so both forms reach the same handlers.

use axum::{
    extract::{FromRequestParts, Request},
    http::{Uri, request::Parts, uri::PathAndQuery},
};
use quintet_core::{AppName, ServiceType};

/// Which address form a request used, and so which application it addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// `/<type>/...`: the built-in domain application.
    Domain,
    /// `/<app>/<type>/...`: the named application.
    App(AppName),
}

impl Scope {
    /// The application whose instances the request addresses.
    pub fn app(&self) -> AppName {
        match self {
            Self::Domain => AppName::domain(),
            Self::App(app) => app.clone(),
        }
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Scope {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(parts
            .extensions
            .get::<Scope>()
            .cloned()
            .unwrap_or(Scope::Domain))
    }
}

/// Split an application-form path into the application and the domain-form path.
/// `None` for every other path, which is routed as it is.
pub fn split_app_form(path: &str) -> Option<(AppName, &str)> {
    let rest = path.strip_prefix('/')?;
    let (first, after) = rest.split_once('/')?;
    let second = after.split('/').next()?;
    ServiceType::parse(second)?;
    let app: AppName = first.parse().ok()?;
    Some((app, &path[first.len() + 1..]))
}

/// Rewrite an application-form request to its domain-form path and record its [`Scope`].
pub fn resolve_scope(mut req: Request) -> Request {
    let Some((app, rest)) = split_app_form(req.uri().path()) else {
        return req;
    };
    let path_and_query = match req.uri().query() {
        Some(q) => format!("{rest}?{q}"),
        None => rest.to_owned(),
    };
    let Ok(pq) = path_and_query.parse::<PathAndQuery>() else {
        return req;
    };
    let mut parts = req.uri().clone().into_parts();
    parts.path_and_query = Some(pq);
    if let Ok(uri) = Uri::from_parts(parts) {
        *req.uri_mut() = uri;
        req.extensions_mut().insert(Scope::App(app));
    }
    req
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn address_forms_table() {
        let cases: &[(&str, Option<(&str, &str)>)] = &[
            ("/data/movies", None),
            ("/data/movies/42", None),
            ("/shop/data/default", Some(("shop", "/data/default"))),
            ("/shop/data/default/42", Some(("shop", "/data/default/42"))),
            (
                "/shop/storage/files/a/b.png",
                Some(("shop", "/storage/files/a/b.png")),
            ),
            ("/shop/cache", Some(("shop", "/cache"))),
            // A service type is never an application, so the domain form always wins.
            ("/data/data/x", None),
            ("/_admin/apps", None),
            ("/_health", None),
            ("/", None),
            ("/shop", None),
            ("/shop/unknown/x", None),
            ("/Shop/data/x", None),
        ];
        for (path, expected) in cases {
            let got = split_app_form(path).map(|(a, r)| (a.as_str().to_owned(), r.to_owned()));
            let expected = expected.map(|(a, r)| (a.to_owned(), r.to_owned()));
            assert_eq!(got, expected, "{path}");
        }
    }

    #[test]
    fn rewrite_keeps_the_query_and_records_the_app() {
        let req = Request::builder()
            .uri("/shop/cache/c1/_query?pattern=a*")
            .body(axum::body::Body::empty())
            .unwrap();
        let req = resolve_scope(req);
        assert_eq!(req.uri().path(), "/cache/c1/_query");
        assert_eq!(req.uri().query(), Some("pattern=a*"));
        assert_eq!(
            req.extensions().get::<Scope>(),
            Some(&Scope::App("shop".parse().unwrap()))
        );
    }
}
