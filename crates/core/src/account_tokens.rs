//! Account tokens: what an account signs in with to manage its own applications.
//!
//! The admin issues an account token for one account; its holder may use the admin API
//! for that account's applications, keys and instances only, within its plan (the server
//! enforces which calls; see `docs/auth.md`). A token is shown once, when issued, as
//! `qat_<24 hex>.<secret>`: the part before the dot is its public id, and only the SHA-256
//! digest of the whole text is stored ([`TokenDigest`]), so a copy of the registry cannot
//! sign in. Revoked tokens stay listed with their revocation time.

use std::{fmt, str::FromStr};

use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};

use crate::{Error, Result, accounts::AccountName, hmac, id::random_bytes, keyring::TokenDigest};

/// Every account token's text starts with this.
pub const PREFIX: &str = "qat_";

/// Bytes of randomness in a token's secret part.
const SECRET_BYTES: usize = 32;

/// The public id of an account token: `qat_` and 24 hexadecimal digits.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AccountTokenId(String);

impl AccountTokenId {
    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for AccountTokenId {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        let hex = s.strip_prefix(PREFIX).unwrap_or("");
        if hex.len() != 24 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            let shown: String = s.chars().take(40).collect();
            return Err(Error::invalid(format!(
                "account token id \"{shown}\" is not valid: ids are qat_ and 24 hexadecimal \
                 digits, as `quintet account token list` prints them"
            )));
        }
        Ok(Self(s.to_ascii_lowercase()))
    }
}

impl fmt::Display for AccountTokenId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// An account token as the registry keeps it: never its text, only the text's digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccountToken {
    /// The public id.
    pub id: AccountTokenId,
    /// The account it signs in as.
    pub account: AccountName,
    /// The SHA-256 digest of the token's whole text.
    pub digest: TokenDigest,
    /// When it was issued, milliseconds since the Unix epoch.
    pub created_ms: i64,
    /// When it was revoked; revoked tokens sign in nobody.
    pub revoked_ms: Option<i64>,
}

impl AccountToken {
    /// A new token for `account` issued at `now_ms`, and its text, which is shown once
    /// and kept nowhere.
    pub fn generate(account: &AccountName, now_ms: i64) -> Result<(Self, String)> {
        let id = AccountTokenId(format!("{PREFIX}{}", hmac::to_hex(&random_bytes(12)?)));
        let text = format!(
            "{id}.{}",
            URL_SAFE_NO_PAD.encode(random_bytes(SECRET_BYTES)?)
        );
        let token = Self {
            digest: TokenDigest::of(text.as_bytes()),
            id,
            account: account.clone(),
            created_ms: now_ms,
            revoked_ms: None,
        };
        Ok((token, text))
    }

    /// Whether `text` is this token and it is not revoked (digests compared in constant
    /// time).
    pub fn admits(&self, text: &str) -> bool {
        self.revoked_ms.is_none() && self.digest.matches(text.as_bytes())
    }
}

/// The id of a presented bearer token that looks like an account token; `None` for any
/// other token (the admin token, a JWT).
pub fn presented_id(text: &str) -> Option<AccountTokenId> {
    let (id, secret) = text.split_once('.')?;
    if !text.starts_with(PREFIX) || secret.is_empty() || secret.contains('.') {
        return None;
    }
    id.parse().ok()
}

/// An account has no token `id`.
pub fn token_missing(account: impl fmt::Display, id: impl fmt::Display) -> Error {
    Error::not_found(format!("account \"{account}\" has no token \"{id}\""))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_admitted_by_its_text_only_until_revoked() {
        let account: AccountName = "acme".parse().unwrap();
        let (token, text) = AccountToken::generate(&account, 5).unwrap();
        assert!(text.starts_with("qat_"));
        assert_eq!(presented_id(&text), Some(token.id.clone()));
        assert!(token.admits(&text));
        assert!(!token.admits(&format!("{text}x")));
        let (other, other_text) = AccountToken::generate(&account, 5).unwrap();
        assert_ne!(token.id, other.id);
        assert!(!token.admits(&other_text));
        // Nothing of the text is kept but its digest.
        assert!(!format!("{token:?}").contains(text.split_once('.').unwrap().1));
        let revoked = AccountToken {
            revoked_ms: Some(6),
            ..token
        };
        assert!(!revoked.admits(&text));
    }

    #[test]
    fn only_account_token_shapes_are_presented_ids() {
        for (text, is) in [
            ("qat_0123456789abcdef01234567.secret", true),
            ("qat_0123456789abcdef01234567.", false),
            ("qat_0123456789abcdef01234567", false),
            ("qat_0123.secret", false),
            ("eyJhbGciOiJIUzI1NiJ9.e30.sig", false),
            ("an-admin-token", false),
            ("qat_0123456789abcdef0123456g.secret", false),
        ] {
            assert_eq!(presented_id(text).is_some(), is, "{text}");
        }
    }
}
