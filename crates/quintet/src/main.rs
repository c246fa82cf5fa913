//! The `quintet` binary: parses arguments, opens the stores, serves HTTP.

use std::{io::IsTerminal, process::ExitCode, sync::Arc};

use anyhow::Context;
use clap::Parser;
use quintet::{
    admin, admin_token,
    cli::{Cli, Command, LogFormat, ServeConfig},
    node::Node,
};
use quintet_core::SystemClock;
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    // Before the settings are resolved: the default connection bound derives from it.
    quintet::limits::raise_fd_limit();
    // Crash tests stop a debug build at an exact point (see quintet_server::failpoint).
    if cfg!(debug_assertions)
        && let Ok(point) = std::env::var("QUINTET_FAILPOINT")
    {
        quintet_server::failpoint::arm(&point);
    }
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve(args) => args.resolve().and_then(serve),
        Command::Account(cmd) => admin::run_account(cmd),
        Command::App(cmd) => admin::run_app(cmd),
        Command::Key(cmd) => admin::run_key(cmd),
        Command::Token(args) => quintet::token::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("quintet: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn init_logging(config: &ServeConfig) -> anyhow::Result<()> {
    let filter = EnvFilter::try_new(&config.log)
        .with_context(|| format!("log filter \"{}\" is not valid", config.log))?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    match config.log_format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
    Ok(())
}

#[tokio::main]
async fn serve(config: ServeConfig) -> anyhow::Result<()> {
    init_logging(&config)?;
    let node = Node::open(&config, Arc::new(SystemClock)).await?;
    let listener = tokio::net::TcpListener::bind(config.server.listen)
        .await
        .with_context(|| format!("cannot listen on {}", config.server.listen))?;
    let addr = listener.local_addr()?;
    if let Some(token) = node.generated_admin_token() {
        // Printed, not logged: logs must not carry secrets. Shown on the first start only.
        println!(
            "quintet admin token (shown once, kept in {}): {}",
            admin_token::path(&config.data_dir).display(),
            token.expose()
        );
    }
    // Tests and scripts read this line to learn the port when listening on port 0.
    println!("quintet listening on {}://{addr}", node.scheme());
    tracing::info!(%addr, data_dir = %config.data_dir.display(), "quintet started");
    node.serve(listener, shutdown_signal()).await?;
    tracing::info!("quintet stopped");
    Ok(())
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
