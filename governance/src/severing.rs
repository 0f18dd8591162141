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
//!
//! A tool the agent calls over MCP (`Node::mcp`) is one more query: when the
//! policy provably allows no call of it (policy ∩ its invocation region =
//! ∅), the tool never runs, so it loses every capability and every edge: no
//! path of any finding passes through it.

use agentgate_judgement::findings::{FindingRegions, NodeRegion, RuntimeFlow};
use agentgate_policy::action::{Access, FilesystemAction, check_absolute_path};
use agentgate_policy::compile::{CompiledPolicy, compile_region};
use agentgate_policy::matcher::allows_filesystem;
use agentgate_policy::model::RuntimeMode;
use agentgate_prover::{Outcome, Prover};

use agentgate_policy::model::Region;
use agentgate_trifecta::analysis::{Finding, has_trifecta};
use agentgate_trifecta::graph::{Capability, Channel, Effect, Graph, GraphError, Node, NodeKind};

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
            // Calling the tool itself comes first: that is the call a
            // refusal of it cites.
            node.invocation_region()
                .into_iter()
                .chain(
                    node.capabilities
                        .iter()
                        .filter_map(Capability::network_region),
                )
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
        runtime: runtime_flow(finding, graph),
    }
}

/// The finding's flow as the proxy can watch for it at run time
/// (docs/trifecta.md, "At run time"), when its untrusted input (the
/// control witness's source), its secret (the data witness's source) and
/// its sink are all tools: each named as the model calls it (`tools/call`
/// name over MCP, the node's id in process), an in-process source's
/// content also what its literal hosts answer, an in-process sink's calls
/// the REST requests its egress regions hold. `None` when one of them is
/// no tool, or an in-process sink has no egress the network policy sees.
/// Enforced unless the sandbox asks for audit (the operator sets the mode).
pub fn runtime_flow(finding: &Finding, graph: &Graph) -> Option<RuntimeFlow> {
    let source = |id: &str, effects: &[Effect]| -> Option<(String, Vec<String>)> {
        let node = graph.node(id)?;
        if let Some(mcp) = &node.mcp {
            return Some((mcp.name.clone(), Vec::new()));
        }
        if node.kind != NodeKind::Tool {
            return None;
        }
        let mut hosts: Vec<String> = node
            .capabilities
            .iter()
            .filter(|c| effects.contains(&c.effect) && c.network_region().is_some())
            .filter_map(|c| c.destination.as_ref()?.host.clone())
            .collect();
        hosts.sort();
        hosts.dedup();
        Some((node.id.clone(), hosts))
    };
    let (untrusted, untrusted_hosts) = source(
        &finding.control.path.first()?.node,
        &[Effect::UntrustedInput],
    )?;
    let (secret, secret_hosts) = source(
        &finding.data.path.first()?.node,
        &[Effect::ReadsSecret, Effect::ReadsInternal],
    )?;
    let sink = graph.node(&finding.sink)?;
    let (sink_name, sink_regions) = match &sink.mcp {
        Some(mcp) => (mcp.name.clone(), Vec::new()),
        None if sink.kind == NodeKind::Tool => {
            let regions: Vec<Region> = sink
                .capabilities
                .iter()
                .filter(|c| c.effect == Effect::Egress)
                .filter_map(Capability::network_region)
                // A region the data plane could not match is read as the
                // whole network: every request is then a candidate call.
                .map(|region| match compile_region(&region, "sink") {
                    Ok(_) => region,
                    Err(_) => Region::default(),
                })
                .collect();
            if regions.is_empty() {
                return None;
            }
            (sink.id.clone(), regions)
        }
        None => return None,
    };
    Some(RuntimeFlow {
        untrusted,
        secret,
        sink: sink_name,
        untrusted_hosts,
        secret_hosts,
        sink_regions,
        mode: RuntimeMode::default(),
    })
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
    region_reach(region, policy, prover)
}

/// Decides whether the policy allows some action in a region.
fn region_reach(region: Region, policy: &CompiledPolicy, prover: &Prover) -> Reach {
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

/// Whether the policy lets the agent call the node at all: `Possible` for
/// a node it does not reach over MCP.
pub fn callable(node: &Node, policy: &CompiledPolicy, prover: &Prover) -> Reach {
    match node.invocation_region() {
        Some(region) => region_reach(region, policy, prover),
        None => Reach::Possible("the agent does not call it over MCP".into()),
    }
}

/// The graph as a sandbox runs it: capabilities the policy denies are
/// dropped. Nodes and edges stay: the tool's code still runs and still
/// relays what flows through it, and a label the graph declares is not a
/// capability a policy can take away. A tool the policy never lets the
/// agent call runs not at all: it loses every capability and edge.
/// Returns the graph and the ids of nodes that lost a capability.
pub fn restrict(graph: &Graph, policy: &CompiledPolicy, prover: &Prover) -> (Graph, Vec<String>) {
    let mut restricted = graph.clone();
    let mut touched = Vec::new();
    let mut uncallable = Vec::new();
    for node in &mut restricted.nodes {
        if callable(node, policy, prover) == Reach::Denied {
            node.capabilities.clear();
            uncallable.push(node.id.clone());
            touched.push(node.id.clone());
            continue;
        }
        let before = node.capabilities.len();
        node.capabilities
            .retain(|c| reach(c, policy, prover) != Reach::Denied);
        if node.capabilities.len() != before {
            touched.push(node.id.clone());
        }
    }
    restricted
        .edges
        .retain(|e| !uncallable.contains(&e.from) && !uncallable.contains(&e.to));
    (restricted, touched)
}

/// Drops every secret read of a credential's placeholder from the graph
/// (docs/policy-semantics.md §9): the agent holds only the placeholder in
/// that environment variable or file, which is worth nothing outside the
/// proxy, so the read is no secret leg. Returns each node that lost such a
/// read, with why.
pub fn drop_placeholder_reads(
    graph: &mut Graph,
    credentials: &[agentgate_policy::credentials::Credential],
) -> Vec<(String, String)> {
    let mut dropped = Vec::new();
    for node in &mut graph.nodes {
        let mut why = None;
        node.capabilities.retain(|c| {
            let resource = c.resource.as_deref();
            let held = credentials.iter().find(|cred| {
                c.effect == Effect::ReadsSecret
                    && resource.is_some()
                    && match c.channel {
                        Channel::Env => cred.placeholder.env.as_deref() == resource,
                        Channel::File => cred.placeholder.file.as_deref() == resource,
                        _ => false,
                    }
            });
            if let Some(cred) = held {
                why = Some(format!(
                    "{} reads {} {}, which holds only a placeholder of credential {}",
                    node.id,
                    c.channel,
                    resource.unwrap_or_default(),
                    cred.name
                ));
            }
            held.is_none()
        });
        if let Some(why) = why {
            dropped.push((node.id.clone(), why));
        }
    }
    dropped
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
        let parsed: Vec<agentgate_judgement::findings::FindingRegions> =
            serde_json::from_str(&json).unwrap();
        assert!(agentgate_judgement::findings::CompiledFindings::compile(&parsed).is_ok());
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

    /// A bank agent whose sink is a tool it calls over MCP.
    fn bank_agent() -> Graph {
        let mut send_money = Node::tool(
            "send_money",
            vec![capability(
                Effect::Egress,
                Channel::Http,
                Some("bank.internal"),
            )],
            None,
        );
        send_money.mcp = Some(agentgate_trifecta::graph::McpTool {
            name: "send_money".into(),
            host: Some("bank.internal".into()),
            port: Some(443),
            path: Some("/mcp".into()),
        });
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
                "get_user_info",
                vec![capability(Effect::ReadsSecret, Channel::Env, None)],
                None,
            ),
            send_money,
        ])
    }

    #[test]
    fn a_tool_the_policy_never_lets_the_agent_call_severs_its_findings() {
        let prover = Prover::new(ProverOptions::default());
        let graph = bank_agent();
        let findings = analyze(&graph).unwrap();
        assert_eq!(findings.len(), 1);
        assert_eq!(findings[0].sink, "send_money");
        let bank = |tools: &str| {
            policy(&format!(
                "network:\n- name: bank\n  endpoints: [{{host: imap.example.com, ports: [993]}}, {{host: bank.internal, ports: [443], protocol: mcp, path: /mcp, {tools}}}]\n"
            ))
        };
        // Reads only: the request to the bank stays possible (get_balance
        // travels there), but send_money is never called.
        let reads = bank("tools: [{name: 'get_*'}]");
        assert_eq!(callable(&graph.nodes[3], &reads, &prover), Reach::Denied);
        let (restricted, touched) = restrict(&graph, &reads, &prover);
        assert!(touched.contains(&"send_money".to_string()));
        assert!(
            restricted
                .edges
                .iter()
                .all(|e| e.from != "send_money" && e.to != "send_money")
        );
        assert_eq!(
            severed_by(&findings, &restricted, &touched).unwrap(),
            vec![Some(vec!["send_money".to_string()])]
        );
        // A deny wins, also over a broader allow.
        let denied = bank("tools: [{name: '*'}], denyTools: [{name: send_money}]");
        let (restricted, touched) = restrict(&graph, &denied, &prover);
        assert!(severed_by(&findings, &restricted, &touched).unwrap()[0].is_some());
        // Allowed with any arguments, or by raw authority: it survives.
        for open in [
            bank("tools: [{name: send_money}]"),
            policy(
                "network:\n- name: raw\n  endpoints: [{host: imap.example.com, ports: [993]}, {host: bank.internal, ports: [443]}]\n",
            ),
        ] {
            assert!(matches!(
                callable(&graph.nodes[3], &open, &prover),
                Reach::Possible(_)
            ));
            let (restricted, touched) = restrict(&graph, &open, &prover);
            assert_eq!(
                severed_by(&findings, &restricted, &touched).unwrap(),
                vec![None]
            );
        }
        // A refusal of the call cites the finding; the call comes first.
        let regions = finding_regions(&findings[0], &graph);
        assert_eq!(regions.capabilities[0].node, "send_money");
        assert!(regions.capabilities[0].region.tools.is_some());
        // Its secret and its untrusted input are tools the agent runs in
        // process: named as the model calls them, the mail host as the
        // untrusted input's too; the sink is its MCP call.
        let flow = regions.runtime.expect("three tools: a runtime flow");
        assert_eq!(
            (
                flow.untrusted.as_str(),
                flow.secret.as_str(),
                flow.sink.as_str()
            ),
            ("read_email", "get_user_info", "send_money")
        );
        assert_eq!(flow.untrusted_hosts, vec!["imap.example.com".to_string()]);
        assert!(flow.secret_hosts.is_empty() && flow.sink_regions.is_empty());
    }

    #[test]
    fn a_finding_between_mcp_tools_carries_its_runtime_flow() {
        let mut graph = bank_agent();
        let mcp = |name: &str| {
            Some(agentgate_trifecta::graph::McpTool {
                name: name.into(),
                ..Default::default()
            })
        };
        // nodes[0] is the model; then the tools in order.
        graph.nodes[1].mcp = mcp("read_email");
        graph.nodes[2].mcp = mcp("get_user_info");
        let findings = analyze(&graph).unwrap();
        let flow = finding_regions(&findings[0], &graph).runtime.unwrap();
        assert_eq!(
            (
                flow.untrusted.as_str(),
                flow.secret.as_str(),
                flow.sink.as_str()
            ),
            ("read_email", "get_user_info", "send_money")
        );
        assert_eq!(flow.mode, RuntimeMode::Enforce);
    }
    #[test]
    fn an_in_process_sink_is_watched_at_its_egress_regions() {
        let mut graph = bank_agent();
        // nodes[3] is send_money: now a function of the agent posting to the bank.
        graph.nodes[3].mcp = None;
        let findings = analyze(&graph).unwrap();
        let flow = finding_regions(&findings[0], &graph).runtime.unwrap();
        assert_eq!(flow.sink, "send_money");
        assert_eq!(flow.sink_regions.len(), 1);
        assert_eq!(
            flow.sink_regions[0].hosts,
            Some(vec!["bank.internal".to_string()])
        );
        // A sink whose egress the network policy cannot see: nothing to watch.
        graph.nodes[3].capabilities = vec![capability(Effect::Egress, Channel::File, None)];
        let findings = analyze(&graph).unwrap();
        assert_eq!(finding_regions(&findings[0], &graph).runtime, None);
    }

    #[test]
    fn a_placeholder_read_is_no_secret_leg() {
        let mut graph = mail_agent();
        // Only the mail password is worth stealing here.
        for node in graph.nodes.iter_mut().filter(|n| n.id == "query_customers") {
            node.capabilities.clear();
        }
        for node in &mut graph.nodes {
            for c in &mut node.capabilities {
                if c.effect == Effect::ReadsSecret {
                    c.resource = Some("SMTP_PASSWORD".into());
                }
            }
        }
        assert_eq!(analyze(&graph).unwrap().len(), 1);
        let smtp: agentgate_policy::credentials::Credential =
            serde_json::from_value(serde_json::json!({
                "name": "smtp-password",
                "secretRef": {"name": "smtp", "key": "password"},
                "placeholder": {"env": "SMTP_PASSWORD"},
                "attach": {"basic": {"username": "bot"}},
            }))
            .unwrap();
        let mut other = smtp.clone();
        other.placeholder.env = Some("OTHER".into());
        assert!(drop_placeholder_reads(&mut graph.clone(), &[other]).is_empty());
        let dropped = drop_placeholder_reads(&mut graph, &[smtp]);
        assert_eq!(
            dropped,
            vec![(
                "send_email".to_string(),
                "send_email reads env SMTP_PASSWORD, which holds only a placeholder of credential smtp-password".to_string()
            )]
        );
        assert!(analyze(&graph).unwrap().is_empty());
    }
}
