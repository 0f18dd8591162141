//! The link between a finding and a sandbox's policy (docs/design.md §7): a
//! capability the effective policy provably never allows cannot carry
//! information, so the graph the sandbox really runs is the scanned graph
//! without those capabilities.
//! A finding is severed when the trifecta query on that graph finds no path
//! to its sink. Nodes and edges stay: only what a tool can do is removed.
//!
//! Each network capability is one prover intersection query (policy ∩ the
//! capability's region = ∅). Capabilities a network policy cannot stop
//! (environment reads, files without a literal path) are always kept, and so
//! is anything the prover cannot decide: severance fails closed.

use agentgate_policy::action::{Access, FilesystemAction, check_absolute_path};
use agentgate_policy::compile::{CompiledPolicy, compile_region};
use agentgate_policy::findings::{FindingRegions, NodeRegion};
use agentgate_policy::matcher::allows_filesystem;
use agentgate_prover::{Outcome, Prover};

use agentgate_trifecta::analysis::{Finding, has_trifecta};
use agentgate_trifecta::graph::{Capability, Channel, Graph, GraphError};

/// The network regions of a finding's nodes, sink first, then the control
/// and the data witness in path order: what a runtime refusal cites
/// (`/v1/decide` here, `findings.json` for the data plane). Only regions
/// that compile are kept, so the result always loads.
pub fn finding_regions(finding: &Finding, graph: &Graph) -> FindingRegions {
    let mut seen = std::collections::HashSet::new();
    let capabilities = finding
        .nodes_sink_first()
        .filter(|id| seen.insert(*id))
        .filter_map(|id| graph.node(id))
        .flat_map(|node| {
            node.capabilities
                .iter()
                .filter_map(Capability::network_region)
                .filter(|region| compile_region(region, "capability").is_ok())
                .map(|region| NodeRegion {
                    node: node.id.clone(),
                    region,
                })
        })
        .collect();
    FindingRegions {
        id: finding.id.clone(),
        sink: finding.sink.clone(),
        witness: finding.to_string(),
        capabilities,
    }
}

/// Whether the policy can ever allow a capability.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reach {
    /// Proved: no allowed action belongs to the capability.
    Denied,
    /// Some allowed action belongs to it, or it is outside what a policy
    /// controls, or the prover could not decide (with the reason).
    Possible(String),
}

/// Decides one capability against a compiled policy.
pub fn reach(capability: &Capability, policy: &CompiledPolicy, prover: &Prover) -> Reach {
    if capability.channel == Channel::File {
        return match capability.resource.as_deref() {
            Some(path) if check_absolute_path("resource", path).is_ok() => {
                let read = FilesystemAction {
                    access: Access::Read,
                    path: path.to_string(),
                };
                if allows_filesystem(policy, &read) {
                    Reach::Possible(format!("the policy allows reading {path}"))
                } else {
                    Reach::Denied
                }
            }
            _ => Reach::Possible("a file read without a literal absolute path".into()),
        };
    }
    let Some(region) = capability.network_region() else {
        return Reach::Possible(format!(
            "{} access is outside the network policy",
            capability.channel
        ));
    };
    let region = match compile_region(&region, "capability") {
        Ok(region) => region,
        Err(reason) => return Reach::Possible(format!("destination not modelled: {reason}")),
    };
    match prover.intersection(policy, &region).outcome {
        Outcome::Within => Reach::Denied,
        Outcome::Exceeds { counterexample } => {
            Reach::Possible(format!("the policy allows {counterexample}"))
        }
        other => Reach::Possible(format!(
            "the prover could not decide ({})",
            other.reason().map(|r| r.to_string()).unwrap_or_default()
        )),
    }
}

/// The graph as a sandbox runs it: capabilities the policy denies are
/// dropped. Nodes and edges stay: the tool's code still runs and still
/// relays what flows through it, and a label the graph declares is not a
/// capability a policy can take away. Returns the graph and the ids of
/// nodes that lost a capability.
pub fn restrict(graph: &Graph, policy: &CompiledPolicy, prover: &Prover) -> (Graph, Vec<String>) {
    let mut restricted = graph.clone();
    let mut touched = Vec::new();
    for node in &mut restricted.nodes {
        let before = node.capabilities.len();
        node.capabilities
            .retain(|c| reach(c, policy, prover) != Reach::Denied);
        if node.capabilities.len() != before {
            touched.push(node.id.clone());
        }
    }
    (restricted, touched)
}

/// For each finding (of `graph`), the nodes whose restriction severs it, or
/// `None` when the finding survives the policy.
pub fn severed_by(
    findings: &[Finding],
    restricted: &Graph,
    touched: &[String],
) -> Result<Vec<Option<Vec<String>>>, GraphError> {
    let indexed = restricted.indexed()?;
    let removed = vec![false; indexed.len()];
    Ok(findings
        .iter()
        .map(|finding| {
            let alive = indexed
                .index
                .get(finding.sink.as_str())
                .is_some_and(|&sink| has_trifecta(&indexed, sink, &removed));
            if alive {
                return None;
            }
            let on_paths = |id: &String| {
                *id == finding.sink
                    || finding.cut.contains(id)
                    || finding.control.path.iter().any(|h| h.node == *id)
                    || finding.data.path.iter().any(|h| h.node == *id)
            };
            let mut by: Vec<String> = touched.iter().filter(|id| on_paths(id)).cloned().collect();
            if by.is_empty() {
                by = touched.to_vec();
            }
            Some(by)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use agentgate_policy::compile::{Limits, Role};
    use agentgate_policy::load::load_document;
    use agentgate_prover::ProverOptions;
    use agentgate_trifecta::analysis::analyze;
    use agentgate_trifecta::graph::{Destination, Effect, Node};

    fn policy(yaml: &str) -> CompiledPolicy {
        load_document(yaml, &Limits::default())
            .unwrap()
            .compile(Role::Sandbox, &Limits::default())
            .unwrap()
            .policy
    }

    fn capability(effect: Effect, channel: Channel, host: Option<&str>) -> Capability {
        Capability {
            effect,
            channel,
            call: None,
            destination: host.map(|h| Destination {
                host: Some(h.into()),
                ..Destination::default()
            }),
            resource: Some("SMTP_PASSWORD".into()),
            source: None,
        }
    }

    fn mail_agent() -> Graph {
        Graph::single_agent(vec![
            Node::tool(
                "read_email",
                vec![capability(
                    Effect::UntrustedInput,
                    Channel::Mail,
                    Some("imap.example.com"),
                )],
                None,
            ),
            Node::tool(
                "query_customers",
                vec![capability(
                    Effect::ReadsInternal,
                    Channel::Database,
                    Some("db.internal"),
                )],
                None,
            ),
            Node::tool(
                "send_email",
                vec![
                    capability(Effect::Egress, Channel::Mail, Some("smtp.example.com")),
                    capability(Effect::ReadsSecret, Channel::Env, None),
                ],
                None,
            ),
        ])
    }

    #[test]
    fn finding_regions_list_network_capabilities_sink_first() {
        let graph = mail_agent();
        let findings = analyze(&graph).unwrap();
        let regions = finding_regions(&findings[0], &graph);
        assert_eq!(regions.sink, "send_email");
        let nodes: Vec<&str> = regions
            .capabilities
            .iter()
            .map(|c| c.node.as_str())
            .collect();
        // The env read of send_email has no network region; the mail egress does.
        assert_eq!(nodes.first(), Some(&"send_email"));
        assert!(nodes.contains(&"read_email"), "{nodes:?}");
        let hosts = regions.capabilities[0]
            .region
            .hosts
            .clone()
            .unwrap_or_default();
        assert_eq!(hosts, ["smtp.example.com"]);
        // What it produces always loads in the data plane.
        let json = serde_json::to_string(&vec![regions]).unwrap();
        let parsed: Vec<agentgate_policy::findings::FindingRegions> =
            serde_json::from_str(&json).unwrap();
        assert!(agentgate_policy::findings::CompiledFindings::compile(&parsed).is_ok());
    }

    #[test]
    fn a_policy_without_the_smtp_host_severs_the_mail_sink() {
        let prover = Prover::new(ProverOptions::default());
        let graph = mail_agent();
        let findings = analyze(&graph).unwrap();
        assert_eq!(findings.len(), 1);

        let github =
            policy("network:\n- name: gh\n  endpoints: [{host: api.github.com, ports: [443]}]\n");
        let (restricted, touched) = restrict(&graph, &github, &prover);
        // The env read stays: a network policy cannot stop it.
        assert!(restricted.node("send_email").is_some());
        let severed = severed_by(&findings, &restricted, &touched).unwrap();
        assert_eq!(
            severed[0]
                .as_deref()
                .map(|v| v.contains(&"send_email".to_string())),
            Some(true)
        );

        let smtp = policy(
            "network:\n- name: mail\n  endpoints: [{host: smtp.example.com, ports: [587]}, {host: imap.example.com, ports: [993]}]\n",
        );
        let (restricted, touched) = restrict(&graph, &smtp, &prover);
        assert_eq!(
            severed_by(&findings, &restricted, &touched).unwrap(),
            vec![None]
        );

        // Blocking the untrusted input severs it too.
        let everything_but_imap = policy(
            "network:\n- name: out\n  endpoints: [{host: smtp.example.com, ports: [587]}, {host: db.internal, ports: [5432]}]\n",
        );
        let (restricted, touched) = restrict(&graph, &everything_but_imap, &prover);
        assert_eq!(
            severed_by(&findings, &restricted, &touched).unwrap(),
            vec![Some(vec!["read_email".to_string()])]
        );
        // The node stays (its code still runs), without the capability.
        assert_eq!(
            restricted.node("read_email").map(|n| n.capabilities.len()),
            Some(0)
        );
    }
}
