//! Conformance suite for docs/policy-semantics.md §8 (tool-call authority).
//!
//! Each test is named after the rule of §8 it checks: first on the runtime
//! matcher (`decide_mcp`) with concrete calls, then on the prover, whose
//! answers over tool calls (containment, new authority, regions) must
//! agree with the matcher and show a call that reads naturally.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use agentgate_policy::action::{Action, McpAction, McpKind};
use agentgate_policy::compile::{CompiledPolicy, Limits, Role};
use agentgate_policy::error::{Reason, ReasonCode};
use agentgate_policy::load::load_document;
use agentgate_policy::matcher::{Caller, ProviderPath, decide_mcp, decide_mcp_as};
use agentgate_policy::provenance::{Source, StatedSources};
use agentgate_prover::{Outcome, Prover, ProverOptions};
use agentgate_tests::{policy, rejection_with};
use serde_json::{Value, json};

const PY: &str = "/usr/bin/python3";
const BANK: &str = "bank.internal";

/// The example of §8.2 (without `from`, which §8.3's tests cover).
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
        sources: None,
        credential: None,
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
fn s8_3_from_sources_are_validated_at_their_field() {
    let at = "network[0].endpoints[0].tools[0].arguments.to";
    let reason = endpoint_rejection(
        "protocol: mcp, path: /mcp, tools: [{name: x, arguments: {to: {from: [mailbox]}}}]",
    );
    assert_reason(
        &reason,
        ReasonCode::UnsupportedPolicyShape,
        &format!("{at}.from[0]"),
    );
    let reason = endpoint_rejection(
        "protocol: mcp, path: /mcp, tools: [{name: x, arguments: {to: {from: []}}}]",
    );
    assert_reason(
        &reason,
        ReasonCode::UnsupportedPolicyShape,
        &format!("{at}.from"),
    );
}

#[test]
fn s8_3_only_a_rest_endpoint_can_be_the_model_provider() {
    for endpoint in [
        "modelProvider: true",
        "protocol: mcp, path: /mcp, tools: [{name: x}], modelProvider: true",
    ] {
        assert_reason(
            &endpoint_rejection(endpoint),
            ReasonCode::UnsupportedPolicyShape,
            "network[0].endpoints[0].modelProvider",
        );
    }
    // It grants nothing by itself: the rest endpoint's rules do.
    let p = policy(
        &format!(
            "network: [{{name: m, endpoints: [{{host: {BANK}, ports: [443], protocol: rest, modelProvider: true, rules: [{{methods: [POST], path: /v1/chat/completions}}]}}]}}]"
        ),
        Role::Sandbox,
    );
    let request = |method: &str, path: &str| agentgate_policy::action::NetworkAction {
        binary: PY.into(),
        host: BANK.into(),
        port: 443,
        layer: agentgate_policy::action::Layer::Rest,
        method: method.into(),
        path: path.into(),
        credential: None,
        query: Default::default(),
        upgrade: None,
    };
    let post = request("POST", "/v1/chat/completions");
    assert!(agentgate_policy::matcher::decide_network(&p, &post).allow);
    let provider_path = |p: &CompiledPolicy, a| {
        let index = agentgate_policy::index::HostIndex::build(p);
        agentgate_policy::matcher::model_provider_path(p, &index, Caller::Binary(PY), a)
    };
    assert_eq!(provider_path(&p, &post), Some(ProviderPath::Conversation));
    let get = request("GET", "/v1/chat/completions");
    assert!(!agentgate_policy::matcher::decide_network(&p, &get).allow);
    assert_eq!(provider_path(&p, &get), None);
    // `unrecordedPaths`: requests there carry no conversation, but only
    // where every model provider allowing them says so.
    assert_reason(
        &endpoint_rejection("protocol: rest, access: full, unrecordedPaths: [/v1/embeddings]"),
        ReasonCode::UnsupportedPolicyShape,
        "network[0].endpoints[0].unrecordedPaths",
    );
    let provider = |unrecorded: &str| {
        format!(
            "{{host: {BANK}, ports: [443], protocol: rest, modelProvider: true, access: full, unrecordedPaths: [{unrecorded}]}}"
        )
    };
    let one = policy(
        &format!(
            "network: [{{name: m, endpoints: [{}]}}]",
            provider("/v1/embed*")
        ),
        Role::Sandbox,
    );
    let embeddings = request("POST", "/v1/embeddings");
    assert_eq!(
        provider_path(&one, &embeddings),
        Some(ProviderPath::Unrecorded)
    );
    assert_eq!(provider_path(&one, &post), Some(ProviderPath::Conversation));
    let two = policy(
        &format!(
            "network: [{{name: m, endpoints: [{}, {}]}}]",
            provider("/v1/embed*"),
            provider("/v1/files")
        ),
        Role::Sandbox,
    );
    assert_eq!(
        provider_path(&two, &embeddings),
        Some(ProviderPath::Conversation)
    );
}

/// `send_money` whose recipient must come from the user, and whose amount
/// may also come from a tool that reads bills.
const PROVENANCE_POLICY: &str = "tools: [{name: send_money, arguments: {recipient: {from: [user]}, amount: {from: [user, 'tool:read_*'], maximum: 100}}}]";

/// A call stating where its values were seen.
fn sourced(args: Value, sources: &[(&str, &[&str])]) -> McpAction {
    sourced_call("send_money", args, sources)
}

/// A call of `name` with `args`, its leaves seen from the given sources.
fn sourced_call(name: &str, args: Value, sources: &[(&str, &[&str])]) -> McpAction {
    let mut t = tool(name, args);
    t.sources = Some(Box::new(StatedSources(
        sources
            .iter()
            .map(|(pointer, list)| {
                let set = list.iter().map(|s| Source::parse(s).unwrap()).collect();
                (pointer.to_string(), set)
            })
            .collect(),
    )));
    t
}

#[test]
fn s8_3_from_holds_only_for_a_listed_source() {
    let p = mcp_policy(PROVENANCE_POLICY);
    let args = json!({"recipient": "GB29NWBK60161331926819", "amount": 40});
    let typed = sourced(
        args.clone(),
        &[("/recipient", &["user"]), ("/amount", &["user"])],
    );
    assert!(allowed(&p, &typed), "{typed}");
    let bill = sourced(
        args.clone(),
        &[("/recipient", &["user"]), ("/amount", &["tool:read_bill"])],
    );
    assert!(allowed(&p, &bill), "{bill}");
    // The recipient read in an email: refused, though the user typed the amount.
    let injected = sourced(
        args.clone(),
        &[("/recipient", &["tool:read_email"]), ("/amount", &["user"])],
    );
    assert!(!allowed(&p, &injected), "{injected}");
    // Seen from both: one listed source suffices.
    let both = sourced(
        args.clone(),
        &[
            ("/recipient", &["tool:read_email", "user"]),
            ("/amount", &["user"]),
        ],
    );
    assert!(allowed(&p, &both), "{both}");
    // Seen nowhere: only `model`, which the rule does not list.
    let made_up = sourced(args.clone(), &[("/amount", &["user"])]);
    assert!(!allowed(&p, &made_up), "{made_up}");
    // No record at all (a call off the wire outside a recorded session).
    assert!(!allowed(&p, &tool("send_money", args)));
    // A deny entry with `from` holds where the record cannot tell.
    let deny = mcp_policy(
        "tools: [{name: send_money}], denyTools: [{name: send_money, arguments: {recipient: {from: ['tool:*']}}}]",
    );
    let unknown = tool("send_money", json!({"recipient": "GB29"}));
    assert!(!allowed(&deny, &unknown), "no record: the deny may apply");
    let typed = sourced(json!({"recipient": "GB29"}), &[("/recipient", &["user"])]);
    assert!(allowed(&deny, &typed));
}

#[test]
fn s8_3_from_on_arrays_holds_when_every_element_does() {
    let p = mcp_policy(
        "tools: [{name: send_money, arguments: {to: {items: {from: [user]}}, cc: {from: [user], optional: true}}}]",
    );
    let two = sourced(
        json!({"to": ["a@x.io", "b@x.io"]}),
        &[("/to/0", &["user"]), ("/to/1", &["user"])],
    );
    assert!(allowed(&p, &two));
    let one_injected = sourced(
        json!({"to": ["a@x.io", "b@x.io"]}),
        &[("/to/0", &["user"]), ("/to/1", &["tool:read_email"])],
    );
    assert!(!allowed(&p, &one_injected));
    let cc = sourced(
        json!({"to": [], "cc": {"name": "Bo", "mail": "b@x.io"}}),
        &[("/cc/name", &["user"]), ("/cc/mail", &["host:evil.io"])],
    );
    assert!(!allowed(&p, &cc), "an object: every member");
}

#[test]
fn s8_3_the_prover_treats_sources_as_part_of_the_call() {
    let prover = prover();
    let narrow = mcp_policy(PROVENANCE_POLICY);
    let wide = mcp_policy(
        "tools: [{name: send_money, arguments: {recipient: {from: [user, 'tool:*']}, amount: {from: [user, 'tool:read_*'], maximum: 100}}}]",
    );
    assert_eq!(prover.containment(&narrow, &wide).outcome, Outcome::Within);
    let t = call_counterexample(prover.containment(&wide, &narrow).outcome);
    // The escape: a recipient seen only in some tool's result.
    let sources = t.sources.clone().expect("the call states its sources");
    let recipient = &sources.0["/recipient"];
    assert!(
        !recipient.is_empty() && !recipient.contains(&Source::User),
        "{t}"
    );
    assert!(allowed(&wide, &t) && !allowed(&narrow, &t), "{t}");
    assert!(t.to_string().contains("recipient from tool:"), "{t}");
    // A rule without `from` allows every source: broader than either.
    let any = mcp_policy("tools: [{name: send_money, arguments: {amount: {maximum: 100}}}]");
    assert_eq!(prover.containment(&wide, &any).outcome, Outcome::Within);
    let t = call_counterexample(prover.containment(&any, &wide).outcome);
    assert!(allowed(&any, &t) && !allowed(&wide, &t), "{t}");
    // An invariant over the sources: no payment to a recipient the model
    // made up (a string).
    // Both `from` rules keep out of it; a rule without `from` does not.
    let region = compiled_region(
        "{tools: [{name: send_money, arguments: {recipient: {glob: '*', from: [model]}}}]}",
    );
    for p in [&narrow, &wide] {
        assert_eq!(prover.intersection(p, &region).outcome, Outcome::Within);
    }
    let t = call_counterexample(prover.intersection(&any, &region).outcome);
    assert!(t.to_string().contains("recipient from model"), "{t}");
    // A value seen from a tool and typed by the user is both: `from: [user]`
    // allows it, and a region over `tool:*` holds it.
    let region = compiled_region(
        "{tools: [{name: send_money, arguments: {recipient: {from: ['tool:*']}}}]}",
    );
    let t = call_counterexample(prover.intersection(&narrow, &region).outcome);
    let recipient = &t.sources.as_ref().unwrap().0["/recipient"];
    assert!(
        recipient.contains(&Source::User) && recipient.len() == 2,
        "{t}"
    );
}

#[test]
fn s8_3_keys_carry_provenance_and_empty_containers_need_empty() {
    let p = mcp_policy(
        "tools: [{name: send_money, arguments: {to: {from: [user]}, cc: {from: [user, empty], optional: true}}}]",
    );
    // An attacker's address as a key, the user's as its value.
    let keyed = sourced(
        json!({"to": {"eve@evil.example": "bob@x.io"}}),
        &[("/to/eve@evil.example", &["user"])],
    );
    assert!(!allowed(&p, &keyed), "{keyed}");
    let both = sourced(
        json!({"to": {"mail": "bob@x.io"}}),
        &[("/to/mail~2", &["user"]), ("/to/mail", &["user"])],
    );
    assert!(allowed(&p, &both), "{both}");
    // An empty container holds no value: `from` holds only where it says
    // `empty`, and never with no record at all.
    let empty = sourced(json!({"to": []}), &[]);
    assert!(!allowed(&p, &empty), "{empty}");
    assert!(!allowed(&p, &tool("send_money", json!({"to": {}}))));
    let cc = sourced(json!({"to": "bob@x.io", "cc": []}), &[("/to", &["user"])]);
    assert!(allowed(&p, &cc), "{cc}");
    // The prover tells them apart: `empty` is wider, with the empty
    // container as the witness.
    let prover = prover();
    let narrow = mcp_policy("tools: [{name: send_money, arguments: {to: {from: [user]}}}]");
    let wide = mcp_policy("tools: [{name: send_money, arguments: {to: {from: [user, empty]}}}]");
    assert_eq!(prover.containment(&narrow, &wide).outcome, Outcome::Within);
    let t = call_counterexample(prover.containment(&wide, &narrow).outcome);
    assert!(allowed(&wide, &t) && !allowed(&narrow, &t), "{t}");
    // Keys: a rule on an object's values only is wider than one on both.
    let keys = mcp_policy("tools: [{name: send_money, arguments: {to: {from: [user, 'tool:*']}}}]");
    assert_eq!(prover.containment(&narrow, &keys).outcome, Outcome::Within);
    let t = call_counterexample(prover.containment(&keys, &narrow).outcome);
    assert!(allowed(&keys, &t) && !allowed(&narrow, &t), "{t}");
}

#[test]
fn s8_3_entities_inside_free_text_are_proved_and_enforced() {
    let p = mcp_policy(
        "tools: [{name: send_direct_message, arguments: {recipient: {from: [user]}, body: {entities: {from: [user, 'tool:read_channel_messages']}}}}]",
    );
    let args = |body: &str| json!({"recipient": "Alice", "body": body});
    let dm = |args: Value, sources: &[(&str, &[&str])]| {
        sourced_call("send_direct_message", args, sources)
    };
    let plain = dm(args("Hi, the meeting moved."), &[("/recipient", &["user"])]);
    assert!(allowed(&p, &plain), "{plain}");
    // The attacker's link in a body the model wrote: its entity has only
    // the source its content showed.
    let phished = dm(
        args("Hi, see https://evil.example/p"),
        &[
            ("/recipient", &["user"]),
            ("/body~30", &["tool:read_inbox"]),
        ],
    );
    assert!(!allowed(&p, &phished), "{phished}");
    let shared = dm(
        args("Hi, see https://intranet.example/p"),
        &[
            ("/recipient", &["user"]),
            ("/body~30", &["tool:read_channel_messages"]),
        ],
    );
    assert!(allowed(&p, &shared), "{shared}");
    // The prover: a rule without `entities` is wider, and among what it
    // adds is a body with an entity from a source the narrow rule does not
    // list (the least counterexample is a call without a body).
    let prover = prover();
    let any =
        mcp_policy("tools: [{name: send_direct_message, arguments: {recipient: {from: [user]}}}]");
    assert_eq!(prover.containment(&p, &any).outcome, Outcome::Within);
    let t = call_counterexample(prover.containment(&any, &p).outcome);
    assert!(allowed(&any, &t) && !allowed(&p, &t), "{t}");
    let added: Vec<String> = prover
        .new_authority(&any, &p, 8)
        .examples
        .iter()
        .map(ToString::to_string)
        .collect();
    assert!(
        added.iter().any(|t| t.contains("body entity 0 from")),
        "{added:?}"
    );
    let narrow = mcp_policy(
        "tools: [{name: send_direct_message, arguments: {recipient: {from: [user]}, body: {entities: {from: [user]}}}}]",
    );
    assert_eq!(prover.containment(&narrow, &p).outcome, Outcome::Within);
    let t = call_counterexample(prover.containment(&p, &narrow).outcome);
    assert!(allowed(&p, &t) && !allowed(&narrow, &t), "{t}");
    // Beside a glob on the same argument the model is not exact.
    let globbed =
        mcp_policy("tools: [{name: send_direct_message, arguments: {body: {glob: 'Hi*'}}}]");
    assert!(
        matches!(
            prover.containment(&globbed, &p).outcome,
            Outcome::Unsupported { .. }
        ),
        "{:?}",
        prover.containment(&globbed, &p).outcome
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

fn prover() -> Prover {
    Prover::new(ProverOptions {
        cache_entries: 0,
        ..ProverOptions::default()
    })
}

/// The counterexample of an Exceeds answer, which must be a tool call.
#[track_caller]
fn call_counterexample(outcome: Outcome) -> McpAction {
    match outcome {
        Outcome::Exceeds {
            counterexample: Action::Mcp(t),
        } => t,
        other => panic!("expected a tool-call counterexample, got {other:?}"),
    }
}

#[test]
fn s8_2_the_prover_proves_argument_bounds_and_shows_the_call_that_escapes() {
    let prover = prover();
    let tools = policy(BANK_POLICY, Role::Sandbox);
    let ceiling = policy(
        &BANK_POLICY.replace("maximum: 100", "maximum: 50"),
        Role::Maximum,
    );
    assert_eq!(
        prover.containment(&ceiling, &tools).outcome,
        Outcome::Within
    );
    let t = call_counterexample(prover.containment(&tools, &ceiling).outcome);
    assert_eq!((t.kind, t.name.as_str()), (McpKind::Tool, "send_money"));
    assert_eq!(t.args.get("amount"), Some(&json!(51)), "{t}");
    assert_eq!(
        t.args.get("recipient"),
        Some(&json!("GB29NWBK60161331926819"))
    );
    assert!(
        t.to_string()
            .ends_with("by /usr/bin/python3 on bank.internal:443/mcp"),
        "{t}"
    );
    // An entry without constraints is broader than one with them: the
    // escape is a value the ceiling's constraint refuses.
    let any_send = mcp_policy("tools: [{name: send_money}]");
    let t = call_counterexample(prover.containment(&any_send, &tools).outcome);
    assert!(allowed(&any_send, &t) && !allowed(&tools, &t), "{t}");
}

#[test]
fn s8_2_the_prover_judges_deny_tools_resources_and_extra_arguments() {
    let prover = prover();
    let everything = mcp_policy("tools: [{name: '*'}], denyTools: [{name: '*delete*'}]");
    let delete = mcp_policy("tools: [{name: delete_file}]");
    let t = call_counterexample(prover.containment(&delete, &everything).outcome);
    assert_eq!(t.name, "delete_file");
    let reads = mcp_policy("tools: [{name: get_balance}]");
    assert_eq!(
        prover.containment(&reads, &everything).outcome,
        Outcome::Within
    );

    let all_reports = mcp_policy("resources: [{uri: 'file:///reports/**'}]");
    let pdfs = mcp_policy("resources: [{uri: 'file:///reports/*.pdf'}]");
    assert_eq!(
        prover.containment(&pdfs, &all_reports).outcome,
        Outcome::Within
    );
    let t = call_counterexample(prover.containment(&all_reports, &pdfs).outcome);
    assert_eq!(t.kind, McpKind::Resource);
    assert!(
        t.name.starts_with("file:///reports/") && !t.name.ends_with(".pdf"),
        "{t}"
    );
    assert!(t.args.is_empty());

    let closed = mcp_policy(
        "tools: [{name: send_mail, arguments: {to: {glob: '*@acme.com'}}, additionalArguments: false}]",
    );
    let open = mcp_policy("tools: [{name: send_mail, arguments: {to: {glob: '*@acme.com'}}}]");
    assert_eq!(prover.containment(&closed, &open).outcome, Outcome::Within);
    let t = call_counterexample(prover.containment(&open, &closed).outcome);
    assert!(
        t.args.len() == 2 && allowed(&open, &t) && !allowed(&closed, &t),
        "{t}"
    );
    // New authority lists one call per class the policies tell apart: here
    // names matching neither `get_balance` nor `*delete*`; whether an extra
    // argument is present tells nothing apart, as no entry refuses one.
    let found = prover.new_authority(&everything, &reads, 3);
    assert!(found.incomplete.is_none(), "{:?}", found.incomplete);
    let [Action::Mcp(t)] = found.examples.as_slice() else {
        panic!("expected one call, got {:?}", found.examples);
    };
    assert!(t.name != "get_balance" && !t.name.contains("delete"), "{t}");
    // Only a valid `to` with an extra argument separates them.
    let found = prover.new_authority(&open, &closed, 3);
    let [Action::Mcp(t)] = found.examples.as_slice() else {
        panic!("expected one call, got {:?}", found.examples);
    };
    assert_eq!(t.args.get("x"), Some(&json!("x")), "{t}");
}

#[test]
fn s8_2_raw_authority_is_broader_than_any_tool_grant_in_proofs() {
    let prover = prover();
    let tools = policy(BANK_POLICY, Role::Sandbox);
    let raw = policy(
        &format!("network: [{{name: raw, endpoints: [{{host: {BANK}, ports: [443]}}]}}]"),
        Role::Maximum,
    );
    let post = policy(
        &format!(
            "network: [{{name: r, endpoints: [{{host: {BANK}, ports: [443], protocol: rest, rules: [{{methods: [POST], path: /mcp}}]}}]}}]"
        ),
        Role::Maximum,
    );
    for broad in [&raw, &post] {
        assert_eq!(prover.containment(&tools, broad).outcome, Outcome::Within);
        let Outcome::Exceeds { counterexample } = prover.containment(broad, &tools).outcome else {
            panic!("raw authority is broader than tool grants");
        };
        // The request itself is the escape: a tool policy allows no request.
        assert!(
            matches!(counterexample, Action::Network(_)),
            "{counterexample}"
        );
    }
    // A rest deny of POST /mcp removes every call a tool entry grants there.
    let denied = policy(
        &format!(
            "{BANK_POLICY}  - name: no-post\n    endpoints:\n      - host: {BANK}\n        ports: [443]\n        protocol: rest\n        denyRules: [{{methods: [POST], path: /mcp}}]\n"
        ),
        Role::Sandbox,
    );
    let nothing = policy("network: []", Role::Maximum);
    assert_eq!(
        prover.containment(&denied, &nothing).outcome,
        Outcome::Within
    );
}

#[test]
fn s8_2_regions_hold_a_call_when_they_hold_its_transport() {
    let prover = prover();
    let tools = policy(BANK_POLICY, Role::Sandbox);
    let region = |yaml: &str| {
        let region: agentgate_policy::model::Region = serde_saphyr::from_str(yaml).unwrap();
        agentgate_policy::compile::compile_region(&region, "region").unwrap()
    };
    let t = call_counterexample(
        prover
            .intersection(&tools, &region("{paths: [/mcp], methods: [POST]}"))
            .outcome,
    );
    assert!(allowed(&tools, &t), "{t}");
    for disjoint in ["{paths: [/admin/**]}", "{layers: [l4]}", "{methods: [GET]}"] {
        assert_eq!(
            prover.intersection(&tools, &region(disjoint)).outcome,
            Outcome::Within,
            "{disjoint}"
        );
    }
}

fn compiled_region(yaml: &str) -> agentgate_policy::compile::CompiledRegion {
    let region: agentgate_policy::model::Region = serde_saphyr::from_str(yaml).unwrap();
    agentgate_policy::compile::compile_region(&region, "region").unwrap()
}

fn region_rejection(yaml: &str) -> Reason {
    let region: agentgate_policy::model::Region = serde_saphyr::from_str(yaml).unwrap();
    agentgate_policy::compile::compile_region(&region, "region").unwrap_err()
}

#[test]
fn s8_2_exclusive_bounds_leave_out_the_bound_itself() {
    let p = mcp_policy(
        "tools: [{name: t, arguments: {n: {exclusiveMinimum: 0, exclusiveMaximum: 100}}}]",
    );
    let t = |n: Value| tool("t", json!({ "n": n }));
    assert!(allowed(&p, &t(json!(0.5))));
    assert!(allowed(&p, &t(json!(99.99))));
    assert!(!allowed(&p, &t(json!(0))));
    assert!(!allowed(&p, &t(json!(100))));
    assert!(!allowed(&p, &t(json!("50"))), "bounds speak about numbers");
    for (constraint, field) in [
        ("{exclusiveMinimum: 1, maximum: 1}", "exclusiveMinimum"),
        ("{minimum: 2, exclusiveMaximum: 1}", "minimum"),
        (
            "{exclusiveMinimum: 1, exclusiveMaximum: 1}",
            "exclusiveMinimum",
        ),
    ] {
        let reason = endpoint_rejection(&format!(
            "protocol: mcp, path: /mcp, tools: [{{name: x, arguments: {{a: {constraint}}}}}]"
        ));
        assert_reason(
            &reason,
            ReasonCode::UnsupportedPolicyShape,
            &format!("network[0].endpoints[0].tools[0].arguments.a.{field}"),
        );
    }
    // The prover tells the bound from the numbers just past it.
    let prover = prover();
    let inclusive = mcp_policy("tools: [{name: t, arguments: {n: {minimum: 0, maximum: 100}}}]");
    assert_eq!(prover.containment(&p, &inclusive).outcome, Outcome::Within);
    let escape = call_counterexample(prover.containment(&inclusive, &p).outcome);
    let n = escape.args.get("n").and_then(Value::as_f64);
    assert!(n == Some(0.0) || n == Some(100.0), "{escape}");
}

#[test]
fn s8_5_a_region_with_tools_holds_only_the_calls_its_entries_match() {
    use agentgate_policy::matcher::{region_contains, region_holds};
    let deletes = compiled_region("{tools: [{name: '*delete*'}]}");
    let large = compiled_region(
        "{hosts: [bank.internal], tools: [{name: send_money, arguments: {amount: {exclusiveMinimum: 100}}}]}",
    );
    let holds = |r, t: McpAction| region_holds(r, &Action::Mcp(t));
    assert!(holds(&deletes, tool("bulk_delete", json!({}))));
    assert!(!holds(&deletes, tool("get_balance", json!({}))));
    assert!(
        !holds(&deletes, call(McpKind::Prompt, "delete", json!({}))),
        "tools hold tool calls only"
    );
    assert!(holds(&large, tool("send_money", json!({"amount": 100.5}))));
    assert!(!holds(&large, tool("send_money", json!({"amount": 100}))));
    assert!(
        !holds(&large, tool("send_money", json!({}))),
        "a constrained argument must be present"
    );
    let mut elsewhere = tool("send_money", json!({"amount": 500}));
    elsewhere.host = "other.internal".into();
    assert!(
        !holds(&large, elsewhere),
        "the transport part still applies"
    );
    // Such a region holds no network action, not even the transport request.
    let post = tool("bulk_delete", json!({})).transport();
    assert!(!region_contains(&deletes, &post));
    assert!(!region_holds(&deletes, &Action::Network(post)));
}

#[test]
fn s8_5_invariants_over_tools_are_proved_with_raw_authority_counted() {
    let prover = prover();
    let tools = policy(BANK_POLICY, Role::Sandbox);
    let over_100 = compiled_region(
        "{tools: [{name: send_money, arguments: {amount: {exclusiveMinimum: 100}}}]}",
    );
    assert_eq!(
        prover.intersection(&tools, &over_100).outcome,
        Outcome::Within,
        "send_money.amount <= 100 holds"
    );
    let looser = policy(
        &BANK_POLICY.replace("maximum: 100", "maximum: 101"),
        Role::Sandbox,
    );
    let t = call_counterexample(prover.intersection(&looser, &over_100).outcome);
    assert_eq!(t.name, "send_money");
    let amount = t.args.get("amount").and_then(Value::as_f64).unwrap();
    assert!(amount > 100.0 && amount <= 101.0, "{t}");
    assert!(allowed(&looser, &t), "{t}");

    // "No tool matching *delete*": denied tools stay outside; a raw REST
    // grant of POST /mcp allows every call, so it intersects.
    let deletes = compiled_region("{tools: [{name: '*delete*'}]}");
    let guarded = mcp_policy("tools: [{name: '*'}], denyTools: [{name: '*delete*'}]");
    assert_eq!(
        prover.intersection(&guarded, &deletes).outcome,
        Outcome::Within
    );
    let open = mcp_policy("tools: [{name: '*'}]");
    let t = call_counterexample(prover.intersection(&open, &deletes).outcome);
    assert!(t.name.contains("delete") && allowed(&open, &t), "{t}");
    let post = policy(
        &format!(
            "network: [{{name: r, endpoints: [{{host: {BANK}, ports: [443], protocol: rest, rules: [{{methods: [POST], path: /mcp}}]}}]}}]"
        ),
        Role::Sandbox,
    );
    let t = call_counterexample(prover.intersection(&post, &deletes).outcome);
    assert!(t.name.contains("delete") && allowed(&post, &t), "{t}");
    // Outside the region's transport part nothing is held.
    let elsewhere = compiled_region("{hosts: [other.internal], tools: [{name: '*delete*'}]}");
    assert_eq!(
        prover.intersection(&post, &elsewhere).outcome,
        Outcome::Within
    );
}

#[test]
fn s8_5_a_region_that_can_hold_no_call_is_refused() {
    let shape = ReasonCode::UnsupportedPolicyShape;
    for (yaml, field) in [
        ("{tools: []}", "region.tools"),
        ("{resources: []}", "region.resources"),
        ("{layers: [l4], tools: [{name: x}]}", "region.layers"),
        ("{methods: [GET], prompts: [{name: x}]}", "region.methods"),
        (
            "{tools: [{name: x, arguments: {a: {minimum: 3, maximum: 1}}}]}",
            "region.tools[0].arguments.a.minimum",
        ),
    ] {
        assert_reason(&region_rejection(yaml), shape, field);
    }
    // Together they are one region: tools, resources and prompts alike.
    let r = compiled_region("{tools: [{name: x}], resources: [{uri: 'file:///etc/**'}]}");
    let read = call(McpKind::Resource, "file:///etc/passwd", json!({}));
    assert!(agentgate_policy::matcher::region_holds(
        &r,
        &Action::Mcp(read)
    ));
}

/// Every `from` removed from a policy document (and `modelProvider`, which
/// only feeds `from`).
fn without_provenance(node: &mut Value) {
    match node {
        Value::Object(members) => {
            members.remove("from");
            members.remove("entities");
            members.remove("modelProvider");
            members.values_mut().for_each(without_provenance);
        }
        Value::Array(items) => items.iter_mut().for_each(without_provenance),
        _ => {}
    }
}

/// `node` with every `mode: ask` tool entry removed: what the policy
/// allows at once (§8.6).
fn without_held(node: &mut Value) {
    match node {
        Value::Object(members) => {
            if let Some(Value::Array(tools)) = members.get_mut("tools") {
                tools.retain(|entry| entry["mode"] != "ask");
            }
            members.values_mut().for_each(without_held);
        }
        Value::Array(items) => items.iter_mut().for_each(without_held),
        _ => {}
    }
}

#[test]
fn s8_3_the_agentdojo_examples_are_proved_narrower_by_their_provenance() {
    let prover = prover();
    for suite in ["banking", "slack", "travel", "workspace"] {
        let path = format!(
            "{}/../examples/agentdojo/{suite}.yaml",
            env!("CARGO_MANIFEST_DIR")
        );
        let text = std::fs::read_to_string(&path).unwrap();
        let with = policy(&text, Role::Sandbox);
        assert!(
            agentgate_policy::matcher::has_model_provider(&with),
            "{suite}: the conversation must be recorded"
        );
        let mut stripped: Value = serde_saphyr::from_str(&text).unwrap();
        without_provenance(&mut stripped);
        let without = policy(&stripped.to_string(), Role::Sandbox);
        // Every call `from` refuses is held for a person (§8.6): the
        // authority is the same, both ways.
        for (wide, narrow) in [(&with, &without), (&without, &with)] {
            assert_eq!(
                prover.containment(wide, narrow).outcome,
                Outcome::Within,
                "{suite}: a held call is authority"
            );
        }
        // What is allowed at once: `from` only narrows, and a call from
        // the wrong source is where it does.
        let mut at_once: Value = serde_saphyr::from_str(&text).unwrap();
        without_held(&mut at_once);
        let with = policy(&at_once.to_string(), Role::Sandbox);
        without_provenance(&mut at_once);
        let without = policy(&at_once.to_string(), Role::Sandbox);
        assert_eq!(
            prover.containment(&with, &without).outcome,
            Outcome::Within,
            "{suite}: `from` only narrows"
        );
        let t = call_counterexample(prover.containment(&without, &with).outcome);
        assert!(t.sources.is_some(), "{suite}: {t}");
        assert!(allowed(&without, &t) && !allowed(&with, &t), "{suite}: {t}");
    }
}

#[test]
fn s8_3_a_counterexample_states_sources_a_session_could_show() {
    // Both arguments' simplest values are "x"; the escape needs `b` seen
    // from a tool while `a` is the user's, which no session shows for two
    // equal values: the counterexample tells them apart.
    let prover = prover();
    let loose = mcp_policy(
        "tools: [{name: send_money, arguments: {a: {glob: '*', from: [user]}, b: {glob: '*'}}}]",
    );
    let strict = mcp_policy(
        "tools: [{name: send_money, arguments: {a: {glob: '*', from: [user]}, b: {glob: '*', from: [user]}}}]",
    );
    let t = call_counterexample(prover.containment(&loose, &strict).outcome);
    assert!(allowed(&loose, &t) && !allowed(&strict, &t), "{t}");
    let sources = t.sources.as_deref().unwrap();
    assert_eq!(sources, &sources.realized(&t.args), "{t}");
    assert_ne!(t.args["a"], t.args["b"], "{t}");
}
