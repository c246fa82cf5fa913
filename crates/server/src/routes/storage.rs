//! Storage: objects by path in an instance, listing, and pre-signed URLs.
//!
//! Bodies are streamed both ways; these routes have no body limit.
//!
//! The calls, their statuses and rules: `docs/api.md#storage`.

mod download;
mod upload;

use std::collections::HashMap;

use axum::{
    Router,
    extract::{FromRequestParts, Query, RawPathParams, Request, State},
    http::{Method, StatusCode, request::Parts},
    routing::{MethodRouter, get},
};
use quintet_core::{
    AppName, Error, ServiceType,
    object::{
        self, ObjectPath, PresignMethod,
        presign::{invalid_url, parse_expiry},
    },
    ports::storage::ListQuery,
};
use serde_json::json;

use crate::{
    error::{ApiError, ApiResult},
    extract::{BaseUrl, Inst, kind::Storage, param},
    reply,
    state::AppState,
};

pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/storage/{instance}", get(list).post(post_form))
        .route(
            "/storage/{instance}/{*path}",
            get(get_object)
                .head(head_object)
                .post(post_object)
                .delete(remove),
        )
        .route(
            "/_presigned/storage/{instance}/{*path}",
            presigned_methods(),
        )
        .route(
            "/_presigned/{app}/storage/{instance}/{*path}",
            presigned_methods(),
        )
}

fn presigned_methods() -> MethodRouter<AppState> {
    get(presigned)
        .head(presigned)
        .put(presigned)
        .post(presigned)
}

/// The `{*path}` parameter as an [`ObjectPath`]; 422 when it breaks the path rules.
#[derive(Debug)]
struct ObjPath(ObjectPath);

impl FromRequestParts<AppState> for ObjPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        Ok(ObjPath(param(parts, state, "path").await?.parse()?))
    }
}

/// The query string as name → value (the last one wins).
#[derive(Debug, Default)]
struct Params(HashMap<String, String>);

impl Params {
    fn of(parts: &Parts) -> Result<Self, ApiError> {
        Query::<HashMap<String, String>>::try_from_uri(&parts.uri)
            .map(|Query(q)| Params(q))
            .map_err(|e| {
                ApiError(Error::BadRequest(format!(
                    "the query string is malformed: {}",
                    e.body_text()
                )))
            })
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }

    /// Whether `?useSignedUrl=true` asks for a pre-signed URL instead of the operation.
    fn use_signed_url(&self) -> Result<bool, ApiError> {
        match self.get("useSignedUrl") {
            None => Ok(false),
            Some(v) if v.eq_ignore_ascii_case("true") => Ok(true),
            Some(v) if v.eq_ignore_ascii_case("false") => Ok(false),
            Some(v) => Err(ApiError(Error::invalid(format!(
                "useSignedUrl {v:?} is not valid: use true or false"
            )))),
        }
    }
}

impl FromRequestParts<AppState> for Params {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &AppState) -> Result<Self, ApiError> {
        Self::of(parts)
    }
}

/// The 404 of a missing object.
fn missing(instance: &quintet_core::Instance, path: &ObjectPath) -> ApiError {
    ApiError(quintet_core::ports::storage::object_missing(
        &instance.name,
        path,
    ))
}

/// `GET /storage/<s>/<path>`: the object, or a pre-signed download URL.
async fn get_object(
    State(state): State<AppState>,
    inst: Inst<Storage>,
    ObjPath(path): ObjPath,
    params: Params,
    mut parts: Parts,
) -> ApiResult {
    if params.use_signed_url()? {
        return presign(
            &state,
            &inst,
            &path,
            PresignMethod::Get,
            &params,
            &mut parts,
        )
        .await;
    }
    download::serve(&state, &inst, &path, &parts.headers, false).await
}

/// `HEAD /storage/<s>/<path>`: the object's headers.
async fn head_object(
    State(state): State<AppState>,
    inst: Inst<Storage>,
    ObjPath(path): ObjPath,
    parts: Parts,
) -> ApiResult {
    download::serve(&state, &inst, &path, &parts.headers, true).await
}

/// `POST /storage/<s>/<path>`: upload (raw or multipart), or a pre-signed upload URL.
async fn post_object(
    State(state): State<AppState>,
    inst: Inst<Storage>,
    ObjPath(path): ObjPath,
    params: Params,
    req: Request,
) -> ApiResult {
    let (mut parts, body) = req.into_parts();
    if params.use_signed_url()? {
        return presign(
            &state,
            &inst,
            &path,
            PresignMethod::Put,
            &params,
            &mut parts,
        )
        .await;
    }
    upload::upload(&state, &inst, Some(path), &parts.headers, body, true).await
}

/// `POST /storage/<s>`: a multipart upload that names its object in the form.
async fn post_form(
    State(state): State<AppState>,
    inst: Inst<Storage>,
    params: Params,
    req: Request,
) -> ApiResult {
    if params.use_signed_url()? {
        return Err(ApiError(Error::invalid(format!(
            "name the object to sign a URL for: POST /storage/{}/<path>?useSignedUrl=true",
            inst.name
        ))));
    }
    let (parts, body) = req.into_parts();
    upload::upload(&state, &inst, None, &parts.headers, body, true).await
}

/// `DELETE /storage/<s>/<path>`.
async fn remove(
    State(state): State<AppState>,
    inst: Inst<Storage>,
    ObjPath(path): ObjPath,
) -> ApiResult {
    state.services.storage.delete(&inst, &path).await?;
    Ok(reply::ok(StatusCode::OK))
}

/// `GET /storage/<s>?prefix=&after=&limit=`: objects in path order.
async fn list(State(state): State<AppState>, inst: Inst<Storage>, params: Params) -> ApiResult {
    let prefix = params.get("prefix").unwrap_or("");
    object::parse_list_bound("prefix", prefix)?;
    let after = params.get("after");
    if let Some(after) = after {
        object::parse_list_bound("after", after)?;
    }
    let limit = object::parse_list_limit(params.get("limit"))?;
    let query = ListQuery {
        prefix,
        after,
        limit,
    };
    let objects: Vec<_> = state
        .services
        .storage
        .list(&inst, query)
        .await?
        .into_iter()
        .map(|m| {
            json!({
                "path": m.path.as_str(),
                "size": m.size,
                "contentType": m.content_type,
                "etag": m.etag,
                "modified": quintet_core::clock::format_rfc3339_ms(m.modified_ms),
            })
        })
        .collect();
    Ok(reply::json(
        StatusCode::OK,
        &json!({"ok": true, "objects": objects}),
    ))
}

/// `{ok:true, url}`: a pre-signed URL for `method` on `path`.
async fn presign(
    state: &AppState,
    inst: &quintet_core::Instance,
    path: &ObjectPath,
    method: PresignMethod,
    params: &Params,
    parts: &mut Parts,
) -> ApiResult {
    let expires = parse_expiry(params.get("expires"))?;
    let BaseUrl(base) = BaseUrl::from_request_parts(parts, state).await?;
    let url = state
        .services
        .storage
        .presign(inst, path, method, expires, &base)
        .await?;
    Ok(reply::json(
        StatusCode::OK,
        &json!({"ok": true, "url": url}),
    ))
}

/// A request to a pre-signed URL: checked against its signature, then served as the
/// download (`GET`, `HEAD`) or raw upload (`PUT`, `POST`) it grants. Every refusal is 403,
/// whatever is wrong, so the route tells nothing about which instances exist.
async fn presigned(State(state): State<AppState>, req: Request) -> ApiResult {
    let (mut parts, body) = req.into_parts();
    let params = RawPathParams::from_request_parts(&mut parts, &state)
        .await
        .map_err(|_| invalid_url())?;
    let find = |name: &str| params.iter().find(|(k, _)| *k == name).map(|(_, v)| v);
    let app = match find("app") {
        Some(app) => app.parse::<AppName>().map_err(|_| invalid_url())?,
        None => AppName::domain(),
    };
    let name = find("instance").ok_or_else(invalid_url)?.to_owned();
    let path: ObjectPath = find("path")
        .ok_or_else(invalid_url)?
        .parse()
        .map_err(|_| invalid_url())?;
    let query = Params::of(&parts).map_err(|_| invalid_url())?;
    let expires_at_s: i64 = query
        .get("expires")
        .and_then(|v| v.parse().ok())
        .ok_or_else(invalid_url)?;
    let sig = query.get("sig").ok_or_else(invalid_url)?;
    let inst = state
        .instances
        .resolve(&app, ServiceType::Storage, &name)
        .await
        .map_err(|e| match e {
            Error::NotFound(_) => invalid_url(),
            other => other,
        })?;
    let method = if parts.method == Method::GET || parts.method == Method::HEAD {
        PresignMethod::Get
    } else {
        PresignMethod::Put
    };
    state
        .services
        .storage
        .check_presigned(&inst, &path, method, expires_at_s, sig)
        .await?;
    match parts.method {
        Method::GET => download::serve(&state, &inst, &path, &parts.headers, false).await,
        Method::HEAD => download::serve(&state, &inst, &path, &parts.headers, true).await,
        _ => upload::upload(&state, &inst, Some(path), &parts.headers, body, false).await,
    }
}
