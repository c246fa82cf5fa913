//! The registry: accounts, applications, their access keys and their service instances.

use std::fmt;

use async_trait::async_trait;

use crate::{
    AppName, Instance, InstanceConfig, InstanceName, Result, ServiceType,
    accounts::{Account, AccountName, AccountUsage, App, Plan},
    keys::{AccessKey, KeyId},
};

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
/// - Times are taken from the registry's clock.
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

    /// Flush and release the engine.
    async fn close(&self) -> Result<()>;
}
