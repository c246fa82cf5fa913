//! The OpenAPI document against the server: what `/_openapi.json` serves is the committed
//! `docs/openapi.json`; the router and the document agree both ways (every route served is
//! documented with exactly its methods, every documented operation is served); the
//! reference page loads nothing from elsewhere.
//!
//! Regenerate `docs/openapi.json` after changing the document: `scripts/openapi`.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
};

use quintet_testkit::TestServer;
use reqwest::Method;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[tokio::test]
async fn the_committed_document_is_the_served_one() {
    let s = TestServer::start().await;
    let r = s.get("/_openapi.json").await.expect(200);
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(r.body["openapi"], "3.1.0");
    let file = repo().join("docs/openapi.json");
    if std::env::var_os("UPDATE_OPENAPI").is_some() {
        std::fs::write(&file, &r.text).unwrap();
    }
    let committed = std::fs::read_to_string(&file).unwrap_or_default();
    assert!(
        committed == r.text,
        "docs/openapi.json differs from what the server serves at /_openapi.json; \
         regenerate it with scripts/openapi"
    );
}

/// The router's paths, read from the `.route(...)` calls in the server's source: the
/// router cannot list its routes, and reading the source finds a new route the moment it
/// is written. A path built with `format!("/{kind}/…")` stands for every service type.
fn router_paths() -> BTreeSet<String> {
    let mut files = Vec::new();
    let mut dirs = vec![repo().join("crates/server/src")];
    while let Some(dir) = dirs.pop() {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                files.push(p);
            }
        }
    }
    let mut out = BTreeSet::new();
    for f in files {
        let src = std::fs::read_to_string(&f).unwrap();
        for (i, _) in src.match_indices(".route(") {
            let rest = src[i + ".route(".len()..].trim_start();
            let (templated, rest) = match rest.strip_prefix("&format!(") {
                Some(r) => (true, r),
                None => (false, rest),
            };
            let Some(lit) = rest.strip_prefix('"') else {
                panic!("{}: a route whose path is not a literal", f.display());
            };
            let path = &lit[..lit.find('"').unwrap()];
            if templated {
                let path = path.replace("{{", "\u{1}").replace("}}", "\u{2}");
                for kind in ["data", "cache", "search", "queue", "storage"] {
                    out.insert(
                        path.replace("{kind}", kind)
                            .replace('\u{1}', "{")
                            .replace('\u{2}', "}"),
                    );
                }
            } else {
                out.insert(path.to_owned());
            }
        }
    }
    assert!(out.contains("/_health") && out.contains("/data/{instance}"));
    out.into_iter().map(|p| p.replace("{*", "{")).collect()
}

/// `path` with sample values for its parameters.
fn sample(path: &str) -> String {
    path.split('/')
        .map(|seg| match seg {
            "{app}" => "shop",
            "{instance}" => "x1",
            "{id}" => "i1",
            "{key}" => "k1",
            "{path}" => "a/b",
            "{account}" => "n1",
            "{name}" => "b1",
            s if s.starts_with('{') => panic!("no sample for {s}"),
            s => s,
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// The methods the server serves at `url`: asked with a method no route has, the answer
/// is 405 with `Allow`. GET implies HEAD, as in axum.
async fn served_methods(s: &TestServer, url: &str, token: Option<&str>) -> BTreeSet<String> {
    let mut req = s.request(Method::TRACE, url);
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let r = s.send(req).await;
    assert_eq!(r.status, 405, "TRACE {url}: {}", r.text);
    let mut methods: BTreeSet<String> = r
        .header("allow")
        .unwrap_or_default()
        .split(',')
        .map(|m| m.trim().to_owned())
        .filter(|m| !m.is_empty())
        .collect();
    if methods.contains("GET") {
        methods.insert("HEAD".into());
    }
    methods
}

#[tokio::test]
async fn the_router_and_the_document_agree() {
    let s = TestServer::start().await;
    let key = s.new_app().await;
    let token = s.token(&key);
    let doc = s.get("/_openapi.json").await.expect(200).body;
    let mut documented: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        let methods = documented.entry(path.clone()).or_default();
        for m in item.as_object().unwrap().keys() {
            methods.insert(m.to_uppercase());
        }
        if methods.contains("GET") {
            methods.insert("HEAD".into());
        }
    }
    let routes = router_paths();
    // Every route is documented, in the domain form and (service routes) the application
    // form, with exactly the methods the server serves.
    for route in &routes {
        let own = route.starts_with("/_admin").then_some(s.admin_token());
        let mut forms = vec![(route.clone(), own)];
        if ["/data/", "/cache/", "/search/", "/queue/", "/storage/"]
            .iter()
            .any(|p| route.starts_with(p))
        {
            forms.push((format!("/{{app}}{route}"), Some(token.as_str())));
        }
        for (path, token) in forms {
            let Some(methods) = documented.get(&path) else {
                panic!(
                    "{path} is served but not in the OpenAPI document (crates/server/src/openapi/paths.rs)"
                );
            };
            let url = sample(&path).replacen("/shop/", &format!("/{}/", key.app), 1);
            let served = served_methods(&s, &url, token).await;
            assert_eq!(
                &served, methods,
                "{path}: the methods served (left) and documented (right) differ"
            );
        }
    }
    // Every documented path is a route.
    for path in documented.keys() {
        let domain = path.strip_prefix("/{app}").unwrap_or(path);
        assert!(
            routes.contains(domain) || routes.contains(path.as_str()),
            "{path} is documented but not served"
        );
    }
}

#[tokio::test]
async fn the_reference_page_loads_nothing_from_elsewhere() {
    let s = TestServer::start().await;
    let r = s.get("/_console/api").await.expect(200);
    assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"));
    let csp = r.header("content-security-policy").unwrap();
    assert!(
        csp.starts_with("default-src 'none'; style-src 'sha256-"),
        "{csp}"
    );
    assert!(!r.text.contains("<script"));
    assert!(r.text.contains("/_openapi.json"));
    assert!(r.text.contains("id=\"app.data.add\""));
}

/// A client generated from the served document works: `compat/openapi-client/run`
/// generates TypeScript types with openapi-typescript, type-checks a short script against
/// them and runs it with openapi-fetch, in both address forms. Without node it is skipped
/// with a message, except under CI or with `REQUIRE_ENGINES=1`, where it fails.
#[tokio::test]
async fn a_client_generated_from_the_document_works() {
    let has_node = std::process::Command::new("node")
        .arg("--version")
        .stdout(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !has_node {
        assert!(
            std::env::var_os("CI").is_none() && !quintet_testkit::engines::required(),
            "node is required for the generated client (scripts/setup installs it)"
        );
        eprintln!("skipped: node is not installed, so the generated client cannot run");
        return;
    }
    let s = TestServer::start().await;
    let key = s.new_app().await;
    // Async: the server under test runs on this very runtime.
    let out = tokio::process::Command::new("bash")
        .arg(repo().join("compat/openapi-client/run"))
        .env("QUINTET_URL", s.url("").trim_end_matches('/'))
        .env("QUINTET_APP", &key.app)
        .env("QUINTET_APP_TOKEN", s.token(&key))
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains(" passed, 0 failed"),
        "the generated client failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
