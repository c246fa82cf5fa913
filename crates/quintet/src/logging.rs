//! The server's log and the lines it prints for the operator.
//!
//! Here rather than in the binary: the log's formatting is generic code, and compiled in the
//! library it is compiled beside the other crates instead of after them all.

use std::io::IsTerminal;

use anyhow::Context;
use tracing_subscriber::EnvFilter;

use crate::cli::{LogFormat, ServeConfig};

/// Send `tracing` events to standard error, filtered and formatted as `config` says.
pub fn init(config: &ServeConfig) -> anyhow::Result<()> {
    let filter = EnvFilter::try_new(&config.log)
        .with_context(|| format!("log filter \"{}\" is not valid", config.log))?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    match config.log_format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
    Ok(())
}

/// Print a line for the operator on standard output: as it reads, or, with `--log-format
/// json`, as one JSON object (`message` plus `fields`), so every line parses.
pub fn announce(json: bool, text: &str, fields: serde_json::Value) {
    if json {
        let mut line = serde_json::json!({"message": text});
        if let (Some(line), Some(fields)) = (line.as_object_mut(), fields.as_object()) {
            line.extend(fields.clone());
        }
        println!("{line}");
    } else {
        println!("{text}");
    }
}
