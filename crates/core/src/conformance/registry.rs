//! Conformance of [`Registry`]: every registry adapter runs each case (see [`super`]).

use serde_json::json;

use crate::{
    AppName, Error, InstanceConfig, ServiceType,
    account_tokens::{AccountToken, AccountTokenId},
    accounts::{AccountName, Plan},
    keys::KeyId,
    ports::registry::{Registry, answers},
};

use super::unique_name;

fn account_name(prefix: &str) -> AccountName {
    unique_name(prefix).as_str().parse().expect("account name")
}

fn app_name(prefix: &str) -> AppName {
    unique_name(prefix).as_str().parse().expect("app name")
}

/// Accounts are created once, listed with their application count, and change plans.
pub async fn accounts_and_plans(registry: &dyn Registry) {
    let name = account_name("acct");
    let created = registry
        .create_account(&name, Plan::Starter)
        .await
        .expect("create account");
    assert_eq!(
        (created.name.clone(), created.plan),
        (name.clone(), Plan::Starter)
    );
    let dup = registry.create_account(&name, Plan::Pro).await;
    assert!(matches!(dup, Err(Error::Conflict(_))), "{dup:?}");

    let listed = registry.list_accounts().await.expect("list");
    let mine = listed
        .iter()
        .find(|u| u.account.name == name)
        .expect("listed");
    assert_eq!((mine.account.plan, mine.apps), (Plan::Starter, 0));
    let names: Vec<_> = listed.iter().map(|u| u.account.name.clone()).collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted, "accounts are ordered by name");

    let moved = registry
        .set_plan(&name, Plan::Business)
        .await
        .expect("set plan");
    assert_eq!(moved.plan, Plan::Business);
    let got = registry
        .get_account(&name)
        .await
        .expect("get")
        .expect("exists");
    assert_eq!(got.account.plan, Plan::Business);
    let missing = registry.set_plan(&account_name("none"), Plan::Pro).await;
    assert!(matches!(missing, Err(Error::NotFound(_))), "{missing:?}");
    assert!(
        registry
            .get_account(&account_name("none"))
            .await
            .expect("get")
            .is_none()
    );
}

/// An account owns at most its plan's number of applications; a downgrade below the
/// current count is refused; an upgrade makes room.
pub async fn plan_limits_apps(registry: &dyn Registry) {
    let acct = account_name("limit");
    registry
        .create_account(&acct, Plan::Starter)
        .await
        .expect("account");
    for _ in 0..Plan::Starter.max_apps() {
        registry
            .create_app(&app_name("lim"), &acct)
            .await
            .expect("within the limit");
    }
    let over = registry.create_app(&app_name("lim"), &acct).await;
    assert_eq!(
        over.map(|_| ()),
        Plan::Starter.check_new_app(&acct, Plan::Starter.max_apps())
    );
    registry.set_plan(&acct, Plan::Pro).await.expect("upgrade");
    let extra = app_name("lim");
    registry
        .create_app(&extra, &acct)
        .await
        .expect("room after upgrade");
    let down = registry.set_plan(&acct, Plan::Starter).await;
    assert!(matches!(down, Err(Error::Conflict(_))), "{down:?}");
    registry.delete_app(&extra).await.expect("delete");
    registry
        .set_plan(&acct, Plan::Starter)
        .await
        .expect("downgrade at the limit");
    let usage = registry
        .get_account(&acct)
        .await
        .expect("get")
        .expect("exists");
    assert_eq!(usage.apps, Plan::Starter.max_apps());
}

/// Application names are globally unique; listing filters by account.
pub async fn apps_are_unique_and_listed_by_account(registry: &dyn Registry) {
    let (a, b) = (account_name("owner-a"), account_name("owner-b"));
    registry.create_account(&a, Plan::Pro).await.expect("a");
    registry.create_account(&b, Plan::Pro).await.expect("b");
    let app = app_name("app");
    let created = registry.create_app(&app, &a).await.expect("create");
    assert_eq!(created.account.as_ref(), Some(&a));
    let dup = registry.create_app(&app, &b).await;
    assert!(matches!(dup, Err(Error::Conflict(_))), "{dup:?}");
    let no_account = registry
        .create_app(&app_name("orphan"), &account_name("ghost"))
        .await;
    assert!(
        matches!(no_account, Err(Error::NotFound(_))),
        "{no_account:?}"
    );

    let of_a = registry.list_apps(Some(&a)).await.expect("list a");
    assert_eq!(of_a.iter().map(|x| &x.name).collect::<Vec<_>>(), [&app]);
    assert!(
        registry
            .list_apps(Some(&b))
            .await
            .expect("list b")
            .is_empty()
    );
    let all = registry.list_apps(None).await.expect("list");
    assert!(all.iter().any(|x| x.name == app));
    assert!(all.iter().all(|x| !x.name.is_domain()));
    let ghost = registry.list_apps(Some(&account_name("ghost"))).await;
    assert!(matches!(ghost, Err(Error::NotFound(_))), "{ghost:?}");
    assert_eq!(registry.get_app(&app).await.expect("get"), Some(created));
    assert_eq!(
        registry
            .get_account(&a)
            .await
            .expect("get")
            .expect("a")
            .apps,
        1
    );
}

/// A restored key keeps its id, secret and creation time; its id cannot be restored twice.
pub async fn restored_keys_keep_their_id_and_secret(registry: &dyn Registry) {
    let acct = account_name("restore");
    registry
        .create_account(&acct, Plan::Starter)
        .await
        .expect("account");
    let app = app_name("restored");
    registry.create_app(&app, &acct).await.expect("app");
    let mut key = crate::keys::AccessKey::generate(&app, 1_600_000_000_000).expect("key");
    key.last_used_ms = Some(1_600_000_000_001);
    registry.restore_key(&key).await.expect("restore");
    let found = registry
        .get_key(&key.key)
        .await
        .expect("get")
        .expect("found");
    assert_eq!(found.secret, key.secret);
    assert_eq!(found.created_ms, key.created_ms);
    assert_eq!((found.last_used_ms, found.revoked_ms), (None, None));
    assert_eq!(registry.list_keys(&app).await.expect("list"), [found]);
    assert_eq!(
        registry.restore_key(&key).await,
        Err(crate::Error::Conflict(format!(
            "access key \"{}\" already exists",
            key.key
        )))
    );
    let other = app_name("restored-missing");
    let mut orphan = crate::keys::AccessKey::generate(&other, 1).expect("key");
    orphan.app = other;
    assert!(matches!(
        registry.restore_key(&orphan).await,
        Err(crate::Error::NotFound(_))
    ));
}

/// Keys are generated per application, listed, looked up and revoked once.
pub async fn keys_are_created_listed_and_revoked(registry: &dyn Registry) {
    let acct = account_name("keys");
    registry
        .create_account(&acct, Plan::Starter)
        .await
        .expect("account");
    let app = app_name("keyed");
    registry.create_app(&app, &acct).await.expect("app");
    let k1 = registry.create_key(&app).await.expect("key 1");
    let k2 = registry.create_key(&app).await.expect("key 2");
    assert_ne!(k1.key, k2.key);
    assert_ne!(k1.secret, k2.secret);
    assert_eq!(k1.app, app);
    assert!(!k1.is_revoked() && k1.last_used_ms.is_none());

    let listed = registry.list_keys(&app).await.expect("list");
    assert_eq!(listed, [k1.clone(), k2.clone()]);
    assert_eq!(
        registry.get_key(&k1.key).await.expect("get"),
        Some(k1.clone())
    );

    let revoked = registry.revoke_key(&app, &k1.key).await.expect("revoke");
    assert!(revoked.is_revoked());
    let again = registry
        .revoke_key(&app, &k1.key)
        .await
        .expect("revoke again");
    assert_eq!(
        again.revoked_ms, revoked.revoked_ms,
        "the first revocation time stays"
    );
    let got = registry
        .get_key(&k1.key)
        .await
        .expect("get")
        .expect("still listed");
    assert!(got.is_revoked());
    assert!(
        !registry
            .get_key(&k2.key)
            .await
            .expect("get")
            .expect("k2")
            .is_revoked()
    );

    let other = app_name("other");
    registry.create_app(&other, &acct).await.expect("other app");
    let wrong_app = registry.revoke_key(&other, &k2.key).await;
    assert!(
        matches!(wrong_app, Err(Error::NotFound(_))),
        "{wrong_app:?}"
    );
    let unknown: KeyId = "qk_unknown".parse().expect("key id");
    assert!(registry.get_key(&unknown).await.expect("get").is_none());
    let missing_app = registry.create_key(&app_name("ghost")).await;
    assert!(
        matches!(missing_app, Err(Error::NotFound(_))),
        "{missing_app:?}"
    );
    let missing_list = registry.list_keys(&app_name("ghost")).await;
    assert!(
        matches!(missing_list, Err(Error::NotFound(_))),
        "{missing_list:?}"
    );
}

/// Recording key use keeps the latest time and ignores unknown keys.
pub async fn key_use_keeps_the_latest_time(registry: &dyn Registry) {
    let acct = account_name("use");
    registry
        .create_account(&acct, Plan::Starter)
        .await
        .expect("account");
    let app = app_name("used");
    registry.create_app(&app, &acct).await.expect("app");
    let k = registry.create_key(&app).await.expect("key");
    let unknown: KeyId = "qk_nobody".parse().expect("key id");
    registry
        .record_key_use(&[(k.key.clone(), 2_000), (unknown, 5)])
        .await
        .expect("record");
    registry
        .record_key_use(&[(k.key.clone(), 1_000)])
        .await
        .expect("older");
    let got = registry
        .get_key(&k.key)
        .await
        .expect("get")
        .expect("exists");
    assert_eq!(got.last_used_ms, Some(2_000));
    registry
        .record_key_use(&[])
        .await
        .expect("nothing to record");
}

/// Deleting an application forgets it, its keys and its instances, and returns them.
pub async fn deleting_an_app_removes_its_keys_and_instances(registry: &dyn Registry) {
    let acct = account_name("del");
    registry
        .create_account(&acct, Plan::Starter)
        .await
        .expect("account");
    let app = app_name("doomed");
    registry.create_app(&app, &acct).await.expect("app");
    let key = registry.create_key(&app).await.expect("key");
    let name = unique_name("inst");
    let data = registry
        .create_instance(&app, &name, InstanceConfig::Data)
        .await
        .expect("data");
    let cache = registry
        .create_instance(&app, &name, InstanceConfig::Cache)
        .await
        .expect("cache");

    let (deleted, instances) = registry.delete_app(&app).await.expect("delete");
    assert_eq!(deleted.name, app);
    let mut ids: Vec<_> = instances.iter().map(|i| i.id).collect();
    ids.sort();
    let mut expected = vec![data.id, cache.id];
    expected.sort();
    assert_eq!(ids, expected);

    assert!(registry.get_app(&app).await.expect("get").is_none());
    assert!(registry.get_key(&key.key).await.expect("get").is_none());
    assert!(
        registry
            .list_instances(Some(&app))
            .await
            .expect("list")
            .is_empty()
    );
    assert_eq!(
        registry
            .get_account(&acct)
            .await
            .expect("get")
            .expect("acct")
            .apps,
        0
    );
    let again = registry.delete_app(&app).await;
    assert!(matches!(again, Err(Error::NotFound(_))), "{again:?}");
    // The name is free again, and a new application of that name starts empty.
    registry.create_app(&app, &acct).await.expect("re-create");
    assert!(registry.list_keys(&app).await.expect("keys").is_empty());
    registry.delete_app(&app).await.expect("cleanup");
}

/// The domain application exists, is never listed, cannot be deleted and has no keys.
pub async fn the_domain_app_is_protected(registry: &dyn Registry) {
    let domain = AppName::domain();
    let app = registry
        .get_app(&domain)
        .await
        .expect("get")
        .expect("exists");
    assert!(app.account.is_none());
    let del = registry.delete_app(&domain).await;
    assert!(matches!(del, Err(Error::Invalid(_))), "{del:?}");
    let key = registry.create_key(&domain).await;
    assert!(matches!(key, Err(Error::Invalid(_))), "{key:?}");
}

/// An instance can be created, read back, listed and deleted.
pub async fn create_get_delete(registry: &dyn Registry) {
    let app = AppName::domain();
    let name = unique_name("reg");
    let created = registry
        .create_instance(&app, &name, InstanceConfig::Data)
        .await
        .expect("create");
    assert_eq!(created.name, name);
    assert_eq!(created.kind(), ServiceType::Data);
    let got = registry
        .get_instance(&app, ServiceType::Data, &name)
        .await
        .expect("get")
        .expect("instance exists");
    assert_eq!(got, created);
    let listed = registry.list_instances(Some(&app)).await.expect("list");
    assert!(listed.iter().any(|i| i.id == created.id));
    let deleted = registry
        .delete_instance(&app, ServiceType::Data, &name)
        .await
        .expect("delete");
    assert_eq!(deleted.id, created.id);
    assert!(
        registry
            .get_instance(&app, ServiceType::Data, &name)
            .await
            .expect("get")
            .is_none()
    );
    let again = registry
        .delete_instance(&app, ServiceType::Data, &name)
        .await;
    assert!(matches!(again, Err(Error::NotFound(_))), "{again:?}");
}

/// The same name may exist once per service type.
pub async fn names_are_unique_per_type(registry: &dyn Registry) {
    let app = AppName::domain();
    let name = unique_name("uniq");
    registry
        .create_instance(&app, &name, InstanceConfig::Cache)
        .await
        .expect("create cache");
    let dup = registry
        .create_instance(&app, &name, InstanceConfig::Cache)
        .await;
    assert!(matches!(dup, Err(Error::Conflict(_))), "{dup:?}");
    registry
        .create_instance(&app, &name, InstanceConfig::Storage)
        .await
        .expect("same name, other type");
    for kind in [ServiceType::Cache, ServiceType::Storage] {
        registry
            .delete_instance(&app, kind, &name)
            .await
            .expect("cleanup");
    }
}

/// Deleting and re-creating a name gives a new id.
pub async fn ids_are_never_reused(registry: &dyn Registry) {
    let app = AppName::domain();
    let name = unique_name("reuse");
    let first = registry
        .create_instance(&app, &name, InstanceConfig::Data)
        .await
        .expect("create");
    registry
        .delete_instance(&app, ServiceType::Data, &name)
        .await
        .expect("delete");
    let second = registry
        .create_instance(&app, &name, InstanceConfig::Data)
        .await
        .expect("re-create");
    assert_ne!(first.id, second.id);
    registry
        .delete_instance(&app, ServiceType::Data, &name)
        .await
        .expect("cleanup");
}

/// The sweep's view lists live instances and bounds every id handed out, the newest
/// deleted one included, so its contents are not spared.
pub async fn the_sweep_view_covers_deleted_ids(registry: &dyn Registry) {
    let app = AppName::domain();
    let (kept, gone) = (unique_name("kept"), unique_name("gone"));
    let kept = registry
        .create_instance(&app, &kept, InstanceConfig::Data)
        .await
        .expect("create kept");
    let gone = registry
        .create_instance(&app, &gone, InstanceConfig::Cache)
        .await
        .expect("create gone");
    registry
        .delete_instance(&app, ServiceType::Cache, &gone.name)
        .await
        .expect("delete the newest");
    let (listed, highest) = registry.instances_for_sweep().await.expect("sweep view");
    assert!(
        listed.iter().any(|i| i.id == kept.id),
        "live ones are listed"
    );
    assert!(
        listed.iter().all(|i| i.id != gone.id),
        "deleted ones are not"
    );
    assert!(
        highest >= gone.id,
        "the highest id handed out ({highest}) bounds the deleted newest ({})",
        gone.id
    );
    let keep = crate::ports::Keep::new(listed.iter().map(|i| i.id), highest);
    assert!(keep.keeps(kept.id) && !keep.keeps(gone.id));
    registry
        .delete_instance(&app, ServiceType::Data, &kept.name)
        .await
        .expect("cleanup");
}

/// Type-specific configuration is stored and returned unchanged.
pub async fn config_round_trips(registry: &dyn Registry) {
    let app = AppName::domain();
    let name = unique_name("conf");
    let body = json!({"fields": ["title", "body"], "storeFields": ["title"]});
    let config = InstanceConfig::from_request(ServiceType::Search, Some(&body)).expect("config");
    registry
        .create_instance(&app, &name, config.clone())
        .await
        .expect("create");
    let got = registry
        .get_instance(&app, ServiceType::Search, &name)
        .await
        .expect("get")
        .expect("exists");
    assert_eq!(got.config, config);
    registry
        .delete_instance(&app, ServiceType::Search, &name)
        .await
        .expect("cleanup");
}

/// Instances cannot be created for an application that does not exist.
pub async fn missing_app_is_not_found(registry: &dyn Registry) {
    let app: AppName = unique_name("noapp").as_str().parse().expect("app name");
    let res = registry
        .create_instance(&app, &unique_name("x"), InstanceConfig::Data)
        .await;
    assert!(matches!(res, Err(Error::NotFound(_))), "{res:?}");
}

/// Every refusal in a scripted session is the registry's documented answer
/// ([`answers`]): the same kind and the same words from every adapter.
pub async fn refusals_say_what_to_do(r: &dyn Registry) {
    fn said<T>(result: crate::Result<T>) -> crate::Result<()> {
        result.map(|_| ())
    }
    let (acct, ghost) = (account_name("acme"), account_name("ghost"));
    let (shop, nowhere) = (app_name("shop"), app_name("nowhere"));
    let movies: crate::InstanceName = "movies".parse().expect("name");
    let domain = AppName::domain();
    assert_eq!(said(r.create_account(&acct, Plan::Starter).await), Ok(()));
    assert_eq!(
        said(r.create_account(&acct, Plan::Pro).await),
        Err(answers::account_exists(&acct))
    );
    let ghost_missing = Err(answers::account_missing(&ghost));
    assert_eq!(said(r.set_plan(&ghost, Plan::Pro).await), ghost_missing);
    assert_eq!(said(r.create_app(&shop, &ghost).await), ghost_missing);
    assert_eq!(said(r.list_apps(Some(&ghost)).await), ghost_missing);
    assert_eq!(said(r.create_app(&shop, &acct).await), Ok(()));
    assert_eq!(
        said(r.create_app(&shop, &acct).await),
        Err(answers::app_exists(&shop))
    );
    let nowhere_missing = Err(answers::app_missing(&nowhere));
    assert_eq!(said(r.create_key(&nowhere).await), nowhere_missing);
    assert_eq!(said(r.list_keys(&nowhere).await), nowhere_missing);
    assert_eq!(said(r.delete_app(&nowhere).await), nowhere_missing);
    assert_eq!(
        said(
            r.create_instance(&nowhere, &movies, InstanceConfig::Data)
                .await
        ),
        nowhere_missing
    );
    assert_eq!(
        said(r.create_key(&domain).await),
        answers::check_may_have_keys(&domain)
    );
    assert!(answers::check_may_have_keys(&domain).is_err());
    assert_eq!(
        said(r.delete_app(&domain).await),
        answers::check_deletable(&domain)
    );
    assert!(answers::check_deletable(&domain).is_err());
    let key = r.create_key(&shop).await.expect("key");
    let other = app_name("other");
    r.create_app(&other, &acct).await.expect("other app");
    assert_eq!(
        said(r.revoke_key(&other, &key.key).await),
        Err(answers::key_missing(&other, &key.key))
    );
    let none: KeyId = "qk_none".parse().expect("key id");
    assert_eq!(
        said(r.revoke_key(&shop, &none).await),
        Err(answers::key_missing(&shop, &none))
    );
    r.create_instance(&shop, &movies, InstanceConfig::Data)
        .await
        .expect("instance");
    assert_eq!(
        said(
            r.create_instance(&shop, &movies, InstanceConfig::Data)
                .await
        ),
        Err(answers::instance_exists(ServiceType::Data, &movies))
    );
    assert_eq!(
        said(r.delete_instance(&shop, ServiceType::Cache, &movies).await),
        Err(answers::instance_missing(ServiceType::Cache, &movies))
    );
}

/// Account tokens are kept as digests, listed per account oldest first, found by id, and
/// revoked once (a second revocation keeps the first time); another account's token is
/// not found through this account.
pub async fn account_tokens_are_issued_listed_and_revoked(registry: &dyn Registry) {
    let acct = account_name("tok");
    let other = account_name("tok-other");
    for a in [&acct, &other] {
        registry
            .create_account(a, Plan::Starter)
            .await
            .expect("account");
    }
    let (first, text) = AccountToken::generate(&acct, 1_000).expect("token");
    let (second, _) = AccountToken::generate(&acct, 2_000).expect("token");
    let (theirs, _) = AccountToken::generate(&other, 1_500).expect("token");
    for t in [&first, &second, &theirs] {
        registry.create_account_token(t).await.expect("create");
    }
    let (orphan, _) = AccountToken::generate(&account_name("none"), 1).expect("token");
    let missing = registry.create_account_token(&orphan).await;
    assert!(matches!(missing, Err(Error::NotFound(_))), "{missing:?}");

    let got = registry
        .get_account_token(&first.id)
        .await
        .expect("get")
        .expect("exists");
    assert_eq!(got, first);
    assert!(got.admits(&text), "the stored digest admits the text");
    let unknown: AccountTokenId = "qat_000000000000000000000000".parse().expect("id");
    assert!(
        registry
            .get_account_token(&unknown)
            .await
            .expect("get")
            .is_none()
    );

    let listed = registry.list_account_tokens(&acct).await.expect("list");
    assert_eq!(listed, vec![first.clone(), second.clone()]);
    let none = registry.list_account_tokens(&account_name("none")).await;
    assert!(matches!(none, Err(Error::NotFound(_))), "{none:?}");

    let cross = registry.revoke_account_token(&acct, &theirs.id).await;
    assert!(matches!(cross, Err(Error::NotFound(_))), "{cross:?}");
    let revoked = registry
        .revoke_account_token(&acct, &first.id)
        .await
        .expect("revoke");
    let at = revoked.revoked_ms.expect("revoked");
    assert!(!revoked.admits(&text));
    let again = registry
        .revoke_account_token(&acct, &first.id)
        .await
        .expect("revoke again");
    assert_eq!(
        again.revoked_ms,
        Some(at),
        "the first revocation time stays"
    );
    let listed = registry.list_account_tokens(&acct).await.expect("list");
    assert_eq!(listed.len(), 2, "revoked tokens stay listed");
    assert_eq!(listed[0].revoked_ms, Some(at));
    assert_eq!(listed[1].revoked_ms, None);
}
