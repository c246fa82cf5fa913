//! Conformance of [`ObjectStorage`]: every storage adapter runs each case (see [`super`]).

use std::{
    collections::VecDeque,
    pin::Pin,
    task::{Context, Poll},
    time::Duration,
};

use futures_core::Stream;

use crate::{
    Error, Instance, InstanceConfig,
    object::{ObjectPath, PresignMethod, RangeSpec},
    ports::storage::{ByteStream, Bytes, ListQuery, ObjectMeta, ObjectStorage},
};

use super::instance;

/// A body stream of `chunks`, in order.
pub fn body(chunks: Vec<Vec<u8>>) -> ByteStream {
    Box::pin(Chunks(
        chunks.into_iter().map(|c| Ok(Bytes::from(c))).collect(),
    ))
}

/// A body stream that yields `chunks`, then fails as an interrupted upload would.
pub fn failing_body(chunks: Vec<Vec<u8>>) -> ByteStream {
    let mut items: VecDeque<std::io::Result<Bytes>> =
        chunks.into_iter().map(|c| Ok(Bytes::from(c))).collect();
    items.push_back(Err(std::io::Error::new(
        std::io::ErrorKind::ConnectionReset,
        "the client went away",
    )));
    Box::pin(Chunks(items))
}

struct Chunks(VecDeque<std::io::Result<Bytes>>);

impl Stream for Chunks {
    type Item = std::io::Result<Bytes>;

    fn poll_next(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        Poll::Ready(self.0.pop_front())
    }
}

/// Read a stream to its end.
pub async fn collect(mut s: ByteStream) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(chunk) = std::future::poll_fn(|cx| s.as_mut().poll_next(cx)).await {
        out.extend_from_slice(&chunk.expect("object bytes"));
    }
    out
}

fn p(s: &str) -> ObjectPath {
    s.parse().expect("valid path")
}

async fn fresh(store: &dyn ObjectStorage) -> Instance {
    let inst = instance(InstanceConfig::Storage);
    store.create_instance(&inst).await.expect("create_instance");
    inst
}

async fn put(store: &dyn ObjectStorage, inst: &Instance, path: &str, bytes: &[u8]) -> ObjectMeta {
    store
        .put(inst, &p(path), "text/plain", body(vec![bytes.to_vec()]))
        .await
        .expect("put")
}

async fn read(store: &dyn ObjectStorage, inst: &Instance, path: &str) -> Option<Vec<u8>> {
    let obj = store.get(inst, &p(path), None).await.expect("get")?;
    Some(collect(obj.body).await)
}

async fn list(
    store: &dyn ObjectStorage,
    inst: &Instance,
    prefix: &str,
    after: Option<&str>,
    limit: usize,
) -> Vec<String> {
    store
        .list(
            inst,
            ListQuery {
                prefix,
                after,
                limit,
            },
        )
        .await
        .expect("list")
        .into_iter()
        .map(|m| m.path.as_str().to_owned())
        .collect()
}

/// An object reads back as written, with its metadata, and is gone once deleted.
pub async fn put_then_get_head_delete(store: &dyn ObjectStorage) {
    let inst = fresh(store).await;
    let path = p("docs/hello.txt");
    let meta = store
        .put(
            &inst,
            &path,
            "text/plain; charset=utf-8",
            body(vec![b"hello ".to_vec(), b"world".to_vec()]),
        )
        .await
        .expect("put");
    assert_eq!(meta.path, path);
    assert_eq!(meta.size, 11);
    assert_eq!(meta.content_type, "text/plain; charset=utf-8");
    assert!(
        !meta.etag.is_empty() && !meta.etag.contains('"'),
        "{meta:?}"
    );
    assert!(meta.modified_ms > 0, "{meta:?}");

    let head = store.head(&inst, &path).await.expect("head");
    assert_eq!(head.as_ref(), Some(&meta));
    let obj = store
        .get(&inst, &path, None)
        .await
        .expect("get")
        .expect("object");
    assert_eq!(obj.meta, meta);
    assert_eq!(obj.range, None);
    assert_eq!(collect(obj.body).await, b"hello world");

    store.delete(&inst, &path).await.expect("delete");
    assert_eq!(store.head(&inst, &path).await.expect("head"), None);
    assert!(store.get(&inst, &path, None).await.expect("get").is_none());
    store.drop_instance(&inst).await.expect("drop");
}

/// A second upload replaces content, size, type and entity tag.
pub async fn overwrite_replaces_content_and_etag(store: &dyn ObjectStorage) {
    let inst = fresh(store).await;
    let first = put(store, &inst, "a", b"first version").await;
    let second = store
        .put(
            &inst,
            &p("a"),
            "application/json",
            body(vec![b"{}".to_vec()]),
        )
        .await
        .expect("overwrite");
    assert_ne!(first.etag, second.etag);
    assert_eq!(second.size, 2);
    assert_eq!(read(store, &inst, "a").await.as_deref(), Some(&b"{}"[..]));
    let head = store
        .head(&inst, &p("a"))
        .await
        .expect("head")
        .expect("meta");
    assert_eq!(head.content_type, "application/json");
    assert_eq!(list(store, &inst, "", None, 10).await, ["a"]);
    store.drop_instance(&inst).await.expect("drop");
}

/// An upload whose body fails leaves the previous object as it was, and creates nothing
/// where there was nothing.
pub async fn failed_upload_keeps_the_previous_object(store: &dyn ObjectStorage) {
    let inst = fresh(store).await;
    let before = put(store, &inst, "keep", b"precious").await;
    let failed = store
        .put(
            &inst,
            &p("keep"),
            "text/plain",
            failing_body(vec![b"partial".to_vec()]),
        )
        .await;
    assert!(failed.is_err(), "a failing body must fail the upload");
    assert_eq!(
        read(store, &inst, "keep").await.as_deref(),
        Some(&b"precious"[..])
    );
    assert_eq!(
        store.head(&inst, &p("keep")).await.expect("head"),
        Some(before)
    );
    let failed = store
        .put(
            &inst,
            &p("new"),
            "text/plain",
            failing_body(vec![vec![1; 10]]),
        )
        .await;
    assert!(failed.is_err());
    assert_eq!(store.head(&inst, &p("new")).await.expect("head"), None);
    assert_eq!(list(store, &inst, "", None, 10).await, ["keep"]);
    store.drop_instance(&inst).await.expect("drop");
}

/// Objects larger than any buffer come back byte for byte, whole and in ranges.
pub async fn large_objects_stream_in_chunks(store: &dyn ObjectStorage) {
    let inst = fresh(store).await;
    let chunk: Vec<u8> = (0..=255u8).cycle().take(64 * 1024 + 7).collect();
    let chunks: Vec<Vec<u8>> = (0..40).map(|_| chunk.clone()).collect();
    let whole: Vec<u8> = chunks.concat();
    let meta = store
        .put(
            &inst,
            &p("big.bin"),
            "application/octet-stream",
            body(chunks),
        )
        .await
        .expect("put");
    assert_eq!(meta.size, whole.len() as u64);
    assert_eq!(
        read(store, &inst, "big.bin").await.as_deref(),
        Some(&whole[..])
    );
    let mid = (whole.len() / 2) as u64;
    let obj = store
        .get(
            &inst,
            &p("big.bin"),
            Some(RangeSpec::FromTo(mid - 5, mid + 300_000)),
        )
        .await
        .expect("get")
        .expect("object");
    let r = obj.range.expect("range served");
    assert_eq!((r.start, r.end), (mid - 5, mid + 300_000));
    let got = collect(obj.body).await;
    assert_eq!(got, whole[(mid - 5) as usize..=(mid + 300_000) as usize]);
    store.drop_instance(&inst).await.expect("drop");
}

/// A zero-byte object exists, reads as nothing, and no range can be served from it.
pub async fn empty_objects(store: &dyn ObjectStorage) {
    let inst = fresh(store).await;
    let meta = store
        .put(&inst, &p("empty"), "text/plain", body(vec![]))
        .await
        .expect("put");
    assert_eq!(meta.size, 0);
    assert_eq!(read(store, &inst, "empty").await.as_deref(), Some(&b""[..]));
    let r = store
        .get(&inst, &p("empty"), Some(RangeSpec::From(0)))
        .await
        .map(|o| o.map(|o| o.range));
    assert!(matches!(r, Err(Error::RangeNotSatisfiable(_))), "{r:?}");
    store.drop_instance(&inst).await.expect("drop");
}

/// Every range form reads the right bytes; a range past the end is unsatisfiable.
pub async fn ranges(store: &dyn ObjectStorage) {
    let inst = fresh(store).await;
    put(store, &inst, "digits", b"0123456789").await;
    let cases: [(RangeSpec, &[u8]); 5] = [
        (RangeSpec::FromTo(0, 0), b"0"),
        (RangeSpec::FromTo(3, 5), b"345"),
        (RangeSpec::FromTo(8, 100), b"89"),
        (RangeSpec::From(7), b"789"),
        (RangeSpec::Suffix(4), b"6789"),
    ];
    for (spec, expected) in cases {
        let obj = store
            .get(&inst, &p("digits"), Some(spec))
            .await
            .expect("get")
            .expect("object");
        assert_eq!(obj.meta.size, 10);
        let r = obj.range.expect("range");
        assert_eq!(r.len(), expected.len() as u64, "{spec}");
        assert_eq!(collect(obj.body).await, expected, "{spec}");
    }
    for spec in [
        RangeSpec::From(10),
        RangeSpec::FromTo(10, 20),
        RangeSpec::Suffix(0),
    ] {
        let r = store.get(&inst, &p("digits"), Some(spec)).await;
        assert!(
            matches!(r, Err(Error::RangeNotSatisfiable(_))),
            "{spec}: {:?}",
            r.map(|o| o.map(|o| o.meta))
        );
    }
    store.drop_instance(&inst).await.expect("drop");
}

/// Reading a missing object answers `None`; deleting it is `NotFound`.
pub async fn missing_objects(store: &dyn ObjectStorage) {
    let inst = fresh(store).await;
    let nope = p("no/such/object");
    assert_eq!(store.head(&inst, &nope).await.expect("head"), None);
    assert!(store.get(&inst, &nope, None).await.expect("get").is_none());
    assert!(
        store
            .get(&inst, &nope, Some(RangeSpec::From(0)))
            .await
            .expect("get")
            .is_none()
    );
    let e = store.delete(&inst, &nope).await.unwrap_err();
    assert!(matches!(e, Error::NotFound(_)), "{e:?}");
    store.drop_instance(&inst).await.expect("drop");
}

/// `a`, `a/b` and `a/b/c` are independent objects; removing one leaves the others.
pub async fn paths_are_keys_not_directories(store: &dyn ObjectStorage) {
    let inst = fresh(store).await;
    put(store, &inst, "a/b", b"2").await;
    put(store, &inst, "a", b"1").await;
    put(store, &inst, "a/b/c", b"3").await;
    store.delete(&inst, &p("a/b")).await.expect("delete");
    assert_eq!(read(store, &inst, "a").await.as_deref(), Some(&b"1"[..]));
    assert_eq!(
        read(store, &inst, "a/b/c").await.as_deref(),
        Some(&b"3"[..])
    );
    assert_eq!(list(store, &inst, "", None, 10).await, ["a", "a/b/c"]);
    put(store, &inst, "ü/ñ space+%.txt", b"4").await;
    assert_eq!(
        read(store, &inst, "ü/ñ space+%.txt").await.as_deref(),
        Some(&b"4"[..])
    );
    store.drop_instance(&inst).await.expect("drop");
}

/// Listing is in bytewise path order; `prefix`, `after` and `limit` page through it.
pub async fn list_in_path_order_with_prefix_after_limit(store: &dyn ObjectStorage) {
    let inst = fresh(store).await;
    let paths = ["b", "a/z", "a-b", "a/b", "a", "ab", "a.b", "é", "Z"];
    for path in paths {
        put(store, &inst, path, path.as_bytes()).await;
    }
    let mut sorted = paths.map(str::to_owned).to_vec();
    sorted.sort();
    assert_eq!(list(store, &inst, "", None, 100).await, sorted);
    assert_eq!(list(store, &inst, "a/", None, 100).await, ["a/b", "a/z"]);
    assert_eq!(list(store, &inst, "a", None, 3).await, ["a", "a-b", "a.b"]);
    assert_eq!(
        list(store, &inst, "a", Some("a.b"), 100).await,
        ["a/b", "a/z", "ab"]
    );
    assert_eq!(list(store, &inst, "", Some("b"), 100).await, ["é"]);
    assert_eq!(list(store, &inst, "", Some("zzz"), 100).await, ["é"]);
    assert_eq!(
        list(store, &inst, "a/", Some("0"), 100).await,
        ["a/b", "a/z"]
    );
    assert!(list(store, &inst, "nothing", None, 100).await.is_empty());
    assert!(list(store, &inst, "", Some("é"), 100).await.is_empty());

    let mut pages = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let page = list(store, &inst, "", after.as_deref(), 2).await;
        if page.is_empty() {
            break;
        }
        after = page.last().cloned();
        pages.extend(page);
    }
    assert_eq!(pages, sorted);

    let metas = store
        .list(
            &inst,
            ListQuery {
                prefix: "ab",
                after: None,
                limit: 1,
            },
        )
        .await
        .expect("list");
    let head = store.head(&inst, &p("ab")).await.expect("head");
    assert_eq!(metas.first(), head.as_ref());
    store.drop_instance(&inst).await.expect("drop");
}

/// Objects of one instance are invisible to another.
pub async fn instances_are_isolated(store: &dyn ObjectStorage) {
    let one = fresh(store).await;
    let two = fresh(store).await;
    put(store, &one, "same/path", b"one").await;
    assert_eq!(store.head(&two, &p("same/path")).await.expect("head"), None);
    assert!(list(store, &two, "", None, 10).await.is_empty());
    put(store, &two, "same/path", b"two").await;
    assert_eq!(
        read(store, &one, "same/path").await.as_deref(),
        Some(&b"one"[..])
    );
    store.drop_instance(&two).await.expect("drop");
    assert_eq!(
        read(store, &one, "same/path").await.as_deref(),
        Some(&b"one"[..])
    );
    store.drop_instance(&one).await.expect("drop");
}

/// Dropping an instance removes its objects: reading it afterwards finds nothing.
pub async fn drop_removes_every_object(store: &dyn ObjectStorage) {
    let inst = fresh(store).await;
    put(store, &inst, "x", b"x").await;
    put(store, &inst, "y/z", b"z").await;
    store.drop_instance(&inst).await.expect("drop");
    let query = ListQuery {
        prefix: "",
        after: None,
        limit: 10,
    };
    match store.list(&inst, query).await {
        Ok(objects) => assert!(objects.is_empty(), "{objects:?}"),
        Err(e) => assert!(matches!(e, Error::NotFound(_)), "{e:?}"),
    }
    match store.head(&inst, &p("x")).await {
        Ok(meta) => assert_eq!(meta, None),
        Err(e) => assert!(matches!(e, Error::NotFound(_)), "{e:?}"),
    }
}

/// Pre-signed URLs are absolute and differ by operation.
pub async fn presigned_urls_are_absolute(store: &dyn ObjectStorage) {
    let inst = fresh(store).await;
    let path = p("dir/file name.txt");
    let hour = Duration::from_secs(3600);
    let base = "http://127.0.0.1:6363";
    let get = store
        .presign(&inst, &path, PresignMethod::Get, hour, base)
        .await
        .expect("presign get");
    let put = store
        .presign(&inst, &path, PresignMethod::Put, hour, base)
        .await
        .expect("presign put");
    for url in [&get, &put] {
        assert!(
            url.starts_with("http://") || url.starts_with("https://"),
            "{url}"
        );
        assert!(!url.contains(' '), "{url}");
    }
    assert_ne!(get, put);
    store.drop_instance(&inst).await.expect("drop");
}
