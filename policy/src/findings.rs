//! Trifecta findings as the data plane reads them: the operator writes
//! `findings.json` next to the policy (docs/design.md §10), each finding with the
//! network regions its tools would reach, so a refusal can say which static
//! finding predicted it without the analysis (or Z3) in the data plane.

use serde::{Deserialize, Serialize};

use crate::action::{Action, McpAction, McpKind};
use crate::compile::{CompiledRegion, compile_region};
use crate::error::Reason;
use crate::matcher::region_holds;
use crate::model::Region;
use crate::provenance::{Origin, Record, Source, find_leaf};

/// One unfixed trifecta finding of the sandbox's agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct FindingRegions {
    /// Finding id, e.g. `AG-TRIFECTA`.
    pub id: String,
    /// The finding's sink node.
    pub sink: String,
    /// The finding on one line, with both witnesses.
    pub witness: String,
    /// The capabilities of the nodes on the finding's paths, sink first.
    #[serde(default)]
    pub capabilities: Vec<NodeRegion>,
    /// The flow the finding predicts between tools the agent calls over
    /// MCP, which the proxy watches for at run time (docs/trifecta.md, "At
    /// run time"); absent when one of its three nodes is no MCP tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<RuntimeFlow>,
}

/// A finding's flow as calls: untrusted content from one tool reaching the
/// model, a secret from another, and the sink's call carrying the secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RuntimeFlow {
    /// The `tools/call` name of the finding's untrusted input (the source
    /// of its control witness).
    pub untrusted: String,
    /// The `tools/call` name of its secret (the source of its data witness).
    pub secret: String,
    /// The `tools/call` name of its sink.
    pub sink: String,
    /// What an observed flow does.
    #[serde(default)]
    pub mode: RuntimeMode,
}

/// What the proxy does when it observes a finding's flow.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum RuntimeMode {
    /// Refuse the sink's call (`runtime_trifecta`).
    #[default]
    Enforce,
    /// Let it pass; log and count it.
    Audit,
}

/// A flow the proxy observed: the finding that predicted it and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservedFlow<'a> {
    /// The finding, as a refusal cites it.
    pub citation: &'a FindingCitation,
    /// The flow and its mode.
    pub flow: &'a RuntimeFlow,
    /// The argument that carries the secret, as a refusal names it
    /// (`body`, `to[1]`).
    pub argument: String,
}

/// The network actions one node of a finding can perform.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NodeRegion {
    /// The node (tool) id.
    pub node: String,
    /// The actions its capability covers.
    pub region: Region,
}

/// The static finding a runtime deny belongs to (docs/design.md §8).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FindingCitation {
    /// Finding id, e.g. `AG-TRIFECTA`.
    pub id: String,
    /// The finding's sink.
    pub sink: String,
    /// The node whose capability the action exercises.
    pub node: String,
    /// The finding on one line, with both witnesses.
    pub witness: String,
}

/// Findings with their regions compiled, ready to cite.
#[derive(Debug, Clone, Default)]
pub struct CompiledFindings {
    entries: Vec<(FindingCitation, CompiledRegion)>,
    flows: Vec<(FindingCitation, RuntimeFlow)>,
}

impl CompiledFindings {
    /// The runtime flows of the findings (docs/trifecta.md, "At run time").
    pub fn runtime_flows(&self) -> impl Iterator<Item = &RuntimeFlow> {
        self.flows.iter().map(|(_, flow)| flow)
    }

    /// Compiles every region; a region that does not compile is an error
    /// naming its finding and node, so a bad file is noticed, not ignored.
    pub fn compile(findings: &[FindingRegions]) -> Result<CompiledFindings, Reason> {
        let mut entries = Vec::new();
        let mut flows = Vec::new();
        for (i, finding) in findings.iter().enumerate() {
            if let Some(flow) = &finding.runtime {
                let citation = FindingCitation {
                    id: finding.id.clone(),
                    sink: finding.sink.clone(),
                    node: finding.sink.clone(),
                    witness: finding.witness.clone(),
                };
                flows.push((citation, flow.clone()));
            }
            for (j, capability) in finding.capabilities.iter().enumerate() {
                let field = format!("[{i}].capabilities[{j}].region");
                entries.push((
                    FindingCitation {
                        id: finding.id.clone(),
                        sink: finding.sink.clone(),
                        node: capability.node.clone(),
                        witness: finding.witness.clone(),
                    },
                    compile_region(&capability.region, &field)?,
                ));
            }
        }
        Ok(CompiledFindings { entries, flows })
    }

    /// The first finding whose flow this call of its sink completes, given
    /// the session's `record` (docs/trifecta.md, "At run time"): content
    /// of the untrusted tool has reached the model (or content has been
    /// dropped, so it may have), and a string or number of the call was
    /// seen in the secret tool's content.
    pub fn observed_flow(&self, t: &McpAction, record: &dyn Record) -> Option<ObservedFlow<'_>> {
        if t.kind != McpKind::Tool {
            return None;
        }
        self.flows
            .iter()
            .filter(|(_, flow)| flow.sink == t.name)
            .find_map(|(citation, flow)| {
                let untrusted = Source::Tool(flow.untrusted.clone());
                if !(record.evicted() || record.holds_content_from(&untrusted)) {
                    return None;
                }
                let secret = Source::Tool(flow.secret.clone());
                let argument = find_leaf(&t.args, &mut |at, shown, leaf| match record
                    .origin_at(at, leaf)
                {
                    Origin::Seen(sources) if sources.contains(&secret) => Some(shown.to_string()),
                    _ => None,
                })?;
                Some(ObservedFlow {
                    citation,
                    flow,
                    argument,
                })
            })
    }

    /// The first finding (in file order, sink first within a finding) with a
    /// node whose region contains the action.
    pub fn cite(&self, action: &Action) -> Option<&FindingCitation> {
        self.entries
            .iter()
            .find(|(_, region)| region_holds(region, action))
            .map(|(citation, _)| citation)
    }

    /// Number of node regions (citations by capability).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when there is nothing to cite.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::action::{Layer, McpAction, McpKind, NetworkAction};

    #[test]
    fn cites_the_node_whose_region_holds_the_action() {
        let findings: Vec<FindingRegions> = serde_json::from_str(
            r#"[{"id":"AG-TRIFECTA","sink":"post","witness":"fetch -> post",
                 "capabilities":[{"node":"post","region":{"hosts":["hooks.example.com"],"methods":["POST"]}}]}]"#,
        )
        .unwrap();
        let compiled = CompiledFindings::compile(&findings).unwrap();
        let mut action = NetworkAction {
            binary: "/usr/bin/python3".into(),
            host: "hooks.example.com".into(),
            port: 443,
            layer: Layer::Rest,
            method: "POST".into(),
            path: "/x".into(),
        };
        let cite = |a: &NetworkAction| compiled.cite(&Action::Network(a.clone())).cloned();
        assert_eq!(cite(&action).map(|c| c.node), Some("post".to_string()));
        action.method = "GET".into();
        assert_eq!(cite(&action), None);
    }

    #[test]
    fn a_tool_the_agent_calls_is_cited_by_its_calls_only() {
        let findings: Vec<FindingRegions> = serde_json::from_str(
            r#"[{"id":"AG-TRIFECTA","sink":"send_money","witness":"read_email -> send_money",
                 "capabilities":[{"node":"send_money","region":{"hosts":["bank.internal"],"tools":[{"name":"send_money"}]}}]}]"#,
        )
        .unwrap();
        let compiled = CompiledFindings::compile(&findings).unwrap();
        let mut call = McpAction {
            binary: "/usr/bin/python3".into(),
            host: "bank.internal".into(),
            port: 443,
            path: "/mcp".into(),
            kind: McpKind::Tool,
            name: "send_money".into(),
            args: serde_json::Map::new(),
            sources: None,
        };
        let transport = Action::Network(call.transport());
        assert_eq!(
            compiled
                .cite(&Action::Mcp(call.clone()))
                .map(|c| c.node.as_str()),
            Some("send_money")
        );
        assert_eq!(
            compiled.cite(&transport),
            None,
            "the request is not the call"
        );
        call.name = "get_balance".into();
        assert_eq!(compiled.cite(&Action::Mcp(call)), None);
    }

    #[test]
    fn a_bad_region_names_where() {
        let findings: Vec<FindingRegions> = serde_json::from_str(
            r#"[{"id":"X","sink":"s","witness":"w","capabilities":[{"node":"n","region":{"hosts":["a[b"]}}]}]"#,
        )
        .unwrap();
        let err = CompiledFindings::compile(&findings).unwrap_err();
        assert!(
            err.field
                .unwrap_or_default()
                .starts_with("[0].capabilities[0].region")
        );
    }
}
