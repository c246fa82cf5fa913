//! quintet's benchmark kit: a keep-alive HTTP load generator ([`load`]), the server under
//! test ([`server`]), scenarios measured against the bare-HTTP ceiling ([`scenarios`]) and
//! the results table ([`report`]). The `quintet-bench` binary runs them; `bench/run` builds
//! and starts it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

pub mod load;
pub mod report;
pub mod scenarios;
pub mod search_corpus;
pub mod server;
