//! Which addresses a queue may deliver to.
//!
//! A queue's target is chosen by whoever created the queue, which on a server with tenants
//! is any application's key holder. Left alone, a target can point at internal services
//! (`http://10.0.0.8/admin`, the cloud metadata address, a database's HTTP port) or at
//! quintet itself (`http://127.0.0.1:6363/data/notes`, writing into the domain
//! application). So each queue gets a [`TargetPolicy`]:
//! - loopback, private and link-local addresses are refused unless the queue may use them
//!   (`--queue-private-targets`: by default only queues of the domain application, which
//!   belongs to the operator);
//! - quintet's own listener (its bound address and port, and `--public-url`) is refused
//!   for every queue.
//!
//! Targets are checked when a queue is created and again at every delivery, after DNS
//! resolution, so a name that later resolves elsewhere (DNS rebinding) is refused too. The
//! delivery-time check lives in the queue's HTTP client's resolver ([`GuardedResolver`]):
//! the addresses it checks are the ones the connection uses, so there is no window between
//! checking and connecting. Literal IP targets never reach a resolver and are checked
//! before sending ([`TargetPolicy::check_literal`]). With `--queue-egress-proxy` the proxy
//! resolves targets, so only literals and names are checked here and the proxy enforces the
//! rest.

use std::{
    fmt,
    net::{IpAddr, SocketAddr},
    sync::Arc,
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

/// Why a target was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// A loopback, private or link-local address, and the queue may not use those.
    Private,
    /// quintet's own listener.
    Itself,
}

/// A target refused by its queue's [`TargetPolicy`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeniedAddress {
    /// The host as written in the target.
    pub host: String,
    /// The refused address, when the host resolved to one.
    pub ip: Option<IpAddr>,
    /// Why.
    pub reason: Reason,
}

impl fmt::Display for DeniedAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let resolved = match self.ip {
            Some(ip) if ip.to_string() != self.host.trim_matches(['[', ']']) => {
                format!("target host \"{}\" resolves to {ip}", self.host)
            }
            _ => format!("target host \"{}\"", self.host),
        };
        match self.reason {
            Reason::Private => write!(
                f,
                "{resolved}, a loopback, private or link-local address, which this server \
                 refuses as a target of this application's queues (--queue-private-targets)"
            ),
            Reason::Itself => write!(
                f,
                "{resolved}, which is this quintet server itself: a queue cannot deliver to \
                 the server that holds it"
            ),
        }
    }
}

impl std::error::Error for DeniedAddress {}

/// What one queue may reach; see the module documentation.
#[derive(Debug, Clone, Default)]
pub struct TargetPolicy {
    /// Whether loopback, private and link-local addresses are allowed.
    pub private_allowed: bool,
    /// The server's own listening addresses (an unspecified IP stands for every local one).
    pub own: Vec<SocketAddr>,
    /// The public URL's `(host, port)`, lower-cased: another name of the server.
    pub public: Option<(String, u16)>,
}

impl TargetPolicy {
    fn denied(&self, host: &str, ip: Option<IpAddr>, reason: Reason) -> DeniedAddress {
        DeniedAddress {
            host: host.to_owned(),
            ip,
            reason,
        }
    }

    /// Whether connecting to `addr` would reach this server.
    fn is_own(&self, addr: SocketAddr) -> bool {
        self.own.iter().any(|own| {
            own.port() == addr.port()
                && (own.ip() == addr.ip()
                    || (own.ip().is_unspecified()
                        && (addr.ip().is_loopback() || addr.ip().is_unspecified()))
                    || (own.ip().is_loopback() && addr.ip().is_loopback()))
        })
    }

    /// The refusal of `addr` (the target named by `host`), if any.
    pub fn check_addr(&self, host: &str, addr: SocketAddr) -> Option<DeniedAddress> {
        if self.is_own(addr) {
            return Some(self.denied(host, Some(addr.ip()), Reason::Itself));
        }
        if !self.private_allowed && is_forbidden_target(addr.ip()) {
            return Some(self.denied(host, Some(addr.ip()), Reason::Private));
        }
        None
    }

    /// Refuse a target that is a forbidden IP literal, a loopback name, or the public URL.
    pub fn check_literal(&self, url: &Url) -> std::result::Result<(), DeniedAddress> {
        let host = url.host_str().unwrap_or_default();
        let port = url.port_or_known_default().unwrap_or(80);
        if let Some((public_host, public_port)) = &self.public
            && host.eq_ignore_ascii_case(public_host)
            && port == *public_port
        {
            return Err(self.denied(host, None, Reason::Itself));
        }
        let ip = match url.host() {
            Some(url::Host::Ipv4(ip)) => IpAddr::V4(ip),
            Some(url::Host::Ipv6(ip)) => IpAddr::V6(ip),
            Some(url::Host::Domain(d)) if is_loopback_name(d) => {
                let own = SocketAddr::new(IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), port);
                if self.is_own(own) {
                    return Err(self.denied(host, None, Reason::Itself));
                }
                if !self.private_allowed {
                    return Err(self.denied(host, None, Reason::Private));
                }
                return Ok(());
            }
            _ => return Ok(()),
        };
        match self.check_addr(host, SocketAddr::new(ip, port)) {
            Some(d) => Err(d),
            None => Ok(()),
        }
    }

    /// The creation-time check of a target: literals, loopback names and the public URL
    /// are checked; names are resolved and refused when any address is. A name that does
    /// not resolve (yet) is accepted: every delivery checks again.
    pub async fn check_target(&self, target: &str) -> Result<()> {
        let url = Url::parse(target).map_err(|e| {
            Error::invalid(format!("\"target\" \"{target}\" is not a valid URL: {e}"))
        })?;
        let refuse = |d: DeniedAddress| Error::invalid(format!("\"target\" \"{target}\": {d}"));
        self.check_literal(&url).map_err(refuse)?;
        let Some(url::Host::Domain(host)) = url.host() else {
            return Ok(());
        };
        let port = url.port_or_known_default().unwrap_or(80);
        let lookup =
            tokio::time::timeout(LOOKUP_TIMEOUT, tokio::net::lookup_host((host, port))).await;
        if let Ok(Ok(addrs)) = lookup {
            for addr in addrs {
                if let Some(d) = self.check_addr(host, addr) {
                    return Err(refuse(d));
                }
            }
        }
        Ok(())
    }
}

/// A resolver for one queue's target: it refuses names resolving to any address the
/// queue's policy refuses. `port` is the target's port, which the resolver is not told.
#[derive(Debug, Clone)]
pub struct GuardedResolver {
    /// The queue's policy.
    pub policy: Arc<TargetPolicy>,
    /// The target's port.
    pub port: u16,
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let host = name.as_str().to_owned();
        let (policy, port) = (Arc::clone(&self.policy), self.port);
        Box::pin(async move {
            if is_loopback_name(&host) && !policy.private_allowed {
                return Err(Box::new(DeniedAddress {
                    host,
                    ip: None,
                    reason: Reason::Private,
                }) as _);
            }
            let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), port))
                .await?
                .collect();
            if let Some(bad) = addrs.iter().find_map(|a| policy.check_addr(&host, *a)) {
                return Err(Box::new(bad) as _);
            }
            Ok(Box::new(addrs.into_iter()) as Addrs)
        })
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

#[cfg(test)]
mod tests {
    use super::*;

    fn tenant() -> TargetPolicy {
        TargetPolicy {
            private_allowed: false,
            own: vec!["127.0.0.1:6363".parse().unwrap()],
            public: Some(("q.example.com".into(), 443)),
        }
    }

    fn operator() -> TargetPolicy {
        TargetPolicy {
            private_allowed: true,
            ..tenant()
        }
    }

    #[tokio::test]
    async fn creation_checks_literals_names_and_the_server_itself() {
        let cases = [
            ("http://127.0.0.1:9/", Some(Reason::Private), None),
            ("http://10.0.0.8/hook", Some(Reason::Private), None),
            ("http://[::1]:8080/", Some(Reason::Private), None),
            ("http://[fd00::1]/", Some(Reason::Private), None),
            ("http://169.254.169.254/latest", Some(Reason::Private), None),
            ("http://localhost:3000/", Some(Reason::Private), None),
            ("https://api.localhost/", Some(Reason::Private), None),
            (
                "http://127.0.0.1:6363/data/notes",
                Some(Reason::Itself),
                Some(Reason::Itself),
            ),
            (
                "http://localhost:6363/data/notes",
                Some(Reason::Itself),
                Some(Reason::Itself),
            ),
            (
                "http://[::1]:6363/",
                Some(Reason::Itself),
                Some(Reason::Itself),
            ),
            (
                "https://q.example.com/data/x",
                Some(Reason::Itself),
                Some(Reason::Itself),
            ),
            ("https://93.184.215.14/hook", None, None),
        ];
        for (target, for_tenant, for_operator) in cases {
            for (policy, expected) in [(tenant(), for_tenant), (operator(), for_operator)] {
                let got = policy.check_target(target).await;
                match expected {
                    None => assert!(got.is_ok(), "{target}: {got:?}"),
                    Some(reason) => {
                        let msg = got.unwrap_err().to_string();
                        let needle = match reason {
                            Reason::Private => "--queue-private-targets",
                            Reason::Itself => "this quintet server itself",
                        };
                        assert!(msg.contains(needle), "{target}: {msg}");
                    }
                }
            }
        }
    }

    #[test]
    fn an_unspecified_listener_is_every_local_address() {
        let p = TargetPolicy {
            private_allowed: true,
            own: vec!["0.0.0.0:7000".parse().unwrap()],
            public: None,
        };
        assert!(
            p.check_addr("h", "127.0.0.1:7000".parse().unwrap())
                .is_some()
        );
        assert!(p.check_addr("h", "0.0.0.0:7000".parse().unwrap()).is_some());
        assert!(
            p.check_addr("h", "127.0.0.1:7001".parse().unwrap())
                .is_none()
        );
    }

    #[tokio::test]
    async fn the_resolver_refuses_names_of_refused_addresses() {
        let resolver = GuardedResolver {
            policy: Arc::new(tenant()),
            port: 80,
        };
        let err = match resolver.resolve("localhost".parse().unwrap()).await {
            Err(e) => e,
            Ok(_) => panic!("localhost resolved"),
        };
        let denied = err.downcast_ref::<DeniedAddress>().unwrap();
        assert_eq!(denied.host, "localhost");
        let own = GuardedResolver {
            policy: Arc::new(operator()),
            port: 6363,
        };
        let err = match own.resolve("localhost".parse().unwrap()).await {
            Err(e) => e,
            Ok(_) => panic!("the server itself resolved"),
        };
        assert_eq!(
            err.downcast_ref::<DeniedAddress>().unwrap().reason,
            Reason::Itself
        );
        assert!(
            GuardedResolver {
                policy: Arc::new(operator()),
                port: 6364
            }
            .resolve("localhost".parse().unwrap())
            .await
            .is_ok()
        );
    }

    #[tokio::test]
    async fn a_refused_delivery_is_recognised_in_the_client_error() {
        crate::tls::install_crypto_provider();
        let client = reqwest::Client::builder()
            .no_proxy()
            .dns_resolver(GuardedResolver {
                policy: Arc::new(tenant()),
                port: 9,
            })
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
            "target host \"localhost\", a loopback, private or link-local address, which \
             this server refuses as a target of this application's queues \
             (--queue-private-targets)"
        );
    }
}
