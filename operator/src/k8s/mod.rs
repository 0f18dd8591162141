//! Kubernetes types and pure helpers: the custom resources (DESIGN.md §3),
//! label selectors and conditions. No I/O here; the controllers use these.

pub mod access;
pub mod cache;
pub mod conditions;
pub mod crd;
pub mod governance;
pub mod openreports;
pub mod permissions;
pub mod pod_template;
pub mod sandbox_pod;
pub mod selector;
