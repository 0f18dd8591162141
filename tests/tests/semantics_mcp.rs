//! Conformance suite for docs/policy-semantics.md §8 (tool-call authority).
//!
//! Each test is named after the rule of §8 it checks, on the runtime
//! matcher (`decide_mcp`) with concrete calls. The prover does not model
//! tool calls yet: the last tests check that every question over a policy
//! with an `mcp` endpoint is Unsupported, naming the endpoint, and that
//! policies without one are proved as before.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use agentgate_policy::action::{Action, McpAction, McpKind};
use agentgate_policy::compile::{CompiledPolicy, Limits, Role};
use agentgate_policy::error::{Reason, ReasonCode};
use agentgate_policy::load::load_document;
use agentgate_policy::matcher::{Caller, decide_mcp, decide_mcp_as};
use agentgate_prover::{Outcome, Prover, ProverOptions};
use agentgate_tests::{policy, rejection_with};
use serde_json::{Value, json};

const PY: &str = "/usr/bin/python3";
const BANK: &str = "bank.internal";

/// The example of §8.2 (without `from`, which is not modelled yet).
const BANK_POLICY: &str = r#"
network:
  - name: bank
    binaries: [/usr/bin/python3]
    endpoints:
      - host: bank.internal
        ports: [443]
        protocol: mcp
        path: /mcp
        tools:
          - name: "get_*"
          - name: send_money
            arguments:
              recipient: {oneOf: ["GB29NWBK60161331926819"]}
              amount: {minimum: 0, maximum: 100}
              subject: {glob: "*"}
              date: {glob: "2022-*", optional: true}
            additionalArguments: false
        denyTools:
          - name: update_password
        resources:
          - uri: "file:///reports/**"
        prompts:
          - name: "*"
"#;

fn mcp_policy(endpoint: &str) -> CompiledPolicy {
    policy(
        &format!(
            "network: [{{name: r, endpoints: [{{host: {BANK}, ports: [443], protocol: mcp, path: /mcp, {endpoint}}}]}}]"
        ),
        Role::Sandbox,
    )
}

fn call(kind: McpKind, name: &str, args: Value) -> McpAction {
    McpAction {
        binary: PY.into(),
        host: BANK.into(),
        port: 443,
        path: "/mcp".into(),
        kind,
        name: name.into(),
        args: args.as_object().cloned().unwrap_or_default(),
    }
}

fn tool(name: &str, args: Value) -> McpAction {
    call(McpKind::Tool, name, args)
}

fn allowed(p: &CompiledPolicy, t: &McpAction) -> bool {
    t.check_canonical().unwrap();
    decide_mcp(p, t).allow
}

fn rejection(yaml: &str) -> Reason {
    rejection_with(yaml, Role::Sandbox, &Limits::default())
}

fn endpoint_rejection(endpoint: &str) -> Reason {
    rejection(&format!(
        "network: [{{name: r, endpoints: [{{host: {BANK}, ports: [443], {endpoint}}}]}}]"
    ))
}

#[track_caller]
fn assert_reason(reason: &Reason, code: ReasonCode, field: &str) {
    assert_eq!(reason.code, code, "wrong code in {reason}");
    assert_eq!(
        reason.field.as_deref(),
        Some(field),
        "wrong field in {reason}"
    );
}

#[test]
fn s8_1_names_are_printable_ascii_and_resources_have_no_arguments() {
    assert!(tool("send_money", json!({})).check_canonical().is_ok());
    assert!(tool("", json!({})).check_canonical().is_err());
    assert!(tool("a\nb", json!({})).check_canonical().is_err());
    assert!(
        tool(&"x".repeat(1025), json!({}))
            .check_canonical()
            .is_err()
    );
    let read = call(McpKind::Resource, "file:///r", json!({"x": 1}));
    assert!(read.check_canonical().is_err());
    let mut bad_path = tool("x", json!({}));
    bad_path.path = "/a/../mcp".into();
    assert!(bad_path.check_canonical().is_err());
}

#[test]
fn s8_2_the_example_policy_means_what_it_says() {
    let p = policy(BANK_POLICY, Role::Sandbox);
    let pay = |recipient: &str, amount: Value| {
        tool(
            "send_money",
            json!({"recipient": recipient, "amount": amount, "subject": "rent"}),
        )
    };
    assert!(allowed(&p, &tool("get_balance", json!({"any": ["thing"]}))));
    assert!(allowed(&p, &pay("GB29NWBK60161331926819", json!(100))));
    assert!(!allowed(&p, &pay("GB29NWBK60161331926819", json!(101))));
    assert!(!allowed(&p, &pay("US133000000121212121212", json!(1))));
    assert!(!allowed(&p, &pay("GB29NWBK60161331926819", json!("100"))));
    let mut dated = pay("GB29NWBK60161331926819", json!(5));
    dated.args.insert("date".into(), json!("2022-03-01"));
    assert!(allowed(&p, &dated));
    dated.args.insert("date".into(), json!("2023-03-01"));
    assert!(!allowed(&p, &dated));
    let mut extra = pay("GB29NWBK60161331926819", json!(5));
    extra.args.insert("memo".into(), json!("x"));
    assert!(!allowed(&p, &extra), "additionalArguments: false");
    let d = decide_mcp(&p, &tool("update_password", json!({})));
    assert!(!d.allow);
    assert_eq!(d.rule.as_deref(), Some("bank"));
    assert!(d.reason.contains("denyTools"), "{}", d.reason);
    assert!(allowed(
        &p,
        &call(McpKind::Resource, "file:///reports/q3.pdf", json!({}))
    ));
    assert!(!allowed(
        &p,
        &call(McpKind::Resource, "file:///etc/passwd", json!({}))
    ));
    assert!(allowed(
        &p,
        &call(McpKind::Prompt, "summarise", json!({"text": "x"}))
    ));
    // The rule's binaries, the host, the port and the path all bound it.
    let mut other = tool("get_balance", json!({}));
    other.binary = "/usr/bin/curl".into();
    assert!(!allowed(&p, &other));
    let mut other = tool("get_balance", json!({}));
    other.path = "/admin".into();
    assert!(!allowed(&p, &other));
    let mut other = tool("get_balance", json!({}));
    other.port = 8443;
    assert!(!allowed(&p, &other));
}

#[test]
fn s8_2_an_entry_allows_only_its_own_kind() {
    let p = mcp_policy("tools: [{name: summarise}]");
    assert!(allowed(&p, &tool("summarise", json!({}))));
    assert!(!allowed(&p, &call(McpKind::Prompt, "summarise", json!({}))));
    let p = mcp_policy("prompts: [{name: summarise}]");
    assert!(!allowed(&p, &tool("summarise", json!({}))));
    // An endpoint without allow entries allows nothing, and says which call.
    let p = mcp_policy("denyTools: [{name: x}]");
    let d = decide_mcp(&p, &tool("summarise", json!({})));
    assert!(!d.allow);
    assert_eq!(
        d.reason,
        "no rule allows tools/call summarise with these arguments"
    );
}

#[test]
fn s8_2_a_name_glob_star_matches_any_run_and_nothing_else_is_special() {
    let p = mcp_policy("tools: [{name: \"*delete*\"}, {name: \"a.b\"}]");
    assert!(allowed(&p, &tool("delete", json!({}))));
    assert!(allowed(&p, &tool("bulk_delete_all", json!({}))));
    assert!(allowed(&p, &tool("a.b", json!({}))));
    assert!(!allowed(&p, &tool("axb", json!({}))), "`.` is literal");
    assert!(!allowed(&p, &tool("remove", json!({}))));
}

#[test]
fn s8_2_constraints_all_must_hold_and_a_wrong_type_fails() {
    let p = mcp_policy(
        "tools: [{name: t, arguments: {n: {oneOf: [1, 1.5], maximum: 2}, s: {glob: \"a*\", optional: true}, tags: {items: {glob: \"t-*\"}, maxItems: 2, optional: true}}}]",
    );
    let t = |args: Value| tool("t", args);
    // A member of oneOf (each also satisfies `maximum`): JSON equality, so 1.0 is 1.
    assert!(allowed(&p, &t(json!({"n": 1}))));
    assert!(allowed(&p, &t(json!({"n": 1.0}))));
    assert!(!allowed(&p, &t(json!({"n": 2}))), "not in oneOf");
    assert!(!allowed(&p, &t(json!({}))), "n is required");
    assert!(!allowed(&p, &t(json!({"n": 1, "s": "b"}))));
    assert!(
        !allowed(&p, &t(json!({"n": 1, "s": 7}))),
        "glob matches strings only"
    );
    assert!(allowed(
        &p,
        &t(json!({"n": 1, "s": "abc", "tags": ["t-1", "t-2"]}))
    ));
    assert!(!allowed(
        &p,
        &t(json!({"n": 1, "tags": ["t-1", "t-2", "t-3"]}))
    ));
    assert!(!allowed(&p, &t(json!({"n": 1, "tags": ["x"]}))));
    assert!(
        !allowed(&p, &t(json!({"n": 1, "tags": "t-1"}))),
        "items needs an array"
    );
    // Without additionalArguments: false, other arguments are unconstrained.
    assert!(allowed(
        &p,
        &t(json!({"n": 1, "anything": {"deep": [null]}}))
    ));
}

#[test]
fn s8_2_deny_wins_across_the_policy_and_over_raw_authority() {
    let p = policy(
        &format!(
            "network:
  - {{name: raw, endpoints: [{{host: {BANK}, ports: [443]}}]}}
  - {{name: tools, endpoints: [{{host: {BANK}, ports: [443], protocol: mcp, path: /mcp, tools: [{{name: \"*\"}}]}}]}}
  - {{name: guard, endpoints: [{{host: {BANK}, ports: [443], protocol: mcp, path: \"/**\", denyTools: [{{name: send_money, arguments: {{amount: {{minimum: 100}}}}}}]}}]}}"
        ),
        Role::Sandbox,
    );
    assert!(allowed(&p, &tool("send_money", json!({"amount": 99}))));
    let d = decide_mcp(&p, &tool("send_money", json!({"amount": 100})));
    assert!(!d.allow);
    assert_eq!(d.rule.as_deref(), Some("guard"));
    // A deny entry's constraints are read as an allow entry's: without the
    // argument the deny does not match.
    assert!(allowed(&p, &tool("send_money", json!({}))));
}

#[test]
fn s8_2_raw_l4_and_rest_authority_cover_every_call() {
    let l4 = policy(
        &format!("network: [{{name: raw, endpoints: [{{host: {BANK}, ports: [443]}}]}}]"),
        Role::Sandbox,
    );
    assert!(allowed(&l4, &tool("anything", json!({"x": 1}))));
    let post = policy(
        &format!(
            "network: [{{name: r, endpoints: [{{host: {BANK}, ports: [443], protocol: rest, rules: [{{methods: [POST], path: /mcp}}]}}]}}]"
        ),
        Role::Sandbox,
    );
    assert!(allowed(&post, &tool("anything", json!({}))));
    let mut elsewhere = tool("anything", json!({}));
    elsewhere.path = "/other".into();
    assert!(!allowed(&post, &elsewhere), "POST /mcp covers only /mcp");
    let get_only = policy(
        &format!(
            "network: [{{name: r, endpoints: [{{host: {BANK}, ports: [443], protocol: rest, access: read-only}}]}}]"
        ),
        Role::Sandbox,
    );
    assert!(!allowed(&get_only, &tool("anything", json!({}))));
    // A rest denyRule on POST /mcp denies every call, whatever a tool entry says.
    let denied = policy(
        &format!(
            "network:
  - {{name: tools, endpoints: [{{host: {BANK}, ports: [443], protocol: mcp, path: /mcp, tools: [{{name: \"*\"}}]}}]}}
  - {{name: no-post, endpoints: [{{host: {BANK}, ports: [443], protocol: rest, denyRules: [{{methods: [POST], path: /mcp}}]}}]}}"
        ),
        Role::Sandbox,
    );
    let d = decide_mcp(&denied, &tool("x", json!({})));
    assert!(!d.allow);
    assert_eq!(d.rule.as_deref(), Some("no-post"));
}

#[test]
fn s8_2_an_unknown_caller_gets_only_rules_without_binaries() {
    let p = policy(BANK_POLICY, Role::Sandbox);
    let t = tool("get_balance", json!({}));
    assert!(decide_mcp_as(&p, Caller::Binary(PY), &t).allow);
    assert!(!decide_mcp_as(&p, Caller::Unknown, &t).allow);
}

#[test]
fn s8_2_shape_errors_name_their_field() {
    let shape = ReasonCode::UnsupportedPolicyShape;
    for (endpoint, field) in [
        (
            "protocol: mcp, tools: [{name: x}]",
            "network[0].endpoints[0].path",
        ),
        (
            "protocol: mcp, path: /mcp, access: full",
            "network[0].endpoints[0].access",
        ),
        (
            "protocol: mcp, path: /mcp, rules: [{methods: [POST]}]",
            "network[0].endpoints[0].rules",
        ),
        (
            "protocol: rest, access: full, tools: [{name: x}]",
            "network[0].endpoints[0].tools",
        ),
        (
            "denyTools: [{name: x}]",
            "network[0].endpoints[0].denyTools",
        ),
        (
            "protocol: mcp, path: /mcp, tools: [{name: x, arguments: {a: {minimum: 3, maximum: 1}}}]",
            "network[0].endpoints[0].tools[0].arguments.a.minimum",
        ),
        (
            "protocol: mcp, path: /mcp, tools: [{name: x, arguments: {a: {glob: \"*\", maxItems: 1}}}]",
            "network[0].endpoints[0].tools[0].arguments.a",
        ),
        (
            "protocol: mcp, path: /mcp, tools: [{name: x, arguments: {a: {oneOf: [1], glob: \"*\"}}}]",
            "network[0].endpoints[0].tools[0].arguments.a.oneOf[0]",
        ),
        (
            "protocol: mcp, path: /mcp, tools: [{name: x, arguments: {a: {onOf: [1]}}}]",
            "network[0].endpoints[0].tools[0].arguments.a.onOf",
        ),
        (
            "protocol: mcp, path: /mcp, tools: [{name: x, aguments: {}}]",
            "network[0].endpoints[0].tools[0].aguments",
        ),
        (
            "protocol: mcp, path: /mcp, resources: [{url: \"file:///x\"}]",
            "network[0].endpoints[0].resources[0].url",
        ),
    ] {
        assert_reason(&endpoint_rejection(endpoint), shape, field);
    }
    for (endpoint, field) in [
        (
            "protocol: mcp, path: /mcp, tools: [{name: \"\"}]",
            "network[0].endpoints[0].tools[0].name",
        ),
        (
            "protocol: mcp, path: /mcp, resources: [{uri: \"file://*/x\"}]",
            "network[0].endpoints[0].resources[0].uri",
        ),
        (
            "protocol: mcp, path: \"a//b\", tools: [{name: x}]",
            "network[0].endpoints[0].path",
        ),
    ] {
        assert_reason(
            &endpoint_rejection(endpoint),
            ReasonCode::InvalidGlob,
            field,
        );
    }
}

#[test]
fn s8_3_from_is_validated_and_unsupported_until_provenance_is_modelled() {
    let at = "network[0].endpoints[0].tools[0].arguments.to";
    let reason = endpoint_rejection(
        "protocol: mcp, path: /mcp, tools: [{name: x, arguments: {to: {from: [user, \"tool:*\"]}}}]",
    );
    assert_reason(
        &reason,
        ReasonCode::UnsupportedPolicyShape,
        &format!("{at}.from"),
    );
    assert!(reason.message.contains("not modelled yet"), "{reason}");
    let reason = endpoint_rejection(
        "protocol: mcp, path: /mcp, tools: [{name: x, arguments: {to: {from: [mailbox]}}}]",
    );
    assert_reason(
        &reason,
        ReasonCode::UnsupportedPolicyShape,
        &format!("{at}.from[0]"),
    );
}

#[test]
fn s6_tool_entries_and_their_constraints_count_against_the_entry_limit() {
    let limits = Limits {
        entries: 3,
        ..Limits::default()
    };
    let yaml = format!(
        "network: [{{name: r, endpoints: [{{host: {BANK}, ports: [443], protocol: mcp, path: /mcp, tools: [{{name: x, arguments: {{a: {{}}, b: {{items: {{glob: \"*\"}}}}}}}}]}}]}}]"
    );
    let doc = load_document(&yaml, &limits).unwrap();
    let reason = doc.compile(Role::Sandbox, &limits).unwrap_err();
    assert_eq!(reason.code, ReasonCode::ResourceLimit, "{reason}");
    // Nesting past the depth limit fails closed while the file is read.
    let mut constraint = "{glob: x}".to_string();
    for _ in 0..=agentgate_policy::mcp::MAX_ITEMS_DEPTH {
        constraint = format!("{{items: {constraint}}}");
    }
    let reason = endpoint_rejection(&format!(
        "protocol: mcp, path: /mcp, tools: [{{name: x, arguments: {{a: {constraint}}}}}]"
    ));
    assert_eq!(reason.code, ReasonCode::ResourceLimit, "{reason}");
}

#[test]
fn s8_every_question_over_an_mcp_endpoint_is_unsupported_for_now() {
    let prover = Prover::new(ProverOptions::default());
    let tools = policy(BANK_POLICY, Role::Sandbox);
    let raw = policy(
        &format!("network: [{{name: raw, endpoints: [{{host: {BANK}, ports: [443]}}]}}]"),
        Role::Maximum,
    );
    for outcome in [
        prover.containment(&tools, &raw).outcome,
        prover.containment(&raw, &tools).outcome,
    ] {
        let Outcome::Unsupported { reason } = outcome else {
            panic!("expected Unsupported, got {outcome:?}");
        };
        assert_reason(
            &reason,
            ReasonCode::UnsupportedPolicyShape,
            "network[0].endpoints[0].protocol",
        );
        assert!(reason.message.contains("MCP tool calls"), "{reason}");
    }
    // Without mcp endpoints every call is its transport request, which the
    // network proof already covers: those questions are answered as before.
    let post = policy(
        &format!(
            "network: [{{name: r, endpoints: [{{host: {BANK}, ports: [443], protocol: rest, rules: [{{methods: [POST], path: /mcp}}]}}]}}]"
        ),
        Role::Sandbox,
    );
    assert!(matches!(
        prover.containment(&post, &raw).outcome,
        Outcome::Within
    ));
    let Outcome::Exceeds { counterexample } = prover.containment(&raw, &post).outcome else {
        panic!("raw L4 is broader than POST /mcp");
    };
    assert!(matches!(counterexample, Action::Network(_)));
}
