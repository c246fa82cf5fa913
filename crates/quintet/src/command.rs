//! The command line: `quintet <command>`, one subcommand per module ([`cli`] for `serve`,
//! [`admin`] for `account`, `app` and `key`, [`token`]).

use clap::{Parser, Subcommand};

use crate::{admin, cli, token};

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
}
