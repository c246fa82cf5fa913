//! The registry: applications, their access keys and their service instances.

use std::fmt;

use async_trait::async_trait;

use crate::{AppName, Instance, InstanceConfig, InstanceName, Result, ServiceType};

/// Where quintet records which applications and instances exist.
///
/// # Contract
/// - Instance names are unique per `(application, type)`; instance ids are unique across
///   the registry and never reused.
/// - Every write is durable before the call returns.
/// - The built-in domain application ([`AppName::domain`]) always exists.
#[async_trait]
pub trait Registry: Send + Sync + fmt::Debug + 'static {
    /// Record a new instance. [`crate::Error::Conflict`] when `(app, type, name)` exists;
    /// [`crate::Error::NotFound`] when the application does not.
    async fn create_instance(
        &self,
        app: &AppName,
        name: &InstanceName,
        config: InstanceConfig,
    ) -> Result<Instance>;

    /// The instance `(app, kind, name)`, if it exists.
    async fn get_instance(
        &self,
        app: &AppName,
        kind: ServiceType,
        name: &InstanceName,
    ) -> Result<Option<Instance>>;

    /// Forget the instance and return what it was. [`crate::Error::NotFound`] when missing.
    async fn delete_instance(
        &self,
        app: &AppName,
        kind: ServiceType,
        name: &InstanceName,
    ) -> Result<Instance>;

    /// Every instance, or those of one application, ordered by application, type and name.
    async fn list_instances(&self, app: Option<&AppName>) -> Result<Vec<Instance>>;

    /// Flush and release the engine.
    async fn close(&self) -> Result<()>;
}
