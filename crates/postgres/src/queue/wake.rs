//! Telling this node's dispatcher about jobs it did not enqueue itself.
//!
//! One task per [`super::PgJobQueue`] holds a dedicated `LISTEN` connection on the queue
//! channel: each notification names a queue whose jobs became due (enqueued, retried or
//! given back through any node) and is passed to the listeners at once. Every
//! [`POLL_EVERY`], and right after the connection is restored, the task also asks which
//! queues have due jobs and passes those on: that covers leases of dead nodes running out,
//! retries falling due whose node stopped, and notifications lost while not listening.
//!
//! The same notifications wake the node's change feeds of queue events ([`FeedListener`]):
//! a payload `e<id>` only them (the log grew, no job became due). When the connection is
//! restored they re-read everything ([`FeedListener::resync`]).

use std::{
    collections::BTreeSet,
    sync::{Arc, Mutex, MutexGuard, PoisonError, Weak},
    time::Duration,
};

use quintet_core::{
    Clock, InstanceId, Result,
    ports::{changes::FeedListener, queue::DueListener},
};
use tokio::task::JoinHandle;

use crate::{database::PgDatabase, error::pg_error, listen::Session};

/// How often each node looks for due jobs that no notification announced.
pub const POLL_EVERY: Duration = Duration::from_secs(2);

/// First wait before reconnecting the `LISTEN` connection; doubled up to [`MAX_BACKOFF`].
const MIN_BACKOFF: Duration = Duration::from_millis(100);

/// Longest wait between reconnection attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

type Listeners = Arc<Mutex<Vec<Weak<dyn DueListener>>>>;
type Feeds = Arc<Mutex<Vec<Weak<dyn FeedListener>>>>;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The listening and polling task, and who to tell.
pub(super) struct Waker {
    listeners: Listeners,
    feeds: Feeds,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl Waker {
    /// Listen on `channel` of `db`; fails when the first `LISTEN` fails, later losses are
    /// repaired in the background.
    pub(super) async fn start(
        db: &PgDatabase,
        channel: &str,
        clock: Arc<dyn Clock>,
    ) -> Result<Self> {
        let listeners: Listeners = Arc::new(Mutex::new(Vec::new()));
        let feeds: Feeds = Arc::new(Mutex::new(Vec::new()));
        let first = Session::open(db, "queue-listen", channel).await?;
        let task = tokio::spawn(run(
            db.clone(),
            channel.to_owned(),
            clock,
            (Arc::clone(&listeners), Arc::clone(&feeds)),
            first,
        ));
        Ok(Self {
            listeners,
            feeds,
            task: Mutex::new(Some(task)),
        })
    }

    pub(super) fn subscribe(&self, listener: Weak<dyn DueListener>) {
        lock(&self.listeners).push(listener);
    }

    pub(super) fn subscribe_feed(&self, listener: Weak<dyn FeedListener>) {
        lock(&self.feeds).push(listener);
    }

    /// Tell this node's change feeds that `queue`'s event log grew (a write through this
    /// node, before it is answered; the notification follows for the other nodes).
    pub(super) fn tell(&self, queue: InstanceId) {
        for l in live_feeds(&self.feeds) {
            l.changed(queue);
        }
    }

    /// Stop listening and polling.
    pub(super) fn stop(&self) {
        if let Some(task) = lock(&self.task).take() {
            task.abort();
        }
    }
}

impl Drop for Waker {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Tell every live listener that `queue` may have due jobs.
fn tell(listeners: &Listeners, queue: InstanceId) {
    let live: Vec<Arc<dyn DueListener>> = {
        let mut all = lock(listeners);
        all.retain(|l| l.strong_count() > 0);
        all.iter().filter_map(Weak::upgrade).collect()
    };
    for listener in live {
        listener.due(queue);
    }
}

fn live_feeds(feeds: &Feeds) -> Vec<Arc<dyn FeedListener>> {
    let mut all = lock(feeds);
    all.retain(|l| l.strong_count() > 0);
    all.iter().filter_map(Weak::upgrade).collect()
}

/// Queues with READY jobs due at `now_ms` (including leases that ran out).
async fn due_queues(db: &PgDatabase, now_ms: i64) -> Result<BTreeSet<i64>> {
    let rows = db
        .client()
        .await?
        .query(
            "SELECT DISTINCT queue FROM quintet_jobs WHERE status = 'READY' AND due_ms <= $1",
            &[&now_ms],
        )
        .await
        .map_err(pg_error)?;
    rows.iter()
        .map(|r| r.try_get::<_, i64>(0).map_err(pg_error))
        .collect()
}

async fn run(
    db: PgDatabase,
    channel: String,
    clock: Arc<dyn Clock>,
    (listeners, feeds): (Listeners, Feeds),
    first: Session,
) {
    let mut session = Some(first);
    let mut backoff = MIN_BACKOFF;
    let mut poll = tokio::time::interval(POLL_EVERY);
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let Some(current) = session.as_mut() else {
            tokio::time::sleep(backoff).await;
            match Session::open(&db, "queue-listen", &channel).await {
                Ok(s) => {
                    tracing::info!("listening for queued jobs again");
                    session = Some(s);
                    backoff = MIN_BACKOFF;
                    poll.reset_immediately();
                    for l in live_feeds(&feeds) {
                        l.resync();
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, retry_in = ?backoff, "cannot listen for queued jobs");
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
            }
            continue;
        };
        let mut lost = false;
        tokio::select! {
            payload = current.payloads.recv() => match payload {
                Some(Some(payload)) => {
                    let (due, id) = match payload.strip_prefix('e') {
                        Some(rest) => (false, rest.parse::<i64>()),
                        None => (true, payload.parse::<i64>()),
                    };
                    match id {
                        Ok(id) => {
                            if due {
                                tell(&listeners, InstanceId(id));
                            }
                            for l in live_feeds(&feeds) {
                                l.changed(InstanceId(id));
                            }
                        }
                        Err(_) => tracing::warn!(payload, "unreadable queue notification"),
                    }
                }
                _ => lost = true,
            },
            _ = poll.tick() => match due_queues(&db, clock.now_ms()).await {
                Ok(queues) => {
                    for id in queues {
                        tell(&listeners, InstanceId(id));
                    }
                }
                Err(e) => tracing::warn!(error = %e, "looking for due jobs failed"),
            },
        }
        if lost {
            tracing::warn!("lost the connection listening for queued jobs; reconnecting");
            session = None;
        }
    }
}
