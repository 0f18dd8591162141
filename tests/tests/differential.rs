//! Differential property tests: the prover (Z3 over signature automata)
//! against the runtime matcher (segment-by-segment glob matching), on random
//! policies over a small alphabet. The action space below is small enough to
//! enumerate completely, so "Within" is checked against every action in it,
//! not a sample.
//!
//! Case counts are stated in docs/proofs.md; change both together.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use agentgate::policy::action::{Action, Layer, NetworkAction};
use agentgate::policy::compile::{
    CompiledPolicy, CompiledRegion, Limits, Role, compile, compile_region,
};
use agentgate::policy::matcher::{allows, region_contains};
use agentgate::policy::model::{PolicyDocument, Region};
use agentgate::prover::{Outcome, Prover, ProverOptions};
use agentgate::webhook::decide::{DecideRequest, decide_action};
use agentgate_policy::testing::{HOST_GLOBS, PATH_GLOBS, PORTS, document, strings, universe};
use proptest::prelude::*;
use proptest::sample::{select, subsequence};

fn prover() -> Prover {
    // No cache: every case is a real proof.
    Prover::new(ProverOptions {
        cache_entries: 0,
        ..ProverOptions::default()
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
