//! Conformance suites: one per port, written once against the trait and run against every
//! adapter (enable the `conformance` feature in an adapter's dev-dependencies).
//!
//! Each case is a function that takes the port as a trait object and panics with a
//! message on the first broken rule. An adapter's tests run every case as a test of its
//! own, named after the case, through the suite's macro: a failure names its case and
//! hides no other, and the runner runs the cases in parallel. Cases create fresh
//! instances (fresh names and ids), so they may share an engine.
//!
//! ```ignore
//! /// The adapter under test, or `None` (with a message) when its engine is missing.
//! async fn open(test: &'static str) -> Option<Subject<dyn DocStore>> { … }
//! quintet_core::data_conformance!(open);      // one #[tokio::test] per data case
//! ```
//!
//! | macro | the opener is an `async fn` of | and gives |
//! |---|---|---|
//! | [`registry_conformance!`] | the test's name | `Subject<dyn Registry>` |
//! | [`data_conformance!`] | the test's name | `Subject<dyn DocStore>` |
//! | [`cache_conformance!`] | the test's name and the `Arc<ManualClock>` the cache must read | `Subject<dyn Cache>` |
//! | [`search_conformance!`] | the test's name | `Subject<dyn SearchIndex>` |
//! | [`queue_conformance!`] | the test's name | `Subject<dyn JobQueue>` |
//! | [`storage_conformance!`] | the test's name | `Subject<dyn ObjectStorage>` |
//! | [`storage_events_conformance!`] | the test's name | `Subject<dyn EventedStorage>` |
//! | [`lifecycle_conformance!`]`(open, config)` | the test's name | a `Subject` of any port; `config` makes its instances |
//!
//! The macros expand to `#[tokio::test]` functions on a multi-threaded runtime (a guard
//! dropped at the end, such as a schema being dropped, may block one thread while the
//! adapter's background tasks finish on the other): the calling crate needs `tokio` (with
//! its macros) among its dev-dependencies. Invoke each macro in a module of its own.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

pub mod cache;
pub mod data;
pub mod lifecycle;
pub mod queue;
pub mod registry;
pub mod search;
pub mod storage;
pub mod storage_events;

use std::{
    any::Any,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
};

use crate::{AppName, Instance, InstanceConfig, InstanceId, InstanceName};

/// The time every [`cache_conformance!`] case starts at on its `ManualClock`.
pub const T0: i64 = 1_700_000_000_000;

/// What an adapter's test hands to a case: the port under test, and what must live as long
/// as it (a temporary directory, a database schema, an engine user), dropped after it.
pub struct Subject<P: ?Sized> {
    /// The port under test. Declared first, so dropped before what it needs.
    pub port: Arc<P>,
    keep: Vec<Box<dyn Any + Send>>,
}

impl<P: ?Sized> Subject<P> {
    /// A subject needing nothing else.
    pub fn new(port: Arc<P>) -> Self {
        Self {
            port,
            keep: Vec::new(),
        }
    }

    /// The subject, also keeping `guard` until it is dropped.
    pub fn keeping(mut self, guard: impl Any + Send) -> Self {
        self.keep.push(Box::new(guard));
        self
    }
}

static NEXT: AtomicU64 = AtomicU64::new(1);

/// A name no other suite function in this process uses.
pub fn unique_name(prefix: &str) -> InstanceName {
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("{prefix}-{n}-{nanos}").parse().expect("valid name")
}

/// An instance value for adapter-level suites that do not go through a registry. Ids are
/// taken from a high range so they never meet a registry's own ids in a shared engine.
pub fn instance(config: InstanceConfig) -> Instance {
    let n = NEXT.fetch_add(1, Ordering::Relaxed) as i64;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::from(d.subsec_nanos()))
        .unwrap_or(0);
    Instance {
        id: InstanceId((1 << 40) + (nanos << 12) + n),
        app: AppName::domain(),
        name: unique_name(config.kind().as_str()),
        config,
        created_ms: 0,
    }
}

/// One `#[tokio::test]` per registry case; see the [module](self) for `$open`.
#[macro_export]
macro_rules! registry_conformance {
    ($open:path) => {
        $crate::conformance_cases!(
            registry,
            $open,
            [
                create_get_delete,
                names_are_unique_per_type,
                ids_are_never_reused,
                the_sweep_view_covers_deleted_ids,
                config_round_trips,
                missing_app_is_not_found,
                accounts_and_plans,
                plan_limits_apps,
                apps_are_unique_and_listed_by_account,
                keys_are_created_listed_and_revoked,
                restored_keys_keep_their_id_and_secret,
                key_use_keeps_the_latest_time,
                deleting_an_app_removes_its_keys_and_instances,
                the_domain_app_is_protected,
                refusals_say_what_to_do,
                account_tokens_are_issued_listed_and_revoked,
            ]
        );
    };
}

/// One `#[tokio::test]` per data case; see the [module](self) for `$open`.
#[macro_export]
macro_rules! data_conformance {
    ($open:path) => {
        $crate::conformance_cases!(
            data,
            $open,
            [
                create_get_replace_remove,
                generated_ids_are_unique_and_time_ordered,
                bulk_applies_in_order_and_reports_each_entry,
                list_walks_ids_byte_wise,
                find_follows_mango,
                indexes_answer_like_a_full_scan,
                indexes_follow_every_write,
                index_definitions,
                oversized_documents_are_refused,
                changes_follow_every_write_in_order,
                compaction_refuses_positions_it_removed,
                writes_tell_feed_listeners,
                concurrent_writes_are_read_exactly_once,
            ]
        );
    };
}

/// One `#[tokio::test]` per cache case, each on a `ManualClock` of its own starting at
/// [`T0`]; see the [module](self) for `$open`.
#[macro_export]
macro_rules! cache_conformance {
    ($open:path) => {
        $crate::conformance_cases!(@clock cache, $open, [
            add_then_get_returns_the_value_byte_for_byte,
            add_refuses_a_live_key,
            missing_keys_are_none,
            set_upserts_and_replaces_whole_values,
            instances_are_isolated,
            drop_removes_every_entry,
            concurrent_adds_of_one_key_have_one_winner,
            concurrent_writes_all_land,
            large_values_round_trip,
        ]);
        $crate::conformance_cases!(@clocked cache, $open, [
            entries_expire_at_their_instant,
            every_unit_expires_on_time,
            an_expired_entry_does_not_block_add,
            set_without_ttl_keeps_the_expiry,
            set_with_ttl_restarts_the_countdown,
            set_over_an_expired_entry_starts_fresh,
            update_existing_needs_a_live_entry,
            remove_then_the_key_is_missing,
            query_matches_sorts_and_hides_expired,
            query_answers_each_expiry,
            expiry_is_the_instant_an_entry_expires,
            usage_counts_live_entries_and_their_bytes,
        ]);
    };
}

/// One `#[tokio::test]` per search case; see the [module](self) for `$open`.
#[macro_export]
macro_rules! search_conformance {
    ($open:path) => {
        $crate::conformance_cases!(
            search,
            $open,
            [
                index_get_update_remove,
                writes_are_visible_to_the_next_query,
                bulk_upserts_in_order,
                documents_walk_every_document_by_key,
                typo_budget_follows_word_length,
                prefix_applies_to_the_last_word_only,
                words_are_ored_and_more_words_rank_first,
                exact_beats_prefix_beats_fuzzy,
                fields_limit_the_search,
                filter_is_anded_equality_on_top_level_fields,
                matches_have_the_minisearch_shape,
                limit_caps_the_answer,
                limit_defaults_to_100,
                text_is_folded_and_any_value_is_searchable,
                queries_without_words_are_refused,
                relevance,
                count_follows_every_write,
            ]
        );
    };
}

/// One `#[tokio::test]` per queue case; see the [module](self) for `$open`.
#[macro_export]
macro_rules! queue_conformance {
    ($open:path) => {
        $crate::conformance_cases!(
            queue,
            $open,
            [
                enqueue_then_list,
                listing_pages_and_filters,
                idempotency_keys_conflict_while_the_job_exists,
                claims_lease_jobs_oldest_first,
                delivered_jobs_are_gone,
                an_expired_lease_makes_the_job_claimable_again,
                retry_at_makes_the_job_due_later,
                released_jobs_are_due_at_once_without_an_attempt,
                failed_jobs_go_to_error_and_retry_brings_them_back,
                restored_jobs_keep_their_status_and_attempts,
                cancel_removes_ready_and_error_jobs,
                settling_a_cancelled_claim_changes_nothing,
                job_changes_are_events_in_order,
                concurrent_claims_never_share_a_job,
                a_dropped_queue_holds_nothing,
                depth_counts_jobs_by_state,
            ]
        );
    };
}

/// One `#[tokio::test]` per storage case; see the [module](self) for `$open`.
#[macro_export]
macro_rules! storage_conformance {
    ($open:path) => {
        $crate::conformance_cases!(
            storage,
            $open,
            [
                put_then_get_head_delete,
                overwrite_replaces_content_and_etag,
                failed_upload_keeps_the_previous_object,
                large_objects_stream_in_chunks,
                empty_objects,
                ranges,
                missing_objects,
                paths_are_keys_not_directories,
                list_in_path_order_with_prefix_after_limit,
                instances_are_isolated,
                drop_removes_every_object,
                presigned_urls_are_absolute,
            ]
        );
    };
}

/// One `#[tokio::test]` per storage events case; see the [module](self) for `$open`.
#[macro_export]
macro_rules! storage_events_conformance {
    ($open:path) => {
        $crate::conformance_cases!(
            storage_events,
            $open,
            [
                object_writes_are_events_in_order,
                compaction_keeps_the_head_and_never_reuses_numbers,
                writes_tell_feed_listeners,
            ]
        );
    };
}

/// One `#[tokio::test]` per lifecycle case, with instances made from `$config` (an
/// expression giving an `InstanceConfig`); see the [module](self) for `$open`.
#[macro_export]
macro_rules! lifecycle_conformance {
    ($open:path, $config:expr) => {
        $crate::conformance_cases!(@with $config; lifecycle, $open, [
            create_then_drop,
            drop_is_idempotent,
            sweep_removes_only_orphans,
            pool_usage_is_consistent,
        ]);
    };
}

/// The tests the suite macros expand to.
#[doc(hidden)]
#[macro_export]
macro_rules! conformance_cases {
    ($suite:ident, $open:path, [$($case:ident),* $(,)?]) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $case() {
            let test = concat!(module_path!(), "::", stringify!($case));
            let Some(subject) = $open(test).await else {
                return;
            };
            $crate::conformance::$suite::$case(&*subject.port).await;
        }
    )*};
    (@with $arg:expr; $suite:ident, $open:path, [$($case:ident),* $(,)?]) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $case() {
            let test = concat!(module_path!(), "::", stringify!($case));
            let Some(subject) = $open(test).await else {
                return;
            };
            $crate::conformance::$suite::$case(&*subject.port, $arg).await;
        }
    )*};
    (@clock $suite:ident, $open:path, [$($case:ident),* $(,)?]) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $case() {
            let test = concat!(module_path!(), "::", stringify!($case));
            let clock = ::std::sync::Arc::new($crate::ManualClock::new($crate::conformance::T0));
            let Some(subject) = $open(test, ::std::sync::Arc::clone(&clock)).await else {
                return;
            };
            $crate::conformance::$suite::$case(&*subject.port).await;
        }
    )*};
    (@clocked $suite:ident, $open:path, [$($case:ident),* $(,)?]) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $case() {
            let test = concat!(module_path!(), "::", stringify!($case));
            let clock = ::std::sync::Arc::new($crate::ManualClock::new($crate::conformance::T0));
            let Some(subject) = $open(test, ::std::sync::Arc::clone(&clock)).await else {
                return;
            };
            $crate::conformance::$suite::$case(&*subject.port, &clock).await;
        }
    )*};
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    /// The cases of `suite`'s file: its `pub async fn`s taking the port first.
    fn cases(source: &str, port: &str) -> BTreeSet<String> {
        let lead = format!(": &dyn {port}");
        source
            .split("pub async fn ")
            .skip(1)
            .filter_map(|rest| {
                let (name, after) = rest.split_once('(')?;
                let first = after.split([',', ')']).next()?;
                first.ends_with(&lead).then(|| name.to_owned())
            })
            .collect()
    }

    /// The cases `<suite>_conformance!` of this file lists: the names in its `[…]` lists.
    fn listed(suite: &str) -> BTreeSet<String> {
        let source = include_str!("mod.rs");
        let head = format!("macro_rules! {suite}_conformance {{");
        let Some(start) = source.find(&head) else {
            return BTreeSet::new();
        };
        let body = &source[start + head.len()..];
        let body = &body[..body.find("\n}\n").unwrap_or(body.len())];
        body.split('[')
            .skip(1)
            .filter_map(|list| list.split_once(']'))
            .flat_map(|(list, _)| list.split(','))
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn every_case_is_run_by_its_macro() {
        for (suite, source, port) in [
            ("registry", include_str!("registry.rs"), "Registry"),
            ("data", include_str!("data.rs"), "DocStore"),
            ("cache", include_str!("cache.rs"), "Cache"),
            ("search", include_str!("search.rs"), "SearchIndex"),
            ("queue", include_str!("queue.rs"), "JobQueue"),
            ("storage", include_str!("storage.rs"), "ObjectStorage"),
            (
                "storage_events",
                include_str!("storage_events.rs"),
                "EventedStorage",
            ),
            ("lifecycle", include_str!("lifecycle.rs"), "Lifecycle"),
        ] {
            let defined = cases(source, port);
            assert!(!defined.is_empty(), "{suite}: no cases found");
            assert_eq!(listed(suite), defined, "{suite}");
        }
    }
}
