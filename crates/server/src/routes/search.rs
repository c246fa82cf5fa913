//! The search service: index, read, replace and remove documents by key, bulk-index, and
//! query. Creating and destroying instances is in [`super::lifecycle`].
//!
//! The calls, their statuses and rules: `docs/api.md#search`.

use axum::{
    Router,
    extract::{FromRequestParts, State},
    http::{StatusCode, request::Parts},
    response::Response,
    routing::{get, post},
};
use quintet_core::{
    Error, InstanceConfig,
    ports::search::SearchConfig,
    search::{self, SearchDoc, SearchKey, SearchQuery, document::MAX_BULK_DOCS},
};
use serde_json::{Value, json};

use crate::{
    error::{ApiError, ApiResult},
    extract::{Inst, Json, kind::Search, param},
    reply,
    state::AppState,
};

pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/search/{instance}", post(index))
        .route("/search/{instance}/_query", post(query))
        .route("/search/{instance}/_bulk", post(bulk))
        .route(
            "/search/{instance}/{key}",
            get(get_doc).put(update).delete(remove),
        )
}

fn config(inst: &Inst<Search>) -> Result<&SearchConfig, ApiError> {
    match &inst.config {
        InstanceConfig::Search(c) => Ok(c),
        other => Err(ApiError(Error::internal(format!(
            "a search route resolved a {} instance",
            other.kind()
        )))),
    }
}

/// The `{key}` of a document path. A key that breaks the key rules cannot name a document,
/// so it is answered like a missing one (404).
struct KeyPath(Result<SearchKey, String>);

impl FromRequestParts<AppState> for KeyPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let raw = param(parts, state, "key").await?;
        Ok(KeyPath(raw.parse().map_err(|_| raw)))
    }
}

impl KeyPath {
    fn key(self, inst: &Inst<Search>) -> Result<SearchKey, ApiError> {
        self.0
            .map_err(|raw| ApiError(search::missing(inst.name.as_str(), &raw)))
    }
}

/// `POST /search/<i>` `{key, doc}`: 201; 409 when the key exists.
async fn index(
    State(state): State<AppState>,
    inst: Inst<Search>,
    Json(body): Json<Value>,
) -> ApiResult<Response> {
    let shape = || {
        Error::invalid(
            "the body must be {\"key\": \"<key>\", \"doc\": {<document>}}: a string key and \
             a document object",
        )
    };
    let Value::Object(mut body) = body else {
        return Err(shape().into());
    };
    let key = match body.remove("key") {
        Some(Value::String(k)) => k.parse::<SearchKey>()?,
        _ => return Err(shape().into()),
    };
    let doc = match body.remove("doc") {
        Some(Value::Object(d)) => d,
        _ => return Err(shape().into()),
    };
    let doc = SearchDoc::new(key, doc, config(&inst)?)?;
    state.services.search.index(&inst, doc).await?;
    Ok(reply::ok(StatusCode::CREATED))
}

/// `GET /search/<i>/<key>`: 201 `{ok:true, key, doc}` (the spec's status), the document as
/// indexed; 404.
async fn get_doc(
    State(state): State<AppState>,
    inst: Inst<Search>,
    key: KeyPath,
) -> ApiResult<Response> {
    let key = key.key(&inst)?;
    let doc = state
        .services
        .search
        .get(&inst, &key)
        .await?
        .ok_or_else(|| search::missing(inst.name.as_str(), key.as_str()))?;
    let key_json = Value::String(key.as_str().to_owned()).to_string();
    let mut body = String::with_capacity(doc.get().len() + key_json.len() + 32);
    body.push_str(r#"{"ok":true,"key":"#);
    body.push_str(&key_json);
    body.push_str(r#","doc":"#);
    body.push_str(doc.get());
    body.push('}');
    Ok(reply::json_text(StatusCode::CREATED, body))
}

/// `PUT /search/<i>/<key>` with the whole document: 200; 404 when missing.
async fn update(
    State(state): State<AppState>,
    inst: Inst<Search>,
    key: KeyPath,
    Json(body): Json<Value>,
) -> ApiResult<Response> {
    let key = key.key(&inst)?;
    let Value::Object(doc) = body else {
        return Err(Error::invalid("the body must be the document: a JSON object").into());
    };
    let doc = SearchDoc::new(key, doc, config(&inst)?)?;
    state.services.search.update(&inst, doc).await?;
    Ok(reply::ok(StatusCode::OK))
}

/// `DELETE /search/<i>/<key>`: 200; 404 when missing.
async fn remove(
    State(state): State<AppState>,
    inst: Inst<Search>,
    key: KeyPath,
) -> ApiResult<Response> {
    let key = key.key(&inst)?;
    state.services.search.remove(&inst, &key).await?;
    Ok(reply::ok(StatusCode::OK))
}

/// `POST /search/<i>/_bulk` `[doc, …]`: upsert every valid document in one commit; one
/// result per entry, in order, `{id, ok:false, error}` for an entry that was refused.
async fn bulk(
    State(state): State<AppState>,
    inst: Inst<Search>,
    Json(body): Json<Value>,
) -> ApiResult<Response> {
    let Value::Array(entries) = body else {
        return Err(Error::invalid(
            "the body must be a JSON array of documents, each with \"_id\" or \"id\"",
        )
        .into());
    };
    if entries.len() > MAX_BULK_DOCS {
        return Err(Error::TooLarge(format!(
            "the bulk request has {} documents; at most {MAX_BULK_DOCS} are allowed per request",
            entries.len()
        ))
        .into());
    }
    let config = config(&inst)?;
    let mut results = Vec::with_capacity(entries.len());
    let mut docs = Vec::with_capacity(entries.len());
    for entry in entries {
        match SearchDoc::from_bulk_entry(entry, config) {
            Ok(doc) => {
                results.push(json!({"id": doc.key().as_str(), "ok": true}));
                docs.push(doc);
            }
            Err(reject) => {
                results.push(json!({"id": reject.id, "ok": false, "error": reject.error}));
            }
        }
    }
    state.services.search.bulk(&inst, docs).await?;
    Ok(reply::json(
        StatusCode::OK,
        &json!({"ok": true, "results": results}),
    ))
}

/// `POST /search/<i>/_query` `{query, fields?, filter?, limit?}`: 200 `{ok:true, matches}`.
async fn query(
    State(state): State<AppState>,
    inst: Inst<Search>,
    Json(body): Json<Value>,
) -> ApiResult<Response> {
    let query = SearchQuery::from_json(&body, config(&inst)?)?;
    let matches = state.services.search.query(&inst, &query).await?;
    Ok(reply::json_text(
        StatusCode::OK,
        search::answer_json(&matches),
    ))
}
