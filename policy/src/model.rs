//! The policy document of docs/policy-semantics.md §2 as serde/schemars types.
//! These are the shapes people write (and, later, the CRD schemas); they are
//! checked and compiled into [`crate::CompiledPolicy`] before use.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The layer a network action runs at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Layer {
    /// Raw TCP.
    L4,
    /// HTTP requests (method and path are meaningful).
    Rest,
    /// A WebSocket upgrade (docs/policy-semantics.md §10.2): a `GET` with
    /// its path, query, subprotocol and origin.
    Websocket,
}

impl Layer {
    /// The layer's name as written in policies.
    pub fn as_str(self) -> &'static str {
        match self {
            Layer::L4 => "l4",
            Layer::Rest => "rest",
            Layer::Websocket => "websocket",
        }
    }
}

/// A policy: filesystem grants and network rules.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PolicyDocument {
    /// Filesystem grants.
    #[serde(default, skip_serializing_if = "Filesystem::is_empty")]
    pub filesystem: Filesystem,
    /// Network rules; each rule is a grant.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub network: Vec<NetworkRule>,
}

impl PolicyDocument {
    /// Whether every grant here is literally one of `other`'s: each network
    /// rule equal to one of its rules, each path granted as it grants that
    /// path. Syntactic, so it may say no to a policy that a proof would
    /// find inside `other`, never yes to one that grants more.
    pub fn grants_only_from(&self, other: &PolicyDocument) -> bool {
        self.network.iter().all(|rule| other.network.contains(rule))
            && self
                .filesystem
                .read_only
                .iter()
                .all(|path| other.filesystem.read_only.contains(path))
            && self
                .filesystem
                .read_write
                .iter()
                .all(|path| other.filesystem.read_write.contains(path))
    }
}

/// Filesystem grants: each entry covers the path and everything below it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Filesystem {
    /// Paths granted for reading.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub read_only: Vec<String>,
    /// Paths granted for reading and writing.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub read_write: Vec<String>,
}

impl Filesystem {
    /// True when no path is granted.
    pub fn is_empty(&self) -> bool {
        self.read_only.is_empty() && self.read_write.is_empty()
    }
}

/// A named network grant: these binaries may reach these endpoints.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NetworkRule {
    /// Unique within the policy.
    pub name: String,
    /// Executable path globs; empty or absent means any binary.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub binaries: Vec<String>,
    /// Where the binaries may connect.
    #[serde(default)]
    pub endpoints: Vec<Endpoint>,
    /// MaximumPolicy only: grants under this rule need a human.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub review: Option<Review>,
    /// The credentials that requests this rule allows may carry
    /// (docs/policy-semantics.md §9): in an AgentSandbox or a proposal, names
    /// of the sandbox's `credentials`, each bound to exactly what this rule
    /// allows; in a MaximumPolicy, name globs (`*` = any run of characters)
    /// bounding where a governed policy may bind them. Absent: the rule's
    /// requests carry no credential.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub credentials: Vec<String>,
    /// Accept `credentials` on this rule's `l4` endpoints, whose requests
    /// no method or path constrains: the credential then reaches every
    /// request the endpoint reaches (docs/policy-semantics.md §9).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_uninspected_credentials: bool,
}

/// Protocol of an endpoint. `l4`, `rest` and `mcp` are part of the language;
/// the others are reserved and make a policy Unsupported.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// Raw TCP: covers every layer.
    #[default]
    L4,
    /// HTTP with method/path rules.
    Rest,
    /// WebSocket upgrades with path, query, subprotocol and origin rules
    /// (docs/policy-semantics.md §10.2).
    Websocket,
    /// MCP (JSON-RPC over Streamable HTTP): tool, resource and prompt rules
    /// (docs/policy-semantics.md §8).
    Mcp,
    /// Reserved.
    Graphql,
}

impl Protocol {
    /// The protocol's name as written.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::L4 => "l4",
            Protocol::Rest => "rest",
            Protocol::Websocket => "websocket",
            Protocol::Mcp => "mcp",
            Protocol::Graphql => "graphql",
        }
    }

    fn is_l4(&self) -> bool {
        *self == Protocol::L4
    }
}

/// Method presets for REST endpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum AccessLevel {
    /// GET, HEAD, OPTIONS.
    ReadOnly,
    /// Read-only plus POST, PUT, PATCH.
    ReadWrite,
    /// Any method.
    Full,
}

impl AccessLevel {
    /// The preset's name as written.
    pub fn as_str(self) -> &'static str {
        match self {
            AccessLevel::ReadOnly => "read-only",
            AccessLevel::ReadWrite => "read-write",
            AccessLevel::Full => "full",
        }
    }
}

/// One destination of a rule.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
// The API server refuses an endpoint without ports before the operator
// sees it (the compiler checks the same for files).
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "has(self.port) || (has(self.ports) && size(self.ports) > 0)",
    "message": "ports: at least one port is required (or port)"
}]))]
pub struct Endpoint {
    /// Host glob.
    pub host: String,
    /// Shorthand for `ports: [port]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// Exact ports (non-empty).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<u16>,
    /// `l4` (default), `rest` or `mcp`.
    #[serde(default, skip_serializing_if = "Protocol::is_l4")]
    pub protocol: Protocol,
    /// REST: the endpoint's path scope (a path glob). MCP: the server's
    /// path (a path glob), required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// REST only: a method preset (exclusive with `rules`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access: Option<AccessLevel>,
    /// REST only: allow entries (exclusive with `access`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<RuleEntry>,
    /// REST only: deny entries; a deny wins over every allow of the policy.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deny_rules: Vec<RuleEntry>,
    /// MCP only: tool allow entries.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ToolEntry>,
    /// MCP only: tool deny entries; a deny wins over every allow of the policy.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deny_tools: Vec<ToolEntry>,
    /// MCP only: resource allow entries (URI globs).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<ResourceEntry>,
    /// MCP only: prompt allow entries.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prompts: Vec<ToolEntry>,
    /// MaximumPolicy only: grants under this endpoint need a human.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub review: Option<Review>,
    /// REST only: the agent's model provider (docs/policy-semantics.md
    /// §8.3). The requests this endpoint allows to a model API path carry
    /// the conversation the model sees: the runtime records their content
    /// as the session's `user` and `tool:NAME` content, which `from`
    /// constraints are judged against. It grants nothing by itself.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub model_provider: bool,
    /// `modelProvider` only: path globs (§3) of requests this endpoint
    /// allows that carry no conversation (embeddings, model lists, files):
    /// forwarded without being read. Every other request with a body it
    /// allows must be read as a model API the runtime knows, or it is
    /// refused (docs/policy-semantics.md §8.3).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unrecorded_paths: Vec<String>,
}

/// An MCP tool or prompt entry: a name glob and constraints on the
/// arguments (docs/policy-semantics.md §8.2).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ToolEntry {
    /// Name glob: `*` matches any run of characters, nothing else is special.
    pub name: String,
    /// Constraints by argument name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub arguments: BTreeMap<String, ArgumentConstraint>,
    /// Whether arguments not listed are allowed (default true: unconstrained).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub additional_arguments: Option<bool>,
    /// A sandbox's `tools` entries only: `ask` holds a call that this entry
    /// matches and no `allow` entry allows until a person approves it
    /// (docs/policy-semantics.md §8.6); absent means `allow`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<ToolMode>,
}

/// What a tool entry does with the calls it matches.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ToolMode {
    /// The call is allowed.
    #[default]
    Allow,
    /// The call is held until a person approves it (a held call).
    Ask,
}

/// An MCP resource entry.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ResourceEntry {
    /// URI glob: `SCHEME://AUTHORITY` literal, then a path glob (§3); or
    /// `**` for every URI.
    pub uri: String,
}

/// Constraints on one argument value; every one given must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ArgumentConstraint {
    /// The value equals one of these JSON literals.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "json_literals_schema")]
    pub one_of: Option<Vec<serde_json::Value>>,
    /// The value is a string matching this glob (`*` = any run of characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub glob: Option<String>,
    /// The value is a number at least this (inclusive).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub minimum: Option<serde_json::Number>,
    /// The value is a number at most this (inclusive).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maximum: Option<serde_json::Number>,
    /// The value is a number greater than this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exclusive_minimum: Option<serde_json::Number>,
    /// The value is a number less than this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exclusive_maximum: Option<serde_json::Number>,
    /// The value is an array whose every element satisfies this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "nested_constraint_schema")]
    pub items: Option<Box<ArgumentConstraint>>,
    /// The value is an array of at most this many elements.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_items: Option<u32>,
    /// An absent argument satisfies the constraint.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub optional: bool,
    /// Provenance: the value must have been seen from one of these sources
    /// (`user`, `model`, `empty`, `tool:NAME`, `host:NAME`; `tool:*` and
    /// `host:*` globs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<Vec<String>>,
    /// Free text: the value is a string, and every entity inside it (a
    /// URL, an email address, an IBAN-like identifier, a host name) must
    /// have been seen from one of these sources (docs/policy-semantics.md
    /// §8.3, "Values inside free text").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entities: Option<EntitiesConstraint>,
}

/// The `entities` constraint of a free-text argument.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct EntitiesConstraint {
    /// The sources every entity inside the value must have been seen from,
    /// as in `from`.
    pub from: Vec<String>,
}

/// The schema of `oneOf`: a list of arbitrary JSON values. The API server
/// needs `x-kubernetes-preserve-unknown-fields` to keep a value whose type
/// the schema does not fix.
fn json_literals_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "array",
        "items": { "x-kubernetes-preserve-unknown-fields": true }
    })
}

/// The schema of `items`: a CRD schema cannot refer to itself (every
/// subschema is inline), so there the nested constraint is an object the
/// API server keeps as written; elsewhere (the loader's field check,
/// [`crate::fields`]) it is the constraint itself, by reference.
fn nested_constraint_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    if crate::fields::inline(generator) {
        schemars::json_schema!({
            "type": "object",
            "x-kubernetes-preserve-unknown-fields": true
        })
    } else {
        generator.subschema_for::<ArgumentConstraint>()
    }
}

/// An allow or deny entry: methods and a path glob (REST), or a path,
/// subprotocols and origins (WebSocket, whose upgrade is always a `GET`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RuleEntry {
    /// REST: upper-case methods or `*` (at least one); `GET` also covers
    /// `HEAD`. WebSocket: none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub methods: Vec<String>,
    /// Path glob; absent means any path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Constraints on query parameters, by name (docs/policy-semantics.md
    /// §10.1); parameters not named are unconstrained.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub query: BTreeMap<String, QueryMatcher>,
    /// WebSocket only: the subprotocol tokens an upgrade may offer (`*`:
    /// any offered one); absent means any, or none offered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subprotocols: Option<Vec<String>>,
    /// WebSocket only: origin globs (`*` = any run of characters) the
    /// upgrade's `Origin` must match; absent means any origin, or none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origins: Option<Vec<String>>,
}

/// A constraint on one query parameter: a value glob (shorthand for
/// `{glob: ...}`) or the full form.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
#[schemars(schema_with = "query_matcher_schema")]
pub enum QueryMatcher {
    /// Present, with a value this glob matches (`*` = any run of characters).
    Glob(String),
    /// The full form.
    Spec(QuerySpec),
}

/// The full form of a query parameter's constraint: exactly one of
/// `glob`, `any` and `absent`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct QuerySpec {
    /// Present, with a value this glob matches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub glob: Option<String>,
    /// Present, with a value one of these globs matches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub any: Option<Vec<String>>,
    /// `glob`/`any` only: an absent parameter satisfies the constraint too.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub optional: bool,
    /// The parameter must not be present.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub absent: bool,
}

/// The schema of a query parameter's constraint: a string or an object. A
/// CRD schema cannot say "either" for values of different types, so there
/// it is kept as written (the loader and the compiler check its shape);
/// elsewhere it is the union itself.
fn query_matcher_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    if crate::fields::inline(generator) {
        schemars::json_schema!({ "x-kubernetes-preserve-unknown-fields": true })
    } else {
        let spec = generator.subschema_for::<QuerySpec>();
        schemars::json_schema!({ "anyOf": [{ "type": "string" }, spec] })
    }
}

/// A review requirement on a region of a MaximumPolicy.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Review {
    /// When true, agent proposals inside this region are never auto-applied.
    #[serde(default)]
    pub required: bool,
    /// Why, shown to the reviewer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// A region of network actions: each present field restricts it; an absent
/// field means any value.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Region {
    /// Binary globs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binaries: Option<Vec<String>>,
    /// Host globs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hosts: Option<Vec<String>>,
    /// Exact ports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ports: Option<Vec<u16>>,
    /// Layers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layers: Option<Vec<Layer>>,
    /// Methods (REST actions only) or `*`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub methods: Option<Vec<String>>,
    /// Path globs (REST actions only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paths: Option<Vec<String>>,
    /// MCP tool calls matching one of these entries (docs/policy-semantics.md
    /// §8.5). When `tools`, `resources` or `prompts` is given, the region
    /// holds only MCP actions: calls that one of them matches, whose
    /// transport request lies in the rest of the region.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<ToolEntry>>,
    /// MCP resource reads matching one of these URI globs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<Vec<ResourceEntry>>,
    /// MCP prompt requests matching one of these entries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompts: Option<Vec<ToolEntry>>,
    /// Credential name globs (docs/policy-semantics.md §9): when given, the
    /// region holds only actions that carry a credential one of them
    /// matches (`["*"]`: any credentialed action).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials: Option<Vec<String>>,
}

/// A hard invariant of a MaximumPolicy: no governed policy may allow any
/// action in its region.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Invariant {
    /// Name, used in verdicts.
    pub name: String,
    /// Why the region is forbidden.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The forbidden region.
    #[serde(rename = "match")]
    pub region: Region,
}

/// Weights of the least-privilege cost of a new grant (docs/design.md §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct CostWeights {
    /// Every new endpoint or filesystem entry.
    pub grant: u32,
    /// A `*` in a host.
    pub host_wildcard: u32,
    /// A `*` in a path.
    pub path_wildcard: u32,
    /// A `**` in a host or path.
    pub recursive_wildcard: u32,
    /// Any method (`*` or `access: full`).
    pub method_wildcard: u32,
    /// Any binary (absent list) or a binary glob with `*`.
    pub binary_wildcard: u32,
    /// A raw L4 grant, which covers every request at every layer.
    pub l7_to_l4: u32,
    /// Each credential a new grant may carry, or an existing grant newly
    /// carries (docs/policy-semantics.md §9).
    pub credential: u32,
}

impl Default for CostWeights {
    fn default() -> Self {
        CostWeights {
            grant: 1,
            host_wildcard: 3,
            path_wildcard: 2,
            recursive_wildcard: 6,
            method_wildcard: 3,
            binary_wildcard: 4,
            l7_to_l4: 8,
            credential: 4,
        }
    }
}

/// The least-privilege budget for auto-applied agent proposals.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Budget {
    /// The largest cost a proposal may have and still be applied automatically.
    pub max_cost: u32,
    /// Weights; absent ones take the defaults.
    #[serde(default)]
    pub weights: CostWeights,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(json: serde_json::Value) -> PolicyDocument {
        match serde_json::from_value(json) {
            Ok(policy) => policy,
            Err(e) => panic!("test policy: {e}"),
        }
    }

    #[test]
    fn a_policy_grants_only_from_another_when_each_grant_is_one_of_its_own() {
        let committed = policy(serde_json::json!({
            "filesystem": {"readOnly": ["/data"], "readWrite": ["/tmp"]},
            "network": [
                {"name": "a", "endpoints": [{"host": "a.example", "port": 443}]},
                {"name": "b", "endpoints": [{"host": "b.example", "port": 8443}]},
            ],
        }));
        let narrower = policy(serde_json::json!({
            "filesystem": {"readOnly": ["/data"]},
            "network": [{"name": "a", "endpoints": [{"host": "a.example", "port": 443}]}],
        }));
        assert!(narrower.grants_only_from(&committed));
        assert!(committed.grants_only_from(&committed));
        assert!(PolicyDocument::default().grants_only_from(&committed));
        assert!(!committed.grants_only_from(&narrower));
        // Same name, another endpoint: a different grant.
        let moved = policy(serde_json::json!({
            "network": [{"name": "a", "endpoints": [{"host": "a.example", "port": 8443}]}],
        }));
        assert!(!moved.grants_only_from(&committed));
        // A path granted for writing where the other only reads it.
        let writes = policy(serde_json::json!({"filesystem": {"readWrite": ["/data"]}}));
        assert!(!writes.grants_only_from(&committed));
    }
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
