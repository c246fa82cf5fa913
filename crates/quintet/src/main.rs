//! The `quintet` binary: parses arguments, opens the stores, serves HTTP.

use std::{process::ExitCode, sync::Arc};

use anyhow::Context;
use quintet::{
    admin,
    cli::{LogFormat, ServeConfig},
    command::{self, Command},
    logging, master_key,
    node::Node,
};
use quintet_core::SystemClock;

fn main() -> ExitCode {
    // Before the settings are resolved: the default connection bound derives from it.
    quintet::limits::raise_fd_limit();
    // Crash tests stop a debug build at an exact point (see quintet_server::failpoint).
    if cfg!(debug_assertions)
        && let Ok(point) = std::env::var("QUINTET_FAILPOINT")
    {
        quintet_server::failpoint::arm(&point);
    }
    let cli = command::parse();
    let result = match cli.command {
        Command::Serve(args) => {
            // Everything the server creates (databases, logs of SQLite, keys, objects) is
            // for its own user only, whatever the shell's umask.
            #[cfg(unix)]
            rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o077));
            args.resolve().and_then(serve)
        }
        Command::Account(cmd) => admin::run_account(cmd),
        Command::App(cmd) => admin::run_app(cmd),
        Command::Key(cmd) => admin::run_key(cmd),
        Command::Token(args) => quintet::token::run(args),
        Command::AdminToken(args) => master_key::run_admin_token(args),
        Command::MasterKey(cmd) => master_key::run_master_key(cmd),
        Command::Cert(args) => quintet::cert::run(args),
        Command::Completions(args) => quintet::shell::completions(&args, &mut std::io::stdout()),
        Command::Man(args) => quintet::shell::man(&args, &mut std::io::stdout()),
        Command::Export(args) => quintet::transfer::run_export(args),
        Command::Import(args) => quintet::transfer::run_import(args),
        Command::Migrate(args) => {
            // The target's stores are created here: for their user only, as by `serve`.
            #[cfg(unix)]
            rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o077));
            quintet::transfer::run_migrate(args)
        }
        Command::Backup(args) => quintet::backup::run(args),
        Command::Restore(args) => quintet::backup::restore(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("quintet: {e:#}");
            ExitCode::FAILURE
        }
    }
}

#[tokio::main]
async fn serve(config: ServeConfig) -> anyhow::Result<()> {
    logging::init(&config)?;
    // The port first: a start that cannot listen must fail before anything is made (a
    // master key, and the admin token it would print and never show again).
    let listener = tokio::net::TcpListener::bind(config.server.listen)
        .await
        .with_context(|| listen_error(config.server.listen))?;
    let node = Node::open(&config, Arc::new(SystemClock)).await?;
    let addr = listener.local_addr()?;
    let json = config.log_format == LogFormat::Json;
    if let Some((token, key_file)) = node.generated_admin_token() {
        // Printed, not logged: logs must not carry secrets. Shown when the master key it is
        // derived from was created; `quintet admin-token` prints it again.
        let key = key_file.map_or_else(
            || "the master key".to_owned(),
            |f| format!("the master key in {}", f.display()),
        );
        let text = format!(
            "quintet admin token (derived from {key}; `quintet admin-token` prints it again): {}",
            token.expose()
        );
        logging::announce(
            json,
            &text,
            serde_json::json!({"admin_token": token.expose()}),
        );
    }
    // Tests and scripts read this line to learn the port when listening on port 0.
    let url = format!("{}://{addr}", node.scheme());
    logging::announce(
        json,
        &format!("quintet listening on {url}"),
        serde_json::json!({"listening": url}),
    );
    tracing::info!(%addr, data_dir = %config.data_dir.display(), "quintet started");
    node.serve(listener, shutdown_signal()).await?;
    tracing::info!("quintet stopped");
    Ok(())
}

/// What to say when `addr` cannot be listened on.
fn listen_error(addr: std::net::SocketAddr) -> String {
    format!(
        "cannot listen on {addr}: another program (or another quintet) may use the port; \
         choose another with --listen"
    )
}

/// Resolves on SIGINT or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::error!(error = %e, "cannot listen for SIGINT");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = terminate => {},
    }
}
