//! What a sandbox's images' findings mean for that sandbox (docs/design.md §6,
//! §7): for each finding, whether the committed effective policy severs it,
//! an unexpired acceptance covers it, or it is unfixed. Pure: the callers
//! bring the scans, the policy and the time.

use std::str::FromStr;

use k8s_openapi::jiff::Timestamp;

use kube_core::ResourceExt;

use agentgate_api::crd::{
    AcceptedFinding, AgentScan, FindingRecord, FindingState, FindingsSummary, ImageFindings,
    ToolConfidentiality, ToolIntegrity, ToolLabel,
};
use agentgate_policy::compile::CompiledPolicy;
use agentgate_prover::Prover;
use agentgate_trifecta::image::image_digest;

use crate::convert::{ToApi, ToDomain};
use crate::severing::{drop_placeholder_reads, finding_regions, restrict, severed_by};
use agentgate_judgement::findings::FindingRegions;
use agentgate_trifecta::analysis::{Finding, analyze};
use agentgate_trifecta::graph::{Confidentiality, Effect, Graph, Integrity};

/// The one AgentScan describing `digest` among `scans`, `None` when there
/// is none, and an error naming them when several claim it (which one is
/// true is not for agentgate to guess: fail closed).
pub fn scan_of_digest<'a, S>(scans: &'a [S], digest: &str) -> Result<Option<&'a S>, String>
where
    S: std::ops::Deref<Target = AgentScan>,
{
    let mut matching = scans
        .iter()
        .filter(|s| image_digest(&s.spec.image) == Some(digest));
    let first = matching.next();
    let rest: Vec<&S> = matching.collect();
    if let Some(first) = first
        && !rest.is_empty()
    {
        let names = std::iter::once(first).chain(rest).map(|s| s.name_any());
        return Err(several_scans(names));
    }
    Ok(first)
}

/// `ghcr.io/acme/bot@sha256:ab12cd34ef56…`: the reference with its digest
/// shortened, for one-line messages.
pub fn short_image(image: &str) -> String {
    match image.rsplit_once("@sha256:") {
        Some((name, hex)) => match hex.get(..12) {
            Some(prefix) if hex.len() > 12 => format!("{name}@sha256:{prefix}…"),
            _ => image.to_string(),
        },
        None => image.to_string(),
    }
}

/// The acceptance covering `finding` at `now`, if any: same id, same sink
/// (or no sink named), and `expires` in the future. An unparseable
/// `expires` covers nothing.
pub fn acceptance<'a>(
    accepted: &'a [AcceptedFinding],
    finding: &Finding,
    now: Timestamp,
) -> Option<&'a AcceptedFinding> {
    accepted.iter().find(|a| {
        a.id == finding.id
            && a.sink.as_deref().is_none_or(|s| s == finding.sink)
            && Timestamp::from_str(&a.expires).is_ok_and(|t| t > now)
    })
}

/// The earliest future expiry among the acceptances, when the assessment
/// must be redone.
pub fn next_expiry(accepted: &[AcceptedFinding], now: Timestamp) -> Option<Timestamp> {
    accepted
        .iter()
        .filter_map(|a| Timestamp::from_str(&a.expires).ok())
        .filter(|t| *t > now)
        .min()
}

/// A scan as the assessment needs it.
pub struct ScanInput<'a> {
    /// AgentScan name.
    pub name: &'a str,
    /// AgentScan uid.
    pub uid: &'a str,
    /// Its generation.
    pub generation: Option<i64>,
    /// The graph.
    pub graph: &'a Graph,
    /// The findings recomputed from the graph (or why they could not be).
    pub findings: &'a Result<Vec<Finding>, String>,
}

/// Assesses one image for a sandbox. `policy` is the committed effective
/// policy (`None`: no committed policy, nothing is severed).
pub fn assess_image(
    image: &str,
    scan: Option<ScanInput<'_>>,
    policy: Option<&CompiledPolicy>,
    prover: &Prover,
    accepted: &[AcceptedFinding],
    credentials: &[agentgate_policy::credentials::Credential],
    now: Timestamp,
) -> ImageFindings {
    let mut out = ImageFindings {
        image: image.to_string(),
        ..ImageFindings::default()
    };
    if image_digest(image).is_none() {
        out.problem = Some(format!(
            "image {image} is not pinned by digest; use name@sha256:<64 hex digits>"
        ));
        return out;
    }
    let Some(scan) = scan else {
        out.problem = Some(format!(
            "image {} has no AgentScan; run `agentgate scan PATH --image {image} -o yaml | kubectl apply -f -`",
            short_image(image)
        ));
        return out;
    };
    out.scan = Some(scan.name.to_string());
    out.scan_uid = Some(scan.uid.to_string());
    out.scan_generation = scan.generation;
    let findings = match scan.findings {
        Ok(findings) => findings,
        Err(e) => {
            out.problem = Some(format!("agentscan {} cannot be analysed: {e}", scan.name));
            return out;
        }
    };
    // A secret the agent holds only as a placeholder is no secret leg
    // (docs/policy-semantics.md §9), whatever the policy.
    let mut graph = scan.graph.clone();
    let placeholders = drop_placeholder_reads(&mut graph, credentials);
    let severed = match policy {
        Some(policy) if !findings.is_empty() => {
            let (restricted, mut touched) = restrict(&graph, policy, prover);
            touched.extend(placeholders.iter().map(|(node, _)| node.clone()));
            severed_by(findings, &restricted, &touched)
                .unwrap_or_else(|_| vec![None; findings.len()])
        }
        _ if !findings.is_empty() && !placeholders.is_empty() => {
            let touched: Vec<String> = placeholders.iter().map(|(node, _)| node.clone()).collect();
            severed_by(findings, &graph, &touched).unwrap_or_else(|_| vec![None; findings.len()])
        }
        _ => vec![None; findings.len()],
    };
    out.findings = findings
        .iter()
        .zip(severed)
        .map(|(finding, severed)| {
            let accepted = acceptance(accepted, finding, now);
            let state = match (&severed, accepted) {
                (Some(_), _) => FindingState::Severed,
                (None, Some(_)) => FindingState::Accepted,
                (None, None) => FindingState::Unfixed,
            };
            // Say so when a placeholder is what severs it.
            let because: Vec<&str> = placeholders
                .iter()
                .filter(|(node, _)| severed.as_ref().is_some_and(|by| by.contains(node)))
                .map(|(_, why)| why.as_str())
                .collect();
            let message = if because.is_empty() {
                finding.to_string()
            } else {
                format!("{finding}; severed: {}", because.join("; "))
            };
            FindingRecord {
                id: finding.id.clone(),
                sink: finding.sink.clone(),
                severity: finding.severity.to_api(),
                state,
                message,
                fix: finding.fix(),
                severed_by: severed.unwrap_or_default(),
                accepted_until: accepted.map(|a| a.expires.clone()),
            }
        })
        .collect();
    out
}

/// Assesses every image of a sandbox against the AgentScans that exist.
/// Findings are recomputed from each scan's graph; `revision` is the
/// committed revision `policy` belongs to.
///
/// Also returns, from the same analysis, the findings as the data plane
/// reads them (`findings.json` beside the policy, docs/design.md §10): every
/// finding of each image's one AgentScan with the network regions its nodes
/// reach, so a refusal can cite the finding that predicted it. Images
/// without exactly one scan, or whose graph does not analyse, contribute
/// none (their problem is in the summary).
pub fn assess_sandbox(
    images: &[String],
    scans: &[&AgentScan],
    policy: Option<&CompiledPolicy>,
    prover: &Prover,
    sandbox: SandboxRisk<'_>,
    now: Timestamp,
    revision: u64,
) -> (FindingsSummary, Vec<FindingRegions>) {
    let accepted = sandbox.accepted;
    let mut runtime = Vec::new();
    let mut summary = FindingsSummary {
        revision: Some(revision),
        ..FindingsSummary::default()
    };
    for image in images {
        let scan = match image_digest(image).map(|digest| scan_of_digest(scans, digest)) {
            Some(Err(several)) => {
                summary.images.push(ImageFindings {
                    image: image.clone(),
                    problem: Some(format!("image {}: {several}", short_image(image))),
                    ..ImageFindings::default()
                });
                continue;
            }
            Some(Ok(scan)) => scan.copied(),
            None => None,
        };
        let name = scan.map(|s| s.name_any());
        let uid = scan.map(|s| s.uid().unwrap_or_default());
        // The graph as the analysis reads it, converted once per image,
        // with the sandbox's own tool labels.
        let graph = scan.map(|s| sandbox_graph(&s.spec.graph, sandbox.labels));
        let findings = graph
            .as_ref()
            .map(|g| analyze(g).map_err(|e| e.to_string()));
        if let (Some(graph), Some(Ok(findings))) = (&graph, &findings) {
            runtime.extend(findings.iter().map(|f| finding_regions(f, graph)));
        }
        let input = match (scan, &graph, &name, &uid, &findings) {
            (Some(scan), Some(graph), Some(name), Some(uid), Some(findings)) => Some(ScanInput {
                name,
                uid,
                generation: scan.metadata.generation,
                graph,
                findings,
            }),
            _ => None,
        };
        let assessed = assess_image(
            image,
            input,
            policy,
            prover,
            accepted,
            sandbox.credentials,
            now,
        );
        summary.total += assessed.findings.len() as u32;
        summary.unfixed += assessed
            .findings
            .iter()
            .filter(|r| r.state == FindingState::Unfixed)
            .count() as u32;
        summary.images.push(assessed);
    }
    (summary, runtime)
}

/// What a sandbox says about the risk of its images: its acceptances and
/// its own tool labels.
#[derive(Debug, Clone, Copy, Default)]
pub struct SandboxRisk<'a> {
    /// `spec.acceptedFindings`.
    pub accepted: &'a [AcceptedFinding],
    /// `spec.toolLabels`.
    pub labels: &'a [ToolLabel],
    /// `spec.credentials`: their placeholders are no secrets.
    pub credentials: &'a [agentgate_policy::credentials::Credential],
}

/// An AgentScan's graph as a sandbox's analysis reads it: converted, with
/// the sandbox's tool labels applied ([`relabel`]). Every analysis of a
/// sandbox's images (the operator's findings, pod admission, `/v1/decide`'s
/// citations) reads this one graph.
pub fn sandbox_graph(graph: &agentgate_api::scan::Graph, labels: &[ToolLabel]) -> Graph {
    let mut graph = graph.to_domain();
    relabel(&mut graph, labels);
    graph
}

/// Applies a sandbox's tool labels (docs/trifecta.md, "Labels per
/// sandbox") to every node whose id or `tools/call` name a label names.
/// Raising sets the node's declared label (`untrusted`, `secret`), which
/// the analysis joins with its capabilities'. Lowering states what the
/// capabilities claimed is not so here: `trusted` drops the node's
/// untrusted-input capabilities, `internal` its secret reads, `public`
/// its secret and internal reads, and sets the declared label. Egress
/// capabilities are never touched: a label says what a tool's output is,
/// not where it sends. A name no node has changes nothing.
pub fn relabel(graph: &mut Graph, labels: &[ToolLabel]) {
    for label in labels {
        let named = |node: &agentgate_trifecta::graph::Node| {
            node.id == label.tool || node.mcp.as_ref().is_some_and(|m| m.name == label.tool)
        };
        for node in graph.nodes.iter_mut().filter(|n| named(n)) {
            match label.integrity {
                Some(ToolIntegrity::Untrusted) => node.label.integrity = Integrity::Untrusted,
                Some(ToolIntegrity::Trusted) => {
                    node.label.integrity = Integrity::Trusted;
                    node.capabilities
                        .retain(|c| c.effect != Effect::UntrustedInput);
                }
                None => {}
            }
            let level = match label.confidentiality {
                Some(ToolConfidentiality::Public) => Confidentiality::Public,
                Some(ToolConfidentiality::Internal) => Confidentiality::Internal,
                Some(ToolConfidentiality::Secret) => Confidentiality::Secret,
                None => continue,
            };
            node.label.confidentiality = level;
            node.capabilities.retain(|c| match c.effect {
                Effect::ReadsSecret => level >= Confidentiality::Secret,
                Effect::ReadsInternal => level >= Confidentiality::Internal,
                Effect::UntrustedInput | Effect::Egress => true,
            });
        }
    }
}

/// The problem when several AgentScans describe one digest: which one is
/// true is not for agentgate to guess (a later scan could hide findings), so
/// the image counts as not assessed until all but one are deleted.
pub fn several_scans(names: impl Iterator<Item = String>) -> String {
    let mut names: Vec<String> = names.collect();
    names.sort();
    format!(
        "several AgentScans ({}) describe its digest; delete all but one",
        names.join(", ")
    )
}

/// The `FindingsClear` condition for a summary: `(clear, reason, message)`.
pub fn findings_condition(summary: &FindingsSummary) -> (bool, &'static str, String) {
    if let Some(problem) = summary.images.iter().find_map(|i| i.problem.clone()) {
        return (false, "ImageNotScanned", problem);
    }
    let unfixed: Vec<String> = summary
        .images
        .iter()
        .flat_map(|i| {
            i.findings
                .iter()
                .filter(|r| r.state == FindingState::Unfixed)
                .map(move |r| {
                    format!(
                        "{}: {}. Minimal fix: {}.",
                        short_image(&i.image),
                        r.message,
                        r.fix
                    )
                })
        })
        .collect();
    if let Some(first) = unfixed.first() {
        let more = if unfixed.len() > 1 {
            format!(" (and {} more)", unfixed.len() - 1)
        } else {
            String::new()
        };
        return (false, "UnfixedFindings", format!("{first}{more}"));
    }
    let message = if summary.total == 0 {
        "no trifecta findings".to_string()
    } else {
        format!(
            "{} finding(s), each severed by the policy or accepted",
            summary.total
        )
    };
    (true, "NoUnfixedFindings", message)
}

/// `carries 1 unfixed trifecta finding: …. Minimal fix: restrict tool x.`
/// for the unfixed findings of one image, or `None` when there are none.
pub fn unfixed_line(image: &str, unfixed: &[&Finding]) -> Option<String> {
    if unfixed.is_empty() {
        return None;
    }
    let noun = if unfixed.len() == 1 {
        "finding"
    } else {
        "findings"
    };
    let details: Vec<String> = unfixed.iter().map(|f| f.line_with_fix()).collect();
    Some(format!(
        "image {} carries {} unfixed trifecta {noun}: {}",
        short_image(image),
        unfixed.len(),
        details.join(" ")
    ))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_sandbox_labels_its_tools_up_or_down_and_the_findings_follow() {
        let label = |tool: &str, integrity, confidentiality| ToolLabel {
            tool: tool.into(),
            integrity,
            confidentiality,
        };
        let findings = |labels: &[ToolLabel]| {
            let mut graph = agentgate_trifecta::fixtures::mail_agent();
            relabel(&mut graph, labels);
            analyze(&graph).unwrap().len()
        };
        // The scan: mail is untrusted, the customer table internal, mail
        // goes out: one finding.
        assert_eq!(findings(&[]), 1);
        // This sandbox's mail is its own team's: no untrusted input left.
        let trusted = label("read_email", Some(ToolIntegrity::Trusted), None);
        assert_eq!(findings(std::slice::from_ref(&trusted)), 0);
        // The customer table is public here: nothing to leak.
        let public = label("query_customers", None, Some(ToolConfidentiality::Public));
        assert_eq!(findings(std::slice::from_ref(&public)), 0);
        // Raising never removes: marking the table secret keeps the finding.
        let secret = label("query_customers", None, Some(ToolConfidentiality::Secret));
        assert_eq!(findings(&[secret]), 1);
        // Egress is not a label: a sink stays a sink.
        let mut graph = agentgate_trifecta::fixtures::mail_agent();
        relabel(
            &mut graph,
            &[label(
                "send_email",
                Some(ToolIntegrity::Trusted),
                Some(ToolConfidentiality::Public),
            )],
        );
        assert!(
            graph
                .nodes
                .iter()
                .any(|n| n.id == "send_email" && n.is_egress())
        );
        // Raising creates one: a second untrusted input is a second path,
        // and a name no node has changes nothing.
        let mut graph = agentgate_trifecta::fixtures::mail_agent();
        relabel(
            &mut graph,
            &[
                label("query_customers", Some(ToolIntegrity::Untrusted), None),
                label("no_such_tool", Some(ToolIntegrity::Trusted), None),
            ],
        );
        let node = graph
            .nodes
            .iter()
            .find(|n| n.id == "query_customers")
            .unwrap();
        assert_eq!(node.intrinsic_label().integrity, Integrity::Untrusted);
        assert!(!analyze(&graph).unwrap().is_empty());
    }

    #[test]
    fn digests_are_recognised_and_shortened() {
        let image = format!("ghcr.io/acme/bot@sha256:{}", "ab12".repeat(16));
        assert_eq!(image_digest(&image).map(|d| d.len()), Some(71));
        assert_eq!(short_image(&image), "ghcr.io/acme/bot@sha256:ab12ab12ab12…");
        assert_eq!(image_digest("ghcr.io/acme/bot:latest"), None);
        assert_eq!(image_digest("bot@sha256:ABCD"), None);
    }

    #[test]
    fn acceptances_need_matching_sink_and_future_expiry() {
        let finding: Finding = serde_json::from_value(serde_json::json!({
            "id": "AG-TRIFECTA", "sink": "send_email", "severity": "HIGH",
            "control": {"path": []}, "data": {"path": []}, "cut": []
        }))
        .unwrap();
        let now = Timestamp::from_str("2026-11-29T00:00:00Z").unwrap();
        let entry = |sink: Option<&str>, expires: &str| AcceptedFinding {
            id: "AG-TRIFECTA".into(),
            sink: sink.map(Into::into),
            reason: "r".into(),
            expires: expires.into(),
        };
        assert!(
            acceptance(
                &[entry(Some("send_email"), "2027-01-01T00:00:00Z")],
                &finding,
                now
            )
            .is_some()
        );
        assert!(acceptance(&[entry(None, "2027-01-01T00:00:00Z")], &finding, now).is_some());
        assert!(
            acceptance(
                &[entry(Some("post"), "2027-01-01T00:00:00Z")],
                &finding,
                now
            )
            .is_none()
        );
        assert!(acceptance(&[entry(None, "2026-01-01T00:00:00Z")], &finding, now).is_none());
        assert!(acceptance(&[entry(None, "next tuesday")], &finding, now).is_none());
        assert_eq!(
            next_expiry(
                &[
                    entry(None, "2027-01-01T00:00:00Z"),
                    entry(None, "2026-12-01T00:00:00Z")
                ],
                now
            ),
            Some(Timestamp::from_str("2026-12-01T00:00:00Z").unwrap())
        );
    }
}
