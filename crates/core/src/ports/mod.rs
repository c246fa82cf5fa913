//! Port traits: what the HTTP layer needs from each service, whatever engine serves it.
//!
//! Every service port extends [`Lifecycle`], the part every adapter shares: preparing and
//! dropping whole instances. Handlers call ports; adapters implement them; neither knows
//! the other. Ports are used as trait objects (`Arc<dyn DocStore>`), so adapters can be
//! chosen at run time by configuration.

use std::fmt;

use async_trait::async_trait;

use crate::{Instance, InstanceId, Result};

pub mod cache;
pub mod data;
pub mod list;
pub mod queue;
pub mod registry;
pub mod search;
pub mod storage;

/// Creating, dropping and closing the instances of one service type.
///
/// # Contract
/// - The registry is the source of truth for which instances exist. The server records an
///   instance in the registry *before* calling [`Lifecycle::create_instance`], and removes
///   it from the registry *before* calling [`Lifecycle::drop_instance`].
/// - `create_instance` prepares storage for a new, empty instance. Instance ids are never
///   reused, so it never meets old contents.
/// - `drop_instance` removes everything stored in the instance. It is idempotent: dropping
///   an instance that holds nothing, or was already dropped, succeeds.
/// - `sweep` removes the contents of every instance of this adapter's type whose id is not
///   in `live`; it repairs a crash between the registry delete and `drop_instance`. It is
///   called at start-up, before requests are served.
/// - `close` flushes and releases the engine; it is called once, after the HTTP server
///   stopped taking requests. Nothing acknowledged before `close` may be lost.
#[async_trait]
pub trait Lifecycle: Send + Sync + fmt::Debug + 'static {
    /// Prepare storage for a new, empty instance.
    async fn create_instance(&self, instance: &Instance) -> Result<()>;

    /// Remove everything stored in the instance.
    async fn drop_instance(&self, instance: &Instance) -> Result<()>;

    /// Remove the contents of instances not in `live` (all ids of this adapter's type that
    /// the registry knows). Returns how many orphaned instances were removed.
    async fn sweep(&self, live: &[InstanceId]) -> Result<usize>;

    /// Flush pending work and release the engine.
    async fn close(&self) -> Result<()>;
}
