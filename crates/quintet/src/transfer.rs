//! `quintet export` and `quintet import`: the portable archive (`docs/archive.md`) between a
//! file and a running server's admin API (`GET /_admin/export`, `POST /_admin/import`),
//! which reads and writes through the node's ports, whatever engines it runs on. The
//! server is found as the other admin commands find it ([`crate::admin`]); when none runs
//! on the data directory and no `--url` is given, the node is opened here instead (as
//! `quintet serve` would open it) and the same exporter or importer runs in-process.
//!
//! The export is written to `FILE.partial` and renamed once its end record arrived and
//! checked, so a file named `FILE` is always whole. The import checks the whole file before
//! sending a byte of it (a damaged archive changes nothing), then streams it. Progress goes
//! to stderr: one updating line on a terminal, JSON lines otherwise.
//!
//! `quintet migrate` does both in one process, between two nodes that are not running: it
//! opens each (a data directory, or a node's TOML file), streams the export of one into
//! the import of the other through their ports, and prints the verification.

use std::{
    io::{IsTerminal, Write as _},
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use anyhow::{Context, bail};
use clap::Args;
use futures_util::StreamExt;
use quintet_core::archive::Decoder;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use std::sync::Arc;

use quintet_core::SystemClock;
use quintet_server::archive::{self, ExportOptions, ImportOptions, Importer};

use crate::{
    admin::{Conn, runtime, table},
    node::Node,
};

/// The longest an export or import may take.
const TRANSFER_TIMEOUT: Duration = Duration::from_secs(7 * 24 * 3600);
/// Bytes read from the archive file at a time.
const READ_CHUNK: usize = 256 * 1024;

/// `quintet export`
#[derive(Debug, Args)]
pub struct ExportArgs {
    /// Export only this application (default: every application, with accounts and keys)
    #[arg(long, value_name = "APP")]
    pub app: Option<String>,
    /// The archive file to write (refused if it exists)
    #[arg(long, value_name = "FILE")]
    pub to: PathBuf,
    /// Include access keys' and queues' secrets (the file is then readable by you only)
    #[arg(long)]
    pub include_secrets: bool,
    /// How to reach the server.
    #[command(flatten)]
    pub conn: Conn,
}

/// `quintet import`
#[derive(Debug, Args)]
pub struct ImportArgs {
    /// The archive file
    pub file: PathBuf,
    /// Import a one-application archive under this application name
    #[arg(long, value_name = "NEWNAME")]
    pub app: Option<String>,
    /// Add to existing applications and instances instead of refusing them (see
    /// docs/archive.md for the rules)
    #[arg(long)]
    pub merge: bool,
    /// How to reach the server.
    #[command(flatten)]
    pub conn: Conn,
}

/// `quintet migrate`
#[derive(Debug, Args)]
pub struct MigrateArgs {
    /// Where the contents are: a data directory (an embedded node on it) or the TOML file
    /// of a node (as `quintet serve --config FILE` reads it)
    #[arg(long, value_name = "DIR|FILE")]
    pub from: PathBuf,
    /// Where they go: a data directory or a node's TOML file, as for --from
    #[arg(long, value_name = "DIR|FILE")]
    pub to: PathBuf,
    /// Add to existing applications and instances instead of refusing them
    #[arg(long)]
    pub merge: bool,
    /// Print the report as JSON
    #[arg(long)]
    pub json: bool,
}

/// Progress on stderr, at most once a second.
struct Progress {
    verb: &'static str,
    total: Option<u64>,
    done: u64,
    last: Instant,
    terminal: bool,
}

impl Progress {
    fn new(verb: &'static str, total: Option<u64>) -> Self {
        Self {
            verb,
            total,
            done: 0,
            last: Instant::now(),
            terminal: std::io::stderr().is_terminal(),
        }
    }

    fn add(&mut self, n: usize) {
        self.done += n as u64;
        if self.last.elapsed() >= Duration::from_secs(1) {
            self.last = Instant::now();
            self.show(false);
        }
    }

    fn show(&self, last: bool) {
        let mib = self.done as f64 / (1024.0 * 1024.0);
        if self.terminal {
            let pct = self
                .total
                .filter(|t| *t > 0)
                .map(|t| format!(" ({:.0}%)", self.done as f64 * 100.0 / t as f64))
                .unwrap_or_default();
            eprint!("\r{} {mib:.1} MiB{pct}   ", self.verb);
            if last {
                eprintln!();
            }
        } else {
            let line = serde_json::json!({
                "progress": self.verb,
                "bytes": self.done,
                "total": self.total,
                "done": last,
            });
            eprintln!("{line}");
        }
        let _ = std::io::stderr().flush();
    }
}

/// Run `quintet export`.
pub fn run_export(args: ExportArgs) -> anyhow::Result<()> {
    runtime()?.block_on(export(args))
}

async fn export(args: ExportArgs) -> anyhow::Result<()> {
    if args.to.exists() {
        bail!(
            "{} exists; choose another file or remove it first",
            args.to.display()
        );
    }
    if let Some(dir) = stopped_node(&args.conn)? {
        let node = open_node(&dir).await?;
        let options = ExportOptions {
            app: args
                .app
                .as_deref()
                .map(str::parse)
                .transpose()
                .map_err(|e: quintet_core::Error| anyhow::anyhow!("{e}"))?,
            secrets: args.include_secrets,
        };
        let checked = archive::check_export(node.state(), &options).await;
        let written = match checked {
            Ok(()) => {
                let rx = archive::export(node.state().clone(), options);
                let body = futures_util::stream::unfold(rx, |mut rx| async {
                    rx.recv()
                        .await
                        .map(|item| (item.map_err(anyhow::Error::from), rx))
                });
                write_archive(&args, Box::pin(body)).await
            }
            Err(e) => Err(anyhow::anyhow!("{e}")),
        };
        node.close().await?;
        return written;
    }
    let admin = args.conn.clone().connect()?;
    let mut url = format!("{}/_admin/export", admin.base);
    let mut params = Vec::new();
    if let Some(app) = &args.app {
        params.push(format!("app={app}"));
    }
    if args.include_secrets {
        params.push("secrets=true".to_owned());
    }
    if !params.is_empty() {
        url = format!("{url}?{}", params.join("&"));
    }
    let res = admin
        .http
        .get(&url)
        .bearer_auth(&admin.token)
        .timeout(TRANSFER_TIMEOUT)
        .send()
        .await
        .with_context(|| format!("cannot reach the server at {}", admin.base))?;
    let status = res.status();
    if !status.is_success() {
        let text = res.text().await.unwrap_or_default();
        let value: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        let msg = value["msg"].as_str().unwrap_or(text.as_str());
        bail!("{msg} (HTTP {})", status.as_u16());
    }
    let body = res.bytes_stream().map(|chunk| {
        chunk.context(
            "the export broke off before its end (the server's log says why); nothing was kept",
        )
    });
    write_archive(&args, Box::pin(body)).await
}

/// Archive bytes as they arrive, from the server or from a node opened here.
type Incoming =
    std::pin::Pin<Box<dyn futures_util::Stream<Item = anyhow::Result<bytes::Bytes>> + Send>>;

/// The data directory of the node to open here, when no server is asked for (`--url`) and
/// none is recorded as running on the directory (`server.json`).
fn stopped_node(conn: &Conn) -> anyhow::Result<Option<PathBuf>> {
    if conn.url.is_some() {
        return Ok(None);
    }
    let file_dir = match &conn.config {
        Some(path) => crate::cli::read_file(path)?.data_dir,
        None => None,
    };
    let dir = conn
        .data_dir
        .clone()
        .or(file_dir)
        .unwrap_or_else(|| PathBuf::from("quintet-data"));
    if crate::discovery::Record::read(&dir).is_some() {
        return Ok(None);
    }
    Ok(Some(match &conn.config {
        Some(config) if conn.data_dir.is_none() => config.clone(),
        _ => dir,
    }))
}

/// Write `body` to `args.to` through `FILE.partial`, checking it as it arrives.
async fn write_archive(args: &ExportArgs, mut body: Incoming) -> anyhow::Result<()> {
    let partial = partial_path(&args.to);
    let mut options = tokio::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    if args.include_secrets {
        options.mode(0o600);
    }
    let mut file = options
        .open(&partial)
        .await
        .with_context(|| format!("cannot create {}", partial.display()))?;
    let written = async {
        let mut decoder = Decoder::new();
        let mut progress = Progress::new("exported", None);
        while let Some(chunk) = body.next().await {
            let chunk = chunk?;
            decoder.feed(&chunk);
            while decoder.next_record()?.is_some() {}
            file.write_all(&chunk).await?;
            progress.add(chunk.len());
        }
        decoder.finish()?;
        file.sync_all().await?;
        progress.show(true);
        anyhow::Ok(progress.done)
    }
    .await;
    let bytes = match written {
        Ok(bytes) => bytes,
        Err(e) => {
            let _ = tokio::fs::remove_file(&partial).await;
            return Err(e);
        }
    };
    tokio::fs::rename(&partial, &args.to)
        .await
        .with_context(|| format!("cannot rename {} to its name", partial.display()))?;
    println!("wrote {} ({bytes} bytes)", args.to.display());
    Ok(())
}

fn partial_path(to: &Path) -> PathBuf {
    let mut name = to.file_name().unwrap_or_default().to_os_string();
    name.push(".partial");
    to.with_file_name(name)
}

/// Run `quintet import`.
pub fn run_import(args: ImportArgs) -> anyhow::Result<()> {
    runtime()?.block_on(import(args))
}

/// Read the whole archive and check it, so that a damaged one is refused before anything
/// is sent.
async fn check_file(path: &Path) -> anyhow::Result<u64> {
    let mut file = tokio::fs::File::open(path)
        .await
        .with_context(|| format!("cannot open {}", path.display()))?;
    let mut decoder = Decoder::new();
    let mut buf = vec![0u8; READ_CHUNK];
    let mut total = 0u64;
    loop {
        let n = file.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        total += n as u64;
        decoder.feed(&buf[..n]);
        while decoder.next_record()?.is_some() {}
    }
    decoder.finish()?;
    Ok(total)
}

async fn import(args: ImportArgs) -> anyhow::Result<()> {
    let size = check_file(&args.file)
        .await
        .with_context(|| format!("{} cannot be imported", args.file.display()))?;
    if let Some(dir) = stopped_node(&args.conn)? {
        let json = args.conn.json;
        let node = open_node(&dir).await?;
        let options = ImportOptions {
            app: args
                .app
                .as_deref()
                .map(str::parse)
                .transpose()
                .map_err(|e: quintet_core::Error| anyhow::anyhow!("{e}"))?,
            merge: args.merge,
        };
        let report = import_here(&node, options, &args.file, size).await;
        node.close().await?;
        let value = serde_json::to_value(report.map_err(|e| {
            anyhow::anyhow!(
                "{e}; nothing of the archive was kept{}",
                merge_note(args.merge)
            )
        })?)?;
        if json {
            println!("{}", serde_json::to_string_pretty(&value)?);
        } else {
            print!("{}", report_text(&value));
        }
        return Ok(());
    }
    let admin = args.conn.connect()?;
    let json = admin.json;
    let mut params = Vec::new();
    if let Some(app) = &args.app {
        params.push(format!("app={app}"));
    }
    if args.merge {
        params.push("merge=true".to_owned());
    }
    let mut url = format!("{}/_admin/import", admin.base);
    if !params.is_empty() {
        url = format!("{url}?{}", params.join("&"));
    }
    let file = tokio::fs::File::open(&args.file).await?;
    let progress = Progress::new("imported", Some(size));
    let stream = futures_util::stream::unfold((file, progress), |(mut file, mut progress)| async {
        let mut buf = vec![0u8; READ_CHUNK];
        match file.read(&mut buf).await {
            Ok(0) => {
                progress.show(true);
                None
            }
            Ok(n) => {
                buf.truncate(n);
                progress.add(n);
                Some((Ok::<_, std::io::Error>(buf), (file, progress)))
            }
            Err(e) => Some((Err(e), (file, progress))),
        }
    });
    let res = admin
        .http
        .post(&url)
        .bearer_auth(&admin.token)
        .header("content-type", "application/vnd.quintet.archive")
        .timeout(TRANSFER_TIMEOUT)
        .body(reqwest::Body::wrap_stream(stream))
        .send()
        .await
        .with_context(|| format!("cannot reach the server at {}", admin.base))?;
    let status = res.status();
    let text = res.text().await.context("reading the server's answer")?;
    let value: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
    if !status.is_success() {
        let msg = value["msg"].as_str().unwrap_or(text.as_str());
        bail!(
            "{msg} (HTTP {}); nothing of the archive was kept{}",
            status.as_u16(),
            if args.merge {
                " except what --merge had already written into existing instances"
            } else {
                ""
            }
        );
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&value)?);
        return Ok(());
    }
    print!("{}", report_text(&value));
    Ok(())
}

fn merge_note(merge: bool) -> &'static str {
    if merge {
        " except what --merge had already written into existing instances"
    } else {
        ""
    }
}

/// Import the file into a node opened here.
async fn import_here(
    node: &Node,
    options: ImportOptions,
    file: &Path,
    size: u64,
) -> quintet_core::Result<archive::ImportReport> {
    let mut importer = Importer::new(node.state().clone(), options);
    let mut progress = Progress::new("imported", Some(size));
    let mut f = match tokio::fs::File::open(file).await {
        Ok(f) => f,
        Err(e) => return Err(quintet_core::Error::io("opening the archive", &e)),
    };
    let mut buf = vec![0u8; READ_CHUNK];
    loop {
        let n = match f.read(&mut buf).await {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) => {
                let e = quintet_core::Error::io("reading the archive", &e);
                return Err(importer.fail(e).await);
            }
        };
        progress.add(n);
        if let Err(e) = importer.feed(&buf[..n]).await {
            return Err(importer.fail(e).await);
        }
    }
    progress.show(true);
    importer.finish().await
}

/// Run `quintet migrate`.
pub fn run_migrate(args: MigrateArgs) -> anyhow::Result<()> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?
        .block_on(migrate(args))
}

/// Open the node `place` names: an embedded node on a data directory, or the node of a
/// TOML file, read as `quintet serve --data-dir DIR` or `quintet serve --config FILE` would
/// (the `QUINTET_*` variables apply). Neither may be running (each locks its directory).
async fn open_node(place: &Path) -> anyhow::Result<Node> {
    let flag = if place.is_file() {
        "--config"
    } else {
        "--data-dir"
    };
    let cli = crate::command::try_parse_from([
        std::ffi::OsStr::new("quintet"),
        std::ffi::OsStr::new("serve"),
        std::ffi::OsStr::new(flag),
        place.as_os_str(),
    ])?;
    let crate::command::Command::Serve(args) = cli.command else {
        bail!("internal: serve settings expected");
    };
    let config = args.resolve()?;
    Node::open(&config, Arc::new(SystemClock))
        .await
        .with_context(|| format!("cannot open the node of {}", place.display()))
}

async fn migrate(args: MigrateArgs) -> anyhow::Result<()> {
    let from = open_node(&args.from).await?;
    let to = match open_node(&args.to).await {
        Ok(to) => to,
        Err(e) => {
            from.close().await?;
            return Err(e);
        }
    };
    // Nothing is written to a file: access keys and queues' secrets always travel.
    let options = ExportOptions {
        app: None,
        secrets: true,
    };
    let mut rx = archive::export(from.state().clone(), options);
    let mut importer = Importer::new(
        to.state().clone(),
        ImportOptions {
            app: None,
            merge: args.merge,
        },
    );
    let mut progress = Progress::new("migrated", None);
    let mut failed = None;
    while let Some(chunk) = rx.recv().await {
        let fed = match chunk {
            Ok(bytes) => {
                progress.add(bytes.len());
                importer.feed(&bytes).await
            }
            Err(e) => Err(quintet_core::Error::internal(format!(
                "the export failed: {e}"
            ))),
        };
        if let Err(e) = fed {
            failed = Some(importer.fail(e).await);
            break;
        }
    }
    let report = match failed {
        Some(e) => Err(e),
        None => importer.finish().await,
    };
    progress.show(true);
    let closed_from = from.close().await;
    let closed_to = to.close().await;
    let report = report.map_err(|e| {
        anyhow::anyhow!(
            "{e}; nothing was kept in {}{}",
            args.to.display(),
            if args.merge {
                " except what --merge had already written into existing instances"
            } else {
                ""
            }
        )
    })?;
    closed_from?;
    closed_to?;
    let value = serde_json::to_value(&report)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        print!("{}", report_text(&value));
    }
    Ok(())
}

/// The import's report for people: one row per instance with both tallies.
fn report_text(v: &Value) -> String {
    let rows: Vec<Vec<String>> = v["instances"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|i| {
            let short = |d: &Value| d.as_str().map(|s| s[..s.len().min(16)].to_owned());
            vec![
                i["app"].as_str().unwrap_or("-").to_owned(),
                i["type"].as_str().unwrap_or("-").to_owned(),
                i["name"].as_str().unwrap_or("-").to_owned(),
                i["count"].to_string(),
                short(&i["digest"]).unwrap_or_default(),
                i["importedCount"].to_string(),
                short(&i["importedDigest"]).unwrap_or_default(),
                if i["equal"].as_bool() == Some(true) {
                    "equal".to_owned()
                } else {
                    "differs (merged)".to_owned()
                },
            ]
        })
        .collect();
    let mut out = table(
        &[
            "APP", "TYPE", "NAME", "ARCHIVE", "DIGEST", "IMPORTED", "DIGEST", "CHECK",
        ],
        &rows,
    );
    out.push_str(&format!(
        "{} records; {} accounts, {} applications and {} access keys created",
        v["records"], v["accounts"], v["apps"], v["keys"]
    ));
    let skipped = v["keysSkipped"].as_u64().unwrap_or(0);
    if skipped > 0 {
        out.push_str(&format!(
            "; {skipped} access keys not imported (exported without --include-secrets, \
             revoked, or their id exists here: create new ones with quintet key create)"
        ));
    }
    out.push('\n');
    out
}
