//! The real binary under a low open-file limit: stalled request bodies and running out of
//! file descriptors must not stop it from answering everyone else.

use crate::BIN;
use std::{
    net::SocketAddr,
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use quintet_testkit::Process;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpSocket, TcpStream},
};

/// A script that runs the binary with at most `limit` open files (soft and hard).
fn with_fd_limit(dir: &Path, limit: u32) -> PathBuf {
    let script = dir.join("quintet-with-fd-limit");
    std::fs::write(
        &script,
        format!("#!/bin/sh\nulimit -n {limit}\nexec {BIN} \"$@\"\n"),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    script
}

fn addr_of(p: &Process) -> SocketAddr {
    p.url("").trim_start_matches("http://").parse().unwrap()
}

async fn connect_from(to: SocketAddr, from: [u8; 4]) -> std::io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::from((from, 0)))?;
    socket.connect(to).await
}

/// `GET /_health` on a new connection from `from`: how long the answer took, or `None`
/// when there was none within `patience` (refused, closed or no answer).
async fn probe(to: SocketAddr, from: [u8; 4], patience: Duration) -> Option<Duration> {
    let start = Instant::now();
    let asked = async {
        let mut tcp = connect_from(to, from).await.ok()?;
        tcp.write_all(b"GET /_health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            .await
            .ok()?;
        let mut out = Vec::new();
        tcp.read_to_end(&mut out).await.ok()?;
        String::from_utf8_lossy(&out)
            .starts_with("HTTP/1.1 200")
            .then_some(())
    };
    tokio::time::timeout(patience, asked).await.ok()??;
    Some(start.elapsed())
}

/// `GET /_health` on the open keep-alive connection `tcp`: how long it took, or `None`.
async fn probe_on(tcp: &mut TcpStream, patience: Duration) -> Option<Duration> {
    let start = Instant::now();
    let asked = async {
        tcp.write_all(b"GET /_health HTTP/1.1\r\nHost: localhost\r\n\r\n")
            .await
            .ok()?;
        let mut out = Vec::new();
        let mut buf = [0u8; 1024];
        while !String::from_utf8_lossy(&out).contains("{\"ok\":true}") {
            let n = tcp.read(&mut buf).await.ok()?;
            if n == 0 {
                return None;
            }
            out.extend_from_slice(&buf[..n]);
        }
        Some(())
    };
    tokio::time::timeout(patience, asked).await.ok()??;
    Some(start.elapsed())
}

/// The reproduction: 300 connections that send a request head and one byte of
/// body, under a 256-descriptor limit. `/_health` keeps answering other clients
/// throughout, and the stalled connections are cut off.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stalled_bodies_under_a_low_fd_limit_leave_health_answering() {
    let dir = tempfile::tempdir().unwrap();
    let bin = with_fd_limit(dir.path(), 256);
    let node = Process::spawn(&bin, &dir.path().join("data"), &["--body-timeout", "3"]);
    node.put("/data/movies", None).await.expect(201);
    let to = addr_of(&node);

    let attack = tokio::spawn(async move {
        let mut held = Vec::new();
        for _ in 0..300 {
            if let Ok(mut tcp) = connect_from(to, [127, 0, 0, 1]).await {
                let head = "POST /data/movies HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
                            Content-Length: 1000000\r\n\r\n{";
                let _ = tcp.write_all(head.as_bytes()).await;
                held.push(tcp);
            }
        }
        held
    });
    // Everyone else, from another address, during the stall and after it.
    let mut worst = Duration::ZERO;
    let mut answered = 0;
    let until = Instant::now() + Duration::from_secs(6);
    while Instant::now() < until {
        let took = probe(to, [127, 0, 0, 2], Duration::from_secs(2))
            .await
            .unwrap_or_else(|| panic!("/_health did not answer while bodies stalled"));
        worst = worst.max(took);
        answered += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!("/_health during the stall: {answered} answers, slowest {worst:?}");
    // Every stalled connection ended: refused on arrival (over the per-client bound) or
    // answered 408 once its body stopped arriving.
    let mut held = attack.await.unwrap();
    assert_eq!(held.len(), 300, "the stalled connections were opened");
    let (mut timed_out, mut closed) = (0, 0);
    for tcp in &mut held {
        let mut out = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(10), tcp.read_to_end(&mut out)).await;
        assert!(read.is_ok(), "a stalled connection is still open");
        if String::from_utf8_lossy(&out).starts_with("HTTP/1.1 408") {
            timed_out += 1;
        } else {
            closed += 1;
        }
    }
    eprintln!("stalled connections: {timed_out} answered 408, {closed} refused on arrival");
    assert!(
        timed_out >= 1,
        "no stalled body was cut off by the deadline"
    );
    assert!(
        closed >= 1,
        "no connection was refused by the per-client bound"
    );
}

/// Out of file descriptors (a connection bound above what the limit allows): the
/// connections already open are served, new ones are closed at once rather than left
/// waiting, and accepting resumes as soon as descriptors are freed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn running_out_of_descriptors_refuses_new_connections_and_serves_open_ones() {
    let dir = tempfile::tempdir().unwrap();
    let bin = with_fd_limit(dir.path(), 256);
    let node = Process::spawn(
        &bin,
        &dir.path().join("data"),
        &[
            "--max-connections",
            "100000",
            "--max-connections-per-client",
            "0",
        ],
    );
    let to = addr_of(&node);
    let mut open = connect_from(to, [127, 0, 0, 2]).await.unwrap();
    probe_on(&mut open, Duration::from_secs(5))
        .await
        .expect("the open connection answers");

    // Idle connections from many addresses until the process has no descriptor left.
    let mut idle = Vec::new();
    for i in 0..400u32 {
        let from = [127, 0, 1, (i % 200) as u8 + 1];
        if let Ok(tcp) = connect_from(to, from).await {
            idle.push(tcp);
        }
    }
    // The open connection keeps being served.
    for _ in 0..5 {
        probe_on(&mut open, Duration::from_secs(2))
            .await
            .expect("an open connection was not served while descriptors ran out");
    }
    // A new one is closed (or answered), not left hanging in the backlog.
    let mut fresh = connect_from(to, [127, 0, 0, 3]).await.unwrap();
    let _ = fresh
        .write_all(b"GET /_health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .await;
    let mut out = Vec::new();
    let ended = tokio::time::timeout(Duration::from_secs(5), fresh.read_to_end(&mut out)).await;
    assert!(ended.is_ok(), "a new connection was left waiting");
    let metrics = {
        open.write_all(b"GET /_metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut out = Vec::new();
        tokio::time::timeout(Duration::from_secs(5), open.read_to_end(&mut out))
            .await
            .unwrap()
            .unwrap();
        String::from_utf8_lossy(&out).into_owned()
    };
    let refused: u64 = metrics
        .lines()
        .find(|l| {
            l.starts_with("quintet_connections_refused_total{reason=\"no_file_descriptors\"}")
        })
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap();
    assert!(refused >= 1, "nothing was shed:\n{metrics}");

    // Descriptors freed: new connections are accepted again.
    drop(idle);
    let mut back = None;
    for _ in 0..100 {
        back = probe(to, [127, 0, 0, 4], Duration::from_secs(2)).await;
        if back.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        back.is_some(),
        "accepting did not resume once descriptors were freed"
    );
}
