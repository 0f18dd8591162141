//! Conformance suite for docs/policy-semantics.md §10.1 (query matchers):
//! what an entry's `query` allows and denies (the matcher), what the prover
//! answers about it, how a request's query is read, and what the language
//! refuses. Every prover counterexample is checked again here: canonical,
//! allowed by the candidate, not by the ceiling.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;

use agentgate_policy::action::{Action, Layer, NetworkAction};
use agentgate_policy::compile::{CompiledPolicy, Limits, Role};
use agentgate_policy::error::ReasonCode;
use agentgate_policy::matcher::decide_network;
use agentgate_policy::query::{Plus, Query, QueryError, parse, readings, to_target};
use agentgate_prover::{Outcome, Prover};
use agentgate_tests::{network_counterexample as counterexample, policy, rejection_with};

const CURL: &str = "/usr/bin/curl";

fn sandbox(yaml: &str) -> CompiledPolicy {
    policy(yaml, Role::Sandbox)
}

fn maximum(yaml: &str) -> CompiledPolicy {
    policy(yaml, Role::Maximum)
}

fn query(pairs: &[(&str, &str)]) -> Query {
    pairs
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect()
}

fn get(path: &str, pairs: &[(&str, &str)]) -> NetworkAction {
    NetworkAction {
        binary: CURL.into(),
        host: "search.example".into(),
        port: 443,
        layer: Layer::Rest,
        method: "GET".into(),
        path: path.into(),
        credential: None,
        query: query(pairs),
        upgrade: None,
    }
}

/// A search endpoint whose one entry is `ENTRY` (YAML flow mapping).
fn search(entry: &str) -> String {
    format!(
        "network:\n  - name: search\n    endpoints:\n      - {{host: search.example, port: 443, protocol: rest, rules: [{entry}]}}\n"
    )
}

fn allowed(p: &CompiledPolicy, a: &NetworkAction) -> bool {
    decide_network(p, a).allow
}

#[track_caller]
fn within(candidate: &CompiledPolicy, ceiling: &CompiledPolicy) {
    let outcome = Prover::default().containment(candidate, ceiling).outcome;
    assert!(matches!(outcome, Outcome::Within), "{outcome:?}");
}

#[test]
fn a_glob_requires_the_parameter_with_a_matching_value() {
    let p = sandbox(&search(
        r#"{methods: [GET], path: /search, query: {q: "*"}}"#,
    ));
    assert!(allowed(&p, &get("/search", &[("q", "agents")])));
    assert!(
        allowed(&p, &get("/search", &[("q", "")])),
        "* matches the empty value"
    );
    assert!(!allowed(&p, &get("/search", &[])), "absent is not present");
    // Parameters the entry does not name are unconstrained.
    assert!(allowed(&p, &get("/search", &[("q", "x"), ("page", "2")])));
}

#[test]
fn any_lists_value_globs_and_optional_admits_absence() {
    let p = sandbox(&search(
        r#"{methods: [GET], query: {sort: {any: [relevance, "date*"]}, lang: {glob: "en*", optional: true}}}"#,
    ));
    assert!(allowed(&p, &get("/s", &[("sort", "relevance")])));
    assert!(allowed(
        &p,
        &get("/s", &[("sort", "date-desc"), ("lang", "en-GB")])
    ));
    assert!(!allowed(&p, &get("/s", &[("sort", "stars")])));
    assert!(!allowed(
        &p,
        &get("/s", &[("sort", "relevance"), ("lang", "de")])
    ));
    // Case-sensitive names and values.
    assert!(!allowed(&p, &get("/s", &[("Sort", "relevance")])));
    assert!(!allowed(&p, &get("/s", &[("sort", "Relevance")])));
}

#[test]
fn absent_forbids_the_parameter_in_an_allow_entry() {
    let p = sandbox(&search(
        r#"{methods: [GET], query: {debug: {absent: true}}}"#,
    ));
    assert!(allowed(&p, &get("/s", &[])));
    assert!(allowed(&p, &get("/s", &[("q", "x")])));
    assert!(!allowed(&p, &get("/s", &[("debug", "")])));
}

#[test]
fn a_deny_entry_with_a_query_refuses_only_the_requests_it_matches() {
    let p = sandbox(
        "network:\n  - name: search\n    endpoints:\n      - host: search.example\n        port: 443\n        protocol: rest\n        access: read-only\n        denyRules: [{methods: [\"*\"], query: {debug: \"*\"}}]\n",
    );
    assert!(allowed(&p, &get("/s", &[("q", "x")])));
    let refused = decide_network(&p, &get("/s", &[("debug", "1")]));
    assert!(!refused.allow);
    assert_eq!(refused.rule.as_deref(), Some("search"));
}

#[test]
fn presets_and_l4_constrain_no_parameter() {
    let p = sandbox(&format!(
        "{}  - name: raw\n    endpoints: [{{host: raw.example, port: 443}}]\n",
        search("{methods: [GET]}")
    ));
    assert!(allowed(&p, &get("/s", &[("anything", "x")])));
    let raw = NetworkAction {
        host: "raw.example".into(),
        ..get("/s", &[("q", "x")])
    };
    assert!(allowed(&p, &raw));
}

#[test]
fn a_query_is_read_as_a_form_and_refused_where_readers_disagree() {
    let named: BTreeSet<String> = ["q".to_string()].into();
    assert_eq!(
        parse("q=a%20b&&x&%71%31=y", Plus::Space, &named).unwrap(),
        query(&[("q", "a b"), ("x", ""), ("q1", "y")])
    );
    assert!(matches!(
        parse("q=%zz", Plus::Space, &named),
        Err(QueryError::NonCanonical(_))
    ));
    assert!(matches!(
        parse("q=a;b", Plus::Space, &named),
        Err(QueryError::NonCanonical(_))
    ));
    assert_eq!(
        parse("q=1&q=2", Plus::Space, &named),
        Err(QueryError::Repeated("q".into()))
    );
    // Both readings of '+', where a rule looks.
    assert_eq!(readings("q=a+b", &named).unwrap().len(), 2);
    // No rule reads the query: nothing in it is refused.
    assert!(parse("q=%zz;x", Plus::Space, &BTreeSet::new()).is_ok());
}

#[test]
fn a_counterexample_names_the_parameter_that_decides_it() {
    let candidate = sandbox(&search(
        r#"{methods: [GET], path: /search, query: {q: "*"}}"#,
    ));
    let ceiling = maximum(&search(
        r#"{methods: [GET], path: /search, query: {q: "*", debug: {absent: true}}}"#,
    ));
    let a = counterexample(&candidate, &ceiling);
    assert!(a.query.contains_key("debug"), "{a}");
    assert!(
        a.to_string()
            .starts_with("GET https://search.example:443/search?debug="),
        "{a}"
    );
    // The printed target reads back as the action's query.
    let target = to_target(&a.query);
    let named: BTreeSet<String> = ["q".into(), "debug".into()].into();
    assert_eq!(parse(&target, Plus::Space, &named).unwrap(), a.query);
    within(&ceiling, &candidate);
}

#[test]
fn the_prover_tells_value_globs_apart() {
    let narrow = sandbox(&search(
        r#"{methods: [GET], query: {sort: {any: ["date*"]}}}"#,
    ));
    let wide = maximum(&search(r#"{methods: [GET], query: {sort: "d*"}}"#));
    within(&narrow, &wide);
    let a = counterexample(&wide, &narrow);
    assert!(a.query["sort"].starts_with('d'), "{a}");
    assert!(!a.query["sort"].starts_with("date"), "{a}");
    // An optional parameter exceeds a required one by its absence.
    let optional = sandbox(&search(
        r#"{methods: [GET], query: {sort: {glob: "*", optional: true}}}"#,
    ));
    let required = maximum(&search(r#"{methods: [GET], query: {sort: "*"}}"#));
    let a = counterexample(&optional, &required);
    assert!(!a.query.contains_key("sort"), "{a}");
    within(&required, &optional);
}

#[test]
fn a_rest_grant_without_query_is_broader_than_any_query_grant() {
    let plain = sandbox(&search("{methods: [GET], path: /search}"));
    let constrained = maximum(&search(
        r#"{methods: [GET], path: /search, query: {q: "*"}}"#,
    ));
    within(&constrained, &plain);
    let a = counterexample(&plain, &constrained);
    assert!(a.query.is_empty(), "{a}");
}

#[test]
fn a_tool_call_transport_carries_no_query() {
    // A rest entry that requires a parameter does not cover calls to the
    // MCP server on its path: their transport has no query.
    let rest = sandbox(
        "network:\n  - name: raw\n    endpoints:\n      - {host: bank.internal, port: 443, protocol: rest, rules: [{methods: [POST], path: /mcp, query: {key: \"*\"}}]}\n",
    );
    let tools = sandbox(
        "network:\n  - name: tools\n    endpoints:\n      - {host: bank.internal, port: 443, protocol: mcp, path: /mcp, tools: [{name: \"*\"}]}\n",
    );
    match Prover::default().containment(&tools, &rest).outcome {
        Outcome::Exceeds { counterexample } => {
            assert!(matches!(counterexample, Action::Mcp(_)), "{counterexample}")
        }
        other => panic!("expected a call, got {other:?}"),
    }
}

#[test]
fn invalid_query_constraints_are_errors_at_their_field() {
    let limits = Limits::default();
    let cases = [
        (
            "{methods: [GET], query: {q: {any: []}}}",
            "network[0].endpoints[0].rules[0].query.q.any",
        ),
        (
            "{methods: [GET], query: {q: {optional: true}}}",
            "network[0].endpoints[0].rules[0].query.q",
        ),
        (
            "{methods: [GET], query: {q: {glob: x, absent: true}}}",
            "network[0].endpoints[0].rules[0].query.q",
        ),
        (
            "{methods: [GET], query: {q: {absent: true, optional: true}}}",
            "network[0].endpoints[0].rules[0].query.q.optional",
        ),
        (
            "{methods: [GET], query: {\"a*\": x}}",
            "network[0].endpoints[0].rules[0].query.a*",
        ),
        (
            "{methods: [GET], query: {q: \"é\"}}",
            "network[0].endpoints[0].rules[0].query.q",
        ),
    ];
    for (entry, field) in cases {
        let reason = rejection_with(&search(entry), Role::Sandbox, &limits);
        assert!(
            matches!(
                reason.code,
                ReasonCode::UnsupportedPolicyShape | ReasonCode::InvalidGlob
            ),
            "{entry}: {reason}"
        );
        assert_eq!(reason.field.as_deref(), Some(field), "{entry}: {reason}");
    }
    // `query` beside the endpoint, not in an entry, is an unknown field.
    let reason = rejection_with(
        "network:\n  - name: s\n    endpoints:\n      - {host: a.example, port: 443, protocol: rest, access: read-only, query: {q: x}}\n",
        Role::Sandbox,
        &limits,
    );
    assert_eq!(reason.code, ReasonCode::UnsupportedPolicyShape, "{reason}");
}
