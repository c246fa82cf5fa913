//! The `quintet` program as a library: configuration ([`cli`]) and node assembly
//! ([`node`]). `main.rs` only parses arguments and calls into here; the test harness does
//! the same in-process.

pub mod cli;
pub mod node;
