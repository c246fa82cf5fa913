//! Time-to-live of cache entries: `<n><unit>`.

use std::{fmt, str::FromStr};

use crate::{Error, Result};

/// Longest time-to-live accepted, in milliseconds: 10,000 years. Far enough to mean
/// "practically forever", short enough that an expiry instant never overflows.
pub const MAX_TTL_MS: i64 = 10_000 * YEAR_MS;

const SECOND_MS: i64 = 1_000;
const MINUTE_MS: i64 = 60 * SECOND_MS;
const HOUR_MS: i64 = 60 * MINUTE_MS;
const DAY_MS: i64 = 24 * HOUR_MS;
const WEEK_MS: i64 = 7 * DAY_MS;
/// A year is 365.25 days, as in the `ms` package hyper's clients use.
const YEAR_MS: i64 = 365 * DAY_MS + DAY_MS / 4;

/// What every TTL error says about the accepted forms.
const FORMS: &str = "use a whole number of at least 1 followed by s (seconds), m (minutes), \
                     h (hours), d (days), w (weeks) or y (years), such as \"20s\", \"40m\", \
                     \"8h\", \"10d\", \"1w\" or \"1y\"";

/// A time-to-live: a whole number of at least 1 followed by one unit letter —
/// `s` seconds, `m` minutes, `h` hours, `d` days, `w` weeks, `y` years (365.25 days).
///
/// ```
/// use quintet_core::cache::Ttl;
/// let ttl: Ttl = "20s".parse().unwrap();
/// assert_eq!(ttl.as_millis(), 20_000);
/// assert_eq!(ttl.expires_at(1_000), 21_000);
/// assert_eq!("1w".parse::<Ttl>().unwrap().as_millis(), 604_800_000);
/// assert!("5x".parse::<Ttl>().is_err());
/// assert!("0s".parse::<Ttl>().is_err());
/// assert!("1.5h".parse::<Ttl>().is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ttl {
    n: u64,
    unit: u8,
    ms: i64,
}

impl Ttl {
    /// The duration in milliseconds.
    pub fn as_millis(&self) -> i64 {
        self.ms
    }

    /// The instant (milliseconds since the epoch) at which an entry written at `now_ms`
    /// with this time-to-live expires. The entry is live while the clock reads less.
    pub fn expires_at(&self, now_ms: i64) -> i64 {
        now_ms.saturating_add(self.ms)
    }

    /// The error for a `ttl` that is not a string at all (a number, an object…).
    pub fn not_a_string() -> Error {
        Error::invalid(format!("ttl must be a string: {FORMS}"))
    }
}

fn unit_ms(unit: u8) -> Option<i64> {
    Some(match unit {
        b's' => SECOND_MS,
        b'm' => MINUTE_MS,
        b'h' => HOUR_MS,
        b'd' => DAY_MS,
        b'w' => WEEK_MS,
        b'y' => YEAR_MS,
        _ => return None,
    })
}

impl FromStr for Ttl {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        let invalid = || {
            Error::invalid(format!(
                "ttl {} is not valid: {FORMS}",
                super::key::quoted(s)
            ))
        };
        let (digits, unit) = match s.as_bytes() {
            [digits @ .., unit] if !digits.is_empty() && digits.iter().all(u8::is_ascii_digit) => {
                (digits, *unit)
            }
            _ => return Err(invalid()),
        };
        let per_unit = unit_ms(unit).ok_or_else(invalid)?;
        // Leading zeros are fine; the value must fit the limit, checked without overflow.
        let mut n: u64 = 0;
        for d in digits {
            n = n.saturating_mul(10).saturating_add(u64::from(d - b'0'));
        }
        if n == 0 {
            return Err(Error::invalid(format!(
                "ttl {} is not valid: it must be at least 1 of its unit; leave ttl out for \
                 an entry that never expires",
                super::key::quoted(s)
            )));
        }
        let ms = i64::try_from(n)
            .ok()
            .and_then(|n| n.checked_mul(per_unit))
            .filter(|ms| *ms <= MAX_TTL_MS)
            .ok_or_else(|| {
                Error::invalid(format!(
                    "ttl {} is too long: the longest is 10000y",
                    super::key::quoted(s)
                ))
            })?;
        Ok(Self { n, unit, ms })
    }
}

impl fmt::Display for Ttl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.n, char::from(self.unit))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn units_table() {
        let cases = [
            ("1s", 1_000),
            ("20s", 20_000),
            ("40m", 2_400_000),
            ("8h", 28_800_000),
            ("10d", 864_000_000),
            ("1w", 604_800_000),
            ("1y", 31_557_600_000),
            ("007s", 7_000),
            ("10000y", MAX_TTL_MS),
        ];
        for (s, ms) in cases {
            assert_eq!(s.parse::<Ttl>().unwrap().as_millis(), ms, "{s}");
        }
    }

    #[test]
    fn rejects_everything_else() {
        for s in [
            "",
            "s",
            "5",
            "5x",
            "5S",
            "5ms",
            "5 s",
            " 5s",
            "5s ",
            "-5s",
            "+5s",
            "1.5h",
            "1e3s",
            "0s",
            "0y",
            "10001y",
            "99999999999999999999999s",
            "2hr",
            "١s",
        ] {
            let e = s.parse::<Ttl>().unwrap_err();
            assert!(matches!(e, Error::Invalid(_)), "{s:?}");
        }
    }

    #[test]
    fn messages_name_the_input_and_the_accepted_forms() {
        assert_eq!(
            "5x".parse::<Ttl>().unwrap_err().to_string(),
            "ttl \"5x\" is not valid: use a whole number of at least 1 followed by s \
             (seconds), m (minutes), h (hours), d (days), w (weeks) or y (years), such as \
             \"20s\", \"40m\", \"8h\", \"10d\", \"1w\" or \"1y\""
        );
        assert_eq!(
            "0s".parse::<Ttl>().unwrap_err().to_string(),
            "ttl \"0s\" is not valid: it must be at least 1 of its unit; leave ttl out for \
             an entry that never expires"
        );
        assert_eq!(
            "10001y".parse::<Ttl>().unwrap_err().to_string(),
            "ttl \"10001y\" is too long: the longest is 10000y"
        );
    }

    #[test]
    fn expiry_saturates() {
        let t: Ttl = "10000y".parse().unwrap();
        assert_eq!(t.expires_at(i64::MAX - 1), i64::MAX);
    }

    proptest! {
        #[test]
        fn round_trips_and_scales(n in 1u64..=10_000, unit in prop::sample::select(b"smhdwy".to_vec())) {
            let s = format!("{n}{}", char::from(unit));
            let t: Ttl = s.parse().unwrap();
            prop_assert_eq!(t.to_string(), s);
            prop_assert_eq!(t.as_millis(), n as i64 * unit_ms(unit).unwrap());
        }

        #[test]
        fn never_panics(s in "\\PC{0,12}") {
            let _ = s.parse::<Ttl>();
        }
    }
}
