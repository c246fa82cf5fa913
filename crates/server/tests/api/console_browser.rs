//! The management console in a real headless Chromium (WebDriver through chromedriver):
//! the flows a person walks, end to end, against a real node. Screenshots of each page are
//! taken on every run; with `UPDATE_SCREENSHOTS=1` they replace those in `docs/console/`.
//! Skipped when Chromium is not installed, unless `REQUIRE_BROWSER=1` (`scripts/test`).

use std::path::PathBuf;

use quintet_testkit::{
    Answer, PrivateTargetsArg, TestServer, Worker, browser::Browser, eventually,
};
use reqwest::Method;
use serde_json::json;

/// Where screenshots go: `docs/console/` when updating them, else a directory that is
/// thrown away.
fn shots() -> (PathBuf, Option<tempfile::TempDir>) {
    if std::env::var("UPDATE_SCREENSHOTS").is_ok_and(|v| v == "1") {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/console");
        (dir, None)
    } else {
        let t = tempfile::tempdir().unwrap();
        (t.path().to_owned(), Some(t))
    }
}

async fn server() -> TestServer {
    TestServer::builder()
        .args(|a| a.queue_private_targets = Some(PrivateTargetsArg::Allow))
        .start()
        .await
}

/// Sign in with the keyboard alone: the token field has the focus, Enter submits.
async fn sign_in(b: &Browser, s: &TestServer) {
    b.goto(&s.url("/_console/")).await;
    b.find("#token").await;
    b.keys(&format!("{}\u{E007}", s.admin_token())).await;
    b.find("#version").await;
}

/// A token signed with the key in a connection string `cloud://key:secret@host/app`.
fn token_of(cs: &str) -> String {
    let rest = cs.strip_prefix("cloud://").unwrap();
    let (creds, _) = rest.split_once('@').unwrap();
    let (key, secret) = creds.split_once(':').unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    quintet_core::jwt::sign_hs256(
        secret.as_bytes(),
        &json!({"sub": key, "iat": now, "exp": now + 600}),
    )
}

#[tokio::test]
async fn a_wrong_admin_token_shows_nothing() {
    let s = server().await;
    let Some(b) = Browser::start(1280, 800).await else {
        return;
    };
    let (dir, _keep) = shots();
    b.goto(&s.url("/_console/")).await;
    b.fill("#token", "not-the-admin-token").await;
    b.click("form.signin button[type=submit]").await;
    b.wait_text("That token is not valid").await;
    assert!(b.try_find("nav.nav").await.is_none());
    let text = b.page_text().await;
    for hidden in ["Overview", "Accounts", "Sign out", "Version"] {
        assert!(!text.contains(hidden), "{hidden} shown: {text}");
    }
    // Nothing of the token stays in the tab, the URL or a cookie.
    let left = b
        .exec(
            "return [sessionStorage.length, document.cookie, location.href]",
            json!([]),
        )
        .await;
    assert_eq!(left[0], 0);
    assert_eq!(left[1], "");
    assert!(!left[2].as_str().unwrap().contains("not-the-admin-token"));
    b.screenshot(&dir.join("sign-in.png")).await;
    b.quit().await;
}

#[tokio::test]
async fn a_person_runs_every_service_from_the_console() {
    let s = server().await;
    let Some(b) = Browser::start(1280, 800).await else {
        return;
    };
    let (dir, _keep) = shots();
    let page = |p: &str| s.url(&format!("/_console/#/{p}"));
    sign_in(&b, &s).await;
    b.wait_text("embedded: SQLite in the data directory").await;
    // The token is in the tab's session storage, not in the URL or a cookie.
    let stored = b
        .exec("return [sessionStorage.getItem('quintet.console.token'), document.cookie, location.href]", json!([]))
        .await;
    assert_eq!(stored[0], s.admin_token());
    assert_eq!(stored[1], "");
    assert!(!stored[2].as_str().unwrap().contains(s.admin_token()));
    b.wait_text("Requests/s").await;
    b.screenshot(&dir.join("overview.png")).await;

    // An account, then an application of it.
    b.goto(&page("accounts")).await;
    b.wait_text("No accounts yet").await;
    b.fill("form[aria-label='create an account'] [name=name]", "acme")
        .await;
    b.click_text("button", "Create account").await;
    b.wait_text("0 of 3 applications").await;
    b.goto(&page("apps")).await;
    b.fill(
        "form[aria-label='create an application'] [name=name]",
        "shop",
    )
    .await;
    b.click_text("button", "Create application").await;
    b.wait_text("none yet: create some on the Instances page")
        .await;
    b.goto(&page("accounts")).await;
    b.wait_text("1 of 3 applications").await;
    b.screenshot(&dir.join("accounts.png")).await;

    // A key: shown once; the list redacts it; Copy puts the full string on the clipboard.
    b.grant_clipboard().await;
    b.goto(&page("keys?app=shop")).await;
    b.wait_text("has no keys").await;
    b.click("#create-key").await;
    b.find("#new-cs").await;
    let cs = b
        .exec(
            "return document.querySelector('#new-cs').textContent",
            json!([]),
        )
        .await
        .as_str()
        .unwrap()
        .to_owned();
    assert!(cs.starts_with("cloud://"), "{cs}");
    let secret = b
        .exec(
            "return document.querySelector('#new-secret').textContent",
            json!([]),
        )
        .await
        .as_str()
        .unwrap()
        .to_owned();
    b.wait_text("****").await;
    b.screenshot(&dir.join("keys-created.png")).await;
    b.click_text("button", "Done, hide it").await;
    let text = b.page_text().await;
    assert!(!text.contains(&secret), "the secret stays on the page");
    assert!(
        text.contains(&format!("****{}", &secret[secret.len() - 4..])),
        "{text}"
    );
    b.click("button[data-copy]").await;
    b.wait_text("Copied to the clipboard").await;
    assert_eq!(b.clipboard().await, cs);
    assert!(!b.page_text().await.contains(&secret));
    b.screenshot(&dir.join("keys.png")).await;

    // Instances of every type; the queue's worker fails every job with 500.
    let worker = Worker::start(Answer::Status(500, "worker exploded".into())).await;
    for (kind, name, extra) in [
        ("data", "movies", vec![]),
        ("cache", "sessions", vec![]),
        (
            "search",
            "films",
            vec![("fields", "title, plot"), ("storeFields", "title")],
        ),
        ("queue", "jobs", vec![("target", worker.url())]),
        ("storage", "files", vec![]),
    ] {
        b.goto(&page(&format!("instances?app=shop&type={kind}")))
            .await;
        b.find("#new-type").await;
        b.fill("form[aria-label='create an instance'] [name=name]", name)
            .await;
        for (field, value) in extra {
            b.fill(
                &format!("form[aria-label='create an instance'] [name={field}]"),
                value,
            )
            .await;
        }
        b.click_text("button", "Create instance").await;
        b.wait_text(&format!("{kind} instance “{name}” created"))
            .await;
    }
    b.screenshot(&dir.join("instances.png")).await;

    // The key works from a plain request.
    let token = token_of(&cs);
    let r = s
        .send(
            s.request(Method::POST, "/shop/data/movies")
                .bearer_auth(&token)
                .json(&json!({"_id": "alien", "title": "Alien", "year": 1979})),
        )
        .await
        .expect(201);
    assert_eq!(r.body["id"], "alien");
    for (id, year) in [("brazil", 1985), ("heat", 1995)] {
        s.send(
            s.request(Method::POST, "/shop/data/movies")
                .bearer_auth(&token)
                .json(&json!({"_id": id, "title": id, "year": year})),
        )
        .await
        .expect(201);
    }

    // Data: the documents, a query checked before it is sent, an edit.
    b.goto(&page("data?app=shop&instance=movies")).await;
    b.wait_text("alien").await;
    b.fill("#mango", "{\"selector\": ").await;
    b.wait_text("Not valid JSON").await;
    b.fill(
        "#mango",
        r#"{"selector": {"year": {"$gt": 1980}}, "sort": ["_id"]}"#,
    )
    .await;
    b.click("#run-query").await;
    b.wait_text("2 document(s)").await;
    b.screenshot(&dir.join("data.png")).await;
    b.click_text("button.link", "alien").await;
    b.fill(
        "#doc-json",
        r#"{"_id": "alien", "title": "Alien", "year": 1979, "seen": true}"#,
    )
    .await;
    b.click_text("#doc-editor button", "Save").await;
    b.wait_text("Document alien saved").await;
    let r = s
        .send(
            s.request(Method::GET, "/shop/data/movies/alien")
                .bearer_auth(&token),
        )
        .await;
    assert_eq!(r.body["doc"]["seen"], true);

    // Cache: set with a TTL, query by pattern, view.
    b.goto(&page("cache?app=shop&instance=sessions")).await;
    b.wait_text("No entries yet").await;
    b.fill("form[aria-label='set an entry'] [name=key]", "user-1")
        .await;
    b.fill(
        "form[aria-label='set an entry'] [name=value]",
        r#"{"name": "Ada"}"#,
    )
    .await;
    b.fill("form[aria-label='set an entry'] [name=ttl]", "10m")
        .await;
    b.click_text("button", "Set").await;
    b.wait_text("Entry user-1 set").await;
    b.goto(&page("cache?app=shop&instance=sessions&pattern=user-*"))
        .await;
    b.click_text("button.link", "user-1").await;
    b.wait_text("Entry user-1").await;
    b.wait_text("\"Ada\"").await;
    b.wait_text("Expires in ").await;
    b.screenshot(&dir.join("cache.png")).await;

    // Search: add a document, find it despite a typo, with its score and terms.
    b.goto(&page("search?app=shop&instance=films")).await;
    b.fill("form[aria-label='add a document'] [name=key]", "gb")
        .await;
    b.fill(
        "form[aria-label='add a document'] [name=doc]",
        r#"{"title": "Ghostbusters", "plot": "Three parapsychologists catch ghosts."}"#,
    )
    .await;
    b.click_text("button", "Add document").await;
    b.wait_text("Document gb added").await;
    b.goto(&page("search?app=shop&instance=films&q=ghostbustres"))
        .await;
    b.wait_text("ghostbusters").await;
    b.screenshot(&dir.join("search.png")).await;

    // Queue: a test job fails against the worker; its answer shows; retried, it is done.
    b.goto(&page("queue?app=shop&instance=jobs")).await;
    b.wait_text("Deliveries are not signed").await;
    b.click("#send-test").await;
    worker.wait_for(1).await;
    eventually("the job failed", || async {
        let r = s
            .send(
                s.request(Method::GET, "/shop/queue/jobs/_jobs?status=ERROR")
                    .bearer_auth(&token),
            )
            .await;
        r.body["jobs"].as_array().is_some_and(|j| j.len() == 1)
    })
    .await;
    b.goto(&page("queue?app=shop&instance=jobs&status=READY"))
        .await;
    b.goto(&page("queue?app=shop&instance=jobs&status=ERROR"))
        .await;
    // A worker at a private address: its status is recorded, not its body.
    b.wait_text("the worker answered 500").await;
    b.screenshot(&dir.join("queue.png")).await;
    worker.set_answer(Answer::Status(200, "{}".into()));
    b.click("button[data-retry]").await;
    worker.wait_for(2).await;
    eventually("the retried job is done", || async {
        let r = s
            .send(
                s.request(Method::GET, "/shop/queue/jobs/_jobs")
                    .bearer_auth(&token),
            )
            .await;
        r.body["jobs"].as_array().is_some_and(Vec::is_empty)
    })
    .await;

    // Storage: upload with progress, into a folder; download; a pre-signed URL.
    let bytes: Vec<u8> = (0..600_000u32).map(|i| (i % 251) as u8).collect();
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("report.bin");
    std::fs::write(&file, &bytes).unwrap();
    b.goto(&page("storage?app=shop&instance=files")).await;
    b.wait_text("No objects yet").await;
    b.type_into("#upload-file", file.to_str().unwrap()).await;
    b.fill(
        "form[aria-label='upload a file'] [name=path]",
        "docs/report.bin",
    )
    .await;
    b.click_text("button", "Upload").await;
    b.wait_text("docs/report.bin uploaded").await;
    let progress = b
        .exec(
            "return document.querySelector('#upload-progress').value",
            json!([]),
        )
        .await;
    assert_eq!(progress, json!(1));
    b.wait_text("100%").await;
    b.click_text("button.link", "📁 docs/").await;
    b.wait_text("report.bin").await;
    b.screenshot(&dir.join("storage.png")).await;
    b.click("button[data-download]").await;
    assert_eq!(b.downloaded("report.bin").await, bytes);
    b.click("button[data-presign]").await;
    b.wait_text("Pre-signed URL copied").await;
    let url = b.clipboard().await;
    assert!(url.contains("/_presigned/"), "{url}");
    let got = s.http().get(&url).send().await.unwrap();
    assert_eq!(got.status(), 200);
    assert_eq!(got.bytes().await.unwrap().to_vec(), bytes);

    // Revoke the key: asked first; then requests with it are refused.
    b.goto(&page("keys?app=shop")).await;
    b.click("button[data-revoke]").await;
    b.click_text("dialog button", "Revoke").await;
    b.wait_text("revoked").await;
    s.send(
        s.request(Method::GET, "/shop/data/movies/alien")
            .bearer_auth(&token),
    )
    .await
    .expect(401);

    // A phone's screen.
    b.set_size(390, 844).await;
    b.goto(&page("overview")).await;
    b.find("#version").await;
    b.screenshot(&dir.join("overview-phone.png")).await;
    b.goto(&page("keys?app=shop")).await;
    b.wait_text("****").await;
    b.screenshot(&dir.join("keys-phone.png")).await;

    // Signing out forgets the token.
    b.click("#signout").await;
    b.find("#token").await;
    let left = b.exec("return sessionStorage.length", json!([])).await;
    assert_eq!(left, 0);
    b.quit().await;
}

#[tokio::test]
async fn an_account_signs_in_to_its_own_applications() {
    let s = server().await;
    for name in ["acme", "rival"] {
        s.admin(
            Method::POST,
            "/_admin/accounts",
            Some(json!({"name": name})),
        )
        .await
        .expect(201);
    }
    s.admin(
        Method::POST,
        "/_admin/apps",
        Some(json!({"name": "rival-shop", "account": "rival"})),
    )
    .await
    .expect(201);
    let Some(b) = Browser::start(1280, 800).await else {
        return;
    };
    let (dir, _keep) = shots();
    let page = |p: &str| s.url(&format!("/_console/#/{p}"));

    // The admin issues acme a token on the Accounts page.
    sign_in(&b, &s).await;
    b.goto(&page("accounts")).await;
    b.click("button[data-tokens-of=acme]").await;
    b.wait_text("No tokens: issue one").await;
    b.click("button[data-issue=acme]").await;
    b.find("#new-account-token").await;
    let token = b
        .exec(
            "return document.querySelector('#new-account-token').textContent",
            json!([]),
        )
        .await
        .as_str()
        .unwrap()
        .to_owned();
    assert!(token.starts_with("qat_"), "{token}");
    b.screenshot(&dir.join("account-tokens.png")).await;
    b.click("#signout").await;

    // acme signs in with it: no overview, its own account and applications only.
    b.fill("#token", &token).await;
    b.click("form.signin button[type=submit]").await;
    b.wait_text("account acme").await;
    assert!(b.try_find("a[data-page=overview]").await.is_none());
    // Backups are the node's: no entry, and their address shows the first page instead.
    assert!(b.try_find("a[data-page=backups]").await.is_none());
    b.goto(&page("backups")).await;
    b.find(".page[data-page=accounts]").await;
    assert!(!b.page_text().await.contains("Back up now"));
    b.goto(&page("apps")).await;
    b.fill(
        "form[aria-label='create an application'] [name=name]",
        "shop",
    )
    .await;
    b.click_text("button", "Create application").await;
    b.wait_text("Application “shop” created").await;
    b.wait_text("none yet: create some on the Instances page")
        .await;
    assert!(!b.page_text().await.contains("rival-shop"));
    b.screenshot(&dir.join("account-apps.png")).await;
    b.goto(&page("accounts")).await;
    b.wait_text("Your account").await;
    b.wait_text("1 of 3 applications").await;
    assert!(!b.page_text().await.contains("rival"));
    b.goto(&page("keys?app=shop")).await;
    b.click("#create-key").await;
    b.find("#new-cs").await;
    // Another account's application does not exist for it.
    b.goto(&page("keys?app=rival-shop")).await;
    b.wait_text("application \"rival-shop\" does not exist")
        .await;

    // Revoked by the admin: the next call signs the page out.
    let id = token.split_once('.').unwrap().0;
    s.admin(
        Method::DELETE,
        &format!("/_admin/accounts/acme/tokens/{id}"),
        None,
    )
    .await
    .expect(200);
    b.goto(&page("apps")).await;
    b.wait_text("no longer accepted").await;
    b.find("#token").await;
    b.quit().await;
}

#[tokio::test]
async fn the_admin_takes_and_deletes_a_backup_from_the_console() {
    let s = server().await;
    let Some(b) = Browser::start(1280, 800).await else {
        return;
    };
    let (dir, _keep) = shots();
    let page = |p: &str| s.url(&format!("/_console/#/{p}"));
    sign_in(&b, &s).await;
    b.goto(&page("backups")).await;
    b.wait_text("No backups yet").await;

    // A name the server refuses: its message is shown where the form is.
    b.fill("#backup-name", "-bad").await;
    b.click_text("button", "Back up now").await;
    b.wait_text("is not a backup name").await;

    b.fill("#backup-name", "before-upgrade").await;
    b.click_text("button", "Back up now").await;
    b.wait_text("Backup before-upgrade complete").await;
    b.find("[data-state=complete]").await;
    let r = s
        .admin(Method::GET, "/_admin/backups", None)
        .await
        .expect(200);
    assert_eq!(r.body["backups"][0]["name"], "before-upgrade");
    assert_eq!(r.body["backups"][0]["state"], "complete");
    b.screenshot(&dir.join("backups.png")).await;

    // Deleting asks first; cancelled, the backup stays.
    b.click("button[data-delete=before-upgrade]").await;
    b.click_text("dialog button", "Cancel").await;
    b.find("button[data-delete=before-upgrade]").await;
    b.click("button[data-delete=before-upgrade]").await;
    b.click_text("dialog button", "Delete").await;
    b.wait_text("Backup before-upgrade deleted").await;
    b.wait_text("No backups yet").await;
    let r = s
        .admin(Method::GET, "/_admin/backups", None)
        .await
        .expect(200);
    assert_eq!(r.body["backups"], json!([]));

    // With no name, the server names it by the time.
    b.click_text("button", "Back up now").await;
    b.wait_text("Backup backup-").await;
    b.find("[data-state=complete]").await;
    b.quit().await;
}

#[tokio::test]
async fn the_data_page_follows_live_changes() {
    // One stream per client: while the page follows the feed with the application's key,
    // another stream of that key is refused, so a freed place shows the page's is closed.
    let s = TestServer::builder()
        .args(|a| a.feed_max_streams_per_client = Some(1))
        .start()
        .await;
    let key = s.new_app().await;
    let token = token_of(&key.connection_string);
    let app = &key.app;
    s.send(
        s.request(Method::PUT, &format!("/{app}/data/movies"))
            .bearer_auth(&token),
    )
    .await
    .expect(201);
    let Some(b) = Browser::start(1280, 800).await else {
        return;
    };
    let (dir, _keep) = shots();
    let page = |p: &str| s.url(&format!("/_console/#/{p}"));
    sign_in(&b, &s).await;
    b.goto(&page(&format!("data?app={app}&instance=movies")))
        .await;
    b.wait_text("No documents yet").await;
    b.click("#live-toggle").await;
    b.wait_text("Following this instance’s changes").await;
    let probe = || {
        s.request(
            Method::GET,
            &format!("/{app}/data/movies/_changes?feed=longpoll&timeout=1"),
        )
        .bearer_auth(&token)
    };
    s.send(probe()).await.expect(429);

    // A write through the API appears as a change, and the document list refreshes.
    s.send(
        s.request(Method::POST, &format!("/{app}/data/movies"))
            .bearer_auth(&token)
            .json(&json!({"_id": "alien", "title": "Alien", "year": 1979})),
    )
    .await
    .expect(201);
    b.find("#live-changes li[data-id=alien]").await;
    b.find("button.link").await;
    b.wait_text("Alien").await;
    s.send(
        s.request(Method::DELETE, &format!("/{app}/data/movies/alien"))
            .bearer_auth(&token),
    )
    .await
    .expect(200);
    b.wait_text("deleted").await;
    b.wait_text("No documents yet").await;
    s.send(
        s.request(Method::POST, &format!("/{app}/data/movies"))
            .bearer_auth(&token)
            .json(&json!({"_id": "heat", "title": "Heat", "year": 1995})),
    )
    .await
    .expect(201);
    b.find("#live-changes li[data-id=heat]").await;
    b.wait_text("Heat").await;
    let changes = b
        .exec(
            "return [...document.querySelectorAll('#live-changes li')].map((li) => li.textContent)",
            json!([]),
        )
        .await;
    let changes = changes.as_array().unwrap();
    assert_eq!(changes.len(), 3, "{changes:?}");
    assert!(
        changes[0].as_str().unwrap().ends_with("heat written"),
        "{changes:?}"
    );
    assert!(
        changes[1].as_str().unwrap().ends_with("alien deleted"),
        "{changes:?}"
    );
    assert!(
        changes[2].as_str().unwrap().ends_with("alien written"),
        "{changes:?}"
    );
    b.screenshot(&dir.join("data-live.png")).await;

    // Toggled off, it says so and its stream is closed.
    b.click("#live-toggle").await;
    b.wait_text("Live: off").await;
    b.wait_text("Stopped: switch Live on").await;
    let freed = || async { s.send(probe()).await.status == 200 };
    eventually("Live off closes the stream", freed).await;

    // Leaving the page closes it too.
    b.click("#live-toggle").await;
    b.wait_text("Following this instance’s changes").await;
    s.send(probe()).await.expect(429);
    b.goto(&page("overview")).await;
    b.find("#version").await;
    eventually("leaving the page closes the stream", freed).await;
    b.quit().await;
}

#[tokio::test]
async fn the_admin_exports_and_imports_an_application_from_the_console() {
    let s = server().await;
    let key = s.new_app().await;
    let token = token_of(&key.connection_string);
    let app = &key.app;
    s.send(
        s.request(Method::PUT, &format!("/{app}/data/movies"))
            .bearer_auth(&token),
    )
    .await
    .expect(201);
    for (id, year) in [("alien", 1979), ("heat", 1995)] {
        s.send(
            s.request(Method::POST, &format!("/{app}/data/movies"))
                .bearer_auth(&token)
                .json(&json!({"_id": id, "year": year})),
        )
        .await
        .expect(201);
    }
    let Some(b) = Browser::start(1280, 800).await else {
        return;
    };
    let (dir, _keep) = shots();
    let page = |p: &str| s.url(&format!("/_console/#/{p}"));
    sign_in(&b, &s).await;

    // Export: the file is a whole archive (it ends with its end record).
    b.goto(&page("apps")).await;
    b.click(&format!("button[data-export={app}]")).await;
    b.wait_text(&format!("Exported {app}: {app}.qta")).await;
    let archive = b.downloaded(&format!("{app}.qta")).await;
    assert!(
        archive.starts_with(
            format!("QUINTET-ARCHIVE {}\n", quintet_core::archive::VERSION).as_bytes()
        )
    );
    let text = String::from_utf8_lossy(&archive);
    assert!(text.contains("\nend "), "no end record");
    assert!(text.contains(r#""_id":"heat""#));
    let file = b.downloads.path().join(format!("{app}.qta"));

    // Import it as a copy beside the original: the report shows what came in.
    let copy = format!("{app}-copy");
    b.type_into("#import-file", file.to_str().unwrap()).await;
    b.fill("#import-name", &copy).await;
    b.click_text("button", "Import").await;
    b.wait_text("Imported.").await;
    b.find("#import-report").await;
    b.wait_text(&format!("{copy} / data / movies")).await;
    b.wait_text("equal").await;
    b.exec(
        "document.querySelector('#import-report').scrollIntoView({block: 'center'})",
        json!([]),
    )
    .await;
    b.screenshot(&dir.join("import.png")).await;
    let r = s
        .admin(Method::GET, &format!("/_admin/apps/{copy}/instances"), None)
        .await
        .expect(200);
    assert_eq!(r.body["instances"][0]["name"], "movies");
    let copied = s.new_key(&key.account, &copy).await;
    let r = s
        .send(
            s.request(Method::GET, &format!("/{copy}/data/movies/heat"))
                .bearer_auth(token_of(&copied.connection_string)),
        )
        .await
        .expect(200);
    assert_eq!(r.body["doc"]["year"], 1995);
    // The new application is in the list.
    b.find(&format!("button[data-export={copy}]")).await;

    // The same name again: the server's 409 message, and nothing changes.
    b.type_into("#import-file", file.to_str().unwrap()).await;
    b.fill("#import-name", &copy).await;
    b.click_text("button", "Import").await;
    b.wait_text(&format!("application \"{copy}\" exists on this server"))
        .await;
    assert!(b.try_find("#import-report").await.is_none());

    // A file that is no archive: the server's 422 message; no application is created.
    let tmp = tempfile::tempdir().unwrap();
    let bad = tmp.path().join("notes.qta");
    std::fs::write(&bad, "these are my notes, not an archive\n").unwrap();
    b.type_into("#import-file", bad.to_str().unwrap()).await;
    b.fill("#import-name", "from-notes").await;
    b.click_text("button", "Import").await;
    b.wait_text("the archive is damaged or not a quintet archive")
        .await;
    b.exec(
        "document.querySelector(\"form[aria-label='import an archive']\").scrollIntoView({block: 'center'})",
        json!([]),
    )
    .await;
    b.screenshot(&dir.join("import-error.png")).await;
    s.admin(Method::GET, "/_admin/apps/from-notes", None)
        .await
        .expect(404);
    b.quit().await;
}

/// The `html` example of `docs/feed.md` ("In a browser: EventSource"), as written there.
fn feed_doc_page() -> String {
    let doc = include_str!("../../../../docs/feed.md");
    let section = doc
        .split("## In a browser: EventSource")
        .nth(1)
        .expect("docs/feed.md has its EventSource section");
    let html = section
        .split("```html\n")
        .nth(1)
        .and_then(|rest| rest.split("\n```").next())
        .expect("the section has an html example");
    html.to_owned()
}

/// Serve `page` to every request on `listener` (a page of another origin than the node's),
/// plain HTTP/1.1, one answer per connection.
fn serve_page(listener: tokio::net::TcpListener, page: String) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let page = page.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match conn.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let answer = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/html; charset=utf-8\r\n\
                     content-length: {}\r\nconnection: close\r\n\r\n{page}",
                    page.len()
                );
                let _ = conn.write_all(answer.as_bytes()).await;
                let _ = conn.shutdown().await;
            });
        }
    });
}

#[tokio::test]
async fn the_feed_docs_eventsource_page_shows_writes_as_they_commit() {
    // The page of docs/feed.md, served from another origin (as `python3 -m http.server`
    // would) to a node started with `--cors-origins` for it, follows a domain-form
    // instance through a real EventSource.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let origin = format!("http://localhost:{}", listener.local_addr().unwrap().port());
    let s = TestServer::builder()
        .args(|a| a.cors_origins = Some(vec![origin.clone()]))
        .start()
        .await;
    s.create("data", "movies", None).await;
    let page = feed_doc_page();
    assert!(page.contains("new EventSource("), "{page}");
    let node = s.url("");
    serve_page(
        listener,
        page.replace("http://localhost:6363", node.trim_end_matches('/')),
    );
    let Some(b) = Browser::start(1280, 800).await else {
        return;
    };
    b.goto(&format!("{origin}/")).await;
    // The stream is open (`since=now`: only writes after this show).
    eventually("the EventSource is open", || async {
        b.exec(
            "return typeof feed !== 'undefined' && feed instanceof EventSource && feed.readyState",
            json!([]),
        )
        .await
            == json!(1)
    })
    .await;
    assert!(
        b.page_text().await.trim().is_empty(),
        "nothing before a write"
    );

    s.post("/data/movies", json!({"_id": "alien", "year": 1979}))
        .await
        .expect(201);
    b.wait_text(r#"alien {"_id":"alien","year":1979}"#).await;
    s.delete("/data/movies/alien").await.expect(200);
    b.wait_text("alien deleted").await;
    let items = b
        .exec(
            "return [...document.querySelectorAll('#changes li')].map((li) => li.textContent)",
            json!([]),
        )
        .await;
    let items = items.as_array().unwrap();
    assert_eq!(items.len(), 2, "{items:?}");
    // Each line starts with the change's sequence: the deletion's is the feed's last.
    let r = s.get("/data/movies/_changes").await.expect(200);
    let last = r.body["last_seq"].as_str().unwrap();
    assert_eq!(
        items[1].as_str().unwrap(),
        format!("{last} alien deleted"),
        "{items:?}"
    );
    assert_ne!(items[0].as_str().unwrap().split(' ').next(), Some(last));
    // The stream stayed the same EventSource: it did not reconnect to get them.
    let state = b
        .exec("return [feed.readyState, feed.url]", json!([]))
        .await;
    assert_eq!(state[0], 1);
    assert!(
        state[1].as_str().unwrap().contains("feed=eventsource"),
        "{state}"
    );
    b.quit().await;
}

#[tokio::test]
async fn the_queue_page_follows_live_job_events() {
    let s = server().await;
    let w = Worker::start(Answer::Status(422, "no recipient".into())).await;
    let key = s.new_app().await;
    let token = token_of(&key.connection_string);
    let app = &key.app;
    s.send(
        s.request(Method::PUT, &format!("/{app}/queue/mail"))
            .bearer_auth(&token)
            .json(&json!({"target": w.url()})),
    )
    .await
    .expect(201);
    let Some(b) = Browser::start(1280, 800).await else {
        return;
    };
    let (dir, _keep) = shots();
    sign_in(&b, &s).await;
    b.goto(&s.url(&format!("/_console/#/queue?app={app}&instance=mail")))
        .await;
    b.wait_text("No failed jobs").await;
    b.click("#live-toggle").await;
    b.wait_text("Following this queue’s jobs").await;

    // A job enqueued through the API appears as it is enqueued and as it fails, and the
    // list of failed jobs refreshes.
    let r = s
        .send(
            s.request(Method::POST, &format!("/{app}/queue/mail"))
                .bearer_auth(&token)
                .json(&json!({"to": "nobody"})),
        )
        .await
        .expect(201);
    let id = r.body["id"].as_str().unwrap().to_owned();
    b.find(&format!(
        "#live-changes li[data-id='{id}'][data-event=ready]"
    ))
    .await;
    b.find(&format!(
        "#live-changes li[data-id='{id}'][data-event=error]"
    ))
    .await;
    b.find(&format!("[data-retry='{id}']")).await;
    // The worker is on loopback, so its body is not recorded; the status is.
    b.wait_text("the worker answered 422").await;
    b.screenshot(&dir.join("queue-live.png")).await;

    // Cancelled through the API: the event shows, and the job leaves the list.
    s.send(
        s.request(Method::POST, &format!("/{app}/queue/mail/{id}/_cancel"))
            .bearer_auth(&token),
    )
    .await
    .expect(200);
    b.find(&format!(
        "#live-changes li[data-id='{id}'][data-event=cancelled]"
    ))
    .await;
    b.wait_text("No failed jobs").await;
    b.quit().await;
}

#[tokio::test]
async fn the_console_pages_admin_lists_on_the_server() {
    // 23 accounts: a first page of 20 and a second of 3, each asked of the API with
    // `limit` (and `after` for the second), not cut from a whole list in the page.
    let s = server().await;
    for i in 1..=23 {
        s.admin(
            Method::POST,
            "/_admin/accounts",
            Some(json!({"name": format!("acct-{i:02}")})),
        )
        .await
        .expect(201);
    }
    let Some(b) = Browser::start(1280, 800).await else {
        return;
    };
    sign_in(&b, &s).await;
    b.goto(&s.url("/_console/#/accounts")).await;
    b.wait_text("acct-20").await;
    assert!(!b.page_text().await.contains("acct-21"));
    b.wait_text("page 1").await;
    b.click_text("button", "Next →").await;
    b.wait_text("acct-23").await;
    b.wait_text("page 2").await;
    let text = b.page_text().await;
    assert!(!text.contains("acct-20"), "{text}");
    let asked = b
        .exec(
            "return performance.getEntriesByType('resource').map((e) => e.name)",
            json!([]),
        )
        .await;
    let asked: Vec<&str> = asked
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|u| u.as_str())
        .filter(|u| u.contains("/_admin/accounts"))
        .collect();
    assert!(
        asked
            .iter()
            .any(|u| u.ends_with("/_admin/accounts?limit=20")),
        "{asked:?}"
    );
    assert!(
        asked
            .iter()
            .any(|u| u.ends_with("/_admin/accounts?limit=20&after=acct-20")),
        "{asked:?}"
    );
    b.click_text("button", "← Previous").await;
    b.wait_text("acct-01").await;
    b.quit().await;
}
