//! Authentication: who is calling, decided once per request, before routing.
//!
//! [`authorize`] runs after [`crate::scope::resolve_scope`], so it knows which address form
//! a request used, and before the router, so no handler runs for a request that lacks its
//! credential (and unknown routes under a protected prefix answer 401, not 404: probing
//! learns nothing). Which credential a request needs is one table, [`classify`]:
//!
//! | request | credential |
//! |---|---|
//! | `GET /`, `/_health`, `/_ready`, `/_openapi.json`, everything under `/_presigned/` and `/_console` | none |
//! | `/_metrics` | none, or with `--metrics-token` that token or the admin token |
//! | `/_admin` and everything under it | the admin token, or an account token (only the calls of [`Caller`]) |
//! | application form `/<app>/<type>/...` | a JWT signed with a key of `<app>` |
//! | everything else (the domain form) | per `--auth`: none, or a JWT signed with `--jwt-secret` |
//!
//! `/_ready` is public like `/_health`: it says which engine is down, never names or data;
//! load balancers rarely hold tokens. `/_metrics` is public by default for the same reason
//! (scrapers), but it names applications and queues (never data), so an operator who
//! exposes the port can require a scrape token with `--metrics-token`. Pre-signed URLs carry
//! their own signature, which is their credential. The console's files are public: the
//! page holds no data, and its calls carry the token its user signs in with.
//!
//! The outcome is a [`Principal`] in the request's extensions; admin handlers take the
//! [`Admin`] extractor, which checks it again, so access is declared in their signatures.

pub mod keys;

use std::sync::Arc;

use axum::{
    extract::{FromRequestParts, Request, State},
    http::{HeaderMap, header, request::Parts},
    middleware::Next,
    response::{IntoResponse, Response},
};
use quintet_core::{
    AppName, Clock, Error, Result, account_tokens, accounts::AccountName, jwt::Unverified,
    keyring::TokenDigest, keys::KeyId, ports::registry::Registry,
};

use crate::{config::DomainAuth, error::ApiError, scope::Scope};

use self::{failures::Failures, keys::KeyCache};

mod failures;

/// Which credential a request needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Access {
    /// None.
    Public,
    /// The admin token.
    Admin,
    /// The metrics token or the admin token, when a metrics token is set; else none.
    Metrics,
    /// A token signed with a key of this application.
    App(AppName),
    /// What `--auth` says for the domain form.
    Domain,
}

/// The credential table; see the module documentation.
pub fn classify(path: &str, scope: &Scope) -> Access {
    if let Scope::App(app) = scope {
        return Access::App(app.clone());
    }
    match path {
        "/" | "/_health" | "/_ready" | "/_openapi.json" | "/_console/api" => Access::Public,
        "/_metrics" => Access::Metrics,
        "/_admin" => Access::Admin,
        p if p.starts_with("/_admin/") => Access::Admin,
        p if p.starts_with("/_presigned/") => Access::Public,
        "/_console" => Access::Public,
        p if p.starts_with("/_console/") => Access::Public,
        _ => Access::Domain,
    }
}

/// Who a request was authenticated as; in the request's extensions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Principal {
    /// Nobody: a public path, or the domain form with `--auth none`.
    Anonymous,
    /// The holder of the admin token.
    Admin,
    /// The holder of an account token: the admin API for this account's applications.
    Account {
        /// The account.
        account: AccountName,
    },
    /// A client of `app` with the access key `key`.
    Key {
        /// The application.
        app: AppName,
        /// The key the token was signed with.
        key: KeyId,
    },
    /// A domain-form client with a token signed with the server's JWT secret.
    Domain {
        /// The token's `sub`, if any.
        sub: Option<String>,
    },
}

/// The authentication state of the server.
#[derive(Debug)]
pub struct Auth {
    domain: DomainAuth,
    admin_tokens: Vec<TokenDigest>,
    metrics_token: Option<TokenDigest>,
    max_ttl: Option<std::time::Duration>,
    /// Access keys by id.
    pub keys: Arc<KeyCache>,
    clock: Arc<dyn Clock>,
    admin_failures: Failures,
    registry: Arc<dyn Registry>,
}

/// `Authorization: Bearer <token>` of `headers`; `needs` says what the token must be.
fn bearer<'h>(headers: &'h HeaderMap, needs: &str) -> Result<&'h str> {
    let mut values = headers.get_all(header::AUTHORIZATION).iter();
    let (Some(value), None) = (values.next(), values.next()) else {
        return Err(if headers.contains_key(header::AUTHORIZATION) {
            Error::Unauthenticated("send one Authorization header, not several".into())
        } else {
            Error::Unauthenticated(format!(
                "this request needs the header Authorization: Bearer <token>, with {needs}"
            ))
        });
    };
    let malformed = || {
        Error::Unauthenticated(format!(
            "the Authorization header must be \"Bearer <token>\", with {needs}"
        ))
    };
    let text = value.to_str().map_err(|_| malformed())?;
    let (scheme, token) = text.trim().split_once(' ').ok_or_else(malformed)?;
    let token = token.trim();
    if !scheme.eq_ignore_ascii_case("bearer") || token.is_empty() || token.contains(' ') {
        return Err(malformed());
    }
    Ok(token)
}

impl Auth {
    /// Authentication per the server's `config`, with keys from `registry` and time from
    /// `clock`.
    pub fn new(config: &crate::Config, registry: Arc<dyn Registry>, clock: Arc<dyn Clock>) -> Self {
        Self {
            domain: config.domain_auth.clone(),
            admin_tokens: config.admin_tokens.clone(),
            metrics_token: config.metrics_token.clone(),
            max_ttl: config.jwt_max_ttl,
            keys: Arc::new(KeyCache::new(Arc::clone(&registry))),
            registry,
            admin_failures: Failures::new(Arc::clone(&clock)),
            clock,
        }
    }

    /// Decide who sent a request for `path` in `scope` with `headers`, from `client`.
    pub async fn authenticate(
        &self,
        path: &str,
        scope: &Scope,
        headers: &HeaderMap,
        client: Option<std::net::IpAddr>,
    ) -> Result<Principal> {
        match classify(path, scope) {
            Access::Public => Ok(Principal::Anonymous),
            Access::Admin => self.admin(headers, client).await,
            Access::Metrics => self.metrics(headers, client),
            Access::App(app) => self.app(&app, headers).await,
            Access::Domain => self.domain(headers),
        }
    }

    async fn admin(
        &self,
        headers: &HeaderMap,
        client: Option<std::net::IpAddr>,
    ) -> Result<Principal> {
        if let Ok(token) = bearer(headers, "the admin token")
            && let Some(id) = account_tokens::presented_id(token)
        {
            // Guessing is slowed down per client address, like the admin token's.
            self.admin_failures.check(client)?;
            let found = self.registry.get_account_token(&id).await?;
            return match found {
                Some(t) if t.admits(token) => Ok(Principal::Account { account: t.account }),
                _ => {
                    self.admin_failures.record(client);
                    Err(Error::Unauthenticated(
                        "the account token is not valid or was revoked: ask the admin for a \
                         new one (quintet account token create <account>)"
                            .into(),
                    ))
                }
            };
        }
        if self.admin_tokens.is_empty() {
            return Err(Error::Unauthenticated(
                "the admin API is disabled on this server: start it with --admin-token".into(),
            ));
        }
        // Guessing is slowed down per client address, before the token is even looked at.
        self.admin_failures.check(client)?;
        let token = bearer(headers, "the admin token")?;
        if self
            .admin_tokens
            .iter()
            .any(|d| d.matches(token.as_bytes()))
        {
            Ok(Principal::Admin)
        } else {
            self.admin_failures.record(client);
            Err(Error::Unauthenticated(
                "the admin token is not valid: use the one the server was started with \
                 (--admin-token), or the one `quintet admin-token` prints"
                    .into(),
            ))
        }
    }

    fn metrics(&self, headers: &HeaderMap, client: Option<std::net::IpAddr>) -> Result<Principal> {
        let Some(digest) = &self.metrics_token else {
            return Ok(Principal::Anonymous);
        };
        self.admin_failures.check(client)?;
        let token = bearer(
            headers,
            "the metrics token (--metrics-token) or the admin token",
        )?;
        if digest.matches(token.as_bytes()) {
            return Ok(Principal::Anonymous);
        }
        if self
            .admin_tokens
            .iter()
            .any(|d| d.matches(token.as_bytes()))
        {
            return Ok(Principal::Admin);
        }
        self.admin_failures.record(client);
        Err(Error::Unauthenticated(
            "the token is not valid for /_metrics: send the metrics token the server was \
             started with (--metrics-token) or the admin token"
                .into(),
        ))
    }

    async fn app(&self, app: &AppName, headers: &HeaderMap) -> Result<Principal> {
        let needs = format!("a JWT signed with one of application \"{app}\"'s access keys");
        let token = Unverified::parse(bearer(headers, &needs)?)?;
        let sub = token.subject().ok_or_else(|| {
            Error::Unauthenticated(
                "the access token has no sub claim: set sub to the key of an access key".into(),
            )
        })?;
        let key: KeyId = sub.parse().map_err(|_| {
            Error::Unauthenticated(
                "the access token's sub is not an access key: set sub to the key of an access key"
                    .into(),
            )
        })?;
        let entry = self.keys.get(&key).await?.ok_or_else(|| {
            Error::Unauthenticated(format!(
                "key \"{key}\" does not exist: create one with `quintet key create {app}`"
            ))
        })?;
        let now = self.clock.now_ms();
        token
            .verify(entry.secret().as_bytes(), now)?
            .check_policy(now, self.max_ttl, None)?;
        if entry.is_revoked() {
            return Err(Error::Unauthenticated(format!(
                "key \"{key}\" was revoked: create a new one with `quintet key create {app}`"
            )));
        }
        if &entry.app != app {
            return Err(Error::Forbidden(format!(
                "key \"{key}\" does not belong to application \"{app}\": use one of \"{app}\"'s keys"
            )));
        }
        entry.touch(now);
        Ok(Principal::Key {
            app: app.clone(),
            key,
        })
    }

    fn domain(&self, headers: &HeaderMap) -> Result<Principal> {
        let DomainAuth::Jwt { secret, sub, aud } = &self.domain else {
            return Ok(Principal::Anonymous);
        };
        let token = Unverified::parse(bearer(
            headers,
            "a JWT signed with the server's JWT secret",
        )?)?;
        let now = self.clock.now_ms();
        let claims = token.verify(secret.as_bytes(), now)?;
        claims.check_policy(now, self.max_ttl, aud.as_deref())?;
        if let Some(required) = sub
            && claims.sub.as_deref() != Some(required.as_str())
        {
            return Err(Error::Forbidden(
                "the access token's sub is not the one this server accepts (--jwt-sub)".into(),
            ));
        }
        Ok(Principal::Domain { sub: claims.sub })
    }
}

/// The authentication layer: answers 401/403 itself, or records the [`Principal`] and
/// passes the request on.
pub async fn authorize(State(auth): State<Arc<Auth>>, mut req: Request, next: Next) -> Response {
    let scope = req
        .extensions()
        .get::<Scope>()
        .cloned()
        .unwrap_or(Scope::Domain);
    let client = req
        .extensions()
        .get::<crate::ClientAddr>()
        .map(|c| c.0.ip());
    match auth
        .authenticate(req.uri().path(), &scope, req.headers(), client)
        .await
    {
        Ok(principal) => {
            req.extensions_mut().insert(principal);
            next.run(req).await
        }
        Err(e) => ApiError(e).into_response(),
    }
}

/// Proof that the request carried the admin token; handlers of `/_admin` that an account
/// token may not call take it (403 for an account token).
#[derive(Debug, Clone, Copy)]
pub struct Admin;

impl<S: Send + Sync> FromRequestParts<S> for Admin {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        match parts.extensions.get::<Principal>() {
            Some(Principal::Admin) => Ok(Admin),
            Some(Principal::Account { .. }) => Err(ApiError(Error::Forbidden(
                "this call needs the admin token: an account token manages only its own \
                 account's applications, keys and instances"
                    .into(),
            ))),
            _ => Err(ApiError(Error::Unauthenticated(
                "this call needs the admin token: send Authorization: Bearer <admin token>".into(),
            ))),
        }
    }
}

/// Who calls an admin call that an account token may make too: the admin, or an account,
/// which sees and manages only its own applications (handlers check with
/// [`Caller::may_see`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// The holder of the admin token: everything.
    Admin,
    /// The holder of an account token: this account's applications only.
    Account(AccountName),
}

impl Caller {
    /// Whether the caller may see and manage what `owner` owns (`None`: the domain
    /// application, which no account owns).
    pub fn may_see(&self, owner: Option<&AccountName>) -> bool {
        match self {
            Self::Admin => true,
            Self::Account(me) => owner == Some(me),
        }
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        match parts.extensions.get::<Principal>() {
            Some(Principal::Admin) => Ok(Self::Admin),
            Some(Principal::Account { account }) => Ok(Self::Account(account.clone())),
            _ => Err(ApiError(Error::Unauthenticated(
                "this call needs the admin token or an account token: send Authorization: \
                 Bearer <token>"
                    .into(),
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credential_table() {
        let app = |s: &str| Scope::App(s.parse().unwrap());
        let cases = [
            ("/", Scope::Domain, Access::Public),
            ("/_health", Scope::Domain, Access::Public),
            ("/_ready", Scope::Domain, Access::Public),
            ("/_metrics", Scope::Domain, Access::Metrics),
            ("/_openapi.json", Scope::Domain, Access::Public),
            ("/_console/api", Scope::Domain, Access::Public),
            ("/_presigned/abc/def", Scope::Domain, Access::Public),
            ("/_console", Scope::Domain, Access::Public),
            ("/_console/", Scope::Domain, Access::Public),
            ("/_console/pages/keys.js", Scope::Domain, Access::Public),
            ("/_consolex", Scope::Domain, Access::Domain),
            ("/_admin", Scope::Domain, Access::Admin),
            ("/_admin/apps", Scope::Domain, Access::Admin),
            ("/_adminx", Scope::Domain, Access::Domain),
            ("/data/movies", Scope::Domain, Access::Domain),
            ("/nope", Scope::Domain, Access::Domain),
            // After the rewrite the path is in the domain form; the scope decides.
            (
                "/data/default",
                app("shop"),
                Access::App("shop".parse().unwrap()),
            ),
            (
                "/_health",
                app("shop"),
                Access::App("shop".parse().unwrap()),
            ),
        ];
        for (path, scope, expected) in cases {
            assert_eq!(classify(path, &scope), expected, "{path} {scope:?}");
        }
    }

    #[test]
    fn bearer_header_rules() {
        let with = |values: &[&[u8]]| {
            let mut h = HeaderMap::new();
            for v in values {
                h.append(
                    header::AUTHORIZATION,
                    axum::http::HeaderValue::from_bytes(v).unwrap(),
                );
            }
            h
        };
        assert_eq!(bearer(&with(&[b"Bearer abc"]), "x"), Ok("abc"));
        assert_eq!(bearer(&with(&[b"bearer   abc  "]), "x"), Ok("abc"));
        for bad in [
            &b"Basic abc"[..],
            b"Bearer",
            b"Bearer ",
            b"Bearerabc",
            b"Bearer a b",
            b"Bearer \xff\xfe",
            b"abc",
        ] {
            let e = bearer(&with(&[bad]), "x").unwrap_err();
            assert_eq!(
                e,
                Error::Unauthenticated(
                    "the Authorization header must be \"Bearer <token>\", with x".into()
                ),
                "{bad:?}"
            );
        }
        assert!(bearer(&HeaderMap::new(), "x").is_err());
        assert_eq!(
            bearer(&with(&[b"Bearer a", b"Bearer b"]), "x"),
            Err(Error::Unauthenticated(
                "send one Authorization header, not several".into()
            ))
        );
    }
}
