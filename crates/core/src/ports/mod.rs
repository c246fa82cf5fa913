//! Port traits: what the HTTP layer needs from each service, whatever engine serves it.
//!
//! Every service port extends [`Lifecycle`], the part every adapter shares: preparing and
//! dropping whole instances. Handlers call ports; adapters implement them; neither knows
//! the other. Ports are used as trait objects (`Arc<dyn DocStore>`), so adapters can be
//! chosen at run time by configuration.

use std::{collections::HashSet, fmt};

use async_trait::async_trait;

use crate::{Instance, InstanceId, Result};

pub mod cache;
pub mod changes;
pub mod data;
pub mod list;
pub mod queue;
pub mod registry;
pub mod search;
pub mod storage;
pub mod storage_events;

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
/// - `sweep` removes the contents of every instance of this adapter's type that `keep`
///   does not keep; it repairs a crash between the registry delete and `drop_instance`. It
///   is called at start-up, before requests are served.
/// - `ready` says whether the adapter can serve now (its engine answers, its files can be
///   written); it is called by `/_ready` and must answer within a few seconds.
/// - `pool` tells how the adapter's connections to a network engine are used, `None` when
///   it holds none it can measure (files of the node's own, or a client library that
///   keeps its connections to itself). It is called by every `/_metrics` scrape, so it
///   reads counters and never waits.
/// - `close` flushes and releases the engine; it is called once, after the HTTP server
///   stopped taking requests. Nothing acknowledged before `close` may be lost.
#[async_trait]
pub trait Lifecycle: Send + Sync + fmt::Debug + 'static {
    /// Prepare storage for a new, empty instance.
    async fn create_instance(&self, instance: &Instance) -> Result<()>;

    /// Remove everything stored in the instance.
    async fn drop_instance(&self, instance: &Instance) -> Result<()>;

    /// Remove the contents of every instance of this adapter's type that `keep` does not
    /// keep. Returns how many orphaned instances were removed.
    async fn sweep(&self, keep: &Keep) -> Result<usize>;

    /// `Ok` when the adapter can serve now; otherwise the reason, as
    /// [`crate::Error::Unavailable`] (its engine does not answer) or
    /// [`crate::Error::InsufficientStorage`] (its disk is full).
    async fn ready(&self) -> Result<()> {
        Ok(())
    }

    /// How the adapter's engine connections are used now; `None` when it holds none it
    /// can measure.
    fn pool(&self) -> Option<PoolUsage>;

    /// Flush pending work and release the engine.
    async fn close(&self) -> Result<()>;
}

/// How an adapter's connections to its engine are used (see [`Lifecycle::pool`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolUsage {
    /// The engine: `postgres` or `redis`.
    pub engine: &'static str,
    /// Most connections the adapter opens.
    pub max: u64,
    /// Connections open now.
    pub open: u64,
    /// Open connections lent to a call now; `None` for a multiplexed connection, which
    /// every call shares.
    pub in_use: Option<u64>,
    /// Calls waiting for a connection now; `None` where calls never wait for one.
    pub waiting: Option<u64>,
}

/// The instances a start-up sweep keeps: those the registry listed and, when known, every
/// id above the highest the registry ever handed out, read together with the listing.
/// Ids are never reused and handed out in increasing order, so an unlisted id at or below
/// that bound belongs to a deleted instance (whatever deleted it was interrupted), while
/// one above it may belong to an instance another node created after the listing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Keep {
    listed: HashSet<InstanceId>,
    highest: Option<InstanceId>,
}

impl Keep {
    /// Keep `listed`, and every id above `highest`.
    pub fn new(listed: impl IntoIterator<Item = InstanceId>, highest: InstanceId) -> Self {
        Self {
            listed: listed.into_iter().collect(),
            highest: Some(highest),
        }
    }

    /// Keep `listed` and nothing else.
    pub fn only(listed: impl IntoIterator<Item = InstanceId>) -> Self {
        Self {
            listed: listed.into_iter().collect(),
            highest: None,
        }
    }

    /// Whether the contents of instance `id` stay.
    pub fn keeps(&self, id: InstanceId) -> bool {
        self.listed.contains(&id) || self.highest.is_some_and(|h| id > h)
    }

    /// The listed ids, for engines that filter in a query.
    pub fn listed(&self) -> impl Iterator<Item = InstanceId> + '_ {
        self.listed.iter().copied()
    }

    /// The id above which everything is kept, as a number for a query (`i64::MAX` when
    /// only the listed ids are kept).
    pub fn kept_above(&self) -> i64 {
        self.highest.map_or(i64::MAX, |h| h.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keep_spares_listed_ids_and_those_above_the_highest() {
        let keep = Keep::new([InstanceId(3), InstanceId(9)], InstanceId(12));
        for (id, kept) in [(3, true), (9, true), (4, false), (12, false), (13, true)] {
            assert_eq!(keep.keeps(InstanceId(id)), kept, "{id}");
        }
        assert_eq!(keep.kept_above(), 12);
        let only = Keep::only([InstanceId(3)]);
        assert!(only.keeps(InstanceId(3)) && !only.keeps(InstanceId(1 << 50)));
        assert_eq!(only.kept_above(), i64::MAX);
    }
}
