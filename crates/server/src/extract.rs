//! Extractors that speak quintet's error format.

use std::marker::PhantomData;
use std::sync::Arc;

use axum::{
    body::Bytes,
    extract::{FromRequest, FromRequestParts, RawPathParams, Request},
    http::{StatusCode, request::Parts},
};
use quintet_core::{Error, Instance};
use serde::de::DeserializeOwned;

use crate::{error::ApiError, scope::Scope, state::AppState};

/// Read the whole body, honouring the route's body limit (413 beyond it).
async fn body_bytes(req: Request, state: &AppState) -> Result<Bytes, ApiError> {
    Bytes::from_request(req, state).await.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError(Error::TooLarge(format!(
                "the request body is larger than the limit of {} bytes",
                state.config.max_body_bytes
            )))
        } else {
            ApiError(Error::BadRequest(format!(
                "the request body could not be read: {}",
                rejection.body_text()
            )))
        }
    })
}

/// Parse JSON text: syntax errors are 400, JSON of the wrong shape is 422, nesting deeper
/// than the configured limit is 422.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8], max_depth: usize) -> Result<T, ApiError> {
    quintet_core::json::check_depth(bytes, max_depth)?;
    serde_json::from_slice(bytes).map_err(|e| {
        use serde_json::error::Category;
        ApiError(match e.classify() {
            Category::Syntax | Category::Eof | Category::Io => {
                Error::BadRequest(format!("the body is not valid JSON: {e}"))
            }
            Category::Data => Error::Invalid(format!("the JSON body has the wrong shape: {e}")),
        })
    })
}

/// Refuse a body whose `Content-Type` is not JSON (`application/json`, or any
/// `application/*+json`), with 415. hyper parsed any content type as JSON; quintet does
/// not, because the types a web page may send cross-origin without asking first
/// (`text/plain`, forms) would otherwise reach JSON calls — see [`crate::cors`].
fn check_json_type(headers: &axum::http::HeaderMap) -> Result<(), ApiError> {
    let value = headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let essence = value
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    let json = essence == "application/json"
        || (essence.starts_with("application/") && essence.ends_with("+json"));
    if json {
        return Ok(());
    }
    let sent = if value.is_empty() {
        "no Content-Type".to_owned()
    } else {
        format!(
            "Content-Type {:?}",
            value.chars().take(100).collect::<String>()
        )
    };
    Err(ApiError(Error::UnsupportedMediaType(format!(
        "this call takes a JSON body, but the request was sent with {sent}: send \
         Content-Type: application/json (with curl: -H 'content-type: application/json', or \
         --json)"
    ))))
}

/// A JSON body sent as `application/json`; an empty body is malformed.
#[derive(Debug)]
pub struct Json<T>(pub T);

impl<T: DeserializeOwned> FromRequest<AppState> for Json<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        let typed = check_json_type(req.headers());
        let bytes = body_bytes(req, state).await?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return parse_json(&bytes, state.config.max_json_depth).map(Json);
        }
        typed?;
        parse_json(&bytes, state.config.max_json_depth).map(Json)
    }
}

/// A JSON body that may be absent (empty or whitespace only).
#[derive(Debug)]
pub struct OptionalJson<T>(pub Option<T>);

impl<T: DeserializeOwned> FromRequest<AppState> for OptionalJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        let typed = check_json_type(req.headers());
        let bytes = body_bytes(req, state).await?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(OptionalJson(None));
        }
        typed?;
        parse_json(&bytes, state.config.max_json_depth).map(|v| OptionalJson(Some(v)))
    }
}

/// Marker types naming a service type at compile time, for [`Inst`].
pub mod kind {
    use quintet_core::ServiceType;

    /// A service type known at compile time.
    pub trait Kind: Send + Sync + 'static {
        /// The type.
        const TYPE: ServiceType;
    }

    macro_rules! kinds {
        ($($name:ident => $t:ident),*) => {$(
            #[doc = concat!("The ", stringify!($t), " service.")]
            #[derive(Debug)]
            pub struct $name;
            impl Kind for $name {
                const TYPE: ServiceType = ServiceType::$t;
            }
        )*};
    }
    kinds!(Data => Data, Cache => Cache, Search => Search, Queue => Queue, Storage => Storage);
}

/// The instance a request addresses: the `{instance}` path parameter, resolved for the
/// request's [`Scope`] and the service type `K`. 404 when it does not exist.
#[derive(Debug)]
pub struct Inst<K>(pub Arc<Instance>, PhantomData<K>);

impl<K> std::ops::Deref for Inst<K> {
    type Target = Instance;

    fn deref(&self) -> &Instance {
        &self.0
    }
}

impl<K: kind::Kind> FromRequestParts<AppState> for Inst<K> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let scope = parts
            .extensions
            .get::<Scope>()
            .cloned()
            .unwrap_or(Scope::Domain);
        let name = param(parts, state, "instance").await?;
        let instance = state
            .instances
            .resolve(&scope.app(), K::TYPE, &name)
            .await?;
        Ok(Inst(instance, PhantomData))
    }
}

/// The value of path parameter `name`, percent-decoded.
pub async fn param(parts: &mut Parts, state: &AppState, name: &str) -> Result<String, ApiError> {
    let params = RawPathParams::from_request_parts(parts, state)
        .await
        .map_err(|e| ApiError(Error::BadRequest(e.body_text())))?;
    params
        .iter()
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_owned())
        .ok_or_else(|| ApiError(Error::internal(format!("route has no parameter {name}"))))
}

/// Whether the client asked for the legacy GET shape (the bare document) with
/// `X-SVC-LEGACY-GET: true` (also read as `X-HYPER-LEGACY-GET`); `false` asks for
/// `{ok, doc}`. Without either header, `--legacy-get-default` decides (off: `{ok, doc}`),
/// for old hyper clients that send no header and expect the bare document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LegacyGet(pub bool);

impl FromRequestParts<AppState> for LegacyGet {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let asked = ["x-svc-legacy-get", "x-hyper-legacy-get"]
            .iter()
            .find_map(|h| parts.headers.get(*h).and_then(|v| v.to_str().ok()))
            .map(|v| v.trim().eq_ignore_ascii_case("true"));
        Ok(LegacyGet(asked.unwrap_or(state.config.legacy_get_default)))
    }
}

/// Characters of a bad `Host` header quoted in the answer.
const MAX_HOST_SHOWN: usize = 100;

/// Where clients reach this server: the configured public URL, else `http://` (`https://`
/// when serving TLS) and the request's `Host` header. For absolute URLs the server hands out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BaseUrl(pub String);

impl FromRequestParts<AppState> for BaseUrl {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        if let Some(url) = &state.config.public_url {
            return Ok(BaseUrl(url.clone()));
        }
        let host = parts
            .headers
            .get(axum::http::header::HOST)
            .map(|h| String::from_utf8_lossy(h.as_bytes()))
            .or_else(|| parts.uri.authority().map(|a| a.as_str().into()))
            .filter(|h| !h.is_empty())
            .ok_or_else(|| {
                ApiError(Error::BadRequest(
                    "the request has no Host header to build a URL from; \
                     set --public-url on the server"
                        .into(),
                ))
            })?;
        if !crate::hosts::is_authority(&host) {
            let shown: String = host.chars().take(MAX_HOST_SHOWN).collect();
            return Err(ApiError(Error::BadRequest(format!(
                "the Host header {shown:?} is not a host[:port] to build a URL from: send \
                 a host name or IP address with an optional port, or set --public-url on \
                 the server"
            ))));
        }
        let scheme = if state.config.tls.is_some() {
            "https"
        } else {
            "http"
        };
        Ok(BaseUrl(format!("{scheme}://{host}")))
    }
}
