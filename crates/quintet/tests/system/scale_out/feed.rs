//! The data change feed across two nodes on PostgreSQL: writes made through both nodes at
//! once reach a subscriber that drops its stream at random points and resumes from its
//! last sequence on either node, every change exactly once and in commit order. Queue
//! events likewise, with the queue on PostgreSQL.

use std::{collections::HashSet, path::Path};

use quintet_testkit::{Answer, Client, Process, Worker, engines};
use reqwest::Method;
use serde_json::{Value, json};

use crate::BIN;

const ADMIN_TOKEN: &str = "feed-two-nodes-admin-token-01234";

/// Reads `continuous` lines as they arrive.
struct Lines {
    res: reqwest::Response,
    buf: String,
}

impl Lines {
    async fn open(node: &Client, path: &str) -> Self {
        let res = node.request(Method::GET, path).send().await.unwrap();
        assert_eq!(res.status(), 200);
        Self {
            res,
            buf: String::new(),
        }
    }

    async fn next(&mut self) -> Option<Value> {
        loop {
            if let Some(i) = self.buf.find('\n') {
                let line: String = self.buf.drain(..=i).collect();
                if line.trim().is_empty() {
                    continue;
                }
                return Some(serde_json::from_str(line.trim()).unwrap());
            }
            match self.res.chunk().await {
                Ok(Some(b)) => self.buf.push_str(std::str::from_utf8(&b).unwrap()),
                _ => return None,
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ten_thousand_writes_through_two_nodes_reach_a_roaming_subscriber_exactly_once() {
    let test = "ten_thousand_writes_through_two_nodes_reach_a_roaming_subscriber";
    let Some(pg) = engines::postgres(test).await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let args = ["--data", pg.url(), "--admin-token", ADMIN_TOKEN];
    let a = Process::spawn(Path::new(BIN), &dir.path().join("a"), &args);
    let b = Process::spawn(Path::new(BIN), &dir.path().join("b"), &args);
    a.create("data", "events", None).await;

    // 10,000 writes: through both nodes, single documents and bulks, at once.
    const WRITERS: usize = 4;
    const ROUNDS: usize = 250;
    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let node = Client::new(&if w % 2 == 0 { a.url("") } else { b.url("") });
        writers.push(tokio::spawn(async move {
            for r in 0..ROUNDS {
                // Per round: 2 single writes and a bulk of 8 = 10 writes.
                for k in 0..2 {
                    node.post("/data/events", json!({"_id": format!("w{w}-{r}-{k}")}))
                        .await
                        .expect(201);
                }
                let bulk: Vec<Value> = (2..10)
                    .map(|k| json!({"_id": format!("w{w}-{r}-{k}")}))
                    .collect();
                node.post("/data/events/_bulk", Value::Array(bulk))
                    .await
                    .expect(200);
            }
        }));
    }
    let total = WRITERS * ROUNDS * 10;
    let nodes = [Client::new(&a.url("")), Client::new(&b.url(""))];
    let mut seen: Vec<(u64, String)> = Vec::with_capacity(total);
    let mut since = "0".to_owned();
    let mut rng = 0x9e37_79b9_7f4a_7c15_u64;
    let mut reconnects = 0usize;
    while seen.len() < total {
        let node = &nodes[reconnects % 2];
        let mut lines = Lines::open(
            node,
            &format!("/data/events/_changes?feed=continuous&since={since}"),
        )
        .await;
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let take = 1 + (rng % 900) as usize;
        for _ in 0..take {
            let Some(line) = lines.next().await else {
                break;
            };
            let seq = line["seq"].as_str().unwrap().to_owned();
            let n: u64 = seq.split('-').next().unwrap().parse().unwrap();
            seen.push((n, line["id"].as_str().unwrap().to_owned()));
            since = seq;
            if seen.len() == total {
                break;
            }
        }
        reconnects += 1;
    }
    for w in writers {
        w.await.unwrap();
    }
    assert!(reconnects > 10, "{reconnects}");
    for (i, (n, _)) in seen.iter().enumerate() {
        assert_eq!(*n, i as u64 + 1, "in order, none missing, none twice");
    }
    let ids: HashSet<&str> = seen.iter().map(|(_, id)| id.as_str()).collect();
    assert_eq!(ids.len(), total);
    // Each node's log is the same log.
    for node in &nodes {
        let rest = node
            .get(&format!("/data/events/_changes?since={since}"))
            .await
            .expect(200);
        assert_eq!(rest.body["results"], json!([]));
    }
}

/// A subscriber on one node is woken by a write through the other (LISTEN/NOTIFY), not by
/// polling: a longpoll on B answers the write made through A.
#[tokio::test]
async fn a_write_through_one_node_wakes_a_subscriber_on_the_other() {
    let test = "a_write_through_one_node_wakes_a_subscriber_on_the_other";
    let Some(pg) = engines::postgres(test).await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let args = ["--data", pg.url(), "--admin-token", ADMIN_TOKEN];
    let a = Process::spawn(Path::new(BIN), &dir.path().join("a"), &args);
    let b = Process::spawn(Path::new(BIN), &dir.path().join("b"), &args);
    a.create("data", "events", None).await;
    let last = b.get("/data/events/_changes").await.expect(200).body["last_seq"]
        .as_str()
        .unwrap()
        .to_owned();
    let waiting = {
        let node = Client::new(&b.url(""));
        tokio::spawn(async move {
            node.get(&format!(
                "/data/events/_changes?feed=longpoll&timeout=50000&since={last}"
            ))
            .await
            .expect(200)
            .body
        })
    };
    a.post("/data/events", json!({"_id": "hello"}))
        .await
        .expect(201);
    let got = waiting.await.unwrap();
    assert_eq!(got["results"][0]["id"], "hello");
}

/// Queue events on two nodes sharing the queue on PostgreSQL: jobs enqueued through both
/// nodes, and delivered by whichever node claims them, reach a subscriber on either node
/// (woken by its `LISTEN` connection) once each, numbered without a gap, and both nodes
/// answer the same log.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn queue_events_through_two_nodes_reach_a_subscriber_on_either() {
    let test = "queue_events_through_two_nodes_reach_a_subscriber_on_either";
    let Some(pg) = engines::postgres(test).await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "--registry",
        pg.url(),
        "--queue",
        pg.url(),
        "--admin-token",
        ADMIN_TOKEN,
    ];
    let a = Process::spawn(Path::new(BIN), &dir.path().join("a"), &args);
    let b = Process::spawn(Path::new(BIN), &dir.path().join("b"), &args);
    let worker = Worker::start(Answer::Status(200, String::new())).await;
    a.create("queue", "q", Some(json!({"target": worker.url()})))
        .await;
    let nodes = [Client::new(&a.url("")), Client::new(&b.url(""))];
    let mut on_b = Lines::open(&nodes[1], "/queue/q/_changes?feed=continuous&since=now").await;

    const JOBS: usize = 100;
    let mut ids = HashSet::new();
    for n in 0..JOBS {
        let r = nodes[n % 2]
            .post("/queue/q", json!({ "n": n }))
            .await
            .expect(201);
        ids.insert(r.body["id"].as_str().unwrap().to_owned());
    }
    // Every job: ready, then delivered (by either node), each once, in commit order.
    let mut streamed: Vec<Value> = Vec::new();
    while streamed.len() < 2 * JOBS {
        streamed.push(on_b.next().await.unwrap());
    }
    for (i, e) in streamed.iter().enumerate() {
        let n: usize = e["seq"]
            .as_str()
            .unwrap()
            .split('-')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(n, i + 1, "numbered in commit order without a gap: {e}");
    }
    let mut ready = HashSet::new();
    let mut delivered = HashSet::new();
    for e in &streamed {
        let id = e["id"].as_str().unwrap().to_owned();
        match e["event"].as_str().unwrap() {
            "ready" => assert!(ready.insert(id), "{e}"),
            "delivered" => {
                assert!(ready.contains(&id), "delivered after ready: {e}");
                assert!(delivered.insert(id), "{e}");
            }
            other => panic!("unexpected event {other}: {e}"),
        }
    }
    assert_eq!(ready, ids);
    assert_eq!(delivered, ids);
    // Each node's log is the same log.
    for node in &nodes {
        let all = node.get("/queue/q/_changes?since=0").await.expect(200);
        assert_eq!(all.body["results"].as_array().unwrap(), &streamed);
    }
}

/// Storage events on two nodes sharing a PostgreSQL registry and S3 storage: objects
/// written and removed through node A reach a subscriber on node B (woken by its `LISTEN`
/// connection, recorded in the registry's database), each once, in order, with the
/// object's metadata, and both nodes answer the same log.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn storage_events_through_one_node_reach_a_subscriber_on_the_other() {
    let test = "storage_events_through_one_node_reach_a_subscriber_on_the_other";
    let Some(pg) = engines::postgres(test).await else {
        return;
    };
    let Some(s3) = engines::s3(test) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let storage = format!(
        "s3://{}/{}?endpoint={}&region={}&access_key_id={}&secret_access_key={}",
        s3.bucket, s3.prefix, s3.endpoint, s3.region, s3.key, s3.secret
    );
    let args = [
        "--registry",
        pg.url(),
        "--storage",
        &storage,
        "--admin-token",
        ADMIN_TOKEN,
    ];
    let a = Process::spawn(Path::new(BIN), &dir.path().join("a"), &args);
    let b = Process::spawn(Path::new(BIN), &dir.path().join("b"), &args);
    a.put("/storage/media", None).await.expect(201);
    let nodes = [Client::new(&a.url("")), Client::new(&b.url(""))];
    let mut on_b = Lines::open(
        &nodes[1],
        "/storage/media/_changes?feed=continuous&since=now",
    )
    .await;
    // A longpoll on B answers the first write through A.
    let head = nodes[1]
        .get("/storage/media/_changes")
        .await
        .expect(200)
        .body["last_seq"]
        .as_str()
        .unwrap()
        .to_owned();
    let waiting = {
        let node = Client::new(&b.url(""));
        tokio::spawn(async move {
            node.get(&format!(
                "/storage/media/_changes?feed=longpoll&timeout=50000&since={head}"
            ))
            .await
            .expect(200)
            .body
        })
    };

    const OBJECTS: usize = 10;
    let mut etags = Vec::new();
    for n in 0..OBJECTS {
        let up = nodes[0]
            .request(Method::POST, &format!("/storage/media/o/{n}.txt"))
            .header("content-type", "text/plain")
            .body(format!("object {n}"));
        let r = nodes[0].send(up).await.expect(200);
        etags.push(r.header("etag").unwrap().trim_matches('"').to_owned());
    }
    nodes[0].delete("/storage/media/o/0.txt").await.expect(200);
    let got = waiting.await.unwrap();
    assert_eq!(got["results"][0]["path"], "o/0.txt", "{got}");

    let mut streamed: Vec<Value> = Vec::new();
    while streamed.len() < OBJECTS + 1 {
        streamed.push(on_b.next().await.unwrap());
    }
    for (i, e) in streamed.iter().enumerate() {
        let n: usize = e["seq"]
            .as_str()
            .unwrap()
            .split('-')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(n, i + 1, "numbered in order without a gap: {e}");
        if i < OBJECTS {
            assert_eq!(e["path"], format!("o/{i}.txt"), "{e}");
            assert_eq!(e["event"], "written", "{e}");
            assert_eq!(e["etag"], etags[i].as_str(), "{e}");
            assert_eq!(e["content_type"], "text/plain", "{e}");
            assert_eq!(e["size"], format!("object {i}").len(), "{e}");
        }
    }
    assert_eq!(
        streamed[OBJECTS],
        json!({"seq": streamed[OBJECTS]["seq"], "path": "o/0.txt", "event": "removed"})
    );
    // Each node's log is the same log.
    for node in &nodes {
        let all = node
            .get("/storage/media/_changes?since=0")
            .await
            .expect(200);
        assert_eq!(all.body["results"].as_array().unwrap(), &streamed);
    }
}
