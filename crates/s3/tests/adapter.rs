//! S3BlobStore beyond the port's suite, on a real S3 store (SeaweedFS from
//! `scripts/engines`, which checks request signatures): multipart uploads, pre-signed URLs
//! used by a plain HTTP client, the registry binding and start-up checks.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use quintet_core::{
    AppName, Error, Instance, InstanceConfig, InstanceId,
    conformance::storage::{body, collect, failing_body},
    object::{ObjectPath, PresignMethod, RangeSpec},
    ports::{
        Lifecycle,
        storage::{BlobStore, ListQuery, Presign},
    },
};
use quintet_s3::{S3BlobStore, S3Config, store::PART_SIZE};

fn config(test: &str) -> Option<S3Config> {
    let s3 = quintet_engine_test::s3(test)?;
    Some(S3Config {
        bucket: s3.bucket,
        prefix: s3.prefix,
        endpoint: Some(s3.endpoint),
        region: s3.region,
        access_key_id: Some(s3.key),
        secret_access_key: Some(s3.secret),
        connect_timeout: quintet_s3::config::DEFAULT_CONNECT_TIMEOUT,
    })
}

async fn fresh(store: &S3BlobStore, id: i64) -> Instance {
    let inst = Instance {
        id: InstanceId(id),
        app: "shop".parse::<AppName>().unwrap(),
        name: "media".parse().unwrap(),
        config: InstanceConfig::Storage,
        created_ms: 0,
    };
    store.create_instance(&inst).await.unwrap();
    inst
}

fn p(s: &str) -> ObjectPath {
    s.parse().unwrap()
}

/// 12 MiB in 64 KiB chunks: more than two parts.
fn big() -> (Vec<u8>, Vec<Vec<u8>>) {
    let whole: Vec<u8> = (0..12 * 1024 * 1024u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let chunks = whole.chunks(64 * 1024).map(<[u8]>::to_vec).collect();
    (whole, chunks)
}

#[tokio::test]
async fn objects_larger_than_a_part_go_up_in_parts_and_round_trip() {
    let Some(config) = config("s3_multipart") else {
        return;
    };
    let store = S3BlobStore::open(&config).await.unwrap();
    let inst = fresh(&store, 1).await;
    let (whole, chunks) = big();
    assert!(whole.len() > 2 * PART_SIZE);
    let meta = store
        .put(&inst, &p("video/clip.bin"), "video/mp4", body(chunks))
        .await
        .unwrap();
    assert_eq!(meta.size, whole.len() as u64);
    assert_eq!(meta.content_type, "video/mp4");
    // S3 tags a multipart object's ETag with its part count.
    assert!(meta.etag.ends_with("-3"), "{meta:?}");
    let obj = store
        .get(&inst, &p("video/clip.bin"), None)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(obj.meta, meta);
    let got = collect(obj.body).await;
    assert!(
        got == whole,
        "the 12 MiB object did not round-trip byte for byte"
    );

    // A range across the boundary of the first two parts.
    let (a, b) = (PART_SIZE as u64 - 10, PART_SIZE as u64 + 9);
    let obj = store
        .get(&inst, &p("video/clip.bin"), Some(RangeSpec::FromTo(a, b)))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(obj.meta.size, whole.len() as u64);
    let r = obj.range.unwrap();
    assert_eq!((r.start, r.end), (a, b));
    assert_eq!(collect(obj.body).await, whole[a as usize..=b as usize]);
    let obj = store
        .get(&inst, &p("video/clip.bin"), Some(RangeSpec::Suffix(3)))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(collect(obj.body).await, whole[whole.len() - 3..]);
    let e = store
        .get(
            &inst,
            &p("video/clip.bin"),
            Some(RangeSpec::From(whole.len() as u64)),
        )
        .await
        .map(|o| o.map(|o| o.meta));
    assert!(matches!(e, Err(Error::RangeNotSatisfiable(_))), "{e:?}");
    store.drop_instance(&inst).await.unwrap();
}

#[tokio::test]
async fn a_multipart_upload_that_fails_leaves_the_previous_object() {
    let Some(config) = config("s3_multipart_abort") else {
        return;
    };
    let store = S3BlobStore::open(&config).await.unwrap();
    let inst = fresh(&store, 2).await;
    let before = store
        .put(&inst, &p("f"), "text/plain", body(vec![b"before".to_vec()]))
        .await
        .unwrap();
    let (_, chunks) = big();
    let failed = store
        .put(&inst, &p("f"), "text/plain", failing_body(chunks.clone()))
        .await;
    assert!(matches!(failed, Err(Error::BadRequest(_))), "{failed:?}");
    assert_eq!(store.head(&inst, &p("f")).await.unwrap(), Some(before));
    let failed = store
        .put(&inst, &p("g"), "text/plain", failing_body(chunks))
        .await;
    assert!(failed.is_err());
    assert_eq!(store.head(&inst, &p("g")).await.unwrap(), None);
    let all = ListQuery {
        prefix: "",
        after: None,
        limit: 10,
    };
    let listed: Vec<_> = store
        .list(&inst, all)
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.path.as_str().to_owned())
        .collect();
    assert_eq!(listed, ["f"]);
    store.drop_instance(&inst).await.unwrap();
}

#[tokio::test]
async fn presigned_urls_are_the_stores_own_and_work_with_a_plain_client() {
    let Some(config) = config("s3_presign") else {
        return;
    };
    let endpoint = config.endpoint.clone().unwrap();
    let store = S3BlobStore::open(&config).await.unwrap();
    let inst = fresh(&store, 3).await;
    let path = p("up/loaded file.txt");
    let hour = Duration::from_secs(3600);
    let quintet = "http://127.0.0.1:6363";
    let put = store
        .presign(&inst, &path, PresignMethod::Put, hour, quintet)
        .await
        .unwrap();
    let get = store
        .presign(&inst, &path, PresignMethod::Get, hour, quintet)
        .await
        .unwrap();
    for url in [&put, &get] {
        assert!(url.starts_with(&endpoint), "{url} points at the S3 store");
        assert!(url.contains("X-Amz-Signature="), "{url}");
    }
    let http = reqwest::Client::new();
    let res = http
        .put(&put)
        .header("content-type", "text/plain")
        .body("sent straight to S3")
        .send()
        .await
        .unwrap();
    assert!(res.status().is_success(), "{}", res.status());
    let meta = store.head(&inst, &path).await.unwrap().unwrap();
    assert_eq!(meta.size, 19);
    let res = http.get(&get).send().await.unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(res.text().await.unwrap(), "sent straight to S3");
    let res = http
        .get(&get)
        .header("range", "bytes=5-11")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 206);
    assert_eq!(res.text().await.unwrap(), "straigh");

    // The store checks the signature: a URL for another object, a changed expiry or a
    // GET URL used to PUT are refused.
    let other = get.replace("loaded%20file", "loaded%20other");
    assert_ne!(other, get);
    let longer = get.replace("X-Amz-Expires=3600", "X-Amz-Expires=7200");
    assert_ne!(longer, get);
    for tampered in [other, longer] {
        let res = http.get(&tampered).send().await.unwrap();
        assert_eq!(res.status(), 403, "{tampered}");
    }
    let res = http.put(&get).body("overwrite").send().await.unwrap();
    assert_eq!(res.status(), 403);
    let res = http.get(&get).send().await.unwrap();
    assert_eq!(res.text().await.unwrap(), "sent straight to S3");

    // quintet never serves these URLs, so its own route refuses everything.
    let e = store
        .check_presigned(&inst, &path, PresignMethod::Get, i64::MAX, "00")
        .await
        .unwrap_err();
    assert!(
        matches!(&e, Error::Forbidden(m) if m.contains("point at the S3 store")),
        "{e:?}"
    );
    store.drop_instance(&inst).await.unwrap();
}

#[tokio::test]
async fn a_prefix_belongs_to_one_registry() {
    let Some(config) = config("s3_bind") else {
        return;
    };
    let store = S3BlobStore::open(&config).await.unwrap();
    store.bind("postgres:one").await.unwrap();
    store.bind("postgres:one").await.unwrap();
    let e = store.bind("postgres:two").await.unwrap_err();
    assert!(
        matches!(&e, Error::Conflict(m) if m.contains("postgres:one")),
        "{e:?}"
    );
}

#[tokio::test]
async fn wrong_credentials_fail_at_open() {
    let Some(mut config) = config("s3_bad_credentials") else {
        return;
    };
    config.secret_access_key = Some("not-the-secret".into());
    let e = S3BlobStore::open(&config).await.unwrap_err();
    assert!(
        matches!(&e, Error::Unavailable(m) if m.contains("cannot list")),
        "{e:?}"
    );
    assert!(!e.to_string().contains("not-the-secret"), "{e}");
    let mut unreachable = config.clone();
    unreachable.endpoint = Some("http://127.0.0.1:1".into());
    let e = S3BlobStore::open(&unreachable).await.unwrap_err();
    assert!(
        matches!(&e, Error::Unavailable(m) if m.contains("127.0.0.1:1")),
        "{e:?}"
    );
    config.secret_access_key = None;
    let e = S3BlobStore::open(&config).await.unwrap_err();
    assert!(e.to_string().contains("AWS_SECRET_ACCESS_KEY"), "{e}");
}

#[tokio::test]
async fn drop_and_sweep_remove_objects_of_the_instance_only() {
    let Some(config) = config("s3_drop") else {
        return;
    };
    let store = S3BlobStore::open(&config).await.unwrap();
    let keep = fresh(&store, 10).await;
    let orphan = fresh(&store, 11).await;
    for inst in [&keep, &orphan] {
        for path in ["a", "a/b", "c/d/e"] {
            store
                .put(inst, &p(path), "text/plain", body(vec![b"x".to_vec()]))
                .await
                .unwrap();
        }
    }
    assert_eq!(
        store
            .sweep(&quintet_core::ports::Keep::only([keep.id]))
            .await
            .unwrap(),
        1
    );
    let all = ListQuery {
        prefix: "",
        after: None,
        limit: 10,
    };
    assert!(store.list(&orphan, all).await.unwrap().is_empty());
    assert_eq!(store.list(&keep, all).await.unwrap().len(), 3);
    store.drop_instance(&keep).await.unwrap();
    assert!(store.list(&keep, all).await.unwrap().is_empty());
    assert_eq!(
        store
            .sweep(&quintet_core::ports::Keep::only([]))
            .await
            .unwrap(),
        0
    );
    let e = store.delete(&keep, &p("a")).await.unwrap_err();
    assert_eq!(
        e.to_string(),
        Error::not_found("object \"a\" does not exist in storage instance \"media\"").to_string()
    );
}

#[tokio::test]
async fn long_paths_work_up_to_the_key_limit_of_s3() {
    let Some(config) = config("s3_long_paths") else {
        return;
    };
    let store = S3BlobStore::open(&config).await.unwrap();
    let inst = fresh(&store, 5).await;
    let long = format!(
        "{}/{}/{}/{}",
        "w".repeat(250),
        "x".repeat(250),
        "y".repeat(250),
        "z".repeat(200)
    );
    store
        .put(&inst, &p(&long), "text/plain", body(vec![b"deep".to_vec()]))
        .await
        .unwrap();
    let obj = store.get(&inst, &p(&long), None).await.unwrap().unwrap();
    assert_eq!(collect(obj.body).await, b"deep");
    let all = ListQuery {
        prefix: "",
        after: None,
        limit: 10,
    };
    let listed = store.list(&inst, all).await.unwrap();
    assert_eq!(listed[0].path.as_str(), long);

    // Within the port's 1024 bytes, but twice as long once every `/` is escaped.
    let deep = vec!["a"; 500].join("/");
    let e = store
        .put(&inst, &p(&deep), "text/plain", body(vec![b"x".to_vec()]))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, Error::Invalid(m) if m.contains("too long")),
        "{e:?}"
    );
    store.drop_instance(&inst).await.unwrap();
}
