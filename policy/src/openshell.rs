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

use serde_json::{Map, Value};

use crate::error::{Reason, ReasonCode};
use crate::mcp_messages::SESSION_METHODS;
use crate::model::{
    AccessLevel, Endpoint, Filesystem, NetworkRule, PolicyDocument, Protocol, ResourceEntry,
    RuleEntry, ToolEntry,
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
    check_keys(map, field, &["method", "path"])?;
    let method = str_field(map, "method", field)?
        .ok_or_else(|| unsupported(format!("{field}.method"), "a method (or *) is required"))?;
    let path = str_field(map, "path", field)?.filter(|p| !p.is_empty());
    Ok(RuleEntry {
        methods: vec![if method == "*" {
            method.to_string()
        } else {
            method.to_ascii_uppercase()
        }],
        path: path.map(str::to_string),
    })
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
            let mut binaries = Vec::new();
            for (i, b) in map
                .get("binaries")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .enumerate()
            {
                let bat = format!("{at}.binaries[{i}]");
                let bmap = object(b, &bat)?;
                check_keys(bmap, &bat, &["path", "harness"])?;
                let path = str_field(bmap, "path", &bat)?.ok_or_else(|| {
                    unsupported(format!("{bat}.path"), "a binary path is required")
                })?;
                binaries.push(path.to_string());
            }
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
        assert_eq!(
            error_field(&format!(
                "{base}      - host: a.io\n        port: 443\n        protocol: rest\n        enforcement: enforce\n        rules: [{{allow: {{method: GET, path: /x, query: {{a: b}}}}}}]\n"
            )),
            "network_policies.p.endpoints[0].rules[0].allow.query"
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
