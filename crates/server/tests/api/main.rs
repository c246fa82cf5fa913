//! Black-box HTTP tests of the server: real nodes on ephemeral loopback ports.
//! One test binary (link time); one module per area.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod admin;
mod auth;
mod cache;
mod data;
mod http;
mod hyper_connect;
mod lifecycle;
mod limits;
mod queue;
mod scale_out;
mod search;
mod storage;
mod tls;
