//! `--queue-deny-private`: targets on loopback, private and link-local addresses are refused
//! when a queue is created and again at every delivery, after DNS resolution, so a name that
//! later resolves to an internal address (DNS rebinding) is refused too.
//!
//! The delivery-time check lives in the HTTP client's resolver ([`GuardedResolver`]): the
//! addresses it checks are the ones the connection uses, so there is no window between
//! checking and connecting. Literal IP targets never reach a resolver and are checked
//! before sending ([`check_literal`]).

use std::{
    fmt,
    net::{IpAddr, SocketAddr},
    time::Duration,
};

use quintet_core::{
    Error, Result,
    delivery::{is_forbidden_target, is_loopback_name},
};
use reqwest::{
    Url,
    dns::{Addrs, Name, Resolve, Resolving},
};

/// How long a creation-time DNS lookup may take before the target is accepted unchecked
/// (deliveries check it again).
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(5);

/// A target refused because it is, or resolves to, a non-public address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeniedAddress {
    /// The host as written in the target.
    pub host: String,
    /// The refused address, when the host resolved to one.
    pub ip: Option<IpAddr>,
}

impl fmt::Display for DeniedAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.ip {
            Some(ip) if ip.to_string() != self.host.trim_matches(['[', ']']) => write!(
                f,
                "target host \"{}\" resolves to {ip}, a loopback, private or link-local address",
                self.host
            )?,
            _ => write!(
                f,
                "target host \"{}\" is a loopback, private or link-local address",
                self.host
            )?,
        }
        f.write_str(", which this server refuses as a queue target (--queue-deny-private)")
    }
}

impl std::error::Error for DeniedAddress {}

/// A resolver that refuses names resolving to any forbidden address.
#[derive(Debug, Clone, Copy, Default)]
pub struct GuardedResolver;

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let host = name.as_str().to_owned();
        Box::pin(async move {
            if is_loopback_name(&host) {
                return Err(Box::new(DeniedAddress { host, ip: None }) as _);
            }
            let addrs: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            if let Some(bad) = addrs.iter().find(|a| is_forbidden_target(a.ip())) {
                return Err(Box::new(DeniedAddress {
                    host,
                    ip: Some(bad.ip()),
                }) as _);
            }
            Ok(Box::new(addrs.into_iter()) as Addrs)
        })
    }
}

/// Refuse a target whose host is a forbidden IP literal or a loopback name.
pub fn check_literal(url: &Url) -> std::result::Result<(), DeniedAddress> {
    let denied = |ip: Option<IpAddr>| DeniedAddress {
        host: url.host_str().unwrap_or_default().to_owned(),
        ip,
    };
    match url.host() {
        Some(url::Host::Ipv4(ip)) if is_forbidden_target(IpAddr::V4(ip)) => {
            Err(denied(Some(IpAddr::V4(ip))))
        }
        Some(url::Host::Ipv6(ip)) if is_forbidden_target(IpAddr::V6(ip)) => {
            Err(denied(Some(IpAddr::V6(ip))))
        }
        Some(url::Host::Domain(d)) if is_loopback_name(d) => Err(denied(None)),
        _ => Ok(()),
    }
}

/// The refusal carried by a delivery error, if the guard caused it.
pub fn denial(e: &reqwest::Error) -> Option<DeniedAddress> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = source {
        if let Some(d) = err.downcast_ref::<DeniedAddress>() {
            return Some(d.clone());
        }
        source = err.source();
    }
    None
}

/// The creation-time check of a target: literal addresses and loopback names are refused;
/// names are resolved and refused when any address is forbidden. A name that does not
/// resolve (yet) is accepted: every delivery checks again.
pub async fn check_target(target: &str) -> Result<()> {
    let url = Url::parse(target)
        .map_err(|e| Error::invalid(format!("\"target\" \"{target}\" is not a valid URL: {e}")))?;
    let refuse = |d: DeniedAddress| Error::invalid(format!("\"target\" \"{target}\": {d}"));
    check_literal(&url).map_err(refuse)?;
    let Some(url::Host::Domain(host)) = url.host() else {
        return Ok(());
    };
    let port = url.port_or_known_default().unwrap_or(80);
    let lookup = tokio::time::timeout(LOOKUP_TIMEOUT, tokio::net::lookup_host((host, port))).await;
    if let Ok(Ok(addrs)) = lookup {
        for addr in addrs {
            if is_forbidden_target(addr.ip()) {
                return Err(refuse(DeniedAddress {
                    host: host.to_owned(),
                    ip: Some(addr.ip()),
                }));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn creation_refuses_literals_and_loopback_names() {
        for target in [
            "http://127.0.0.1:9/",
            "http://10.0.0.8/hook",
            "http://[::1]:8080/",
            "http://[fd00::1]/",
            "http://169.254.169.254/latest",
            "http://localhost:3000/",
            "https://api.localhost/",
        ] {
            let err = check_target(target).await.unwrap_err();
            let msg = err.to_string();
            assert!(matches!(err, Error::Invalid(_)), "{target}: {err:?}");
            assert!(msg.contains("--queue-deny-private"), "{msg}");
        }
        check_target("https://93.184.215.14/hook").await.unwrap();
    }

    #[tokio::test]
    async fn the_resolver_refuses_names_of_private_addresses() {
        // "localhost" is refused by name; "ip6-localhost"-style names go through DNS, so use
        // the literal name only: no traffic leaves the machine.
        let err = match GuardedResolver.resolve("localhost".parse().unwrap()).await {
            Err(e) => e,
            Ok(_) => panic!("localhost resolved"),
        };
        let denied = err.downcast_ref::<DeniedAddress>().unwrap();
        assert_eq!(denied.host, "localhost");
    }

    #[tokio::test]
    async fn a_refused_delivery_is_recognised_in_the_client_error() {
        let client = reqwest::Client::builder()
            .no_proxy()
            .dns_resolver(GuardedResolver)
            .build()
            .unwrap();
        let err = client
            .post("http://localhost:9/never")
            .send()
            .await
            .unwrap_err();
        let d = denial(&err).expect("the guard's refusal is found in the error chain");
        assert_eq!(d.host, "localhost");
        assert_eq!(
            d.to_string(),
            "target host \"localhost\" is a loopback, private or link-local address, which \
             this server refuses as a queue target (--queue-deny-private)"
        );
    }
}
