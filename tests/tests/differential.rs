//! Differential property tests: the prover (Z3 over signature automata)
//! against the runtime matcher (segment-by-segment glob matching), on random
//! policies over a small alphabet. The action space below is small enough to
//! enumerate completely, so "Within" is checked against every action in it,
//! not a sample.
//!
//! Case counts are stated in docs/proofs.md; change both together.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::OnceLock;

use agentgate::policy::action::{Access, Action, FilesystemAction, Layer, NetworkAction};
use agentgate::policy::compile::{
    CompiledPolicy, CompiledRegion, Limits, Role, compile, compile_region,
};
use agentgate::policy::matcher::{allows, region_contains};
use agentgate::policy::model::{
    AccessLevel, Endpoint, Filesystem, NetworkRule, PolicyDocument, Protocol, Region, RuleEntry,
};
use agentgate::prover::{Outcome, Prover, ProverOptions};
use agentgate::webhook::decide::{DecideRequest, decide_action};
use proptest::prelude::*;
use proptest::sample::{select, subsequence};

const BINARY_GLOBS: &[&str] = &[
    "/usr/bin/gh",
    "/usr/bin/*",
    "/usr/**",
    "/opt/x",
    "/*/bin/gh",
];
const HOST_GLOBS: &[&str] = &[
    "a.io", "*.a.io", "**.a.io", "b.a.io", "x*.a.io", "c.b.a.io", "**",
];
const PATH_GLOBS: &[&str] = &[
    "/a", "/a/*", "/a/**", "/a/*/b", "/**/b", "/a/", "**", "/b*", "/a/**/b", "/*",
];
const METHODS: &[&str] = &["GET", "POST", "DELETE", "*", "HEAD"];
const FS_PATHS: &[&str] = &["/a", "/a/b", "/b", "/", "/a/bc"];
const PORTS: &[u16] = &[443, 80];

const BINARIES: &[&str] = &[
    "/usr/bin/gh",
    "/usr/bin/x",
    "/usr/lib/y/gh",
    "/opt/x",
    "/x",
    "/opt/bin/gh",
];
const HOSTS: &[&str] = &[
    "a.io",
    "b.a.io",
    "x.a.io",
    "xy.a.io",
    "c.b.a.io",
    "d.c.b.a.io",
    "b.io",
];
const ACTION_PORTS: &[u16] = &[443, 80, 22];
const ACTION_METHODS: &[&str] = &["GET", "HEAD", "POST", "DELETE", "PUT", "OPTIONS"];
const PATHS: &[&str] = &[
    "/", "/a", "/a/", "/a/x", "/a/x/", "/a/x/b", "/a/b", "/b", "/bx", "/x/b", "/a/x/y/b", "/a/b/b",
];
const FILES: &[&str] = &[
    "/", "/a", "/a/b", "/a/bc", "/a/b/c", "/ab", "/b", "/b/x", "/c",
];

/// Every network and filesystem action of the small alphabet.
fn universe() -> &'static [Action] {
    static ACTIONS: OnceLock<Vec<Action>> = OnceLock::new();
    ACTIONS.get_or_init(|| {
        let mut out = Vec::new();
        for b in BINARIES {
            for h in HOSTS {
                for &port in ACTION_PORTS {
                    out.push(Action::Network(NetworkAction {
                        binary: b.to_string(),
                        host: h.to_string(),
                        port,
                        layer: Layer::L4,
                        method: String::new(),
                        path: String::new(),
                    }));
                    for m in ACTION_METHODS {
                        for p in PATHS {
                            out.push(Action::Network(NetworkAction {
                                binary: b.to_string(),
                                host: h.to_string(),
                                port,
                                layer: Layer::Rest,
                                method: m.to_string(),
                                path: p.to_string(),
                            }));
                        }
                    }
                }
            }
        }
        for access in [Access::Read, Access::Write] {
            for f in FILES {
                out.push(Action::Filesystem(FilesystemAction {
                    access,
                    path: f.to_string(),
                }));
            }
        }
        out
    })
}

fn prover() -> Prover {
    // No cache: every case is a real proof.
    Prover::new(ProverOptions {
        cache_entries: 0,
        ..ProverOptions::default()
    })
}

fn strings(pool: &'static [&'static str], max: usize) -> impl Strategy<Value = Vec<String>> {
    subsequence(pool, 0..=max).prop_map(|v| v.into_iter().map(str::to_string).collect())
}

fn entry() -> impl Strategy<Value = RuleEntry> {
    (
        subsequence(METHODS, 1..=2),
        proptest::option::weighted(0.8, select(PATH_GLOBS)),
    )
        .prop_map(|(methods, path)| RuleEntry {
            methods: methods.into_iter().map(str::to_string).collect(),
            path: path.map(str::to_string),
        })
}

fn endpoint() -> impl Strategy<Value = Endpoint> {
    (
        select(HOST_GLOBS),
        subsequence(PORTS, 1..=2),
        0u8..6,
        proptest::option::weighted(0.2, select(PATH_GLOBS)),
        proptest::collection::vec(entry(), 1..=2),
        proptest::collection::vec(entry(), 0..=1),
    )
        .prop_map(|(host, ports, shape, scope, rules, deny_rules)| {
            let mut e = Endpoint {
                host: host.to_string(),
                ports: ports.to_vec(),
                ..Default::default()
            };
            if shape == 0 {
                return e; // l4
            }
            e.protocol = Protocol::Rest;
            e.path = scope.map(str::to_string);
            e.deny_rules = deny_rules;
            match shape {
                1 => e.access = Some(AccessLevel::ReadOnly),
                2 => e.access = Some(AccessLevel::ReadWrite),
                3 => e.access = Some(AccessLevel::Full),
                _ => e.rules = rules,
            }
            e
        })
}

fn document() -> impl Strategy<Value = PolicyDocument> {
    (
        proptest::collection::vec(
            (
                strings(BINARY_GLOBS, 2),
                proptest::collection::vec(endpoint(), 1..=2),
            ),
            0..=3,
        ),
        strings(FS_PATHS, 2),
        strings(FS_PATHS, 2),
    )
        .prop_map(|(rules, read_only, read_write)| PolicyDocument {
            filesystem: Filesystem {
                read_only,
                read_write,
            },
            network: rules
                .into_iter()
                .enumerate()
                .map(|(i, (binaries, endpoints))| NetworkRule {
                    name: format!("r{i}"),
                    binaries,
                    endpoints,
                    review: None,
                })
                .collect(),
        })
}

/// Pairs (C, M): independent; M = C plus allow-only rules (so C ⊆ M); or M = C
/// with one rule replaced (often a near miss).
fn pair() -> impl Strategy<Value = (PolicyDocument, PolicyDocument, bool)> {
    (document(), document(), 0u8..3).prop_map(|(c, other, how)| match how {
        0 => (c, other, false),
        1 => {
            let mut m = c.clone();
            for (i, mut r) in other.network.into_iter().enumerate() {
                r.name = format!("extra{i}");
                // A deny anywhere in M shrinks M (deny wins across rules),
                // so only allow-only rules keep C ⊆ M.
                r.endpoints.iter_mut().for_each(|e| e.deny_rules.clear());
                m.network.push(r);
            }
            m.filesystem.read_only.extend(other.filesystem.read_only);
            m.filesystem.read_write.extend(other.filesystem.read_write);
            (c, m, true)
        }
        _ => {
            let mut m = c.clone();
            if let (Some(slot), Some(new)) =
                (m.network.first_mut(), other.network.into_iter().next())
            {
                slot.endpoints = new.endpoints;
            }
            (c, m, false)
        }
    })
}

fn compiled(doc: &PolicyDocument) -> CompiledPolicy {
    compile(doc, Role::Maximum, &Limits::default()).expect("generated policies are valid")
}

fn separating(c: &CompiledPolicy, m: &CompiledPolicy) -> Option<&'static Action> {
    universe().iter().find(|a| allows(c, a) && !allows(m, a))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 600, ..ProptestConfig::default() })]

    /// Within is never wrong on the enumerated space; every Exceeds witness
    /// is canonical and replays; nothing is inconclusive.
    #[test]
    fn containment_agrees_with_matcher((c, m, contained) in pair()) {
        let (c, m) = (compiled(&c), compiled(&m));
        let proof = prover().containment(&c, &m);
        match &proof.outcome {
            Outcome::Within => {
                prop_assert_eq!(separating(&c, &m), None, "prover said within");
            }
            Outcome::Exceeds { counterexample } => {
                prop_assert!(!contained, "C ⊆ M by construction, yet exceeds: {}", counterexample);
                prop_assert!(counterexample.check_canonical().is_ok(), "{}", counterexample);
                prop_assert!(allows(&c, counterexample), "C does not allow {}", counterexample);
                prop_assert!(!allows(&m, counterexample), "M allows {}", counterexample);
            }
            other => prop_assert!(false, "unexpected {:?}", other),
        }
        if contained {
            prop_assert_eq!(&proof.outcome, &Outcome::Within);
        }
    }

    /// New authority: up to k distinct examples, each in C and not in P;
    /// none found only when no enumerated action separates them.
    #[test]
    fn new_authority_examples_replay((c, p, _) in pair()) {
        let (c, p) = (compiled(&c), compiled(&p));
        let found = prover().new_authority(&c, &p, 3);
        prop_assert!(found.incomplete.is_none(), "{:?}", found.incomplete);
        for (i, a) in found.examples.iter().enumerate() {
            prop_assert!(allows(&c, a) && !allows(&p, a), "{}", a);
            prop_assert!(!found.examples[..i].contains(a), "duplicate example {}", a);
        }
        if found.examples.is_empty() {
            prop_assert_eq!(separating(&c, &p), None);
        }
    }

    /// Intersection with a random region agrees with the matcher.
    #[test]
    fn intersection_agrees_with_matcher(
        (c, _, _) in pair(),
        hosts in proptest::option::of(strings(HOST_GLOBS, 2)),
        paths in proptest::option::of(strings(PATH_GLOBS, 2)),
        methods in proptest::option::of(strings(&["GET", "POST", "DELETE"], 2)),
        ports in proptest::option::of(subsequence(PORTS, 1..=2)),
        layers in proptest::option::of(subsequence(&[Layer::L4, Layer::Rest], 1..=2)),
    ) {
        let c = compiled(&c);
        let region = Region {
            binaries: None,
            hosts: hosts.filter(|h| !h.is_empty()),
            ports,
            layers,
            methods: methods.filter(|m| !m.is_empty()),
            paths: paths.filter(|p| !p.is_empty()),
        };
        let region: CompiledRegion = compile_region(&region, "region").unwrap();
        let proof = prover().intersection(&c, &region);
        let inside = |a: &Action| matches!(a, Action::Network(n) if region_contains(&region, n)) && allows(&c, a);
        match &proof.outcome {
            Outcome::Within => prop_assert_eq!(universe().iter().find(|a| inside(a)), None),
            Outcome::Exceeds { counterexample } => prop_assert!(inside(counterexample), "{}", counterexample),
            other => prop_assert!(false, "unexpected {:?}", other),
        }
    }
}

/// The policy that allows exactly one REST action (no glob characters
/// occur in the action alphabet, so every field is a literal pattern; GET
/// is left out of the actions, since a GET rule also allows HEAD).
fn exactly(a: &NetworkAction) -> PolicyDocument {
    serde_json::from_value(serde_json::json!({
        "network": [{
            "name": "exactly",
            "binaries": [a.binary],
            "endpoints": [{
                "host": a.host,
                "ports": [a.port],
                "protocol": "rest",
                "rules": [{"methods": [a.method], "path": a.path}],
            }],
        }],
    }))
    .unwrap()
}

fn rest_actions() -> impl Strategy<Value = NetworkAction> {
    select(
        universe()
            .iter()
            .filter_map(|a| match a {
                Action::Network(n) if n.layer == Layer::Rest && n.method != "GET" => {
                    Some(n.clone())
                }
                _ => None,
            })
            .collect::<Vec<_>>(),
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    /// The runtime decision endpoint agrees with the prover: `/v1/decide`
    /// allows an action exactly when the policy that allows only that
    /// action is proved contained in the committed policy.
    #[test]
    fn decide_agrees_with_containment((committed, _, _) in pair(), action in rest_actions()) {
        let committed = compiled(&committed);
        let single = compile(&exactly(&action), Role::Sandbox, &Limits::default()).unwrap();
        let proof = prover().containment(&single, &committed);
        let answer = decide_action(&committed, &DecideRequest {
            sandbox: "s".into(),
            namespace: "n".into(),
            binary: Some(action.binary.clone()),
            host: Some(action.host.clone()),
            port: Some(action.port),
            layer: Some(action.layer),
            method: Some(action.method.clone()),
            path: Some(action.path.clone()),
            access: None,
        });
        match &proof.outcome {
            Outcome::Within => prop_assert!(answer.allow, "prover: within; decide: {}", answer.reason),
            Outcome::Exceeds { counterexample } => {
                prop_assert!(!answer.allow, "prover: exceeds with {}; decide: {}", counterexample, answer.reason);
                prop_assert_eq!(counterexample, &Action::Network(action.clone()));
            }
            other => prop_assert!(false, "unexpected {:?}", other),
        }
    }
}

/// Many hosts pose the same sub-problem (the prover solves it once); one
/// differs in a way that changes the answer and must still be found.
#[test]
fn memoised_components_do_not_hide_a_different_one() {
    let rule = |i: usize, host: &str, path: &str| {
        format!(
            "  - name: r{i}\n    binaries: [/usr/bin/*]\n    endpoints:\n      - host: \"{host}\"\n        ports: [443]\n        protocol: rest\n        rules: [{{methods: [GET], path: \"{path}\"}}]\n        denyRules: [{{methods: [DELETE], path: /v1/org{i}/admin/**}}]\n"
        )
    };
    let mut candidate = String::from("network:\n");
    let mut maximum = String::from("network:\n");
    for i in 0..60 {
        candidate += &rule(
            i,
            &format!("*.svc{i}.example.com"),
            &format!("/v1/org{i}/*/items/**"),
        );
        let wide_path = if i == 37 {
            format!("/v1/org{i}/*/items/*")
        } else {
            format!("/v1/org{i}/**")
        };
        maximum += &rule(i, &format!("**.svc{i}.example.com"), &wide_path);
    }
    let c = agentgate_tests::policy(&candidate, Role::Sandbox);
    let m = agentgate_tests::policy(&maximum, Role::Maximum);
    let proof = prover().containment(&c, &m);
    let Outcome::Exceeds { counterexample } = &proof.outcome else {
        panic!("expected exceeds, got {:?}", proof.outcome);
    };
    let Action::Network(a) = counterexample else {
        panic!("{counterexample}")
    };
    assert_eq!(a.host, "x.svc37.example.com");
    assert!(allows(&c, counterexample) && !allows(&m, counterexample));
    // And with rule 37 fixed, everything is within.
    let fixed = maximum.replace("/v1/org37/*/items/*", "/v1/org37/**");
    let m = agentgate_tests::policy(&fixed, Role::Maximum);
    assert_eq!(prover().containment(&c, &m).outcome, Outcome::Within);
}
