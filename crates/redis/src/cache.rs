//! [`RedisCache`]: the cache port on Redis, shared by every node pointed at the same
//! database and prefix.
//!
//! Reads are single commands (`GET`; `SCAN` then `MGET` for queries). The writes whose
//! outcome depends on the current entry — add, set, remove — each run as one Lua script,
//! which Redis executes atomically: of two concurrent adds of a key exactly one sees it
//! missing, and a set without TTL reads the expiry it keeps in the same step that writes.
//! Every write that gives an entry a TTL sets the Redis expiry (`PX`) in the same `SET`,
//! so the value and its expiry are never apart. How entries are laid out: [`crate::keys`].

use std::{fmt, sync::Arc, time::Duration};

use async_trait::async_trait;
use quintet_core::{
    Clock, Error, Instance, InstanceId, Result,
    breaker::{self, Breaker},
    cache::{CacheKey, CacheValue, Glob, Ttl, existing_key, missing_key},
    ports::{
        Keep, Lifecycle, PoolUsage,
        cache::{Cache, CacheEntry, CacheUsage, SetMode},
    },
};
use redis::{AsyncCommands as _, RedisError, Script, aio::ConnectionManager};

use crate::{
    RedisConfig,
    error::redis_error,
    keys::{self, Layout},
};

/// Keys asked of each `SCAN` step unless configured: large enough that a query over a big
/// instance takes few round trips, small enough that no step blocks Redis for long.
pub const DEFAULT_SCAN_COUNT: usize = 1_000;

/// Values fetched per `MGET` (values may be up to 10 MiB each).
const MGET_BATCH: usize = 100;

/// Longest a probe of an open breaker (or a readiness check) waits for `PING`.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// The Lua shared by the scripts: the header of the live entry at `k`, or `false`.
const LIVE: &str = r"
local function live(k, now)
  local h = redis.call('GETRANGE', k, 0, 15)
  if h == '' then return false end
  local at = tonumber(h)
  if at == nil then return false end
  if at == 0 or at > now then return h end
  return false
end
";

/// `KEYS[1]` entry; `ARGV` now, stored string, PX milliseconds (`0`: none). 1 when added,
/// 0 when a live entry holds the key.
const ADD: &str = r"
if live(KEYS[1], tonumber(ARGV[1])) then return 0 end
if ARGV[3] ~= '0' then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
else
  redis.call('SET', KEYS[1], ARGV[2])
end
return 1
";

/// `KEYS[1]` entry; `ARGV` now, stored string, PX milliseconds (`0`: keep the live entry's
/// expiry), `update` or `upsert`. 1 when written, 0 when `update` found no live entry.
/// A plain `SET` drops any Redis expiry, which is what a new entry without TTL needs.
const SET: &str = r"
local h = live(KEYS[1], tonumber(ARGV[1]))
if not h and ARGV[4] == 'update' then return 0 end
if ARGV[3] ~= '0' then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
elseif h then
  redis.call('SET', KEYS[1], ARGV[2], 'KEEPTTL')
  redis.call('SETRANGE', KEYS[1], 0, h)
else
  redis.call('SET', KEYS[1], ARGV[2])
end
return 1
";

/// `KEYS[1]` entry; `ARGV` now. 1 when a live entry was removed, else 0.
const REMOVE: &str = r"
if not live(KEYS[1], tonumber(ARGV[1])) then return 0 end
redis.call('UNLINK', KEYS[1])
return 1
";

/// The cache on Redis.
///
/// Expiry follows the adapter's [`Clock`], like the embedded cache's: an entry is live
/// while the clock reads less than its expiry instant, which is stored with it. Redis'
/// own expiry (`PX`, the TTL from the write) removes it at the same moment on a real clock,
/// so expired entries take no space; nodes' clocks should agree (NTP), as an entry is
/// hidden from the moment either says it expired.
#[derive(Clone)]
pub struct RedisCache {
    conn: ConnectionManager,
    layout: Layout,
    clock: Arc<dyn Clock>,
    scan_count: usize,
    add: Arc<Script>,
    set: Arc<Script>,
    remove: Arc<Script>,
    shown_url: String,
    /// Open while Redis cannot be reached: calls fail at once (see
    /// [`quintet_core::breaker`]).
    breaker: Arc<Breaker>,
}

impl fmt::Debug for RedisCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisCache")
            .field("url", &self.shown_url)
            .field("layout", &self.layout)
            .field("scan_count", &self.scan_count)
            .finish_non_exhaustive()
    }
}

impl RedisCache {
    /// Connect to the Redis `config` names, reading time from `clock`.
    /// [`quintet_core::Error::Unavailable`] when Redis cannot be reached.
    pub async fn connect(config: &RedisConfig, clock: Arc<dyn Clock>) -> Result<Self> {
        let client = config.client()?;
        // No reconnection retries inside a call (the default's six took about 9 s per call
        // while Redis was down): a call that cannot connect fails, opens the breaker, and
        // the breaker's probe reconnects in the background.
        let manager = redis::aio::ConnectionManagerConfig::new()
            .set_connection_timeout(Some(config.connect_timeout))
            .set_response_timeout(Some(config.timeout))
            .set_number_of_retries(0);
        let conn = client
            .get_connection_manager_with_config(manager)
            .await
            .map_err(redis_error)?;
        let script = |body: &str| Arc::new(Script::new(&format!("{LIVE}{body}")));
        let cache = Self {
            conn,
            layout: Layout::new(&config.prefix),
            clock,
            scan_count: DEFAULT_SCAN_COUNT,
            add: script(ADD),
            set: script(SET),
            remove: script(REMOVE),
            shown_url: config.redacted_url(),
            breaker: Arc::new(Breaker::new(format!("Redis at {}", config.redacted_url()))),
        };
        // A round trip now, so that a wrong address or password fails at start-up.
        let _: String = redis::cmd("PING")
            .query_async(&mut cache.conn()?)
            .await
            .map_err(redis_error)?;
        Ok(cache)
    }

    /// The same cache asking `count` keys of each `SCAN` step (at least 1).
    pub fn with_scan_count(mut self, count: usize) -> Self {
        self.scan_count = count.max(1);
        self
    }

    /// Where this cache keeps its keys.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// A handle on the one multiplexed connection (cloning is cheap), unless the breaker
    /// is open.
    fn conn(&self) -> Result<ConnectionManager> {
        self.breaker.check()?;
        Ok(self.conn.clone())
    }

    /// The one multiplexed connection every call shares: open unless the breaker says
    /// Redis cannot be reached.
    fn pool_usage(&self) -> PoolUsage {
        PoolUsage {
            engine: "redis",
            max: 1,
            open: u64::from(!self.breaker.is_open()),
            in_use: None,
            waiting: None,
        }
    }

    /// The breaker of this node's calls to Redis.
    pub fn breaker(&self) -> &Breaker {
        &self.breaker
    }

    /// Whether Redis answers now: `PING`, bounded in time.
    pub async fn ping(&self) -> Result<()> {
        let mut conn = self.conn()?;
        let cmd = redis::cmd("PING");
        let ping = cmd.query_async::<String>(&mut conn);
        match tokio::time::timeout(PROBE_TIMEOUT, ping).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(self.failed(e)),
            Err(_) => Err(Error::Unavailable(format!(
                "{} did not answer within {PROBE_TIMEOUT:?}",
                self.breaker.engine()
            ))),
        }
    }

    /// `e` as the caller's error; when it says Redis could not be reached, the breaker
    /// opens and probes until Redis answers again.
    fn failed(&self, e: RedisError) -> Error {
        let unreachable = e.is_connection_refusal()
            || e.is_io_error()
            || e.is_timeout()
            || e.is_connection_dropped();
        if unreachable && self.breaker.trip(&e) {
            tracing::error!(
                url = %self.shown_url,
                error = %e,
                "Redis is unreachable: calls that need it answer 503 until it answers again"
            );
            let (conn, breaker, url) = (
                self.conn.clone(),
                Arc::clone(&self.breaker),
                self.shown_url.clone(),
            );
            tokio::spawn(async move {
                let probe = move || {
                    let mut conn = conn.clone();
                    async move {
                        let cmd = redis::cmd("PING");
                        let ping = cmd.query_async::<String>(&mut conn);
                        match tokio::time::timeout(PROBE_TIMEOUT, ping).await {
                            Ok(Ok(_)) => Ok(()),
                            Ok(Err(e)) => Err(Error::Unavailable(e.to_string())),
                            Err(_) => Err(Error::Unavailable("probe timed out".into())),
                        }
                    }
                };
                breaker::recover(&breaker, probe, tokio::time::sleep, |probing| {
                    if !probing {
                        tracing::info!(url = %url, "Redis answers again");
                    }
                })
                .await;
            });
        }
        redis_error(e)
    }

    /// Every key matching the `SCAN MATCH` pattern `pattern`, one `SCAN` step at a time,
    /// each page handed to `page` (which may delete what it is given).
    async fn scan(&self, pattern: &str, mut page: impl AsyncPage) -> Result<()> {
        let mut conn = self.conn()?;
        let mut cursor: u64 = 0;
        loop {
            let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                .cursor_arg(cursor)
                .arg("MATCH")
                .arg(pattern)
                .arg("COUNT")
                .arg(self.scan_count)
                .query_async(&mut conn)
                .await
                .map_err(|e| self.failed(e))?;
            if !keys.is_empty() {
                page.take(&mut conn, keys).await?;
            }
            if next == 0 {
                return Ok(());
            }
            cursor = next;
        }
    }

    async fn drop_id(&self, id: InstanceId) -> Result<()> {
        self.scan(&self.layout.all_of(id), Unlink).await?;
        let _: i64 = self
            .conn()?
            .srem(self.layout.instances(), id.0)
            .await
            .map_err(|e| self.failed(e))?;
        Ok(())
    }
}

/// What to do with each page of a `SCAN`.
trait AsyncPage: Send {
    /// Handle one page of keys.
    fn take(
        &mut self,
        conn: &mut ConnectionManager,
        keys: Vec<String>,
    ) -> impl Future<Output = Result<()>> + Send;
}

/// Remove every key found (`UNLINK`: Redis frees large values in the background).
struct Unlink;

impl AsyncPage for Unlink {
    async fn take(&mut self, conn: &mut ConnectionManager, keys: Vec<String>) -> Result<()> {
        let _: i64 = conn.unlink(keys).await.map_err(redis_error)?;
        Ok(())
    }
}

/// Collect the keys found.
struct Collect<'a>(&'a mut Vec<String>);

impl AsyncPage for Collect<'_> {
    async fn take(&mut self, _conn: &mut ConnectionManager, keys: Vec<String>) -> Result<()> {
        self.0.extend(keys);
        Ok(())
    }
}

/// Count the live entries found and add up their bytes: each key's cache-key part plus its
/// stored value without the expiry header (keys of an instance end with `:<cache key>`,
/// and cache keys hold no `:`). Liveness is read from the header by the adapter's clock,
/// as reads see it.
struct Usage<'a> {
    usage: &'a mut CacheUsage,
    now: i64,
}

impl AsyncPage for Usage<'_> {
    async fn take(&mut self, conn: &mut ConnectionManager, keys: Vec<String>) -> Result<()> {
        let mut pipe = redis::pipe();
        for k in &keys {
            pipe.cmd("STRLEN").arg(k);
            pipe.cmd("GETRANGE").arg(k).arg(0).arg(keys::HEADER_LEN - 1);
        }
        let answers: Vec<(u64, Vec<u8>)> = pipe.query_async(conn).await.map_err(redis_error)?;
        for (k, (len, header)) in keys.iter().zip(answers) {
            // Gone since the SCAN, or not an entry quintet wrote.
            let Some(expires_at) = keys::decode_expiry(&header) else {
                continue;
            };
            if len == 0 || !keys::is_live(expires_at, self.now) {
                continue;
            }
            let key_len = k.rsplit(':').next().map_or(0, str::len) as u64;
            self.usage.entries += 1;
            self.usage.bytes += key_len + len.saturating_sub(keys::HEADER_LEN as u64);
        }
        Ok(())
    }
}

/// The arguments of a write of `value` with `ttl` at `now`: the stored string and the PX.
fn write_args(value: &CacheValue, ttl: Option<Ttl>, now: i64) -> (Vec<u8>, i64) {
    match ttl {
        Some(ttl) => (
            keys::encode(value, Some(ttl.expires_at(now))),
            ttl.as_millis(),
        ),
        None => (keys::encode(value, None), 0),
    }
}

#[async_trait]
impl Cache for RedisCache {
    async fn usage(&self, instance: &Instance) -> Result<CacheUsage> {
        let mut usage = CacheUsage::default();
        let page = Usage {
            usage: &mut usage,
            now: self.clock.now_ms(),
        };
        self.scan(&self.layout.all_of(instance.id), page).await?;
        Ok(usage)
    }

    async fn add(
        &self,
        instance: &Instance,
        key: &CacheKey,
        value: CacheValue,
        ttl: Option<Ttl>,
    ) -> Result<()> {
        let now = self.clock.now_ms();
        let (stored, px) = write_args(&value, ttl, now);
        let added: i64 = self
            .add
            .key(self.layout.entry(instance.id, key))
            .arg(now)
            .arg(stored)
            .arg(px)
            .invoke_async(&mut self.conn()?)
            .await
            .map_err(|e| self.failed(e))?;
        if added == 1 {
            Ok(())
        } else {
            Err(existing_key(&instance.name, key))
        }
    }

    async fn expiry(&self, instance: &Instance, key: &CacheKey) -> Result<Option<Option<i64>>> {
        // The expiry is the stored string's header; reading its 16 bytes is enough.
        let now = self.clock.now_ms();
        let header: Option<Vec<u8>> = redis::cmd("GETRANGE")
            .arg(self.layout.entry(instance.id, key))
            .arg(0)
            .arg(keys::HEADER_LEN - 1)
            .query_async(&mut self.conn()?)
            .await
            .map_err(|e| self.failed(e))?;
        let Some(header) = header.filter(|h| !h.is_empty()) else {
            return Ok(None);
        };
        let expires_at = keys::decode_expiry(&header).ok_or_else(|| {
            quintet_core::Error::internal(format!(
                "Redis key {} holds something quintet did not write",
                self.layout.entry(instance.id, key)
            ))
        })?;
        Ok(keys::is_live(expires_at, now).then_some(expires_at))
    }

    async fn get(&self, instance: &Instance, key: &CacheKey) -> Result<Option<CacheValue>> {
        let now = self.clock.now_ms();
        let stored: Option<Vec<u8>> = self
            .conn()?
            .get(self.layout.entry(instance.id, key))
            .await
            .map_err(|e| self.failed(e))?;
        let Some(stored) = stored else {
            return Ok(None);
        };
        let (expires_at, value) = keys::decode(stored).ok_or_else(|| {
            quintet_core::Error::internal(format!(
                "Redis key {} holds something quintet did not write",
                self.layout.entry(instance.id, key)
            ))
        })?;
        Ok(keys::is_live(expires_at, now).then_some(value))
    }

    async fn set(
        &self,
        instance: &Instance,
        key: &CacheKey,
        value: CacheValue,
        ttl: Option<Ttl>,
        mode: SetMode,
    ) -> Result<()> {
        let now = self.clock.now_ms();
        let (stored, px) = write_args(&value, ttl, now);
        let mode_arg = match mode {
            SetMode::Upsert => "upsert",
            SetMode::UpdateExisting => "update",
        };
        let written: i64 = self
            .set
            .key(self.layout.entry(instance.id, key))
            .arg(now)
            .arg(stored)
            .arg(px)
            .arg(mode_arg)
            .invoke_async(&mut self.conn()?)
            .await
            .map_err(|e| self.failed(e))?;
        if written == 1 {
            Ok(())
        } else {
            Err(missing_key(&instance.name, key))
        }
    }

    async fn remove(&self, instance: &Instance, key: &CacheKey) -> Result<()> {
        let now = self.clock.now_ms();
        let removed: i64 = self
            .remove
            .key(self.layout.entry(instance.id, key))
            .arg(now)
            .invoke_async(&mut self.conn()?)
            .await
            .map_err(|e| self.failed(e))?;
        if removed == 1 {
            Ok(())
        } else {
            Err(missing_key(&instance.name, key))
        }
    }

    async fn query(&self, instance: &Instance, pattern: &Glob) -> Result<Vec<CacheEntry>> {
        if pattern.is_exact() {
            // One key at most: a GET, where a SCAN would walk the whole database.
            let Ok(key) = pattern.as_str().parse::<CacheKey>() else {
                return Ok(Vec::new());
            };
            let now = self.clock.now_ms();
            let stored: Option<Vec<u8>> = self
                .conn()?
                .get(self.layout.entry(instance.id, &key))
                .await
                .map_err(|e| self.failed(e))?;
            return Ok(stored
                .and_then(keys::decode)
                .filter(|(expires_ms, _)| keys::is_live(*expires_ms, now))
                .map(|(expires_ms, value)| CacheEntry {
                    key,
                    value,
                    expires_ms,
                })
                .into_iter()
                .collect());
        }
        let now = self.clock.now_ms();
        let prefix = self.layout.instance_prefix(instance.id);
        let mut found = Vec::new();
        self.scan(
            &self.layout.matching(instance.id, pattern),
            Collect(&mut found),
        )
        .await?;
        // SCAN may return a key more than once, and MATCH is only a filter: the core glob
        // decides, so the answer is the embedded adapter's.
        let mut keys: Vec<(CacheKey, String)> = found
            .into_iter()
            .filter_map(|redis_key| {
                let key = redis_key.strip_prefix(&prefix)?.parse::<CacheKey>().ok()?;
                pattern.matches(key.as_str()).then_some((key, redis_key))
            })
            .collect();
        keys.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        keys.dedup_by(|a, b| a.0 == b.0);

        let mut conn = self.conn()?;
        let mut entries = Vec::with_capacity(keys.len());
        for batch in keys.chunks(MGET_BATCH) {
            let names: Vec<&str> = batch.iter().map(|(_, k)| k.as_str()).collect();
            let values: Vec<Option<Vec<u8>>> = redis::cmd("MGET")
                .arg(&names)
                .query_async(&mut conn)
                .await
                .map_err(|e| self.failed(e))?;
            for ((key, _), stored) in batch.iter().zip(values) {
                // Gone since the scan (removed, or expired by Redis): not in the answer.
                let Some((expires_at, value)) = stored.and_then(keys::decode) else {
                    continue;
                };
                if keys::is_live(expires_at, now) {
                    entries.push(CacheEntry {
                        key: key.clone(),
                        value,
                        expires_ms: expires_at,
                    });
                }
            }
        }
        Ok(entries)
    }
}

#[async_trait]
impl Lifecycle for RedisCache {
    async fn create_instance(&self, instance: &Instance) -> Result<()> {
        let _: i64 = self
            .conn()?
            .sadd(self.layout.instances(), instance.id.0)
            .await
            .map_err(|e| self.failed(e))?;
        Ok(())
    }

    async fn drop_instance(&self, instance: &Instance) -> Result<()> {
        self.drop_id(instance.id).await
    }

    async fn sweep(&self, keep: &Keep) -> Result<usize> {
        let known: Vec<i64> = self
            .conn()?
            .smembers(self.layout.instances())
            .await
            .map_err(|e| self.failed(e))?;
        let mut removed = 0;
        for id in known.into_iter().filter(|id| !keep.keeps(InstanceId(*id))) {
            self.drop_id(InstanceId(id)).await?;
            removed += 1;
        }
        if removed > 0 {
            tracing::info!(removed, "removed the cache entries of deleted instances");
        }
        Ok(removed)
    }

    async fn ready(&self) -> Result<()> {
        self.ping().await
    }

    fn pool(&self) -> Option<PoolUsage> {
        Some(self.pool_usage())
    }

    async fn close(&self) -> Result<()> {
        // Every write was acknowledged by Redis before it returned; what survives a Redis
        // restart is Redis' own persistence setting. The connection closes when dropped.
        Ok(())
    }
}
