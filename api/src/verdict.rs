//! The wire form of the verdict's vocabulary: the sandbox mode a
//! MaximumPolicy allows and an AgentSandbox chooses, the decision and the
//! priced items a PolicyProposal's status reports. These are the API's own
//! types, not the prover's: their serde and schema shape is the published
//! `v1alpha1` contract, so a change to the verdict cannot change the CRD by
//! accident. agentgate-governance converts between the two (`convert`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The sandbox mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Every new grant needs approval.
    Ask,
    /// Grants inside the auto-eligible region and budget apply themselves.
    Auto,
}

/// Apply, Ask or Reject (ActGov: ALLOW, REQUIRE_APPROVAL, DENY).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum Decision {
    /// Commit it.
    Apply,
    /// Wait for a reviewer.
    Ask,
    /// Refuse it.
    Reject,
}

/// One priced item of a delta.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CostItem {
    /// What was priced, e.g. `network[github].endpoints[0]: host wildcard *.github.com`.
    pub item: String,
    /// Its weight.
    pub weight: u32,
}
