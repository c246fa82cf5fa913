//! Blob files: one file per object version, written once under a fresh random name and
//! never modified. An object's row in `storage.db` points at its current blob, so
//! replacing an object is writing a new blob and switching the row in one commit.

use std::{
    fs::{self, File, OpenOptions},
    future::Future,
    io::{self, BufWriter, Write},
    os::unix::fs::FileExt,
    path::{Path, PathBuf},
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
};

use quintet_core::{
    Result,
    object::EtagHasher,
    ports::storage::{ByteStream, Bytes, Stream},
};
use tokio::{sync::mpsc, task::JoinHandle};

/// Bytes read from a blob per step of a download, and the write buffer of an upload.
pub(super) const CHUNK: usize = 256 * 1024;

/// Chunks of an upload queued between the request and the writer thread.
const QUEUED_CHUNKS: usize = 8;

/// A fresh blob file name: 128 random bits in hex.
pub(super) fn new_name() -> Result<String> {
    Ok(quintet_core::hmac::to_hex(&quintet_core::id::random_bytes(
        16,
    )?))
}

/// Whether `name` looks like a blob file (and so may be collected when unreferenced).
pub(crate) fn is_blob_name(name: &str) -> bool {
    name.len() == 32 && name.bytes().all(|b| b.is_ascii_hexdigit())
}

/// What a finished upload wrote.
#[derive(Debug)]
pub(super) struct Written {
    pub size: u64,
    pub etag: String,
    /// The whole content when it is small enough to live in the metadata row
    /// ([`INLINE_MAX`]); no blob file was created then.
    pub inline: Option<Bytes>,
}

/// Objects up to this size are kept in `storage.db` beside their metadata instead of in a
/// blob file: one point lookup serves them, and uploading them costs one commit.
pub(crate) const INLINE_MAX: usize = 64 * 1024;

/// A blob being written is flushed to disk in the background every this many bytes, so
/// the final `fsync` has little left to do.
const SYNC_EVERY: u64 = 64 * 1024 * 1024;

/// Why an upload did not produce a blob.
#[derive(Debug)]
pub(super) enum WriteError {
    /// The request body failed (the client went away, or its framing was broken).
    Body(io::Error),
    /// The file could not be written.
    Io(io::Error),
}

pub(super) enum Msg {
    Data(Bytes),
    End,
}

/// An upload whose body has been received in full; it becomes durable with
/// [`Received::finish`]. Dropping a file upload unfinished removes its file.
type WriterHandle = JoinHandle<io::Result<Option<Written>>>;

pub(super) enum Received {
    /// Small enough to be kept inline: the whole content.
    Inline(Vec<Bytes>),
    /// Streamed to a blob file by a writer thread.
    File {
        tx: mpsc::Sender<Msg>,
        writer: WriterHandle,
    },
}

/// Receive `body`: up to [`INLINE_MAX`] bytes are kept in memory; beyond that everything
/// is streamed into a new blob file `dir/name`. Returns once every byte was taken; on
/// error, or when this future is dropped, the file is removed.
pub(super) async fn receive(
    dir: &Path,
    name: &str,
    mut body: ByteStream,
) -> std::result::Result<Received, WriteError> {
    let mut head: Vec<Bytes> = Vec::new();
    let mut head_len = 0;
    let mut file: Option<(mpsc::Sender<Msg>, WriterHandle)> = None;
    loop {
        let bytes = match std::future::poll_fn(|cx| body.as_mut().poll_next(cx)).await {
            Some(Ok(bytes)) if bytes.is_empty() => continue,
            Some(Ok(bytes)) => bytes,
            Some(Err(e)) => {
                if let Some((tx, writer)) = file {
                    drop(tx); // the writer removes the partial file
                    let _ = writer.await;
                }
                return Err(WriteError::Body(e));
            }
            None => {
                return Ok(match file {
                    Some((tx, writer)) => Received::File { tx, writer },
                    None => Received::Inline(head),
                });
            }
        };
        if file.is_none() {
            if head_len + bytes.len() <= INLINE_MAX {
                head_len += bytes.len();
                head.push(bytes);
                continue;
            }
            let (tx, rx) = mpsc::channel(QUEUED_CHUNKS);
            let (path, dir) = (dir.join(name), dir.to_owned());
            let writer = tokio::task::spawn_blocking(move || write_file(&path, &dir, rx));
            file = Some((tx, writer));
        }
        let Some((tx, _)) = &file else { continue };
        let mut sent = true;
        for chunk in head.drain(..).chain(std::iter::once(bytes)) {
            if tx.send(Msg::Data(chunk)).await.is_err() {
                sent = false;
                break;
            }
        }
        if !sent {
            // The writer stopped: its result says why.
            let Some((tx, writer)) = file.take() else {
                continue;
            };
            drop(tx);
            return Err(match writer.await {
                Ok(Err(e)) => WriteError::Io(e),
                Ok(Ok(_)) => WriteError::Io(io::Error::other("the blob writer stopped")),
                Err(e) => WriteError::Io(io::Error::other(e)),
            });
        }
    }
}

impl Received {
    /// Make the blob and its directory entry durable (nothing to do for inline content).
    pub(super) async fn finish(self) -> io::Result<Written> {
        let (tx, writer) = match self {
            Self::Inline(chunks) => {
                let mut hasher = EtagHasher::new();
                let mut all = Vec::with_capacity(chunks.iter().map(Bytes::len).sum());
                for c in &chunks {
                    hasher.update(c);
                    all.extend_from_slice(c);
                }
                return Ok(Written {
                    size: all.len() as u64,
                    etag: hasher.finish(),
                    inline: Some(Bytes::from(all)),
                });
            }
            Self::File { tx, writer } => (tx, writer),
        };
        // When the writer already stopped, the send fails and its result says why.
        let _ = tx.send(Msg::End).await;
        drop(tx);
        match writer.await {
            Ok(Ok(Some(written))) => Ok(written),
            Ok(Ok(None)) => Err(io::Error::other("the upload was abandoned")),
            Ok(Err(e)) => Err(e),
            Err(e) => Err(io::Error::other(e)),
        }
    }
}

/// The writer thread of one upload. Chunks are written here while a second thread hashes
/// them and a third flushes what was written every [`SYNC_EVERY`] bytes, so hashing,
/// writing and the disk work side by side. On `End` the file and its directory entry are
/// made durable. The file is removed unless it is complete.
fn write_file(path: &Path, dir: &Path, mut rx: mpsc::Receiver<Msg>) -> io::Result<Option<Written>> {
    let file = OpenOptions::new().write(true).create_new(true).open(path)?;
    let syncing = file.try_clone()?;
    let outcome = std::thread::scope(|scope| {
        let (hash_tx, hash_rx) = std::sync::mpsc::sync_channel::<Bytes>(QUEUED_CHUNKS);
        let hasher = scope.spawn(move || {
            let mut hasher = EtagHasher::new();
            for chunk in hash_rx {
                hasher.update(&chunk);
            }
            hasher.finish()
        });
        let (sync_tx, sync_rx) = std::sync::mpsc::sync_channel::<()>(1);
        let syncer = scope.spawn(move || {
            for () in sync_rx {
                // Early flushes only lighten the final fsync; their errors show there.
                let _ = syncing.sync_data();
            }
        });
        let written = (|| {
            let mut out = BufWriter::with_capacity(CHUNK, file);
            let (mut size, mut synced) = (0u64, 0u64);
            while let Some(msg) = rx.blocking_recv() {
                match msg {
                    Msg::Data(bytes) => {
                        size += bytes.len() as u64;
                        out.write_all(&bytes)?;
                        hash_tx
                            .send(bytes)
                            .map_err(|_| io::Error::other("the hashing thread stopped"))?;
                        if size - synced >= SYNC_EVERY {
                            out.flush()?;
                            synced = size;
                            let _ = sync_tx.try_send(()); // skipped while one is running
                        }
                    }
                    Msg::End => {
                        let file = out.into_inner().map_err(|e| e.into_error())?;
                        file.sync_all()?;
                        crate::datadir::sync_dir(dir)?;
                        return Ok(Some(size));
                    }
                }
            }
            Ok(None) // the request went away before the end
        })();
        drop((hash_tx, sync_tx));
        let etag = hasher.join();
        let _ = syncer.join();
        match (written, etag) {
            (Ok(Some(size)), Ok(etag)) => Ok(Some(Written {
                size,
                etag,
                inline: None,
            })),
            (Ok(Some(_)), Err(_)) => Err(io::Error::other("the hashing thread panicked")),
            (other, _) => other.map(|_| None),
        }
    });
    if !matches!(outcome, Ok(Some(_))) {
        remove_quietly(path);
    }
    outcome
}

/// Remove a blob file; a missing file is fine, other failures are logged (the start-up
/// sweep collects what is left).
pub(super) fn remove_quietly(path: &Path) {
    match fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => tracing::warn!(path = %path.display(), error = %e, "removing a blob failed"),
    }
}

/// Open blob `path` and stream `len` bytes from `start`. The file is opened (and the first
/// chunk read) before this returns, so a blob removed meanwhile is reported here as
/// `NotFound`; once open, the stream serves this version to its end.
pub(super) async fn read(path: PathBuf, start: u64, len: u64) -> io::Result<ByteStream> {
    let first_len = len.min(CHUNK as u64);
    let (file, first) = tokio::task::spawn_blocking(move || {
        let file = File::open(&path)?;
        let first = read_at(&file, start, first_len)?;
        Ok::<_, io::Error>((Arc::new(file), first))
    })
    .await
    .map_err(io::Error::other)??;
    let mut stream = FileStream {
        file,
        offset: start + first_len,
        remaining: len - first_len,
        ready: (first_len > 0).then_some(first),
        pending: None,
    };
    stream.prefetch();
    Ok(Box::pin(stream))
}

fn read_at(file: &File, offset: u64, len: u64) -> io::Result<Bytes> {
    let mut buf = vec![0u8; usize::try_from(len).map_err(io::Error::other)?];
    file.read_exact_at(&mut buf, offset)?;
    Ok(Bytes::from(buf))
}

/// A stream of one chunk (an inline object, or part of it).
pub(super) fn once(bytes: Bytes) -> ByteStream {
    Box::pin(Once(Some(bytes).filter(|b| !b.is_empty())))
}

struct Once(Option<Bytes>);

impl Stream for Once {
    type Item = io::Result<Bytes>;

    fn poll_next(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        Poll::Ready(self.0.take().map(Ok))
    }
}

/// A blob's bytes, read a chunk ahead of the consumer on the blocking pool.
struct FileStream {
    file: Arc<File>,
    offset: u64,
    remaining: u64,
    ready: Option<Bytes>,
    pending: Option<JoinHandle<io::Result<Bytes>>>,
}

impl FileStream {
    /// Start reading the next chunk, when there is one and none is being read.
    fn prefetch(&mut self) {
        if self.pending.is_some() || self.remaining == 0 {
            return;
        }
        let n = self.remaining.min(CHUNK as u64);
        let (file, offset) = (Arc::clone(&self.file), self.offset);
        self.offset += n;
        self.remaining -= n;
        self.pending = Some(tokio::task::spawn_blocking(move || {
            read_at(&file, offset, n)
        }));
    }
}

impl Stream for FileStream {
    type Item = io::Result<Bytes>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        if let Some(bytes) = this.ready.take() {
            this.prefetch();
            return Poll::Ready(Some(Ok(bytes)));
        }
        let Some(pending) = this.pending.as_mut() else {
            return Poll::Ready(None);
        };
        let result = match Pin::new(pending).poll(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(joined) => joined.map_err(io::Error::other).and_then(|r| r),
        };
        this.pending = None;
        match result {
            Ok(bytes) => {
                this.prefetch();
                Poll::Ready(Some(Ok(bytes)))
            }
            Err(e) => {
                this.remaining = 0;
                Poll::Ready(Some(Err(e)))
            }
        }
    }
}
