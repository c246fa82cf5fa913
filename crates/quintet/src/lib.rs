//! The `quintet` program as a library: configuration ([`cli`]), choosing and opening the
//! adapters ([`adapters`], [`binding`]), node assembly ([`node`]) and the admin commands
//! ([`admin`], [`admin_token`], [`token`]). `main.rs` only parses arguments and calls into
//! here; the test harness does the same in-process.

pub mod adapters;
pub mod admin;
pub mod admin_token;
pub mod binding;
pub mod cli;
pub mod limits;
pub mod node;
pub mod token;
