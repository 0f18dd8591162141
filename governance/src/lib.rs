//! What agentgate decides, as pure functions of the objects (docs/design.md
//! §3–§7): whether a ceiling is consistent, whether a proposal may be
//! applied, which maximums govern a sandbox and what its committed policy
//! is, who may write which object, what an admitted sandbox or pod must be,
//! the Pod that enforces a sandbox, and what an image's trifecta findings
//! mean for the sandbox that runs it. The verdict on a proposal (modes,
//! budgets, four eyes, review regions) asks its logical questions through
//! a proof engine trait ([`verdict::ProofEngine`]): the prover answers
//! them, and the verdict's tests can answer them with a fake. The controllers, the webhook server
//! and the CLI bring the objects, the caches, the time and the prover; no
//! Kubernetes client, HTTP or other I/O here.
#![warn(missing_docs)]

pub mod access;
pub mod admission;
pub mod authority;
pub mod budget;
pub mod convert;
pub mod credentials;
pub mod enforcement;
pub mod findings;
pub mod governing;
pub mod maximum;
pub mod pod_admission;
pub mod pod_template;
pub mod proposal;
pub mod reverify;
pub mod sandbox_pod;
pub mod selector;
pub mod severing;
pub mod verdict;
