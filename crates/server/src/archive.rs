//! Export and import of the portable archive (`core::archive`) through the ports, so they
//! read from and write into whatever engines the node runs on. The admin API streams both
//! (`GET /_admin/export`, `POST /_admin/import`); the command line calls it.
//!
//! Memory stays flat: the export walks each instance page by page and hands records to a
//! bounded channel the response body drains; the import applies records as they are read,
//! in batches of bounded size, and streams each object's bytes into `BlobStore::put`.
//! Format, rules and limits: `docs/archive.md`.

use std::{collections::HashSet, sync::Arc};

use bytes::Bytes;
use futures_util::StreamExt;
use quintet_core::{
    AppName, Error, Instance, InstanceConfig, InstanceName, Result, ServiceType,
    accounts::{AccountName, Plan},
    archive::{
        AccountRecord, AppRecord, CHUNK_BYTES, CacheRecord, Decoder, Digest, Encoder, Header,
        InstanceRecord, JobRecord, KeyRecord, Kind, ObjectRecord, Record, SearchRecord, Tally,
        VERSION,
    },
    cache::{CacheKey, CacheValue, Glob, Ttl},
    keys::{AccessKey, Secret},
    mango::IndexDef,
    ports::{
        cache::SetMode,
        data::{BulkOp, ListQuery, MAX_BULK_ENTRIES},
        queue::{CarriedJob, JobBody, JobStatus, ListJobs, MAX_ERROR_BYTES, MAX_LIST_LIMIT},
        search::SearchKey,
        storage::{ByteStream, ListQuery as ObjectList, ObjectPath},
    },
    search::SearchDoc,
};
use serde::Serialize;
use sha2::{Digest as _, Sha256};
use tokio::sync::mpsc;

use crate::state::AppState;

/// Documents per bulk write on import: as many as one bulk request may carry, so that a
/// large import commits (and on the embedded engine `fsync`s) once per 10,000 documents
/// rather than once per 1,000.
const BATCH: usize = MAX_BULK_ENTRIES;
/// Bytes of documents per bulk write at most, on import.
const BATCH_BYTES: usize = 4 * 1024 * 1024;
/// Search documents per commit, on import.
const SEARCH_BATCH: usize = 1_000;
/// Items per page when walking an instance.
const PAGE: usize = 1_000;

/// What to export.
#[derive(Debug, Clone)]
pub struct ExportOptions {
    /// One application, or everything when `None`.
    pub app: Option<AppName>,
    /// Include access keys' secrets and queues' signing secrets.
    pub secrets: bool,
}

/// Where export records go: the response body, or nowhere (to tally what a node holds).
trait Sink: Send {
    fn send(&mut self, bytes: Bytes) -> impl std::future::Future<Output = Result<()>> + Send;

    /// Hand on what is buffered.
    fn flush(&mut self) -> impl std::future::Future<Output = Result<()>> + Send {
        async { Ok(()) }
    }
}

/// Bytes gathered before they are handed to the channel: one message per record would
/// cost a wake-up and a body frame per document.
const FLUSH_BYTES: usize = 64 * 1024;

/// Records to a channel the response body drains; a closed channel means the client left.
struct ChannelSink {
    tx: mpsc::Sender<std::io::Result<Bytes>>,
    buf: bytes::BytesMut,
}

impl ChannelSink {
    async fn hand_on(&mut self, bytes: Bytes) -> Result<()> {
        self.tx
            .send(Ok(bytes))
            .await
            .map_err(|_| Error::BadRequest("the client stopped reading the export".into()))
    }
}

impl Sink for ChannelSink {
    async fn send(&mut self, bytes: Bytes) -> Result<()> {
        if self.buf.is_empty() && bytes.len() >= FLUSH_BYTES {
            return self.hand_on(bytes).await;
        }
        self.buf.extend_from_slice(&bytes);
        if self.buf.len() >= FLUSH_BYTES {
            let chunk = self.buf.split().freeze();
            self.hand_on(chunk).await?;
        }
        Ok(())
    }

    async fn flush(&mut self) -> Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = self.buf.split().freeze();
        self.hand_on(chunk).await
    }
}

/// Records to nowhere.
struct NullSink;

impl Sink for NullSink {
    async fn send(&mut self, _: Bytes) -> Result<()> {
        Ok(())
    }
}

/// Start an export; its bytes arrive on the returned channel, ending with an error item
/// (and no end record, so no reader accepts it) when the export fails midway.
pub fn export(state: AppState, options: ExportOptions) -> mpsc::Receiver<std::io::Result<Bytes>> {
    let (tx, rx) = mpsc::channel(8);
    tokio::spawn(async move {
        let mut sink = ChannelSink {
            tx: tx.clone(),
            buf: bytes::BytesMut::new(),
        };
        if let Err(e) = write_archive(&state, &options, &mut sink).await {
            tracing::error!(error = %e, "export failed");
            let _ = tx.send(Err(std::io::Error::other(e.to_string()))).await;
        }
    });
    rx
}

/// Check that the application to export exists.
pub async fn check_export(state: &AppState, options: &ExportOptions) -> Result<()> {
    if let Some(app) = &options.app
        && !app.is_domain()
        && state.services.registry.get_app(app).await?.is_none()
    {
        return Err(quintet_core::ports::registry::answers::app_missing(app));
    }
    Ok(())
}

async fn write_archive(
    state: &AppState,
    options: &ExportOptions,
    sink: &mut impl Sink,
) -> Result<()> {
    let mut enc = Encoder::new();
    let header = Header {
        format: VERSION,
        app: options.app.as_ref().map(|a| a.as_str().to_owned()),
        secrets: options.secrets,
        created_ms: state.clock.now_ms(),
        writer: format!("quintet {}", env!("CARGO_PKG_VERSION")),
    };
    sink.send(enc.start(&header)?).await?;
    let registry = &state.services.registry;
    let apps = match &options.app {
        Some(app) => registry.get_app(app).await?.into_iter().collect(),
        None => registry.list_apps(None).await?,
    };
    let accounts: HashSet<&AccountName> = apps.iter().filter_map(|a| a.account.as_ref()).collect();
    for usage in registry.list_accounts().await? {
        if accounts.contains(&usage.account.name) {
            let rec = AccountRecord {
                name: usage.account.name.as_str().to_owned(),
                plan: usage.account.plan.as_str().to_owned(),
            };
            sink.send(enc.json(Kind::Account, &rec)?).await?;
        }
    }
    for app in &apps {
        let Some(account) = &app.account else {
            continue; // the built-in domain application
        };
        let rec = AppRecord {
            name: app.name.as_str().to_owned(),
            account: account.as_str().to_owned(),
        };
        sink.send(enc.json(Kind::App, &rec)?).await?;
        for key in registry.list_keys(&app.name).await? {
            let rec = KeyRecord {
                app: app.name.as_str().to_owned(),
                key: key.key.as_str().to_owned(),
                secret: options.secrets.then(|| key.secret.expose().to_owned()),
                revoked: key.revoked_ms.is_some(),
                created_ms: key.created_ms,
            };
            sink.send(enc.json(Kind::Key, &rec)?).await?;
        }
    }
    for instance in registry.list_instances(options.app.as_ref()).await? {
        let mut config = instance.config.to_json();
        if let (InstanceConfig::Queue(_), false, Some(map)) =
            (&instance.config, options.secrets, config.as_object_mut())
        {
            map.remove("secret");
        }
        let rec = InstanceRecord {
            app: instance.app.as_str().to_owned(),
            kind: instance.kind().as_str().to_owned(),
            name: instance.name.as_str().to_owned(),
            config,
        };
        sink.send(enc.json(Kind::Instance, &rec)?).await?;
        let tally = walk_instance(state, &instance, &mut enc, sink, true).await?;
        sink.send(enc.json(Kind::InstanceEnd, &tally)?).await?;
    }
    sink.send(enc.finish()?).await?;
    sink.flush().await
}

/// The tally of what `instance` holds now, as an export would count it.
pub async fn tally(state: &AppState, instance: &Instance) -> Result<Tally> {
    walk_instance(state, instance, &mut Encoder::new(), &mut NullSink, false).await
}

/// Walk `instance`'s contents in the export order, writing records when `write`.
async fn walk_instance(
    state: &AppState,
    instance: &Instance,
    enc: &mut Encoder,
    sink: &mut impl Sink,
    write: bool,
) -> Result<Tally> {
    let services = &state.services;
    let mut digest = Digest::new();
    macro_rules! emit {
        ($kind:expr, $payload:expr) => {
            if write {
                sink.send(enc.record($kind, $payload)?).await?;
            }
        };
    }
    match instance.kind() {
        ServiceType::Data => {
            for index in services.data.indexes(instance).await? {
                let text = index.to_json().to_string();
                digest.item(&[text.as_bytes()]);
                emit!(Kind::Index, text.as_bytes());
            }
            let mut docs = services.data.list(instance, ListQuery::default()).await?;
            while let Some(doc) = docs.next().await {
                let doc = doc?;
                digest.item(&[doc.get().as_bytes()]);
                emit!(Kind::Doc, doc.get().as_bytes());
            }
        }
        ServiceType::Cache => {
            let now = state.clock.now_ms();
            for entry in services.cache.query(instance, &Glob::all()).await? {
                let ttl_ms = match entry.expires_ms {
                    Some(at) if at <= now => continue,
                    at => at.map(|at| at - now),
                };
                digest.item(&[
                    entry.key.as_str().as_bytes(),
                    entry.value.as_str().as_bytes(),
                ]);
                if write {
                    let rec = CacheRecord {
                        key: entry.key.as_str().to_owned(),
                        value: entry.value.as_str().to_owned(),
                        ttl_ms,
                    };
                    sink.send(enc.json(Kind::Cache, &rec)?).await?;
                }
            }
        }
        ServiceType::Search => {
            let mut after: Option<SearchKey> = None;
            loop {
                let page = services
                    .search
                    .documents(instance, after.as_ref(), PAGE)
                    .await?;
                let Some((last, _)) = page.last() else { break };
                after = Some(last.clone());
                for (key, doc) in page {
                    digest.item(&[key.as_str().as_bytes(), doc.get().as_bytes()]);
                    if write {
                        let rec = SearchRecord {
                            key: key.as_str().to_owned(),
                            doc,
                        };
                        sink.send(enc.json(Kind::Search, &rec)?).await?;
                    }
                }
            }
        }
        ServiceType::Queue => {
            let mut after: Option<String> = None;
            loop {
                // Every job not delivered: waiting (READY) and failed (ERROR) alike.
                let query = ListJobs {
                    status: None,
                    limit: MAX_LIST_LIMIT,
                    after: after.clone(),
                };
                let page = services.queue.list(instance, &query).await?;
                let Some(last) = page.last() else { break };
                after = Some(last.id.clone());
                for job in page {
                    let status = job.status.as_str();
                    digest.item(&[status.as_bytes(), job.job.get().as_bytes()]);
                    if write {
                        let rec = JobRecord {
                            status: status.to_owned(),
                            job: job.job,
                            attempts: job.attempts,
                            error: job.error,
                            created_ms: job.created_ms,
                        };
                        sink.send(enc.json(Kind::Job, &rec)?).await?;
                    }
                }
            }
        }
        ServiceType::Storage => {
            let mut after: Option<String> = None;
            loop {
                let query = ObjectList {
                    prefix: "",
                    after: after.as_deref(),
                    limit: PAGE,
                };
                let page = services.storage.list(instance, query).await?;
                let Some(last) = page.last() else { break };
                after = Some(last.path.as_str().to_owned());
                for meta in page {
                    // Removed since the listing: not in the export.
                    let Some(object) = services.storage.get(instance, &meta.path, None).await?
                    else {
                        continue;
                    };
                    let meta = object.meta;
                    if write {
                        let rec = ObjectRecord {
                            path: meta.path.as_str().to_owned(),
                            content_type: meta.content_type.clone(),
                            size: meta.size,
                            etag: meta.etag.clone(),
                        };
                        sink.send(enc.json(Kind::Object, &rec)?).await?;
                    }
                    let mut body = object.body;
                    let mut hash = Sha256::new();
                    let mut seen: u64 = 0;
                    while let Some(chunk) = body.next().await {
                        let chunk = chunk.map_err(|e| Error::io("reading an object", &e))?;
                        seen += chunk.len() as u64;
                        if seen > meta.size {
                            return Err(Error::internal(format!(
                                "object {:?} yielded more bytes than its size",
                                meta.path.as_str()
                            )));
                        }
                        hash.update(&chunk);
                        for piece in chunk.chunks(CHUNK_BYTES) {
                            emit!(Kind::Bytes, piece);
                        }
                    }
                    if seen != meta.size {
                        return Err(Error::internal(format!(
                            "object {:?} yielded {seen} bytes of {}",
                            meta.path.as_str(),
                            meta.size
                        )));
                    }
                    let sha = hash.finalize();
                    digest.item(&[
                        meta.path.as_str().as_bytes(),
                        meta.content_type.as_bytes(),
                        &sha[..],
                    ]);
                }
            }
        }
    }
    Ok(digest.tally())
}

/// How to import.
#[derive(Debug, Clone, Default)]
pub struct ImportOptions {
    /// Import an application's archive under this name instead of its own.
    pub app: Option<AppName>,
    /// Import into existing applications and instances (see `docs/archive.md`).
    pub merge: bool,
}

/// One imported instance: what the archive said it held and what the node holds now.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Imported {
    /// Its application.
    pub app: String,
    /// Its type.
    #[serde(rename = "type")]
    pub kind: String,
    /// Its name.
    pub name: String,
    /// The archive's count.
    pub count: u64,
    /// The archive's digest.
    pub digest: String,
    /// The count read back from the node.
    pub imported_count: u64,
    /// The digest read back from the node.
    pub imported_digest: String,
    /// Whether they agree.
    pub equal: bool,
}

/// What an import did.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ImportReport {
    /// Accounts created.
    pub accounts: u64,
    /// Applications created.
    pub apps: u64,
    /// Access keys carried with their secrets.
    pub keys: u64,
    /// Access keys in the archive that were not imported: without their secrets (exported
    /// without `--include-secrets`), revoked, or with an id that exists here.
    pub keys_skipped: u64,
    /// Every instance, with its verification.
    pub instances: Vec<Imported>,
    /// Records read.
    pub records: u64,
}

/// What a failed import must undo.
#[derive(Default)]
struct Undo {
    apps: Vec<AppName>,
    instances: Vec<Instance>,
}

/// An instance being imported.
struct Current {
    instance: Arc<Instance>,
    /// Whether it existed before (merge).
    existed: bool,
    docs: Vec<BulkOp>,
    doc_bytes: usize,
    /// The write of the previous batch of documents, still running: the next batch is
    /// read and checked meanwhile (at most one write in flight, so batches apply in order
    /// and at most two are held).
    writing: Option<tokio::task::JoinHandle<Result<()>>>,
    search: Vec<SearchDoc>,
    object: Option<Upload>,
}

/// An object whose bytes are arriving.
struct Upload {
    left: u64,
    tx: Option<mpsc::Sender<std::io::Result<Bytes>>>,
    task: tokio::task::JoinHandle<Result<quintet_core::ports::storage::ObjectMeta>>,
}

/// The importer: records in, applied through the ports.
pub struct Importer {
    state: AppState,
    options: ImportOptions,
    decoder: Decoder,
    /// The archive's application and the name it is imported under.
    rename: Option<(String, AppName)>,
    current: Option<Current>,
    undo: Undo,
    report: ImportReport,
}

impl Importer {
    /// An importer into `state`'s node.
    pub fn new(state: AppState, options: ImportOptions) -> Self {
        Self {
            state,
            options,
            decoder: Decoder::new(),
            rename: None,
            current: None,
            undo: Undo::default(),
            report: ImportReport::default(),
        }
    }

    /// Feed the next bytes of the archive, applying every record they complete.
    pub async fn feed(&mut self, bytes: &[u8]) -> Result<()> {
        self.decoder.feed(bytes);
        while let Some(record) = self.decoder.next_record()? {
            self.report.records += 1;
            self.apply(record).await?;
        }
        Ok(())
    }

    /// The input ended: check it was whole, and report.
    pub async fn finish(mut self) -> Result<ImportReport> {
        match self.decoder.finish() {
            Ok(()) => Ok(std::mem::take(&mut self.report)),
            Err(e) => Err(self.fail(e).await),
        }
    }

    /// Undo what a failed import created (nothing in merge mode into what existed), and
    /// answer `e`.
    pub async fn fail(&mut self, e: Error) -> Error {
        if let Some(current) = self.current.take() {
            if let Some(upload) = current.object {
                upload.task.abort();
            }
            // Let a write in flight end before its instance is removed.
            if let Some(writing) = current.writing {
                let _ = writing.await;
            }
        }
        let undo = std::mem::take(&mut self.undo);
        let instances = &self.state.instances;
        for instance in undo.instances.iter().rev() {
            if let Err(err) = instances
                .destroy(&instance.app, instance.kind(), instance.name.as_str())
                .await
            {
                tracing::error!(error = %err, instance = %instance.id, "undoing an import");
            }
        }
        for app in undo.apps.iter().rev() {
            match instances.delete_app(app).await {
                Ok((_, left)) => {
                    self.state.auth.keys.forget_app(app);
                    if let Err(err) = instances.drop_contents(&left).await {
                        tracing::error!(error = %err, %app, "undoing an import");
                    }
                }
                Err(err) => tracing::error!(error = %err, %app, "undoing an import"),
            }
        }
        e
    }

    /// The application a record's `app` names on this node.
    fn target_app(&self, app: &str) -> Result<AppName> {
        if let Some((from, to)) = &self.rename
            && from == app
        {
            return Ok(to.clone());
        }
        if app == AppName::DOMAIN {
            return Ok(AppName::domain());
        }
        app.parse()
            .map_err(|e: Error| quintet_core::archive::corrupt(e.to_string()))
    }

    async fn apply(&mut self, record: Record) -> Result<()> {
        if record.kind != Kind::Doc {
            // Every other record applies after the documents before it.
            self.settle().await?;
        }
        match record.kind {
            Kind::Header => {
                let header: Header = record.parse()?;
                match (&header.app, &self.options.app) {
                    (Some(from), Some(to)) => self.rename = Some((from.clone(), to.clone())),
                    (None, Some(_)) => {
                        return Err(Error::invalid(
                            "--app renames the application of a one-application archive; \
                             this archive holds everything",
                        ));
                    }
                    _ => {}
                }
            }
            Kind::Account => {
                let rec: AccountRecord = record.parse()?;
                let name: AccountName = rec.name.parse()?;
                let plan: Plan = rec.plan.parse()?;
                let registry = &self.state.services.registry;
                if registry.get_account(&name).await?.is_none() {
                    registry.create_account(&name, plan).await?;
                    self.report.accounts += 1;
                }
            }
            Kind::App => {
                let rec: AppRecord = record.parse()?;
                let app = self.target_app(&rec.name)?;
                let account: AccountName = rec.account.parse()?;
                let registry = &self.state.services.registry;
                if registry.get_app(&app).await?.is_some() {
                    if !self.options.merge {
                        return Err(Error::Conflict(format!(
                            "application \"{app}\" exists on this server; import under another \
                             name (--app NEWNAME) or merge into it (--merge)"
                        )));
                    }
                } else {
                    registry.create_app(&app, &account).await?;
                    self.undo.apps.push(app);
                    self.report.apps += 1;
                }
            }
            Kind::Key => {
                let rec: KeyRecord = record.parse()?;
                self.restore_key(rec).await?;
            }
            Kind::Instance => {
                let rec: InstanceRecord = record.parse()?;
                self.open_instance(rec).await?;
            }
            Kind::Index => {
                let inst = self.instance()?;
                let value: serde_json::Value = record.parse()?;
                // As the exporting server stored it: see `IndexDef::from_stored_json`.
                let def = IndexDef::from_stored_json(&value)?;
                self.state.services.data.create_index(&inst, def).await?;
            }
            Kind::Doc => {
                let op = doc_op(record.text()?)?;
                let current = self.current_mut()?;
                current.doc_bytes += record.payload.len();
                current.docs.push(op);
                if current.docs.len() >= BATCH || current.doc_bytes >= BATCH_BYTES {
                    self.write_docs().await?;
                }
            }
            Kind::Cache => {
                let inst = self.instance()?;
                let rec: CacheRecord = record.parse()?;
                let key: CacheKey = rec.key.parse()?;
                let raw: Box<serde_json::value::RawValue> = serde_json::from_str(&rec.value)
                    .map_err(|e| quintet_core::archive::corrupt(format!("a cache value: {e}")))?;
                let value = CacheValue::from_raw(&raw)?;
                let ttl = rec.ttl_ms.map(ttl_of).transpose()?;
                self.state
                    .services
                    .cache
                    .set(&inst, &key, value, ttl, SetMode::Upsert)
                    .await?;
            }
            Kind::Search => {
                let inst = self.instance()?;
                let rec: SearchRecord = record.parse()?;
                let key: SearchKey = rec.key.parse()?;
                let doc: quintet_core::ports::data::Document = serde_json::from_str(rec.doc.get())
                    .map_err(|e| {
                        quintet_core::archive::corrupt(format!("a search document: {e}"))
                    })?;
                let config = quintet_core::ports::search::config_of(&inst)?;
                let doc = SearchDoc::new(key, doc, config)?;
                let current = self.current_mut()?;
                current.search.push(doc);
                if current.search.len() >= SEARCH_BATCH {
                    self.flush().await?;
                }
            }
            Kind::Job => {
                let inst = self.instance()?;
                let rec: JobRecord = record.parse()?;
                let job = carried_job(rec)?;
                self.state
                    .services
                    .queue
                    .restore(&inst, &job, self.state.clock.now_ms())
                    .await?;
            }
            Kind::Object => {
                let inst = self.instance()?;
                let rec: ObjectRecord = record.parse()?;
                let path: ObjectPath = rec.path.parse()?;
                let (tx, rx) = mpsc::channel::<std::io::Result<Bytes>>(4);
                let body: ByteStream = Box::pin(futures_util::stream::unfold(rx, |mut rx| async {
                    rx.recv().await.map(|item| (item, rx))
                }));
                let storage = Arc::clone(&self.state.services.storage);
                let task = tokio::spawn(async move {
                    storage.put(&inst, &path, &rec.content_type, body).await
                });
                let upload = Upload {
                    left: rec.size,
                    tx: Some(tx),
                    task,
                };
                self.current_mut()?.object = Some(upload);
                self.finish_object_if_whole().await?;
            }
            Kind::Bytes => {
                let upload = self
                    .current_mut()?
                    .object
                    .as_mut()
                    .ok_or_else(|| quintet_core::archive::corrupt("bytes outside an object"))?;
                upload.left = upload.left.saturating_sub(record.payload.len() as u64);
                if let Some(tx) = &upload.tx
                    && tx.send(Ok(record.payload)).await.is_err()
                {
                    // The upload ended early: its task holds the reason.
                    let upload = self.current_mut()?.object.take();
                    if let Some(upload) = upload {
                        return Err(join_upload(upload).await.err().unwrap_or_else(|| {
                            Error::internal("an object upload ended before its bytes")
                        }));
                    }
                }
                self.finish_object_if_whole().await?;
            }
            Kind::InstanceEnd => {
                let tally: Tally = record.parse()?;
                self.close_instance(tally).await?;
            }
            Kind::End => {}
        }
        Ok(())
    }

    /// Carry a key with its secret; one without (exported without secrets), a revoked one,
    /// or one whose id exists here (an application copied under another name) is counted
    /// as skipped.
    async fn restore_key(&mut self, rec: KeyRecord) -> Result<()> {
        let Some(secret) = rec.secret.filter(|_| !rec.revoked) else {
            self.report.keys_skipped += 1;
            return Ok(());
        };
        let key = AccessKey {
            key: rec.key.parse()?,
            app: self.target_app(&rec.app)?,
            secret: Secret::from_stored(secret),
            created_ms: rec.created_ms,
            last_used_ms: None,
            revoked_ms: None,
        };
        match self.state.services.registry.restore_key(&key).await {
            Ok(()) => {
                // A registry of one node reports no changes: forget here that it was missing.
                self.state.auth.keys.created(&key.key);
                self.report.keys += 1;
            }
            Err(Error::Conflict(_)) => self.report.keys_skipped += 1,
            Err(e) => return Err(e),
        }
        Ok(())
    }

    async fn open_instance(&mut self, rec: InstanceRecord) -> Result<()> {
        let kind = rec.service()?;
        let app = self.target_app(&rec.app)?;
        let name: InstanceName = rec.name.parse()?;
        let registry = &self.state.services.registry;
        let existing = registry.get_instance(&app, kind, &name).await?;
        let (instance, existed) = match existing {
            Some(instance) if self.options.merge => (instance, true),
            Some(_) => {
                return Err(Error::Conflict(format!(
                    "{kind} instance \"{name}\" of application \"{app}\" exists on this \
                     server; import with --merge to add the archive's contents to it"
                )));
            }
            None => {
                if !app.is_domain() && registry.get_app(&app).await?.is_none() {
                    return Err(Error::NotFound(format!(
                        "application \"{app}\" does not exist; the archive names it before \
                         its instances only in whole exports and application exports"
                    )));
                }
                let config = InstanceConfig::from_stored(kind, &rec.config)?;
                let instance = self.state.instances.create(&app, &name, config).await?;
                if !self.undo.apps.contains(&app) {
                    self.undo.instances.push(instance.clone());
                }
                (instance, false)
            }
        };
        self.current = Some(Current {
            instance: Arc::new(instance),
            existed,
            docs: Vec::new(),
            doc_bytes: 0,
            writing: None,
            search: Vec::new(),
            object: None,
        });
        Ok(())
    }

    async fn close_instance(&mut self, tally: Tally) -> Result<()> {
        self.flush().await?;
        let Some(current) = self.current.take() else {
            return Err(quintet_core::archive::corrupt(
                "an instance end outside an instance",
            ));
        };
        let instance = current.instance;
        if instance.kind() == ServiceType::Queue {
            self.state.dispatcher.wake(&instance);
        }
        let now = tally_of(&self.state, &instance).await?;
        let equal = now == tally;
        if !equal && !current.existed {
            return Err(Error::internal(format!(
                "{} instance \"{}\" of \"{}\" does not read back as exported: the archive \
                 holds {} items ({}), the node {} ({})",
                instance.kind(),
                instance.name,
                instance.app,
                tally.count,
                tally.digest,
                now.count,
                now.digest
            )));
        }
        self.report.instances.push(Imported {
            app: instance.app.as_str().to_owned(),
            kind: instance.kind().as_str().to_owned(),
            name: instance.name.as_str().to_owned(),
            count: tally.count,
            digest: tally.digest,
            imported_count: now.count,
            imported_digest: now.digest,
            equal,
        });
        Ok(())
    }

    fn current_mut(&mut self) -> Result<&mut Current> {
        self.current
            .as_mut()
            .ok_or_else(|| quintet_core::archive::corrupt("contents outside an instance"))
    }

    fn instance(&self) -> Result<Arc<Instance>> {
        self.current
            .as_ref()
            .map(|c| Arc::clone(&c.instance))
            .ok_or_else(|| quintet_core::archive::corrupt("contents outside an instance"))
    }

    /// Write the batched documents and search documents, and wait for every write.
    async fn flush(&mut self) -> Result<()> {
        self.write_docs().await?;
        self.settle().await?;
        let services = Arc::clone(&self.state.services);
        let current = self.current_mut()?;
        let search = std::mem::take(&mut current.search);
        if !search.is_empty() {
            services.search.bulk(&current.instance, search).await?;
        }
        Ok(())
    }

    /// Start the write of the batched documents once the previous batch's write ended;
    /// it runs while the next batch is read.
    async fn write_docs(&mut self) -> Result<()> {
        self.settle().await?;
        let services = Arc::clone(&self.state.services);
        let current = self.current_mut()?;
        if current.docs.is_empty() {
            return Ok(());
        }
        let inst = Arc::clone(&current.instance);
        let docs = std::mem::take(&mut current.docs);
        current.doc_bytes = 0;
        current.writing = Some(tokio::spawn(async move {
            for outcome in services.data.bulk(&inst, docs).await? {
                if !outcome.ok {
                    return Err(Error::invalid(format!(
                        "document {:?} was not imported: {}",
                        outcome.id.unwrap_or_default(),
                        outcome.error.unwrap_or_default()
                    )));
                }
            }
            Ok(())
        }));
        Ok(())
    }

    /// Wait for the documents' write in flight, if any; its error is the import's.
    async fn settle(&mut self) -> Result<()> {
        let Some(writing) = self.current.as_mut().and_then(|c| c.writing.take()) else {
            return Ok(());
        };
        writing
            .await
            .map_err(|e| Error::internal(format!("a write of documents failed: {e}")))?
    }

    /// When the current object has all its bytes, end its upload and wait for it.
    async fn finish_object_if_whole(&mut self) -> Result<()> {
        let current = self.current_mut()?;
        if current.object.as_ref().is_some_and(|u| u.left == 0)
            && let Some(mut upload) = current.object.take()
        {
            upload.tx = None;
            join_upload(upload).await?;
        }
        Ok(())
    }
}

async fn join_upload(upload: Upload) -> Result<quintet_core::ports::storage::ObjectMeta> {
    drop(upload.tx);
    upload
        .task
        .await
        .map_err(|e| Error::internal(format!("an object upload failed: {e}")))?
}

async fn tally_of(state: &AppState, instance: &Instance) -> Result<Tally> {
    tally(state, instance).await
}

/// The write of a document's stored text, checked as a bulk entry is (stored as it is
/// when already in stored form, else parsed and written anew).
fn doc_op(text: &str) -> Result<BulkOp> {
    match BulkOp::parse_entry(text) {
        op @ BulkOp::Put { .. } => Ok(op),
        BulkOp::Reject { error, .. } => Err(quintet_core::archive::corrupt(format!(
            "a document is not one: {error}"
        ))),
        BulkOp::Delete { .. } => Err(quintet_core::archive::corrupt("a document is not one")),
    }
}

/// A job record as the queue stores it again: its status, attempts, error and creation
/// time as they were.
fn carried_job(rec: JobRecord) -> Result<CarriedJob> {
    let corrupt = quintet_core::archive::corrupt;
    let doc: quintet_core::ports::data::Document =
        serde_json::from_str(rec.job.get()).map_err(|e| corrupt(format!("a job: {e}")))?;
    let status: JobStatus = rec
        .status
        .parse()
        .map_err(|_| corrupt(format!("a job has the unknown status {:?}", rec.status)))?;
    if rec
        .error
        .as_ref()
        .is_some_and(|e| e.len() > MAX_ERROR_BYTES)
    {
        return Err(corrupt(format!(
            "a job's error is longer than {MAX_ERROR_BYTES} bytes"
        )));
    }
    Ok(CarriedJob {
        body: JobBody::from_document(&doc)?,
        status,
        attempts: rec.attempts,
        error: rec.error,
        created_ms: rec.created_ms,
    })
}

/// A remaining time to live as a [`Ttl`], rounded up to the second.
fn ttl_of(ms: i64) -> Result<Ttl> {
    let secs = ms.max(1).saturating_add(999) / 1000;
    format!("{secs}s").parse()
}
