//! `agentgate.yaml`: what the source cannot show — tools whose code lives
//! elsewhere, tools a fix must keep, declassifiers and delegation to other
//! agents. Unknown fields are refused so a typo cannot silently drop a
//! declaration.

use serde::Deserialize;

use crate::graph::{Capability, Channel, McpTool, SourceLocation};

/// The file name looked for at the scan root.
pub const MANIFEST_FILE: &str = "agentgate.yaml";

/// The parsed manifest.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Manifest {
    /// Tools declared by hand, merged by id with the scanned ones.
    #[serde(default)]
    pub tools: Vec<ManifestTool>,
    /// Tool ids a fix may not remove.
    #[serde(default)]
    pub load_bearing: Vec<String>,
    /// Tools whose output is declassified for some egress channels.
    #[serde(default)]
    pub declassifiers: Vec<Declassifier>,
    /// Sub-agents the main agent delegates to.
    #[serde(default)]
    pub agents: Vec<Agent>,
}

/// A tool declared in the manifest.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ManifestTool {
    /// The tool's id (its name as the model sees it).
    pub name: String,
    /// What it does.
    #[serde(default)]
    pub capabilities: Vec<Capability>,
    /// Where it is defined, when known.
    #[serde(default)]
    pub source: Option<SourceLocation>,
    /// How the agent calls it over MCP (its served name and the server's
    /// address); replaces what the scanner found, so a sandbox's policy can
    /// be checked against the server the agent really talks to.
    #[serde(default)]
    pub mcp: Option<McpTool>,
}

/// A declassifying tool.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Declassifier {
    /// The tool id.
    pub tool: String,
    /// The egress channels its output is cleared for.
    pub channels: Vec<Channel>,
}

/// A delegated agent with its own model context.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Agent {
    /// The agent's name; its model node is `<name>/__llm__`.
    pub name: String,
    /// Tool ids that belong to this agent rather than the main one.
    #[serde(default)]
    pub tools: Vec<String>,
}

/// Parses manifest text; the error is serde's message (which names an
/// unknown field and its position).
pub fn parse(text: &str) -> Result<Manifest, String> {
    serde_saphyr::from_str::<Manifest>(text).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn full_manifest_parses() {
        let m = parse(
            r#"
tools:
  - name: crm_lookup
    capabilities: [{effect: readsInternal, channel: database, destination: {host: crm.internal}}]
    source: {file: vendor/crm.py, line: 12}
loadBearing: [query_customers]
declassifiers:
  - {tool: redact, channels: [mail, chat]}
agents:
  - name: researcher
    tools: [web_search]
"#,
        )
        .unwrap();
        assert_eq!(m.tools[0].name, "crm_lookup");
        assert_eq!(m.tools[0].source.as_ref().unwrap().line, 12);
        assert_eq!(
            m.declassifiers[0].channels,
            vec![Channel::Mail, Channel::Chat]
        );
        assert_eq!(m.agents[0].tools, vec!["web_search"]);
    }

    #[test]
    fn unknown_fields_are_named() {
        let e = parse("loadbearing: [x]\n").unwrap_err();
        assert!(e.contains("loadbearing"), "{e}");
        let e = parse("tools: [{name: a, capability: []}]\n").unwrap_err();
        assert!(e.contains("capability"), "{e}");
    }

    #[test]
    fn empty_manifest_is_empty() {
        assert_eq!(parse("{}").unwrap(), Manifest::default());
    }
}
