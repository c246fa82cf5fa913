//! Validated names: service types, instance names and application names.
//!
//! Each newtype is built through `FromStr`, which enforces the rule once; ports and adapters
//! take the newtypes and never check again.

use std::{fmt, str::FromStr};

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// Longest instance or application name, in bytes.
pub const MAX_NAME_LEN: usize = 64;

/// The five kinds of service quintet hosts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ServiceType {
    /// JSON documents with Mango queries and indexes.
    Data,
    /// Key/value entries with time-to-live.
    Cache,
    /// Typo-tolerant full-text index.
    Search,
    /// Jobs pushed to a worker URL.
    Queue,
    /// Objects addressed by path.
    Storage,
}

impl ServiceType {
    /// All types, in the order `GET /` lists them.
    pub const ALL: [ServiceType; 5] = [
        ServiceType::Data,
        ServiceType::Cache,
        ServiceType::Search,
        ServiceType::Queue,
        ServiceType::Storage,
    ];

    /// The lowercase name used in URLs.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Data => "data",
            Self::Cache => "cache",
            Self::Search => "search",
            Self::Queue => "queue",
            Self::Storage => "storage",
        }
    }

    /// The type whose URL name is `s`, if any.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.as_str() == s)
    }
}

impl fmt::Display for ServiceType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ServiceType {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        Self::parse(s).ok_or_else(|| {
            Error::invalid(format!(
                "\"{s}\" is not a service type: use data, cache, search, queue or storage"
            ))
        })
    }
}

/// Checks the shared name rule: 1–64 bytes of `a-z 0-9 _ -`, first a letter or digit.
pub(crate) fn check_name(what: &str, s: &str) -> Result<()> {
    if s.is_empty() || s.len() > MAX_NAME_LEN {
        return Err(Error::invalid(format!(
            "{what} name \"{s}\" must be 1 to {MAX_NAME_LEN} characters long"
        )));
    }
    let mut bytes = s.bytes();
    let first_ok = bytes
        .next()
        .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    let rest_ok =
        bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
    if first_ok && rest_ok {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "{what} name \"{s}\" is not valid: use lowercase letters a-z, digits, '_' and '-', \
             starting with a letter or digit"
        )))
    }
}

/// The name of a service instance: 1–64 characters of `a-z 0-9 _ -`, starting with a letter
/// or digit.
///
/// ```
/// use quintet_core::InstanceName;
/// assert!("movies-2024".parse::<InstanceName>().is_ok());
/// assert!("_query".parse::<InstanceName>().is_err());
/// assert!("Movies".parse::<InstanceName>().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct InstanceName(String);

impl InstanceName {
    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for InstanceName {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        check_name("instance", s)?;
        Ok(Self(s.to_owned()))
    }
}

impl fmt::Display for InstanceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The name of an application: the instance-name rule, and additionally not the name of a
/// service type (so `/<app>/...` never collides with `/<type>/...`).
///
/// Names beginning with `_` are reserved; the built-in application that owns domain-form
/// instances is the only one, see [`AppName::domain`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct AppName(String);

impl AppName {
    /// Name of the built-in application that owns the instances of the domain URL form.
    pub const DOMAIN: &'static str = "_domain";

    /// The built-in application of the domain URL form.
    pub fn domain() -> Self {
        Self(Self::DOMAIN.to_owned())
    }

    /// Whether this is the built-in domain-form application.
    pub fn is_domain(&self) -> bool {
        self.0 == Self::DOMAIN
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Rebuild a name read back from a registry, where it was validated when written.
    /// Accepts the built-in domain application's reserved name.
    pub fn from_stored(s: &str) -> Result<Self> {
        if s == Self::DOMAIN {
            Ok(Self::domain())
        } else {
            s.parse()
        }
    }
}

impl FromStr for AppName {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        check_name("application", s)?;
        if ServiceType::parse(s).is_some() {
            return Err(Error::invalid(format!(
                "application name \"{s}\" is reserved: it is the name of a service type"
            )));
        }
        Ok(Self(s.to_owned()))
    }
}

impl fmt::Display for AppName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn instance_name_table() {
        let cases = [
            ("a", true),
            ("0", true),
            ("movies", true),
            ("my_db-2", true),
            (&*"a".repeat(64), true),
            (&*"a".repeat(65), false),
            ("", false),
            ("_x", false),
            ("-x", false),
            ("Movies", false),
            ("a.b", false),
            ("a b", false),
            ("é", false),
            ("a/b", false),
        ];
        for (name, ok) in cases {
            assert_eq!(name.parse::<InstanceName>().is_ok(), ok, "{name:?}");
        }
    }

    #[test]
    fn app_names_exclude_service_types_and_reserved() {
        for t in ServiceType::ALL {
            assert!(t.as_str().parse::<AppName>().is_err());
        }
        assert!("_domain".parse::<AppName>().is_err());
        assert!("shop".parse::<AppName>().is_ok());
        assert!(AppName::from_stored("_domain").is_ok_and(|a| a.is_domain()));
    }

    #[test]
    fn service_type_round_trips() {
        for t in ServiceType::ALL {
            assert_eq!(t.as_str().parse::<ServiceType>(), Ok(t));
        }
        assert!("crawler".parse::<ServiceType>().is_err());
    }

    proptest! {
        #[test]
        fn valid_names_are_exactly_the_rule(s in "\\PC{0,70}") {
            let expected = !s.is_empty()
                && s.len() <= 64
                && s.bytes().next().is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
                && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
            prop_assert_eq!(s.parse::<InstanceName>().is_ok(), expected);
        }

        #[test]
        fn generated_valid_names_parse(s in "[a-z0-9][a-z0-9_-]{0,63}") {
            prop_assert!(s.parse::<InstanceName>().is_ok());
        }
    }
}
