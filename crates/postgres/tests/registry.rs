//! The PostgreSQL registry against a real server, beyond the conformance suite
//! (`conformance.rs`): the rules that concurrency tests, migrations, and the change feed
//! between two registries on one schema (two nodes). Each test has a schema of its own
//! (`quintet-engine-test`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{
    sync::{Arc, Weak},
    time::Duration,
};

use quintet_core::{
    AppName, Error, InstanceConfig, ServiceType, SystemClock,
    accounts::{AccountName, Plan},
    keyring::Keyring,
    keys::KeyId,
    ports::registry::{ChangeListener, Registry, RegistryChange},
};
use quintet_engine_test::PgSchema;
use quintet_postgres::{PgConfig, PgDatabase, PgRegistry};
use tokio::sync::mpsc;

async fn database(pg: &PgSchema) -> PgDatabase {
    PgDatabase::connect(&PgConfig::new(pg.url()).unwrap())
        .await
        .unwrap()
}

async fn open(pg: &PgSchema) -> PgRegistry {
    PgRegistry::open(
        database(pg).await,
        Arc::new(SystemClock),
        Keyring::for_tests(),
    )
    .await
    .unwrap()
}

/// Records the changes a registry applies to its listeners.
struct Heard {
    _listener: Arc<Recorder>,
    changes: mpsc::UnboundedReceiver<RegistryChange>,
}

struct Recorder(mpsc::UnboundedSender<RegistryChange>);

impl ChangeListener for Recorder {
    fn apply(&self, change: &RegistryChange) {
        let _ = self.0.send(change.clone());
    }
}

fn listen(registry: &PgRegistry) -> Heard {
    let (tx, changes) = mpsc::unbounded_channel();
    let listener = Arc::new(Recorder(tx));
    let weak: Weak<Recorder> = Arc::downgrade(&listener);
    registry.subscribe(weak);
    Heard {
        _listener: listener,
        changes,
    }
}

impl Heard {
    /// The next change, which must have been applied already: a change call returns only
    /// after every live node applied it.
    fn applied(&mut self) -> RegistryChange {
        self.changes
            .try_recv()
            .expect("the change was applied before the call returned")
    }

    /// The next change, within 5 s.
    async fn next(&mut self) -> RegistryChange {
        tokio::time::timeout(Duration::from_secs(5), self.changes.recv())
            .await
            .expect("a change within 5 s")
            .expect("the registry is open")
    }

    /// Nothing more for 200 ms.
    async fn quiet(&mut self) {
        if let Ok(change) =
            tokio::time::timeout(Duration::from_millis(200), self.changes.recv()).await
        {
            panic!("unexpected change: {change:?}");
        }
    }
}

async fn app_with_account(r: &dyn Registry, account: &str, app: &str) -> AppName {
    let account: AccountName = account.parse().unwrap();
    r.create_account(&account, Plan::Starter).await.unwrap();
    let app: AppName = app.parse().unwrap();
    r.create_app(&app, &account).await.unwrap();
    app
}

#[tokio::test]
async fn nodes_starting_at_once_migrate_once() {
    let Some(pg) = quintet_engine_test::postgres("nodes_starting_at_once_migrate_once").await
    else {
        return;
    };
    let mut opening = Vec::new();
    for _ in 0..6 {
        let url = pg.url().to_owned();
        opening.push(tokio::spawn(async move {
            let db = PgDatabase::connect(&PgConfig::new(&url).unwrap())
                .await
                .unwrap();
            PgRegistry::open(db, Arc::new(SystemClock), Keyring::for_tests())
                .await
                .unwrap()
        }));
    }
    let mut registries = Vec::new();
    for o in opening {
        registries.push(o.await.unwrap());
    }
    let db = registries[0].database();
    // Each migration was recorded once: as many rows as versions, none skipped.
    let row = db
        .client()
        .await
        .unwrap()
        .query_one(
            "SELECT COUNT(*), COALESCE(MAX(version), 0)::BIGINT FROM quintet_migrations \
             WHERE component = 'registry'",
            &[],
        )
        .await
        .unwrap();
    let (rows, latest): (i64, i64) = (row.get(0), row.get(1));
    assert!(latest >= 1);
    assert_eq!(rows, latest);
    // The domain application was inserted once and every node sees it.
    for r in &registries {
        assert!(r.get_app(&AppName::domain()).await.unwrap().is_some());
    }
}

#[tokio::test]
async fn a_schema_newer_than_the_binary_is_refused() {
    let Some(pg) = quintet_engine_test::postgres("a_schema_newer_than_the_binary").await else {
        return;
    };
    let db = database(&pg).await;
    db.migrate(
        "widgets",
        &["CREATE TABLE w1 (x int)", "CREATE TABLE w2 (x int)"],
    )
    .await
    .unwrap();
    db.migrate(
        "widgets",
        &["CREATE TABLE w1 (x int)", "CREATE TABLE w2 (x int)"],
    )
    .await
    .expect("applied versions are skipped");
    let err = db
        .migrate("widgets", &["CREATE TABLE w1 (x int)"])
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::Invalid(m) if m.contains("at version 2, newer than this quintet knows (1)")),
        "{err:?}"
    );
    // A failing migration leaves nothing behind: all pending ones are one transaction.
    let err = db
        .migrate(
            "gadgets",
            &["CREATE TABLE g1 (x int)", "CREATE TABLE g1 (x int)"],
        )
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Internal(_)), "{err:?}");
    db.migrate("gadgets", &["CREATE TABLE g1 (x int)"])
        .await
        .expect("the first migration was rolled back with the second");
}

#[tokio::test]
async fn a_missing_schema_or_server_is_a_clear_error() {
    let Some(pg) = quintet_engine_test::postgres("a_missing_schema_or_server").await else {
        return;
    };
    let url = pg
        .url()
        .replace(pg.schema(), &format!("{}_absent", pg.schema()));
    let err = PgDatabase::connect(&PgConfig::new(&url).unwrap())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::Invalid(m) if m.contains("names no schema that exists")),
        "{err:?}"
    );
    let mut config = PgConfig::new("postgres://postgres@127.0.0.1:1/quintet_test").unwrap();
    config.connect_timeout = Duration::from_secs(2);
    let err = PgDatabase::connect(&config).await.unwrap_err();
    assert!(
        matches!(&err, Error::Unavailable(m) if m.contains("cannot connect to PostgreSQL at postgres://postgres@127.0.0.1:1/quintet_test")),
        "{err:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_app_creations_never_exceed_the_plan() {
    let Some(pg) = quintet_engine_test::postgres("concurrent_app_creations").await else {
        return;
    };
    let (a, b) = (Arc::new(open(&pg).await), Arc::new(open(&pg).await));
    let account: AccountName = "crowded".parse().unwrap();
    a.create_account(&account, Plan::Starter).await.unwrap();
    let mut creating = Vec::new();
    for i in 0..12 {
        let node = if i % 2 == 0 { a.clone() } else { b.clone() };
        let account = account.clone();
        creating.push(tokio::spawn(async move {
            let app: AppName = format!("crowd-{i}").parse().unwrap();
            node.create_app(&app, &account).await
        }));
    }
    let mut created = 0;
    for c in creating {
        match c.await.unwrap() {
            Ok(_) => created += 1,
            Err(Error::Forbidden(m)) => assert!(m.contains("starter"), "{m}"),
            Err(e) => panic!("{e:?}"),
        }
    }
    assert_eq!(created, Plan::Starter.max_apps());
    let usage = b.get_account(&account).await.unwrap().unwrap();
    assert_eq!(usage.apps, Plan::Starter.max_apps());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_use_records_do_not_deadlock() {
    let Some(pg) = quintet_engine_test::postgres("concurrent_use_records").await else {
        return;
    };
    let (a, b) = (Arc::new(open(&pg).await), Arc::new(open(&pg).await));
    let app = app_with_account(&*a, "busy", "busy-app").await;
    let mut keys = Vec::new();
    for _ in 0..3 {
        keys.push(a.create_key(&app).await.unwrap().key);
    }
    let mut flushing = Vec::new();
    for i in 0..20_i64 {
        let node = if i % 2 == 0 { a.clone() } else { b.clone() };
        let mut uses: Vec<(KeyId, i64)> = keys.iter().map(|k| (k.clone(), 1_000 + i)).collect();
        if i % 2 == 1 {
            uses.reverse();
        }
        flushing.push(tokio::spawn(
            async move { node.record_key_use(&uses).await },
        ));
    }
    for f in flushing {
        f.await.unwrap().unwrap();
    }
    for k in &keys {
        let got = b.get_key(k).await.unwrap().unwrap();
        assert_eq!(got.last_used_ms, Some(1_019));
    }
}

#[tokio::test]
async fn changes_are_applied_on_every_node_before_the_call_returns() {
    let Some(pg) = quintet_engine_test::postgres("changes_are_applied_on_every_node").await else {
        return;
    };
    let (a, b) = (open(&pg).await, open(&pg).await);
    let (mut on_a, mut on_b) = (listen(&a), listen(&b));
    let app = app_with_account(&a, "feed", "feed-app").await;

    let key = a.create_key(&app).await.unwrap();
    let created = RegistryChange::KeyCreated {
        app: app.clone(),
        key: key.key.clone(),
    };
    assert_eq!(on_b.applied(), created);
    assert_eq!(on_a.applied(), created, "the writer hears itself too");

    b.revoke_key(&app, &key.key).await.unwrap();
    let revoked = RegistryChange::KeyRevoked {
        app: app.clone(),
        key: key.key.clone(),
    };
    assert_eq!(on_a.applied(), revoked);
    assert_eq!(on_b.applied(), revoked);
    b.revoke_key(&app, &key.key).await.unwrap();

    let name = "movies".parse().unwrap();
    let inst = a
        .create_instance(&app, &name, InstanceConfig::Data)
        .await
        .unwrap();
    let change = RegistryChange::InstanceCreated {
        app: app.clone(),
        kind: ServiceType::Data,
        name: "movies".parse().unwrap(),
        id: inst.id,
    };
    assert_eq!(on_b.applied(), change);
    assert_eq!(on_a.applied(), change);
    b.delete_instance(&app, ServiceType::Data, &name)
        .await
        .unwrap();
    let change = RegistryChange::InstanceDeleted {
        app: app.clone(),
        kind: ServiceType::Data,
        name: "movies".parse().unwrap(),
        id: inst.id,
    };
    assert_eq!(on_a.applied(), change);
    assert_eq!(on_b.applied(), change);

    a.delete_app(&app).await.unwrap();
    let change = RegistryChange::AppDeleted { app: app.clone() };
    assert_eq!(on_b.applied(), change);
    assert_eq!(on_a.applied(), change);

    // Failed writes, revoking a revoked key and writes that nothing caches send nothing.
    assert!(a.delete_app(&app).await.is_err());
    let account: AccountName = "feed-2".parse().unwrap();
    a.create_account(&account, Plan::Pro).await.unwrap();
    a.set_plan(&account, Plan::Business).await.unwrap();
    let other: AppName = "feed-other".parse().unwrap();
    a.create_app(&other, &account).await.unwrap();
    let k = a.create_key(&other).await.unwrap();
    a.record_key_use(&[(k.key.clone(), 5)]).await.unwrap();
    let created = RegistryChange::KeyCreated {
        app: other,
        key: k.key,
    };
    assert_eq!(on_b.applied(), created);
    assert_eq!(on_a.applied(), created);
    on_b.quiet().await;
    on_a.quiet().await;
}

#[tokio::test]
async fn a_dropped_listener_is_no_longer_called() {
    let Some(pg) = quintet_engine_test::postgres("a_dropped_listener").await else {
        return;
    };
    let (a, b) = (open(&pg).await, open(&pg).await);
    let mut kept = listen(&b);
    let dropped = listen(&b);
    let weak = Arc::downgrade(&dropped._listener);
    drop(dropped);
    a.create_instance(
        &AppName::domain(),
        &"x".parse().unwrap(),
        InstanceConfig::Cache,
    )
    .await
    .unwrap();
    assert!(matches!(
        kept.applied(),
        RegistryChange::InstanceCreated { .. }
    ));
    assert!(weak.upgrade().is_none());
}

#[tokio::test]
async fn registries_on_other_schemas_hear_nothing() {
    let (Some(one), Some(two)) = (
        quintet_engine_test::postgres("other_schemas_hear_nothing_1").await,
        quintet_engine_test::postgres("other_schemas_hear_nothing_2").await,
    ) else {
        return;
    };
    let (a, b) = (open(&one).await, open(&two).await);
    let mut on_b = listen(&b);
    a.create_instance(
        &AppName::domain(),
        &"alone".parse().unwrap(),
        InstanceConfig::Cache,
    )
    .await
    .unwrap();
    on_b.quiet().await;
}

/// Terminate the `LISTEN` connections of `pg`'s schema, as a network failure or a server
/// restart would.
async fn cut_listeners(pg: &PgSchema) {
    quintet_engine_test::run_sql(
        pg.database_url(),
        &format!(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE application_name = 'quintet-listen {}'",
            pg.schema()
        ),
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn a_lost_listen_connection_resyncs_and_recovers() {
    let Some(pg) = quintet_engine_test::postgres("a_lost_listen_connection").await else {
        return;
    };
    let (a, b) = (open(&pg).await, open(&pg).await);
    let mut on_b = listen(&b);
    cut_listeners(&pg).await;
    assert_eq!(on_b.next().await, RegistryChange::Resync);
    // Both have reconnected (B's resync proves B did; A's write waits for A's own
    // acknowledgement at most ACK_TIMEOUT). B hears what follows.
    let started = std::time::Instant::now();
    let inst = a
        .create_instance(
            &AppName::domain(),
            &"after".parse().unwrap(),
            InstanceConfig::Storage,
        )
        .await
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(5));
    loop {
        match on_b.next().await {
            RegistryChange::Resync => {}
            RegistryChange::InstanceCreated { id, .. } if id == inst.id => break,
            other => panic!("unexpected change: {other:?}"),
        }
    }
    let app = app_with_account(&a, "resync", "resync-app").await;
    a.delete_app(&app).await.unwrap();
    assert_eq!(on_b.applied(), RegistryChange::AppDeleted { app });
}

#[tokio::test]
async fn writers_wait_for_live_nodes_only() {
    let Some(pg) = quintet_engine_test::postgres("writers_wait_for_live_nodes_only").await else {
        return;
    };
    let (a, b) = (open(&pg).await, open(&pg).await);
    let db = a.database().clone();
    let nodes = || async {
        db.client()
            .await
            .unwrap()
            .query_one("SELECT COUNT(*) FROM quintet_nodes", &[])
            .await
            .unwrap()
            .get::<_, i64>(0)
    };
    assert_eq!(nodes().await, 2);
    // A node that leaves is not waited for: writes stay fast.
    b.close().await.unwrap();
    drop(b);
    assert_eq!(nodes().await, 1);
    let started = std::time::Instant::now();
    a.create_instance(
        &AppName::domain(),
        &"fast".parse().unwrap(),
        InstanceConfig::Data,
    )
    .await
    .unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    // A node that vanished without leaving (a crash) is waited for at most ACK_TIMEOUT,
    // and only while its heartbeat is recent.
    db.client()
        .await
        .unwrap()
        .execute(
            "INSERT INTO quintet_nodes (id, seen_ms) \
             VALUES ('crashed', (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::bigint)",
            &[],
        )
        .await
        .unwrap();
    let started = std::time::Instant::now();
    a.delete_instance(
        &AppName::domain(),
        ServiceType::Data,
        &"fast".parse().unwrap(),
    )
    .await
    .unwrap();
    let waited = started.elapsed();
    assert!(
        waited >= quintet_postgres::feed::ACK_TIMEOUT && waited < Duration::from_secs(5),
        "{waited:?}"
    );
}

/// Secrets are stored sealed with the master key; a plaintext secret from an earlier
/// version is resealed when a node opens the registry, and still verifies.
#[tokio::test]
async fn secrets_are_sealed_in_the_database() {
    let Some(pg) = quintet_engine_test::postgres("secrets_are_sealed_in_the_database").await else {
        return;
    };
    let r = open(&pg).await;
    let account: AccountName = "acme".parse().unwrap();
    let app: AppName = "shop".parse().unwrap();
    r.create_account(&account, Plan::Starter).await.unwrap();
    r.create_app(&app, &account).await.unwrap();
    let key = r.create_key(&app).await.unwrap();
    let queue: quintet_core::InstanceName = "jobs".parse().unwrap();
    let config = InstanceConfig::from_request(
        ServiceType::Queue,
        Some(&serde_json::json!({"target": "https://w.example/hook", "secret": "q-secret-1"})),
    )
    .unwrap();
    r.create_instance(&app, &queue, config.clone())
        .await
        .unwrap();
    let client = r.database().client().await.unwrap();
    let stored: String = client
        .query_one(
            "SELECT secret FROM quintet_keys WHERE key = $1",
            &[&key.key.as_str()],
        )
        .await
        .unwrap()
        .get(0);
    assert!(stored.starts_with("qs1.") && !stored.contains(key.secret.expose()));
    let stored_config: serde_json::Value = client
        .query_one(
            "SELECT config FROM quintet_instances WHERE name = 'jobs'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(
        !stored_config.to_string().contains("q-secret-1"),
        "{stored_config}"
    );
    let got = r
        .get_instance(&app, ServiceType::Queue, &queue)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.config, config);

    // A row as an earlier version wrote it: the plaintext secret.
    client
        .execute(
            "UPDATE quintet_keys SET secret = 'legacy-plain-secret' WHERE key = $1",
            &[&key.key.as_str()],
        )
        .await
        .unwrap();
    drop(client);
    let reopened = open(&pg).await;
    let found = reopened.get_key(&key.key).await.unwrap().unwrap();
    assert_eq!(found.secret.expose(), "legacy-plain-secret");
    let client = reopened.database().client().await.unwrap();
    let stored: String = client
        .query_one(
            "SELECT secret FROM quintet_keys WHERE key = $1",
            &[&key.key.as_str()],
        )
        .await
        .unwrap()
        .get(0);
    assert!(stored.starts_with("qs1."), "resealed: {stored}");
}
