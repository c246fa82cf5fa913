//! System tests: the real `quintet` binary in child processes (crashes with `kill -9`,
//! signals, the command line, configuration, the data directory), and clusters of nodes
//! on the scale-out engines. One test binary (link time); one module per area.
//!
//! Behaviour of the HTTP API on one node belongs to `crates/server/tests/api` instead,
//! which runs nodes in-process.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

/// The binary under test.
const BIN: &str = env!("CARGO_BIN_EXE_quintet");

mod backup;
mod cache;
mod cli;
mod compat;
mod config_fuzz;
mod connections;
mod data;
mod data_dir;
mod disk_full;
mod interrupted_deletes;
mod openapi_fuzz;
mod packaging;
mod process;
mod queue;
mod readme;
mod scale_out;
mod search;
mod secrets;
mod storage;
mod transfer;
