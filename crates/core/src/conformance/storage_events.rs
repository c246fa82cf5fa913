//! Conformance of storage events ([`EventedStorage`]): every store whose writes are events
//! runs each case (see [`super`]) — the embedded store, which records them itself, and
//! [`Logged`](crate::ports::storage_events::Logged) over each
//! [`StorageEventLog`](crate::ports::storage_events::StorageEventLog), run over
//! [`MemoryBlobStore`].

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use async_trait::async_trait;

use crate::{
    Error, Instance, InstanceConfig, InstanceId, Result,
    object::{EtagHasher, ObjectPath, PresignMethod},
    ports::{
        Keep, Lifecycle, PoolUsage,
        changes::FeedListener,
        storage::{
            BlobStore, ByteStream, Bytes, ListQuery, Object, ObjectMeta, Presign, RangeSpec,
            object_missing, upload_interrupted,
        },
        storage_events::{EventedStorage, ObjectEventKind},
    },
};

use super::{
    instance,
    storage::{body, failing_body},
};

fn p(s: &str) -> ObjectPath {
    s.parse().expect("valid path")
}

async fn fresh(port: &dyn EventedStorage) -> Instance {
    let inst = instance(InstanceConfig::Storage);
    port.create_instance(&inst).await.expect("create_instance");
    inst
}

async fn put(port: &dyn EventedStorage, inst: &Instance, path: &str, bytes: &[u8]) -> ObjectMeta {
    port.put(inst, &p(path), "text/plain", body(vec![bytes.to_vec()]))
        .await
        .expect("put")
}

/// Every upload and removal is one event, numbered from 1 in order, a written one with
/// the object's size, entity tag and type; failed writes are none. Pages resume after
/// any position; a position beyond the head is gone; buckets have logs of their own.
pub async fn object_writes_are_events_in_order(port: &dyn EventedStorage) {
    let b = fresh(port).await;
    let other = fresh(port).await;
    assert_eq!(port.event_head(&b).await.expect("head"), 0);
    let empty = port.events(&b, 0, 100).await.expect("events");
    assert!(empty.changes.is_empty());
    assert_eq!(empty.last_seq, 0);

    let first = put(port, &b, "a/1.txt", b"one").await;
    let second = port
        .put(
            &b,
            &p("a/1.txt"),
            "application/json",
            body(vec![b"{}".to_vec()]),
        )
        .await
        .expect("overwrite");
    put(port, &other, "x", b"elsewhere").await;
    let failed = port
        .put(
            &b,
            &p("b"),
            "text/plain",
            failing_body(vec![b"part".to_vec()]),
        )
        .await;
    assert!(failed.is_err(), "{failed:?}");
    assert!(matches!(
        port.delete(&b, &p("missing")).await,
        Err(Error::NotFound(_))
    ));
    port.delete(&b, &p("a/1.txt")).await.expect("delete");

    let page = port.events(&b, 0, 100).await.expect("events");
    let seen: Vec<(u64, &str, &ObjectEventKind)> = page
        .changes
        .iter()
        .map(|e| (e.seq, e.path.as_str(), &e.event))
        .collect();
    assert_eq!(
        seen,
        vec![
            (1, "a/1.txt", &ObjectEventKind::written(&first)),
            (2, "a/1.txt", &ObjectEventKind::written(&second)),
            (3, "a/1.txt", &ObjectEventKind::Removed),
        ]
    );
    assert_eq!(
        page.changes[1].event,
        ObjectEventKind::Written {
            size: 2,
            etag: second.etag.clone(),
            content_type: "application/json".into()
        }
    );
    assert_ne!(first.etag, second.etag);
    assert_eq!(page.last_seq, 3);
    assert_eq!(port.event_head(&b).await.expect("head"), 3);

    let rest = port.events(&b, 1, 1).await.expect("resume");
    assert_eq!(rest.changes.len(), 1);
    assert_eq!(rest.changes[0].seq, 2);
    assert_eq!(rest.last_seq, 2);
    let none = port.events(&b, 3, 100).await.expect("at the head");
    assert!(none.changes.is_empty());
    assert_eq!(none.last_seq, 3);
    assert!(matches!(port.events(&b, 4, 100).await, Err(Error::Gone(_))));
    assert_eq!(port.event_head(&other).await.expect("other's head"), 1);
    port.drop_instance(&b).await.expect("drop");
    port.drop_instance(&other).await.expect("drop");
}

/// Compaction removes a prefix of every log: reading from before it is gone, the head
/// stays a position, and numbers are never reused.
pub async fn compaction_keeps_the_head_and_never_reuses_numbers(port: &dyn EventedStorage) {
    let b = fresh(port).await;
    put(port, &b, "k", b"1").await;
    put(port, &b, "k", b"2").await;
    let removed = port.compact_events(i64::MAX).await.expect("compact");
    assert!(removed >= 2, "{removed}");
    assert!(matches!(port.events(&b, 0, 100).await, Err(Error::Gone(_))));
    let at_head = port
        .events(&b, 2, 100)
        .await
        .expect("the head is still a position");
    assert!(at_head.changes.is_empty());
    assert_eq!(port.event_head(&b).await.expect("head"), 2);
    port.delete(&b, &p("k")).await.expect("delete");
    let next = port.events(&b, 2, 100).await.expect("after compaction");
    assert_eq!(next.changes.len(), 1);
    assert_eq!(next.changes[0].seq, 3, "numbers are never reused");
    assert_eq!(next.changes[0].event, ObjectEventKind::Removed);

    // A dropped bucket's log is gone with it.
    port.drop_instance(&b).await.expect("drop");
    match port.event_head(&b).await {
        Err(Error::NotFound(_)) | Ok(0) => {}
        other => panic!("the log of a dropped bucket: {other:?}"),
    }
}

/// Subscribed listeners hear of every recorded event, for its bucket.
pub async fn writes_tell_feed_listeners(port: &dyn EventedStorage) {
    let b = fresh(port).await;
    let heard = Arc::new(Heard::default());
    let listener: Arc<dyn FeedListener> = heard.clone();
    port.subscribe_events(Arc::downgrade(&listener));
    put(port, &b, "k", b"v").await;
    assert!(heard.of(b.id) >= 1, "a write told no listener");
    let before = heard.of(b.id);
    port.delete(&b, &p("k")).await.expect("delete");
    assert!(heard.of(b.id) > before, "a removal told no listener");
    drop(listener);
    port.drop_instance(&b).await.expect("drop");
}

/// How many times each instance was said to have changed.
#[derive(Default)]
struct Heard(Mutex<BTreeMap<InstanceId, u64>>);

impl Heard {
    fn of(&self, id: InstanceId) -> u64 {
        self.0
            .lock()
            .map(|m| m.get(&id).copied().unwrap_or(0))
            .unwrap_or(0)
    }
}

impl FeedListener for Heard {
    fn changed(&self, instance: InstanceId) {
        if let Ok(mut m) = self.0.lock() {
            *m.entry(instance).or_insert(0) += 1;
        }
    }

    fn resync(&self) {}
}

/// Objects in memory, for running the suite over an event log alone
/// ([`crate::ports::storage_events::Logged`]). Not for serving: nothing is durable.
#[derive(Debug, Default)]
pub struct MemoryBlobStore {
    objects: Mutex<BTreeMap<(InstanceId, String), (ObjectMeta, Bytes)>>,
}

impl MemoryBlobStore {
    fn objects(
        &self,
    ) -> std::sync::MutexGuard<'_, BTreeMap<(InstanceId, String), (ObjectMeta, Bytes)>> {
        self.objects
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[async_trait]
impl Lifecycle for MemoryBlobStore {
    async fn create_instance(&self, _: &Instance) -> Result<()> {
        Ok(())
    }

    async fn drop_instance(&self, instance: &Instance) -> Result<()> {
        self.objects().retain(|(id, _), _| *id != instance.id);
        Ok(())
    }

    async fn sweep(&self, keep: &Keep) -> Result<usize> {
        self.objects().retain(|(id, _), _| keep.keeps(*id));
        Ok(0)
    }

    fn pool(&self) -> Option<PoolUsage> {
        None
    }

    async fn close(&self) -> Result<()> {
        Ok(())
    }
}

#[async_trait]
impl BlobStore for MemoryBlobStore {
    async fn put(
        &self,
        instance: &Instance,
        path: &ObjectPath,
        content_type: &str,
        mut body: ByteStream,
    ) -> Result<ObjectMeta> {
        let mut all = Vec::new();
        let mut hasher = EtagHasher::new();
        while let Some(chunk) = std::future::poll_fn(|cx| body.as_mut().poll_next(cx)).await {
            let chunk = chunk.map_err(upload_interrupted)?;
            hasher.update(&chunk);
            all.extend_from_slice(&chunk);
        }
        let meta = ObjectMeta {
            path: path.clone(),
            size: all.len() as u64,
            content_type: content_type.to_owned(),
            etag: hasher.finish(),
            modified_ms: 1,
        };
        self.objects().insert(
            (instance.id, path.as_str().to_owned()),
            (meta.clone(), Bytes::from(all)),
        );
        Ok(meta)
    }

    async fn head(&self, instance: &Instance, path: &ObjectPath) -> Result<Option<ObjectMeta>> {
        Ok(self
            .objects()
            .get(&(instance.id, path.as_str().to_owned()))
            .map(|(m, _)| m.clone()))
    }

    async fn get(
        &self,
        instance: &Instance,
        path: &ObjectPath,
        range: Option<RangeSpec>,
    ) -> Result<Option<Object>> {
        let Some((meta, data)) = self
            .objects()
            .get(&(instance.id, path.as_str().to_owned()))
            .cloned()
        else {
            return Ok(None);
        };
        let range = range.map(|r| r.resolve(meta.size)).transpose()?;
        let part = match range {
            Some(r) => data.slice(r.start as usize..(r.start + r.len()) as usize),
            None => data,
        };
        Ok(Some(Object {
            meta,
            range,
            body: body(vec![part.to_vec()]),
        }))
    }

    async fn delete(&self, instance: &Instance, path: &ObjectPath) -> Result<()> {
        self.objects()
            .remove(&(instance.id, path.as_str().to_owned()))
            .map(|_| ())
            .ok_or_else(|| object_missing(&instance.name, path))
    }

    async fn list(&self, instance: &Instance, query: ListQuery<'_>) -> Result<Vec<ObjectMeta>> {
        Ok(self
            .objects()
            .iter()
            .filter(|((id, path), _)| {
                *id == instance.id
                    && path.starts_with(query.prefix)
                    && query.after.is_none_or(|a| path.as_str() > a)
            })
            .take(query.limit)
            .map(|(_, (m, _))| m.clone())
            .collect())
    }

    async fn stored_bytes(&self, instance: &Instance) -> Result<u64> {
        Ok(self
            .objects()
            .iter()
            .filter(|((id, _), _)| *id == instance.id)
            .map(|(_, (m, _))| m.size)
            .sum())
    }
}

#[async_trait]
impl Presign for MemoryBlobStore {
    async fn presign(
        &self,
        _: &Instance,
        _: &ObjectPath,
        _: PresignMethod,
        _: Duration,
        _: &str,
    ) -> Result<String> {
        Err(Error::Forbidden(
            "objects in memory have no pre-signed URLs".into(),
        ))
    }

    async fn check_presigned(
        &self,
        _: &Instance,
        _: &ObjectPath,
        _: PresignMethod,
        _: i64,
        _: &str,
    ) -> Result<()> {
        Err(Error::Forbidden(
            "objects in memory have no pre-signed URLs".into(),
        ))
    }
}
