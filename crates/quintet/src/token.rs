//! `quintet token <connection string>`: sign an access token locally, as clients do, for
//! curl and scripts. Nothing is sent anywhere.

use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use clap::Args;
use quintet_core::{jwt, keys::ConnectionString};
use serde_json::json;

/// Arguments of `quintet token`.
#[derive(Debug, Args)]
pub struct TokenArgs {
    /// The key's connection string, `cloud://<key>:<secret>@<host>/<app>`.
    #[arg(env = "QUINTET_CS", hide_env_values = true)]
    pub connection_string: String,

    /// Seconds the token stays valid.
    #[arg(long, default_value_t = 600, value_name = "SECONDS")]
    pub ttl: u64,
}

/// The token for `args` at `now_s` (seconds since the epoch).
pub fn token(args: &TokenArgs, now_s: u64) -> anyhow::Result<String> {
    if args.ttl == 0 {
        bail!("--ttl must be at least 1 second");
    }
    let cs: ConnectionString = args.connection_string.parse()?;
    Ok(jwt::sign_hs256(
        cs.secret.as_bytes(),
        &json!({"sub": cs.key.as_str(), "iat": now_s, "exp": now_s.saturating_add(args.ttl)}),
    ))
}

/// Print the token for `args`.
pub fn run(args: TokenArgs) -> anyhow::Result<()> {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .context("the system clock is before 1970")?
        .as_secs();
    println!("{}", token(&args, now)?);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_name_the_key_and_expire_after_the_ttl() {
        let args = TokenArgs {
            connection_string: "cloud://qk_1:s3cret@h:1/shop".into(),
            ttl: 60,
        };
        let t = token(&args, 1_000).unwrap();
        let u = jwt::Unverified::parse(&t).unwrap();
        assert_eq!(u.subject(), Some("qk_1"));
        let claims = u.verify(b"s3cret", 1_000_000).unwrap();
        assert_eq!(claims.exp_ms, 1_060_000);
        let bad = TokenArgs {
            connection_string: "https://x".into(),
            ttl: 60,
        };
        assert!(format!("{}", token(&bad, 0).unwrap_err()).contains("scheme must be cloud"));
    }
}
