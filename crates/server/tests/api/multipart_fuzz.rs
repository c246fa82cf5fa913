//! Property-based fuzzing of multipart uploads against a live server: forms with any
//! boundary, fields, file names, part headers and contents, cut short or followed by
//! garbage, sent to both upload routes. Each answer is 200 or a JSON 4xx, never a 5xx or a
//! dropped connection, and the server keeps serving. Cases: 64, or `PROPTEST_CASES`;
//! failing cases are kept in `multipart_fuzz.proptest-regressions` and replayed first.

use proptest::{
    prelude::*,
    test_runner::{Config, FileFailurePersistence, TestRunner},
};
use quintet_testkit::TestServer;
use reqwest::Method;

#[derive(Debug, Clone)]
struct Part {
    name: String,
    filename: Option<String>,
    content_type: Option<String>,
    data: Vec<u8>,
}

fn part() -> impl Strategy<Value = Part> {
    (
        prop_oneof![
            prop::sample::select(vec!["file", "path", "other", ""]).prop_map(str::to_owned),
            "\\PC{0,10}",
        ],
        prop::option::of(prop_oneof![
            prop::sample::select(vec!["a.txt", "../x", "a/b.png", ".", "", "%2e%2e"])
                .prop_map(str::to_owned),
            "\\PC{0,20}",
        ]),
        prop::option::of(prop_oneof![
            Just("text/plain".to_owned()),
            Just("multipart/mixed; boundary=x".to_owned()),
            "[ -~]{0,30}",
        ]),
        prop::collection::vec(any::<u8>(), 0..200),
    )
        .prop_map(|(name, filename, content_type, data)| Part {
            name,
            filename,
            content_type,
            data,
        })
}

/// The body of a form with `parts` and `boundary`.
fn form(boundary: &str, parts: &[Part]) -> Vec<u8> {
    let mut b = Vec::new();
    for p in parts {
        b.extend_from_slice(format!("--{boundary}\r\n").as_bytes());
        let mut disposition = format!("Content-Disposition: form-data; name=\"{}\"", p.name);
        if let Some(f) = &p.filename {
            disposition.push_str(&format!("; filename=\"{f}\""));
        }
        b.extend_from_slice(disposition.as_bytes());
        b.extend_from_slice(b"\r\n");
        if let Some(ct) = &p.content_type {
            b.extend_from_slice(format!("Content-Type: {ct}\r\n").as_bytes());
        }
        b.extend_from_slice(b"\r\n");
        b.extend_from_slice(&p.data);
        b.extend_from_slice(b"\r\n");
    }
    b.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    b
}

#[test]
fn any_multipart_body_is_stored_or_refused() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let s = rt.block_on(async {
        let s = TestServer::start().await;
        s.create("storage", "mp", None).await.expect(201);
        s
    });
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(64);
    // Failing cases are kept next to this file and replayed first (tests run in the crate's
    // directory).
    let config = Config {
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "tests/api/multipart_fuzz.proptest-regressions",
        ))),
        ..Config::with_cases(cases)
    };
    let mut runner = TestRunner::new(config);
    let strategy = (
        "[a-zA-Z0-9'()+_,./:=?-]{1,70}",
        prop::collection::vec(part(), 0..4),
        any::<prop::sample::Index>(),
        any::<bool>(),
        prop::collection::vec(any::<u8>(), 0..40),
        any::<bool>(),
    );
    runner
        .run(
            &strategy,
            |(boundary, parts, cut, do_cut, garbage, to_object)| {
                let mut body = form(&boundary, &parts);
                if do_cut {
                    body.truncate(cut.index(body.len() + 1));
                }
                body.extend_from_slice(&garbage);
                let path = if to_object {
                    "/storage/mp/up/x.bin"
                } else {
                    "/storage/mp"
                };
                let r = rt.block_on(
                    s.send(
                        s.request(Method::POST, path)
                            .header(
                                "content-type",
                                format!("multipart/form-data; boundary={boundary}"),
                            )
                            .body(body),
                    ),
                );
                prop_assert!(
                    r.status == 200 || (400..500).contains(&r.status),
                    "{path}: {} {}",
                    r.status,
                    r.text
                );
                if r.status != 200 {
                    prop_assert_eq!(&r.body["ok"], false, "{}", r.text);
                }
                Ok(())
            },
        )
        .unwrap();
    let health = rt.block_on(s.get("/_health"));
    assert_eq!(health.status, 200);
}
