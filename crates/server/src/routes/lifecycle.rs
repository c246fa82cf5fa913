//! `PUT /<type>/<name>` creates an instance, `DELETE /<type>/<name>` destroys it, for every
//! service type. Service modules add their own methods to the same paths.

use axum::{
    Router,
    extract::{Path, State},
    http::{HeaderName, HeaderValue, StatusCode},
    response::Response,
    routing::put,
};
use quintet_core::{InstanceConfig, InstanceName, ServiceType};
use serde_json::Value;

use crate::{error::ApiResult, extract::OptionalJson, reply, scope::Scope, state::AppState};

pub(super) fn routes() -> Router<AppState> {
    let mut router = Router::new();
    for kind in ServiceType::ALL {
        router = router.route(
            &format!("/{kind}/{{instance}}"),
            put(move |state, scope, path, body| create(kind, state, scope, path, body))
                .delete(move |state, scope, path| destroy(kind, state, scope, path)),
        );
    }
    router
}

/// 201 `{ok:true}`; 409 when it exists; 422 for a bad name or configuration.
async fn create(
    kind: ServiceType,
    State(state): State<AppState>,
    scope: Scope,
    Path(name): Path<String>,
    OptionalJson(body): OptionalJson<Value>,
) -> ApiResult<Response> {
    let name: InstanceName = name.parse()?;
    let config = InstanceConfig::from_request(kind, body.as_ref())?;
    let unsigned = matches!(&config, InstanceConfig::Queue(q) if q.secret.is_none());
    state.instances.create(&scope.app(), &name, config).await?;
    let mut res = reply::ok(StatusCode::CREATED);
    if unsigned {
        // The answer stays `{ok:true}` (clients compare it); the warning rides in a header
        // and the log.
        tracing::warn!(app = %scope.app(), queue = %name, "queue created without a secret: deliveries are unsigned");
        res.headers_mut().insert(
            WARNING_HEADER,
            HeaderValue::from_static(
                "the queue has no secret: deliveries are not signed, so its worker cannot tell \
                 them from forged requests; create it with \"secret\" to sign them",
            ),
        );
    }
    Ok(res)
}

/// The header carrying advice about a successful call.
pub(crate) const WARNING_HEADER: HeaderName = HeaderName::from_static("x-quintet-warning");

/// 200 `{ok:true}`; 404 when missing. Everything stored in the instance is removed.
async fn destroy(
    kind: ServiceType,
    State(state): State<AppState>,
    scope: Scope,
    Path(name): Path<String>,
) -> ApiResult<Response> {
    state.instances.destroy(&scope.app(), kind, &name).await?;
    Ok(reply::ok(StatusCode::OK))
}
