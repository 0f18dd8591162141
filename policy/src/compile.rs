//! Validation of a [`PolicyDocument`] and its compiled form, which the
//! matcher and the prover both read. Every error names its field path.

use std::collections::{BTreeSet, HashSet};

use crate::action::{Layer, check_absolute_path, check_credential_name, check_method};
use crate::error::{Reason, ReasonCode};
use crate::glob::{Glob, GlobKind};
use crate::mcp::{self, CompiledCalls, CompiledMcp};
use crate::model::{
    AccessLevel, Endpoint, NetworkRule, PolicyDocument, Protocol, Region, RuleEntry,
};
use crate::names::NameGlob;
use crate::query::{self, ParameterConstraint, QueryConstraints};

/// Who wrote the policy: decides what is allowed (review markers and broad
/// hosts only in a MaximumPolicy).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// A ceiling.
    Maximum,
    /// A sandbox policy or a proposal.
    Sandbox,
}

/// Size limits (docs/policy-semantics.md §6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Network rules per policy.
    pub rules: usize,
    /// Endpoints per policy.
    pub endpoints: usize,
    /// Binary globs per policy.
    pub binary_globs: usize,
    /// Allow and deny entries per policy.
    pub entries: usize,
    /// Input YAML bytes.
    pub input_bytes: usize,
    /// Bytes per pattern (glob).
    pub pattern_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            rules: 1024,
            endpoints: 4096,
            binary_globs: 4096,
            entries: 16_384,
            input_bytes: 4 * 1024 * 1024,
            pattern_bytes: 4 * 1024,
        }
    }
}

/// The methods an allow or deny entry covers.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum MethodSet {
    /// `*`.
    Any,
    /// These methods (`GET` already expanded to include `HEAD`).
    Only(BTreeSet<String>),
}

impl MethodSet {
    /// True when `method` is covered.
    pub fn contains(&self, method: &str) -> bool {
        match self {
            MethodSet::Any => true,
            MethodSet::Only(set) => set.contains(method),
        }
    }

    fn of(methods: &[&str]) -> MethodSet {
        MethodSet::Only(methods.iter().map(|m| m.to_string()).collect())
    }
}

/// A compiled allow or deny entry.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CompiledEntry {
    /// Covered methods.
    pub methods: MethodSet,
    /// Path glob; `None` means any path.
    pub path: Option<Glob>,
    /// Query parameter constraints by name (docs/policy-semantics.md
    /// §10.1); empty: none.
    pub query: QueryConstraints,
    /// WebSocket entries: the subprotocol an upgrade offers (a literal
    /// token, or `*` for any offered one); `None`: any, or none offered.
    pub subprotocols: Option<ParameterConstraint>,
    /// WebSocket entries: the origin globs; `None`: any origin, or none.
    pub origins: Option<ParameterConstraint>,
}

impl CompiledEntry {
    /// A preset's entry (`access`): these methods on any path, nothing else.
    fn preset(methods: MethodSet) -> CompiledEntry {
        CompiledEntry {
            methods,
            path: None,
            query: Vec::new(),
            subprotocols: None,
            origins: None,
        }
    }
}

/// What an endpoint allows beyond host, port and binary.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum EndpointKind {
    /// Raw TCP: every layer, method and path.
    L4,
    /// REST: layer `rest`, within `scope`, method/path per `allow`, minus `deny`.
    Rest {
        /// The endpoint's `path` scope.
        scope: Option<Glob>,
        /// Allow entries (presets expanded).
        allow: Vec<CompiledEntry>,
        /// Deny entries.
        deny: Vec<CompiledEntry>,
    },
    /// MCP: tool, resource and prompt calls on the server's path
    /// (docs/policy-semantics.md §8.2).
    Mcp(CompiledMcp),
    /// WebSocket: layer `websocket`, within `scope`, per `allow` (methods
    /// are `GET`), minus `deny` (docs/policy-semantics.md §10.2).
    Websocket {
        /// The endpoint's `path` scope.
        scope: Option<Glob>,
        /// Allow entries.
        allow: Vec<CompiledEntry>,
        /// Deny entries.
        deny: Vec<CompiledEntry>,
    },
}

/// A compiled endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CompiledEndpoint {
    /// Host glob.
    pub host: Glob,
    /// Exact ports.
    pub ports: Vec<u16>,
    /// Layer-specific part.
    pub kind: EndpointKind,
    /// True when the endpoint or its rule is marked `review.required`.
    pub review_required: bool,
    /// `modelProvider`: the requests it allows carry the agent's
    /// conversation with its model (§8.3); grants nothing by itself.
    pub model_provider: bool,
    /// `unrecordedPaths` of a model provider: requests there carry no
    /// conversation and are forwarded unread.
    pub unrecorded_paths: Vec<Glob>,
}

impl CompiledEndpoint {
    /// Removes what the endpoint allows and keeps what it denies: the
    /// endpoint then allows nothing, and still refuses what its deny
    /// entries refuse.
    fn strip_allows(&mut self) {
        self.kind = match &self.kind {
            EndpointKind::L4 => EndpointKind::Rest {
                scope: None,
                allow: Vec::new(),
                deny: Vec::new(),
            },
            EndpointKind::Rest { scope, deny, .. } => EndpointKind::Rest {
                scope: scope.clone(),
                allow: Vec::new(),
                deny: deny.clone(),
            },
            EndpointKind::Websocket { scope, deny, .. } => EndpointKind::Websocket {
                scope: scope.clone(),
                allow: Vec::new(),
                deny: deny.clone(),
            },
            EndpointKind::Mcp(m) => EndpointKind::Mcp(CompiledMcp {
                path: m.path.clone(),
                tools: Vec::new(),
                deny_tools: m.deny_tools.clone(),
                resources: Vec::new(),
                prompts: Vec::new(),
            }),
        };
    }
}

/// A compiled network rule.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CompiledRule {
    /// The rule's name.
    pub name: String,
    /// Binary globs; empty means any binary.
    pub binaries: Vec<Glob>,
    /// Endpoints.
    pub endpoints: Vec<CompiledEndpoint>,
    /// The credentials the requests this rule allows may carry (§9): exact
    /// names in a sandbox policy, name globs in a MaximumPolicy.
    pub credentials: Vec<NameGlob>,
}

impl CompiledRule {
    /// Whether a request carrying `credential` may be allowed by this rule:
    /// every rule allows requests that carry none; only a rule that binds
    /// the credential allows those that carry it.
    pub fn binds(&self, credential: Option<&str>) -> bool {
        credential.is_none_or(|name| self.credentials.iter().any(|g| g.matches(name)))
    }
}

/// Compiled filesystem grants.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct CompiledFilesystem {
    /// Paths readable (readOnly ∪ readWrite).
    pub read: Vec<String>,
    /// Paths writable (readWrite).
    pub write: Vec<String>,
}

/// A validated policy, ready for the matcher and the prover.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct CompiledPolicy {
    /// Filesystem grants.
    pub filesystem: CompiledFilesystem,
    /// Network rules.
    pub rules: Vec<CompiledRule>,
}

/// A compiled region (invariants, trifecta sinks). `None` means any value.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct CompiledRegion {
    /// Binary globs.
    pub binaries: Option<Vec<Glob>>,
    /// Host globs.
    pub hosts: Option<Vec<Glob>>,
    /// Ports.
    pub ports: Option<Vec<u16>>,
    /// Layers.
    pub layers: Option<Vec<Layer>>,
    /// Methods (REST only).
    pub methods: Option<MethodSet>,
    /// Path globs (REST only).
    pub paths: Option<Vec<Glob>>,
    /// MCP only: the calls the region holds. `Some` means the region holds
    /// no network action, only the calls these entries match.
    pub calls: Option<CompiledCalls>,
    /// Credential name globs (§9): `Some` means the region holds only
    /// actions carrying a credential one of them matches.
    pub credentials: Option<Vec<NameGlob>>,
}

impl CompiledRegion {
    /// Whether an action carrying `credential` may lie in the region, as
    /// far as its credential part says.
    pub fn holds_credential(&self, credential: Option<&str>) -> bool {
        match (&self.credentials, credential) {
            (None, _) => true,
            (Some(_), None) => false,
            (Some(globs), Some(name)) => globs.iter().any(|g| g.matches(name)),
        }
    }
}

const READ_ONLY_METHODS: &[&str] = &["GET", "HEAD", "OPTIONS"];
const READ_WRITE_METHODS: &[&str] = &["GET", "HEAD", "OPTIONS", "POST", "PUT", "PATCH"];

fn glob(kind: GlobKind, field: &str, pattern: &str) -> Result<Glob, Reason> {
    glob_within(kind, field, pattern, Limits::default().pattern_bytes)
}

fn glob_within(kind: GlobKind, field: &str, pattern: &str, max: usize) -> Result<Glob, Reason> {
    if pattern.len() > max {
        return Err(Reason::at(
            ReasonCode::ResourceLimit,
            field,
            format!("pattern is longer than {max} bytes"),
        ));
    }
    Glob::parse(kind, pattern).map_err(|e| Reason::at(ReasonCode::InvalidGlob, field, e.0))
}

fn shape(field: impl Into<String>, message: impl Into<String>) -> Reason {
    Reason::at(ReasonCode::UnsupportedPolicyShape, field, message)
}

fn methods(field: &str, methods: &[String]) -> Result<MethodSet, Reason> {
    if methods.is_empty() {
        return Err(shape(field, "at least one method (or *) is required"));
    }
    let mut set = BTreeSet::new();
    for (i, method) in methods.iter().enumerate() {
        if method == "*" {
            return Ok(MethodSet::Any);
        }
        check_method(method).map_err(|e| shape(format!("{field}[{i}]"), e.message))?;
        if method == "GET" {
            set.insert("HEAD".to_string());
        }
        set.insert(method.clone());
    }
    Ok(MethodSet::Only(set))
}

fn entry(field: &str, e: &RuleEntry, max: usize) -> Result<CompiledEntry, Reason> {
    if e.subprotocols.is_some() || e.origins.is_some() {
        let name = if e.subprotocols.is_some() {
            "subprotocols"
        } else {
            "origins"
        };
        return Err(shape(
            format!("{field}.{name}"),
            "only the entries of a protocol: websocket endpoint take subprotocols or origins",
        ));
    }
    let (path, query) = path_and_query(field, e, max)?;
    Ok(CompiledEntry {
        methods: methods(&format!("{field}.methods"), &e.methods)?,
        path,
        query,
        subprotocols: None,
        origins: None,
    })
}

/// An entry's path glob and query constraints, which REST and websocket
/// entries read alike.
fn path_and_query(
    field: &str,
    e: &RuleEntry,
    max: usize,
) -> Result<(Option<Glob>, QueryConstraints), Reason> {
    let path = e
        .path
        .as_deref()
        .map(|p| glob_within(GlobKind::Path, &format!("{field}.path"), p, max))
        .transpose()?;
    let query = if e.query.is_empty() {
        Vec::new()
    } else {
        query::compile(&e.query, &format!("{field}.query"), max)?
    };
    Ok((path, query))
}

/// An endpoint's `rules` or `denyRules` (`list` names it), each compiled by
/// `compile_one`.
fn entries(
    at: &str,
    list: &str,
    entries: &[RuleEntry],
    max: usize,
    compile_one: fn(&str, &RuleEntry, usize) -> Result<CompiledEntry, Reason>,
) -> Result<Vec<CompiledEntry>, Reason> {
    entries
        .iter()
        .enumerate()
        .map(|(i, e)| compile_one(&format!("{at}.{list}[{i}]"), e, max))
        .collect()
}

fn filesystem_paths(field: &str, paths: &[String]) -> Result<Vec<String>, Reason> {
    paths
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let field = format!("{field}[{i}]");
            if p.contains('*') {
                return Err(shape(
                    field,
                    "filesystem entries are literal paths; wildcards are not supported",
                ));
            }
            check_absolute_path("path", p).map_err(|e| shape(field, e.message))?;
            Ok(p.clone())
        })
        .collect()
}

/// Validates and compiles a policy document.
pub fn compile(
    doc: &PolicyDocument,
    role: Role,
    limits: &Limits,
) -> Result<CompiledPolicy, Reason> {
    let read_only = filesystem_paths("filesystem.readOnly", &doc.filesystem.read_only)?;
    let read_write = filesystem_paths("filesystem.readWrite", &doc.filesystem.read_write)?;
    let filesystem = CompiledFilesystem {
        read: read_only
            .into_iter()
            .chain(read_write.iter().cloned())
            .collect(),
        write: read_write,
    };

    if doc.network.len() > limits.rules {
        return Err(Reason::at(
            ReasonCode::ResourceLimit,
            "network",
            format!("more than {} rules", limits.rules),
        ));
    }
    let mut seen = Seen::default();
    let mut names = HashSet::new();
    let mut rules = Vec::with_capacity(doc.network.len());
    for (r, rule) in doc.network.iter().enumerate() {
        let at = format!("network[{r}]");
        if rule.name.trim().is_empty() {
            return Err(shape(format!("{at}.name"), "every rule needs a name"));
        }
        if !names.insert(rule.name.as_str()) {
            return Err(shape(
                format!("{at}.name"),
                format!("duplicate rule name {:?}", rule.name),
            ));
        }
        rules.push(compile_rule(&at, rule, role, limits, &mut seen)?);
    }
    Ok(CompiledPolicy { filesystem, rules })
}

/// What a policy has used so far of the limits that count across its
/// rules.
#[derive(Default)]
struct Seen {
    endpoints: usize,
    binaries: usize,
    /// Allow and deny entries, with MCP argument constraints.
    entries: usize,
}

/// One network rule, at `at` (`network[i]`).
fn compile_rule(
    at: &str,
    rule: &NetworkRule,
    role: Role,
    limits: &Limits,
    seen: &mut Seen,
) -> Result<CompiledRule, Reason> {
    if rule.review.is_some() && role != Role::Maximum {
        return Err(shape(
            format!("{at}.review"),
            "review markers belong in a MaximumPolicy only",
        ));
    }
    let rule_review = rule.review.as_ref().is_some_and(|r| r.required);
    seen.binaries += rule.binaries.len();
    seen.endpoints += rule.endpoints.len();
    if seen.binaries > limits.binary_globs || seen.endpoints > limits.endpoints {
        return Err(Reason::at(
            ReasonCode::ResourceLimit,
            at,
            format!(
                "more than {} endpoints or {} binary globs",
                limits.endpoints, limits.binary_globs
            ),
        ));
    }
    let binaries = rule
        .binaries
        .iter()
        .enumerate()
        .map(|(i, b)| {
            glob_within(
                GlobKind::Binary,
                &format!("{at}.binaries[{i}]"),
                b,
                limits.pattern_bytes,
            )
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut endpoints = Vec::with_capacity(rule.endpoints.len());
    for (e, endpoint) in rule.endpoints.iter().enumerate() {
        let at = format!("{at}.endpoints[{e}]");
        endpoints.push(compile_endpoint(
            &at,
            endpoint,
            rule_review,
            role,
            limits,
            seen,
        )?);
    }
    let credentials = rule_credentials(at, rule, &endpoints, role, limits.pattern_bytes)?;
    Ok(CompiledRule {
        name: rule.name.clone(),
        binaries,
        endpoints,
        credentials,
    })
}

/// One endpoint, at `at` (`network[i].endpoints[j]`), of a rule that
/// requires review when `rule_review`.
fn compile_endpoint(
    at: &str,
    endpoint: &Endpoint,
    rule_review: bool,
    role: Role,
    limits: &Limits,
    seen: &mut Seen,
) -> Result<CompiledEndpoint, Reason> {
    let host = glob_within(
        GlobKind::Host,
        &format!("{at}.host"),
        &endpoint.host,
        limits.pattern_bytes,
    )?;
    if role != Role::Maximum && host.is_broad_host() {
        return Err(Reason::at(
            ReasonCode::InvalidGlob,
            format!("{at}.host"),
            "a bare * or ** host, or a wildcard over a single-label suffix, is allowed only in a MaximumPolicy",
        ));
    }
    let ports = endpoint_ports(at, endpoint)?;
    if endpoint.review.is_some() && role != Role::Maximum {
        return Err(shape(
            format!("{at}.review"),
            "review markers belong in a MaximumPolicy only",
        ));
    }
    if endpoint.model_provider && endpoint.protocol != Protocol::Rest {
        return Err(shape(
            format!("{at}.modelProvider"),
            "only a protocol: rest endpoint can be a model provider: the runtime must read its request bodies",
        ));
    }
    if !endpoint.unrecorded_paths.is_empty() && !endpoint.model_provider {
        return Err(shape(
            format!("{at}.unrecordedPaths"),
            "only a modelProvider endpoint has requests left unrecorded",
        ));
    }
    let unrecorded_paths = endpoint
        .unrecorded_paths
        .iter()
        .enumerate()
        .map(|(i, p)| {
            glob_within(
                GlobKind::Path,
                &format!("{at}.unrecordedPaths[{i}]"),
                p,
                limits.pattern_bytes,
            )
        })
        .collect::<Result<Vec<_>, _>>()?;
    let kind = match endpoint.protocol {
        Protocol::L4 => l4_kind(at, endpoint)?,
        Protocol::Mcp => mcp_kind(at, endpoint, role, limits, seen)?,
        Protocol::Rest => rest_kind(at, endpoint, limits, seen)?,
        Protocol::Websocket => websocket_kind(at, endpoint, limits, seen)?,
        reserved => {
            return Err(shape(
                format!("{at}.protocol"),
                format!(
                    "protocol {} is reserved and not modelled yet; only l4, rest, mcp and websocket are supported",
                    reserved.as_str()
                ),
            ));
        }
    };
    Ok(CompiledEndpoint {
        host,
        ports,
        kind,
        review_required: rule_review || endpoint.review.as_ref().is_some_and(|r| r.required),
        model_provider: endpoint.model_provider,
        unrecorded_paths,
    })
}

/// The endpoint's ports: `port` or `ports`, one of them, each 1..65535.
fn endpoint_ports(at: &str, endpoint: &Endpoint) -> Result<Vec<u16>, Reason> {
    let ports = match (endpoint.port, endpoint.ports.is_empty()) {
        (Some(_), false) => {
            return Err(shape(
                format!("{at}.port"),
                "give either port or ports, not both",
            ));
        }
        (Some(port), true) => vec![port],
        (None, true) => {
            return Err(shape(
                format!("{at}.ports"),
                "at least one port is required",
            ));
        }
        (None, false) => endpoint.ports.clone(),
    };
    if let Some(i) = ports.iter().position(|&p| p == 0) {
        return Err(shape(format!("{at}.ports[{i}]"), "ports are 1..65535"));
    }
    Ok(ports)
}

/// An `l4` endpoint: no L7 field at all.
fn l4_kind(at: &str, endpoint: &Endpoint) -> Result<EndpointKind, Reason> {
    let l7_field = if endpoint.path.is_some() {
        Some("path")
    } else {
        rest_field(endpoint).or_else(|| mcp_field(endpoint))
    };
    if let Some(field) = l7_field {
        return Err(shape(
            format!("{at}.{field}"),
            "an l4 endpoint takes no path, access, rules, denyRules, tools, denyTools, resources or prompts (it already covers every request)",
        ));
    }
    Ok(EndpointKind::L4)
}

/// An `mcp` endpoint: its tool, resource and prompt entries.
fn mcp_kind(
    at: &str,
    endpoint: &Endpoint,
    role: Role,
    limits: &Limits,
    seen: &mut Seen,
) -> Result<EndpointKind, Reason> {
    if let Some(field) = rest_field(endpoint) {
        return Err(shape(
            format!("{at}.{field}"),
            "an mcp endpoint takes tools, denyTools, resources and prompts, not access, rules or denyRules",
        ));
    }
    seen.entries += endpoint.tools.len()
        + endpoint.deny_tools.len()
        + endpoint.resources.len()
        + endpoint.prompts.len()
        + endpoint
            .tools
            .iter()
            .chain(&endpoint.deny_tools)
            .chain(&endpoint.prompts)
            .map(mcp::constraint_count)
            .sum::<usize>();
    if seen.entries > limits.entries {
        return Err(Reason::at(
            ReasonCode::ResourceLimit,
            at,
            format!(
                "more than {} allow/deny entries and argument constraints",
                limits.entries
            ),
        ));
    }
    Ok(EndpointKind::Mcp(compile_mcp(
        at,
        endpoint,
        role,
        limits.pattern_bytes,
    )?))
}

/// A `rest` endpoint: its path scope and its allow (`access` or `rules`)
/// and deny entries.
fn rest_kind(
    at: &str,
    endpoint: &Endpoint,
    limits: &Limits,
    seen: &mut Seen,
) -> Result<EndpointKind, Reason> {
    if let Some(field) = mcp_field(endpoint) {
        return Err(mcp_only(at, field));
    }
    if endpoint.access.is_some() && !endpoint.rules.is_empty() {
        return Err(shape(
            format!("{at}.rules"),
            "access and rules are exclusive",
        ));
    }
    let scope = http_scope(at, endpoint, limits, seen)?;
    let max = limits.pattern_bytes;
    let allow = match endpoint.access {
        Some(AccessLevel::ReadOnly) => {
            vec![CompiledEntry::preset(MethodSet::of(READ_ONLY_METHODS))]
        }
        Some(AccessLevel::ReadWrite) => {
            vec![CompiledEntry::preset(MethodSet::of(READ_WRITE_METHODS))]
        }
        Some(AccessLevel::Full) => vec![CompiledEntry::preset(MethodSet::Any)],
        None => entries(at, "rules", &endpoint.rules, max, entry)?,
    };
    let deny = entries(at, "denyRules", &endpoint.deny_rules, max, entry)?;
    Ok(EndpointKind::Rest { scope, allow, deny })
}

/// A `websocket` endpoint (docs/policy-semantics.md §10.2): its path
/// scope and its allow and deny entries, which take a path, a query,
/// subprotocols and origins, and no methods (an upgrade is a `GET`).
fn websocket_kind(
    at: &str,
    endpoint: &Endpoint,
    limits: &Limits,
    seen: &mut Seen,
) -> Result<EndpointKind, Reason> {
    if let Some(field) = mcp_field(endpoint) {
        return Err(mcp_only(at, field));
    }
    if endpoint.access.is_some() {
        return Err(shape(
            format!("{at}.access"),
            "a websocket endpoint takes rules, not an access preset (an upgrade is a GET)",
        ));
    }
    let scope = http_scope(at, endpoint, limits, seen)?;
    let max = limits.pattern_bytes;
    Ok(EndpointKind::Websocket {
        scope,
        allow: entries(at, "rules", &endpoint.rules, max, websocket_entry)?,
        deny: entries(at, "denyRules", &endpoint.deny_rules, max, websocket_entry)?,
    })
}

/// An MCP-only field on another endpoint.
fn mcp_only(at: &str, field: &str) -> Reason {
    shape(
        format!("{at}.{field}"),
        "only protocol: mcp endpoints take tools, denyTools, resources or prompts",
    )
}

/// What `rest` and `websocket` endpoints share: their entries counted
/// against the limit, and their path scope compiled.
fn http_scope(
    at: &str,
    endpoint: &Endpoint,
    limits: &Limits,
    seen: &mut Seen,
) -> Result<Option<Glob>, Reason> {
    seen.entries += endpoint.rules.len() + endpoint.deny_rules.len();
    if seen.entries > limits.entries {
        return Err(Reason::at(
            ReasonCode::ResourceLimit,
            at,
            format!("more than {} allow/deny entries", limits.entries),
        ));
    }
    endpoint
        .path
        .as_deref()
        .map(|p| {
            glob_within(
                GlobKind::Path,
                &format!("{at}.path"),
                p,
                limits.pattern_bytes,
            )
        })
        .transpose()
}

/// A websocket entry's `subprotocols` or `origins` (`list` names it): absent,
/// or a non-empty list of globs each of which `check` accepts, as a
/// constraint that the upgrade's value be present and matched.
fn upgrade_globs(
    field: &str,
    list: &str,
    values: Option<&[String]>,
    max: usize,
    check: impl Fn(&str, &str) -> Result<(), Reason>,
) -> Result<Option<ParameterConstraint>, Reason> {
    let Some(values) = values else {
        return Ok(None);
    };
    if values.is_empty() {
        return Err(shape(
            format!("{field}.{list}"),
            "an empty list allows no upgrade; omit it to allow any",
        ));
    }
    let mut globs = Vec::with_capacity(values.len());
    for (i, value) in values.iter().enumerate() {
        let at = format!("{field}.{list}[{i}]");
        check(&at, value)?;
        globs.push(NameGlob::parse(&at, value, max)?);
    }
    Ok(Some(ParameterConstraint::Matches {
        globs,
        optional: false,
    }))
}

/// One entry of a `websocket` endpoint.
fn websocket_entry(field: &str, e: &RuleEntry, max: usize) -> Result<CompiledEntry, Reason> {
    if !e.methods.is_empty() {
        return Err(shape(
            format!("{field}.methods"),
            "a websocket entry takes no methods: an upgrade is a GET",
        ));
    }
    let subprotocols = upgrade_globs(
        field,
        "subprotocols",
        e.subprotocols.as_deref(),
        max,
        |at, token| {
            if token == "*" {
                return Ok(());
            }
            crate::action::check_subprotocol(token).map_err(|e| shape(at, e.message))
        },
    )?;
    let origins = upgrade_globs(field, "origins", e.origins.as_deref(), max, |at, glob| {
        if glob.bytes().any(|b| b.is_ascii_uppercase()) {
            return Err(shape(
                at,
                "origins are compared lower-cased: write the glob in lower case",
            ));
        }
        Ok(())
    })?;
    let (path, query) = path_and_query(field, e, max)?;
    Ok(CompiledEntry {
        methods: MethodSet::of(&["GET"]),
        path,
        query,
        subprotocols,
        origins,
    })
}

/// Compiles a rule's `credentials` (docs/policy-semantics.md §9). A sandbox
/// names credentials exactly (the sandbox declares them); a ceiling may use
/// name globs. A sandbox binding on an `l4` endpoint, whose requests no
/// method or path constrains, needs `allowUninspectedCredentials`.
fn rule_credentials(
    at: &str,
    rule: &crate::model::NetworkRule,
    endpoints: &[CompiledEndpoint],
    role: Role,
    max: usize,
) -> Result<Vec<NameGlob>, Reason> {
    if rule.allow_uninspected_credentials {
        if role == Role::Maximum {
            return Err(shape(
                format!("{at}.allowUninspectedCredentials"),
                "belongs in an AgentSandbox or a PolicyProposal: a ceiling's credentials already bound every request its endpoints reach",
            ));
        }
        if rule.credentials.is_empty() {
            return Err(shape(
                format!("{at}.allowUninspectedCredentials"),
                "the rule binds no credential; remove the flag or add credentials",
            ));
        }
    }
    let mut seen = HashSet::new();
    let mut out = Vec::with_capacity(rule.credentials.len());
    for (i, name) in rule.credentials.iter().enumerate() {
        let field = format!("{at}.credentials[{i}]");
        if role == Role::Sandbox {
            check_credential_name(name).map_err(|e| shape(field.clone(), e.message))?;
        }
        if !seen.insert(name.as_str()) {
            return Err(shape(field, format!("credential {name:?} is listed twice")));
        }
        out.push(credential_glob(&field, name, max)?);
    }
    if role == Role::Sandbox
        && !out.is_empty()
        && !rule.allow_uninspected_credentials
        && let Some(e) = endpoints
            .iter()
            .position(|e| matches!(e.kind, EndpointKind::L4))
    {
        return Err(shape(
            format!("{at}.endpoints[{e}]"),
            "an l4 endpoint carries bytes the proxy does not judge by method or path, so a credential bound here would reach every request to it; bind credentials on rest or mcp endpoints, or set allowUninspectedCredentials: true on the rule to accept that reach",
        ));
    }
    Ok(out)
}

/// The first REST-only field an endpoint sets, if any (`path` aside, which
/// `rest` and `mcp` share).
fn rest_field(endpoint: &Endpoint) -> Option<&'static str> {
    if endpoint.access.is_some() {
        Some("access")
    } else if !endpoint.rules.is_empty() {
        Some("rules")
    } else if !endpoint.deny_rules.is_empty() {
        Some("denyRules")
    } else {
        None
    }
}

/// The first MCP-only field an endpoint sets, if any.
fn mcp_field(endpoint: &Endpoint) -> Option<&'static str> {
    if !endpoint.tools.is_empty() {
        Some("tools")
    } else if !endpoint.deny_tools.is_empty() {
        Some("denyTools")
    } else if !endpoint.resources.is_empty() {
        Some("resources")
    } else if !endpoint.prompts.is_empty() {
        Some("prompts")
    } else {
        None
    }
}

/// Compiles the MCP part of an endpoint (docs/policy-semantics.md §8.2).
fn compile_mcp(
    at: &str,
    endpoint: &Endpoint,
    role: Role,
    max: usize,
) -> Result<CompiledMcp, Reason> {
    let Some(path) = endpoint.path.as_deref() else {
        return Err(shape(
            format!("{at}.path"),
            "an mcp endpoint needs path: the server's path, such as /mcp",
        ));
    };
    if role == Role::Maximum {
        no_held_entries(&format!("{at}.tools"), &endpoint.tools)?;
    }
    no_held_entries(&format!("{at}.denyTools"), &endpoint.deny_tools)?;
    no_held_entries(&format!("{at}.prompts"), &endpoint.prompts)?;
    Ok(CompiledMcp {
        path: glob_within(GlobKind::Path, &format!("{at}.path"), path, max)?,
        tools: call_entries(&format!("{at}.tools"), &endpoint.tools, max)?,
        deny_tools: call_entries(&format!("{at}.denyTools"), &endpoint.deny_tools, max)?,
        resources: resource_entries(&format!("{at}.resources"), &endpoint.resources, max)?,
        prompts: call_entries(&format!("{at}.prompts"), &endpoint.prompts, max)?,
    })
}

/// Refuses `mode` on entries where it means nothing: only a sandbox's (or
/// a proposal's) `tools` hold calls for approval (docs/policy-semantics.md
/// §8.6). A ceiling bounds authority, and a held call is authority, so
/// `mode: ask` there would read as a promise the proof cannot keep.
fn no_held_entries(at: &str, entries: &[crate::model::ToolEntry]) -> Result<(), Reason> {
    match entries.iter().position(|e| e.mode.is_some()) {
        Some(i) => Err(shape(
            format!("{at}[{i}].mode"),
            "mode belongs on the tools entries of an AgentSandbox or a PolicyProposal only (a ceiling bounds held calls as it bounds allowed ones)",
        )),
        None => Ok(()),
    }
}

/// Compiles a list of tool or prompt entries; `at` is the list's field.
fn call_entries(
    at: &str,
    entries: &[crate::model::ToolEntry],
    max: usize,
) -> Result<Vec<mcp::CompiledCall>, Reason> {
    entries
        .iter()
        .enumerate()
        .map(|(i, e)| mcp::call_entry(&format!("{at}[{i}]"), e, max))
        .collect()
}

/// Compiles a list of resource entries; `at` is the list's field.
fn resource_entries(
    at: &str,
    entries: &[crate::model::ResourceEntry],
    max: usize,
) -> Result<Vec<mcp::UriGlob>, Reason> {
    entries
        .iter()
        .enumerate()
        .map(|(i, e)| mcp::resource_entry(&format!("{at}[{i}]"), e, max))
        .collect()
}

/// Validates and compiles a region (`field` prefixes error paths).
pub fn compile_region(region: &Region, field: &str) -> Result<CompiledRegion, Reason> {
    let globs = |kind: GlobKind, name: &str, list: &Option<Vec<String>>| {
        list.as_ref()
            .map(|list| {
                list.iter()
                    .enumerate()
                    .map(|(i, p)| glob(kind, &format!("{field}.{name}[{i}]"), p))
                    .collect::<Result<Vec<_>, _>>()
            })
            .transpose()
    };
    let methods = region
        .methods
        .as_ref()
        .map(|m| methods(&format!("{field}.methods"), m))
        .transpose()?;
    let calls = region_calls(region, field)?;
    if calls.is_some() {
        // A call travels as a REST `POST path`: a region that excludes that
        // request holds no call at all, which is a mistake, not a region.
        if let Some(layers) = &region.layers
            && !layers.contains(&Layer::Rest)
        {
            return Err(shape(
                format!("{field}.layers"),
                "tools, resources and prompts are calls carried by REST requests: without layer rest the region holds nothing",
            ));
        }
        if let Some(MethodSet::Only(m)) = &methods
            && !m.iter().any(|m| m == "POST")
        {
            return Err(shape(
                format!("{field}.methods"),
                "tools, resources and prompts are calls carried by POST: without POST the region holds nothing",
            ));
        }
    }
    Ok(CompiledRegion {
        binaries: globs(GlobKind::Binary, "binaries", &region.binaries)?,
        hosts: globs(GlobKind::Host, "hosts", &region.hosts)?,
        ports: region.ports.clone(),
        layers: region.layers.clone(),
        methods,
        paths: globs(GlobKind::Path, "paths", &region.paths)?,
        calls,
        credentials: region_credentials(region, field)?,
    })
}

/// A credential name glob: the characters of a credential name (§9) and
/// `*`, any run of them.
fn credential_glob(field: &str, pattern: &str, max: usize) -> Result<NameGlob, Reason> {
    if pattern.is_empty()
        || !pattern
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'*')
    {
        return Err(Reason::at(
            ReasonCode::InvalidGlob,
            field,
            "a credential glob is lower-case letters, digits, - and * (any run of them)",
        ));
    }
    NameGlob::parse(field, pattern, max)
}

/// The credential part of a region (§9), if it has one.
fn region_credentials(region: &Region, field: &str) -> Result<Option<Vec<NameGlob>>, Reason> {
    let Some(list) = &region.credentials else {
        return Ok(None);
    };
    if list.is_empty() {
        return Err(shape(
            format!("{field}.credentials"),
            "an empty list holds no action; omit the field, or give [\"*\"] for any credential",
        ));
    }
    let max = Limits::default().pattern_bytes;
    list.iter()
        .enumerate()
        .map(|(i, g)| credential_glob(&format!("{field}.credentials[{i}]"), g, max))
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

/// The MCP part of a region (docs/policy-semantics.md §8.5), if it has one.
fn region_calls(region: &Region, field: &str) -> Result<Option<CompiledCalls>, Reason> {
    // An empty list would hold no call: a typo, never what was meant.
    fn listed<'r, T>(field: &str, name: &str, list: &'r Option<Vec<T>>) -> Result<&'r [T], Reason> {
        match list {
            Some(list) if list.is_empty() => Err(shape(
                format!("{field}.{name}"),
                "an empty list holds no call; omit the field instead",
            )),
            list => Ok(list.as_deref().unwrap_or_default()),
        }
    }
    if region.tools.is_none() && region.resources.is_none() && region.prompts.is_none() {
        return Ok(None);
    }
    let max = Limits::default().pattern_bytes;
    let calls = |name: &str, entries: &Option<Vec<crate::model::ToolEntry>>| {
        let entries = listed(field, name, entries)?;
        no_held_entries(&format!("{field}.{name}"), entries)?;
        call_entries(&format!("{field}.{name}"), entries, max)
    };
    Ok(Some(CompiledCalls {
        tools: calls("tools", &region.tools)?,
        resources: resource_entries(
            &format!("{field}.resources"),
            listed(field, "resources", &region.resources)?,
            max,
        )?,
        prompts: calls("prompts", &region.prompts)?,
    }))
}

impl CompiledPolicy {
    /// Every query parameter name some allow or deny entry names
    /// (docs/policy-semantics.md §10.1): the names a repeat of is refused,
    /// and, when there are none, no rule reads the query at all.
    pub fn query_names(&self) -> std::collections::BTreeSet<String> {
        self.rules
            .iter()
            .flat_map(|r| &r.endpoints)
            .filter_map(|e| match &e.kind {
                EndpointKind::Rest { allow, deny, .. }
                | EndpointKind::Websocket { allow, deny, .. } => Some(allow.iter().chain(deny)),
                _ => None,
            })
            .flatten()
            .flat_map(|entry| entry.query.iter().map(|(name, _)| name.clone()))
            .collect()
    }

    /// The auto-eligible view of a maximum (docs/design.md §4 step 7): the same
    /// policy with the allow part of every review-required endpoint removed.
    /// Deny entries stay, so the view is never larger than the maximum.
    pub fn auto_eligible_view(&self) -> CompiledPolicy {
        let mut view = self.clone();
        for rule in &mut view.rules {
            for endpoint in &mut rule.endpoints {
                if endpoint.review_required {
                    endpoint.strip_allows();
                    endpoint.review_required = false;
                }
            }
        }
        view
    }

    /// The view of the policy for requests that carry `credential`
    /// (docs/policy-semantics.md §9): the same policy with the allow part of
    /// every rule that does not bind it removed. Deny entries stay (a deny
    /// wins across rules), so the view allows exactly the actions the
    /// policy allows with the credential attached, and refuses them for
    /// the same reasons. The rule and endpoint positions are unchanged, so
    /// a [`crate::index::HostIndex`] of the policy indexes the view too.
    pub fn bound_to(&self, credential: &str) -> CompiledPolicy {
        let mut view = self.clone();
        for rule in view.rules.iter_mut().filter(|r| !r.binds(Some(credential))) {
            rule.endpoints
                .iter_mut()
                .for_each(CompiledEndpoint::strip_allows);
        }
        view
    }

    /// The credential patterns the policy binds anywhere, each once, in
    /// policy order.
    pub fn credential_patterns(&self) -> Vec<&NameGlob> {
        let mut out: Vec<&NameGlob> = Vec::new();
        for glob in self.rules.iter().flat_map(|r| &r.credentials) {
            if !out.iter().any(|g| g.as_str() == glob.as_str()) {
                out.push(glob);
            }
        }
        out
    }

    /// True when any endpoint is marked review-required.
    pub fn has_review_regions(&self) -> bool {
        self.rules
            .iter()
            .any(|r| r.endpoints.iter().any(|e| e.review_required))
    }
}
