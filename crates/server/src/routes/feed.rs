//! `GET /data/<instance>/_changes` (a data instance's changes), `GET
//! /queue/<instance>/_changes` (a queue's job events) and `GET /storage/<instance>/_changes`
//! (a bucket's object events), as one answer (`normal`), one answer once there is
//! something to say (`longpoll`), or a stream (`continuous`: a JSON object per line;
//! `eventsource`: Server-Sent Events).
//!
//! Each follows a log numbered from 1 in commit order ([`Log`]); everything else — the
//! parameters, waiting, bounds, credentials, the formats — is shared.
//!
//! The calls, their parameters and the formats: `docs/feed.md`. How streams wait and why
//! a slow one costs writers nothing: [`crate::feed`].

use std::{collections::VecDeque, future::Future, sync::Arc, time::Duration};

use async_trait::async_trait;
use axum::{
    Extension, Router,
    body::{Body, Bytes},
    extract::{Query, State, rejection::QueryRejection},
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::Response,
    routing::get,
};
use futures_util::stream;
use quintet_core::{
    Error, Instance, Result,
    mango::Selector,
    ports::{
        changes::{Change, ChangesPage, MAX_CHANGES_PAGE, Numbered, Seq, Since},
        queue::JobEvent,
        storage_events::{ObjectEvent, ObjectEventKind},
    },
};
use serde_json::{Map, Value};
use tokio::{sync::watch, time::Instant};

use crate::{
    ClientAddr,
    auth::Principal,
    error::{ApiError, ApiResult, status_of},
    extract::{Inst, kind},
    feed::{StreamGuard, tail::SharedTail},
    reply,
    state::AppState,
};

/// Entries read per round trip while following a log.
const PAGE: usize = 500;

/// Default `timeout` of `longpoll`, in milliseconds.
pub const DEFAULT_LONGPOLL_TIMEOUT_MS: u64 = 60_000;

/// Default `heartbeat` of the streaming feeds, in milliseconds.
pub const DEFAULT_HEARTBEAT_MS: u64 = 30_000;

/// Shortest `heartbeat` accepted, in milliseconds.
const MIN_HEARTBEAT_MS: u64 = 100;

/// How often a stream checks that its client's key is still valid.
const CREDENTIAL_CHECK: Duration = Duration::from_secs(1);

pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/data/{instance}/_changes", get(data_changes))
        .route("/queue/{instance}/_changes", get(queue_changes))
        .route("/storage/{instance}/_changes", get(storage_changes))
}

/// `feed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Feed {
    Normal,
    Longpoll,
    Continuous,
    EventSource,
}

/// The parsed query string.
#[derive(Debug)]
struct Params {
    since: Since,
    feed: Feed,
    limit: Option<usize>,
    include_docs: bool,
    selector: Option<Selector>,
    heartbeat: Option<Duration>,
    timeout: Option<Duration>,
}

fn flag(name: &str, v: &str) -> Result<bool> {
    match v {
        "true" | "" => Ok(true),
        "false" => Ok(false),
        _ => Err(Error::invalid(format!(
            "{name} must be true or false, not {v:?}"
        ))),
    }
}

fn millis(name: &str, v: &str) -> Result<u64> {
    v.trim().parse().map_err(|_| {
        Error::invalid(format!(
            "{name} must be a number of milliseconds, not {v:?}"
        ))
    })
}

impl Params {
    /// The parameters of a feed of `inst`; `include_docs` and `selector` only where the
    /// log holds documents (`docs`).
    fn parse(
        pairs: &[(String, String)],
        headers: &HeaderMap,
        inst: &Instance,
        docs: bool,
    ) -> Result<Self> {
        let mut since = None;
        let (mut feed, mut limit, mut include_docs, mut selector) =
            (Feed::Normal, None, false, None);
        let (mut heartbeat, mut timeout) = (None, None);
        for (k, v) in pairs {
            match k.as_str() {
                "since" => since = Some(Since::parse(v, inst)?),
                "feed" => {
                    feed = match v.as_str() {
                        "normal" => Feed::Normal,
                        "longpoll" => Feed::Longpoll,
                        "continuous" => Feed::Continuous,
                        "eventsource" => Feed::EventSource,
                        other => {
                            return Err(Error::invalid(format!(
                                "feed must be normal, longpoll, continuous or eventsource, \
                                 not {other:?}"
                            )));
                        }
                    }
                }
                "limit" => {
                    let n: usize = v.trim().parse().ok().filter(|n| *n > 0).ok_or_else(|| {
                        Error::invalid(format!("limit must be a positive integer, not {v:?}"))
                    })?;
                    limit = Some(n);
                }
                "include_docs" | "selector" if !docs => {
                    return Err(Error::invalid(format!(
                        "{k} applies to the changes of data instances; {} feeds carry no \
                         documents",
                        inst.kind()
                    )));
                }
                "include_docs" => include_docs = flag("include_docs", v)?,
                "selector" => {
                    let json: Value = serde_json::from_str(v)
                        .map_err(|e| Error::invalid(format!("selector is not valid JSON: {e}")))?;
                    selector = Some(Selector::parse(&json)?);
                }
                "heartbeat" => {
                    heartbeat = Some(match v.as_str() {
                        "true" => Some(DEFAULT_HEARTBEAT_MS),
                        "false" | "0" => None,
                        _ => Some(millis("heartbeat", v)?.max(MIN_HEARTBEAT_MS)),
                    });
                }
                "timeout" => timeout = Some(millis("timeout", v)?),
                _ => {}
            }
        }
        // A browser's EventSource reconnects with the last id it received: that wins over
        // the `since` of the URL it reconnects to.
        if let Some(last) = headers.get("last-event-id")
            && let Ok(text) = last.to_str()
            && !text.is_empty()
        {
            since = Some(Since::parse(text, inst)?);
        }
        let streaming = matches!(feed, Feed::Continuous | Feed::EventSource);
        let heartbeat = match heartbeat {
            Some(h) => h,
            None if streaming => Some(DEFAULT_HEARTBEAT_MS),
            None => None,
        };
        let timeout = match (timeout, feed) {
            (Some(t), _) => Some(t),
            (None, Feed::Longpoll) => Some(DEFAULT_LONGPOLL_TIMEOUT_MS),
            (None, _) => None,
        };
        Ok(Self {
            since: since.unwrap_or(Since::Start),
            feed,
            limit,
            include_docs,
            selector,
            heartbeat: heartbeat.map(Duration::from_millis),
            timeout: timeout.map(Duration::from_millis),
        })
    }
}

/// Who a stream is counted against: the key, the domain token's subject, or the address.
fn client_of(principal: Option<&Principal>, addr: Option<&ClientAddr>) -> String {
    match principal {
        Some(Principal::Key { key, .. }) => format!("key:{key}"),
        Some(Principal::Domain { sub: Some(sub) }) => format!("sub:{sub}"),
        Some(Principal::Admin) => "admin".to_owned(),
        _ => match addr {
            Some(a) => format!("addr:{}", a.0.ip()),
            None => "anonymous".to_owned(),
        },
    }
}

async fn data_changes(
    State(s): State<AppState>,
    inst: Inst<kind::Data>,
    principal: Option<Extension<Principal>>,
    addr: Option<Extension<ClientAddr>>,
    headers: HeaderMap,
    params: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> ApiResult {
    let Query(pairs) =
        params.map_err(|e| ApiError(Error::BadRequest(format!("bad query string: {e}"))))?;
    let mut p = Params::parse(&pairs, &headers, &inst, true)?;
    let log = DataLog {
        s: s.clone(),
        inst: Arc::clone(&inst.0),
        include_docs: p.include_docs,
        selector: p.selector.take(),
    };
    follow(s, inst.0, p, principal, addr, Box::new(log)).await
}

async fn queue_changes(
    State(s): State<AppState>,
    inst: Inst<kind::Queue>,
    principal: Option<Extension<Principal>>,
    addr: Option<Extension<ClientAddr>>,
    headers: HeaderMap,
    params: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> ApiResult {
    let Query(pairs) =
        params.map_err(|e| ApiError(Error::BadRequest(format!("bad query string: {e}"))))?;
    let p = Params::parse(&pairs, &headers, &inst, false)?;
    let log = QueueLog {
        s: s.clone(),
        inst: Arc::clone(&inst.0),
    };
    follow(s, inst.0, p, principal, addr, Box::new(log)).await
}

async fn storage_changes(
    State(s): State<AppState>,
    inst: Inst<kind::Storage>,
    principal: Option<Extension<Principal>>,
    addr: Option<Extension<ClientAddr>>,
    headers: HeaderMap,
    params: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> ApiResult {
    let Query(pairs) =
        params.map_err(|e| ApiError(Error::BadRequest(format!("bad query string: {e}"))))?;
    let p = Params::parse(&pairs, &headers, &inst, false)?;
    let log = StorageLog {
        s: s.clone(),
        inst: Arc::clone(&inst.0),
    };
    follow(s, inst.0, p, principal, addr, Box::new(log)).await
}

/// Answer a feed of `inst`'s `log`: admitted against the stream bounds unless `normal`.
async fn follow(
    s: AppState,
    inst: Arc<Instance>,
    p: Params,
    principal: Option<Extension<Principal>>,
    addr: Option<Extension<ClientAddr>>,
    log: Box<dyn Log>,
) -> ApiResult {
    let principal = principal.map(|Extension(p)| p);
    let guard = match p.feed {
        Feed::Normal => None,
        _ => Some(
            s.feeds
                .admit(client_of(principal.as_ref(), addr.as_ref().map(|e| &e.0)))?,
        ),
    };
    let follower = Follower::start(s, inst, p, principal, guard, log).await?;
    match follower.params.feed {
        Feed::Normal | Feed::Longpoll => follower.answer().await,
        Feed::Continuous | Feed::EventSource => Ok(follower.stream()),
    }
}

/// What one read of a log gave.
struct Read {
    /// The entries to send, as sent (after any filter).
    out: Vec<Value>,
    /// The last entry read, sent or not; `None` when nothing followed.
    last: Option<u64>,
}

/// A log a feed follows: entries numbered from 1 in commit order, with no gap.
#[async_trait]
trait Log: Send + Sync {
    /// The number of the latest entry.
    async fn head(&self) -> Result<u64>;

    /// At most `want` entries after `at`, rendered; read through the log's `shared` end.
    async fn read(&self, at: u64, want: usize, shared: Shared<'_>) -> Result<Read>;
}

/// A stream's view of its log's shared end ([`SharedTail`]).
#[derive(Clone, Copy)]
struct Shared<'a> {
    tail: &'a SharedTail,
    /// The wake-up count the stream saw before reading.
    seen: u64,
    wake: &'a watch::Receiver<u64>,
}

impl Shared<'_> {
    /// At most `want` entries after `at`, through the shared tail; `fetch(after, n)` reads
    /// the store.
    async fn read<E, F, Fut>(self, at: u64, want: usize, fetch: F) -> Result<Vec<E>>
    where
        E: Numbered + Clone + Send + 'static,
        F: FnOnce(u64, usize) -> Fut,
        Fut: Future<Output = Result<ChangesPage<E>>>,
    {
        let wake = self.wake;
        self.tail
            .read(at, want, self.seen, || *wake.borrow(), fetch)
            .await
    }
}

/// A position of `inst`'s log as clients see it.
fn seq(inst: &Instance, n: u64) -> String {
    Seq::new(inst, n).to_string()
}

/// A data instance's change log.
struct DataLog {
    s: AppState,
    inst: Arc<Instance>,
    include_docs: bool,
    selector: Option<Selector>,
}

#[async_trait]
impl Log for DataLog {
    async fn head(&self) -> Result<u64> {
        self.s.services.data.change_head(&self.inst).await
    }

    async fn read(&self, at: u64, want: usize, shared: Shared<'_>) -> Result<Read> {
        let data = &self.s.services.data;
        let changes = shared
            .read(at, want, |after, n| data.changes(&self.inst, after, n))
            .await?;
        let last = changes.last().map(|c| c.seq);
        Ok(Read {
            out: self.render(changes).await?,
            last,
        })
    }
}

impl DataLog {
    /// Changes as sent: seq, id, deleted, and the document when asked (or needed by the
    /// selector, which checks the document as it is now; deletions always pass).
    async fn render(&self, changes: Vec<Change>) -> Result<Vec<Value>> {
        let need_doc = self.include_docs || self.selector.is_some();
        let mut out = Vec::with_capacity(changes.len());
        for c in changes {
            let doc = if need_doc && !c.deleted {
                match c.id.parse() {
                    Ok(id) => self.s.services.data.get(&self.inst, &id).await?,
                    Err(_) => None,
                }
            } else {
                None
            };
            if let Some(sel) = &self.selector
                && !c.deleted
            {
                // A document removed since is skipped: its deletion follows in the log.
                let Some(doc) = &doc else { continue };
                let parsed: Value = serde_json::from_str(doc.get())
                    .map_err(|e| Error::internal(format!("a stored document: {e}")))?;
                if !sel.matches(&parsed) {
                    continue;
                }
            }
            let mut m = Map::new();
            m.insert("seq".into(), Value::String(seq(&self.inst, c.seq)));
            m.insert("id".into(), Value::String(c.id));
            m.insert("deleted".into(), Value::Bool(c.deleted));
            if self.include_docs {
                let doc = match doc {
                    Some(raw) => serde_json::from_str::<Value>(raw.get())
                        .map_err(|e| Error::internal(format!("a stored document: {e}")))?,
                    None => Value::Null,
                };
                m.insert("doc".into(), doc);
            }
            out.push(Value::Object(m));
        }
        Ok(out)
    }
}

/// A queue's event log.
struct QueueLog {
    s: AppState,
    inst: Arc<Instance>,
}

#[async_trait]
impl Log for QueueLog {
    async fn head(&self) -> Result<u64> {
        self.s.services.queue.event_head(&self.inst).await
    }

    async fn read(&self, at: u64, want: usize, shared: Shared<'_>) -> Result<Read> {
        let queue = &self.s.services.queue;
        let events = shared
            .read(at, want, |after, n| queue.events(&self.inst, after, n))
            .await?;
        let last = events.last().map(|e| e.seq);
        Ok(Read {
            out: events
                .into_iter()
                .map(|e| job_event(&self.inst, e))
                .collect(),
            last,
        })
    }
}

/// A job event as sent: `{seq, id, event, status}`, and `error` with `error` events.
fn job_event(inst: &Instance, e: JobEvent) -> Value {
    let mut m = Map::new();
    m.insert("seq".into(), Value::String(seq(inst, e.seq)));
    m.insert("id".into(), Value::String(e.id));
    m.insert("event".into(), Value::String(e.event.as_str().into()));
    m.insert(
        "status".into(),
        e.event
            .status()
            .map_or(Value::Null, |st| Value::String(st.as_str().into())),
    );
    if let Some(error) = e.error {
        m.insert("error".into(), Value::String(error));
    }
    Value::Object(m)
}

/// A bucket's event log.
struct StorageLog {
    s: AppState,
    inst: Arc<Instance>,
}

#[async_trait]
impl Log for StorageLog {
    async fn head(&self) -> Result<u64> {
        self.s.services.storage_events.event_head(&self.inst).await
    }

    async fn read(&self, at: u64, want: usize, shared: Shared<'_>) -> Result<Read> {
        let log = &self.s.services.storage_events;
        let events = shared
            .read(at, want, |after, n| log.events(&self.inst, after, n))
            .await?;
        let last = events.last().map(|e| e.seq);
        Ok(Read {
            out: events
                .into_iter()
                .map(|e| object_event(&self.inst, e))
                .collect(),
            last,
        })
    }
}

/// An object event as sent: `{seq, path, event}`, and `size`, `etag`, `content_type` with
/// `written` events.
fn object_event(inst: &Instance, e: ObjectEvent) -> Value {
    let mut m = Map::new();
    m.insert("seq".into(), Value::String(seq(inst, e.seq)));
    m.insert("path".into(), Value::String(e.path));
    m.insert("event".into(), Value::String(e.event.as_str().into()));
    if let ObjectEventKind::Written {
        size,
        etag,
        content_type,
    } = e.event
    {
        m.insert("size".into(), Value::from(size));
        m.insert("etag".into(), Value::String(etag));
        m.insert("content_type".into(), Value::String(content_type));
    }
    Value::Object(m)
}

/// Why a stream ended.
enum End {
    /// The timeout passed or the limit was reached.
    Done,
    /// The node shuts down: the client reconnects (elsewhere) and resumes.
    Shutdown,
    /// An error the client must act on.
    Failed(Error),
}

/// One client following one instance's log.
struct Follower {
    s: AppState,
    inst: Arc<Instance>,
    log: Box<dyn Log>,
    params: Params,
    principal: Option<Principal>,
    /// The last entry read (not necessarily sent: the selector may have skipped it).
    at: u64,
    /// Changes sent so far, for `limit`.
    sent: usize,
    wake: watch::Receiver<u64>,
    tail: Arc<SharedTail>,
    stopping: watch::Receiver<bool>,
    deadline: Option<Instant>,
    /// When the client's key is checked next.
    next_check: Instant,
    _guard: Option<StreamGuard>,
}

impl Follower {
    async fn start(
        s: AppState,
        inst: Arc<Instance>,
        params: Params,
        principal: Option<Principal>,
        guard: Option<StreamGuard>,
        log: Box<dyn Log>,
    ) -> Result<Self> {
        // Watch before the first read: a change committed after it wakes us.
        let following = s.feeds.watch(inst.id);
        let stopping = s.feeds.stopping();
        let at = match params.since {
            Since::Now => log.head().await?,
            other => other.after(0),
        };
        Ok(Self {
            log,
            deadline: params.timeout.map(|t| Instant::now() + t),
            next_check: Instant::now() + CREDENTIAL_CHECK,
            s,
            inst,
            params,
            principal,
            at,
            sent: 0,
            wake: following.wake,
            tail: following.tail,
            stopping,
            _guard: guard,
        })
    }

    fn remaining(&self) -> usize {
        self.params
            .limit
            .map_or(usize::MAX, |l| l.saturating_sub(self.sent))
    }

    fn seq(&self, n: u64) -> String {
        seq(&self.inst, n)
    }

    /// The next changes to send (after any filter), reading the log from `at` until
    /// something passes or the log is read to its end; `[]` at the end.
    async fn next_changes(&mut self, page: usize) -> Result<Vec<Value>> {
        loop {
            // At most what `limit` leaves, so nothing read is left unsent.
            let want = page.min(self.remaining()).max(1);
            // Marked seen before reading: a commit after this read wakes the wait.
            let seen = *self.wake.borrow_and_update();
            let shared = Shared {
                tail: &self.tail,
                seen,
                wake: &self.wake,
            };
            let read = self.log.read(self.at, want, shared).await?;
            let Some(last) = read.last else {
                return Ok(Vec::new());
            };
            self.at = last;
            if !read.out.is_empty() {
                self.sent += read.out.len();
                return Ok(read.out);
            }
        }
    }

    /// When due, whether the client's key still grants access: a revoked key ends its
    /// streams within [`CREDENTIAL_CHECK`], whether changes flow or not.
    async fn check_credentials(&mut self) -> std::result::Result<(), End> {
        if Instant::now() < self.next_check {
            return Ok(());
        }
        self.next_check = Instant::now() + CREDENTIAL_CHECK;
        let Some(Principal::Key { app, key }) = &self.principal else {
            return Ok(());
        };
        let allowed = match self.s.auth.keys.get(key).await {
            Ok(Some(entry)) => !entry.is_revoked() && &entry.app == app,
            Ok(None) => false,
            // The registry is unreachable: keep the stream, check again later.
            Err(_) => true,
        };
        if allowed {
            Ok(())
        } else {
            Err(End::Failed(Error::Unauthenticated(format!(
                "key \"{key}\" was revoked: this feed is closed"
            ))))
        }
    }

    /// Wait for a wake-up, the heartbeat (`true`), the deadline or shutdown.
    async fn wait(&mut self) -> std::result::Result<bool, End> {
        let heartbeat = self.params.heartbeat;
        let beat = async {
            match heartbeat {
                Some(h) => tokio::time::sleep(h).await,
                None => std::future::pending().await,
            }
        };
        let deadline = self.deadline;
        let until = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        let check = tokio::time::sleep_until(self.next_check);
        let due = tokio::select! {
            // The hub never drops a sender a receiver holds: any answer is a wake-up.
            _ = self.wake.changed() => return Ok(false),
            _ = self.stopping.wait_for(|s| *s) => return Err(End::Shutdown),
            () = beat => return Ok(true),
            () = until => return Err(End::Done),
            () = check => true,
        };
        debug_assert!(due);
        self.check_credentials().await.map(|()| false)
    }

    /// `normal` and `longpoll`: one JSON answer.
    async fn answer(mut self) -> ApiResult {
        let limit = self
            .params
            .limit
            .unwrap_or(MAX_CHANGES_PAGE)
            .min(MAX_CHANGES_PAGE);
        let mut results = Vec::new();
        loop {
            let batch = self.next_changes(limit - results.len()).await?;
            let empty = batch.is_empty();
            results.extend(batch);
            if results.len() >= limit {
                break;
            }
            if !empty {
                continue;
            }
            if self.params.feed == Feed::Normal || !results.is_empty() {
                break;
            }
            match self.wait().await {
                Ok(_) => {}
                Err(End::Done | End::Shutdown) => break,
                Err(End::Failed(e)) => return Err(ApiError(e)),
            }
        }
        let mut m = Map::new();
        m.insert("ok".into(), Value::Bool(true));
        m.insert("results".into(), Value::Array(results));
        m.insert("last_seq".into(), Value::String(self.seq(self.at)));
        Ok(reply::json(StatusCode::OK, &Value::Object(m)))
    }

    /// `continuous` and `eventsource`: a stream the client reads at its own pace.
    fn stream(self) -> Response {
        let sse = self.params.feed == Feed::EventSource;
        let state = StreamState {
            follower: self,
            queue: VecDeque::new(),
            ended: false,
        };
        let body = stream::unfold(state, |mut st| async move {
            let chunk = st.next_chunk().await?;
            Some((Ok::<_, std::convert::Infallible>(chunk), st))
        });
        let mut res = Response::new(Body::from_stream(body));
        let headers = res.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(if sse {
                "text/event-stream"
            } else {
                "application/x-ndjson"
            }),
        );
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        // Proxies that buffer responses (nginx) pass these through as they come.
        headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
        res
    }
}

/// A streaming feed between two chunks.
struct StreamState {
    follower: Follower,
    queue: VecDeque<Bytes>,
    ended: bool,
}

impl StreamState {
    fn sse(&self) -> bool {
        self.follower.params.feed == Feed::EventSource
    }

    fn change(&self, change: &Value) -> Bytes {
        let text = change.to_string();
        if self.sse() {
            let seq = change.get("seq").and_then(Value::as_str).unwrap_or("");
            Bytes::from(format!("id: {seq}\ndata: {text}\n\n"))
        } else {
            Bytes::from(format!("{text}\n"))
        }
    }

    fn heartbeat(&self) -> Bytes {
        Bytes::from_static(if self.sse() { b":\n\n" } else { b"\n" })
    }

    /// The last chunk: where to resume, and why the feed ended when it failed.
    fn last(&self, failed: Option<&Error>) -> Bytes {
        let last_seq = self.follower.seq(self.follower.at);
        let body = match failed {
            None => serde_json::json!({"ok": true, "last_seq": last_seq}),
            Some(e) => serde_json::json!({
                "ok": false,
                "status": status_of(e).as_u16(),
                "msg": e.public_message(),
                "last_seq": last_seq,
            }),
        };
        if let Some(e) = failed
            && let Error::Internal(detail) = e
        {
            tracing::error!(detail, "a change feed failed");
        }
        if self.sse() {
            Bytes::from(format!("event: end\ndata: {body}\n\n"))
        } else {
            Bytes::from(format!("{body}\n"))
        }
    }

    async fn next_chunk(&mut self) -> Option<Bytes> {
        loop {
            if let Some(b) = self.queue.pop_front() {
                return Some(b);
            }
            if self.ended {
                return None;
            }
            if self.follower.remaining() == 0 {
                self.ended = true;
                return Some(self.last(None));
            }
            if let Err(End::Failed(e)) = self.follower.check_credentials().await {
                self.ended = true;
                return Some(self.last(Some(&e)));
            }
            match self.follower.next_changes(PAGE).await {
                Ok(batch) if !batch.is_empty() => {
                    // One chunk per page: many small events cost one write.
                    let mut buf = Vec::new();
                    for c in &batch {
                        buf.extend_from_slice(&self.change(c));
                    }
                    return Some(Bytes::from(buf));
                }
                Ok(_) => {}
                Err(e) => {
                    self.ended = true;
                    return Some(self.last(Some(&e)));
                }
            }
            match self.follower.wait().await {
                Ok(false) => {}
                Ok(true) => return Some(self.heartbeat()),
                Err(End::Done) => {
                    self.ended = true;
                    return Some(self.last(None));
                }
                // The connection just ends: an EventSource reconnects (to another node)
                // with its last id.
                Err(End::Shutdown) => return None,
                Err(End::Failed(e)) => {
                    self.ended = true;
                    return Some(self.last(Some(&e)));
                }
            }
        }
    }
}
