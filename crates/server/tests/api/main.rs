//! Black-box HTTP tests of the server: real nodes on ephemeral loopback ports.
//! One test binary (link time); one module per area.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod http;
mod lifecycle;
mod search;
