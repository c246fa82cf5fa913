//! `quintet account|app|key …`: the admin API of a running server from the command line.
//!
//! Where the server is and how to authenticate, highest precedence first:
//! - URL: `--url` / `QUINTET_URL`; else the server running on the data directory, as it
//!   recorded itself there ([`crate::discovery`]; `--data-dir` / `QUINTET_DATA_DIR`, else
//!   the `--config` file's `data_dir`, else `./quintet-data`); else `--listen` /
//!   `QUINTET_LISTEN` / `listen` of the `--config` file (`https` when it has `tls_cert`,
//!   loopback for a wildcard address), else `http://127.0.0.1:6363` — and then, since
//!   nothing says that server owns the data directory, a note says where the token goes.
//! - Admin token: `--admin-token` / `QUINTET_ADMIN_TOKEN`; else `admin_token` of the
//!   `--config` file; else the token derived from the master key, found as the server
//!   finds it (`--master-key-file` / `QUINTET_MASTER_KEY_FILE`, `QUINTET_MASTER_KEY`, the
//!   file's `master_key_file`, else the default path; see [`crate::master_key`]).
//! - Extra trusted certificate for https: `--ca-cert` / `QUINTET_CA_CERT`; else the
//!   `--config` file's `tls_cert` (a self-signed server certificate then just works).
//!
//! Output is a table for people, or with `--json` the server's answer as it came.

use std::{net::SocketAddr, path::PathBuf, time::Duration};

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use quintet_core::{AppName, account_tokens::AccountTokenId, accounts::AccountName, keys::KeyId};
use reqwest::Method;
use serde_json::{Value, json};

use crate::{
    cli::{ListenAddr, ServeArgs, read_file},
    master_key::{MasterKeySource, derived_admin_token},
};

/// How to reach the server's admin API.
#[derive(Debug, Clone, Default, Args)]
pub struct Conn {
    /// URL of the server [default: from --config, else http://127.0.0.1:6363]
    #[arg(long, env = "QUINTET_URL", value_name = "URL")]
    pub url: Option<String>,

    /// The admin token [default: from --config, else derived from the master key]
    #[arg(
        long,
        env = "QUINTET_ADMIN_TOKEN",
        value_name = "TOKEN",
        hide_env_values = true
    )]
    pub admin_token: Option<String>,

    /// The server's listen address, to find it when it recorded none in its data
    /// directory [default: from --config, else 127.0.0.1:6363]
    #[arg(long, env = "QUINTET_LISTEN", value_name = "ADDR")]
    pub listen: Option<ListenAddr>,

    /// The server's data directory, where a running server records its address
    /// [default: from --config, else ./quintet-data]
    #[arg(long, env = "QUINTET_DATA_DIR", value_name = "DIR")]
    pub data_dir: Option<PathBuf>,

    /// The server's master key file, to derive the admin token [default: as the server
    /// finds it]
    #[arg(long, env = "QUINTET_MASTER_KEY_FILE", value_name = "FILE")]
    pub master_key_file: Option<PathBuf>,

    /// The server's master key itself
    #[arg(
        long,
        env = "QUINTET_MASTER_KEY",
        value_name = "KEY",
        hide_env_values = true
    )]
    pub master_key: Option<String>,

    /// The server's TOML file, to find its address, token and certificate
    #[arg(long, env = "QUINTET_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// PEM certificate to trust for https (e.g. a self-signed server certificate)
    #[arg(long, env = "QUINTET_CA_CERT", value_name = "FILE")]
    pub ca_cert: Option<PathBuf>,

    /// Print the server's JSON answer instead of a table
    #[arg(long)]
    pub json: bool,
}

/// `quintet account …`
#[derive(Debug, Subcommand)]
pub enum AccountCommand {
    /// Create an account.
    Create {
        /// Account name: a-z, 0-9, '_' and '-'.
        name: String,
        /// starter (3 applications), pro (10) or business (20).
        #[arg(long, default_value = "starter")]
        plan: String,
        /// How to reach the server.
        #[command(flatten)]
        conn: Conn,
    },
    /// List accounts with their plans and applications.
    List {
        /// How to reach the server.
        #[command(flatten)]
        conn: Conn,
    },
    /// Move an account to another plan.
    Plan {
        /// Account name.
        name: String,
        /// starter, pro or business.
        plan: String,
        /// How to reach the server.
        #[command(flatten)]
        conn: Conn,
    },
    /// Issue, list and revoke the tokens an account signs in with (to the admin API and
    /// the console, for its own applications only).
    #[command(subcommand)]
    Token(AccountTokenCommand),
}

/// `quintet account token …`
#[derive(Debug, Subcommand)]
pub enum AccountTokenCommand {
    /// Issue a token for an account; it is printed this once (only its digest is kept).
    Create {
        /// Account name.
        account: String,
        /// How to reach the server.
        #[command(flatten)]
        conn: Conn,
    },
    /// List an account's tokens (ids, never their text).
    List {
        /// Account name.
        account: String,
        /// How to reach the server.
        #[command(flatten)]
        conn: Conn,
    },
    /// Revoke a token: it signs in nobody from now on.
    Revoke {
        /// Account name.
        account: String,
        /// The token's id (qat_…, as `list` prints it).
        id: String,
        /// How to reach the server.
        #[command(flatten)]
        conn: Conn,
    },
}

/// `quintet app …`
#[derive(Debug, Subcommand)]
pub enum AppCommand {
    /// Create an application in an account (within the account's plan limit).
    Create {
        /// Application name: a-z, 0-9, '_' and '-'; not a service type.
        name: String,
        /// The owning account.
        #[arg(long)]
        account: String,
        /// How to reach the server.
        #[command(flatten)]
        conn: Conn,
    },
    /// List applications.
    List {
        /// Only this account's applications.
        #[arg(long)]
        account: Option<String>,
        /// How to reach the server.
        #[command(flatten)]
        conn: Conn,
    },
    /// Delete an application with all its instances, their contents and its keys.
    Delete {
        /// Application name.
        name: String,
        /// Confirm: everything the application stores is removed.
        #[arg(long)]
        yes: bool,
        /// How to reach the server.
        #[command(flatten)]
        conn: Conn,
    },
    /// List an application's instances with their configuration (secrets redacted).
    Instances {
        /// Application name.
        name: String,
        /// How to reach the server.
        #[command(flatten)]
        conn: Conn,
    },
}

/// `quintet key …`
#[derive(Debug, Subcommand)]
pub enum KeyCommand {
    /// Create an access key; prints its secret and connection string.
    Create {
        /// Application name.
        app: String,
        /// How to reach the server.
        #[command(flatten)]
        conn: Conn,
    },
    /// List an application's keys, secrets redacted.
    List {
        /// Application name.
        app: String,
        /// How to reach the server.
        #[command(flatten)]
        conn: Conn,
    },
    /// Show one key with its secret and connection string in full.
    Reveal {
        /// Application name.
        app: String,
        /// The key.
        key: String,
        /// How to reach the server.
        #[command(flatten)]
        conn: Conn,
    },
    /// Revoke a key: tokens signed with it are refused from now on.
    Revoke {
        /// Application name.
        app: String,
        /// The key.
        key: String,
        /// How to reach the server.
        #[command(flatten)]
        conn: Conn,
    },
}

/// A connected admin client.
pub(crate) struct Admin {
    pub(crate) http: reqwest::Client,
    pub(crate) base: String,
    pub(crate) token: String,
    pub(crate) json: bool,
}

impl Conn {
    /// The data directory these settings name (`--data-dir`, the `--config` file's, else
    /// `./quintet-data`).
    pub(crate) fn resolved_data_dir(&self) -> anyhow::Result<PathBuf> {
        let file = match &self.config {
            Some(path) => read_file(path)?,
            None => ServeArgs::default(),
        };
        Ok(self
            .data_dir
            .clone()
            .or(file.data_dir)
            .unwrap_or_else(|| PathBuf::from("quintet-data")))
    }

    /// The backup directory the server uses (the `--config` file's `backup_dir`, else
    /// `backups` in the data directory).
    pub(crate) fn resolved_backup_dir(&self) -> anyhow::Result<PathBuf> {
        let file = match &self.config {
            Some(path) => read_file(path)?,
            None => ServeArgs::default(),
        };
        Ok(match file.backup_dir {
            Some(dir) => dir,
            None => self.resolved_data_dir()?.join(crate::backup::DEFAULT_DIR),
        })
    }

    /// A client of the server these settings name.
    pub(crate) fn connect(self) -> anyhow::Result<Admin> {
        let mut file = match &self.config {
            Some(path) => read_file(path)?,
            None => ServeArgs::default(),
        };
        if self.listen.is_some() {
            file.listen = self.listen;
        }
        let data_dir = self
            .data_dir
            .clone()
            .or(file.data_dir.clone())
            .unwrap_or_else(|| PathBuf::from("quintet-data"));
        let base = match (self.url, crate::discovery::Record::read(&data_dir)) {
            (Some(url), _) => url.trim_end_matches('/').to_owned(),
            (None, Some(record)) => record.url,
            (None, None) => {
                let url = url_of(&file);
                eprintln!(
                    "note: no running server recorded in {}; sending the admin token to {url} \
                     (pass --url or --data-dir to choose)",
                    data_dir.display()
                );
                url
            }
        };
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            bail!("--url \"{base}\" must be an http or https URL, e.g. http://127.0.0.1:6363");
        }
        let token = match self.admin_token.or(file.admin_token.clone()) {
            Some(t) => t,
            None => {
                let source = MasterKeySource::new(
                    self.master_key.or(file.master_key.clone()),
                    self.master_key_file.or(file.master_key_file.clone()),
                    None,
                )?;
                let ring = source.load().context(
                    "no admin token: pass --admin-token (or QUINTET_ADMIN_TOKEN), or run where \
                     the server's master key is",
                )?;
                derived_admin_token(&ring)
            }
        };
        quintet_server::tls::install_crypto_provider();
        let mut builder = reqwest::Client::builder().timeout(Duration::from_secs(60));
        if let Some(ca) = self.ca_cert.or(file.tls_cert) {
            let pem = std::fs::read(&ca)
                .with_context(|| format!("cannot read certificate {}", ca.display()))?;
            let certs = reqwest::Certificate::from_pem_bundle(&pem)
                .with_context(|| format!("{} is not a PEM certificate", ca.display()))?;
            builder = builder.tls_certs_merge(certs);
        }
        Ok(Admin {
            http: builder.build().context("cannot set up the HTTP client")?,
            base,
            token,
            json: self.json,
        })
    }
}

/// The server's URL as the config file describes it.
fn url_of(file: &ServeArgs) -> String {
    let listen = file
        .listen
        .map_or_else(|| SocketAddr::from(([127, 0, 0, 1], 6363)), |l| l.0);
    let scheme = if file.tls_cert.is_some() {
        "https"
    } else {
        "http"
    };
    crate::discovery::local_url(scheme, listen)
}

impl Admin {
    /// Call the admin API; the answer's JSON, or an error with the server's message.
    async fn call(&self, method: Method, path: &str, body: Option<Value>) -> anyhow::Result<Value> {
        self.call_within(method, path, body, None).await
    }

    /// [`Admin::call`] for calls that take as long as their work (a backup): no timeout.
    pub(crate) async fn call_long(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<Value> {
        self.call_within(method, path, body, Some(Duration::from_secs(7 * 86_400)))
            .await
    }

    async fn call_within(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
        timeout: Option<Duration>,
    ) -> anyhow::Result<Value> {
        let url = format!("{}{path}", self.base);
        let mut req = self.http.request(method, &url).bearer_auth(&self.token);
        if let Some(timeout) = timeout {
            req = req.timeout(timeout);
        }
        if let Some(body) = body {
            req = req.json(&body);
        }
        let res = req.send().await.map_err(|e| unreachable(&self.base, e))?;
        let status = res.status();
        let text = res.text().await.context("reading the server's answer")?;
        let value: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        if !status.is_success() {
            let msg = value["msg"].as_str().unwrap_or(text.as_str());
            bail!("{msg} (HTTP {})", status.as_u16());
        }
        if value.is_null() {
            bail!("the server answered {status} without JSON: {text}");
        }
        Ok(value)
    }

    /// Print `value` as JSON, or the human text `human` makes of it.
    fn show(&self, value: &Value, human: impl FnOnce(&Value) -> String) -> anyhow::Result<()> {
        if self.json {
            println!("{}", serde_json::to_string_pretty(value)?);
        } else {
            print!("{}", human(value));
        }
        Ok(())
    }
}

/// Why the server at `base` could not be called, naming the usual mistake: https to a
/// server that speaks plain HTTP.
fn unreachable(base: &str, e: reqwest::Error) -> anyhow::Error {
    let mut chain = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(s) = source {
        chain.push_str(": ");
        chain.push_str(&s.to_string());
        source = s.source();
    }
    if base.starts_with("https://") && chain.contains("InvalidContentType") {
        let plain = base.replacen("https://", "http://", 1);
        return anyhow::anyhow!(
            "the server at {base} speaks plain HTTP, not HTTPS: use {plain} (--url or \
             QUINTET_URL), or start the server with --tls-cert and --tls-key"
        );
    }
    anyhow::anyhow!("cannot reach the server at {base}: {chain}")
}

fn text(v: &Value) -> String {
    match v {
        Value::Null => "-".to_owned(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Rows under a header, columns padded to their widest cell.
pub(crate) fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut out = String::new();
        for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
            if i + 1 == cells.len() {
                out.push_str(cell);
            } else {
                out.push_str(&format!("{cell:<w$}  "));
            }
        }
        out.trim_end().to_owned() + "\n"
    };
    let mut out = line(header.to_vec());
    for row in rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
}

pub(crate) fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

fn account_name(s: &str) -> anyhow::Result<AccountName> {
    Ok(s.parse()?)
}

fn app_name(s: &str) -> anyhow::Result<AppName> {
    Ok(s.parse()?)
}

fn key_id(s: &str) -> anyhow::Result<KeyId> {
    Ok(s.parse()?)
}

fn key_block(v: &Value) -> String {
    format!(
        "key:               {}\nsecret:            {}\nconnection string: {}\n",
        text(&v["key"]),
        text(&v["secret"]),
        text(&v["connectionString"])
    )
}

/// Run `quintet account …`.
pub fn run_account(cmd: AccountCommand) -> anyhow::Result<()> {
    runtime()?.block_on(async move {
        match cmd {
            AccountCommand::Create { name, plan, conn } => {
                let name = account_name(&name)?;
                let admin = conn.connect()?;
                let v = admin
                    .call(
                        Method::POST,
                        "/_admin/accounts",
                        Some(json!({"name": name, "plan": plan})),
                    )
                    .await?;
                admin.show(&v, |v| {
                    let a = &v["account"];
                    format!(
                        "created account {} on the {} plan (up to {} applications)\n",
                        text(&a["name"]),
                        text(&a["plan"]),
                        text(&a["maxApps"])
                    )
                })
            }
            AccountCommand::List { conn } => {
                let admin = conn.connect()?;
                let v = admin.call(Method::GET, "/_admin/accounts", None).await?;
                admin.show(&v, |v| {
                    let rows: Vec<Vec<String>> = v["accounts"]
                        .as_array()
                        .map(Vec::as_slice)
                        .unwrap_or_default()
                        .iter()
                        .map(|a| {
                            vec![
                                text(&a["name"]),
                                text(&a["plan"]),
                                format!("{}/{}", text(&a["apps"]), text(&a["maxApps"])),
                                text(&a["created"]),
                            ]
                        })
                        .collect();
                    table(&["NAME", "PLAN", "APPS", "CREATED"], &rows)
                })
            }
            AccountCommand::Token(cmd) => run_account_token(cmd).await,
            AccountCommand::Plan { name, plan, conn } => {
                let name = account_name(&name)?;
                let admin = conn.connect()?;
                let v = admin
                    .call(
                        Method::PATCH,
                        &format!("/_admin/accounts/{name}"),
                        Some(json!({"plan": plan})),
                    )
                    .await?;
                admin.show(&v, |v| {
                    let a = &v["account"];
                    format!(
                        "account {} is on the {} plan ({} of {} applications)\n",
                        text(&a["name"]),
                        text(&a["plan"]),
                        text(&a["apps"]),
                        text(&a["maxApps"])
                    )
                })
            }
        }
    })
}

async fn run_account_token(cmd: AccountTokenCommand) -> anyhow::Result<()> {
    match cmd {
        AccountTokenCommand::Create { account, conn } => {
            let account = account_name(&account)?;
            let admin = conn.connect()?;
            let v = admin
                .call(
                    Method::POST,
                    &format!("/_admin/accounts/{account}/tokens"),
                    None,
                )
                .await?;
            admin.show(&v, |v| {
                format!(
                    "issued token {} for account {}; it is shown only now:\n{}\n",
                    text(&v["id"]),
                    text(&v["account"]),
                    text(&v["token"])
                )
            })
        }
        AccountTokenCommand::List { account, conn } => {
            let account = account_name(&account)?;
            let admin = conn.connect()?;
            let v = admin
                .call(
                    Method::GET,
                    &format!("/_admin/accounts/{account}/tokens"),
                    None,
                )
                .await?;
            admin.show(&v, |v| {
                let rows: Vec<Vec<String>> = v["tokens"]
                    .as_array()
                    .map(Vec::as_slice)
                    .unwrap_or_default()
                    .iter()
                    .map(|t| vec![text(&t["id"]), text(&t["created"]), text(&t["revoked"])])
                    .collect();
                table(&["ID", "CREATED", "REVOKED"], &rows)
            })
        }
        AccountTokenCommand::Revoke { account, id, conn } => {
            let account = account_name(&account)?;
            let id: AccountTokenId = id.parse()?;
            let admin = conn.connect()?;
            let v = admin
                .call(
                    Method::DELETE,
                    &format!("/_admin/accounts/{account}/tokens/{id}"),
                    None,
                )
                .await?;
            admin.show(&v, |_| format!("revoked token {id} of account {account}\n"))
        }
    }
}

/// Run `quintet app …`.
pub fn run_app(cmd: AppCommand) -> anyhow::Result<()> {
    runtime()?.block_on(async move {
        match cmd {
            AppCommand::Create {
                name,
                account,
                conn,
            } => {
                let (name, account) = (app_name(&name)?, account_name(&account)?);
                let admin = conn.connect()?;
                let v = admin
                    .call(
                        Method::POST,
                        "/_admin/apps",
                        Some(json!({"name": name, "account": account})),
                    )
                    .await?;
                admin.show(&v, |v| {
                    format!(
                        "created application {} in account {}\nnext: quintet key create {}\n",
                        text(&v["app"]["name"]),
                        text(&v["app"]["account"]),
                        text(&v["app"]["name"])
                    )
                })
            }
            AppCommand::List { account, conn } => {
                let path = match account {
                    Some(a) => format!("/_admin/apps?account={}", account_name(&a)?),
                    None => "/_admin/apps".to_owned(),
                };
                let admin = conn.connect()?;
                let v = admin.call(Method::GET, &path, None).await?;
                admin.show(&v, |v| {
                    let rows: Vec<Vec<String>> = v["apps"]
                        .as_array()
                        .map(Vec::as_slice)
                        .unwrap_or_default()
                        .iter()
                        .map(|a| vec![text(&a["name"]), text(&a["account"]), text(&a["created"])])
                        .collect();
                    table(&["NAME", "ACCOUNT", "CREATED"], &rows)
                })
            }
            AppCommand::Delete { name, yes, conn } => {
                let name = app_name(&name)?;
                if !yes {
                    bail!(
                        "this deletes application {name} with all its instances, everything \
                         stored in them and its keys; run again with --yes to confirm"
                    );
                }
                let admin = conn.connect()?;
                let v = admin
                    .call(Method::DELETE, &format!("/_admin/apps/{name}"), None)
                    .await?;
                admin.show(&v, |_| {
                    format!("deleted application {name} with its instances and keys\n")
                })
            }
            AppCommand::Instances { name, conn } => {
                let name = app_name(&name)?;
                let admin = conn.connect()?;
                let v = admin
                    .call(Method::GET, &format!("/_admin/apps/{name}/instances"), None)
                    .await?;
                admin.show(&v, |v| {
                    let rows: Vec<Vec<String>> = v["instances"]
                        .as_array()
                        .map(Vec::as_slice)
                        .unwrap_or_default()
                        .iter()
                        .map(|i| {
                            vec![
                                text(&i["type"]),
                                text(&i["name"]),
                                text(&i["created"]),
                                i["config"].to_string(),
                            ]
                        })
                        .collect();
                    table(&["TYPE", "NAME", "CREATED", "CONFIG"], &rows)
                })
            }
        }
    })
}

/// Run `quintet key …`.
pub fn run_key(cmd: KeyCommand) -> anyhow::Result<()> {
    runtime()?.block_on(async move {
        match cmd {
            KeyCommand::Create { app, conn } => {
                let app = app_name(&app)?;
                let admin = conn.connect()?;
                let v = admin
                    .call(Method::POST, &format!("/_admin/apps/{app}/keys"), None)
                    .await?;
                if admin.base.starts_with("http://") {
                    // Clients turn cloud:// into https://, which a plain-HTTP server answers
                    // with "wrong version number".
                    eprintln!(
                        "warning: this server speaks plain HTTP, but clients (hyper-connect) \
                         reach a cloud:// connection string over HTTPS, which will fail. Serve \
                         HTTPS (`quintet cert`, then `quintet serve --tls-cert cert.pem \
                         --tls-key key.pem`; see docs/configuration.md), or put a TLS proxy in \
                         front and start the server with --public-url https://<its name>"
                    );
                }
                admin.show(&v, |v| {
                    format!(
                        "{}keep the secret safe: `quintet key reveal {app} {}` shows it again\n",
                        key_block(v),
                        text(&v["key"])
                    )
                })
            }
            KeyCommand::List { app, conn } => {
                let app = app_name(&app)?;
                let admin = conn.connect()?;
                let v = admin
                    .call(Method::GET, &format!("/_admin/apps/{app}/keys"), None)
                    .await?;
                admin.show(&v, |v| {
                    let rows: Vec<Vec<String>> = v["keys"]
                        .as_array()
                        .map(Vec::as_slice)
                        .unwrap_or_default()
                        .iter()
                        .map(|k| {
                            vec![
                                text(&k["key"]),
                                text(&k["secret"]),
                                text(&k["created"]),
                                text(&k["lastUsed"]),
                                text(&k["revoked"]),
                            ]
                        })
                        .collect();
                    table(&["KEY", "SECRET", "CREATED", "LAST USED", "REVOKED"], &rows)
                })
            }
            KeyCommand::Reveal { app, key, conn } => {
                let (app, key) = (app_name(&app)?, key_id(&key)?);
                let admin = conn.connect()?;
                let v = admin
                    .call(Method::GET, &format!("/_admin/apps/{app}/keys/{key}"), None)
                    .await?;
                admin.show(&v, |v| {
                    format!(
                        "{}created:           {}\nlast used:         {}\nrevoked:           {}\n",
                        key_block(v),
                        text(&v["created"]),
                        text(&v["lastUsed"]),
                        text(&v["revoked"])
                    )
                })
            }
            KeyCommand::Revoke { app, key, conn } => {
                let (app, key) = (app_name(&app)?, key_id(&key)?);
                let admin = conn.connect()?;
                let v = admin
                    .call(
                        Method::DELETE,
                        &format!("/_admin/apps/{app}/keys/{key}"),
                        None,
                    )
                    .await?;
                admin.show(&v, |_| format!("revoked key {key} of application {app}\n"))
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_pad_every_column_but_the_last() {
        let t = table(
            &["NAME", "PLAN"],
            &[
                vec!["acme".into(), "starter".into()],
                vec!["a-much-longer-name".into(), "pro".into()],
            ],
        );
        assert_eq!(
            t,
            "NAME                PLAN\nacme                starter\na-much-longer-name  pro\n"
        );
    }

    #[test]
    fn the_url_follows_the_config_file() {
        let mut file = ServeArgs::default();
        assert_eq!(url_of(&file), "http://127.0.0.1:6363");
        file.listen = Some("0.0.0.0:7000".parse().unwrap());
        file.tls_cert = Some("cert.pem".into());
        assert_eq!(url_of(&file), "https://127.0.0.1:7000");
        file.listen = Some("[::]:7000".parse().unwrap());
        assert_eq!(url_of(&file), "https://[::1]:7000");
    }
}
