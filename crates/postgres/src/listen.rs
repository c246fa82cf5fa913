//! A dedicated `LISTEN` connection, shared by the queue's wake-ups and the change feeds of
//! data and storage: each needs a connection outside the pool (a pooled one would be
//! handed to other work) that reports each notification's payload and says when it is
//! lost, so the caller can reconnect and resynchronise ([`FeedWaker`] does so for feeds).

use std::{
    sync::{Arc, Mutex, MutexGuard, PoisonError, Weak},
    time::Duration,
};

use quintet_core::{InstanceId, Result, ports::changes::FeedListener};
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

/// First wait before reconnecting a [`FeedWaker`]'s connection; doubled up to
/// [`MAX_BACKOFF`].
const MIN_BACKOFF: Duration = Duration::from_millis(100);

/// Longest wait between reconnection attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

type Listeners = Arc<Mutex<Vec<Weak<dyn FeedListener>>>>;

/// `m`'s guard, also after a panic poisoned it (what it guards stays consistent: every
/// holder in this crate writes whole values).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn live(listeners: &Listeners) -> Vec<Arc<dyn FeedListener>> {
    let mut all = lock(listeners);
    all.retain(|l| l.strong_count() > 0);
    all.iter().filter_map(Weak::upgrade).collect()
}

/// Wake-ups of a node's change feeds from a channel whose payloads are instance ids (the
/// data change log's, the storage event log's): a task holding a dedicated `LISTEN`
/// connection tells the listeners of each; when the connection is restored after a loss
/// it tells them to re-read everything ([`FeedListener::resync`]), since notifications
/// sent meanwhile are gone. Writes through this node also [`FeedWaker::tell`] directly,
/// before they are acknowledged.
pub(crate) struct FeedWaker {
    listeners: Listeners,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for FeedWaker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FeedWaker")
            .field("listeners", &lock(&self.listeners).len())
            .finish_non_exhaustive()
    }
}

impl FeedWaker {
    /// Listen on `channel` of `db` over a connection named `purpose`, saying `what` is
    /// listened for in the log; fails when the first `LISTEN` fails, later losses are
    /// repaired in the background.
    pub(crate) async fn start(
        db: &PgDatabase,
        purpose: &'static str,
        what: &'static str,
        channel: &str,
    ) -> Result<Self> {
        let listeners: Listeners = Arc::new(Mutex::new(Vec::new()));
        let first = Session::open(db, purpose, channel).await?;
        let task = tokio::spawn(run(
            db.clone(),
            (purpose, what),
            channel.to_owned(),
            Arc::clone(&listeners),
            first,
        ));
        Ok(Self {
            listeners,
            task: Mutex::new(Some(task)),
        })
    }

    pub(crate) fn subscribe(&self, listener: Weak<dyn FeedListener>) {
        lock(&self.listeners).push(listener);
    }

    /// Tell this node's listeners that `instance` changed.
    pub(crate) fn tell(&self, instance: InstanceId) {
        for l in live(&self.listeners) {
            l.changed(instance);
        }
    }

    /// Stop listening.
    pub(crate) fn stop(&self) {
        if let Some(task) = lock(&self.task).take() {
            task.abort();
        }
    }
}

impl Drop for FeedWaker {
    fn drop(&mut self) {
        self.stop();
    }
}

async fn run(
    db: PgDatabase,
    (purpose, what): (&'static str, &'static str),
    channel: String,
    listeners: Listeners,
    first: Session,
) {
    let mut session = Some(first);
    let mut backoff = MIN_BACKOFF;
    loop {
        let Some(current) = session.as_mut() else {
            tokio::time::sleep(backoff).await;
            match Session::open(&db, purpose, &channel).await {
                Ok(s) => {
                    tracing::info!("listening for {what} again");
                    session = Some(s);
                    backoff = MIN_BACKOFF;
                    for l in live(&listeners) {
                        l.resync();
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, retry_in = ?backoff, "cannot listen for {what}");
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
            }
            continue;
        };
        match current.payloads.recv().await {
            Some(Some(payload)) => match payload.parse::<i64>() {
                Ok(id) => {
                    for l in live(&listeners) {
                        l.changed(InstanceId(id));
                    }
                }
                Err(_) => tracing::warn!(payload, "unreadable notification of {what}"),
            },
            _ => {
                tracing::warn!("lost the connection listening for {what}; reconnecting");
                session = None;
            }
        }
    }
}
