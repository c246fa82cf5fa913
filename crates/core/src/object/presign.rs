//! Pre-signed URLs served by quintet itself (the embedded store's; S3 makes its own).
//!
//! A URL grants one kind of operation (download, or upload) on one object of one instance
//! until a moment, with no other credential:
//!
//! ```text
//! <base>/_presigned/storage/<instance>/<path>?expires=<unix seconds>&sig=<kid>.<hex>        domain form
//! <base>/_presigned/<app>/storage/<instance>/<path>?expires=<unix seconds>&sig=<kid>.<hex>  application form
//! ```
//!
//! `<hex>` is the HMAC-SHA256, under the signing key named `<kid>`, of the line
//! `quintet-presign-v2\n<kid>\n<GET|PUT>\n<instance id>\n<expires>\n<path>`. The instance id
//! (not its name) is bound, so a URL dies with its instance even if one of the same name is
//! created later. Paths hold no control characters, so the line is unambiguous.
//!
//! Signing keys are derived from the master keys ([`crate::keyring`]), one per master key,
//! named by its id: during a master-key rotation URLs signed with the previous key keep
//! working until they expire, and new ones are signed with the current key.

use std::{fmt, time::Duration};

use crate::{Error, Instance, InstanceId, Result, clock::format_rfc3339_ms, hmac};

use super::ObjectPath;

/// The route prefix under which pre-signed URLs are served; requests there carry their
/// credential in the URL, so token checks skip it.
pub const PRESIGNED_PREFIX: &str = "/_presigned";
/// Validity of a URL when the request names none: one hour.
pub const DEFAULT_EXPIRY: Duration = Duration::from_secs(3600);
/// Longest validity a URL may have: seven days, as S3.
pub const MAX_EXPIRY: Duration = Duration::from_secs(604_800);

/// The operation a pre-signed URL allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PresignMethod {
    /// Download: `GET` or `HEAD`.
    Get,
    /// Upload of the raw body: `PUT` or `POST`.
    Put,
}

impl PresignMethod {
    /// The name written into the signed line.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Get => "GET",
            Self::Put => "PUT",
        }
    }
}

/// The `expires` query value (seconds) of a request for a URL: default one hour, 1 to
/// 604800.
pub fn parse_expiry(value: Option<&str>) -> Result<Duration> {
    let Some(value) = value else {
        return Ok(DEFAULT_EXPIRY);
    };
    let max = MAX_EXPIRY.as_secs();
    match value.trim().parse::<u64>() {
        Ok(s) if (1..=max).contains(&s) => Ok(Duration::from_secs(s)),
        _ => Err(Error::invalid(format!(
            "expires {} is not valid: give the URL's validity in seconds, from 1 to {max} \
             (7 days)",
            super::path::quote(value)
        ))),
    }
}

/// What a pre-signed URL grants.
#[derive(Debug, Clone, Copy)]
pub struct Grant<'a> {
    /// The operation.
    pub method: PresignMethod,
    /// The instance, by id.
    pub instance: InstanceId,
    /// The object.
    pub path: &'a ObjectPath,
    /// The end of validity, seconds since the Unix epoch.
    pub expires_at_s: i64,
}

/// Signs and checks pre-signed URLs with a server key.
#[derive(Clone)]
pub struct UrlSigner {
    /// `(kid, key)`, the signing key first.
    keys: Vec<(String, [u8; Self::KEY_LEN])>,
}

impl fmt::Debug for UrlSigner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kids: Vec<&str> = self.keys.iter().map(|(k, _)| k.as_str()).collect();
        write!(f, "UrlSigner {{ kids: {kids:?}, keys: <redacted> }}")
    }
}

impl UrlSigner {
    /// Length of a signing key, bytes.
    pub const KEY_LEN: usize = 32;

    /// A signer signing with `key`, named `kid` (letters and digits), that also accepts
    /// URLs signed with the `previous` keys.
    pub fn new(kid: &str, key: [u8; Self::KEY_LEN], previous: Vec<(String, [u8; 32])>) -> Self {
        let mut keys = vec![(kid.to_owned(), key)];
        keys.extend(previous);
        Self { keys }
    }

    /// The signer of a node: keys derived from each of `ring`'s master keys, signing with
    /// the current one.
    pub fn from_keyring(ring: &crate::keyring::Keyring) -> Self {
        Self {
            keys: ring
                .keys()
                .map(|k| (k.id().to_owned(), k.derive("presign")))
                .collect(),
        }
    }

    /// The signed line of a grant under key `kid`.
    fn line(kid: &str, g: &Grant<'_>) -> String {
        format!(
            "quintet-presign-v2\n{kid}\n{}\n{}\n{}\n{}",
            g.method.as_str(),
            g.instance,
            g.expires_at_s,
            g.path
        )
    }

    /// The absolute URL granting `g` on `instance` (whose id must be `g.instance`), served
    /// by the quintet at `base_url`.
    pub fn url(&self, base_url: &str, instance: &Instance, g: &Grant<'_>) -> String {
        let (kid, key) = &self.keys[0];
        format!(
            "{}{}?expires={}&sig={kid}.{}",
            base_url.trim_end_matches('/'),
            presigned_route(instance, g.path),
            g.expires_at_s,
            hmac::to_hex(&hmac::sign(key, &[Self::line(kid, g).as_bytes()]))
        )
    }

    /// Check the `sig` of a request for `g` at `now_ms`: [`Error::Forbidden`] when it does
    /// not match (or names a key this server no longer has) or the URL expired.
    pub fn verify(&self, g: &Grant<'_>, sig: &str, now_ms: i64) -> Result<()> {
        let valid = sig.split_once('.').is_some_and(|(kid, hex)| {
            self.keys.iter().any(|(k, key)| {
                k == kid
                    && hmac::from_hex(hex).is_some_and(|mac| {
                        hmac::verify(key, &[Self::line(kid, g).as_bytes()], &mac)
                    })
            })
        });
        if !valid {
            return Err(invalid_url());
        }
        if now_ms.div_euclid(1000) >= g.expires_at_s {
            return Err(Error::Forbidden(format!(
                "this pre-signed URL expired at {}; ask for a new one",
                format_rfc3339_ms(g.expires_at_s.saturating_mul(1000))
            )));
        }
        Ok(())
    }
}

/// The refusal of a pre-signed URL that was altered, or whose instance is gone. One
/// message for both, so the answer tells nothing about which instances exist.
pub fn invalid_url() -> Error {
    Error::Forbidden(
        "this pre-signed URL is not valid: it was altered, is incomplete, or grants \
         another operation, or its storage instance no longer exists; ask for a new one"
            .into(),
    )
}

/// The route of a pre-signed URL (without query) for `path` in `instance`.
pub fn presigned_route(instance: &Instance, path: &ObjectPath) -> String {
    let app = if instance.app.is_domain() {
        String::new()
    } else {
        format!("/{}", instance.app)
    };
    format!(
        "{PRESIGNED_PREFIX}{app}/storage/{}/{}",
        instance.name,
        path.to_url_path()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{AppName, InstanceConfig};

    fn inst(app: AppName, id: i64) -> Instance {
        Instance {
            id: InstanceId(id),
            app,
            name: "files".parse().unwrap(),
            config: InstanceConfig::Storage,
            created_ms: 0,
        }
    }

    fn query(url: &str) -> (i64, String) {
        let q = url.split_once('?').unwrap().1;
        let mut expires = 0;
        let mut sig = String::new();
        for kv in q.split('&') {
            let (k, v) = kv.split_once('=').unwrap();
            match k {
                "expires" => expires = v.parse().unwrap(),
                "sig" => sig = v.to_owned(),
                _ => panic!("unexpected {k}"),
            }
        }
        (expires, sig)
    }

    #[test]
    fn urls_are_absolute_and_name_the_form() {
        let s = UrlSigner::new("k1", [7; 32], vec![]);
        let path: ObjectPath = "a b/c.txt".parse().unwrap();
        let g = Grant {
            method: PresignMethod::Get,
            instance: InstanceId(3),
            path: &path,
            expires_at_s: 1_000,
        };
        let url = s.url("http://h:1/", &inst(AppName::domain(), 3), &g);
        assert!(
            url.starts_with("http://h:1/_presigned/storage/files/a%20b/c.txt?expires=1000&sig="),
            "{url}"
        );
        let url = s.url("http://h:1", &inst("shop".parse().unwrap(), 3), &g);
        assert!(
            url.starts_with("http://h:1/_presigned/shop/storage/files/a%20b/c.txt?"),
            "{url}"
        );
        let (expires, sig) = query(&url);
        assert_eq!(expires, 1_000);
        assert_eq!(sig.len(), 3 + 64);
        assert!(sig.starts_with("k1."));
        assert!(s.verify(&g, &sig, 999_999).is_ok());
    }

    #[test]
    fn every_bound_part_and_the_key_matter() {
        let s = UrlSigner::new("k1", [7; 32], vec![]);
        let path: ObjectPath = "a.txt".parse().unwrap();
        let other: ObjectPath = "b.txt".parse().unwrap();
        let g = Grant {
            method: PresignMethod::Put,
            instance: InstanceId(3),
            path: &path,
            expires_at_s: 1_000,
        };
        let (_, sig) = query(&s.url("http://h", &inst(AppName::domain(), 3), &g));
        let changed = [
            Grant {
                method: PresignMethod::Get,
                ..g
            },
            Grant {
                instance: InstanceId(4),
                ..g
            },
            Grant { path: &other, ..g },
            Grant {
                expires_at_s: 1_001,
                ..g
            },
        ];
        for c in changed {
            assert_eq!(s.verify(&c, &sig, 0), Err(invalid_url()), "{c:?}");
        }
        assert!(
            UrlSigner::new("k1", [8; 32], vec![])
                .verify(&g, &sig, 0)
                .is_err()
        );
        assert_eq!(s.verify(&g, "zz", 0), Err(invalid_url()));
        assert_eq!(s.verify(&g, &sig[..62], 0), Err(invalid_url()));
        assert_eq!(s.verify(&g, &sig[3..], 0), Err(invalid_url()), "no key id");
        let hex = &sig[3..];
        assert!(
            s.verify(&g, &format!("k1.{}", hex.to_uppercase()), 0)
                .is_ok()
        );
        // Another key id with the same MAC does not pass: the id is signed.
        let two = UrlSigner::new("k2", [7; 32], vec![("k1".into(), [7; 32])]);
        assert_eq!(two.verify(&g, &format!("k2.{hex}"), 0), Err(invalid_url()));
    }

    #[test]
    fn a_rotation_keeps_urls_of_the_previous_key() {
        use crate::keyring::{Keyring, MasterKey};
        let old = MasterKey::generate().unwrap();
        let before = UrlSigner::from_keyring(&Keyring::new(old.clone(), vec![]));
        let path: ObjectPath = "a".parse().unwrap();
        let g = Grant {
            method: PresignMethod::Get,
            instance: InstanceId(1),
            path: &path,
            expires_at_s: 10,
        };
        let (_, sig) = query(&before.url("http://h", &inst(AppName::domain(), 1), &g));
        let during =
            UrlSigner::from_keyring(&Keyring::new(MasterKey::generate().unwrap(), vec![old]));
        assert!(during.verify(&g, &sig, 0).is_ok());
        let (_, new_sig) = query(&during.url("http://h", &inst(AppName::domain(), 1), &g));
        assert_ne!(new_sig[..8], sig[..8], "signed with the new key");
        let after = UrlSigner::from_keyring(&Keyring::new(MasterKey::generate().unwrap(), vec![]));
        assert_eq!(after.verify(&g, &sig, 0), Err(invalid_url()));
    }

    #[test]
    fn expiry_is_checked_after_the_signature() {
        let s = UrlSigner::new("k1", [1; 32], vec![]);
        let path: ObjectPath = "a".parse().unwrap();
        let g = Grant {
            method: PresignMethod::Get,
            instance: InstanceId(1),
            path: &path,
            expires_at_s: 10,
        };
        let (_, sig) = query(&s.url("http://h", &inst(AppName::domain(), 1), &g));
        assert!(s.verify(&g, &sig, 9_999).is_ok());
        assert_eq!(
            s.verify(&g, &sig, 10_000),
            Err(Error::Forbidden(
                "this pre-signed URL expired at 1970-01-01T00:00:10.000Z; ask for a new one".into()
            ))
        );
    }

    #[test]
    fn expiry_values() {
        assert_eq!(parse_expiry(None).unwrap(), DEFAULT_EXPIRY);
        assert_eq!(parse_expiry(Some("1")).unwrap(), Duration::from_secs(1));
        assert_eq!(parse_expiry(Some("604800")).unwrap(), MAX_EXPIRY);
        for bad in ["0", "604801", "-1", "1h", "", "1.5"] {
            assert!(parse_expiry(Some(bad)).is_err(), "{bad}");
        }
        assert_eq!(
            parse_expiry(Some("1h")).unwrap_err().to_string(),
            "expires \"1h\" is not valid: give the URL's validity in seconds, from 1 to \
             604800 (7 days)"
        );
    }

    #[test]
    fn debug_hides_the_key() {
        let shown = format!("{:?}", UrlSigner::new("k1", [0xab; 32], vec![]));
        assert!(!shown.contains("171") && shown.contains("k1"), "{shown}");
    }
}
