#![warn(missing_docs)]
//! agentgate: keeps AI agents inside the authority their operators grant
//! them. This crate is the runtime (docs/design.md §2): the `agentgate`
//! and `kubectl-agentgate` binaries and [`runtime`], which wires the
//! operator's roles, each a crate of its own: the reconcilers
//! (`agentgate-controller`), the webhook server (`agentgate-webhook`), the
//! offline command line (`agentgate-cli`), over what they share
//! (`agentgate-k8s`) and the pure crates below — the policy language, the
//! runtime judgement, the prover, the trifecta model and scanners, the API
//! types and the governance rules. The roles are re-exported here under
//! their old paths.

pub use agentgate_cli as cli;
pub use agentgate_controller as controller;
pub use agentgate_k8s::{FIELD_MANAGER, data_plane, k8s, metrics, pki};
pub use agentgate_webhook as webhook;

pub mod runtime;
