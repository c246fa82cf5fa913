//! Crash points for tests: a debug build started with `QUINTET_FAILPOINT=<name>` aborts
//! the process (as `kill -9` would: nothing flushed, nothing closed) when it reaches the
//! point of that name, so crash tests stop it at an exact moment instead of racing a
//! kill against a request. Release builds compile the points to nothing.
//!
//! | point | reached |
//! |---|---|
//! | `instance-destroyed` | `DELETE /<type>/<name>`: the registry forgot the instance, its contents are still there |
//! | `backup-midway` | a backup (`quintet backup`, `POST /_admin/backups`): its files are copied, its manifest is not written |
//! | `app-contents-midway` | `DELETE /_admin/apps/<app>`: the registry forgot the application, the first instance's contents are gone, the others' are not |

use std::sync::OnceLock;

static ARMED: OnceLock<String> = OnceLock::new();

/// Arm the point `name` for the life of the process (the binary calls this at start in
/// debug builds; later calls change nothing).
pub fn arm(name: &str) {
    if cfg!(debug_assertions) {
        let _ = ARMED.set(name.to_owned());
    }
}

/// Abort the process here when `name` is the armed point.
pub fn hit(name: &str) {
    if cfg!(debug_assertions) && ARMED.get().is_some_and(|armed| armed == name) {
        eprintln!("quintet: failpoint {name} reached: aborting");
        std::process::abort();
    }
}
