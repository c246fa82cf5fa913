//! The black-box compatibility suites of `compat/hyper-connect` against a `quintet serve`
//! child, for tests that check a node they made another way (a restored backup). The
//! driver is `quintet_testkit::hyper_connect`.

use quintet_testkit::hyper_connect::{install, run, suites};

/// Run every suite in the domain form against the node at `base` (`--auth none`),
/// asserting that every check passed; skipped (with a message) only where node may be
/// missing.
pub(crate) async fn hyper_connect_suites(base: &str) {
    let Some(modules) = install() else { return };
    run(
        &modules,
        base.trim_end_matches('/'),
        "domain",
        &suites(),
        &[],
    )
    .await;
}
