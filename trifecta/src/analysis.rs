//! The trifecta query (docs/design.md §1): an egress sink reached by control flow
//! from an untrusted node and by data flow from a node whose confidentiality
//! is at least `internal`, with one witness path for each and the minimum
//! vertex cut that removes the finding.
//!
//! Control flow is a path of any edges whose last edge is a control edge:
//! untrusted text enters the model's context as data and the model then
//! decides to call the sink. Data flow is a path of data edges only, and it
//! does not pass a node that declassifies every egress channel of the sink.
//! Both paths have at least one edge, so a sink is not its own source unless
//! it really feeds itself through the model.

use std::collections::VecDeque;
use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::cut::minimum_cut;
use super::graph::{
    Channel, Confidentiality, EdgeKind, Effect, Graph, GraphError, IndexedGraph, Integrity, Node,
    SourceLocation,
};

/// The id every trifecta finding carries (and `acceptedFindings` names).
pub const TRIFECTA_ID: &str = "AG-TRIFECTA";

/// How bad a finding is.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "UPPERCASE")]
pub enum Severity {
    /// Evidence incomplete: no source line for some hop.
    Medium,
    /// Internal data can reach an attacker-steered sink.
    High,
    /// Secrets can reach an attacker-steered sink.
    Critical,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Severity::Medium => "MEDIUM",
            Severity::High => "HIGH",
            Severity::Critical => "CRITICAL",
        })
    }
}

/// One node of a witness path, with the source line that justifies it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Hop {
    /// Node id.
    pub node: String,
    /// For the first hop, the call that makes it a source; for the last, the
    /// egress call; otherwise where the node is defined.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<SourceLocation>,
}

/// A path in the graph that demonstrates one half of a finding.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Witness {
    /// The hops, from the source to the sink.
    pub path: Vec<Hop>,
}

impl Witness {
    /// The node ids along the path.
    pub fn nodes(&self) -> Vec<&str> {
        self.path.iter().map(|h| h.node.as_str()).collect()
    }
}

impl fmt::Display for Witness {
    /// `a → b → c (file:line)`, citing the first hop's evidence.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let nodes = self.nodes().join(" → ");
        match self.path.first().and_then(|h| h.source.as_ref()) {
            Some(source) => write!(f, "{nodes} ({source})"),
            None => f.write_str(&nodes),
        }
    }
}

/// A lethal-trifecta finding for one sink.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Finding {
    /// Always [`TRIFECTA_ID`].
    pub id: String,
    /// The egress node.
    pub sink: String,
    /// CRITICAL (secret data), HIGH (internal data), MEDIUM (evidence incomplete).
    pub severity: Severity,
    /// From an untrusted input to the sink; the last edge is a control edge.
    pub control: Witness,
    /// From the most secret data source to the sink, along data edges.
    pub data: Witness,
    /// A minimum set of removable nodes whose removal leaves no trifecta at
    /// this sink; empty when every cut needs a load-bearing node.
    pub cut: Vec<String>,
}

impl Finding {
    /// The nodes a runtime refusal may belong to, in the order citations
    /// look at them: the sink, then the control and the data witness.
    pub fn nodes_sink_first(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.sink.as_str())
            .chain(self.control.path.iter().map(|h| h.node.as_str()))
            .chain(self.data.path.iter().map(|h| h.node.as_str()))
    }

    /// `AG-TRIFECTA → send_email`.
    pub fn title(&self) -> String {
        format!("{} → {}", self.id, self.sink)
    }

    /// `restrict tool send_email` or the reason no tool removal fixes it.
    pub fn fix(&self) -> String {
        if self.cut.is_empty() {
            "no removable tool separates the paths: declassify the data or accept the finding"
                .to_string()
        } else {
            let tools: Vec<&str> = self.cut.iter().map(String::as_str).collect();
            let noun = if tools.len() == 1 { "tool" } else { "tools" };
            format!("restrict {noun} {}", tools.join(", "))
        }
    }
}

impl Finding {
    /// The one line every surface prints (webhook, status, reports):
    /// `AG-TRIFECTA → x; control: …; data: …. Minimal fix: restrict tool x.`
    pub fn line_with_fix(&self) -> String {
        format!("{self}. Minimal fix: {}.", self.fix())
    }
}

impl fmt::Display for Finding {
    /// One line: title, both witnesses.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}; control: {}; data: {}",
            self.title(),
            self.control,
            self.data
        )
    }
}

/// Every trifecta finding of the graph, one per sink, sorted by sink id.
pub fn analyze(graph: &Graph) -> Result<Vec<Finding>, GraphError> {
    let indexed = graph.indexed()?;
    let removed = vec![false; indexed.len()];
    let mut sinks: Vec<usize> = (0..indexed.len())
        .filter(|&i| indexed.node(i).is_egress())
        .collect();
    sinks.sort_by(|&a, &b| indexed.node(a).id.cmp(&indexed.node(b).id));
    Ok(sinks
        .into_iter()
        .filter_map(|sink| finding_at(&indexed, sink, &removed))
        .collect())
}

/// The finding at `sink` in the graph without the `removed` nodes, if any.
pub fn finding_at(graph: &IndexedGraph<'_>, sink: usize, removed: &[bool]) -> Option<Finding> {
    let (control, data) = witnesses(graph, sink, removed)?;
    let node = graph.node(sink);
    let top = graph.node(data[0]).intrinsic_label().confidentiality;
    let mut severity = if top == Confidentiality::Secret {
        Severity::Critical
    } else {
        Severity::High
    };
    let control = witness(graph, &control, Effect::UntrustedInput);
    let data = witness(graph, &data, Effect::ReadsSecret);
    let evidenced = [&control, &data]
        .iter()
        .all(|w| w.path.first().is_some_and(|h| h.source.is_some()))
        && control.path.last().is_some_and(|h| h.source.is_some());
    if !evidenced {
        // The evidence gate: a serious claim needs a line someone can open.
        severity = severity.min(Severity::Medium);
    }
    let cut = minimum_cut(graph, sink, removed)
        .into_iter()
        .map(|i| graph.node(i).id.clone())
        .collect();
    Some(Finding {
        id: TRIFECTA_ID.to_string(),
        sink: node.id.clone(),
        severity,
        control,
        data,
        cut,
    })
}

/// True when `sink` has a trifecta in the graph without the `removed` nodes.
pub fn has_trifecta(graph: &IndexedGraph<'_>, sink: usize, removed: &[bool]) -> bool {
    witnesses(graph, sink, removed).is_some()
}

/// The control and data witness paths (node indices, source first) at
/// `sink`, or `None` when either is missing.
fn witnesses(
    graph: &IndexedGraph<'_>,
    sink: usize,
    removed: &[bool],
) -> Option<(Vec<usize>, Vec<usize>)> {
    if removed.get(sink).copied().unwrap_or(false) || !graph.node(sink).is_egress() {
        return None;
    }
    let control = best_path(graph, sink, removed, Half::Control)?;
    let data = best_path(graph, sink, removed, Half::Data)?;
    Some((control, data))
}

/// Which half of the trifecta a search is for.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Half {
    /// Untrusted sources; any edges, last one control.
    Control,
    /// Confidential sources; data edges, no declassifier for the sink.
    Data,
}

/// True when `node` is a source for `half`.
pub(crate) fn is_source(node: &Node, half: Half) -> bool {
    let label = node.intrinsic_label();
    match half {
        Half::Control => label.integrity == Integrity::Untrusted,
        Half::Data => label.confidentiality >= Confidentiality::Internal,
    }
}

/// True when an edge of `kind` may be walked by `half` (`into_sink`: the
/// edge ends at the sink, so it is the path's last edge).
pub(crate) fn edge_allowed(kind: EdgeKind, half: Half, into_sink: bool) -> bool {
    match half {
        Half::Control => !into_sink || kind == EdgeKind::Control,
        Half::Data => kind == EdgeKind::Data,
    }
}

/// True when `node` blocks data paths to a sink with these egress
/// channels: it declassifies every one of them.
pub fn declassifies_for(node: &Node, sink_channels: &[Channel]) -> bool {
    !node.declassifies.is_empty() && sink_channels.iter().all(|c| node.declassifies.contains(c))
}

/// True when `node` may sit on a `half` path to a sink with these egress
/// channels (as source or hop).
pub(crate) fn passable(node: &Node, sink_channels: &[Channel], half: Half) -> bool {
    half == Half::Control || !declassifies_for(node, sink_channels)
}

/// The preferred source-to-sink path for one half: sources ranked by how
/// strong the evidence is (a real untrusted-input capability before a merely
/// declared label; for data the most secret first), then by distance, then
/// by id; the path walks to the smallest-id next hop. Deterministic for a
/// given graph whatever the order of its nodes and edges.
fn best_path(
    graph: &IndexedGraph<'_>,
    sink: usize,
    removed: &[bool],
    half: Half,
) -> Option<Vec<usize>> {
    // Computed once: the usable check runs for every edge of the search.
    let channels = graph.node(sink).egress_channels();
    let usable = |i: usize| {
        !removed.get(i).copied().unwrap_or(false) && passable(graph.node(i), &channels, half)
    };
    // Distance (in edges) from each node to the sink, walking edges backwards.
    let mut distance = vec![usize::MAX; graph.len()];
    let mut queue = VecDeque::new();
    for &(from, kind) in &graph.predecessors[sink] {
        if usable(from) && edge_allowed(kind, half, true) && distance[from] == usize::MAX {
            distance[from] = 1;
            queue.push_back(from);
        }
    }
    while let Some(at) = queue.pop_front() {
        for &(from, kind) in &graph.predecessors[at] {
            if usable(from) && edge_allowed(kind, half, false) && distance[from] == usize::MAX {
                distance[from] = distance[at] + 1;
                queue.push_back(from);
            }
        }
    }
    let rank = |i: usize| {
        let node = graph.node(i);
        let label = node.intrinsic_label();
        let evidence = match half {
            Half::Control => !node
                .capabilities
                .iter()
                .any(|c| c.effect == Effect::UntrustedInput),
            Half::Data => false,
        };
        let secrecy = std::cmp::Reverse(label.confidentiality);
        (evidence, secrecy, distance[i], node.id.as_str())
    };
    let source = (0..graph.len())
        .filter(|&i| distance[i] != usize::MAX && is_source(graph.node(i), half))
        .min_by(|&a, &b| rank(a).cmp(&rank(b)))?;
    // Walk forward along strictly decreasing distance, smallest id first.
    let mut path = vec![source];
    let mut at = source;
    while distance[at] > 1 {
        let next = graph.successors[at]
            .iter()
            .filter(|&&(to, kind)| {
                distance[to] == distance[at] - 1 && edge_allowed(kind, half, false)
            })
            .map(|&(to, _)| to)
            .min_by(|&a, &b| graph.node(a).id.cmp(&graph.node(b).id))?;
        path.push(next);
        at = next;
    }
    path.push(sink);
    Some(path)
}

/// Turns a path of indices into a witness with the evidence for each hop.
fn witness(graph: &IndexedGraph<'_>, path: &[usize], source_effect: Effect) -> Witness {
    let last = path.len().saturating_sub(1);
    let hops = path
        .iter()
        .enumerate()
        .map(|(position, &i)| {
            let node = graph.node(i);
            let evidence = |wanted: &dyn Fn(Effect) -> bool| {
                node.capabilities
                    .iter()
                    .filter(|c| wanted(c.effect))
                    .filter_map(|c| c.source.clone())
                    .min()
            };
            let source = if position == 0 {
                evidence(&|e| match source_effect {
                    Effect::UntrustedInput => e == Effect::UntrustedInput,
                    _ => matches!(e, Effect::ReadsSecret | Effect::ReadsInternal),
                })
                .or_else(|| node.source.clone())
            } else if position == last {
                evidence(&|e| e == Effect::Egress).or_else(|| node.source.clone())
            } else {
                node.source.clone()
            };
            Hop {
                node: node.id.clone(),
                source,
            }
        })
        .collect();
    Witness { path: hops }
}
