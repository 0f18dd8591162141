//! Conformance suite for docs/policy-semantics.md (§2–§6).
//!
//! Every rule of §3 (globs), §4 (what a rule allows) and §5 (the prover's
//! questions and answers) has at least one test named after it that fails if
//! the rule were implemented differently. Where it makes sense a rule is
//! checked on both layers:
//! - the runtime matcher (`allows_network`, `allows_filesystem`,
//!   `decide_network`, `region_contains`, `Glob::matches`) on concrete
//!   canonical actions, and
//! - the prover (`containment`, `intersection`, `new_authority`), whose
//!   counterexamples are checked again here: canonical (§1), allowed by the
//!   candidate and not by the maximum.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashSet;
use std::time::Duration;

use agentgate_governance::verdict::{
    Decision, GoverningMaximum, Mode, Requester, Step, VerdictInput, reach_verdict,
};
use agentgate_policy::action::{Access, Action, FilesystemAction, Layer, NetworkAction};
use agentgate_policy::compile::{CompiledPolicy, Limits, Role, compile, compile_region};
use agentgate_policy::error::{Reason, ReasonCode};
use agentgate_policy::glob::{Glob, GlobKind};
use agentgate_policy::load::load_document;
use agentgate_policy::matcher::{
    allows_filesystem, allows_network, decide_network, region_contains,
};
use agentgate_policy::model::{PolicyDocument, Region};
use agentgate_prover::{Outcome, Prover, ProverOptions};
use agentgate_tests::{policy, rejection_with};
use serde_json::json;

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

const GH: &str = "/usr/bin/gh";
const API: &str = "api.github.com";

fn sandbox(yaml: &str) -> CompiledPolicy {
    policy(yaml, Role::Sandbox)
}

fn maximum(yaml: &str) -> CompiledPolicy {
    policy(yaml, Role::Maximum)
}

fn empty() -> CompiledPolicy {
    CompiledPolicy::default()
}

/// One REST endpoint on api.github.com:443 for any binary; `extra` is the
/// rest of the endpoint in flow YAML (`access: ...`, `rules: [...]`, ...).
fn rest(extra: &str) -> CompiledPolicy {
    sandbox(&format!(
        "network: [{{name: r, endpoints: [{{host: {API}, ports: [443], protocol: rest, {extra}}}]}}]"
    ))
}

/// REST endpoint whose allow entries are `GET <path>` for each path.
fn get(paths: &[&str]) -> CompiledPolicy {
    let entries: Vec<String> = paths
        .iter()
        .map(|p| format!("{{methods: [GET], path: \"{p}\"}}"))
        .collect();
    rest(&format!("rules: [{}]", entries.join(", ")))
}

/// One L4 endpoint `host:443` for any binary.
fn l4_host(host: &str, role: Role) -> CompiledPolicy {
    policy(
        &format!("network: [{{name: r, endpoints: [{{host: \"{host}\", ports: [443]}}]}}]"),
        role,
    )
}

/// One L4 endpoint on api.github.com:443 for the given binary globs.
fn binaries(globs: &[&str]) -> CompiledPolicy {
    let list: Vec<String> = globs.iter().map(|g| format!("\"{g}\"")).collect();
    sandbox(&format!(
        "network: [{{name: r, binaries: [{}], endpoints: [{{host: {API}, ports: [443]}}]}}]",
        list.join(", ")
    ))
}

fn req(method: &str, path: &str) -> NetworkAction {
    NetworkAction {
        binary: GH.into(),
        host: API.into(),
        port: 443,
        layer: Layer::Rest,
        method: method.into(),
        path: path.into(),
        credential: None,
        query: Default::default(),
        upgrade: None,
    }
}

fn conn(host: &str, port: u16) -> NetworkAction {
    NetworkAction {
        binary: GH.into(),
        host: host.into(),
        port,
        layer: Layer::L4,
        method: String::new(),
        path: String::new(),
        credential: None,
        query: Default::default(),
        upgrade: None,
    }
}

fn by(binary: &str, a: NetworkAction) -> NetworkAction {
    NetworkAction {
        binary: binary.into(),
        ..a
    }
}

fn on(host: &str, port: u16, a: NetworkAction) -> NetworkAction {
    NetworkAction {
        host: host.into(),
        port,
        ..a
    }
}

fn read(path: &str) -> FilesystemAction {
    FilesystemAction {
        access: Access::Read,
        path: path.into(),
    }
}

fn write(path: &str) -> FilesystemAction {
    FilesystemAction {
        access: Access::Write,
        path: path.into(),
    }
}

fn glob(kind: GlobKind, pattern: &str) -> Glob {
    Glob::parse(kind, pattern).unwrap_or_else(|e| panic!("{pattern:?} does not parse: {e}"))
}

fn path_glob(pattern: &str) -> Glob {
    glob(GlobKind::Path, pattern)
}

fn host_glob(pattern: &str) -> Glob {
    glob(GlobKind::Host, pattern)
}

fn allows_action(p: &CompiledPolicy, a: &Action) -> bool {
    match a {
        Action::Network(a) => allows_network(p, a),
        Action::Filesystem(a) => allows_filesystem(p, a),
        Action::Mcp(t) => agentgate_policy::matcher::decide_mcp(p, t).allow,
    }
}

fn prover() -> Prover {
    Prover::default()
}

#[track_caller]
fn assert_within(candidate: &CompiledPolicy, maximum: &CompiledPolicy) {
    let proof = prover().containment(candidate, maximum);
    assert_eq!(
        proof.outcome,
        Outcome::Within,
        "expected candidate ⊆ maximum"
    );
}

/// Containment must be Exceeds; the counterexample is checked to be
/// canonical and replayed here through the matcher.
#[track_caller]
fn counterexample(candidate: &CompiledPolicy, maximum: &CompiledPolicy) -> Action {
    let proof = prover().containment(candidate, maximum);
    let Outcome::Exceeds { counterexample } = proof.outcome else {
        panic!("expected Exceeds, got {:?}", proof.outcome);
    };
    if let Err(e) = counterexample.check_canonical() {
        panic!("counterexample {counterexample} is not canonical: {e}");
    }
    assert!(
        allows_action(candidate, &counterexample),
        "candidate does not allow its counterexample {counterexample}"
    );
    assert!(
        !allows_action(maximum, &counterexample),
        "maximum allows the counterexample {counterexample}"
    );
    counterexample
}

#[track_caller]
fn net_counterexample(candidate: &CompiledPolicy, maximum: &CompiledPolicy) -> NetworkAction {
    match counterexample(candidate, maximum) {
        Action::Network(a) => a,
        other => panic!("expected a network counterexample, got {other}"),
    }
}

#[track_caller]
fn fs_counterexample(candidate: &CompiledPolicy, maximum: &CompiledPolicy) -> FilesystemAction {
    match counterexample(candidate, maximum) {
        Action::Filesystem(a) => a,
        other => panic!("expected a filesystem counterexample, got {other}"),
    }
}

/// Containment both ways.
#[track_caller]
fn assert_equivalent(a: &CompiledPolicy, b: &CompiledPolicy) {
    assert_within(a, b);
    assert_within(b, a);
}

fn rejection(yaml: &str, role: Role) -> Reason {
    rejection_with(yaml, role, &Limits::default())
}

fn accepted(yaml: &str, role: Role) -> bool {
    let limits = Limits::default();
    match load_document(yaml, &limits) {
        Ok(doc) => doc.compile(role, &limits).is_ok(),
        Err(_) => false,
    }
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

/// Unsupported per §2/§5: the reason code is an "unsupported" one and the
/// prover-facing outcome is Unsupported (exit 3).
#[track_caller]
fn assert_unsupported(reason: &Reason, field: &str) {
    assert_reason(reason, ReasonCode::UnsupportedPolicyShape, field);
    assert!(matches!(
        Outcome::from_reason(reason.clone()),
        Outcome::Unsupported { .. }
    ));
}

/// Compiles a document given as JSON through the model (bypasses YAML, so
/// NUL and non-ASCII reach the glob validation untouched).
fn compile_json(doc: serde_json::Value, role: Role) -> Result<CompiledPolicy, Reason> {
    let doc: PolicyDocument = serde_json::from_value(doc).unwrap();
    compile(&doc, role, &Limits::default())
}

/// True for characters a reader would accept in a filler position.
fn readable(s: &str, extra: &str) -> bool {
    s.chars()
        .all(|c| c.is_ascii_alphanumeric() || extra.contains(c))
}

// ---------------------------------------------------------------------------
// §3 Path and binary globs
// ---------------------------------------------------------------------------

#[test]
fn s3_pattern_is_split_into_segments_on_slash() {
    let g = path_glob("/repos/acme");
    assert!(g.matches("/repos/acme"));
    assert!(!g.matches("/repos/acme/x"));
    assert!(!g.matches("/repos"));
    assert!(!g.matches("/repos/acmex"));
    assert!(!g.matches("/reposacme"));
    // Prover: a deeper literal path is not inside a shorter literal one.
    let a = net_counterexample(&get(&["/repos/acme/x"]), &get(&["/repos/acme"]));
    assert_eq!(a.path, "/repos/acme/x");
    assert_within(&get(&["/repos/acme"]), &get(&["/repos/acme", "/other"]));
}

#[test]
fn s3_star_matches_within_one_segment_not_slash() {
    let g = path_glob("/repos/*/issues");
    assert!(g.matches("/repos/x/issues"));
    assert!(g.matches("/repos/acme-1.2/issues"));
    assert!(!g.matches("/repos/a/b/issues"));
    assert!(!g.matches("/repos/issues"));
    let g = path_glob("/a*b");
    assert!(g.matches("/ab"), "* matches zero characters");
    assert!(g.matches("/axyzb"));
    assert!(!g.matches("/a/b"), "* never matches /");
    assert!(!g.matches("/a/xb"));
    // Prover: `*` stays inside the segment.
    assert_within(&get(&["/repos/*/issues"]), &get(&["/repos/**"]));
    let a = net_counterexample(&get(&["/repos/*/issues"]), &get(&["/repos/acme/issues"]));
    assert!(a.path.starts_with("/repos/") && a.path.ends_with("/issues"));
    assert_ne!(a.path, "/repos/acme/issues");
    assert_eq!(a.path.matches('/').count(), 3, "{}", a.path);
    // `/a/*` does not reach two segments down.
    let a = net_counterexample(&get(&["/a/**"]), &get(&["/a/*"]));
    assert!(a.path.trim_start_matches("/a/").contains('/'), "{}", a.path);
}

#[test]
fn s3_star_may_match_an_empty_trailing_segment() {
    // `*` matches zero or more characters: `/repos/*` matches `/repos/`.
    assert!(path_glob("/repos/*").matches("/repos/"));
    assert!(path_glob("/repos/*").matches("/repos/x"));
    assert!(!path_glob("/repos/*").matches("/repos"));
    assert_within(&get(&["/repos/"]), &get(&["/repos/*"]));
}

#[test]
fn s3_triple_star_inside_a_segment_behaves_like_star() {
    for (triple, single) in [
        ("/a***b", "/a*b"),
        ("/x/***", "/x/*"),
        ("/***.json", "/*.json"),
    ] {
        let (t, s) = (path_glob(triple), path_glob(single));
        for value in [
            "/ab",
            "/axb",
            "/a/b",
            "/x/",
            "/x/abc",
            "/x/a/b",
            "/f.json",
            "/a/f.json",
            "/.json",
            "/x/y.json",
        ] {
            assert_eq!(
                t.matches(value),
                s.matches(value),
                "{triple} vs {single} on {value}"
            );
        }
        assert_equivalent(&get(&[triple]), &get(&[single]));
    }
    assert!(!path_glob("/x/***").matches("/x/a/b"), "*** is not **");
    let a = net_counterexample(&get(&["/x/**"]), &get(&["/x/***"]));
    assert!(a.path.trim_start_matches("/x/").contains('/'), "{}", a.path);
}

#[test]
fn s3_interior_double_star_matches_zero_or_more_segments() {
    let g = path_glob("/a/**/b");
    assert!(g.matches("/a/b"), "zero segments");
    assert!(g.matches("/a/x/b"), "one segment");
    assert!(g.matches("/a/x/y/b"), "two segments");
    assert!(!g.matches("/a/x/c"));
    assert!(!g.matches("/a/xb"));
    assert!(!g.matches("/ab"));
    assert!(!g.matches("/a/b/c"));
    // Prover.
    for inside in ["/a/b", "/a/x/b", "/a/x/y/b"] {
        assert_within(&get(&[inside]), &get(&["/a/**/b"]));
    }
    let a = net_counterexample(&get(&["/a/**/b"]), &get(&["/a/*/b"]));
    assert!(
        a.path == "/a/b" || a.path.matches('/').count() >= 4,
        "{}",
        a.path
    );
    let a = net_counterexample(&get(&["/a/**/b"]), &get(&["/a/b"]));
    assert!(a.path.starts_with("/a/") && a.path.ends_with("/b") && a.path != "/a/b");
    assert_within(&get(&["/a/**/b"]), &get(&["/a/**"]));
    assert_within(&get(&["/a/*/b"]), &get(&["/a/**/b"]));
}

#[test]
fn s3_trailing_double_star_matches_dir_with_slash_not_dir() {
    let g = path_glob("/repos/**");
    assert!(g.matches("/repos/"));
    assert!(g.matches("/repos/x"));
    assert!(g.matches("/repos/x/y"));
    assert!(g.matches("/repos/x/y/"));
    assert!(!g.matches("/repos"), "/repos/** must not match /repos");
    assert!(!g.matches("/reposx"));
    assert!(!g.matches("/"));
    // Prover: /repos ⊄ /repos/** with exactly /repos as the witness.
    let a = net_counterexample(&get(&["/repos"]), &get(&["/repos/**"]));
    assert_eq!(a.path, "/repos");
    assert_eq!(a.layer, Layer::Rest);
    assert!(a.method == "GET" || a.method == "HEAD", "{}", a.method);
    assert_within(&get(&["/repos/x/issues/*"]), &get(&["/repos/x/issues/**"]));
    assert_within(&get(&["/repos/"]), &get(&["/repos/**"]));
    assert_within(&get(&["/repos/x/y/z"]), &get(&["/repos/**"]));
    // And the other way round: the subtree is not inside the directory.
    let a = net_counterexample(&get(&["/repos/**"]), &get(&["/repos"]));
    assert!(a.path.starts_with("/repos/"), "{}", a.path);
}

#[test]
fn s3_double_star_alone_matches_every_path() {
    for pattern in ["**", "/**"] {
        let g = path_glob(pattern);
        for value in ["/", "/a", "/a/", "/a/b/c", "/A.b/-_~/x"] {
            assert!(g.matches(value), "{pattern} should match {value}");
        }
        // A rule `GET <pattern>` is the same as GET on any path.
        let any_path = rest("rules: [{methods: [GET]}]");
        assert_equivalent(&get(&[pattern]), &any_path);
        // As a binary glob, `**` alone covers every binary (= no list).
        let b = glob(GlobKind::Binary, pattern);
        assert!(b.matches("/usr/bin/gh") && b.matches("/x"));
        let any_binary = sandbox(&format!(
            "network: [{{name: r, endpoints: [{{host: {API}, ports: [443]}}]}}]"
        ));
        assert_equivalent(&binaries(&[pattern]), &any_binary);
    }
    assert_equivalent(&get(&["**"]), &get(&["/**"]));
}

#[test]
fn s3_literals_are_case_sensitive() {
    assert!(!path_glob("/Repos").matches("/repos"));
    assert!(path_glob("/Repos").matches("/Repos"));
    assert!(!path_glob("/repos/**").matches("/Repos/x"));
    assert!(!glob(GlobKind::Binary, "/usr/bin/gh").matches("/usr/bin/GH"));
    let a = net_counterexample(&get(&["/Repos"]), &get(&["/repos", "/repos/**"]));
    assert_eq!(a.path, "/Repos");
    let a = net_counterexample(&binaries(&["/usr/bin/GH"]), &binaries(&["/usr/bin/gh"]));
    assert_eq!(a.binary, "/usr/bin/GH");
}

const REJECTED: &[&str] = &["?", "[", "]", "{", "}", "\\", "\0", "é"];

#[test]
fn s3_rejected_characters_are_a_validation_error_in_every_glob_kind() {
    for c in REJECTED {
        for (kind, pattern) in [
            (GlobKind::Path, format!("/repos/a{c}b")),
            (GlobKind::Binary, format!("/usr/bin/g{c}h")),
            (GlobKind::Host, format!("api{c}.example.com")),
        ] {
            assert!(
                Glob::parse(kind, &pattern).is_err(),
                "{kind:?} glob {pattern:?} must be rejected"
            );
        }
    }
}

#[test]
fn s3_rejected_characters_are_invalid_glob_with_field_path() {
    for c in REJECTED {
        let path = format!("/repos/a{c}b");
        let cases = [
            (
                json!({"network": [{"name": "r", "endpoints": [{"host": API, "ports": [443],
                    "protocol": "rest", "rules": [{"methods": ["GET"], "path": path}]}]}]}),
                "network[0].endpoints[0].rules[0].path",
            ),
            (
                json!({"network": [{"name": "r", "endpoints": [{"host": API, "ports": [443],
                    "protocol": "rest", "access": "full",
                    "denyRules": [{"methods": ["GET"], "path": path}]}]}]}),
                "network[0].endpoints[0].denyRules[0].path",
            ),
            (
                json!({"network": [{"name": "r", "endpoints": [{"host": API, "ports": [443],
                    "protocol": "rest", "path": path, "access": "full"}]}]}),
                "network[0].endpoints[0].path",
            ),
            (
                json!({"network": [{"name": "r", "endpoints": [{"host": format!("api{c}.example.com"),
                    "ports": [443]}]}]}),
                "network[0].endpoints[0].host",
            ),
            (
                json!({"network": [{"name": "r", "binaries": [format!("/usr/bin/g{c}h")],
                    "endpoints": [{"host": API, "ports": [443]}]}]}),
                "network[0].binaries[0]",
            ),
        ];
        for (doc, field) in cases {
            for role in [Role::Sandbox, Role::Maximum] {
                let reason = compile_json(doc.clone(), role)
                    .expect_err(&format!("{c:?} at {field} must be rejected"));
                assert_reason(&reason, ReasonCode::InvalidGlob, field);
                assert!(matches!(
                    Outcome::from_reason(reason),
                    Outcome::Unsupported { .. }
                ));
            }
        }
    }
}

#[test]
fn s3_rejected_characters_through_yaml_documents() {
    // The user-facing path: YAML text through load_document + compile.
    for quoted in [
        "\"/repos/a?\"",
        "\"/repos/[ab]\"",
        "\"/repos/{a,b}\"",
        "'/repos/a\\b'",
        "\"/repos/é\"",
    ] {
        let yaml = format!(
            "network: [{{name: r, endpoints: [{{host: {API}, ports: [443], protocol: rest, rules: [{{methods: [GET], path: {quoted}}}]}}]}}]"
        );
        let reason = rejection(&yaml, Role::Sandbox);
        assert_reason(
            &reason,
            ReasonCode::InvalidGlob,
            "network[0].endpoints[0].rules[0].path",
        );
    }
    // In a manifest the field path is prefixed with spec.policy.
    let manifest = format!(
        "kind: MaximumPolicy\nmetadata: {{name: m}}\nspec:\n  policy:\n    network: [{{name: r, endpoints: [{{host: {API}, ports: [443], protocol: rest, rules: [{{methods: [GET], path: \"/a?\"}}]}}]}}]\n"
    );
    let reason = rejection(&manifest, Role::Maximum);
    assert_reason(
        &reason,
        ReasonCode::InvalidGlob,
        "spec.policy.network[0].endpoints[0].rules[0].path",
    );
}

#[test]
fn s3_rejected_characters_in_region_patterns() {
    for c in REJECTED {
        let region = Region {
            paths: Some(vec![format!("/a{c}")]),
            ..Default::default()
        };
        let reason = compile_region(&region, "match").expect_err("region path must be rejected");
        assert_reason(&reason, ReasonCode::InvalidGlob, "match.paths[0]");
        let region = Region {
            hosts: Some(vec![format!("a{c}.example.com")]),
            ..Default::default()
        };
        let reason = compile_region(&region, "match").expect_err("region host must be rejected");
        assert_reason(&reason, ReasonCode::InvalidGlob, "match.hosts[0]");
    }
    // And inside a MaximumPolicy's invariants.
    let manifest = "kind: MaximumPolicy\nmetadata: {name: m}\nspec:\n  invariants:\n    - name: i\n      match: {hosts: [\"meta?.internal\"]}\n";
    let reason = rejection(manifest, Role::Maximum);
    assert_reason(
        &reason,
        ReasonCode::InvalidGlob,
        "spec.invariants[0].match.hosts[0]",
    );
}

#[test]
fn s3_matching_is_on_canonical_values_only_in_the_prover() {
    // Every canonical first label starts with one of [a-z0-9_-], so these
    // hosts cover `*.example.com` for canonical values, though not for raw
    // strings (`.example.com`, `A.example.com`).
    let firsts = "abcdefghijklmnopqrstuvwxyz0123456789_-";
    let hosts: Vec<String> = firsts
        .chars()
        .map(|c| format!("{{host: \"{c}*.example.com\", ports: [443]}}"))
        .collect();
    let m = sandbox(&format!(
        "network: [{{name: r, endpoints: [{}]}}]",
        hosts.join(", ")
    ));
    assert_within(&l4_host("*.example.com", Role::Sandbox), &m);
}

// ---------------------------------------------------------------------------
// §3 Host globs
// ---------------------------------------------------------------------------

#[test]
fn s3_host_wildcard_allowed_only_in_first_label() {
    for host in [
        "api.*.example.com",
        "example.*",
        "a.**.com",
        "api.ex*ample.com",
    ] {
        let e = Glob::parse(GlobKind::Host, host).expect_err(host);
        assert_eq!(e.0, "wildcard allowed only in the first label", "{host}");
        for role in [Role::Sandbox, Role::Maximum] {
            let yaml =
                format!("network: [{{name: r, endpoints: [{{host: \"{host}\", ports: [443]}}]}}]");
            let reason = rejection(&yaml, role);
            assert_reason(
                &reason,
                ReasonCode::InvalidGlob,
                "network[0].endpoints[0].host",
            );
            assert!(
                reason
                    .message
                    .contains("wildcard allowed only in the first label"),
                "{reason}"
            );
        }
    }
}

#[test]
fn s3_host_star_matches_exactly_one_label() {
    let g = host_glob("*.example.com");
    assert!(g.matches("x.example.com"));
    assert!(g.matches("api-2.example.com"));
    assert!(
        !g.matches("example.com"),
        "* is one (non-empty) label, not zero"
    );
    assert!(!g.matches("a.b.example.com"), "* is one label, not two");
    assert!(!g.matches("x.example.org"));
    // Matcher through a policy.
    let p = l4_host("*.example.com", Role::Sandbox);
    assert!(allows_network(&p, &conn("x.example.com", 443)));
    assert!(!allows_network(&p, &conn("example.com", 443)));
    assert!(!allows_network(&p, &conn("a.b.example.com", 443)));
    // Prover.
    assert_within(&l4_host("api.example.com", Role::Sandbox), &p);
    let a = net_counterexample(&l4_host("a.b.example.com", Role::Sandbox), &p);
    assert_eq!(a.host, "a.b.example.com");
    let a = net_counterexample(&l4_host("example.com", Role::Sandbox), &p);
    assert_eq!(a.host, "example.com");
    let a = net_counterexample(&p, &l4_host("example.com", Role::Sandbox));
    let label = a.host.strip_suffix(".example.com").unwrap();
    assert!(!label.is_empty() && !label.contains('.'), "{}", a.host);
}

#[test]
fn s3_host_star_inside_first_label_matches_zero_or_more_characters() {
    let g = host_glob("api*.example.com");
    assert!(g.matches("api.example.com"), "zero characters");
    assert!(g.matches("api-v2.example.com"));
    assert!(!g.matches("xapi.example.com"));
    assert!(!g.matches("api.v2.example.com"), "* never matches .");
    assert!(!g.matches("example.com"));
    let p = l4_host("api*.example.com", Role::Sandbox);
    assert_within(&l4_host("api.example.com", Role::Sandbox), &p);
    assert_within(&l4_host("api-v2.example.com", Role::Sandbox), &p);
    let a = net_counterexample(&l4_host("api.v2.example.com", Role::Sandbox), &p);
    assert_eq!(a.host, "api.v2.example.com");
    let a = net_counterexample(&p, &l4_host("api.example.com", Role::Sandbox));
    let label = a.host.strip_suffix(".example.com").unwrap();
    assert!(label.starts_with("api") && label != "api" && !label.contains('.'));
    // Triple star in the first label is still `*`.
    assert_equivalent(&l4_host("api***.example.com", Role::Sandbox), &p);
}

#[test]
fn s3_host_double_star_first_label_matches_one_or_more_labels() {
    let g = host_glob("**.example.com");
    assert!(g.matches("a.example.com"));
    assert!(g.matches("a.b.example.com"));
    assert!(g.matches("a.b.c.example.com"));
    assert!(
        !g.matches("example.com"),
        "** is one or more labels, not zero"
    );
    assert!(!g.matches("aexample.com"));
    let p = l4_host("**.example.com", Role::Sandbox);
    assert_within(&l4_host("a.b.example.com", Role::Sandbox), &p);
    assert_within(&l4_host("*.example.com", Role::Sandbox), &p);
    let a = net_counterexample(&l4_host("example.com", Role::Sandbox), &p);
    assert_eq!(a.host, "example.com");
    let a = net_counterexample(&p, &l4_host("*.example.com", Role::Sandbox));
    let head = a.host.strip_suffix(".example.com").unwrap();
    assert!(head.contains('.'), "needs two or more labels: {}", a.host);
}

#[test]
fn s3_hosts_are_case_insensitive() {
    let g = host_glob("API.Example.COM");
    assert_eq!(g.as_str(), "api.example.com", "patterns are lower-cased");
    assert!(g.matches("api.example.com"));
    let g = host_glob("*.GitHub.com");
    assert!(g.matches("api.github.com"));
    let p = l4_host("API.GitHub.COM", Role::Sandbox);
    assert!(allows_network(&p, &conn("api.github.com", 443)));
    assert_equivalent(&p, &l4_host("api.github.com", Role::Sandbox));
    assert_equivalent(
        &l4_host("Api*.EXAMPLE.com", Role::Sandbox),
        &l4_host("api*.example.com", Role::Sandbox),
    );
}

#[test]
fn s3_broad_hosts_rejected_in_sandbox_accepted_in_maximum() {
    for host in ["*", "**", "*.com", "**.com", "api*.com"] {
        let yaml =
            format!("network: [{{name: r, endpoints: [{{host: \"{host}\", ports: [443]}}]}}]");
        let reason = rejection(&yaml, Role::Sandbox);
        assert_reason(
            &reason,
            ReasonCode::InvalidGlob,
            "network[0].endpoints[0].host",
        );
        assert!(
            accepted(&yaml, Role::Maximum),
            "{host} must be allowed in a MaximumPolicy"
        );
    }
    // A wildcard over a two-label suffix is fine everywhere.
    for host in ["*.example.com", "**.co.uk", "api*.example.com"] {
        let yaml =
            format!("network: [{{name: r, endpoints: [{{host: \"{host}\", ports: [443]}}]}}]");
        assert!(accepted(&yaml, Role::Sandbox), "{host}");
    }
}

#[test]
fn s3_bare_host_star_is_one_label_and_double_star_is_every_host() {
    let star = l4_host("*", Role::Maximum);
    let all = l4_host("**", Role::Maximum);
    assert!(allows_network(&star, &conn("localhost", 443)));
    assert!(!allows_network(&star, &conn("api.github.com", 443)));
    assert!(allows_network(&all, &conn("api.github.com", 443)));
    assert!(allows_network(&all, &conn("a.b.c.d", 443)));
    assert_within(&l4_host("localhost", Role::Sandbox), &star);
    let a = net_counterexample(&l4_host(API, Role::Sandbox), &star);
    assert_eq!(a.host, API);
    assert_within(&l4_host("**.example.com", Role::Sandbox), &all);
    assert_within(&star, &all);
    let a = net_counterexample(&all, &star);
    assert!(a.host.contains('.'));
    let com = l4_host("*.com", Role::Maximum);
    assert_within(&l4_host("github.com", Role::Sandbox), &com);
    let a = net_counterexample(&l4_host(API, Role::Sandbox), &com);
    assert_eq!(a.host, API);
}

// ---------------------------------------------------------------------------
// §4 What a rule allows
// ---------------------------------------------------------------------------

#[test]
fn s4_binary_ok_empty_binaries_means_any_binary() {
    let any = sandbox(&format!(
        "network: [{{name: r, endpoints: [{{host: {API}, ports: [443]}}]}}]"
    ));
    let explicit_empty = sandbox(&format!(
        "network: [{{name: r, binaries: [], endpoints: [{{host: {API}, ports: [443]}}]}}]"
    ));
    for b in ["/usr/bin/gh", "/x", "/opt/a/b/c/tool"] {
        assert!(allows_network(&any, &by(b, conn(API, 443))), "{b}");
        assert!(
            allows_network(&explicit_empty, &by(b, conn(API, 443))),
            "{b}"
        );
    }
    assert_equivalent(&any, &explicit_empty);
    assert_within(&binaries(&["/usr/bin/gh"]), &any);
    let a = net_counterexample(&any, &binaries(&["/usr/bin/gh"]));
    assert_ne!(a.binary, "/usr/bin/gh");
}

#[test]
fn s4_binary_ok_requires_some_binary_glob_to_match() {
    let p = binaries(&["/usr/bin/gh", "/usr/local/bin/*"]);
    assert!(allows_network(&p, &by("/usr/bin/gh", conn(API, 443))));
    assert!(allows_network(
        &p,
        &by("/usr/local/bin/agent", conn(API, 443))
    ));
    assert!(!allows_network(&p, &by("/usr/bin/git", conn(API, 443))));
    assert!(!allows_network(
        &p,
        &by("/usr/local/bin/x/y", conn(API, 443))
    ));
    assert!(!allows_network(&p, &by("/usr/bin/ghx", conn(API, 443))));
    assert_within(&binaries(&["/usr/local/bin/agent", "/usr/bin/gh"]), &p);
    let a = net_counterexample(
        &binaries(&["/usr/local/bin/*"]),
        &binaries(&["/usr/bin/gh", "/usr/local/bin/agent"]),
    );
    assert!(a.binary.starts_with("/usr/local/bin/") && a.binary != "/usr/local/bin/agent");
    assert_within(&binaries(&["/usr/bin/gh"]), &binaries(&["/usr/**/gh"]));
}

#[test]
fn s4_l4_endpoint_covers_every_layer_method_and_path() {
    // protocol absent = l4.
    let p = sandbox(&format!(
        "network: [{{name: r, endpoints: [{{host: {API}, port: 443}}]}}]"
    ));
    assert!(allows_network(&p, &conn(API, 443)));
    for (m, path) in [
        ("GET", "/"),
        ("DELETE", "/repos/x"),
        ("FOO", "/a/b/"),
        ("POST", "/admin"),
    ] {
        assert!(allows_network(&p, &req(m, path)), "{m} {path}");
    }
    let explicit = sandbox(&format!(
        "network: [{{name: r, endpoints: [{{host: {API}, ports: [443], protocol: l4}}]}}]"
    ));
    assert_equivalent(&p, &explicit);
    // Prover: any REST grant on the same host/port is inside the L4 grant.
    assert_within(&rest("access: full"), &p);
    assert_within(&get(&["/repos/**"]), &p);
    // The L4 grant is not inside a REST grant: the witness is an l4 action.
    let a = net_counterexample(&p, &rest("access: full"));
    assert_eq!(a.layer, Layer::L4);
    assert_eq!((a.method.as_str(), a.path.as_str()), ("", ""));
}

#[test]
fn s4_endpoint_requires_host_and_port_in_ports() {
    let p = sandbox(&format!(
        "network: [{{name: r, endpoints: [{{host: {API}, ports: [22, 443]}}]}}]"
    ));
    assert!(allows_network(&p, &conn(API, 22)));
    assert!(allows_network(&p, &conn(API, 443)));
    assert!(!allows_network(&p, &conn(API, 80)));
    assert!(!allows_network(&p, &conn("github.com", 443)));
    let only_22 = sandbox(&format!(
        "network: [{{name: r, endpoints: [{{host: {API}, port: 22}}]}}]"
    ));
    let a = net_counterexample(&p, &only_22);
    assert_eq!(a.port, 443);
    assert_within(&only_22, &p);
    let r = rest("access: full");
    assert!(!allows_network(&r, &on(API, 8443, req("GET", "/"))));
    assert!(!allows_network(&r, &on("github.com", 443, req("GET", "/"))));
}

#[test]
fn s4_rest_endpoint_requires_layer_rest() {
    let p = rest("access: full");
    assert!(allows_network(&p, &req("GET", "/")));
    assert!(
        !allows_network(&p, &conn(API, 443)),
        "a REST grant is not an L4 grant"
    );
    let l4 = sandbox(&format!(
        "network: [{{name: r, endpoints: [{{host: {API}, ports: [443]}}]}}]"
    ));
    let a = net_counterexample(&l4, &p);
    assert_eq!(a.layer, Layer::L4);
}

#[test]
fn s4_rest_endpoint_path_scope() {
    let p = rest("path: \"/repos/**\", access: full");
    assert!(allows_network(&p, &req("GET", "/repos/x")));
    assert!(allows_network(&p, &req("DELETE", "/repos/x/y")));
    assert!(!allows_network(&p, &req("GET", "/users/x")));
    assert!(!allows_network(&p, &req("GET", "/repos")));
    // The scope also narrows `rules`.
    let scoped_rules = rest("path: \"/repos/**\", rules: [{methods: [GET], path: \"**\"}]");
    assert!(allows_network(&scoped_rules, &req("GET", "/repos/x")));
    assert!(!allows_network(&scoped_rules, &req("GET", "/users")));
    assert_equivalent(&scoped_rules, &get(&["/repos/**"]));
    // Prover.
    assert_equivalent(
        &p,
        &rest("rules: [{methods: [\"*\"], path: \"/repos/**\"}]"),
    );
    let a = net_counterexample(&rest("access: full"), &p);
    assert!(!path_glob("/repos/**").matches(&a.path), "{}", a.path);
}

#[test]
fn s4_access_read_only_is_exactly_get_head_options() {
    let p = rest("access: read-only");
    for m in ["GET", "HEAD", "OPTIONS"] {
        assert!(allows_network(&p, &req(m, "/any/path")), "{m}");
    }
    for m in ["POST", "PUT", "PATCH", "DELETE", "TRACE", "CONNECT", "FOO"] {
        assert!(!allows_network(&p, &req(m, "/any/path")), "{m}");
    }
    let exact = rest("rules: [{methods: [GET, HEAD, OPTIONS], path: \"**\"}]");
    assert_equivalent(&p, &exact);
    let a = net_counterexample(&p, &rest("rules: [{methods: [GET], path: \"**\"}]"));
    assert_eq!(a.method, "OPTIONS");
    let a = net_counterexample(&rest("access: read-write"), &p);
    assert!(
        ["POST", "PUT", "PATCH"].contains(&a.method.as_str()),
        "{}",
        a.method
    );
}

#[test]
fn s4_access_read_write_is_read_only_plus_post_put_patch() {
    let p = rest("access: read-write");
    for m in ["GET", "HEAD", "OPTIONS", "POST", "PUT", "PATCH"] {
        assert!(allows_network(&p, &req(m, "/x")), "{m}");
    }
    for m in ["DELETE", "TRACE", "CONNECT", "FOO"] {
        assert!(!allows_network(&p, &req(m, "/x")), "{m} is not read-write");
    }
    assert_equivalent(
        &p,
        &rest("rules: [{methods: [GET, HEAD, OPTIONS, POST, PUT, PATCH], path: \"**\"}]"),
    );
    let a = net_counterexample(&rest("rules: [{methods: [DELETE], path: \"**\"}]"), &p);
    assert_eq!(a.method, "DELETE");
    let a = net_counterexample(&rest("access: full"), &p);
    assert!(!["GET", "HEAD", "OPTIONS", "POST", "PUT", "PATCH"].contains(&a.method.as_str()));
}

#[test]
fn s4_access_full_is_any_method() {
    let p = rest("access: full");
    for m in ["GET", "DELETE", "TRACE", "FOO", "X-CUSTOM"] {
        assert!(allows_network(&p, &req(m, "/x")), "{m}");
    }
    assert_equivalent(&p, &rest("rules: [{methods: [\"*\"], path: \"**\"}]"));
    assert_equivalent(&p, &rest("rules: [{methods: [GET, \"*\"]}]"));
    assert_within(&rest("rules: [{methods: [FOO, DELETE], path: \"/x\"}]"), &p);
}

#[test]
fn s4_rules_are_ored_per_entry() {
    let p = rest("rules: [{methods: [GET], path: \"/a/**\"}, {methods: [POST], path: \"/b/**\"}]");
    assert!(allows_network(&p, &req("GET", "/a/x")));
    assert!(allows_network(&p, &req("POST", "/b/x")));
    // Methods and paths pair per entry (no cross product).
    assert!(!allows_network(&p, &req("POST", "/a/x")));
    assert!(!allows_network(&p, &req("GET", "/b/x")));
    assert_within(&get(&["/a/**"]), &p);
    assert_within(&rest("rules: [{methods: [POST], path: \"/b/x\"}]"), &p);
    let a = net_counterexample(&rest("rules: [{methods: [POST], path: \"/a/x\"}]"), &p);
    assert_eq!((a.method.as_str(), a.path.as_str()), ("POST", "/a/x"));
}

#[test]
fn s4_get_covers_head_in_allow_entries() {
    let p = get(&["/x"]);
    assert!(allows_network(&p, &req("GET", "/x")));
    assert!(allows_network(&p, &req("HEAD", "/x")));
    assert!(!allows_network(&p, &req("OPTIONS", "/x")));
    let head = rest("rules: [{methods: [HEAD], path: \"/x\"}]");
    assert!(
        !allows_network(&head, &req("GET", "/x")),
        "HEAD does not cover GET"
    );
    assert_within(&head, &p);
    let a = net_counterexample(&p, &head);
    assert_eq!(a.method, "GET");
}

#[test]
fn s4_get_covers_head_in_deny_entries() {
    let p = rest("access: full, denyRules: [{methods: [GET], path: \"**\"}]");
    assert!(!allows_network(&p, &req("GET", "/x")));
    assert!(
        !allows_network(&p, &req("HEAD", "/x")),
        "a GET deny also denies HEAD"
    );
    assert!(allows_network(&p, &req("POST", "/x")));
    let deny_head = rest("access: full, denyRules: [{methods: [HEAD], path: \"**\"}]");
    assert_within(&p, &deny_head);
    let a = net_counterexample(&deny_head, &p);
    assert_eq!(a.method, "GET");
}

#[test]
fn s4_endpoint_with_neither_access_nor_rules_allows_nothing() {
    let p = rest("denyRules: [{methods: [DELETE], path: \"**\"}]");
    for m in ["GET", "POST", "DELETE"] {
        assert!(!allows_network(&p, &req(m, "/x")), "{m}");
    }
    assert!(!allows_network(&p, &conn(API, 443)));
    let bare = rest("path: \"/repos/**\"");
    assert!(!allows_network(&bare, &req("GET", "/repos/x")));
    assert_within(&p, &empty());
    assert_within(&bare, &empty());
}

#[test]
fn s4_endpoint_without_allow_still_denies_with_its_deny_rules() {
    let p = sandbox(&format!(
        "network: [
           {{name: a, endpoints: [{{host: {API}, ports: [443], protocol: rest, access: full}}]}},
           {{name: b, endpoints: [{{host: {API}, ports: [443], protocol: rest,
                                    denyRules: [{{methods: [DELETE], path: \"**\"}}]}}]}}]"
    ));
    assert!(allows_network(&p, &req("GET", "/x")));
    assert!(!allows_network(&p, &req("DELETE", "/x")));
    let d = decide_network(&p, &req("DELETE", "/x"));
    assert!(!d.allow);
    assert_eq!(d.rule.as_deref(), Some("b"));
    let m = rest("access: full, denyRules: [{methods: [DELETE], path: \"**\"}]");
    assert_equivalent(&p, &m);
    let a = net_counterexample(&rest("access: full"), &p);
    assert_eq!(a.method, "DELETE");
}

#[test]
fn s4_deny_wins_across_rules() {
    let p = sandbox(&format!(
        "network: [
           {{name: a, endpoints: [{{host: {API}, ports: [443], protocol: rest,
                                    rules: [{{methods: [GET], path: \"/repos/**\"}}]}}]}},
           {{name: b, endpoints: [{{host: {API}, ports: [443], protocol: rest,
                                    rules: [{{methods: [POST], path: \"/other\"}}],
                                    denyRules: [{{methods: [GET], path: \"/repos/secret/**\"}}]}}]}}]"
    ));
    assert!(allows_network(&p, &req("GET", "/repos/x")));
    let d = decide_network(&p, &req("GET", "/repos/secret/key"));
    assert!(!d.allow, "a deny of rule b removes the allow of rule a");
    assert_eq!(d.rule.as_deref(), Some("b"));
    assert!(!allows_network(&p, &req("HEAD", "/repos/secret/key")));
    // Prover: the same as one endpoint with the deny.
    let same = rest(
        "rules: [{methods: [GET], path: \"/repos/**\"}, {methods: [POST], path: \"/other\"}],
         denyRules: [{methods: [GET], path: \"/repos/secret/**\"}]",
    );
    assert_equivalent(&p, &same);
    let a = net_counterexample(&get(&["/repos/**"]), &p);
    assert!(a.path.starts_with("/repos/secret/"), "{}", a.path);
}

#[test]
fn s4_deny_needs_the_same_binary() {
    let allow = rest("access: full");
    let p = sandbox(&format!(
        "network: [
           {{name: a, endpoints: [{{host: {API}, ports: [443], protocol: rest, access: full}}]}},
           {{name: b, binaries: [/usr/bin/curl], endpoints: [{{host: {API}, ports: [443], protocol: rest,
                                    denyRules: [{{methods: [\"*\"], path: \"**\"}}]}}]}}]"
    ));
    assert!(allows_network(&p, &req("GET", "/x")), "gh is not denied");
    assert!(!allows_network(&p, &by("/usr/bin/curl", req("GET", "/x"))));
    assert_within(&p, &allow);
    let a = net_counterexample(&allow, &p);
    assert_eq!(a.binary, "/usr/bin/curl");
}

#[test]
fn s4_deny_needs_the_same_host_and_port() {
    let allow = rest("access: full");
    let other_host = sandbox(&format!(
        "network: [
           {{name: a, endpoints: [{{host: {API}, ports: [443], protocol: rest, access: full}}]}},
           {{name: b, endpoints: [{{host: uploads.github.com, ports: [443], protocol: rest,
                                    denyRules: [{{methods: [\"*\"], path: \"**\"}}]}}]}}]"
    ));
    let other_port = sandbox(&format!(
        "network: [
           {{name: a, endpoints: [{{host: {API}, ports: [443], protocol: rest, access: full}}]}},
           {{name: b, endpoints: [{{host: {API}, ports: [8443], protocol: rest,
                                    denyRules: [{{methods: [\"*\"], path: \"**\"}}]}}]}}]"
    ));
    for p in [&other_host, &other_port] {
        assert!(allows_network(p, &req("DELETE", "/x")));
        assert_equivalent(p, &allow);
    }
}

#[test]
fn s4_deny_applies_only_to_layer_rest() {
    let p = sandbox(&format!(
        "network: [
           {{name: a, endpoints: [{{host: {API}, ports: [443]}}]}},
           {{name: b, endpoints: [{{host: {API}, ports: [443], protocol: rest,
                                    denyRules: [{{methods: [DELETE], path: \"**\"}}]}}]}}]"
    ));
    assert!(
        allows_network(&p, &conn(API, 443)),
        "an l4 action is never denied"
    );
    assert!(!allows_network(&p, &req("DELETE", "/x")));
    assert!(allows_network(&p, &req("GET", "/x")));
    let a = net_counterexample(&p, &rest("access: full"));
    assert_eq!(a.layer, Layer::L4);
    let a = net_counterexample(
        &sandbox(&format!(
            "network: [{{name: a, endpoints: [{{host: {API}, ports: [443]}}]}}]"
        )),
        &p,
    );
    assert_eq!((a.layer, a.method.as_str()), (Layer::Rest, "DELETE"));
}

#[test]
fn s4_deny_is_not_limited_by_the_endpoint_path_scope() {
    // denies_E has no `E.path` term: a deny entry of a scoped endpoint
    // applies to every path its own entry matches.
    let p = sandbox(&format!(
        "network: [{{name: r, endpoints: [
           {{host: {API}, ports: [443], protocol: rest, path: \"/repos/**\", access: full,
             denyRules: [{{methods: [DELETE], path: \"**\"}}]}},
           {{host: {API}, ports: [443], protocol: rest, access: full}}]}}]"
    ));
    assert!(!allows_network(&p, &req("DELETE", "/users/x")));
    assert!(allows_network(&p, &req("POST", "/users/x")));
    assert_equivalent(
        &p,
        &rest("access: full, denyRules: [{methods: [DELETE], path: \"**\"}]"),
    );
}

#[test]
fn s4_filesystem_entry_covers_itself_and_below_at_a_slash_boundary() {
    let p = sandbox("filesystem: {readOnly: [/usr, /app], readWrite: [/sandbox, /tmp]}");
    for path in [
        "/usr",
        "/usr/bin",
        "/usr/bin/gh",
        "/app/x",
        "/tmp",
        "/tmp/a/b",
    ] {
        assert!(allows_filesystem(&p, &read(path)), "read {path}");
    }
    for path in [
        "/usr-local",
        "/usrx",
        "/us",
        "/",
        "/application",
        "/etc/passwd",
        "/tmpfoo",
    ] {
        assert!(!allows_filesystem(&p, &read(path)), "read {path}");
    }
    let root = sandbox("filesystem: {readOnly: [/]}");
    assert!(allows_filesystem(&root, &read("/")));
    assert!(allows_filesystem(&root, &read("/any/thing")));
}

#[test]
fn s4_filesystem_usr_covers_usr_bin_not_usr_local_in_the_prover() {
    let usr = sandbox("filesystem: {readOnly: [/usr]}");
    assert_within(&sandbox("filesystem: {readOnly: [/usr/bin]}"), &usr);
    assert_within(&sandbox("filesystem: {readOnly: [/usr]}"), &usr);
    let a = fs_counterexample(&sandbox("filesystem: {readOnly: [/usr-local]}"), &usr);
    assert_eq!(a.access, Access::Read);
    assert!(
        a.path == "/usr-local" || a.path.starts_with("/usr-local/"),
        "{}",
        a.path
    );
    let a = fs_counterexample(&usr, &sandbox("filesystem: {readOnly: [/usr/bin]}"));
    assert!(a.path == "/usr" || (a.path.starts_with("/usr/") && !a.path.starts_with("/usr/bin")));
    assert_within(&usr, &sandbox("filesystem: {readOnly: [/]}"));
}

#[test]
fn s4_filesystem_write_only_under_read_write() {
    let p = sandbox("filesystem: {readOnly: [/usr], readWrite: [/tmp]}");
    assert!(allows_filesystem(&p, &write("/tmp")));
    assert!(allows_filesystem(&p, &write("/tmp/a/b")));
    assert!(!allows_filesystem(&p, &write("/usr")));
    assert!(!allows_filesystem(&p, &write("/usr/bin")));
    assert!(!allows_filesystem(&p, &write("/tmp-x")));
    let a = fs_counterexample(
        &sandbox("filesystem: {readWrite: [/tmp]}"),
        &sandbox("filesystem: {readOnly: [/tmp]}"),
    );
    assert_eq!(a.access, Access::Write);
    assert!(a.path == "/tmp" || a.path.starts_with("/tmp/"));
}

#[test]
fn s4_read_write_implies_read() {
    let p = sandbox("filesystem: {readWrite: [/sandbox]}");
    assert!(allows_filesystem(&p, &read("/sandbox")));
    assert!(allows_filesystem(&p, &read("/sandbox/x/y")));
    assert_within(&sandbox("filesystem: {readOnly: [/sandbox]}"), &p);
    assert_equivalent(
        &p,
        &sandbox("filesystem: {readOnly: [/sandbox], readWrite: [/sandbox]}"),
    );
}

// ---------------------------------------------------------------------------
// §2 Unsupported surfaces
// ---------------------------------------------------------------------------

const EP: &str = "host: api.github.com, ports: [443], protocol: rest";

#[test]
fn s2_unknown_fields_make_the_document_unsupported() {
    let cases = [
        ("{foo: 1, network: []}".to_string(), "foo"),
        (
            "filesystem: {readOnly: [/usr], writable: [/tmp]}".to_string(),
            "filesystem.writable",
        ),
        (
            format!("network: [{{name: r, bogus: 1, endpoints: [{{{EP}, access: full}}]}}]"),
            "network[0].bogus",
        ),
        (
            format!("network: [{{name: r, endpoints: [{{{EP}, access: full, hostname: x}}]}}]"),
            "network[0].endpoints[0].hostname",
        ),
        (
            format!(
                "network: [{{name: r, endpoints: [{{{EP}, rules: [{{methods: [GET], paths: [/x]}}]}}]}}]"
            ),
            "network[0].endpoints[0].rules[0].paths",
        ),
        (
            format!(
                "network: [{{name: r, endpoints: [{{{EP}, access: full, denyRules: [{{methods: [GET], headers: {{a: b}}}}]}}]}}]"
            ),
            "network[0].endpoints[0].denyRules[0].headers",
        ),
    ];
    for (yaml, field) in cases {
        for role in [Role::Sandbox, Role::Maximum] {
            assert_unsupported(&rejection(&yaml, role), field);
        }
    }
    let manifest = format!(
        "kind: AgentSandbox\nmetadata: {{name: s}}\nspec:\n  policy:\n    network: [{{name: r, endpoints: [{{{EP}, access: full, extra: 1}}]}}]\n"
    );
    assert_unsupported(
        &rejection(&manifest, Role::Sandbox),
        "spec.policy.network[0].endpoints[0].extra",
    );
}

#[test]
fn s2_query_belongs_to_entries_not_endpoints() {
    // An entry's `query` is part of the language (§10.1,
    // tests/tests/semantics_query.rs); beside an endpoint it is unknown.
    let in_endpoint =
        format!("network: [{{name: r, endpoints: [{{{EP}, access: full, query: {{a: b}}}}]}}]");
    assert_unsupported(
        &rejection(&in_endpoint, Role::Maximum),
        "network[0].endpoints[0].query",
    );
}

#[test]
fn s2_allowed_ips_is_unsupported() {
    let yaml = format!(
        "network: [{{name: r, endpoints: [{{{EP}, access: full, allowedIPs: [10.0.0.0/8]}}]}}]"
    );
    for role in [Role::Sandbox, Role::Maximum] {
        assert_unsupported(
            &rejection(&yaml, role),
            "network[0].endpoints[0].allowedIPs",
        );
    }
}

#[test]
fn s2_tls_is_unsupported() {
    let yaml =
        format!("network: [{{name: r, endpoints: [{{{EP}, access: full, tls: terminate}}]}}]");
    for role in [Role::Sandbox, Role::Maximum] {
        assert_unsupported(&rejection(&yaml, role), "network[0].endpoints[0].tls");
    }
}

#[test]
fn s2_reserved_and_unknown_protocols_are_unsupported() {
    // mcp and websocket are part of the language (§8, §10.2;
    // tests/tests/semantics_mcp.rs, tests/tests/semantics_websocket.rs).
    for protocol in ["graphql", "grpc", "http"] {
        let yaml = format!(
            "network: [{{name: r, endpoints: [{{host: {API}, ports: [443], protocol: {protocol}}}]}}]"
        );
        for role in [Role::Sandbox, Role::Maximum] {
            assert_unsupported(&rejection(&yaml, role), "network[0].endpoints[0].protocol");
        }
    }
    // The example candidate that uses graphql.
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/candidate-graphql.yaml"
    ))
    .unwrap();
    let reason = rejection(&text, Role::Sandbox);
    assert_eq!(reason.code, ReasonCode::UnsupportedPolicyShape, "{reason}");
    assert!(
        reason.field.as_deref().unwrap_or("").ends_with(".protocol"),
        "{reason}"
    );
}

#[test]
fn s2_l7_fields_on_an_l4_endpoint_are_not_silently_ignored() {
    for (extra, field) in [
        ("path: \"/x\"", "path"),
        ("access: full", "access"),
        ("rules: [{methods: [GET]}]", "rules"),
        ("denyRules: [{methods: [DELETE]}]", "denyRules"),
    ] {
        let yaml =
            format!("network: [{{name: r, endpoints: [{{host: {API}, ports: [443], {extra}}}]}}]");
        assert_unsupported(
            &rejection(&yaml, Role::Sandbox),
            &format!("network[0].endpoints[0].{field}"),
        );
    }
}

#[test]
fn s2_document_shape_rules() {
    // Unique rule names.
    let dup = format!(
        "network: [{{name: r, endpoints: [{{host: {API}, port: 443}}]}}, {{name: r, endpoints: [{{host: {API}, port: 22}}]}}]"
    );
    assert_unsupported(&rejection(&dup, Role::Sandbox), "network[1].name");
    // access and rules are exclusive.
    let both = format!(
        "network: [{{name: r, endpoints: [{{{EP}, access: full, rules: [{{methods: [GET]}}]}}]}}]"
    );
    assert_unsupported(
        &rejection(&both, Role::Sandbox),
        "network[0].endpoints[0].rules",
    );
    // ports must be non-empty; `port` is shorthand.
    let none = format!("network: [{{name: r, endpoints: [{{host: {API}}}]}}]");
    assert_eq!(
        rejection(&none, Role::Sandbox).code,
        ReasonCode::UnsupportedPolicyShape
    );
    let shorthand = sandbox(&format!(
        "network: [{{name: r, endpoints: [{{host: {API}, port: 443}}]}}]"
    ));
    let list = sandbox(&format!(
        "network: [{{name: r, endpoints: [{{host: {API}, ports: [443]}}]}}]"
    ));
    assert_eq!(shorthand, list);
    // review markers belong in a MaximumPolicy only.
    let review = format!(
        "network: [{{name: r, endpoints: [{{{EP}, access: full, review: {{required: true}}}}]}}]"
    );
    assert_unsupported(
        &rejection(&review, Role::Sandbox),
        "network[0].endpoints[0].review",
    );
    assert!(accepted(&review, Role::Maximum));
}

// ---------------------------------------------------------------------------
// §5 Questions the prover answers
// ---------------------------------------------------------------------------

#[test]
fn s5_reason_codes_map_to_unsupported_or_inconclusive() {
    for code in [ReasonCode::UnsupportedPolicyShape, ReasonCode::InvalidGlob] {
        let o = Outcome::from_reason(Reason::general(code, "x"));
        assert_eq!(o.name(), "unsupported", "{code}");
    }
    for code in [
        ReasonCode::SolverTimeout,
        ReasonCode::SolverUnknown,
        ReasonCode::ResourceLimit,
        ReasonCode::InvalidWitness,
    ] {
        let o = Outcome::from_reason(Reason::general(code, "x"));
        assert_eq!(o.name(), "inconclusive", "{code}");
    }
    let names: Vec<&str> = [
        ReasonCode::UnsupportedPolicyShape,
        ReasonCode::InvalidGlob,
        ReasonCode::SolverTimeout,
        ReasonCode::SolverUnknown,
        ReasonCode::ResourceLimit,
        ReasonCode::InvalidWitness,
    ]
    .iter()
    .map(|c| c.as_str())
    .collect();
    assert_eq!(
        names,
        [
            "unsupported_policy_shape",
            "invalid_glob",
            "solver_timeout",
            "solver_unknown",
            "resource_limit",
            "invalid_witness"
        ]
    );
}

const EXAMPLE_MAXIMUM: &str = "
network:
  - name: github
    binaries: [/usr/bin/gh, /usr/bin/git]
    endpoints:
      - host: api.github.com
        ports: [443]
        protocol: rest
        rules:
          - methods: [GET]
            path: /repos/acme/**
          - methods: [POST, PATCH]
            path: /repos/acme/*/issues/**
        denyRules:
          - methods: [DELETE]
            path: \"**\"
filesystem:
  readOnly: [/usr]
  readWrite: [/tmp]
";

#[test]
fn s5_containment_within_when_no_action_separates() {
    let m = maximum(EXAMPLE_MAXIMUM);
    let c = sandbox(
        "
network:
  - name: comment
    binaries: [/usr/bin/gh]
    endpoints:
      - host: api.github.com
        port: 443
        protocol: rest
        rules:
          - methods: [POST]
            path: /repos/acme/*/issues/*/comments
          - methods: [GET]
            path: /repos/acme/widgets/**
filesystem:
  readOnly: [/usr/lib]
  readWrite: [/tmp/work]
",
    );
    assert_within(&c, &m);
    assert_within(&m, &m);
    assert_within(&empty(), &m);
}

#[test]
fn s5_containment_exceeds_with_a_replayed_counterexample() {
    let m = maximum(EXAMPLE_MAXIMUM);
    let cases = [
        // A method the maximum never grants.
        "network: [{name: c, binaries: [/usr/bin/gh], endpoints: [{host: api.github.com, ports: [443], protocol: rest, rules: [{methods: [PUT], path: /repos/acme/x}]}]}]",
        // A binary outside the maximum.
        "network: [{name: c, binaries: [/usr/bin/curl], endpoints: [{host: api.github.com, ports: [443], protocol: rest, rules: [{methods: [GET], path: /repos/acme/x}]}]}]",
        // Any binary.
        "network: [{name: c, endpoints: [{host: api.github.com, ports: [443], protocol: rest, rules: [{methods: [GET], path: /repos/acme/x}]}]}]",
        // A path outside the maximum.
        "network: [{name: c, binaries: [/usr/bin/gh], endpoints: [{host: api.github.com, ports: [443], protocol: rest, rules: [{methods: [GET], path: \"/repos/*/x\"}]}]}]",
        // DELETE is denied by the maximum even though the candidate asks for it.
        "network: [{name: c, binaries: [/usr/bin/gh], endpoints: [{host: api.github.com, ports: [443], protocol: rest, rules: [{methods: [DELETE], path: /repos/acme/x}]}]}]",
        // Raw L4.
        "network: [{name: c, binaries: [/usr/bin/gh], endpoints: [{host: api.github.com, ports: [443]}]}]",
    ];
    for yaml in cases {
        let c = sandbox(yaml);
        let proof = prover().containment(&c, &m);
        assert_eq!(proof.outcome.name(), "exceeds", "{yaml}");
        // counterexample() replays through the matcher and checks canonicality.
        counterexample(&c, &m);
    }
}

#[test]
fn s5_containment_covers_filesystem_actions() {
    let m = maximum(EXAMPLE_MAXIMUM);
    let c = sandbox("filesystem: {readWrite: [/usr/local]}");
    let a = fs_counterexample(&c, &m);
    assert_eq!(a.access, Access::Write);
    assert!(
        a.path == "/usr/local" || a.path.starts_with("/usr/local/"),
        "{}",
        a.path
    );
    let c = sandbox("filesystem: {readOnly: [/etc]}");
    let a = fs_counterexample(&c, &m);
    assert!(a.path == "/etc" || a.path.starts_with("/etc/"));
}

#[test]
fn s5_new_authority_returns_up_to_k_distinct_examples() {
    let current = get(&["/a"]);
    let candidate = sandbox(&format!(
        "filesystem: {{readOnly: [/usr], readWrite: [/tmp]}}\nnetwork: [
           {{name: r, endpoints: [{{host: {API}, ports: [443], protocol: rest,
               rules: [{{methods: [GET], path: /a}}, {{methods: [POST], path: \"/b/*\"}}]}}]}},
           {{name: ssh, endpoints: [{{host: ssh.github.com, ports: [22]}}]}}]"
    ));
    let check = |examples: &[Action]| {
        let distinct: HashSet<&Action> = examples.iter().collect();
        assert_eq!(
            distinct.len(),
            examples.len(),
            "examples repeat: {examples:?}"
        );
        for a in examples {
            a.check_canonical().unwrap();
            assert!(allows_action(&candidate, a), "candidate does not allow {a}");
            assert!(!allows_action(&current, a), "current already allows {a}");
        }
    };
    for k in [1, 2, 3] {
        let na = prover().new_authority(&candidate, &current, k);
        assert!(na.incomplete.is_none(), "{:?}", na.incomplete);
        assert_eq!(na.examples.len(), k);
        check(&na.examples);
    }
    // Asking for many: all of them, network and filesystem, none repeated.
    let na = prover().new_authority(&candidate, &current, 1000);
    assert!(na.incomplete.is_none());
    assert!(na.examples.len() >= 4 && na.examples.len() < 1000);
    check(&na.examples);
    assert!(
        na.examples
            .iter()
            .any(|a| matches!(a, Action::Filesystem(f) if f.access == Access::Write))
    );
    assert!(
        na.examples
            .iter()
            .any(|a| matches!(a, Action::Filesystem(f) if f.access == Access::Read))
    );
    assert!(
        na.examples
            .iter()
            .any(|a| matches!(a, Action::Network(n) if n.layer == Layer::L4))
    );
    assert!(
        na.examples
            .iter()
            .any(|a| matches!(a, Action::Network(n) if n.method == "POST"))
    );
    // No new authority: no examples, complete.
    let na = prover().new_authority(&current, &candidate, 3);
    assert!(na.examples.is_empty() && na.incomplete.is_none());
}

#[test]
fn s5_new_authority_within_a_ceiling() {
    let current = get(&["/a"]);
    let ceiling = get(&["/a", "/b/**"]);
    let inside = get(&["/a", "/b/x"]);
    let p = prover();
    assert_eq!(
        p.new_authority_within(&inside, &current, &ceiling).outcome,
        Outcome::Within
    );
    let outside = get(&["/a", "/c"]);
    let proof = p.new_authority_within(&outside, &current, &ceiling);
    let Outcome::Exceeds {
        counterexample: Action::Network(a),
    } = proof.outcome
    else {
        panic!("expected Exceeds, got {:?}", proof.outcome);
    };
    assert_eq!(a.path, "/c");
    assert!(
        allows_network(&outside, &a)
            && !allows_network(&current, &a)
            && !allows_network(&ceiling, &a)
    );
}

fn region(r: Region) -> agentgate_policy::compile::CompiledRegion {
    compile_region(&r, "match").unwrap()
}

#[test]
fn s5_intersection_with_a_region() {
    let metadata = region(Region {
        hosts: Some(vec![
            "metadata.google.internal".into(),
            "169.254.169.254".into(),
        ]),
        ..Default::default()
    });
    let c = sandbox("network: [{name: meta, endpoints: [{host: 169.254.169.254, ports: [80]}]}]");
    let proof = prover().intersection(&c, &metadata);
    let Outcome::Exceeds {
        counterexample: Action::Network(a),
    } = proof.outcome
    else {
        panic!("expected Exceeds, got {:?}", proof.outcome);
    };
    a.check_canonical().unwrap();
    assert_eq!((a.host.as_str(), a.port), ("169.254.169.254", 80));
    assert!(region_contains(&metadata, &a) && allows_network(&c, &a));
    assert_eq!(
        prover()
            .intersection(&rest("access: full"), &metadata)
            .outcome,
        Outcome::Within
    );

    // A method region: read-only is disjoint from DELETE, full is not.
    let deletes = region(Region {
        hosts: Some(vec![API.into()]),
        methods: Some(vec!["DELETE".into()]),
        ..Default::default()
    });
    assert_eq!(
        prover()
            .intersection(&rest("access: read-only"), &deletes)
            .outcome,
        Outcome::Within
    );
    for c in [
        rest("access: full"),
        sandbox(&format!(
            "network: [{{name: r, endpoints: [{{host: {API}, ports: [443]}}]}}]"
        )),
    ] {
        let proof = prover().intersection(&c, &deletes);
        let Outcome::Exceeds {
            counterexample: Action::Network(a),
        } = proof.outcome
        else {
            panic!("expected Exceeds, got {:?}", proof.outcome);
        };
        assert_eq!((a.layer, a.method.as_str()), (Layer::Rest, "DELETE"));
        assert!(region_contains(&deletes, &a) && allows_network(&c, &a));
    }
    // A method region never contains an l4 action.
    assert!(!region_contains(&deletes, &conn(API, 443)));
    // A layer region: REST-only grants are disjoint from l4.
    let raw = region(Region {
        layers: Some(vec![Layer::L4]),
        ..Default::default()
    });
    assert_eq!(
        prover().intersection(&rest("access: full"), &raw).outcome,
        Outcome::Within
    );
    assert_eq!(
        prover()
            .intersection(&sandbox("filesystem: {readWrite: [/]}"), &raw)
            .outcome,
        Outcome::Within,
        "regions hold network actions only"
    );
}

#[test]
fn s5_several_maximums_candidate_must_be_within_each() {
    let load = |yaml: &str| load_document(yaml, &Limits::default()).unwrap().policy;
    let m1 = maximum(&format!(
        "network: [{{name: all, endpoints: [{{host: {API}, ports: [443], protocol: rest, access: full}}]}}]"
    ));
    let m2 = maximum(&format!(
        "network: [{{name: other, endpoints: [{{host: {API}, ports: [443], protocol: rest, rules: [{{methods: [GET], path: \"/repos/other/**\"}}]}}]}}]"
    ));
    let candidate_text = format!(
        "network: [{{name: c, endpoints: [{{host: {API}, ports: [443], protocol: rest, rules: [{{methods: [GET], path: \"/repos/acme/**\"}}]}}]}}]"
    );
    let (c_doc, c) = (load(&candidate_text), sandbox(&candidate_text));
    let (p_doc, p) = (PolicyDocument::default(), empty());
    assert_within(&c, &m1);
    let a = net_counterexample(&c, &m2);
    assert!(a.path.starts_with("/repos/acme/"));

    let run = |maximums: &[GoverningMaximum<'_>]| {
        reach_verdict(
            &VerdictInput {
                maximums,
                current: (&p_doc, &p),
                candidate: (&c_doc, &c),
                added: &c,
                requester: Requester::Agent,
                mode: Mode::Ask,
                allow_unmanaged: false,
            },
            &prover(),
        )
    };
    let gm = |name, policy| GoverningMaximum {
        name,
        policy,
        invariants: &[],
        budget: None,
        four_eyes: false,
    };
    let v = run(&[gm("m1", &m1), gm("m2", &m2)]);
    assert_eq!((v.decision, v.step), (Decision::Reject, Step::Containment));
    assert_eq!(v.maximum.as_deref(), Some("m2"));
    let Some(Action::Network(a)) = &v.counterexample else {
        panic!("no counterexample: {v:?}");
    };
    assert!(allows_network(&c, a) && allows_network(&m1, a) && !allows_network(&m2, a));
    let v = run(&[gm("m2", &m2), gm("m1", &m1)]);
    assert_eq!(v.maximum.as_deref(), Some("m2"));
    let v = run(&[gm("m1", &m1), gm("m1-again", &m1)]);
    assert_ne!(v.decision, Decision::Reject, "{v:?}");
}

#[test]
fn s5_counterexamples_use_policy_literals_and_x_fillers() {
    let c = sandbox(
        "network: [{name: gh, binaries: [\"/usr/bin/*\"], endpoints: [{host: \"*.github.com\", ports: [443], protocol: rest,
           rules: [{methods: [POST], path: \"/repos/*/issues\"}]}]}]",
    );
    let a = net_counterexample(&c, &empty());
    assert_eq!(a.binary, "/usr/bin/x");
    assert_eq!(a.host, "x.github.com");
    assert_eq!(a.port, 443);
    assert_eq!(a.layer, Layer::Rest);
    assert_eq!(a.method, "POST");
    assert_eq!(a.path, "/repos/x/issues");
    assert_eq!(
        a.to_string(),
        "POST https://x.github.com:443/repos/x/issues by /usr/bin/x (layer rest)"
    );
}

#[test]
fn s5_counterexamples_are_canonical_and_read_naturally() {
    let m = maximum(EXAMPLE_MAXIMUM);
    let cases = [
        rest("access: full"),
        rest("path: \"/repos/**\", access: read-write"),
        get(&["/repos/*/x", "/a/**/b", "/**"]),
        sandbox(
            "network: [{name: c, binaries: [\"/usr/**\"], endpoints: [{host: \"**.github.com\", ports: [443, 8443]}]}]",
        ),
        sandbox(
            "network: [{name: c, binaries: [/usr/bin/gh], endpoints: [{host: \"api*.github.com\", ports: [443], protocol: rest, access: full}]}]",
        ),
    ];
    for c in &cases {
        for a in prover().new_authority(c, &m, 10).examples {
            a.check_canonical().unwrap();
            let Action::Network(a) = a else { continue };
            assert!(readable(&a.binary, "/._-"), "binary {}", a.binary);
            assert!(readable(&a.host, ".-_"), "host {}", a.host);
            if a.layer == Layer::Rest {
                assert!(
                    [
                        "GET", "HEAD", "OPTIONS", "POST", "PUT", "PATCH", "DELETE", "TRACE",
                        "CONNECT"
                    ]
                    .contains(&a.method.as_str()),
                    "method {}",
                    a.method
                );
                assert!(readable(&a.path, "/._-~"), "path {}", a.path);
            }
        }
    }
}

#[test]
fn s5_counterexample_for_any_binary_is_a_natural_executable_path() {
    // Wildcard positions take short fillers such as x: a rule without
    // binaries should produce an executable path like /x, not the root "/".
    let a = net_counterexample(&get(&["/repos"]), &get(&["/repos/**"]));
    assert!(
        a.binary.len() > 1 && a.binary.starts_with('/'),
        "binary {:?} is not a natural executable path",
        a.binary
    );
}

#[test]

fn s1_prover_respects_host_label_length_limit() {
    // No canonical label starts with `a` and ends with 63 `b`s (that needs
    // 64 characters), so the candidate and the region are disjoint. The
    // prover constrains symbolic actions to canonical form (§1), so the
    // answer is Within, not a non-canonical witness.
    let tail = "b".repeat(63);
    let c = l4_host("a*.example.com", Role::Sandbox);
    let r = region(Region {
        hosts: Some(vec![format!("*{tail}.example.com")]),
        ..Default::default()
    });
    let proof = prover().intersection(&c, &r);
    assert_eq!(proof.outcome, Outcome::Within, "{:?}", proof.outcome);
}

#[test]

fn s1_prover_respects_host_total_length_limit() {
    // Five labels of 60 characters: every label is valid, but the name is
    // longer than 253 bytes, so no canonical host matches and the grant is
    // empty: it is within anything.
    let long = format!("{}.com", vec!["a".repeat(60); 5].join("."));
    assert!(long.len() > 253);
    let c = l4_host(&long, Role::Sandbox);
    let proof = prover().containment(&c, &empty());
    assert_eq!(proof.outcome, Outcome::Within, "{:?}", proof.outcome);
}

#[test]

fn s1_prover_respects_request_path_length_limit() {
    // A single segment starting with 4094 `a`s and ending with 4094 `b`s
    // is longer than 4096 bytes: no canonical path matches both globs.
    let a = format!("/{}*", "a".repeat(4094));
    let b = format!("/*{}", "b".repeat(4094));
    // The automata are large (patterns of 4 KiB): give the checks time.
    let patient = Prover::new(ProverOptions {
        timeout: Duration::from_secs(300),
        ..ProverOptions::default()
    });
    // Intersection with a region.
    let c = get(&[&a]);
    let r = region(Region {
        paths: Some(vec![b.clone()]),
        ..Default::default()
    });
    let proof = patient.intersection(&c, &r);
    assert_eq!(proof.outcome, Outcome::Within, "{:?}", proof.outcome);
    // Containment: the maximum's deny removes only non-canonical paths.
    let m = rest(&format!(
        "rules: [{{methods: [GET], path: \"{a}\"}}], denyRules: [{{methods: [GET], path: \"{b}\"}}]"
    ));
    let proof = patient.containment(&c, &m);
    assert_eq!(proof.outcome, Outcome::Within, "{:?}", proof.outcome);
}

#[test]
fn s5_solver_timeout_is_inconclusive_never_within() {
    let tiny = Prover::new(ProverOptions {
        timeout: Duration::from_nanos(1),
        cache_entries: 0,
        ..ProverOptions::default()
    });
    let m = maximum(EXAMPLE_MAXIMUM);
    for (c, m) in [(&m, &m), (&rest("access: full"), &m)] {
        let proof = tiny.containment(c, m);
        let Outcome::Inconclusive { reason } = &proof.outcome else {
            panic!("expected Inconclusive, got {:?}", proof.outcome);
        };
        assert_eq!(reason.code, ReasonCode::SolverTimeout, "{reason}");
    }
    let na = tiny.new_authority(&rest("access: full"), &empty(), 3);
    assert_eq!(
        na.incomplete.map(|r| r.code),
        Some(ReasonCode::SolverTimeout)
    );
    let proof = tiny.intersection(&rest("access: full"), &region(Region::default()));
    assert_eq!(
        proof.outcome.reason().map(|r| r.code),
        Some(ReasonCode::SolverTimeout)
    );
    // Short but non-zero deadlines: an Exceeds case is never reported Within.
    let c = rest("access: full");
    for nanos in [1_000, 100_000, 1_000_000, 10_000_000, 1_000_000_000] {
        let p = Prover::new(ProverOptions {
            timeout: Duration::from_nanos(nanos),
            cache_entries: 0,
            ..ProverOptions::default()
        });
        match p.containment(&c, &m).outcome {
            Outcome::Exceeds { counterexample } => {
                assert!(allows_action(&c, &counterexample) && !allows_action(&m, &counterexample));
            }
            Outcome::Inconclusive { reason } => {
                assert_eq!(reason.code, ReasonCode::SolverTimeout, "{reason}")
            }
            other => panic!("timeout {nanos}ns gave {other:?}"),
        }
    }
}

// ---------------------------------------------------------------------------
// §6 Limits
// ---------------------------------------------------------------------------

#[test]
fn s6_default_limits() {
    let l = Limits::default();
    assert_eq!(
        (
            l.rules,
            l.endpoints,
            l.binary_globs,
            l.entries,
            l.input_bytes
        ),
        (1024, 4096, 4096, 16_384, 4 * 1024 * 1024)
    );
}

#[test]
fn s6_limits_fail_closed_with_resource_limit() {
    let small = Limits {
        rules: 1,
        endpoints: 1,
        binary_globs: 1,
        entries: 1,
        input_bytes: 4096,
        pattern_bytes: 64,
    };
    let two_rules = format!(
        "network: [{{name: a, endpoints: [{{host: {API}, port: 443}}]}}, {{name: b, endpoints: [{{host: {API}, port: 22}}]}}]"
    );
    let two_endpoints = format!(
        "network: [{{name: a, endpoints: [{{host: {API}, port: 443}}, {{host: {API}, port: 22}}]}}]"
    );
    let two_binaries = format!(
        "network: [{{name: a, binaries: [/a, /b], endpoints: [{{host: {API}, port: 443}}]}}]"
    );
    let two_entries = format!(
        "network: [{{name: a, endpoints: [{{{EP}, rules: [{{methods: [GET], path: /a}}], denyRules: [{{methods: [GET], path: /b}}]}}]}}]"
    );
    for yaml in [&two_rules, &two_endpoints, &two_binaries, &two_entries] {
        let reason = rejection_with(yaml, Role::Sandbox, &small);
        assert_eq!(reason.code, ReasonCode::ResourceLimit, "{reason}");
        assert!(matches!(
            Outcome::from_reason(reason),
            Outcome::Inconclusive { .. }
        ));
        assert!(accepted(yaml, Role::Sandbox), "fine with default limits");
    }
    let tiny_input = Limits {
        input_bytes: 10,
        ..Limits::default()
    };
    let reason = rejection_with(&two_rules, Role::Sandbox, &tiny_input);
    assert_eq!(reason.code, ReasonCode::ResourceLimit, "{reason}");
}

#[test]
fn s6_default_rule_limit_is_1024() {
    let rules = |n: usize| {
        let list: Vec<String> = (0..n)
            .map(|i| format!("{{name: r{i}, endpoints: [{{host: {API}, port: 443}}]}}"))
            .collect();
        format!("network: [{}]", list.join(", "))
    };
    assert!(accepted(&rules(1024), Role::Sandbox));
    let reason = rejection(&rules(1025), Role::Sandbox);
    assert_reason(&reason, ReasonCode::ResourceLimit, "network");
}

#[test]

fn s6_pattern_longer_than_4_kib_is_resource_limit() {
    let ok = format!("/{}", "a".repeat(4095));
    let long = format!("/{}", "a".repeat(4096));
    assert!(accepted(
        &format!(
            "network: [{{name: r, endpoints: [{{{EP}, rules: [{{methods: [GET], path: \"{ok}\"}}]}}]}}]"
        ),
        Role::Sandbox
    ));
    let reason = rejection(
        &format!(
            "network: [{{name: r, endpoints: [{{{EP}, rules: [{{methods: [GET], path: \"{long}\"}}]}}]}}]"
        ),
        Role::Sandbox,
    );
    assert_reason(
        &reason,
        ReasonCode::ResourceLimit,
        "network[0].endpoints[0].rules[0].path",
    );
}

#[test]
fn s6_prover_state_limit_is_resource_limit() {
    let p = Prover::new(ProverOptions {
        max_states: 3,
        cache_entries: 0,
        ..ProverOptions::default()
    });
    let m = maximum(EXAMPLE_MAXIMUM);
    let proof = p.containment(&rest("access: full"), &m);
    let Outcome::Inconclusive { reason } = &proof.outcome else {
        panic!("expected Inconclusive, got {:?}", proof.outcome);
    };
    assert_eq!(reason.code, ReasonCode::ResourceLimit, "{reason}");
}

#[test]
fn s2_unknown_field_in_an_invariant_region_is_unsupported_with_its_field_path() {
    let manifest = "kind: MaximumPolicy\nmetadata: {name: m}\nspec:\n  invariants:\n    - name: i\n      match: {hosts: [a.example.com], query: x}\n";
    assert_unsupported(
        &rejection(manifest, Role::Maximum),
        "spec.invariants[0].match.query",
    );
}

#[test]

fn s2_unknown_manifest_spec_fields_are_not_silently_ignored() {
    // A misspelled `invariants` would silently drop every invariant.
    let manifest = format!(
        "kind: MaximumPolicy\nmetadata: {{name: m}}\nspec:\n  policy:\n    network: [{{name: r, endpoints: [{{host: {API}, port: 443}}]}}]\n  invariant:\n    - name: i\n      match: {{hosts: [metadata.google.internal]}}\n"
    );
    assert_unsupported(&rejection(&manifest, Role::Maximum), "spec.invariant");
    // A misspelled `policy` would silently be the empty policy.
    let manifest = format!(
        "kind: AgentSandbox\nmetadata: {{name: s}}\nspec:\n  polcy:\n    network: [{{name: r, endpoints: [{{host: {API}, port: 443}}]}}]\n"
    );
    assert_unsupported(&rejection(&manifest, Role::Sandbox), "spec.polcy");
}

#[test]
fn s5_witness_that_fails_replay_is_inconclusive_invalid_witness_never_exceeds() {
    // Whatever the prover does with values outside the canonical form, it
    // must fail closed: Within (correct) or Inconclusive(invalid_witness),
    // never Exceeds with a non-canonical action.
    let tail = "b".repeat(63);
    let c = l4_host("a*.example.com", Role::Sandbox);
    let r = region(Region {
        hosts: Some(vec![format!("*{tail}.example.com")]),
        ..Default::default()
    });
    match prover().intersection(&c, &r).outcome {
        Outcome::Within => {}
        Outcome::Inconclusive { reason } => {
            assert_eq!(reason.code, ReasonCode::InvalidWitness, "{reason}")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn s5_invariant_regions_of_a_maximum_policy() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/maximum.yaml"
    ))
    .unwrap();
    let limits = Limits::default();
    let doc = load_document(&text, &limits)
        .unwrap()
        .compile(Role::Maximum, &limits)
        .unwrap();
    let inv = doc
        .invariants
        .iter()
        .find(|i| i.name == "no-cloud-metadata")
        .expect("example invariant");
    let c = sandbox(
        "network: [{name: meta, binaries: [/usr/bin/curl], endpoints: [{host: metadata.google.internal, ports: [80], protocol: rest, access: read-only}]}]",
    );
    let proof = prover().intersection(&c, &inv.region);
    let Outcome::Exceeds {
        counterexample: Action::Network(a),
    } = proof.outcome
    else {
        panic!("expected Exceeds, got {:?}", proof.outcome);
    };
    a.check_canonical().unwrap();
    assert_eq!(a.host, "metadata.google.internal");
    assert!(region_contains(&inv.region, &a) && allows_network(&c, &a));
    // The maximum's own policy does not intersect its invariant.
    assert_eq!(
        prover().intersection(&doc.policy, &inv.region).outcome,
        Outcome::Within
    );
}
