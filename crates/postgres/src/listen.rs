//! A dedicated `LISTEN` connection, shared by the queue's wake-ups and the data change
//! feed: both need a connection outside the pool (a pooled one would be handed to other
//! work) that reports each notification's payload and says when it is lost, so the caller
//! can reconnect and resynchronise.

use quintet_core::Result;
use tokio::{sync::mpsc, task::JoinHandle};
use tokio_postgres::AsyncMessage;

use crate::{database::PgDatabase, error::pg_error};

/// The `LISTEN` connection: its notifications' payloads, or `None` once it is lost.
pub(crate) struct Session {
    /// Each notification's payload; `None` once the connection is lost (then nothing more).
    pub(crate) payloads: mpsc::UnboundedReceiver<Option<String>>,
    _client: tokio_postgres::Client,
    driver: JoinHandle<()>,
}

impl Drop for Session {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

impl Session {
    /// Listen on `channel` (a plain identifier, never user text) over a connection named
    /// `purpose` in `pg_stat_activity`.
    pub(crate) async fn open(db: &PgDatabase, purpose: &str, channel: &str) -> Result<Self> {
        let (client, mut connection) = db.dedicated(purpose).await?;
        let (tx, payloads) = mpsc::unbounded_channel();
        let purpose = purpose.to_owned();
        let driver = tokio::spawn(async move {
            loop {
                match std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                    Some(Ok(AsyncMessage::Notification(n))) => {
                        if tx.send(Some(n.payload().to_owned())).is_err() {
                            return;
                        }
                    }
                    Some(Ok(_)) => {} // notices
                    Some(Err(e)) => {
                        tracing::warn!(error = %e, %purpose, "a LISTEN connection failed");
                        let _ = tx.send(None);
                        return;
                    }
                    None => {
                        let _ = tx.send(None);
                        return;
                    }
                }
            }
        });
        client
            .batch_execute(&format!("LISTEN {channel}"))
            .await
            .map_err(pg_error)?;
        Ok(Self {
            payloads,
            _client: client,
            driver,
        })
    }
}
