//! The `agentgate.dev/v1alpha1` API (docs/design.md §3): the custom
//! resources and their generated CRD YAML, the status conditions every kind
//! carries (docs/status.md), and the OpenReports objects a scan publishes.
//! The API owns every type its objects carry (`scan`, `verdict`): none comes
//! from the domain crates, so the published schema changes only here.
//! It also reads agentgate's documents as the CLI does (`documents`): the
//! kinds and their spec fields are the API's.
//! Kubernetes core types and the derive only: no client, no I/O.
#![warn(missing_docs)]

pub mod conditions;
pub mod crd;
pub mod documents;
pub mod openreports;
pub mod scan;
pub mod verdict;
