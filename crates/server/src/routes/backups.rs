//! `/_admin/backups`: write a named backup of the node's data directory into the configured
//! backup directory, list the backups, delete one. Names only, never paths.
//!
//! The calls and their statuses: `docs/api.md#the-admin-api`; what a backup holds and how
//! to restore it: `docs/operations.md#backup-and-restore`.

use axum::{
    Router,
    extract::{Path, State},
    http::StatusCode,
    response::Response,
    routing::{delete, post},
};
use quintet_core::{Clock, Error, clock::format_rfc3339_ms};
use serde::Deserialize;
use serde_json::json;

use crate::{
    auth::Admin,
    backups::{BackupName, Backups},
    error::ApiResult,
    extract::OptionalJson,
    reply,
    state::AppState,
};

pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/_admin/backups", post(create).get(list))
        .route("/_admin/backups/{name}", delete(remove))
}

/// The node's backups, or why it has none.
fn backups(state: &AppState) -> Result<&dyn Backups, Error> {
    state.backups.as_deref().ok_or_else(|| {
        Error::conflict(
            "this node cannot write backups: they copy the embedded stores of a data directory, \
             and this node keeps its services on shared engines (PostgreSQL, Redis, S3) — back \
             those up with their own tools, or move data with `quintet export` (see \
             docs/operations.md)",
        )
    })
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NewBackup {
    name: Option<String>,
}

/// 201 `{ok, backup}` once the backup is complete; 409 when the name is taken or another
/// backup runs; 422 a name that is not one.
async fn create(
    _: Admin,
    State(state): State<AppState>,
    OptionalJson(body): OptionalJson<NewBackup>,
) -> ApiResult<Response> {
    let name: BackupName = match body.and_then(|b| b.name) {
        Some(name) => name.parse()?,
        None => default_name(&*state.clock).parse()?,
    };
    let mut run = backups(&state)?.begin(&name).await?;
    // On a task of its own: a client that goes away does not leave half a backup.
    let instances = std::sync::Arc::clone(&state.instances);
    let info = tokio::spawn(async move {
        {
            // No instance is created or destroyed while the stores' points are fixed, so
            // the registry and the stores agree in the backup.
            let _held = instances.hold_changes().await;
            run.capture().await?;
        }
        run.finish().await
    })
    .await
    .map_err(|e| Error::internal(format!("the backup task failed: {e}")))??;
    Ok(reply::json(
        StatusCode::CREATED,
        &json!({"ok": true, "backup": info}),
    ))
}

/// `backup-<UTC time>`, e.g. `backup-2026-11-26T19.40.56.123Z`.
fn default_name(clock: &dyn Clock) -> String {
    format!(
        "backup-{}",
        format_rfc3339_ms(clock.now_ms()).replace(':', ".")
    )
}

/// `{ok, backups}` ordered by name.
async fn list(_: Admin, State(state): State<AppState>) -> ApiResult<Response> {
    let list = backups(&state)?.list().await?;
    Ok(reply::json(
        StatusCode::OK,
        &json!({"ok": true, "backups": list}),
    ))
}

/// `{ok}`; 404 no such backup; 409 while it is written.
async fn remove(
    _: Admin,
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> ApiResult<Response> {
    let name: BackupName = name
        .parse()
        .map_err(|_| Error::not_found(format!("there is no backup named \"{name}\"")))?;
    backups(&state)?.delete(&name).await?;
    Ok(reply::ok(StatusCode::OK))
}
