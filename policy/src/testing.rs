//! Random policies and the complete action space over a small alphabet, for
//! property tests that compare an implementation with the matcher (the
//! prover in `tests/`, the proxy in `proxy/`). Enabled by the `testing`
//! feature; never part of a release build.

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::sync::OnceLock;

use proptest::prelude::*;
use proptest::sample::{select, subsequence};

use crate::action::{
    Access, Action, FilesystemAction, Layer, McpAction, McpKind, NetworkAction, Upgrade,
};
use crate::model::{
    AccessLevel, ArgumentConstraint, Endpoint, EntitiesConstraint, Filesystem, NetworkRule,
    PolicyDocument, Protocol, QueryMatcher, QuerySpec, ResourceEntry, RuleEntry, ToolEntry,
};

pub const BINARY_GLOBS: &[&str] = &[
    "/usr/bin/gh",
    "/usr/bin/*",
    "/usr/**",
    "/opt/x",
    "/*/bin/gh",
];
pub const HOST_GLOBS: &[&str] = &[
    "a.io", "*.a.io", "**.a.io", "b.a.io", "x*.a.io", "c.b.a.io", "**",
];
pub const PATH_GLOBS: &[&str] = &[
    "/a", "/a/*", "/a/**", "/a/*/b", "/**/b", "/a/", "**", "/b*", "/a/**/b", "/*",
];
pub const METHODS: &[&str] = &["GET", "POST", "DELETE", "*", "HEAD"];
pub const FS_PATHS: &[&str] = &["/a", "/a/b", "/b", "/", "/a/bc"];
pub const PORTS: &[u16] = &[443, 80];

pub const BINARIES: &[&str] = &[
    "/usr/bin/gh",
    "/usr/bin/x",
    "/usr/lib/y/gh",
    "/opt/x",
    "/x",
    "/opt/bin/gh",
];
pub const HOSTS: &[&str] = &[
    "a.io",
    "b.a.io",
    "x.a.io",
    "xy.a.io",
    "c.b.a.io",
    "d.c.b.a.io",
    "b.io",
];
pub const ACTION_PORTS: &[u16] = &[443, 80, 22];
pub const ACTION_METHODS: &[&str] = &["GET", "HEAD", "POST", "DELETE", "PUT", "OPTIONS"];
pub const PATHS: &[&str] = &[
    "/", "/a", "/a/", "/a/x", "/a/x/", "/a/x/b", "/a/b", "/b", "/bx", "/x/b", "/a/x/y/b", "/a/b/b",
];
pub const FILES: &[&str] = &[
    "/", "/a", "/a/b", "/a/bc", "/a/b/c", "/ab", "/b", "/b/x", "/c",
];

/// Every network and filesystem action of the small alphabet.
pub fn universe() -> &'static [Action] {
    static ACTIONS: OnceLock<Vec<Action>> = OnceLock::new();
    ACTIONS.get_or_init(|| {
        let mut out = Vec::new();
        for b in BINARIES {
            for h in HOSTS {
                for &port in ACTION_PORTS {
                    out.push(Action::Network(NetworkAction {
                        binary: b.to_string(),
                        host: h.to_string(),
                        port,
                        layer: Layer::L4,
                        method: String::new(),
                        path: String::new(),
                        credential: None,
                        query: Default::default(),
                        upgrade: None,
                    }));
                    for m in ACTION_METHODS {
                        for p in PATHS {
                            out.push(Action::Network(NetworkAction {
                                binary: b.to_string(),
                                host: h.to_string(),
                                port,
                                layer: Layer::Rest,
                                method: m.to_string(),
                                path: p.to_string(),
                                credential: None,
                                query: Default::default(),
                                upgrade: None,
                            }));
                        }
                    }
                }
            }
        }
        for access in [Access::Read, Access::Write] {
            for f in FILES {
                out.push(Action::Filesystem(FilesystemAction {
                    access,
                    path: f.to_string(),
                }));
            }
        }
        out
    })
}

pub fn strings(pool: &'static [&'static str], max: usize) -> impl Strategy<Value = Vec<String>> {
    subsequence(pool, 0..=max).prop_map(|v| v.into_iter().map(str::to_string).collect())
}

pub fn entry() -> impl Strategy<Value = RuleEntry> {
    (
        subsequence(METHODS, 1..=2),
        proptest::option::weighted(0.8, select(PATH_GLOBS)),
    )
        .prop_map(|(methods, path)| RuleEntry {
            methods: methods.into_iter().map(str::to_string).collect(),
            path: path.map(str::to_string),
            query: Default::default(),
            subprotocols: None,
            origins: None,
        })
}

pub fn endpoint() -> impl Strategy<Value = Endpoint> {
    (
        select(HOST_GLOBS),
        subsequence(PORTS, 1..=2),
        0u8..6,
        proptest::option::weighted(0.2, select(PATH_GLOBS)),
        proptest::collection::vec(entry(), 1..=2),
        proptest::collection::vec(entry(), 0..=1),
    )
        .prop_map(|(host, ports, shape, scope, rules, deny_rules)| {
            let mut e = Endpoint {
                host: host.to_string(),
                ports: ports.to_vec(),
                ..Default::default()
            };
            if shape == 0 {
                return e; // l4
            }
            e.protocol = Protocol::Rest;
            e.path = scope.map(str::to_string);
            e.deny_rules = deny_rules;
            match shape {
                1 => e.access = Some(AccessLevel::ReadOnly),
                2 => e.access = Some(AccessLevel::ReadWrite),
                3 => e.access = Some(AccessLevel::Full),
                _ => e.rules = rules,
            }
            e
        })
}

pub fn document() -> impl Strategy<Value = PolicyDocument> {
    (
        proptest::collection::vec(
            (
                strings(BINARY_GLOBS, 2),
                proptest::collection::vec(endpoint(), 1..=2),
            ),
            0..=3,
        ),
        strings(FS_PATHS, 2),
        strings(FS_PATHS, 2),
    )
        .prop_map(|(rules, read_only, read_write)| PolicyDocument {
            filesystem: Filesystem {
                read_only,
                read_write,
            },
            network: named_rules(rules),
        })
}

/// Rules `r0`, `r1`, … from their binaries and endpoints.
fn named_rules(rules: Vec<(Vec<String>, Vec<Endpoint>)>) -> Vec<NetworkRule> {
    rules
        .into_iter()
        .enumerate()
        .map(|(i, (binaries, endpoints))| NetworkRule {
            name: format!("r{i}"),
            binaries,
            endpoints,
            review: None,
            ..NetworkRule::default()
        })
        .collect()
}

// Credentials (docs/policy-semantics.md §9): patterns a ceiling may write,
// names a sandbox declares, and the actions that carry them.

pub const CREDENTIAL_GLOBS: &[&str] = &["github", "git*", "*", "npm-token", "*-token"];
pub const CREDENTIALS: &[&str] = &["github", "gitlab", "npm-token", "x"];

/// A random policy whose rules may bind credentials (globs: compile it as a
/// MaximumPolicy, where an `l4` binding needs no flag).
pub fn credentialed_document() -> impl Strategy<Value = PolicyDocument> {
    (
        document(),
        proptest::collection::vec(strings(CREDENTIAL_GLOBS, 2), 3),
    )
        .prop_map(|(mut doc, bindings)| {
            for (rule, credentials) in doc.network.iter_mut().zip(bindings) {
                rule.credentials = credentials;
            }
            doc
        })
}

/// Network actions of a smaller alphabet, each without a credential and
/// with every name of [`CREDENTIALS`]: small enough to enumerate per case.
pub fn credentialed_universe() -> &'static [Action] {
    static ACTIONS: OnceLock<Vec<Action>> = OnceLock::new();
    ACTIONS.get_or_init(|| {
        let mut out = Vec::new();
        let credentials =
            std::iter::once(None).chain(CREDENTIALS.iter().map(|c| Some(c.to_string())));
        for credential in credentials {
            for b in &BINARIES[..3] {
                for h in &HOSTS[..4] {
                    for &port in &ACTION_PORTS[..2] {
                        let action = |layer, method: &str, path: &str| {
                            Action::Network(NetworkAction {
                                binary: b.to_string(),
                                host: h.to_string(),
                                port,
                                layer,
                                method: method.to_string(),
                                path: path.to_string(),
                                credential: credential.clone(),
                                query: Default::default(),
                                upgrade: None,
                            })
                        };
                        out.push(action(Layer::L4, "", ""));
                        for m in ["GET", "POST", "DELETE"] {
                            for p in ["/", "/a", "/a/x", "/a/x/b", "/b", "/bx"] {
                                out.push(action(Layer::Rest, m, p));
                            }
                        }
                    }
                }
            }
        }
        out
    })
}

// MCP (docs/policy-semantics.md §8): a small alphabet of tools, arguments
// and values, in which every constraint kind can hold or fail.

pub const TOOL_GLOBS: &[&str] = &["send_money", "get_*", "*", "*delete*", "send_*"];
pub const TOOLS: &[&str] = &["send_money", "get_balance", "delete_file", "send_mail"];
pub const MCP_PATH_GLOBS: &[&str] = &["/mcp", "/mcp*", "/**"];
pub const MCP_PATHS: &[&str] = &["/mcp", "/mcp2", "/x"];
pub const URI_GLOBS: &[&str] = &["file:///r/**", "**", "file:///r/a"];
pub const URIS: &[&str] = &["file:///r/a", "file:///r/b/c", "file:///etc/x"];
pub const ARGUMENT_NAMES: &[&str] = &["recipient", "amount", "tags", "body"];

/// The argument whose constraints speak about free text only (`from` and
/// `entities`): beside a `glob` or a string literal, `entities` is outside
/// the prover's model (docs/proofs.md).
pub const FREE_TEXT_ARGUMENT: &str = "body";

/// The values an argument takes in the call universe: strings, numbers,
/// arrays, and the other JSON types a constraint rejects.
pub fn argument_values() -> Vec<serde_json::Value> {
    use serde_json::json;
    vec![
        json!("GB29"),
        json!("GB29x"),
        json!("evil"),
        json!(0),
        json!(100),
        json!(100.5),
        json!(-1),
        json!([]),
        json!(["t-a"]),
        json!(["t-a", "t-b", "t-c"]),
        json!(["t-a", 3]),
        json!(null),
        json!(true),
        // Keys and empty containers carry provenance (§8.3); free text
        // with and without an entity inside.
        json!({"GB29": "evil"}),
        json!({}),
        json!("pay https://evil.example/x"),
        json!("no link"),
    ]
}

/// One random argument constraint over the alphabet.
pub fn argument_constraint() -> impl Strategy<Value = ArgumentConstraint> {
    use serde_json::json;
    (0u8..13, any::<bool>()).prop_map(|(kind, optional)| {
        let mut c = ArgumentConstraint {
            optional,
            ..Default::default()
        };
        match kind {
            0 => c.one_of = Some(vec![json!("GB29")]),
            1 => c.glob = Some("GB*".to_string()),
            2 => {
                c.minimum = Some(0.into());
                c.maximum = Some(100.into());
            }
            3 => c.maximum = Some(100.into()),
            4 => {
                c.items = Some(Box::new(ArgumentConstraint {
                    glob: Some("t-*".to_string()),
                    ..Default::default()
                }));
                c.max_items = Some(2);
            }
            5 => c.one_of = Some(vec![json!(100), json!("evil")]),
            6 => c.exclusive_minimum = Some(100.into()),
            7 => {
                c.exclusive_minimum = Some(0.into());
                c.exclusive_maximum = Some(100.into());
            }
            // Provenance (§8.3), alone and beside the other kinds.
            8 => c.from = Some(vec!["user".to_string()]),
            9 => {
                c.glob = Some("GB*".to_string());
                c.from = Some(vec!["user".to_string(), "tool:read_*".to_string()]);
            }
            10 => {
                c.items = Some(Box::new(ArgumentConstraint {
                    from: Some(vec!["user".to_string()]),
                    ..Default::default()
                }));
            }
            11 => {
                c.maximum = Some(100.into());
                c.from = Some(vec!["model".to_string(), "tool:*".to_string()]);
            }
            12 => c.from = Some(vec!["user".to_string(), "empty".to_string()]),
            _ => {} // present, any value
        }
        c
    })
}

/// One random constraint on free text: `entities` (§8.3), alone or beside
/// `from`, or `from` alone.
pub fn free_text_constraint() -> impl Strategy<Value = ArgumentConstraint> {
    (0u8..5, any::<bool>()).prop_map(|(kind, optional)| {
        let entities = |from: &[&str]| {
            Some(EntitiesConstraint {
                from: from.iter().map(|s| s.to_string()).collect(),
            })
        };
        let mut c = ArgumentConstraint {
            optional,
            ..Default::default()
        };
        match kind {
            0 => c.entities = entities(&["user"]),
            1 => c.entities = entities(&["user", "tool:read_*"]),
            2 => {
                c.entities = entities(&["model", "tool:*"]);
                c.from = Some(vec!["user".to_string()]);
            }
            3 => c.from = Some(vec!["user".to_string(), "tool:*".to_string()]),
            _ => {}
        }
        c
    })
}

pub fn tool_entry() -> impl Strategy<Value = ToolEntry> {
    let names: Vec<&str> = ARGUMENT_NAMES
        .iter()
        .copied()
        .filter(|n| *n != FREE_TEXT_ARGUMENT)
        .collect();
    (
        select(TOOL_GLOBS),
        proptest::collection::btree_map(select(names), argument_constraint(), 0..=2),
        proptest::option::of(free_text_constraint()),
        proptest::option::of(any::<bool>()),
    )
        .prop_map(|(name, arguments, body, additional)| ToolEntry {
            name: name.to_string(),
            arguments: arguments
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .chain(body.map(|c| (FREE_TEXT_ARGUMENT.to_string(), c)))
                .collect(),
            additional_arguments: additional,
            mode: None,
        })
}

pub fn mcp_endpoint() -> impl Strategy<Value = Endpoint> {
    (
        select(HOST_GLOBS),
        subsequence(PORTS, 1..=2),
        select(MCP_PATH_GLOBS),
        proptest::collection::vec(tool_entry(), 0..=2),
        proptest::collection::vec(tool_entry(), 0..=1),
        subsequence(URI_GLOBS, 0..=1),
        proptest::collection::vec(tool_entry(), 0..=1),
    )
        .prop_map(
            |(host, ports, path, tools, deny_tools, resources, prompts)| Endpoint {
                host: host.to_string(),
                ports: ports.to_vec(),
                protocol: Protocol::Mcp,
                path: Some(path.to_string()),
                tools,
                deny_tools,
                resources: resources
                    .into_iter()
                    .map(|u| ResourceEntry { uri: u.to_string() })
                    .collect(),
                prompts,
                ..Default::default()
            },
        )
}

/// A random policy whose rules mix `l4`, `rest` and `mcp` endpoints, so that
/// raw authority and tool entries meet.
pub fn mcp_document() -> impl Strategy<Value = PolicyDocument> {
    let endpoint = prop_oneof![1 => endpoint(), 2 => mcp_endpoint()];
    proptest::collection::vec(
        (
            strings(BINARY_GLOBS, 2),
            proptest::collection::vec(endpoint, 1..=2),
        ),
        0..=3,
    )
    .prop_map(|rules| PolicyDocument {
        filesystem: Filesystem::default(),
        network: named_rules(rules),
    })
}

/// Where the values of a call were seen, in the differential tests:
/// every leaf from the user, from a tool `from` lists name by glob, from a
/// tool no list names, from a host, nowhere, and the first leaf from the
/// user with the others from a tool.
pub const SOURCE_CHOICES: &[&[&str]] = &[
    &["user"],
    &["tool:read_email"],
    &["tool:send_x"],
    &["host:h.io"],
    &[],
    &["user", "tool:read_email"],
];

/// `args` stating `sources` for each string and number in them; with
/// `mixed`, the first leaf is the user's and every other one the tool
/// `read_email`'s.
pub fn stated_sources(
    args: &serde_json::Map<String, serde_json::Value>,
    sources: &[&str],
    mixed: bool,
) -> crate::provenance::StatedSources {
    use crate::provenance::{Source, StatedSources, find_leaf};
    // Each leaf's pointer, and its entities' (§8.3), which are seen
    // wherever their string is: they share its sources.
    let mut leaves: Vec<(String, Vec<String>)> = Vec::new();
    find_leaf::<()>(args, &mut |at, _, leaf| {
        let entities = leaf
            .as_str()
            .map_or(0, |t| crate::provenance::entities(t).len());
        leaves.push((
            at.pointer(),
            (0..entities)
                .map(|i| crate::provenance::Position::Entity(at, i).pointer())
                .collect(),
        ));
        None
    });
    let parse = |list: &[&str]| {
        list.iter()
            .filter_map(|s| Source::parse(s).ok())
            .collect::<std::collections::BTreeSet<_>>()
    };
    StatedSources(
        leaves
            .into_iter()
            .enumerate()
            .flat_map(|(i, (pointer, entities))| {
                let set = match (mixed, i) {
                    (false, _) => parse(sources),
                    (true, 0) => parse(&["user"]),
                    (true, _) => parse(&["tool:read_email"]),
                };
                std::iter::once(pointer)
                    .chain(entities)
                    .map(move |p| (p, set.clone()))
            })
            .collect(),
    )
}

/// MCP calls over the alphabet: every tool with no arguments, with each
/// argument alone at each value, with two arguments, and with an extra
/// argument; every prompt and resource; at a fixed binary, host and port
/// chosen by the caller (the network part is covered by [`universe`]).
pub fn mcp_calls(binary: &str, host: &str, port: u16) -> Vec<McpAction> {
    let call = |path: &str, kind, name: &str, args: serde_json::Map<String, serde_json::Value>| {
        McpAction {
            binary: binary.to_string(),
            host: host.to_string(),
            port,
            path: path.to_string(),
            kind,
            name: name.to_string(),
            args,
            sources: None,
            credential: None,
        }
    };
    let values = argument_values();
    let mut out = Vec::new();
    for path in MCP_PATHS {
        for kind in [McpKind::Tool, McpKind::Prompt] {
            for tool in TOOLS {
                out.push(call(path, kind, tool, serde_json::Map::new()));
                for arg in ARGUMENT_NAMES {
                    for v in &values {
                        let mut args = serde_json::Map::new();
                        args.insert(arg.to_string(), v.clone());
                        out.push(call(path, kind, tool, args.clone()));
                        // The same with the recipient fixed, and with an extra argument.
                        args.insert("recipient".to_string(), serde_json::json!("GB29"));
                        out.push(call(path, kind, tool, args.clone()));
                        args.insert("memo".to_string(), serde_json::json!("x"));
                        out.push(call(path, kind, tool, args));
                    }
                }
            }
        }
        for uri in URIS {
            out.push(call(path, McpKind::Resource, uri, serde_json::Map::new()));
        }
    }
    // The same tool calls with stated sources (§8.3), on one path.
    let sourced: Vec<McpAction> = out
        .iter()
        .filter(|t| t.kind == McpKind::Tool && t.path == MCP_PATHS[0] && !t.args.is_empty())
        .flat_map(|t| {
            let mixed = std::iter::once((&[][..], true));
            SOURCE_CHOICES
                .iter()
                .map(|s| (*s, false))
                .chain(mixed)
                .map(|(sources, mixed)| McpAction {
                    sources: Some(Box::new(stated_sources(&t.args, sources, mixed))),
                    ..t.clone()
                })
        })
        .collect();
    out.extend(sourced);
    out
}

// Query matchers (docs/policy-semantics.md §10.1): a few parameter names and
// value globs, and requests carrying every combination of them.

pub const QUERY_NAMES: &[&str] = &["q", "page"];
pub const VALUE_GLOBS: &[&str] = &["*", "a*", "ab", "", "*b", "a*b"];
/// Values the enumerated requests carry (`None`: the parameter is absent).
pub const QUERY_VALUES: &[Option<&str>] = &[
    None,
    Some(""),
    Some("a"),
    Some("ab"),
    Some("b"),
    Some("axb"),
];

/// A random constraint on one parameter.
pub fn query_matcher() -> impl Strategy<Value = QueryMatcher> {
    (0u8..4, subsequence(VALUE_GLOBS, 1..=2), any::<bool>()).prop_map(|(shape, globs, optional)| {
        match shape {
            0 => QueryMatcher::Glob(globs[0].to_string()),
            1 => QueryMatcher::Spec(QuerySpec {
                glob: Some(globs[0].to_string()),
                optional,
                ..QuerySpec::default()
            }),
            2 => QueryMatcher::Spec(QuerySpec {
                any: Some(globs.iter().map(|g| g.to_string()).collect()),
                optional,
                ..QuerySpec::default()
            }),
            _ => QueryMatcher::Spec(QuerySpec {
                absent: true,
                ..QuerySpec::default()
            }),
        }
    })
}

/// An entry that may constrain query parameters.
pub fn query_entry() -> impl Strategy<Value = RuleEntry> {
    (
        subsequence(&["GET", "POST", "*"][..], 1..=2),
        proptest::option::weighted(0.3, select(&["/a", "/a/*", "**"][..])),
        proptest::collection::btree_map(select(QUERY_NAMES), query_matcher(), 0..=2),
    )
        .prop_map(|(methods, path, query)| RuleEntry {
            methods: methods.into_iter().map(str::to_string).collect(),
            path: path.map(str::to_string),
            query: query.into_iter().map(|(n, m)| (n.to_string(), m)).collect(),
            subprotocols: None,
            origins: None,
        })
}

/// Up to three rules of `gh` (or any binary), each with one or two
/// endpoints drawn from `endpoint`.
fn gh_document(endpoint: impl Strategy<Value = Endpoint>) -> impl Strategy<Value = PolicyDocument> {
    proptest::collection::vec(
        (
            strings(&["/usr/bin/gh"], 1),
            proptest::collection::vec(endpoint, 1..=2),
        ),
        0..=3,
    )
    .prop_map(|rules| PolicyDocument {
        network: named_rules(rules),
        ..PolicyDocument::default()
    })
}

/// A random policy whose REST entries may constrain query parameters.
pub fn query_document() -> impl Strategy<Value = PolicyDocument> {
    let endpoint = (
        select(&["a.io", "*.a.io"][..]),
        0u8..5,
        proptest::collection::vec(query_entry(), 1..=2),
        proptest::collection::vec(query_entry(), 0..=1),
    )
        .prop_map(|(host, shape, rules, deny_rules)| {
            let mut e = Endpoint {
                host: host.to_string(),
                ports: vec![443],
                ..Default::default()
            };
            if shape == 0 {
                return e; // l4: every query
            }
            e.protocol = Protocol::Rest;
            if shape == 1 {
                e.access = Some(AccessLevel::ReadOnly);
            } else {
                e.rules = rules;
            }
            e.deny_rules = deny_rules;
            e
        });
    gh_document(endpoint)
}

/// Every request of a small alphabet with every combination of the query
/// values, and the bare connections.
pub fn query_universe() -> &'static [Action] {
    static ACTIONS: OnceLock<Vec<Action>> = OnceLock::new();
    ACTIONS.get_or_init(|| {
        let mut out = Vec::new();
        for b in ["/usr/bin/gh", "/x"] {
            for h in ["a.io", "b.a.io"] {
                let action = NetworkAction {
                    binary: b.to_string(),
                    host: h.to_string(),
                    port: 443,
                    layer: Layer::L4,
                    method: String::new(),
                    path: String::new(),
                    credential: None,
                    query: Default::default(),
                    upgrade: None,
                };
                out.push(Action::Network(action.clone()));
                for m in ["GET", "POST", "DELETE"] {
                    for p in ["/a", "/a/x", "/b"] {
                        for q in QUERY_VALUES {
                            for page in QUERY_VALUES {
                                let mut query = crate::query::Query::new();
                                if let Some(q) = q {
                                    query.insert("q".into(), q.to_string());
                                }
                                if let Some(page) = page {
                                    query.insert("page".into(), page.to_string());
                                }
                                out.push(Action::Network(NetworkAction {
                                    layer: Layer::Rest,
                                    method: m.to_string(),
                                    path: p.to_string(),
                                    query,
                                    upgrade: None,
                                    ..action.clone()
                                }));
                            }
                        }
                    }
                }
            }
        }
        out
    })
}

// WebSocket upgrades (docs/policy-semantics.md §10.2): entries over paths,
// a query parameter, subprotocols and origins, beside REST and l4 grants
// on the same hosts, and upgrades with every combination of them.

pub const SUBPROTOCOLS: &[&str] = &["chat", "graphql-ws", "*"];
pub const ORIGIN_GLOBS: &[&str] = &["https://app.a.io", "https://*.a.io", "*"];
/// Offered subprotocols and origins of the enumerated upgrades.
pub const OFFERED: &[Option<&str>] = &[None, Some("chat"), Some("v2")];
pub const ORIGINS: &[Option<&str>] = &[
    None,
    Some("https://app.a.io"),
    Some("https://x.a.io"),
    Some("null"),
];

/// A random websocket entry.
pub fn websocket_entry() -> impl Strategy<Value = RuleEntry> {
    (
        proptest::option::weighted(0.4, select(&["/ws", "/ws/*", "**"][..])),
        proptest::collection::btree_map(select(&["q"][..]), query_matcher(), 0..=1),
        proptest::option::weighted(0.5, subsequence(SUBPROTOCOLS, 1..=2)),
        proptest::option::weighted(0.5, subsequence(ORIGIN_GLOBS, 1..=2)),
    )
        .prop_map(|(path, query, subprotocols, origins)| RuleEntry {
            methods: Vec::new(),
            path: path.map(str::to_string),
            query: query.into_iter().map(|(n, m)| (n.to_string(), m)).collect(),
            subprotocols: subprotocols.map(|v| v.into_iter().map(str::to_string).collect()),
            origins: origins.map(|v| v.into_iter().map(str::to_string).collect()),
        })
}

/// A random policy with websocket endpoints, REST endpoints (which never
/// allow an upgrade) and l4 endpoints (which allow every one).
pub fn websocket_document() -> impl Strategy<Value = PolicyDocument> {
    let endpoint = (
        select(&["a.io", "*.a.io"][..]),
        0u8..4,
        proptest::collection::vec(websocket_entry(), 1..=2),
        proptest::collection::vec(websocket_entry(), 0..=1),
        proptest::option::weighted(0.2, select(&["/ws/**", "**"][..])),
    )
        .prop_map(|(host, shape, rules, deny_rules, scope)| {
            let mut e = Endpoint {
                host: host.to_string(),
                ports: vec![443],
                ..Default::default()
            };
            match shape {
                0 => {}
                1 => {
                    e.protocol = Protocol::Rest;
                    e.access = Some(AccessLevel::Full);
                }
                _ => {
                    e.protocol = Protocol::Websocket;
                    e.path = scope.map(str::to_string);
                    e.rules = rules;
                    e.deny_rules = deny_rules;
                }
            }
            e
        });
    gh_document(endpoint)
}

/// Upgrades of a small alphabet with every combination of path, query,
/// subprotocol and origin, plus a request and a bare connection per host.
pub fn websocket_universe() -> &'static [Action] {
    static ACTIONS: OnceLock<Vec<Action>> = OnceLock::new();
    ACTIONS.get_or_init(|| {
        let mut out = Vec::new();
        for b in ["/usr/bin/gh", "/x"] {
            for h in ["a.io", "b.a.io"] {
                let connection = NetworkAction {
                    binary: b.to_string(),
                    host: h.to_string(),
                    port: 443,
                    layer: Layer::L4,
                    method: String::new(),
                    path: String::new(),
                    credential: None,
                    query: Default::default(),
                    upgrade: None,
                };
                out.push(Action::Network(connection.clone()));
                out.push(Action::Network(NetworkAction {
                    layer: Layer::Rest,
                    method: "GET".into(),
                    path: "/ws".into(),
                    ..connection.clone()
                }));
                for p in ["/ws", "/ws/x", "/b"] {
                    for q in [None, Some("a"), Some("x")] {
                        for subprotocol in OFFERED {
                            for origin in ORIGINS {
                                let mut query = crate::query::Query::new();
                                if let Some(q) = q {
                                    query.insert("q".into(), q.to_string());
                                }
                                out.push(Action::Network(NetworkAction {
                                    layer: Layer::Websocket,
                                    method: "GET".into(),
                                    path: p.to_string(),
                                    query,
                                    upgrade: Some(Upgrade {
                                        subprotocol: subprotocol.map(str::to_string),
                                        origin: origin.map(str::to_string),
                                    }),
                                    ..connection.clone()
                                }));
                            }
                        }
                    }
                }
            }
        }
        out
    })
}
