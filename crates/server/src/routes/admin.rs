//! The admin API under `/_admin`: accounts, applications, access keys and the instances of
//! an application. Handlers only the admin may call take [`Admin`]; those an account token
//! may call too take [`Caller`] and show an account only what it owns: another account's
//! application is "not found", as if it did not exist. The auth layer has already refused
//! calls without either token.
//!
//! The calls, their statuses and rules: `docs/api.md#the-admin-api`.

use axum::{
    Router,
    extract::{Path, Query, State},
    http::StatusCode,
    response::Response,
    routing::{get, post},
};
use quintet_core::{
    AppName, Error, ServiceType,
    account_tokens::{AccountToken, AccountTokenId},
    accounts::{AccountName, AccountUsage, App, Plan},
    clock::format_rfc3339_ms,
    keys::{AccessKey, ConnectionString, KeyId},
    ports::registry::answers,
};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::{
    auth::{Admin, Caller},
    error::ApiResult,
    extract::{BaseUrl, Json, OptionalJson},
    reply,
    state::AppState,
};

pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/_admin/accounts", post(create_account).get(list_accounts))
        .route(
            "/_admin/accounts/{account}",
            get(get_account).patch(set_plan),
        )
        .route("/_admin/apps", post(create_app).get(list_apps))
        .route("/_admin/apps/{app}", get(get_app).delete(delete_app))
        .route("/_admin/apps/{app}/keys", post(create_key).get(list_keys))
        .route(
            "/_admin/apps/{app}/keys/{key}",
            get(reveal_key).delete(revoke_key),
        )
        .route("/_admin/apps/{app}/instances", get(list_instances))
        .route("/_admin/apps/{app}/token", post(mint_token))
        .route("/_admin/node", get(node))
        .route("/_admin/me", get(me))
        .route(
            "/_admin/accounts/{account}/tokens",
            post(create_account_token).get(list_account_tokens),
        )
        .route(
            "/_admin/accounts/{account}/tokens/{id}",
            axum::routing::delete(revoke_account_token),
        )
}

/// The most entries one page of an admin list holds.
const MAX_PAGE: usize = 1000;

/// `?limit=&after=` of an admin list. Without `limit` the whole list is answered, as before
/// paging existed; with it, at most `limit` entries and `next`, the `after` of the next
/// page (`null` on the last). Both are text here so that a bad value gets this module's
/// message rather than the extractor's.
#[derive(Debug, Default, Deserialize)]
struct Paging {
    limit: Option<String>,
    after: Option<String>,
}

impl Paging {
    fn limit(&self) -> Result<Option<usize>, Error> {
        let Some(v) = &self.limit else {
            return Ok(None);
        };
        match v.parse::<usize>() {
            Ok(n) if (1..=MAX_PAGE).contains(&n) => Ok(Some(n)),
            _ => Err(Error::Invalid(format!(
                "limit must be a whole number from 1 to {MAX_PAGE}, not {:?}",
                v.chars().take(40).collect::<String>()
            ))),
        }
    }

    /// A page of `items` ordered by `key` (byte order, so the same on every registry
    /// engine): those whose key sorts after `after`, and the cursor of the next page.
    /// An entry removed between two pages cannot break the walk.
    fn by_key<T>(
        &self,
        mut items: Vec<T>,
        key: impl Fn(&T) -> String,
    ) -> Result<(Vec<T>, Option<String>), Error> {
        let limit = self.limit()?;
        items.sort_by_cached_key(|t| key(t));
        if let Some(after) = &self.after {
            items.retain(|t| key(t).as_str() > after.as_str());
        }
        Ok(cut(items, limit, key))
    }

    /// A page of `items` in the order given (oldest first): those after the one whose id
    /// is `after` (422 when there is none: these are never removed one by one, so that
    /// id did not come from this list), and the cursor of the next page.
    fn by_position<T>(
        &self,
        items: Vec<T>,
        id: impl Fn(&T) -> String,
        what: &str,
    ) -> Result<(Vec<T>, Option<String>), Error> {
        let limit = self.limit()?;
        let items = match &self.after {
            None => items,
            Some(after) => {
                let at = items.iter().position(|t| id(t) == *after).ok_or_else(|| {
                    Error::Invalid(format!(
                        "after {:?} is not one of the {what} listed here: pass the `next` of                          the previous page, or leave after out for the first page",
                        after.chars().take(80).collect::<String>()
                    ))
                })?;
                items.into_iter().skip(at + 1).collect()
            }
        };
        Ok(cut(items, limit, id))
    }
}

/// `body` with `next` when the call asked for a page (`limit`): whole lists answer as they
/// did before paging existed.
fn paged(mut body: Value, paging: &Paging, next: Option<String>) -> Value {
    if paging.limit.is_some()
        && let Some(fields) = body.as_object_mut()
    {
        fields.insert("next".to_owned(), next.map_or(Value::Null, Value::String));
    }
    body
}

/// The first `limit` of `items` and, when more follow, the cursor after the last of them.
fn cut<T>(
    mut items: Vec<T>,
    limit: Option<usize>,
    id: impl Fn(&T) -> String,
) -> (Vec<T>, Option<String>) {
    match limit {
        Some(n) if items.len() > n => {
            items.truncate(n);
            let next = items.last().map(id);
            (items, next)
        }
        _ => (items, None),
    }
}

fn time(ms: Option<i64>) -> Value {
    ms.map_or(Value::Null, |ms| Value::String(format_rfc3339_ms(ms)))
}

fn account_json(u: &AccountUsage) -> Value {
    json!({
        "name": u.account.name,
        "plan": u.account.plan,
        "apps": u.apps,
        "maxApps": u.account.plan.max_apps(),
        "created": time(Some(u.account.created_ms)),
    })
}

fn app_json(a: &App) -> Value {
    json!({"name": a.name, "account": a.account, "created": time(Some(a.created_ms))})
}

/// An account named in a path: one that cannot exist is simply not found.
fn account_param(name: &str) -> Result<AccountName, Error> {
    name.parse().map_err(|_| answers::account_missing(name))
}

/// An application named in a path: one that cannot exist is simply not found.
fn app_param(name: &str) -> Result<AppName, Error> {
    name.parse().map_err(|_| answers::app_missing(name))
}

fn no_such_key(app: &AppName, key: &str) -> Error {
    answers::key_missing(app, key)
}

/// The later of the stored and the in-memory last use of a key.
fn last_used(state: &AppState, k: &AccessKey) -> Option<i64> {
    k.last_used_ms.max(state.auth.keys.last_used(&k.key))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NewAccount {
    name: String,
    plan: Option<String>,
}

/// 201 `{ok, account}`; the plan defaults to starter.
async fn create_account(
    _: Admin,
    State(state): State<AppState>,
    Json(body): Json<NewAccount>,
) -> ApiResult<Response> {
    let name: AccountName = body.name.parse()?;
    let plan = body.plan.as_deref().unwrap_or("starter").parse::<Plan>()?;
    let account = state.services.registry.create_account(&name, plan).await?;
    let usage = AccountUsage { account, apps: 0 };
    Ok(reply::json(
        StatusCode::CREATED,
        &json!({"ok": true, "account": account_json(&usage)}),
    ))
}

/// `{ok, accounts, next}` ordered by name, a page of them with `?limit=&after=`.
async fn list_accounts(
    caller: Caller,
    State(state): State<AppState>,
    Query(paging): Query<Paging>,
) -> ApiResult<Response> {
    let mut accounts = state.services.registry.list_accounts().await?;
    accounts.retain(|u| caller.may_see(Some(&u.account.name)));
    let (accounts, next) = paging.by_key(accounts, |u| u.account.name.to_string())?;
    let accounts: Vec<Value> = accounts.iter().map(account_json).collect();
    Ok(reply::json(
        StatusCode::OK,
        &paged(json!({"ok": true, "accounts": accounts}), &paging, next),
    ))
}

async fn fetch_account(state: &AppState, name: &AccountName) -> Result<AccountUsage, Error> {
    state
        .services
        .registry
        .get_account(name)
        .await?
        .ok_or_else(|| answers::account_missing(name))
}

/// `{ok, account}`.
async fn get_account(
    caller: Caller,
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> ApiResult<Response> {
    let name = account_param(&name)?;
    if !caller.may_see(Some(&name)) {
        return Err(answers::account_missing(&name).into());
    }
    let usage = fetch_account(&state, &name).await?;
    Ok(reply::json(
        StatusCode::OK,
        &json!({"ok": true, "account": account_json(&usage)}),
    ))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PlanChange {
    plan: String,
}

/// `{ok, account}` on the new plan; 409 when the account owns more applications than it
/// allows.
async fn set_plan(
    _: Admin,
    State(state): State<AppState>,
    Path(name): Path<String>,
    Json(body): Json<PlanChange>,
) -> ApiResult<Response> {
    let name = account_param(&name)?;
    let plan: Plan = body.plan.parse()?;
    state.services.registry.set_plan(&name, plan).await?;
    state.quotas.forget_all();
    let usage = fetch_account(&state, &name).await?;
    Ok(reply::json(
        StatusCode::OK,
        &json!({"ok": true, "account": account_json(&usage)}),
    ))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NewApp {
    name: String,
    account: String,
}

/// 201 `{ok, app}`; 403 over the plan's limit or for another account than the caller's
/// own; 404 no such account; 409 name taken.
async fn create_app(
    caller: Caller,
    State(state): State<AppState>,
    Json(body): Json<NewApp>,
) -> ApiResult<Response> {
    let name: AppName = body.name.parse()?;
    let account: AccountName = body.account.parse()?;
    if !caller.may_see(Some(&account)) {
        return Err(Error::Forbidden(format!(
            "an account token creates applications of its own account only, not of \
             \"{account}\""
        ))
        .into());
    }
    let app = state.services.registry.create_app(&name, &account).await?;
    Ok(reply::json(
        StatusCode::CREATED,
        &json!({"ok": true, "app": app_json(&app)}),
    ))
}

#[derive(Debug, Deserialize)]
struct AppsFilter {
    account: Option<String>,
    #[serde(flatten)]
    paging: Paging,
}

/// `{ok, apps, next}` ordered by name, of one account when `?account=` is given, a page of
/// them with `?limit=&after=`.
async fn list_apps(
    caller: Caller,
    State(state): State<AppState>,
    Query(filter): Query<AppsFilter>,
) -> ApiResult<Response> {
    let mut account = filter.account.as_deref().map(account_param).transpose()?;
    if let Caller::Account(me) = &caller {
        match &account {
            Some(a) if a != me => return Err(answers::account_missing(a).into()),
            _ => account = Some(me.clone()),
        }
    }
    let apps = state.services.registry.list_apps(account.as_ref()).await?;
    let (apps, next) = filter.paging.by_key(apps, |a| a.name.to_string())?;
    let apps: Vec<Value> = apps.iter().map(app_json).collect();
    Ok(reply::json(
        StatusCode::OK,
        &paged(json!({"ok": true, "apps": apps}), &filter.paging, next),
    ))
}

async fn fetch_app(state: &AppState, name: &AppName) -> Result<App, Error> {
    state
        .services
        .registry
        .get_app(name)
        .await?
        .ok_or_else(|| answers::app_missing(name))
}

/// The application `name` if the caller may see it; another account's application is
/// missing, as if it did not exist.
async fn owned_app(state: &AppState, caller: &Caller, name: &AppName) -> Result<App, Error> {
    let app = fetch_app(state, name).await?;
    if caller.may_see(app.account.as_ref()) {
        Ok(app)
    } else {
        Err(answers::app_missing(name))
    }
}

/// `{ok, app}`.
async fn get_app(
    caller: Caller,
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> ApiResult<Response> {
    let app = owned_app(&state, &caller, &app_param(&name)?).await?;
    Ok(reply::json(
        StatusCode::OK,
        &json!({"ok": true, "app": app_json(&app)}),
    ))
}

/// `{ok}`: the application, its keys and its instances are gone from the registry (and
/// every cache) before the instances' contents are dropped.
async fn delete_app(
    caller: Caller,
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> ApiResult<Response> {
    let name = app_param(&name)?;
    owned_app(&state, &caller, &name).await?;
    let (_, instances) = state.instances.delete_app(&name).await?;
    state.auth.keys.forget_app(&name);
    state.instances.drop_contents(&instances).await?;
    Ok(reply::ok(StatusCode::OK))
}

/// 201 `{ok, key, secret, connectionString}`.
async fn create_key(
    caller: Caller,
    State(state): State<AppState>,
    BaseUrl(base): BaseUrl,
    Path(name): Path<String>,
) -> ApiResult<Response> {
    let app = app_param(&name)?;
    owned_app(&state, &caller, &app).await?;
    let key = state.services.registry.create_key(&app).await?;
    // A registry of one node reports no changes: forget here that the key was missing.
    state.auth.keys.created(&key.key);
    let cs = ConnectionString::new(&base, &key)?;
    Ok(reply::json(
        StatusCode::CREATED,
        &json!({
            "ok": true,
            "key": key.key.as_str(),
            "secret": key.secret.expose(),
            "connectionString": cs.to_string(),
        }),
    ))
}

/// `{ok, keys, next}`, oldest first, secrets redacted, a page of them with
/// `?limit=&after=<key>`.
async fn list_keys(
    caller: Caller,
    State(state): State<AppState>,
    Path(name): Path<String>,
    Query(paging): Query<Paging>,
) -> ApiResult<Response> {
    let app = app_param(&name)?;
    owned_app(&state, &caller, &app).await?;
    let keys = state.services.registry.list_keys(&app).await?;
    let (keys, next) = paging.by_position(keys, |k| k.key.as_str().to_owned(), "keys")?;
    let keys: Vec<Value> = keys
        .iter()
        .map(|k| {
            json!({
                "key": k.key.as_str(),
                "secret": k.secret.redacted(),
                "created": time(Some(k.created_ms)),
                "lastUsed": time(last_used(&state, k)),
                "revoked": time(k.revoked_ms),
            })
        })
        .collect();
    Ok(reply::json(
        StatusCode::OK,
        &paged(json!({"ok": true, "keys": keys}), &paging, next),
    ))
}

#[derive(Debug, Deserialize)]
struct KeyPath {
    app: String,
    key: String,
}

/// `{ok, key, secret, connectionString, created, lastUsed, revoked}`, the secret in full.
async fn reveal_key(
    caller: Caller,
    State(state): State<AppState>,
    BaseUrl(base): BaseUrl,
    Path(p): Path<KeyPath>,
) -> ApiResult<Response> {
    let app = app_param(&p.app)?;
    owned_app(&state, &caller, &app).await?;
    let id: KeyId = p.key.parse().map_err(|_| no_such_key(&app, &p.key))?;
    let key = state
        .services
        .registry
        .get_key(&id)
        .await?
        .filter(|k| k.app == app)
        .ok_or_else(|| no_such_key(&app, &p.key))?;
    let cs = ConnectionString::new(&base, &key)?;
    Ok(reply::json(
        StatusCode::OK,
        &json!({
            "ok": true,
            "key": key.key.as_str(),
            "secret": key.secret.expose(),
            "connectionString": cs.to_string(),
            "created": time(Some(key.created_ms)),
            "lastUsed": time(last_used(&state, &key)),
            "revoked": time(key.revoked_ms),
        }),
    ))
}

/// `{ok}`; tokens signed with the key fail from now on. Revoking twice is fine.
async fn revoke_key(
    caller: Caller,
    State(state): State<AppState>,
    Path(p): Path<KeyPath>,
) -> ApiResult<Response> {
    let app = app_param(&p.app)?;
    owned_app(&state, &caller, &app).await?;
    let id: KeyId = p.key.parse().map_err(|_| no_such_key(&app, &p.key))?;
    state.services.registry.revoke_key(&app, &id).await?;
    state.auth.keys.revoked(&id);
    Ok(reply::ok(StatusCode::OK))
}

/// `{ok, instances: [{type, name, config, created}], next}` ordered by type and name, a
/// page of them with `?limit=&after=<type>/<name>`.
async fn list_instances(
    caller: Caller,
    State(state): State<AppState>,
    Path(name): Path<String>,
    Query(paging): Query<Paging>,
) -> ApiResult<Response> {
    let app = app_param(&name)?;
    owned_app(&state, &caller, &app).await?;
    let instances = state.services.registry.list_instances(Some(&app)).await?;
    // `/` sorts before every letter of a type's name, so this is type, then name.
    let (instances, next) =
        paging.by_key(instances, |i| format!("{}/{}", i.kind().as_str(), i.name))?;
    let instances: Vec<Value> = instances
        .iter()
        .map(|i| {
            json!({
                "type": i.kind(),
                "name": i.name,
                "config": i.config.to_public_json(),
                "created": time(Some(i.created_ms)),
            })
        })
        .collect();
    Ok(reply::json(
        StatusCode::OK,
        &paged(json!({"ok": true, "instances": instances}), &paging, next),
    ))
}

/// `{ok, version, started, uptime, places, instances}`: what this node runs, since when,
/// where each store keeps its data, and how many instances of each type exist.
async fn node(_: Admin, State(state): State<AppState>) -> ApiResult<Response> {
    let all = state.services.registry.list_instances(None).await?;
    let mut instances = serde_json::Map::new();
    for kind in ServiceType::ALL {
        let n = all.iter().filter(|i| i.kind() == kind).count();
        instances.insert(kind.as_str().to_owned(), json!(n));
    }
    let places: serde_json::Map<String, Value> = state
        .config
        .places
        .iter()
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect();
    let now = state.clock.now_ms();
    Ok(reply::json(
        StatusCode::OK,
        &json!({
            "ok": true,
            "version": env!("CARGO_PKG_VERSION"),
            "started": time(Some(state.started_ms)),
            "uptime": (now - state.started_ms).max(0) / 1000,
            "places": places,
            "instances": instances,
        }),
    ))
}

/// Longest life of a token minted by [`mint_token`], in seconds.
const MAX_MINTED_TTL_S: u64 = 3600;
/// Life of a minted token when the call names none, in seconds.
const DEFAULT_MINTED_TTL_S: u64 = 900;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct MintRequest {
    ttl: Option<u64>,
}

/// 201 `{ok, token, key, expires}`: a short-lived access token for the application, signed
/// with its newest key that is not revoked (what a holder of the admin token could do by
/// revealing the key and signing, in one call). 409 when every key is revoked or there is
/// none. `ttl` in seconds, 1 to 3600 (default 900), never past `--jwt-max-ttl`.
async fn mint_token(
    caller: Caller,
    State(state): State<AppState>,
    Path(name): Path<String>,
    OptionalJson(body): OptionalJson<MintRequest>,
) -> ApiResult<Response> {
    let app = app_param(&name)?;
    owned_app(&state, &caller, &app).await?;
    let ttl = body.and_then(|b| b.ttl).unwrap_or(DEFAULT_MINTED_TTL_S);
    if ttl == 0 || ttl > MAX_MINTED_TTL_S {
        return Err(Error::Invalid(format!(
            "ttl {ttl} is not valid: give a number of seconds from 1 to {MAX_MINTED_TTL_S}"
        ))
        .into());
    }
    let ttl = state
        .config
        .jwt_max_ttl
        .map_or(ttl, |max| ttl.min(max.as_secs().max(1)));
    let keys = state.services.registry.list_keys(&app).await?;
    let key = keys
        .iter()
        .filter(|k| k.revoked_ms.is_none())
        .max_by_key(|k| k.created_ms)
        .ok_or_else(|| {
            Error::Conflict(format!(
                "application \"{app}\" has no access key that is not revoked: create one with \
                 POST /_admin/apps/{app}/keys"
            ))
        })?;
    let now_s = state.clock.now_ms() / 1000;
    let exp_s = now_s + i64::try_from(ttl).unwrap_or(0);
    let token = quintet_core::jwt::sign_hs256(
        key.secret.expose().as_bytes(),
        &json!({"sub": key.key.as_str(), "iat": now_s, "exp": exp_s}),
    );
    Ok(reply::json(
        StatusCode::CREATED,
        &json!({
            "ok": true,
            "token": token,
            "key": key.key.as_str(),
            "expires": time(Some(exp_s * 1000)),
        }),
    ))
}

/// `{ok, role: "admin"}`, or `{ok, role: "account", account}` for an account token: who
/// the token signs in as (the console asks after sign-in).
async fn me(caller: Caller, State(state): State<AppState>) -> ApiResult<Response> {
    Ok(match caller {
        Caller::Admin => reply::json(StatusCode::OK, &json!({"ok": true, "role": "admin"})),
        Caller::Account(name) => {
            let usage = fetch_account(&state, &name).await?;
            reply::json(
                StatusCode::OK,
                &json!({"ok": true, "role": "account", "account": account_json(&usage)}),
            )
        }
    })
}

fn account_token_json(t: &AccountToken) -> Value {
    json!({
        "id": t.id.as_str(),
        "account": t.account,
        "created": time(Some(t.created_ms)),
        "revoked": time(t.revoked_ms),
    })
}

/// 201 `{ok, id, token, created}`: a new account token, its text shown this once (only its
/// digest is kept).
async fn create_account_token(
    _: Admin,
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> ApiResult<Response> {
    let name = account_param(&name)?;
    let (token, text) = AccountToken::generate(&name, state.clock.now_ms())?;
    state.services.registry.create_account_token(&token).await?;
    Ok(reply::json(
        StatusCode::CREATED,
        &json!({
            "ok": true,
            "id": token.id.as_str(),
            "token": text,
            "account": token.account,
            "created": time(Some(token.created_ms)),
        }),
    ))
}

/// `{ok, tokens: [{id, account, created, revoked}], next}`, oldest first, never their
/// text, a page of them with `?limit=&after=<id>`.
async fn list_account_tokens(
    _: Admin,
    State(state): State<AppState>,
    Path(name): Path<String>,
    Query(paging): Query<Paging>,
) -> ApiResult<Response> {
    let name = account_param(&name)?;
    let tokens = state.services.registry.list_account_tokens(&name).await?;
    let (tokens, next) = paging.by_position(tokens, |t| t.id.as_str().to_owned(), "tokens")?;
    let tokens: Vec<Value> = tokens.iter().map(account_token_json).collect();
    Ok(reply::json(
        StatusCode::OK,
        &paged(json!({"ok": true, "tokens": tokens}), &paging, next),
    ))
}

#[derive(Debug, Deserialize)]
struct TokenPath {
    account: String,
    id: String,
}

/// `{ok}`: the token signs in nobody from now on. Revoking twice is fine.
async fn revoke_account_token(
    _: Admin,
    State(state): State<AppState>,
    Path(p): Path<TokenPath>,
) -> ApiResult<Response> {
    let account = account_param(&p.account)?;
    let id: AccountTokenId =
        p.id.parse()
            .map_err(|_| quintet_core::account_tokens::token_missing(&account, &p.id))?;
    state
        .services
        .registry
        .revoke_account_token(&account, &id)
        .await?;
    Ok(reply::ok(StatusCode::OK))
}
