//! JSON Web Tokens (RFC 7519) signed with HMAC-SHA256, `HS256`: the only kind quintet
//! accepts, for the application form (signed with an access key's secret) and for the
//! domain form in `--auth jwt` mode (signed with the configured secret).
//!
//! # Rules
//! - Compact form `header.payload.signature`, each part unpadded base64url, at most
//!   [`MAX_TOKEN_BYTES`] in all.
//! - The header is a JSON object whose `alg` is exactly `HS256`. Every other algorithm,
//!   `none` included, is refused, so a token can never choose how it is checked ("algorithm
//!   confusion"). A `crit` header is refused (no extension is understood). Other header
//!   fields (`typ`, djwt's `type`, `kid`, even `jwk`) are ignored: the key is never taken
//!   from the token.
//! - The payload is a JSON object. `exp` is required; `nbf` and `iat` are honoured when
//!   present; all three are NumericDates (seconds since the epoch, fractions allowed). `sub`
//!   must be a string when present.
//! - The signature is checked in constant time before any claim is trusted.
//! - Times have [`LEEWAY_SECS`] of leeway for clock skew: a token is valid while
//!   `now < exp + leeway`, once `nbf - leeway <= now`, and when `iat - leeway <= now`.
//!
//! Built on [`crate::hmac`] and `base64` rather than `jsonwebtoken`: one algorithm needs
//! no algorithm negotiation (the very thing confusion attacks abuse), the rules above stay
//! readable in one file with their tests, `core` keeps its small dependency set, and the
//! clock comes from quintet's [`crate::Clock`] so tests can step it.
//!
//! ```
//! use quintet_core::jwt;
//! let now_ms = 1_700_000_000_000;
//! let token = jwt::sign_hs256(b"secret", &serde_json::json!({"sub": "k1", "exp": 1_700_000_600}));
//! let unverified = jwt::Unverified::parse(&token).unwrap();
//! assert_eq!(unverified.subject(), Some("k1"));
//! assert!(unverified.verify(b"secret", now_ms).is_ok());
//! ```

use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};
use serde_json::{Map, Value};

use crate::{Error, Result, clock::format_rfc3339_ms, hmac};

/// Seconds of clock skew tolerated on `exp`, `nbf` and `iat`.
pub const LEEWAY_SECS: i64 = 60;

/// Longest token accepted, in bytes.
pub const MAX_TOKEN_BYTES: usize = 8 * 1024;

const LEEWAY_MS: i64 = LEEWAY_SECS * 1000;

/// The registered claims quintet reads, times in milliseconds since the epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claims {
    /// `sub`: for access keys, the key.
    pub sub: Option<String>,
    /// `exp`: the token is not accepted from this instant on (plus leeway).
    pub exp_ms: i64,
    /// `nbf`: the token is not accepted before this instant (minus leeway).
    pub nbf_ms: Option<i64>,
    /// `iat`: when the token was issued; a time in the future is refused.
    pub iat_ms: Option<i64>,
    /// `aud`: the audiences the token is meant for (a string claim becomes one).
    pub aud: Vec<String>,
}

impl Claims {
    /// The server's own rules on top of the token's: its validity from `now_ms` to `exp`
    /// at most `max_ttl`, and `aud` containing `audience`, each when set.
    pub fn check_policy(
        &self,
        now_ms: i64,
        max_ttl: Option<std::time::Duration>,
        audience: Option<&str>,
    ) -> Result<()> {
        if let Some(max) = max_ttl {
            let max_ms = i64::try_from(max.as_millis()).unwrap_or(i64::MAX);
            if self.exp_ms.saturating_sub(now_ms) > max_ms.saturating_add(LEEWAY_MS) {
                return Err(unauthenticated(format!(
                    "the access token is valid until {}, longer than this server accepts \
                     ({} seconds from now, --jwt-max-ttl); sign one with an earlier exp",
                    format_rfc3339_ms(self.exp_ms),
                    max.as_secs()
                )));
            }
        }
        if let Some(aud) = audience
            && !self.aud.iter().any(|a| a == aud)
        {
            return Err(unauthenticated(format!(
                "the access token is not meant for this server: its aud claim must be \
                 \"{}\" (--jwt-aud)",
                excerpt(aud, 64)
            )));
        }
        Ok(())
    }
}

/// A token whose shape and header are valid and whose claims are read, but whose
/// signature is not checked yet. Only [`Unverified::subject`] may be used before
/// [`Unverified::verify`], to find the secret to check it with.
#[derive(Debug)]
pub struct Unverified<'a> {
    signing_input: &'a str,
    signature: Vec<u8>,
    claims: Claims,
}

fn unauthenticated(msg: impl Into<String>) -> Error {
    Error::Unauthenticated(msg.into())
}

fn decode_json_object(part: &str, what: &str) -> Result<Map<String, Value>> {
    let bad = || {
        unauthenticated(format!(
            "the access token's {what} is not a base64url-encoded JSON object"
        ))
    };
    let bytes = URL_SAFE_NO_PAD.decode(part).map_err(|_| bad())?;
    match serde_json::from_slice::<Value>(&bytes) {
        Ok(Value::Object(map)) => Ok(map),
        _ => Err(bad()),
    }
}

/// A NumericDate claim in milliseconds: `None` when absent, an error when not a number.
fn numeric_date(payload: &Map<String, Value>, claim: &str) -> Result<Option<i64>> {
    match payload.get(claim) {
        None => Ok(None),
        Some(v) => match v.as_f64().filter(|f| f.is_finite()) {
            // `as` saturates, so absurd dates become the far past or future.
            Some(secs) => Ok(Some((secs * 1000.0).floor() as i64)),
            None => Err(unauthenticated(format!(
                "the access token's {claim} claim must be a number of seconds since the epoch"
            ))),
        },
    }
}

/// At most `max` characters of `s`, for quoting untrusted input in messages.
fn excerpt(s: &str, max: usize) -> String {
    let mut out: String = s.chars().take(max).collect();
    if out.len() < s.len() {
        out.push('…');
    }
    out
}

impl<'a> Unverified<'a> {
    /// Check the token's shape and header and read its claims. Every failure is
    /// [`Error::Unauthenticated`] with a sentence saying what is wrong.
    pub fn parse(token: &'a str) -> Result<Self> {
        if token.len() > MAX_TOKEN_BYTES {
            return Err(unauthenticated(format!(
                "the access token is longer than {MAX_TOKEN_BYTES} bytes"
            )));
        }
        let mut parts = token.split('.');
        let (Some(header), Some(payload), Some(signature), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(unauthenticated(
                "the access token is not a JWT: expected three base64url parts separated by dots",
            ));
        };
        let header_map = decode_json_object(header, "header")?;
        match header_map.get("alg") {
            Some(Value::String(alg)) if alg == "HS256" => {}
            Some(Value::String(alg)) => {
                return Err(unauthenticated(format!(
                    "the access token is signed with \"{}\"; quintet accepts only HS256",
                    excerpt(alg, 32)
                )));
            }
            _ => {
                return Err(unauthenticated(
                    "the access token's header has no alg; sign the token with HS256",
                ));
            }
        }
        if header_map.contains_key("crit") {
            return Err(unauthenticated(
                "the access token's header lists critical extensions (crit), which quintet does not support",
            ));
        }
        let payload_map = decode_json_object(payload, "payload")?;
        let sub = match payload_map.get("sub") {
            None => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(_) => {
                return Err(unauthenticated(
                    "the access token's sub claim must be a string",
                ));
            }
        };
        let exp_ms = numeric_date(&payload_map, "exp")?.ok_or_else(|| {
            unauthenticated("the access token has no exp claim; give it an expiry time")
        })?;
        let aud = match payload_map.get("aud") {
            None => Vec::new(),
            Some(Value::String(a)) => vec![a.clone()],
            Some(Value::Array(items)) if items.iter().all(Value::is_string) => items
                .iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect(),
            Some(_) => {
                return Err(unauthenticated(
                    "the access token's aud claim must be a string or an array of strings",
                ));
            }
        };
        let claims = Claims {
            sub,
            aud,
            exp_ms,
            nbf_ms: numeric_date(&payload_map, "nbf")?,
            iat_ms: numeric_date(&payload_map, "iat")?,
        };
        let signature = URL_SAFE_NO_PAD
            .decode(signature)
            .map_err(|_| unauthenticated("the access token's signature is not base64url"))?;
        Ok(Self {
            signing_input: &token[..header.len() + 1 + payload.len()],
            signature,
            claims,
        })
    }

    /// The `sub` claim, not yet trustworthy: use it only to find the secret to verify with.
    pub fn subject(&self) -> Option<&str> {
        self.claims.sub.as_deref()
    }

    /// Check the signature with `secret` (constant time), then the times against `now_ms`.
    pub fn verify(self, secret: &[u8], now_ms: i64) -> Result<Claims> {
        if !hmac::verify(secret, &[self.signing_input.as_bytes()], &self.signature) {
            return Err(unauthenticated(
                "the access token's signature is not valid: sign it with HS256 and the right secret",
            ));
        }
        let c = self.claims;
        if now_ms >= c.exp_ms.saturating_add(LEEWAY_MS) {
            return Err(unauthenticated(format!(
                "the access token expired at {}; sign a new one",
                format_rfc3339_ms(c.exp_ms)
            )));
        }
        if let Some(nbf) = c.nbf_ms
            && nbf.saturating_sub(LEEWAY_MS) > now_ms
        {
            return Err(unauthenticated(format!(
                "the access token is not valid before {} (nbf)",
                format_rfc3339_ms(nbf)
            )));
        }
        if let Some(iat) = c.iat_ms
            && iat.saturating_sub(LEEWAY_MS) > now_ms
        {
            return Err(unauthenticated(format!(
                "the access token says it was issued at {} (iat), which is in the future; check the clock of the machine that signs tokens",
                format_rfc3339_ms(iat)
            )));
        }
        Ok(c)
    }
}

/// Sign `claims` with `header` (which should name `alg`) using HMAC-SHA256. For clients,
/// tests and tools; the server only verifies.
pub fn sign(secret: &[u8], header: &Value, claims: &Value) -> String {
    let mut out = URL_SAFE_NO_PAD.encode(header.to_string());
    out.push('.');
    out.push_str(&URL_SAFE_NO_PAD.encode(claims.to_string()));
    let mac = hmac::sign(secret, &[out.as_bytes()]);
    out.push('.');
    out.push_str(&URL_SAFE_NO_PAD.encode(mac));
    out
}

/// Sign `claims` as an HS256 JWT (`{"alg":"HS256","typ":"JWT"}`).
pub fn sign_hs256(secret: &[u8], claims: &Value) -> String {
    sign(
        secret,
        &serde_json::json!({"alg": "HS256", "typ": "JWT"}),
        claims,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    const NOW: i64 = 1_700_000_000_000;
    const NOW_S: i64 = NOW / 1000;

    fn check(token: &str, secret: &[u8]) -> Result<Claims> {
        Unverified::parse(token)?.verify(secret, NOW)
    }

    fn msg(r: Result<Claims>) -> String {
        match r {
            Err(Error::Unauthenticated(m)) => m,
            other => panic!("expected Unauthenticated, got {other:?}"),
        }
    }

    #[test]
    fn a_valid_token_passes_with_its_claims() {
        let t = sign_hs256(b"s", &json!({"sub": "k", "exp": NOW_S + 600, "iat": NOW_S}));
        let c = check(&t, b"s").unwrap();
        assert_eq!(c.sub.as_deref(), Some("k"));
        assert_eq!(c.exp_ms, (NOW_S + 600) * 1000);
        assert_eq!(c.iat_ms, Some(NOW));
    }

    #[test]
    fn other_algorithms_are_refused_whatever_the_signature() {
        for alg in [
            "none", "HS384", "HS512", "RS256", "ES256", "PS256", "EdDSA", "hs256", "",
        ] {
            let t = sign(
                b"s",
                &json!({"alg": alg}),
                &json!({"sub": "k", "exp": NOW_S + 60}),
            );
            assert!(msg(check(&t, b"s")).contains("accepts only HS256"), "{alg}");
        }
        // The classic `none` token has an empty signature.
        let header = URL_SAFE_NO_PAD.encode(r#"{"alg":"none","typ":"JWT"}"#);
        let payload = URL_SAFE_NO_PAD.encode(format!(r#"{{"sub":"k","exp":{}}}"#, NOW_S + 60));
        assert!(msg(check(&format!("{header}.{payload}."), b"s")).contains("\"none\""));
        let no_alg = sign(b"s", &json!({"typ": "JWT"}), &json!({"exp": NOW_S + 60}));
        assert!(msg(check(&no_alg, b"s")).contains("no alg"));
        let alg_number = sign(b"s", &json!({"alg": 256}), &json!({"exp": NOW_S + 60}));
        assert!(msg(check(&alg_number, b"s")).contains("no alg"));
    }

    #[test]
    fn the_key_is_never_taken_from_the_header() {
        // A token that carries its own key (jwk, kid) still verifies only with our secret.
        let header =
            json!({"alg": "HS256", "kid": "other", "jwk": {"kty": "oct", "k": "YXR0YWNrZXI"}});
        let t = sign(
            b"attacker",
            &header,
            &json!({"sub": "k", "exp": NOW_S + 60}),
        );
        assert!(msg(check(&t, b"s")).contains("signature is not valid"));
        let good = sign(b"s", &header, &json!({"sub": "k", "exp": NOW_S + 60}));
        assert!(check(&good, b"s").is_ok());
    }

    #[test]
    fn crit_headers_are_refused() {
        let t = sign(
            b"s",
            &json!({"alg": "HS256", "crit": ["b64"], "b64": false}),
            &json!({"exp": NOW_S + 60}),
        );
        assert!(msg(check(&t, b"s")).contains("crit"));
    }

    #[test]
    fn wrong_secret_is_refused() {
        let t = sign_hs256(b"right", &json!({"sub": "k", "exp": NOW_S + 60}));
        assert!(msg(check(&t, b"wrong")).contains("signature is not valid"));
    }

    #[test]
    fn exp_is_required_and_has_sixty_seconds_of_leeway() {
        let t = sign_hs256(b"s", &json!({"sub": "k"}));
        assert!(msg(check(&t, b"s")).contains("no exp claim"));
        let just_inside = sign_hs256(b"s", &json!({"exp": NOW_S - 59}));
        assert!(check(&just_inside, b"s").is_ok());
        let at_edge = sign_hs256(b"s", &json!({"exp": NOW_S - 60}));
        assert_eq!(
            msg(check(&at_edge, b"s")),
            "the access token expired at 2023-11-14T22:12:20.000Z; sign a new one"
        );
        let fractional = sign_hs256(b"s", &json!({"exp": NOW_S as f64 - 59.5}));
        assert!(check(&fractional, b"s").is_ok());
    }

    #[test]
    fn nbf_and_iat_are_honoured_with_leeway() {
        let ok = sign_hs256(
            b"s",
            &json!({"exp": NOW_S + 600, "nbf": NOW_S + 60, "iat": NOW_S + 60}),
        );
        assert!(check(&ok, b"s").is_ok());
        let early = sign_hs256(b"s", &json!({"exp": NOW_S + 600, "nbf": NOW_S + 61}));
        assert!(msg(check(&early, b"s")).contains("not valid before"));
        let future = sign_hs256(b"s", &json!({"exp": NOW_S + 600, "iat": NOW_S + 61}));
        assert!(msg(check(&future, b"s")).contains("in the future"));
    }

    #[test]
    fn claims_of_the_wrong_type_are_refused() {
        for (claims, needle) in [
            (json!({"exp": "tomorrow"}), "exp claim must be a number"),
            (
                json!({"exp": NOW_S + 60, "nbf": true}),
                "nbf claim must be a number",
            ),
            (
                json!({"exp": NOW_S + 60, "iat": null}),
                "iat claim must be a number",
            ),
            (
                json!({"exp": NOW_S + 60, "sub": 7}),
                "sub claim must be a string",
            ),
        ] {
            let t = sign_hs256(b"s", &claims);
            assert!(msg(check(&t, b"s")).contains(needle), "{claims}");
        }
    }

    #[test]
    fn malformed_tokens_are_refused() {
        let good = sign_hs256(b"s", &json!({"exp": NOW_S + 60}));
        let (head, rest) = good.split_once('.').unwrap();
        let cases = [
            ("", "three base64url parts"),
            ("abc", "three base64url parts"),
            ("a.b", "three base64url parts"),
            (&*format!("{good}.x"), "three base64url parts"),
            ("!!.e30.", "header is not a base64url-encoded JSON object"),
            (
                &*format!("{}.{rest}", URL_SAFE_NO_PAD.encode("[1]")),
                "header is not",
            ),
            (&*format!("{head}.bm90IGpzb24.sig"), "payload is not"),
            (&*format!("{head}=.{rest}"), "header is not"),
            (&*format!("{good}="), "signature is not base64url"),
            (&*"a".repeat(MAX_TOKEN_BYTES + 1), "longer than"),
        ];
        for (token, needle) in cases {
            let m = msg(check(token, b"s"));
            assert!(m.contains(needle), "{token:?}: {m}");
        }
    }

    #[test]
    fn the_server_may_cap_validity_and_require_an_audience() {
        let hour = std::time::Duration::from_secs(3600);
        let claims = |c: Value| check(&sign_hs256(b"s", &c), b"s").unwrap();
        let long = claims(json!({"exp": 253_402_300_799_i64}));
        assert!(long.check_policy(NOW, None, None).is_ok());
        let m = match long.check_policy(NOW, Some(hour), None) {
            Err(Error::Unauthenticated(m)) => m,
            other => panic!("{other:?}"),
        };
        assert!(
            m.contains("9999-12-31") && m.contains("3600 seconds"),
            "{m}"
        );
        let short = claims(json!({"exp": NOW_S + 3600}));
        assert!(short.check_policy(NOW, Some(hour), None).is_ok());
        let aud = claims(json!({"exp": NOW_S + 60, "aud": ["a", "quintet"]}));
        assert!(aud.check_policy(NOW, None, Some("quintet")).is_ok());
        assert!(aud.check_policy(NOW, None, Some("other")).is_err());
        assert!(short.check_policy(NOW, None, Some("quintet")).is_err());
        let one = claims(json!({"exp": NOW_S + 60, "aud": "quintet"}));
        assert!(one.check_policy(NOW, None, Some("quintet")).is_ok());
        let bad = sign_hs256(b"s", &json!({"exp": NOW_S + 60, "aud": 5}));
        assert!(msg(check(&bad, b"s")).contains("aud claim"));
    }

    #[test]
    fn untrusted_alg_values_are_shortened_in_messages() {
        let t = sign(
            b"s",
            &json!({"alg": "X".repeat(500)}),
            &json!({"exp": NOW_S + 60}),
        );
        assert!(msg(check(&t, b"s")).len() < 120);
    }

    proptest! {
        #[test]
        fn signed_tokens_round_trip(
            secret in proptest::collection::vec(any::<u8>(), 0..64),
            sub in "\\PC{0,40}",
            ttl in 1i64..1_000_000,
        ) {
            let t = sign_hs256(&secret, &json!({"sub": sub, "exp": NOW_S + ttl}));
            let u = Unverified::parse(&t).unwrap();
            prop_assert_eq!(u.subject(), Some(sub.as_str()));
            let c = u.verify(&secret, NOW).unwrap();
            prop_assert_eq!(c.exp_ms, (NOW_S + ttl) * 1000);
        }

        #[test]
        fn any_changed_character_is_refused(pos in 0usize..200, replacement in "[A-Za-z0-9_.-]") {
            let t = sign_hs256(b"secret", &json!({"sub": "qk_1", "exp": NOW_S + 600}));
            let pos = pos % t.len();
            let mut chars: Vec<char> = t.chars().collect();
            let new = replacement.chars().next().unwrap();
            prop_assume!(chars[pos] != new);
            chars[pos] = new;
            let tampered: String = chars.into_iter().collect();
            prop_assert!(check(&tampered, b"secret").is_err(), "{tampered}");
        }

        #[test]
        fn parsing_never_panics(token in "\\PC{0,300}") {
            let _ = check(&token, b"s");
        }
    }
}
