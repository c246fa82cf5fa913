//! Queue routes: enqueue, list, retry and cancel jobs (domain form; the application form
//! reaches them through the scope rewrite).
//!
//! The calls, their statuses and rules: `docs/api.md#queue`.

use axum::{
    Router,
    extract::{Path, Query, State},
    http::{HeaderMap, StatusCode},
    response::Response,
    routing::{get, post},
};
use quintet_core::{
    Error,
    clock::format_rfc3339_ms,
    ports::queue::{
        DEFAULT_LIST_LIMIT, IdempotencyKey, JobBody, JobStatus, ListJobs, MAX_LIST_LIMIT,
    },
};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::{
    error::ApiResult,
    extract::{Inst, Json, kind},
    reply,
    state::AppState,
};

type Queue = Inst<kind::Queue>;

pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/queue/{instance}", post(enqueue).get(list_payloads))
        .route("/queue/{instance}/_jobs", get(list_records))
        .route("/queue/{instance}/{id}/_retry", post(retry))
        .route("/queue/{instance}/{id}/_cancel", post(cancel))
}

/// 201 `{ok:true, id}` once the job is durable.
async fn enqueue(
    State(state): State<AppState>,
    queue: Queue,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> ApiResult {
    let Value::Object(doc) = body else {
        return Err(Error::invalid(format!(
            "a job must be a JSON object, e.g. {{\"type\":\"welcome-email\",\"to\":\"ann@example.com\"}}; \
             got {}",
            quintet_core::json::kind(&body)
        ))
        .into());
    };
    let job = JobBody::from_document(&doc)?;
    let key = idempotency_key(&headers)?;
    let id = state
        .services
        .queue
        .enqueue(&queue, &job, key.as_ref(), state.clock.now_ms())
        .await?;
    state.dispatcher.wake(&queue.0);
    Ok(reply::json(
        StatusCode::CREATED,
        &json!({"ok": true, "id": id}),
    ))
}

fn idempotency_key(headers: &HeaderMap) -> Result<Option<IdempotencyKey>, Error> {
    let Some(value) = headers.get("idempotency-key") else {
        return Ok(None);
    };
    let text = value.to_str().unwrap_or("\u{0}"); // non-ASCII fails the key's own rule
    text.trim().parse().map(Some)
}

/// Query parameters of the list calls.
#[derive(Debug, Deserialize)]
struct ListParams {
    status: Option<String>,
    limit: Option<String>,
    after: Option<String>,
}

impl ListParams {
    fn to_query(&self, status_required: bool) -> Result<ListJobs, Error> {
        let status = match self.status.as_deref() {
            Some(s) => Some(s.parse::<JobStatus>()?),
            None if status_required => {
                return Err(Error::invalid(
                    "the query parameter status is required: use status=READY or status=ERROR",
                ));
            }
            None => None,
        };
        let limit = match self.limit.as_deref() {
            None => DEFAULT_LIST_LIMIT,
            Some(text) => text
                .parse::<usize>()
                .ok()
                .filter(|n| (1..=MAX_LIST_LIMIT).contains(n))
                .ok_or_else(|| {
                    Error::invalid(format!(
                        "limit \"{text}\" must be a whole number from 1 to {MAX_LIST_LIMIT}"
                    ))
                })?,
        };
        Ok(ListJobs {
            status,
            limit,
            after: self.after.clone(),
        })
    }
}

/// Query-string parsing that reports problems in quintet's format.
fn params(
    query: Result<Query<ListParams>, axum::extract::rejection::QueryRejection>,
) -> Result<ListParams, Error> {
    query
        .map(|Query(p)| p)
        .map_err(|e| Error::invalid(format!("the query string is not valid: {}", e.body_text())))
}

/// `{ok:true, jobs:[<payload>…]}`: the jobs in one state, as submitted, oldest first.
async fn list_payloads(
    State(state): State<AppState>,
    queue: Queue,
    query: Result<Query<ListParams>, axum::extract::rejection::QueryRejection>,
) -> ApiResult {
    let query = params(query)?.to_query(true)?;
    let records = state.services.queue.list(&queue, &query).await?;
    let mut body =
        String::with_capacity(64 + records.iter().map(|r| r.job.get().len() + 1).sum::<usize>());
    body.push_str(r#"{"ok":true,"jobs":["#);
    for (i, r) in records.iter().enumerate() {
        if i > 0 {
            body.push(',');
        }
        body.push_str(r.job.get());
    }
    body.push_str("]}");
    Ok(reply::json_text(StatusCode::OK, body))
}

/// `{ok:true, jobs:[{id, status, job, attempts, error, created, updated}…]}`.
async fn list_records(
    State(state): State<AppState>,
    queue: Queue,
    query: Result<Query<ListParams>, axum::extract::rejection::QueryRejection>,
) -> ApiResult {
    let query = params(query)?.to_query(false)?;
    let records = state.services.queue.list(&queue, &query).await?;
    let jobs: Vec<Value> = records
        .iter()
        .map(|r| {
            json!({
                "id": r.id,
                "status": r.status.as_str(),
                "job": r.job,
                "attempts": r.attempts,
                "error": r.error,
                "created": format_rfc3339_ms(r.created_ms),
                "updated": format_rfc3339_ms(r.updated_ms),
            })
        })
        .collect();
    Ok(reply::json(
        StatusCode::OK,
        &json!({"ok": true, "jobs": jobs}),
    ))
}

/// 200 `{ok:true}`: an ERROR job is READY again and delivered at once.
async fn retry(
    State(state): State<AppState>,
    queue: Queue,
    Path((_, id)): Path<(String, String)>,
) -> ApiResult<Response> {
    state
        .services
        .queue
        .retry(&queue, &id, state.clock.now_ms())
        .await?;
    state.dispatcher.wake(&queue.0);
    Ok(reply::ok(StatusCode::OK))
}

/// 200 `{ok:true}`: a READY or ERROR job is removed.
async fn cancel(
    State(state): State<AppState>,
    queue: Queue,
    Path((_, id)): Path<(String, String)>,
) -> ApiResult<Response> {
    state.services.queue.cancel(&queue, &id).await?;
    Ok(reply::ok(StatusCode::OK))
}
