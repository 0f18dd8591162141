//! The runtime's Kubernetes plumbing: watch caches and the permissions the
//! operator and its webhook use. The API types live in `agentgate_api`, the
//! pure rules over them in `agentgate_governance`.

pub mod cache;
pub mod events;
pub mod permissions;
