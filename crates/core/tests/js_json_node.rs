//! `js_json` against the real thing: node's `JSON.stringify(JSON.parse(text))`, byte for
//! byte, over hand-picked tricky texts and generated values.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{
    io::Write,
    process::{Command, Stdio},
};

use proptest::{
    prelude::*,
    strategy::ValueTree,
    test_runner::{Config, TestRunner},
};
use serde_json::Value;

/// Each line of `texts` through node; one output line per input line.
fn node_stringify(texts: &[String]) -> Vec<String> {
    let script = "const rl = require('readline').createInterface({ input: process.stdin });\n\
                  const out = [];\n\
                  rl.on('line', (l) => out.push(JSON.stringify(JSON.parse(l))));\n\
                  rl.on('close', () => process.stdout.write(out.join('\\n') + '\\n'));";
    let mut child = Command::new("node")
        .args(["-e", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("node is installed (scripts/setup installs it)");
    let mut stdin = child.stdin.take().unwrap();
    let input = texts.join("\n") + "\n";
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()).unwrap());
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    assert!(out.status.success(), "node failed");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

fn ours(text: &str) -> String {
    let v: Value = serde_json::from_str(text).unwrap();
    quintet_core::js_json::to_string(&v)
}

const TRICKY: &[&str] = &[
    r#"{"n":100.0,"big":1e21,"small":1e-7,"neg":-0,"negf":-0.0,"x":1E+2}"#,
    r#"{"huge":12345678901234567890,"over":123456789012345678901234,"safe":9007199254740993}"#,
    r#"{"neg":-12345678901234567890,"f":0.1,"g":0.30000000000000004,"h":5e-324,"m":1.7976931348623157e308}"#,
    r#"{"ints":[0,1,-1,1.5e300,2.5e-300,123e-20,1.0e+0,0.000001,0.0000001,1e20,1.1e21]}"#,
    r#"{"s":"quote\" back\\ slash/ \b\f\n\r\t \u0000 \u001f \u007f \u0080 \u2028 \u2029"}"#,
    r#"{"u":"caf\u00e9 😀 \ud83d\ude00 中文 עברית","e":"\u001b[31m"}"#,
    r#"{"b":1,"a":2,"10":3,"2":4,"1":5,"01":6,"-1":7,"1.5":8,"4294967294":9,"4294967295":10,"0":11}"#,
    r#"{"a":1,"b":2,"a":3,"1":"x","1":"y"}"#,
    r#"{"nested":[[1,[2,[3,{"z":1,"0":[]}]]],{},[],{"":""}],"t":true,"f":false,"n":null}"#,
    r#"{"k\"ey":"v","k\\ey":"w","\n":"nl","é":"acute"}"#,
    r#"{"9007199254740992":1,"99999999999":2,"42":3,"042":4}"#,
    r#"{ "spaced" : [ 1 , 2 ] , "tab":	"x" }"#,
];

#[test]
fn tricky_texts_match_node_byte_for_byte() {
    let texts: Vec<String> = TRICKY.iter().map(|s| (*s).to_owned()).collect();
    let theirs = node_stringify(&texts);
    assert_eq!(theirs.len(), texts.len());
    for (text, expected) in texts.iter().zip(&theirs) {
        assert_eq!(&ours(text), expected, "input: {text}");
    }
}

fn arb_key() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z]{0,4}",
        (0u64..30).prop_map(|n| n.to_string()),
        (4_294_967_290u64..4_294_967_300).prop_map(|n| n.to_string()),
        "0[0-9]",
        "\\PC{0,3}",
    ]
}

fn arb_json() -> impl Strategy<Value = Value> {
    let number = prop_oneof![
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        (-1e3f64..1e3).prop_map(Value::from),
        (-30i32..30, 1u32..1000).prop_map(|(e, m)| Value::from(f64::from(m) * 10f64.powi(e))),
    ];
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        number,
        "\\PC{0,8}".prop_map(Value::String),
        "[\\x00-\\x1f\"\\\\/\u{7f}\u{2028}é😀]{0,6}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 40, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::vec((arb_key(), inner), 0..6)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

#[test]
fn generated_values_match_node_byte_for_byte() {
    let mut runner = TestRunner::new(Config {
        rng_algorithm: proptest::test_runner::RngAlgorithm::ChaCha,
        ..Config::default()
    });
    let strategy = arb_json();
    let texts: Vec<String> = (0..1500)
        .map(|_| {
            let v = strategy.new_tree(&mut runner).unwrap().current();
            // serde_json's own compact text as the input: other number and key order forms
            // than ours, which node must normalise exactly as we do.
            serde_json::to_string(&v).unwrap()
        })
        .collect();
    let theirs = node_stringify(&texts);
    assert_eq!(theirs.len(), texts.len());
    for (text, expected) in texts.iter().zip(&theirs) {
        assert_eq!(&ours(text), expected, "input: {text}");
    }
}
