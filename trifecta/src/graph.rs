//! The agent information-flow graph (docs/design.md §1, §7): one node per tool plus
//! `__llm__` (and sub-agents), labelled with a Biba integrity and a
//! Bell-LaPadula confidentiality level, connected by data and control edges.
//! The scanner writes this graph into AgentScan manifests and reports, so its
//! serde form must stay that of the API's own `AgentScan.spec.graph` type
//! (agentgate-api's `scan::Graph`; agentgate-governance's conversion tests
//! compare the two): fields are camelCase and unknown fields are refused.

use std::collections::HashMap;
use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use agentgate_policy::model::{Region, ToolEntry};

/// The id of the language-model node of a single-agent graph.
pub const LLM: &str = "__llm__";

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

impl Label {
    /// The bottom of the information order: trusted and public. Joining it
    /// changes nothing.
    pub const BOTTOM: Label = Label {
        integrity: Integrity::Trusted,
        confidentiality: Confidentiality::Public,
    };

    /// Least upper bound in the information order: the lower integrity and
    /// the higher confidentiality.
    pub fn join(self, other: Label) -> Label {
        Label {
            integrity: self.integrity.min(other.integrity),
            confidentiality: self.confidentiality.max(other.confidentiality),
        }
    }

    /// True when `self` carries at most the taint of `other` (`self ⊑ other`).
    pub fn flows_to(self, other: Label) -> bool {
        self.join(other) == other
    }
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

impl Channel {
    /// The name used in graphs, manifests and messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Channel::Http => "http",
            Channel::Mail => "mail",
            Channel::Feed => "feed",
            Channel::Browser => "browser",
            Channel::Search => "search",
            Channel::Chat => "chat",
            Channel::Webhook => "webhook",
            Channel::Socket => "socket",
            Channel::Exec => "exec",
            Channel::Env => "env",
            Channel::File => "file",
            Channel::Database => "database",
            Channel::Storage => "storage",
            Channel::Keyring => "keyring",
        }
    }
}

impl fmt::Display for Channel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
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

impl SourceLocation {
    /// `file:line`, as an `Option` for the fields that take one.
    pub fn at(file: &str, line: u32) -> Option<SourceLocation> {
        Some(SourceLocation {
            file: file.to_string(),
            line,
        })
    }
}

impl fmt::Display for SourceLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.file, self.line)
    }
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

impl Capability {
    /// A capability with no literal destination or resource, seen at
    /// `source`.
    pub fn new(effect: Effect, channel: Channel, source: Option<SourceLocation>) -> Capability {
        Capability {
            effect,
            channel,
            call: None,
            destination: None,
            resource: None,
            source,
        }
    }

    /// The label this capability gives the node that has it.
    pub fn label(&self) -> Label {
        match self.effect {
            Effect::UntrustedInput => Label {
                integrity: Integrity::Untrusted,
                confidentiality: Confidentiality::Public,
            },
            Effect::Egress => Label::BOTTOM,
            Effect::ReadsInternal => Label {
                integrity: Integrity::Trusted,
                confidentiality: Confidentiality::Internal,
            },
            Effect::ReadsSecret => Label {
                integrity: Integrity::Trusted,
                confidentiality: Confidentiality::Secret,
            },
        }
    }

    /// The network actions the capability needs, as a policy region, or
    /// `None` when a network policy cannot stop it (environment and file
    /// reads). Without a literal destination the region is every host.
    /// `exec` needs the network to leak anything, so its region is the whole
    /// network.
    pub fn network_region(&self) -> Option<Region> {
        match self.channel {
            Channel::Env | Channel::File => None,
            Channel::Exec => Some(Region::default()),
            _ => {
                let destination = self.destination.clone().unwrap_or_default();
                Some(Region {
                    binaries: None,
                    hosts: destination.host.map(|h| vec![h]),
                    ports: destination.port.map(|p| vec![p]),
                    layers: None,
                    methods: destination.method.map(|m| vec![m]),
                    ..Region::default()
                })
            }
        }
    }
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

impl Node {
    /// A tool node with these capabilities, defined at `source`.
    pub fn tool(id: &str, capabilities: Vec<Capability>, source: Option<SourceLocation>) -> Node {
        Node {
            id: id.to_string(),
            capabilities,
            source,
            ..Node::default()
        }
    }

    /// The node's own label: declared joined with its capabilities'.
    pub fn intrinsic_label(&self) -> Label {
        self.capabilities
            .iter()
            .fold(self.label, |label, c| label.join(c.label()))
    }

    /// True when the node sends information out (it is a sink).
    pub fn is_egress(&self) -> bool {
        self.capabilities.iter().any(|c| c.effect == Effect::Egress)
    }

    /// The egress channels of the node, sorted and unique.
    pub fn egress_channels(&self) -> Vec<Channel> {
        let mut channels: Vec<Channel> = self
            .capabilities
            .iter()
            .filter(|c| c.effect == Effect::Egress)
            .map(|c| c.channel)
            .collect();
        channels.sort();
        channels.dedup();
        channels
    }

    /// The calls that invoke the node, as a region (docs/policy-semantics.md
    /// §8.5): calls of its tool name at its server; `None` for a node the
    /// agent does not reach over MCP.
    pub fn invocation_region(&self) -> Option<Region> {
        let mcp = self.mcp.as_ref()?;
        Some(Region {
            hosts: mcp.host.clone().map(|h| vec![h]),
            ports: mcp.port.map(|p| vec![p]),
            paths: mcp.path.clone().map(|p| vec![p]),
            tools: Some(vec![ToolEntry {
                name: mcp.name.clone(),
                ..ToolEntry::default()
            }]),
            ..Region::default()
        })
    }

    /// True when a fix may remove (restrict) the node.
    pub fn removable(&self) -> bool {
        self.kind != NodeKind::Llm && !self.load_bearing
    }
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

/// Why a graph cannot be analysed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GraphError {
    /// Two nodes share an id.
    #[error("nodes[{index}]: duplicate node id {id:?}")]
    DuplicateNode {
        /// Position of the second occurrence.
        index: usize,
        /// The id.
        id: String,
    },
    /// A node id is empty.
    #[error("nodes[{index}]: empty node id")]
    EmptyId {
        /// Position of the node.
        index: usize,
    },
    /// An edge names a node that does not exist.
    #[error("edges[{index}]: unknown node {id:?}")]
    UnknownNode {
        /// Position of the edge.
        index: usize,
        /// The missing id.
        id: String,
    },
}

/// A checked graph with nodes addressed by index, for the analyses.
#[derive(Debug, Clone)]
pub struct IndexedGraph<'g> {
    /// The graph.
    pub graph: &'g Graph,
    /// Node index by id.
    pub index: HashMap<&'g str, usize>,
    /// Outgoing edges per node: (target, kind), in edge order.
    pub successors: Vec<Vec<(usize, EdgeKind)>>,
    /// Incoming edges per node: (source, kind), in edge order.
    pub predecessors: Vec<Vec<(usize, EdgeKind)>>,
}

impl Graph {
    /// A single-agent graph: `__llm__` plus `tools`, each wired the way the
    /// model sees a tool — its output enters the context (data), and the
    /// model decides to call it (control) and passes the arguments (data).
    /// This is the shape the scanner builds.
    pub fn single_agent(tools: Vec<Node>) -> Graph {
        let mut edges = Vec::with_capacity(3 * tools.len());
        for tool in &tools {
            for (from, to, kind) in [
                (tool.id.as_str(), LLM, EdgeKind::Data),
                (LLM, tool.id.as_str(), EdgeKind::Control),
                (LLM, tool.id.as_str(), EdgeKind::Data),
            ] {
                edges.push(Edge {
                    from: from.to_string(),
                    to: to.to_string(),
                    kind,
                });
            }
        }
        let llm = Node {
            id: LLM.to_string(),
            kind: NodeKind::Llm,
            ..Node::default()
        };
        Graph {
            nodes: std::iter::once(llm).chain(tools).collect(),
            edges,
        }
    }

    /// Checks ids and edges and builds the adjacency lists.
    pub fn indexed(&self) -> Result<IndexedGraph<'_>, GraphError> {
        let mut index = HashMap::with_capacity(self.nodes.len());
        for (i, node) in self.nodes.iter().enumerate() {
            if node.id.is_empty() {
                return Err(GraphError::EmptyId { index: i });
            }
            if index.insert(node.id.as_str(), i).is_some() {
                return Err(GraphError::DuplicateNode {
                    index: i,
                    id: node.id.clone(),
                });
            }
        }
        let mut successors = vec![Vec::new(); self.nodes.len()];
        let mut predecessors = vec![Vec::new(); self.nodes.len()];
        for (i, edge) in self.edges.iter().enumerate() {
            let lookup = |id: &String| {
                index
                    .get(id.as_str())
                    .copied()
                    .ok_or_else(|| GraphError::UnknownNode {
                        index: i,
                        id: id.clone(),
                    })
            };
            let (from, to) = (lookup(&edge.from)?, lookup(&edge.to)?);
            successors[from].push((to, edge.kind));
            predecessors[to].push((from, edge.kind));
        }
        Ok(IndexedGraph {
            graph: self,
            index,
            successors,
            predecessors,
        })
    }

    /// The node with this id.
    pub fn node(&self, id: &str) -> Option<&Node> {
        self.nodes.iter().find(|n| n.id == id)
    }
}

impl IndexedGraph<'_> {
    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.graph.nodes.len()
    }

    /// True when the graph has no nodes.
    pub fn is_empty(&self) -> bool {
        self.graph.nodes.is_empty()
    }

    /// The node at `i`.
    pub fn node(&self, i: usize) -> &Node {
        &self.graph.nodes[i]
    }
}
