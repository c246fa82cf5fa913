//! Where the objects live: `s3://bucket[/prefix]?endpoint=…&region=…`.

use std::{fmt, time::Duration};

use url::Url;

/// Region signed for when the URL names none.
pub const DEFAULT_REGION: &str = "us-east-1";

/// How long opening a connection to the store may take, unless configured.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// The settings of one S3-compatible store.
///
/// Parsed from `s3://<bucket>[/<prefix>]?endpoint=<url>&region=<region>&access_key_id=<id>&secret_access_key=<secret>`;
/// every query parameter is optional. Without `endpoint` the store is AWS S3 itself.
/// Credentials left out of the URL are filled in by the caller (the binary reads
/// `AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY`); [`crate::S3BlobStore::open`] refuses
/// to start without them. `Debug` never shows the secret.
#[derive(Clone, PartialEq, Eq)]
pub struct S3Config {
    /// The bucket.
    pub bucket: String,
    /// Key prefix under which this deployment keeps everything: empty, or ending with `/`.
    pub prefix: String,
    /// The S3 API endpoint (`http://127.0.0.1:18333`); `None` for AWS.
    pub endpoint: Option<String>,
    /// The region requests are signed for.
    pub region: String,
    /// The access key id.
    pub access_key_id: Option<String>,
    /// The secret access key.
    pub secret_access_key: Option<String>,
    /// How long opening a connection may take; a store that does not answer in time
    /// counts as down.
    pub connect_timeout: Duration,
}

/// Why an `s3://` URL was refused.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(String);

impl S3Config {
    /// Parse an `s3://` URL (see [`S3Config`]).
    pub fn parse(value: &str) -> Result<Self, ConfigError> {
        let shown = quintet_core::redact::url(value);
        let url = Url::parse(value.trim()).map_err(|e| {
            ConfigError(format!(
                "the storage URL {shown} is not a valid URL ({e}); write it as \
                 s3://bucket?endpoint=http://host:port&region=us-east-1"
            ))
        })?;
        if url.scheme() != "s3" {
            return Err(ConfigError(format!(
                "the storage URL {shown} must start with s3://"
            )));
        }
        let bucket = url.host_str().unwrap_or_default().to_owned();
        if bucket.is_empty() {
            return Err(ConfigError(format!(
                "the storage URL {shown} names no bucket: write s3://<bucket>?endpoint=…"
            )));
        }
        if !url.username().is_empty() || url.password().is_some() || url.port().is_some() {
            return Err(ConfigError(format!(
                "the storage URL {shown} has a user or port before the bucket: give \
                 credentials as access_key_id and secret_access_key query parameters and the \
                 server as endpoint=http://host:port"
            )));
        }
        let prefix = url.path().trim_matches('/');
        let prefix = if prefix.is_empty() {
            String::new()
        } else {
            format!("{prefix}/")
        };
        let mut config = Self {
            bucket,
            prefix,
            endpoint: None,
            region: DEFAULT_REGION.to_owned(),
            access_key_id: None,
            secret_access_key: None,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
        };
        for (name, v) in url.query_pairs() {
            let v = v.trim().to_owned();
            match &*name {
                "endpoint" => {
                    let endpoint = Url::parse(&v).ok().filter(|e| {
                        matches!(e.scheme(), "http" | "https") && e.host_str().is_some()
                    });
                    if endpoint.is_none() {
                        return Err(ConfigError(format!(
                            "the storage URL {shown} has endpoint={v}, which is not an \
                             http:// or https:// URL"
                        )));
                    }
                    config.endpoint = Some(v.trim_end_matches('/').to_owned());
                }
                "region" if !v.is_empty() => config.region = v,
                "access_key_id" if !v.is_empty() => config.access_key_id = Some(v),
                "secret_access_key" if !v.is_empty() => config.secret_access_key = Some(v),
                other => {
                    return Err(ConfigError(format!(
                        "the storage URL {shown} has an unknown or empty parameter \
                         \"{other}\": the parameters are endpoint, region, access_key_id and \
                         secret_access_key"
                    )));
                }
            }
        }
        Ok(config)
    }

    /// Whether requests go over plain HTTP (a loopback or private endpoint).
    pub fn allow_http(&self) -> bool {
        self.endpoint
            .as_deref()
            .is_some_and(|e| e.starts_with("http://"))
    }

    /// The store, for logs and messages: `s3://bucket/prefix at endpoint`, no credentials.
    pub fn describe(&self) -> String {
        format!(
            "s3://{}/{} at {}",
            self.bucket,
            self.prefix,
            self.endpoint.as_deref().unwrap_or("AWS")
        )
    }
}

impl fmt::Debug for S3Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("S3Config")
            .field("bucket", &self.bucket)
            .field("prefix", &self.prefix)
            .field("endpoint", &self.endpoint)
            .field("region", &self.region)
            .field("access_key_id", &self.access_key_id)
            .field(
                "secret_access_key",
                &self.secret_access_key.as_ref().map(|_| "***"),
            )
            .field("connect_timeout", &self.connect_timeout)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn full_url() {
        let c = S3Config::parse(
            "s3://media/prod/?endpoint=http://127.0.0.1:18333/&region=eu-west-1\
             &access_key_id=AK&secret_access_key=s3cr3t",
        )
        .unwrap();
        assert_eq!(c.bucket, "media");
        assert_eq!(c.prefix, "prod/");
        assert_eq!(c.endpoint.as_deref(), Some("http://127.0.0.1:18333"));
        assert_eq!(c.region, "eu-west-1");
        assert_eq!(c.access_key_id.as_deref(), Some("AK"));
        assert_eq!(c.secret_access_key.as_deref(), Some("s3cr3t"));
        assert!(c.allow_http());
        assert!(!format!("{c:?}").contains("s3cr3t"));
    }

    #[test]
    fn defaults() {
        let c = S3Config::parse("s3://media").unwrap();
        assert_eq!((c.prefix.as_str(), c.region.as_str()), ("", DEFAULT_REGION));
        assert_eq!(c.endpoint, None);
        assert!(!c.allow_http());
    }

    #[test]
    fn bad_urls_are_refused_without_showing_the_secret() {
        for bad in [
            "s3://?secret_access_key=hidden",
            "s3://b?endpoint=ftp://x&secret_access_key=hidden",
            "s3://b?colour=blue&secret_access_key=hidden",
            "s3://user:hidden@b",
            "http://b?secret_access_key=hidden",
        ] {
            let e = S3Config::parse(bad).unwrap_err().to_string();
            assert!(!e.contains("hidden"), "{e}");
            assert!(e.contains("storage URL"), "{e}");
        }
    }
}
