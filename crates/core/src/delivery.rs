//! The pure rules of delivering a job to a worker: the signature header, the retry
//! schedule, and which addresses an operator may forbid as targets.
//!
//! # Signature
//! `X-SVC-SIGNATURE: t=<ms>,sig=<hex>` where `<ms>` is the time of the attempt in
//! milliseconds since the epoch (13 digits) and `<hex>` the lowercase hexadecimal
//! HMAC-SHA256 under the queue's secret of `<ms>` + `.` + the body. A worker verifies it by
//! splitting the header on `,`, each element on `=`, taking `t` and `sig`, recomputing and
//! comparing ([`verify_signature`] does exactly that).
//!
//! That scheme, the spec's, leaves the job's id unsigned: a captured delivery can be sent
//! again under a new `X-SVC-JOB-ID`, and a worker that deduplicates by id takes it as a new
//! job. A queue created with `"signJobId": true` signs the id too:
//! `X-SVC-SIGNATURE: t=<ms>,id=<job id>,sig=<hex>` with the MAC over `<ms>.<id>.<body>`
//! ([`signature_header_with_id`], [`verify_signature_with_id`]). A worker checking the
//! spec's scheme refuses such a header (its MAC does not match), so the option fails
//! closed.
//!
//! # Retries
//! A delivery that could not reach the worker (connection refused, reset, timeout) is tried
//! again after [`backoff_ms`]: the base delay doubled for every earlier attempt, capped at
//! [`MAX_BACKOFF_MS`], with "equal jitter" (a random point in the upper half of the delay)
//! so that jobs failing together do not come back together.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::hmac;

/// Name of the signature header.
pub const SIGNATURE_HEADER: &str = "X-SVC-SIGNATURE";
/// Name of the header carrying the job's id, stable across attempts.
pub const JOB_ID_HEADER: &str = "X-SVC-JOB-ID";
/// Longest wait between two attempts: one hour.
pub const MAX_BACKOFF_MS: u64 = 60 * 60 * 1000;

/// The `X-SVC-SIGNATURE` value for `body` sent at `t_ms` under `secret`.
///
/// The timestamp is written with at least 13 digits (zero-padded for clocks before
/// September 2001, which real clocks are not).
///
/// ```
/// let h = quintet_core::delivery::signature_header("s3cret", 1_700_000_000_000, br#"{"a":1}"#);
/// assert!(h.starts_with("t=1700000000000,sig="));
/// assert!(quintet_core::delivery::verify_signature(
///     "s3cret", &h, br#"{"a":1}"#, 1_700_000_000_000, 300_000
/// ));
/// ```
pub fn signature_header(secret: &str, t_ms: i64, body: &[u8]) -> String {
    let t = format!("{:013}", t_ms.max(0));
    let mac = hmac::sign(secret.as_bytes(), &[t.as_bytes(), b".", body]);
    format!("t={t},sig={}", hmac::to_hex(&mac))
}

/// The `X-SVC-SIGNATURE` value of a queue that signs job ids: `t=<ms>,id=<id>,sig=<hex>`,
/// the MAC over `<ms>.<id>.<body>`.
pub fn signature_header_with_id(secret: &str, t_ms: i64, id: &str, body: &[u8]) -> String {
    let t = format!("{:013}", t_ms.max(0));
    let mac = hmac::sign(
        secret.as_bytes(),
        &[t.as_bytes(), b".", id.as_bytes(), b".", body],
    );
    format!("t={t},id={id},sig={}", hmac::to_hex(&mac))
}

/// The `t`, `id` and `sig` elements of a signature header (split on `,`, then `=`; other
/// elements ignored).
fn elements(header: &str) -> (Option<&str>, Option<&str>, Option<&str>) {
    let (mut t, mut id, mut sig) = (None, None, None);
    for element in header.split(',') {
        let mut kv = element.splitn(2, '=');
        match (kv.next().map(str::trim), kv.next()) {
            (Some("t"), Some(v)) => t = Some(v.trim()),
            (Some("id"), Some(v)) => id = Some(v.trim()),
            (Some("sig"), Some(v)) => sig = Some(v.trim()),
            _ => {}
        }
    }
    (t, id, sig)
}

/// Whether `t` is within `tolerance_ms` of `now_ms`, either way (no overflow whatever the
/// values).
fn fresh(t: &str, now_ms: i64, tolerance_ms: i64) -> bool {
    t.parse::<i64>()
        .is_ok_and(|t_ms| now_ms.abs_diff(t_ms) <= tolerance_ms.max(0).unsigned_abs())
}

/// Verify a signature header as the spec tells workers to: split on `,`, split each element
/// on `=`, take `t` and `sig` (ignoring other elements), recompute over `t` + `.` + `body`
/// and compare (in constant time). The timestamp must be within `tolerance_ms` of `now_ms`
/// and not in the future beyond that tolerance.
pub fn verify_signature(
    secret: &str,
    header: &str,
    body: &[u8],
    now_ms: i64,
    tolerance_ms: i64,
) -> bool {
    let (Some(t), _, Some(sig)) = elements(header) else {
        return false;
    };
    fresh(t, now_ms, tolerance_ms)
        && hmac::from_hex(sig)
            .is_some_and(|mac| hmac::verify(secret.as_bytes(), &[t.as_bytes(), b".", body], &mac))
}

/// Verify a header made by [`signature_header_with_id`]: as [`verify_signature`], and the
/// signed `id` must be `expected_id` (the `X-SVC-JOB-ID` the delivery carries).
pub fn verify_signature_with_id(
    secret: &str,
    header: &str,
    expected_id: &str,
    body: &[u8],
    now_ms: i64,
    tolerance_ms: i64,
) -> bool {
    let (Some(t), Some(id), Some(sig)) = elements(header) else {
        return false;
    };
    id == expected_id
        && fresh(t, now_ms, tolerance_ms)
        && hmac::from_hex(sig).is_some_and(|mac| {
            hmac::verify(
                secret.as_bytes(),
                &[t.as_bytes(), b".", id.as_bytes(), b".", body],
                &mac,
            )
        })
}

/// Milliseconds to wait before the attempt after attempt number `attempt` (1-based) failed:
/// `base_ms · 2^(attempt−1)`, capped at [`MAX_BACKOFF_MS`], then "equal jitter": half of it
/// fixed plus `jitter` (a random fraction in `[0, 1)`) of the other half.
///
/// ```
/// use quintet_core::delivery::backoff_ms;
/// assert_eq!(backoff_ms(1000, 1, 0.0), 500);
/// assert_eq!(backoff_ms(1000, 3, 0.999_999), 3_999);
/// ```
pub fn backoff_ms(base_ms: u64, attempt: u32, jitter: f64) -> u64 {
    let doublings = attempt.saturating_sub(1).min(40);
    let delay = base_ms
        .saturating_mul(1u64 << doublings)
        .min(MAX_BACKOFF_MS);
    let half = delay / 2;
    let jitter = jitter.clamp(0.0, 1.0);
    half + ((delay - half) as f64 * jitter) as u64
}

/// Whether `ip` is an address an operator forbids as a queue target with
/// `--queue-deny-private`: anything that is not a public unicast address.
///
/// IPv4: `0.0.0.0/8` (this network), `10/8`, `172.16/12`, `192.168/16` (private),
/// `100.64/10` (carrier-grade NAT), `127/8` (loopback), `169.254/16` (link-local),
/// `192.0.0/24` (IETF protocol assignments), `198.18/15` (benchmarking), multicast,
/// `240/4` (reserved) and broadcast. IPv6: `::` and `::1`, `fc00::/7` (unique local),
/// `fe80::/10` (link-local), `fec0::/10` (site-local), multicast, and every form that
/// embeds an IPv4 address (mapped, compatible, NAT64 `64:ff9b::/96`, 6to4 `2002::/16`),
/// judged by the embedded address.
pub fn is_forbidden_target(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => forbidden_v4(v4),
        IpAddr::V6(v6) => forbidden_v6(v6),
    }
}

fn forbidden_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    a == 0
        || a == 10
        || a == 127
        || (a == 100 && (64..128).contains(&b))
        || (a == 169 && b == 254)
        || (a == 172 && (16..32).contains(&b))
        || (a == 192 && b == 168)
        || (a == 192 && b == 0 && c == 0)
        || (a == 198 && (b == 18 || b == 19))
        || a >= 224
}

fn forbidden_v6(ip: Ipv6Addr) -> bool {
    let s = ip.segments();
    if ip.is_unspecified() || ip.is_loopback() {
        return true;
    }
    // IPv4-mapped (::ffff:a.b.c.d) and IPv4-compatible (::a.b.c.d).
    if s[..5] == [0, 0, 0, 0, 0] && (s[5] == 0xffff || s[5] == 0) {
        return forbidden_v4(embedded_v4(s[6], s[7]));
    }
    // NAT64 well-known prefix 64:ff9b::/96.
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return forbidden_v4(embedded_v4(s[6], s[7]));
    }
    // 6to4: 2002:aabb:ccdd::/48 carries a.b.c.d.
    if s[0] == 0x2002 {
        return forbidden_v4(embedded_v4(s[1], s[2]));
    }
    (s[0] & 0xfe00) == 0xfc00 // unique local fc00::/7
        || (s[0] & 0xffc0) == 0xfe80 // link-local fe80::/10
        || (s[0] & 0xffc0) == 0xfec0 // site-local fec0::/10
        || (s[0] & 0xff00) == 0xff00 // multicast
}

fn embedded_v4(hi: u16, lo: u16) -> Ipv4Addr {
    let [a, b] = hi.to_be_bytes();
    let [c, d] = lo.to_be_bytes();
    Ipv4Addr::new(a, b, c, d)
}

/// Whether a host name is a loopback name by definition (RFC 6761: `localhost` and every
/// name under `.localhost`), whatever DNS says.
pub fn is_loopback_name(host: &str) -> bool {
    let h = host.trim_end_matches('.').to_ascii_lowercase();
    h == "localhost" || h.ends_with(".localhost")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn signature_matches_a_known_vector() {
        // Computed independently: printf '1700000000000.{"a":1}' | openssl dgst -sha256 -hmac k
        let h = signature_header("k", 1_700_000_000_000, br#"{"a":1}"#);
        assert_eq!(
            h,
            "t=1700000000000,sig=4284e27cb13c82554d08fc92e741b8ae1c126aa41c93a3060481666c36909b51"
        );
    }

    #[test]
    fn signing_the_job_id_stops_replays_under_another_id() {
        let body = br#"{"x":"y"}"#;
        let now = 1_700_000_000_000;
        let h = signature_header_with_id("s", now, "job-1", body);
        assert!(h.starts_with("t=1700000000000,id=job-1,sig="), "{h}");
        assert!(verify_signature_with_id("s", &h, "job-1", body, now, 1_000));
        assert!(!verify_signature_with_id(
            "s", &h, "job-2", body, now, 1_000
        ));
        let moved = h.replace("id=job-1", "id=job-2");
        assert!(!verify_signature_with_id(
            "s", &moved, "job-2", body, now, 1_000
        ));
        // A worker checking the spec's scheme refuses it: the option fails closed.
        assert!(!verify_signature("s", &h, body, now, 1_000));
    }

    #[test]
    fn extreme_timestamps_are_refused_without_overflow() {
        let body = b"{}";
        let h = signature_header("s", 0, body).replace("t=0000000000000", "t=-9223372036854775808");
        assert!(!verify_signature("s", &h, body, i64::MAX, 300_000));
        assert!(!verify_signature(
            "s",
            &signature_header("s", i64::MAX, body),
            body,
            i64::MIN,
            1
        ));
        assert!(verify_signature(
            "s",
            &signature_header("s", 5, body),
            body,
            5,
            0
        ));
    }

    #[test]
    fn verification_follows_the_spec_steps() {
        let body = br#"{"x":"y"}"#;
        let now = 1_700_000_000_000;
        let h = signature_header("s", now, body);
        assert!(verify_signature("s", &h, body, now + 1_000, 300_000));
        // Extra elements and reordering are ignored.
        let sig = h.split(",sig=").nth(1).unwrap();
        let reordered = format!("v=2,sig={sig},t={now},x");
        assert!(verify_signature("s", &reordered, body, now, 0));
        // Wrong secret, body, age, or missing parts fail.
        assert!(!verify_signature("t", &h, body, now, 300_000));
        assert!(!verify_signature("s", &h, br#"{"x":"z"}"#, now, 300_000));
        assert!(!verify_signature("s", &h, body, now + 300_001, 300_000));
        assert!(!verify_signature("s", &h, body, now - 300_001, 300_000));
        assert!(!verify_signature("s", &format!("t={now}"), body, now, 0));
        assert!(!verify_signature("s", "garbage", body, now, 0));
    }

    #[test]
    fn old_clocks_still_give_13_digits() {
        assert!(signature_header("s", 5, b"{}").starts_with("t=0000000000005,sig="));
    }

    #[test]
    fn backoff_doubles_and_caps() {
        assert_eq!(backoff_ms(100, 1, 0.0), 50);
        assert_eq!(backoff_ms(100, 2, 0.0), 100);
        assert_eq!(backoff_ms(100, 3, 0.0), 200);
        assert_eq!(backoff_ms(100, 3, 0.5), 300);
        assert_eq!(backoff_ms(5_000, 60, 0.0), MAX_BACKOFF_MS / 2);
        assert_eq!(backoff_ms(u64::MAX, 1, 1.0), MAX_BACKOFF_MS);
        assert_eq!(backoff_ms(0, 3, 0.7), 0);
    }

    proptest! {
        #[test]
        fn backoff_stays_within_its_window(base in 0u64..100_000, attempt in 1u32..50, j in 0.0f64..1.0) {
            let full = base.saturating_mul(1u64 << (attempt - 1).min(40)).min(MAX_BACKOFF_MS);
            let d = backoff_ms(base, attempt, j);
            prop_assert!(d >= full / 2 && d <= full, "{} not in [{}, {}]", d, full / 2, full);
        }
    }

    #[test]
    fn forbidden_addresses() {
        let forbidden = [
            "127.0.0.1",
            "127.255.0.9",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "224.0.0.1",
            "255.255.255.255",
            "198.18.0.1",
            "::1",
            "::",
            "fc00::1",
            "fd12:3456::1",
            "fe80::1",
            "fec0::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "::127.0.0.1",
            "64:ff9b::10.0.0.1",
            "2002:c0a8:0101::1",
        ];
        for ip in forbidden {
            assert!(is_forbidden_target(ip.parse().unwrap()), "{ip} allowed");
        }
        let allowed = [
            "8.8.8.8",
            "1.1.1.1",
            "172.32.0.1",
            "172.15.255.255",
            "192.169.0.1",
            "100.128.0.1",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
            "64:ff9b::8.8.8.8",
            "2002:0808:0808::1",
        ];
        for ip in allowed {
            assert!(!is_forbidden_target(ip.parse().unwrap()), "{ip} forbidden");
        }
    }

    #[test]
    fn localhost_names() {
        for h in ["localhost", "LOCALHOST.", "api.localhost", "a.b.localhost"] {
            assert!(is_loopback_name(h), "{h}");
        }
        for h in ["localhost.example.com", "example.com", "mylocalhost"] {
            assert!(!is_loopback_name(h), "{h}");
        }
    }
}
