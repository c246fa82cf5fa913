//! The ports a node serves, one adapter each, and what is done to all of them at once:
//! the start-up sweep and closing.

use std::sync::Arc;

use quintet_core::{
    InstanceId, Result, ServiceType,
    ports::{
        Lifecycle, cache::Cache, data::DocStore, queue::JobQueue, registry::Registry,
        search::SearchIndex, storage::ObjectStorage,
    },
};

/// One adapter per port, chosen by the binary.
#[derive(Debug, Clone)]
pub struct Services {
    /// Applications, keys and instances.
    pub registry: Arc<dyn Registry>,
    /// Documents.
    pub data: Arc<dyn DocStore>,
    /// Cache entries.
    pub cache: Arc<dyn Cache>,
    /// Full-text indexes.
    pub search: Arc<dyn SearchIndex>,
    /// Jobs.
    pub queue: Arc<dyn JobQueue>,
    /// Objects and their pre-signed URLs.
    pub storage: Arc<dyn ObjectStorage>,
}

impl Services {
    /// The adapter serving instances of `kind`, seen as its lifecycle.
    pub fn lifecycle(&self, kind: ServiceType) -> &dyn Lifecycle {
        match kind {
            ServiceType::Data => &*self.data,
            ServiceType::Cache => &*self.cache,
            ServiceType::Search => &*self.search,
            ServiceType::Queue => &*self.queue,
            ServiceType::Storage => &*self.storage,
        }
    }

    /// Remove contents of instances the registry no longer knows (see
    /// [`Lifecycle::sweep`]). Run once at start-up.
    pub async fn sweep(&self) -> Result<()> {
        let all = self.registry.list_instances(None).await?;
        for kind in ServiceType::ALL {
            let live = kept_by_sweep(&all, kind);
            let removed = self.lifecycle(kind).sweep(&live).await?;
            if removed > 0 {
                tracing::warn!(%kind, removed, "removed contents of destroyed instances");
            }
        }
        Ok(())
    }

    /// Close every adapter, then the registry; report the first failure.
    pub async fn close(&self) -> Result<()> {
        let mut first = Ok(());
        for kind in ServiceType::ALL {
            if let Err(e) = self.lifecycle(kind).close().await {
                tracing::error!(%kind, error = %e, "closing the store failed");
                first = first.and(Err(e));
            }
        }
        if let Err(e) = self.registry.close().await {
            tracing::error!(error = %e, "closing the registry failed");
            first = first.and(Err(e));
        }
        first
    }
}

/// How many ids above the highest one the registry listed a sweep leaves alone.
const SWEEP_SPARED_IDS: i64 = 1024;

/// The ids of `kind` a start-up sweep must keep: every instance the registry listed, and
/// the next [`SWEEP_SPARED_IDS`] ids after the highest of any type. Registries hand out
/// increasing ids that are never reused, so an instance another node creates while this
/// one sweeps (after the listing) gets one of those and keeps its contents; an orphan
/// among them is removed by a later sweep, once newer instances exist.
fn kept_by_sweep(all: &[quintet_core::Instance], kind: ServiceType) -> Vec<InstanceId> {
    let highest = all.iter().map(|i| i.id.0).max().unwrap_or(0);
    all.iter()
        .filter(|i| i.kind() == kind)
        .map(|i| i.id)
        .chain((1..=SWEEP_SPARED_IDS).map(|n| InstanceId(highest.saturating_add(n))))
        .collect()
}

#[cfg(test)]
mod tests {
    use quintet_core::{AppName, Instance, InstanceConfig};

    use super::*;

    fn instance(id: i64, config: InstanceConfig) -> Instance {
        Instance {
            id: InstanceId(id),
            app: AppName::domain(),
            name: format!("i{id}").parse().unwrap(),
            config,
            created_ms: 0,
        }
    }

    #[test]
    fn a_sweep_keeps_listed_instances_and_ids_handed_out_after_the_listing() {
        let all = [
            instance(3, InstanceConfig::Data),
            instance(7, InstanceConfig::Cache),
            instance(9, InstanceConfig::Data),
        ];
        let kept = kept_by_sweep(&all, ServiceType::Data);
        assert!(kept.contains(&InstanceId(3)) && kept.contains(&InstanceId(9)));
        // Another type's instance is not kept, nor are unlisted ids below the highest.
        for gone in [7, 8, 1] {
            assert!(!kept.contains(&InstanceId(gone)), "{gone}");
        }
        // Ids created through another node after the listing are spared.
        assert!(kept.contains(&InstanceId(10)) && kept.contains(&InstanceId(9 + 1024)));
        assert!(!kept.contains(&InstanceId(9 + 1025)));
        let empty = kept_by_sweep(&[], ServiceType::Cache);
        assert!(empty.contains(&InstanceId(1)));
    }
}
