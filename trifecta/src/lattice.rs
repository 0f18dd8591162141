//! Label propagation: the least fixpoint of "a node's label is its own label
//! joined with what flows into it". Integrity travels along every edge (an
//! untrusted input that reaches a node's arguments or steers its invocation
//! taints it); confidentiality travels along data edges only (a control edge
//! carries a decision, not the data).

use std::collections::VecDeque;

use super::graph::{EdgeKind, IndexedGraph, Label};

/// The label that crosses an edge of this kind from a node labelled `label`.
pub fn transfer(label: Label, kind: EdgeKind) -> Label {
    match kind {
        EdgeKind::Data => label,
        EdgeKind::Control => Label {
            integrity: label.integrity,
            confidentiality: Label::BOTTOM.confidentiality,
        },
    }
}

/// Propagated labels, indexed like the graph's nodes. Nodes in `removed`
/// neither hold nor pass labels.
pub fn propagate(graph: &IndexedGraph<'_>, removed: &[bool]) -> Vec<Label> {
    let order: Vec<usize> = (0..graph.len()).collect();
    propagate_in_order(graph, removed, &order)
}

/// [`propagate`] with the worklist seeded in `order` (a permutation of the
/// node indices). The result does not depend on the order: the transfer
/// functions are monotone and the lattice is finite, so the worklist reaches
/// the same least fixpoint whatever it visits first. The property tests
/// check exactly that.
pub fn propagate_in_order(
    graph: &IndexedGraph<'_>,
    removed: &[bool],
    order: &[usize],
) -> Vec<Label> {
    let is_removed = |i: usize| removed.get(i).copied().unwrap_or(false);
    let mut labels: Vec<Label> = (0..graph.len())
        .map(|i| {
            if is_removed(i) {
                Label::BOTTOM
            } else {
                graph.node(i).intrinsic_label()
            }
        })
        .collect();
    let mut queued = vec![false; graph.len()];
    let mut worklist: VecDeque<usize> = VecDeque::with_capacity(graph.len());
    for &i in order {
        if i < graph.len() && !queued[i] && !is_removed(i) {
            queued[i] = true;
            worklist.push_back(i);
        }
    }
    while let Some(from) = worklist.pop_front() {
        queued[from] = false;
        for &(to, kind) in &graph.successors[from] {
            if is_removed(to) {
                continue;
            }
            let joined = labels[to].join(transfer(labels[from], kind));
            if joined != labels[to] {
                labels[to] = joined;
                if !queued[to] {
                    queued[to] = true;
                    worklist.push_back(to);
                }
            }
        }
    }
    labels
}
