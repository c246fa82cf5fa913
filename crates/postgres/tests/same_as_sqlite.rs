//! The PostgreSQL registry answers like the SQLite one: the same script of calls, good and
//! bad, gives equal results and equal errors, messages included.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use quintet_core::{
    AppName, InstanceConfig, ManualClock, ServiceType,
    accounts::{AccountName, Plan},
    keys::KeyId,
    ports::registry::Registry,
};
use quintet_embedded::registry::SqliteRegistry;
use quintet_postgres::{PgConfig, PgDatabase, PgRegistry};

/// Run the script on `r`, recording every answer (errors included) as text. Generated
/// values (key ids, secrets, instance ids) are replaced by placeholders.
async fn script(r: &dyn Registry) -> Vec<String> {
    let mut out = Vec::new();
    let acct: AccountName = "acme".parse().unwrap();
    let ghost: AccountName = "ghost".parse().unwrap();
    let shop: AppName = "shop".parse().unwrap();
    let nowhere: AppName = "nowhere".parse().unwrap();
    let movies = "movies".parse().unwrap();
    macro_rules! record {
        ($e:expr) => {
            out.push(format!("{:?}", $e))
        };
    }
    record!(r.create_account(&acct, Plan::Starter).await);
    record!(r.create_account(&acct, Plan::Pro).await);
    record!(r.set_plan(&ghost, Plan::Pro).await);
    record!(r.create_app(&shop, &ghost).await);
    record!(r.create_app(&shop, &acct).await);
    record!(r.create_app(&shop, &acct).await);
    for name in ["a-1", "a-2"] {
        record!(r.create_app(&name.parse().unwrap(), &acct).await);
    }
    record!(r.create_app(&"a-3".parse().unwrap(), &acct).await);
    record!(r.set_plan(&acct, Plan::Starter).await);
    record!(r.list_apps(Some(&ghost)).await);
    record!(r.list_apps(Some(&acct)).await);
    record!(r.list_accounts().await);
    record!(r.get_account(&acct).await);
    record!(r.create_key(&AppName::domain()).await.map(|_| ()));
    record!(r.create_key(&nowhere).await.map(|_| ()));
    record!(r.list_keys(&nowhere).await);
    let key = r.create_key(&shop).await.unwrap();
    let id = key.key.to_string();
    record!(r.revoke_key(&"a-1".parse().unwrap(), &key.key).await);
    record!(
        r.revoke_key(&shop, &"qk_none".parse::<KeyId>().unwrap())
            .await
    );
    let revoked = r.revoke_key(&shop, &key.key).await.unwrap();
    record!(revoked.revoked_ms);
    record!(r.revoke_key(&shop, &key.key).await.map(|k| k.revoked_ms));
    record!(
        r.create_instance(&nowhere, &movies, InstanceConfig::Data)
            .await
    );
    let inst = r
        .create_instance(&shop, &movies, InstanceConfig::Data)
        .await
        .unwrap();
    record!(
        r.create_instance(&shop, &movies, InstanceConfig::Data)
            .await
    );
    record!(r.delete_instance(&shop, ServiceType::Cache, &movies).await);
    record!(r.list_instances(Some(&shop)).await.map(|l| l.len()));
    record!(r.delete_app(&AppName::domain()).await);
    record!(r.delete_app(&nowhere).await);
    record!(r.delete_app(&shop).await.map(|(app, i)| (app, i.len())));
    record!(r.get_key(&key.key).await);
    out.into_iter()
        .map(|line| {
            line.replace(&id, "<key>")
                .replace(&format!("InstanceId({})", inst.id.0), "<id>")
        })
        .collect()
}

#[tokio::test]
async fn same_calls_same_answers() {
    let Some(pg) = quintet_engine_test::postgres("same_calls_same_answers").await else {
        return;
    };
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let dir = tempfile::tempdir().unwrap();
    let sqlite = SqliteRegistry::open(
        &dir.path().join("registry.db"),
        clock.clone(),
        quintet_core::keyring::Keyring::for_tests(),
    )
    .unwrap();
    let db = PgDatabase::connect(&PgConfig::new(pg.url()).unwrap())
        .await
        .unwrap();
    let postgres = PgRegistry::open(db, clock, quintet_core::keyring::Keyring::for_tests())
        .await
        .unwrap();
    let (expected, got) = (script(&sqlite).await, script(&postgres).await);
    assert_eq!(expected.len(), got.len());
    for (e, g) in expected.iter().zip(&got) {
        assert_eq!(e, g);
    }
    sqlite.close().await.unwrap();
    postgres.close().await.unwrap();
}
