//! Authentication of the application form (access keys), the domain form (`--auth`) and the
//! public paths: every way a token can be wrong, with the exact answer.

use std::sync::Arc;

use quintet_core::{ManualClock, jwt};
use quintet_testkit::{AppKey, Reply, TestServer};
use reqwest::Method;
use serde_json::{Value, json};

/// 2023-11-14T22:13:20Z
const NOW_MS: i64 = 1_700_000_000_000;
const NOW: i64 = NOW_MS / 1000;

async fn server_at_now() -> (TestServer, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(NOW_MS));
    let s = TestServer::builder().clock(clock.clone()).start().await;
    (s, clock)
}

fn unauthenticated(msg: &str) -> Value {
    json!({"ok": false, "status": 401, "msg": msg})
}

/// `PUT /<app>/data/<name>` with `auth` as the Authorization header (none when `None`).
async fn put_with(s: &TestServer, app: &str, auth: Option<&[u8]>) -> Reply {
    let mut req = s.request(Method::PUT, &format!("/{app}/data/things"));
    if let Some(value) = auth {
        req = req.header(
            "authorization",
            reqwest::header::HeaderValue::from_bytes(value).unwrap(),
        );
    }
    s.send(req).await
}

async fn put_token(s: &TestServer, app: &str, token: &str) -> Reply {
    put_with(s, app, Some(format!("Bearer {token}").as_bytes())).await
}

#[tokio::test]
async fn the_application_form_needs_a_token() {
    let (s, _) = server_at_now().await;
    let k = s.new_app().await;
    let r = put_with(&s, &k.app, None).await.expect(401);
    let needs = format!(
        "a JWT signed with one of application \"{}\"'s access keys",
        k.app
    );
    assert_eq!(
        r.body,
        unauthenticated(&format!(
            "this request needs the header Authorization: Bearer <token>, with {needs}"
        ))
    );
    assert_eq!(r.header("www-authenticate"), Some("Bearer"));
    // Nothing was created: the right token creates it now, once.
    put_token(&s, &k.app, &s.token(&k)).await.expect(201);
    put_token(&s, &k.app, &s.token(&k)).await.expect(409);
}

#[tokio::test]
async fn malformed_authorization_headers_are_401() {
    let (s, _) = server_at_now().await;
    let k = s.new_app().await;
    let token = s.token(&k);
    let needs = format!(
        "a JWT signed with one of application \"{}\"'s access keys",
        k.app
    );
    let malformed = format!("the Authorization header must be \"Bearer <token>\", with {needs}");
    let cases: Vec<(Vec<u8>, String)> = vec![
        (format!("Basic {token}").into_bytes(), malformed.clone()),
        (token.clone().into_bytes(), malformed.clone()),
        (b"Bearer".to_vec(), malformed.clone()),
        (b"Bearer \xff\xfe".to_vec(), malformed.clone()),
        (
            format!("Bearer {token} extra").into_bytes(),
            malformed.clone(),
        ),
        (
            b"Bearer not-a-jwt".to_vec(),
            "the access token is not a JWT: expected three base64url parts separated by dots"
                .into(),
        ),
        (
            b"Bearer a.b.c".to_vec(),
            "the access token's header is not a base64url-encoded JSON object".into(),
        ),
    ];
    for (value, msg) in cases {
        let r = put_with(&s, &k.app, Some(&value)).await.expect(401);
        assert_eq!(r.body, unauthenticated(&msg), "{value:?}");
    }
    // Two Authorization headers are ambiguous.
    let req = s
        .request(Method::PUT, &format!("/{}/data/things", k.app))
        .header("authorization", format!("Bearer {token}"))
        .header("authorization", format!("Bearer {token}"));
    let r = s.send(req).await.expect(401);
    assert_eq!(
        r.body,
        unauthenticated("send one Authorization header, not several")
    );
    // The scheme is case-insensitive.
    put_with(&s, &k.app, Some(format!("bearer {token}").as_bytes()))
        .await
        .expect(201);
}

#[tokio::test]
async fn only_hs256_is_accepted() {
    let (s, _) = server_at_now().await;
    let k = s.new_app().await;
    let claims = json!({"sub": k.key, "exp": NOW + 600});
    // `none`, with the empty signature such tokens carry.
    let none = {
        let signed = jwt::sign(b"", &json!({"alg": "none"}), &claims);
        let (unsigned, _) = signed.rsplit_once('.').unwrap();
        format!("{unsigned}.")
    };
    let r = put_token(&s, &k.app, &none).await.expect(401);
    assert_eq!(
        r.body,
        unauthenticated("the access token is signed with \"none\"; quintet accepts only HS256")
    );
    // Algorithm confusion: an asymmetric or stronger alg "signed" with the secret as an
    // HMAC key is still refused, because the header never chooses the check.
    for alg in ["RS256", "ES256", "PS256", "EdDSA", "HS384", "HS512"] {
        let t = jwt::sign(
            k.secret.as_bytes(),
            &json!({"alg": alg, "typ": "JWT"}),
            &claims,
        );
        let r = put_token(&s, &k.app, &t).await.expect(401);
        assert_eq!(
            r.body,
            unauthenticated(&format!(
                "the access token is signed with \"{alg}\"; quintet accepts only HS256"
            ))
        );
    }
    // A token that brings its own key in the header does not get to use it.
    let t = jwt::sign(
        b"attacker",
        &json!({"alg": "HS256", "jwk": {"kty": "oct", "k": "YXR0YWNrZXI"}}),
        &claims,
    );
    put_token(&s, &k.app, &t).await.expect(401);
}

#[tokio::test]
async fn wrong_secret_and_unknown_keys_are_401() {
    let (s, _) = server_at_now().await;
    let k = s.new_app().await;
    let wrong = jwt::sign_hs256(b"not the secret", &json!({"sub": k.key, "exp": NOW + 600}));
    let r = put_token(&s, &k.app, &wrong).await.expect(401);
    assert_eq!(
        r.body,
        unauthenticated(
            "the access token's signature is not valid: sign it with HS256 and the right secret"
        )
    );
    let unknown = jwt::sign_hs256(
        b"x",
        &json!({"sub": "qk_000000000000000000000000", "exp": NOW + 600}),
    );
    let r = put_token(&s, &k.app, &unknown).await.expect(401);
    assert_eq!(
        r.body,
        unauthenticated(&format!(
            "key \"qk_000000000000000000000000\" does not exist: create one with `quintet key create {}`",
            k.app
        ))
    );
    let no_sub = k.sign(json!({"exp": NOW + 600}));
    let r = put_token(&s, &k.app, &no_sub).await.expect(401);
    assert_eq!(
        r.body,
        unauthenticated("the access token has no sub claim: set sub to the key of an access key")
    );
    let bad_sub = k.sign(json!({"sub": "not a key", "exp": NOW + 600}));
    let r = put_token(&s, &k.app, &bad_sub).await.expect(401);
    assert_eq!(
        r.body,
        unauthenticated(
            "the access token's sub is not an access key: set sub to the key of an access key"
        )
    );
}

#[tokio::test]
async fn exp_is_required_with_sixty_seconds_of_leeway() {
    let (s, clock) = server_at_now().await;
    let k = s.new_app().await;
    let r = put_token(&s, &k.app, &k.sign(json!({"sub": k.key})))
        .await
        .expect(401);
    assert_eq!(
        r.body,
        unauthenticated("the access token has no exp claim; give it an expiry time")
    );
    let token = k.sign(json!({"sub": k.key, "exp": NOW}));
    clock.advance(59_999);
    put_token(&s, &k.app, &token).await.expect(201);
    clock.advance(1);
    let r = put_token(&s, &k.app, &token).await.expect(401);
    assert_eq!(
        r.body,
        unauthenticated("the access token expired at 2023-11-14T22:13:20.000Z; sign a new one")
    );
}

#[tokio::test]
async fn nbf_and_iat_are_honoured() {
    let (s, _) = server_at_now().await;
    let k = s.new_app().await;
    let early = k.sign(json!({"sub": k.key, "exp": NOW + 600, "nbf": NOW + 61}));
    let r = put_token(&s, &k.app, &early).await.expect(401);
    assert_eq!(
        r.body,
        unauthenticated("the access token is not valid before 2023-11-14T22:14:21.000Z (nbf)")
    );
    let future = k.sign(json!({"sub": k.key, "exp": NOW + 600, "iat": NOW + 61}));
    let r = put_token(&s, &k.app, &future).await.expect(401);
    assert_eq!(
        r.body,
        unauthenticated(
            "the access token says it was issued at 2023-11-14T22:14:21.000Z (iat), which is in \
             the future; check the clock of the machine that signs tokens"
        )
    );
    let within_leeway =
        k.sign(json!({"sub": k.key, "exp": NOW + 600, "nbf": NOW + 60, "iat": NOW + 60}));
    put_token(&s, &k.app, &within_leeway).await.expect(201);
}

#[tokio::test]
async fn a_key_of_another_application_is_403() {
    let (s, _) = server_at_now().await;
    let mine = s.new_app().await;
    let theirs = s.new_app().await;
    let r = put_token(&s, &mine.app, &s.token(&theirs))
        .await
        .expect(403);
    assert_eq!(
        r.body,
        json!({"ok": false, "status": 403, "msg": format!(
            "key \"{}\" does not belong to application \"{}\": use one of \"{}\"'s keys",
            theirs.key, mine.app, mine.app
        )})
    );
    // Also for an application that does not exist: nothing is learnt about names.
    let r = put_token(&s, "nobody", &s.token(&theirs)).await.expect(403);
    assert_eq!(r.body["status"], 403);
}

#[tokio::test]
async fn a_revoked_key_fails_from_the_moment_it_is_revoked() {
    let (s, _) = server_at_now().await;
    let k = s.new_app().await;
    let other = s.new_key(&k.account, &k.app).await;
    let token = s.token(&k);
    put_token(&s, &k.app, &token).await.expect(201);
    s.admin(
        Method::DELETE,
        &format!("/_admin/apps/{}/keys/{}", k.app, k.key),
        None,
    )
    .await
    .expect(200);
    let r = s
        .send(
            s.request(Method::DELETE, &format!("/{}/data/things", k.app))
                .bearer_auth(&token),
        )
        .await
        .expect(401);
    assert_eq!(
        r.body,
        unauthenticated(&format!(
            "key \"{}\" was revoked: create a new one with `quintet key create {}`",
            k.key, k.app
        ))
    );
    // The application's other keys keep working, and the revocation survives a restart.
    let mut s = s;
    s.restart().await;
    put_token(&s, &k.app, &s.token(&k)).await.expect(401);
    let r = s
        .send(s.as_app(
            &other,
            s.request(Method::DELETE, &format!("/{}/data/things", k.app)),
        ))
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
}

#[tokio::test]
async fn hyper_connect_tokens_work_as_signed() {
    // hyper-connect (npm) signs {sub, exp: now + 10 min} with header {"alg":"HS256"} only.
    let (s, _) = server_at_now().await;
    let k = s.new_app().await;
    let t = jwt::sign(
        k.secret.as_bytes(),
        &json!({"alg": "HS256"}),
        &json!({"sub": k.key, "exp": NOW + 600}),
    );
    put_token(&s, &k.app, &t).await.expect(201);
    // djwt (the Deno build) writes a non-standard `type` header key.
    let t = jwt::sign(
        k.secret.as_bytes(),
        &json!({"alg": "HS256", "type": "JWT"}),
        &json!({"sub": k.key, "exp": NOW + 300}),
    );
    put_token(&s, &k.app, &t).await.expect(409);
}

#[tokio::test]
async fn every_service_type_is_created_and_destroyed_in_the_application_form() {
    let s = TestServer::start().await;
    let k = s.new_app().await;
    let configs = [
        ("data", None),
        ("cache", None),
        ("search", Some(json!({"fields": ["title"]}))),
        (
            "queue",
            Some(json!({"target": "https://worker.example/jobs", "secret": "s"})),
        ),
        ("storage", None),
    ];
    for (kind, config) in configs {
        let path = format!("/{}/{kind}/default", k.app);
        let put = |config: Option<Value>| {
            let req = s.as_app(&k, s.request(Method::PUT, &path));
            match config {
                Some(c) => req.json(&c),
                None => req,
            }
        };
        let r = s.send(put(config.clone())).await.expect(201);
        assert_eq!(r.body, json!({"ok": true}));
        s.send(put(config.clone())).await.expect(409);
        // The domain form's instance of the same name is another instance.
        s.put(&format!("/{kind}/default"), config.clone())
            .await
            .expect(201);
        s.send(s.as_app(&k, s.request(Method::DELETE, &path)))
            .await
            .expect(200);
        s.send(s.as_app(&k, s.request(Method::DELETE, &path)))
            .await
            .expect(404);
        s.delete(&format!("/{kind}/default")).await.expect(200);
    }
}

#[tokio::test]
async fn public_paths_need_no_token_in_any_mode() {
    let secret = "j".repeat(32);
    let s = TestServer::builder()
        .args(|a| {
            a.auth = Some(quintet_testkit::AuthMode::Jwt);
            a.jwt_secret = Some(secret.clone());
        })
        .start()
        .await;
    s.get("/").await.expect(200);
    s.get("/_health").await.expect(200);
    s.get("/_metrics").await.expect(200);
    // Pre-signed URLs carry their own signature: no token is asked for (no route yet).
    let r = s.get("/_presigned/storage/x").await;
    assert_ne!(r.status, 401, "{}", r.text);
    // A token on a public path is not even looked at.
    let r = s
        .send(s.request(Method::GET, "/").bearer_auth("garbage"))
        .await;
    assert_eq!(r.status, 200);
}

#[tokio::test]
async fn domain_form_jwt_mode() {
    let secret = "a-domain-secret-of-at-least-32-bytes!";
    let clock = Arc::new(ManualClock::new(NOW_MS));
    let s = TestServer::builder()
        .clock(clock)
        .args(|a| {
            a.auth = Some(quintet_testkit::AuthMode::Jwt);
            a.jwt_secret = Some(secret.to_owned());
            a.jwt_sub = Some("backend".to_owned());
        })
        .start()
        .await;
    let r = s.put("/data/d", None).await.expect(401);
    assert_eq!(
        r.body,
        unauthenticated(
            "this request needs the header Authorization: Bearer <token>, with a JWT signed \
             with the server's JWT secret"
        )
    );
    // Unknown routes answer 401 too: nothing is learnt without a token.
    s.get("/nope").await.expect(401);

    let token = |claims: Value| jwt::sign_hs256(secret.as_bytes(), &claims);
    let good = token(json!({"sub": "backend", "exp": NOW + 600}));
    s.send(s.request(Method::PUT, "/data/d").bearer_auth(&good))
        .await
        .expect(201);
    let other_sub = token(json!({"sub": "someone", "exp": NOW + 600}));
    let r = s
        .send(s.request(Method::PUT, "/data/d").bearer_auth(&other_sub))
        .await
        .expect(403);
    assert_eq!(
        r.body,
        json!({"ok": false, "status": 403,
               "msg": "the access token's sub is not the one this server accepts (--jwt-sub)"})
    );
    let expired = token(json!({"sub": "backend", "exp": NOW - 61}));
    s.send(s.request(Method::PUT, "/data/d").bearer_auth(&expired))
        .await
        .expect(401);
    let wrong = jwt::sign_hs256(
        b"another secret entirely, 32 bytes+",
        &json!({"sub": "backend", "exp": NOW + 600}),
    );
    s.send(s.request(Method::PUT, "/data/d").bearer_auth(&wrong))
        .await
        .expect(401);
    // The admin token is not a domain-form credential.
    s.send(s.as_admin(s.request(Method::DELETE, "/data/d")))
        .await
        .expect(401);
    // The application form is unaffected: it takes keys.
    let k = s.new_app().await;
    s.send(s.as_app(&k, s.request(Method::PUT, &format!("/{}/data/d", k.app))))
        .await
        .expect(201);
}

#[tokio::test]
async fn domain_form_jwt_mode_without_sub_accepts_any_sub() {
    let secret = "b".repeat(40);
    let clock = Arc::new(ManualClock::new(NOW_MS));
    let s = TestServer::builder()
        .clock(clock)
        .args(|a| {
            a.auth = Some(quintet_testkit::AuthMode::Jwt);
            a.jwt_secret = Some(secret.clone());
        })
        .start()
        .await;
    for claims in [
        json!({"exp": NOW + 60}),
        json!({"sub": "anyone", "exp": NOW + 60}),
    ] {
        let t = jwt::sign_hs256(secret.as_bytes(), &claims);
        let r = s
            .send(
                s.request(
                    Method::PUT,
                    &format!("/cache/c{}", claims["sub"].is_string()),
                )
                .bearer_auth(&t),
            )
            .await;
        assert_eq!(r.status, 201, "{claims}: {}", r.text);
    }
}

#[tokio::test]
async fn domain_form_without_auth_still_protects_applications() {
    let s = TestServer::start().await;
    s.put("/data/open", None).await.expect(201);
    let k: AppKey = s.new_app().await;
    put_with(&s, &k.app, None).await.expect(401);
}

/// `--jwt-max-ttl` refuses tokens valid for longer (an `exp` in year 9999 was accepted);
/// `--jwt-aud` requires the domain form's tokens to name this server.
#[tokio::test]
async fn the_server_may_cap_token_lifetimes_and_require_an_audience() {
    let clock = Arc::new(ManualClock::new(NOW_MS));
    let secret = "domain-secret-of-at-least-thirty-two-bytes";
    let s = TestServer::builder()
        .clock(clock)
        .args(|a| {
            a.jwt_max_ttl = Some(3600);
            a.auth = Some(quintet_testkit::AuthMode::Jwt);
            a.jwt_secret = Some(secret.into());
            a.jwt_aud = Some("quintet-prod".into());
        })
        .start()
        .await;
    let k = s.new_app().await;
    let forever = k.sign(json!({"sub": k.key, "exp": 253_402_300_799_i64}));
    let r = put_token(&s, &k.app, &forever).await.expect(401);
    assert!(
        r.body["msg"]
            .as_str()
            .unwrap()
            .contains("longer than this server accepts (3600 seconds from now, --jwt-max-ttl)"),
        "{}",
        r.text
    );
    let hour = k.sign(json!({"sub": k.key, "exp": NOW + 3600}));
    put_token(&s, &k.app, &hour).await.expect(201);

    let domain = |claims: Value| {
        let t = jwt::sign_hs256(secret.as_bytes(), &claims);
        s.send(s.request(Method::PUT, "/data/d").bearer_auth(t))
    };
    let r = domain(json!({"exp": NOW + 60})).await.expect(401);
    assert!(r.text.contains("--jwt-aud"), "{}", r.text);
    domain(json!({"exp": NOW + 60, "aud": "another-service"}))
        .await
        .expect(401);
    domain(json!({"exp": NOW + 86_400, "aud": "quintet-prod"}))
        .await
        .expect(401);
    domain(json!({"exp": NOW + 60, "aud": ["x", "quintet-prod"]}))
        .await
        .expect(201);
}
