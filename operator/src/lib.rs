#![warn(missing_docs)]
//! agentgate: keeps AI agents inside the authority their operators grant
//! them. This crate holds the pure core (policy language, prover, verdicts)
//! and the command-line interface; see docs/architecture.md.

pub mod cli;
pub mod controller;
pub mod k8s;
pub mod pki;
/// The policy language lives in its own crate so the data plane can link it
/// without Z3 or kube (DESIGN.md §10); re-exported under its old path.
pub use agentgate_policy as policy;
pub mod prover;
pub mod trifecta;
pub mod verdict;
pub mod webhook;
