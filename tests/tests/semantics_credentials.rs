//! Conformance suite for docs/policy-semantics.md §9 (credentials as
//! authority): what a binding allows (the matcher), what the prover answers
//! about credential reach (containment, new authority, invariants), and
//! what the language refuses. Every prover counterexample is checked again
//! here: canonical, allowed by the candidate, not by the ceiling.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use agentgate_governance::budget::delta_cost;
use agentgate_policy::action::{Action, Layer, NetworkAction};
use agentgate_policy::compile::{CompiledPolicy, Limits, Role, compile_region};
use agentgate_policy::error::ReasonCode;
use agentgate_policy::load::load_document;
use agentgate_policy::matcher::{
    Caller, ConnectionDecision, allows, decide_connection, decide_network, region_holds,
};
use agentgate_policy::model::Region;
use agentgate_prover::{Outcome, Prover};
use agentgate_tests::{policy, rejection_with, replayed_counterexample as counterexample};

const GH: &str = "/usr/bin/gh";
const CURL: &str = "/usr/bin/curl";
const API: &str = "api.github.com";

fn sandbox(yaml: &str) -> CompiledPolicy {
    policy(yaml, Role::Sandbox)
}

fn maximum(yaml: &str) -> CompiledPolicy {
    policy(yaml, Role::Maximum)
}

fn request(binary: &str, method: &str, path: &str, credential: Option<&str>) -> NetworkAction {
    NetworkAction {
        binary: binary.into(),
        host: API.into(),
        port: 443,
        layer: Layer::Rest,
        method: method.into(),
        path: path.into(),
        credential: credential.map(str::to_string),
        query: Default::default(),
        upgrade: None,
    }
}

/// The sandbox of the seeds' case: `gh` reads acme's repositories with the
/// GitHub token and writes issues of `acme/app` with it; any binary may
/// read public repositories without it.
const SANDBOX: &str = r#"
network:
  - name: gh-read
    binaries: [/usr/bin/gh]
    credentials: [github-token]
    endpoints:
      - {host: api.github.com, port: 443, protocol: rest, rules: [{methods: [GET], path: /repos/acme/**}]}
  - name: gh-issues
    binaries: [/usr/bin/gh]
    credentials: [github-token]
    endpoints:
      - {host: api.github.com, port: 443, protocol: rest, rules: [{methods: [POST], path: /repos/acme/app/issues}]}
  - name: public
    endpoints:
      - {host: api.github.com, port: 443, protocol: rest, rules: [{methods: [GET, POST], path: /repos/**}]}
"#;

/// The ceiling: the token may be attached by `gh` to reads under acme and
/// to writes of acme/app only; uncredentialed requests anywhere on the API.
const CEILING: &str = r#"
network:
  - name: token-reads
    binaries: [/usr/bin/gh]
    credentials: [github-token]
    endpoints:
      - {host: api.github.com, port: 443, protocol: rest, rules: [{methods: [GET], path: /repos/acme/**}]}
  - name: token-writes
    binaries: [/usr/bin/gh]
    credentials: [github-token]
    endpoints:
      - {host: api.github.com, port: 443, protocol: rest, rules: [{methods: [POST, PATCH], path: /repos/acme/app/**}]}
  - name: anonymous
    endpoints:
      - {host: api.github.com, port: 443, protocol: rest, access: full}
"#;

#[track_caller]
fn within(candidate: &CompiledPolicy, ceiling: &CompiledPolicy) {
    let outcome = Prover::default().containment(candidate, ceiling).outcome;
    assert_eq!(outcome, Outcome::Within);
}

#[test]
fn s9_a_binding_allows_its_rules_requests_with_the_credential_only() {
    let p = sandbox(SANDBOX);
    // Bound: gh, GET under acme, with the token.
    assert!(
        decide_network(
            &p,
            &request(GH, "GET", "/repos/acme/x", Some("github-token"))
        )
        .allow
    );
    // The same request without it is allowed too (every rule allows
    // requests that carry none).
    assert!(decide_network(&p, &request(GH, "GET", "/repos/acme/x", None)).allow);
    // Another binary may send the request, but not with the token.
    assert!(decide_network(&p, &request(CURL, "GET", "/repos/acme/x", None)).allow);
    let refused = decide_network(
        &p,
        &request(CURL, "GET", "/repos/acme/x", Some("github-token")),
    );
    assert!(!refused.allow);
    assert_eq!(
        refused.reason,
        "no rule binding credential github-token allows it"
    );
    // A write outside the bound path: allowed bare (public), not with it.
    assert!(decide_network(&p, &request(GH, "POST", "/repos/other/x", None)).allow);
    assert!(
        !decide_network(
            &p,
            &request(GH, "POST", "/repos/other/x", Some("github-token"))
        )
        .allow
    );
    // A credential the policy never binds.
    assert!(!decide_network(&p, &request(GH, "GET", "/repos/acme/x", Some("npm-token"))).allow);
}

#[test]
fn s9_a_deny_in_any_rule_wins_over_a_binding() {
    let p = sandbox(
        r#"
network:
  - name: gh
    credentials: [github-token]
    endpoints: [{host: api.github.com, port: 443, protocol: rest, access: full}]
  - name: no-deletes
    endpoints: [{host: api.github.com, port: 443, protocol: rest, rules: [{methods: [GET]}], denyRules: [{methods: [DELETE]}]}]
"#,
    );
    assert!(decide_network(&p, &request(GH, "POST", "/x", Some("github-token"))).allow);
    assert!(!decide_network(&p, &request(GH, "DELETE", "/x", Some("github-token"))).allow);
}

#[test]
fn s9_the_view_bound_to_a_credential_allows_exactly_its_credentialed_actions() {
    let p = sandbox(SANDBOX);
    let view = p.bound_to("github-token");
    for (binary, method, path) in [
        (GH, "GET", "/repos/acme/x"),
        (GH, "POST", "/repos/acme/app/issues"),
        (GH, "POST", "/repos/acme/prod/issues"),
        (CURL, "GET", "/repos/acme/x"),
    ] {
        let bare = Action::Network(request(binary, method, path, None));
        let bound = Action::Network(request(binary, method, path, Some("github-token")));
        assert_eq!(allows(&view, &bare), allows(&p, &bound), "{bound}");
    }
}

/// The seeds' headline catch: a proposal binds the token to one binary on
/// what looks like a narrow path, and the prover shows the credential
/// reach it adds beyond the ceiling, naming the credential.
#[test]
fn s9_a_narrow_looking_proposal_that_widens_credential_reach_is_caught() {
    let ceiling = maximum(CEILING);
    within(&sandbox(SANDBOX), &ceiling);
    // "Let gh comment on issues": one binary, one method, one resource kind
    // … under every repository of acme, with the token.
    let proposed = format!(
        "{SANDBOX}  - name: gh-comments\n    binaries: [/usr/bin/gh]\n    credentials: [github-token]\n    endpoints:\n      - {{host: api.github.com, port: 443, protocol: rest, rules: [{{methods: [POST], path: /repos/acme/*/issues/*/comments}}]}}\n"
    );
    let candidate = sandbox(&proposed);
    let Action::Network(a) = counterexample(&candidate, &ceiling) else {
        panic!("expected a network counterexample");
    };
    assert_eq!(a.credential.as_deref(), Some("github-token"));
    assert_eq!(a.binary, GH);
    assert_eq!(a.method, "POST");
    assert!(
        a.path.starts_with("/repos/acme/") && !a.path.starts_with("/repos/acme/app/"),
        "{a}"
    );
    let shown = a.to_string();
    assert!(
        shown.starts_with("POST https://api.github.com:443/repos/acme/")
            && shown.ends_with(" by /usr/bin/gh with credential github-token (layer rest)"),
        "{shown}"
    );
    // The same grant without the credential is within: it is the token's
    // reach, not the request, that the ceiling bounds.
    let bare = proposed.replace(
        "  - name: gh-comments\n    binaries: [/usr/bin/gh]\n    credentials: [github-token]\n",
        "  - name: gh-comments\n    binaries: [/usr/bin/gh]\n",
    );
    within(&sandbox(&bare), &ceiling);
}

#[test]
fn s9_a_new_binary_on_a_credentialed_path_is_new_reach() {
    let ceiling = maximum(CEILING);
    let candidate = sandbox(&SANDBOX.replace(
        "  - name: gh-read\n    binaries: [/usr/bin/gh]",
        "  - name: gh-read\n    binaries: [/usr/bin/gh, /usr/bin/curl]",
    ));
    let Action::Network(a) = counterexample(&candidate, &ceiling) else {
        panic!("expected a network counterexample");
    };
    assert_eq!(
        (a.binary.as_str(), a.credential.as_deref()),
        (CURL, Some("github-token"))
    );
    // New authority names it too.
    let found = Prover::default().new_authority(&candidate, &sandbox(SANDBOX), 3);
    assert!(found.incomplete.is_none());
    assert!(!found.examples.is_empty());
    for example in &found.examples {
        let Action::Network(a) = example else {
            panic!("{example}")
        };
        assert_eq!(a.binary, CURL);
        assert_eq!(a.credential.as_deref(), Some("github-token"), "{a}");
    }
}

#[test]
fn s9_a_ceiling_without_credentials_bounds_every_binding() {
    let ceiling = maximum("network: [{name: all, endpoints: [{host: api.github.com, port: 443}]}]");
    let a = counterexample(&sandbox(SANDBOX), &ceiling);
    assert!(
        a.to_string().contains("with credential github-token"),
        "{a}"
    );
    // Globs in a ceiling: any credential named *-token.
    let globbed = maximum(
        "network: [{name: all, credentials: ['*-token'], endpoints: [{host: api.github.com, port: 443}]}]",
    );
    within(&sandbox(SANDBOX), &globbed);
}

#[test]
fn s9_invariants_forbid_credentialed_regions() {
    // "No credentialed POST/PUT/PATCH/DELETE under acme/prod."
    let region = compile_region(
        &serde_json::from_value::<Region>(serde_json::json!({
            "hosts": [API],
            "methods": ["POST", "PUT", "PATCH", "DELETE"],
            "paths": ["/repos/acme/prod/**"],
            "credentials": ["*"],
        }))
        .unwrap(),
        "spec.invariants[0].match",
    )
    .unwrap();
    // The sandbox writes acme/prod without the token (public rule): not in
    // the region.
    let proof = Prover::default().intersection(&sandbox(SANDBOX), &region);
    assert_eq!(proof.outcome, Outcome::Within);
    // Binding the token to every acme repository's issues puts it there.
    let wide = sandbox(&SANDBOX.replace("/repos/acme/app/issues", "/repos/acme/*/issues"));
    match Prover::default().intersection(&wide, &region).outcome {
        Outcome::Exceeds { counterexample } => {
            assert!(region_holds(&region, &counterexample));
            assert!(allows(&wide, &counterexample));
            let Action::Network(a) = &counterexample else {
                panic!("{counterexample}")
            };
            assert_eq!(a.path, "/repos/acme/prod/issues");
            assert_eq!(a.credential.as_deref(), Some("github-token"));
        }
        other => panic!("expected exceeds, got {other:?}"),
    }
    // The region holds no action without a credential.
    assert!(!region_holds(
        &region,
        &Action::Network(request(GH, "POST", "/repos/acme/prod/x", None))
    ));
}

#[test]
fn s9_the_review_view_keeps_credentials_out_of_auto_approval() {
    // A ceiling that allows credentialed writes only under review.
    let ceiling = maximum(
        r#"
network:
  - name: token-reads
    credentials: [github-token]
    endpoints: [{host: api.github.com, port: 443, protocol: rest, rules: [{methods: [GET]}]}]
  - name: token-writes
    credentials: [github-token]
    review: {required: true, reason: credentialed writes need a human}
    endpoints: [{host: api.github.com, port: 443, protocol: rest, rules: [{methods: [POST]}]}]
  - name: anonymous
    endpoints: [{host: api.github.com, port: 443, protocol: rest, access: full}]
"#,
    );
    let reads = sandbox(
        "network: [{name: r, credentials: [github-token], endpoints: [{host: api.github.com, port: 443, protocol: rest, rules: [{methods: [GET]}]}]}]",
    );
    let writes = sandbox(
        "network: [{name: w, credentials: [github-token], endpoints: [{host: api.github.com, port: 443, protocol: rest, rules: [{methods: [POST], path: /x}]}]}]",
    );
    let auto = ceiling.auto_eligible_view();
    within(&reads, &auto);
    within(&writes, &ceiling);
    let a = counterexample(&writes, &auto);
    assert!(
        a.to_string().contains("with credential github-token"),
        "{a}"
    );
}

#[test]
fn s9_binding_a_credential_costs_and_names_it() {
    let load = |yaml: &str| load_document(yaml, &Limits::default()).unwrap().policy;
    let before = load(
        "network: [{name: r, binaries: [/usr/bin/gh], endpoints: [{host: api.github.com, port: 443, protocol: rest, rules: [{methods: [GET], path: /x}]}]}]",
    );
    let after = load(
        "network: [{name: r, binaries: [/usr/bin/gh], credentials: [github-token], endpoints: [{host: api.github.com, port: 443, protocol: rest, rules: [{methods: [GET], path: /x}]}]}]",
    );
    let cost = delta_cost(&before, &after, &Default::default());
    assert_eq!(cost.total, 4);
    assert_eq!(
        cost.breakdown[0].item,
        "network[r].endpoints[0]: carries credential github-token"
    );
    assert_eq!(delta_cost(&after, &after, &Default::default()).total, 0);
    assert_eq!(delta_cost(&after, &before, &Default::default()).total, 0);
}

#[test]
fn s9_an_l4_binding_needs_the_flag_and_then_reaches_every_request() {
    let l4 = "network: [{name: r, credentials: [github-token], endpoints: [{host: api.github.com, port: 443}]}]";
    let reason = rejection_with(l4, Role::Sandbox, &Limits::default());
    assert_eq!(reason.code, ReasonCode::UnsupportedPolicyShape);
    assert_eq!(reason.field.as_deref(), Some("network[0].endpoints[0]"));
    let flagged = sandbox(&l4.replace(
        "credentials:",
        "allowUninspectedCredentials: true, credentials:",
    ));
    for method in ["GET", "DELETE"] {
        assert!(
            decide_network(
                &flagged,
                &request(CURL, method, "/anything", Some("github-token"))
            )
            .allow
        );
    }
    // The proxy reads such a connection instead of tunnelling it, to
    // attach the secret to each request.
    assert_eq!(
        decide_connection(&flagged, Caller::Binary(CURL), API, 443),
        ConnectionDecision::Inspect
    );
    let bare = sandbox("network: [{name: r, endpoints: [{host: api.github.com, port: 443}]}]");
    assert!(matches!(
        decide_connection(&bare, Caller::Binary(CURL), API, 443),
        ConnectionDecision::Tunnel { .. }
    ));
}

#[test]
fn s9_the_language_refuses_what_means_nothing() {
    for (yaml, role, field) in [
        // A sandbox names credentials exactly.
        (
            "network: [{name: r, credentials: ['git*'], endpoints: [{host: a.io, port: 443, protocol: rest, access: full}]}]",
            Role::Sandbox,
            "network[0].credentials[0]",
        ),
        (
            "network: [{name: r, credentials: [a, a], endpoints: [{host: a.io, port: 443, protocol: rest, access: full}]}]",
            Role::Sandbox,
            "network[0].credentials[1]",
        ),
        (
            "network: [{name: r, allowUninspectedCredentials: true, endpoints: [{host: a.io, port: 443}]}]",
            Role::Sandbox,
            "network[0].allowUninspectedCredentials",
        ),
        (
            "network: [{name: r, allowUninspectedCredentials: true, credentials: [a], endpoints: [{host: a.io, port: 443}]}]",
            Role::Maximum,
            "network[0].allowUninspectedCredentials",
        ),
        (
            "network: [{name: r, credentials: ['GitHub'], endpoints: [{host: a.io, port: 443}]}]",
            Role::Maximum,
            "network[0].credentials[0]",
        ),
    ] {
        let reason = rejection_with(yaml, role, &Limits::default());
        assert_eq!(reason.field.as_deref(), Some(field), "{yaml}: {reason}");
    }
}

#[test]
fn s9_a_sandbox_manifest_declares_what_it_binds() {
    let manifest = |credentials: &str| {
        format!(
            "apiVersion: agentgate.dev/v1alpha1\nkind: AgentSandbox\nmetadata: {{name: s}}\nspec:\n  agentServiceAccount: agent\n{credentials}  policy:\n    network: [{{name: r, credentials: [github-token], endpoints: [{{host: api.github.com, port: 443, protocol: rest, access: read-only}}]}}]\n"
        )
    };
    let limits = Limits::default();
    let declared = manifest(
        "  credentials:\n    - {name: github-token, secretRef: {name: gh, key: token}, placeholder: {env: GITHUB_TOKEN}, attach: {header: {name: Authorization, format: 'Bearer {}'}}}\n",
    );
    let doc = load_document(&declared, &limits).unwrap();
    assert_eq!(doc.credentials.len(), 1);
    assert!(doc.compile(Role::Sandbox, &limits).is_ok());
    let undeclared = load_document(&manifest(""), &limits).unwrap();
    let reason = undeclared.compile(Role::Sandbox, &limits).unwrap_err();
    assert_eq!(
        reason.field.as_deref(),
        Some("spec.policy.network[0].credentials[0]")
    );
    assert!(
        reason.message.contains("not declared in spec.credentials"),
        "{reason}"
    );
}
