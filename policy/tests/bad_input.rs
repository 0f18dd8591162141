//! Bad input through load and compile: nothing
//! panics, every refusal names where it is, and the documented limits
//! (`compile::Limits`: 4 MiB of input, 1,024 rules, …) refuse oversized
//! documents with `resource_limit` instead of working on them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use agentgate_policy::compile::{Limits, Role, compile};
use agentgate_policy::error::ReasonCode;
use agentgate_policy::load::{LoadError, load_document};
use proptest::prelude::*;

const VALID: &str = r#"filesystem:
  readOnly: [/usr, /app]
  readWrite: [/sandbox]
network:
  - name: github
    binaries: [/usr/bin/gh]
    endpoints:
      - host: api.github.com
        ports: [443]
        protocol: rest
        rules:
          - methods: [GET]
            path: /repos/acme/**
        denyRules:
          - methods: [DELETE]
            path: "**"
"#;

/// Loads and compiles; the error text, or `None` when it is a valid policy.
fn judge(text: &str) -> Option<String> {
    let limits = Limits::default();
    match load_document(text, &limits) {
        Err(e) => Some(e.to_string()),
        Ok(doc) => compile(&doc.policy, Role::Sandbox, &limits)
            .err()
            .map(|r| r.to_string()),
    }
}

#[test]
fn the_valid_document_is_valid() {
    assert_eq!(judge(VALID), None);
}

#[test]
fn an_oversized_document_hits_the_input_limit() {
    let mut text = String::from(VALID);
    text.push_str("# ");
    text.push_str(&"x".repeat(Limits::default().input_bytes));
    match load_document(&text, &Limits::default()) {
        Err(LoadError::Invalid(reason)) => {
            assert_eq!(reason.code, ReasonCode::ResourceLimit, "{reason}");
            assert!(reason.to_string().contains("larger than"), "{reason}");
        }
        other => panic!("a 4 MiB document was not refused: {other:?}"),
    }
}

#[test]
fn ten_thousand_rules_hit_the_limit_and_ten_thousand_paths_load() {
    let mut text = String::from("network:\n");
    for i in 0..10_000 {
        text.push_str(&format!(
            "  - {{name: r{i}, endpoints: [{{host: h{i}.example.com, ports: [443]}}]}}\n"
        ));
    }
    let why = judge(&text).expect("10,000 rules were accepted");
    assert_eq!(why, "network: more than 1024 rules (resource_limit)");
    let mut paths = String::from("filesystem:\n  readOnly:\n");
    for i in 0..10_000 {
        paths.push_str(&format!("    - /data/{i}\n"));
    }
    // Filesystem entries have no count limit of their own; they must at
    // least load and compile without trouble.
    let _ = judge(&paths);
}

#[test]
fn deep_nesting_and_odd_shapes_are_refused_not_crashed() {
    // Nesting deep enough to overflow a naive recursive reader.
    let deep = format!("network: {}{}", "[".repeat(20_000), "]".repeat(20_000));
    let why = judge(&deep).unwrap();
    assert!(why.contains("recursion limit exceeded"), "{why}");
    for text in [
        "",
        "---",
        "null",
        "[]",
        "42",
        "network: 7",
        "network: [7]",
        "network: [{name: x}]",
        "network: [{name: x, endpoints: [{host: 1.2.3.4, ports: [443]}]}]",
        "network: [{name: x, endpoints: [{host: a.example.com, ports: [99999]}]}]",
        "filesystem: {readOnly: [relative]}",
        "network: [{name: x, name: y, endpoints: []}]",
        "\u{feff}network: []",
        "network: [{name: \"\u{0}\", endpoints: [{host: a.example.com, ports: [443]}]}]",
    ] {
        let _ = judge(text);
    }
}

#[test]
fn refusals_name_the_field() {
    let why = judge("network:\n  - name: ok\n    endpoints:\n      - host: a.example.com\n        ports: [443]\n        protocol: graphql\n").unwrap();
    assert!(why.contains("network[0].endpoints[0]"), "{why}");
    let why = judge("filesystem:\n  readOnly: [/usr]\n  bogus: 1\n").unwrap();
    assert!(why.contains("filesystem"), "{why}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Truncations and byte-level mutations of a valid document: never a
    /// panic; a refusal is one line that says something.
    #[test]
    fn mutations_never_panic(cut in 0usize..VALID.len(), at in 0usize..VALID.len(), byte in 0u8..128) {
        let truncated = &VALID[..cut];
        if let Some(why) = judge(truncated) {
            prop_assert!(!why.trim().is_empty());
        }
        let mut bytes = VALID.as_bytes().to_vec();
        bytes[at] = byte;
        if let Ok(text) = std::str::from_utf8(&bytes)
            && let Some(why) = judge(text)
        {
            prop_assert!(!why.trim().is_empty());
        }
    }

    /// JSON documents with random structure where a policy is expected.
    #[test]
    fn random_json_never_panics(value in arbitrary_json(4)) {
        let text = serde_json::to_string(&serde_json::json!({"network": value})).unwrap();
        let _ = judge(&text);
    }
}

fn arbitrary_json(depth: u32) -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::Bool),
        any::<i64>().prop_map(|n| serde_json::json!(n)),
        "[a-z./*:0-9-]{0,12}".prop_map(serde_json::Value::String),
    ];
    leaf.prop_recursive(depth, 64, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(serde_json::Value::Array),
            prop::collection::btree_map(
                prop_oneof![
                    Just("name".to_string()),
                    Just("endpoints".to_string()),
                    Just("host".to_string()),
                    Just("ports".to_string()),
                    Just("protocol".to_string()),
                    Just("rules".to_string()),
                    Just("methods".to_string()),
                    Just("path".to_string()),
                    Just("binaries".to_string()),
                    "[a-z]{1,6}",
                ],
                inner,
                0..5
            )
            .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    })
}
