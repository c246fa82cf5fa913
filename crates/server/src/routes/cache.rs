//! The cache service: add, get, replace and remove entries, and query keys by pattern.
//!
//! The calls, their statuses and rules: `docs/api.md#cache`.

use axum::{
    Router,
    extract::{FromRequestParts, Query, State, rejection::QueryRejection},
    http::{StatusCode, request::Parts},
    response::Response,
    routing::{get, post},
};
use quintet_core::{
    Error,
    accounts::Limits,
    cache::{CacheKey, CacheValue, Glob, Ttl},
    ports::cache::{CacheEntry, SetMode},
};
use serde::Deserialize;
use serde_json::{Value, value::RawValue};

use crate::{
    error::{ApiError, ApiResult},
    extract::{self, Inst, Json, LegacyGet, kind},
    quota::Counted,
    reply,
    scope::Scope,
    state::AppState,
};

pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/cache/{instance}", post(add))
        .route("/cache/{instance}/_query", get(query).post(query))
        .route(
            "/cache/{instance}/{key}",
            get(get_entry).put(set).delete(remove),
        )
        .route("/cache/{instance}/{key}/_ttl", get(remaining_ttl))
}

type CacheInst = Inst<kind::Cache>;

/// The `{key}` path parameter, checked against the key rule (422 otherwise).
#[derive(Debug)]
struct KeyParam(CacheKey);

impl FromRequestParts<AppState> for KeyParam {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let raw = extract::param(parts, state, "key").await?;
        Ok(Self(raw.parse()?))
    }
}

/// Query-string parameters of the cache routes.
#[derive(Debug, Default, Deserialize)]
struct Params {
    ttl: Option<String>,
    pattern: Option<String>,
}

fn params(q: Result<Query<Params>, QueryRejection>) -> Result<Params, ApiError> {
    q.map(|Query(p)| p).map_err(|e| {
        ApiError(Error::invalid(format!(
            "the query string could not be read: {}",
            e.body_text()
        )))
    })
}

/// An optional TTL: absent or empty means none.
fn ttl_of(text: Option<&str>) -> Result<Option<Ttl>, ApiError> {
    match text {
        None | Some("") => Ok(None),
        Some(t) => Ok(Some(t.parse()?)),
    }
}

/// The body of an add: every field optional here, so missing ones get our own messages.
#[derive(Debug, Deserialize)]
struct AddBody {
    key: Option<Value>,
    value: Option<Box<RawValue>>,
    ttl: Option<Value>,
}

impl AddBody {
    fn parse(raw: &RawValue) -> Result<(CacheKey, CacheValue, Option<Ttl>), ApiError> {
        if !raw.get().starts_with('{') {
            return Err(ApiError(Error::invalid(format!(
                "the body must be a JSON object {{\"key\", \"value\", \"ttl\"?}}; got {}",
                quintet_core::json::kind_of_text(raw.get())
            ))));
        }
        let body: AddBody = serde_json::from_str(raw.get()).map_err(|e| {
            ApiError(Error::invalid(format!(
                "the JSON body has the wrong shape: {e}"
            )))
        })?;
        let key = match body.key {
            Some(Value::String(k)) => k.parse()?,
            None | Some(Value::Null) => {
                return Err(ApiError(Error::invalid(
                    "the body needs \"key\": a string such as \"movie-1\"",
                )));
            }
            Some(_) => {
                return Err(ApiError(Error::invalid(
                    "\"key\" must be a string such as \"movie-1\"",
                )));
            }
        };
        let value = match body.value {
            Some(v) => CacheValue::from_raw(&v)?,
            None => {
                return Err(ApiError(Error::invalid(
                    "the body needs \"value\": a JSON object, such as {\"name\": \"x\"}",
                )));
            }
        };
        let ttl = match body.ttl {
            None | Some(Value::Null) => None,
            Some(Value::String(t)) => ttl_of(Some(&t))?,
            Some(_) => return Err(ApiError(Ttl::not_a_string())),
        };
        Ok((key, value, ttl))
    }
}

/// `POST /cache/<c>` `{key, value, ttl?}`: 201; 409 when the key has a live entry.
async fn add(
    State(state): State<AppState>,
    inst: CacheInst,
    Json(body): Json<Box<RawValue>>,
) -> ApiResult<Response> {
    let (key, value, ttl) = AddBody::parse(&body)?;
    let size = within_share(&state, &inst, &key, &value).await?;
    state.services.cache.add(&inst, &key, value, ttl).await?;
    state.usage.add(&inst.app, Counted::Cache, size);
    Ok(reply::ok(StatusCode::CREATED))
}

/// Refuse (403) a write that would take the application's cache entries past its plan's
/// share; the entry's size otherwise. Free for the domain application (no plan).
async fn within_share(
    state: &AppState,
    inst: &CacheInst,
    key: &CacheKey,
    value: &CacheValue,
) -> ApiResult<u64> {
    let size = (key.as_str().len() + value.len()) as u64;
    if let Some((plan, limits)) = state.quotas.of(&inst.app).await? {
        let used = state.usage.of(&inst.app, Counted::Cache).await?;
        Limits::check_bytes(
            plan,
            "cache entries",
            limits.cache_bytes_per_app,
            used,
            size,
        )?;
    }
    Ok(size)
}

/// `GET /cache/<c>/<key>`: 201 `{ok:true, doc}`, or the bare value with the legacy header;
/// 404 for a missing or expired key.
async fn get_entry(
    State(state): State<AppState>,
    inst: CacheInst,
    KeyParam(key): KeyParam,
    LegacyGet(legacy): LegacyGet,
) -> ApiResult<Response> {
    let found = state.services.cache.get(&inst, &key).await?;
    state.metrics.cache_lookup(found.is_some());
    let value = found.ok_or_else(|| quintet_core::cache::missing_key(&inst.name, &key))?;
    if legacy {
        return Ok(reply::json_text(
            StatusCode::CREATED,
            value.as_str().to_owned(),
        ));
    }
    let mut body = String::with_capacity(value.len() + 20);
    body.push_str(r#"{"ok":true,"doc":"#);
    body.push_str(value.as_str());
    body.push('}');
    Ok(reply::json_text(StatusCode::CREATED, body))
}

/// `GET /cache/<c>/<key>/_ttl`: `{ok, key, expires, ttl}`, when the live entry expires
/// (RFC 3339) and the whole seconds left, both `null` when it never does; 404 for a
/// missing or expired key. Reading it is not a use of the entry.
async fn remaining_ttl(
    State(state): State<AppState>,
    inst: CacheInst,
    KeyParam(key): KeyParam,
) -> ApiResult<Response> {
    let expiry = state
        .services
        .cache
        .expiry(&inst, &key)
        .await?
        .ok_or_else(|| quintet_core::cache::missing_key(&inst.name, &key))?;
    let now = state.clock.now_ms();
    let (expires, ttl) = match expiry {
        Some(at) => (
            serde_json::Value::String(quintet_core::clock::format_rfc3339_ms(at)),
            serde_json::json!((at - now).max(0) / 1000),
        ),
        None => (serde_json::Value::Null, serde_json::Value::Null),
    };
    Ok(reply::json(
        StatusCode::OK,
        &serde_json::json!({"ok": true, "key": key.as_str(), "expires": expires, "ttl": ttl}),
    ))
}

/// What a PUT does, and what it answers, in each address form: the domain form upserts
/// (200); the application form updates an existing key only (201, 404 when missing).
fn put_semantics(scope: &Scope) -> (SetMode, StatusCode) {
    match scope {
        Scope::Domain => (SetMode::Upsert, StatusCode::OK),
        Scope::App(_) => (SetMode::UpdateExisting, StatusCode::CREATED),
    }
}

/// `PUT /cache/<c>/<key>?ttl=` with the value as body. Without `ttl` a live entry keeps
/// its expiry.
async fn set(
    State(state): State<AppState>,
    inst: CacheInst,
    scope: Scope,
    KeyParam(key): KeyParam,
    q: Result<Query<Params>, QueryRejection>,
    Json(body): Json<Box<RawValue>>,
) -> ApiResult<Response> {
    let ttl = ttl_of(params(q)?.ttl.as_deref())?;
    let value = CacheValue::from_raw(&body)?;
    let (mode, status) = put_semantics(&scope);
    let size = within_share(&state, &inst, &key, &value).await?;
    state
        .services
        .cache
        .set(&inst, &key, value, ttl, mode)
        .await?;
    state.usage.add(&inst.app, Counted::Cache, size);
    Ok(reply::ok(status))
}

/// `DELETE /cache/<c>/<key>`: 200; 404 when there is no live entry.
async fn remove(
    State(state): State<AppState>,
    inst: CacheInst,
    KeyParam(key): KeyParam,
) -> ApiResult<Response> {
    state.services.cache.remove(&inst, &key).await?;
    Ok(reply::ok(StatusCode::OK))
}

/// `GET` or `POST /cache/<c>/_query?pattern=`: live entries whose key matches, sorted by
/// key. No pattern (or an empty one) means every entry.
async fn query(
    State(state): State<AppState>,
    inst: CacheInst,
    q: Result<Query<Params>, QueryRejection>,
) -> ApiResult<Response> {
    let glob = match params(q)?.pattern.as_deref() {
        None | Some("") => Glob::all(),
        Some(p) => Glob::new(p)?,
    };
    let entries = state.services.cache.query(&inst, &glob).await?;
    Ok(reply::json_text(StatusCode::OK, docs_body(&entries)))
}

/// `{"ok":true,"docs":[{"key":…,"value":…},…]}` from stored text, without re-parsing.
fn docs_body(entries: &[CacheEntry]) -> String {
    let len: usize = entries
        .iter()
        .map(|e| e.key.as_str().len() + e.value.len() + 20)
        .sum();
    let mut body = String::with_capacity(len + 24);
    body.push_str(r#"{"ok":true,"docs":["#);
    for (i, e) in entries.iter().enumerate() {
        if i > 0 {
            body.push(',');
        }
        // Keys hold only a-z 0-9 _ $ + -, none of which needs escaping in JSON.
        body.push_str(r#"{"key":""#);
        body.push_str(e.key.as_str());
        body.push_str(r#"","value":"#);
        body.push_str(e.value.as_str());
        body.push('}');
    }
    body.push_str("]}");
    body
}
