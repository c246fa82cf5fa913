//! The README's first session, run as a newcomer would type it: every shell block of "A
//! first session" in order, in a fresh directory, with the binary under test as
//! `quintet`. A line whose comment shows what it prints (`# {"ok":true}`, `# created …`)
//! must print that as its first line (`…` and `[...]` stand for anything); every command
//! must succeed.
//!
//! What differs from typing: `cargo run --release -p quintet --` and the `cargo build …
//! alias` line use the binary under test; the line where a person pastes the connection
//! string gets it with `--json`; after each `serve &` the script waits until the server
//! answers, and after each `kill %1` until it has stopped, as a person would.

use std::{path::Path, process::Command};

use regex::Regex;

use crate::BIN;

/// The shell blocks of the section `heading` of `readme`.
fn blocks(readme: &str, heading: &str) -> Vec<String> {
    let start = readme.find(heading).expect("the README has the section");
    let section = &readme[start + heading.len()..];
    let section = &section[..section.find("\n## ").unwrap_or(section.len())];
    section
        .split("```sh\n")
        .skip(1)
        .map(|b| b[..b.find("```").expect("a closed block")].to_owned())
        .collect()
}

/// A line's expected output, from its comment, when the comment shows output.
fn expected(comment: &str) -> Option<String> {
    let shown = comment.split("   ").next().unwrap_or("").trim();
    // `201 {"ok":true}`: the status goes first in some comments.
    let shown = shown
        .strip_prefix(|c: char| c.is_ascii_digit())
        .filter(|_| shown.as_bytes().get(3) == Some(&b' '))
        .map_or(shown, |_| shown[4..].trim());
    (shown.starts_with('{') || shown.starts_with("created ")).then(|| shown.to_owned())
}

/// A pattern of the README (`…`, `[...]` for anything) as an anchored regex.
fn pattern(shown: &str) -> Regex {
    let mut re = String::from("^");
    let mut rest = shown;
    while !rest.is_empty() {
        let next = [rest.find('…'), rest.find("[...]")]
            .into_iter()
            .flatten()
            .min();
        match next {
            Some(i) => {
                re.push_str(&regex::escape(&rest[..i]));
                re.push_str(".*");
                let skip = if rest[i..].starts_with('…') {
                    '…'.len_utf8()
                } else {
                    5
                };
                rest = &rest[i + skip..];
            }
            None => {
                re.push_str(&regex::escape(rest));
                rest = "";
            }
        }
    }
    re.push('$');
    Regex::new(&re).unwrap()
}

/// The script a person's session amounts to, and the checks: (file, pattern).
fn script(blocks: &[String], checks_dir: &Path) -> (String, Vec<(std::path::PathBuf, String)>) {
    let mut out = String::from(
        "set -euo pipefail\n\
         up() { for _ in $(seq 300); do curl -sf http://127.0.0.1:6363/_health >/dev/null && return; \
         curl -skf https://127.0.0.1:6363/_health >/dev/null && return; sleep 0.1; done; exit 1; }\n",
    );
    let mut checks = Vec::new();
    let lines: Vec<&str> = blocks.iter().flat_map(|b| b.lines()).collect();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        i += 1;
        let (code, comment) = match line.find(" # ") {
            Some(at) if !line.trim_start().starts_with('#') => (&line[..at], &line[at + 3..]),
            _ => (line, ""),
        };
        // A comment alone on the next line describes this line's output.
        let mut comment = comment.to_owned();
        if let Some(next) = lines.get(i)
            && next.trim_start().starts_with("# ")
            && !code.trim().is_empty()
        {
            comment = next.trim_start()[2..].to_owned();
            i += 1;
        }
        let code = code
            .trim_end()
            .replace("cargo run --release -p quintet -- ", "quintet ");
        if code.starts_with("cargo build --release -p quintet") {
            continue;
        }
        if code.starts_with("CS='cloud://") {
            out.push_str("CS=$(quintet key create shop --json | jq -r .connectionString)\n");
            continue;
        }
        if code.trim() == "kill %1" {
            out.push_str("kill %1; wait %1 || true\n");
            continue;
        }
        if code.contains(" serve") && code.ends_with('&') {
            out.push_str(&format!("{code}\nup\n"));
            continue;
        }
        match expected(&comment) {
            Some(shown) => {
                let file = checks_dir.join(checks.len().to_string());
                out.push_str(&format!("{code} | tee {}\necho\n", file.display()));
                checks.push((file, shown));
            }
            None => {
                out.push_str(&code);
                out.push('\n');
            }
        }
    }
    (out, checks)
}

#[test]
fn the_first_session_of_the_readme_works_as_written() {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md"))
            .unwrap();
    let blocks = blocks(&readme, "## A first session");
    assert_eq!(blocks.len(), 3, "{blocks:?}");
    let dir = tempfile::tempdir().unwrap();
    let (work, checks_dir, home) = (
        dir.path().join("work"),
        dir.path().join("checks"),
        dir.path().join("home"),
    );
    for d in [&work, &checks_dir, &home] {
        std::fs::create_dir_all(d).unwrap();
    }
    let (text, checks) = script(&blocks, &checks_dir);
    assert!(checks.len() >= 8, "{text}");
    let bin_dir = Path::new(BIN).parent().unwrap();
    let path = format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap());
    let out = Command::new("bash")
        .arg("-c")
        .arg(&text)
        .current_dir(&work)
        .env("PATH", path)
        .env("HOME", &home)
        .env("npm_config_cache", home.join(".npm"))
        .env_remove("QUINTET_DATA_DIR")
        .env_remove("QUINTET_URL")
        .env_remove("QUINTET_MASTER_KEY_FILE")
        .env_remove("QUINTET_ADMIN_TOKEN")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the session failed\n--- script\n{text}\n--- stdout\n{stdout}\n--- stderr\n{stderr}"
    );
    for (file, shown) in &checks {
        // The comment shows the first line (the CLI may add a hint on the next).
        let got = std::fs::read_to_string(file).unwrap();
        let got = got.lines().next().unwrap_or("");
        assert!(
            pattern(shown).is_match(got),
            "the README says `{shown}`, the command printed `{got}`\n--- script\n{text}"
        );
    }
    // hyper-connect's answer, printed by node.
    assert!(
        stdout.lines().any(|l| l == "{ ok: true }"),
        "{stdout}\n{stderr}"
    );
}

#[test]
fn readme_patterns_match_what_they_stand_for() {
    for (shown, got, matches) in [
        (r#"{"ok":true}"#, r#"{"ok":true}"#, true),
        (r#"{"ok":true}"#, r#"{"ok":false}"#, false),
        (
            r#"{"ok":true,"docs":[…]}"#,
            r#"{"ok":true,"docs":[{"_id":"a"}]}"#,
            true,
        ),
        (r#"{"a":[...]}"#, r#"{"a":["x","y"]}"#, true),
        ("created account acme (x)", "created account acme (x)", true),
    ] {
        assert_eq!(pattern(shown).is_match(got), matches, "{shown} ~ {got}");
    }
    assert_eq!(
        expected(r#"201 {"ok":true,"id":"alien"}"#).as_deref(),
        Some(r#"{"ok":true,"id":"alien"}"#)
    );
    assert_eq!(
        expected(r#"{"ok":true}   201: an instance"#).as_deref(),
        Some(r#"{"ok":true}"#)
    );
    assert_eq!(expected("stop the server; what it keeps stays"), None);
}
