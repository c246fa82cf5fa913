//! Conformance of [`Registry`]: every registry adapter runs [`run_all`].

use serde_json::json;

use crate::{AppName, Error, InstanceConfig, ServiceType, ports::registry::Registry};

use super::unique_name;

/// Run every registry rule against `registry`.
pub async fn run_all(registry: &dyn Registry) {
    create_get_delete(registry).await;
    names_are_unique_per_type(registry).await;
    ids_are_never_reused(registry).await;
    config_round_trips(registry).await;
    missing_app_is_not_found(registry).await;
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
