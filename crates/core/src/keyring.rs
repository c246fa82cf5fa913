//! The master key, and the secrets it protects at rest.
//!
//! A stolen data directory or database dump must not hand over every application's
//! credentials. So the secrets quintet has to keep readable (access-key secrets, to check
//! tokens and reveal them; queue signing secrets, to sign deliveries) are stored *sealed*
//! with a master key that lives outside the data (a file or an environment variable), and
//! the secrets quintet only has to recognise (the admin token) or can recompute (the key
//! that signs pre-signed URLs, the generated admin token) are derived from it and never
//! stored.
//!
//! # Sealing
//! `seal(purpose, plaintext)` is XChaCha20-Poly1305 under a key derived from the master
//! key, with a random 24-byte nonce and the purpose (for example `access-key:qk_…`) as
//! associated data, so a sealed value copied onto another row does not open. The text form
//! is `qs1.<key id>.<base64url(nonce ‖ ciphertext ‖ tag)>`; the key id (eight hex digits of
//! the master key's SHA-256) says which master key opens it.
//!
//! # Rotation
//! A [`Keyring`] holds the current master key and, during a rotation, previous ones: it
//! seals with the current key, opens with any of them, and says which stored values
//! [`Keyring::needs_reseal`] (plaintext from before sealing existed, or sealed with a
//! previous key), so stores can rewrite them at start-up.
//!
//! ```
//! use quintet_core::keyring::{Keyring, MasterKey};
//! let ring = Keyring::new(MasterKey::generate().unwrap(), vec![]);
//! let sealed = ring.seal("access-key:qk_1", b"s3cret").unwrap();
//! assert!(sealed.starts_with("qs1."));
//! assert_eq!(ring.open("access-key:qk_1", &sealed).unwrap(), b"s3cret");
//! assert!(ring.open("access-key:qk_2", &sealed).is_err());
//! ```

use std::{fmt, str::FromStr};

use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};
use chacha20poly1305::{
    KeyInit, XChaCha20Poly1305, XNonce,
    aead::{Aead, Payload},
};
use sha2::{Digest, Sha256};

use serde_json::Value;

use crate::{
    AppName, Error, Result, hmac,
    id::random_bytes,
    keys::{KeyId, Secret},
};

/// Bytes of a master key.
pub const MASTER_KEY_BYTES: usize = 32;
/// The prefix of sealed values, with the format's version.
pub const SEALED_PREFIX: &str = "qs1.";
const NONCE_BYTES: usize = 24;

/// A master key: 32 bytes and the id that names it in sealed values. `Debug` hides it.
#[derive(Clone, PartialEq, Eq)]
pub struct MasterKey {
    id: String,
    bytes: [u8; MASTER_KEY_BYTES],
}

impl MasterKey {
    /// A new random key.
    pub fn generate() -> Result<Self> {
        let bytes: [u8; MASTER_KEY_BYTES] = random_bytes(MASTER_KEY_BYTES)?
            .try_into()
            .map_err(|_| Error::internal("the random source returned too few bytes"))?;
        Ok(Self::from_bytes(bytes))
    }

    /// The key made of `bytes`.
    pub fn from_bytes(bytes: [u8; MASTER_KEY_BYTES]) -> Self {
        let id = hmac::to_hex(&Sha256::digest(bytes)[..4]);
        Self { id, bytes }
    }

    /// Eight hex digits naming the key (a prefix of its SHA-256; not secret).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The key as text, as [`MasterKey::from_str`] reads it: 64 lowercase hex digits.
    pub fn to_text(&self) -> String {
        hmac::to_hex(&self.bytes)
    }

    /// A 32-byte key for `purpose`, derived from this one (HMAC-SHA256 with a fixed label),
    /// so that no two uses share key material.
    pub fn derive(&self, purpose: &str) -> [u8; 32] {
        hmac::sign(&self.bytes, &[b"quintet derive v1\n", purpose.as_bytes()])
    }
}

impl fmt::Debug for MasterKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MasterKey({}, <redacted>)", self.id)
    }
}

impl FromStr for MasterKey {
    type Err = Error;

    /// 64 hex digits (what `quintet master-key generate` writes), or 32 bytes in base64 or
    /// base64url, padded or not; surrounding whitespace is ignored.
    fn from_str(s: &str) -> Result<Self> {
        let s = s.trim();
        let bytes = if s.len() == 2 * MASTER_KEY_BYTES {
            hmac::from_hex(s)
        } else {
            let unpadded = s.trim_end_matches('=').replace('+', "-").replace('/', "_");
            URL_SAFE_NO_PAD.decode(unpadded).ok()
        };
        bytes
            .and_then(|b| <[u8; MASTER_KEY_BYTES]>::try_from(b).ok())
            .map(Self::from_bytes)
            .ok_or_else(|| {
                Error::invalid(
                    "a master key is 32 bytes written as 64 hex digits (or base64); make one \
                     with `quintet master-key generate`",
                )
            })
    }
}

/// The master keys of a node: the current one, which seals, and previous ones still
/// accepted while a rotation is under way.
#[derive(Debug, Clone)]
pub struct Keyring {
    current: MasterKey,
    previous: Vec<MasterKey>,
}

impl Keyring {
    /// A keyring sealing with `current` and opening with it and `previous`.
    pub fn new(current: MasterKey, previous: Vec<MasterKey>) -> Self {
        let previous = previous
            .into_iter()
            .filter(|k| k.id != current.id)
            .collect();
        Self { current, previous }
    }

    /// A keyring with a random key, for tests and throwaway servers.
    pub fn ephemeral() -> Result<Self> {
        Ok(Self::new(MasterKey::generate()?, Vec::new()))
    }

    /// One random keyring per test process, shared by every registry a test opens (nodes
    /// on one registry share their master key, as in production).
    #[cfg(feature = "conformance")]
    pub fn for_tests() -> std::sync::Arc<Self> {
        static RING: std::sync::OnceLock<std::sync::Arc<Keyring>> = std::sync::OnceLock::new();
        std::sync::Arc::clone(RING.get_or_init(|| {
            let key = MasterKey::generate().unwrap_or_else(|_| MasterKey::from_bytes([7; 32]));
            std::sync::Arc::new(Keyring::new(key, Vec::new()))
        }))
    }

    /// The key that seals.
    pub fn current(&self) -> &MasterKey {
        &self.current
    }

    /// Every key, the current one first.
    pub fn keys(&self) -> impl Iterator<Item = &MasterKey> {
        std::iter::once(&self.current).chain(&self.previous)
    }

    fn by_id(&self, id: &str) -> Option<&MasterKey> {
        self.keys().find(|k| k.id == id)
    }

    /// `plaintext` sealed for `purpose` with the current key.
    pub fn seal(&self, purpose: &str, plaintext: &[u8]) -> Result<String> {
        let nonce = random_bytes(NONCE_BYTES)?;
        let cipher = cipher(&self.current);
        let nonce_arr = XNonce::try_from(nonce.as_slice())
            .map_err(|_| Error::internal("nonce of the wrong length"))?;
        let sealed = cipher
            .encrypt(
                &nonce_arr,
                Payload {
                    msg: plaintext,
                    aad: purpose.as_bytes(),
                },
            )
            .map_err(|_| Error::internal("sealing a secret failed"))?;
        let mut blob = nonce;
        blob.extend_from_slice(&sealed);
        Ok(format!(
            "{SEALED_PREFIX}{}.{}",
            self.current.id,
            URL_SAFE_NO_PAD.encode(blob)
        ))
    }

    /// The plaintext of `sealed` (made by [`Keyring::seal`] for the same `purpose`).
    /// [`Error::Internal`] naming the key id when no key of this ring opens it: a node
    /// started with another master key than the one that sealed the value.
    pub fn open(&self, purpose: &str, sealed: &str) -> Result<Vec<u8>> {
        let malformed = || Error::internal(format!("a sealed value for {purpose} is malformed"));
        let rest = sealed.strip_prefix(SEALED_PREFIX).ok_or_else(malformed)?;
        let (id, blob) = rest.split_once('.').ok_or_else(malformed)?;
        let key = self.by_id(id).ok_or_else(|| {
            Error::internal(format!(
                "a secret ({purpose}) is sealed with master key {id}, which this node does \
                 not have (it has {}): start every node with the same master key, and keep \
                 the previous one configured during a rotation",
                self.keys()
                    .map(MasterKey::id)
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })?;
        let blob = URL_SAFE_NO_PAD.decode(blob).map_err(|_| malformed())?;
        if blob.len() < NONCE_BYTES {
            return Err(malformed());
        }
        let (nonce, ciphertext) = blob.split_at(NONCE_BYTES);
        let nonce = XNonce::try_from(nonce).map_err(|_| malformed())?;
        cipher(key)
            .decrypt(
                &nonce,
                Payload {
                    msg: ciphertext,
                    aad: purpose.as_bytes(),
                },
            )
            .map_err(|_| {
                Error::internal(format!(
                    "a sealed value for {purpose} does not open with master key {id}: it was \
                     altered or copied from elsewhere"
                ))
            })
    }

    /// Whether a stored value is sealed (else it is plaintext from before sealing).
    pub fn is_sealed(stored: &str) -> bool {
        stored.starts_with(SEALED_PREFIX)
    }

    /// Whether a stored value should be rewritten: plaintext, or sealed with a key other
    /// than the current one.
    pub fn needs_reseal(&self, stored: &str) -> bool {
        match stored.strip_prefix(SEALED_PREFIX) {
            Some(rest) => !rest.starts_with(&format!("{}.", self.current.id)),
            None => true,
        }
    }
}

/// How registries store the secrets they hold: each adapter calls these on its way to and
/// from its tables, so every engine seals alike.
impl Keyring {
    /// The stored form of the secret of access key `key`.
    pub fn seal_key_secret(&self, key: &KeyId, secret: &Secret) -> Result<String> {
        self.seal(&format!("access-key:{key}"), secret.as_bytes())
    }

    /// The secret of access key `key` from its stored form; plaintext from before sealing
    /// is taken as it is (and [`Keyring::needs_reseal`] says to rewrite it).
    pub fn open_key_secret(&self, key: &KeyId, stored: &str) -> Result<Secret> {
        if !Self::is_sealed(stored) {
            return Ok(Secret::from_stored(stored));
        }
        let bytes = self.open(&format!("access-key:{key}"), stored)?;
        String::from_utf8(bytes)
            .map(Secret::from_stored)
            .map_err(|_| Error::internal(format!("the sealed secret of key {key} is not text")))
    }

    /// The stored form of an instance's configuration (`InstanceConfig::to_json`) for
    /// instance `name` of `app`: a queue's `secret` becomes `sealedSecret`.
    pub fn seal_config(&self, app: &AppName, name: &str, mut config: Value) -> Result<Value> {
        if let Some(map) = config.as_object_mut()
            && let Some(Value::String(secret)) = map.remove("secret")
        {
            let sealed = self.seal(&config_purpose(app, name), secret.as_bytes())?;
            map.insert("sealedSecret".into(), Value::String(sealed));
        }
        Ok(config)
    }

    /// An instance's configuration from its stored form (see [`Keyring::seal_config`]).
    pub fn open_config(&self, app: &AppName, name: &str, mut config: Value) -> Result<Value> {
        if let Some(map) = config.as_object_mut()
            && let Some(Value::String(sealed)) = map.remove("sealedSecret")
        {
            let bytes = self.open(&config_purpose(app, name), &sealed)?;
            let secret = String::from_utf8(bytes).map_err(|_| {
                Error::internal(format!(
                    "the sealed queue secret of {app}/{name} is not text"
                ))
            })?;
            map.insert("secret".into(), Value::String(secret));
        }
        Ok(config)
    }

    /// Whether a stored configuration should be rewritten: it holds a plaintext secret, or
    /// one sealed with a previous key.
    pub fn config_needs_reseal(&self, stored: &Value) -> bool {
        match (stored.get("secret"), stored.get("sealedSecret")) {
            (Some(Value::String(_)), _) => true,
            (_, Some(Value::String(sealed))) => self.needs_reseal(sealed),
            _ => false,
        }
    }
}

fn config_purpose(app: &AppName, name: &str) -> String {
    format!("queue-secret:{app}/{name}")
}

fn cipher(key: &MasterKey) -> XChaCha20Poly1305 {
    let derived = key.derive("seal");
    // A 32-byte slice is exactly the cipher's key size, so this cannot fail; fall back to
    // the same bytes through the array constructor rather than panicking.
    match XChaCha20Poly1305::new_from_slice(&derived) {
        Ok(c) => c,
        Err(_) => XChaCha20Poly1305::new(&derived.into()),
    }
}

/// The SHA-256 digest of a token, kept instead of the token itself.
pub fn token_digest(token: &[u8]) -> [u8; 32] {
    Sha256::digest(token).into()
}

/// A bearer token known only by its SHA-256 digest: what is kept of the admin token.
/// `Debug` shows nothing of it.
#[derive(Clone, PartialEq, Eq)]
pub struct TokenDigest([u8; 32]);

impl TokenDigest {
    /// The digest of `token`.
    pub fn of(token: &[u8]) -> Self {
        Self(token_digest(token))
    }

    /// Whether `token` has this digest, compared in constant time.
    pub fn matches(&self, token: &[u8]) -> bool {
        digests_equal(&self.0, &token_digest(token))
    }

    /// `sha256:<64 hex digits>`, as stored.
    pub fn to_text(&self) -> String {
        format!("sha256:{}", hmac::to_hex(&self.0))
    }

    /// Read [`TokenDigest::to_text`]'s form back.
    pub fn from_text(text: &str) -> Option<Self> {
        let hex = text.trim().strip_prefix("sha256:")?;
        let bytes = hmac::from_hex(hex)?;
        Some(Self(bytes.try_into().ok()?))
    }
}

impl fmt::Debug for TokenDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TokenDigest(<redacted>)")
    }
}

/// Whether two digests are equal, compared in constant time.
pub fn digests_equal(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn ring() -> Keyring {
        Keyring::ephemeral().unwrap()
    }

    #[test]
    fn master_keys_read_hex_and_base64() {
        let key = MasterKey::generate().unwrap();
        let text = key.to_text();
        assert_eq!(text.len(), 64);
        assert_eq!(text.parse::<MasterKey>().unwrap(), key);
        assert_eq!(format!(" {text}\n").parse::<MasterKey>().unwrap(), key);
        let b64 = base64::engine::general_purpose::STANDARD.encode(key.bytes);
        assert_eq!(b64.parse::<MasterKey>().unwrap(), key);
        for bad in ["", "abc", &text[..62], &"zz".repeat(32)] {
            assert!(bad.parse::<MasterKey>().is_err(), "{bad}");
        }
        assert!(!format!("{key:?}").contains(&text));
        assert_eq!(key.id().len(), 8);
    }

    #[test]
    fn sealed_values_open_only_for_their_purpose_and_with_their_key() {
        let (a, b) = (ring(), ring());
        let sealed = a.seal("p", b"hello").unwrap();
        assert_eq!(a.open("p", &sealed).unwrap(), b"hello");
        assert!(a.open("q", &sealed).is_err());
        let e = b.open("p", &sealed).unwrap_err().to_string();
        assert!(e.contains(a.current().id()), "{e}");
        // Two seals of the same value differ (random nonces).
        assert_ne!(a.seal("p", b"hello").unwrap(), sealed);
    }

    #[test]
    fn a_rotation_opens_old_values_and_asks_for_them_to_be_resealed() {
        let old = MasterKey::generate().unwrap();
        let before = Keyring::new(old.clone(), vec![]);
        let sealed = before.seal("p", b"v").unwrap();
        let after = Keyring::new(MasterKey::generate().unwrap(), vec![old]);
        assert_eq!(after.open("p", &sealed).unwrap(), b"v");
        assert!(after.needs_reseal(&sealed));
        assert!(!before.needs_reseal(&sealed));
        assert!(after.needs_reseal("plaintext-secret"));
        assert!(!after.needs_reseal(&after.seal("p", b"v").unwrap()));
    }

    #[test]
    fn digests_compare_whole_tokens() {
        let d = |s: &[u8]| token_digest(s);
        assert!(digests_equal(&d(b"x"), &d(b"x")));
        // HMAC keys are zero-padded, so comparing MACs keyed by the tokens would call these
        // equal; digests do not.
        assert!(!digests_equal(&d(b"x"), &d(b"x\0")));
        let t = TokenDigest::of(b"token-123");
        assert!(t.matches(b"token-123") && !t.matches(b"token-123\0"));
        assert_eq!(TokenDigest::from_text(&t.to_text()), Some(t.clone()));
        assert_eq!(TokenDigest::from_text("token-123"), None);
        assert!(!format!("{t:?}").contains(&t.to_text()[7..]));
    }

    #[test]
    fn registries_seal_key_secrets_and_queue_secrets() {
        let r = ring();
        let key: KeyId = "qk_1".parse().unwrap();
        let secret = Secret::from_stored("s3cret");
        let stored = r.seal_key_secret(&key, &secret).unwrap();
        assert!(!stored.contains("s3cret"));
        assert_eq!(r.open_key_secret(&key, &stored).unwrap(), secret);
        let other: KeyId = "qk_2".parse().unwrap();
        assert!(
            r.open_key_secret(&other, &stored).is_err(),
            "moved to another key"
        );
        assert_eq!(
            r.open_key_secret(&key, "legacy").unwrap().expose(),
            "legacy"
        );
        let app: AppName = "shop".parse().unwrap();
        let config = serde_json::json!({"target": "https://w.example", "secret": "q-secret"});
        let sealed = r.seal_config(&app, "jobs", config.clone()).unwrap();
        assert!(sealed.get("secret").is_none() && !sealed.to_string().contains("q-secret"));
        assert!(!r.config_needs_reseal(&sealed) && r.config_needs_reseal(&config));
        assert_eq!(r.open_config(&app, "jobs", sealed.clone()).unwrap(), config);
        assert!(r.open_config(&app, "other", sealed).is_err());
        let plain = serde_json::json!({"target": "https://w.example"});
        assert_eq!(r.seal_config(&app, "jobs", plain.clone()).unwrap(), plain);
    }

    proptest! {
        #[test]
        fn tampering_with_any_byte_is_detected(msg in proptest::collection::vec(any::<u8>(), 0..64), at in any::<prop::sample::Index>(), bit in 0u8..8) {
            let r = ring();
            let sealed = r.seal("p", &msg).unwrap();
            let blob_at = SEALED_PREFIX.len() + 9;
            let mut blob = URL_SAFE_NO_PAD.decode(&sealed[blob_at..]).unwrap();
            let i = at.index(blob.len());
            blob[i] ^= 1 << bit;
            let tampered = format!("{}{}", &sealed[..blob_at], URL_SAFE_NO_PAD.encode(blob));
            prop_assert!(r.open("p", &tampered).is_err());
            prop_assert_eq!(r.open("p", &sealed).unwrap(), msg);
        }
    }
}
