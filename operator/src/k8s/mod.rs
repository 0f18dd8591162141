//! Kubernetes types: the custom resources (DESIGN.md §3).

pub mod crd;
