//! Two nodes on one registry (PostgreSQL, a schema of the test's own), each with a data
//! directory of its own: what one node changes in the registry, the other sees at once.
//! Instance contents stay per node until the service adapters move to PostgreSQL; what is
//! shared here is accounts, applications, keys and which instances exist.

use quintet_core::{AppName, Error, ServiceType};
use quintet_testkit::{AppKey, Reply, TestServer, engines};
use reqwest::Method;

/// Two nodes on the registry in `url`.
async fn two_nodes(url: &str) -> (TestServer, TestServer) {
    (
        TestServer::builder().registry(url).start().await,
        TestServer::builder().registry(url).start().await,
    )
}

/// `PUT /<app>/<kind>/<name>` on `node`, signed with `key`.
async fn create_as(node: &TestServer, key: &AppKey, kind: &str, name: &str) -> Reply {
    node.send(node.as_app(
        key,
        node.request(Method::PUT, &format!("/{}/{kind}/{name}", key.app)),
    ))
    .await
}

/// Resolve an instance through `node`'s instance cache, as every service route does.
async fn resolve(node: &TestServer, app: &AppName, kind: ServiceType, name: &str) -> Option<i64> {
    match node.state().instances.resolve(app, kind, name).await {
        Ok(instance) => Some(instance.id.0),
        Err(Error::NotFound(_)) => None,
        Err(e) => panic!("{e:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_made_on_one_node_work_on_the_other_until_revoked() {
    let Some(pg) = engines::postgres("keys_made_on_one_node_work_on_the_other").await else {
        return;
    };
    let (a, b) = two_nodes(pg.url()).await;
    let k = a.new_app().await;

    // B knows the application and key made through A's admin API; using the key caches it.
    let apps = b.admin(Method::GET, "/_admin/apps", None).await.expect(200);
    assert_eq!(apps.body["apps"][0]["name"], k.app.as_str());
    create_as(&b, &k, "data", "movies").await.expect(201);
    create_as(&b, &k, "cache", "movies").await.expect(201);

    // Revoked on A: refused on B from the moment A answered.
    a.admin(
        Method::DELETE,
        &format!("/_admin/apps/{}/keys/{}", k.app, k.key),
        None,
    )
    .await
    .expect(200);
    let r = create_as(&b, &k, "search", "films").await.expect(401);
    assert_eq!(
        r.body["msg"],
        format!(
            "key \"{}\" was revoked: create a new one with `quintet key create {}`",
            k.key, k.app
        )
    );
    create_as(&a, &k, "search", "films").await.expect(401);

    // A key made on B works on A; the application deleted on B takes it away on A.
    let k2 = b.new_key(&k.account, &k.app).await;
    create_as(&a, &k2, "storage", "files").await.expect(201);
    b.admin(Method::DELETE, &format!("/_admin/apps/{}", k.app), None)
        .await
        .expect(200);
    let r = create_as(&a, &k2, "queue", "jobs").await.expect(401);
    assert!(
        r.body["msg"]
            .as_str()
            .is_some_and(|m| m.contains("does not exist")),
        "{}",
        r.text
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_made_or_destroyed_on_one_node_are_seen_by_the_other_at_once() {
    let Some(pg) = engines::postgres("instances_made_or_destroyed_on_one_node").await else {
        return;
    };
    let (a, b) = two_nodes(pg.url()).await;
    let domain = AppName::domain();

    a.create("data", "movies", None).await;
    let r = b.put("/data/movies", None).await.expect(409);
    assert_eq!(r.body["msg"], "data instance \"movies\" already exists");
    // B resolves it, and from then on serves it from its cache.
    let first = resolve(&b, &domain, ServiceType::Data, "movies").await;
    assert!(first.is_some());

    // Destroyed on A: gone on B at once, for its routes and its cache alike.
    a.delete("/data/movies").await.expect(200);
    assert_eq!(
        resolve(&b, &domain, ServiceType::Data, "movies").await,
        None
    );
    b.delete("/data/movies").await.expect(404);

    // Made again on A (a new id): B resolves the new one, not a stale one.
    a.create("data", "movies", None).await;
    let second = resolve(&b, &domain, ServiceType::Data, "movies").await;
    assert!(second.is_some() && second != first, "{first:?} {second:?}");

    // An application's instances go with it, on every node.
    let k = a.new_app().await;
    let app: AppName = k.app.parse().unwrap();
    create_as(&a, &k, "cache", "sessions").await.expect(201);
    assert!(
        resolve(&b, &app, ServiceType::Cache, "sessions")
            .await
            .is_some()
    );
    let listed = b
        .admin(
            Method::GET,
            &format!("/_admin/apps/{}/instances", k.app),
            None,
        )
        .await
        .expect(200);
    assert_eq!(listed.body["instances"][0]["name"], "sessions");
    a.admin(Method::DELETE, &format!("/_admin/apps/{}", k.app), None)
        .await
        .expect(200);
    assert_eq!(
        resolve(&b, &app, ServiceType::Cache, "sessions").await,
        None
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_restarts_onto_the_shared_registry() {
    let Some(pg) = engines::postgres("a_node_restarts_onto_the_shared_registry").await else {
        return;
    };
    let (a, mut b) = two_nodes(pg.url()).await;
    let k = a.new_app().await;
    create_as(&b, &k, "data", "kept").await.expect(201);
    b.restart().await;
    // The start-up sweep kept B's contents: the shared registry still knows the instance.
    create_as(&b, &k, "data", "kept").await.expect(409);
    b.delete(&format!("/{}/data/kept", k.app)).await.expect(401);
    b.send(b.as_app(
        &k,
        b.request(Method::DELETE, &format!("/{}/data/kept", k.app)),
    ))
    .await
    .expect(200);
    create_as(&a, &k, "data", "kept").await.expect(201);
}
