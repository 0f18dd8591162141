//! Lethal-trifecta findings (docs/design.md §1, §7): the agent information-flow
//! graph, label propagation, the trifecta query with witness paths, the
//! minimum vertex cut that fixes a finding, the scanners that build the graph
//! from agent source, and the reports. Pure: no Kubernetes or network I/O.

#![warn(missing_docs)]

pub mod graph;
pub mod scan;

pub use graph::{
    Capability, Channel, Confidentiality, Destination, Edge, EdgeKind, Effect, Graph, GraphError,
    IndexedGraph, Integrity, LLM, Label, Node, NodeKind, SourceLocation,
};

pub mod analysis;
pub mod cut;
pub mod fixtures;
pub mod image;
pub mod lattice;
pub mod report;

pub use analysis::{Finding, Hop, Severity, TRIFECTA_ID, Witness, analyze};
