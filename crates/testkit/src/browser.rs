//! A real headless Chromium for browser tests, driven over WebDriver through
//! `chromedriver` (Debian's `chromium` and `chromium-driver`, which `scripts/setup`
//! installs). A small client of the few WebDriver calls the tests use, over `reqwest`,
//! rather than a driver crate: the protocol is plain JSON over HTTP.

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use base64::Engine as _;
use serde_json::{Value, json};

/// The key WebDriver names an element reference with.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// Where the browser and its driver are, when installed: `(chromium, chromedriver)`.
pub fn installed() -> Option<(PathBuf, PathBuf)> {
    let find = |names: &[&str]| names.iter().map(PathBuf::from).find(|p| p.exists());
    let chromium = find(&["/usr/bin/chromium", "/usr/bin/chromium-browser"])?;
    let driver = find(&["/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver"])?;
    Some((chromium, driver))
}

/// Whether browser tests must run: set by `scripts/test` (`REQUIRE_BROWSER=1`), so a
/// missing Chromium fails the suite there instead of skipping.
pub fn required() -> bool {
    std::env::var("REQUIRE_BROWSER").is_ok_and(|v| v == "1")
}

/// One headless Chromium session.
#[derive(Debug)]
pub struct Browser {
    driver: Child,
    base: String,
    http: reqwest::Client,
    /// Where downloads land.
    pub downloads: tempfile::TempDir,
    _profile: tempfile::TempDir,
}

/// A reference to an element of the page.
#[derive(Debug, Clone)]
pub struct Element(String);

impl Browser {
    /// Start chromedriver and a headless Chromium of `width`×`height`; `None` when they
    /// are not installed (and not [`required`]).
    pub async fn start(width: u32, height: u32) -> Option<Self> {
        let Some((chromium, driver)) = installed() else {
            assert!(
                !required(),
                "REQUIRE_BROWSER=1 but chromium and chromedriver are not installed: run \
                 scripts/setup"
            );
            eprintln!("skipping: chromium and chromedriver are not installed (scripts/setup)");
            return None;
        };
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
            l.local_addr().expect("its address").port()
        };
        let child = Command::new(driver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        quintet_server::tls::install_crypto_provider();
        let http = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(60))
            .build()
            .expect("client");
        let driver_url = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(r) = http.get(format!("{driver_url}/status")).send().await
                && r.status().is_success()
            {
                break;
            }
            assert!(Instant::now() < deadline, "chromedriver did not start");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let downloads = tempfile::tempdir().expect("temp dir");
        let profile = tempfile::tempdir().expect("temp dir");
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": chromium,
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--no-first-run", "--disable-extensions", "--no-proxy-server",
                    format!("--window-size={width},{height}"),
                    format!("--user-data-dir={}", profile.path().display()),
                ],
                "prefs": {
                    "download.default_directory": downloads.path(),
                    "download.prompt_for_download": false,
                },
            },
        }}});
        let r: Value = http
            .post(format!("{driver_url}/session"))
            .json(&caps)
            .send()
            .await
            .expect("new session")
            .json()
            .await
            .expect("session JSON");
        let id = r["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {r}"))
            .to_owned();
        let b = Self {
            driver: child,
            base: format!("{driver_url}/session/{id}"),
            http,
            downloads,
            _profile: profile,
        };
        b.set_size(width, height).await;
        Some(b)
    }

    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let mut req = self.http.request(method, format!("{}{path}", self.base));
        if let Some(b) = body {
            req = req.json(&b);
        }
        let r: Value = req
            .send()
            .await
            .expect("webdriver call")
            .json()
            .await
            .expect("webdriver JSON");
        r["value"].clone()
    }

    async fn post(&self, path: &str, body: Value) -> Value {
        self.call(reqwest::Method::POST, path, Some(body)).await
    }

    /// Resize the window.
    pub async fn set_size(&self, width: u32, height: u32) {
        self.post("/window/rect", json!({"width": width, "height": height}))
            .await;
    }

    /// Open `url`.
    pub async fn goto(&self, url: &str) {
        self.post("/url", json!({"url": url})).await;
    }

    /// Run `script` (a function body; `arguments` holds `args`) and answer its value; a
    /// promise is awaited.
    pub async fn exec(&self, script: &str, args: Value) -> Value {
        self.post("/execute/sync", json!({"script": script, "args": args}))
            .await
    }

    /// The first element matching `css` now, if any.
    pub async fn try_find(&self, css: &str) -> Option<Element> {
        let v = self
            .post("/element", json!({"using": "css selector", "value": css}))
            .await;
        v[ELEMENT].as_str().map(|id| Element(id.to_owned()))
    }

    /// Wait (up to 20 s) for an element matching `css`.
    pub async fn find(&self, css: &str) -> Element {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(e) = self.try_find(css).await {
                return e;
            }
            if Instant::now() >= deadline {
                let page = self
                    .exec(
                        "return location.href + '\\n' + document.documentElement.outerHTML",
                        json!([]),
                    )
                    .await;
                panic!("no element matches {css}; the page is:\n{page}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Wait (up to 20 s) until the page's text contains `text`.
    pub async fn wait_text(&self, text: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let body = self.page_text().await;
            if body.contains(text) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the page never showed {text:?}; it shows:\n{body}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The visible text of the whole page.
    pub async fn page_text(&self) -> String {
        self.exec("return document.body.innerText", json!([]))
            .await
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// Click the element matching `css` (waiting for it).
    pub async fn click(&self, css: &str) {
        let e = self.find(css).await;
        self.click_el(&e).await;
    }

    /// Click `e`.
    pub async fn click_el(&self, e: &Element) {
        let r = self
            .post(&format!("/element/{}/click", e.0), json!({}))
            .await;
        assert!(r.is_null(), "click failed: {r}");
    }

    /// Click the first element matching `css` whose text is `text` (waiting for it).
    pub async fn click_text(&self, css: &str, text: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let found = self
                .exec(
                    "const [css, text] = arguments; \
                     const el = [...document.querySelectorAll(css)].find((e) => e.textContent.trim() === text); \
                     if (!el) return false; el.scrollIntoView({block: 'center'}); return true;",
                    json!([css, text]),
                )
                .await;
            if found == json!(true) {
                let v = self
                    .exec(
                        "const [css, text] = arguments; \
                         return [...document.querySelectorAll(css)].find((e) => e.textContent.trim() === text);",
                        json!([css, text]),
                    )
                    .await;
                if let Some(id) = v[ELEMENT].as_str() {
                    self.click_el(&Element(id.to_owned())).await;
                    return;
                }
            }
            assert!(Instant::now() < deadline, "no {css} says {text:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Type `text` into the element matching `css`, after clearing it.
    pub async fn fill(&self, css: &str, text: &str) {
        let e = self.find(css).await;
        self.post(&format!("/element/{}/clear", e.0), json!({}))
            .await;
        self.post(&format!("/element/{}/value", e.0), json!({"text": text}))
            .await;
    }

    /// Type `text` into the element matching `css` as it is (a file input takes a path).
    pub async fn type_into(&self, css: &str, text: &str) {
        let e = self.find(css).await;
        let r = self
            .post(&format!("/element/{}/value", e.0), json!({"text": text}))
            .await;
        assert!(r.is_null(), "typing failed: {r}");
    }

    /// Type `text` (WebDriver key codes allowed) into whatever has the focus.
    pub async fn keys(&self, text: &str) {
        let actions: Vec<Value> = text
            .chars()
            .flat_map(|c| {
                let s = c.to_string();
                [
                    json!({"type": "keyDown", "value": s}),
                    json!({"type": "keyUp", "value": s}),
                ]
            })
            .collect();
        self.post(
            "/actions",
            json!({"actions": [{"type": "key", "id": "keyboard", "actions": actions}]}),
        )
        .await;
        self.call(reqwest::Method::DELETE, "/actions", None).await;
    }

    /// Let the page read the clipboard (Chromium asks otherwise).
    pub async fn grant_clipboard(&self) {
        for name in ["clipboard-read", "clipboard-write"] {
            self.post(
                "/permissions",
                json!({"descriptor": {"name": name}, "state": "granted"}),
            )
            .await;
        }
    }

    /// What the clipboard holds.
    pub async fn clipboard(&self) -> String {
        self.exec("return navigator.clipboard.readText()", json!([]))
            .await
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// A PNG of the window, written to `path`.
    pub async fn screenshot(&self, path: &Path) {
        let v = self.call(reqwest::Method::GET, "/screenshot", None).await;
        let png = base64::engine::general_purpose::STANDARD
            .decode(v.as_str().expect("base64 screenshot"))
            .expect("base64");
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).expect("screenshot directory");
        }
        std::fs::write(path, png).expect("screenshot written");
    }

    /// Wait (up to 30 s) for a finished download named `name`; its bytes.
    pub async fn downloaded(&self, name: &str) -> Vec<u8> {
        let path = self.downloads.path().join(name);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(bytes) = std::fs::read(&path) {
                return bytes;
            }
            assert!(Instant::now() < deadline, "{name} was not downloaded");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Browser {
    /// End the session: Chromium exits.
    pub async fn quit(self) {
        self.call(reqwest::Method::DELETE, "", None).await;
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // End the session (Chromium exits) with a plain blocking request, since a test that
        // panicked never reached `quit`; then stop chromedriver.
        if let Some(rest) = self.base.strip_prefix("http://")
            && let Some((authority, path)) = rest.split_once('/')
            && let Ok(mut conn) = std::net::TcpStream::connect(authority)
        {
            use std::io::{Read, Write};
            let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
            let req = format!(
                "DELETE /{path} HTTP/1.1\r\nHost: {authority}\r\nContent-Length: 0\r\n\
                 Connection: close\r\n\r\n"
            );
            if conn.write_all(req.as_bytes()).is_ok() {
                let mut answer = Vec::new();
                let _ = conn.read_to_end(&mut answer);
            }
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}
