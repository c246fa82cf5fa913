//! The registry's changes across nodes: `NOTIFY` in the transaction of each change, one
//! dedicated `LISTEN` connection per node, and acknowledgements, so that a change call
//! returns only after every live node applied it.
//!
//! - Each node (each [`crate::PgRegistry`]) has a random id and keeps a heartbeat row in
//!   `quintet_nodes`, refreshed every [`HEARTBEAT_EVERY`] over its `LISTEN` connection.
//!   Nodes seen within [`LIVE_WINDOW`] are live.
//! - A writer calls [`Feed::publish`] inside its transaction: the notification is sent if
//!   and only if the change commits, and the same transaction reads which nodes are live.
//! - Every node's listening task applies each change to its listeners (the caches) on the
//!   spot, then acknowledges it to the writer on the writer's own channel.
//! - After the commit the writer waits ([`Ticket::delivered`]) until every live node,
//!   itself included, acknowledged, or [`ACK_TIMEOUT`] passed (logged, naming the silent
//!   nodes). So when a revocation is answered, every live node already refuses the key.
//! - When its `LISTEN` connection is lost, a node reconnects (backing off up to
//!   [`MAX_BACKOFF`]), listens again and applies [`RegistryChange::Resync`]: notifications
//!   sent meanwhile are gone, so its caches forget everything. While it is away it sends
//!   no heartbeat, so writers stop waiting for it after [`LIVE_WINDOW`].
//! - A node that may have missed changes does not trust its caches of keys
//!   ([`Feed::caches_current`]) until it has caught up: while its `LISTEN` connection is
//!   down, and after it was paused or starved for longer than [`STALL_BOUND`] (a
//!   `SIGSTOP`, a frozen VM, a runtime blocked: writers waited [`ACK_TIMEOUT`] for it and
//!   went on). A watchdog ticking every [`TICK_EVERY`] notices such a pause; the node then
//!   sends itself a marker through PostgreSQL, and since notifications arrive in commit
//!   order, every change committed before the marker has been applied when the marker
//!   comes back. Until then keys are read from the registry on every use.
//!
//! Channels: `quintet_` + md5 of the schema name for changes, that plus `_<node id>` for
//! one node's acknowledgements; nodes on other schemas of the database hear nothing.

use std::{
    collections::{HashMap, HashSet},
    fmt,
    sync::{
        Arc, Mutex, Weak,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::Duration,
};

use quintet_core::{
    AppName, Error, InstanceId, Result, ServiceType,
    hmac::to_hex,
    id::random_bytes,
    ports::registry::{ChangeListener, RegistryChange},
};
use serde::{Deserialize, Serialize};
use tokio::{
    sync::{mpsc, oneshot},
    task::JoinHandle,
};
use tokio_postgres::{AsyncMessage, Client, Connection, Socket, Transaction, tls::NoTlsStream};

use crate::{database::PgDatabase, error::pg_error, listen::lock};

/// How long a writer waits for every live node to acknowledge a change.
pub const ACK_TIMEOUT: Duration = Duration::from_secs(2);

/// How often a node refreshes its heartbeat (which also checks its `LISTEN` connection).
pub const HEARTBEAT_EVERY: Duration = Duration::from_secs(5);

/// A node whose heartbeat is older than this is not waited for.
pub const LIVE_WINDOW: Duration = Duration::from_secs(15);

/// Heartbeat rows older than this (nodes that stopped without saying so) are removed.
const FORGET_AFTER: Duration = Duration::from_secs(300);

/// How long a heartbeat may take before the connection counts as lost.
const HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(5);

/// First wait before reconnecting; doubled up to [`MAX_BACKOFF`].
const MIN_BACKOFF: Duration = Duration::from_millis(100);

/// Longest wait between reconnection attempts.
pub const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// A node not scheduled for longer than this may have missed a change whose writer
/// stopped waiting for it: below [`ACK_TIMEOUT`], so any pause the writer did not wait out
/// is noticed.
pub const STALL_BOUND: Duration = Duration::from_secs(1);

/// How often the watchdog looks for pauses.
pub const TICK_EVERY: Duration = Duration::from_millis(100);

/// The payload prefix of a node's marker to itself (on its acknowledgement channel).
const MARKER: &str = "sync ";

/// The database's clock in milliseconds: heartbeats are compared on one clock.
const NOW_MS: &str = "(EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::bigint";

/// A change as it travels in a notification's payload.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "change", rename_all = "snake_case")]
enum Wire {
    InstanceCreated {
        app: String,
        kind: String,
        name: String,
        id: i64,
    },
    InstanceDeleted {
        app: String,
        kind: String,
        name: String,
        id: i64,
    },
    AppDeleted {
        app: String,
    },
    KeyCreated {
        app: String,
        key: String,
    },
    KeyRevoked {
        app: String,
        key: String,
    },
}

/// A notification's payload: the change, who sent it and its number there.
#[derive(Debug, Serialize, Deserialize)]
struct Payload {
    origin: String,
    seq: u64,
    #[serde(flatten)]
    change: Wire,
}

/// The part of a payload needed to acknowledge it, even when the change is unreadable.
#[derive(Debug, Deserialize)]
struct Sender {
    origin: String,
    seq: u64,
}

impl Wire {
    fn of(change: &RegistryChange) -> Option<Self> {
        Some(match change {
            RegistryChange::InstanceCreated {
                app,
                kind,
                name,
                id,
            } => Self::InstanceCreated {
                app: app.to_string(),
                kind: kind.to_string(),
                name: name.to_string(),
                id: id.0,
            },
            RegistryChange::InstanceDeleted {
                app,
                kind,
                name,
                id,
            } => Self::InstanceDeleted {
                app: app.to_string(),
                kind: kind.to_string(),
                name: name.to_string(),
                id: id.0,
            },
            RegistryChange::AppDeleted { app } => Self::AppDeleted {
                app: app.to_string(),
            },
            RegistryChange::KeyCreated { app, key } => Self::KeyCreated {
                app: app.to_string(),
                key: key.to_string(),
            },
            RegistryChange::KeyRevoked { app, key } => Self::KeyRevoked {
                app: app.to_string(),
                key: key.to_string(),
            },
            RegistryChange::Resync => return None,
        })
    }

    fn into_change(self) -> Result<RegistryChange> {
        Ok(match self {
            Self::InstanceCreated {
                app,
                kind,
                name,
                id,
            } => RegistryChange::InstanceCreated {
                app: AppName::from_stored(&app)?,
                kind: kind.parse::<ServiceType>()?,
                name: name.parse()?,
                id: InstanceId(id),
            },
            Self::InstanceDeleted {
                app,
                kind,
                name,
                id,
            } => RegistryChange::InstanceDeleted {
                app: AppName::from_stored(&app)?,
                kind: kind.parse::<ServiceType>()?,
                name: name.parse()?,
                id: InstanceId(id),
            },
            Self::AppDeleted { app } => RegistryChange::AppDeleted {
                app: AppName::from_stored(&app)?,
            },
            Self::KeyCreated { app, key } => RegistryChange::KeyCreated {
                app: AppName::from_stored(&app)?,
                key: key.parse()?,
            },
            Self::KeyRevoked { app, key } => RegistryChange::KeyRevoked {
                app: AppName::from_stored(&app)?,
                key: key.parse()?,
            },
        })
    }
}

/// The change a payload carries, or a resync when it cannot be read (a newer node's
/// change, say: the safe reading is "anything may have changed").
fn read_change(payload: &str) -> RegistryChange {
    let parsed = serde_json::from_str::<Payload>(payload)
        .map_err(|e| Error::internal(e.to_string()))
        .and_then(|p| p.change.into_change());
    parsed.unwrap_or_else(|e| {
        tracing::warn!(error = %e, payload, "unreadable registry notification; resyncing");
        RegistryChange::Resync
    })
}

/// A task aborted when this is dropped.
#[derive(Debug)]
struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A writer waiting for acknowledgements.
struct Waiter {
    /// Nodes that have not acknowledged yet.
    pending: HashSet<String>,
    done: oneshot::Sender<()>,
}

/// What the listening task and the writers share.
struct Shared {
    /// This node's id: in payloads, heartbeats and its acknowledgement channel.
    node: String,
    /// The channel of changes.
    channel: String,
    next_seq: AtomicU64,
    listeners: Mutex<Vec<Weak<dyn ChangeListener>>>,
    /// Writers of this node waiting for acknowledgements, by sequence number.
    waiters: Mutex<HashMap<u64, Waiter>>,
    /// Whether the `LISTEN` connection is up; while it is down nobody waits.
    listening: AtomicBool,
    /// When the watchdog last ran, in nanoseconds since [`epoch`].
    last_tick: AtomicU64,
    /// Set when the node may have missed changes; cleared when its marker came back.
    behind: AtomicBool,
    /// The marker the node waits for while behind.
    marker: AtomicU64,
    /// Asks the listening session to send the marker.
    sync: tokio::sync::Notify,
}

/// The instant the watchdog's ticks are measured from.
fn epoch() -> std::time::Instant {
    static EPOCH: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    *EPOCH.get_or_init(std::time::Instant::now)
}

fn nanos_now() -> u64 {
    u64::try_from(epoch().elapsed().as_nanos()).unwrap_or(u64::MAX)
}

impl Shared {
    /// The channel on which `node` hears acknowledgements.
    fn ack_channel(&self, node: &str) -> String {
        format!("{}_{node}", self.channel)
    }

    /// Apply `change` to every live listener, forgetting dropped ones.
    fn apply(&self, change: &RegistryChange) {
        let listeners: Vec<Arc<dyn ChangeListener>> = {
            let mut all = lock(&self.listeners);
            all.retain(|l| l.strong_count() > 0);
            all.iter().filter_map(Weak::upgrade).collect()
        };
        for listener in listeners {
            listener.apply(change);
        }
    }

    /// `node` acknowledged change `seq` of this node.
    fn acknowledged(&self, node: &str, seq: u64) {
        let mut waiters = lock(&self.waiters);
        let finished = waiters.get_mut(&seq).is_some_and(|w| {
            w.pending.remove(node);
            w.pending.is_empty()
        });
        if finished && let Some(w) = waiters.remove(&seq) {
            let _ = w.done.send(());
        }
    }

    /// Stop every writer's wait: acknowledgements can no longer be heard.
    fn release_waiters(&self) {
        lock(&self.waiters).clear();
    }

    /// The node may have missed changes: distrust the caches until a new marker is back.
    fn fall_behind(&self) {
        self.marker.fetch_add(1, Ordering::SeqCst);
        self.behind.store(true, Ordering::SeqCst);
        self.sync.notify_one();
    }

    /// Marker `token` came back: every change committed before it was applied.
    fn marker_back(&self, token: u64) {
        if token == self.marker.load(Ordering::SeqCst) && self.behind.swap(false, Ordering::SeqCst)
        {
            tracing::info!("caught up with the registry's changes; cached keys are trusted again");
        }
    }

    /// Whether the caches may be trusted: listening, not behind, and not paused just now
    /// (checked here too, since a request may run before the watchdog after a pause).
    fn caches_current(&self) -> bool {
        let since_tick = nanos_now().saturating_sub(self.last_tick.load(Ordering::SeqCst));
        self.listening.load(Ordering::SeqCst)
            && !self.behind.load(Ordering::SeqCst)
            && u128::from(since_tick) <= STALL_BOUND.as_nanos()
    }
}

/// Tick every [`TICK_EVERY`]; a tick that comes [`STALL_BOUND`] late means the node was
/// paused or starved, and may have missed changes.
async fn watchdog(shared: Arc<Shared>) {
    loop {
        tokio::time::sleep(TICK_EVERY).await;
        let now = nanos_now();
        let gap = now.saturating_sub(shared.last_tick.load(Ordering::SeqCst));
        if u128::from(gap) > STALL_BOUND.as_nanos() {
            tracing::warn!(
                paused_ms = gap / 1_000_000,
                "this node was paused or starved: cached keys are not trusted until it has caught up with the registry's changes"
            );
            // Before the tick is stored: whoever sees the fresh tick also sees `behind`.
            shared.fall_behind();
        }
        shared.last_tick.store(now, Ordering::SeqCst);
    }
}

/// The registry's side of the feed: listeners, publishing changes, the listening task.
pub(crate) struct Feed {
    shared: Arc<Shared>,
    db: PgDatabase,
    listener: Mutex<Option<AbortOnDrop>>,
    _watchdog: AbortOnDrop,
}

impl fmt::Debug for Feed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Feed")
            .field("node", &self.shared.node)
            .field("channel", &self.shared.channel)
            .field("listening", &self.shared.listening.load(Ordering::SeqCst))
            .finish_non_exhaustive()
    }
}

impl Feed {
    /// Join the nodes of `db`'s schema: heartbeat, listen. Fails when the first `LISTEN`
    /// fails; later losses are repaired in the background.
    pub(crate) async fn start(db: &PgDatabase) -> Result<Self> {
        let channel: String = db
            .client()
            .await?
            .query_one("SELECT 'quintet_' || md5(current_schema())", &[])
            .await
            .map_err(pg_error)?
            .get(0);
        let shared = Arc::new(Shared {
            node: to_hex(&random_bytes(8)?),
            channel,
            next_seq: AtomicU64::new(0),
            listeners: Mutex::new(Vec::new()),
            waiters: Mutex::new(HashMap::new()),
            listening: AtomicBool::new(false),
            last_tick: AtomicU64::new(nanos_now()),
            behind: AtomicBool::new(false),
            marker: AtomicU64::new(0),
            sync: tokio::sync::Notify::new(),
        });
        let session = Session::open(db, &shared).await?;
        shared.listening.store(true, Ordering::SeqCst);
        let listener = tokio::spawn(listen(Arc::clone(&shared), db.clone(), session));
        let watchdog = AbortOnDrop(tokio::spawn(watchdog(Arc::clone(&shared))));
        Ok(Self {
            shared,
            db: db.clone(),
            listener: Mutex::new(Some(AbortOnDrop(listener))),
            _watchdog: watchdog,
        })
    }

    /// Whether this node's caches of keys may be trusted now (see the module
    /// documentation).
    pub(crate) fn caches_current(&self) -> bool {
        self.shared.caches_current()
    }

    /// Call `listener` with every change from now on.
    pub(crate) fn subscribe(&self, listener: Weak<dyn ChangeListener>) {
        lock(&self.shared.listeners).push(listener);
    }

    /// Send `change` to every node when `tx` commits, and note which nodes are live. Await
    /// [`Ticket::delivered`] after the commit.
    pub(crate) async fn publish(
        &self,
        tx: &Transaction<'_>,
        change: &RegistryChange,
    ) -> Result<Ticket> {
        let wire = Wire::of(change)
            .ok_or_else(|| Error::internal("a resync is not a change to publish"))?;
        let seq = self.shared.next_seq.fetch_add(1, Ordering::SeqCst);
        let payload = serde_json::to_string(&Payload {
            origin: self.shared.node.clone(),
            seq,
            change: wire,
        })
        .map_err(|e| Error::internal(format!("registry notification: {e}")))?;
        let live_ms = i64::try_from(LIVE_WINDOW.as_millis()).unwrap_or(i64::MAX);
        let live = tx
            .query(
                &format!("SELECT id FROM quintet_nodes WHERE seen_ms >= {NOW_MS} - $1"),
                &[&live_ms],
            )
            .await
            .map_err(pg_error)?
            .iter()
            .map(|row| row.try_get::<_, String>(0))
            .collect::<Result<HashSet<_>, _>>()
            .map_err(pg_error)?;
        // Registered before the notification can be delivered (at commit).
        let ticket = Ticket::register(&self.shared, seq, live);
        tx.execute(
            "SELECT pg_notify($1, $2)",
            &[&self.shared.channel, &payload],
        )
        .await
        .map_err(pg_error)?;
        Ok(ticket)
    }

    /// Leave: stop listening and remove this node's heartbeat, so writers stop waiting
    /// for it at once.
    pub(crate) async fn close(&self) {
        let listener = lock(&self.listener).take();
        drop(listener);
        self.shared.listening.store(false, Ordering::SeqCst);
        self.shared.release_waiters();
        let left = async {
            self.db
                .client()
                .await?
                .execute(
                    "DELETE FROM quintet_nodes WHERE id = $1",
                    &[&self.shared.node],
                )
                .await
                .map_err(pg_error)
        };
        if let Err(e) = left.await {
            tracing::warn!(error = %e, "could not remove this node's heartbeat");
        }
    }
}

/// A published change whose acknowledgements a writer waits for.
pub(crate) struct Ticket {
    shared: Arc<Shared>,
    seq: u64,
    done: Option<oneshot::Receiver<()>>,
}

impl Ticket {
    fn register(shared: &Arc<Shared>, seq: u64, pending: HashSet<String>) -> Self {
        let (tx, rx) = oneshot::channel();
        let mut done = None;
        if !pending.is_empty() {
            lock(&shared.waiters).insert(seq, Waiter { pending, done: tx });
            // Checked after registering: a connection lost from here on releases this
            // waiter; one lost before is seen here (nothing could be heard, so no wait).
            if shared.listening.load(Ordering::SeqCst) {
                done = Some(rx);
            } else {
                lock(&shared.waiters).remove(&seq);
            }
        }
        Self {
            shared: Arc::clone(shared),
            seq,
            done,
        }
    }

    /// Wait until every node live at the change acknowledged it, this node's `LISTEN`
    /// connection broke (a resync follows), or [`ACK_TIMEOUT`] passed.
    pub(crate) async fn delivered(mut self) {
        let Some(done) = self.done.take() else {
            return;
        };
        if tokio::time::timeout(ACK_TIMEOUT, done).await.is_err() {
            let silent: Vec<String> = lock(&self.shared.waiters)
                .get(&self.seq)
                .map(|w| w.pending.iter().cloned().collect())
                .unwrap_or_default();
            tracing::warn!(
                timeout = ?ACK_TIMEOUT,
                nodes = ?silent,
                "nodes did not acknowledge a registry change in time; they apply it when they hear it or resync"
            );
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        lock(&self.shared.waiters).remove(&self.seq);
    }
}

/// What the connection driver reports.
enum Event {
    Notification { channel: String, payload: String },
    Lost(String),
}

/// One `LISTEN` connection.
struct Session {
    client: Client,
    events: mpsc::UnboundedReceiver<Event>,
    _driver: AbortOnDrop,
}

impl Session {
    async fn open(db: &PgDatabase, shared: &Shared) -> Result<Self> {
        let (client, connection) = db.dedicated("listen").await?;
        let (tx, events) = mpsc::unbounded_channel();
        let driver = AbortOnDrop(tokio::spawn(drive(connection, tx)));
        // Channel names are `quintet_` and hex digits: plain identifiers.
        client
            .batch_execute(&format!(
                "LISTEN {}; LISTEN {}",
                shared.channel,
                shared.ack_channel(&shared.node)
            ))
            .await
            .map_err(pg_error)?;
        let session = Self {
            client,
            events,
            _driver: driver,
        };
        session.heartbeat(&shared.node).await?;
        Ok(session)
    }

    /// Say this node is alive; forget nodes long silent.
    async fn heartbeat(&self, node: &str) -> Result<()> {
        let forget_ms = i64::try_from(FORGET_AFTER.as_millis()).unwrap_or(i64::MAX);
        self.client
            .execute(
                &format!(
                    "INSERT INTO quintet_nodes (id, seen_ms) VALUES ($1, {NOW_MS}) \
                     ON CONFLICT (id) DO UPDATE SET seen_ms = EXCLUDED.seen_ms"
                ),
                &[&node],
            )
            .await
            .map_err(pg_error)?;
        self.client
            .execute(
                &format!("DELETE FROM quintet_nodes WHERE seen_ms < {NOW_MS} - $1"),
                &[&forget_ms],
            )
            .await
            .map_err(pg_error)?;
        Ok(())
    }

    /// Apply and acknowledge changes, and keep the heartbeat, until the connection is
    /// lost; returns why.
    async fn run(mut self, shared: &Shared) -> String {
        let mut beat = tokio::time::interval(HEARTBEAT_EVERY);
        beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        beat.tick().await; // the first tick is immediate; the session just beat
        loop {
            tokio::select! {
                event = self.events.recv() => match event {
                    Some(Event::Notification { channel, payload }) => {
                        if let Err(e) = self.receive(shared, &channel, &payload).await {
                            return e;
                        }
                    }
                    Some(Event::Lost(why)) => return why,
                    None => return "the connection closed".to_owned(),
                },
                () = shared.sync.notified() => {
                    if let Err(e) = self.send_marker(shared).await {
                        return e;
                    }
                }
                _ = beat.tick() => {
                    match tokio::time::timeout(HEARTBEAT_TIMEOUT, self.heartbeat(&shared.node)).await {
                        Ok(Ok(())) => {}
                        Ok(Err(e)) => return format!("heartbeat failed: {e}"),
                        Err(_) => return format!("no answer to a heartbeat in {HEARTBEAT_TIMEOUT:?}"),
                    }
                }
            }
        }
    }

    /// Send this node the marker it waits for (see [`Shared::fall_behind`]).
    async fn send_marker(&self, shared: &Shared) -> Result<(), String> {
        let token = shared.marker.load(Ordering::SeqCst);
        self.client
            .execute(
                "SELECT pg_notify($1, $2)",
                &[
                    &shared.ack_channel(&shared.node),
                    &format!("{MARKER}{token}"),
                ],
            )
            .await
            .map(|_| ())
            .map_err(|e| format!("sending a marker failed: {e}"))
    }

    /// A notification: a change (apply it, then acknowledge it to its writer), an
    /// acknowledgement of one of this node's changes, or this node's marker.
    async fn receive(&self, shared: &Shared, channel: &str, payload: &str) -> Result<(), String> {
        if channel != shared.channel {
            if let Some(token) = payload.strip_prefix(MARKER) {
                if let Ok(token) = token.parse() {
                    shared.marker_back(token);
                }
                return Ok(());
            }
            if let Some((node, seq)) = payload.split_once(' ')
                && let Ok(seq) = seq.parse()
            {
                shared.acknowledged(node, seq);
            }
            return Ok(());
        }
        shared.apply(&read_change(payload));
        let Ok(sender) = serde_json::from_str::<Sender>(payload) else {
            return Ok(());
        };
        if sender.origin == shared.node {
            shared.acknowledged(&shared.node, sender.seq);
            return Ok(());
        }
        let ack = format!("{} {}", shared.node, sender.seq);
        self.client
            .execute(
                "SELECT pg_notify($1, $2)",
                &[&shared.ack_channel(&sender.origin), &ack],
            )
            .await
            .map(|_| ())
            .map_err(|e| format!("acknowledging a change failed: {e}"))
    }
}

/// Poll the connection (which runs the client's requests too) and pass notifications on.
async fn drive(mut connection: Connection<Socket, NoTlsStream>, tx: mpsc::UnboundedSender<Event>) {
    loop {
        let event = match std::future::poll_fn(|cx| connection.poll_message(cx)).await {
            Some(Ok(AsyncMessage::Notification(n))) => Event::Notification {
                channel: n.channel().to_owned(),
                payload: n.payload().to_owned(),
            },
            Some(Ok(_)) => continue, // notices
            Some(Err(e)) => Event::Lost(e.to_string()),
            None => Event::Lost("the server closed the connection".to_owned()),
        };
        let lost = matches!(event, Event::Lost(_));
        if tx.send(event).is_err() || lost {
            return;
        }
    }
}

/// The listening task: run sessions, reconnecting when one is lost.
async fn listen(shared: Arc<Shared>, db: PgDatabase, first: Session) {
    let mut session = Some(first);
    let mut backoff = MIN_BACKOFF;
    loop {
        let current = match session.take() {
            Some(s) => s,
            None => match Session::open(&db, &shared).await {
                Ok(s) => {
                    shared.listening.store(true, Ordering::SeqCst);
                    tracing::info!(channel = %shared.channel, "listening for registry changes again; caches resync");
                    shared.apply(&RegistryChange::Resync);
                    if shared.behind.load(Ordering::SeqCst) {
                        shared.sync.notify_one();
                    }
                    backoff = MIN_BACKOFF;
                    s
                }
                Err(e) => {
                    tracing::warn!(error = %e, retry_in = ?backoff, "cannot listen for registry changes");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    continue;
                }
            },
        };
        let why = current.run(&shared).await;
        shared.listening.store(false, Ordering::SeqCst);
        shared.release_waiters();
        tracing::warn!(reason = %why, "lost the connection listening for registry changes; reconnecting");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_survive_the_wire() {
        let app: AppName = "shop".parse().unwrap();
        let changes = [
            RegistryChange::InstanceCreated {
                app: AppName::domain(),
                kind: ServiceType::Search,
                name: "films".parse().unwrap(),
                id: InstanceId(7),
            },
            RegistryChange::InstanceDeleted {
                app: app.clone(),
                kind: ServiceType::Data,
                name: "movies".parse().unwrap(),
                id: InstanceId(8),
            },
            RegistryChange::AppDeleted { app: app.clone() },
            RegistryChange::KeyCreated {
                app: app.clone(),
                key: "qk_1".parse().unwrap(),
            },
            RegistryChange::KeyRevoked {
                app,
                key: "qk_2".parse().unwrap(),
            },
        ];
        for change in changes {
            let payload = serde_json::to_string(&Payload {
                origin: "0123456789abcdef".into(),
                seq: 3,
                change: Wire::of(&change).unwrap(),
            })
            .unwrap();
            assert!(
                payload.len() < 8000,
                "NOTIFY payloads stay under 8000 bytes"
            );
            assert_eq!(read_change(&payload), change);
            let sender: Sender = serde_json::from_str(&payload).unwrap();
            assert_eq!(
                (sender.origin.as_str(), sender.seq),
                ("0123456789abcdef", 3)
            );
        }
        assert!(Wire::of(&RegistryChange::Resync).is_none());
    }

    #[test]
    fn an_unreadable_change_means_resync() {
        assert_eq!(
            read_change(r#"{"origin":"x","seq":1,"change":"plan_changed"}"#),
            RegistryChange::Resync
        );
        assert_eq!(
            read_change(r#"{"origin":"x","seq":1,"change":"app_deleted","app":"Bad Name"}"#),
            RegistryChange::Resync
        );
        assert_eq!(read_change("not json"), RegistryChange::Resync);
    }

    #[test]
    fn a_change_is_delivered_when_every_live_node_acknowledged() {
        let shared = Arc::new(Shared {
            node: "me".into(),
            channel: "quintet_x".into(),
            next_seq: AtomicU64::new(0),
            listeners: Mutex::new(Vec::new()),
            waiters: Mutex::new(HashMap::new()),
            listening: AtomicBool::new(true),
            last_tick: AtomicU64::new(nanos_now()),
            behind: AtomicBool::new(false),
            marker: AtomicU64::new(0),
            sync: tokio::sync::Notify::new(),
        });
        let live: HashSet<String> = ["me", "b", "c"].map(String::from).into();
        let mut ticket = Ticket::register(&shared, 4, live);
        let mut done = ticket.done.take().unwrap();
        shared.acknowledged("me", 4);
        shared.acknowledged("b", 4);
        shared.acknowledged("b", 5);
        assert!(done.try_recv().is_err(), "c has not answered");
        shared.acknowledged("c", 4);
        assert!(done.try_recv().is_ok());
        assert!(lock(&shared.waiters).is_empty());
        // Nobody waits while this node cannot hear acknowledgements.
        shared.listening.store(false, Ordering::SeqCst);
        let ticket = Ticket::register(&shared, 6, ["b".to_owned()].into());
        assert!(ticket.done.is_none() && lock(&shared.waiters).is_empty());
    }

    #[test]
    fn caches_are_distrusted_from_a_pause_until_the_latest_marker_is_back() {
        let shared = Shared {
            node: "me".into(),
            channel: "quintet_x".into(),
            next_seq: AtomicU64::new(0),
            listeners: Mutex::new(Vec::new()),
            waiters: Mutex::new(HashMap::new()),
            listening: AtomicBool::new(true),
            last_tick: AtomicU64::new(nanos_now()),
            behind: AtomicBool::new(false),
            marker: AtomicU64::new(0),
            sync: tokio::sync::Notify::new(),
        };
        assert!(shared.caches_current());
        // A watchdog tick far in the past: the node was paused.
        shared.last_tick.store(0, Ordering::SeqCst);
        std::thread::sleep(STALL_BOUND + Duration::from_millis(10));
        assert!(!shared.caches_current(), "a late tick alone distrusts");
        shared.last_tick.store(nanos_now(), Ordering::SeqCst);
        shared.fall_behind();
        shared.fall_behind();
        assert!(!shared.caches_current());
        shared.marker_back(1);
        assert!(!shared.caches_current(), "an older marker is not enough");
        shared.marker_back(2);
        assert!(shared.caches_current());
        shared.listening.store(false, Ordering::SeqCst);
        assert!(
            !shared.caches_current(),
            "a node not listening cannot vouch"
        );
    }
}
