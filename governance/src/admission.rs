//! What the webhook decides, as pure functions of the objects, the caches'
//! view of the cluster and the prover. The handlers (`webhook::validate`)
//! only decode requests, ask SubjectAccessReviews and encode answers.

use std::collections::BTreeMap;

use kube_core::ResourceExt;
use kube_core::admission::Operation;

use crate::authority::{ReviewChange, review_change};
use crate::convert::ToDomain;
use crate::governing::{Governance, Governing, prove_declared, sandbox_refusal};
use crate::maximum::{Assessment, assess};
use crate::pod_template::template_images;
use crate::selector::governs;
use crate::verdict::Decision;
use agentgate_api::crd::{AgentSandbox, AgentScan, HeldCall, MaximumPolicy, PolicyProposal};
use agentgate_policy::compile::{Limits, Role, compile};
use agentgate_prover::Prover;
use agentgate_trifecta::image::image_digest;

/// The webhook's answer to one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// Admit, with admission warnings to show the user.
    Allow(Vec<String>),
    /// Refuse, with one line the user can act on.
    Deny(String),
    /// Admit, recording the problems in the audit log (audit mode).
    Audit(Vec<String>),
}

impl Answer {
    /// Admit without warnings.
    pub fn allow() -> Answer {
        Answer::Allow(Vec::new())
    }
}

/// Steps 1-3 of the verdict (governing maximums, containment, invariants)
/// for a sandbox's declared policy, plus its mode against every governing
/// maximum's `allowedModes`. Blocking: runs solver work.
pub fn review_sandbox(
    sandbox: &AgentSandbox,
    governance: &Governance,
    prover: &Prover,
    allow_unmanaged: bool,
) -> Answer {
    let name = sandbox.name_any();
    let governing: &[Governing] = match governance {
        Governance::Refused(_, message) => {
            return Answer::Deny(format!("agentsandbox {name:?}: {message}"));
        }
        Governance::Governed(g) => g,
    };
    if let Some(refusal) = sandbox_refusal(sandbox, governing) {
        return Answer::Deny(format!("agentsandbox {name:?}: {}", refusal.message));
    }
    let compiled = match compile(&sandbox.spec.policy, Role::Sandbox, &Limits::default()) {
        Ok(p) => p,
        Err(reason) => {
            return Answer::Deny(format!(
                "agentsandbox {name:?}: {}",
                reason.within("spec.policy")
            ));
        }
    };
    if let Err(reason) = agentgate_policy::credentials::check(
        "spec.credentials",
        &sandbox.spec.credentials,
        &compiled,
        "spec.policy.",
    ) {
        return Answer::Deny(format!("agentsandbox {name:?}: {reason}"));
    }
    let verdict = prove_declared(sandbox, &compiled, governing, allow_unmanaged, prover);
    match verdict.decision {
        Decision::Reject => Answer::Deny(format!("agentsandbox {name:?} {}", verdict.reason)),
        Decision::Apply | Decision::Ask => Answer::allow(),
    }
}

/// Whether a create or update sets or changes what `spec.acceptedFindings`
/// accepts (a risk acceptance, which needs the approve verb): the entries
/// themselves, or — while there are entries — the template's images, since
/// an acceptance covers whatever image the sandbox runs.
pub fn accepted_findings_changed(old: Option<&AgentSandbox>, new: &AgentSandbox) -> bool {
    let images = |s: &AgentSandbox| template_images(&s.spec).unwrap_or_default();
    match old {
        None => !new.spec.accepted_findings.is_empty(),
        Some(old) => {
            old.spec.accepted_findings != new.spec.accepted_findings
                || (!new.spec.accepted_findings.is_empty() && images(old) != images(new))
        }
    }
}

/// Whether a create or update turns the runtime trifecta to `audit`
/// (docs/trifecta.md, "At run time"): calls the proxy would refuse are then
/// forwarded, which accepts risk as an acceptance does and needs the same
/// approve verb. Back to `enforce` needs nothing.
pub fn runtime_trifecta_weakened(old: Option<&AgentSandbox>, new: &AgentSandbox) -> bool {
    use agentgate_policy::model::RuntimeMode;
    let audits = |s: &AgentSandbox| s.spec.runtime_trifecta == Some(RuntimeMode::Audit);
    audits(new) && !old.is_some_and(audits)
}

/// Whether an AgentSandbox write may lower a tool's labels below what its
/// AgentScan says (docs/trifecta.md, "Labels per sandbox"), which removes
/// findings: it accepts risk as an acceptance does and needs the same
/// approve verb. While any entry lowers (`trusted`, `internal`, `public`),
/// every change of the list (an entry, their order: later entries win) or
/// of the template's images (a label names tools of whatever image runs)
/// needs it, as for `acceptedFindings`. Raising labels, or dropping every
/// lowering one, needs nothing.
pub fn tool_labels_lowered(old: Option<&AgentSandbox>, new: &AgentSandbox) -> bool {
    if !new.spec.tool_labels.iter().any(|l| l.lowers()) {
        return false;
    }
    let images = |s: &AgentSandbox| template_images(&s.spec).unwrap_or_default();
    match old {
        None => true,
        Some(old) => old.spec.tool_labels != new.spec.tool_labels || images(old) != images(new),
    }
}

/// What a PolicyProposal request needs before it may be admitted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProposalCheck {
    /// Admit.
    Allow,
    /// Refuse with this message.
    Deny(String),
    /// Admit only if a SubjectAccessReview grants the user `approve` on
    /// this proposal.
    NeedsApprove,
}

/// The rules of docs/design.md §3 for proposals, for everyone but the operator
/// (whose status writes the server admits before asking): on create
/// `spec.requestedBy` must be the requesting user; the spec never changes
/// afterwards (an approval covers exactly what was reviewed); a status
/// write may only give a review ([`review_change`]), which needs `approve`,
/// never by the requester.
pub fn review_proposal(
    operation: &Operation,
    sub_resource: Option<&str>,
    old: Option<&PolicyProposal>,
    new: &PolicyProposal,
    username: &str,
) -> ProposalCheck {
    let name = new.name_any();
    match (operation, sub_resource, old) {
        (Operation::Create, None, _) => match new.spec.requested_by.as_deref() {
            Some(who) if who == username => ProposalCheck::Allow,
            Some(who) => ProposalCheck::Deny(format!(
                "policyproposal {name:?}: spec.requestedBy is {who:?} but the request comes from {username:?}; set spec.requestedBy: {username}"
            )),
            None => ProposalCheck::Deny(format!(
                "policyproposal {name:?}: spec.requestedBy must be set to the requesting user; set spec.requestedBy: {username}"
            )),
        },
        (Operation::Update, None, Some(old)) => {
            if old.spec != new.spec {
                ProposalCheck::Deny(format!(
                    "policyproposal {name:?}: spec is immutable once created (an approval covers exactly what was reviewed); create a new proposal instead"
                ))
            } else {
                ProposalCheck::Allow
            }
        }
        (Operation::Update, Some("status"), Some(old)) => match review_change(old, new, username) {
            ReviewChange::Unchanged => ProposalCheck::Allow,
            ReviewChange::Refused(message) => ProposalCheck::Deny(message),
            ReviewChange::Review if new.spec.requested_by.as_deref() == Some(username) => {
                ProposalCheck::Deny(format!(
                    "policyproposal {name:?}: {username:?} requested it and cannot approve or deny it; another reviewer with the approve verb must"
                ))
            }
            ReviewChange::Review => ProposalCheck::NeedsApprove,
        },
        _ => ProposalCheck::Allow,
    }
}

/// The rules for HeldCalls (docs/proxy.md, "Held calls"), for everyone but
/// the operator (whose writes the server admits before asking): only the
/// operator creates them; the spec never changes (an approval covers
/// exactly the call that was shown); a status write may only give a review
/// ([`review_change`]), which needs `approve` on heldcalls and never comes
/// from the agent whose call it is.
pub fn review_held_call(
    operation: &Operation,
    sub_resource: Option<&str>,
    old: Option<&HeldCall>,
    new: &HeldCall,
    username: &str,
) -> ProposalCheck {
    let name = new.name_any();
    match (operation, sub_resource, old) {
        (Operation::Create, _, _) => ProposalCheck::Deny(format!(
            "heldcall {name:?}: held calls are written by the agentgate operator when a sandbox's proxy holds a call; {username:?} may only approve or deny them"
        )),
        (Operation::Update, None, Some(old)) if old.spec != new.spec => {
            ProposalCheck::Deny(format!(
                "heldcall {name:?}: spec is immutable (an approval covers exactly the call that was shown)"
            ))
        }
        (Operation::Update, Some("status"), Some(old)) => match review_change(old, new, username) {
            ReviewChange::Unchanged => ProposalCheck::Allow,
            ReviewChange::Refused(message) => ProposalCheck::Deny(message),
            ReviewChange::Review if new.spec.requester == username => ProposalCheck::Deny(format!(
                "heldcall {name:?}: {username:?} made this call and cannot approve or deny it; a person with the approve verb on heldcalls must"
            )),
            ReviewChange::Review => ProposalCheck::NeedsApprove,
        },
        _ => ProposalCheck::Allow,
    }
}

/// Validation of a MaximumPolicy beyond its schema: the ceiling and the
/// invariant regions compile, selectors are well formed, the default mode
/// is allowed. A ceiling that intersects its own invariants is admitted
/// with a warning (the operator then marks it `Consistent=False`).
/// Blocking: runs solver work.
pub fn review_maximum(maximum: &MaximumPolicy, prover: &Prover) -> Answer {
    let name = maximum.name_any();
    if let Err(e) = governs(&maximum.spec, &BTreeMap::new(), &BTreeMap::new()) {
        return Answer::Deny(format!("maximumpolicy {name:?}: selector {e}"));
    }
    let modes = &maximum.spec.allowed_modes;
    if !modes.is_empty() && !modes.contains(&maximum.spec.default_mode) {
        return Answer::Deny(format!(
            "maximumpolicy {name:?}: spec.defaultMode {:?} is not in spec.allowedModes",
            format!("{:?}", maximum.spec.default_mode).to_lowercase()
        ));
    }
    match assess(maximum, prover) {
        Assessment::Invalid(reason) => Answer::Deny(format!("maximumpolicy {name:?}: {reason}")),
        Assessment::Valid {
            inconsistent,
            unproven,
        } => {
            let mut warnings = Vec::new();
            if let Some((invariant, witness)) = inconsistent {
                warnings.push(format!(
                    "maximumpolicy {name:?} allows {witness}, inside its own invariant {invariant:?}; governed sandboxes can never hold that grant"
                ));
            }
            if let Some((invariant, reason)) = unproven {
                warnings.push(format!(
                    "maximumpolicy {name:?}: could not prove the ceiling outside invariant {invariant:?}: {reason}"
                ));
            }
            Answer::Allow(warnings)
        }
    }
}

/// A second AgentScan for a digest another scan already describes: refused,
/// so nobody can shadow a scan with findings by a cleaner one (pods of a
/// digest with several scans are refused too, in case two race past this).
pub fn scan_conflict<'a>(
    scan: &AgentScan,
    others: impl Iterator<Item = &'a AgentScan>,
) -> Option<String> {
    let digest = image_digest(&scan.spec.image)?;
    let name = scan.name_any();
    others
        .filter(|o| o.name_any() != name)
        .find(|o| image_digest(&o.spec.image) == Some(digest))
        .map(|o| {
            format!(
                "agentscan {name:?}: AgentScan {:?} already describes {digest}; update that one instead",
                o.name_any()
            )
        })
}

/// Size limits of an AgentScan graph: the analysis is linear per sink, and
/// every controller and webhook replica runs it, so a graph written by an
/// untrusted CI job must stay bounded. 20,000 tools is far beyond real agents.
pub const MAX_SCAN_NODES: usize = 20_000;
/// See [`MAX_SCAN_NODES`].
pub const MAX_SCAN_EDGES: usize = 100_000;
/// See [`MAX_SCAN_NODES`].
pub const MAX_SCAN_CAPABILITIES: usize = 50_000;

/// An AgentScan must pin its image by digest and carry a well-formed graph:
/// every node has a unique non-empty string `id`, every edge's `from` and
/// `to` name a node.
pub fn review_scan(scan: &AgentScan) -> Answer {
    let name = scan.name_any();
    if image_digest(&scan.spec.image).is_none() {
        return Answer::Deny(format!(
            "agentscan {name:?}: spec.image {:?} is not pinned by digest; use name@sha256:<64 hex digits>",
            scan.spec.image
        ));
    }
    let graph = &scan.spec.graph;
    let capabilities: usize = graph.nodes.iter().map(|n| n.capabilities.len()).sum();
    if graph.nodes.len() > MAX_SCAN_NODES
        || graph.edges.len() > MAX_SCAN_EDGES
        || capabilities > MAX_SCAN_CAPABILITIES
    {
        return Answer::Deny(format!(
            "agentscan {name:?}: the graph has {} nodes, {} edges and {capabilities} capabilities; at most {MAX_SCAN_NODES}, {MAX_SCAN_EDGES} and {MAX_SCAN_CAPABILITIES} are analysed (split the agent, or declare load-bearing tools in agentgate.yaml)",
            graph.nodes.len(),
            graph.edges.len()
        ));
    }
    if let Err(error) = graph.to_domain().indexed() {
        return Answer::Deny(format!("agentscan {name:?}: spec.graph.{error}"));
    }
    Answer::allow()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::governing::{CompiledMaximums, governing_from};
    use agentgate_api::crd::{AgentScanSpec, PolicyProposalSpec, PolicyProposalStatus, SandboxRef};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

    fn from_yaml<T: serde::de::DeserializeOwned>(text: &str) -> T {
        serde_saphyr::from_str(text).unwrap()
    }

    fn maximum() -> MaximumPolicy {
        from_yaml(include_str!("../../examples/maximum.yaml"))
    }

    fn sandbox(extra_rule: &str) -> AgentSandbox {
        from_yaml(&format!(
            r#"
apiVersion: agentgate.dev/v1alpha1
kind: AgentSandbox
metadata: {{name: bot, namespace: agents}}
spec:
  mode: ask
  agentServiceAccount: bot
  policy:
    network:
      - name: github
        binaries: [/usr/bin/gh]
        endpoints:
          - host: api.github.com
            ports: [443]
            protocol: rest
            rules:
              - {{methods: [GET], path: "/repos/acme/**"}}
{extra_rule}
"#
        ))
    }

    fn ml() -> BTreeMap<String, String> {
        BTreeMap::from([("team".to_string(), "ml".to_string())])
    }

    #[test]
    fn a_sandbox_outside_its_maximum_is_denied_with_the_counterexample() {
        let prover = Prover::default();
        let max = maximum();
        let wide = sandbox("              - {methods: [POST], path: /repos/acme}");
        let gov = governing_from(
            [&max],
            &ml(),
            &BTreeMap::new(),
            false,
            &CompiledMaximums::default(),
        );
        let Answer::Deny(message) = review_sandbox(&wide, &gov, &prover, false) else {
            panic!("expected a denial");
        };
        assert!(
            message.starts_with("agentsandbox \"bot\" exceeds MaximumPolicy \"org-ceiling\": POST https://api.github.com:443/repos/acme by /usr/bin/gh"),
            "{message}"
        );
        let narrow = sandbox("");
        assert_eq!(
            review_sandbox(&narrow, &gov, &prover, false),
            Answer::allow()
        );
        let mut nobody = sandbox("");
        nobody.spec.agent_service_account = String::new();
        assert!(matches!(
            review_sandbox(&nobody, &gov, &prover, false),
            Answer::Deny(m) if m.contains("spec.agentServiceAccount \"\" is not a ServiceAccount name")
        ));
        let mut odd = sandbox("");
        odd.spec.accepted_findings = vec![agentgate_api::crd::AcceptedFinding {
            id: "AG-TRIFECTA".into(),
            sink: None,
            reason: "r".into(),
            expires: "next tuesday".into(),
        }];
        assert!(matches!(
            review_sandbox(&odd, &gov, &prover, false),
            Answer::Deny(m) if m.contains("spec.acceptedFindings[0].expires \"next tuesday\" is not an RFC 3339 time")
        ));
    }

    #[test]
    fn an_ungoverned_sandbox_is_denied_unless_unmanaged_is_allowed() {
        let prover = Prover::default();
        let max = maximum();
        let gov = governing_from(
            [&max],
            &BTreeMap::new(),
            &BTreeMap::new(),
            false,
            &CompiledMaximums::default(),
        );
        let Answer::Deny(message) = review_sandbox(&sandbox(""), &gov, &prover, false) else {
            panic!("expected a denial");
        };
        assert!(message.contains("no MaximumPolicy governs"), "{message}");
        let gov = governing_from(
            [&max],
            &BTreeMap::new(),
            &BTreeMap::new(),
            true,
            &CompiledMaximums::default(),
        );
        assert_eq!(
            review_sandbox(&sandbox(""), &gov, &prover, true),
            Answer::allow()
        );
    }

    fn proposal(requested_by: Option<&str>, approved: Option<&str>) -> PolicyProposal {
        let mut p = PolicyProposal::new(
            "p",
            PolicyProposalSpec {
                sandbox_ref: SandboxRef { name: "bot".into() },
                add: None,
                remove: None,
                rationale: None,
                requested_by: requested_by.map(str::to_string),
            },
        );
        if let Some(status) = approved {
            p.status = Some(PolicyProposalStatus {
                conditions: vec![Condition {
                    type_: "Approved".into(),
                    status: status.into(),
                    reason: "Reviewed".into(),
                    message: "approved by \"alice\"".into(),
                    observed_generation: None,
                    last_transition_time: Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
                }],
                ..PolicyProposalStatus::default()
            });
        }
        p
    }

    #[test]
    fn requested_by_must_be_the_requesting_user() {
        let me = "system:serviceaccount:agents:bot";
        let ok = proposal(Some(me), None);
        assert_eq!(
            review_proposal(&Operation::Create, None, None, &ok, me),
            ProposalCheck::Allow
        );
        let ProposalCheck::Deny(m) =
            review_proposal(&Operation::Create, None, None, &ok, "mallory")
        else {
            panic!()
        };
        assert!(m.contains("set spec.requestedBy: mallory"), "{m}");
        assert!(matches!(
            review_proposal(&Operation::Create, None, None, &proposal(None, None), me),
            ProposalCheck::Deny(_)
        ));
    }

    #[test]
    fn approvals_need_the_verb_and_never_come_from_the_requester() {
        let old = proposal(Some("bot"), None);
        let approved = proposal(Some("bot"), Some("True"));
        assert_eq!(
            review_proposal(
                &Operation::Update,
                Some("status"),
                Some(&old),
                &approved,
                "alice"
            ),
            ProposalCheck::NeedsApprove
        );
        assert!(matches!(
            review_proposal(
                &Operation::Update,
                Some("status"),
                Some(&old),
                &approved,
                "bot"
            ),
            ProposalCheck::Deny(_)
        ));
        // The operator's own status writes leave the review conditions alone.
        assert_eq!(
            review_proposal(
                &Operation::Update,
                Some("status"),
                Some(&approved),
                &approved,
                "system:serviceaccount:agentgate-system:agentgate"
            ),
            ProposalCheck::Allow
        );
        // A decided review is final: not even its reviewer withdraws it.
        assert!(matches!(
            review_proposal(
                &Operation::Update,
                Some("status"),
                Some(&approved),
                &old,
                "alice"
            ),
            ProposalCheck::Deny(m) if m.contains("final")
        ));
    }

    #[test]
    fn a_proposal_spec_is_immutable() {
        let old = proposal(Some("bot"), None);
        let mut new = old.clone();
        new.spec.rationale = Some("changed".into());
        assert!(matches!(
            review_proposal(&Operation::Update, None, Some(&old), &new, "bot"),
            ProposalCheck::Deny(_)
        ));
    }

    #[test]
    fn a_maximum_that_meets_its_invariant_is_admitted_with_a_warning() {
        let prover = Prover::default();
        let max: MaximumPolicy = from_yaml(include_str!("../../examples/maximum-egress.yaml"));
        let Answer::Allow(warnings) = review_maximum(&max, &prover) else {
            panic!("expected admission");
        };
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].contains("inside its own invariant"),
            "{warnings:?}"
        );
        assert_eq!(review_maximum(&maximum(), &prover), Answer::allow());
        let mut bad = maximum();
        bad.spec.policy.network[0].endpoints[0].host = "api.*.com*".into();
        assert!(matches!(review_maximum(&bad, &prover), Answer::Deny(_)));
    }

    #[test]
    fn scans_pin_images_and_have_well_formed_graphs() {
        let digest = format!("ghcr.io/acme/bot@sha256:{}", "ab".repeat(32));
        let scan = |image: &str, graph: serde_json::Value| {
            AgentScan::new(
                "s",
                AgentScanSpec {
                    image: image.into(),
                    graph: serde_json::from_value(graph).unwrap(),
                },
            )
        };
        let good = serde_json::json!({"nodes": [{"id": "a"}, {"id": "b"}], "edges": [{"from": "a", "to": "b", "kind": "data"}]});
        assert_eq!(review_scan(&scan(&digest, good.clone())), Answer::allow());
        assert!(
            matches!(review_scan(&scan("ghcr.io/acme/bot:latest", good)), Answer::Deny(m) if m.contains("not pinned by digest"))
        );
        let dangling = serde_json::json!({"nodes": [{"id": "a"}], "edges": [{"from": "a", "to": "z", "kind": "control"}]});
        assert!(
            matches!(review_scan(&scan(&digest, dangling)), Answer::Deny(m) if m.contains("edges[0]: unknown node \"z\""))
        );
        let twice = serde_json::json!({"nodes": [{"id": "a"}, {"id": "a"}]});
        assert!(
            matches!(review_scan(&scan(&digest, twice)), Answer::Deny(m) if m.contains("duplicate node id \"a\""))
        );
        assert!(image_digest("x@sha256:ABC").is_none());
        // One scan per digest: a second name for it is refused.
        let first = scan(&digest, serde_json::json!({}));
        let mut second = scan(&digest, serde_json::json!({}));
        second.metadata.name = Some("t".into());
        assert!(
            scan_conflict(&second, [&first].into_iter())
                .is_some_and(|m| m.contains("AgentScan \"s\" already describes"))
        );
        assert_eq!(scan_conflict(&first, [&first].into_iter()), None);
        // Too big to analyse on every replica: refused with the counts.
        let mut huge = scan(&digest, serde_json::json!({}));
        huge.spec.graph.nodes = (0..=MAX_SCAN_NODES)
            .map(|i| agentgate_api::scan::Node {
                id: format!("t{i}"),
                ..Default::default()
            })
            .collect();
        assert!(matches!(review_scan(&huge), Answer::Deny(m) if m.contains("20001 nodes")));
    }

    #[test]
    fn auditing_the_runtime_trifecta_needs_approval_enforcing_it_does_not() {
        use agentgate_policy::model::RuntimeMode;
        let with = |mode: Option<RuntimeMode>| {
            let mut s = sandbox("");
            s.spec.runtime_trifecta = mode;
            s
        };
        let (audit, enforce) = (
            with(Some(RuntimeMode::Audit)),
            with(Some(RuntimeMode::Enforce)),
        );
        assert!(runtime_trifecta_weakened(None, &audit));
        assert!(runtime_trifecta_weakened(Some(&with(None)), &audit));
        assert!(runtime_trifecta_weakened(Some(&enforce), &audit));
        assert!(!runtime_trifecta_weakened(Some(&audit), &audit));
        assert!(!runtime_trifecta_weakened(Some(&audit), &enforce));
        assert!(!runtime_trifecta_weakened(None, &with(None)));
    }

    #[test]
    fn lowering_a_tool_label_needs_approval_and_raising_one_does_not() {
        use agentgate_api::crd::{ToolConfidentiality, ToolIntegrity, ToolLabel};
        let with = |labels: Vec<ToolLabel>| {
            let mut s = sandbox("");
            s.spec.tool_labels = labels;
            s
        };
        let label = |integrity, confidentiality| ToolLabel {
            tool: "read_email".into(),
            integrity,
            confidentiality,
        };
        let untrusted = with(vec![label(Some(ToolIntegrity::Untrusted), None)]);
        let secret = with(vec![label(None, Some(ToolConfidentiality::Secret))]);
        let trusted = with(vec![label(Some(ToolIntegrity::Trusted), None)]);
        let public = with(vec![label(None, Some(ToolConfidentiality::Public))]);
        assert!(!tool_labels_lowered(None, &untrusted));
        assert!(!tool_labels_lowered(None, &secret));
        assert!(tool_labels_lowered(None, &trusted));
        assert!(tool_labels_lowered(Some(&untrusted), &trusted));
        assert!(tool_labels_lowered(Some(&trusted), &public));
        // Unchanged, or taken back: nothing more is accepted.
        assert!(!tool_labels_lowered(Some(&trusted), &trusted));
        assert!(!tool_labels_lowered(Some(&trusted), &untrusted));
        // While one lowers, reordering (later entries win) or another image
        // (whose tools the label may name) is a new acceptance.
        let both = with(vec![
            label(Some(ToolIntegrity::Untrusted), None),
            label(Some(ToolIntegrity::Trusted), None),
        ]);
        let mut swapped = both.clone();
        swapped.spec.tool_labels.reverse();
        assert!(tool_labels_lowered(Some(&swapped), &both));
        let mut other_image = trusted.clone();
        other_image.spec.template = Some(
            serde_json::from_value(
                serde_json::json!({"spec": {"containers": [{"name": "a", "image": "other@sha256:00"}]}}),
            )
            .unwrap(),
        );
        assert!(tool_labels_lowered(Some(&trusted), &other_image));
    }

    #[test]
    fn changing_the_images_of_a_sandbox_with_acceptances_needs_approval() {
        let with_image = |image: &str, accepted: bool| {
            let mut s = sandbox("");
            s.spec.template = Some(
                serde_json::from_value(
                    serde_json::json!({"spec": {"containers": [{"name": "a", "image": image}]}}),
                )
                .unwrap(),
            );
            if accepted {
                s.spec.accepted_findings = vec![agentgate_api::crd::AcceptedFinding {
                    id: "AG-TRIFECTA".into(),
                    sink: None,
                    reason: "r".into(),
                    expires: "2027-01-01T00:00:00Z".into(),
                }];
            }
            s
        };
        assert!(accepted_findings_changed(
            None,
            &with_image("a@sha256:1", true)
        ));
        assert!(!accepted_findings_changed(
            None,
            &with_image("a@sha256:1", false)
        ));
        assert!(accepted_findings_changed(
            Some(&with_image("a@sha256:1", true)),
            &with_image("b@sha256:2", true)
        ));
        assert!(!accepted_findings_changed(
            Some(&with_image("a@sha256:1", false)),
            &with_image("b@sha256:2", false)
        ));
        assert!(!accepted_findings_changed(
            Some(&with_image("a@sha256:1", true)),
            &with_image("a@sha256:1", true)
        ));
    }
}
