//! The results table: printed, and merged into `bench/RESULTS.md` (a row per scenario,
//! replaced when the scenario runs again, so partial runs keep the other rows).

use std::path::Path;

use anyhow::Context;

use crate::scenarios::{Measurement, Target};

/// One row of the table.
#[derive(Debug, Clone)]
pub struct Row {
    /// Scenario name (the row's key).
    pub name: String,
    /// What was measured.
    pub m: Measurement,
    /// The goal.
    pub target: Target,
}

const MARKER: &str = "<!-- rows: maintained by bench/run; one per scenario -->";
const HEADER: &str = "| scenario | date | machine | conn | req/s | items/s | MB/s | p50 ms | p99 ms | vs ceiling | goal | met | note |\n|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|---|";

fn fmt_opt(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "–".to_owned(), |x| format!("{x:.digits$}"))
}

impl Row {
    /// The row as a markdown table line.
    pub fn markdown(&self, date: &str, machine: &str) -> String {
        let met = match self.target.met(&self.m) {
            Some(true) => "yes",
            Some(false) => "**no**",
            None => "–",
        };
        format!(
            "| {} | {date} | {machine} | {} | {:.0} | {} | {} | {:.3} | {:.3} | {} | {} | {met} | {} |",
            self.name,
            self.m.concurrency,
            self.m.rps,
            fmt_opt(self.m.items_per_sec, 0),
            fmt_opt(self.m.megabytes_per_sec, 0),
            self.m.p50_ms,
            self.m.p99_ms,
            self.m
                .ratio
                .map_or_else(|| "–".to_owned(), |r| format!("{:.0} %", r * 100.0)),
            self.target.describe(),
            self.m.note.replace('|', "/"),
        )
    }
}

/// A description of this machine: cores and CPU model.
pub fn machine() -> String {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".to_owned());
    format!("{cores} cores, {model}")
}

/// Replace or append `rows` in the results file at `path`.
pub fn merge_into(path: &Path, rows: &[Row], date: &str, machine: &str) -> anyhow::Result<()> {
    let existing = std::fs::read_to_string(path).unwrap_or_default();
    let mut kept: Vec<String> = existing
        .split_once(MARKER)
        .map(|(_, tail)| {
            tail.lines()
                .filter(|l| l.starts_with("| ") && !l.starts_with("| scenario "))
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    for row in rows {
        let line = row.markdown(date, machine);
        let key = format!("| {} |", row.name);
        match kept.iter_mut().find(|l| l.starts_with(&key)) {
            Some(slot) => *slot = line,
            None => kept.push(line),
        }
    }
    let mut out = String::new();
    out.push_str("# Benchmark results\n\n");
    out.push_str(
        "Produced by `bench/run` (release build, server and load generator on the same \
         machine over loopback, keep-alive HTTP/1.1). Every scenario is compared with the \
         bare-HTTP ceiling (`GET /_health`) measured in the same run at the same number of \
         connections. Rerun with `bench/run [service…]`; rows of scenarios not rerun are kept.\n\n",
    );
    out.push_str(MARKER);
    out.push('\n');
    out.push_str(HEADER);
    out.push('\n');
    for line in kept {
        out.push_str(&line);
        out.push('\n');
    }
    std::fs::write(path, out).with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(name: &str, rps: f64) -> Row {
        Row {
            name: name.to_owned(),
            m: Measurement {
                concurrency: 32,
                rps,
                ..Measurement::default()
            },
            target: Target::None,
        }
    }

    #[test]
    fn merging_replaces_rows_by_name_and_keeps_others() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("RESULTS.md");
        merge_into(&path, &[row("a", 1.0), row("b", 2.0)], "d1", "m").unwrap();
        merge_into(&path, &[row("b", 3.0), row("c", 4.0)], "d2", "m").unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let rows: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("| ") && !l.starts_with("| scenario"))
            .collect();
        assert_eq!(rows.len(), 3, "{text}");
        assert!(rows[0].starts_with("| a | d1 |"));
        assert!(
            rows[1].starts_with("| b | d2 |") && rows[1].contains("| 3 |"),
            "{}",
            rows[1]
        );
        assert!(rows[2].starts_with("| c | d2 |"));
    }
}
