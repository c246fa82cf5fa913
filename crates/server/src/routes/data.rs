//! The data service: documents, bulk writes, listing, Mango queries and indexes.
//!
//! The calls, their statuses and rules: `docs/api.md#data`.

use axum::{
    Router,
    body::{Body, Bytes},
    extract::{FromRequestParts, Query, State, rejection::QueryRejection},
    http::{HeaderValue, StatusCode, header, request::Parts},
    response::Response,
    routing::{get, post},
};
use futures_util::{StreamExt, stream};
use quintet_core::{
    Error,
    mango::{FindQuery, IndexDef},
    ports::data::{self, BulkOp, DocId, ListQuery},
};
use serde_json::{Map, Value, json, value::RawValue};

use crate::{
    error::{ApiError, ApiResult},
    extract::{Inst, Json, LegacyGet, kind, param},
    reply,
    state::AppState,
};

type DataInst = Inst<kind::Data>;

pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/data/{instance}", get(list).post(create))
        .route("/data/{instance}/_bulk", post(bulk))
        .route("/data/{instance}/_query", post(query))
        .route("/data/{instance}/_index", post(create_index).get(indexes))
        .route(
            "/data/{instance}/{id}",
            get(get_doc).put(replace).delete(remove),
        )
}

/// The `{id}` path parameter as a valid document id (422 otherwise).
#[derive(Debug)]
struct IdPath(DocId);

impl FromRequestParts<AppState> for IdPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        Ok(IdPath(param(parts, state, "id").await?.parse()?))
    }
}

fn missing(inst: &DataInst, id: &DocId) -> ApiError {
    ApiError(quintet_core::ports::data::document_missing(&inst.name, id))
}

/// 201 `{ok:true, id}`; 409 when `_id` exists; 400 for an empty document.
async fn create(State(s): State<AppState>, inst: DataInst, Json(body): Json<Value>) -> ApiResult {
    let (id, doc) = data::new_document(body)?;
    let id = s.services.data.create(&inst, id, doc).await?;
    Ok(reply::json(
        StatusCode::CREATED,
        &json!({"ok": true, "id": id.as_str()}),
    ))
}

/// 200 `{ok:true, doc}`, or the stored document itself when the legacy header says `true`.
async fn get_doc(
    State(s): State<AppState>,
    inst: DataInst,
    IdPath(id): IdPath,
    LegacyGet(legacy): LegacyGet,
) -> ApiResult {
    match s.services.data.get(&inst, &id).await? {
        Some(raw) if legacy => Ok(reply::raw(StatusCode::OK, &raw)),
        Some(raw) => Ok(reply::ok_with_raw(StatusCode::OK, "doc", &raw)),
        None => Err(missing(&inst, &id)),
    }
}

/// 200 `{ok:true, id}`; 404 when missing. The path id wins over a body `_id`.
async fn replace(
    State(s): State<AppState>,
    inst: DataInst,
    IdPath(id): IdPath,
    Json(body): Json<Value>,
) -> ApiResult {
    let doc = data::replacement(body)?;
    s.services.data.replace(&inst, &id, doc).await?;
    Ok(reply::json(
        StatusCode::OK,
        &json!({"ok": true, "id": id.as_str()}),
    ))
}

/// 200 `{ok:true}`; 404 when missing.
async fn remove(State(s): State<AppState>, inst: DataInst, IdPath(id): IdPath) -> ApiResult {
    s.services.data.remove(&inst, &id).await?;
    Ok(reply::ok(StatusCode::OK))
}

/// 200 `{ok:true, results:[{id, ok, error?}]}`, one result per entry, in order.
async fn bulk(
    State(s): State<AppState>,
    inst: DataInst,
    Json(body): Json<Box<RawValue>>,
) -> ApiResult {
    let ops = BulkOp::parse_text(body.get())?;
    let outcomes = s.services.data.bulk(&inst, ops).await?;
    let results: Vec<Value> = outcomes
        .into_iter()
        .map(|o| {
            let mut m = Map::new();
            m.insert("id".into(), o.id.map_or(Value::Null, Value::String));
            m.insert("ok".into(), Value::Bool(o.ok));
            if let Some(e) = o.error {
                m.insert("error".into(), Value::String(e));
            }
            Value::Object(m)
        })
        .collect();
    Ok(reply::json(
        StatusCode::OK,
        &json!({"ok": true, "results": results}),
    ))
}

/// 200 `{ok:true, docs:[…]}`, streamed as the documents are read.
async fn list(
    State(s): State<AppState>,
    inst: DataInst,
    params: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> ApiResult {
    let Query(params) =
        params.map_err(|e| ApiError(Error::BadRequest(format!("bad query string: {e}"))))?;
    let q = ListQuery::from_params(params.iter().map(|(k, v)| (k.as_str(), v.as_str())))?;
    let rows = s.services.data.list(&inst, q).await?;
    let mut first = true;
    // Rows ready together go out as one chunk.
    let chunks = rows.ready_chunks(64).map(move |batch| {
        let mut buf = Vec::with_capacity(batch.len() * 128);
        for row in batch {
            let raw = row?;
            if !first {
                buf.push(b',');
            }
            first = false;
            buf.extend_from_slice(raw.get().as_bytes());
        }
        Ok::<_, Error>(Bytes::from(buf))
    });
    let body = stream::once(async { Ok(Bytes::from_static(br#"{"ok":true,"docs":["#)) })
        .chain(chunks)
        .chain(stream::once(async { Ok(Bytes::from_static(b"]}")) }));
    let mut res = Response::new(Body::from_stream(body));
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Ok(res)
}

/// 200 `{ok:true, docs, warning?, execution_stats?}`.
async fn query(State(s): State<AppState>, inst: DataInst, Json(body): Json<Value>) -> ApiResult {
    let q = FindQuery::from_json(&body)?;
    let out = s.services.data.find(&inst, q).await?;
    let mut m = Map::new();
    m.insert("ok".into(), Value::Bool(true));
    m.insert("docs".into(), Value::Array(out.docs));
    if let Some(w) = out.warning {
        m.insert("warning".into(), Value::String(w));
    }
    if let Some(st) = out.stats {
        m.insert(
            "execution_stats".into(),
            json!({
                "docs_examined": st.docs_examined,
                "results_returned": st.results_returned,
                "execution_time_ms": st.execution_time_ms,
                "index": st.index,
            }),
        );
    }
    Ok(reply::json(StatusCode::OK, &Value::Object(m)))
}

/// 200 `{ok:true}`; 409 when the name holds another definition.
async fn create_index(
    State(s): State<AppState>,
    inst: DataInst,
    Json(body): Json<Value>,
) -> ApiResult {
    let def = IndexDef::from_json(&body)?;
    s.services.data.create_index(&inst, def).await?;
    Ok(reply::ok(StatusCode::OK))
}

/// 200 `{ok:true, indexes:[{name, type, fields, partial_filter_selector?}]}`.
async fn indexes(State(s): State<AppState>, inst: DataInst) -> ApiResult {
    let defs = s.services.data.indexes(&inst).await?;
    let list: Vec<Value> = defs.iter().map(IndexDef::to_json).collect();
    Ok(reply::json(
        StatusCode::OK,
        &json!({"ok": true, "indexes": list}),
    ))
}
