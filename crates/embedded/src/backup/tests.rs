//! Backups of open stores under writes, their verification and their restore.

use std::{fs, path::Path, sync::Arc};

use quintet_core::{
    Instance, InstanceConfig, InstanceId, SystemClock,
    cache::CacheValue,
    conformance::storage::{body, collect},
    object::ObjectPath,
    ports::{
        Lifecycle,
        cache::{Cache, SetMode},
        data::{DocId, DocStore, new_document},
        search::{SearchConfig, SearchDoc, SearchIndex},
        storage::BlobStore,
    },
};
use serde_json::json;

use super::*;
use crate::Embedded;

fn instance(id: i64, config: InstanceConfig) -> Instance {
    Instance {
        id: InstanceId(id),
        app: quintet_core::AppName::domain(),
        name: format!("i{id}").parse().unwrap(),
        config,
        created_ms: 0,
    }
}

fn search_config() -> SearchConfig {
    SearchConfig {
        fields: vec!["title".into()],
        store_fields: vec![],
    }
}

struct Instances {
    data: Instance,
    cache: Instance,
    search: Instance,
    storage: Instance,
}

fn instances() -> Instances {
    Instances {
        data: instance(1, InstanceConfig::Data),
        cache: instance(2, InstanceConfig::Cache),
        search: instance(3, InstanceConfig::Search(search_config())),
        storage: instance(4, InstanceConfig::Storage),
    }
}

/// Write item `i` into every store; large objects every tenth.
async fn write(e: &Embedded, at: &Instances, i: usize) {
    let (_, doc) = new_document(json!({"_id": format!("d{i}"), "n": i})).unwrap();
    e.data
        .create(&at.data, Some(format!("d{i}").parse().unwrap()), doc)
        .await
        .unwrap();
    e.cache
        .set(
            &at.cache,
            &format!("k{i}").parse().unwrap(),
            CacheValue::from_stored(format!("\"v{i}\"")),
            None,
            SetMode::Upsert,
        )
        .await
        .unwrap();
    let doc = json!({"title": format!("t{i}")});
    e.search
        .index(
            &at.search,
            SearchDoc::new(
                format!("s{i}").parse().unwrap(),
                doc.as_object().unwrap().clone(),
                &search_config(),
            )
            .unwrap(),
        )
        .await
        .unwrap();
    let size = if i.is_multiple_of(10) { 100_000 } else { 10 };
    e.storage
        .put(
            &at.storage,
            &format!("o{i}").parse::<ObjectPath>().unwrap(),
            "application/octet-stream",
            body(vec![vec![(i % 251) as u8; size]]),
        )
        .await
        .unwrap();
}

async fn holds(e: &Embedded, at: &Instances, i: usize) {
    let id: DocId = format!("d{i}").parse().unwrap();
    assert!(
        e.data.get(&at.data, &id).await.unwrap().is_some(),
        "doc {i}"
    );
    let v = e
        .cache
        .get(&at.cache, &format!("k{i}").parse().unwrap())
        .await
        .unwrap();
    assert_eq!(v.map(|v| v.as_str().to_owned()), Some(format!("\"v{i}\"")));
    assert!(
        e.search
            .get(&at.search, &format!("s{i}").parse().unwrap())
            .await
            .unwrap()
            .is_some(),
        "search {i}"
    );
    let obj = e
        .storage
        .get(&at.storage, &format!("o{i}").parse().unwrap(), None)
        .await
        .unwrap();
    let bytes = collect(obj.expect("object").body).await;
    let size = if i.is_multiple_of(10) { 100_000 } else { 10 };
    assert_eq!(bytes, vec![(i % 251) as u8; size], "object {i}");
}

fn source(e: &Embedded) -> Source {
    Source::new(
        e.dir.root(),
        Some(Arc::clone(&e.cache)),
        Some(Arc::clone(&e.storage)),
    )
}

#[tokio::test]
async fn a_backup_under_writes_holds_every_answered_write_and_restores() {
    let tmp = tempfile::tempdir().unwrap();
    let (live, backups) = (tmp.path().join("live"), tmp.path().join("backups"));
    fs::create_dir(&backups).unwrap();
    let e = Arc::new(Embedded::open(&live, Arc::new(SystemClock)).unwrap());
    let at = Arc::new(instances());
    for inst in [&at.data, &at.cache, &at.search, &at.storage] {
        let lifecycle: &dyn Lifecycle = match inst.kind() {
            quintet_core::ServiceType::Data => &*e.data,
            quintet_core::ServiceType::Cache => &*e.cache,
            quintet_core::ServiceType::Search => &*e.search,
            _ => &*e.storage,
        };
        lifecycle.create_instance(inst).await.unwrap();
    }
    for i in 0..60 {
        write(&e, &at, i).await;
    }
    // Writers go on during the capture and the copy.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut writers = Vec::new();
    for w in 0..4 {
        let (e, at, stop) = (Arc::clone(&e), Arc::clone(&at), Arc::clone(&stop));
        writers.push(tokio::spawn(async move {
            let mut i = 1000 + w * 100_000;
            while !stop.load(Ordering::Relaxed) {
                write(&e, &at, i).await;
                i += 1;
            }
        }));
    }
    let dest = backups.join("b1");
    let captured = source(&e).capture(&dest).await.unwrap();
    let manifest = tokio::task::spawn_blocking(move || captured.write(&|_| {}))
        .await
        .unwrap()
        .unwrap();
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.await.unwrap();
    }
    assert!(manifest.files.iter().any(|f| f.path == "data.db"));
    assert!(manifest.files.iter().any(|f| f.path == "cache.log"));
    assert!(!manifest.files.iter().any(|f| f.path == "LOCK"));
    verify(&dest, &|_| {}).unwrap();

    let restored = tmp.path().join("restored");
    restore(&dest, &restored, false, &|_, _, _| {}).unwrap();
    drop(e);
    let r = Embedded::open(&restored, Arc::new(SystemClock)).unwrap();
    for i in 0..60 {
        holds(&r, &at, i).await;
    }
    // The restored stores take writes.
    write(&r, &at, 99).await;
    holds(&r, &at, 99).await;
}

fn backup_of_small_dir(tmp: &Path) -> PathBuf {
    let live = tmp.join("live");
    fs::create_dir_all(&live).unwrap();
    fs::write(live.join("registry-id"), "embedded").unwrap();
    fs::create_dir_all(live.join("storage/7")).unwrap();
    let conn = Connection::open(live.join("storage.db")).unwrap();
    conn.execute_batch(
        "CREATE TABLE o7 (path TEXT PRIMARY KEY, blob TEXT); \
         INSERT INTO o7 VALUES ('a', '0123456789abcdef0123456789abcdef');",
    )
    .unwrap();
    drop(conn);
    fs::write(
        live.join("storage/7/0123456789abcdef0123456789abcdef"),
        vec![5u8; 4096],
    )
    .unwrap();
    let dest = tmp.join("b");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let captured = rt
        .block_on(Source::new(&live, None, None).capture(&dest))
        .unwrap();
    captured.write(&|_| {}).unwrap();
    dest
}

#[test]
fn verify_refuses_a_backup_without_manifest_or_with_a_changed_file() {
    let tmp = tempfile::tempdir().unwrap();
    let dest = backup_of_small_dir(tmp.path());
    let blob = "storage/7/0123456789abcdef0123456789abcdef";
    verify(&dest, &|_| {}).unwrap();

    // One byte flipped.
    let path = dest.join(blob);
    let mut bytes = fs::read(&path).unwrap();
    bytes[100] ^= 1;
    fs::remove_file(&path).unwrap(); // it may be a link to the live file
    fs::write(&path, &bytes).unwrap();
    let err = verify(&dest, &|_| {}).unwrap_err().to_string();
    assert!(err.contains(blob) && err.contains("checksum"), "{err}");

    // Cut short.
    fs::write(&path, &bytes[..10]).unwrap();
    let err = verify(&dest, &|_| {}).unwrap_err().to_string();
    assert!(err.contains(blob) && err.contains("10 bytes"), "{err}");

    // Gone, or a file that is not listed.
    fs::remove_file(&path).unwrap();
    let err = verify(&dest, &|_| {}).unwrap_err().to_string();
    assert!(err.contains("is missing"), "{err}");
    fs::write(dest.join("extra"), "x").unwrap();
    let err = verify(&dest, &|_| {}).unwrap_err().to_string();
    assert!(
        err.contains("extra in the backup is not in the manifest"),
        "{err}"
    );

    // No manifest: incomplete.
    fs::remove_file(dest.join(MANIFEST)).unwrap();
    let err = verify(&dest, &|_| {}).unwrap_err();
    assert!(matches!(err, VerifyError::Incomplete(_)), "{err}");
    assert!(err.to_string().contains("incomplete"), "{err}");
}

#[test]
fn a_manifest_naming_paths_outside_the_backup_or_a_newer_version_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dest = backup_of_small_dir(tmp.path());
    let text = fs::read_to_string(dest.join(MANIFEST)).unwrap();
    fs::write(
        dest.join(MANIFEST),
        text.replace("\"registry-id\"", "\"../registry-id\""),
    )
    .unwrap();
    let err = verify(&dest, &|_| {}).unwrap_err().to_string();
    assert!(err.contains("not a path inside the backup"), "{err}");
    fs::write(
        dest.join(MANIFEST),
        text.replace("\"version\": 1", "\"version\": 9"),
    )
    .unwrap();
    let err = verify(&dest, &|_| {}).unwrap_err().to_string();
    assert!(err.contains("newer quintet"), "{err}");
}

#[test]
fn restore_refuses_a_directory_that_holds_something_unless_forced() {
    let tmp = tempfile::tempdir().unwrap();
    let dest = backup_of_small_dir(tmp.path());
    let target = tmp.path().join("target");
    fs::create_dir(&target).unwrap();
    fs::write(target.join("data.db"), "old").unwrap();
    let err = restore(&dest, &target, false, &|_, _, _| {}).unwrap_err();
    assert!(matches!(err, RestoreError::NotEmpty(_)), "{err}");
    assert_eq!(fs::read(target.join("data.db")).unwrap(), b"old");
    restore(&dest, &target, true, &|_, _, _| {}).unwrap();
    assert!(!target.join("data.db").exists());
    assert_eq!(fs::read(target.join("registry-id")).unwrap(), b"embedded");
    assert_eq!(
        fs::read(target.join("storage/7/0123456789abcdef0123456789abcdef")).unwrap(),
        vec![5u8; 4096]
    );
}

#[test]
fn a_backup_copies_and_hashes_at_a_lower_cpu_priority_than_its_caller() {
    let tmp = tempfile::tempdir().unwrap();
    let live = tmp.path().join("live");
    fs::create_dir_all(live.join("storage/7")).unwrap();
    fs::write(live.join("registry-id"), "embedded").unwrap();
    fs::write(live.join("storage/7/blob"), vec![5u8; 4096]).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let captured = rt
        .block_on(Source::new(&live, None, None).capture(&tmp.path().join("b")))
        .unwrap();
    let caller = rustix::process::getpriority_process(None).unwrap();
    // The nice value of every thread that reports progress: the copy's and the hashes'.
    let seen = std::sync::Mutex::new(Vec::new());
    captured
        .write(&|p: Progress| {
            let nice = rustix::process::getpriority_process(None).unwrap();
            seen.lock().unwrap().push((p.phase, nice));
        })
        .unwrap();
    let seen = seen.into_inner().unwrap();
    let lowered = (caller + BACKUP_NICE).min(19);
    assert!(seen.iter().any(|(phase, _)| *phase == "copy"), "{seen:?}");
    assert!(seen.iter().any(|(phase, _)| *phase == "hash"), "{seen:?}");
    assert!(
        seen.iter().all(|(_, nice)| *nice == lowered),
        "caller at {caller}: {seen:?}"
    );
    // The caller's own priority is untouched.
    assert_eq!(rustix::process::getpriority_process(None).unwrap(), caller);
}
