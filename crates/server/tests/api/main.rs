//! Black-box HTTP tests of the server: real nodes, in-process, on ephemeral loopback
//! ports. One test binary (link time); one module per area. Tests that need the real
//! binary or several nodes belong to `crates/quintet/tests/system`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod account_tokens;
mod admin;
mod archive;
mod auth;
mod browser;
mod cache;
mod console;
mod console_browser;
mod data;
mod events;
mod feed;
mod http;
mod hyper_connect;
mod lifecycle;
mod limits;
mod metrics;
mod multipart_fuzz;
mod openapi;
mod queue;
mod quotas;
mod search;
mod storage;
mod storage_events;
mod tls;
