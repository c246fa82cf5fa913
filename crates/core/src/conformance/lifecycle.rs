//! Conformance of [`Lifecycle`]: every service adapter runs each case (see [`super`]).

use crate::{
    InstanceConfig,
    ports::{Keep, Lifecycle},
};

use super::instance;

/// A created instance can be dropped.
pub async fn create_then_drop(port: &dyn Lifecycle, config: InstanceConfig) {
    let inst = instance(config);
    port.create_instance(&inst).await.expect("create_instance");
    port.drop_instance(&inst).await.expect("drop_instance");
}

/// Dropping twice, or dropping what was never created, succeeds.
pub async fn drop_is_idempotent(port: &dyn Lifecycle, config: InstanceConfig) {
    let inst = instance(config.clone());
    port.create_instance(&inst).await.expect("create_instance");
    port.drop_instance(&inst).await.expect("first drop");
    port.drop_instance(&inst).await.expect("second drop");
    let never = instance(config);
    port.drop_instance(&never)
        .await
        .expect("drop of an instance never created");
}

/// `sweep` removes instances missing from the live set and keeps the live ones.
pub async fn sweep_removes_only_orphans(port: &dyn Lifecycle, config: InstanceConfig) {
    let live = instance(config.clone());
    let orphan = instance(config);
    port.create_instance(&live).await.expect("create live");
    port.create_instance(&orphan).await.expect("create orphan");
    // Other suites may share the engine, so the live set is "everything but the orphan" as
    // far as this test can tell: sweeping with only `live` must remove at least the orphan.
    let removed = port.sweep(&Keep::only([live.id])).await.expect("sweep");
    assert!(
        removed >= 1,
        "sweep removed {removed} instances, expected the orphan"
    );
    let again = port
        .sweep(&Keep::only([live.id]))
        .await
        .expect("second sweep");
    assert_eq!(again, 0, "a second sweep found more orphans");
    // Ids above the highest one handed out are kept: instances created after the listing.
    let newer = instance_above(&live);
    port.create_instance(&newer).await.expect("create newer");
    let spared = port
        .sweep(&Keep::new([live.id], live.id))
        .await
        .expect("sweep sparing newer ids");
    assert_eq!(spared, 0, "an id above the highest handed out was swept");
    port.drop_instance(&newer).await.expect("drop newer");
    port.drop_instance(&live).await.expect("drop live");
}

/// What `pool` tells is consistent (no more open than the most, no more lent than
/// open), and an adapter that measures a pool has a connection open after a call that
/// needed one.
pub async fn pool_usage_is_consistent(port: &dyn Lifecycle, config: InstanceConfig) {
    let inst = instance(config);
    port.create_instance(&inst).await.expect("create_instance");
    if let Some(usage) = port.pool() {
        assert!(
            ["postgres", "redis"].contains(&usage.engine),
            "{usage:?}: unknown engine"
        );
        assert!(usage.max >= 1, "{usage:?}");
        assert!(usage.open >= 1, "{usage:?}: nothing open after a call");
        assert!(usage.open <= usage.max, "{usage:?}");
        if let Some(in_use) = usage.in_use {
            assert!(in_use <= usage.open, "{usage:?}");
        }
    }
    port.drop_instance(&inst).await.expect("drop_instance");
}

/// An instance like `of` with a higher id.
fn instance_above(of: &crate::Instance) -> crate::Instance {
    let mut newer = instance(of.config.clone());
    newer.id = crate::InstanceId(of.id.0 + 1);
    newer
}
