//! The search service: one index directory per instance under `search/`.

use std::path::Path;

use async_trait::async_trait;
use quintet_core::{Instance, InstanceId, Result, ports::Lifecycle};

use crate::instance_store::{InstanceDirs, blocking};

/// Full-text indexes of every search instance, one directory each.
#[derive(Debug, Clone)]
pub struct TantivySearchIndex {
    dirs: InstanceDirs,
}

impl TantivySearchIndex {
    /// Open the index directories under `root`.
    pub fn open(root: &Path) -> Result<Self> {
        Ok(Self {
            dirs: InstanceDirs::open(root.to_owned())?,
        })
    }
}

#[async_trait]
impl Lifecycle for TantivySearchIndex {
    async fn create_instance(&self, instance: &Instance) -> Result<()> {
        let dirs = self.dirs.clone();
        let id = instance.id;
        blocking(move || dirs.create(id).map(|_| ())).await
    }

    async fn drop_instance(&self, instance: &Instance) -> Result<()> {
        let dirs = self.dirs.clone();
        let id = instance.id;
        blocking(move || dirs.remove(id)).await
    }

    async fn sweep(&self, live: &[InstanceId]) -> Result<usize> {
        let (dirs, live) = (self.dirs.clone(), live.to_vec());
        blocking(move || dirs.sweep(&live)).await
    }

    async fn close(&self) -> Result<()> {
        Ok(())
    }
}
