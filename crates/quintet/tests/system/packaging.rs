//! What operators install besides the binary: the systemd unit, shell completions and the
//! manual page, checked with the real binary and the real tools.

use std::process::Command;

use crate::BIN;

/// The repository's root (two levels above this crate).
fn repo() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `systemd-analyze verify` accepts the unit (every directive known, the binary
/// executable) once its `ExecStart` points at the binary under test.
#[test]
fn the_systemd_unit_verifies() {
    let Ok(version) = Command::new("systemd-analyze").arg("--version").output() else {
        assert!(
            std::env::var_os("REQUIRE_ENGINES").is_none(),
            "systemd-analyze is not installed; the suite needs it to check packaging/quintet.service"
        );
        return;
    };
    assert!(version.status.success());
    let unit = std::fs::read_to_string(repo().join("packaging/quintet.service")).unwrap();
    assert!(
        unit.contains("ExecStart=/usr/local/bin/quintet serve\n"),
        "{unit}"
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("quintet.service");
    std::fs::write(&path, unit.replace("/usr/local/bin/quintet", BIN)).unwrap();
    let out = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&path)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    // Warnings (an unknown directive, a bad value) are printed without failing: none.
    let warnings: Vec<&str> = said
        .lines()
        .filter(|l| l.contains("quintet.service"))
        .collect();
    assert!(warnings.is_empty(), "{said}");
}

#[test]
fn completions_and_the_manual_come_from_the_binary() {
    for (args, expect) in [
        (&["completions", "bash"][..], "--rate-limit-per-client"),
        (&["completions", "zsh"], "#compdef quintet"),
        (&["completions", "fish"], "complete -c quintet"),
        (&["man"], ".TH quintet"),
        (&["man", "serve"], "rate\\-limit\\-per\\-client"),
    ] {
        let out = Command::new(BIN).args(args).output().unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains(expect), "{args:?}: {expect} missing");
    }
    let out = Command::new(BIN)
        .args(["completions", "tcsh"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let out = Command::new(BIN).args(["man", "nope"]).output().unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .starts_with("quintet: there is no command \"nope\"; manual pages exist for: account,"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
