//! The wire form of `AgentScan`: the information-flow graph CI writes into
//! `spec.graph` and the findings the operator writes into `status.findings`
//! (docs/trifecta.md). These are the API's own types, not the analysis's:
//! their serde and schema shape is the published `v1alpha1` contract, so a
//! change to the trifecta model cannot change the CRD by accident.
//! agentgate-governance converts between the two (`convert`). Fields are
//! camelCase and unknown fields are refused.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The id every trifecta finding carries, and the one an `acceptedFindings`
/// entry names to accept it.
pub const TRIFECTA_ID: &str = "AG-TRIFECTA";

/// Biba integrity: how far a node's output can be trusted. `Untrusted` is the
/// bottom, so the join (meet of trust) is the minimum.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Integrity {
    /// Content an attacker may control (web pages, mail, feeds).
    Untrusted,
    /// Content the operator controls.
    #[default]
    Trusted,
}

/// Bell-LaPadula confidentiality: how secret a node's output is. The join is
/// the maximum.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Confidentiality {
    /// Anyone may see it.
    #[default]
    Public,
    /// Business data: customer records, internal documents.
    Internal,
    /// Credentials and keys.
    Secret,
}

/// A point of the product lattice integrity × confidentiality.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Label {
    /// Biba integrity.
    #[serde(default)]
    pub integrity: Integrity,
    /// Bell-LaPadula confidentiality.
    #[serde(default)]
    pub confidentiality: Confidentiality,
}

/// What a node is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum NodeKind {
    /// A tool the model can call.
    #[default]
    Tool,
    /// A language model's context; never removable by a fix.
    Llm,
    /// Another agent reached by delegation.
    Agent,
}

/// What a capability does with information.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum Effect {
    /// Brings content an attacker may control into the agent.
    UntrustedInput,
    /// Sends information out of the sandbox (or runs code that can).
    Egress,
    /// Reads business data (confidentiality `internal`).
    ReadsInternal,
    /// Reads credentials or keys (confidentiality `secret`).
    ReadsSecret,
}

/// The mechanism of a capability; egress kinds are what declassifiers name.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Channel {
    /// An HTTP request.
    Http,
    /// Reading mail (IMAP, POP) or sending it (SMTP).
    Mail,
    /// RSS/Atom feeds.
    Feed,
    /// A headless browser.
    Browser,
    /// A web-search API.
    Search,
    /// A chat SDK (Slack, Discord, Teams, Telegram).
    Chat,
    /// A webhook client.
    Webhook,
    /// A raw socket.
    Socket,
    /// A subprocess, `eval` or `exec`.
    Exec,
    /// An environment variable.
    Env,
    /// A file on disk.
    File,
    /// A database.
    Database,
    /// Cloud object storage (S3, GCS, Azure Blob).
    Storage,
    /// An OS keyring or keychain.
    Keyring,
}

/// A literal destination found in a tool body, for the link to the policy.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Destination {
    /// Lower-case DNS name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// TCP port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// HTTP method, upper-case.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    /// Request path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

/// Where something was found in the agent's source.
#[derive(
    Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SourceLocation {
    /// Path relative to the scanned directory, `/`-separated.
    pub file: String,
    /// 1-based line.
    pub line: u32,
}

/// One thing a tool body does, with the evidence for it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Capability {
    /// What it does with information.
    pub effect: Effect,
    /// How.
    pub channel: Channel,
    /// The call that shows it, e.g. `requests.post`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call: Option<String>,
    /// Literal destination, when the code names one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination: Option<Destination>,
    /// Literal file path or environment variable read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<String>,
    /// Where the call is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<SourceLocation>,
}

/// How the agent reaches a tool that an MCP server serves: the tool's name
/// there and, when known, the server's address. A policy that provably
/// denies every such call makes the tool uncallable, which severs every
/// finding through it (docs/design.md §7).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct McpTool {
    /// The tool's name on the server (`tools/call` name).
    pub name: String,
    /// The server's host, lower-case.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// The server's port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// The server's path, e.g. `/mcp`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

/// A tool, a model context or a delegated agent.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Node {
    /// Unique id: the tool's name, `__llm__`, or `agent/__llm__`.
    pub id: String,
    /// Tool, model or agent.
    #[serde(default)]
    pub kind: NodeKind,
    /// Declared label. The analysis joins it with the labels the
    /// capabilities imply, so a graph cannot lower a node below its evidence.
    #[serde(default)]
    pub label: Label,
    /// What the node's body does.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capabilities: Vec<Capability>,
    /// The node cannot be removed by a fix (the agent needs it).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub load_bearing: bool,
    /// Egress channels for which this node's output is declassified (e.g. a
    /// redaction step before mail): data paths through it do not count for
    /// sinks of these channels.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub declassifies: Vec<Channel>,
    /// Where the tool is defined.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<SourceLocation>,
    /// Set when the agent calls this tool over MCP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp: Option<McpTool>,
}

/// How information moves along an edge.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum EdgeKind {
    /// Output of `from` becomes input of `to`.
    Data,
    /// `from` decides whether and how `to` runs.
    Control,
}

/// A directed edge.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Edge {
    /// Source node id.
    pub from: String,
    /// Target node id.
    pub to: String,
    /// Data or control.
    pub kind: EdgeKind,
}

/// An information-flow graph.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Graph {
    /// Tools, models and agents.
    #[serde(default)]
    pub nodes: Vec<Node>,
    /// Data and control edges.
    #[serde(default)]
    pub edges: Vec<Edge>,
}

/// How bad a finding is.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "UPPERCASE")]
pub enum Severity {
    /// Evidence incomplete: no source line for some hop.
    Medium,
    /// Internal data can reach an attacker-steered sink.
    High,
    /// Secrets can reach an attacker-steered sink.
    Critical,
}

/// One node of a witness path, with the source line that justifies it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Hop {
    /// Node id.
    pub node: String,
    /// For the first hop, the call that makes it a source; for the last, the
    /// egress call; otherwise where the node is defined.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<SourceLocation>,
}

/// A path in the graph that demonstrates one half of a finding.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Witness {
    /// The hops, from the source to the sink.
    pub path: Vec<Hop>,
}

/// A lethal-trifecta finding for one sink.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Finding {
    /// Always [`TRIFECTA_ID`].
    pub id: String,
    /// The egress node.
    pub sink: String,
    /// CRITICAL (secret data), HIGH (internal data), MEDIUM (evidence incomplete).
    pub severity: Severity,
    /// From an untrusted input to the sink; the last edge is a control edge.
    pub control: Witness,
    /// From the most secret data source to the sink, along data edges.
    pub data: Witness,
    /// A minimum set of removable nodes whose removal leaves no trifecta at
    /// this sink; empty when every cut needs a load-bearing node.
    pub cut: Vec<String>,
}
