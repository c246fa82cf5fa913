//! Property-based fuzzing of the configuration file: any TOML text, and TOML made of the
//! real setting names with arbitrary values, is read and resolved into settings or refused
//! with an error, never a panic. (The binary reads the same file with `--config`.)
//! Cases: proptest's default, or `PROPTEST_CASES` (`scripts/fuzz` runs many more).

use proptest::prelude::*;
use quintet::cli::ServeArgs;

/// Every setting name of the file, from the settings themselves.
fn keys() -> Vec<String> {
    serde_json::to_value(ServeArgs::default())
        .unwrap()
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect()
}

/// A TOML value: numbers, booleans, strings that look like settings, arrays.
fn toml_value() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        any::<bool>().prop_map(|b| b.to_string()),
        (0.0f64..1e9).prop_map(|f| format!("{f:.3}")),
        prop::sample::select(vec![
            "\"\"",
            "\"0\"",
            "\"1s\"",
            "\"10m\"",
            "\"1KiB\"",
            "\"64MiB\"",
            "\"none\"",
            "\"jwt\"",
            "\"allow\"",
            "\"deny\"",
            "\"json\"",
            "\"127.0.0.1:0\"",
            "\":0\"",
            "\"http://x\"",
            "\"https://a.example\"",
            "\"postgres://u@127.0.0.1:1/db\"",
            "\"redis://127.0.0.1:1\"",
            "\"s3://bucket\"",
            "[]",
            "[\"a\"]",
            "{}",
        ])
        .prop_map(str::to_owned),
        "[a-zA-Z0-9:/._ -]{0,16}".prop_map(|s| format!("{s:?}")),
    ]
}

proptest! {
    #[test]
    fn any_text_is_read_or_refused(text in "\\PC{0,200}") {
        if let Ok(args) = toml::from_str::<ServeArgs>(&text) {
            let _ = args.resolve();
        }
    }

    #[test]
    fn real_settings_with_any_values_are_read_or_refused(
        picks in prop::collection::vec((any::<prop::sample::Index>(), toml_value()), 0..8)
    ) {
        let keys = keys();
        let text: String = picks
            .iter()
            .map(|(i, v)| format!("{} = {v}\n", keys[i.index(keys.len())]))
            .collect();
        if let Ok(args) = toml::from_str::<ServeArgs>(&text) {
            let _ = args.resolve();
        }
    }
}
