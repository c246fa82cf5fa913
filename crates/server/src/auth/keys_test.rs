//! The key cache against a real registry, wrapped to count reads and to run code in the
//! middle of one.

use std::{
    collections::HashSet,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
};

use async_trait::async_trait;
use quintet_core::{
    AppName, Instance, InstanceConfig, InstanceName, Result, ServiceType, SystemClock,
    account_tokens::{AccountToken, AccountTokenId},
    accounts::{Account, AccountName, AccountUsage, App, Plan},
    keys::{AccessKey, KeyId},
    ports::registry::{ChangeListener, Registry, RegistryChange},
};
use quintet_embedded::registry::SqliteRegistry;

use super::{KeyCache, MISSING_CAPACITY};

type Hook = Box<dyn FnOnce() + Send>;

/// A registry that counts `get_key` reads, can run a hook after the next one, and can
/// pretend a key does not exist yet (key ids are random, so "created after a miss" is a
/// hidden key shown).
#[derive(Debug)]
struct Spy {
    inner: SqliteRegistry,
    key_reads: AtomicUsize,
    after_read: Mutex<Option<HookBox>>,
    hidden: Mutex<HashSet<KeyId>>,
}

impl Spy {
    fn hide(&self, key: &KeyId) {
        self.hidden.lock().unwrap().insert(key.clone());
    }

    fn show(&self, key: &KeyId) {
        self.hidden.lock().unwrap().remove(key);
    }

    fn reads(&self) -> usize {
        self.key_reads.load(Ordering::SeqCst)
    }
}

struct HookBox(Hook);

impl std::fmt::Debug for HookBox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("hook")
    }
}

#[async_trait]
impl Registry for Spy {
    async fn create_instance(
        &self,
        app: &AppName,
        name: &InstanceName,
        config: InstanceConfig,
    ) -> Result<Instance> {
        self.inner.create_instance(app, name, config).await
    }
    async fn get_instance(
        &self,
        app: &AppName,
        kind: ServiceType,
        name: &InstanceName,
    ) -> Result<Option<Instance>> {
        self.inner.get_instance(app, kind, name).await
    }
    async fn delete_instance(
        &self,
        app: &AppName,
        kind: ServiceType,
        name: &InstanceName,
    ) -> Result<Instance> {
        self.inner.delete_instance(app, kind, name).await
    }
    async fn list_instances(&self, app: Option<&AppName>) -> Result<Vec<Instance>> {
        self.inner.list_instances(app).await
    }

    async fn instances_for_sweep(&self) -> Result<(Vec<Instance>, quintet_core::InstanceId)> {
        self.inner.instances_for_sweep().await
    }
    async fn create_account(&self, name: &AccountName, plan: Plan) -> Result<Account> {
        self.inner.create_account(name, plan).await
    }
    async fn get_account(&self, name: &AccountName) -> Result<Option<AccountUsage>> {
        self.inner.get_account(name).await
    }
    async fn list_accounts(&self) -> Result<Vec<AccountUsage>> {
        self.inner.list_accounts().await
    }
    async fn set_plan(&self, name: &AccountName, plan: Plan) -> Result<Account> {
        self.inner.set_plan(name, plan).await
    }
    async fn create_app(&self, name: &AppName, account: &AccountName) -> Result<App> {
        self.inner.create_app(name, account).await
    }
    async fn get_app(&self, name: &AppName) -> Result<Option<App>> {
        self.inner.get_app(name).await
    }
    async fn list_apps(&self, account: Option<&AccountName>) -> Result<Vec<App>> {
        self.inner.list_apps(account).await
    }
    async fn delete_app(&self, name: &AppName) -> Result<(App, Vec<Instance>)> {
        self.inner.delete_app(name).await
    }
    async fn create_key(&self, app: &AppName) -> Result<AccessKey> {
        self.inner.create_key(app).await
    }
    async fn restore_key(&self, key: &AccessKey) -> Result<()> {
        self.inner.restore_key(key).await
    }
    async fn get_key(&self, key: &KeyId) -> Result<Option<AccessKey>> {
        self.key_reads.fetch_add(1, Ordering::SeqCst);
        let hidden = self.hidden.lock().unwrap().contains(key);
        let found = if hidden {
            Ok(None)
        } else {
            self.inner.get_key(key).await
        };
        let hook = self.after_read.lock().unwrap().take();
        if let Some(HookBox(hook)) = hook {
            hook();
        }
        found
    }
    async fn list_keys(&self, app: &AppName) -> Result<Vec<AccessKey>> {
        self.inner.list_keys(app).await
    }
    async fn revoke_key(&self, app: &AppName, key: &KeyId) -> Result<AccessKey> {
        self.inner.revoke_key(app, key).await
    }
    async fn record_key_use(&self, uses: &[(KeyId, i64)]) -> Result<()> {
        self.inner.record_key_use(uses).await
    }
    async fn create_account_token(&self, token: &AccountToken) -> Result<()> {
        self.inner.create_account_token(token).await
    }
    async fn get_account_token(&self, id: &AccountTokenId) -> Result<Option<AccountToken>> {
        self.inner.get_account_token(id).await
    }
    async fn list_account_tokens(&self, account: &AccountName) -> Result<Vec<AccountToken>> {
        self.inner.list_account_tokens(account).await
    }
    async fn revoke_account_token(
        &self,
        account: &AccountName,
        id: &AccountTokenId,
    ) -> Result<AccountToken> {
        self.inner.revoke_account_token(account, id).await
    }
    fn subscribe(&self, listener: std::sync::Weak<dyn ChangeListener>) {
        self.inner.subscribe(listener)
    }
    async fn close(&self) -> Result<()> {
        self.inner.close().await
    }
}

async fn setup() -> (tempfile::TempDir, Arc<Spy>, AppName) {
    let dir = tempfile::tempdir().unwrap();
    let inner = SqliteRegistry::open(
        &dir.path().join("r.db"),
        Arc::new(SystemClock),
        Arc::new(quintet_core::keyring::Keyring::ephemeral().unwrap()),
    )
    .unwrap();
    let spy = Arc::new(Spy {
        inner,
        key_reads: AtomicUsize::new(0),
        after_read: Mutex::new(None),
        hidden: Mutex::new(HashSet::new()),
    });
    let account: AccountName = "acme".parse().unwrap();
    spy.create_account(&account, Plan::Starter).await.unwrap();
    let app: AppName = "shop".parse().unwrap();
    spy.create_app(&app, &account).await.unwrap();
    (dir, spy, app)
}

#[tokio::test]
async fn a_key_is_read_from_the_registry_once() {
    let (_dir, spy, app) = setup().await;
    let key = spy.create_key(&app).await.unwrap();
    let cache = KeyCache::new(spy.clone());
    for _ in 0..100 {
        let got = cache.get(&key.key).await.unwrap().unwrap();
        assert_eq!(got.app, app);
        got.touch(5);
    }
    assert_eq!(spy.key_reads.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn an_unknown_key_is_read_from_the_registry_once() {
    let (_dir, spy, _app) = setup().await;
    let cache = KeyCache::new(spy.clone());
    let unknown: KeyId = "qk_unknown".parse().unwrap();
    for _ in 0..100 {
        assert!(cache.get(&unknown).await.unwrap().is_none());
    }
    assert_eq!(
        spy.reads(),
        1,
        "a token naming an unknown key costs one read"
    );
}

/// A key missing when first read, then created through this node (`created`) or another
/// one (the change feed's `KeyCreated`): usable at once.
#[tokio::test]
async fn a_key_created_after_a_miss_is_usable_at_once() {
    type Announce = fn(&KeyCache, &AppName, &KeyId);
    let here: Announce = |cache, _, key| cache.created(key);
    let elsewhere: Announce = |cache, app, key| {
        cache.apply(&RegistryChange::KeyCreated {
            app: app.clone(),
            key: key.clone(),
        })
    };
    for (how, announce) in [("this node", here), ("another node", elsewhere)] {
        let (_dir, spy, app) = setup().await;
        let key = spy.create_key(&app).await.unwrap();
        spy.hide(&key.key);
        let cache = KeyCache::new(spy.clone());
        assert!(cache.get(&key.key).await.unwrap().is_none());
        assert!(cache.get(&key.key).await.unwrap().is_none());
        assert_eq!(spy.reads(), 1, "{how}: the miss is remembered");
        spy.show(&key.key);
        announce(&cache, &app, &key.key);
        let got = cache.get(&key.key).await.unwrap();
        assert_eq!(got.map(|k| k.app.clone()), Some(app), "{how}");
        assert_eq!(spy.reads(), 2, "{how}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_creation_racing_a_miss_is_not_hidden_by_it() {
    let (_dir, spy, app) = setup().await;
    let key = spy.create_key(&app).await.unwrap();
    spy.hide(&key.key);
    let cache = Arc::new(KeyCache::new(spy.clone()));
    // The read finds nothing; before it returns, the key is created and announced.
    let (creator, cache2, id) = (spy.clone(), Arc::clone(&cache), key.key.clone());
    *spy.after_read.lock().unwrap() = Some(HookBox(Box::new(move || {
        creator.show(&id);
        cache2.apply(&RegistryChange::KeyCreated { app, key: id });
    })));
    assert!(cache.get(&key.key).await.unwrap().is_none(), "read before");
    // The miss was not recorded: the next request reads the key.
    assert!(cache.get(&key.key).await.unwrap().is_some());
    assert_eq!(spy.reads(), 2);
}

#[tokio::test]
async fn remembered_misses_are_bounded() {
    let (_dir, spy, _app) = setup().await;
    let cache = KeyCache::new(spy.clone());
    for i in 0..=MISSING_CAPACITY {
        let id: KeyId = format!("qk_missing_{i}").parse().unwrap();
        assert!(cache.get(&id).await.unwrap().is_none());
        let remembered = cache.missing.lock().unwrap().len();
        assert!(remembered <= MISSING_CAPACITY, "{remembered} misses kept");
    }
    assert_eq!(spy.reads(), MISSING_CAPACITY + 1);
    // The newest miss survived emptying the full set.
    let newest: KeyId = format!("qk_missing_{MISSING_CAPACITY}").parse().unwrap();
    assert!(cache.get(&newest).await.unwrap().is_none());
    assert_eq!(spy.reads(), MISSING_CAPACITY + 1);
}

#[tokio::test]
async fn a_resync_forgets_misses() {
    let (_dir, spy, app) = setup().await;
    let key = spy.create_key(&app).await.unwrap();
    spy.hide(&key.key);
    let cache = KeyCache::new(spy.clone());
    assert!(cache.get(&key.key).await.unwrap().is_none());
    // Created elsewhere while this node's feed was down: only a resync tells.
    spy.show(&key.key);
    cache.apply(&RegistryChange::Resync);
    assert!(cache.get(&key.key).await.unwrap().is_some());
    assert_eq!(spy.reads(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revocation_racing_a_read_is_not_undone_by_it() {
    let (_dir, spy, app) = setup().await;
    let key = spy.create_key(&app).await.unwrap();
    let cache = Arc::new(KeyCache::new(spy.clone()));
    // While the first read is in flight, the key is revoked (registry, then cache).
    let (revoker, app2, id) = (spy.clone(), app.clone(), key.key.clone());
    let cache2 = Arc::clone(&cache);
    *spy.after_read.lock().unwrap() = Some(HookBox(Box::new(move || {
        let handle = tokio::runtime::Handle::current();
        std::thread::spawn(move || {
            handle.block_on(revoker.revoke_key(&app2, &id)).unwrap();
            cache2.revoked(&id);
        })
        .join()
        .unwrap();
    })));
    let first = cache.get(&key.key).await.unwrap().unwrap();
    // The read that raced the revocation was retried and saw it.
    assert!(first.is_revoked());
    assert!(cache.get(&key.key).await.unwrap().unwrap().is_revoked());
}

#[tokio::test]
async fn forgetting_an_application_drops_its_keys() {
    let (_dir, spy, app) = setup().await;
    let key = spy.create_key(&app).await.unwrap();
    let cache = KeyCache::new(spy.clone());
    cache.get(&key.key).await.unwrap().unwrap();
    spy.delete_app(&app).await.unwrap();
    cache.forget_app(&app);
    assert!(cache.get(&key.key).await.unwrap().is_none());
}

#[tokio::test]
async fn use_times_are_written_in_one_batch_and_only_when_newer() {
    let (_dir, spy, app) = setup().await;
    let (a, b) = (
        spy.create_key(&app).await.unwrap(),
        spy.create_key(&app).await.unwrap(),
    );
    let cache = KeyCache::new(spy.clone());
    cache.get(&a.key).await.unwrap().unwrap().touch(2_000);
    cache.get(&a.key).await.unwrap().unwrap().touch(1_000);
    cache.get(&b.key).await.unwrap().unwrap();
    assert_eq!(cache.last_used(&a.key), Some(2_000));
    assert_eq!(cache.last_used(&b.key), None);
    cache.flush().await.unwrap();
    let stored = spy.get_key(&a.key).await.unwrap().unwrap();
    assert_eq!(stored.last_used_ms, Some(2_000));
    assert_eq!(
        spy.get_key(&b.key).await.unwrap().unwrap().last_used_ms,
        None
    );
    cache.close().await.unwrap();
}

#[tokio::test]
async fn changes_from_other_nodes_are_applied() {
    let (_dir, spy, app) = setup().await;
    let (a, b) = (
        spy.create_key(&app).await.unwrap(),
        spy.create_key(&app).await.unwrap(),
    );
    let cache = KeyCache::new(spy.clone());
    cache.get(&a.key).await.unwrap().unwrap();
    cache.get(&b.key).await.unwrap().unwrap();
    // Another node revoked `a`: the registry says so, and the feed reports it.
    spy.revoke_key(&app, &a.key).await.unwrap();
    cache.apply(&RegistryChange::KeyRevoked {
        app: app.clone(),
        key: a.key.clone(),
    });
    assert!(cache.get(&a.key).await.unwrap().unwrap().is_revoked());
    assert!(!cache.get(&b.key).await.unwrap().unwrap().is_revoked());
    assert_eq!(spy.key_reads.load(Ordering::SeqCst), 2, "no re-read needed");
    cache.apply(&RegistryChange::KeyCreated {
        app: app.clone(),
        key: "qk_new".parse().unwrap(),
    });
    cache.apply(&RegistryChange::AppDeleted { app: app.clone() });
    assert!(cache.last_used(&b.key).is_none(), "forgotten");
}

#[tokio::test]
async fn a_resync_rereads_keys_and_keeps_unwritten_use_times() {
    let (_dir, spy, app) = setup().await;
    let key = spy.create_key(&app).await.unwrap();
    let cache = KeyCache::new(spy.clone());
    cache.get(&key.key).await.unwrap().unwrap().touch(7_000);
    // Revoked elsewhere while this node's feed was down: only a resync tells.
    spy.revoke_key(&app, &key.key).await.unwrap();
    cache.apply(&RegistryChange::Resync);
    assert!(cache.get(&key.key).await.unwrap().unwrap().is_revoked());
    assert_eq!(spy.key_reads.load(Ordering::SeqCst), 2);
    cache.flush().await.unwrap();
    let stored = spy.get_key(&key.key).await.unwrap().unwrap();
    assert_eq!(stored.last_used_ms, Some(7_000));
}
