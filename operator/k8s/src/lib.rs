#![warn(missing_docs)]
//! What the operator's roles (the reconcilers, the webhook server, the
//! command line) share, naming none of them: watch caches, every
//! permission they use, Events, the prometheus-client registry, the
//! data-plane flags and certificate material. The roles are crates of
//! their own above this one; `agentgate`'s runtime wires them
//! (docs/architecture.md).

pub mod data_plane;
pub mod k8s;
pub mod metrics;
pub mod pki;

/// The field manager of every write the operator and its webhook make.
pub const FIELD_MANAGER: &str = "agentgate";
