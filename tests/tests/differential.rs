//! Differential property tests: the prover (Z3 over signature automata)
//! against the runtime matcher (segment-by-segment glob matching), on random
//! policies over a small alphabet. The action space below is small enough to
//! enumerate completely, so "Within" is checked against every action in it,
//! not a sample.
//!
//! Case counts are stated in docs/proofs.md; change both together.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use agentgate::webhook::decide::{DecideRequest, decide_action};
use agentgate_governance::verdict::{
    Evidence, GoverningMaximum, Mode, Requester, Step, VerdictInput, first_escape, reach_verdict,
    revoke_until_within,
};
use agentgate_policy::action::{Action, Layer, NetworkAction};
use agentgate_policy::compile::EndpointKind;
use agentgate_policy::compile::{
    CompiledPolicy, CompiledRegion, Limits, Role, compile, compile_region,
};
use agentgate_policy::index::HostIndex;
use agentgate_policy::load::CompiledInvariant;
use agentgate_policy::matcher::{
    Caller, allows, decide_mcp_indexed, held_by, region_contains, region_holds,
};
use agentgate_policy::model::{PolicyDocument, Region};
use agentgate_policy::testing::{
    CREDENTIAL_GLOBS, CREDENTIALS, HOST_GLOBS, PATH_GLOBS, PORTS, credentialed_document,
    credentialed_universe, document, mcp_calls, mcp_document, query_document, query_universe,
    strings, tool_entry, universe, websocket_document, websocket_universe,
};
use agentgate_prover::{Outcome, Prover, ProverOptions};
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
    (document(), document(), 0u8..3).prop_map(|(c, other, how)| {
        let (m, contained) = maximum_around(&c, other, how);
        (c, m, contained)
    })
}

/// A maximum M for C, built from `other` as `how` says (see [`pair`]), and
/// whether C ⊆ M by construction.
fn maximum_around(c: &PolicyDocument, other: PolicyDocument, how: u8) -> (PolicyDocument, bool) {
    match how {
        0 => (other, false),
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
            (m, true)
        }
        _ => {
            let mut m = c.clone();
            if let (Some(slot), Some(new)) =
                (m.network.first_mut(), other.network.into_iter().next())
            {
                slot.endpoints = new.endpoints;
            }
            (m, false)
        }
    }
}

/// A random network region over the alphabet (an absent dimension is
/// unconstrained).
fn region() -> impl Strategy<Value = Region> {
    (
        proptest::option::of(strings(HOST_GLOBS, 2)),
        proptest::option::of(strings(PATH_GLOBS, 2)),
        proptest::option::of(strings(&["GET", "POST", "DELETE"], 2)),
        proptest::option::of(subsequence(PORTS, 1..=2)),
        proptest::option::of(subsequence(&[Layer::L4, Layer::Rest], 1..=2)),
    )
        .prop_map(|(hosts, paths, methods, ports, layers)| Region {
            binaries: None,
            hosts: hosts.filter(|h| !h.is_empty()),
            ports,
            layers,
            methods: methods.filter(|m| !m.is_empty()),
            paths: paths.filter(|p| !p.is_empty()),
            ..Region::default()
        })
}

/// A random region that may also name tool calls (§8.5): tool entries of
/// the tool-call alphabet, kept only where the transport part can carry a
/// call (a region that cannot is refused when compiled).
fn mcp_region() -> impl Strategy<Value = Region> {
    (
        region(),
        proptest::option::of(proptest::collection::vec(tool_entry(), 1..=2)),
    )
        .prop_map(|(mut region, tools)| {
            let carries_calls = region
                .layers
                .as_ref()
                .is_none_or(|l| l.contains(&Layer::Rest))
                && region
                    .methods
                    .as_ref()
                    .is_none_or(|m| m.iter().any(|m| m == "POST"));
            region.tools = tools.filter(|_| carries_calls);
            region
        })
}

fn compiled(doc: &PolicyDocument) -> CompiledPolicy {
    compile(doc, Role::Maximum, &Limits::default()).expect("generated policies are valid")
}

/// The first enumerated action C allows and M does not.
fn separating<'u>(
    actions: &'u [Action],
    c: &CompiledPolicy,
    m: &CompiledPolicy,
) -> Option<&'u Action> {
    actions.iter().find(|a| allows(c, a) && !allows(m, a))
}

/// Within is never wrong on `actions`; every Exceeds witness is canonical
/// and replays; nothing is inconclusive; C ⊆ M by construction is Within.
fn check_containment(
    actions: &[Action],
    c: &PolicyDocument,
    m: &PolicyDocument,
    contained: bool,
) -> Result<(), TestCaseError> {
    let (c, m) = (compiled(c), compiled(m));
    let proof = prover().containment(&c, &m);
    match &proof.outcome {
        Outcome::Within => {
            prop_assert_eq!(separating(actions, &c, &m), None, "prover said within");
        }
        Outcome::Exceeds { counterexample } => {
            prop_assert!(
                !contained,
                "C ⊆ M by construction, yet exceeds: {}",
                counterexample
            );
            prop_assert!(
                counterexample.check_canonical().is_ok(),
                "{}",
                counterexample
            );
            prop_assert!(
                allows(&c, counterexample),
                "C does not allow {}",
                counterexample
            );
            prop_assert!(!allows(&m, counterexample), "M allows {}", counterexample);
        }
        other => prop_assert!(false, "unexpected {:?}", other),
    }
    if contained {
        prop_assert_eq!(&proof.outcome, &Outcome::Within);
    }
    Ok(())
}

/// Up to k distinct examples, each in C and not in P; none found only when
/// no action of `actions` separates them.
fn check_new_authority(
    actions: &[Action],
    c: &PolicyDocument,
    p: &PolicyDocument,
) -> Result<(), TestCaseError> {
    let (c, p) = (compiled(c), compiled(p));
    let found = prover().new_authority(&c, &p, 3);
    prop_assert!(found.incomplete.is_none(), "{:?}", found.incomplete);
    for (i, a) in found.examples.iter().enumerate() {
        prop_assert!(allows(&c, a) && !allows(&p, a), "{}", a);
        prop_assert!(!found.examples[..i].contains(a), "duplicate example {}", a);
    }
    if found.examples.is_empty() {
        prop_assert_eq!(separating(actions, &c, &p), None);
    }
    Ok(())
}

/// Intersection with a region agrees with the matcher on `actions`
/// (`region_holds`, §8.5).
fn check_intersection(
    actions: &[Action],
    c: &PolicyDocument,
    region: &Region,
) -> Result<(), TestCaseError> {
    let c = compiled(c);
    let region: CompiledRegion = compile_region(region, "region").unwrap();
    let proof = prover().intersection(&c, &region);
    let inside = |a: &Action| region_holds(&region, a) && allows(&c, a);
    match &proof.outcome {
        Outcome::Within => prop_assert_eq!(actions.iter().find(|a| inside(a)), None),
        Outcome::Exceeds { counterexample } => {
            prop_assert!(inside(counterexample), "{}", counterexample)
        }
        other => prop_assert!(false, "unexpected {:?}", other),
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 600, ..ProptestConfig::default() })]

    /// Within is never wrong on the enumerated space; every Exceeds witness
    /// is canonical and replays; nothing is inconclusive.
    #[test]
    fn containment_agrees_with_matcher((c, m, contained) in pair()) {
        check_containment(universe(), &c, &m, contained)?;
    }

    /// New authority: up to k distinct examples, each in C and not in P;
    /// none found only when no enumerated action separates them.
    #[test]
    fn new_authority_examples_replay((c, p, _) in pair()) {
        check_new_authority(universe(), &c, &p)?;
    }

    /// Intersection with a random region agrees with the matcher.
    #[test]
    fn intersection_agrees_with_matcher((c, _, _) in pair(), region in region()) {
        check_intersection(universe(), &c, &region)?;
    }
}

/// Pairs (C, M) whose REST entries constrain query parameters
/// (docs/policy-semantics.md §10.1), built as [`pair`] builds them.
fn query_pair() -> impl Strategy<Value = (PolicyDocument, PolicyDocument, bool)> {
    (query_document(), query_document(), 0u8..3).prop_map(|(c, other, how)| {
        let (m, contained) = maximum_around(&c, other, how);
        (c, m, contained)
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    /// Query matchers: Within is never wrong on every request of the
    /// alphabet with every combination of parameter values, each witness
    /// (its query included) replays, and C ⊆ M by construction is proved.
    #[test]
    fn query_containment_agrees_with_matcher((c, m, contained) in query_pair()) {
        check_containment(query_universe(), &c, &m, contained)?;
    }

    /// New authority over queries: distinct examples that replay.
    #[test]
    fn query_new_authority_examples_replay((c, p, _) in query_pair()) {
        check_new_authority(query_universe(), &c, &p)?;
    }
}

/// Pairs (C, M) with websocket, REST and l4 endpoints on the same hosts
/// (docs/policy-semantics.md §10.2), built as [`pair`] builds them.
fn websocket_pair() -> impl Strategy<Value = (PolicyDocument, PolicyDocument, bool)> {
    (websocket_document(), websocket_document(), 0u8..3).prop_map(|(c, other, how)| {
        let (m, contained) = maximum_around(&c, other, how);
        (c, m, contained)
    })
}

/// A region over layers and paths, which hold upgrades too.
fn websocket_region() -> impl Strategy<Value = Region> {
    (
        proptest::option::of(subsequence(
            &[Layer::L4, Layer::Rest, Layer::Websocket][..],
            1..=2,
        )),
        proptest::option::of(subsequence(&["/ws", "/ws/*", "/b"][..], 1..=2)),
        proptest::option::of(select(&["GET", "POST"][..])),
    )
        .prop_map(|(layers, paths, method)| Region {
            layers,
            paths: paths.map(|p| p.into_iter().map(str::to_string).collect()),
            methods: method.map(|m| vec![m.to_string()]),
            ..Region::default()
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    /// WebSocket upgrades: Within is never wrong on every upgrade of the
    /// alphabet, each witness (its subprotocol and origin included)
    /// replays, and C ⊆ M by construction is proved.
    #[test]
    fn websocket_containment_agrees_with_matcher((c, m, contained) in websocket_pair()) {
        check_containment(websocket_universe(), &c, &m, contained)?;
    }

    /// New authority over upgrades: distinct examples that replay.
    #[test]
    fn websocket_new_authority_examples_replay((c, p, _) in websocket_pair()) {
        check_new_authority(websocket_universe(), &c, &p)?;
    }

    /// Regions hold upgrades by layer and path, never by method.
    #[test]
    fn websocket_intersection_agrees_with_matcher((c, _, _) in websocket_pair(), region in websocket_region()) {
        check_intersection(websocket_universe(), &c, &region)?;
    }
}

/// Pairs (C, M) whose rules bind credentials (docs/policy-semantics.md §9),
/// built as [`pair`] builds them; in the contained case M's extra rules
/// bind nothing new, so C ⊆ M still holds with credentials.
fn credential_pair() -> impl Strategy<Value = (PolicyDocument, PolicyDocument, bool)> {
    (credentialed_document(), credentialed_document(), 0u8..3).prop_map(|(c, other, how)| {
        let (m, contained) = maximum_around(&c, other, how);
        (c, m, contained)
    })
}

/// A random region that may name credentials.
fn credential_region() -> impl Strategy<Value = Region> {
    (region(), proptest::option::of(strings(CREDENTIAL_GLOBS, 2))).prop_map(
        |(mut region, credentials)| {
            region.credentials = credentials.filter(|c| !c.is_empty());
            region
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// Credential reach: Within is never wrong on the enumerated actions
    /// (without a credential and with each name), every witness replays
    /// with its credential, and C ⊆ M by construction is proved.
    #[test]
    fn credential_containment_agrees_with_matcher((c, m, contained) in credential_pair()) {
        check_containment(credentialed_universe(), &c, &m, contained)?;
    }

    /// New credential reach: distinct examples that replay.
    #[test]
    fn credential_new_authority_examples_replay((c, p, _) in credential_pair()) {
        check_new_authority(credentialed_universe(), &c, &p)?;
    }

    /// Regions that name credentials hold only credentialed actions.
    #[test]
    fn credential_intersection_agrees_with_matcher((c, _, _) in credential_pair(), region in credential_region()) {
        check_intersection(credentialed_universe(), &c, &region)?;
    }

    /// A policy allows an action with a credential iff its view bound to
    /// that credential allows the action without one.
    #[test]
    fn the_bound_view_is_the_credentialed_policy((c, _, _) in credential_pair()) {
        let c = compiled(&c);
        for name in CREDENTIALS {
            let view = c.bound_to(name);
            for a in credentialed_universe() {
                let Action::Network(a) = a else { continue };
                if a.credential.as_deref() != Some(*name) {
                    continue;
                }
                let bare = NetworkAction { credential: None, ..a.clone() };
                prop_assert_eq!(
                    allows(&c, &Action::Network(a.clone())),
                    allows(&view, &Action::Network(bare)),
                    "{}", a
                );
            }
        }
    }
}

/// Pairs (C, M) of policies mixing `l4`, `rest` and `mcp` endpoints, built
/// as [`pair`] builds them.
fn mcp_pair() -> impl Strategy<Value = (PolicyDocument, PolicyDocument, bool)> {
    (mcp_document(), mcp_document(), 0u8..3).prop_map(|(c, other, how)| {
        let (mut m, contained) = maximum_around(&c, other, how);
        if contained {
            // A denyTools entry in M's extra rules shrinks M too.
            let extra = m.network.iter_mut().filter(|r| r.name.starts_with("extra"));
            extra
                .flat_map(|r| r.endpoints.iter_mut())
                .for_each(|e| e.deny_tools.clear());
        }
        (c, m, contained)
    })
}

/// The network universe and every MCP call of the tool-call alphabet at a
/// few (binary, host, port) triples of the network alphabet.
fn mcp_universe() -> &'static [Action] {
    static ACTIONS: std::sync::OnceLock<Vec<Action>> = std::sync::OnceLock::new();
    ACTIONS.get_or_init(|| {
        let mut out = universe().to_vec();
        for (binary, host, port) in [
            ("/usr/bin/gh", "a.io", 443),
            ("/opt/x", "b.a.io", 80),
            ("/x", "c.b.a.io", 443),
        ] {
            out.extend(mcp_calls(binary, host, port).into_iter().map(Action::Mcp));
        }
        out
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    /// Tool calls: Within is never wrong on the enumerated calls (strings,
    /// numbers, arrays, missing and extra arguments, every kind), every
    /// witness replays, and C ⊆ M by construction is proved.
    #[test]
    fn mcp_containment_agrees_with_matcher((c, m, contained) in mcp_pair()) {
        check_containment(mcp_universe(), &c, &m, contained)?;
    }

    /// Tool calls: new-authority examples are distinct and replay.
    #[test]
    fn mcp_new_authority_examples_replay((c, p, _) in mcp_pair()) {
        check_new_authority(mcp_universe(), &c, &p)?;
    }

    /// Tool calls in regions, which may name tools themselves.
    #[test]
    fn mcp_intersection_agrees_with_matcher((c, _, _) in mcp_pair(), region in mcp_region()) {
        check_intersection(mcp_universe(), &c, &region)?;
    }
}

proptest! {
    // Two proofs per case: fewer cases than the blocks above.
    #![proptest_config(ProptestConfig { cases: 120, ..ProptestConfig::default() })]

    /// Held calls (`mode: ask`, docs/policy-semantics.md §8.6): marking
    /// tool entries held changes no proof (a held call is authority) and
    /// splits the matcher's allow in two: what a held policy allows or
    /// holds is exactly what the unmarked one allows.
    #[test]
    fn held_entries_are_authority_and_split_enforcement((c, m, _) in mcp_pair(), marks in any::<u32>()) {
        check_held(mcp_universe(), &c, &m, marks)?;
    }
}

/// `c` with the tool entries whose bit is set in `marks` held.
fn held_marked(c: &CompiledPolicy, marks: u32) -> CompiledPolicy {
    let mut held = c.clone();
    let entries = held
        .rules
        .iter_mut()
        .flat_map(|r| r.endpoints.iter_mut())
        .filter_map(|e| match &mut e.kind {
            EndpointKind::Mcp(m) => Some(m.tools.iter_mut()),
            _ => None,
        })
        .flatten();
    for (i, entry) in entries.enumerate() {
        entry.held = marks & (1 << (i % 32)) != 0;
    }
    held
}

fn check_held(
    actions: &[Action],
    c: &PolicyDocument,
    m: &PolicyDocument,
    marks: u32,
) -> Result<(), TestCaseError> {
    let (c, m) = (compiled(c), compiled(m));
    let held = held_marked(&c, marks);
    let plain = prover().containment(&c, &m).outcome;
    let marked = prover().containment(&held, &m).outcome;
    prop_assert_eq!(
        matches!(plain, Outcome::Within),
        matches!(marked, Outcome::Within),
        "held entries changed the proof"
    );
    if let Outcome::Exceeds { counterexample } = &marked {
        prop_assert!(allows(&held, counterexample) && !allows(&m, counterexample));
    }
    let index = HostIndex::build(&held);
    let plain_index = HostIndex::build(&c);
    for action in actions {
        prop_assert_eq!(allows(&held, action), allows(&c, action), "{}", action);
        let Action::Mcp(t) = action else { continue };
        let caller = Caller::Binary(&t.binary);
        let allowed = decide_mcp_indexed(&held, &index, caller, t).allow;
        let holds = held_by(&held, &index, caller, t, None).is_some();
        prop_assert_eq!(
            allowed || holds,
            decide_mcp_indexed(&c, &plain_index, caller, t).allow,
            "{}",
            action
        );
    }
    Ok(())
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
            ..DecideRequest::default()
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

/// Why an invariant exists, or none: most generated invariants carry one,
/// so a path that dropped it would differ.
const INVARIANT_REASONS: &[&str] = &["credentials theft", "exfiltration"];

/// A maximum's ceiling and its invariants (region, reason).
type MaximumDraft = (PolicyDocument, Vec<(Region, Option<&'static str>)>);

/// A policy and 1–3 governing maximums around it (each built as [`pair`]
/// builds M), each with up to 2 invariants over random regions.
type Governed = (PolicyDocument, Vec<MaximumDraft>);

fn governed() -> impl Strategy<Value = Governed> {
    let invariant = (
        region(),
        proptest::option::weighted(0.7, select(INVARIANT_REASONS)),
    );
    let maximum = (
        document(),
        0u8..3,
        proptest::collection::vec(invariant, 0..=2),
    );
    (document(), proptest::collection::vec(maximum, 1..=3)).prop_map(|(c, maximums)| {
        let maximums = maximums
            .into_iter()
            .map(|(other, how, invariants)| (maximum_around(&c, other, how).0, invariants))
            .collect();
        (c, maximums)
    })
}

/// The maximums of [`governed`], compiled: name, ceiling, invariants.
fn ceilings(maximums: &[MaximumDraft]) -> Vec<(String, CompiledPolicy, Vec<CompiledInvariant>)> {
    maximums
        .iter()
        .enumerate()
        .map(|(i, (m, invariants))| {
            let invariants = invariants
                .iter()
                .enumerate()
                .map(|(k, (region, reason))| CompiledInvariant {
                    name: format!("i{k}"),
                    reason: reason.map(str::to_string),
                    region: compile_region(region, "region").unwrap(),
                })
                .collect();
            (format!("m{i}"), compiled(m), invariants)
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// Admission (`reach_verdict`, steps 2–3) and revocation name the same first
    /// escape with the same reason, or both none; its counterexample
    /// replays in the runtime matcher; revocation takes out what allows it,
    /// and what it keeps, admission admits.
    #[test]
    fn admission_and_revocation_name_the_same_first_escape((policy, maximums) in governed()) {
        // A sandbox policy may not name a broad host such as `**`.
        let committed = compile(&policy, Role::Sandbox, &Limits::default());
        prop_assume!(committed.is_ok());
        let committed = committed.unwrap();
        let ceilings = ceilings(&maximums);
        let governing: Vec<GoverningMaximum<'_>> = ceilings
            .iter()
            .map(|(name, policy, invariants)| GoverningMaximum {
                name,
                policy,
                invariants,
                budget: None,
                four_eyes: false,
            })
            .collect();
        // Two solver runs of one question may find different witnesses
        // (signature sets are explored in hash order), so both paths share
        // one answer cache: what is compared is which questions they ask,
        // in which order, and how they word the answers.
        let prover = Prover::default();
        let admitted = reach_verdict(
            &VerdictInput {
                maximums: &governing,
                current: (&policy, &committed),
                candidate: (&policy, &committed),
                added: &CompiledPolicy::default(),
                requester: Requester::Agent,
                mode: Mode::Ask,
                allow_unmanaged: false,
            },
            &prover,
        );
        let revocation = revoke_until_within(&policy, &governing, &prover);
        let kept = compile(&revocation.kept, Role::Sandbox, &Limits::default()).unwrap();

        match admitted.step {
            Step::Containment | Step::Invariant => {
                let first = revocation.revoked.first();
                prop_assert_eq!(first.map(|(_, why)| why), Some(&admitted.reason));
                let name = admitted.maximum.as_deref().unwrap();
                let (_, ceiling, invariants) = ceilings.iter().find(|(n, _, _)| n == name).unwrap();
                match &admitted.counterexample {
                    Some(action) => {
                        prop_assert!(allows(&committed, action), "the policy does not allow {}", action);
                        if admitted.step == Step::Containment {
                            prop_assert!(!allows(ceiling, action), "{} allows {}", name, action);
                        } else {
                            let invariant = admitted.invariant.as_deref().unwrap();
                            let inv = invariants.iter().find(|i| i.name == invariant).unwrap();
                            let inside = matches!(action, Action::Network(n) if region_contains(&inv.region, n));
                            prop_assert!(inside, "{} is outside invariant {}", action, invariant);
                        }
                        prop_assert!(!allows(&kept, action), "revocation kept {}", action);
                    }
                    None => {
                        prop_assert!(admitted.code.is_some());
                        prop_assert_eq!(
                            &revocation.revoked,
                            &vec![("the whole policy".to_string(), admitted.reason.clone())]
                        );
                    }
                }
            }
            _ => {
                prop_assert_eq!(&revocation.revoked, &Vec::<(String, String)>::new());
                prop_assert_eq!(&revocation.kept, &policy);
            }
        }
        let left = first_escape(&kept, &governing, &prover, &mut Vec::new());
        prop_assert!(left.is_none(), "revocation kept an escape: {:?}", left);
        // The escape search the two share reads the prover's answers as
        // the verdict reports them.
        if let Some(escape) = first_escape(&committed, &governing, &prover, &mut Vec::new()) {
            prop_assert_eq!(&escape.reason, &admitted.reason);
            prop_assert_eq!(escape.evidence, match &admitted.counterexample {
                Some(action) => Evidence::Counterexample(Box::new(action.clone())),
                None => Evidence::Unproved(admitted.code.unwrap()),
            });
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
