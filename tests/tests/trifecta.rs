//! Property tests of the trifecta core (docs/design.md §1): lattice laws, order
//! independence of label propagation, witness validity, agreement of the
//! fixpoint with the path query, and minimality of the vertex cut (checked
//! by brute force on small random graphs).
//!
//! Case counts are stated in docs/proofs.md; change both together.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use agentgate_trifecta::analysis::{analyze, finding_at, has_trifecta};
use agentgate_trifecta::lattice::{propagate, propagate_in_order};
use agentgate_trifecta::{
    Capability, Channel, Confidentiality, Edge, EdgeKind, Effect, Graph, Integrity, LLM, Label,
    Node, NodeKind, SourceLocation,
};
use proptest::prelude::*;

fn label() -> impl Strategy<Value = Label> {
    (
        prop_oneof![Just(Integrity::Untrusted), Just(Integrity::Trusted)],
        prop_oneof![
            Just(Confidentiality::Public),
            Just(Confidentiality::Internal),
            Just(Confidentiality::Secret)
        ],
    )
        .prop_map(|(integrity, confidentiality)| Label {
            integrity,
            confidentiality,
        })
}

fn capability(effect: Effect, channel: Channel, line: u32) -> Capability {
    Capability::new(effect, channel, SourceLocation::at("tools.py", line))
}

/// A random graph of up to `max` tools around `__llm__`, with random extra
/// edges, load-bearing marks and declassifiers.
fn graph(max: usize) -> impl Strategy<Value = Graph> {
    (1..=max)
        .prop_flat_map(|n| {
            (
                proptest::collection::vec(
                    (0u8..8, any::<bool>(), any::<bool>(), any::<bool>(), 0u8..6),
                    n,
                ),
                proptest::collection::vec((0..=n, 0..=n, any::<bool>()), 0..(2 * n + 2)),
            )
        })
        .prop_map(|(tools, extra)| {
            let mut nodes = vec![Node {
                id: LLM.into(),
                kind: NodeKind::Llm,
                ..Node::default()
            }];
            let mut edges = Vec::new();
            for (i, (bits, load_bearing, to_llm, from_llm, declassify)) in
                tools.into_iter().enumerate()
            {
                let id = format!("t{i}");
                let mut capabilities = Vec::new();
                let line = i as u32 + 1;
                if bits & 1 != 0 {
                    capabilities.push(capability(Effect::UntrustedInput, Channel::Http, line));
                }
                if bits & 2 != 0 {
                    capabilities.push(capability(Effect::Egress, Channel::Mail, line));
                }
                if bits & 4 != 0 {
                    let effect = if i % 2 == 0 {
                        Effect::ReadsSecret
                    } else {
                        Effect::ReadsInternal
                    };
                    capabilities.push(capability(effect, Channel::Env, line));
                }
                if to_llm {
                    edges.push(edge(&id, LLM, EdgeKind::Data));
                }
                if from_llm {
                    edges.push(edge(LLM, &id, EdgeKind::Control));
                    edges.push(edge(LLM, &id, EdgeKind::Data));
                }
                nodes.push(Node {
                    id,
                    capabilities,
                    load_bearing,
                    declassifies: if declassify == 0 {
                        vec![Channel::Mail]
                    } else {
                        Vec::new()
                    },
                    ..Node::default()
                });
            }
            let ids: Vec<String> = nodes.iter().map(|n| n.id.clone()).collect();
            for (from, to, control) in extra {
                let kind = if control {
                    EdgeKind::Control
                } else {
                    EdgeKind::Data
                };
                edges.push(edge(&ids[from], &ids[to], kind));
            }
            Graph { nodes, edges }
        })
}

fn edge(from: &str, to: &str, kind: EdgeKind) -> Edge {
    Edge {
        from: from.into(),
        to: to.into(),
        kind,
    }
}

/// The graph with its nodes and edges in a different order.
fn shuffled(graph: &Graph, seed: u64) -> Graph {
    let mut g = graph.clone();
    let mut state = seed | 1;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for i in (1..g.nodes.len()).rev() {
        let j = (next() % (i as u64 + 1)) as usize;
        g.nodes.swap(i, j);
    }
    for i in (1..g.edges.len()).rev() {
        let j = (next() % (i as u64 + 1)) as usize;
        g.edges.swap(i, j);
    }
    g
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn join_is_a_semilattice(a in label(), b in label(), c in label()) {
        prop_assert_eq!(a.join(b), b.join(a));
        prop_assert_eq!(a.join(b).join(c), a.join(b.join(c)));
        prop_assert_eq!(a.join(a), a);
        prop_assert_eq!(a.join(Label::BOTTOM), a);
        prop_assert!(a.flows_to(a.join(b)));
    }

    #[test]
    fn propagation_does_not_depend_on_visit_order(g in graph(7), seed in any::<u64>()) {
        let indexed = g.indexed().unwrap();
        let removed = vec![false; indexed.len()];
        let forward = propagate(&indexed, &removed);
        let mut order: Vec<usize> = (0..indexed.len()).rev().collect();
        order.rotate_left((seed as usize) % indexed.len().max(1));
        prop_assert_eq!(&forward, &propagate_in_order(&indexed, &removed, &order));
        // Reordering the graph itself changes nothing either.
        let other = shuffled(&g, seed);
        let other_indexed = other.indexed().unwrap();
        let labels = propagate(&other_indexed, &removed);
        for (i, node) in g.nodes.iter().enumerate() {
            let j = other_indexed.index[node.id.as_str()];
            prop_assert_eq!(forward[i], labels[j]);
        }
    }

    #[test]
    fn propagation_is_a_monotone_fixpoint(g in graph(7), bump in 0usize..8, extra in label()) {
        let indexed = g.indexed().unwrap();
        let removed = vec![false; indexed.len()];
        let labels = propagate(&indexed, &removed);
        // A fixpoint: every edge's transfer already flows into its target,
        // and every node is at least its own label.
        for (from, successors) in indexed.successors.iter().enumerate() {
            prop_assert!(indexed.node(from).intrinsic_label().flows_to(labels[from]));
            for &(to, kind) in successors {
                let carried = agentgate_trifecta::lattice::transfer(labels[from], kind);
                prop_assert!(carried.flows_to(labels[to]));
            }
        }
        // Monotone: raising one node's label never lowers any result.
        let mut raised = g.clone();
        let i = bump % raised.nodes.len();
        raised.nodes[i].label = raised.nodes[i].label.join(extra);
        let raised_indexed = raised.indexed().unwrap();
        let higher = propagate(&raised_indexed, &removed);
        for (low, high) in labels.iter().zip(&higher) {
            prop_assert!(low.flows_to(*high));
        }
    }

    #[test]
    fn findings_agree_with_the_fixpoint_and_carry_valid_witnesses(g in graph(7)) {
        // Without declassifiers the path query and the propagated labels
        // must say the same thing about every sink.
        let mut plain = g.clone();
        for node in &mut plain.nodes {
            node.declassifies.clear();
        }
        let indexed = plain.indexed().unwrap();
        let removed = vec![false; indexed.len()];
        let labels = propagate(&indexed, &removed);
        let findings = analyze(&plain).unwrap();
        for sink in 0..indexed.len() {
            let node = indexed.node(sink);
            if !node.is_egress() {
                continue;
            }
            let steered = indexed.predecessors[sink].iter().any(|&(from, kind)| {
                kind == EdgeKind::Control && labels[from].integrity == Integrity::Untrusted
            });
            let fed = indexed.predecessors[sink].iter().any(|&(from, kind)| {
                kind == EdgeKind::Data && labels[from].confidentiality >= Confidentiality::Internal
            });
            let found = findings.iter().any(|f| f.sink == node.id);
            prop_assert_eq!(steered && fed, found, "sink {}", node.id);
        }
        for finding in &findings {
            check_witnesses(&plain, finding);
        }
        // With declassifiers, witnesses stay valid and avoid them.
        for finding in analyze(&g).unwrap() {
            check_witnesses(&g, &finding);
            let sink = g.node(&finding.sink).unwrap();
            for hop in &finding.data.path[..finding.data.path.len() - 1] {
                let node = g.node(&hop.node).unwrap();
                prop_assert!(!agentgate_trifecta::analysis::declassifies_for(
                    node,
                    &sink.egress_channels()
                ));
            }
        }
    }

    #[test]
    fn the_cut_is_minimal_and_removes_the_finding(g in graph(6)) {
        let indexed = g.indexed().unwrap();
        let n = indexed.len();
        for finding in analyze(&g).unwrap() {
            let sink = indexed.index[finding.sink.as_str()];
            let removable: Vec<usize> = (0..n).filter(|&i| indexed.node(i).removable()).collect();
            // Brute force: the smallest set of removable nodes that kills it.
            let mut smallest = None;
            for mask in 0u32..(1 << removable.len()) {
                let size = mask.count_ones() as usize;
                if smallest.is_some_and(|s| size >= s) {
                    continue;
                }
                let mut removed = vec![false; n];
                for (bit, &i) in removable.iter().enumerate() {
                    removed[i] = mask & (1 << bit) != 0;
                }
                if !has_trifecta(&indexed, sink, &removed) {
                    smallest = Some(size);
                }
            }
            match smallest {
                Some(size) => {
                    prop_assert_eq!(finding.cut.len(), size, "cut {:?}", finding.cut);
                    let mut removed = vec![false; n];
                    for id in &finding.cut {
                        let i = indexed.index[id.as_str()];
                        prop_assert!(indexed.node(i).removable());
                        removed[i] = true;
                    }
                    prop_assert!(!has_trifecta(&indexed, sink, &removed));
                    prop_assert!(finding_at(&indexed, sink, &removed).is_none());
                }
                None => prop_assert!(finding.cut.is_empty()),
            }
        }
    }
}

/// Every witness is a path of the graph from a proper source to the sink,
/// with the right edge kinds.
fn check_witnesses(g: &Graph, finding: &agentgate_trifecta::Finding) {
    let has_edge = |from: &str, to: &str, kinds: &[EdgeKind]| {
        g.edges
            .iter()
            .any(|e| e.from == from && e.to == to && kinds.contains(&e.kind))
    };
    for (witness, control) in [(&finding.control, true), (&finding.data, false)] {
        let nodes = witness.nodes();
        assert!(nodes.len() >= 2, "a witness has at least one edge");
        assert_eq!(nodes.last().copied(), Some(finding.sink.as_str()));
        let first = g.node(nodes[0]).unwrap().intrinsic_label();
        if control {
            assert_eq!(first.integrity, Integrity::Untrusted);
        } else {
            assert!(first.confidentiality >= Confidentiality::Internal);
        }
        for (i, pair) in nodes.windows(2).enumerate() {
            let last = i == nodes.len() - 2;
            let kinds: &[EdgeKind] = match (control, last) {
                (true, true) => &[EdgeKind::Control],
                (true, false) => &[EdgeKind::Control, EdgeKind::Data],
                (false, _) => &[EdgeKind::Data],
            };
            assert!(
                has_edge(pair[0], pair[1], kinds),
                "{} -> {} in {:?}",
                pair[0],
                pair[1],
                nodes
            );
        }
    }
}

/// The example of docs/design.md §6, end to end through the analysis.
#[test]
fn the_design_example_names_its_witnesses_and_fix() {
    let mut g = agentgate_trifecta::fixtures::mail_agent();
    let findings = analyze(&g).unwrap();
    assert_eq!(findings.len(), 1);
    let f = &findings[0];
    assert_eq!(
        f.to_string(),
        "AG-TRIFECTA → send_email; control: read_email → __llm__ → send_email (tools.py:42); \
         data: query_customers → __llm__ → send_email (db.py:10)"
    );
    assert_eq!(f.fix(), "restrict tool send_email");
    assert_eq!(f.severity, agentgate_trifecta::Severity::High);

    // A load-bearing sink moves the fix to a half cut.
    g.nodes[3].load_bearing = true;
    let f = &analyze(&g).unwrap()[0];
    assert_eq!(f.cut, vec!["read_email".to_string()]);

    // Without source lines the evidence gate caps the severity.
    for node in &mut g.nodes {
        node.source = None;
        for c in &mut node.capabilities {
            c.source = None;
        }
    }
    assert_eq!(
        analyze(&g).unwrap()[0].severity,
        agentgate_trifecta::Severity::Medium
    );
}
