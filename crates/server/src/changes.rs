//! Applying the registry's changes to this node's caches, so that what other nodes change
//! reaches them: a destroyed instance stops resolving and a revoked key stops
//! authenticating before the node that changed them answers.
//!
//! This node's own handlers also update its caches in the request that changes the
//! registry (a single-node registry reports nothing); the registry repeats those changes,
//! harmlessly: applying one twice changes nothing.

use std::sync::Arc;

use quintet_core::ports::registry::{ChangeListener, RegistryChange};

use crate::{auth::keys::KeyCache, instances::Instances};

/// The listener the node subscribes to its registry: the instance and key caches.
#[derive(Debug)]
pub struct CacheInvalidator {
    instances: Arc<Instances>,
    keys: Arc<KeyCache>,
}

impl CacheInvalidator {
    /// A listener applying changes to `instances` and `keys`.
    pub fn new(instances: Arc<Instances>, keys: Arc<KeyCache>) -> Self {
        Self { instances, keys }
    }
}

impl ChangeListener for CacheInvalidator {
    fn apply(&self, change: &RegistryChange) {
        tracing::debug!(?change, "registry change");
        self.instances.apply(change);
        self.keys.apply(change);
    }
}
