#![warn(missing_docs)]
//! agentgate: keeps AI agents inside the authority their operators grant
//! them. This crate is the runtime (docs/design.md §2): the reconcilers, the
//! webhook server, the CLI and the certificates they serve, thin shells of
//! Kubernetes and network I/O around the pure crates below — the policy
//! language (`agentgate-policy`), the prover and verdict
//! (`agentgate-prover`), the trifecta model and scanners
//! (`agentgate-trifecta`), the API types (`agentgate-api`) and the
//! governance rules (`agentgate-governance`).

pub mod cli;
pub mod controller;
mod data_plane;
pub mod k8s;
pub mod metrics;
mod pki;
pub mod runtime;
pub mod webhook;

/// The field manager of every write the operator and its webhook make.
pub const FIELD_MANAGER: &str = "agentgate";
