//! Concrete actions (docs/policy-semantics.md §1) and their canonical forms.

use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use crate::model::Layer;

/// A network action `(binary, host, port, layer, method, path)`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub struct NetworkAction {
    /// Absolute path of the executable opening the connection.
    pub binary: String,
    /// Lower-case DNS name.
    pub host: String,
    /// TCP port, 1..=65535.
    pub port: u16,
    /// `l4` or `rest`.
    pub layer: Layer,
    /// HTTP method (empty for `l4`).
    pub method: String,
    /// Request path (empty for `l4`).
    pub path: String,
    /// Query parameters, decoded (docs/policy-semantics.md §10.1; empty
    /// for `l4`). Only the parameters some rule names can decide anything.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub query: crate::query::Query,
    /// A `websocket` action's upgrade (docs/policy-semantics.md §10.2):
    /// the subprotocol it offers and its origin. `None` for other layers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upgrade: Option<Upgrade>,
    /// The credential the request carries (docs/policy-semantics.md §9):
    /// the name of a sandbox credential whose placeholder it holds, or
    /// `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credential: Option<String>,
}

/// What a WebSocket upgrade says beyond its path and query
/// (docs/policy-semantics.md §10.2).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub struct Upgrade {
    /// One subprotocol token the client offers, or `None` when it offers none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subprotocol: Option<String>,
    /// The `Origin` header, lower-cased, or `None` when it sends none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
}

/// Filesystem access kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Access {
    /// Read a file or list a directory.
    Read,
    /// Create, modify or delete.
    Write,
}

impl Access {
    /// The access kind's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Access::Read => "read",
            Access::Write => "write",
        }
    }
}

/// A filesystem action `(access, path)`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub struct FilesystemAction {
    /// Read or write.
    pub access: Access,
    /// Canonical absolute path.
    pub path: String,
}

/// What an MCP action asks the server for (docs/policy-semantics.md §8.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum McpKind {
    /// `tools/call`.
    Tool,
    /// `resources/read`, `resources/subscribe`.
    Resource,
    /// `prompts/get`.
    Prompt,
}

impl McpKind {
    /// The JSON-RPC method that carries this kind of action.
    pub fn method(self) -> &'static str {
        match self {
            McpKind::Tool => "tools/call",
            McpKind::Resource => "resources/read",
            McpKind::Prompt => "prompts/get",
        }
    }
}

/// An MCP action `(binary, host, port, path, kind, name, args)`: one call
/// of a named tool, resource or prompt with its arguments.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct McpAction {
    /// Absolute path of the executable making the call.
    pub binary: String,
    /// Lower-case DNS name of the server.
    pub host: String,
    /// TCP port, 1..=65535.
    pub port: u16,
    /// The request path of the server's endpoint (canonical, as for `rest`).
    pub path: String,
    /// Tool, resource or prompt.
    #[serde(rename = "call")]
    pub kind: McpKind,
    /// The tool name, resource URI or prompt name.
    pub name: String,
    /// The arguments (`{}` for resources).
    #[serde(default)]
    pub args: serde_json::Map<String, serde_json::Value>,
    /// Where the argument values were seen (docs/policy-semantics.md §8.3),
    /// as a counterexample states them. `None` for a call taken off the
    /// wire: its sources are the session record's to tell, never the
    /// caller's to claim, and without a record no `from` holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<std::collections::BTreeMap<String, Vec<String>>>")]
    pub sources: Option<Box<crate::provenance::StatedSources>>,
    /// The credential the call's transport request carries (§9), or `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credential: Option<String>,
}

impl std::hash::Hash for McpAction {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.binary.hash(state);
        self.host.hash(state);
        self.port.hash(state);
        self.path.hash(state);
        self.kind.hash(state);
        self.name.hash(state);
        // Equal maps (in any key order) have one canonical text.
        crate::canonical::canonical_object(&self.args).hash(state);
        self.sources.hash(state);
        self.credential.hash(state);
    }
}

/// Every kind of action. Serialises with a `kind` tag, as `verify --output
/// json` prints counterexamples.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Action {
    /// A connection or request.
    Network(NetworkAction),
    /// A file access.
    Filesystem(FilesystemAction),
    /// A tool, resource or prompt call on an MCP server.
    Mcp(McpAction),
}

impl fmt::Display for NetworkAction {
    /// `POST https://api.github.com:443/repos/acme by /usr/bin/gh (layer rest)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.layer {
            Layer::Rest | Layer::Websocket => {
                let (verb, scheme) = match self.layer {
                    Layer::Websocket => ("upgrade", "wss"),
                    _ => (self.method.as_str(), "https"),
                };
                write!(
                    f,
                    "{verb} {scheme}://{}:{}{}",
                    self.host, self.port, self.path
                )?;
                if !self.query.is_empty() {
                    write!(f, "?{}", crate::query::to_target(&self.query))?;
                }
                write!(f, " by {}", self.binary)?;
                if let Some(upgrade) = &self.upgrade {
                    if let Some(subprotocol) = &upgrade.subprotocol {
                        write!(f, " offering {subprotocol}")?;
                    }
                    if let Some(origin) = &upgrade.origin {
                        write!(f, " from origin {origin}")?;
                    }
                }
            }
            Layer::L4 => write!(f, "connect {}:{} by {}", self.host, self.port, self.binary)?,
        }
        if let Some(credential) = &self.credential {
            write!(f, " with credential {credential}")?;
        }
        write!(f, " (layer {})", self.layer.as_str())
    }
}

impl fmt::Display for FilesystemAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.access.as_str(), self.path)
    }
}

impl fmt::Display for McpAction {
    /// `tools/call send_money {"amount":101} by /usr/bin/python3 on
    /// bank.internal:443/mcp`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.kind.method(), self.name)?;
        if self.kind != McpKind::Resource {
            let args = serde_json::to_string(&self.args).map_err(|_| fmt::Error)?;
            write!(f, " {args}")?;
        }
        write!(
            f,
            " by {} on {}:{}{}",
            self.binary, self.host, self.port, self.path
        )?;
        if let Some(sources) = self.sources.as_deref().filter(|s| !s.0.is_empty()) {
            write!(f, " with {sources}")?;
        }
        match &self.credential {
            Some(credential) => write!(f, " with credential {credential}"),
            None => Ok(()),
        }
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::Network(a) => a.fmt(f),
            Action::Filesystem(a) => a.fmt(f),
            Action::Mcp(a) => a.fmt(f),
        }
    }
}

/// The longest canonical request path.
pub const MAX_PATH_BYTES: usize = 4096;
/// The longest canonical host name.
pub const MAX_HOST_BYTES: usize = 253;

/// Why a value is not canonical.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct CanonicalError {
    /// Which field of the action.
    pub field: &'static str,
    /// What is wrong.
    pub message: String,
}

fn err(field: &'static str, message: impl Into<String>) -> CanonicalError {
    CanonicalError {
        field,
        message: message.into(),
    }
}

/// Checks a binary or filesystem path: absolute, non-empty segments (or, for
/// filesystem paths, the root `/`), no `.`/`..` segments, no NUL, ASCII.
pub fn check_absolute_path(field: &'static str, value: &str) -> Result<(), CanonicalError> {
    let Some(rest) = value.strip_prefix('/') else {
        return Err(err(field, "must start with /"));
    };
    if !value.is_ascii() || value.contains('\0') {
        return Err(err(field, "must be ASCII without NUL"));
    }
    if value.len() > MAX_PATH_BYTES {
        return Err(err(field, "longer than 4096 bytes"));
    }
    if rest.is_empty() {
        // The root is a directory: fine for filesystem access, never an executable.
        return if field == "binary" {
            Err(err(field, "must name a file, not /"))
        } else {
            Ok(())
        };
    }
    for segment in rest.split('/') {
        if segment.is_empty() {
            return Err(err(field, "empty segment"));
        }
        if segment == "." || segment == ".." {
            return Err(err(field, "`.` and `..` segments are not canonical"));
        }
    }
    Ok(())
}

/// The longest credential name.
pub const MAX_CREDENTIAL_NAME_BYTES: usize = 63;

/// Checks a credential name (docs/policy-semantics.md §9): a DNS label, 1..63
/// characters of `[a-z0-9-]`, starting and ending with a letter or digit,
/// so that it can name a file, an Event reason and a placeholder alike.
pub fn check_credential_name(value: &str) -> Result<(), CanonicalError> {
    let field = "credential";
    if value.is_empty() || value.len() > MAX_CREDENTIAL_NAME_BYTES {
        return Err(err(field, "a credential name is 1..63 characters"));
    }
    if !value
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        || value.starts_with('-')
        || value.ends_with('-')
    {
        return Err(err(
            field,
            format!(
                "{value:?} is not a DNS label (lower-case letters, digits and -, starting and ending with a letter or digit)"
            ),
        ));
    }
    Ok(())
}

/// Checks a WebSocket subprotocol: an RFC 9110 token of at most 256
/// bytes (docs/policy-semantics.md §10.2).
pub fn check_subprotocol(value: &str) -> Result<(), CanonicalError> {
    if value.is_empty() || value.len() > 256 || !value.bytes().all(is_tchar) {
        return Err(err(
            "subprotocol",
            format!("{value:?} is not a token of at most 256 bytes"),
        ));
    }
    Ok(())
}

/// Checks an origin: 1..=1024 bytes of printable ASCII, lower-case.
pub fn check_origin(value: &str) -> Result<(), CanonicalError> {
    if value.is_empty()
        || value.len() > 1024
        || !value.bytes().all(crate::names::is_name_byte)
        || value.bytes().any(|b| b.is_ascii_uppercase())
    {
        return Err(err(
            "origin",
            format!("{value:?} is not 1..1024 bytes of lower-case printable ASCII"),
        ));
    }
    Ok(())
}

/// Checks a REST request path.
pub fn check_request_path(value: &str) -> Result<(), CanonicalError> {
    let Some(rest) = value.strip_prefix('/') else {
        return Err(err("path", "must start with /"));
    };
    if !value.is_ascii() || value.contains(['\0', '?', '#', ';']) {
        return Err(err("path", "must be ASCII without NUL, ?, # or ;"));
    }
    if value.len() > MAX_PATH_BYTES {
        return Err(err("path", "longer than 4096 bytes"));
    }
    let segments: Vec<&str> = rest.split('/').collect();
    let last = segments.len() - 1;
    for (i, segment) in segments.iter().enumerate() {
        if segment.is_empty() && i != last {
            return Err(err("path", "contains //"));
        }
        if *segment == "." || *segment == ".." {
            return Err(err("path", "`.` and `..` segments are not canonical"));
        }
    }
    Ok(())
}

/// The `path` of a `rest` action for a request target's path (without its
/// query), as docs/policy-semantics.md §7 says: percent-escapes of `/`, `.`, `\`
/// and `%` are refused because a server may decode them into a different
/// path than the one judged; escapes of other unreserved characters
/// (letters, digits, `-`, `_`, `~`) are decoded; the result must be
/// canonical (no `//`, no dot segments, no `;`). An empty target is `/`.
pub fn request_path(target: &str) -> Result<String, CanonicalError> {
    if target.is_empty() {
        return Ok("/".to_string());
    }
    let bytes = target.as_bytes();
    let mut out = String::with_capacity(target.len());
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b != b'%' {
            out.push(char::from(b));
            i += 1;
            continue;
        }
        let hex = |b: Option<&u8>| b.and_then(|b| char::from(*b).to_digit(16));
        let (Some(hi), Some(lo)) = (hex(bytes.get(i + 1)), hex(bytes.get(i + 2))) else {
            return Err(err("path", "a `%` not followed by two hex digits"));
        };
        // Both digits are < 16, so the byte fits.
        let decoded = u8::try_from(hi * 16 + lo).unwrap_or(0);
        match decoded {
            b'/' | b'.' | b'\\' | b'%' => {
                return Err(err(
                    "path",
                    "percent-encoded `/`, `.`, `\\` or `%` is not canonical",
                ));
            }
            b if b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'~' => {
                out.push(char::from(b));
            }
            // Reserved and other characters keep their escape: a server reads
            // them as data inside one segment, never as structure.
            _ => out.push_str(&target[i..i + 3]),
        }
        i += 3;
    }
    if !target.is_ascii() {
        return Err(err("path", "must be ASCII"));
    }
    // Some servers (WHATWG URL parsers, IIS) read `\` as `/`: `/a/..\b`
    // would be one segment here and `/b` there.
    if out.contains('\\') {
        return Err(err("path", "a backslash is not canonical"));
    }
    check_request_path(&out)?;
    Ok(out)
}

/// True for a byte allowed in a host label.
pub fn is_host_byte(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_'
}

/// Checks a host name: lower-case labels of `[a-z0-9_-]`, 1..=127 labels of
/// 1..=63 bytes, at most 253 bytes, no trailing dot.
pub fn check_host(value: &str) -> Result<(), CanonicalError> {
    if value.is_empty() || value.len() > MAX_HOST_BYTES {
        return Err(err("host", "must be 1..253 bytes"));
    }
    let labels: Vec<&str> = value.split('.').collect();
    if labels.len() > 127 {
        return Err(err("host", "more than 127 labels"));
    }
    for label in labels {
        if label.is_empty() || label.len() > 63 {
            return Err(err("host", "labels must be 1..63 bytes"));
        }
        if !label.bytes().all(is_host_byte) {
            return Err(err("host", "labels are lower-case [a-z0-9_-]"));
        }
    }
    Ok(())
}

/// True for an RFC 9110 `tchar`.
pub fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Checks an HTTP method token: upper-case, 1..64 `tchar`s.
pub fn check_method(value: &str) -> Result<(), CanonicalError> {
    if value.is_empty() || value.len() > 64 {
        return Err(err("method", "must be 1..64 characters"));
    }
    if !value.bytes().all(is_tchar) || value.bytes().any(|b| b.is_ascii_lowercase()) {
        return Err(err("method", "must be an upper-case HTTP token"));
    }
    Ok(())
}

impl NetworkAction {
    /// Checks that every field is in canonical form (§1).
    pub fn check_canonical(&self) -> Result<(), CanonicalError> {
        check_absolute_path("binary", &self.binary)?;
        check_host(&self.host)?;
        if self.port == 0 {
            return Err(err("port", "must be 1..65535"));
        }
        match self.layer {
            Layer::L4 => {
                if !self.method.is_empty() || !self.path.is_empty() || !self.query.is_empty() {
                    return Err(err("layer", "l4 actions have no method, path or query"));
                }
            }
            Layer::Rest | Layer::Websocket => {
                check_method(&self.method)?;
                check_request_path(&self.path)?;
                if self.query.keys().any(String::is_empty) {
                    return Err(err("query", "a parameter name is not empty"));
                }
            }
        }
        if self.layer == Layer::Websocket && self.method != "GET" {
            return Err(err("method", "a WebSocket upgrade is a GET"));
        }
        match (&self.upgrade, self.layer) {
            (Some(upgrade), Layer::Websocket) => {
                if let Some(s) = &upgrade.subprotocol {
                    check_subprotocol(s)?;
                }
                if let Some(o) = &upgrade.origin {
                    check_origin(o)?;
                }
            }
            (Some(_), _) => return Err(err("upgrade", "only a websocket action has an upgrade")),
            (None, _) => {}
        }
        if let Some(credential) = &self.credential {
            check_credential_name(credential)?;
        }
        Ok(())
    }
}

impl FilesystemAction {
    /// Checks that the path is canonical.
    pub fn check_canonical(&self) -> Result<(), CanonicalError> {
        check_absolute_path("path", &self.path)
    }
}

impl McpAction {
    /// The `rest` action that carries this call on the wire (`POST path`),
    /// which raw authority is judged on (docs/policy-semantics.md §8.2).
    pub fn transport(&self) -> NetworkAction {
        NetworkAction {
            binary: self.binary.clone(),
            host: self.host.clone(),
            port: self.port,
            layer: Layer::Rest,
            method: "POST".to_string(),
            path: self.path.clone(),
            credential: self.credential.clone(),
            query: Default::default(),
            upgrade: None,
        }
    }

    /// Checks that every field is in canonical form (§8.1).
    pub fn check_canonical(&self) -> Result<(), CanonicalError> {
        self.transport().check_canonical()?;
        crate::names::check_name(&self.name).map_err(|m| err("name", m))?;
        if self.kind == McpKind::Resource && !self.args.is_empty() {
            return Err(err("args", "a resource read has no arguments"));
        }
        if let Some(sources) = &self.sources {
            sources.check(&self.args).map_err(|m| err("sources", m))?;
        }
        Ok(())
    }
}

impl Action {
    /// Checks that the action is in canonical form (§1, §8.1).
    pub fn check_canonical(&self) -> Result<(), CanonicalError> {
        match self {
            Action::Network(a) => a.check_canonical(),
            Action::Filesystem(a) => a.check_canonical(),
            Action::Mcp(a) => a.check_canonical(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_paths_are_decoded_or_refused() {
        assert_eq!(request_path("").unwrap(), "/");
        assert_eq!(request_path("/repos/acme").unwrap(), "/repos/acme");
        assert_eq!(request_path("/r%65pos/%7Eme").unwrap(), "/repos/~me");
        assert_eq!(request_path("/a%20b/%3F").unwrap(), "/a%20b/%3F");
        for bad in [
            "/a/%2e%2e/b",
            "/a%2Fb",
            "/a%5cb",
            "/a%25b",
            "/a//b",
            "/a/../b",
            "/a/./b",
            "/a;b",
            "/a%zz",
            "/a%4",
            "relative",
            "/a/%2E",
            "/a/..\\..\\admin",
            "/a\\b",
            "?x",
        ] {
            assert!(request_path(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn canonical_paths() {
        assert!(check_request_path("/repos/").is_ok());
        assert!(check_request_path("/").is_ok());
        assert!(check_request_path("/a//b").is_err());
        assert!(check_request_path("/a/./b").is_err());
        assert!(check_request_path("/a/..").is_err());
        assert!(check_request_path("/a?b").is_err());
        assert!(check_absolute_path("binary", "/usr/bin/").is_err());
        assert!(check_absolute_path("binary", "/usr/bin/gh").is_ok());
    }

    #[test]
    fn canonical_hosts_and_methods() {
        assert!(check_host("api.github.com").is_ok());
        assert!(check_host("API.github.com").is_err());
        assert!(check_host("a..b").is_err());
        assert!(check_host("a.").is_err());
        assert!(check_method("GET").is_ok());
        assert!(check_method("get").is_err());
    }

    #[test]
    fn mcp_actions_read_naturally_and_hash_by_value() {
        let call = |args: serde_json::Value| McpAction {
            binary: "/usr/bin/python3".into(),
            host: "bank.internal".into(),
            port: 443,
            path: "/mcp".into(),
            kind: McpKind::Tool,
            name: "send_money".into(),
            args: args.as_object().cloned().unwrap_or_default(),
            sources: None,
            credential: None,
        };
        let a = call(serde_json::json!({"recipient": "x", "amount": 101}));
        assert_eq!(
            a.to_string(),
            r#"tools/call send_money {"recipient":"x","amount":101} by /usr/bin/python3 on bank.internal:443/mcp"#
        );
        assert!(a.check_canonical().is_ok());
        let b = call(serde_json::json!({"amount": 101, "recipient": "x"}));
        assert_eq!(a, b);
        let set: std::collections::HashSet<McpAction> = [a, b].into_iter().collect();
        assert_eq!(set.len(), 1);
        let mut bad = call(serde_json::json!({}));
        bad.name = String::new();
        assert!(bad.check_canonical().is_err());
    }

    #[test]
    fn display_reads_naturally() {
        let a = NetworkAction {
            binary: "/usr/bin/gh".into(),
            host: "api.github.com".into(),
            port: 443,
            layer: Layer::Rest,
            method: "POST".into(),
            path: "/repos/acme".into(),
            credential: None,
            query: Default::default(),
            upgrade: None,
        };
        assert_eq!(
            a.to_string(),
            "POST https://api.github.com:443/repos/acme by /usr/bin/gh (layer rest)"
        );
    }
}
