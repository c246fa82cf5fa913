//! HMAC-SHA256, the one signing primitive quintet uses: queue deliveries, pre-signed URLs
//! and access tokens.

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// HMAC-SHA256 of the concatenation of `parts` under `key`.
///
/// ```
/// // RFC 4231, test case 2.
/// let mac = quintet_core::hmac::sign(b"Jefe", &[b"what do ya want ", b"for nothing?"]);
/// assert_eq!(
///     quintet_core::hmac::to_hex(&mac),
///     "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
/// );
/// ```
pub fn sign(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    // HMAC accepts keys of any length, so this constructor cannot fail.
    let mut mac = match HmacSha256::new_from_slice(key) {
        Ok(m) => m,
        Err(_) => unreachable_key_length(),
    };
    for part in parts {
        mac.update(part);
    }
    mac.finalize().into_bytes().into()
}

#[cold]
fn unreachable_key_length() -> HmacSha256 {
    // `new_from_slice` only rejects key lengths for MACs with fixed key sizes; HMAC has
    // none. Fall back to an empty key rather than panicking.
    <HmacSha256 as hmac::digest::KeyInit>::new(&Default::default())
}

/// Whether `mac` is the HMAC-SHA256 of `parts` under `key`, compared in constant time.
pub fn verify(key: &[u8], parts: &[&[u8]], mac: &[u8]) -> bool {
    let Ok(mut m) = HmacSha256::new_from_slice(key) else {
        return false;
    };
    for part in parts {
        m.update(part);
    }
    m.verify_slice(mac).is_ok()
}

/// Lowercase hexadecimal.
pub fn to_hex(bytes: &[u8]) -> String {
    hex::encode(bytes)
}

/// Bytes from hexadecimal (either case); `None` when not valid hex.
pub fn from_hex(text: &str) -> Option<Vec<u8>> {
    hex::decode(text).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verify_accepts_the_signature_and_nothing_else() {
        let mac = sign(b"k", &[b"a", b"b"]);
        assert!(verify(b"k", &[b"ab"], &mac));
        assert!(!verify(b"k", &[b"ab "], &mac));
        assert!(!verify(b"other", &[b"ab"], &mac));
        assert!(!verify(b"k", &[b"ab"], &mac[..31]));
    }

    #[test]
    fn hex_round_trips() {
        let mac = sign(b"", &[]);
        assert_eq!(from_hex(&to_hex(&mac)).unwrap(), mac);
        assert!(from_hex("zz").is_none());
    }
}
