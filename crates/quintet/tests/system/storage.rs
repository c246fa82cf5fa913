//! Storage against the real binary: uploads survive `kill -9`, a crash mid-upload leaves
//! the previous object, SIGTERM lets an upload in flight finish, and a large object passes
//! through without the server's memory growing with it.

use std::{path::Path, time::Duration};

use quintet_testkit::Process;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

use crate::BIN;

fn bin() -> &'static Path {
    Path::new(BIN)
}

const CHUNK: usize = 64 * 1024;
const CHUNKS: usize = 8;

fn chunk(i: usize) -> Vec<u8> {
    vec![b'a' + (i % 26) as u8; CHUNK]
}

fn whole() -> Vec<u8> {
    (0..CHUNKS).flat_map(chunk).collect()
}

/// Start a raw upload of `CHUNKS` chunks to `path` and return once the server is reading
/// its body (it answered `100 Continue`), with the first chunk sent.
async fn start_upload(p: &Process, path: &str) -> TcpStream {
    let addr = p.url("").trim_start_matches("http://").to_owned();
    let mut tcp = TcpStream::connect(&addr).await.unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/octet-stream\r\n\
         Content-Length: {}\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n",
        CHUNK * CHUNKS
    );
    tcp.write_all(head.as_bytes()).await.unwrap();
    let mut seen = Vec::new();
    while !seen.ends_with(b"\r\n\r\n") {
        let mut byte = [0u8; 1];
        tcp.read_exact(&mut byte).await.unwrap();
        seen.push(byte[0]);
    }
    let seen = String::from_utf8_lossy(&seen);
    assert!(seen.starts_with("HTTP/1.1 100"), "{seen}");
    tcp.write_all(&chunk(0)).await.unwrap();
    tcp
}

/// Send the remaining chunks slowly and read the status line.
async fn finish_upload(mut tcp: TcpStream) -> String {
    for i in 1..CHUNKS {
        tokio::time::sleep(Duration::from_millis(50)).await;
        tcp.write_all(&chunk(i)).await.unwrap();
    }
    let mut answer = Vec::new();
    tcp.read_to_end(&mut answer).await.unwrap();
    String::from_utf8_lossy(&answer).into_owned()
}

async fn download(p: &Process, path: &str) -> (u16, Vec<u8>) {
    let res = p.http().get(p.url(path)).send().await.unwrap();
    (res.status().as_u16(), res.bytes().await.unwrap().to_vec())
}

fn blob_files(data_dir: &Path) -> usize {
    std::fs::read_dir(data_dir.join("storage"))
        .unwrap()
        .flat_map(|d| std::fs::read_dir(d.unwrap().path()).unwrap())
        .count()
}

#[tokio::test]
async fn an_acknowledged_upload_survives_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = Process::spawn(bin(), dir.path(), &[]);
    p.create("storage", "files", None).await;
    let body = whole();
    let r = p
        .send(
            p.request(reqwest::Method::POST, "/storage/files/a/b.bin")
                .body(body.clone()),
        )
        .await
        .expect(200);
    assert_eq!(r.body, serde_json::json!({"ok": true}));
    p.kill9();
    p.restart();
    assert_eq!(download(&p, "/storage/files/a/b.bin").await, (200, body));
}

#[tokio::test]
async fn kill_9_during_an_upload_keeps_the_previous_object_and_no_partial_file() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = Process::spawn(bin(), dir.path(), &[]);
    p.create("storage", "files", None).await;
    let first = vec![b'1'; 200 * 1024];
    p.send(
        p.request(reqwest::Method::POST, "/storage/files/doc")
            .body(first.clone()),
    )
    .await
    .expect(200);
    let mut tcp = start_upload(&p, "/storage/files/doc").await;
    tcp.write_all(&chunk(1)).await.unwrap();
    // Kill once the half-written blob is on disk beside the first one.
    for _ in 0..500 {
        if blob_files(dir.path()) == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(blob_files(dir.path()), 2);
    p.kill9();
    drop(tcp);
    p.restart();
    assert_eq!(download(&p, "/storage/files/doc").await, (200, first));
    // The start-up sweep removed the half-written blob.
    assert_eq!(blob_files(dir.path()), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_a_slow_upload_in_flight_finish() {
    let dir = tempfile::tempdir().unwrap();
    let p = Process::spawn(bin(), dir.path(), &[]);
    p.create("storage", "files", None).await;
    let tcp = start_upload(&p, "/storage/files/slow.bin").await;
    let stopping = tokio::task::spawn_blocking(move || {
        let mut p = p;
        let status = p.signal_and_wait("TERM", Duration::from_secs(60));
        (status, p)
    });
    let answer = finish_upload(tcp).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.ends_with(r#"{"ok":true}"#), "{answer}");
    let (status, mut p) = stopping.await.unwrap();
    assert!(status.success(), "{status:?}");
    p.restart();
    assert_eq!(
        download(&p, "/storage/files/slow.bin").await,
        (200, whole())
    );
}

/// The peak resident set (`VmHWM`) of process `pid`, in bytes.
fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .unwrap_or_else(|| panic!("no VmHWM in /proc/{pid}/status"));
    let kib: u64 = line
        .trim_start_matches("VmHWM:")
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .unwrap();
    kib * 1024
}

const MIB: usize = 1024 * 1024;

/// The byte at `offset` of the large object: each MiB holds one value.
fn byte_at(offset: usize) -> u8 {
    (offset / MIB % 251) as u8
}

/// Upload `mib` MiB to `path`, generated a MiB at a time while the request is sent.
async fn upload_generated(p: &Process, path: &str, mib: usize) {
    let chunks = futures_util::stream::iter(
        (0..mib).map(|i| Ok::<_, std::io::Error>(vec![byte_at(i * MIB); MIB])),
    );
    p.send(
        p.request(reqwest::Method::POST, path)
            .header("content-type", "application/octet-stream")
            .header("content-length", (mib * MIB).to_string())
            .body(reqwest::Body::wrap_stream(chunks)),
    )
    .await
    .expect(200);
}

/// Download `path` chunk by chunk, checking each chunk's ends against [`byte_at`] without
/// keeping it; returns the length.
async fn download_checked(p: &Process, path: &str) -> usize {
    let mut res = p.http().get(p.url(path)).send().await.unwrap();
    assert_eq!(res.status(), 200);
    let mut offset = 0;
    while let Some(chunk) = res.chunk().await.unwrap() {
        if let (Some(first), Some(last)) = (chunk.first(), chunk.last()) {
            assert_eq!(*first, byte_at(offset), "at {offset}");
            assert_eq!(
                *last,
                byte_at(offset + chunk.len() - 1),
                "before {}",
                offset + chunk.len()
            );
        }
        offset += chunk.len();
    }
    offset
}

/// Issue 7: "memory stays flat: objects are never held whole in memory". A 256 MiB object
/// goes up and comes back down while the server's peak resident set grows by less than
/// 64 MiB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_256_mib_object_passes_through_in_flat_memory() {
    const OBJECT_MIB: usize = 256;
    let dir = tempfile::tempdir().unwrap();
    let p = Process::spawn(bin(), dir.path(), &[]);
    p.create("storage", "files", None).await;
    // Warm up: the writer, hashing and reading paths, threads and buffers exist.
    upload_generated(&p, "/storage/files/small.bin", 2).await;
    assert_eq!(
        download_checked(&p, "/storage/files/small.bin").await,
        2 * MIB
    );
    let before = peak_rss(p.pid());

    upload_generated(&p, "/storage/files/big.bin", OBJECT_MIB).await;
    let r = p
        .send(p.request(reqwest::Method::HEAD, "/storage/files/big.bin"))
        .await
        .expect(200);
    assert_eq!(
        r.header("content-length"),
        Some((OBJECT_MIB * MIB).to_string().as_str())
    );
    assert_eq!(
        download_checked(&p, "/storage/files/big.bin").await,
        OBJECT_MIB * MIB
    );

    let after = peak_rss(p.pid());
    let grown = after.saturating_sub(before);
    assert!(
        grown < 64 * MIB as u64,
        "peak RSS grew by {} MiB (from {} MiB to {} MiB) for a {OBJECT_MIB} MiB object",
        grown / MIB as u64,
        before / MIB as u64,
        after / MIB as u64
    );
}
