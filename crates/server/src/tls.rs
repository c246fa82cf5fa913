//! HTTPS with rustls, so `cloud://` connection strings (which clients turn into
//! `https://`) work against a self-hosted server.
//!
//! Integration: [`TlsListener`] implements axum's `Listener`, so HTTPS goes through the very
//! same accept loop (`serve.rs`: HTTP/1.1 and HTTP/2, head timeout, graceful shutdown) as
//! plain HTTP; no second server loop to keep in step. Handshakes run in their own tasks
//! with a timeout, so a slow or silent client never holds up the accept loop; finished
//! connections are handed to the accept loop through a bounded channel.

use std::{fs, io, net::SocketAddr, path::Path, sync::Arc, time::Duration};

use quintet_core::{Error, Result};
use tokio::{sync::mpsc, task::JoinHandle};
use tokio_rustls::{
    TlsAcceptor,
    rustls::{
        crypto::ring,
        pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject},
    },
    server::TlsStream,
};

use crate::{
    admission::{Admitted, AdmittingListener},
    config::TlsFiles,
};

/// The rustls server configuration [`load`] builds.
pub use tokio_rustls::rustls::ServerConfig;

/// Make ring the process's TLS crypto provider, which reqwest needs before it builds a
/// client (it is compiled without a provider of its own, see the workspace manifest).
/// Idempotent and cheap: call it before building an HTTP client.
pub fn install_crypto_provider() {
    // An error only says that a provider is installed already, which is all we need.
    let _ = ring::default_provider().install_default();
}

/// Longest a client may take to complete the TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Finished handshakes waiting for the server loop to take them.
const READY_QUEUE: usize = 128;

/// Read the certificate chain and private key and build the TLS configuration
/// (TLS 1.2 and 1.3, ALPN `h2` and `http/1.1`).
pub fn load(files: &TlsFiles) -> Result<Arc<ServerConfig>> {
    let read = |path: &Path, what: &str| {
        fs::read(path).map_err(|e| {
            Error::invalid(format!(
                "cannot read the TLS {what} {}: {e}",
                path.display()
            ))
        })
    };
    let cert_pem = read(&files.cert, "certificate")?;
    let certs = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| {
            Error::invalid(format!(
                "the TLS certificate {} is not valid PEM: {e}",
                files.cert.display()
            ))
        })?;
    if certs.is_empty() {
        return Err(Error::invalid(format!(
            "the TLS certificate {} holds no CERTIFICATE block",
            files.cert.display()
        )));
    }
    let key_pem = read(&files.key, "private key")?;
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| {
        Error::invalid(format!(
            "the TLS private key {} holds no usable PEM private key (PKCS#8, PKCS#1 or SEC1): {e}",
            files.key.display()
        ))
    })?;
    let mut config = ServerConfig::builder_with_provider(Arc::new(ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::internal(format!("TLS protocol versions: {e}")))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| {
            Error::invalid(format!(
                "the TLS certificate {} and private key {} do not work together: {e}",
                files.cert.display(),
                files.key.display()
            ))
        })?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// A listener that accepts TCP connections and completes their TLS handshakes.
#[derive(Debug)]
pub struct TlsListener {
    ready: mpsc::Receiver<(TlsStream<Admitted>, SocketAddr)>,
    local: SocketAddr,
    acceptor: JoinHandle<()>,
}

impl TlsListener {
    /// Accept on `tcp` with `config`. Must be called within a tokio runtime.
    pub fn new(tcp: AdmittingListener, config: Arc<ServerConfig>) -> io::Result<Self> {
        let local = tcp.local_addr()?;
        let (tx, ready) = mpsc::channel(READY_QUEUE);
        let tls = TlsAcceptor::from(config);
        let acceptor = tokio::spawn(accept_loop(tcp, tls, tx));
        Ok(Self {
            ready,
            local,
            acceptor,
        })
    }
}

async fn accept_loop(
    mut tcp: AdmittingListener,
    tls: TlsAcceptor,
    tx: mpsc::Sender<(TlsStream<Admitted>, SocketAddr)>,
) {
    loop {
        // Admitted within the connection limits; a connection holds its place through the
        // handshake too.
        let (stream, peer) = tcp.accept_admitted().await;
        if tx.is_closed() {
            return;
        }
        let (tls, tx) = (tls.clone(), tx.clone());
        tokio::spawn(async move {
            let mut stream = stream;
            if let Ok(true) =
                tokio::time::timeout(HANDSHAKE_TIMEOUT, sent_plain_http(&mut stream)).await
            {
                return;
            }
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, tls.accept(stream)).await {
                Ok(Ok(stream)) => {
                    let _ = tx.send((stream, peer)).await;
                }
                Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
            }
        });
    }
}

/// What a plain-HTTP client on the HTTPS port is told, as plain HTTP (curl and browsers
/// show it; a TLS failure would only say "empty reply").
const PLAIN_HTTP_ANSWER: &str = "{\"ok\":false,\"status\":400,\"msg\":\"this port speaks HTTPS, \
    and the request came as plain HTTP: use https://\"}";

/// Whether the client opened with plain HTTP instead of a TLS handshake (a TLS record
/// starts with 0x16, an HTTP request with a method's capital letter); if so it is answered
/// 400 and closed.
async fn sent_plain_http(stream: &mut Admitted) -> bool {
    use tokio::io::AsyncWriteExt;
    let mut first = [0u8; 1];
    match stream.peek(&mut first).await {
        Ok(1) if first[0].is_ascii_uppercase() => {}
        _ => return false,
    }
    let answer = format!(
        "HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
         connection: close\r\n\r\n{PLAIN_HTTP_ANSWER}",
        PLAIN_HTTP_ANSWER.len()
    );
    let _ = stream.write_all(answer.as_bytes()).await;
    let _ = stream.shutdown().await;
    true
}

impl Drop for TlsListener {
    fn drop(&mut self) {
        self.acceptor.abort();
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<Admitted>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(accepted) => accepted,
            // The accept loop only ends when the listener is dropped; never resolve.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        Ok(self.local)
    }
}
