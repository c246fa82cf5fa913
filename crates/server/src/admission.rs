//! Which connections the server takes: a bound on open connections in all and per client
//! address, and accepting that degrades instead of wedging when file descriptors run out.
//!
//! Every accepted connection holds a [`Permit`] for as long as it is open (through its TLS
//! handshake too). A connection over either bound is closed at once: the client sees its
//! connection closed rather than waiting in the kernel's backlog, and connections already
//! open are served as before. The bounds keep stalled or idle clients from taking every
//! file descriptor; the body deadline (`body_deadline.rs`) and the head timeout make such
//! connections end.
//!
//! Should the process still run out of file descriptors (its other files took more than
//! the bound leaves), `accept` fails with `EMFILE` while the pending connection stays in
//! the backlog, and a plain retry loop would spin or sleep with clients hanging. Here the
//! listener keeps one spare descriptor: on `EMFILE` it closes it, accepts the pending
//! connection, closes that at once (refused), and takes the spare again.

use std::{
    collections::HashMap,
    fs::File,
    io,
    net::{IpAddr, Ipv6Addr, SocketAddr},
    pin::Pin,
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicU64, AtomicUsize, Ordering},
    },
    task::{Context, Poll},
    time::{Duration, Instant},
};

use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::{TcpListener, TcpStream},
};

/// How long to wait before accepting again after an error that is not the client's (the
/// spare descriptor could not be taken back, say): short, so refusals stay prompt.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(10);

/// At most one warning per this interval about refused connections.
const WARN_EVERY: Duration = Duration::from_secs(10);

/// Why a connection was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The server holds as many connections as it may.
    Full,
    /// The client address holds as many connections as one client may.
    PerClient,
    /// The process has no file descriptor left.
    NoDescriptors,
}

/// The bounds on open connections, shared by the listener and every open connection.
#[derive(Debug)]
pub struct ConnectionLimits {
    max_total: usize,
    max_per_client: usize,
    total: AtomicUsize,
    per_client: Mutex<HashMap<IpAddr, usize>>,
    refused_full: AtomicU64,
    refused_per_client: AtomicU64,
    refused_no_descriptors: AtomicU64,
}

impl ConnectionLimits {
    /// At most `max_total` connections open at once (0: no bound), and `max_per_client`
    /// from one client address (0: no bound). IPv6 clients count per /64, the block one
    /// host usually has.
    pub fn new(max_total: usize, max_per_client: usize) -> Arc<Self> {
        Arc::new(Self {
            max_total,
            max_per_client,
            total: AtomicUsize::new(0),
            per_client: Mutex::new(HashMap::new()),
            refused_full: AtomicU64::new(0),
            refused_per_client: AtomicU64::new(0),
            refused_no_descriptors: AtomicU64::new(0),
        })
    }

    /// Take a place for a connection from `ip`, or say why there is none.
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<Permit, Refusal> {
        let client = client_of(ip);
        let mut per_client = self
            .per_client
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if self.max_total > 0 && self.total.load(Ordering::Relaxed) >= self.max_total {
            self.refused_full.fetch_add(1, Ordering::Relaxed);
            return Err(Refusal::Full);
        }
        let held = per_client.entry(client).or_insert(0);
        if self.max_per_client > 0 && *held >= self.max_per_client {
            self.refused_per_client.fetch_add(1, Ordering::Relaxed);
            return Err(Refusal::PerClient);
        }
        *held += 1;
        self.total.fetch_add(1, Ordering::Relaxed);
        Ok(Permit {
            limits: Arc::clone(self),
            client,
        })
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.total.load(Ordering::Relaxed)
    }

    /// Connections refused so far, by reason.
    pub fn refused(&self) -> [(Refusal, u64); 3] {
        [
            (Refusal::Full, self.refused_full.load(Ordering::Relaxed)),
            (
                Refusal::PerClient,
                self.refused_per_client.load(Ordering::Relaxed),
            ),
            (
                Refusal::NoDescriptors,
                self.refused_no_descriptors.load(Ordering::Relaxed),
            ),
        ]
    }

    fn release(&self, client: IpAddr) {
        let mut per_client = self
            .per_client
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(held) = per_client.get_mut(&client) {
            *held -= 1;
            if *held == 0 {
                per_client.remove(&client);
            }
        }
        self.total.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Refusal {
    /// The reason as a short word, for logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Full => "max_connections",
            Self::PerClient => "max_connections_per_client",
            Self::NoDescriptors => "no_file_descriptors",
        }
    }
}

/// What a client address counts as: itself, or its /64 for IPv6 (IPv4-mapped IPv6
/// addresses count as the IPv4 address).
fn client_of(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let s = v6.segments();
                IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
            }
        },
    }
}

/// A connection's place within the limits, given back when it is dropped.
#[derive(Debug)]
pub struct Permit {
    limits: Arc<ConnectionLimits>,
    client: IpAddr,
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.limits.release(self.client);
    }
}

/// A TCP connection holding its [`Permit`]: closing it gives the place back.
#[derive(Debug)]
pub struct Admitted {
    stream: TcpStream,
    _permit: Permit,
}

impl Admitted {
    /// Read the first bytes the client sent without taking them from the stream.
    pub async fn peek(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.stream.peek(buf).await
    }
}

impl AsyncRead for Admitted {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Admitted {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

/// A TCP listener that admits connections within [`ConnectionLimits`] and keeps accepting
/// when file descriptors run out (see the module documentation).
#[derive(Debug)]
pub struct AdmittingListener {
    tcp: TcpListener,
    limits: Arc<ConnectionLimits>,
    spare: Option<File>,
    last_warning: Option<Instant>,
}

impl AdmittingListener {
    /// Admit the connections `tcp` accepts within `limits`.
    pub fn new(tcp: TcpListener, limits: Arc<ConnectionLimits>) -> Self {
        Self {
            tcp,
            limits,
            spare: spare_descriptor(),
            last_warning: None,
        }
    }

    /// The next admitted connection; refused ones are closed on the way.
    pub async fn accept_admitted(&mut self) -> (Admitted, SocketAddr) {
        loop {
            match self.tcp.accept().await {
                Ok((stream, peer)) => match self.limits.admit(peer.ip()) {
                    Ok(permit) => {
                        if let Err(e) = stream.set_nodelay(true) {
                            tracing::debug!(error = %e, "TCP_NODELAY");
                        }
                        let admitted = Admitted {
                            stream,
                            _permit: permit,
                        };
                        return (admitted, peer);
                    }
                    Err(why) => self.warn(peer, why),
                },
                Err(e) if is_connection_error(&e) => {}
                Err(e) if is_out_of_descriptors(&e) => self.shed_one().await,
                Err(e) => {
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                }
            }
        }
    }

    /// Out of descriptors with a connection waiting: close the spare so that it can be
    /// accepted, close it (refused), and take the spare back.
    async fn shed_one(&mut self) {
        self.limits
            .refused_no_descriptors
            .fetch_add(1, Ordering::Relaxed);
        if self.spare.take().is_some() {
            // The pending connection is there already; the timeout only guards a race
            // with a client that gave up meanwhile.
            if let Ok(Ok((stream, peer))) =
                tokio::time::timeout(ACCEPT_ERROR_PAUSE, self.tcp.accept()).await
            {
                drop(stream);
                self.warn(peer, Refusal::NoDescriptors);
            }
            self.spare = spare_descriptor();
        }
        if self.spare.is_none() {
            // Nothing to shed with: wait for descriptors to be freed.
            self.warn_without_peer();
            tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
            self.spare = spare_descriptor();
        }
    }

    fn warn(&mut self, peer: SocketAddr, why: Refusal) {
        tracing::debug!(%peer, reason = why.as_str(), "connection refused");
        if self.should_warn() {
            tracing::warn!(
                %peer,
                reason = why.as_str(),
                open = self.limits.open(),
                "refusing connections (logged once every {WARN_EVERY:?})"
            );
        }
    }

    fn warn_without_peer(&mut self) {
        if self.should_warn() {
            tracing::warn!(
                open = self.limits.open(),
                "out of file descriptors: new connections wait until some are freed"
            );
        }
    }

    fn should_warn(&mut self) -> bool {
        let now = Instant::now();
        let due = self
            .last_warning
            .is_none_or(|at| now.duration_since(at) >= WARN_EVERY);
        if due {
            self.last_warning = Some(now);
        }
        due
    }

    /// The TCP listener's address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.tcp.local_addr()
    }
}

impl axum::serve::Listener for AdmittingListener {
    type Io = Admitted;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        self.accept_admitted().await
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.tcp.local_addr()
    }
}

/// A descriptor kept only to be closed when the process runs out of them.
fn spare_descriptor() -> Option<File> {
    File::open("/dev/null").ok()
}

/// Errors of one connection (the client went away before it was accepted): accept the
/// next one at once.
fn is_connection_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}

/// `EMFILE` (the process is out of descriptors) or `ENFILE` (the system is).
fn is_out_of_descriptors(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(23 | 24))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn each_bound_refuses_with_its_reason_and_closing_gives_the_place_back() {
        let limits = ConnectionLimits::new(3, 2);
        let a1 = limits.admit(ip("10.0.0.1")).unwrap();
        let _a2 = limits.admit(ip("10.0.0.1")).unwrap();
        assert_eq!(
            limits.admit(ip("10.0.0.1")).unwrap_err(),
            Refusal::PerClient
        );
        let _b1 = limits.admit(ip("10.0.0.2")).unwrap();
        assert_eq!(limits.admit(ip("10.0.0.3")).unwrap_err(), Refusal::Full);
        assert_eq!(limits.open(), 3);
        drop(a1);
        assert_eq!(limits.open(), 2);
        let _a3 = limits.admit(ip("10.0.0.1")).unwrap();
        let refused: HashMap<&str, u64> = limits
            .refused()
            .iter()
            .map(|(r, n)| (r.as_str(), *n))
            .collect();
        assert_eq!(refused["max_connections"], 1);
        assert_eq!(refused["max_connections_per_client"], 1);
    }

    #[test]
    fn zero_means_no_bound() {
        let limits = ConnectionLimits::new(0, 0);
        let held: Vec<Permit> = (0..1000)
            .map(|_| limits.admit(ip("10.0.0.1")).unwrap())
            .collect();
        assert_eq!(limits.open(), held.len());
        drop(held);
        assert_eq!(limits.open(), 0);
        assert!(
            limits
                .per_client
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .is_empty()
        );
    }

    #[test]
    fn ipv6_clients_count_per_64_and_mapped_ipv4_as_ipv4() {
        let limits = ConnectionLimits::new(0, 1);
        let _a = limits.admit(ip("2001:db8:1:2::1")).unwrap();
        assert_eq!(
            limits.admit(ip("2001:db8:1:2:ffff::9")).unwrap_err(),
            Refusal::PerClient
        );
        let _b = limits.admit(ip("2001:db8:1:3::1")).unwrap();
        let _c = limits.admit(ip("192.0.2.7")).unwrap();
        assert_eq!(
            limits.admit(ip("::ffff:192.0.2.7")).unwrap_err(),
            Refusal::PerClient
        );
    }
}
