//! Secrets at rest, with the real binary: what a copy of the data directory gives away
//! (nothing that authenticates), and rotating the master key.

use crate::BIN;
use std::{path::Path, process::Command};

use quintet_core::keyring::MasterKey;
use quintet_testkit::Process;
use reqwest::Method;
use serde_json::{Value, json};

/// Every byte of every file under `dir`.
fn all_bytes(dir: &Path) -> Vec<u8> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(all_bytes(&path));
        } else {
            out.extend(std::fs::read(&path).unwrap_or_default());
        }
    }
    out
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

fn with_key(key: &MasterKey) -> Vec<(String, String)> {
    vec![("QUINTET_MASTER_KEY".into(), key.to_text())]
}

fn spawn(data: &Path, env: &[(String, String)], extra: &[&str]) -> Process {
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    Process::spawn_with_env(Path::new(BIN), data, extra, &env)
}

/// An application with a key and a signed queue; returns `(key, secret, admin token)`.
async fn seed(p: &Process, admin: &str) -> (String, String) {
    let call = |method: Method, path: &str, body: Option<Value>| {
        let req = p.request(method, path).bearer_auth(admin);
        match body {
            Some(b) => req.json(&b),
            None => req,
        }
    };
    p.send(call(
        Method::POST,
        "/_admin/accounts",
        Some(json!({"name": "acme"})),
    ))
    .await
    .expect(201);
    p.send(call(
        Method::POST,
        "/_admin/apps",
        Some(json!({"name": "shop", "account": "acme"})),
    ))
    .await
    .expect(201);
    let r = p
        .send(call(Method::POST, "/_admin/apps/shop/keys", None))
        .await
        .expect(201);
    p.put(
        "/queue/jobs",
        Some(json!({"target": "https://worker.example/hook", "secret": "queue-signing-secret-7"})),
    )
    .await
    .expect(201);
    (
        r.body["key"].as_str().unwrap().to_owned(),
        r.body["secret"].as_str().unwrap().to_owned(),
    )
}

fn admin_token_of(key: &MasterKey) -> String {
    let out = Command::new(BIN)
        .args(["admin-token", "--master-key", &key.to_text()])
        .env_remove("QUINTET_MASTER_KEY_FILE")
        .output()
        .unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

#[tokio::test]
async fn a_copy_of_the_data_directory_holds_no_usable_secret() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let key = MasterKey::generate().unwrap();
    let admin = admin_token_of(&key);
    let mut p = spawn(&data, &with_key(&key), &[]);
    let (_, secret) = seed(&p, &admin).await;
    p.signal_and_wait("TERM", std::time::Duration::from_secs(30));
    let bytes = all_bytes(&data);
    for plain in [
        secret.as_str(),
        "queue-signing-secret-7",
        admin.as_str(),
        &key.to_text(),
    ] {
        assert!(!contains(&bytes, plain), "{plain} is in the data directory");
    }
    // The secrets come back through the API (sealed, not hashed).
    p.restart();
    let r = p
        .send(
            p.request(Method::GET, "/_admin/apps/shop/keys")
                .bearer_auth(&admin),
        )
        .await
        .expect(200);
    let listed = r.body["keys"][0]["key"].as_str().unwrap().to_owned();
    let r = p
        .send(
            p.request(Method::GET, &format!("/_admin/apps/shop/keys/{listed}"))
                .bearer_auth(&admin),
        )
        .await
        .expect(200);
    assert_eq!(r.body["secret"], secret);
}

#[tokio::test]
async fn another_master_key_is_refused_and_a_rotation_reseals_everything() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let old = MasterKey::generate().unwrap();
    let new = MasterKey::generate().unwrap();
    let mut p = spawn(&data, &with_key(&old), &[]);
    let (key, secret) = seed(&p, &admin_token_of(&old)).await;
    p.signal_and_wait("TERM", std::time::Duration::from_secs(30));
    drop(p);

    // The new key alone cannot open what the old one sealed: the start is refused, naming
    // the key it needs.
    let out = Command::new(BIN)
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(&data)
        .env("QUINTET_MASTER_KEY", new.to_text())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("sealed with master key {}", old.id())),
        "{err}"
    );

    // The rotation: the new key with the old one as previous reseals at start…
    let old_file = dir.path().join("old.key");
    std::fs::write(&old_file, old.to_text()).unwrap();
    let mut p = spawn(
        &data,
        &with_key(&new),
        &["--previous-master-key-file", old_file.to_str().unwrap()],
    );
    p.signal_and_wait("TERM", std::time::Duration::from_secs(30));
    drop(p);
    // …so the new key alone starts from then on, and everything still works.
    let p = spawn(&data, &with_key(&new), &[]);
    let admin = admin_token_of(&new);
    let r = p
        .send(
            p.request(Method::GET, &format!("/_admin/apps/shop/keys/{key}"))
                .bearer_auth(&admin),
        )
        .await
        .expect(200);
    assert_eq!(r.body["secret"], secret);
    let exp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 600;
    let token = quintet_core::jwt::sign_hs256(secret.as_bytes(), &json!({"sub": key, "exp": exp}));
    p.send(
        p.request(Method::PUT, "/shop/data/default")
            .bearer_auth(token),
    )
    .await
    .expect(201);
    // The old admin token is gone with the old key.
    p.send(
        p.request(Method::GET, "/_admin/apps")
            .bearer_auth(admin_token_of(&old)),
    )
    .await
    .expect(401);
}
