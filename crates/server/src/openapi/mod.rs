//! The OpenAPI 3.1 document of the whole HTTP API, built here in code from shared pieces,
//! and the routes that serve it: `GET /_openapi.json` and a browsable page at
//! `GET /_console/api`.
//!
//! Why one place and not annotations next to the handlers: the handlers of one route serve
//! two address forms (see [`crate::scope`]), and the application form is derived from the
//! domain form mechanically ([`Form::Service`]); keeping the document in one module lets the
//! router's modules change without touching it, and a test (`crates/server/tests/api/openapi.rs`)
//! proves both agree: every route the router serves is documented, every documented path is
//! served, and `docs/openapi.json` is what the server serves.
//!
//! Adding a route: add an [`Op`] to the area's function in [`paths`] (one function per
//! area); service routes are written once in the domain form and appear in both forms.

mod components;
mod page;
mod paths;

use std::sync::OnceLock;

use axum::{
    Router,
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
    routing::get,
};
use serde_json::{Map, Value, json};

use crate::state::AppState;

/// Which address forms an operation has, and so which credentials it takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Form {
    /// A service route written in the domain form (`/<type>/<instance>…`); it is also served
    /// in the application form (`/<app>/<type>/<instance>…`) with an application token.
    Service,
    /// The server's own routes: no credentials.
    Public,
    /// The admin API: the admin token.
    Admin,
    /// An admin call an account token may make too, for its own account's applications.
    AdminOrAccount,
    /// Metrics: none, or with `--metrics-token` that token or the admin token.
    Metrics,
    /// A pre-signed URL: the signature in the query string is the credential.
    Presigned,
}

/// One operation: a method on a path, as the router spells it (domain form for services).
#[derive(Debug, Clone)]
pub(crate) struct Op {
    pub method: &'static str,
    pub path: &'static str,
    pub form: Form,
    pub id: &'static str,
    pub tag: &'static str,
    pub summary: &'static str,
    pub description: &'static str,
    pub params: Vec<Value>,
    pub body: Option<Value>,
    pub responses: Vec<(&'static str, Value)>,
    pub links: Vec<(&'static str, &'static str, Value)>,
}

impl Op {
    /// An operation with no parameters, body or answers yet.
    pub fn new(
        method: &'static str,
        path: &'static str,
        form: Form,
        id: &'static str,
        tag: &'static str,
        summary: &'static str,
    ) -> Self {
        Self {
            method,
            path,
            form,
            id,
            tag,
            summary,
            description: "",
            params: Vec::new(),
            body: None,
            responses: Vec::new(),
            links: Vec::new(),
        }
    }

    /// A longer explanation, shown under the summary.
    pub fn describe(mut self, text: &'static str) -> Self {
        self.description = text;
        self
    }

    /// Add a parameter object (path parameters are added from the path itself).
    pub fn param(mut self, p: Value) -> Self {
        self.params.push(p);
        self
    }

    /// The request body object.
    pub fn body(mut self, b: Value) -> Self {
        self.body = Some(b);
        self
    }

    /// An answer: `status` (`"200"`, `"4XX"` …) with a response object.
    pub fn answer(mut self, status: &'static str, r: Value) -> Self {
        self.responses.push((status, r));
        self
    }

    /// An OpenAPI link from the answer `status` to operation `target` (its domain-form id;
    /// the application form links to its own twin), with `parameters`.
    pub fn link(mut self, status: &'static str, target: &'static str, parameters: Value) -> Self {
        self.links.push((status, target, parameters));
        self
    }
}

/// The document, built once.
pub fn document() -> &'static Value {
    static DOC: OnceLock<Value> = OnceLock::new();
    DOC.get_or_init(build)
}

/// The document as served and committed: pretty JSON with a final newline.
pub fn document_text() -> &'static str {
    static TEXT: OnceLock<String> = OnceLock::new();
    TEXT.get_or_init(|| {
        let mut s = serde_json::to_string_pretty(document()).unwrap_or_default();
        s.push('\n');
        s
    })
}

/// Every documented `(method, path)`, paths with `{name}` parameters, both forms.
pub fn operations() -> Vec<(String, String)> {
    let mut out = Vec::new();
    if let Some(paths) = document()["paths"].as_object() {
        for (path, item) in paths {
            if let Some(item) = item.as_object() {
                for method in item.keys().filter(|k| *k != "parameters") {
                    out.push((method.to_uppercase(), path.clone()));
                }
            }
        }
    }
    out
}

fn build() -> Value {
    let mut paths = Map::new();
    for op in paths::all() {
        match op.form {
            Form::Service => {
                insert(&mut paths, &op, false);
                insert(&mut paths, &op, true);
            }
            _ => insert(&mut paths, &op, false),
        }
    }
    let mut doc = json!({
        "openapi": "3.1.0",
        "info": {
            "title": "quintet",
            "version": env!("CARGO_PKG_VERSION"),
            "summary": "Data, cache, search, queue and storage services over HTTP.",
            "description": "Every call quintet answers. Service routes exist in two address \
                forms: the domain form `/<type>/<instance>…` (credentials as `--auth` says: \
                none by default, then loopback only, or a domain JWT) and the application \
                form `/<app>/<type>/<instance>…` (a JWT signed with one of the \
                application's keys). Every answer is JSON with a boolean `ok`, except \
                object downloads and metrics; errors are `{ok:false, status, msg}`. The \
                prose reference is docs/api.md.",
            "license": {"name": "MIT OR Apache-2.0", "identifier": "MIT OR Apache-2.0"},
        },
        "servers": [{"url": "/"}],
        "tags": paths::TAGS.iter().map(|(name, description)| json!({"name": name, "description": description})).collect::<Vec<_>>(),
        "paths": paths,
        "components": components::all(),
    });
    open_objects(&mut doc);
    doc
}

/// Say `additionalProperties: true` on every object schema that says nothing about them.
/// JSON Schema means the same without it, but client generators (openapi-typescript)
/// read a bare `{type: object}` as "no members at all", and documents are open objects.
fn open_objects(v: &mut Value) {
    match v {
        Value::Object(m) => {
            if m.get("type").and_then(Value::as_str) == Some("object")
                && !m.contains_key("additionalProperties")
            {
                m.insert("additionalProperties".into(), Value::Bool(true));
            }
            m.values_mut().for_each(open_objects);
        }
        Value::Array(a) => a.iter_mut().for_each(open_objects),
        _ => {}
    }
}

/// Put `op` into `paths`, in the application form when `app` is set.
fn insert(paths: &mut Map<String, Value>, op: &Op, app: bool) {
    let path = if app {
        format!("/{{app}}{}", op.path)
    } else {
        op.path.to_owned()
    };
    let id = if app {
        format!("app.{}", op.id)
    } else {
        op.id.to_owned()
    };
    let mut params: Vec<Value> = Vec::new();
    if app {
        params.push(components::param_ref("app"));
    }
    for name in path_params(op.path) {
        // `{key}` is a cache key, a search key or an access key by area.
        let component = match name {
            "key" if op.path.starts_with("/cache/") => "cacheKey",
            "key" if op.path.starts_with("/search/") => "searchKey",
            "key" => "accessKey",
            "id" if op.path.starts_with("/_admin/") => "accountTokenId",
            "name" if op.path.starts_with("/_admin/backups") => "backupName",
            "path" if op.path.starts_with("/_console/") => "consolePath",
            other => other,
        };
        params.push(components::param_ref(component));
    }
    params.extend(op.params.iter().cloned());
    let mut responses = Map::new();
    for (status, r) in &op.responses {
        let mut r = r.clone();
        let links: Map<String, Value> = op
            .links
            .iter()
            .filter(|(s, _, _)| s == status)
            .map(|(_, target, parameters)| {
                let target = if app {
                    format!("app.{target}")
                } else {
                    (*target).to_owned()
                };
                let mut parameters = parameters.clone();
                if app && let Some(m) = parameters.as_object_mut() {
                    m.insert("app".into(), json!("$request.path.app"));
                }
                (
                    format!("to-{}", target.replace('.', "-")),
                    json!({"operationId": target, "parameters": parameters}),
                )
            })
            .collect();
        if !links.is_empty()
            && let Some(m) = r.as_object_mut()
        {
            m.insert("links".into(), Value::Object(links));
        }
        responses.insert((*status).to_owned(), r);
    }
    for (status, name) in [("4XX", "ClientError"), ("5XX", "ServerError")] {
        responses
            .entry(status)
            .or_insert_with(|| components::response_ref(name));
    }
    let security = match (op.form, app) {
        (Form::Service, true) => json!([{"appJwt": []}]),
        (Form::Service, false) => json!([{}, {"domainJwt": []}]),
        (Form::Admin, _) => json!([{"adminToken": []}]),
        (Form::AdminOrAccount, _) => json!([{"adminToken": []}, {"accountToken": []}]),
        (Form::Metrics, _) => json!([{}, {"metricsToken": []}, {"adminToken": []}]),
        (Form::Public | Form::Presigned, _) => json!([]),
    };
    let mut operation = json!({
        "operationId": id,
        "tags": [op.tag],
        "summary": op.summary,
        "parameters": params,
        "responses": responses,
        "security": security,
    });
    if !op.description.is_empty() {
        operation["description"] = json!(op.description);
    }
    if let Some(body) = &op.body {
        operation["requestBody"] = body.clone();
    }
    let item = paths
        .entry(path)
        .or_insert_with(|| Value::Object(Map::new()));
    if let Some(item) = item.as_object_mut() {
        item.insert(op.method.to_lowercase(), operation);
    }
}

/// The `{name}` parameters of a router path, in order (`{*rest}` is `rest`).
fn path_params(path: &str) -> Vec<&str> {
    path.split('/')
        .filter_map(|seg| seg.strip_prefix('{')?.strip_suffix('}'))
        .map(|name| name.trim_start_matches('*'))
        .collect()
}

/// The routes of the document itself.
pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/_openapi.json", get(serve_document))
        .route("/_console/api", get(serve_page))
}

/// `GET /_openapi.json`: the document.
async fn serve_document() -> Response {
    let mut res = (StatusCode::OK, document_text()).into_response();
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    res
}

/// `GET /_console/api`: the document as a page, rendered here; it runs no script and
/// loads nothing, which its Content-Security-Policy enforces.
async fn serve_page() -> Response {
    let mut res = (StatusCode::OK, page::html()).into_response();
    let h = res.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    if let Ok(csp) = HeaderValue::from_str(page::csp()) {
        h.insert(header::CONTENT_SECURITY_POLICY, csp);
    }
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_params_of_router_paths() {
        assert_eq!(
            path_params("/storage/{instance}/{*path}"),
            ["instance", "path"]
        );
        assert!(path_params("/_health").is_empty());
    }

    #[test]
    fn operation_ids_are_unique_and_every_op_answers_json_errors() {
        let mut ids = std::collections::HashSet::new();
        for item in document()["paths"].as_object().into_iter().flatten() {
            for (method, op) in item.1.as_object().into_iter().flatten() {
                let id = op["operationId"].as_str().unwrap_or_default().to_owned();
                assert!(ids.insert(id.clone()), "duplicate operationId {id}");
                assert!(
                    op["responses"]["4XX"].is_object(),
                    "{method} {} lacks 4XX",
                    item.0
                );
            }
        }
    }

    #[test]
    fn every_link_names_an_operation_of_its_form() {
        let ops: Vec<&Value> = document()["paths"]
            .as_object()
            .into_iter()
            .flatten()
            .flat_map(|(_, item)| item.as_object().into_iter().flatten().map(|(_, op)| op))
            .collect();
        let ids: std::collections::HashSet<&str> = ops
            .iter()
            .filter_map(|op| op["operationId"].as_str())
            .collect();
        let mut links = 0;
        for op in &ops {
            let from = op["operationId"].as_str().unwrap_or_default();
            for r in op["responses"].as_object().into_iter().flatten() {
                for link in r.1["links"].as_object().into_iter().flatten() {
                    let to = link.1["operationId"].as_str().unwrap_or_default();
                    assert!(ids.contains(to), "{from} links to unknown {to}");
                    assert_eq!(
                        from.starts_with("app."),
                        to.starts_with("app."),
                        "{from} → {to}"
                    );
                    links += 1;
                }
            }
        }
        assert!(links > 20, "{links} links");
    }

    /// Found by schemathesis: an object uploaded as `application/json` is downloaded under
    /// that type whatever its bytes, so a download may promise no body shape.
    #[test]
    fn object_downloads_promise_no_body_shape() {
        for (path, method) in [
            ("/storage/{instance}/{path}", "get"),
            ("/{app}/storage/{instance}/{path}", "get"),
            ("/_presigned/storage/{instance}/{path}", "get"),
            ("/_presigned/{app}/storage/{instance}/{path}", "get"),
        ] {
            for status in ["200", "206"] {
                let content = &document()["paths"][path][method]["responses"][status]["content"];
                if content.is_null() {
                    continue;
                }
                assert_eq!(content, &json!({"*/*": {}}), "{method} {path} {status}");
            }
        }
    }

    /// schemathesis found this: it checks each event of a `text/event-stream` answer
    /// against the schema, and an event is `{event, data, id}`, not a string.
    #[test]
    fn change_feed_events_are_described_as_events() {
        for path in [
            "/data/{instance}/_changes",
            "/{app}/data/{instance}/_changes",
            "/queue/{instance}/_changes",
            "/{app}/queue/{instance}/_changes",
            "/storage/{instance}/_changes",
            "/{app}/storage/{instance}/_changes",
        ] {
            let schema = &document()["paths"][path]["get"]["responses"]["200"]["content"]["text/event-stream"]
                ["schema"];
            assert_eq!(schema["type"], "object", "{path}");
            for field in ["event", "data", "id"] {
                assert_eq!(
                    schema["properties"][field]["type"], "string",
                    "{path} {field}"
                );
            }
        }
    }

    #[test]
    fn every_reference_resolves() {
        fn walk(v: &Value, doc: &Value) {
            match v {
                Value::Object(m) => {
                    if let Some(Value::String(r)) = m.get("$ref") {
                        let pointer = r.trim_start_matches('#');
                        assert!(doc.pointer(pointer).is_some(), "{r} does not resolve");
                    }
                    m.values().for_each(|x| walk(x, doc));
                }
                Value::Array(a) => a.iter().for_each(|x| walk(x, doc)),
                _ => {}
            }
        }
        walk(document(), document());
    }
}
