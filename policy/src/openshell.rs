//! Conversion of an OpenShell sandbox policy (version 1) into a policy
//! document of ours. Anything that cannot be represented exactly is an error
//! naming the OpenShell field; conversions that keep the authority the same
//! but change its shape come back as notes.
//!
//! Differences handled here (docs/policy-language.md has the full list):
//! - OpenShell rules with no binaries allow nothing; ours would mean "any
//!   binary", so such rules are dropped (with a note).
//! - A `rest` endpoint without `enforcement: enforce` only audits its L7
//!   rules, so its real authority is raw L4: it becomes an `l4` endpoint.
//! - `include_workdir` needs the working directory's path (`workdir`).
//! - MCP endpoints: `tools/call` allow and deny rules with tool-name
//!   selectors become `tools` and `denyTools`; `resources/read` and
//!   `prompts/get` become every resource and every prompt; session methods
//!   (`initialize`, `tools/list`, …) need no rule in agentgate (they grant
//!   no authority), so allowing them is noted, not imported.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::action::check_credential_name;
use crate::credentials::{
    Attach, Credential, HeaderAttach, Placeholder, QueryAttach, SecretKeyRef,
};
use crate::error::{Reason, ReasonCode};
use crate::mcp::SESSION_METHODS;
use crate::model::{
    AccessLevel, Endpoint, Filesystem, NetworkRule, PolicyDocument, Protocol, QueryMatcher,
    QuerySpec, ResourceEntry, RuleEntry, ToolEntry,
};

/// The result of an import.
#[derive(Debug, Clone, PartialEq)]
pub struct Imported {
    /// The converted policy.
    pub policy: PolicyDocument,
    /// Shape changes a reviewer should know about.
    pub notes: Vec<String>,
}

fn unsupported(field: impl Into<String>, message: impl Into<String>) -> Reason {
    Reason::at(ReasonCode::UnsupportedPolicyShape, field, message)
}

fn object<'a>(value: &'a Value, field: &str) -> Result<&'a Map<String, Value>, Reason> {
    value
        .as_object()
        .ok_or_else(|| unsupported(field, "expected a mapping"))
}

fn check_keys(map: &Map<String, Value>, field: &str, allowed: &[&str]) -> Result<(), Reason> {
    match map.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(key) => Err(unsupported(
            format!("{field}.{key}"),
            format!("{key} has no equivalent in agentgate policy language v1"),
        )),
        None => Ok(()),
    }
}

fn string_list(value: Option<&Value>, field: &str) -> Result<Vec<String>, Reason> {
    let Some(value) = value else {
        return Ok(Vec::new());
    };
    let list = value
        .as_array()
        .ok_or_else(|| unsupported(field, "expected a list of strings"))?;
    list.iter()
        .enumerate()
        .map(|(i, v)| {
            v.as_str()
                .map(str::to_string)
                .ok_or_else(|| unsupported(format!("{field}[{i}]"), "expected a string"))
        })
        .collect()
}

fn str_field<'a>(
    map: &'a Map<String, Value>,
    key: &str,
    field: &str,
) -> Result<Option<&'a str>, Reason> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.as_str())),
        Some(_) => Err(unsupported(format!("{field}.{key}"), "expected a string")),
    }
}

fn port(value: &Value, field: &str) -> Result<u16, Reason> {
    value
        .as_u64()
        .and_then(|p| u16::try_from(p).ok())
        .filter(|p| *p > 0)
        .ok_or_else(|| unsupported(field, "expected a port 1..65535"))
}

fn rule_entry(value: &Value, field: &str) -> Result<RuleEntry, Reason> {
    let map = object(value, field)?;
    check_keys(map, field, &["method", "path", "query"])?;
    let method = str_field(map, "method", field)?
        .ok_or_else(|| unsupported(format!("{field}.method"), "a method (or *) is required"))?;
    let path = str_field(map, "path", field)?.filter(|p| !p.is_empty());
    let query = match map.get("query") {
        None | Some(Value::Null) => BTreeMap::new(),
        Some(q) => query_matchers(q, &format!("{field}.query"))?,
    };
    Ok(RuleEntry {
        methods: vec![if method == "*" {
            method.to_string()
        } else {
            method.to_ascii_uppercase()
        }],
        path: path.map(str::to_string),
        query,
        ..RuleEntry::default()
    })
}

/// OpenShell's `query: {key: glob | {any: [globs]}}` (a required key whose
/// value one glob matches). OpenShell judges every value of a repeated
/// key; agentgate refuses a repeat of a named key instead (docs/policy-
/// semantics.md §10.1), which is never broader. Glob characters other than
/// `*` have no counterpart here.
fn query_matchers(value: &Value, field: &str) -> Result<BTreeMap<String, QueryMatcher>, Reason> {
    let map = object(value, field)?;
    let glob = |v: &Value, at: &str| -> Result<String, Reason> {
        let g = v
            .as_str()
            .ok_or_else(|| unsupported(at, "expected a value glob (a string)"))?;
        if g.contains(['?', '[', ']', '{', '}', '\\']) {
            return Err(unsupported(
                at,
                "only '*' is a wildcard in agentgate's value globs (docs/policy-semantics.md §10.1)",
            ));
        }
        Ok(g.to_string())
    };
    map.iter()
        .map(|(key, v)| {
            let at = format!("{field}.{key}");
            let matcher = match v {
                Value::Object(spec) => {
                    check_keys(spec, &at, &["any"])?;
                    let any = spec.get("any").and_then(Value::as_array).ok_or_else(|| {
                        unsupported(format!("{at}.any"), "expected a list of value globs")
                    })?;
                    QueryMatcher::Spec(QuerySpec {
                        any: Some(
                            any.iter()
                                .enumerate()
                                .map(|(i, g)| glob(g, &format!("{at}.any[{i}]")))
                                .collect::<Result<_, _>>()?,
                        ),
                        ..QuerySpec::default()
                    })
                }
                other => QueryMatcher::Glob(glob(other, &at)?),
            };
            Ok((key.clone(), matcher))
        })
        .collect()
}

fn endpoint(value: &Value, field: &str, notes: &mut Vec<String>) -> Result<Endpoint, Reason> {
    let map = object(value, field)?;
    check_keys(
        map,
        field,
        &[
            "host",
            "port",
            "ports",
            "protocol",
            "tls",
            "enforcement",
            "access",
            "rules",
            "deny_rules",
            "path",
            "mcp",
        ],
    )?;
    let host = str_field(map, "host", field)?
        .filter(|h| !h.is_empty())
        .ok_or_else(|| {
            unsupported(
                format!("{field}.host"),
                "endpoints without a host (allowed_ips only) are not modelled",
            )
        })?;
    let ports = match (map.get("port"), map.get("ports")) {
        (Some(_), Some(ps)) if ps.as_array().is_some_and(|a| !a.is_empty()) => {
            return Err(unsupported(
                format!("{field}.port"),
                "port and ports are mutually exclusive",
            ));
        }
        (_, Some(ps)) if ps.as_array().is_some_and(|a| !a.is_empty()) => ps
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
            .map(|(i, p)| port(p, &format!("{field}.ports[{i}]")))
            .collect::<Result<Vec<_>, _>>()?,
        (Some(p), _) => vec![port(p, &format!("{field}.port"))?],
        _ => return Err(unsupported(format!("{field}.port"), "a port is required")),
    };
    match str_field(map, "tls", field)? {
        None | Some("") | Some("terminate") | Some("passthrough") => {}
        Some(other) => {
            return Err(unsupported(
                format!("{field}.tls"),
                format!("tls: {other} is not modelled"),
            ));
        }
    }
    let protocol = str_field(map, "protocol", field)?.unwrap_or("");
    let mut out = Endpoint {
        host: host.to_string(),
        ports,
        ..Default::default()
    };
    match protocol {
        "" | "tcp" => {
            for key in ["access", "rules", "deny_rules", "path", "mcp"] {
                if map.contains_key(key) {
                    return Err(unsupported(
                        format!("{field}.{key}"),
                        "only REST endpoints take L7 fields",
                    ));
                }
            }
            return Ok(out);
        }
        "rest" | "mcp" => {}
        "websocket" => {
            return Err(unsupported(
                format!("{field}.protocol"),
                "OpenShell judges each WebSocket text message (WEBSOCKET_TEXT rules); agentgate judges the upgrade and relays its messages unread (docs/policy-semantics.md §10.2), so an import would allow messages OpenShell refuses: write the protocol: websocket endpoint by hand",
            ));
        }
        other => {
            return Err(unsupported(
                format!("{field}.protocol"),
                format!("protocol {other} is not modelled (only tcp, rest and mcp)"),
            ));
        }
    }
    if str_field(map, "enforcement", field)? != Some("enforce") {
        notes.push(format!(
            "{field}: enforcement is audit, so its L7 rules do not restrict anything; imported as an l4 endpoint"
        ));
        return Ok(out);
    }
    if protocol == "mcp" {
        mcp_endpoint(map, field, &mut out, notes)?;
        return Ok(out);
    }
    if map.contains_key("mcp") {
        return Err(unsupported(
            format!("{field}.mcp"),
            "mcp options belong to protocol: mcp endpoints",
        ));
    }
    out.protocol = Protocol::Rest;
    match str_field(map, "path", field)? {
        None | Some("") | Some("**") | Some("/**") => {}
        Some(p) if !p.contains('*') => out.path = Some(p.to_string()),
        Some(_) => {
            return Err(unsupported(
                format!("{field}.path"),
                "OpenShell endpoint path selectors with wildcards choose among endpoints; not modelled",
            ));
        }
    }
    out.access = match str_field(map, "access", field)? {
        None | Some("") => None,
        Some("read-only") => Some(AccessLevel::ReadOnly),
        Some("read-write") => Some(AccessLevel::ReadWrite),
        Some("full") => Some(AccessLevel::Full),
        Some(other) => {
            return Err(unsupported(
                format!("{field}.access"),
                format!("unknown access preset {other}"),
            ));
        }
    };
    if let Some(rules) = map.get("rules") {
        let rules = rules
            .as_array()
            .ok_or_else(|| unsupported(format!("{field}.rules"), "expected a list"))?;
        for (i, rule) in rules.iter().enumerate() {
            let at = format!("{field}.rules[{i}]");
            let rule_map = object(rule, &at)?;
            check_keys(rule_map, &at, &["allow"])?;
            let allow = rule_map
                .get("allow")
                .ok_or_else(|| unsupported(format!("{at}.allow"), "each rule needs allow"))?;
            out.rules.push(rule_entry(allow, &format!("{at}.allow"))?);
        }
    }
    if let Some(denies) = map.get("deny_rules") {
        let denies = denies
            .as_array()
            .ok_or_else(|| unsupported(format!("{field}.deny_rules"), "expected a list"))?;
        for (i, deny) in denies.iter().enumerate() {
            out.deny_rules
                .push(rule_entry(deny, &format!("{field}.deny_rules[{i}]"))?);
        }
    }
    Ok(out)
}

/// An OpenShell tool-name glob as ours: `*` and `**` match any run (a
/// strict tool name has no `/` for them to differ on); `?` and bracket
/// classes have no counterpart.
fn tool_glob(value: &Value, field: &str) -> Result<Vec<String>, Reason> {
    let one = |v: &Value, at: &str| -> Result<String, Reason> {
        let glob = v
            .as_str()
            .filter(|g| !g.is_empty())
            .ok_or_else(|| unsupported(at, "expected a tool-name glob"))?;
        if glob.contains(['?', '[', ']']) {
            return Err(unsupported(
                at,
                "? and bracket classes in tool names are not modelled (only *)",
            ));
        }
        let mut out = glob.to_string();
        while out.contains("**") {
            out = out.replace("**", "*");
        }
        Ok(out)
    };
    match value {
        Value::Object(map) => {
            check_keys(map, field, &["any"])?;
            let list = map
                .get("any")
                .and_then(Value::as_array)
                .filter(|l| !l.is_empty())
                .ok_or_else(|| unsupported(format!("{field}.any"), "expected a non-empty list"))?;
            list.iter()
                .enumerate()
                .map(|(i, v)| one(v, &format!("{field}.any[{i}]")))
                .collect()
        }
        v => Ok(vec![one(v, field)?]),
    }
}

/// What one OpenShell MCP rule selects.
enum McpSelection {
    /// Tool calls of these name globs.
    Tools(Vec<String>),
    /// Every resource read.
    Resources,
    /// Every prompt.
    Prompts,
    /// A session method, which needs no grant.
    Session(String),
}

/// Reads one OpenShell MCP rule (`method`, `tool`, `params.name`); an absent
/// method means the endpoint's method profile (`allow_all`).
fn mcp_rule(
    map: &Map<String, Value>,
    field: &str,
    allow_all: bool,
) -> Result<Vec<McpSelection>, Reason> {
    check_keys(map, field, &["method", "tool", "params"])?;
    let mut names = None;
    if let Some(tool) = map.get("tool") {
        names = Some(tool_glob(tool, &format!("{field}.tool"))?);
    }
    if let Some(params) = map.get("params") {
        let at = format!("{field}.params");
        let params = object(params, &at)?;
        check_keys(params, &at, &["name"])?;
        if let Some(name) = params.get("name") {
            // Both given: a call must match both; one selector keeps it exact.
            if names.is_some() {
                return Err(unsupported(
                    at,
                    "tool and params.name together are not modelled; use one",
                ));
            }
            names = Some(tool_glob(name, &format!("{at}.name"))?);
        }
    }
    let method = str_field(map, "method", field)?;
    let tools = || McpSelection::Tools(names.clone().unwrap_or_else(|| vec!["*".into()]));
    Ok(match method {
        Some("tools/call") | Some("tools/*") => vec![tools()],
        None if names.is_some() && allow_all => vec![tools()],
        None if allow_all => vec![tools(), McpSelection::Resources, McpSelection::Prompts],
        None => {
            return Err(unsupported(
                format!("{field}.method"),
                "a method is required unless mcp.allow_all_known_mcp_methods is true",
            ));
        }
        Some(_) if names.is_some() => {
            return Err(unsupported(
                format!("{field}.tool"),
                "a tool selector needs method: tools/call",
            ));
        }
        Some("resources/read") | Some("resources/subscribe") => vec![McpSelection::Resources],
        Some("prompts/get") => vec![McpSelection::Prompts],
        Some(m) if SESSION_METHODS.contains(&m) || m.starts_with("notifications/") => {
            vec![McpSelection::Session(m.to_string())]
        }
        Some(m) => {
            return Err(unsupported(
                format!("{field}.method"),
                format!(
                    "MCP method {m} is not modelled (agentgate refuses methods the MCP specification does not name)"
                ),
            ));
        }
    })
}

/// The MCP part of an enforced OpenShell `protocol: mcp` endpoint.
fn mcp_endpoint(
    map: &Map<String, Value>,
    field: &str,
    out: &mut Endpoint,
    notes: &mut Vec<String>,
) -> Result<(), Reason> {
    out.protocol = Protocol::Mcp;
    if map.contains_key("access") {
        return Err(unsupported(
            format!("{field}.access"),
            "MCP endpoints take rules, not access presets",
        ));
    }
    match str_field(map, "path", field)? {
        Some(p) if !p.is_empty() && !p.contains('*') => out.path = Some(p.to_string()),
        _ => {
            return Err(unsupported(
                format!("{field}.path"),
                "an MCP endpoint needs the server's literal path, such as /mcp",
            ));
        }
    }
    let mut allow_all = false;
    if let Some(options) = map.get("mcp") {
        let at = format!("{field}.mcp");
        let options = object(options, &at)?;
        check_keys(
            options,
            &at,
            &[
                "max_body_bytes",
                "strict_tool_names",
                "allow_all_known_mcp_methods",
            ],
        )?;
        allow_all = options
            .get("allow_all_known_mcp_methods")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        if options.contains_key("max_body_bytes") {
            notes.push(format!(
                "{at}.max_body_bytes: a buffering limit, not authority; agentgate's proxy judges bodies up to 4 MiB and refuses larger ones"
            ));
        }
    }
    let mut sessions = Vec::new();
    let mut grant = |selections: Vec<McpSelection>, out: &mut Endpoint| {
        for selection in selections {
            match selection {
                McpSelection::Tools(names) => {
                    out.tools.extend(names.into_iter().map(|name| ToolEntry {
                        name,
                        ..ToolEntry::default()
                    }))
                }
                McpSelection::Resources => out.resources.push(ResourceEntry { uri: "**".into() }),
                McpSelection::Prompts => out.prompts.push(ToolEntry {
                    name: "*".into(),
                    ..ToolEntry::default()
                }),
                McpSelection::Session(m) => sessions.push(m),
            }
        }
    };
    match map.get("rules") {
        Some(rules) => {
            let rules = rules.as_array().filter(|r| !r.is_empty()).ok_or_else(|| {
                unsupported(format!("{field}.rules"), "expected a non-empty list")
            })?;
            for (i, rule) in rules.iter().enumerate() {
                let at = format!("{field}.rules[{i}]");
                let rule_map = object(rule, &at)?;
                check_keys(rule_map, &at, &["allow"])?;
                let allow = rule_map
                    .get("allow")
                    .ok_or_else(|| unsupported(format!("{at}.allow"), "each rule needs allow"))?;
                let at = format!("{at}.allow");
                grant(mcp_rule(object(allow, &at)?, &at, allow_all)?, out);
            }
        }
        None if allow_all => grant(mcp_rule(&Map::new(), field, true)?, out),
        None => {
            return Err(unsupported(
                format!("{field}.rules"),
                "an MCP endpoint needs rules unless mcp.allow_all_known_mcp_methods is true",
            ));
        }
    }
    if !sessions.is_empty() {
        sessions.sort();
        sessions.dedup();
        notes.push(format!(
            "{field}: {} grant no authority in agentgate: session methods are allowed wherever the connection to the server is",
            sessions.join(", ")
        ));
    }
    if let Some(denies) = map.get("deny_rules") {
        let denies = denies
            .as_array()
            .ok_or_else(|| unsupported(format!("{field}.deny_rules"), "expected a list"))?;
        for (i, deny) in denies.iter().enumerate() {
            let at = format!("{field}.deny_rules[{i}]");
            for selection in mcp_rule(object(deny, &at)?, &at, allow_all)? {
                match selection {
                    McpSelection::Tools(names) => {
                        out.deny_tools
                            .extend(names.into_iter().map(|name| ToolEntry {
                                name,
                                ..ToolEntry::default()
                            }));
                    }
                    // Resources and prompts have allow entries only, and a
                    // session method cannot be denied: importing the deny
                    // as nothing would widen the policy.
                    _ => {
                        return Err(unsupported(
                            format!("{at}.method"),
                            "only tools/call can be denied in agentgate (denyTools)",
                        ));
                    }
                }
            }
        }
    }
    Ok(())
}

/// The paths of an OpenShell `binaries` list: entries `{path, harness}`,
/// or (a provider profile's form) bare paths when `bare` is true.
fn binary_paths(value: Option<&Value>, field: &str, bare: bool) -> Result<Vec<String>, Reason> {
    let mut paths = Vec::new();
    for (i, b) in value
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let at = format!("{field}[{i}]");
        if let (true, Value::String(path)) = (bare, b) {
            paths.push(path.clone());
            continue;
        }
        let map = object(b, &at)?;
        check_keys(map, &at, &["path", "harness"])?;
        let path = str_field(map, "path", &at)?
            .ok_or_else(|| unsupported(format!("{at}.path"), "a binary path is required"))?;
        paths.push(path.to_string());
    }
    Ok(paths)
}

/// Converts an OpenShell policy (parsed YAML). `workdir` is the sandbox
/// working directory, needed when `include_workdir` is in effect.
pub fn import(value: &Value, workdir: Option<&str>) -> Result<Imported, Reason> {
    let top = object(value, "(document)")?;
    let field = |k: &str| k.to_string();
    match top.get("version") {
        Some(v) if v.as_u64() == Some(1) => {}
        Some(v) => {
            return Err(unsupported(
                "version",
                format!("unsupported policy version {v}; expected 1"),
            ));
        }
        None => return Err(unsupported("version", "version: 1 is required")),
    }
    if let Some(key) = top.keys().find(|k| {
        ![
            "version",
            "filesystem_policy",
            "landlock",
            "process",
            "network_policies",
        ]
        .contains(&k.as_str())
    }) {
        return Err(unsupported(
            field(key),
            format!("{key} has no equivalent in agentgate policy language v1"),
        ));
    }
    let mut notes = Vec::new();
    for key in ["landlock", "process"] {
        if top.contains_key(key) {
            notes.push(format!(
                "{key}: enforcement setting, not authority; not imported"
            ));
        }
    }

    let mut filesystem = Filesystem::default();
    let include_workdir = match top.get("filesystem_policy") {
        // An absent section means the OpenShell default: the workdir is writable.
        None => true,
        Some(fs) => {
            let map = object(fs, "filesystem_policy")?;
            check_keys(
                map,
                "filesystem_policy",
                &["include_workdir", "read_only", "read_write"],
            )?;
            filesystem.read_only =
                string_list(map.get("read_only"), "filesystem_policy.read_only")?;
            filesystem.read_write =
                string_list(map.get("read_write"), "filesystem_policy.read_write")?;
            match map.get("include_workdir") {
                None => false,
                Some(Value::Bool(b)) => *b,
                Some(_) => {
                    return Err(unsupported(
                        "filesystem_policy.include_workdir",
                        "expected true or false",
                    ));
                }
            }
        }
    };
    if include_workdir {
        let Some(workdir) = workdir else {
            return Err(unsupported(
                "filesystem_policy.include_workdir",
                "the sandbox working directory is read-write here, but its path is unknown; pass --workdir PATH",
            ));
        };
        filesystem.read_write.push(workdir.to_string());
    }

    let mut network = Vec::new();
    if let Some(policies) = top.get("network_policies") {
        let policies = object(policies, "network_policies")?;
        for (key, rule) in policies {
            let at = format!("network_policies.{key}");
            let map = object(rule, &at)?;
            check_keys(map, &at, &["name", "endpoints", "binaries"])?;
            let name = str_field(map, "name", &at)?
                .filter(|n| !n.is_empty())
                .unwrap_or(key);
            let binaries = binary_paths(map.get("binaries"), &format!("{at}.binaries"), false)?;
            if binaries.is_empty() {
                notes.push(format!(
                    "{at}: no binaries, so OpenShell allows nothing under it; dropped"
                ));
                continue;
            }
            let mut endpoints = Vec::new();
            for (i, e) in map
                .get("endpoints")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .enumerate()
            {
                endpoints.push(endpoint(e, &format!("{at}.endpoints[{i}]"), &mut notes)?);
            }
            network.push(NetworkRule {
                name: name.to_string(),
                binaries,
                endpoints,
                review: None,
                ..NetworkRule::default()
            });
        }
    }
    Ok(Imported {
        policy: PolicyDocument {
            filesystem,
            network,
        },
        notes,
    })
}

/// An OpenShell provider profile as a sandbox's credentials and the rules
/// that bind them: the sandbox spec's `credentials` and `policy.network`
/// entries.
#[derive(Debug, Clone, PartialEq)]
pub struct ImportedProvider {
    /// One declaration per credential of the profile.
    pub credentials: Vec<Credential>,
    /// The profile's inspected endpoints, bound to every credential of the
    /// profile, and (when there are any) its uninspected ones, unbound.
    pub rules: Vec<NetworkRule>,
    /// Shape changes a reviewer should know about.
    pub notes: Vec<String>,
}

/// Endpoint fields of a provider profile that change how the credential
/// travels in ways agentgate does not model, with why.
const PROVIDER_ENDPOINT_UNMODELLED: &[(&str, &str)] = &[
    (
        "credential_signing",
        "request signing (such as AWS SigV4) is not modelled: agentgate attaches a secret, it does not sign requests",
    ),
    (
        "signing_service",
        "request signing (such as AWS SigV4) is not modelled: agentgate attaches a secret, it does not sign requests",
    ),
    (
        "signing_region",
        "request signing (such as AWS SigV4) is not modelled: agentgate attaches a secret, it does not sign requests",
    ),
    (
        "request_body_credential_rewrite",
        "agentgate never rewrites a placeholder in a body: a placeholder there is refused as misuse",
    ),
    (
        "websocket_credential_rewrite",
        "WebSocket endpoints are not modelled",
    ),
];

/// Converts an OpenShell provider profile (parsed YAML). The provider's
/// values come from the Secret `secret` in the sandbox's namespace, one key
/// per credential named like its first environment variable, as
/// `openshell provider create --credential KEY=VALUE` stores them.
///
/// OpenShell attaches a provider's credential only to requests its network
/// policy allows *and* whose binary and endpoint the profile names, so the
/// profile becomes one rule: its binaries, its endpoints, every credential
/// of the profile bound to them. Endpoints OpenShell does not inspect
/// (`tcp`, or `rest` in audit) become a second rule without credentials:
/// binding a credential there would let it reach every request of the
/// endpoint (docs/policy-semantics.md §9), so importing it bound would
/// widen what OpenShell's profile says.
pub fn import_provider(value: &Value, secret: &str) -> Result<ImportedProvider, Reason> {
    let top = object(value, "(profile)")?;
    check_keys(
        top,
        "(profile)",
        &[
            "id",
            "resource_version",
            "annotations",
            "display_name",
            "description",
            "category",
            "credentials",
            "endpoints",
            "binaries",
            "inference_capable",
            "discovery",
        ],
    )?;
    let id = str_field(top, "id", "(profile)")?
        .filter(|id| !id.is_empty())
        .ok_or_else(|| unsupported("id", "a provider profile needs an id"))?;
    if check_credential_name(id).is_err() {
        return Err(unsupported(
            "id",
            format!("{id:?} is not lower-case kebab-case"),
        ));
    }
    let mut notes = Vec::new();
    let mut credentials = Vec::new();
    let list = match top.get("credentials") {
        Some(list) => list
            .as_array()
            .ok_or_else(|| unsupported("credentials", "expected a list"))?
            .as_slice(),
        None => &[],
    };
    if list.is_empty() {
        return Err(unsupported(
            "credentials",
            "the profile declares no credential; import its endpoints as a policy instead",
        ));
    }
    for (i, c) in list.iter().enumerate() {
        credentials.push(provider_credential(c, i, id, secret, &mut notes)?);
    }

    let binaries = binary_paths(top.get("binaries"), "binaries", true)?;
    if binaries.is_empty() {
        return Err(unsupported(
            "binaries",
            "OpenShell attaches the credential for no binary; agentgate would read an empty list as any binary",
        ));
    }

    let mut inspected = Vec::new();
    let mut uninspected = Vec::new();
    for (i, e) in top
        .get("endpoints")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let at = format!("endpoints[{i}]");
        for (key, why) in PROVIDER_ENDPOINT_UNMODELLED {
            let set = object(e, &at)?
                .get(*key)
                .is_some_and(|v| !matches!(v, Value::Null | Value::Bool(false)));
            if set {
                return Err(unsupported(format!("{at}.{key}"), *why));
            }
        }
        let mut endpoint_value = e.clone();
        if let Some(map) = endpoint_value.as_object_mut() {
            for (key, _) in PROVIDER_ENDPOINT_UNMODELLED {
                map.remove(*key);
            }
        }
        let converted = endpoint(&endpoint_value, &at, &mut notes)?;
        if converted.protocol == Protocol::L4 {
            notes.push(format!(
                "{at}: not inspected, so the credential is not attached there; bind it yourself with allowUninspectedCredentials: true if it must reach every request of {}",
                converted.host
            ));
            uninspected.push(converted);
        } else {
            inspected.push(converted);
        }
    }
    if inspected.is_empty() && uninspected.is_empty() {
        return Err(unsupported(
            "endpoints",
            "the profile names no endpoint, so OpenShell attaches its credentials nowhere",
        ));
    }
    let names: Vec<String> = credentials.iter().map(|c| c.name.clone()).collect();
    let mut rules = Vec::new();
    if !inspected.is_empty() {
        rules.push(NetworkRule {
            name: format!("provider-{id}"),
            binaries: binaries.clone(),
            endpoints: inspected,
            credentials: names,
            ..NetworkRule::default()
        });
    }
    if !uninspected.is_empty() {
        rules.push(NetworkRule {
            name: format!("provider-{id}-uninspected"),
            binaries,
            endpoints: uninspected,
            ..NetworkRule::default()
        });
    }
    Ok(ImportedProvider {
        credentials,
        rules,
        notes,
    })
}

/// One credential of a provider profile (`credentials[i]`).
fn provider_credential(
    value: &Value,
    i: usize,
    id: &str,
    secret: &str,
    notes: &mut Vec<String>,
) -> Result<Credential, Reason> {
    let at = format!("credentials[{i}]");
    let map = object(value, &at)?;
    check_keys(
        map,
        &at,
        &[
            "name",
            "description",
            "env_vars",
            "required",
            "auth_style",
            "header_name",
            "query_param",
            "path_template",
            "refresh",
            "token_grant",
        ],
    )?;
    let name = str_field(map, "name", &at)?
        .filter(|n| !n.is_empty())
        .ok_or_else(|| unsupported(format!("{at}.name"), "a credential name is required"))?;
    // Ours are DNS labels, unique in the sandbox: the profile id keeps two
    // providers' `api_key`s apart.
    let ours = format!("{id}-{}", name.to_ascii_lowercase().replace('_', "-"));
    if check_credential_name(&ours).is_err() {
        return Err(unsupported(
            format!("{at}.name"),
            format!("{id}-{name} cannot be made a DNS label"),
        ));
    }
    if map.get("token_grant").is_some_and(|v| !v.is_null()) {
        return Err(unsupported(
            format!("{at}.token_grant"),
            "token exchange mints a different value per audience; agentgate attaches one Secret value",
        ));
    }
    if map.get("required") == Some(&Value::Bool(false)) {
        notes.push(format!(
            "{at}.required: false: agentgate declares it all the same; until the Secret has the key the sandbox is Ready=False (CredentialUnavailable) and requests needing it are refused"
        ));
    }
    if map.get("refresh").is_some_and(|v| !v.is_null()) {
        notes.push(format!(
            "{at}.refresh: the gateway's token refresh is not imported; keep the Secret current (such as with an external secrets operator): the proxy picks up a new value without a restart"
        ));
    }
    let envs = string_list(map.get("env_vars"), &format!("{at}.env_vars"))?;
    let Some(env) = envs.first() else {
        return Err(unsupported(
            format!("{at}.env_vars"),
            "a credential without env_vars gives the agent no placeholder",
        ));
    };
    if envs.len() > 1 {
        let rest = &envs[1..];
        notes.push(format!(
            "{at}.env_vars: the placeholder is in {env} only; {} {} unset",
            rest.join(", "),
            if rest.len() == 1 { "stays" } else { "stay" }
        ));
    }
    let header_name = str_field(map, "header_name", &at)?.unwrap_or("").trim();
    let style = str_field(map, "auth_style", &at)?
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    let attach = match style.as_str() {
        "bearer" | "header" => {
            if header_name.is_empty() {
                return Err(unsupported(
                    format!("{at}.header_name"),
                    format!("header_name is required for {style} auth"),
                ));
            }
            Attach {
                header: Some(HeaderAttach {
                    name: header_name.to_string(),
                    format: (style == "bearer").then(|| "Bearer {}".to_string()),
                }),
                ..Attach::default()
            }
        }
        "query" => {
            let param = str_field(map, "query_param", &at)?
                .map(str::trim)
                .filter(|p| !p.is_empty())
                .ok_or_else(|| {
                    unsupported(
                        format!("{at}.query_param"),
                        "query_param is required for query auth",
                    )
                })?;
            Attach {
                query: Some(QueryAttach {
                    name: param.to_string(),
                }),
                ..Attach::default()
            }
        }
        "basic" => {
            return Err(unsupported(
                format!("{at}.auth_style"),
                "basic auth's user name is not in the profile; declare the credential with attach.basic.username yourself",
            ));
        }
        "path" => {
            return Err(unsupported(
                format!("{at}.auth_style"),
                "a secret in the request path is not modelled (it would be logged and matched as a path)",
            ));
        }
        "" => {
            return Err(unsupported(
                format!("{at}.auth_style"),
                "without auth_style OpenShell rewrites the placeholder wherever it appears; agentgate attaches a secret in one declared form: give bearer, header or query",
            ));
        }
        other => {
            return Err(unsupported(
                format!("{at}.auth_style"),
                format!("auth_style {other} is not modelled"),
            ));
        }
    };
    Ok(Credential {
        name: ours,
        secret_ref: SecretKeyRef {
            name: secret.to_string(),
            key: env.clone(),
        },
        placeholder: Placeholder {
            env: Some(env.clone()),
            file: None,
        },
        attach,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn yaml(text: &str) -> Value {
        serde_saphyr::from_str(text).unwrap()
    }

    fn error_field(text: &str) -> String {
        import(&yaml(text), Some("/w")).unwrap_err().field.unwrap()
    }

    #[test]
    fn unrepresentable_fields_are_errors_naming_the_field() {
        let base = "version: 1\nfilesystem_policy: {}\nnetwork_policies:\n  p:\n    binaries: [{path: /bin/x}]\n    endpoints:\n";
        assert_eq!(
            error_field(&format!(
                "{base}      - {{host: a.io, port: 443, allowed_ips: [10.0.0.0/8]}}\n"
            )),
            "network_policies.p.endpoints[0].allowed_ips"
        );
        assert_eq!(
            error_field(&format!(
                "{base}      - {{host: a.io, port: 443, protocol: graphql}}\n"
            )),
            "network_policies.p.endpoints[0].protocol"
        );
        // OpenShell judges WebSocket text messages, agentgate relays them.
        assert_eq!(
            error_field(&format!(
                "{base}      - {{host: a.io, port: 443, protocol: websocket}}\n"
            )),
            "network_policies.p.endpoints[0].protocol"
        );
        assert_eq!(
            error_field(&format!(
                "{base}      - host: a.io\n        port: 443\n        protocol: rest\n        enforcement: enforce\n        rules: [{{allow: {{method: GET, path: /x, query: {{a: \"b?\"}}}}}}]\n"
            )),
            "network_policies.p.endpoints[0].rules[0].allow.query.a"
        );
        assert_eq!(error_field("version: 2"), "version");
        assert_eq!(error_field("version: 1\ncedar_policy: x"), "cedar_policy");
    }

    #[test]
    fn audit_rest_is_l4_and_binaryless_rules_are_dropped() {
        let out = import(
            &yaml(
                "version: 1\nfilesystem_policy: {read_only: [/usr]}\nnetwork_policies:\n  a:\n    binaries: [{path: /bin/x}]\n    endpoints: [{host: a.io, port: 443, protocol: rest, access: full}]\n  b:\n    endpoints: [{host: b.io, port: 443}]\n",
            ),
            None,
        )
        .unwrap();
        assert_eq!(out.policy.network.len(), 1);
        assert_eq!(out.policy.network[0].endpoints[0].protocol, Protocol::L4);
        assert_eq!(out.policy.network[0].endpoints[0].access, None);
        assert_eq!(out.notes.len(), 2);
        assert_eq!(out.policy.filesystem.read_only, vec!["/usr".to_string()]);
    }

    #[test]
    fn rest_query_matchers_become_query_constraints() {
        let out = import(
            &yaml(
                "version: 1\nfilesystem_policy: {}\nnetwork_policies:\n  p:\n    binaries: [{path: /usr/bin/curl}]\n    endpoints:\n      - host: api.io\n        port: 443\n        protocol: rest\n        enforcement: enforce\n        rules:\n          - allow: {method: GET, path: /search, query: {q: '*', sort: {any: [asc, 'desc*']}}}\n",
            ),
            None,
        )
        .unwrap();
        let entry = &out.policy.network[0].endpoints[0].rules[0];
        assert_eq!(entry.query["q"], QueryMatcher::Glob("*".into()));
        assert_eq!(
            entry.query["sort"],
            QueryMatcher::Spec(QuerySpec {
                any: Some(vec!["asc".into(), "desc*".into()]),
                ..QuerySpec::default()
            })
        );
        // What it imports compiles: the same constraints in agentgate's terms.
        crate::compile::compile(
            &out.policy,
            crate::compile::Role::Sandbox,
            &Default::default(),
        )
        .unwrap();
    }

    #[test]
    fn mcp_tool_rules_become_tools_and_deny_tools() {
        let base = "version: 1\nfilesystem_policy: {}\nnetwork_policies:\n  p:\n    binaries: [{path: /usr/bin/python3}]\n    endpoints:\n      - host: mcp.example.com\n        port: 443\n        path: /mcp\n        protocol: mcp\n        enforcement: enforce\n";
        let out = import(
            &yaml(&format!(
                "{base}        mcp: {{max_body_bytes: 131072}}\n        rules:\n          - allow: {{method: initialize}}\n          - allow: {{method: notifications/initialized}}\n          - allow: {{method: tools/call, tool: search_web}}\n          - allow: {{method: tools/call, tool: {{any: [create_issue, 'list_**']}}}}\n          - allow: {{method: resources/read}}\n        deny_rules:\n          - {{method: tools/call, params: {{name: send_email}}}}\n"
            )),
            None,
        )
        .unwrap();
        let e = &out.policy.network[0].endpoints[0];
        assert_eq!(e.protocol, Protocol::Mcp);
        assert_eq!(e.path.as_deref(), Some("/mcp"));
        let names = |list: &[ToolEntry]| list.iter().map(|t| t.name.clone()).collect::<Vec<_>>();
        assert_eq!(names(&e.tools), ["search_web", "create_issue", "list_*"]);
        assert_eq!(names(&e.deny_tools), ["send_email"]);
        assert_eq!(e.resources, [ResourceEntry { uri: "**".into() }]);
        assert!(e.prompts.is_empty());
        assert!(
            out.notes
                .iter()
                .any(|n| n.contains("initialize, notifications/initialized grant no authority")),
            "{:?}",
            out.notes
        );
        // It compiles, and means what OpenShell meant.
        let compiled = crate::compile::compile(
            &out.policy,
            crate::compile::Role::Sandbox,
            &crate::compile::Limits::default(),
        )
        .unwrap();
        let call = |name: &str| crate::action::McpAction {
            binary: "/usr/bin/python3".into(),
            host: "mcp.example.com".into(),
            port: 443,
            path: "/mcp".into(),
            kind: crate::action::McpKind::Tool,
            name: name.into(),
            args: Map::new(),
            sources: None,
            credential: None,
        };
        let allowed = |name: &str| crate::matcher::decide_mcp(&compiled, &call(name)).allow;
        assert!(allowed("search_web") && allowed("list_repos"));
        assert!(!allowed("send_email") && !allowed("delete_repo"));

        // The allow-all profile, and what cannot be represented.
        let all = import(
            &yaml(&format!(
                "{base}        mcp: {{allow_all_known_mcp_methods: true}}\n        deny_rules: [{{tool: 'delete_*'}}]\n"
            )),
            None,
        )
        .unwrap();
        let e = &all.policy.network[0].endpoints[0];
        assert_eq!(
            (names(&e.tools), names(&e.prompts)),
            (vec!["*".to_string()], vec!["*".to_string()])
        );
        assert_eq!(names(&e.deny_tools), ["delete_*"]);
        let at = "network_policies.p.endpoints[0]";
        for (rules, field) in [
            (
                "rules: [{allow: {method: tools/call, tool: 'get_?'}}]",
                format!("{at}.rules[0].allow.tool"),
            ),
            (
                "rules: [{allow: {method: x/custom}}]",
                format!("{at}.rules[0].allow.method"),
            ),
            (
                "rules: [{allow: {method: tools/list, tool: a}}]",
                format!("{at}.rules[0].allow.tool"),
            ),
            (
                "rules: [{allow: {method: tools/call}}]\n        deny_rules: [{method: tools/list}]",
                format!("{at}.deny_rules[0].method"),
            ),
            ("access: full", format!("{at}.access")),
            ("mcp: {nope: 1}", format!("{at}.mcp.nope")),
        ] {
            assert_eq!(
                error_field(&format!("{base}        {rules}\n")),
                field,
                "{rules}"
            );
        }
        assert_eq!(
            error_field(&base.replace("        path: /mcp\n", "").replace(
                "enforcement: enforce\n",
                "enforcement: enforce\n        rules: [{allow: {method: tools/call}}]\n"
            )),
            format!("{at}.path")
        );
    }

    const PROFILE: &str = "id: github\ndisplay_name: GitHub\ncategory: source_control\ncredentials:\n  - name: api_token\n    env_vars: [GITHUB_TOKEN, GH_TOKEN]\n    required: true\n    auth_style: bearer\n    header_name: authorization\ndiscovery: {credentials: [api_token]}\nendpoints:\n  - {host: api.github.com, port: 443, protocol: rest, access: read-only, enforcement: enforce}\n  - {host: codeload.github.com, port: 443}\nbinaries: [/usr/bin/gh]\n";

    #[test]
    fn a_provider_binds_its_credential_to_its_inspected_endpoints_and_binaries_only() {
        let out = import_provider(&yaml(PROFILE), "openshell-github").unwrap();
        assert_eq!(out.credentials.len(), 1);
        let c = &out.credentials[0];
        assert_eq!(c.name, "github-api-token");
        assert_eq!(
            (c.secret_ref.name.as_str(), c.secret_ref.key.as_str()),
            ("openshell-github", "GITHUB_TOKEN")
        );
        assert_eq!(c.placeholder.env.as_deref(), Some("GITHUB_TOKEN"));
        assert_eq!(
            c.attach_form().unwrap(),
            crate::credentials::AttachForm::Header {
                name: "authorization".into(),
                prefix: "Bearer ".into(),
                suffix: String::new()
            }
        );
        assert!(out.notes.iter().any(|n| n.contains("GH_TOKEN stays unset")));
        assert!(
            out.notes
                .iter()
                .any(|n| n.contains("endpoints[1]: not inspected"))
        );

        let policy = PolicyDocument {
            network: out.rules,
            ..PolicyDocument::default()
        };
        let compiled = crate::compile::compile(
            &policy,
            crate::compile::Role::Sandbox,
            &crate::compile::Limits::default(),
        )
        .unwrap();
        crate::credentials::check("credentials", &out.credentials, &compiled, "policy.").unwrap();
        let request = |binary: &str, host: &str, method: &str, credential: Option<&str>| {
            let layer = if host == "api.github.com" {
                crate::action::Layer::Rest
            } else {
                crate::action::Layer::L4
            };
            let rest = layer == crate::action::Layer::Rest;
            crate::matcher::decide_network(
                &compiled,
                &crate::action::NetworkAction {
                    binary: binary.into(),
                    host: host.into(),
                    port: 443,
                    layer,
                    method: if rest { method.into() } else { String::new() },
                    path: if rest {
                        "/repos/acme/x".into()
                    } else {
                        String::new()
                    },
                    credential: credential.map(str::to_string),
                    query: Default::default(),
                    upgrade: None,
                },
            )
            .allow
        };
        let token = Some("github-api-token");
        // Where OpenShell would attach it: the profile's binary, an
        // inspected endpoint, a request the access preset allows.
        assert!(request("/usr/bin/gh", "api.github.com", "GET", token));
        // Nowhere else: not a write, not another binary, not the
        // uninspected endpoint (reachable there without the credential).
        assert!(!request("/usr/bin/gh", "api.github.com", "POST", token));
        assert!(!request("/usr/bin/curl", "api.github.com", "GET", token));
        assert!(!request("/usr/bin/gh", "codeload.github.com", "", token));
        assert!(request("/usr/bin/gh", "codeload.github.com", "", None));
    }

    #[test]
    fn provider_fields_agentgate_cannot_represent_are_errors_naming_the_field() {
        let field = |text: &str| {
            import_provider(&yaml(text), "s")
                .unwrap_err()
                .field
                .unwrap()
        };
        for (from, to, at) in [
            (
                "auth_style: bearer",
                "auth_style: basic",
                "credentials[0].auth_style",
            ),
            (
                "auth_style: bearer",
                "auth_style: path",
                "credentials[0].auth_style",
            ),
            ("    auth_style: bearer\n", "", "credentials[0].auth_style"),
            (
                "header_name: authorization",
                "header_name: ''",
                "credentials[0].header_name",
            ),
            (
                "env_vars: [GITHUB_TOKEN, GH_TOKEN]",
                "env_vars: []",
                "credentials[0].env_vars",
            ),
            (
                "required: true",
                "token_grant: {token_endpoint: https://sts.example/token}",
                "credentials[0].token_grant",
            ),
            ("binaries: [/usr/bin/gh]", "binaries: []", "binaries"),
            (
                "enforcement: enforce}",
                "enforcement: enforce, credential_signing: aws-sigv4}",
                "endpoints[0].credential_signing",
            ),
            (
                "enforcement: enforce}",
                "enforcement: enforce, request_body_credential_rewrite: true}",
                "endpoints[0].request_body_credential_rewrite",
            ),
            (
                "protocol: rest,",
                "protocol: graphql,",
                "endpoints[0].protocol",
            ),
            ("id: github", "id: GitHub", "id"),
        ] {
            assert!(PROFILE.contains(from), "{from}");
            assert_eq!(field(&PROFILE.replace(from, to)), at, "{to}");
        }
        // The gateway's refresh is noted, not an error: the binding is the same.
        let refreshed = PROFILE.replace(
            "required: true",
            "required: true\n    refresh: {strategy: oauth2_client_credentials}",
        );
        let out = import_provider(&yaml(&refreshed), "s").unwrap();
        assert!(out.notes.iter().any(|n| n.contains("refresh")));
        let query = PROFILE.replace(
            "auth_style: bearer\n    header_name: authorization",
            "auth_style: query\n    query_param: key",
        );
        let out = import_provider(&yaml(&query), "s").unwrap();
        assert_eq!(
            out.credentials[0].attach_form().unwrap(),
            crate::credentials::AttachForm::Query { name: "key".into() }
        );
    }

    #[test]
    fn absent_filesystem_section_means_writable_workdir() {
        let out = import(&yaml("version: 1"), Some("/sandbox")).unwrap();
        assert_eq!(
            out.policy.filesystem.read_write,
            vec!["/sandbox".to_string()]
        );
        assert!(import(&yaml("version: 1"), None).is_err());
    }
}
