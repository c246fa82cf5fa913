//! The command line: `quintet <command>`, one subcommand per module ([`cli`] for `serve`,
//! [`admin`] for `account`, `app` and `key`, [`token`], [`master_key`]).
//!
//! Every `serve` setting is also read from its environment variable, `QUINTET_<SETTING>`:
//! [`command`] adds them to the flags clap derives, from the settings' names, so no setting
//! can miss one (see [`cli`]).

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

use crate::{admin, backup, cert, cli, master_key, shell, token, transfer};

/// quintet: data, cache, search, queue and storage for applications, in one program.
#[derive(Debug, Parser)]
#[command(name = "quintet", version, about, long_about = None)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
// Parsed once per process: the size of the largest variant costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the HTTP server.
    Serve(cli::ServeArgs),
    /// Manage accounts (and their plans) on a running server.
    #[command(subcommand)]
    Account(admin::AccountCommand),
    /// Manage applications on a running server.
    #[command(subcommand)]
    App(admin::AppCommand),
    /// Manage the access keys of an application on a running server.
    #[command(subcommand)]
    Key(admin::KeyCommand),
    /// Print an access token signed with a key's connection string (for curl and scripts).
    Token(token::TokenArgs),
    /// Print the admin token of a server whose admin token is derived from its master key.
    AdminToken(master_key::AdminTokenArgs),
    /// Make and inspect master keys (see docs/security.md).
    #[command(subcommand)]
    MasterKey(master_key::MasterKeyCommand),
    /// Write a TLS certificate clients accept, signed by a local authority to trust.
    Cert(cert::CertArgs),
    /// Print a completion script for a shell (bash, zsh, fish, elvish, powershell).
    Completions(shell::CompletionsArgs),
    /// Print the manual page (roff), of quintet or of one of its commands.
    Man(shell::ManArgs),
    /// Write a running server's applications, or one, to a portable archive.
    Export(transfer::ExportArgs),
    /// Load a portable archive into a running server, and check it reads back equal.
    Import(transfer::ImportArgs),
    /// Copy everything from one stopped node to another (say embedded to PostgreSQL, Redis
    /// and S3, or back), and check it reads back equal.
    Migrate(transfer::MigrateArgs),
    /// Back up a node's data directory while it serves (or while stopped), or verify a
    /// backup (see docs/operations.md).
    Backup(backup::BackupArgs),
    /// Restore a backup into a data directory.
    Restore(backup::RestoreArgs),
}

/// The command line with every `serve` setting also read from its environment variable.
pub fn command() -> clap::Command {
    Cli::command().mut_subcommand("serve", |serve| serve.mut_args(with_env))
}

/// Parse `std::env::args` (see [`command`]).
pub fn parse() -> Cli {
    let matches = command().get_matches();
    Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
}

/// Parse `args` (see [`command`]).
pub fn try_parse_from<I, T>(args: I) -> Result<Cli, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    Cli::from_arg_matches(&command().try_get_matches_from(args)?)
}

/// The environment variable of a setting: `QUINTET_` and its TOML key in upper case.
pub fn env_var(setting: &str) -> String {
    format!("QUINTET_{}", setting.to_ascii_uppercase())
}

fn with_env(arg: clap::Arg) -> clap::Arg {
    let id = arg.get_id().as_str();
    if arg.get_long().is_none() || arg.get_env().is_some() || matches!(id, "help" | "version") {
        return arg;
    }
    // clap keeps `&'static str` names; settings are parsed once per process, so leaking
    // these few short strings costs nothing.
    let name: &'static str = Box::leak(env_var(id).into_boxed_str());
    arg.env(name)
}
