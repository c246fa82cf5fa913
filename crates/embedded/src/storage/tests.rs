//! What only the filesystem store does: its files on disk, its key, its own URLs.

use std::{fs, sync::Arc, time::Duration};

use quintet_core::{
    Error, Instance, InstanceConfig, InstanceId, ManualClock, SystemClock,
    conformance::storage::{body, collect, failing_body},
    object::{ObjectPath, PresignMethod},
    ports::{
        Lifecycle,
        storage::{BlobStore, Presign},
    },
};

use super::{FsBlobStore, blobs};

/// The same signing key for every store of a test, so URLs outlive reopening.
fn signer() -> quintet_core::object::UrlSigner {
    quintet_core::object::UrlSigner::new("test", [7; 32], vec![])
}

fn instance(id: i64) -> Instance {
    Instance {
        id: InstanceId(id),
        app: quintet_core::AppName::domain(),
        name: "files".parse().unwrap(),
        config: InstanceConfig::Storage,
        created_ms: 0,
    }
}

fn p(s: &str) -> ObjectPath {
    s.parse().unwrap()
}

/// Blob file names in an instance directory.
fn blob_files(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

/// Content too large to be kept inline.
fn large(fill: u8) -> Vec<u8> {
    vec![fill; blobs::INLINE_MAX + 1]
}

#[tokio::test]
async fn one_blob_per_large_object_and_none_left_by_overwrites_failures_or_deletes() {
    let dir = tempfile::tempdir().unwrap();
    let store = FsBlobStore::open(dir.path(), Arc::new(SystemClock), signer()).unwrap();
    let inst = instance(1);
    store.create_instance(&inst).await.unwrap();
    let idir = dir.path().join("storage/1");
    for fill in [1, 2, 3] {
        store
            .put(&inst, &p("a/b"), "text/plain", body(vec![large(fill)]))
            .await
            .unwrap();
        assert_eq!(blob_files(&idir).len(), 1);
    }
    let failed = store
        .put(&inst, &p("c"), "text/plain", failing_body(vec![large(4)]))
        .await;
    assert!(matches!(failed, Err(Error::BadRequest(_))), "{failed:?}");
    assert_eq!(blob_files(&idir).len(), 1);
    // Replacing a large object by a small one removes its blob, and back again.
    store
        .put(
            &inst,
            &p("a/b"),
            "text/plain",
            body(vec![b"small".to_vec()]),
        )
        .await
        .unwrap();
    assert!(blob_files(&idir).is_empty());
    let obj = store.get(&inst, &p("a/b"), None).await.unwrap().unwrap();
    assert_eq!(collect(obj.body).await, b"small");
    store
        .put(&inst, &p("a/b"), "text/plain", body(vec![large(5)]))
        .await
        .unwrap();
    let obj = store.get(&inst, &p("a/b"), None).await.unwrap().unwrap();
    assert_eq!(collect(obj.body).await, large(5));
    store.delete(&inst, &p("a/b")).await.unwrap();
    assert!(blob_files(&idir).is_empty());
    // Paths are never file names: nothing named after the object exists on disk.
    store
        .put(&inst, &p("x/y.txt"), "text/plain", body(vec![large(6)]))
        .await
        .unwrap();
    let files = blob_files(&idir);
    assert_eq!(files.len(), 1);
    assert!(blobs::is_blob_name(&files[0]), "{files:?}");
}

#[tokio::test]
async fn small_objects_live_in_the_database() {
    let dir = tempfile::tempdir().unwrap();
    let store = FsBlobStore::open(dir.path(), Arc::new(SystemClock), signer()).unwrap();
    let inst = instance(9);
    store.create_instance(&inst).await.unwrap();
    let exactly = vec![7u8; blobs::INLINE_MAX];
    let chunks: Vec<Vec<u8>> = exactly.chunks(1000).map(<[u8]>::to_vec).collect();
    store
        .put(&inst, &p("edge"), "text/plain", body(chunks))
        .await
        .unwrap();
    assert!(blob_files(&dir.path().join("storage/9")).is_empty());
    let obj = store
        .get(
            &inst,
            &p("edge"),
            Some(quintet_core::object::RangeSpec::Suffix(3)),
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(collect(obj.body).await, [7, 7, 7]);
    store.delete(&inst, &p("edge")).await.unwrap();
    assert!(store.get(&inst, &p("edge"), None).await.unwrap().is_none());
}

#[tokio::test]
async fn an_abandoned_upload_leaves_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let store = FsBlobStore::open(dir.path(), Arc::new(SystemClock), signer()).unwrap();
    let inst = instance(2);
    store.create_instance(&inst).await.unwrap();
    // A body that never ends: the upload is dropped while it waits for more.
    let (tx, rx) =
        tokio::sync::mpsc::channel::<std::io::Result<quintet_core::ports::storage::Bytes>>(1);
    tx.send(Ok(large(1).into())).await.unwrap();
    let stream = Box::pin(Receiver(rx));
    let slow = p("slow");
    let upload = store.put(&inst, &slow, "text/plain", stream);
    let timed_out = tokio::time::timeout(Duration::from_millis(200), upload).await;
    assert!(timed_out.is_err());
    drop(tx);
    // The writer thread removes the file once it sees the upload gone.
    let idir = dir.path().join("storage/2");
    for _ in 0..100 {
        if blob_files(&idir).is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(blob_files(&idir).is_empty());
    assert_eq!(store.head(&inst, &p("slow")).await.unwrap(), None);
}

struct Receiver(tokio::sync::mpsc::Receiver<std::io::Result<quintet_core::ports::storage::Bytes>>);

impl quintet_core::ports::storage::Stream for Receiver {
    type Item = std::io::Result<quintet_core::ports::storage::Bytes>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        self.0.poll_recv(cx)
    }
}

#[tokio::test]
async fn sweep_collects_unreferenced_blobs_of_live_instances_and_orphaned_instances() {
    let dir = tempfile::tempdir().unwrap();
    let store = FsBlobStore::open(dir.path(), Arc::new(SystemClock), signer()).unwrap();
    let (live, orphan) = (instance(3), instance(4));
    store.create_instance(&live).await.unwrap();
    store.create_instance(&orphan).await.unwrap();
    store
        .put(&live, &p("kept"), "text/plain", body(vec![large(b'k')]))
        .await
        .unwrap();
    let idir = dir.path().join("storage/3");
    let kept = blob_files(&idir);
    // What a crash between writing a blob and committing its row leaves behind.
    fs::write(idir.join("0123456789abcdef0123456789abcdef"), b"stray").unwrap();
    fs::write(idir.join("not-a-blob"), b"other").unwrap();
    assert_eq!(
        store
            .sweep(&quintet_core::ports::Keep::only([live.id]))
            .await
            .unwrap(),
        1
    );
    let mut expected = kept.clone();
    expected.push("not-a-blob".into());
    expected.sort();
    assert_eq!(blob_files(&idir), expected);
    assert!(!dir.path().join("storage/4").exists());
    let obj = store.get(&live, &p("kept"), None).await.unwrap().unwrap();
    assert_eq!(collect(obj.body).await, large(b'k'));
}

#[tokio::test]
async fn objects_and_the_key_survive_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let inst = instance(5);
    let clock = Arc::new(ManualClock::new(1_000_000));
    let url = {
        let store = FsBlobStore::open(dir.path(), clock.clone(), signer()).unwrap();
        store.create_instance(&inst).await.unwrap();
        store
            .put(
                &inst,
                &p("doc"),
                "text/plain",
                body(vec![b"durable".to_vec()]),
            )
            .await
            .unwrap();
        let url = store
            .presign(
                &inst,
                &p("doc"),
                PresignMethod::Get,
                Duration::from_secs(60),
                "http://h",
            )
            .await
            .unwrap();
        store.close().await.unwrap();
        url
    };
    let store = FsBlobStore::open(dir.path(), clock.clone(), signer()).unwrap();
    let meta = store.head(&inst, &p("doc")).await.unwrap().unwrap();
    assert_eq!((meta.size, meta.modified_ms), (7, 1_000_000));
    let (expires, sig) = url_query(&url);
    assert_eq!(expires, 1_000 + 60);
    store
        .check_presigned(&inst, &p("doc"), PresignMethod::Get, expires, &sig)
        .await
        .unwrap();
    clock.advance(60_000);
    let e = store
        .check_presigned(&inst, &p("doc"), PresignMethod::Get, expires, &sig)
        .await
        .unwrap_err();
    assert!(
        matches!(e, Error::Forbidden(ref m) if m.contains("expired")),
        "{e:?}"
    );
}

#[tokio::test]
async fn urls_are_bound_to_the_instance_id() {
    let dir = tempfile::tempdir().unwrap();
    let store = FsBlobStore::open(dir.path(), Arc::new(SystemClock), signer()).unwrap();
    let (old, new) = (instance(6), instance(7));
    let url = store
        .presign(
            &old,
            &p("a"),
            PresignMethod::Put,
            Duration::from_secs(60),
            "http://h",
        )
        .await
        .unwrap();
    assert!(
        url.starts_with("http://h/_presigned/storage/files/a?expires="),
        "{url}"
    );
    let (expires, sig) = url_query(&url);
    assert!(
        store
            .check_presigned(&old, &p("a"), PresignMethod::Put, expires, &sig)
            .await
            .is_ok()
    );
    // Same name, recreated: a new id, so the old URL is void.
    let e = store
        .check_presigned(&new, &p("a"), PresignMethod::Put, expires, &sig)
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Forbidden(_)));
}

#[tokio::test]
async fn operations_on_a_destroyed_instance_are_not_found() {
    let dir = tempfile::tempdir().unwrap();
    let store = FsBlobStore::open(dir.path(), Arc::new(SystemClock), signer()).unwrap();
    let inst = instance(8);
    store.create_instance(&inst).await.unwrap();
    store.drop_instance(&inst).await.unwrap();
    let put = store
        .put(&inst, &p("a"), "text/plain", body(vec![b"x".to_vec()]))
        .await;
    assert!(matches!(put, Err(Error::NotFound(_))), "{put:?}");
    assert!(matches!(
        store.head(&inst, &p("a")).await,
        Err(Error::NotFound(_))
    ));
    assert!(matches!(
        store.delete(&inst, &p("a")).await,
        Err(Error::NotFound(_))
    ));
}

fn url_query(url: &str) -> (i64, String) {
    let q = url.split_once('?').unwrap().1;
    let (e, s) = q.split_once('&').unwrap();
    (
        e.strip_prefix("expires=").unwrap().parse().unwrap(),
        s.strip_prefix("sig=").unwrap().to_owned(),
    )
}

/// The version byte of `path`'s content and its metadata's size, or `None` when missing;
/// checks that metadata and content agree.
async fn held_version(store: &FsBlobStore, inst: &Instance, path: &ObjectPath) -> Option<u8> {
    let obj = store.get(inst, path, None).await.unwrap()?;
    let size = obj.meta.size;
    let bytes = collect(obj.body).await;
    assert_eq!(
        bytes.len() as u64,
        size,
        "metadata and content of one version"
    );
    let head = store
        .head(inst, path)
        .await
        .unwrap()
        .expect("head of a present object");
    assert_eq!(head.size, size, "head and get agree");
    bytes.first().copied()
}

#[tokio::test]
async fn small_objects_read_again_come_from_memory_and_writes_replace_them() {
    let dir = tempfile::tempdir().unwrap();
    let store = FsBlobStore::open(dir.path(), Arc::new(SystemClock), signer()).unwrap();
    let inst = instance(1);
    store.create_instance(&inst).await.unwrap();
    store
        .put(
            &inst,
            &p("s"),
            "text/plain",
            body(vec![b"0123456789".to_vec()]),
        )
        .await
        .unwrap();
    assert_eq!(held_version(&store, &inst, &p("s")).await, Some(b'0'));
    assert!(store.hot.bytes() > 0, "the read filled the held objects");
    // A range of a held object.
    let range = quintet_core::object::RangeSpec::FromTo(2, 4);
    let part = store
        .get(&inst, &p("s"), Some(range))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(part.range.map(|r| (r.start, r.len())), Some((2, 3)));
    assert_eq!(collect(part.body).await, b"234");
    // Overwritten small, then large (a blob file), then small again.
    store
        .put(&inst, &p("s"), "text/plain", body(vec![b"abc".to_vec()]))
        .await
        .unwrap();
    assert_eq!(held_version(&store, &inst, &p("s")).await, Some(b'a'));
    store
        .put(&inst, &p("s"), "text/plain", body(vec![large(7)]))
        .await
        .unwrap();
    assert_eq!(held_version(&store, &inst, &p("s")).await, Some(7));
    store
        .put(&inst, &p("s"), "image/png", body(vec![b"xy".to_vec()]))
        .await
        .unwrap();
    let meta = store.head(&inst, &p("s")).await.unwrap().unwrap();
    assert_eq!((meta.size, meta.content_type.as_str()), (2, "image/png"));
    assert_eq!(held_version(&store, &inst, &p("s")).await, Some(b'x'));
    store.delete(&inst, &p("s")).await.unwrap();
    assert!(store.get(&inst, &p("s"), None).await.unwrap().is_none());
    assert!(store.head(&inst, &p("s")).await.unwrap().is_none());
    // Dropping the instance forgets what it held.
    store
        .put(&inst, &p("t"), "text/plain", body(vec![b"t".to_vec()]))
        .await
        .unwrap();
    assert_eq!(held_version(&store, &inst, &p("t")).await, Some(b't'));
    store.drop_instance(&inst).await.unwrap();
    assert_eq!(store.hot.bytes(), 0);
    store.create_instance(&inst).await.unwrap();
    assert!(store.get(&inst, &p("t"), None).await.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reads_racing_overwrites_never_bring_back_an_acknowledged_version() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(FsBlobStore::open(dir.path(), Arc::new(SystemClock), signer()).unwrap());
    let inst = instance(1);
    store.create_instance(&inst).await.unwrap();
    let path = p("hot");
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let readers: Vec<_> = (0..6)
        .map(|_| {
            let (store, inst, path, stop) = (
                Arc::clone(&store),
                inst.clone(),
                path.clone(),
                Arc::clone(&stop),
            );
            tokio::spawn(async move {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    if let Some(obj) = store.get(&inst, &path, None).await.unwrap() {
                        collect(obj.body).await;
                    }
                    // A held object answers without suspending: yield, so the runtime can
                    // stop these tasks if the test fails.
                    tokio::task::yield_now().await;
                }
            })
        })
        .collect();
    for v in 1..=200u8 {
        // Sizes differ per version, so metadata and content of two versions never agree.
        let content = vec![v; usize::from(v)];
        store
            .put(
                &inst,
                &path,
                "application/octet-stream",
                body(vec![content]),
            )
            .await
            .unwrap();
        assert_eq!(
            held_version(&store, &inst, &path).await,
            Some(v),
            "after write {v}"
        );
        let meta = store.head(&inst, &path).await.unwrap().unwrap();
        assert_eq!(meta.size, u64::from(v), "head after write {v}");
    }
    store.delete(&inst, &path).await.unwrap();
    assert!(
        store.get(&inst, &path, None).await.unwrap().is_none(),
        "after the removal"
    );
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for r in readers {
        r.await.unwrap();
    }
}

/// A bucket written before event logs existed has none: its feed is empty until its next
/// write, which creates the log in its own transaction; a destroyed bucket's log goes
/// with it.
#[tokio::test]
async fn a_bucket_older_than_event_logs_gets_one_on_its_next_write() {
    use quintet_core::ports::storage_events::{ObjectEventKind, StorageEvents};

    let dir = tempfile::tempdir().unwrap();
    let store = FsBlobStore::open(dir.path(), Arc::new(SystemClock), signer()).unwrap();
    let inst = instance(4);
    store.create_instance(&inst).await.unwrap();
    store
        .put(&inst, &p("old"), "text/plain", body(vec![b"1".to_vec()]))
        .await
        .unwrap();
    store.close().await.unwrap();
    drop(store);
    // As an older version left it: the objects' tables and no log.
    let c = rusqlite::Connection::open(dir.path().join(super::DB)).unwrap();
    c.execute_batch("DROP TABLE o4_ev").unwrap();
    drop(c);

    let store = FsBlobStore::open(dir.path(), Arc::new(SystemClock), signer()).unwrap();
    assert_eq!(store.event_head(&inst).await.unwrap(), 0);
    assert!(store.events(&inst, 0, 10).await.unwrap().changes.is_empty());
    store.delete(&inst, &p("old")).await.unwrap();
    let page = store.events(&inst, 0, 10).await.unwrap();
    assert_eq!(page.changes.len(), 1);
    assert_eq!(
        (page.changes[0].seq, page.changes[0].event.clone()),
        (1, ObjectEventKind::Removed)
    );
    store
        .put(&inst, &p("new"), "text/plain", body(vec![b"2".to_vec()]))
        .await
        .unwrap();
    assert_eq!(store.event_head(&inst).await.unwrap(), 2);

    store.drop_instance(&inst).await.unwrap();
    let c = rusqlite::Connection::open(dir.path().join(super::DB)).unwrap();
    let left: i64 = c
        .query_row(
            "SELECT count(*) FROM sqlite_master WHERE name LIKE 'o4%'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(
        left, 0,
        "the bucket's tables, its log included, are dropped"
    );
}
