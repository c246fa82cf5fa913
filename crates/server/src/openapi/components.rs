//! The shared pieces of the OpenAPI document: schemas, parameters, responses and security
//! schemes, each written once and referred to by the operations of [`super::paths`].

use serde_json::{Value, json};

/// Document ids (and job ids): no control character, not beginning with `_`.
const ID_PATTERN: &str = "^[^_\\u0000-\\u001f\\u007f-\\u009f][^\\u0000-\\u001f\\u007f-\\u009f]*$";
/// Cache keys.
const CACHE_KEY_PATTERN: &str = "^[a-z][a-z0-9_$+-]*$";
/// Search keys: no control character.
const TEXT_PATTERN: &str = "^[^\\u0000-\\u001f\\u007f-\\u009f]+$";
/// Names of instances, applications and accounts.
pub(crate) const NAME_PATTERN: &str = "^[a-z0-9][a-z0-9_-]{0,63}$";

/// A reference to the schema `name`.
pub(crate) fn schema(name: &str) -> Value {
    json!({"$ref": format!("#/components/schemas/{name}")})
}

/// A reference to the parameter `name`.
pub(crate) fn param_ref(name: &str) -> Value {
    json!({"$ref": format!("#/components/parameters/{name}")})
}

/// A reference to the response `name`.
pub(crate) fn response_ref(name: &str) -> Value {
    json!({"$ref": format!("#/components/responses/{name}")})
}

/// A JSON answer described by `description` whose body follows `schema`.
pub(crate) fn json_answer(description: &str, schema: Value) -> Value {
    json!({
        "description": description,
        "content": {"application/json": {"schema": schema}},
    })
}

/// `{ok:true}` with `description`.
pub(crate) fn ok(description: &str) -> Value {
    json_answer(description, schema("Ok"))
}

/// An error answer that may carry `Retry-After` (429, 503).
fn error_retry(description: &str) -> Value {
    let mut r = error(description);
    r["headers"] = json!({
        "Retry-After": {"description": "Seconds to wait before trying again (429, 503).", "schema": {"type": "string"}},
    });
    r
}

/// An error answer (`{ok:false, status, msg}`) with `description`.
pub(crate) fn error(description: &str) -> Value {
    json_answer(description, schema("Error"))
}

/// A required JSON request body following `schema`.
pub(crate) fn json_body(description: &str, schema: Value) -> Value {
    json!({
        "description": description,
        "required": true,
        "content": {"application/json": {"schema": schema}},
    })
}

/// A query parameter `name` following `schema`.
pub(crate) fn query(name: &str, description: &str, schema: Value) -> Value {
    json!({"name": name, "in": "query", "required": false, "description": description, "schema": schema})
}

/// A required query parameter.
pub(crate) fn query_required(name: &str, description: &str, schema: Value) -> Value {
    json!({"name": name, "in": "query", "required": true, "description": description, "schema": schema})
}

/// An optional request header.
pub(crate) fn header(name: &str, description: &str, schema: Value) -> Value {
    json!({"name": name, "in": "header", "required": false, "description": description, "schema": schema})
}

/// Every component.
pub(crate) fn all() -> Value {
    json!({
        "securitySchemes": {
            "appJwt": {
                "type": "http",
                "scheme": "bearer",
                "bearerFormat": "JWT",
                "description": "The application form: a JWT (HS256) signed with the secret of one of the \
                    application's access keys, `sub` the key id, `exp` at most an hour ahead \
                    (docs/auth.md). `quintet token <connection string>` prints one.",
            },
            "domainJwt": {
                "type": "http",
                "scheme": "bearer",
                "bearerFormat": "JWT",
                "description": "The domain form under `--auth jwt`: a JWT signed with the domain secret. \
                    Under `--auth none` (the default) no credential is needed and only loopback \
                    clients are served.",
            },
            "adminToken": {
                "type": "http",
                "scheme": "bearer",
                "description": "The admin token (shown at the first start; derived from the master key).",
            },
            "accountToken": {
                "type": "http",
                "scheme": "bearer",
                "description": "An account token (`POST /_admin/accounts/{account}/tokens`; docs/auth.md#account-tokens): \
                    the admin calls marked with it, for its own account's applications and its own \
                    account only; another account's application answers 404, every other admin \
                    call 403.",
            },
            "metricsToken": {
                "type": "http",
                "scheme": "bearer",
                "description": "With `--metrics-token`, `/_metrics` takes that token or the admin token; \
                    without it, no credential.",
            },
        },
        "parameters": {
            "app": {
                "name": "app", "in": "path", "required": true,
                "description": "The application (1–64 of a-z 0-9 _ -, starting with a letter or digit).",
                "schema": {"type": "string", "pattern": NAME_PATTERN},
            },
            "instance": {
                "name": "instance", "in": "path", "required": true,
                "description": "The instance (1–64 of a-z 0-9 _ -, starting with a letter or digit).",
                "schema": {"type": "string", "pattern": NAME_PATTERN},
            },
            "id": {
                "name": "id", "in": "path", "required": true,
                "description": "A document id or job id: 1–512 bytes of UTF-8 without control characters, \
                    not beginning with `_`; one percent-encoded path segment.",
                "schema": {"type": "string", "minLength": 1, "maxLength": 512, "pattern": ID_PATTERN},
            },
            "cacheKey": {
                "name": "key", "in": "path", "required": true,
                "description": "A cache key: a-z, then a-z 0-9 _ $ + -; at most 512 bytes; one \
                    percent-encoded path segment.",
                "schema": {"type": "string", "minLength": 1, "maxLength": 512, "pattern": CACHE_KEY_PATTERN},
            },
            "searchKey": {
                "name": "key", "in": "path", "required": true,
                "description": "A search key: 1–512 bytes without control characters, not `_query` or \
                    `_bulk`; one percent-encoded path segment.",
                "schema": {"type": "string", "minLength": 1, "maxLength": 512, "pattern": TEXT_PATTERN},
            },
            "accessKey": {
                "name": "key", "in": "path", "required": true,
                "description": "An access key's id (`qk_…`).",
                "schema": {"type": "string"},
            },
            "path": {
                "name": "path", "in": "path", "required": true,
                "description": "The object's path: 1–1024 bytes, `/`-separated (`%2F` is a separator too), \
                    no empty, `.` or `..` segment, no backslash or control character.",
                "schema": {"type": "string", "minLength": 1, "maxLength": 1024},
            },
            "account": {
                "name": "account", "in": "path", "required": true,
                "description": "An account's name.",
                "schema": {"type": "string"},
            },
            "accountTokenId": {
                "name": "id", "in": "path", "required": true,
                "description": "An account token's id, as its creation answered it.",
                "schema": {"type": "string"},
            },
            "backupName": {
                "name": "name", "in": "path", "required": true,
                "description": "A backup's name: 1–100 of `A-Z a-z 0-9 . _ -`, starting with a letter or digit.",
                "schema": {"type": "string"},
            },
            "consolePath": {
                "name": "path", "in": "path", "required": true,
                "description": "A file of the console, such as `app.js`; any other path answers 404.",
                "schema": {"type": "string"},
            },
            "legacyGet": {
                "name": "X-SVC-LEGACY-GET", "in": "header", "required": false,
                "description": "`true` answers the bare value instead of `{ok, doc}` (also read as \
                    `X-HYPER-LEGACY-GET`).",
                "schema": {"type": "string", "enum": ["true", "false"]},
            },
        },
        "responses": {
            "ClientError": error_retry("A refused request: 400 bad JSON or Host, 401/403 credentials, 404 no such \
                route, instance or item, 405 method, 408 body too slow, 409 exists, 413 too large, 415 not \
                application/json, 422 a value breaks a rule, 429 too many requests (Retry-After)."),
            "ServerError": error_retry("500 a fault of the server (logged with the request id); 503 an engine is \
                down or the server is stopping (Retry-After); 507 the disk is full."),
        },
        "schemas": schemas(),
    })
}

fn schemas() -> Value {
    let time = json!({"type": ["string", "null"], "description": "RFC 3339 UTC, or null"});
    let mut parts = Vec::new();
    parts.push(json!({
        "Ok": {
            "type": "object",
            "required": ["ok"],
            "properties": {"ok": {"const": true}},
        },
        "Error": {
            "type": "object",
            "required": ["ok", "status", "msg"],
            "properties": {
                "ok": {"const": false},
                "status": {"type": "integer", "minimum": 400, "maximum": 599},
                "msg": {"type": "string", "description": "What was wrong and how to fix it."},
            },
        },
        "Info": {
            "type": "object",
            "required": ["ok", "name", "version", "services"],
            "properties": {
                "ok": {"const": true},
                "name": {"const": "quintet"},
                "version": {"type": "string"},
                "services": {"type": "array", "items": {"type": "string", "enum": ["data", "cache", "search", "queue", "storage"]}},
            },
        },
        "Ready": {
            "type": "object",
            "required": ["ok", "checks"],
            "properties": {
                "ok": {"type": "boolean"},
                "status": {"type": "integer"},
                "msg": {"type": "string"},
                "checks": {"type": "object", "additionalProperties": {"type": "string"},
                    "description": "`registry` and each service type → `ok` or the reason."},
            },
        },
    }));
    parts.push(json!({
        "Document": {
            "type": "object",
            "description": "A JSON document; `_id` optional on create (1–512 bytes, not beginning with `_`).",
            "examples": [{"_id": "alien", "title": "Alien", "year": 1979}],
            "properties": {"_id": {"type": "string", "minLength": 1, "maxLength": 512, "pattern": ID_PATTERN}},
        },
        "Created": {
            "type": "object",
            "required": ["ok", "id"],
            "properties": {"ok": {"const": true}, "id": {"type": "string"}},
        },
        "DocAnswer": {
            "type": "object",
            "required": ["ok", "doc"],
            "properties": {"ok": {"const": true}, "doc": {}},
        },
        "Docs": {
            "type": "object",
            "required": ["ok", "docs"],
            "properties": {"ok": {"const": true}, "docs": {"type": "array"}},
        },
        "BulkResults": {
            "type": "object",
            "required": ["ok", "results"],
            "properties": {
                "ok": {"const": true},
                "results": {"type": "array", "items": {
                    "type": "object",
                    "required": ["id", "ok"],
                    "properties": {
                        "id": {"type": ["string", "null"]},
                        "ok": {"type": "boolean"},
                        "error": {"type": "string"},
                    },
                }},
            },
        },
        "MangoQuery": {
            "type": "object",
            "examples": [{"selector": {"year": {"$gte": 1970}}, "sort": [{"year": "desc"}], "limit": 10}],
            "required": ["selector"],
            "properties": {
                "selector": {"type": "object", "description": "A Mango selector (docs/api.md#data)."},
                "fields": {"type": "array", "items": {"type": "string"}},
                "sort": {"type": "array", "items": {"anyOf": [{"type": "string"}, {"type": "object", "additionalProperties": {"type": "string"}}]}},
                "limit": {"type": "integer", "minimum": 0, "maximum": 100000},
                "skip": {"type": "integer", "minimum": 0},
                "use_index": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]},
                "execution_stats": {"type": "boolean"},
            },
        },
        "QueryAnswer": {
            "type": "object",
            "required": ["ok", "docs"],
            "properties": {
                "ok": {"const": true},
                "docs": {"type": "array"},
                "warning": {"type": "string"},
                "execution_stats": {"type": "object", "properties": {
                    "docs_examined": {"type": "integer"},
                    "results_returned": {"type": "integer"},
                    "execution_time_ms": {"type": "number"},
                    "index": {},
                }},
            },
        },
        "IndexDef": {
            "type": "object",
            "examples": [{"fields": ["year"], "name": "by-year"}],
            "required": ["fields"],
            "properties": {
                "fields": {"type": "array", "items": {"anyOf": [{"type": "string"}, {"type": "object", "additionalProperties": {"type": "string", "enum": ["asc", "desc", "ASC", "DESC"]}}]}},
                "name": {"type": "string"},
                "type": {"type": "string"},
                "partialFilter": {"type": "object"},
                "partial_filter_selector": {"type": "object"},
            },
        },
        "Indexes": {
            "type": "object",
            "required": ["ok", "indexes"],
            "properties": {
                "ok": {"const": true},
                "indexes": {"type": "array", "items": {
                    "type": "object",
                    "required": ["name", "type", "fields"],
                    "properties": {
                        "name": {"type": "string"},
                        "type": {"type": "string"},
                        "fields": {"type": "array"},
                        "partial_filter_selector": {"type": "object"},
                    },
                }},
            },
        },
    }));
    parts.push(json!({
        "CacheEntry": {
            "type": "object",
            "examples": [{"key": "user-1", "value": {"name": "Ada"}, "ttl": "30m"}],
            "required": ["key", "value"],
            "properties": {
                "key": {"type": "string", "maxLength": 512, "pattern": CACHE_KEY_PATTERN, "description": "a-z, then a-z 0-9 _ $ + -; at most 512 bytes."},
                "value": {"type": "object"},
                "ttl": {"type": "string", "description": "`<n><unit>`, unit s m h d w y; at most 10000y.", "pattern": "^([1-9][0-9]*[smhdwy])?$"},
            },
        },
        "CacheEntries": {
            "type": "object",
            "required": ["ok", "docs"],
            "properties": {
                "ok": {"const": true},
                "docs": {"type": "array", "items": {"type": "object", "required": ["key", "value"], "properties": {"key": {"type": "string"}, "value": {}}}},
            },
        },
        "SearchConfig": {
            "type": "object",
            "examples": [{"fields": ["title", "plot"], "storeFields": ["title"]}],
            "required": ["fields"],
            "properties": {
                "fields": {"type": "array", "minItems": 1, "items": {"type": "string"}},
                "storeFields": {"type": "array", "items": {"type": "string"}},
            },
        },
        "SearchEntry": {
            "type": "object",
            "examples": [{"key": "gb", "doc": {"title": "Ghostbusters", "plot": "Three parapsychologists catch ghosts."}}],
            "required": ["key", "doc"],
            "properties": {
                "key": {"type": "string", "minLength": 1, "maxLength": 512, "pattern": TEXT_PATTERN},
                "doc": {"type": "object", "description": "Must contain every configured field (null allowed)."},
            },
        },
        "SearchDoc": {
            "type": "object",
            "required": ["ok", "key", "doc"],
            "properties": {"ok": {"const": true}, "key": {"type": "string"}, "doc": {"type": "object"}},
        },
        "SearchQuery": {
            "type": "object",
            "examples": [{"query": "ghostbustres", "limit": 10}],
            "required": ["query"],
            "properties": {
                "query": {"type": "string", "maxLength": 1024},
                "fields": {"type": "array", "items": {"type": "string"}},
                "filter": {"type": "object"},
                "limit": {"type": "integer", "minimum": 1, "maximum": 1000},
            },
        },
        "Matches": {
            "type": "object",
            "required": ["ok", "matches"],
            "properties": {
                "ok": {"const": true},
                "matches": {"type": "array", "items": {
                    "type": "object",
                    "required": ["id", "score", "terms", "queryTerms", "match"],
                    "properties": {
                        "id": {"type": "string"},
                        "score": {"type": "number"},
                        "terms": {"type": "array", "items": {"type": "string"}},
                        "queryTerms": {"type": "array", "items": {"type": "string"}},
                        "match": {"type": "object", "additionalProperties": {"type": "array", "items": {"type": "string"}}},
                    },
                }},
            },
        },
    }));
    parts.push(json!({
        "QueueConfig": {
            "type": "object",
            "examples": [{"target": "https://worker.example.com/jobs", "secret": "a-long-random-secret"}],
            "required": ["target"],
            "properties": {
                "target": {"type": "string", "format": "uri", "description": "http(s) URL the jobs are POSTed to."},
                "secret": {"type": "string", "minLength": 1, "maxLength": 256},
                "concurrency": {"type": "integer", "minimum": 1, "maximum": 256},
                "timeout": {"type": "integer", "minimum": 1, "maximum": 3600},
                "retries": {"type": "integer", "minimum": 0, "maximum": 25},
                "signJobId": {"type": "boolean"},
            },
        },
        "Job": {
            "type": "object",
            "description": "Any JSON object, at most 1 MiB.",
            "examples": [{"type": "welcome", "to": "ann@example.com"}],
        },
        "Payloads": {
            "type": "object",
            "required": ["ok", "jobs"],
            "properties": {"ok": {"const": true}, "jobs": {"type": "array", "items": {"type": "object"}}},
        },
        "JobRecords": {
            "type": "object",
            "required": ["ok", "jobs"],
            "properties": {
                "ok": {"const": true},
                "jobs": {"type": "array", "items": {
                    "type": "object",
                    "required": ["id", "status", "job", "attempts", "error", "created", "updated"],
                    "properties": {
                        "id": {"type": "string"},
                        "status": {"type": "string", "enum": ["READY", "ERROR"]},
                        "job": {"type": "object"},
                        "attempts": {"type": "integer", "minimum": 0},
                        "error": {"type": ["string", "null"]},
                        "created": {"type": "string"},
                        "updated": {"type": "string"},
                    },
                }},
            },
        },
        "Objects": {
            "type": "object",
            "required": ["ok", "objects"],
            "properties": {
                "ok": {"const": true},
                "objects": {"type": "array", "items": {
                    "type": "object",
                    "required": ["path", "size", "contentType", "etag", "modified"],
                    "properties": {
                        "path": {"type": "string"},
                        "size": {"type": "integer", "minimum": 0},
                        "contentType": {"type": "string"},
                        "etag": {"type": "string"},
                        "modified": {"type": "string"},
                    },
                }},
            },
        },
        "SignedUrl": {
            "type": "object",
            "required": ["ok", "url"],
            "properties": {"ok": {"const": true}, "url": {"type": "string"}},
        },
        "Upload": {
            "type": "object",
            "properties": {
                "file": {"type": "string", "format": "binary"},
                "path": {"type": "string"},
            },
        },
    }));
    parts.push(json!({
        "Account": {
            "type": "object",
            "required": ["name", "plan", "apps", "maxApps", "created"],
            "properties": {
                "name": {"type": "string"},
                "plan": {"type": "string", "enum": ["starter", "pro", "business"]},
                "apps": {"type": "integer", "minimum": 0},
                "maxApps": {"type": "integer"},
                "created": time.clone(),
            },
        },
        "App": {
            "type": "object",
            "required": ["name", "account", "created"],
            "properties": {"name": {"type": "string"}, "account": {"type": "string"}, "created": time.clone()},
        },
        "AccountAnswer": {
            "type": "object", "required": ["ok", "account"],
            "properties": {"ok": {"const": true}, "account": schema("Account")},
        },
        "Accounts": {
            "type": "object", "required": ["ok", "accounts"],
            "properties": {"ok": {"const": true}, "accounts": {"type": "array", "items": schema("Account")}, "next": {"type": ["string", "null"], "description": "With `limit`: the `after` of the next page, null on the last."}},
        },
        "AppAnswer": {
            "type": "object", "required": ["ok", "app"],
            "properties": {"ok": {"const": true}, "app": schema("App")},
        },
        "Apps": {
            "type": "object", "required": ["ok", "apps"],
            "properties": {"ok": {"const": true}, "apps": {"type": "array", "items": schema("App")}, "next": {"type": ["string", "null"], "description": "With `limit`: the `after` of the next page, null on the last."}},
        },
        "NewKey": {
            "type": "object", "required": ["ok", "key", "secret", "connectionString"],
            "properties": {
                "ok": {"const": true},
                "key": {"type": "string"},
                "secret": {"type": "string"},
                "connectionString": {"type": "string"},
                "created": time.clone(),
                "lastUsed": time.clone(),
                "revoked": time.clone(),
            },
        },
        "Keys": {
            "type": "object", "required": ["ok", "keys"],
            "properties": {
                "ok": {"const": true},
                "next": {"type": ["string", "null"], "description": "With `limit`: the `after` of the next page, null on the last."},
                "keys": {"type": "array", "items": {
                    "type": "object",
                    "required": ["key", "secret", "created", "lastUsed", "revoked"],
                    "properties": {
                        "key": {"type": "string"},
                        "secret": {"type": "string", "description": "redacted"},
                        "created": time.clone(),
                        "lastUsed": time.clone(),
                        "revoked": time.clone(),
                    },
                }},
            },
        },
        "Instances": {
            "type": "object", "required": ["ok", "instances"],
            "properties": {
                "ok": {"const": true},
                "next": {"type": ["string", "null"], "description": "With `limit`: the `after` of the next page, null on the last."},
                "instances": {"type": "array", "items": {
                    "type": "object",
                    "required": ["type", "name", "config", "created"],
                    "properties": {
                        "type": {"type": "string"},
                        "name": {"type": "string"},
                        "config": {},
                        "created": {"type": ["string", "null"]},
                    },
                }},
            },
        },
    }));
    parts.push(json!({
        "CacheTtl": {
            "type": "object", "required": ["ok", "key", "expires", "ttl"],
            "properties": {
                "ok": {"const": true},
                "key": {"type": "string"},
                "expires": {"type": ["string", "null"], "description": "RFC 3339 UTC, or null when it never expires"},
                "ttl": {"type": ["integer", "null"], "minimum": 0, "description": "Whole seconds left, or null"},
            },
        },
        "Change": {
            "type": "object", "required": ["seq", "id", "deleted"],
            "properties": {
                "seq": {"type": "string", "description": "Opaque; resume with `since=<seq>`."},
                "id": {"type": "string"},
                "deleted": {"type": "boolean"},
                "doc": {"description": "With `include_docs=true`: the document as it is now, null once deleted."},
            },
        },
        "Changes": {
            "type": "object", "required": ["ok", "results", "last_seq"],
            "properties": {
                "ok": {"const": true},
                "results": {"type": "array", "items": schema("Change")},
                "last_seq": {"type": "string"},
            },
        },
        "JobEvent": {
            "type": "object", "required": ["seq", "id", "event", "status"],
            "properties": {
                "seq": {"type": "string", "description": "Opaque; resume with `since=<seq>`."},
                "id": {"type": "string", "description": "The job's id."},
                "event": {"type": "string", "enum": ["ready", "delivered", "error", "cancelled", "retried"]},
                "status": {"type": ["string", "null"], "enum": ["READY", "ERROR", null], "description": "The job's state after the event; null once it is gone."},
                "error": {"type": "string", "description": "With `error` events: the worker's answer or why delivery gave up."},
            },
        },
        "JobEvents": {
            "type": "object", "required": ["ok", "results", "last_seq"],
            "properties": {
                "ok": {"const": true},
                "results": {"type": "array", "items": schema("JobEvent")},
                "last_seq": {"type": "string"},
            },
        },
        "ObjectEvent": {
            "type": "object", "required": ["seq", "path", "event"],
            "properties": {
                "seq": {"type": "string", "description": "Opaque; resume with `since=<seq>`."},
                "path": {"type": "string", "description": "The object's path."},
                "event": {"type": "string", "enum": ["written", "removed"]},
                "size": {"type": "integer", "minimum": 0, "description": "With `written` events: the object's length in bytes."},
                "etag": {"type": "string", "description": "With `written` events: the object's entity tag, without quotes."},
                "content_type": {"type": "string", "description": "With `written` events: the object's media type."},
            },
        },
        "ObjectEvents": {
            "type": "object", "required": ["ok", "results", "last_seq"],
            "properties": {
                "ok": {"const": true},
                "results": {"type": "array", "items": schema("ObjectEvent")},
                "last_seq": {"type": "string"},
            },
        },
    }));
    parts.push(json!({
        "ImportReport": {
            "type": "object",
            "required": ["ok", "accounts", "apps", "keys", "keysSkipped", "instances", "records"],
            "properties": {
                "ok": {"const": true},
                "accounts": {"type": "integer", "minimum": 0},
                "apps": {"type": "integer", "minimum": 0},
                "keys": {"type": "integer", "minimum": 0},
                "keysSkipped": {"type": "integer", "minimum": 0},
                "records": {"type": "integer", "minimum": 0},
                "instances": {"type": "array", "items": {
                    "type": "object",
                    "required": ["app", "type", "name", "count", "digest", "importedCount", "importedDigest", "equal"],
                    "properties": {
                        "app": {"type": "string"},
                        "type": {"type": "string"},
                        "name": {"type": "string"},
                        "count": {"type": "integer", "minimum": 0},
                        "digest": {"type": "string"},
                        "importedCount": {"type": "integer", "minimum": 0},
                        "importedDigest": {"type": "string"},
                        "equal": {"type": "boolean"},
                    },
                }},
            },
        },
        "Backup": {
            "type": "object", "required": ["name", "state", "bytes", "path"],
            "properties": {
                "name": {"type": "string"},
                "state": {"type": "string", "enum": ["complete", "running", "incomplete"]},
                "created": {"type": "string", "description": "RFC 3339 UTC (complete backups)"},
                "bytes": {"type": "integer", "minimum": 0},
                "files": {"type": "integer", "minimum": 0},
                "totalBytes": {"type": "integer", "minimum": 0},
                "path": {"type": "string"},
            },
        },
        "BackupAnswer": {
            "type": "object", "required": ["ok", "backup"],
            "properties": {"ok": {"const": true}, "backup": schema("Backup")},
        },
        "Backups": {
            "type": "object", "required": ["ok", "backups"],
            "properties": {"ok": {"const": true}, "backups": {"type": "array", "items": schema("Backup")}},
        },
        "Node": {
            "type": "object", "required": ["ok", "version", "started", "uptime", "places", "instances"],
            "properties": {
                "ok": {"const": true},
                "version": {"type": "string"},
                "started": time.clone(),
                "uptime": {"type": "integer", "minimum": 0, "description": "Seconds."},
                "places": {"type": "object", "additionalProperties": {"type": "string"},
                    "description": "Where each store keeps its data: the engine's name, never its URL."},
                "instances": {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0},
                    "description": "Every application's instances, counted by type."},
            },
        },
        "Me": {
            "type": "object", "required": ["ok", "role"],
            "properties": {
                "ok": {"const": true},
                "role": {"type": "string", "enum": ["admin", "account"]},
                "account": schema("Account"),
            },
        },
        "MintedToken": {
            "type": "object", "required": ["ok", "token", "key", "expires"],
            "properties": {
                "ok": {"const": true},
                "token": {"type": "string"},
                "key": {"type": "string"},
                "expires": {"type": "string", "description": "RFC 3339 UTC"},
            },
        },
        "NewAccountToken": {
            "type": "object", "required": ["ok", "id", "token", "account", "created"],
            "properties": {
                "ok": {"const": true},
                "id": {"type": "string"},
                "token": {"type": "string", "description": "Shown this once; only its digest is kept."},
                "account": {"type": "string"},
                "created": time.clone(),
            },
        },
        "AccountTokens": {
            "type": "object", "required": ["ok", "tokens"],
            "properties": {
                "ok": {"const": true},
                "next": {"type": ["string", "null"], "description": "With `limit`: the `after` of the next page, null on the last."},
                "tokens": {"type": "array", "items": {
                    "type": "object",
                    "required": ["id", "account", "created", "revoked"],
                    "properties": {
                        "id": {"type": "string"},
                        "account": {"type": "string"},
                        "created": time.clone(),
                        "revoked": time,
                    },
                }},
            },
        },
    }));
    let mut all = serde_json::Map::new();
    for part in parts {
        if let Value::Object(m) = part {
            all.extend(m);
        }
    }
    Value::Object(all)
}
