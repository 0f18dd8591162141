//! Random policies and the complete action space over a small alphabet, for
//! property tests that compare an implementation with the matcher (the
//! prover in `tests/`, the proxy in `proxy/`). Enabled by the `testing`
//! feature; never part of a release build.

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::sync::OnceLock;

use proptest::prelude::*;
use proptest::sample::{select, subsequence};

use crate::action::{Access, Action, FilesystemAction, Layer, NetworkAction};
use crate::model::{
    AccessLevel, Endpoint, Filesystem, NetworkRule, PolicyDocument, Protocol, RuleEntry,
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
            network: rules
                .into_iter()
                .enumerate()
                .map(|(i, (binaries, endpoints))| NetworkRule {
                    name: format!("r{i}"),
                    binaries,
                    endpoints,
                    review: None,
                })
                .collect(),
        })
}
