//! The admin commands (`quintet account|app|key`) against a real server, and the start-up
//! rules of authentication and TLS, with the real binary.

use std::{
    path::Path,
    process::{Command, Output},
};

use quintet_testkit::{Client, Process, TestCerts};
use reqwest::Method;
use serde_json::{Value, json};

use crate::BIN;

/// Run `quintet args…` with none of the caller's `QUINTET_*` settings.
fn quintet(args: &[&str]) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.args(args);
    for var in [
        "QUINTET_URL",
        "QUINTET_ADMIN_TOKEN",
        "QUINTET_DATA_DIR",
        "QUINTET_CONFIG",
        "QUINTET_CA_CERT",
        "QUINTET_AUTH",
        "QUINTET_LISTEN",
        "QUINTET_MASTER_KEY",
        "QUINTET_MASTER_KEY_FILE",
    ] {
        cmd.env_remove(var);
    }
    cmd.output().unwrap()
}

/// The master key file of the server on `data` (beside it: never in the data directory).
fn key_file(data: &Path) -> String {
    data.parent()
        .unwrap()
        .join("master.key")
        .to_str()
        .unwrap()
        .to_owned()
}

/// Start the binary on `data` with its master key in [`key_file`].
fn spawn(data: &Path, extra: &[&str]) -> Process {
    Process::spawn_with_env(
        Path::new(BIN),
        data,
        extra,
        &[("QUINTET_MASTER_KEY_FILE", &key_file(data))],
    )
}

/// Run an admin command against `base` with the token derived from the master key of the
/// server on `data`; assert success; stdout.
fn ok(base: &str, data: &Path, args: &[&str]) -> String {
    let mut all = args.to_vec();
    let key = key_file(data);
    all.extend(["--url", base, "--master-key-file", &key]);
    let out = quintet(&all);
    assert!(
        out.status.success(),
        "quintet {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Like [`ok`], for a command that must fail; its stderr.
fn fails(base: &str, data: &Path, args: &[&str]) -> String {
    let mut all = args.to_vec();
    let key = key_file(data);
    all.extend(["--url", base, "--master-key-file", &key]);
    let out = quintet(&all);
    assert!(!out.status.success(), "quintet {args:?} succeeded");
    String::from_utf8(out.stderr).unwrap()
}

fn token_for(key: &str, secret: &str) -> String {
    let exp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 600;
    quintet_core::jwt::sign_hs256(secret.as_bytes(), &json!({"sub": key, "exp": exp}))
}

const TOKEN_LINE: &str = "quintet admin token (derived from the master key in ";

#[tokio::test]
async fn admin_commands_drive_a_running_server() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut p = spawn(&data, &[]);
    let base = p.url("");

    // The admin token, derived from the new master key, is printed once; `quintet
    // admin-token` prints it again from the key; nothing of it is in the data directory.
    let printed: Vec<String> = p
        .stdout_lines()
        .into_iter()
        .filter(|l| l.starts_with(TOKEN_LINE))
        .collect();
    assert_eq!(printed.len(), 1, "{printed:?}");
    let out = quintet(&["admin-token", "--master-key-file", &key_file(&data)]);
    let derived = String::from_utf8(out.stdout).unwrap();
    assert!(printed[0].ends_with(&format!("prints it again): {}", derived.trim())));
    assert!(!data.join("admin-token").exists());
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(Path::new(&key_file(&data))), 0o600);
        assert_eq!(mode(&data), 0o700);
        assert_eq!(mode(&data.join("registry.db")), 0o600, "umask 077");
    }

    assert_eq!(
        ok(
            &base,
            &data,
            &["account", "create", "acme", "--plan", "starter"]
        ),
        "created account acme on the starter plan (up to 3 applications)\n"
    );
    let list = ok(&base, &data, &["account", "list"]);
    let lines: Vec<&str> = list.lines().collect();
    assert!(
        lines[0].starts_with("NAME  PLAN     APPS  CREATED"),
        "{list}"
    );
    assert!(lines[1].starts_with("acme  starter  0/3  "), "{list}");
    assert_eq!(
        ok(
            &base,
            &data,
            &["app", "create", "shop", "--account", "acme"]
        ),
        "created application shop in account acme\nnext: quintet key create shop\n"
    );
    assert!(ok(&base, &data, &["account", "plan", "acme", "pro"]).contains("pro plan (1 of 10"));

    // The copy-paste path of the README: create a key, sign a token, call the app form.
    let created: Value =
        serde_json::from_str(&ok(&base, &data, &["key", "create", "shop", "--json"])).unwrap();
    let key = created["key"].as_str().unwrap();
    let secret = created["secret"].as_str().unwrap();
    let host = base.trim_start_matches("http://");
    assert_eq!(
        created["connectionString"],
        format!("cloud://{key}:{secret}@{host}/shop")
    );
    let put = || {
        p.request(Method::PUT, "/shop/data/default")
            .bearer_auth(token_for(key, secret))
    };
    p.send(put()).await.expect(201);
    // `quintet token` signs one from the connection string, for curl.
    let cs = created["connectionString"].as_str().unwrap();
    let out = quintet(&["token", cs]);
    assert!(out.status.success());
    let token = String::from_utf8(out.stdout).unwrap();
    p.send(
        p.request(Method::DELETE, "/shop/data/default")
            .bearer_auth(token.trim()),
    )
    .await
    .expect(200);
    p.send(put()).await.expect(201);

    // Over plain HTTP the connection string will not work with clients that use https: say so.
    let key_path = key_file(&data);
    let out = quintet(&[
        "key",
        "create",
        "shop",
        "--url",
        &base,
        "--master-key-file",
        &key_path,
    ]);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("warning: this server speaks plain HTTP"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let human = String::from_utf8(out.stdout).unwrap();
    assert!(human.starts_with("key:               qk_"), "{human}");
    assert!(human.contains("connection string: cloud://qk_"), "{human}");
    let keys = ok(&base, &data, &["key", "list", "shop"]);
    assert!(keys.starts_with("KEY "), "{keys}");
    assert!(
        keys.contains(key) && keys.contains(&format!("****{}", &secret[39..])),
        "{keys}"
    );
    assert!(!keys.contains(secret), "{keys}");
    let revealed = ok(&base, &data, &["key", "reveal", "shop", key]);
    assert!(
        revealed.contains(&format!("secret:            {secret}\n")),
        "{revealed}"
    );
    let instances = ok(&base, &data, &["app", "instances", "shop"]);
    assert!(
        instances
            .lines()
            .nth(1)
            .unwrap()
            .starts_with("data  default  "),
        "{instances}"
    );

    assert_eq!(
        ok(&base, &data, &["key", "revoke", "shop", key]),
        format!("revoked key {key} of application shop\n")
    );
    p.send(put()).await.expect(401);

    let err = fails(&base, &data, &["app", "delete", "shop"]);
    assert!(err.contains("run again with --yes"), "{err}");
    assert_eq!(
        ok(&base, &data, &["app", "delete", "shop", "--yes"]),
        "deleted application shop with its instances and keys\n"
    );
    assert_eq!(
        ok(&base, &data, &["app", "list"]),
        "NAME  ACCOUNT  CREATED\n"
    );
    let err = fails(&base, &data, &["key", "list", "shop"]);
    assert_eq!(
        err,
        "quintet: application \"shop\" does not exist; create it with POST /_admin/apps (HTTP 404)\n"
    );
    let err = fails(
        &base,
        &data,
        &["account", "list", "--admin-token", "a-wrong-admin-token"],
    );
    assert!(
        err.contains("the admin token is not valid") && err.contains("(HTTP 401)"),
        "{err}"
    );
    let err = fails(&base, &data, &["app", "create", "Bad", "--account", "acme"]);
    assert!(
        err.contains("application name \"Bad\" is not valid"),
        "{err}"
    );

    // Later starts derive the same token and print nothing.
    p.restart();
    let printed = p
        .stdout_lines()
        .into_iter()
        .filter(|l| l.starts_with(TOKEN_LINE))
        .count();
    assert_eq!(printed, 1);
    ok(&p.url(""), &data, &["account", "list"]);
}

#[tokio::test]
async fn account_token_commands_issue_list_and_revoke() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let p = spawn(&data, &[]);
    let base = p.url("");
    ok(&base, &data, &["account", "create", "acme"]);
    let out = ok(&base, &data, &["account", "token", "create", "acme"]);
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[0].starts_with("issued token qat_")
            && lines[0].ends_with("for account acme; it is shown only now:"),
        "{out}"
    );
    let token = lines[1];
    let id = token.split_once('.').unwrap().0;
    // The account signs in with it, for its own applications.
    let r = p
        .send(p.request(Method::GET, "/_admin/me").bearer_auth(token))
        .await
        .expect(200);
    assert_eq!(r.body["account"]["name"], "acme");
    let list = ok(&base, &data, &["account", "token", "list", "acme"]);
    assert!(list.starts_with("ID  "), "{list}");
    assert!(list.contains(id) && !list.contains(token), "{list}");
    assert_eq!(
        ok(&base, &data, &["account", "token", "revoke", "acme", id]),
        format!("revoked token {id} of account acme\n")
    );
    p.send(p.request(Method::GET, "/_admin/me").bearer_auth(token))
        .await
        .expect(401);
    let err = fails(
        &base,
        &data,
        &["account", "token", "revoke", "acme", "nope"],
    );
    assert!(
        err.contains("account token id \"nope\" is not valid"),
        "{err}"
    );
}

#[test]
fn admin_commands_without_a_token_say_where_to_find_one() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nowhere.key");
    let out = quintet(&[
        "account",
        "list",
        "--master-key-file",
        missing.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no admin token: pass --admin-token"), "{err}");
    assert!(err.contains("no master key at"), "{err}");
}

#[tokio::test]
async fn the_cli_says_when_https_meets_a_plain_http_server() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let p = spawn(&data, &[]);
    let https = p.url("").replacen("http://", "https://", 1);
    let err = fails(&https, &data, &["account", "list"]);
    assert!(
        err.contains(&format!(
            "the server at {https} speaks plain HTTP, not HTTPS: use {}",
            p.url("")
        )),
        "{err}"
    );
}

#[tokio::test]
async fn admin_commands_find_the_server_of_the_data_directory() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut p = spawn(&data, &[]);
    let key = key_file(&data);
    // No --url: the server recorded where it listens in its data directory.
    let out = quintet(&[
        "account",
        "create",
        "acme",
        "--data-dir",
        data.to_str().unwrap(),
        "--master-key-file",
        &key,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).is_empty());
    // A stopped server leaves no record: the command says where the token goes instead.
    p.signal_and_wait("TERM", std::time::Duration::from_secs(30));
    assert!(!data.join("server.json").exists());
    let out = quintet(&[
        "account",
        "list",
        "--data-dir",
        data.to_str().unwrap(),
        "--master-key-file",
        &key,
        "--listen",
        "127.0.0.1:9",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no running server recorded in") && err.contains("http://127.0.0.1:9"),
        "{err}"
    );
}

#[tokio::test]
async fn admin_commands_read_the_servers_config_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("quintet.toml");
    std::fs::write(&file, "admin_token = \"token-from-the-config-file\"\n").unwrap();
    let file = file.to_str().unwrap();
    let p = spawn(&dir.path().join("data"), &["--config", file]);
    let out = quintet(&["account", "list", "--config", file, "--url", &p.url("")]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn serve_refuses_a_public_address_without_auth() {
    let dir = tempfile::tempdir().unwrap();
    let out = quintet(&[
        "serve",
        "--listen",
        "0.0.0.0:0",
        "--data-dir",
        dir.path().to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("refusing to listen on 0.0.0.0:0 without authentication"),
        "{err}"
    );
    assert!(err.contains("--insecure-no-auth"), "{err}");
}

#[test]
fn bad_tls_files_fail_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.pem");
    let out = quintet(&[
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        dir.path().join("data").to_str().unwrap(),
        "--tls-cert",
        missing.to_str().unwrap(),
        "--tls-key",
        missing.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot read the TLS certificate"), "{err}");
    let not_pem = dir.path().join("not.pem");
    std::fs::write(&not_pem, "hello").unwrap();
    let out = quintet(&[
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        dir.path().join("data").to_str().unwrap(),
        "--tls-cert",
        not_pem.to_str().unwrap(),
        "--tls-key",
        not_pem.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("holds no CERTIFICATE block"), "{err}");
}

#[tokio::test]
async fn tls_with_the_real_binary_and_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let certs = TestCerts::generate(&dir.path().join("tls"));
    let data = dir.path().join("data");
    let p = spawn(
        &data,
        &[
            "--tls-cert",
            certs.cert.to_str().unwrap(),
            "--tls-key",
            certs.key.to_str().unwrap(),
        ],
    );
    let base = p.url("");
    assert!(base.starts_with("https://127.0.0.1:"), "{base}");
    let client = Client::with_ca(&base, certs.ca_pem.as_bytes());
    client.get("/_health").await.expect(200);

    let ca = certs.ca.to_str().unwrap();
    ok(
        &base,
        &data,
        &["account", "create", "acme", "--ca-cert", ca],
    );
    ok(
        &base,
        &data,
        &[
            "app",
            "create",
            "shop",
            "--account",
            "acme",
            "--ca-cert",
            ca,
        ],
    );
    let created: Value = serde_json::from_str(&ok(
        &base,
        &data,
        &["key", "create", "shop", "--json", "--ca-cert", ca],
    ))
    .unwrap();
    let (key, secret) = (
        created["key"].as_str().unwrap(),
        created["secret"].as_str().unwrap(),
    );
    client
        .send(
            client
                .request(Method::PUT, "/shop/cache/default")
                .bearer_auth(token_for(key, secret)),
        )
        .await
        .expect(201);
    // Without trusting the certificate the CLI cannot connect, and says where it tried.
    let err = fails(&base, &data, &["account", "list"]);
    assert!(
        err.contains(&format!("cannot reach the server at {base}")),
        "{err}"
    );
}

/// `quintet cert` writes what rustls (the CLI) and Node accept: a certificate signed by a
/// local authority with the hosts as subject alternative names. (A self-signed CA used as
/// the server's own, or a name in the CN only, fails in one of them.)
#[tokio::test]
async fn a_generated_certificate_works_with_rustls_and_node() {
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("tls");
    let out = quintet(&[
        "cert",
        "--host",
        "127.0.0.1",
        "--host",
        "localhost",
        "--dir",
        certs.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed = String::from_utf8(out.stdout).unwrap();
    assert!(printed.contains("NODE_EXTRA_CA_CERTS="), "{printed}");
    let (cert, key, ca) = (
        certs.join("cert.pem"),
        certs.join("key.pem"),
        certs.join("quintet-ca.pem"),
    );
    let data = dir.path().join("data");
    let p = spawn(
        &data,
        &[
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
        ],
    );
    let base = p.url("");
    // rustls, through the CLI.
    ok(
        &base,
        &data,
        &["account", "list", "--ca-cert", ca.to_str().unwrap()],
    );
    // rustls, by the name.
    let by_name = base.replace("127.0.0.1", "localhost");
    let client = Client::with_ca(&by_name, std::fs::read(&ca).unwrap().as_slice());
    client.get("/_health").await.expect(200);
    // Node's https.
    let script = format!(
        "require('https').get('{base}/_health', r => {{ console.log(r.statusCode); process.exit(0); }})\
         .on('error', e => {{ console.log(e.code); process.exit(1); }})"
    );
    let node = std::process::Command::new("node")
        .args(["-e", &script])
        .env("NODE_EXTRA_CA_CERTS", &ca)
        .output()
        .expect("node is installed (scripts/setup)");
    assert_eq!(
        String::from_utf8_lossy(&node.stdout).trim(),
        "200",
        "{}",
        String::from_utf8_lossy(&node.stderr)
    );
}

/// A first start that cannot listen used to make the admin token first and never show it:
/// the port comes first now, so the next start is the first one and shows it.
#[tokio::test]
async fn a_start_that_cannot_listen_makes_nothing_and_the_next_one_shows_the_token() {
    let dir = tempfile::tempdir().unwrap();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let data = dir.path().join("data");
    let key = key_file(&data);
    let out = std::process::Command::new(BIN)
        .args(["serve", "--listen", &port, "--data-dir"])
        .arg(&data)
        .env("QUINTET_MASTER_KEY_FILE", &key)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("cannot listen on 127.0.0.1:{port}")) && err.contains("--listen"),
        "{err}"
    );
    assert!(!Path::new(&key).exists(), "no master key was made");
    assert!(!data.exists(), "no data directory was made");
    let p = spawn(&data, &[]);
    assert!(
        p.stdout_lines().iter().any(|l| l.starts_with(TOKEN_LINE)),
        "{:?}",
        p.stdout_lines()
    );
}
