//! Every operation of the API, one function per area. Service routes are written in the
//! domain form only; [`super::build`] adds their application form.

use serde_json::{Value, json};

use super::{
    Form::{Admin, AdminOrAccount, Metrics, Presigned, Public, Service},
    Op,
    components::{
        NAME_PATTERN, error, header, json_answer, json_body, ok, param_ref, query, query_required,
        schema,
    },
};

/// The tags, in the order the reference shows them.
pub(crate) const TAGS: &[(&str, &str)] = &[
    (
        "server",
        "The server's own routes: info, liveness, readiness, metrics, this document.",
    ),
    (
        "instances",
        "Creating and destroying instances of every service type.",
    ),
    (
        "data",
        "JSON documents, queries and indexes (docs/api.md#data).",
    ),
    (
        "cache",
        "Key/value entries with a time-to-live (docs/api.md#cache).",
    ),
    (
        "search",
        "Full-text, typo-tolerant search (docs/api.md#search).",
    ),
    (
        "queue",
        "Jobs delivered to a worker URL (docs/api.md#queue).",
    ),
    (
        "storage",
        "Objects by path, listings, pre-signed URLs (docs/api.md#storage).",
    ),
    (
        "admin",
        "Accounts, applications, access keys (docs/api.md#the-admin-api).",
    ),
];

/// Every operation.
pub(crate) fn all() -> Vec<Op> {
    [
        server(),
        instances(),
        data(),
        cache(),
        search(),
        queue(),
        storage(),
        presigned(),
        admin(),
    ]
    .into_iter()
    .flatten()
    .collect()
}

fn not_found(what: &'static str) -> Value {
    error(what)
}

fn instance_missing() -> Value {
    error("The instance does not exist.")
}

/// `/`, `/_health`, `/_ready`, `/_metrics`, and the document's own routes.
fn server() -> Vec<Op> {
    vec![
        Op::new("GET", "/", Public, "info", "server", "What this server is")
            .answer("200", json_answer("The server's name, version and services.", schema("Info"))),
        Op::new("GET", "/_health", Public, "health", "server", "Liveness")
            .answer("200", ok("The process answers.")),
        Op::new("GET", "/_ready", Public, "ready", "server", "Readiness")
            .answer("200", json_answer("Every engine answers; the data directory is writable and not full.", schema("Ready")))
            .answer("503", json_answer("Not ready: `msg` and `checks` say why; with Retry-After.", schema("Ready"))),
        Op::new("GET", "/_metrics", Metrics, "metrics", "server", "Prometheus metrics")
            .describe("No credential, unless the server runs with `--metrics-token`: then that token or the admin token.")
            .answer("200", json!({
                "description": "OpenMetrics text: requests by status class, latency histogram, connections, engines.",
                "content": {"application/openmetrics-text; version=1.0.0; charset=utf-8": {"schema": {"type": "string"}}},
            }))
            .answer("401", error("With `--metrics-token`: no token, or one that is neither it nor the admin token.")),
        Op::new("GET", "/_openapi.json", Public, "openapi", "server", "This document")
            .answer("200", json_answer("The OpenAPI 3.1 document of the API.", json!({"type": "object"}))),
        Op::new("GET", "/_console", Public, "consoleRedirect", "server", "The console (redirect)")
            .answer("308", json!({
                "description": "Permanent redirect to `/_console/`.",
                "headers": {"Location": {"schema": {"type": "string"}}},
            })),
        Op::new("GET", "/_console/", Public, "console", "server", "The console")
            .describe("The web console's page (docs/console.md); it signs in with the admin token or an account token.")
            .answer("200", json!({
                "description": "The console's HTML page.",
                "content": {"text/html; charset=utf-8": {"schema": {"type": "string"}}},
            })),
        Op::new("GET", "/_console/{path}", Public, "consoleFile", "server", "A file of the console")
            .answer("200", json!({
                "description": "The file: HTML, JavaScript, CSS or SVG.",
                "content": {
                    "text/html; charset=utf-8": {"schema": {"type": "string"}},
                    "text/javascript; charset=utf-8": {"schema": {"type": "string"}},
                    "text/css; charset=utf-8": {"schema": {"type": "string"}},
                    "image/svg+xml": {"schema": {"type": "string"}},
                },
            }))
            .answer("404", error("The console has no such file.")),
        Op::new("GET", "/_console/api", Public, "reference", "server", "This document as a page")
            .answer("200", json!({
                "description": "The reference as HTML; it runs no script and loads nothing from elsewhere.",
                "content": {"text/html": {"schema": {"type": "string"}}},
            })),
    ]
}

/// `PUT` and `DELETE /<type>/<instance>` for each service type.
fn instances() -> Vec<Op> {
    let plain = |path, create, destroy, what| {
        vec![
            create_op(path, create, what, None),
            destroy_op(path, destroy, what),
        ]
    };
    [
        plain("/data/{instance}", "data.create", "data.destroy", "data"),
        plain(
            "/cache/{instance}",
            "cache.create",
            "cache.destroy",
            "cache",
        ),
        vec![
            create_op(
                "/search/{instance}",
                "search.create",
                "search",
                Some(json_body(
                    "The fields to search and to return.",
                    schema("SearchConfig"),
                )),
            ),
            destroy_op("/search/{instance}", "search.destroy", "search"),
        ],
        vec![
            create_op(
                "/queue/{instance}",
                "queue.create",
                "queue",
                Some(json_body(
                    "The worker URL and delivery settings.",
                    schema("QueueConfig"),
                )),
            ),
            destroy_op("/queue/{instance}", "queue.destroy", "queue"),
        ],
        plain(
            "/storage/{instance}",
            "storage.create",
            "storage.destroy",
            "storage",
        ),
    ]
    .into_iter()
    .flatten()
    .collect()
}

fn create_op(path: &'static str, id: &'static str, what: &'static str, body: Option<Value>) -> Op {
    let mut op = Op::new("PUT", path, Service, id, "instances", summary_create(what))
        .answer("201", {
            let mut r = ok("Created. A queue without a secret carries `X-Quintet-Warning`.");
            r["headers"] = json!({"X-Quintet-Warning": {
                "description": "Advice about a successful call, such as an unsigned queue.",
                "schema": {"type": "string"},
            }});
            r
        })
        .answer("409", error("The instance exists."))
        .answer("422", error("A bad name or configuration."));
    match body {
        Some(b) => op = op.body(b),
        None => {
            op = op.describe("Takes no configuration; an empty body (or none) is expected.");
        }
    }
    op
}

fn destroy_op(path: &'static str, id: &'static str, what: &'static str) -> Op {
    Op::new(
        "DELETE",
        path,
        Service,
        id,
        "instances",
        summary_destroy(what),
    )
    .answer("200", ok("Destroyed; everything stored in it is removed."))
    .answer("404", instance_missing())
}

fn summary_create(what: &str) -> &'static str {
    match what {
        "data" => "Create a data instance",
        "cache" => "Create a cache instance",
        "search" => "Create a search instance",
        "queue" => "Create a queue",
        _ => "Create a storage instance",
    }
}

fn summary_destroy(what: &str) -> &'static str {
    match what {
        "data" => "Destroy a data instance",
        "cache" => "Destroy a cache instance",
        "search" => "Destroy a search instance",
        "queue" => "Destroy a queue",
        _ => "Destroy a storage instance",
    }
}

fn data() -> Vec<Op> {
    let p = "/data/{instance}";
    let doc = "/data/{instance}/{id}";
    let id_link = json!({"instance": "$request.path.instance", "id": "$response.body#/id"});
    vec![
        Op::new("POST", p, Service, "data.add", "data", "Add a document")
            .body(json_body(
                "The document; `_id` optional.",
                schema("Document"),
            ))
            .answer("201", json_answer("Stored and durable.", schema("Created")))
            .answer("400", error("An empty body or `{}`."))
            .answer("404", instance_missing())
            .answer("409", error("The `_id` exists."))
            .answer("413", error("Over 8 MiB."))
            .answer("422", error("Not an object, or a bad `_id`."))
            .link("201", "data.get", id_link.clone())
            .link("201", "data.replace", id_link.clone())
            .link("201", "data.remove", id_link),
        Op::new(
            "GET",
            p,
            Service,
            "data.list",
            "data",
            "List documents by id",
        )
        .param(query(
            "startkey",
            "First id (inclusive); also `start_key`.",
            json!({"type": "string"}),
        ))
        .param(query(
            "endkey",
            "Last id (inclusive); also `end_key`.",
            json!({"type": "string"}),
        ))
        .param(query(
            "limit",
            "At most this many.",
            json!({"type": "integer", "minimum": 0}),
        ))
        .param(query(
            "keys",
            "Comma-separated ids, answered in this order.",
            json!({"type": "string"}),
        ))
        .param(query(
            "descending",
            "Walk from `startkey` down.",
            json!({"type": "string", "enum": ["true", "false"]}),
        ))
        .answer(
            "200",
            json_answer("The documents, streamed.", schema("Docs")),
        )
        .answer("404", instance_missing())
        .answer(
            "422",
            error("A bad parameter, or a range that can match nothing."),
        ),
        Op::new("GET", doc, Service, "data.get", "data", "Get a document")
            .param(param_ref("legacyGet"))
            .answer(
                "200",
                json_answer(
                    "`{ok, doc}`; with `X-SVC-LEGACY-GET: true` the bare document.",
                    json!({"anyOf": [schema("DocAnswer"), {"type": "object"}]}),
                ),
            )
            .answer("404", not_found("No such instance or document.")),
        Op::new(
            "PUT",
            doc,
            Service,
            "data.replace",
            "data",
            "Replace a document",
        )
        .body(json_body(
            "The whole document; the path's id wins over a body `_id`.",
            schema("Document"),
        ))
        .answer("200", json_answer("Replaced.", schema("Created")))
        .answer("404", not_found("No such instance or document."))
        .answer("413", error("Over 8 MiB."))
        .answer("422", error("Not an object, or a bad id.")),
        Op::new(
            "DELETE",
            doc,
            Service,
            "data.remove",
            "data",
            "Remove a document",
        )
        .answer("200", ok("Removed."))
        .answer("404", not_found("No such instance or document.")),
        Op::new(
            "POST",
            "/data/{instance}/_bulk",
            Service,
            "data.bulk",
            "data",
            "Write many documents",
        )
        .body(json_body(
            "Documents with `_id`; `_deleted: true` removes. At most 10,000.",
            json!({"type": "array", "items": schema("Document")}),
        ))
        .answer(
            "200",
            json_answer("One result per entry, in order.", schema("BulkResults")),
        )
        .answer("404", instance_missing())
        .answer("413", error("Over 10,000 entries or the body limit."))
        .answer("422", error("Not an array.")),
        Op::new(
            "POST",
            "/data/{instance}/_query",
            Service,
            "data.query",
            "data",
            "Query with a Mango selector",
        )
        .body(json_body("The query.", schema("MangoQuery")))
        .answer(
            "200",
            json_answer("The matching documents.", schema("QueryAnswer")),
        )
        .answer("404", instance_missing())
        .answer(
            "422",
            error("An unknown operator or a bad argument, named."),
        ),
        Op::new(
            "POST",
            "/data/{instance}/_index",
            Service,
            "data.index",
            "data",
            "Create an index",
        )
        .body(json_body("The index definition.", schema("IndexDef")))
        .answer("200", ok("Created, or the same definition exists."))
        .answer("404", instance_missing())
        .answer("409", error("The name holds another definition."))
        .answer("422", error("A bad definition.")),
        Op::new(
            "GET",
            "/data/{instance}/_index",
            Service,
            "data.indexes",
            "data",
            "List indexes",
        )
        .answer("200", json_answer("The indexes.", schema("Indexes")))
        .answer("404", instance_missing()),
        changes("data"),
    ]
}

/// `GET /<kind>/{instance}/_changes` (`data`: the changes of documents; `queue`: job
/// events; `storage`: object events): one operation whose answer's media type follows
/// `feed` (docs/feed.md).
fn changes(kind: &'static str) -> Op {
    let text = json!({"schema": {"type": "string"}});
    let (path, id, summary, page, describe) = match kind {
        "data" => (
            "/data/{instance}/_changes",
            "data.changes",
            "Follow the changes",
            "Changes",
            "The instance's change feed (docs/feed.md). `normal` and `longpoll` answer JSON; \
             `continuous` streams one JSON change per line (`application/x-ndjson`; heartbeats \
             are empty lines; the last line is `{ok, last_seq}` or `{ok:false, status, msg, \
             last_seq}`); `eventsource` streams Server-Sent Events (`text/event-stream`), each \
             change a message whose `id` is its sequence, then an `end` event.",
        ),
        "storage" => (
            "/storage/{instance}/_changes",
            "storage.changes",
            "Follow the object events",
            "ObjectEvents",
            "The storage instance's object events (docs/feed.md): `written` (an upload, with the \
             object's `size`, `etag` and `content_type`) and `removed`, in the order they were \
             recorded. The feeds and their formats are the data change feed's: `normal` and \
             `longpoll` answer JSON, `continuous` NDJSON, `eventsource` Server-Sent Events, each \
             event a message whose `id` is its sequence, then an `end` event. `GET` of an object \
             stored at the top-level path `_changes` is this feed.",
        ),
        _ => (
            "/queue/{instance}/_changes",
            "queue.changes",
            "Follow the job events",
            "JobEvents",
            "The queue's job events (docs/feed.md): enqueued (`ready`), `delivered`, `error`, \
             `cancelled`, `retried`, in commit order. The feeds and their formats are the data \
             change feed's: `normal` and `longpoll` answer JSON, `continuous` NDJSON, \
             `eventsource` Server-Sent Events, each event a message whose `id` is its \
             sequence, then an `end` event.",
        ),
    };
    let op = Op::new("GET", path, Service, id, kind, summary)
    .describe(describe)
    .param(query(
        "since",
        "`0` (default), `now`, or a `seq`/`last_seq` this feed answered.",
        json!({"type": "string"}),
    ))
    .param(query(
        "feed",
        "How the changes are sent.",
        json!({"type": "string", "enum": ["normal", "longpoll", "continuous", "eventsource"]}),
    ))
    .param(query(
        "limit",
        "At most this many changes (`normal`, `longpoll`: at most 10,000); a stream ends after them.",
        json!({"type": "integer", "minimum": 1}),
    ))
    .param(query(
        "heartbeat",
        "Milliseconds, `true` (30,000) or `false`: how often an idle stream sends a heartbeat.",
        json!({"type": "string"}),
    ))
    .param(query(
        "timeout",
        "Milliseconds: end the answer when nothing came within this time (`longpoll`: 60,000).",
        json!({"type": "integer", "minimum": 0}),
    ))
    .param(header(
        "Last-Event-ID",
        "An EventSource's last sequence; wins over `since`.",
        json!({"type": "string"}),
    ))
    .answer(
        "200",
        json!({
            "description": "`normal`, `longpoll`: the changes as JSON. `continuous`: NDJSON. `eventsource`: Server-Sent Events.",
            "content": {
                "application/json": {"schema": schema(page)},
                "application/x-ndjson": text.clone(),
                // Described per event (as OpenAPI 3.2's `itemSchema` does, and as
                // schemathesis checks a stream): a message carries a change as JSON text
                // in `data` and its sequence in `id`; the last event is `end`.
                "text/event-stream": {"schema": {
                    "type": "object",
                    "properties": {
                        "event": {"type": "string"},
                        "data": {"type": "string"},
                        "id": {"type": "string"},
                        "retry": {"type": "integer"},
                    },
                }},
            },
        }),
    )
    .answer("404", instance_missing())
    .answer("410", error("`since` is no longer kept: start again from `0` or `now`."))
    .answer("422", error("A bad parameter."))
    .answer("429", error("Over the bounds of open streams (Retry-After)."));
    if kind != "data" {
        return op;
    }
    op.param(query(
        "include_docs",
        "Add each document as it is now (`doc`).",
        json!({"type": "string", "enum": ["true", "false"]}),
    ))
    .param(query(
        "selector",
        "A Mango selector, URL-encoded JSON: only changes whose document matches (deletions always pass).",
        json!({"type": "string"}),
    ))
}

fn cache() -> Vec<Op> {
    let key = "/cache/{instance}/{key}";
    let pattern = || {
        query(
            "pattern",
            "`*` matches any run of characters; none lists everything.",
            json!({"type": "string", "maxLength": 2048}),
        )
    };
    vec![
        Op::new("POST", "/cache/{instance}", Service, "cache.add", "cache", "Add an entry")
            .body(json_body("The entry.", schema("CacheEntry")))
            .answer("201", ok("Stored and durable."))
            .answer("404", instance_missing())
            .answer("409", error("The key has a live entry."))
            .link("201", "cache.get", json!({"instance": "$request.path.instance", "key": "$request.body#/key"}))
            .link("201", "cache.set", json!({"instance": "$request.path.instance", "key": "$request.body#/key"}))
            .link("201", "cache.remove", json!({"instance": "$request.path.instance", "key": "$request.body#/key"}))
            .answer("413", error("The value is over 10 MiB or over `--cache-max-bytes`."))
            .answer("422", error("A bad key, value or ttl.")),
        Op::new("GET", "/cache/{instance}/_query", Service, "cache.query", "cache", "List entries by pattern")
            .param(pattern())
            .answer("200", json_answer("The entries, sorted by key.", schema("CacheEntries")))
            .answer("404", instance_missing())
            .answer("422", error("A bad pattern.")),
        Op::new("POST", "/cache/{instance}/_query", Service, "cache.queryPost", "cache", "List entries by pattern (POST)")
            .param(pattern())
            .answer("200", json_answer("The entries, sorted by key.", schema("CacheEntries")))
            .answer("404", instance_missing())
            .answer("422", error("A bad pattern.")),
        Op::new("GET", key, Service, "cache.get", "cache", "Get an entry")
            .param(param_ref("legacyGet"))
            .answer("201", json_answer("`{ok, doc}` (201, as the interface lists it); with `X-SVC-LEGACY-GET: true` the bare value.",
                json!({"anyOf": [schema("DocAnswer"), {"type": "object"}]})))
            .answer("404", not_found("No such instance, or the key is missing or expired."))
            .answer("422", error("A bad key.")),
        Op::new("PUT", key, Service, "cache.set", "cache", "Set an entry")
            .param(query("ttl", "`<n><unit>`; none keeps a live entry's expiry.", json!({"type": "string"})))
            .body(json_body("The value, a JSON object.", json!({"type": "object"})))
            .answer("200", ok("Domain form: created or replaced."))
            .answer("201", ok("Application form: replaced."))
            .answer("404", not_found("No such instance; in the application form also a key without a live entry."))
            .answer("413", error("Over 10 MiB or over `--cache-max-bytes`."))
            .answer("422", error("A bad key, value or ttl.")),
        Op::new("DELETE", key, Service, "cache.remove", "cache", "Remove an entry")
            .answer("200", ok("Removed."))
            .answer("404", not_found("No such instance, or the key is missing or expired."))
            .answer("422", error("A bad key.")),
        Op::new("GET", "/cache/{instance}/{key}/_ttl", Service, "cache.ttl", "cache", "When an entry expires")
            .describe("Not a use of the entry: the size bound's recency is unchanged.")
            .answer("200", json_answer("When it expires and the whole seconds left; both null when it never does.", schema("CacheTtl")))
            .answer("404", not_found("No such instance, or the key is missing or expired."))
            .answer("422", error("A bad key.")),
    ]
}

fn search() -> Vec<Op> {
    let key = "/search/{instance}/{key}";
    vec![
        Op::new(
            "POST",
            "/search/{instance}",
            Service,
            "search.add",
            "search",
            "Index a document",
        )
        .body(json_body(
            "The key and the document.",
            schema("SearchEntry"),
        ))
        .answer("201", ok("Indexed and committed."))
        .answer("404", instance_missing())
        .answer("409", error("The key exists."))
        .link(
            "201",
            "search.get",
            json!({"instance": "$request.path.instance", "key": "$request.body#/key"}),
        )
        .link(
            "201",
            "search.replace",
            json!({"instance": "$request.path.instance", "key": "$request.body#/key"}),
        )
        .link(
            "201",
            "search.remove",
            json!({"instance": "$request.path.instance", "key": "$request.body#/key"}),
        )
        .answer("413", error("A document over 1 MiB."))
        .answer(
            "422",
            error("A bad key, or a document without a configured field."),
        ),
        Op::new(
            "GET",
            key,
            Service,
            "search.get",
            "search",
            "Get a document",
        )
        .answer(
            "201",
            json_answer("The document exactly as indexed.", schema("SearchDoc")),
        )
        .answer("404", not_found("No such instance or key.")),
        Op::new(
            "PUT",
            key,
            Service,
            "search.replace",
            "search",
            "Replace a document",
        )
        .body(json_body("The document.", json!({"type": "object"})))
        .answer("200", ok("Replaced."))
        .answer("404", not_found("No such instance or key."))
        .answer("413", error("A document over 1 MiB."))
        .answer(
            "422",
            error("A bad key, or a document without a configured field."),
        ),
        Op::new(
            "DELETE",
            key,
            Service,
            "search.remove",
            "search",
            "Remove a document",
        )
        .answer("200", ok("Removed."))
        .answer("404", not_found("No such instance or key.")),
        Op::new(
            "POST",
            "/search/{instance}/_bulk",
            Service,
            "search.bulk",
            "search",
            "Index many documents",
        )
        .body(json_body(
            "Documents keyed by `_id`, else `id`. At most 10,000.",
            json!({"type": "array", "items": {"type": "object"}}),
        ))
        .answer(
            "200",
            json_answer("One result per document.", schema("BulkResults")),
        )
        .answer("404", instance_missing())
        .answer("413", error("Over 10,000 documents or the body limit."))
        .answer("422", error("Not an array.")),
        Op::new(
            "POST",
            "/search/{instance}/_query",
            Service,
            "search.query",
            "search",
            "Search",
        )
        .body(json_body("The query.", schema("SearchQuery")))
        .answer(
            "200",
            json_answer("The matches, best first.", schema("Matches")),
        )
        .answer("404", instance_missing())
        .answer(
            "422",
            error(
                "An empty query or one without words, unconfigured fields, a bad filter or limit.",
            ),
        ),
    ]
}

fn queue() -> Vec<Op> {
    let limit = || {
        query(
            "limit",
            "At most this many (1–10000, default 1000).",
            json!({"type": "integer", "minimum": 1, "maximum": 10000}),
        )
    };
    let after = || {
        query(
            "after",
            "Start after this job id.",
            json!({"type": "string"}),
        )
    };
    let job = |method, path, id, summary| {
        Op::new(method, path, Service, id, "queue", summary)
            .answer("404", not_found("No such queue or job."))
    };
    vec![
        Op::new(
            "POST",
            "/queue/{instance}",
            Service,
            "queue.enqueue",
            "queue",
            "Enqueue a job",
        )
        .param(header(
            "Idempotency-Key",
            "A second enqueue with the same key, while the first job exists, is 409.",
            json!({"type": "string"}),
        ))
        .body(json_body("The job.", schema("Job")))
        .answer(
            "201",
            json_answer("Durable; delivered at least once.", schema("Created")),
        )
        .answer("404", instance_missing())
        .answer("409", error("A job with the same Idempotency-Key exists."))
        .answer("413", error("Over 1 MiB."))
        .answer("422", error("Not an object, or a bad Idempotency-Key."))
        .link(
            "201",
            "queue.retry",
            json!({"instance": "$request.path.instance", "id": "$response.body#/id"}),
        )
        .link(
            "201",
            "queue.cancel",
            json!({"instance": "$request.path.instance", "id": "$response.body#/id"}),
        ),
        Op::new(
            "GET",
            "/queue/{instance}",
            Service,
            "queue.list",
            "queue",
            "The payloads of jobs in one state",
        )
        .param(query_required(
            "status",
            "READY or ERROR.",
            json!({"type": "string", "enum": ["READY", "ERROR"]}),
        ))
        .param(limit())
        .param(after())
        .answer(
            "200",
            json_answer("The payloads, oldest first.", schema("Payloads")),
        )
        .answer("404", instance_missing())
        .answer("422", error("A missing or bad status, or a bad limit.")),
        Op::new(
            "GET",
            "/queue/{instance}/_jobs",
            Service,
            "queue.jobs",
            "queue",
            "Job records",
        )
        .param(query(
            "status",
            "READY or ERROR; both when absent.",
            json!({"type": "string", "enum": ["READY", "ERROR"]}),
        ))
        .param(limit())
        .param(after())
        .answer(
            "200",
            json_answer(
                "The jobs with their state, oldest first.",
                schema("JobRecords"),
            ),
        )
        .answer("404", instance_missing())
        .answer("422", error("A bad status or limit.")),
        job(
            "POST",
            "/queue/{instance}/{id}/_retry",
            "queue.retry",
            "Retry an ERROR job",
        )
        .answer("200", ok("READY again, attempts reset, delivered at once."))
        .answer("409", error("The job is READY already.")),
        job(
            "POST",
            "/queue/{instance}/{id}/_cancel",
            "queue.cancel",
            "Cancel a job",
        )
        .answer("200", ok("Removed.")),
        changes("queue"),
    ]
}

/// The headers of an object download.
fn object_headers() -> Value {
    let text = json!({"schema": {"type": "string"}});
    json!({
        "ETag": text, "Last-Modified": text, "Accept-Ranges": text, "Content-Length": text,
    })
}

/// An answer with an object's bytes. No schema: the bytes are whatever was uploaded, under
/// the Content-Type it was uploaded with (an object stored as `application/json` need not
/// be JSON), so no media type can promise a shape.
fn object_bytes(description: &str) -> Value {
    json!({
        "description": description,
        "headers": object_headers(),
        "content": {"*/*": {}},
    })
}

fn range_params() -> Vec<Value> {
    vec![
        header(
            "Range",
            "One range `bytes=a-b`, `a-` or `-n`; others are ignored.",
            json!({"type": "string"}),
        ),
        header(
            "If-None-Match",
            "ETags; a match answers 304.",
            json!({"type": "string"}),
        ),
        header(
            "If-Modified-Since",
            "HTTP date; not older than the object answers 304.",
            json!({"type": "string"}),
        ),
        header(
            "If-Range",
            "ETag or date; the range is served only when it is current.",
            json!({"type": "string"}),
        ),
    ]
}

fn download_answers(op: Op) -> Op {
    op.answer(
        "200",
        object_bytes("The bytes, with the stored Content-Type."),
    )
    .answer("206", object_bytes("The range, with Content-Range."))
    .answer("304", json!({"description": "Not modified."}))
    .answer(
        "416",
        error("The range starts past the end; Content-Range: bytes */size."),
    )
}

fn upload_body() -> Value {
    json!({
        "description": "The raw bytes (any Content-Type), or a `multipart/form-data` with a `file` part.",
        "required": false,
        "content": {
            "application/octet-stream": {"schema": {"type": "string", "format": "binary"}},
            "multipart/form-data": {"schema": schema("Upload")},
            "*/*": {"schema": {"type": "string", "format": "binary"}},
        },
    })
}

fn storage() -> Vec<Op> {
    let obj = "/storage/{instance}/{path}";
    let signed = || {
        query(
            "useSignedUrl",
            "`true` answers a pre-signed URL instead.",
            json!({"type": "string", "enum": ["true", "false"]}),
        )
    };
    let expires = || {
        query(
            "expires",
            "Seconds the pre-signed URL is valid (1–604800, default 3600).",
            json!({"type": "integer", "minimum": 1, "maximum": 604800}),
        )
    };
    let mut get = Op::new(
        "GET",
        obj,
        Service,
        "storage.get",
        "storage",
        "Download an object, or a download URL",
    )
    .param(signed())
    .param(expires());
    for p in range_params() {
        get = get.param(p);
    }
    let get = download_answers(get)
        .answer("200", json!({
            "description": "The bytes with the stored Content-Type; with `useSignedUrl=true` the URL as JSON \
                `{ok:true, url}` (SignedUrl).",
            "headers": object_headers(),
            "content": {"*/*": {}},
        }))
        .answer("404", not_found("No such instance or object."))
        .answer("422", error("A path that breaks the path rules, or a bad parameter."));
    let mut head = Op::new(
        "HEAD",
        obj,
        Service,
        "storage.head",
        "storage",
        "The headers of a download",
    );
    for p in range_params() {
        head = head.param(p);
    }
    let head = head
        .answer(
            "200",
            json!({"description": "The headers of the GET.", "headers": object_headers()}),
        )
        .answer("206", json!({"description": "The headers of the range."}))
        .answer("304", json!({"description": "Not modified."}))
        .answer("404", json!({"description": "No such instance or object."}))
        .answer(
            "416",
            json!({"description": "The range starts past the end."}),
        )
        .answer(
            "422",
            json!({"description": "A path that breaks the path rules."}),
        );
    vec![
        Op::new("GET", "/storage/{instance}", Service, "storage.list", "storage", "List objects")
            .param(query("prefix", "Only paths starting with it.", json!({"type": "string"})))
            .param(query("after", "Only paths sorting after it.", json!({"type": "string"})))
            .param(query("limit", "1–1000, default 1000.", json!({"type": "integer", "minimum": 1, "maximum": 1000})))
            .answer("200", json_answer("The objects in bytewise path order.", schema("Objects")))
            .answer("404", instance_missing())
            .answer("422", error("A bad parameter.")),
        Op::new("POST", "/storage/{instance}", Service, "storage.uploadForm", "storage", "Upload a form (hyper's old form)")
            .describe("`multipart/form-data` with `path` (a folder) before `file`; the object is `<path>/<file name>`.")
            .body(json!({
                "required": true,
                "content": {"multipart/form-data": {"schema": schema("Upload")}},
            }))
            .answer("200", ok("Stored and durable; ETag header."))
            .answer("404", instance_missing())
            .answer("422", error("Not a form, no file, a `path` after the file, or a bad path.")),
        get,
        head,
        Op::new("POST", obj, Service, "storage.upload", "storage", "Upload an object, or an upload URL")
            .param(signed())
            .param(expires())
            .body(upload_body())
            .answer("200", json_answer("Stored and durable (ETag header); with `useSignedUrl=true` `{ok, url}`.",
                json!({"anyOf": [schema("Ok"), schema("SignedUrl")]})))
            .answer("404", instance_missing())
            .answer("413", error("Larger than the plan allows."))
            .link("200", "storage.get", json!({"instance": "$request.path.instance", "path": "$request.path.path"}))
            .link("200", "storage.head", json!({"instance": "$request.path.instance", "path": "$request.path.path"}))
            .link("200", "storage.remove", json!({"instance": "$request.path.instance", "path": "$request.path.path"}))
            .answer("422", error("A bad path, or a form with two `file` parts.")),
        Op::new("DELETE", obj, Service, "storage.remove", "storage", "Remove an object")
            .answer("200", ok("Removed."))
            .answer("404", not_found("No such instance or object."))
            .answer("422", error("A path that breaks the path rules.")),
        changes("storage"),
    ]
}

fn presigned() -> Vec<Op> {
    let domain = "/_presigned/storage/{instance}/{path}";
    let app = "/_presigned/{app}/storage/{instance}/{path}";
    vec![
        presigned_op("GET", domain, "presigned.get"),
        presigned_op("HEAD", domain, "presigned.head"),
        presigned_op("PUT", domain, "presigned.put"),
        presigned_op("POST", domain, "presigned.post"),
        presigned_op("GET", app, "app.presigned.get"),
        presigned_op("HEAD", app, "app.presigned.head"),
        presigned_op("PUT", app, "app.presigned.put"),
        presigned_op("POST", app, "app.presigned.post"),
    ]
}

fn presigned_op(method: &'static str, path: &'static str, id: &'static str) -> Op {
    let summary = match method {
        "GET" => "Download through a pre-signed URL",
        "HEAD" => "Headers through a pre-signed URL",
        "PUT" => "Upload through a pre-signed URL",
        _ => "Upload through a pre-signed URL (POST)",
    };
    let op = Op::new(method, path, Presigned, id, "storage", summary)
        .describe("The URL as `useSignedUrl=true` answered it; the signature is the credential.")
        .param(query_required(
            "expires",
            "Unix seconds.",
            json!({"type": "integer"}),
        ))
        .param(query_required(
            "sig",
            "`<kid>.<hex>`.",
            json!({"type": "string"}),
        ));
    let op = match method {
        "GET" => {
            let mut op = op;
            for p in range_params() {
                op = op.param(p);
            }
            download_answers(op)
        }
        "HEAD" => op
            .answer(
                "200",
                json!({"description": "The headers of the GET.", "headers": object_headers()}),
            )
            .answer("206", json!({"description": "The headers of the range."}))
            .answer("304", json!({"description": "Not modified."}))
            .answer(
                "403",
                json!({"description": "Altered, expired, or of a destroyed instance."}),
            )
            .answer("404", json!({"description": "No such object."})),
        _ => op
            .body(json!({
                "required": false,
                "content": {"*/*": {"schema": {"type": "string", "format": "binary"}}},
            }))
            .answer("200", ok("Stored and durable; ETag header.")),
    };
    if method == "HEAD" {
        return op;
    }
    op.answer(
        "403",
        error("Altered, expired, or of a destroyed instance."),
    )
    .answer("404", not_found("No such object."))
}

fn admin() -> Vec<Op> {
    let a = |method, path, id, summary| Op::new(method, path, Admin, id, "admin", summary);
    // The calls an account token may make too, for its own account's applications.
    let b = |method, path, id, summary| Op::new(method, path, AdminOrAccount, id, "admin", summary);
    let app_missing = || error("No such application.");
    // Admin lists page with `?limit=&after=`: without `limit`, the whole list.
    let paged = |op: Op, after: &str| {
        op.param(query(
            "limit",
            "At most this many (1–1000); the answer's `next` is the `after` of the next page. \
             Without it, every entry.",
            json!({"type": "integer", "minimum": 1, "maximum": 1000}),
        ))
        .param(query("after", after, json!({"type": "string"})))
        .answer(
            "422",
            error("A bad `limit`, or an `after` this list did not give."),
        )
    };
    vec![
        a("POST", "/_admin/accounts", "admin.createAccount", "Create an account")
            .body(json_body("The account.", json!({
                "type": "object", "required": ["name"],
                "properties": {"name": {"type": "string", "pattern": NAME_PATTERN}, "plan": {"type": "string", "enum": ["starter", "pro", "business"]}},
            })))
            .answer("201", json_answer("Created.", schema("AccountAnswer")))
            .answer("409", error("The account exists."))
            .link("201", "admin.getAccount", json!({"account": "$response.body#/account/name"}))
            .link("201", "admin.changePlan", json!({"account": "$response.body#/account/name"}))
            .answer("422", error("A bad name or plan.")),
        paged(b("GET", "/_admin/accounts", "admin.listAccounts", "List accounts")
            .answer("200", json_answer("The accounts by name.", schema("Accounts"))),
            "Only accounts whose name sorts after it."),
        b("GET", "/_admin/accounts/{account}", "admin.getAccount", "Get an account")
            .answer("200", json_answer("The account.", schema("AccountAnswer")))
            .answer("404", error("No such account.")),
        a("PATCH", "/_admin/accounts/{account}", "admin.changePlan", "Change an account's plan")
            .body(json_body("The new plan.", json!({
                "type": "object", "required": ["plan"],
                "properties": {"plan": {"type": "string", "enum": ["starter", "pro", "business"]}},
            })))
            .answer("200", json_answer("Changed.", schema("AccountAnswer")))
            .answer("404", error("No such account."))
            .answer("409", error("It owns more applications than the plan allows."))
            .answer("422", error("A bad plan.")),
        b("POST", "/_admin/apps", "admin.createApp", "Create an application")
            .body(json_body("The application.", json!({
                "type": "object", "required": ["name", "account"],
                "properties": {"name": {"type": "string", "pattern": NAME_PATTERN}, "account": {"type": "string", "pattern": NAME_PATTERN}},
            })))
            .answer("201", json_answer("Created.", schema("AppAnswer")))
            .answer("403", error("Over the plan's limit."))
            .answer("404", error("No such account."))
            .answer("409", error("The application exists."))
            .link("201", "admin.getApp", json!({"app": "$response.body#/app/name"}))
            .link("201", "admin.createKey", json!({"app": "$response.body#/app/name"}))
            .link("201", "admin.listKeys", json!({"app": "$response.body#/app/name"}))
            .link("201", "admin.instances", json!({"app": "$response.body#/app/name"}))
            .link("201", "admin.deleteApp", json!({"app": "$response.body#/app/name"}))
            .answer("422", error("A bad name.")),
        paged(b("GET", "/_admin/apps", "admin.listApps", "List applications")
            .param(query("account", "Only this account's.", json!({"type": "string"})))
            .answer("200", json_answer("The applications by name.", schema("Apps"))),
            "Only applications whose name sorts after it."),
        b("GET", "/_admin/apps/{app}", "admin.getApp", "Get an application")
            .answer("200", json_answer("The application.", schema("AppAnswer")))
            .answer("404", app_missing()),
        b("DELETE", "/_admin/apps/{app}", "admin.deleteApp", "Delete an application")
            .answer("200", ok("Its instances, contents and keys are removed."))
            .answer("404", app_missing()),
        b("POST", "/_admin/apps/{app}/keys", "admin.createKey", "Create an access key")
            .answer("201", json_answer("The key, its secret and connection string.", schema("NewKey")))
            .link("201", "admin.revealKey", json!({"app": "$request.path.app", "key": "$response.body#/key"}))
            .link("201", "admin.revokeKey", json!({"app": "$request.path.app", "key": "$response.body#/key"}))
            .answer("404", app_missing()),
        paged(b("GET", "/_admin/apps/{app}/keys", "admin.listKeys", "List access keys")
            .answer("200", json_answer("The keys, oldest first, secrets redacted.", schema("Keys")))
            .answer("404", app_missing()),
            "Only keys listed after this key (the previous page's `next`)."),
        b("GET", "/_admin/apps/{app}/keys/{key}", "admin.revealKey", "Reveal an access key")
            .answer("200", json_answer("The key with its secret in full.", schema("NewKey")))
            .answer("404", error("No such application or key.")),
        b("DELETE", "/_admin/apps/{app}/keys/{key}", "admin.revokeKey", "Revoke an access key")
            .answer("200", ok("Revoked at once; revoking twice is fine."))
            .answer("404", error("No such application or key.")),
        paged(b("GET", "/_admin/apps/{app}/instances", "admin.instances", "List an application's instances")
            .answer("200", json_answer("The instances by type and name, secrets in configurations redacted.", schema("Instances")))
            .answer("404", app_missing()),
            "Only instances sorting after this `<type>/<name>`."),
        b("POST", "/_admin/apps/{app}/token", "admin.mintToken", "Sign an access token of an application")
            .body(json!({
                "description": "`ttl`: seconds, 1–3600 (default 900), never past `--jwt-max-ttl`. Optional.",
                "required": false,
                "content": {"application/json": {"schema": {
                    "type": "object", "additionalProperties": false,
                    "properties": {"ttl": {"type": "integer", "minimum": 1, "maximum": 3600}},
                }}},
            }))
            .answer("201", json_answer("The token, signed with the application's newest key that is not revoked.", schema("MintedToken")))
            .answer("404", app_missing())
            .answer("409", error("The application has no key that is not revoked."))
            .answer("422", error("A bad `ttl`.")),
        b("GET", "/_admin/me", "admin.me", "Who the token is")
            .answer("200", json_answer("`role: admin`, or `role: account` with the account.", schema("Me"))),
        a("GET", "/_admin/node", "admin.node", "The node")
            .answer("200", json_answer("Version, start, uptime, where each store keeps its data, instances by type.", schema("Node"))),
        a("POST", "/_admin/accounts/{account}/tokens", "admin.createAccountToken", "Create an account token")
            .answer("201", json_answer("The token; its text is shown this once.", schema("NewAccountToken")))
            .link("201", "admin.revokeAccountToken", json!({"account": "$request.path.account", "id": "$response.body#/id"}))
            .answer("404", error("No such account."))
            .answer("422", error("A bad account name.")),
        paged(a("GET", "/_admin/accounts/{account}/tokens", "admin.listAccountTokens", "List account tokens")
            .answer("200", json_answer("The tokens, oldest first, never their text.", schema("AccountTokens")))
            .answer("404", error("No such account.")),
            "Only tokens listed after this token id (the previous page's `next`)."),
        a("DELETE", "/_admin/accounts/{account}/tokens/{id}", "admin.revokeAccountToken", "Revoke an account token")
            .answer("200", ok("Revoked at once; revoking twice is fine."))
            .answer("404", error("No such account or token."))
            .answer("422", error("A bad account name.")),
        a("GET", "/_admin/export", "admin.export", "Export an archive")
            .describe("The portable archive (docs/archive.md), streamed. An export that fails midway ends \
                without its end record, so no reader accepts it.")
            .param(query("app", "Only this application (and its account).", json!({"type": "string"})))
            .param(query("secrets", "Carry the access keys' secrets.", json!({"type": "string", "enum": ["true", "false"]})))
            .answer("200", json!({
                "description": "The archive, streamed.",
                "content": {"application/vnd.quintet.archive": {"schema": {"type": "string", "format": "binary"}}},
            }))
            .answer("404", app_missing())
            .answer("422", error("A bad parameter.")),
        a("POST", "/_admin/import", "admin.import", "Import an archive")
            .describe("Streamed, with no body limit. On any error what the import created is removed \
                (docs/archive.md#importing-the-rules).")
            .param(query("app", "Import the (single) application under this name.", json!({"type": "string"})))
            .param(query("merge", "Add to applications and instances that exist.", json!({"type": "string", "enum": ["true", "false"]})))
            .body(json!({
                "description": "An archive as `GET /_admin/export` answers it. Its Content-Type is not \
                    checked: `application/vnd.quintet.archive`, or any other such as \
                    `application/octet-stream`.",
                "required": true,
                "content": {
                    "application/vnd.quintet.archive": {"schema": {"type": "string", "format": "binary"}},
                    "application/octet-stream": {"schema": {"type": "string", "format": "binary"}},
                },
            }))
            .answer("200", json_answer("Every record applied and every instance read back.", schema("ImportReport")))
            .answer("409", error("An application or instance exists (without `merge`)."))
            .answer("422", error("A damaged, truncated or newer archive, or a bad parameter.")),
        a("POST", "/_admin/backups", "admin.createBackup", "Back up the node")
            .body(json!({
                "description": "`name` (optional; default `backup-<UTC time>`).",
                "required": false,
                "content": {"application/json": {"schema": {
                    "type": "object", "additionalProperties": false,
                    "properties": {"name": {"type": "string"}},
                }}},
            }))
            .answer("201", json_answer("Written under `--backup-dir`, complete.", schema("BackupAnswer")))
            .link("201", "admin.deleteBackup", json!({"name": "$response.body#/backup/name"}))
            .answer("409", error("The name exists, another backup runs, or the node keeps its services on shared engines."))
            .answer("422", error("A name that is not 1–100 of `A-Z a-z 0-9 . _ -` starting with a letter or digit.")),
        a("GET", "/_admin/backups", "admin.listBackups", "List backups")
            .answer("200", json_answer("The backups by name.", schema("Backups")))
            .answer("409", error("The node keeps its services on shared engines.")),
        a("DELETE", "/_admin/backups/{name}", "admin.deleteBackup", "Delete a backup")
            .answer("200", ok("Deleted."))
            .answer("404", error("No such backup."))
            .answer("409", error("It is being written, or the node keeps its services on shared engines.")),
    ]
}
