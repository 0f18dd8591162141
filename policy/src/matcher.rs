//! The runtime matcher: evaluates concrete actions against a compiled policy
//! exactly as docs/policy-semantics.md §4 says. No solver; this is what the
//! enforcement side runs, and what every prover counterexample is replayed
//! through.

use crate::action::{Access, Action, FilesystemAction, Layer, McpAction, McpKind, NetworkAction};
use crate::compile::{
    CompiledEndpoint, CompiledEntry, CompiledPolicy, CompiledRegion, CompiledRule, EndpointKind,
};
use crate::index::HostIndex;
use crate::mcp::Reading;
use crate::provenance::{Provenance, Record};
use std::cell::OnceCell;

/// The ruling on one action: allowed or not, with the rule that decided it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ruling {
    /// Whether the policy allows the action.
    pub allow: bool,
    /// The allowing rule, or the denying rule, if any.
    pub rule: Option<String>,
    /// One line: why.
    pub reason: String,
}

/// Who opened a connection, as far as the runtime can tell
/// (docs/policy-semantics.md §7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caller<'a> {
    /// The realpath of the one executable that owns the socket.
    Binary(&'a str),
    /// Not exactly one executable: it could be any binary. Only rules without
    /// `binaries` can allow, and every rule's `denyRules` can deny (deny wins
    /// for each binary it might be), so an unknown caller never gets more
    /// than the least-privileged binary would.
    Unknown,
}

/// The executable behind a connection or a message, if the enforcement
/// point could tell (the proxy from /proc, `agentgate-exec --mcp` from its
/// parent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binary(pub Option<String>);

impl Binary {
    /// The matcher's view.
    pub fn caller(&self) -> Caller<'_> {
        match &self.0 {
            Some(path) => Caller::Binary(path),
            None => Caller::Unknown,
        }
    }

    /// As shown in refusals and logs.
    pub fn shown(&self) -> &str {
        self.0.as_deref().unwrap_or("(unknown binary)")
    }
}

/// Whether the rule's binaries admit the caller, for an allow (`deny =
/// false`) or a deny (`deny = true`).
fn caller_ok(rule: &CompiledRule, caller: Caller<'_>, deny: bool) -> bool {
    match caller {
        Caller::Binary(binary) => {
            rule.binaries.is_empty() || rule.binaries.iter().any(|g| g.matches(binary))
        }
        Caller::Unknown => deny || rule.binaries.is_empty(),
    }
}

fn binary_ok(rule: &CompiledRule, a: &NetworkAction) -> bool {
    caller_ok(rule, Caller::Binary(&a.binary), false)
}

fn endpoint_reaches(e: &CompiledEndpoint, host: &str, port: u16) -> bool {
    e.host.matches(host) && e.ports.contains(&port)
}

fn connection_ok(rule: &CompiledRule, e: &CompiledEndpoint, a: &NetworkAction) -> bool {
    binary_ok(rule, a) && endpoint_reaches(e, &a.host, a.port)
}

fn entry_matches(entry: &CompiledEntry, a: &NetworkAction) -> bool {
    entry.methods.contains(&a.method)
        && entry.path.as_ref().is_none_or(|g| g.matches(&a.path))
        && crate::query::satisfies(&entry.query, &a.query)
        && upgrade_matches(entry, a)
}

/// A websocket entry's subprotocols and origins (docs/policy-semantics.md
/// §10.2); always true for REST entries, which have neither.
fn upgrade_matches(entry: &CompiledEntry, a: &NetworkAction) -> bool {
    let upgrade = a.upgrade.as_ref();
    entry
        .subprotocols
        .as_ref()
        .is_none_or(|c| c.admits(upgrade.and_then(|u| u.subprotocol.as_deref())))
        && entry
            .origins
            .as_ref()
            .is_none_or(|c| c.admits(upgrade.and_then(|u| u.origin.as_deref())))
}

/// The layer whose actions an endpoint's allow and deny entries judge:
/// requests for `rest`, upgrades for `websocket` (docs/policy-semantics.md
/// §4, §10.2); `None` for kinds without such entries.
fn entries_layer(kind: &EndpointKind) -> Option<Layer> {
    match kind {
        EndpointKind::Rest { .. } => Some(Layer::Rest),
        EndpointKind::Websocket { .. } => Some(Layer::Websocket),
        EndpointKind::L4 | EndpointKind::Mcp(_) => None,
    }
}

/// The layer, method and path part of `allows_E(a)`. An `mcp` endpoint
/// allows only MCP actions, never a request it cannot read as one.
fn endpoint_kind_allows(e: &CompiledEndpoint, a: &NetworkAction) -> bool {
    match &e.kind {
        EndpointKind::L4 => true,
        EndpointKind::Rest { scope, allow, .. } | EndpointKind::Websocket { scope, allow, .. } => {
            Some(a.layer) == entries_layer(&e.kind)
                && scope.as_ref().is_none_or(|g| g.matches(&a.path))
                && allow.iter().any(|entry| entry_matches(entry, a))
        }
        EndpointKind::Mcp(_) => false,
    }
}

/// The layer, method and path part of `denies_E(a)`.
fn endpoint_kind_denies(e: &CompiledEndpoint, a: &NetworkAction) -> bool {
    match &e.kind {
        EndpointKind::L4 | EndpointKind::Mcp(_) => false,
        EndpointKind::Rest { deny, .. } | EndpointKind::Websocket { deny, .. } => {
            Some(a.layer) == entries_layer(&e.kind)
                && deny.iter().any(|entry| entry_matches(entry, a))
        }
    }
}

/// The part of `allows_E(t)` beyond binary, host and port (§8.2): an `l4`
/// endpoint covers every call, a `rest` endpoint every call it allows
/// `POST path` for, an `mcp` endpoint the calls on its path its entries allow.
/// `wire` holds `t.transport()`, built at most once per decision and only
/// when a `rest` endpoint asks (most tool policies have none).
fn endpoint_kind_allows_mcp(
    e: &CompiledEndpoint,
    t: &McpAction,
    provenance: Provenance<'_>,
    reading: Reading,
    wire: &OnceCell<NetworkAction>,
) -> bool {
    match &e.kind {
        EndpointKind::L4 => true,
        EndpointKind::Rest { .. } => endpoint_kind_allows(e, wire.get_or_init(|| t.transport())),
        // A call's transport is a POST, never an upgrade.
        EndpointKind::Websocket { .. } => false,
        // The entry first: a name that differs is one comparison, and most
        // endpoints on a server name other tools; the path glob is dearer.
        EndpointKind::Mcp(m) => m.entry_allows(t, provenance, reading) && m.path.matches(&t.path),
    }
}

/// The part of `denies_E(t)` beyond binary, host and port (§8.2).
fn endpoint_kind_denies_mcp(
    e: &CompiledEndpoint,
    t: &McpAction,
    provenance: Provenance<'_>,
    wire: &OnceCell<NetworkAction>,
) -> Option<&'static str> {
    match &e.kind {
        EndpointKind::L4 | EndpointKind::Websocket { .. } => None,
        EndpointKind::Rest { .. } => endpoint_kind_denies(e, wire.get_or_init(|| t.transport()))
            .then_some("a denyRules entry"),
        EndpointKind::Mcp(m) => (m.entry_denies(t, provenance) && m.path.matches(&t.path))
            .then_some("a denyTools entry"),
    }
}

/// Whether some `rest` entry of an endpoint that reaches (host, port)
/// names a query parameter (docs/policy-semantics.md §10.1): an MCP call's
/// transport is judged without a query, so a message there that carries
/// one is refused rather than judged as something it is not.
pub fn reads_query_at(policy: &CompiledPolicy, index: &HostIndex, host: &str, port: u16) -> bool {
    index.candidates(host).iter().any(|&(r, e)| {
        let e = &policy.rules[r].endpoints[e];
        endpoint_reaches(e, host, port)
            && matches!(&e.kind, EndpointKind::Rest { allow, deny, .. }
                if allow.iter().chain(deny).any(|entry| !entry.query.is_empty()))
    })
}

/// `allows_E(a)` of §4.
pub fn endpoint_allows(rule: &CompiledRule, e: &CompiledEndpoint, a: &NetworkAction) -> bool {
    connection_ok(rule, e, a) && endpoint_kind_allows(e, a)
}

/// `denies_E(a)` of §4.
pub fn endpoint_denies(rule: &CompiledRule, e: &CompiledEndpoint, a: &NetworkAction) -> bool {
    connection_ok(rule, e, a) && endpoint_kind_denies(e, a)
}

/// What an enforcement point does with a new connection to (host, port)
/// before it has seen any request (docs/design.md §10).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConnectionDecision {
    /// No endpoint could allow any action on (caller, host, port).
    Refuse {
        /// One line: why.
        reason: String,
    },
    /// An `l4` endpoint allows every action on (caller, host, port) and no
    /// `denyRules` entry touches it: the bytes may pass uninspected.
    Tunnel {
        /// The allowing rule.
        rule: String,
    },
    /// Some actions may be allowed and others not: every request must be
    /// seen and judged as a `rest` action.
    Inspect,
}

/// Every (rule, endpoint) pair of a policy, in policy order.
fn all_pairs(policy: &CompiledPolicy) -> impl Iterator<Item = (&CompiledRule, &CompiledEndpoint)> {
    policy
        .rules
        .iter()
        .flat_map(|rule| rule.endpoints.iter().map(move |e| (rule, e)))
}

/// The (rule, endpoint) pairs a host index names for `host`, in policy order.
fn indexed_pairs<'p>(
    policy: &'p CompiledPolicy,
    index: &HostIndex,
    host: &str,
) -> impl Iterator<Item = (&'p CompiledRule, &'p CompiledEndpoint)> {
    let candidates = index.candidates(host);
    (0..candidates.len()).filter_map(move |i| {
        let (r, e) = *candidates.get(i)?;
        let rule = policy.rules.get(r)?;
        Some((rule, rule.endpoints.get(e)?))
    })
}

/// Classifies a connection so that tunnelling is sound (every action on it
/// is allowed by [`decide_network_as`]) and refusing is sound (none is).
pub fn decide_connection(
    policy: &CompiledPolicy,
    caller: Caller<'_>,
    host: &str,
    port: u16,
) -> ConnectionDecision {
    connection_over(all_pairs(policy), caller, host, port)
}

/// [`decide_connection`] looking only at the endpoints `index` (built from
/// this `policy`) names for the host: the same answer, without walking
/// every rule.
pub fn decide_connection_indexed(
    policy: &CompiledPolicy,
    index: &HostIndex,
    caller: Caller<'_>,
    host: &str,
    port: u16,
) -> ConnectionDecision {
    connection_over(indexed_pairs(policy, index, host), caller, host, port)
}

fn connection_over<'p>(
    pairs: impl Iterator<Item = (&'p CompiledRule, &'p CompiledEndpoint)>,
    caller: Caller<'_>,
    host: &str,
    port: u16,
) -> ConnectionDecision {
    let mut tunnel = None;
    let mut could_allow = false;
    let mut deny_touches = false;
    let mut attaches = false;
    for (rule, e) in pairs.filter(|(_, e)| endpoint_reaches(e, host, port)) {
        let (allow_ok, deny_ok) = (
            caller_ok(rule, caller, false),
            caller_ok(rule, caller, true),
        );
        match &e.kind {
            // A rule binding a credential on an l4 endpoint
            // (`allowUninspectedCredentials`) needs its requests read:
            // the proxy attaches the secret to each one.
            EndpointKind::L4 if allow_ok && !rule.credentials.is_empty() => {
                could_allow = true;
                attaches = true;
            }
            EndpointKind::L4 if allow_ok => {
                could_allow = true;
                tunnel.get_or_insert(rule.name.as_str());
            }
            EndpointKind::L4 => {}
            EndpointKind::Rest { allow, deny, .. }
            | EndpointKind::Websocket { allow, deny, .. } => {
                could_allow |= allow_ok && !allow.is_empty();
                deny_touches |= deny_ok && !deny.is_empty();
            }
            EndpointKind::Mcp(m) => {
                could_allow |= allow_ok && m.allows_anything();
                deny_touches |= deny_ok && !m.deny_tools.is_empty();
            }
        }
    }
    match tunnel {
        Some(rule) if !deny_touches && !attaches => ConnectionDecision::Tunnel {
            rule: rule.to_string(),
        },
        _ if could_allow => ConnectionDecision::Inspect,
        _ => ConnectionDecision::Refuse {
            reason: format!("no rule allows any connection to {host}:{port} by this binary"),
        },
    }
}

/// Decides a network action: allowed iff some endpoint allows it and no
/// endpoint of the policy denies it (deny wins, across rules).
pub fn decide_network(policy: &CompiledPolicy, a: &NetworkAction) -> Ruling {
    decide_network_as(policy, Caller::Binary(&a.binary), a)
}

/// [`decide_network`] for a caller the runtime may not know: with
/// [`Caller::Unknown`], `a.binary` is ignored and the action is allowed only
/// if it would be allowed whatever the binary is.
pub fn decide_network_as(policy: &CompiledPolicy, caller: Caller<'_>, a: &NetworkAction) -> Ruling {
    network_over(all_pairs(policy), caller, a)
}

/// [`decide_network_as`] looking only at the endpoints `index` (built from
/// this `policy`) names for `a.host`: the same decision, rule and reason.
pub fn decide_network_indexed(
    policy: &CompiledPolicy,
    index: &HostIndex,
    caller: Caller<'_>,
    a: &NetworkAction,
) -> Ruling {
    network_over(indexed_pairs(policy, index, &a.host), caller, a)
}

fn network_over<'p>(
    pairs: impl Iterator<Item = (&'p CompiledRule, &'p CompiledEndpoint)>,
    caller: Caller<'_>,
    a: &NetworkAction,
) -> Ruling {
    judge_over(
        pairs.filter(|(_, e)| endpoint_reaches(e, &a.host, a.port)),
        caller,
        a.credential.as_deref(),
        |e| endpoint_kind_denies(e, a).then_some("a denyRules entry"),
        |e| endpoint_kind_allows(e, a),
        || match &a.credential {
            Some(credential) => format!("no rule binding credential {credential} allows it"),
            None => "no rule allows it".to_string(),
        },
    )
}

/// The decision rule of §4 and §8.2 over the endpoints that reach the
/// action's host and port: the first denying endpoint (whose rule admits the
/// caller for a deny) decides; else the first allowing one; else `refusal`.
fn judge_over<'p>(
    reaching: impl Iterator<Item = (&'p CompiledRule, &'p CompiledEndpoint)>,
    caller: Caller<'_>,
    credential: Option<&str>,
    denies: impl Fn(&CompiledEndpoint) -> Option<&'static str>,
    allows: impl Fn(&CompiledEndpoint) -> bool,
    refusal: impl FnOnce() -> String,
) -> Ruling {
    let mut allowing: Option<&str> = None;
    for (rule, e) in reaching {
        if let Some(entry) = denies(e)
            && caller_ok(rule, caller, true)
        {
            return Ruling {
                allow: false,
                rule: Some(rule.name.clone()),
                reason: format!("denied by {entry} of rule {:?}", rule.name),
            };
        }
        if allowing.is_none()
            && rule.binds(credential)
            && allows(e)
            && caller_ok(rule, caller, false)
        {
            allowing = Some(&rule.name);
        }
    }
    match allowing {
        Some(rule) => Ruling {
            allow: true,
            reason: format!("allowed by rule {rule:?}"),
            rule: Some(rule.to_string()),
        },
        None => Ruling {
            allow: false,
            rule: None,
            reason: refusal(),
        },
    }
}

/// Decides an MCP action (docs/policy-semantics.md §8.2): allowed iff some
/// endpoint allows it (an `mcp` entry, or the raw authority of an `l4` or
/// `rest` endpoint) and no endpoint of the policy denies it. `from` is read
/// with the sources the action states ([`McpAction::sources`]); without
/// them, with no record.
pub fn decide_mcp(policy: &CompiledPolicy, t: &McpAction) -> Ruling {
    decide_mcp_as(policy, Caller::Binary(&t.binary), t)
}

/// [`decide_mcp`] for a caller the runtime may not know (see [`Caller`]).
pub fn decide_mcp_as(policy: &CompiledPolicy, caller: Caller<'_>, t: &McpAction) -> Ruling {
    mcp_over(all_pairs(policy), caller, t, stated(t), Reading::Allowed)
}

/// [`decide_mcp_as`] looking only at the endpoints `index` (built from this
/// `policy`) names for `t.host`: the same decision, rule and reason.
pub fn decide_mcp_indexed(
    policy: &CompiledPolicy,
    index: &HostIndex,
    caller: Caller<'_>,
    t: &McpAction,
) -> Ruling {
    mcp_over(
        indexed_pairs(policy, index, &t.host),
        caller,
        t,
        stated(t),
        Reading::Allowed,
    )
}

/// [`decide_mcp_indexed`] with `from` read from a session's record (the
/// proxy's [`crate::provenance::Lineage`]) rather than from the action.
pub fn decide_mcp_recorded(
    policy: &CompiledPolicy,
    index: &HostIndex,
    caller: Caller<'_>,
    t: &McpAction,
    record: &dyn Record,
) -> Ruling {
    mcp_over(
        indexed_pairs(policy, index, &t.host),
        caller,
        t,
        Provenance::of(record),
        Reading::Allowed,
    )
}

/// The rule that holds a call for a person's approval (`mode: ask`,
/// docs/policy-semantics.md §8.6), if one does: the call is allowed when
/// held entries count as allow entries. Deny entries still win, so a call
/// a `denyTools` entry refuses is never held. Asked only of a call the
/// policy refused ([`decide_mcp_recorded`] or [`decide_mcp_indexed`]);
/// `record` as theirs (`None`: the action's stated sources).
pub fn held_by(
    policy: &CompiledPolicy,
    index: &HostIndex,
    caller: Caller<'_>,
    t: &McpAction,
    record: Option<&dyn Record>,
) -> Option<String> {
    let provenance = match record {
        Some(record) => Provenance::of(record),
        None => stated(t),
    };
    let held = mcp_over(
        indexed_pairs(policy, index, &t.host),
        caller,
        t,
        provenance,
        Reading::AllowedOrHeld,
    );
    held.allow.then_some(held.rule).flatten()
}

/// [`held_by`] over every endpoint of the policy, with the action's stated
/// sources, for a caller that keeps no host index (as [`decide_mcp_as`]).
pub fn held_by_as(policy: &CompiledPolicy, caller: Caller<'_>, t: &McpAction) -> Option<String> {
    let held = mcp_over(
        all_pairs(policy),
        caller,
        t,
        stated(t),
        Reading::AllowedOrHeld,
    );
    held.allow.then_some(held.rule).flatten()
}

/// The provenance an action states: its sources, or no record.
fn stated(t: &McpAction) -> Provenance<'_> {
    match &t.sources {
        Some(sources) => Provenance::of(&**sources),
        None => Provenance::unrecorded(),
    }
}

fn mcp_over<'p>(
    pairs: impl Iterator<Item = (&'p CompiledRule, &'p CompiledEndpoint)>,
    caller: Caller<'_>,
    t: &McpAction,
    provenance: Provenance<'_>,
    reading: Reading,
) -> Ruling {
    // The request that carries the call, judged against rest endpoints.
    let wire = OnceCell::new();
    // An mcp endpoint naming no entry of the call neither allows nor
    // denies it: most endpoints of a server name other tools, and the
    // name is cheaper to compare than the host.
    let concerned = |e: &CompiledEndpoint| match &e.kind {
        EndpointKind::Mcp(m) => m.mentions(t),
        EndpointKind::Websocket { .. } => false,
        EndpointKind::L4 | EndpointKind::Rest { .. } => true,
    };
    judge_over(
        pairs.filter(|(_, e)| concerned(e) && endpoint_reaches(e, &t.host, t.port)),
        caller,
        t.credential.as_deref(),
        |e| endpoint_kind_denies_mcp(e, t, provenance, &wire),
        |e| endpoint_kind_allows_mcp(e, t, provenance, reading, &wire),
        || {
            let bound = match &t.credential {
                Some(credential) => format!(" binding credential {credential}"),
                None => String::new(),
            };
            match t.kind {
                McpKind::Resource => format!("no rule{bound} allows resources/read {}", t.name),
                kind => format!(
                    "no rule{bound} allows {} {} with these arguments",
                    kind.method(),
                    t.name
                ),
            }
        },
    )
}

/// An MCP server as an enforcement point sees it: where the JSON-RPC
/// messages of a request are sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct McpServer<'a> {
    /// Canonical host.
    pub host: &'a str,
    /// Port.
    pub port: u16,
    /// Canonical request path.
    pub path: &'a str,
}

impl McpServer<'_> {
    /// The request that carries every message: `POST path`.
    fn wire(&self, caller: Caller<'_>) -> NetworkAction {
        NetworkAction {
            binary: match caller {
                Caller::Binary(b) => b.to_string(),
                Caller::Unknown => String::new(),
            },
            host: self.host.to_string(),
            port: self.port,
            layer: Layer::Rest,
            method: "POST".to_string(),
            path: self.path.to_string(),
            credential: None,
            query: Default::default(),
            upgrade: None,
        }
    }
}

/// Whether some `mcp` endpoint of the policy serves `server`'s path on its
/// host and port (for any caller): requests there carry JSON-RPC messages,
/// each judged as an MCP action (docs/policy-semantics.md §8.4).
pub fn is_mcp_server(policy: &CompiledPolicy, index: &HostIndex, server: McpServer<'_>) -> bool {
    indexed_pairs(policy, index, server.host).any(|(_, e)| {
        endpoint_reaches(e, server.host, server.port)
            && matches!(&e.kind, EndpointKind::Mcp(m) if m.path.matches(server.path))
    })
}

/// What a request to the agent's model provider carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProviderPath {
    /// The conversation the model sees: read and recorded, or refused.
    Conversation,
    /// No conversation: every `modelProvider` endpoint that allows it
    /// lists its path in `unrecordedPaths`.
    Unrecorded,
}

/// Whether the request `a` reaches the agent's model provider
/// (docs/policy-semantics.md §8.3): some `modelProvider` endpoint whose rule
/// admits the caller allows it. Its body is then the conversation the model
/// sees, recorded as the session's content, unless every such endpoint
/// lists its path in `unrecordedPaths`; a request other rules allow
/// (another binary's, another path's) is none (`None`).
pub fn model_provider_path(
    policy: &CompiledPolicy,
    index: &HostIndex,
    caller: Caller<'_>,
    a: &NetworkAction,
) -> Option<ProviderPath> {
    let mut found = None;
    for (rule, e) in indexed_pairs(policy, index, &a.host) {
        if e.model_provider
            && caller_ok(rule, caller, false)
            && endpoint_reaches(e, &a.host, a.port)
            && endpoint_kind_allows(e, a)
        {
            if !e.unrecorded_paths.iter().any(|g| g.matches(&a.path)) {
                return Some(ProviderPath::Conversation);
            }
            found = Some(ProviderPath::Unrecorded);
        }
    }
    found
}

/// True when some endpoint of the policy is a `modelProvider`: the runtime
/// then keeps a record of the session's content (§8.3).
pub fn has_model_provider(policy: &CompiledPolicy) -> bool {
    policy
        .rules
        .iter()
        .flat_map(|r| &r.endpoints)
        .any(|e| e.model_provider)
}

/// What an enforcement point asks about an MCP server beyond single calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum McpQuery<'a> {
    /// May the methods that grant no authority (§8.1: `initialize`,
    /// `ping`, the `*/list` methods, notifications, responses) be sent?
    /// Yes iff the connection to the endpoint is allowed: an `mcp` endpoint
    /// on the path admits the caller, or the transport `POST path` is
    /// allowed; and no `denyRules` entry refuses `POST path`.
    Session,
    /// Should a `*/list` result show this tool, resource or prompt? Yes iff
    /// some call of it could be allowed (an entry's name or URI glob
    /// matches, or raw authority covers the server) and no `denyTools`
    /// entry refuses every call of it. Listing is a courtesy to the model;
    /// every call is still judged.
    Listed(McpKind, &'a str),
    /// Should a `resources/templates/list` result show this URI template?
    /// Yes iff some URI it may expand to could be read: a `resources` glob
    /// and the template share a URI ([`crate::mcp::UriGlob::template_example`]),
    /// or raw authority covers the server.
    ListedTemplate(&'a str),
}

/// Answers an [`McpQuery`] about `server` for `caller`.
pub fn mcp_query(
    policy: &CompiledPolicy,
    index: &HostIndex,
    caller: Caller<'_>,
    server: McpServer<'_>,
    query: McpQuery<'_>,
) -> bool {
    mcp_query_carrying(policy, index, caller, None, server, query)
}

/// [`mcp_query`] for requests that carry `credential` (§9): only the
/// rules that bind it may allow; every rule's deny entries still deny.
pub fn mcp_query_carrying(
    policy: &CompiledPolicy,
    index: &HostIndex,
    caller: Caller<'_>,
    credential: Option<&str>,
    server: McpServer<'_>,
    query: McpQuery<'_>,
) -> bool {
    let mut wire = server.wire(caller);
    wire.credential = credential.map(str::to_string);
    let mut allowed = false;
    let reaching = indexed_pairs(policy, index, server.host)
        .filter(|(_, e)| endpoint_reaches(e, server.host, server.port));
    for (rule, e) in reaching {
        let (may_allow, may_deny) = (
            caller_ok(rule, caller, false) && rule.binds(credential),
            caller_ok(rule, caller, true),
        );
        match &e.kind {
            EndpointKind::L4 => allowed |= may_allow,
            EndpointKind::Websocket { .. } => {}
            EndpointKind::Rest { .. } => {
                if may_deny && endpoint_kind_denies(e, &wire) {
                    return false;
                }
                allowed |= may_allow && endpoint_kind_allows(e, &wire);
            }
            EndpointKind::Mcp(m) if m.path.matches(server.path) => match query {
                McpQuery::Session => allowed |= may_allow,
                McpQuery::Listed(kind, name) => {
                    let unconditional = |c: &crate::mcp::CompiledCall| {
                        c.name.matches(name) && c.arguments.is_empty() && c.additional_arguments
                    };
                    if kind == McpKind::Tool && may_deny && m.deny_tools.iter().any(unconditional) {
                        return false;
                    }
                    let named = match kind {
                        McpKind::Tool => m.tools.iter().any(|c| c.name.matches(name)),
                        McpKind::Prompt => m.prompts.iter().any(|c| c.name.matches(name)),
                        McpKind::Resource => m.resources.iter().any(|g| g.matches(name)),
                    };
                    allowed |= may_allow && named;
                }
                McpQuery::ListedTemplate(template) => {
                    allowed |= may_allow
                        && m.resources
                            .iter()
                            .any(|g| g.template_example(template).is_some());
                }
            },
            EndpointKind::Mcp(_) => {}
        }
    }
    allowed
}

/// `allows_P(a)` for a network action.
pub fn allows_network(policy: &CompiledPolicy, a: &NetworkAction) -> bool {
    decide_network(policy, a).allow
}

/// True when `path` equals `base` or lies below it at a `/` boundary.
pub fn path_is_under(path: &str, base: &str) -> bool {
    if base == "/" {
        return path.starts_with('/');
    }
    path == base || (path.starts_with(base) && path.as_bytes().get(base.len()) == Some(&b'/'))
}

/// Filesystem rule of §4: read under readOnly ∪ readWrite, write under readWrite.
pub fn allows_filesystem(policy: &CompiledPolicy, a: &FilesystemAction) -> bool {
    let entries = match a.access {
        Access::Read => &policy.filesystem.read,
        Access::Write => &policy.filesystem.write,
    };
    entries.iter().any(|base| path_is_under(&a.path, base))
}

/// `allows_P(a)` for either kind of action: the policy's authority, which
/// is what containment reads, so a call a `mode: ask` entry holds counts
/// as allowed (a person may let it through; docs/policy-semantics.md
/// §8.6). Enforcement asks [`decide_mcp`] and then [`held_by`].
pub fn allows(policy: &CompiledPolicy, action: &Action) -> bool {
    match action {
        Action::Network(a) => allows_network(policy, a),
        Action::Filesystem(a) => allows_filesystem(policy, a),
        Action::Mcp(t) => {
            mcp_over(
                all_pairs(policy),
                Caller::Binary(&t.binary),
                t,
                stated(t),
                Reading::AllowedOrHeld,
            )
            .allow
        }
    }
}

/// True when a network action lies in a region. Method and path constraints
/// hold only for REST actions (an l4 action has neither); a region that
/// names tools, resources or prompts holds no network action (§8.5).
pub fn region_contains(region: &CompiledRegion, a: &NetworkAction) -> bool {
    region.calls.is_none() && transport_in_region(region, a)
}

/// True when an action lies in a region (docs/policy-semantics.md §8.5): a
/// network action as [`region_contains`] says; a tool call iff its transport
/// request lies in the region's transport part and, where the region names
/// calls, one of them matches it; a file access never. A `from` is read
/// with the sources the call states, and holds where there is no record
/// (a region is where a refusal may apply, so doubt puts a call inside).
pub fn region_holds(region: &CompiledRegion, action: &Action) -> bool {
    match action {
        Action::Network(a) => region_contains(region, a),
        Action::Mcp(t) => {
            transport_in_region(region, &t.transport())
                && region
                    .calls
                    .as_ref()
                    .is_none_or(|c| c.holds(t, stated(t).for_deny()))
        }
        Action::Filesystem(_) => false,
    }
}

/// True when a connection by `binary` to `host:port` lies in a region's
/// binaries, hosts and ports, whatever its layers, methods and paths say:
/// the part of a region a tunnel, which has no method or path, can meet.
pub fn connection_in_region(region: &CompiledRegion, binary: &str, host: &str, port: u16) -> bool {
    region
        .binaries
        .as_ref()
        .is_none_or(|g| g.iter().any(|g| g.matches(binary)))
        && region
            .hosts
            .as_ref()
            .is_none_or(|g| g.iter().any(|g| g.matches(host)))
        && region.ports.as_ref().is_none_or(|p| p.contains(&port))
}

fn transport_in_region(region: &CompiledRegion, a: &NetworkAction) -> bool {
    let rest = a.layer == Layer::Rest;
    // An upgrade has a path (and is a GET, which `methods` does not speak of).
    let has_path = rest || a.layer == Layer::Websocket;
    region.holds_credential(a.credential.as_deref())
        && connection_in_region(region, &a.binary, &a.host, a.port)
        && region.layers.as_ref().is_none_or(|l| l.contains(&a.layer))
        && region
            .methods
            .as_ref()
            .is_none_or(|m| rest && m.contains(&a.method))
        && region
            .paths
            .as_ref()
            .is_none_or(|g| has_path && g.iter().any(|g| g.matches(&a.path)))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::compile::{Limits, Role, compile};
    use crate::testing::{document, universe};

    fn network_actions() -> impl Iterator<Item = &'static NetworkAction> {
        universe().iter().filter_map(|a| match a {
            Action::Network(a) => Some(a),
            _ => None,
        })
    }

    /// The MCP calls the property tests judge: every call of the alphabet
    /// at a few (binary, host, port) triples.
    fn mcp_calls() -> &'static [McpAction] {
        static CALLS: std::sync::OnceLock<Vec<McpAction>> = std::sync::OnceLock::new();
        CALLS.get_or_init(|| {
            let mut out = Vec::new();
            for (binary, host, port) in [
                ("/usr/bin/gh", "a.io", 443),
                ("/opt/x", "b.a.io", 80),
                ("/x", "c.b.a.io", 443),
            ] {
                out.extend(crate::testing::mcp_calls(binary, host, port));
            }
            out
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

        /// Tunnelling and refusing at connect time are sound: a tunnel only
        /// where every action on the connection is allowed, a refusal only
        /// where none is; for a known binary and for an unknown one.
        #[test]
        fn connection_decisions_agree_with_actions(doc in document()) {
            let policy = compile(&doc, Role::Maximum, &Limits::default()).unwrap();
            for a in network_actions() {
                for caller in [Caller::Binary(&a.binary), Caller::Unknown] {
                    let allowed = decide_network_as(&policy, caller, a).allow;
                    match decide_connection(&policy, caller, &a.host, a.port) {
                        ConnectionDecision::Tunnel { .. } => prop_assert!(allowed, "tunnel but {a} denied"),
                        ConnectionDecision::Refuse { .. } => prop_assert!(!allowed, "refused but {a} allowed"),
                        ConnectionDecision::Inspect => {}
                    }
                }
            }
        }

        /// The host index only narrows: indexed decisions (allow, rule and
        /// reason) and connection decisions equal the unindexed ones.
        #[test]
        fn indexed_decisions_are_the_same_decisions(doc in document()) {
            let policy = compile(&doc, Role::Maximum, &Limits::default()).unwrap();
            let index = HostIndex::build(&policy);
            for a in network_actions() {
                for caller in [Caller::Binary(&a.binary), Caller::Unknown] {
                    prop_assert_eq!(
                        decide_network_indexed(&policy, &index, caller, a),
                        decide_network_as(&policy, caller, a),
                        "{}", a
                    );
                    prop_assert_eq!(
                        decide_connection_indexed(&policy, &index, caller, &a.host, a.port),
                        decide_connection(&policy, caller, &a.host, a.port),
                        "{}", a
                    );
                }
            }
        }

        /// An unknown caller gets exactly what every binary would get.
        #[test]
        fn unknown_caller_is_the_least_privileged_binary(doc in document()) {
            let policy = compile(&doc, Role::Maximum, &Limits::default()).unwrap();
            let binaries = crate::testing::BINARIES;
            for a in network_actions().filter(|a| a.binary == binaries[0]) {
                let unknown = decide_network_as(&policy, Caller::Unknown, a).allow;
                let every = binaries.iter().all(|b| {
                    let mut a = a.clone();
                    a.binary = (*b).to_string();
                    allows_network(&policy, &a)
                });
                // Unknown is never more than any binary; it equals the
                // meet whenever rules without binaries decide.
                prop_assert!(!unknown || every, "unknown allowed {a}");
            }
        }
    }

    proptest! {
        // Each case judges about 8,500 calls twice; fewer cases keep the
        // debug-build test near a few seconds.
        #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

        /// MCP connection decisions are sound: a tunnel only where every call
        /// on the connection is allowed, a refusal only where none is.
        #[test]
        fn mcp_connection_decisions_agree_with_calls(doc in crate::testing::mcp_document()) {
            let policy = compile(&doc, Role::Maximum, &Limits::default()).unwrap();
            for t in mcp_calls() {
                for caller in [Caller::Binary(&t.binary), Caller::Unknown] {
                    let allowed = decide_mcp_as(&policy, caller, t).allow;
                    match decide_connection(&policy, caller, &t.host, t.port) {
                        ConnectionDecision::Tunnel { .. } => prop_assert!(allowed, "tunnel but {t} denied"),
                        ConnectionDecision::Refuse { .. } => prop_assert!(!allowed, "refused but {t} allowed"),
                        ConnectionDecision::Inspect => {}
                    }
                }
            }
        }

        /// The host index gives MCP calls the same decision, rule and reason;
        /// an unknown caller is never allowed a call every binary is not.
        #[test]
        fn mcp_indexed_and_unknown_caller(doc in crate::testing::mcp_document()) {
            let policy = compile(&doc, Role::Maximum, &Limits::default()).unwrap();
            let index = HostIndex::build(&policy);
            for t in mcp_calls() {
                prop_assert_eq!(
                    decide_mcp_indexed(&policy, &index, Caller::Unknown, t),
                    decide_mcp_as(&policy, Caller::Unknown, t),
                    "{}", t
                );
                let unknown = decide_mcp_as(&policy, Caller::Unknown, t).allow;
                let every = crate::testing::BINARIES.iter().all(|b| {
                    let mut t = t.clone();
                    t.binary = (*b).to_string();
                    decide_mcp(&policy, &t).allow
                });
                prop_assert!(!unknown || every, "unknown allowed {t}");
            }
        }

        /// Raw authority covers MCP (§8.2): a call is allowed wherever its
        /// transport request is allowed and no tool entry denies it, and a
        /// policy without mcp endpoints judges every call as its transport.
        #[test]
        fn raw_authority_covers_mcp(doc in crate::testing::document()) {
            let policy = compile(&doc, Role::Maximum, &Limits::default()).unwrap();
            for t in mcp_calls() {
                prop_assert_eq!(
                    decide_mcp(&policy, t).allow,
                    allows_network(&policy, &t.transport()),
                    "{}", t
                );
            }
        }

    }
}
