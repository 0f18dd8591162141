//! What a sandbox's credentials reach and whether the proxy can attach them
//! (docs/policy-semantics.md §9), as the status, `kubectl agentgate why`
//! and the `CredentialsAvailable` condition show it. Pure: the operator
//! reads the Secrets and brings their data.

use std::collections::BTreeMap;

use agentgate_api::crd::CredentialReach;
use agentgate_policy::credentials::{Credential, secret_value};
use agentgate_policy::model::{AccessLevel, Endpoint, NetworkRule, PolicyDocument, Protocol};

/// One line per endpoint a rule binds a credential to:
/// `gh-issues: POST api.github.com:443/repos/acme/app/issues by /usr/bin/gh`.
pub fn reach_lines(rule: &NetworkRule) -> Vec<String> {
    let by = if rule.binaries.is_empty() {
        "any binary".to_string()
    } else {
        rule.binaries.join(", ")
    };
    rule.endpoints
        .iter()
        .map(|e| format!("{}: {} by {by}", rule.name, endpoint_line(e)))
        .collect()
}

fn endpoint_line(e: &Endpoint) -> String {
    let ports: Vec<String> = e.port.iter().chain(&e.ports).map(u16::to_string).collect();
    let at = format!("{}:{}", e.host, ports.join(","));
    let scope = e.path.as_deref().unwrap_or("");
    match e.protocol {
        Protocol::L4 => format!("every request to {at} (l4, uninspected)"),
        Protocol::Mcp => {
            let tools: Vec<&str> = e.tools.iter().map(|t| t.name.as_str()).collect();
            format!("tools [{}] on {at}{scope}", tools.join(", "))
        }
        _ => match e.access {
            Some(AccessLevel::ReadOnly) => format!("GET, HEAD, OPTIONS {at}{scope}"),
            Some(AccessLevel::ReadWrite) => {
                format!("GET, HEAD, OPTIONS, POST, PUT, PATCH {at}{scope}")
            }
            Some(AccessLevel::Full) => format!("any method {at}{scope}"),
            None => {
                let entries: Vec<String> = e
                    .rules
                    .iter()
                    .map(|r| {
                        format!(
                            "{} {at}{}",
                            r.methods.join(", "),
                            r.path.as_deref().unwrap_or(if scope.is_empty() {
                                "/**"
                            } else {
                                scope
                            })
                        )
                    })
                    .collect();
                entries.join("; ")
            }
        },
    }
}

/// Whether the proxy can attach a credential, given its Secret's data
/// (`None`: the Secret does not exist): `Err` says why not, naming the
/// Secret and key, never the value.
pub fn availability(
    credential: &Credential,
    secret: Option<&BTreeMap<String, Vec<u8>>>,
) -> Result<(), String> {
    let reference = &credential.secret_ref;
    let Some(data) = secret else {
        return Err(format!(
            "Secret {:?} does not exist in the sandbox's namespace",
            reference.name
        ));
    };
    let Some(raw) = data.get(&reference.key) else {
        return Err(format!(
            "Secret {:?} has no key {:?}",
            reference.name, reference.key
        ));
    };
    let form = credential.attach_form()?;
    form.accepts_secret(secret_value(raw)).map_err(|why| {
        format!(
            "key {:?} of Secret {:?} cannot be attached as {}: {why}",
            reference.key,
            reference.name,
            form.describe()
        )
    })
}

/// The status entry of each declared credential: where it reaches in the
/// effective policy and whether the proxy can attach it. `secrets` holds the
/// data of each Secret read (absent: it does not exist).
pub fn reach(
    credentials: &[Credential],
    effective: &PolicyDocument,
    secrets: &BTreeMap<String, Option<BTreeMap<String, Vec<u8>>>>,
) -> Vec<CredentialReach> {
    credentials
        .iter()
        .map(|c| {
            let rules: Vec<&NetworkRule> = effective
                .network
                .iter()
                .filter(|r| r.credentials.contains(&c.name))
                .collect();
            let secret = secrets.get(&c.secret_ref.name).and_then(Option::as_ref);
            let unavailable = availability(c, secret).err();
            CredentialReach {
                name: c.name.clone(),
                secret: format!("{}/{}", c.secret_ref.name, c.secret_ref.key),
                available: unavailable.is_none(),
                reason: unavailable,
                bound_by: rules.iter().map(|r| r.name.clone()).collect(),
                reach: rules.iter().flat_map(|r| reach_lines(r)).collect(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn credential() -> Credential {
        serde_json::from_value(serde_json::json!({
            "name": "github-token",
            "secretRef": {"name": "github", "key": "token"},
            "placeholder": {"env": "GITHUB_TOKEN"},
            "attach": {"header": {"name": "Authorization", "format": "Bearer {}"}},
        }))
        .unwrap()
    }

    #[test]
    fn availability_names_the_secret_and_key_never_the_value() {
        let c = credential();
        assert!(
            availability(&c, None)
                .unwrap_err()
                .contains("\"github\" does not exist")
        );
        let empty = BTreeMap::new();
        assert!(
            availability(&c, Some(&empty))
                .unwrap_err()
                .contains("no key \"token\"")
        );
        let good = BTreeMap::from([("token".to_string(), b"ghp_abcdef\n".to_vec())]);
        assert_eq!(availability(&c, Some(&good)), Ok(()));
        let bad = BTreeMap::from([("token".to_string(), b"ghp\r\nX: y".to_vec())]);
        let why = availability(&c, Some(&bad)).unwrap_err();
        assert!(why.contains("header authorization"), "{why}");
        assert!(!why.contains("ghp"), "{why}");
    }

    #[test]
    fn reach_lists_the_rules_that_bind_each_credential() {
        let policy: PolicyDocument = serde_saphyr::from_str(
            "network: [{name: gh, binaries: [/usr/bin/gh], credentials: [github-token], endpoints: [{host: api.github.com, port: 443, protocol: rest, rules: [{methods: [POST], path: /repos/acme/app/issues}]}]}, {name: other, endpoints: [{host: a.io, port: 443}]}]",
        )
        .unwrap();
        let secrets = BTreeMap::from([("github".to_string(), None)]);
        let status = reach(&[credential()], &policy, &secrets);
        assert_eq!(status[0].bound_by, vec!["gh"]);
        assert_eq!(
            status[0].reach,
            vec!["gh: POST api.github.com:443/repos/acme/app/issues by /usr/bin/gh"]
        );
        assert!(!status[0].available);
        assert_eq!(status[0].secret, "github/token");
    }
}
