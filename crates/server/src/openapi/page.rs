//! The API reference page at `/_console/api`: the OpenAPI document rendered to HTML here,
//! once. No script runs and nothing is fetched: `<details>` elements fold the operations,
//! and the one stylesheet is inline, allowed by its hash in the Content-Security-Policy
//! (`default-src 'none'`), so the page cannot load or run anything else.

use std::{fmt::Write as _, sync::OnceLock};

use base64::Engine as _;
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::{document, paths::TAGS};

const STYLE: &str = "body{font:15px/1.45 system-ui,sans-serif;margin:0 auto;max-width:70rem;padding:1rem 2rem;color:#1d1d1f}\
code,pre{font:13px ui-monospace,monospace}pre{background:#f5f5f7;padding:.6rem;overflow:auto;border-radius:4px}\
details{border:1px solid #ddd;border-radius:4px;margin:.3rem 0;padding:.2rem .6rem}summary{cursor:pointer}\
.m{display:inline-block;min-width:4.5rem;font-weight:600}.GET{color:#06c}.POST{color:#080}.PUT{color:#a60}\
.DELETE{color:#c00}.PATCH{color:#808}.HEAD{color:#555}table{border-collapse:collapse;margin:.4rem 0}\
td,th{border:1px solid #ddd;padding:.2rem .5rem;text-align:left;vertical-align:top}nav a{margin-right:.8rem}";

/// The Content-Security-Policy of the page: nothing but its own inline stylesheet.
pub(crate) fn csp() -> &'static str {
    static CSP: OnceLock<String> = OnceLock::new();
    CSP.get_or_init(|| {
        let hash = base64::engine::general_purpose::STANDARD.encode(Sha256::digest(STYLE));
        format!(
            "default-src 'none'; style-src 'sha256-{hash}'; base-uri 'none'; form-action 'none'; \
             frame-ancestors 'none'"
        )
    })
}

/// The page.
pub(crate) fn html() -> &'static str {
    static HTML: OnceLock<String> = OnceLock::new();
    HTML.get_or_init(|| render(document()))
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn text(v: &Value) -> String {
    esc(v.as_str().unwrap_or_default())
}

/// `#/components/schemas/X` as a link to the schema's section; other values as JSON.
fn schema_html(v: &Value) -> String {
    if let Some(r) = v.get("$ref").and_then(Value::as_str) {
        let name = r.rsplit('/').next().unwrap_or(r);
        return format!("<a href=\"#schema-{0}\">{0}</a>", esc(name));
    }
    format!(
        "<code>{}</code>",
        esc(&serde_json::to_string(v).unwrap_or_default())
    )
}

fn resolve<'a>(doc: &'a Value, v: &'a Value) -> &'a Value {
    match v.get("$ref").and_then(Value::as_str) {
        Some(r) => doc.pointer(r.trim_start_matches('#')).unwrap_or(v),
        None => v,
    }
}

fn render(doc: &Value) -> String {
    let mut h = String::with_capacity(256 * 1024);
    let _ = write!(
        h,
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\
         <title>quintet API {v}</title><style>{STYLE}</style></head><body>\
         <h1>quintet API <small>{v}</small></h1><p>{d}</p>\
         <p>The machine-readable document: <a href=\"/_openapi.json\">/_openapi.json</a> (OpenAPI 3.1).</p><nav>",
        v = text(&doc["info"]["version"]),
        d = text(&doc["info"]["description"]),
    );
    for (tag, _) in TAGS {
        let _ = write!(h, "<a href=\"#tag-{tag}\">{tag}</a>");
    }
    h.push_str("<a href=\"#schemas\">schemas</a><a href=\"#security\">security</a></nav>");
    let paths = doc["paths"].as_object().cloned().unwrap_or_default();
    for (tag, about) in TAGS {
        let _ = write!(h, "<h2 id=\"tag-{tag}\">{tag}</h2><p>{}</p>", esc(about));
        for (path, item) in &paths {
            for (method, op) in item.as_object().into_iter().flatten() {
                if op["tags"][0].as_str() != Some(tag) {
                    continue;
                }
                operation(&mut h, doc, &method.to_uppercase(), path, op);
            }
        }
    }
    h.push_str("<h2 id=\"security\">Security schemes</h2><table>");
    for (name, s) in doc["components"]["securitySchemes"]
        .as_object()
        .into_iter()
        .flatten()
    {
        let _ = write!(
            h,
            "<tr><th>{}</th><td>{}</td></tr>",
            esc(name),
            text(&s["description"])
        );
    }
    h.push_str("</table><h2 id=\"schemas\">Schemas</h2>");
    for (name, s) in doc["components"]["schemas"]
        .as_object()
        .into_iter()
        .flatten()
    {
        let _ = write!(
            h,
            "<h3 id=\"schema-{n}\">{n}</h3><pre>{}</pre>",
            esc(&serde_json::to_string_pretty(s).unwrap_or_default()),
            n = esc(name)
        );
    }
    h.push_str("</body></html>\n");
    h
}

fn operation(h: &mut String, doc: &Value, method: &str, path: &str, op: &Value) {
    let _ = write!(
        h,
        "<details id=\"{id}\"><summary><span class=\"m {method}\">{method}</span> <code>{p}</code> — {s}</summary>",
        id = text(&op["operationId"]),
        p = esc(path),
        s = text(&op["summary"]),
    );
    if let Some(d) = op["description"].as_str() {
        let _ = write!(h, "<p>{}</p>", esc(d));
    }
    let security: Vec<String> = op["security"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| match s.as_object().and_then(|m| m.keys().next()) {
            Some(k) => k.clone(),
            None => "none".to_owned(),
        })
        .collect();
    let security = if security.is_empty() {
        "none".to_owned()
    } else {
        security.join(" or ")
    };
    let _ = write!(
        h,
        "<p>Operation <code>{}</code>; credentials: {}.</p>",
        text(&op["operationId"]),
        esc(&security)
    );
    let params = op["parameters"].as_array().cloned().unwrap_or_default();
    if !params.is_empty() {
        h.push_str("<table><tr><th>Parameter</th><th>In</th><th>Schema</th><th>Meaning</th></tr>");
        for p in &params {
            let p = resolve(doc, p);
            let required = if p["required"].as_bool() == Some(true) {
                " (required)"
            } else {
                ""
            };
            let _ = write!(
                h,
                "<tr><td><code>{}</code>{required}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                text(&p["name"]),
                text(&p["in"]),
                schema_html(&p["schema"]),
                text(&p["description"]),
            );
        }
        h.push_str("</table>");
    }
    if let Some(body) = op["requestBody"].as_object() {
        h.push_str("<p>Body:</p><table>");
        for (ct, media) in body
            .get("content")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
        {
            let _ = write!(
                h,
                "<tr><td><code>{}</code></td><td>{}</td></tr>",
                esc(ct),
                schema_html(&media["schema"])
            );
        }
        h.push_str("</table>");
    }
    h.push_str("<table><tr><th>Status</th><th>Meaning</th><th>Body</th></tr>");
    for (status, r) in op["responses"].as_object().into_iter().flatten() {
        let r = resolve(doc, r);
        let bodies: Vec<String> = r["content"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(ct, m)| format!("<code>{}</code> {}", esc(ct), schema_html(&m["schema"])))
            .collect();
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(status),
            text(&r["description"]),
            bodies.join("<br>")
        );
    }
    h.push_str("</table></details>");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_runs_nothing_and_loads_nothing() {
        let page = html();
        // URLs may appear as text (examples); nothing may load or link elsewhere.
        for banned in [
            "<script",
            "src=",
            "href=\"http",
            "href=\"//",
            "<link",
            "<img",
            "<iframe",
            "@import",
            "url(",
        ] {
            assert!(!page.contains(banned), "the page contains {banned}");
        }
        assert!(page.contains("<details id=\"data.add\">"));
        assert!(csp().starts_with("default-src 'none'; style-src 'sha256-"));
    }
}
