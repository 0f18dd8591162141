//! The crate graph of docs/design.md §2, checked instead of promised: which
//! workspace crates each crate may build on, that Z3 is linked by the prover
//! alone, and that nothing below the runtime reaches the Kubernetes client,
//! an HTTP stack or the network (the data plane not even the API types).
//! Read from `cargo metadata`, so a new dependency that breaks a boundary
//! fails here, naming the path that brings it in. Also the one value two
//! crates keep apart because neither may depend on the other.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::process::Command;

use serde_json::Value;

/// The workspace crates each crate may depend on (normal dependencies).
const ALLOWED: &[(&str, &[&str])] = &[
    ("agentgate-policy", &[]),
    // Runtime judgement reads agents' messages over the language, never
    // the other way round.
    ("agentgate-judgement", &["agentgate-policy"]),
    ("agentgate-prover", &["agentgate-policy"]),
    ("agentgate-trifecta", &["agentgate-policy"]),
    // The API owns its wire types: no prover (so no Z3), no scanners.
    ("agentgate-api", &["agentgate-policy"]),
    (
        "agentgate-governance",
        &[
            "agentgate-api",
            "agentgate-judgement",
            "agentgate-policy",
            "agentgate-prover",
            "agentgate-trifecta",
        ],
    ),
    (
        "agentgate-proxy",
        &["agentgate-judgement", "agentgate-policy"],
    ),
    (
        "agentgate-sandbox",
        &["agentgate-judgement", "agentgate-policy"],
    ),
    // The operator's roles: each over the shared crate and the core, none
    // naming another; only the runtime crate wires them (docs/architecture.md).
    (
        "agentgate-k8s",
        &[
            "agentgate-api",
            "agentgate-governance",
            "agentgate-judgement",
        ],
    ),
    (
        "agentgate-controller",
        &[
            "agentgate-api",
            "agentgate-governance",
            "agentgate-judgement",
            "agentgate-k8s",
            "agentgate-policy",
            "agentgate-prover",
            "agentgate-trifecta",
        ],
    ),
    (
        "agentgate-webhook",
        &[
            "agentgate-api",
            "agentgate-governance",
            "agentgate-judgement",
            "agentgate-k8s",
            "agentgate-policy",
            "agentgate-prover",
            "agentgate-trifecta",
        ],
    ),
    (
        "agentgate-cli",
        &[
            "agentgate-api",
            "agentgate-governance",
            "agentgate-policy",
            "agentgate-prover",
            "agentgate-trifecta",
        ],
    ),
    (
        "agentgate",
        &[
            "agentgate-cli",
            "agentgate-controller",
            "agentgate-k8s",
            "agentgate-prover",
            "agentgate-webhook",
        ],
    ),
];

/// Crates below the runtime: pure logic and types.
const CORE: &[&str] = &[
    "agentgate-policy",
    "agentgate-judgement",
    "agentgate-prover",
    "agentgate-trifecta",
    "agentgate-api",
    "agentgate-governance",
];

/// What no core crate may reach, directly or through another crate: the
/// Kubernetes client and runtime, HTTP servers and clients, TLS stacks.
const RUNTIME_ONLY: &[&str] = &[
    "kube",
    "kube-client",
    "kube-runtime",
    "axum",
    "hyper",
    "hyper-util",
    "tower",
    "rustls",
    "tokio-rustls",
    "hickory-resolver",
    "reqwest",
];

struct Graph {
    /// Package id → name.
    names: BTreeMap<String, String>,
    /// Package id → ids of its normal (non-dev, non-build) dependencies.
    normal: BTreeMap<String, Vec<String>>,
    /// Workspace member ids.
    members: Vec<String>,
}

/// `cargo metadata` of the workspace with `extra` options, as JSON.
// A helper of the tests below: a panic here is a failed test.
#[allow(clippy::expect_used)]
fn cargo_metadata(extra: &[&str]) -> Value {
    let out = Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--locked", "--offline"])
        .args(extra)
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("cargo metadata prints JSON")
}

// A helper of the tests below: a panic here is a failed test.
#[allow(clippy::expect_used)]
fn metadata() -> Graph {
    // Linux only: the crates other targets would pull in need not be in
    // the local registry cache, and agentgate builds for Linux alone.
    let meta = cargo_metadata(&["--filter-platform", "x86_64-unknown-linux-gnu"]);
    let str_of = |v: &Value| v.as_str().expect("a string").to_string();
    let names = meta["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .map(|p| (str_of(&p["id"]), str_of(&p["name"])))
        .collect();
    let members = meta["workspace_members"]
        .as_array()
        .expect("workspace_members")
        .iter()
        .map(str_of)
        .collect();
    let mut normal = BTreeMap::new();
    for node in meta["resolve"]["nodes"].as_array().expect("resolve.nodes") {
        let deps = node["deps"]
            .as_array()
            .expect("deps")
            .iter()
            .filter(|d| {
                d["dep_kinds"]
                    .as_array()
                    .is_some_and(|kinds| kinds.iter().any(|k| k["kind"].is_null()))
            })
            .map(|d| str_of(&d["pkg"]))
            .collect();
        normal.insert(str_of(&node["id"]), deps);
    }
    Graph {
        names,
        normal,
        members,
    }
}

impl Graph {
    fn id(&self, name: &str) -> String {
        self.members
            .iter()
            .find(|id| self.names[*id] == name)
            .unwrap_or_else(|| panic!("{name} is not a workspace member"))
            .clone()
    }

    fn direct(&self, id: &str) -> BTreeSet<String> {
        self.normal[id]
            .iter()
            .map(|d| self.names[d].clone())
            .collect()
    }

    /// Every crate `id` reaches through normal dependencies, each with the
    /// path that brings it in.
    fn reach(&self, id: &str) -> BTreeMap<String, Vec<String>> {
        let mut paths: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut queue = VecDeque::from([(id.to_string(), vec![self.names[id].clone()])]);
        let mut seen = BTreeSet::from([id.to_string()]);
        while let Some((at, path)) = queue.pop_front() {
            for dep in &self.normal[&at] {
                if seen.insert(dep.clone()) {
                    let mut next = path.clone();
                    next.push(self.names[dep].clone());
                    paths.insert(self.names[dep].clone(), next.clone());
                    queue.push_back((dep.clone(), next));
                }
            }
        }
        paths
    }
}

#[test]
fn every_crate_builds_only_on_the_crates_below_it() {
    let graph = metadata();
    let workspace: BTreeSet<String> = graph
        .members
        .iter()
        .map(|id| graph.names[id].clone())
        .collect();
    let mut problems = Vec::new();
    for (name, allowed) in ALLOWED {
        let id = graph.id(name);
        let allowed: BTreeSet<String> = allowed.iter().map(|s| s.to_string()).collect();
        for dep in graph.direct(&id).intersection(&workspace) {
            if !allowed.contains(dep) {
                problems.push(format!("{name} depends on {dep}"));
            }
        }
    }
    assert!(problems.is_empty(), "layering broken: {problems:?}");
}

#[test]
fn z3_is_linked_by_the_prover_alone() {
    let graph = metadata();
    let linking: Vec<String> = graph
        .members
        .iter()
        .filter(|id| graph.direct(id).contains("z3"))
        .map(|id| graph.names[id].clone())
        .collect();
    assert_eq!(linking, ["agentgate-prover"]);
    for data_plane in ["agentgate-proxy", "agentgate-sandbox"] {
        let reach = graph.reach(&graph.id(data_plane));
        for forbidden in ["z3", "z3-sys", "kube", "kube-core", "k8s-openapi"] {
            assert!(
                !reach.contains_key(forbidden),
                "{data_plane} reaches {forbidden}: {:?}",
                reach[forbidden]
            );
        }
    }
}

#[test]
fn nothing_below_the_runtime_reaches_a_client_or_the_network() {
    let graph = metadata();
    let mut problems = Vec::new();
    for name in CORE {
        let reach = graph.reach(&graph.id(name));
        for forbidden in RUNTIME_ONLY {
            if let Some(path) = reach.get(*forbidden) {
                problems.push(path.join(" → "));
            }
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn the_reach_walk_reports_the_path_that_brings_a_crate_in() {
    // The walk itself, on a graph small enough to check by hand, so the
    // tests above cannot pass by finding nothing.
    let ids = ["a", "b", "c", "d"];
    let graph = Graph {
        names: ids.iter().map(|i| (i.to_string(), i.to_string())).collect(),
        normal: BTreeMap::from([
            ("a".into(), vec!["b".into()]),
            ("b".into(), vec!["c".into()]),
            ("c".into(), vec![]),
            ("d".into(), vec!["a".into()]),
        ]),
        members: ids.iter().map(|i| i.to_string()).collect(),
    };
    let reach = graph.reach("a");
    assert_eq!(reach["c"], ["a", "b", "c"]);
    assert!(!reach.contains_key("d"));
    assert_eq!(graph.direct("d"), BTreeSet::from(["a".to_string()]));
}

#[test]
fn the_pod_runs_the_proxy_with_the_allocator_options_its_benchmark_measures() {
    // The governance crate builds the Pod; the proxy crate (which governance
    // may not depend on) names the options its benchmark runs it with.
    use agentgate_governance::sandbox_pod::{DataPlane, proxy_container};
    let proxy = proxy_container(&DataPlane {
        image: "agentgate:test".into(),
        pull_policy: None,
        approvals: None,
        policy_stream: None,
        hold_timeout_seconds: 120,
    });
    let env: Vec<(String, Option<String>)> = proxy
        .env
        .unwrap_or_default()
        .into_iter()
        .map(|v| (v.name, v.value))
        .collect();
    assert_eq!(
        env,
        [(
            "MALLOC_CONF".to_string(),
            Some(agentgate_proxy::idle::MALLOC_CONF.to_string())
        )]
    );
}

/// make test runs the test targets in two lanes named from the files in
/// each crate's `tests/` (Makefile, `E2E_SUITES` and `OTHER_SUITES`): a
/// test target anywhere else would be built and never run.
#[test]
#[allow(clippy::expect_used)]
fn every_test_target_is_a_file_in_its_crates_tests_directory() {
    let meta = cargo_metadata(&["--no-deps"]);
    let mut elsewhere = Vec::new();
    for package in meta["packages"].as_array().expect("packages") {
        let manifest = package["manifest_path"].as_str().expect("manifest_path");
        let root = std::path::Path::new(manifest)
            .parent()
            .expect("a directory");
        for target in package["targets"].as_array().expect("targets") {
            if target["kind"]
                .as_array()
                .expect("kind")
                .iter()
                .any(|k| k == "test")
            {
                let name = target["name"].as_str().expect("name");
                let path = target["src_path"].as_str().expect("src_path");
                if std::path::Path::new(path) != root.join("tests").join(format!("{name}.rs")) {
                    elsewhere.push(format!("{name}: {path}"));
                }
            }
        }
    }
    assert!(
        elsewhere.is_empty(),
        "test targets make test would not run: {elsewhere:?}"
    );
}

/// The modules of a crate (its library's top-level modules) each module
/// names through `crate::`, outside comments and its `#[cfg(test)]` tail.
// A helper of the test below: a panic here is a failed test.
#[allow(clippy::expect_used)]
fn module_references(src: &std::path::Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    let mut dirs = vec![src.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("a source directory") {
            let path = entry.expect("an entry").path();
            if path.is_dir() {
                // Binaries are crates of their own.
                if path.file_name().is_some_and(|n| n != "bin") {
                    dirs.push(path);
                }
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    let mut references: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let relative = file.strip_prefix(src).expect("under src");
        let Some(top) = relative.iter().next().and_then(|c| c.to_str()) else {
            continue;
        };
        let top = top.trim_end_matches(".rs").to_string();
        if top == "lib" || top == "main" {
            continue;
        }
        let text = std::fs::read_to_string(&file).expect("a source file");
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        let named = references.entry(top.clone()).or_default();
        for line in code.lines().filter(|l| !l.trim_start().starts_with("//")) {
            for (at, _) in line.match_indices("crate::") {
                let rest = &line[at + "crate::".len()..];
                let heads: Vec<&str> = match rest.strip_prefix('{') {
                    // `crate::{a, b::c}`: the first segment of each path.
                    Some(group) => group
                        .split(['}', ','])
                        .map(|p| p.trim().split("::").next().unwrap_or_default())
                        .collect(),
                    None => vec![rest],
                };
                for head in heads {
                    let ident: String = head
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect();
                    if !ident.is_empty() && ident != top {
                        named.insert(ident);
                    }
                }
            }
        }
    }
    let modules: BTreeSet<String> = references.keys().cloned().collect();
    for named in references.values_mut() {
        named.retain(|m| modules.contains(m));
    }
    references
}

/// A cycle among `graph`'s nodes, as the path that closes it.
fn a_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut cycle = path[at..].to_vec();
            cycle.push(node.to_string());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|node| visit(node, graph, &mut Vec::new(), &mut done))
}

/// Inside every crate the modules form layers: no module reaches back to
/// one that reaches it (docs/architecture.md), so each can be read, tested
/// and moved with what is below it.
#[test]
#[allow(clippy::expect_used)]
fn no_crate_has_a_module_cycle() {
    let meta = cargo_metadata(&["--no-deps"]);
    let mut cycles = Vec::new();
    let mut crates = 0;
    for package in meta["packages"].as_array().expect("packages") {
        for target in package["targets"].as_array().expect("targets") {
            if !target["kind"]
                .as_array()
                .expect("kind")
                .iter()
                .any(|k| k == "lib")
            {
                continue;
            }
            let lib = std::path::Path::new(target["src_path"].as_str().expect("src_path"));
            let src = lib.parent().expect("a directory");
            crates += 1;
            if let Some(cycle) = a_cycle(&module_references(src)) {
                cycles.push(format!("{}: {}", package["name"], cycle.join(" → ")));
            }
        }
    }
    assert!(crates >= 8, "only {crates} libraries found");
    assert!(cycles.is_empty(), "module cycles: {cycles:#?}");
}

/// The cycle finder finds a cycle where there is one and none in layers.
#[test]
fn the_cycle_finder_names_the_cycle() {
    let graph = |edges: &[(&str, &str)]| {
        let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (from, to) in edges {
            graph
                .entry((*from).to_string())
                .or_default()
                .insert((*to).to_string());
            graph.entry((*to).to_string()).or_default();
        }
        graph
    };
    assert_eq!(
        a_cycle(&graph(&[("a", "b"), ("b", "c"), ("c", "a")])),
        Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
    );
    assert_eq!(a_cycle(&graph(&[("a", "b"), ("b", "c"), ("a", "c")])), None);
}
