//! The `quintet` program as a library: the command line ([`command`], [`cli`]), which
//! adapters serve each port ([`adapters`]), opening them ([`open`], [`binding`]), node
//! assembly ([`node`]), the admin commands ([`admin`], [`admin_token`], [`token`],
//! [`discovery`]), export and import ([`transfer`]), backups ([`backup`]) and the master key
//! ([`master_key`]).
//! `main.rs` only parses arguments and calls into here; the test harness does the same
//! in-process.

pub mod adapters;
pub mod admin;
pub mod admin_token;
pub mod backup;
pub mod binding;
pub mod cert;
pub mod cli;
pub mod command;
pub mod discovery;
pub mod limits;
pub mod logging;
pub mod master_key;
pub mod node;
pub mod open;
pub mod shell;
pub mod token;
pub mod transfer;
