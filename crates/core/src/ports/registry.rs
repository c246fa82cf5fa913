//! The registry: accounts, applications, their access keys and their service instances,
//! and the feed of changes that nodes sharing one registry use to keep their caches true.

use std::{fmt, sync::Weak};

use async_trait::async_trait;

use crate::{
    AppName, Instance, InstanceConfig, InstanceId, InstanceName, Result, ServiceType,
    account_tokens::{AccountToken, AccountTokenId},
    accounts::{Account, AccountName, AccountUsage, App, Plan},
    keys::{AccessKey, KeyId},
};

/// A committed change to the registry that a node caching registry state must apply (see
/// [`Registry::subscribe`]).
///
/// Only changes that can make a cache wrong are reported: instances appearing and going,
/// keys appearing and being revoked, applications going. Accounts and plans are never
/// cached, so their changes are not reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegistryChange {
    /// An instance was recorded.
    InstanceCreated {
        /// Its application.
        app: AppName,
        /// Its service type.
        kind: ServiceType,
        /// Its name.
        name: InstanceName,
        /// Its id.
        id: InstanceId,
    },
    /// An instance was forgotten; its contents are being dropped.
    InstanceDeleted {
        /// Its application.
        app: AppName,
        /// Its service type.
        kind: ServiceType,
        /// Its name.
        name: InstanceName,
        /// Its id.
        id: InstanceId,
    },
    /// An application was deleted with all its keys and instances.
    AppDeleted {
        /// The application.
        app: AppName,
    },
    /// An access key was created.
    KeyCreated {
        /// The application it belongs to.
        app: AppName,
        /// The key id.
        key: KeyId,
    },
    /// An access key was revoked.
    KeyRevoked {
        /// The application it belongs to.
        app: AppName,
        /// The key id.
        key: KeyId,
    },
    /// Changes may have been missed (the node lost its connection to the other nodes'
    /// changes): forget everything cached from the registry and read it again.
    Resync,
}

/// Something that keeps registry state in memory (a cache) and must hear of changes; see
/// [`Registry::subscribe`].
pub trait ChangeListener: Send + Sync + 'static {
    /// Apply `change`. Called on the registry's own task, one change at a time in the
    /// order they committed, before the change is acknowledged to the node that made it:
    /// it must be quick and must not block.
    fn apply(&self, change: &RegistryChange);
}

/// Where quintet records which accounts, applications, keys and instances exist.
///
/// # Contract
/// - Instance names are unique per `(application, type)`; instance ids are unique across
///   the registry and never reused.
/// - Every write is durable before the call returns.
/// - The built-in domain application ([`AppName::domain`]) always exists, belongs to no
///   account, is never listed by [`Registry::list_apps`], cannot be deleted and has no
///   keys.
/// - Account and application names are globally unique; key ids are globally unique.
/// - [`Registry::create_app`] checks the account's plan limit and inserts in one atomic
///   step: concurrent creations never exceed the limit.
/// - [`Registry::delete_app`] removes the application, its keys and its instance records in
///   one atomic step and returns the instances, whose contents the caller then drops.
/// - A revoked key stays listed with its revocation time; revoking again changes nothing.
///   The same holds for account tokens, which are kept as their digest only.
/// - Times are taken from the registry's clock.
/// - Changes across nodes ([`Registry::subscribe`]): when several nodes share the
///   registry's store, every committed [`RegistryChange`] that may invalidate a cache
///   (creating and deleting instances, creating and revoking keys, deleting applications)
///   is applied to the listeners of every live node, the writing node included, before the
///   writing call returns; a node that does not answer within a bounded time is logged
///   and not waited for further. A node that cannot vouch for having seen every change
///   (its connection broke) applies [`RegistryChange::Resync`]. A registry that only one
///   process can open has no other node to hear from, and calls no listener.
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

    /// Every instance, and the highest instance id ever handed out (0 when none), read
    /// together: no instance with an id at or below it is being created meanwhile, so an
    /// id at or below it that is not listed belongs to no instance, now or later. What the
    /// start-up sweep keeps ([`super::Keep`]).
    async fn instances_for_sweep(&self) -> Result<(Vec<Instance>, InstanceId)>;

    /// Record a new account. [`crate::Error::Conflict`] when the name is taken.
    async fn create_account(&self, name: &AccountName, plan: Plan) -> Result<Account>;

    /// The account `name` and how many applications it owns, if it exists.
    async fn get_account(&self, name: &AccountName) -> Result<Option<AccountUsage>>;

    /// Every account with its number of applications, ordered by name.
    async fn list_accounts(&self) -> Result<Vec<AccountUsage>>;

    /// Move an account to `plan`. [`crate::Error::NotFound`] when it does not exist;
    /// [`crate::Error::Conflict`] when it owns more applications than `plan` allows.
    async fn set_plan(&self, name: &AccountName, plan: Plan) -> Result<Account>;

    /// Record a new application owned by `account`. [`crate::Error::NotFound`] when the
    /// account does not exist; [`crate::Error::Conflict`] when the name is taken;
    /// [`crate::Error::Forbidden`] (naming the plan and its limit) when the account owns as
    /// many applications as its plan allows.
    async fn create_app(&self, name: &AppName, account: &AccountName) -> Result<App>;

    /// The application `name`, if it exists (the domain application included).
    async fn get_app(&self, name: &AppName) -> Result<Option<App>>;

    /// Every application, or those of one account, ordered by name; never the domain
    /// application. [`crate::Error::NotFound`] when `account` is given and does not exist.
    async fn list_apps(&self, account: Option<&AccountName>) -> Result<Vec<App>>;

    /// Forget the application with its keys and instance records, and return it with the
    /// instances it had. [`crate::Error::NotFound`] when it does not exist;
    /// [`crate::Error::Invalid`] for the domain application.
    async fn delete_app(&self, name: &AppName) -> Result<(App, Vec<Instance>)>;

    /// Generate and record a new access key for `app` (see [`AccessKey::generate`]).
    /// [`crate::Error::NotFound`] when the application does not exist;
    /// [`crate::Error::Invalid`] for the domain application.
    async fn create_key(&self, app: &AppName) -> Result<AccessKey>;

    /// Record `key` as it is (id, secret, creation time; never used, not revoked): what an
    /// import does to carry a key from another deployment. [`crate::Error::Conflict`]
    /// ([`answers::key_exists`]) when its id exists; otherwise as [`Registry::create_key`].
    async fn restore_key(&self, key: &AccessKey) -> Result<()>;

    /// The key `key`, revoked or not, if it exists.
    async fn get_key(&self, key: &KeyId) -> Result<Option<AccessKey>>;

    /// Every key of `app`, revoked ones included, oldest first.
    /// [`crate::Error::NotFound`] when the application does not exist.
    async fn list_keys(&self, app: &AppName) -> Result<Vec<AccessKey>>;

    /// Revoke the key `key` of `app` and return it. [`crate::Error::NotFound`] when `app`
    /// has no such key. Revoking a revoked key keeps its first revocation time.
    async fn revoke_key(&self, app: &AppName, key: &KeyId) -> Result<AccessKey>;

    /// Record when keys were last used: each key's `last_used` becomes the later of its
    /// stored value and the one given. Unknown keys are ignored.
    async fn record_key_use(&self, uses: &[(KeyId, i64)]) -> Result<()>;

    /// Record a new account token ([`AccountToken::generate`]). [`crate::Error::NotFound`]
    /// when its account does not exist.
    async fn create_account_token(&self, token: &AccountToken) -> Result<()>;

    /// The account token `id`, revoked or not, if it exists.
    async fn get_account_token(&self, id: &AccountTokenId) -> Result<Option<AccountToken>>;

    /// Every token of `account`, revoked ones included, oldest first.
    /// [`crate::Error::NotFound`] when the account does not exist.
    async fn list_account_tokens(&self, account: &AccountName) -> Result<Vec<AccountToken>>;

    /// Revoke the token `id` of `account` and return it. [`crate::Error::NotFound`]
    /// ([`crate::account_tokens::token_missing`]) when `account` has no such token.
    /// Revoking a revoked token keeps its first revocation time.
    async fn revoke_account_token(
        &self,
        account: &AccountName,
        id: &AccountTokenId,
    ) -> Result<AccountToken>;

    /// Call `listener` with every change committed from now on, by any node (see the
    /// contract). Held weakly: once the listener is dropped it is no longer called.
    fn subscribe(&self, listener: Weak<dyn ChangeListener>);

    /// Whether this node's caches of keys and instances can be trusted now: `false` while
    /// it may have missed changes made through other nodes (it was paused or starved
    /// longer than changes take to reach every node, or its feed has a gap) and has not
    /// caught up yet. Callers then read the registry instead of their caches. A registry
    /// only one process can open has no other node to miss, and always answers `true`.
    fn caches_current(&self) -> bool {
        true
    }

    /// `Ok` when the registry answers now; otherwise why not ([`crate::Error::Unavailable`]
    /// or [`crate::Error::InsufficientStorage`]). Called by `/_ready`.
    async fn ready(&self) -> Result<()> {
        Ok(())
    }

    /// Flush and release the engine.
    async fn close(&self) -> Result<()>;
}

/// The answers every registry gives, so that all adapters say the same thing.
pub mod answers {
    use std::fmt;

    use crate::{AppName, Error, Result, ServiceType};

    /// Account `name` does not exist.
    pub fn account_missing(name: impl fmt::Display) -> Error {
        Error::not_found(format!(
            "account \"{name}\" does not exist; create it with POST /_admin/accounts"
        ))
    }

    /// Account `name` exists already.
    pub fn account_exists(name: impl fmt::Display) -> Error {
        Error::conflict(format!("account \"{name}\" already exists"))
    }

    /// Application `name` does not exist.
    pub fn app_missing(name: impl fmt::Display) -> Error {
        Error::not_found(format!(
            "application \"{name}\" does not exist; create it with POST /_admin/apps"
        ))
    }

    /// Application `name` exists already, in this or another account.
    pub fn app_exists(name: impl fmt::Display) -> Error {
        Error::conflict(format!(
            "application \"{name}\" already exists; application names are unique across all \
             accounts"
        ))
    }

    /// Instance `name` of `kind` exists already in its application.
    pub fn instance_exists(kind: ServiceType, name: impl fmt::Display) -> Error {
        Error::conflict(format!("{kind} instance \"{name}\" already exists"))
    }

    /// Instance `name` of `kind` does not exist in its application.
    pub fn instance_missing(kind: ServiceType, name: impl fmt::Display) -> Error {
        Error::not_found(format!("{kind} instance \"{name}\" does not exist"))
    }

    /// Application `app` has no key `key`.
    pub fn key_missing(app: impl fmt::Display, key: impl fmt::Display) -> Error {
        Error::not_found(format!("application \"{app}\" has no key \"{key}\""))
    }

    /// A restored key's id is taken.
    pub fn key_exists(key: impl fmt::Display) -> Error {
        Error::Conflict(format!("access key \"{key}\" already exists"))
    }

    /// A generated key id is taken: 96 random bits, so the random source is broken.
    pub fn key_id_collision() -> Error {
        Error::internal("a generated key id already exists")
    }

    /// The plan stored for account `name` cannot be read back.
    pub fn stored_plan(name: impl fmt::Display, e: impl fmt::Display) -> Error {
        Error::internal(format!("account {name}: stored plan: {e}"))
    }

    /// Refuse to delete the built-in domain application: [`Registry::delete_app`]'s
    /// precondition.
    ///
    /// [`Registry::delete_app`]: super::Registry::delete_app
    pub fn check_deletable(app: &AppName) -> Result<()> {
        if app.is_domain() {
            return Err(Error::invalid(
                "the built-in domain application cannot be deleted",
            ));
        }
        Ok(())
    }

    /// Refuse keys for the built-in domain application: [`Registry::create_key`]'s
    /// precondition.
    ///
    /// [`Registry::create_key`]: super::Registry::create_key
    pub fn check_may_have_keys(app: &AppName) -> Result<()> {
        if app.is_domain() {
            return Err(Error::invalid(
                "the built-in domain application has no access keys; the domain form is \
                 authenticated by the server's --auth setting",
            ));
        }
        Ok(())
    }
}
