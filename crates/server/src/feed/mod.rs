//! What the change feeds of one node share: a wake-up per followed instance, the count of
//! open streams (per client and in all), the end of every stream at shutdown, and the
//! periodic compaction of change logs (of data instances) and event logs (of queues and
//! storage instances).
//!
//! Streams pull: each reads the change log from its own position, at its own pace, and
//! waits for a wake-up when it has read everything. Nothing is buffered per subscriber
//! beyond the page it is sending, so a subscriber that stops reading holds only its
//! connection, and writers never wait for subscribers. Streams at a log's end share their
//! reads of it ([`tail`]). The handlers: `routes/feed.rs`.

pub mod tail;

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, MutexGuard, PoisonError},
    time::Duration,
};

use quintet_core::{
    Clock, Error, InstanceId, Result,
    ports::{
        changes::FeedListener, data::DocStore, queue::JobQueue, storage_events::StorageEvents,
    },
};
use tokio::{sync::watch, task::JoinHandle};

use self::tail::SharedTail;

/// Most streaming feeds open on a node unless configured.
pub const DEFAULT_MAX_STREAMS: usize = 10_000;
/// Most streaming feeds one client (one access key; one address without a key) may hold
/// open on a node unless configured.
pub const DEFAULT_MAX_STREAMS_PER_CLIENT: usize = 100;
/// How long change entries stay readable unless configured: a week.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(7 * 86_400);

/// The feeds' settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeedSettings {
    /// Most streaming feeds open on the node.
    pub max_streams: usize,
    /// Most streaming feeds per client.
    pub max_streams_per_client: usize,
    /// How long change entries are kept.
    pub retention: Duration,
}

impl Default for FeedSettings {
    fn default() -> Self {
        Self {
            max_streams: DEFAULT_MAX_STREAMS,
            max_streams_per_client: DEFAULT_MAX_STREAMS_PER_CLIENT,
            retention: DEFAULT_RETENTION,
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Open streams, in all and per client.
#[derive(Debug, Default)]
struct Open {
    total: usize,
    per_client: HashMap<String, usize>,
}

/// What the streams following one instance share.
#[derive(Debug)]
struct Followed {
    wake: watch::Sender<u64>,
    tail: Arc<SharedTail>,
}

/// What a stream following an instance holds: its wake-ups and the shared end of the log.
#[derive(Debug)]
pub struct Following {
    /// Wake-ups: the value changes whenever the log may have grown.
    pub wake: watch::Receiver<u64>,
    /// The log's end, shared by the streams following the instance.
    pub tail: Arc<SharedTail>,
}

/// The node's feeds; see the module documentation.
#[derive(Debug)]
pub struct FeedHub {
    settings: FeedSettings,
    /// Per instance someone follows: a sender whose value is bumped on every wake-up,
    /// and the log's end its streams share.
    wakes: Mutex<HashMap<InstanceId, Followed>>,
    open: Mutex<Open>,
    stopping: watch::Sender<bool>,
    compactor: Mutex<Option<JoinHandle<()>>>,
}

impl FeedHub {
    /// A hub with `settings`.
    pub fn new(settings: FeedSettings) -> Self {
        Self {
            settings,
            wakes: Mutex::default(),
            open: Mutex::default(),
            stopping: watch::channel(false).0,
            compactor: Mutex::new(None),
        }
    }

    /// The settings.
    pub fn settings(&self) -> &FeedSettings {
        &self.settings
    }

    /// Follow `instance`: the receiver's value changes whenever its log may have grown.
    /// Take it before reading the log, so no change between the read and the wait is
    /// missed.
    pub fn watch(&self, instance: InstanceId) -> Following {
        let mut wakes = lock(&self.wakes);
        // Instances nobody follows any more are forgotten here, so the map stays as
        // large as the number of followed instances.
        wakes.retain(|_, f| f.wake.receiver_count() > 0);
        let followed = wakes.entry(instance).or_insert_with(|| Followed {
            wake: watch::channel(0).0,
            tail: Arc::default(),
        });
        Following {
            wake: followed.wake.subscribe(),
            tail: Arc::clone(&followed.tail),
        }
    }

    /// Count one more stream of `client`: [`Error::RateLimited`] (429) beyond the bounds.
    pub fn admit(self: &Arc<Self>, client: String) -> Result<StreamGuard> {
        let mut open = lock(&self.open);
        if open.total >= self.settings.max_streams {
            return Err(Error::RateLimited(
                format!(
                    "this server has {} change feeds open, the most it allows \
                     (--feed-max-streams); retry later or on another node",
                    self.settings.max_streams
                ),
                1,
            ));
        }
        let mine = open.per_client.get(&client).copied().unwrap_or(0);
        if mine >= self.settings.max_streams_per_client {
            return Err(Error::RateLimited(
                format!(
                    "this client has {mine} change feeds open on this server, the most \
                     it allows (--feed-max-streams-per-client); close one first"
                ),
                1,
            ));
        }
        open.total += 1;
        *open.per_client.entry(client.clone()).or_insert(0) += 1;
        Ok(StreamGuard {
            hub: Arc::clone(self),
            client,
        })
    }

    /// How many streams are open.
    pub fn open_streams(&self) -> usize {
        lock(&self.open).total
    }

    /// Whether the node is shutting down; every stream ends when it turns `true`.
    pub fn stopping(&self) -> watch::Receiver<bool> {
        self.stopping.subscribe()
    }

    /// End every stream (the node shuts down) and stop compacting.
    pub fn stop(&self) {
        self.stopping.send_replace(true);
        if let Some(task) = lock(&self.compactor).take() {
            task.abort();
        }
    }

    /// Remove change entries older than the retention from `data`, `queue` and `storage`
    /// now, and then periodically (a tenth of the retention, between a second and ten
    /// minutes).
    pub fn start_compactor(
        &self,
        data: Arc<dyn DocStore>,
        queue: Arc<dyn JobQueue>,
        storage: Arc<dyn StorageEvents>,
        clock: Arc<dyn Clock>,
    ) {
        let retention = self.settings.retention;
        let every = (retention / 10).clamp(Duration::from_secs(1), Duration::from_secs(600));
        let keep_ms = i64::try_from(retention.as_millis()).unwrap_or(i64::MAX);
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let before = clock.now_ms().saturating_sub(keep_ms);
                match data.compact_changes(before).await {
                    Ok(0) => {}
                    Ok(n) => tracing::debug!(removed = n, "compacted change logs"),
                    Err(e) => tracing::warn!(error = %e, "compacting change logs failed"),
                }
                match queue.compact_events(before).await {
                    Ok(0) => {}
                    Ok(n) => tracing::debug!(removed = n, "compacted queue event logs"),
                    Err(e) => tracing::warn!(error = %e, "compacting queue event logs failed"),
                }
                match storage.compact_events(before).await {
                    Ok(0) => {}
                    Ok(n) => tracing::debug!(removed = n, "compacted storage event logs"),
                    Err(e) => tracing::warn!(error = %e, "compacting storage event logs failed"),
                }
            }
        });
        if let Some(old) = lock(&self.compactor).replace(task) {
            old.abort();
        }
    }
}

impl FeedListener for FeedHub {
    fn changed(&self, instance: InstanceId) {
        if let Some(f) = lock(&self.wakes).get(&instance) {
            f.wake.send_modify(|n| *n += 1);
        }
    }

    fn resync(&self) {
        for f in lock(&self.wakes).values() {
            f.wake.send_modify(|n| *n += 1);
        }
    }
}

/// One open stream, counted until it is dropped.
#[derive(Debug)]
pub struct StreamGuard {
    hub: Arc<FeedHub>,
    client: String,
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        let mut open = lock(&self.hub.open);
        open.total = open.total.saturating_sub(1);
        if let Some(n) = open.per_client.get_mut(&self.client) {
            *n -= 1;
            if *n == 0 {
                open.per_client.remove(&self.client);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_are_bounded_per_client_and_in_all() {
        let hub = Arc::new(FeedHub::new(FeedSettings {
            max_streams: 3,
            max_streams_per_client: 2,
            retention: DEFAULT_RETENTION,
        }));
        let a1 = hub.admit("a".into()).unwrap();
        let _a2 = hub.admit("a".into()).unwrap();
        assert!(matches!(hub.admit("a".into()), Err(Error::RateLimited(..))));
        let _b1 = hub.admit("b".into()).unwrap();
        assert!(matches!(hub.admit("c".into()), Err(Error::RateLimited(..))));
        drop(a1);
        assert_eq!(hub.open_streams(), 2);
        let _a3 = hub.admit("a".into()).unwrap();
    }

    #[tokio::test]
    async fn wake_ups_reach_followers_of_the_instance() {
        let hub = FeedHub::new(FeedSettings::default());
        let mut one = hub.watch(InstanceId(1)).wake;
        let two = hub.watch(InstanceId(2)).wake;
        hub.changed(InstanceId(1));
        one.changed().await.unwrap();
        assert!(!two.has_changed().unwrap());
        hub.resync();
        assert!(two.has_changed().unwrap());
        drop((one, two));
        let _three = hub.watch(InstanceId(3));
        let again = hub.watch(InstanceId(3));
        assert!(
            Arc::ptr_eq(&_three.tail, &again.tail),
            "followers share the tail"
        );
        assert_eq!(
            lock(&hub.wakes).len(),
            1,
            "unfollowed instances are forgotten"
        );
    }
}
