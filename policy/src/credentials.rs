//! A sandbox's credentials (docs/policy-semantics.md §9): what the agent
//! holds in place of each secret, and how the proxy attaches the secret to
//! the requests the policy binds it to. The binding itself is authority and
//! lives in the policy (`network[].credentials`); these declarations say
//! where the value comes from and how it travels, and are checked here so
//! that `agentgate verify`, the operator and the proxy agree on them.

use std::collections::BTreeSet;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::action::check_credential_name;
use crate::compile::CompiledPolicy;
use crate::error::{Reason, ReasonCode};

/// The most credentials a sandbox declares.
pub const MAX_CREDENTIALS: usize = 32;
/// The placeholder's prefix: a random opaque value follows
/// ([`PLACEHOLDER_RANDOM_HEX`] lower-case hex digits).
pub const PLACEHOLDER_PREFIX: &str = "agentgate-placeholder-";
/// How many hex digits of randomness a placeholder carries (128 bits).
pub const PLACEHOLDER_RANDOM_HEX: usize = 32;
/// The shortest secret the proxy attaches: a shorter value could not be
/// searched for in request heads and bodies (misuse, §9.4) without refusing
/// unrelated requests that happen to hold those few bytes.
pub const MIN_SECRET_BYTES: usize = 8;
/// The marker in a header format where the secret goes.
pub const FORMAT_MARKER: &str = "{}";

/// One credential of a sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Credential {
    /// The name rules bind (`network[].credentials`): a DNS label.
    pub name: String,
    /// Where the secret value is: a key of a Secret in the sandbox's
    /// namespace. Only the proxy container mounts it.
    pub secret_ref: SecretKeyRef,
    /// What the agent holds instead: a random opaque value per Pod.
    pub placeholder: Placeholder,
    /// How the proxy attaches the secret to a request the policy binds it
    /// to.
    pub attach: Attach,
}

/// A key of a Secret in the sandbox's namespace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SecretKeyRef {
    /// The Secret's name.
    pub name: String,
    /// The key whose value is the secret.
    pub key: String,
}

/// Where the agent finds its placeholder; at least one of the two.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Placeholder {
    /// An environment variable of every agent container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<String>,
    /// An absolute file path in every agent container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
}

/// How the secret travels on a bound request; exactly one form.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Attach {
    /// A header whose value is `format` with the secret at `{}` (an MCP
    /// server's auth is a header too).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header: Option<HeaderAttach>,
    /// HTTP basic auth: the secret is the password.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub basic: Option<BasicAttach>,
    /// A query parameter whose value is the secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query: Option<QueryAttach>,
}

/// A header attachment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct HeaderAttach {
    /// The header's name (case-insensitive), such as `Authorization`.
    pub name: String,
    /// The value with `{}` where the secret goes, such as `Bearer {}`;
    /// absent means the value is the secret alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<String>,
}

/// A basic-auth attachment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct BasicAttach {
    /// The user name the request must carry beside the placeholder.
    pub username: String,
}

/// A query-parameter attachment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct QueryAttach {
    /// The parameter's name, such as `access_token`.
    pub name: String,
}

/// An attachment form, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttachForm {
    /// `name: prefix SECRET suffix`; `name` lower-case.
    Header {
        /// The header's name, lower-case.
        name: String,
        /// What comes before the secret.
        prefix: String,
        /// What comes after it.
        suffix: String,
    },
    /// `authorization: Basic base64(username:SECRET)`.
    Basic {
        /// The user name.
        username: String,
    },
    /// `?name=SECRET` (percent-encoded on the wire).
    Query {
        /// The parameter's name.
        name: String,
    },
}

impl AttachForm {
    /// As docs and refusals name it: `header Authorization`, `basic auth`,
    /// `query parameter access_token`.
    pub fn describe(&self) -> String {
        match self {
            AttachForm::Header { name, .. } => format!("header {name}"),
            AttachForm::Basic { .. } => "basic auth".to_string(),
            AttachForm::Query { name } => format!("query parameter {name}"),
        }
    }

    /// Whether `value` can travel in this form: a header value is visible
    /// ASCII and spaces (RFC 9110 field-vchar, without obs-text); basic
    /// auth's password also has no `:` in its user part's place (it is
    /// the password, so any field-vchar is fine); a query value is
    /// percent-encoded, so any byte but NUL, CR and LF.
    pub fn accepts_secret(&self, value: &[u8]) -> Result<(), String> {
        if value.is_empty() {
            return Err("the secret is empty".to_string());
        }
        if value.len() < MIN_SECRET_BYTES {
            return Err(format!(
                "the secret is shorter than {MIN_SECRET_BYTES} bytes, too short to be told apart from other data"
            ));
        }
        let visible = |b: &u8| *b == b' ' || *b == b'\t' || (0x21..=0x7e).contains(b);
        match self {
            AttachForm::Header { .. } | AttachForm::Basic { .. } => {
                if value.iter().all(visible) {
                    Ok(())
                } else {
                    Err(format!(
                        "the secret has a byte a {} cannot carry (only visible ASCII, space and tab)",
                        self.describe()
                    ))
                }
            }
            AttachForm::Query { .. } => {
                if value.iter().any(|b| matches!(b, 0 | b'\r' | b'\n')) {
                    Err("the secret has a NUL, CR or LF".to_string())
                } else {
                    Ok(())
                }
            }
        }
    }
}

impl Credential {
    /// The checked attachment form.
    pub fn attach_form(&self) -> Result<AttachForm, String> {
        let forms = [
            self.attach.header.is_some(),
            self.attach.basic.is_some(),
            self.attach.query.is_some(),
        ];
        if forms.iter().filter(|f| **f).count() != 1 {
            return Err("give exactly one of header, basic and query".to_string());
        }
        if let Some(header) = &self.attach.header {
            let name = header.name.to_ascii_lowercase();
            if name.is_empty() || !name.bytes().all(is_token_byte) {
                return Err(format!(
                    "header name {:?} is not an HTTP token",
                    header.name
                ));
            }
            if FORBIDDEN_HEADERS.contains(&name.as_str()) {
                return Err(format!(
                    "header {name} frames the request or names its destination; a credential cannot travel in it"
                ));
            }
            let format = header.format.as_deref().unwrap_or(FORMAT_MARKER);
            let mut parts = format.split(FORMAT_MARKER);
            let (Some(prefix), Some(suffix), None) = (parts.next(), parts.next(), parts.next())
            else {
                return Err(format!(
                    "format {format:?} must hold {FORMAT_MARKER} exactly once"
                ));
            };
            if !format
                .bytes()
                .all(|b| b == b' ' || (0x21..=0x7e).contains(&b))
            {
                return Err(format!("format {format:?} is not visible ASCII"));
            }
            return Ok(AttachForm::Header {
                name,
                prefix: prefix.to_string(),
                suffix: suffix.to_string(),
            });
        }
        if let Some(basic) = &self.attach.basic {
            if basic.username.contains(':')
                || !basic.username.bytes().all(|b| (0x21..=0x7e).contains(&b))
            {
                return Err(format!(
                    "username {:?} must be visible ASCII without ':'",
                    basic.username
                ));
            }
            return Ok(AttachForm::Basic {
                username: basic.username.clone(),
            });
        }
        match &self.attach.query {
            Some(query) if !query.name.is_empty() && query.name.bytes().all(is_query_name_byte) => {
                Ok(AttachForm::Query {
                    name: query.name.clone(),
                })
            }
            Some(query) => Err(format!(
                "query parameter name {:?} must be letters, digits, -, _, . or ~",
                query.name
            )),
            None => Err("give exactly one of header, basic and query".to_string()),
        }
    }
}

/// Headers that frame the request or say where it goes: the proxy reads
/// them to judge the request, so a secret there would change what was
/// judged.
const FORBIDDEN_HEADERS: &[&str] = &[
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "upgrade",
    "te",
    "trailer",
    "proxy-authorization",
    "x-http-method-override",
    "x-http-method",
    "x-method-override",
];

fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

fn is_query_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-_.~".contains(&b)
}

fn shape(field: impl Into<String>, message: impl Into<String>) -> Reason {
    Reason::at(ReasonCode::UnsupportedPolicyShape, field, message)
}

/// Whether `name` can be a Kubernetes object name (an RFC 1123 subdomain).
fn is_object_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

/// Whether `key` can be a Secret's key.
fn is_secret_key(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= 253
        && key != "."
        && key != ".."
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
}

/// Whether `name` can be an environment variable an agent reads.
fn is_env_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// Checks a sandbox's declarations on their own and against its policy,
/// naming the field (`field` is the list's path, such as
/// `spec.credentials`): names, sources, placeholders and attach forms are
/// valid and unique, and every credential the policy binds is declared. A
/// declared credential that no rule binds is fine: its placeholder is
/// refused everywhere.
pub fn check(
    field: &str,
    credentials: &[Credential],
    policy: &CompiledPolicy,
    policy_field: &str,
) -> Result<(), Reason> {
    if credentials.len() > MAX_CREDENTIALS {
        return Err(Reason::at(
            ReasonCode::ResourceLimit,
            field,
            format!("more than {MAX_CREDENTIALS} credentials"),
        ));
    }
    let mut names = BTreeSet::new();
    let mut envs = BTreeSet::new();
    let mut files = BTreeSet::new();
    for (i, c) in credentials.iter().enumerate() {
        let at = format!("{field}[{i}]");
        check_credential_name(&c.name).map_err(|e| shape(format!("{at}.name"), e.message))?;
        if !names.insert(c.name.as_str()) {
            return Err(shape(
                format!("{at}.name"),
                format!("credential {:?} is declared twice", c.name),
            ));
        }
        if !is_object_name(&c.secret_ref.name) {
            return Err(shape(
                format!("{at}.secretRef.name"),
                format!("{:?} is not a Secret name", c.secret_ref.name),
            ));
        }
        if !is_secret_key(&c.secret_ref.key) {
            return Err(shape(
                format!("{at}.secretRef.key"),
                format!("{:?} is not a Secret key", c.secret_ref.key),
            ));
        }
        if c.placeholder.env.is_none() && c.placeholder.file.is_none() {
            return Err(shape(
                format!("{at}.placeholder"),
                "give env, file or both: where the agent finds its placeholder",
            ));
        }
        if let Some(env) = &c.placeholder.env {
            if !is_env_name(env) {
                return Err(shape(
                    format!("{at}.placeholder.env"),
                    format!("{env:?} is not an environment variable name"),
                ));
            }
            if crate::credentials::RESERVED_ENV.contains(&env.as_str()) {
                return Err(shape(
                    format!("{at}.placeholder.env"),
                    format!("{env} is set by the data plane"),
                ));
            }
            if !envs.insert(env.as_str()) {
                return Err(shape(
                    format!("{at}.placeholder.env"),
                    format!("two credentials hold their placeholder in {env}"),
                ));
            }
        }
        if let Some(file) = &c.placeholder.file {
            crate::action::check_absolute_path("path", file)
                .map_err(|e| shape(format!("{at}.placeholder.file"), e.message))?;
            if file.starts_with("/agentgate/") || file == "/agentgate" {
                return Err(shape(
                    format!("{at}.placeholder.file"),
                    "/agentgate is the data plane's",
                ));
            }
            if !files.insert(file.as_str()) {
                return Err(shape(
                    format!("{at}.placeholder.file"),
                    format!("two credentials hold their placeholder in {file}"),
                ));
            }
        }
        c.attach_form()
            .map_err(|m| shape(format!("{at}.attach"), m))?;
    }
    for (r, rule) in policy.rules.iter().enumerate() {
        for (j, glob) in rule.credentials.iter().enumerate() {
            if !names.contains(glob.as_str()) {
                return Err(shape(
                    format!("{policy_field}network[{r}].credentials[{j}]"),
                    format!("credential {:?} is not declared in {field}", glob.as_str()),
                ));
            }
        }
    }
    Ok(())
}

/// Environment variables the data plane sets in every agent container.
pub const RESERVED_ENV: &[&str] = &[
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "http_proxy",
    "https_proxy",
    "NO_PROXY",
    "no_proxy",
    "SSL_CERT_FILE",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
    "GIT_SSL_CAINFO",
];

/// The secret a Secret key's bytes hold, as the proxy attaches it and the
/// operator checks it: the bytes without one trailing line end (`\n` or
/// `\r\n`, which `kubectl create secret --from-file` keeps from an editor's
/// file), everything else exactly as stored.
pub fn secret_value(raw: &[u8]) -> &[u8] {
    match raw.strip_suffix(b"\n") {
        Some(line) => line.strip_suffix(b"\r").unwrap_or(line),
        None => raw,
    }
}

/// Whether `value` has the shape of a placeholder.
pub fn is_placeholder(value: &str) -> bool {
    value.strip_prefix(PLACEHOLDER_PREFIX).is_some_and(|rest| {
        rest.len() == PLACEHOLDER_RANDOM_HEX
            && rest
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compile::{Limits, Role, compile};
    use crate::model::PolicyDocument;

    fn declared(yaml: &str) -> Vec<Credential> {
        serde_saphyr::from_str(yaml).unwrap_or_else(|e| panic!("{e}"))
    }

    fn policy(yaml: &str) -> CompiledPolicy {
        let doc: PolicyDocument = serde_saphyr::from_str(yaml).unwrap_or_else(|e| panic!("{e}"));
        compile(&doc, Role::Sandbox, &Limits::default()).unwrap_or_else(|e| panic!("{e}"))
    }

    const GH: &str = "- {name: github-token, secretRef: {name: gh, key: token}, placeholder: {env: GITHUB_TOKEN}, attach: {header: {name: Authorization, format: 'Bearer {}'}}}\n";
    const BOUND: &str = "network: [{name: gh, binaries: [/usr/bin/gh], credentials: [github-token], endpoints: [{host: api.github.com, port: 443, protocol: rest, access: read-only}]}]";

    #[test]
    fn declarations_bound_by_the_policy_pass() {
        assert_eq!(
            check(
                "spec.credentials",
                &declared(GH),
                &policy(BOUND),
                "spec.policy."
            ),
            Ok(())
        );
        let form = declared(GH)[0].attach_form();
        assert_eq!(
            form,
            Ok(AttachForm::Header {
                name: "authorization".into(),
                prefix: "Bearer ".into(),
                suffix: String::new()
            })
        );
    }

    #[test]
    fn an_undeclared_binding_is_refused_with_its_field() {
        let e = check("spec.credentials", &[], &policy(BOUND), "spec.policy.").unwrap_err();
        assert_eq!(
            e.field.as_deref(),
            Some("spec.policy.network[0].credentials[0]")
        );
    }

    #[test]
    fn conflicts_and_bad_forms_are_refused() {
        let p = policy("network: []");
        let twice = format!("{GH}{}", GH.replace("github-token", "other"));
        let e = check("c", &declared(&twice), &p, "").unwrap_err();
        assert_eq!(e.field.as_deref(), Some("c[1].placeholder.env"));
        for (bad, field) in [
            (GH.replace("'Bearer {}'", "'Bearer'"), "c[0].attach"),
            (GH.replace("'Bearer {}'", "'{} {}'"), "c[0].attach"),
            (GH.replace("Authorization", "Host"), "c[0].attach"),
            (
                GH.replace("env: GITHUB_TOKEN", "env: HTTPS_PROXY"),
                "c[0].placeholder.env",
            ),
            (
                GH.replace("placeholder: {env: GITHUB_TOKEN}", "placeholder: {}"),
                "c[0].placeholder",
            ),
            (
                GH.replace("key: token", "key: '../x'"),
                "c[0].secretRef.key",
            ),
            (
                GH.replace("name: github-token", "name: GitHub"),
                "c[0].name",
            ),
            (
                GH.replace(
                    "{header: {name: Authorization, format: 'Bearer {}'}}",
                    "{basic: {username: x}, query: {name: t}}",
                ),
                "c[0].attach",
            ),
        ] {
            let e = check("c", &declared(&bad), &p, "").unwrap_err();
            assert_eq!(e.field.as_deref(), Some(field), "{bad}: {e}");
        }
    }

    #[test]
    fn secrets_a_form_cannot_carry_are_refused() {
        let header = AttachForm::Header {
            name: "authorization".into(),
            prefix: String::new(),
            suffix: String::new(),
        };
        assert!(header.accepts_secret(b"ghp_abcdef12").is_ok());
        assert!(header.accepts_secret(b"a\r\nX-Evil: 1").is_err());
        assert!(header.accepts_secret(b"short").is_err());
        assert!(header.accepts_secret(b"").is_err());
        let query = AttachForm::Query { name: "t".into() };
        assert!(query.accepts_secret("ä&b-long-enough".as_bytes()).is_ok());
        assert!(query.accepts_secret(b"a\nb").is_err());
    }

    #[test]
    fn one_line_end_is_not_part_of_the_secret() {
        assert_eq!(secret_value(b"ghp_x\n"), b"ghp_x");
        assert_eq!(secret_value(b"ghp_x\r\n"), b"ghp_x");
        assert_eq!(secret_value(b"ghp_x\n\n"), b"ghp_x\n");
        assert_eq!(secret_value(b"ghp_x"), b"ghp_x");
    }

    #[test]
    fn placeholders_have_one_shape() {
        assert!(is_placeholder(
            "agentgate-placeholder-0123456789abcdef0123456789abcdef"
        ));
        assert!(!is_placeholder("agentgate-placeholder-0123"));
        assert!(!is_placeholder("ghp_0123456789abcdef0123456789abcdef"));
    }
}
