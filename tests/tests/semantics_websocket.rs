//! Conformance suite for docs/policy-semantics.md §10.2 (WebSocket
//! upgrades): what a websocket entry allows and denies (the matcher), that
//! a REST grant never implies an upgrade and an `l4` grant always does,
//! regions over upgrades, the prover's counterexamples, and what the
//! language refuses. Every counterexample is checked again here.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use agentgate_policy::action::{Action, Layer, NetworkAction, Upgrade};
use agentgate_policy::compile::{CompiledPolicy, Limits, Role, compile_region};
use agentgate_policy::error::ReasonCode;
use agentgate_policy::matcher::{decide_network, region_holds};
use agentgate_policy::model::Region;
use agentgate_prover::{Outcome, Prover};
use agentgate_tests::{network_counterexample as counterexample, policy, rejection_with};

fn sandbox(yaml: &str) -> CompiledPolicy {
    policy(yaml, Role::Sandbox)
}

fn maximum(yaml: &str) -> CompiledPolicy {
    policy(yaml, Role::Maximum)
}

fn upgrade(path: &str, subprotocol: Option<&str>, origin: Option<&str>) -> NetworkAction {
    NetworkAction {
        binary: "/usr/bin/python3".into(),
        host: "rt.example.com".into(),
        port: 443,
        layer: Layer::Websocket,
        method: "GET".into(),
        path: path.into(),
        credential: None,
        query: Default::default(),
        upgrade: Some(Upgrade {
            subprotocol: subprotocol.map(str::to_string),
            origin: origin.map(str::to_string),
        }),
    }
}

/// A policy whose one endpoint on rt.example.com:443 is `ENDPOINT` (YAML
/// flow mapping fields after host and port).
fn on_rt(endpoint: &str) -> String {
    format!(
        "network:\n  - name: rt\n    endpoints:\n      - {{host: rt.example.com, port: 443, {endpoint}}}\n"
    )
}

fn allowed(p: &CompiledPolicy, a: &NetworkAction) -> bool {
    decide_network(p, a).allow
}

#[test]
fn an_entry_allows_upgrades_by_path_subprotocol_and_origin() {
    let p = sandbox(&on_rt(
        r#"protocol: websocket, rules: [{path: /v1/realtime, subprotocols: [chat], origins: ["https://*.example.com"]}]"#,
    ));
    let ok = upgrade(
        "/v1/realtime",
        Some("chat"),
        Some("https://app.example.com"),
    );
    assert!(allowed(&p, &ok));
    assert!(!allowed(
        &p,
        &upgrade("/v1/other", Some("chat"), Some("https://app.example.com"))
    ));
    assert!(!allowed(
        &p,
        &upgrade("/v1/realtime", Some("v2"), Some("https://app.example.com"))
    ));
    assert!(
        !allowed(
            &p,
            &upgrade("/v1/realtime", None, Some("https://app.example.com"))
        ),
        "listed subprotocols need an offer"
    );
    assert!(
        !allowed(&p, &upgrade("/v1/realtime", Some("chat"), None)),
        "listed origins need an origin"
    );
    assert!(!allowed(
        &p,
        &upgrade("/v1/realtime", Some("chat"), Some("https://evil.net"))
    ));
}

#[test]
fn absent_subprotocols_and_origins_allow_any_and_none() {
    let p = sandbox(&on_rt("protocol: websocket, rules: [{path: /ws}]"));
    assert!(allowed(&p, &upgrade("/ws", None, None)));
    assert!(allowed(&p, &upgrade("/ws", Some("x"), Some("null"))));
    let star = sandbox(&on_rt(
        r#"protocol: websocket, rules: [{subprotocols: ["*"]}]"#,
    ));
    assert!(allowed(&star, &upgrade("/any", Some("x"), None)));
    assert!(
        !allowed(&star, &upgrade("/any", None, None)),
        "* is any offered one"
    );
}

#[test]
fn deny_entries_win_and_ignore_the_scope() {
    let p = sandbox(&on_rt(
        r#"protocol: websocket, path: /ws/**, rules: [{}], denyRules: [{path: "**", query: {debug: "*"}}]"#,
    ));
    assert!(allowed(&p, &upgrade("/ws/x", None, None)));
    assert!(
        !allowed(&p, &upgrade("/other", None, None)),
        "outside the scope"
    );
    let mut debug = upgrade("/ws/x", None, None);
    debug.query.insert("debug".into(), "1".into());
    let ruling = decide_network(&p, &debug);
    assert!(!ruling.allow);
    assert_eq!(ruling.rule.as_deref(), Some("rt"));
}

#[test]
fn a_rest_grant_never_allows_an_upgrade_and_l4_always_does() {
    let rest = sandbox(&on_rt("protocol: rest, access: full"));
    assert!(!allowed(&rest, &upgrade("/ws", None, None)));
    let l4 = sandbox(&on_rt("protocol: l4"));
    assert!(allowed(&l4, &upgrade("/ws", Some("x"), Some("https://a"))));
    // And the prover agrees: a ceiling of REST only refuses the upgrade.
    let ws = sandbox(&on_rt("protocol: websocket, rules: [{path: /ws}]"));
    let a = counterexample(&ws, &maximum(&on_rt("protocol: rest, access: full")));
    assert_eq!(a.layer, Layer::Websocket, "{a}");
    assert!(
        a.to_string()
            .starts_with("upgrade wss://rt.example.com:443/ws by "),
        "{a}"
    );
    // An upgrade grant does not allow REST requests either.
    let a = counterexample(&rest, &maximum(&on_rt("protocol: websocket, rules: [{}]")));
    assert_eq!(a.layer, Layer::Rest, "{a}");
}

#[test]
fn the_prover_tells_subprotocols_and_origins_apart() {
    let narrow = sandbox(&on_rt(
        r#"protocol: websocket, rules: [{subprotocols: [chat], origins: ["https://app.example.com"]}]"#,
    ));
    let wide = maximum(&on_rt(
        r#"protocol: websocket, rules: [{subprotocols: [chat, v2], origins: ["https://*.example.com"]}]"#,
    ));
    assert_eq!(
        Prover::default().containment(&narrow, &wide).outcome,
        Outcome::Within
    );
    let wide_as_sandbox = sandbox(&on_rt(
        r#"protocol: websocket, rules: [{subprotocols: [chat, v2], origins: ["https://*.example.com"]}]"#,
    ));
    let narrow_as_ceiling = maximum(&on_rt(
        r#"protocol: websocket, rules: [{subprotocols: [chat], origins: ["https://app.example.com"]}]"#,
    ));
    let a = counterexample(&wide_as_sandbox, &narrow_as_ceiling);
    let u = a.upgrade.unwrap();
    assert!(
        u.subprotocol.as_deref() == Some("v2")
            || u.origin.as_deref() != Some("https://app.example.com")
    );
}

#[test]
fn regions_hold_upgrades_by_layer_and_path_not_by_method() {
    let a = Action::Network(upgrade("/ws", None, None));
    let region = |r: Region| compile_region(&r, "region").unwrap();
    assert!(region_holds(
        &region(Region {
            layers: Some(vec![Layer::Websocket]),
            ..Region::default()
        }),
        &a
    ));
    assert!(!region_holds(
        &region(Region {
            layers: Some(vec![Layer::Rest]),
            ..Region::default()
        }),
        &a
    ));
    assert!(region_holds(
        &region(Region {
            paths: Some(vec!["/ws".into()]),
            ..Region::default()
        }),
        &a
    ));
    assert!(!region_holds(
        &region(Region {
            methods: Some(vec!["GET".into()]),
            ..Region::default()
        }),
        &a
    ));
}

#[test]
fn invalid_websocket_shapes_are_errors_at_their_field() {
    let limits = Limits::default();
    let at = "network[0].endpoints[0]";
    let cases = [
        ("protocol: websocket, access: full", format!("{at}.access")),
        (
            "protocol: websocket, rules: [{methods: [GET]}]",
            format!("{at}.rules[0].methods"),
        ),
        (
            "protocol: websocket, rules: [{subprotocols: []}]",
            format!("{at}.rules[0].subprotocols"),
        ),
        (
            "protocol: websocket, rules: [{subprotocols: [\"a b\"]}]",
            format!("{at}.rules[0].subprotocols[0]"),
        ),
        (
            "protocol: websocket, rules: [{origins: []}]",
            format!("{at}.rules[0].origins"),
        ),
        (
            "protocol: websocket, rules: [{origins: [\"https://App.example.com\"]}]",
            format!("{at}.rules[0].origins[0]"),
        ),
        (
            "protocol: rest, rules: [{methods: [GET], subprotocols: [chat]}]",
            format!("{at}.rules[0].subprotocols"),
        ),
        (
            "protocol: websocket, tools: [{name: x}]",
            format!("{at}.tools"),
        ),
    ];
    for (endpoint, field) in cases {
        let reason = rejection_with(&on_rt(endpoint), Role::Sandbox, &limits);
        assert!(
            matches!(
                reason.code,
                ReasonCode::UnsupportedPolicyShape | ReasonCode::InvalidGlob
            ),
            "{endpoint}: {reason}"
        );
        assert_eq!(
            reason.field.as_deref(),
            Some(field.as_str()),
            "{endpoint}: {reason}"
        );
    }
}
