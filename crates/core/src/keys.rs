//! Access keys of applications and their connection strings.
//!
//! A key is a public id ([`KeyId`], `qk_` and 24 hex digits) and a [`Secret`] (32 random
//! bytes, unpadded base64url: 43 characters). Both use URL-safe characters only: clients
//! parse the connection string `cloud://<key>:<secret>@<host>/<app>` as a URL and sign
//! tokens with the secret exactly as written there, so nothing may need percent-encoding.
//! Clients sign HS256 JWTs with `sub` = the key (see [`crate::jwt`]).

use std::{fmt, str::FromStr};

use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};

use crate::{AppName, Error, Result, hmac, id::random_bytes};

/// Random bytes in a generated secret.
pub const SECRET_BYTES: usize = 32;

/// Longest key id accepted, in characters.
pub const MAX_KEY_LEN: usize = 64;

fn url_safe(s: &str) -> bool {
    s.bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// The public id of an access key: 1–64 characters of `A-Z a-z 0-9 _ -`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KeyId(String);

impl KeyId {
    /// A new random id: `qk_` followed by 24 lowercase hex digits (96 random bits).
    pub fn generate() -> Result<Self> {
        Ok(Self(format!("qk_{}", hmac::to_hex(&random_bytes(12)?))))
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for KeyId {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        if s.is_empty() || s.len() > MAX_KEY_LEN || !url_safe(s) {
            let shown: String = s.chars().take(MAX_KEY_LEN).collect();
            return Err(Error::invalid(format!(
                "key \"{shown}\" is not valid: keys are 1 to {MAX_KEY_LEN} characters of \
                 A-Z a-z 0-9 _ -, as `quintet key create` prints them"
            )));
        }
        Ok(Self(s.to_owned()))
    }
}

impl fmt::Display for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The secret of an access key, used as written (its UTF-8 bytes) as the HMAC key.
/// `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// A new secret of [`SECRET_BYTES`] random bytes, unpadded base64url.
    pub fn generate() -> Result<Self> {
        Ok(Self(URL_SAFE_NO_PAD.encode(random_bytes(SECRET_BYTES)?)))
    }

    /// A secret read back from a registry (or given by an operator), taken as is.
    pub fn from_stored(s: impl Into<String>) -> Self {
        Self(s.into())
    }

    /// The secret in full. Only for answers that must show it (creation, reveal).
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// The HMAC key: the secret's bytes as written.
    pub fn as_bytes(&self) -> &[u8] {
        self.0.as_bytes()
    }

    /// The secret for display in lists: its last four characters after a mask.
    pub fn redacted(&self) -> String {
        let tail: String = {
            let chars: Vec<char> = self.0.chars().collect();
            chars[chars.len().saturating_sub(4)..].iter().collect()
        };
        format!("****{tail}")
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// Whether two secrets are equal, in time that does not depend on where they differ.
pub fn secrets_equal(a: &[u8], b: &[u8]) -> bool {
    // Compare SHA-256 digests in constant time: equal exactly when the secrets are. (MACs
    // keyed by the secrets would not do: HMAC zero-pads its key, so `x` and `x\0` agree.)
    crate::keyring::digests_equal(
        &crate::keyring::token_digest(a),
        &crate::keyring::token_digest(b),
    )
}

/// An access key of an application.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessKey {
    /// Public id; the `sub` of the tokens it signs.
    pub key: KeyId,
    /// The application it grants access to.
    pub app: AppName,
    /// The signing secret.
    pub secret: Secret,
    /// Creation time, milliseconds since the Unix epoch.
    pub created_ms: i64,
    /// When a request last authenticated with it, if ever.
    pub last_used_ms: Option<i64>,
    /// When it was revoked; revoked keys authenticate nothing.
    pub revoked_ms: Option<i64>,
}

impl AccessKey {
    /// A new key with a random id and secret for `app`, created at `now_ms`.
    pub fn generate(app: &AppName, now_ms: i64) -> Result<Self> {
        Ok(Self {
            key: KeyId::generate()?,
            app: app.clone(),
            secret: Secret::generate()?,
            created_ms: now_ms,
            last_used_ms: None,
            revoked_ms: None,
        })
    }

    /// Whether the key was revoked.
    pub fn is_revoked(&self) -> bool {
        self.revoked_ms.is_some()
    }
}

/// `cloud://<key>:<secret>@<host>/<app>`: everything a client needs to reach an
/// application. Clients turn it into `https://<host>/<app>/<type>/<instance>` and sign a
/// token per request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionString {
    /// The key id (the URL's user name).
    pub key: KeyId,
    /// The secret (the URL's password).
    pub secret: Secret,
    /// Host and optional port.
    pub host: String,
    /// The application.
    pub app: AppName,
}

impl ConnectionString {
    /// The connection string for `key` on the server reached at `base_url`
    /// (`http(s)://host[:port][/path]`; only host and port are kept, since clients build
    /// `https://<host>/<app>/...` from it).
    pub fn new(base_url: &str, key: &AccessKey) -> Result<Self> {
        let rest = base_url
            .strip_prefix("https://")
            .or_else(|| base_url.strip_prefix("http://"))
            .ok_or_else(|| {
                Error::internal(format!("base URL {base_url:?} is not an http(s) URL"))
            })?;
        let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
        let host = authority.rsplit('@').next().unwrap_or_default();
        if host.is_empty() {
            return Err(Error::internal(format!(
                "base URL {base_url:?} has no host"
            )));
        }
        Ok(Self {
            key: key.key.clone(),
            secret: key.secret.clone(),
            host: host.to_owned(),
            app: key.app.clone(),
        })
    }
}

impl fmt::Display for ConnectionString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cloud://{}:{}@{}/{}",
            self.key,
            self.secret.expose(),
            self.host,
            self.app
        )
    }
}

impl FromStr for ConnectionString {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        let bad = |why: &str| {
            Error::invalid(format!(
                "connection string is not valid ({why}): expected cloud://<key>:<secret>@<host>/<app>"
            ))
        };
        let url = url::Url::parse(s).map_err(|_| bad("not a URL"))?;
        if url.scheme() != "cloud" {
            return Err(bad("the scheme must be cloud"));
        }
        let key: KeyId = url
            .username()
            .parse()
            .map_err(|_| bad("missing or invalid key"))?;
        let secret = url.password().filter(|p| !p.is_empty() && url_safe(p));
        let secret = Secret::from_stored(secret.ok_or_else(|| bad("missing or invalid secret"))?);
        let host = url
            .host_str()
            .filter(|h| !h.is_empty())
            .ok_or_else(|| bad("no host"))?;
        let host = match url.port() {
            Some(port) => format!("{host}:{port}"),
            None => host.to_owned(),
        };
        let app: AppName = url
            .path()
            .strip_prefix('/')
            .unwrap_or_default()
            .parse()
            .map_err(|_| bad("missing or invalid application name"))?;
        Ok(Self {
            key,
            secret,
            host,
            app,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn app(s: &str) -> AppName {
        s.parse().unwrap()
    }

    #[test]
    fn generated_keys_and_secrets_are_url_safe_and_long_enough() {
        let k = AccessKey::generate(&app("shop"), 5).unwrap();
        assert!(k.key.as_str().starts_with("qk_") && k.key.as_str().len() == 27);
        assert!(url_safe(k.key.as_str()));
        assert_eq!(k.secret.expose().len(), 43); // 32 bytes, unpadded base64url
        assert!(url_safe(k.secret.expose()));
        assert_ne!(
            k.secret,
            AccessKey::generate(&app("shop"), 5).unwrap().secret
        );
        assert!(k.key.as_str().parse::<KeyId>().is_ok());
    }

    #[test]
    fn secrets_never_show_in_debug_and_redact_to_their_tail() {
        let s = Secret::from_stored("abcdefghij");
        assert_eq!(format!("{s:?}"), "Secret(<redacted>)");
        assert_eq!(s.redacted(), "****ghij");
        assert_eq!(Secret::from_stored("ab").redacted(), "****ab");
    }

    #[test]
    fn secret_comparison() {
        assert!(secrets_equal(b"token-1", b"token-1"));
        assert!(!secrets_equal(b"token-1", b"token-2"));
        assert!(!secrets_equal(b"token", b"token-1"));
        assert!(!secrets_equal(b"", b"x"));
        // Found in review: HMAC-keyed comparison called these equal.
        assert!(!secrets_equal(b"x", b"x\0"));
        assert!(!secrets_equal(
            b"admin-token-long-enough",
            b"admin-token-long-enough\0\0"
        ));
    }

    #[test]
    fn key_ids_are_checked() {
        for bad in ["", "a b", "k:1", "k/1", "ké", &"k".repeat(65)] {
            assert!(bad.parse::<KeyId>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn connection_strings_keep_host_and_port_only() {
        let mut k = AccessKey::generate(&app("shop"), 0).unwrap();
        k.key = "qk_1".parse().unwrap();
        k.secret = Secret::from_stored("s3cr3t");
        for (base, expected) in [
            (
                "https://q.example.com",
                "cloud://qk_1:s3cr3t@q.example.com/shop",
            ),
            (
                "http://127.0.0.1:6363",
                "cloud://qk_1:s3cr3t@127.0.0.1:6363/shop",
            ),
            (
                "https://q.example.com:8443/prefix/",
                "cloud://qk_1:s3cr3t@q.example.com:8443/shop",
            ),
            ("http://[::1]:6363", "cloud://qk_1:s3cr3t@[::1]:6363/shop"),
        ] {
            let cs = ConnectionString::new(base, &k).unwrap();
            assert_eq!(cs.to_string(), expected);
            assert_eq!(expected.parse::<ConnectionString>().unwrap(), cs);
        }
        assert!(ConnectionString::new("ftp://x", &k).is_err());
        assert!(ConnectionString::new("http://", &k).is_err());
    }

    #[test]
    fn bad_connection_strings_say_why() {
        for (s, why) in [
            ("https://k:s@h/app", "the scheme must be cloud"),
            ("cloud://h/app", "missing or invalid key"),
            ("cloud://k@h/app", "missing or invalid secret"),
            ("cloud://k:s@h/", "missing or invalid application name"),
            ("cloud://k:s@h/data", "missing or invalid application name"),
        ] {
            let e = s.parse::<ConnectionString>().unwrap_err();
            assert!(e.to_string().contains(why), "{s}: {e}");
        }
    }

    proptest! {
        #[test]
        fn connection_strings_round_trip(
            host in "[a-z][a-z0-9-]{0,20}(\\.[a-z]{2,5})?",
            port in proptest::option::of(1u16..),
            app_name in "[a-z][a-z0-9_-]{0,30}",
        ) {
            prop_assume!(app_name.parse::<AppName>().is_ok());
            let k = AccessKey::generate(&app(&app_name), 0).unwrap();
            let base = match port {
                Some(p) => format!("https://{host}:{p}"),
                None => format!("https://{host}"),
            };
            let cs = ConnectionString::new(&base, &k).unwrap();
            let parsed: ConnectionString = cs.to_string().parse().unwrap();
            // The URL parser drops default ports of no scheme, so the host is as written.
            prop_assert_eq!(&parsed, &cs);
            prop_assert_eq!(parsed.secret.expose(), k.secret.expose());
        }
    }
}
