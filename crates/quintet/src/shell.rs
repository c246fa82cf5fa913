//! `quintet completions <shell>` and `quintet man [command]`: what a packaged command-line
//! program ships, generated from the same clap definitions as the parser
//! ([`crate::command::command`]), so they cannot drift from the flags (or miss the
//! environment variable of a setting).

use std::io::Write;

use anyhow::{Context, bail};
use clap::Args;
use clap_complete::Shell;

/// Arguments of `quintet completions`.
#[derive(Debug, Clone, Args)]
pub struct CompletionsArgs {
    /// The shell: bash, zsh, fish, elvish or powershell.
    #[arg(value_name = "SHELL")]
    pub shell: Shell,
}

/// Arguments of `quintet man`.
#[derive(Debug, Clone, Args)]
pub struct ManArgs {
    /// A command (`serve`, `key`, …) whose own page to print [default: quintet's]
    #[arg(value_name = "COMMAND")]
    pub command: Option<String>,
}

/// Write the completion script for `args.shell` to `out`.
pub fn completions(args: &CompletionsArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let mut cmd = crate::command::command();
    clap_complete::generate(args.shell, &mut cmd, "quintet", out);
    Ok(())
}

/// Write the manual page of quintet, or of `args.command`, to `out` (roff, for `man -l -`).
pub fn man(args: &ManArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let mut cmd = crate::command::command();
    cmd.build();
    let page = match &args.command {
        None => cmd,
        Some(name) => match cmd.find_subcommand(name) {
            // The page is named as the command is typed: `quintet-serve(1)`. (clap keeps
            // `&'static str` names; one page per process.)
            Some(sub) => {
                let page: &'static str = Box::leak(format!("quintet-{name}").into_boxed_str());
                sub.clone().name(page)
            }
            None => {
                let known: Vec<&str> = cmd
                    .get_subcommands()
                    .map(|c| c.get_name())
                    .filter(|n| *n != "help")
                    .collect();
                bail!(
                    "there is no command \"{name}\"; manual pages exist for: {}",
                    known.join(", ")
                );
            }
        },
    };
    clap_mangen::Man::new(page)
        .render(out)
        .context("writing the manual page")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(f: impl FnOnce(&mut Vec<u8>) -> anyhow::Result<()>) -> String {
        let mut out = Vec::new();
        f(&mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn every_shell_completes_commands_and_serve_settings() {
        for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
            let script = text(|o| completions(&CompletionsArgs { shell }, o));
            // Fish names long flags without their dashes (`-l data-dir`).
            for word in ["serve", "cert", "data-dir", "rate-limit-per-client"] {
                assert!(script.contains(word), "{shell}: {word} missing");
            }
        }
    }

    #[test]
    fn the_manual_names_commands_and_their_settings() {
        let page = text(|o| man(&ManArgs { command: None }, o));
        assert!(page.starts_with(".ie"), "{}", &page[..40]);
        assert!(page.contains("quintet"), "{page}");
        assert!(page.contains("completions"), "{page}");
        let serve = text(|o| {
            man(
                &ManArgs {
                    command: Some("serve".into()),
                },
                o,
            )
        });
        assert!(serve.contains("quintet\\-serve"), "{serve}");
        assert!(serve.contains("rate\\-limit\\-per\\-client"), "{serve}");
    }

    #[test]
    fn an_unknown_command_has_no_page_and_the_error_lists_those_that_do() {
        let err = man(
            &ManArgs {
                command: Some("nope".into()),
            },
            &mut Vec::new(),
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.starts_with("there is no command \"nope\"; manual pages exist for: "),
            "{err}"
        );
        assert!(
            err.contains(" serve") && err.contains(" key,") && !err.contains("help"),
            "{err}"
        );
    }
}
