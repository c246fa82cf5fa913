//! Which `Host` a request may be addressed to.
//!
//! With `--auth none` the domain form trusts whoever can reach the listener, which by
//! default is loopback only. A web page cannot connect to loopback under its own name, but
//! with DNS rebinding it can: `attacker.example` first resolves to the attacker's server,
//! then to 127.0.0.1, and the page's requests reach quintet as same-origin requests
//! carrying `Host: attacker.example`. So, with `--auth none`, only requests addressed to a
//! name this server answers to are served ([`HostPolicy`]): loopback names and addresses,
//! the listen address, `--public-url`'s host and `--allowed-hosts`. Everything else gets
//! 403 before any handler runs. (With tokens there is nothing to steal: a page cannot add
//! the `Authorization` header a token travels in.)

use std::{
    net::{IpAddr, SocketAddr},
    sync::Arc,
};

use axum::{
    extract::{Request, State},
    http::header,
    middleware::Next,
    response::{IntoResponse, Response},
};
use quintet_core::Error;

use crate::{config::DomainAuth, error::ApiError, state::AppState};

/// Whether `authority` is a `host[:port]` that makes a well-formed URL: a host name
/// (letters, digits, `-`, `_`, `.`) or IPv4 address, or an IPv6 address in brackets, and a
/// port from 1 to 65535. No user information (`a@b`), path or other punctuation: what
/// clients build from it (`cloud://key:secret@<host>/app`) must parse back the same.
pub fn is_authority(authority: &str) -> bool {
    let (host_ok, port) = match authority.strip_prefix('[') {
        Some(v6) => match v6.split_once(']') {
            Some((addr, rest)) => (addr.parse::<std::net::Ipv6Addr>().is_ok(), rest),
            None => return false,
        },
        None => {
            let (host, rest) = authority.split_at(authority.find(':').unwrap_or(authority.len()));
            let name = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.');
            (!host.is_empty() && host.bytes().all(name), rest)
        }
    };
    let port_ok = port.is_empty()
        || port.strip_prefix(':').is_some_and(|p| {
            !p.is_empty()
                && p.bytes().all(|b| b.is_ascii_digit())
                && p.parse::<u16>().is_ok_and(|n| n > 0)
        });
    host_ok && port_ok
}

/// `host[:port]` split into the lower-cased host (IPv6 without brackets) and the port.
fn split(authority: &str) -> (String, Option<u16>) {
    let a = authority.trim().to_ascii_lowercase();
    if let Some(v6) = a.strip_prefix('[')
        && let Some((host, rest)) = v6.split_once(']')
    {
        return (
            host.to_owned(),
            rest.strip_prefix(':').and_then(|p| p.parse().ok()),
        );
    }
    match a.rsplit_once(':') {
        Some((host, port)) if !host.contains(':') => (host.to_owned(), port.parse().ok()),
        _ => (a, None),
    }
}

fn is_loopback_host(host: &str) -> bool {
    host == "localhost"
        || host.ends_with(".localhost")
        || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// The `Host` values a server with `--auth none` answers.
#[derive(Debug, Clone)]
pub struct HostPolicy {
    any: bool,
    /// `(host, port)` pairs; a `None` port matches any port.
    allowed: Vec<(String, Option<u16>)>,
}

impl HostPolicy {
    /// Loopback names and addresses, `listen`, `public_url`'s host and `extra` (each
    /// `host[:port]`, or `*` for anything).
    pub fn new(listen: SocketAddr, public_url: Option<&str>, extra: &[String]) -> Self {
        let mut allowed = Vec::new();
        if !listen.ip().is_unspecified() {
            allowed.push((listen.ip().to_string(), Some(listen.port())));
        }
        if let Some(url) = public_url
            && let Some(rest) = url.split_once("://").map(|(_, r)| r)
        {
            let authority = rest.split('/').next().unwrap_or_default();
            let (host, _) = split(authority);
            // The public URL is usually reached through a proxy on another port.
            allowed.push((host, None));
        }
        let mut any = false;
        for entry in extra {
            if entry == "*" {
                any = true;
            } else {
                allowed.push(split(entry));
            }
        }
        Self { any, allowed }
    }

    /// Whether a request with `Host: authority` is served.
    pub fn allows(&self, authority: &str) -> bool {
        if self.any {
            return true;
        }
        let (host, port) = split(authority);
        is_loopback_host(&host)
            || self
                .allowed
                .iter()
                .any(|(h, p)| *h == host && (p.is_none() || *p == port))
    }
}

/// The host a request is addressed to: HTTP/2's `:authority`, else the `Host` header.
pub fn request_host(req: &Request) -> Option<String> {
    if let Some(a) = req.uri().authority() {
        return Some(a.as_str().to_owned());
    }
    req.headers()
        .get(header::HOST)
        .map(|h| String::from_utf8_lossy(h.as_bytes()).into_owned())
}

/// The layer: with `--auth none`, 403 for a request addressed to a host the policy does
/// not allow. Requests without any host (HTTP/1.0) cannot come from a browser and pass.
pub async fn check_host(State(state): State<AppState>, req: Request, next: Next) -> Response {
    if state.config.domain_auth != DomainAuth::None {
        return next.run(req).await;
    }
    let policy: &Arc<HostPolicy> = &state.hosts;
    match request_host(&req) {
        Some(host) if !policy.allows(&host) => {
            let shown: String = host.chars().take(100).collect();
            ApiError(Error::Forbidden(format!(
                "requests addressed to host {shown:?} are refused: with --auth none this server \
                 answers only loopback names and addresses, its listen address and \
                 --public-url's host (a guard against DNS rebinding); add the host with \
                 --allowed-hosts, or require tokens with --auth jwt"
            )))
            .into_response()
        }
        _ => next.run(req).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_headers_that_make_a_url() {
        for (host, ok) in [
            ("127.0.0.1:6363", true),
            ("localhost", true),
            ("api.example.com", true),
            ("my_service:80", true),
            ("[::1]", true),
            ("[::1]:6363", true),
            ("[2001:db8::1]:443", true),
            ("", false),
            ("/", false),
            ("a@b", false),
            ("key:secret@host", false),
            ("a/b", false),
            ("a?b", false),
            ("a#b", false),
            ("a b", false),
            ("a%2fb", false),
            (":80", false),
            ("a:", false),
            ("a:0", false),
            ("a:65536", false),
            ("a:+80", false),
            ("a:1:2", false),
            ("a:xyz", false),
            ("[::1", false),
            ("[nope]:80", false),
            ("[::1]80", false),
            ("::1", false),
        ] {
            assert_eq!(is_authority(host), ok, "{host:?}");
        }
    }

    #[test]
    fn hosts_a_server_without_auth_answers() {
        let listen: SocketAddr = "127.0.0.1:6363".parse().unwrap();
        let plain = HostPolicy::new(listen, None, &[]);
        let public = HostPolicy::new(
            "0.0.0.0:6363".parse().unwrap(),
            Some("https://q.example.com"),
            &["lan-box:6363".into(), "10.0.0.5".into()],
        );
        let any = HostPolicy::new(listen, None, &["*".into()]);
        let cases = [
            (&plain, "127.0.0.1:6363", true),
            (&plain, "localhost:6363", true),
            (&plain, "LOCALHOST", true),
            (&plain, "app.localhost:5173", true),
            (&plain, "127.0.0.2", true),
            (&plain, "[::1]:6363", true),
            (&plain, "attacker.example", false),
            (&plain, "attacker.example:6363", false),
            (&plain, "localhost.attacker.example", false),
            (&plain, "127.0.0.1.nip.io", false),
            (&plain, "192.168.1.5:6363", false),
            (&public, "q.example.com", true),
            (&public, "q.example.com:443", true),
            (&public, "lan-box:6363", true),
            (&public, "lan-box:6364", false),
            (&public, "10.0.0.5:1", true),
            (&public, "0.0.0.0:6363", false),
            (&public, "evil.example", false),
            (&any, "evil.example", true),
        ];
        for (policy, host, ok) in cases {
            assert_eq!(policy.allows(host), ok, "{host}");
        }
    }
}
