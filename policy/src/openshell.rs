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

use serde_json::{Map, Value};

use crate::error::{Reason, ReasonCode};
use crate::model::{
    AccessLevel, Endpoint, Filesystem, NetworkRule, PolicyDocument, Protocol, RuleEntry,
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
            for key in ["access", "rules", "deny_rules", "path"] {
                if map.contains_key(key) {
                    return Err(unsupported(
                        format!("{field}.{key}"),
                        "only REST endpoints take L7 fields",
                    ));
                }
            }
            return Ok(out);
        }
        "rest" => {}
        other => {
            return Err(unsupported(
                format!("{field}.protocol"),
                format!("protocol {other} is not modelled (only tcp and rest)"),
            ));
        }
    }
    if str_field(map, "enforcement", field)? != Some("enforce") {
        notes.push(format!(
            "{field}: enforcement is audit, so its L7 rules do not restrict anything; imported as an l4 endpoint"
        ));
        return Ok(out);
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
    fn absent_filesystem_section_means_writable_workdir() {
        let out = import(&yaml("version: 1"), Some("/sandbox")).unwrap();
        assert_eq!(
            out.policy.filesystem.read_write,
            vec!["/sandbox".to_string()]
        );
        assert!(import(&yaml("version: 1"), None).is_err());
    }
}
