//! The custom resources of docs/design.md §3 (group `agentgate.dev`, version
//! `v1alpha1`, category `agentgate`). The CRD YAML in `crds/` is generated
//! from these types by `agentgate crds`; a test fails when it drifts.

// Each `printcolumn(...)` repeats keys like `type_ = "string"`, which this
// lint takes for duplicated attributes.
#![allow(clippy::duplicated_attributes)]

use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube_core::CustomResourceExt;
use kube_derive::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::scan::{Finding, Graph, Severity};
use crate::verdict::{CostItem, Decision, Mode};
use agentgate_policy::action::{Access, Action, Layer, McpKind};
use agentgate_policy::model::{Budget, Invariant, PolicyDocument};

/// The label the operator puts on everything it creates for a sandbox.
pub const SANDBOX_LABEL: &str = "agentgate.dev/sandbox";

/// The condition types only a reviewer may set on a PolicyProposal.
pub const REVIEW_CONDITIONS: [&str; 2] = ["Approved", "Denied"];

/// The verb a reviewer needs on `policyproposals.agentgate.dev`.
pub const APPROVE_VERB: &str = "approve";

/// How a review condition's message begins: `approved by "alice"` (the
/// name quoted, so any user name reads back unambiguously).
pub fn review_message_prefix(condition_type: &str, username: &str) -> String {
    format!("{} by {username:?}", condition_type.to_lowercase())
}

/// The reviewer a review condition's message names (see
/// [`review_message_prefix`]), if it is in that form.
pub fn reviewer_in(condition_type: &str, message: &str) -> Option<String> {
    let quoted = message.strip_prefix(&format!("{} by ", condition_type.to_lowercase()))?;
    let mut chars = quoted.char_indices();
    if chars.next()?.1 != '"' {
        return None;
    }
    // The name ends at the first unescaped quote.
    let mut escaped = false;
    for (i, c) in chars {
        match c {
            '\\' if !escaped => escaped = true,
            '"' if !escaped => return serde_json::from_str(&quoted[..=i]).ok(),
            _ => escaped = false,
        }
    }
    None
}

/// Which sandboxes a MaximumPolicy governs; empty selects all.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GovernedSelector {
    /// Namespaces whose labels match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,
    /// Sandboxes whose labels match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox_selector: Option<LabelSelector>,
}

/// A ceiling on the authority of every sandbox it selects.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    crates(kube_core = "::kube_core"),
    group = "agentgate.dev",
    version = "v1alpha1",
    kind = "MaximumPolicy",
    shortname = "maxpol",
    category = "agentgate",
    status = "MaximumPolicyStatus",
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Consistent",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Consistent\")].status"
    ),
    printcolumn(
        name = "Governed",
        type_ = "integer",
        json_path = ".status.governedSandboxes"
    ),
    printcolumn(
        name = "Message",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].message",
        priority = "1"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct MaximumPolicySpec {
    /// Which sandboxes it governs; absent or empty selects all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<GovernedSelector>,
    /// Modes governed sandboxes may use.
    #[serde(default = "all_modes")]
    pub allowed_modes: Vec<Mode>,
    /// Mode for sandboxes that do not choose one.
    #[serde(default = "ask")]
    pub default_mode: Mode,
    /// The ceiling; endpoints and rules may carry `review`.
    #[serde(default)]
    pub policy: PolicyDocument,
    /// Regions no governed policy may allow any action in.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub invariants: Vec<Invariant>,
    /// Least-privilege budget for auto-applied agent proposals.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<Budget>,
    /// How proposals in review-required regions are reviewed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub review: Option<ReviewSettings>,
}

/// Review settings of a MaximumPolicy.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReviewSettings {
    /// A proposal whose new authority lies in a review-required region
    /// waits for a second person even when its requester holds `approve`.
    #[serde(default)]
    pub four_eyes: bool,
}

fn all_modes() -> Vec<Mode> {
    vec![Mode::Ask, Mode::Auto]
}

fn ask() -> Mode {
    Mode::Ask
}

/// Observed state of a MaximumPolicy.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MaximumPolicyStatus {
    /// `Consistent` (False when the ceiling intersects its own invariants),
    /// `Ready` (True when valid and consistent) and `Stalled` (when not):
    /// see docs/status.md.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// The generation the status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// How many sandboxes it governs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub governed_sandboxes: Option<u32>,
}

/// An explicit, expiring acceptance of a trifecta finding.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AcceptedFinding {
    /// Finding id, e.g. `AG-TRIFECTA`.
    pub id: String,
    /// The sink tool the acceptance covers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sink: Option<String>,
    /// Why the risk is accepted.
    pub reason: String,
    /// RFC 3339 time after which the acceptance no longer counts.
    pub expires: String,
}

/// An agent pod plus the network and filesystem policy it runs under.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    crates(kube_core = "::kube_core"),
    group = "agentgate.dev",
    version = "v1alpha1",
    kind = "AgentSandbox",
    namespaced,
    shortname = "asbx",
    category = "agentgate",
    status = "AgentSandboxStatus",
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Within",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"WithinMaximum\")].status"
    ),
    printcolumn(name = "Revision", type_ = "integer", json_path = ".status.revision"),
    printcolumn(
        name = "Enforced",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Enforced\")].reason"
    ),
    printcolumn(
        name = "Message",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].message",
        priority = "1"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct AgentSandboxSpec {
    /// `ask` or `auto`; must be allowed by every governing maximum.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<Mode>,
    /// The identity whose proposals count as agent-authored.
    pub agent_service_account: String,
    /// The agent pod; the operator creates and owns it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<PodTemplateSpec>,
    /// The declared base policy (owned by git).
    #[serde(default)]
    pub policy: PolicyDocument,
    /// Explicit, expiring risk acceptances (need the `approve` verb).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub accepted_findings: Vec<AcceptedFinding>,
    /// What the proxy does when a call completes the flow an unfixed
    /// trifecta finding predicts (docs/trifecta.md, "At run time"):
    /// `enforce` (default) refuses it, `audit` forwards it and logs it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_trifecta: Option<agentgate_policy::model::RuntimeMode>,
    /// Trifecta labels for tools of the sandbox's images, over what their
    /// AgentScans say (docs/trifecta.md, "Labels per sandbox"): the same
    /// image may read mail from strangers in one sandbox and from a
    /// colleague in another. Raising (`untrusted`, `secret`) needs nothing;
    /// lowering (`trusted`, `internal`, `public`) accepts risk and needs the
    /// `approve` verb.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256))]
    pub tool_labels: Vec<ToolLabel>,
    /// Credentials the agent holds only as placeholders
    /// (docs/policy-semantics.md §9): each names a Secret key that only the
    /// proxy container mounts, what the agent sees instead, and how the
    /// proxy attaches the secret to the requests the policy binds it to
    /// (`network[].credentials`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub credentials: Vec<agentgate_policy::credentials::Credential>,
}

/// One tool's labels in a sandbox's `toolLabels`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ToolLabel {
    /// The tool: its node id in the AgentScan graph, or its `tools/call`
    /// name (`mcp.name`); every node either names is labelled.
    #[schemars(length(min = 1, max = 253))]
    pub tool: String,
    /// Whether its output may be written by an attacker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub integrity: Option<ToolIntegrity>,
    /// How secret its output is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confidentiality: Option<ToolConfidentiality>,
}

impl ToolLabel {
    /// True when the label may lower what the scan says (`trusted`,
    /// `internal`, `public`): that accepts risk.
    pub fn lowers(&self) -> bool {
        self.integrity == Some(ToolIntegrity::Trusted)
            || matches!(
                self.confidentiality,
                Some(ToolConfidentiality::Public | ToolConfidentiality::Internal)
            )
    }
}

/// A tool's integrity in a sandbox.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ToolIntegrity {
    /// Content an attacker may control: an untrusted input.
    Untrusted,
    /// Content the operator controls: no untrusted input, whatever the
    /// scanner found.
    Trusted,
}

/// A tool's confidentiality in a sandbox.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ToolConfidentiality {
    /// Anyone may see it.
    Public,
    /// Business data.
    Internal,
    /// Credentials, keys, private data: a secret.
    Secret,
}

/// Trifecta findings of the sandbox's images, as last evaluated against its
/// committed effective policy.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FindingsSummary {
    /// The effective-policy revision the severance proofs used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<u64>,
    /// All findings, over every image.
    #[serde(default)]
    pub total: u32,
    /// Findings neither severed by the policy nor accepted.
    #[serde(default)]
    pub unfixed: u32,
    /// Per container image of the template.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<ImageFindings>,
}

/// The findings of one container image.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageFindings {
    /// The image reference as the template names it.
    pub image: String,
    /// The AgentScan used, if one exists for the image's digest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scan: Option<String>,
    /// The AgentScan's uid (a scan recreated under the same name is another scan).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scan_uid: Option<String>,
    /// The AgentScan generation the findings come from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scan_generation: Option<i64>,
    /// Why the image could not be evaluated (unpinned, no scan, bad graph).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
    /// One entry per finding.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub findings: Vec<FindingRecord>,
}

/// Whether a finding still threatens a sandbox.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum FindingState {
    /// Neither severed nor accepted.
    Unfixed,
    /// The effective policy disables every node of a vertex cut.
    Severed,
    /// An unexpired `acceptedFindings` entry covers it.
    Accepted,
}

/// One finding of an image, as it stands for one sandbox.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FindingRecord {
    /// Finding id, e.g. `AG-TRIFECTA`.
    pub id: String,
    /// The egress node.
    pub sink: String,
    /// CRITICAL, HIGH or MEDIUM.
    pub severity: Severity,
    /// Unfixed, Severed or Accepted.
    pub state: FindingState,
    /// The finding on one line with both witnesses.
    pub message: String,
    /// The smallest fix.
    pub fix: String,
    /// The nodes the policy disables (when Severed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub severed_by: Vec<String>,
    /// When the acceptance runs out (when Accepted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accepted_until: Option<String>,
}

/// Observed state of an AgentSandbox.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentSandboxStatus {
    /// Base policy plus applied proposals, as committed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effective_policy: Option<PolicyDocument>,
    /// Increments on every commit.
    #[serde(default)]
    pub revision: u64,
    /// Commit records of the proposals in the effective policy, in commit
    /// order. The effective policy is rebuilt only from entries whose live
    /// proposal still matches the record's uid and change hash.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "records_or_names"
    )]
    pub applied_proposals: Vec<AppliedProposal>,
    /// Names of the governing MaximumPolicies.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub governed_by: Vec<String>,
    /// The governing MaximumPolicies and the generation of each that the
    /// effective policy was last proved within: after a ceiling changes,
    /// the sandbox is re-verified once this shows its new generation.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub verified_against: Vec<MaximumRef>,
    /// Trifecta findings of the image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub findings: Option<FindingsSummary>,
    /// Each declared credential's reach in the effective policy and whether
    /// the proxy can attach it (docs/policy-semantics.md §9).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub credentials: Vec<CredentialReach>,
    /// `sha256:…` of the policy ConfigMap's data as the operator commits it
    /// (docs/design.md §10, "Delivery"): the policy stream pushes that
    /// ConfigMap to the sandbox's proxy only while it has this digest, so an
    /// edit by anyone else is never pushed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_digest: Option<String>,
    /// When the operator committed `policyDigest` (RFC 3339): where the
    /// commit → enforced latency of each Pod is measured from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_committed_at: Option<String>,
    /// What each of the sandbox's Pods reports it enforces (docs/status.md):
    /// written when its proxy confirms a pushed update.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pods: Vec<PodEnforcement>,
    /// `WithinMaximum`, `FindingsClear`, `Ready` (True when the committed
    /// policy is within every maximum and the pod can run) and `Reconciling`
    /// or `Stalled` when it is not: see docs/status.md.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// The generation the status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// The sandbox condition that says whether its Pods enforce the committed
/// policy (docs/status.md): `Pending`, `NotConfirmed` or `Applied`.
pub const ENFORCED_CONDITION: &str = "Enforced";

/// The policy a sandbox Pod's proxy reports it enforces.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodEnforcement {
    /// The Pod's name.
    pub name: String,
    /// The revision it enforces.
    pub revision: u64,
    /// The digest of the policy ConfigMap it enforces.
    pub digest: String,
    /// When it reported it (RFC 3339).
    pub applied_at: String,
}

/// A declared credential as the status shows it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CredentialReach {
    /// The credential's name.
    pub name: String,
    /// `SECRET/KEY` it is read from (never its value).
    pub secret: String,
    /// Whether the proxy can attach it: the Secret and key exist and the
    /// value can travel in its attach form.
    pub available: bool,
    /// Why it cannot, when it cannot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The rules of the effective policy that bind it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bound_by: Vec<String>,
    /// One line per endpoint it may be attached to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reach: Vec<String>,
}

/// The operator's record of one committed proposal (docs/design.md §5): what was
/// proved and who decided. A proposal deleted and created again under the
/// same name has another uid, and a changed one another hash, so neither
/// inherits this grant.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AppliedProposal {
    /// The proposal's name.
    pub name: String,
    /// Its `metadata.uid` when it was committed.
    pub uid: String,
    /// Its `metadata.generation` when it was committed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,
    /// SHA-256 of the `add` and `remove` that were proved.
    pub change_hash: String,
    /// `auto` (the verdict applied it), `requester:<user>` (a requester who
    /// holds approve) or `reviewer:<user>` (an Approved condition).
    pub decided_by: String,
    /// When the decision was taken (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<String>,
    /// The network rules it removed: they stay removed even when the
    /// record is pruned (withdrawing a narrowing must not widen).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub removed: Vec<String>,
    /// Set when the proposal was deleted, re-created or changed: its grant
    /// is dropped and only its removals still apply, until the sandbox's
    /// declared spec changes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pruned: Option<Pruned>,
}

/// Reads `appliedProposals` as commit records, or as the bare names
/// releases before 0.2 wrote: a name becomes a record that matches no
/// proposal (no uid), so the next reconcile prunes its grant instead of
/// every reader failing on the old shape.
fn records_or_names<'de, D>(deserializer: D) -> Result<Vec<AppliedProposal>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Entry {
        Record(AppliedProposal),
        Name(String),
    }
    let entries = Vec::<Entry>::deserialize(deserializer)?;
    Ok(entries
        .into_iter()
        .map(|entry| match entry {
            Entry::Record(record) => record,
            Entry::Name(name) => AppliedProposal {
                name,
                decided_by: "unrecorded (before 0.2)".into(),
                ..AppliedProposal::default()
            },
        })
        .collect())
}

/// Why and when a commit record stopped granting.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Pruned {
    /// What happened to the proposal.
    pub reason: String,
    /// The sandbox's `metadata.generation` then: once the declared spec
    /// changes, the record (and its removals) is dropped, since a person
    /// has declared the policy anew.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox_generation: Option<i64>,
}

/// A reference to a sandbox in the proposal's namespace.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct SandboxRef {
    /// The AgentSandbox's name.
    pub name: String,
}

/// Grants a proposal removes (narrowing is always allowed).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct Removal {
    /// Names of network rules to remove.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub network: Vec<String>,
}

/// An agent (or a person) asking for a change of a sandbox's authority.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    crates(kube_core = "::kube_core"),
    group = "agentgate.dev",
    version = "v1alpha1",
    kind = "PolicyProposal",
    namespaced,
    shortname = "pprop",
    category = "agentgate",
    status = "PolicyProposalStatus",
    printcolumn(
        name = "Sandbox",
        type_ = "string",
        json_path = ".spec.sandboxRef.name"
    ),
    printcolumn(name = "Verdict", type_ = "string", json_path = ".status.verdict"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(
        name = "Reason",
        type_ = "string",
        json_path = ".status.reason",
        priority = "1"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct PolicyProposalSpec {
    /// The sandbox to change.
    pub sandbox_ref: SandboxRef,
    /// Requested new grants.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub add: Option<PolicyDocument>,
    /// Requested removals.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remove: Option<Removal>,
    /// Why, in the requester's words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rationale: Option<String>,
    /// The creating user (checked by the webhook).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_by: Option<String>,
}

impl PolicyProposalSpec {
    /// The network rules it asks to remove (`remove.network`).
    pub fn removed_rules(&self) -> &[String] {
        self.remove.as_ref().map_or(&[], |r| r.network.as_slice())
    }

    /// SHA-256 of the change this proposal asks for (`add` and `remove`),
    /// as recorded when it is committed: a commit holds only while the live
    /// proposal still asks for exactly what was proved.
    pub fn change_hash(&self) -> String {
        use sha2::{Digest, Sha256};
        let change = serde_json::json!({"add": self.add, "remove": self.remove});
        let json = serde_json::to_vec(&change).unwrap_or_default();
        format!("sha256:{}", hex::encode(Sha256::digest(&json)))
    }
}

impl AppliedProposal {
    /// Whether this record still describes `proposal`: the same object
    /// (uid) asking for the same change (hash).
    pub fn matches(&self, proposal: &PolicyProposal) -> bool {
        proposal.metadata.uid.as_deref() == Some(self.uid.as_str())
            && proposal.spec.change_hash() == self.change_hash
    }
}

/// Where a proposal is in its life.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum Phase {
    /// Not decided yet.
    Pending,
    /// Waiting for a reviewer's `Approved` or `Denied` condition.
    AwaitingApproval,
    /// Committed into the sandbox's effective policy.
    Applied,
    /// Refused.
    Rejected,
    /// Overtaken by a newer change.
    Superseded,
}

/// The proof behind a verdict.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProofRecord {
    /// `within`, `exceeds`, `unsupported` or `inconclusive`.
    pub result: String,
    /// The encoding version.
    pub model: String,
    /// The maximums proved against, with the generations seen.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub maximums: Vec<MaximumRef>,
    /// The sandbox revision the candidate was built on.
    #[serde(default)]
    pub sandbox_revision: u64,
    /// Content hash of the candidate policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub candidate_hash: Option<String>,
    /// Solver wall-clock milliseconds.
    #[serde(default)]
    pub solver_millis: f64,
}

/// A concrete action in a status: the keys of `verify --output json`'s
/// counterexample, flat (a structural schema cannot hold a tagged union).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct ActionRecord {
    /// `network`, `filesystem` or `mcp`.
    pub kind: ActionKind,
    /// Network: the executable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binary: Option<String>,
    /// Network: the host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// Network: the port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// Network: `l4` or `rest`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layer: Option<Layer>,
    /// Network: the HTTP method (empty for l4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    /// The request path (network) or file path (filesystem).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Filesystem: `read` or `write`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access: Option<Access>,
    /// MCP: `tool`, `resource` or `prompt`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call: Option<McpKind>,
    /// MCP: the tool or prompt name, or the resource URI.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// MCP: the call's arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "json_object_schema")]
    pub args: Option<serde_json::Map<String, serde_json::Value>>,
    /// Network and MCP: the credential the request carries
    /// (docs/policy-semantics.md §9).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credential: Option<String>,
}

/// The schema of a JSON object whose members the schema does not fix; the
/// API server keeps them only with `x-kubernetes-preserve-unknown-fields`.
fn json_object_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true
    })
}

/// The kind of an [`ActionRecord`].
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ActionKind {
    /// A connection or request.
    #[default]
    Network,
    /// A file access.
    Filesystem,
    /// A tool, resource or prompt call on an MCP server.
    Mcp,
}

impl From<&Action> for ActionRecord {
    fn from(action: &Action) -> Self {
        match action {
            Action::Network(a) => ActionRecord {
                kind: ActionKind::Network,
                binary: Some(a.binary.clone()),
                host: Some(a.host.clone()),
                port: Some(a.port),
                layer: Some(a.layer),
                method: Some(a.method.clone()),
                path: Some(a.path.clone()),
                credential: a.credential.clone(),
                ..ActionRecord::default()
            },
            Action::Filesystem(a) => ActionRecord {
                kind: ActionKind::Filesystem,
                path: Some(a.path.clone()),
                access: Some(a.access),
                ..ActionRecord::default()
            },
            Action::Mcp(t) => ActionRecord {
                kind: ActionKind::Mcp,
                binary: Some(t.binary.clone()),
                host: Some(t.host.clone()),
                port: Some(t.port),
                path: Some(t.path.clone()),
                call: Some(t.kind),
                name: Some(t.name.clone()),
                args: Some(t.args.clone()),
                credential: t.credential.clone(),
                ..ActionRecord::default()
            },
        }
    }
}

/// A maximum and the generation a proof saw.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct MaximumRef {
    /// Its name.
    pub name: String,
    /// Its `metadata.generation`.
    pub generation: i64,
}

/// Observed state of a PolicyProposal.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyProposalStatus {
    /// Apply, Ask or Reject.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict: Option<Decision>,
    /// Where the proposal is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    /// One line a person can act on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The action behind the verdict.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counterexample: Option<ActionRecord>,
    /// Up to 3 example actions the proposal adds.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub new_authority: Vec<ActionRecord>,
    /// Least-privilege cost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<u32>,
    /// The cost's breakdown.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cost_breakdown: Vec<CostItem>,
    /// The proof record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proof: Option<ProofRecord>,
    /// `Approved`, `Denied` (set by reviewers), `Ready` (True once
    /// applied), `Reconciling` (awaiting approval, or its sandbox) and
    /// `Stalled` (rejected): see docs/status.md.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// The generation the status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// A tool call held for a person's approval (`mode: ask`,
/// docs/policy-semantics.md §8.6). The operator writes it when a sandbox's
/// proxy holds a call; a reviewer with the `approve` verb on heldcalls
/// decides it with `kubectl agentgate approve|deny heldcall/NAME` (the
/// `Approved` or `Denied` condition, never by the agent itself); the
/// operator writes `Expired` when nobody decides in time. The spec never
/// changes: an approval covers exactly the call that was shown.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    crates(kube_core = "::kube_core"),
    group = "agentgate.dev",
    version = "v1alpha1",
    kind = "HeldCall",
    namespaced,
    shortname = "hcall",
    category = "agentgate",
    status = "HeldCallStatus",
    printcolumn(
        name = "Sandbox",
        type_ = "string",
        json_path = ".spec.sandboxRef.name"
    ),
    printcolumn(name = "Tool", type_ = "string", json_path = ".spec.tool"),
    printcolumn(name = "Decision", type_ = "string", json_path = ".status.decision"),
    printcolumn(name = "Expires", type_ = "string", json_path = ".spec.expiresAt"),
    printcolumn(
        name = "Arguments",
        type_ = "string",
        json_path = ".spec.arguments",
        priority = "1"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct HeldCallSpec {
    /// The sandbox whose proxy holds the call.
    pub sandbox_ref: SandboxRef,
    /// The sandbox Pod the call came from.
    pub pod: String,
    /// The agent's identity (the Pod's ServiceAccount): it may never
    /// decide its own call.
    pub requester: String,
    /// The JSON-RPC method: `tools/call`.
    pub kind: String,
    /// The tool.
    pub tool: String,
    /// The call's arguments as JSON text, exactly as the agent sent them.
    pub arguments: String,
    /// The MCP server: `host:port/path`.
    pub server: String,
    /// The binary in the sandbox that sent it.
    pub binary: String,
    /// The rule whose `mode: ask` entry held it.
    pub rule: String,
    /// Why no allow entry let it through.
    pub reason: String,
    /// When the proxy stops waiting and refuses the call (RFC 3339).
    pub expires_at: String,
}

/// How a held call ended, as the operator answered the proxy.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum HeldCallDecision {
    /// A reviewer approved it: it was forwarded.
    Approved,
    /// A reviewer denied it: the agent read a refusal.
    Denied,
    /// Nobody decided in time: the agent read a refusal.
    Expired,
}

/// What became of a held call.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HeldCallStatus {
    /// The answer the proxy got (written by the operator).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<HeldCallDecision>,
    /// `Approved`, `Denied` (set by reviewers) and `Expired` (set by the
    /// operator): see docs/status.md.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// An information-flow graph of an agent image, written by CI.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    crates(kube_core = "::kube_core"),
    group = "agentgate.dev",
    version = "v1alpha1",
    kind = "AgentScan",
    shortname = "ascan",
    category = "agentgate",
    status = "AgentScanStatus",
    printcolumn(name = "Image", type_ = "string", json_path = ".spec.image"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Message",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].message",
        priority = "1"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct AgentScanSpec {
    /// The image, pinned by digest.
    pub image: String,
    /// The information-flow graph (see docs/trifecta.md).
    #[serde(default)]
    pub graph: Graph,
}

/// Observed state of an AgentScan.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentScanStatus {
    /// Findings recomputed by the operator (the scanner's own list is not trusted).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub findings: Vec<Finding>,
    /// `FindingsClear`, `Ready` (True when the graph has no findings) and
    /// `Stalled` (findings, or an invalid graph): see docs/status.md.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// The generation the status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// Every CRD, in a stable order.
pub fn all() -> Vec<CustomResourceDefinition> {
    let mut all = vec![
        MaximumPolicy::crd(),
        AgentSandbox::crd(),
        PolicyProposal::crd(),
        AgentScan::crd(),
        HeldCall::crd(),
    ];
    for definition in &mut all {
        without_status_rules(definition);
    }
    all
}

/// Takes the CEL rules (`x-kubernetes-validations`) out of every version's
/// `status` schema. Only the operator writes a status (the webhook refuses
/// everyone else), and only what it compiled; yet the API server would
/// evaluate them on every status write, and a re-verification storm is
/// mostly status writes (docs/benchmarks.md). The same rules still guard
/// `spec`.
fn without_status_rules(definition: &mut CustomResourceDefinition) {
    for version in &mut definition.spec.versions {
        let status = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
            .and_then(|s| s.properties.as_mut())
            .and_then(|p| p.get_mut("status"));
        if let Some(status) = status {
            strip_rules(status);
        }
    }
}

/// Removes `x-kubernetes-validations` from `schema` and everything under it.
fn strip_rules(schema: &mut JSONSchemaProps) {
    schema.x_kubernetes_validations = None;
    let children = schema
        .properties
        .iter_mut()
        .flat_map(|p| p.values_mut())
        .chain(schema.all_of.iter_mut().flatten())
        .chain(schema.any_of.iter_mut().flatten())
        .chain(schema.one_of.iter_mut().flatten())
        .chain(schema.not.as_deref_mut())
        .chain(match schema.items.as_mut() {
            Some(JSONSchemaPropsOrArray::Schema(one)) => std::slice::from_mut(one.as_mut()),
            Some(JSONSchemaPropsOrArray::Schemas(many)) => many.as_mut_slice(),
            None => &mut [],
        })
        .chain(match schema.additional_properties.as_mut() {
            Some(JSONSchemaPropsOrBool::Schema(one)) => Some(one.as_mut()),
            _ => None,
        });
    for child in children {
        strip_rules(child);
    }
}

impl std::fmt::Display for ActionRecord {
    /// The same one-line form as [`Action`]'s, with `?` for a missing field.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let text = |v: &Option<String>| v.clone().unwrap_or_else(|| "?".into());
        match self.kind {
            ActionKind::Filesystem => write!(
                f,
                "{} {}",
                self.access.map(|a| a.as_str()).unwrap_or("?"),
                text(&self.path)
            ),
            ActionKind::Network => {
                let port = self
                    .port
                    .map(|p| p.to_string())
                    .unwrap_or_else(|| "?".into());
                match self.layer {
                    Some(Layer::L4) => write!(
                        f,
                        "connect {}:{port} by {}",
                        text(&self.host),
                        text(&self.binary)
                    )?,
                    _ => write!(
                        f,
                        "{} https://{}:{port}{} by {}",
                        text(&self.method),
                        text(&self.host),
                        text(&self.path),
                        text(&self.binary)
                    )?,
                }
                if let Some(credential) = &self.credential {
                    write!(f, " with credential {credential}")?;
                }
                let layer = match self.layer {
                    Some(Layer::L4) => "l4",
                    _ => "rest",
                };
                write!(f, " (layer {layer})")
            }
            ActionKind::Mcp => {
                let method = self.call.map_or("?", McpKind::method);
                write!(f, "{method} {}", text(&self.name))?;
                if self.call != Some(McpKind::Resource) {
                    let args = serde_json::Value::Object(self.args.clone().unwrap_or_default());
                    write!(f, " {args}")?;
                }
                write!(
                    f,
                    " by {} on {}:{}{}",
                    text(&self.binary),
                    text(&self.host),
                    self.port.map_or_else(|| "?".into(), |p| p.to_string()),
                    text(&self.path)
                )?;
                match &self.credential {
                    Some(credential) => write!(f, " with credential {credential}"),
                    None => Ok(()),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// The schema of `field` (`spec` or `status`) of `definition`'s first
    /// version, as JSON text; `None` when it has no such field.
    fn schema_text(definition: &CustomResourceDefinition, field: &str) -> Option<String> {
        let schema = definition.spec.versions[0]
            .schema
            .as_ref()
            .and_then(|s| s.open_api_v3_schema.as_ref())
            .and_then(|s| s.properties.as_ref())
            .and_then(|p| p.get(field))?;
        Some(serde_json::to_string(schema).unwrap())
    }

    #[test]
    fn cel_rules_guard_specs_and_no_status() {
        let rules = "x-kubernetes-validations";
        let all = all();
        for definition in &all {
            let kind = &definition.spec.names.kind;
            if let Some(status) = schema_text(definition, "status") {
                assert!(!status.contains(rules), "{kind}: a CEL rule in status");
            }
        }
        // The sandbox's effective policy (status) has the endpoint type of
        // its declared policy (spec), whose rule stays.
        let sandbox = all
            .iter()
            .find(|d| d.spec.names.kind == "AgentSandbox")
            .unwrap();
        assert!(schema_text(sandbox, "spec").unwrap().contains(rules));
        assert!(
            schema_text(sandbox, "status")
                .unwrap()
                .contains("effectivePolicy")
        );
    }

    #[test]
    fn action_records_print_as_the_actions_do() {
        use agentgate_policy::action::{McpAction, NetworkAction};
        let actions = [
            Action::Mcp(McpAction {
                binary: "/usr/bin/python3".into(),
                host: "bank.internal".into(),
                port: 443,
                path: "/mcp".into(),
                kind: McpKind::Tool,
                name: "send_money".into(),
                args: serde_json::json!({"recipient": "x", "amount": 101})
                    .as_object()
                    .cloned()
                    .unwrap(),
                sources: None,
                credential: None,
            }),
            Action::Mcp(McpAction {
                binary: "/usr/bin/python3".into(),
                host: "bank.internal".into(),
                port: 443,
                path: "/mcp".into(),
                kind: McpKind::Resource,
                name: "file:///reports/q3".into(),
                args: serde_json::Map::new(),
                sources: None,
                credential: None,
            }),
            Action::Network(NetworkAction {
                binary: "/usr/bin/gh".into(),
                host: "api.github.com".into(),
                port: 443,
                layer: Layer::Rest,
                method: "GET".into(),
                path: "/repos".into(),
                credential: None,
                query: Default::default(),
                upgrade: None,
            }),
            Action::Network(NetworkAction {
                binary: "/usr/bin/gh".into(),
                host: "api.github.com".into(),
                port: 443,
                layer: Layer::Rest,
                method: "POST".into(),
                path: "/repos/acme/prod/issues".into(),
                credential: Some("github-token".into()),
                query: Default::default(),
                upgrade: None,
            }),
            Action::Network(NetworkAction {
                binary: "/usr/bin/gh".into(),
                host: "api.github.com".into(),
                port: 443,
                layer: Layer::L4,
                method: String::new(),
                path: String::new(),
                credential: Some("github-token".into()),
                query: Default::default(),
                upgrade: None,
            }),
        ];
        for action in actions {
            let record = ActionRecord::from(&action);
            assert_eq!(record.to_string(), action.to_string());
            // The record survives the API server's JSON round trip.
            let back: ActionRecord =
                serde_json::from_value(serde_json::to_value(&record).unwrap()).unwrap();
            assert_eq!(back, record);
        }
    }

    #[test]
    fn applied_proposals_read_records_and_the_old_bare_names() {
        let status: AgentSandboxStatus = serde_json::from_value(serde_json::json!({
            "appliedProposals": [
                "legacy",
                {"name": "p", "uid": "u", "changeHash": "sha256:1", "decidedBy": "auto"}
            ]
        }))
        .unwrap();
        let [legacy, record] = status.applied_proposals.as_slice() else {
            panic!("two records expected");
        };
        assert_eq!((legacy.name.as_str(), legacy.uid.as_str()), ("legacy", ""));
        assert_eq!((record.name.as_str(), record.uid.as_str()), ("p", "u"));
        // A legacy record matches no live proposal, so its grant is pruned.
        let mut live = PolicyProposal::new(
            "legacy",
            PolicyProposalSpec {
                sandbox_ref: SandboxRef { name: "s".into() },
                add: None,
                remove: None,
                rationale: None,
                requested_by: None,
            },
        );
        live.metadata.uid = Some("x".into());
        assert!(!legacy.matches(&live));
    }
}
