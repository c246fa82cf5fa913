//! `GET /_admin/export` and `POST /_admin/import`: the portable archive over the admin API,
//! streamed both ways (no body limit). The work is [`crate::archive`]'s.
//!
//! The calls, their statuses and rules: `docs/api.md#export-and-import`.

use axum::{
    Router,
    body::Body,
    extract::{Query, State},
    http::{StatusCode, header},
    response::Response,
    routing::{get, post},
};
use futures_util::StreamExt;
use quintet_core::{AppName, Error};
use serde::Deserialize;

use crate::{
    archive::{self, ExportOptions, ImportOptions, Importer},
    auth::Admin,
    error::ApiResult,
    reply,
    state::AppState,
};

/// The media type of an archive.
pub const ARCHIVE_TYPE: &str = "application/vnd.quintet.archive";

pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/_admin/export", get(export))
        .route("/_admin/import", post(import))
}

#[derive(Debug, Deserialize)]
struct ExportParams {
    app: Option<String>,
    #[serde(default)]
    secrets: Option<String>,
}

#[derive(Debug, Deserialize)]
struct ImportParams {
    app: Option<String>,
    #[serde(default)]
    merge: Option<String>,
}

fn flag(name: &str, v: Option<&str>) -> Result<bool, Error> {
    match v {
        None | Some("false") => Ok(false),
        Some("true" | "") => Ok(true),
        Some(other) => Err(Error::invalid(format!(
            "{name} must be true or false, not \"{other}\""
        ))),
    }
}

fn app_param(v: Option<String>) -> Result<Option<AppName>, Error> {
    v.map(|a| a.parse::<AppName>()).transpose()
}

/// 200 with the archive streamed; it ends without its end record if the export fails.
async fn export(
    _: Admin,
    State(state): State<AppState>,
    Query(params): Query<ExportParams>,
) -> ApiResult<Response> {
    let options = ExportOptions {
        app: app_param(params.app)?,
        secrets: flag("secrets", params.secrets.as_deref())?,
    };
    archive::check_export(&state, &options).await?;
    let mut rx = archive::export(state, options);
    let body = futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx));
    let mut res = Response::new(Body::from_stream(body));
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(ARCHIVE_TYPE),
    );
    Ok(res)
}

/// 200 with the import's report once every record is applied and every instance read back
/// equal; on any error, what the import created is removed and the error answered.
async fn import(
    _: Admin,
    State(state): State<AppState>,
    Query(params): Query<ImportParams>,
    body: Body,
) -> ApiResult<Response> {
    let options = ImportOptions {
        app: app_param(params.app)?,
        merge: flag("merge", params.merge.as_deref())?,
    };
    // The import runs in a task of its own, fed through a channel: if this request is
    // dropped midway (the client left, the server stops), the channel closes, the task
    // sees a truncated archive and removes what it created, instead of being cancelled
    // with half an application imported.
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Result<bytes::Bytes, Error>>(4);
    let task = tokio::spawn(async move {
        let mut importer = Importer::new(state, options);
        while let Some(chunk) = rx.recv().await {
            let fed = match chunk {
                Ok(bytes) => importer.feed(&bytes).await,
                Err(e) => Err(e),
            };
            if let Err(e) = fed {
                return Err(importer.fail(e).await);
            }
        }
        importer.finish().await
    });
    let mut stream = body.into_data_stream();
    while let Some(chunk) = stream.next().await {
        let chunk =
            chunk.map_err(|e| Error::BadRequest(format!("the archive did not arrive whole: {e}")));
        let failed = chunk.is_err();
        if failed {
            let _ = tx.send(chunk).await;
            break;
        }
        if tx.send(chunk).await.is_err() {
            // The importer stopped and answers why. The rest of the body is read and
            // dropped, so that clients that send it all before reading (most do) get
            // the answer rather than a broken connection.
            while let Some(Ok(_)) = stream.next().await {}
            break;
        }
    }
    drop(tx);
    let report = task
        .await
        .map_err(|e| Error::internal(format!("the import task failed: {e}")))??;
    let mut body = serde_json::json!({"ok": true});
    if let (Some(out), Ok(serde_json::Value::Object(fields))) =
        (body.as_object_mut(), serde_json::to_value(&report))
    {
        out.extend(fields);
    }
    Ok(reply::json(StatusCode::OK, &body))
}
