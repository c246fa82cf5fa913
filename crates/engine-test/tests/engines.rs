//! The engines `scripts/engines` starts answer at the settings it printed, and test
//! namespaces are made and removed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

/// `host:port` of an `scheme://host:port/...` URL.
fn authority(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    rest.split(['/', '?']).next().unwrap().to_owned()
}

/// Send `request` to `addr` and read the answer (the server closes or 5 s pass).
async fn exchange(addr: &str, request: &[u8]) -> String {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(request).await.unwrap();
    let mut answer = vec![0; 256];
    let n = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut answer))
        .await
        .expect("an answer in time")
        .unwrap();
    String::from_utf8_lossy(&answer[..n]).into_owned()
}

#[tokio::test]
async fn postgres_gives_each_test_a_schema_and_removes_it() {
    let Some(pg) = quintet_engine_test::postgres("postgres_gives_each_test_a_schema").await else {
        return;
    };
    let (name, base) = (pg.schema().to_owned(), pg.database_url().to_owned());
    quintet_engine_test::run_sql(pg.url(), "CREATE TABLE t (x int); INSERT INTO t VALUES (1)")
        .await
        .unwrap();
    let exists = format!(
        "DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_tables WHERE schemaname = '{name}' \
         AND tablename = 't') THEN RAISE EXCEPTION 'missing'; END IF; END $$"
    );
    quintet_engine_test::run_sql(&base, &exists).await.unwrap();
    drop(pg);
    let gone = format!(
        "DO $$ BEGIN IF EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = '{name}') \
         THEN RAISE EXCEPTION 'still there'; END IF; END $$"
    );
    quintet_engine_test::run_sql(&base, &gone).await.unwrap();
}

#[tokio::test]
async fn redis_answers() {
    let Some(redis) = quintet_engine_test::redis("redis_answers") else {
        return;
    };
    assert!(redis.prefix.starts_with("qt_") && redis.prefix.ends_with(':'));
    let answer = exchange(&authority(&redis.url), b"PING\r\n").await;
    assert_eq!(answer, "+PONG\r\n");
}

#[tokio::test]
async fn s3_answers_and_checks_signatures() {
    let Some(s3) = quintet_engine_test::s3("s3_answers_and_checks_signatures") else {
        return;
    };
    assert!(s3.prefix.ends_with('/'));
    let addr = authority(&s3.endpoint);
    let request = format!("GET /{}/ HTTP/1.0\r\nHost: {addr}\r\n\r\n", s3.bucket);
    let answer = exchange(&addr, request.as_bytes()).await;
    // An unsigned request is refused: the server checks signatures.
    let status = answer.split(' ').nth(1);
    assert_eq!(status, Some("403"), "{answer}");
}

#[test]
fn names_are_unique_and_dated() {
    let (a, b) = (
        quintet_engine_test::unique_name(),
        quintet_engine_test::unique_name(),
    );
    assert_ne!(a, b);
    let secs: u64 = a.split('_').nth(1).unwrap().parse().unwrap();
    assert!(secs > 1_700_000_000);
}
