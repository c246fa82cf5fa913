//! A TCP proxy in front of a real engine, which a test can cut (the engine is gone:
//! connections closed, new ones refused), silence (the engine's host stopped answering:
//! connections accepted and never answered) and restore (on the same port), so engine
//! outages are tested against the real engine, never a mock of it.

use std::{
    net::SocketAddr,
    sync::{Arc, Mutex, PoisonError},
};

use tokio::{
    net::{TcpListener, TcpStream},
    task::{AbortHandle, JoinHandle},
};

/// A proxy on `127.0.0.1:<port>` forwarding to one address.
#[derive(Debug)]
pub struct Proxy {
    addr: SocketAddr,
    target: SocketAddr,
    pipes: Arc<Mutex<Vec<AbortHandle>>>,
    acceptor: Option<JoinHandle<()>>,
}

impl Proxy {
    /// Forward connections to `target` (`host:port`).
    pub async fn start(target: &str) -> Self {
        let target = tokio::net::lookup_host(target)
            .await
            .expect("target address")
            .next()
            .expect("target address");
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("address");
        let mut proxy = Self {
            addr,
            target,
            pipes: Arc::default(),
            acceptor: None,
        };
        proxy.listen(listener);
        proxy
    }

    /// The proxy's address, to give the node in place of the engine's.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `url` with its `host:port` replaced by the proxy's.
    pub fn url(&self, url: &str, engine: &str) -> String {
        url.replacen(engine, &self.addr.to_string(), 1)
    }

    /// The engine is gone: open connections are reset and new ones refused.
    pub fn cut(&mut self) {
        if let Some(acceptor) = self.acceptor.take() {
            acceptor.abort();
        }
        for pipe in self
            .pipes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .drain(..)
        {
            pipe.abort();
        }
    }

    /// The engine stops answering: open connections are closed, new ones are accepted
    /// and then never answered (as a host gone from the network would leave them).
    pub async fn silence(&mut self) {
        self.cut();
        let listener = self.rebind().await;
        self.acceptor = Some(tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((client, _)) = listener.accept().await {
                held.push(client);
            }
        }));
    }

    /// The engine is back, on the same address.
    pub async fn restore(&mut self) {
        self.cut();
        let listener = self.rebind().await;
        self.listen(listener);
    }

    /// A listener on the proxy's address again.
    async fn rebind(&self) -> TcpListener {
        // The old listener's task may not have dropped it yet: retry briefly.
        for _ in 0..100 {
            if let Ok(listener) = TcpListener::bind(self.addr).await {
                return listener;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        panic!("cannot listen on {} again", self.addr);
    }

    fn listen(&mut self, listener: TcpListener) {
        let (target, pipes) = (self.target, Arc::clone(&self.pipes));
        self.acceptor = Some(tokio::spawn(async move {
            loop {
                let Ok((mut client, _)) = listener.accept().await else {
                    continue;
                };
                let pipe = tokio::spawn(async move {
                    if let Ok(mut engine) = TcpStream::connect(target).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut engine).await;
                    }
                });
                let mut pipes = pipes.lock().unwrap_or_else(PoisonError::into_inner);
                pipes.retain(|p| !p.is_finished());
                pipes.push(pipe.abort_handle());
            }
        }));
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.cut();
    }
}
