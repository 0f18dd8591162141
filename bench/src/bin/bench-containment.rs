//! `make bench`: containment latency of the prover on generated policy pairs,
//! side by side with the naive string/regex baseline, plus a drift test.
//!
//! This is a program that prints numbers (copied into docs/benchmarks.md),
//! not a test; it still exits non-zero when the prover's answer disagrees
//! with the generator's expectation or is inconclusive.
//!
//! Inputs are generated deterministically (splitmix64, fixed seed): for each
//! size N, pairs (candidate, maximum) of N network rules each, half where the
//! maximum is a strict widening of the candidate (Within) and half where one
//! rule of the candidate, at a random position, is widened by one change so
//! that it escapes the maximum (Exceeds).
//!
//! The drift test runs 3,000 consecutive N=10 checks twice: cycling 10 fixed
//! pairs, and on a freshly generated pair each time. Minor page faults are
//! counted per check: creating the fresh Z3 contexts allocates about 16 MiB,
//! and in some glibc heap states each check faults all of it in again
//! (docs/benchmarks.md).
//!
//! Knobs (environment):
//! - `BENCH_QUICK=1`: fast smoke run (N up to 100, fewer repetitions).
//! - `AGENTGATE_BENCH_SMOKE=1` (`make bench-smoke`, every benchmark honours
//!   it): smaller still, a few seconds even in a debug build (N of 1 and
//!   10, 2 pairs, 1 repetition, 10 drift checks each way); every answer is
//!   still checked, the numbers are not results. The knobs below override it.
//! - `BENCH_SIZES=1,10,100,1000`: the sizes N.
//! - `BENCH_PAIRS=10`: pairs per N (half within, half exceeding).
//! - `BENCH_REPS=30,30,20,5`: repetitions per pair, one value or one per N.
//! - `BENCH_NAIVE_TIMEOUT_MS=10000`: per-check timeout of the naive baseline.
//! - `BENCH_NAIVE_SAMPLES=4,4,2,1`: pairs per N given to the naive baseline.
//! - `BENCH_DRIFT_CHECKS=3000`: checks per drift variant (0 skips the drift test).
//! - `BENCH_DRIFT_CHURN_SIZES=10`: sizes the churn variant cycles through.
//! - `BENCH_SEED`: the PRNG seed (each pair has its own stream derived from
//!   the seed, N and the pair's index, so a pair is reproducible alone).
//! - `BENCH_DUMP_DIR=DIR`: also write every generated pair's YAML there.
//! - `BENCH_SOURCE`: what to print as the source commit (default: `git rev-parse`).
//! - `BENCH_SURFACES=1`: one rule in ten is a search API whose entries
//!   constrain query parameters, one in ten a realtime API granted as
//!   WebSocket upgrades by path, query, subprotocol and origin
//!   (docs/policy-semantics.md §10), widened by two more mutations (a query
//!   constraint dropped, any subprotocol offered); `make bench-surfaces`
//!   runs the mix beside the plain one. The naive baseline reads neither,
//!   so give it `BENCH_NAIVE_SAMPLES=0` there.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::process::ExitCode;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use agentgate_bench::percentile;
use agentgate_policy::compile::{CompiledPolicy, Limits, Role, compile};
use agentgate_policy::load::load_document;
use agentgate_policy::matcher::allows;
use agentgate_prover::naive::{NaiveOutcome, naive_containment};
use agentgate_prover::{Outcome, Prover, ProverOptions};

/// Timeout of the real prover per check.
const PROVER_TIMEOUT: Duration = Duration::from_secs(10);
/// Targets for the real encoding (p99, milliseconds) by N.
const TARGETS: &[(usize, f64)] = &[(100, 10.0), (1000, 100.0)];

// ---------------------------------------------------------------------------
// Deterministic PRNG

/// splitmix64: small, fast, good enough for input generation.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0).
    fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    fn coin(&mut self) -> bool {
        self.next_u64() & 1 == 1
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }
}

// ---------------------------------------------------------------------------
// Policy generation

/// The shapes a generated rule takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// REST, `*.svc{i}.example.com`, allow rules with `/v1/org{i}/*/items/**`,
    /// deny rules; binaries `/usr/bin/*` or exact.
    Svc,
    /// REST, exact host `api{i}.example.com`, path scope `/repos/acme{i}/**`,
    /// `access: read-only`, sometimes a deny rule; exact binaries.
    Api,
    /// REST, `**.corp{i}.example.net`, any binary, deny rules; the maximum
    /// allows `*` methods (or an explicit list).
    Corp,
    /// L4, `db{i}.internal.example.org:5432`, exact binary.
    Db,
    /// REST, exact host `search{i}.example.com`, `GET /v1/search` with query
    /// constraints (`q` present, `sort` one of two, `debug` absent), a deny
    /// entry on an `admin` parameter (`BENCH_SURFACES=1` only).
    Search,
    /// WebSocket, exact host `stream{i}.example.com`, upgrades of
    /// `/v1/stream` with a `model` parameter, subprotocol `realtime` and an
    /// exact origin; a deny entry on `debug` (`BENCH_SURFACES=1` only).
    Stream,
}

/// Whether the mix has the surfaces of docs/policy-semantics.md §10.
fn surfaces() -> bool {
    static SURFACES: OnceLock<bool> = OnceLock::new();
    *SURFACES.get_or_init(|| std::env::var("BENCH_SURFACES").is_ok_and(|v| v == "1"))
}

/// The single widening applied to one candidate rule in an exceeding pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mutation {
    /// One more method.
    Method,
    /// A wider path glob.
    Path,
    /// A wider host glob.
    Host,
    /// One more port.
    Port,
    /// A wider binary glob.
    Binary,
    /// The deny rule removed.
    DenyRemoval,
    /// The REST endpoint turned into raw L4.
    ToL4,
    /// A query constraint dropped (`debug` may be sent).
    Query,
    /// Any subprotocol offered (`*`) where one was listed.
    Subprotocol,
}

/// One generated rule: its index (which makes its hosts and paths unique)
/// and the random choices that vary its text.
#[derive(Debug, Clone, Copy)]
struct RuleSpec {
    i: usize,
    shape: Shape,
    /// Svc: API version segment.
    version: &'static str,
    /// Svc: the candidate's port (443 or 8443).
    port: u16,
    /// Svc: `/usr/bin/*` (true) or `/usr/bin/curl` (false).
    /// Corp: maximum methods `*` (true) or an explicit list (false).
    flag: bool,
    /// Api/Svc: whether the candidate carries a deny rule (mirrored in the maximum).
    deny: bool,
}

impl RuleSpec {
    fn random(i: usize, rng: &mut Rng) -> RuleSpec {
        let pick = rng.below(20);
        let shape = if surfaces() && pick >= 18 {
            Shape::Stream
        } else if surfaces() && pick >= 16 {
            Shape::Search
        } else {
            match pick {
                0..=6 => Shape::Svc,
                7..=12 => Shape::Api,
                13..=16 => Shape::Corp,
                _ => Shape::Db,
            }
        };
        RuleSpec {
            i,
            shape,
            version: rng.pick(&["v1", "v2"]),
            port: rng.pick(&[443, 8443]),
            flag: rng.coin(),
            deny: rng.coin(),
        }
    }

    /// The mutations that make this rule escape its maximum.
    fn mutations(&self) -> Vec<Mutation> {
        use Mutation::*;
        match self.shape {
            Shape::Svc if self.deny => vec![Method, Path, Host, Port, Binary, DenyRemoval, ToL4],
            Shape::Svc => vec![Method, Path, Host, Port, Binary, ToL4],
            Shape::Api if self.deny => vec![Method, Path, Host, Port, Binary, DenyRemoval, ToL4],
            Shape::Api => vec![Method, Path, Host, Port, Binary, ToL4],
            Shape::Corp if self.flag => vec![Path, Host, Port, DenyRemoval, ToL4],
            Shape::Corp => vec![Method, Path, Host, Port, DenyRemoval, ToL4],
            Shape::Db => vec![Host, Port, Binary],
            Shape::Search if self.deny => {
                vec![Method, Path, Host, Port, Binary, DenyRemoval, ToL4, Query]
            }
            Shape::Search => vec![Method, Path, Host, Port, Binary, ToL4, Query],
            Shape::Stream if self.deny => {
                vec![Path, Host, Port, Binary, DenyRemoval, ToL4, Subprotocol]
            }
            Shape::Stream => vec![Path, Host, Port, Binary, ToL4, Subprotocol],
        }
    }
}

fn list(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| format!("\"{s}\"")).collect();
    format!("[{}]", quoted.join(", "))
}

fn strs(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

/// An allow or deny entry as YAML lines at the given indent.
fn entry(out: &mut String, indent: &str, methods: &[&str], path: &str) {
    let _ = writeln!(out, "{indent}- methods: {}", list(&strs(methods)));
    let _ = writeln!(out, "{indent}  path: \"{path}\"");
}

/// A rule's name, one binary glob and its endpoint's host and ports.
fn rule_head(out: &mut String, name: &str, binary: &str, host: &str, ports: &str) {
    let _ = writeln!(out, "  - name: {name}");
    let _ = writeln!(out, "    binaries: [\"{binary}\"]");
    let _ = writeln!(out, "    endpoints:");
    let _ = writeln!(out, "      - host: \"{host}\"");
    let _ = writeln!(out, "        ports: {ports}");
}

/// The candidate's text of a rule, with `mutation` applied if any.
fn candidate_rule(out: &mut String, r: &RuleSpec, mutation: Option<Mutation>) {
    let i = r.i;
    let m = |x: Mutation| mutation == Some(x);
    let l4 = m(Mutation::ToL4);
    match r.shape {
        Shape::Svc => {
            let bins = if m(Mutation::Binary) {
                "/usr/**"
            } else if r.flag {
                "/usr/bin/*"
            } else {
                "/usr/bin/curl"
            };
            let host = if m(Mutation::Host) {
                "**.example.com".to_string()
            } else {
                format!("*.svc{i}.example.com")
            };
            let ports = if m(Mutation::Port) {
                format!("[{}, 80]", r.port)
            } else {
                format!("[{}]", r.port)
            };
            let v = r.version;
            let _ = writeln!(out, "  - name: svc-{i}");
            let _ = writeln!(out, "    binaries: [\"{bins}\"]");
            let _ = writeln!(out, "    endpoints:");
            let _ = writeln!(out, "      - host: \"{host}\"");
            let _ = writeln!(out, "        ports: {ports}");
            if l4 {
                return;
            }
            let _ = writeln!(out, "        protocol: rest");
            let _ = writeln!(out, "        rules:");
            let get: &[&str] = if m(Mutation::Method) {
                &["GET", "DELETE"]
            } else {
                &["GET"]
            };
            let path = if m(Mutation::Path) {
                format!("/{v}/*/*/items/**")
            } else {
                format!("/{v}/org{i}/*/items/**")
            };
            entry(out, "          ", get, &path);
            entry(
                out,
                "          ",
                &["POST"],
                &format!("/{v}/org{i}/*/items"),
            );
            if r.deny && !m(Mutation::DenyRemoval) {
                let _ = writeln!(out, "        denyRules:");
                entry(
                    out,
                    "          ",
                    &["POST"],
                    &format!("/{v}/org{i}/locked/items"),
                );
            }
        }
        Shape::Api => {
            let mut bins = strs(&["/usr/bin/curl", "/usr/local/bin/agent"]);
            if m(Mutation::Binary) {
                bins.push("/usr/bin/*".into());
            }
            let host = if m(Mutation::Host) {
                format!("api{i}*.example.com")
            } else {
                format!("api{i}.example.com")
            };
            let ports = if m(Mutation::Port) {
                "[443, 8080]"
            } else {
                "[443]"
            };
            let _ = writeln!(out, "  - name: api-{i}");
            let _ = writeln!(out, "    binaries: {}", list(&bins));
            let _ = writeln!(out, "    endpoints:");
            let _ = writeln!(out, "      - host: \"{host}\"");
            let _ = writeln!(out, "        ports: {ports}");
            if l4 {
                return;
            }
            let scope = if m(Mutation::Path) {
                "/repos/**".to_string()
            } else {
                format!("/repos/acme{i}/**")
            };
            let access = if m(Mutation::Method) {
                "read-write"
            } else {
                "read-only"
            };
            let _ = writeln!(out, "        protocol: rest");
            let _ = writeln!(out, "        path: \"{scope}\"");
            let _ = writeln!(out, "        access: {access}");
            if r.deny && !m(Mutation::DenyRemoval) {
                let _ = writeln!(out, "        denyRules:");
                entry(
                    out,
                    "          ",
                    &["GET"],
                    &format!("/repos/acme{i}/*/private/**"),
                );
            }
        }
        Shape::Corp => {
            let host = if m(Mutation::Host) {
                "**.example.net".to_string()
            } else {
                format!("**.corp{i}.example.net")
            };
            let ports = if m(Mutation::Port) {
                "[8443, 80]"
            } else {
                "[8443]"
            };
            let _ = writeln!(out, "  - name: corp-{i}");
            let _ = writeln!(out, "    endpoints:");
            let _ = writeln!(out, "      - host: \"{host}\"");
            let _ = writeln!(out, "        ports: {ports}");
            if l4 {
                return;
            }
            let methods: &[&str] = if m(Mutation::Method) {
                &["GET", "POST", "PUT", "DELETE"]
            } else {
                &["GET", "POST", "PUT"]
            };
            let path = if m(Mutation::Path) {
                "/**".to_string()
            } else {
                format!("/api/v2/team{i}/**")
            };
            let _ = writeln!(out, "        protocol: rest");
            let _ = writeln!(out, "        rules:");
            entry(out, "          ", methods, &path);
            if !m(Mutation::DenyRemoval) {
                let _ = writeln!(out, "        denyRules:");
                entry(
                    out,
                    "          ",
                    &["PUT"],
                    &format!("/api/v2/team{i}/config/**"),
                );
            }
        }
        Shape::Db => {
            let bins = if m(Mutation::Binary) {
                "/usr/bin/*"
            } else {
                "/usr/bin/psql"
            };
            let host = if m(Mutation::Host) {
                "*.internal.example.org".to_string()
            } else {
                format!("db{i}.internal.example.org")
            };
            let ports = if m(Mutation::Port) {
                "[5432, 6432]"
            } else {
                "[5432]"
            };
            rule_head(out, &format!("db-{i}"), bins, &host, ports);
        }
        Shape::Search => {
            let bins = if m(Mutation::Binary) {
                "/usr/bin/*"
            } else {
                "/usr/bin/curl"
            };
            let host = if m(Mutation::Host) {
                format!("*.search{i}.example.com")
            } else {
                format!("search{i}.example.com")
            };
            let ports = if m(Mutation::Port) {
                "[443, 80]"
            } else {
                "[443]"
            };
            rule_head(out, &format!("search-{i}"), bins, &host, ports);
            if l4 {
                return;
            }
            let methods: &[&str] = if m(Mutation::Method) {
                &["GET", "POST"]
            } else {
                &["GET"]
            };
            let path = if m(Mutation::Path) {
                "/**"
            } else {
                "/v1/search"
            };
            let debug = if m(Mutation::Query) {
                ""
            } else {
                ", debug: {absent: true}"
            };
            let _ = writeln!(out, "        protocol: rest");
            let _ = writeln!(out, "        rules:");
            entry(out, "          ", methods, path);
            let _ = writeln!(
                out,
                "            query: {{q: \"*\", sort: {{any: [relevance, \"date*\"], optional: true}}{debug}}}"
            );
            if r.deny && !m(Mutation::DenyRemoval) {
                let _ = writeln!(out, "        denyRules:");
                entry(out, "          ", &["*"], "**");
                let _ = writeln!(out, "            query: {{admin: \"*\"}}");
            }
        }
        Shape::Stream => {
            let bins = if m(Mutation::Binary) {
                "/usr/bin/*"
            } else {
                "/usr/bin/python3"
            };
            let host = if m(Mutation::Host) {
                format!("*.stream{i}.example.com")
            } else {
                format!("stream{i}.example.com")
            };
            let ports = if m(Mutation::Port) {
                "[443, 80]"
            } else {
                "[443]"
            };
            rule_head(out, &format!("stream-{i}"), bins, &host, ports);
            if l4 {
                return;
            }
            let path = if m(Mutation::Path) {
                "/**"
            } else {
                "/v1/stream"
            };
            let subprotocol = if m(Mutation::Subprotocol) {
                "\"*\""
            } else {
                "realtime"
            };
            let _ = writeln!(out, "        protocol: websocket");
            let _ = writeln!(out, "        rules:");
            let _ = writeln!(out, "          - path: \"{path}\"");
            let _ = writeln!(out, "            query: {{model: \"gpt-*\"}}");
            let _ = writeln!(out, "            subprotocols: [{subprotocol}]");
            let _ = writeln!(out, "            origins: [\"https://app{i}.example.com\"]");
            if r.deny && !m(Mutation::DenyRemoval) {
                let _ = writeln!(out, "        denyRules:");
                let _ = writeln!(out, "          - query: {{debug: \"*\"}}");
            }
        }
    }
}

/// The maximum's text of a rule: a strict widening of the candidate's.
fn maximum_rule(out: &mut String, r: &RuleSpec) {
    let i = r.i;
    match r.shape {
        Shape::Svc => {
            let v = r.version;
            let _ = writeln!(out, "  - name: svc-{i}");
            let _ = writeln!(out, "    binaries: [\"/usr/bin/*\", \"/usr/local/bin/*\"]");
            let _ = writeln!(out, "    endpoints:");
            let _ = writeln!(out, "      - host: \"**.svc{i}.example.com\"");
            let _ = writeln!(out, "        ports: [443, 8443]");
            let _ = writeln!(out, "        protocol: rest");
            let _ = writeln!(out, "        rules:");
            entry(
                out,
                "          ",
                &["GET", "POST", "PUT"],
                &format!("/{v}/org{i}/**"),
            );
            let _ = writeln!(out, "        denyRules:");
            entry(out, "          ", &["DELETE"], "**");
            if r.deny {
                entry(
                    out,
                    "          ",
                    &["POST"],
                    &format!("/{v}/org{i}/locked/items"),
                );
            }
        }
        Shape::Api => {
            let _ = writeln!(out, "  - name: api-{i}");
            let _ = writeln!(
                out,
                "    binaries: [\"/usr/bin/curl\", \"/usr/bin/git\", \"/usr/local/bin/agent\"]"
            );
            let _ = writeln!(out, "    endpoints:");
            let _ = writeln!(out, "      - host: \"api{i}.example.com\"");
            let _ = writeln!(out, "        ports: [443]");
            let _ = writeln!(out, "        protocol: rest");
            let _ = writeln!(out, "        path: \"/repos/acme{i}/**\"");
            let _ = writeln!(out, "        rules:");
            entry(out, "          ", &["GET", "OPTIONS"], "**");
            entry(
                out,
                "          ",
                &["POST", "PATCH"],
                &format!("/repos/acme{i}/*/issues/**"),
            );
            let _ = writeln!(out, "        denyRules:");
            entry(out, "          ", &["DELETE"], "**");
            if r.deny {
                entry(
                    out,
                    "          ",
                    &["GET"],
                    &format!("/repos/acme{i}/*/private/**"),
                );
            }
        }
        Shape::Corp => {
            let methods: &[&str] = if r.flag {
                &["*"]
            } else {
                &["GET", "POST", "PUT", "PATCH"]
            };
            let _ = writeln!(out, "  - name: corp-{i}");
            let _ = writeln!(out, "    endpoints:");
            let _ = writeln!(out, "      - host: \"**.corp{i}.example.net\"");
            let _ = writeln!(out, "        ports: [8443, 9443]");
            let _ = writeln!(out, "        protocol: rest");
            let _ = writeln!(out, "        rules:");
            entry(out, "          ", methods, "/api/**");
            let _ = writeln!(out, "        denyRules:");
            entry(
                out,
                "          ",
                &["PUT", "DELETE"],
                &format!("/api/v2/team{i}/config/**"),
            );
        }
        Shape::Db => {
            let _ = writeln!(out, "  - name: db-{i}");
            let _ = writeln!(
                out,
                "    binaries: [\"/usr/bin/psql\", \"/usr/bin/pg_dump\"]"
            );
            let _ = writeln!(out, "    endpoints:");
            let _ = writeln!(out, "      - host: \"db{i}*.internal.example.org\"");
            let _ = writeln!(out, "        ports: [5432, 5433]");
        }
        Shape::Search => {
            let _ = writeln!(out, "  - name: search-{i}");
            let _ = writeln!(
                out,
                "    binaries: [\"/usr/bin/curl\", \"/usr/local/bin/agent\"]"
            );
            let _ = writeln!(out, "    endpoints:");
            let _ = writeln!(out, "      - host: \"search{i}.example.com\"");
            let _ = writeln!(out, "        ports: [443]");
            let _ = writeln!(out, "        protocol: rest");
            let _ = writeln!(out, "        rules:");
            entry(out, "          ", &["GET", "HEAD"], "/v1/**");
            let _ = writeln!(
                out,
                "            query: {{q: \"*\", debug: {{absent: true}}}}"
            );
            if r.deny {
                let _ = writeln!(out, "        denyRules:");
                entry(out, "          ", &["*"], "**");
                let _ = writeln!(out, "            query: {{admin: \"*\"}}");
            }
        }
        Shape::Stream => {
            let _ = writeln!(out, "  - name: stream-{i}");
            let _ = writeln!(
                out,
                "    binaries: [\"/usr/bin/python3\", \"/usr/local/bin/agent\"]"
            );
            let _ = writeln!(out, "    endpoints:");
            let _ = writeln!(out, "      - host: \"stream{i}.example.com\"");
            let _ = writeln!(out, "        ports: [443]");
            let _ = writeln!(out, "        protocol: websocket");
            let _ = writeln!(out, "        rules:");
            let _ = writeln!(out, "          - path: \"/v1/**\"");
            let _ = writeln!(out, "            subprotocols: [realtime, realtime-v2]");
            let _ = writeln!(out, "            origins: [\"https://*.example.com\"]");
            if r.deny {
                let _ = writeln!(out, "        denyRules:");
                let _ = writeln!(out, "          - query: {{debug: \"*\"}}");
            }
        }
    }
}

/// A generated pair with its expected answer.
struct Pair {
    n: usize,
    index: usize,
    expect_within: bool,
    /// For exceeding pairs: which rule was widened and how.
    mutation: Option<(usize, Shape, Mutation)>,
    candidate_yaml: String,
    maximum_yaml: String,
    candidate: CompiledPolicy,
    maximum: CompiledPolicy,
}

impl Pair {
    fn label(&self) -> String {
        match self.mutation {
            None => format!("N={} pair {} (within)", self.n, self.index),
            Some((rule, shape, m)) => format!(
                "N={} pair {} (exceeds: rule {rule} {shape:?} widened by {m:?})",
                self.n, self.index
            ),
        }
    }

    fn dump(&self) -> String {
        format!(
            "--- {} ---\n# candidate\n{}\n# maximum\n{}",
            self.label(),
            self.candidate_yaml,
            self.maximum_yaml
        )
    }
}

/// Writes every pair's YAML to `dir` (BENCH_DUMP_DIR), to reproduce a case
/// with `agentgate verify`.
fn dump(dir: &str, pairs: &[Pair]) {
    let dir = std::path::Path::new(dir);
    if let Err(e) = std::fs::create_dir_all(dir) {
        eprintln!("cannot create {}: {e}", dir.display());
        return;
    }
    for pair in pairs {
        let stem = format!("n{}-pair{}", pair.n, pair.index);
        for (side, text) in [
            ("candidate", &pair.candidate_yaml),
            ("maximum", &pair.maximum_yaml),
        ] {
            let file = dir.join(format!("{stem}-{side}.yaml"));
            if let Err(e) = std::fs::write(&file, text) {
                eprintln!("cannot write {}: {e}", file.display());
            }
        }
    }
}

fn load(yaml: &str, role: Role) -> Result<CompiledPolicy, String> {
    let loaded = load_document(yaml, &Limits::default()).map_err(|e| e.to_string())?;
    compile(&loaded.policy, role, &Limits::default()).map_err(|e| e.to_string())
}

/// Pair `index` of size `n`: its own PRNG stream, so a pair does not depend on
/// which other sizes or how many pairs are generated (reproducible alone).
fn generate_pair(seed: u64, n: usize, index: usize) -> Result<Pair, String> {
    let mut mix = Rng(seed ^ (n as u64).rotate_left(32) ^ index as u64);
    let rng = &mut Rng(mix.next_u64());
    let specs: Vec<RuleSpec> = (0..n).map(|i| RuleSpec::random(i, rng)).collect();
    // Interleave: even pairs within, odd pairs exceeding.
    let expect_within = index.is_multiple_of(2);
    let mutation = if expect_within {
        None
    } else {
        let rule = rng.below(n);
        let choices = specs[rule].mutations();
        Some((rule, specs[rule].shape, rng.pick(&choices)))
    };
    let mut candidate_yaml =
        String::from("filesystem:\n  readOnly: [/usr, /app]\n  readWrite: [/sandbox]\nnetwork:\n");
    let mut maximum_yaml = String::from(
        "filesystem:\n  readOnly: [/usr, /app, /etc/ssl]\n  readWrite: [/sandbox, /tmp]\nnetwork:\n",
    );
    for spec in &specs {
        let m = mutation.and_then(|(rule, _, m)| (rule == spec.i).then_some(m));
        candidate_rule(&mut candidate_yaml, spec, m);
        maximum_rule(&mut maximum_yaml, spec);
    }
    let candidate = load(&candidate_yaml, Role::Sandbox)
        .map_err(|e| format!("generated candidate does not compile: {e}\n{candidate_yaml}"))?;
    let maximum = load(&maximum_yaml, Role::Maximum)
        .map_err(|e| format!("generated maximum does not compile: {e}\n{maximum_yaml}"))?;
    Ok(Pair {
        n,
        index,
        expect_within,
        mutation,
        candidate_yaml,
        maximum_yaml,
        candidate,
        maximum,
    })
}

// ---------------------------------------------------------------------------
// Statistics and environment

fn sorted(mut v: Vec<f64>) -> Vec<f64> {
    v.sort_by(f64::total_cmp);
    v
}

fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn env_list(name: &str) -> Option<Vec<usize>> {
    let text = std::env::var(name).ok()?;
    let parsed: Result<Vec<usize>, _> = text.split(',').map(|s| s.trim().parse()).collect();
    match parsed {
        Ok(v) if !v.is_empty() => Some(v),
        _ => {
            eprintln!("ignoring {name}={text:?}: expected comma-separated integers");
            None
        }
    }
}

/// Value for the k-th size: one value for all, or one per size.
fn per_size(list: &[usize], k: usize) -> usize {
    match list.len() {
        0 => 1,
        1 => list[0],
        len => list[k.min(len - 1)],
    }
}

fn env_u64(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(text) => text.trim().parse().unwrap_or_else(|_| {
            eprintln!("ignoring {name}={text:?}: expected an integer");
            default
        }),
        Err(_) => default,
    }
}

fn command_line(program: &str, args: &[&str]) -> Option<String> {
    let out = std::process::Command::new(program)
        .args(args)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn proc_field(file: &str, key: &str) -> Option<String> {
    let text = std::fs::read_to_string(file).ok()?;
    text.lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
}

fn print_machine() {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let cpu = proc_field("/proc/cpuinfo", "model name").unwrap_or_else(|| "unknown".into());
    let mem = proc_field("/proc/meminfo", "MemTotal")
        .and_then(|v| {
            v.split_whitespace()
                .next()
                .and_then(|k| k.parse::<f64>().ok())
        })
        .map_or("unknown".to_string(), |kib| {
            format!("{:.1} GiB", kib / 1024.0 / 1024.0)
        });
    let date = command_line("date", &["-u", "+%Y-%m-%d %H:%M:%S UTC"]).unwrap_or_else(|| {
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        format!("{secs} s since the Unix epoch")
    });
    let kernel = command_line("uname", &["-sr"]).unwrap_or_else(|| "unknown".into());
    println!("# machine");
    println!("date:    {date}");
    println!("nproc:   {cores}");
    println!("cpu:     {cpu}");
    println!("memory:  {mem}");
    println!("kernel:  {kernel}");
    println!(
        "load:    {} (1/5/15 min; other work on the machine skews the numbers)",
        load_average()
    );
    let git = std::env::var("BENCH_SOURCE")
        .ok()
        .or_else(|| command_line("git", &["rev-parse", "--short", "HEAD"]));
    let source = match git {
        Some(commit) => {
            let dirty = command_line("git", &["status", "--porcelain", "--", "operator"])
                .is_some_and(|s| !s.is_empty());
            let note = if dirty {
                " + uncommitted changes under operator/"
            } else {
                ""
            };
            format!("commit {commit}{note}")
        }
        None => "unknown (not run from a git checkout)".into(),
    };
    println!("source:  {source}");
    println!(
        "build:   {}",
        if cfg!(debug_assertions) {
            "DEBUG (numbers are not representative)"
        } else {
            "release"
        }
    );
    println!();
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|t| t.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

/// CPU ticks (USER_HZ) busy on the whole machine, spent by this process,
/// and stolen by the hypervisor: to tell how much other work ran meanwhile.
#[derive(Clone, Copy)]
struct CpuTicks {
    machine_busy: u64,
    own: u64,
    steal: u64,
}

impl CpuTicks {
    fn now() -> CpuTicks {
        let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
        let cpu: Vec<u64> = stat
            .lines()
            .next()
            .unwrap_or_default()
            .split_whitespace()
            .skip(1)
            .filter_map(|v| v.parse().ok())
            .collect();
        // user nice system idle iowait irq softirq steal
        let field = |i: usize| cpu.get(i).copied().unwrap_or(0);
        let own = std::fs::read_to_string("/proc/self/stat")
            .ok()
            .and_then(|t| {
                // After the command name: field 3 (state) is index 0, so
                // utime and stime (fields 14 and 15) are indexes 11 and 12.
                let after = t.rsplit_once(')')?.1.to_string();
                let f: Vec<&str> = after.split_whitespace().collect();
                let utime: u64 = f.get(11)?.parse().ok()?;
                let stime: u64 = f.get(12)?.parse().ok()?;
                Some(utime + stime)
            })
            .unwrap_or(0);
        CpuTicks {
            machine_busy: field(0) + field(1) + field(2) + field(5) + field(6),
            own,
            steal: field(7),
        }
    }

    /// "other work: X cores, steal: Y cores" on average since `self`.
    fn other_since(&self, wall: Duration) -> String {
        let now = CpuTicks::now();
        let secs = wall.as_secs_f64().max(1e-9);
        let other = now.machine_busy.saturating_sub(self.machine_busy) as f64
            - now.own.saturating_sub(self.own) as f64;
        let steal = now.steal.saturating_sub(self.steal) as f64;
        format!(
            "other processes used {:.2} cores on average meanwhile (steal {:.2})",
            (other / 100.0 / secs).max(0.0),
            steal / 100.0 / secs
        )
    }
}

/// Minor page faults of this process so far (/proc/self/stat field 10).
fn minor_faults() -> u64 {
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|t| {
            let after = t.rsplit_once(')')?.1;
            after.split_whitespace().nth(7)?.parse().ok()
        })
        .unwrap_or(0)
}

fn rss_kib() -> Option<u64> {
    proc_field("/proc/self/status", "VmRSS")
        .and_then(|v| v.split_whitespace().next().and_then(|k| k.parse().ok()))
}

// ---------------------------------------------------------------------------
// Runs

/// Per-N results of the real prover.
#[derive(Default)]
struct RealStats {
    samples: Vec<f64>,
    /// Samples per pair index, for the ratio on the naive sample.
    per_pair: BTreeMap<usize, Vec<f64>>,
    within: usize,
    exceeds: usize,
    inconclusive: usize,
    other: usize,
    mismatches: usize,
    /// Minor page faults during the timed checks.
    faults: u64,
}

/// Per-N results of the naive baseline.
#[derive(Default)]
struct NaiveStats {
    samples: Vec<f64>,
    pairs: Vec<usize>,
    timeouts: usize,
    disagreements: usize,
}

/// Checks the real prover's answer against the expectation; returns a
/// description of the problem, if any.
fn judge(pair: &Pair, outcome: &Outcome) -> Option<String> {
    match (outcome, pair.expect_within) {
        (Outcome::Within, true) => None,
        (Outcome::Exceeds { counterexample }, false) => {
            // The prover replays its witness; check again independently.
            let ok =
                allows(&pair.candidate, counterexample) && !allows(&pair.maximum, counterexample);
            (!ok).then(|| format!("counterexample {counterexample} does not separate the policies"))
        }
        (Outcome::Exceeds { counterexample }, true) => Some(format!(
            "expected within, got exceeds with {counterexample}"
        )),
        (Outcome::Within, false) => Some("expected exceeds, got within".into()),
        (other, _) => Some(format!(
            "got {}: {}",
            other.name(),
            other.reason().map_or(String::new(), |r| r.to_string())
        )),
    }
}

fn run_real(prover: &Prover, pairs: &[Pair], reps: usize, problems: &mut Vec<String>) -> RealStats {
    let mut stats = RealStats::default();
    let mut reported = vec![false; pairs.len()];
    for _ in 0..reps {
        for (p, pair) in pairs.iter().enumerate() {
            let faults_before = minor_faults();
            let started = Instant::now();
            let proof = prover.containment(&pair.candidate, &pair.maximum);
            let ms = millis(started.elapsed());
            stats.faults += minor_faults().saturating_sub(faults_before);
            stats.samples.push(ms);
            stats.per_pair.entry(p).or_default().push(ms);
            match &proof.outcome {
                Outcome::Within => stats.within += 1,
                Outcome::Exceeds { .. } => stats.exceeds += 1,
                Outcome::Inconclusive { .. } => stats.inconclusive += 1,
                Outcome::Unsupported { .. } => stats.other += 1,
            }
            if let Some(problem) = judge(pair, &proof.outcome) {
                stats.mismatches +=
                    usize::from(!matches!(proof.outcome, Outcome::Inconclusive { .. }));
                if !reported[p] {
                    reported[p] = true;
                    problems.push(format!(
                        "{}: {problem} ({ms:.1} ms)\n{}",
                        pair.label(),
                        pair.dump()
                    ));
                }
            }
        }
    }
    stats
}

fn run_naive(pairs: &[Pair], sample: usize, timeout: Duration) -> NaiveStats {
    let mut stats = NaiveStats::default();
    for (p, pair) in pairs.iter().enumerate().take(sample) {
        let (outcome, elapsed) = naive_containment(&pair.candidate, &pair.maximum, timeout);
        let ms = match outcome {
            NaiveOutcome::Unknown => {
                stats.timeouts += 1;
                millis(timeout).max(millis(elapsed))
            }
            NaiveOutcome::Within | NaiveOutcome::Exceeds => millis(elapsed),
        };
        let agrees = match outcome {
            NaiveOutcome::Within => pair.expect_within,
            NaiveOutcome::Exceeds => !pair.expect_within,
            NaiveOutcome::Unknown => true,
        };
        if !agrees {
            stats.disagreements += 1;
            println!(
                "  note: naive baseline answered {outcome:?} on {}",
                pair.label()
            );
        }
        println!("  naive {}: {outcome:?} in {ms:.1} ms", pair.label());
        stats.samples.push(ms);
        stats.pairs.push(p);
    }
    stats
}

fn fmt_ms(v: f64) -> String {
    if v.is_nan() {
        "-".into()
    } else if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// Where the drift test's pairs come from.
enum DriftInputs {
    /// A fixed set of compiled pairs, cycled.
    Repeat(Vec<Pair>),
    /// A freshly generated and compiled pair before every check (untimed), of
    /// these sizes in turn: what a long-running service sees.
    Churn(Vec<usize>),
}

fn drift(
    prover: &Prover,
    seed: u64,
    inputs: &DriftInputs,
    checks: usize,
    problems: &mut Vec<String>,
) -> Result<bool, String> {
    let mut samples = Vec::with_capacity(checks);
    let mut faults = Vec::with_capacity(checks);
    let mut bad = 0usize;
    let rss_before = rss_kib();
    let ticks = CpuTicks::now();
    let started = Instant::now();
    for k in 0..checks {
        let fresh;
        let pair = match inputs {
            DriftInputs::Repeat(pairs) => &pairs[k % pairs.len()],
            DriftInputs::Churn(sizes) => {
                fresh = generate_pair(seed, sizes[k % sizes.len()], 10_000 + k)?;
                &fresh
            }
        };
        let faults_before = minor_faults();
        let t = Instant::now();
        let proof = prover.containment(&pair.candidate, &pair.maximum);
        samples.push(millis(t.elapsed()));
        faults.push(minor_faults().saturating_sub(faults_before) as f64);
        if let Some(problem) = judge(pair, &proof.outcome) {
            bad += 1;
            if bad == 1 {
                problems.push(format!(
                    "drift check {k}, {}: {problem}\n{}",
                    pair.label(),
                    pair.dump()
                ));
            }
        }
    }
    let total = started.elapsed();
    let window = (checks / 10).max(1).min(checks);
    let first = sorted(samples[..window].to_vec());
    let last = sorted(samples[checks - window..].to_vec());
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let (p50_first, p50_last) = (percentile(&first, 50.0), percentile(&last, 50.0));
    match inputs {
        DriftInputs::Repeat(pairs) => println!(
            "# drift (repeat): {checks} consecutive checks cycling {} fixed N=10 pairs, cache disabled",
            pairs.len()
        ),
        DriftInputs::Churn(sizes) => println!(
            "# drift (churn): {checks} consecutive checks, each on a freshly generated pair, N cycling {sizes:?}, cache disabled"
        ),
    }
    println!("total:             {:.1} s", total.as_secs_f64());
    println!("machine:           {}", ticks.other_since(total));
    println!(
        "first {window}:         p50 {} ms  p99 {} ms  page faults/check {:.0}",
        fmt_ms(p50_first),
        fmt_ms(percentile(&first, 99.0)),
        mean(&faults[..window])
    );
    println!(
        "last {window}:          p50 {} ms  p99 {} ms  page faults/check {:.0}",
        fmt_ms(p50_last),
        fmt_ms(percentile(&last, 99.0)),
        mean(&faults[checks - window..])
    );
    println!("ratio last/first:  {:.2}", p50_last / p50_first);
    let windows: Vec<String> = samples
        .chunks(window)
        .map(|w| fmt_ms(percentile(&sorted(w.to_vec()), 50.0)))
        .collect();
    println!("p50 per {window} checks: {} ms", windows.join(" "));
    if let (Some(before), Some(after)) = (rss_before, rss_kib()) {
        println!(
            "RSS:               {:.1} MiB before, {:.1} MiB after",
            before as f64 / 1024.0,
            after as f64 / 1024.0
        );
    }
    println!("wrong answers:     {bad}");
    println!();
    Ok(bad == 0)
}

/// The size of a run: `AGENTGATE_BENCH_SMOKE=1`, `BENCH_QUICK=1` or full.
#[derive(Clone, Copy)]
enum Run {
    Smoke,
    Quick,
    Full,
}

impl Run {
    /// The default of a knob for this run.
    fn pick<T>(self, smoke: T, quick: T, full: T) -> T {
        match self {
            Run::Smoke => smoke,
            Run::Quick => quick,
            Run::Full => full,
        }
    }
}

fn main() -> ExitCode {
    let smoke = std::env::var("AGENTGATE_BENCH_SMOKE").is_ok_and(|v| v == "1");
    let quick = !smoke && std::env::var("BENCH_QUICK").is_ok_and(|v| v == "1");
    let run = if smoke {
        Run::Smoke
    } else if quick {
        Run::Quick
    } else {
        Run::Full
    };
    let sizes = env_list("BENCH_SIZES")
        .unwrap_or_else(|| run.pick(vec![1, 10], vec![1, 10, 100], vec![1, 10, 100, 1000]));
    let pairs_per_size = env_u64("BENCH_PAIRS", run.pick(2, 4, 10)).max(1) as usize;
    let reps = env_list("BENCH_REPS")
        .unwrap_or_else(|| run.pick(vec![1], vec![5, 5, 2], vec![30, 30, 20, 5]));
    let naive_samples = env_list("BENCH_NAIVE_SAMPLES")
        .unwrap_or_else(|| run.pick(vec![1], vec![2, 2, 1], vec![4, 4, 2, 1]));
    let naive_timeout = Duration::from_millis(env_u64(
        "BENCH_NAIVE_TIMEOUT_MS",
        run.pick(1_000, 10_000, 10_000),
    ));
    let drift_checks = env_u64("BENCH_DRIFT_CHECKS", run.pick(10, 300, 3000)) as usize;
    let seed = env_u64("BENCH_SEED", 0x00A6_E47A_7E00_0001);

    print_machine();
    println!("# settings");
    if smoke {
        println!("smoke: true (AGENTGATE_BENCH_SMOKE=1: the numbers are not results)");
    }
    println!("quick: {quick}  sizes: {sizes:?}  pairs/N: {pairs_per_size}  reps/N: {reps:?}");
    println!(
        "prover: timeout {} s, cache disabled  |  naive: timeout {} ms, pairs/N {naive_samples:?}  |  seed {seed:#x}",
        PROVER_TIMEOUT.as_secs(),
        naive_timeout.as_millis()
    );
    println!();

    let prover = Prover::new(ProverOptions {
        timeout: PROVER_TIMEOUT,
        cache_entries: 0,
        ..ProverOptions::default()
    });
    let mut problems = Vec::new();
    let mut rows = Vec::new();
    let mut naive_disagreements = 0;

    for (k, &n) in sizes.iter().enumerate() {
        let generated: Result<Vec<Pair>, String> = (0..pairs_per_size)
            .map(|p| generate_pair(seed, n, p))
            .collect();
        let pairs = match generated {
            Ok(pairs) => pairs,
            Err(e) => {
                eprintln!("{e}");
                return ExitCode::from(2);
            }
        };
        if let Ok(dir) = std::env::var("BENCH_DUMP_DIR") {
            dump(&dir, &pairs);
        }
        let bytes: usize = pairs
            .iter()
            .map(|p| p.candidate_yaml.len() + p.maximum_yaml.len())
            .sum();
        println!(
            "# N={n}: {} pairs ({} within, {} exceeding), {:.0} KiB of YAML per pair",
            pairs.len(),
            pairs.iter().filter(|p| p.expect_within).count(),
            pairs.iter().filter(|p| !p.expect_within).count(),
            bytes as f64 / pairs.len() as f64 / 1024.0
        );
        // Warm-up (not measured): page in code, initialise Z3.
        let _ = prover.containment(&pairs[0].candidate, &pairs[0].maximum);
        let (ticks, started) = (CpuTicks::now(), Instant::now());
        let real = run_real(&prover, &pairs, per_size(&reps, k), &mut problems);
        let busy = ticks.other_since(started.elapsed());
        for (p, samples) in &real.per_pair {
            let s = sorted(samples.clone());
            println!(
                "  real {}: p50 {} ms, max {} ms",
                pairs[*p].label(),
                fmt_ms(percentile(&s, 50.0)),
                fmt_ms(s.last().copied().unwrap_or(f64::NAN))
            );
        }
        println!("  real N={n}: {busy}");
        let naive = run_naive(
            &pairs,
            per_size(&naive_samples, k).min(pairs.len()),
            naive_timeout,
        );
        naive_disagreements += naive.disagreements;
        println!();
        rows.push((n, real, naive));
    }

    // The table.
    let mut table = String::new();
    let _ = writeln!(
        table,
        "| N | checks | within | exceeds | inconcl. | mismatch | real p50 ms | real p99 ms | real max ms | naive checks (timeouts) | naive p50 ms | naive p99 ms | real p50 ms, same pairs | speed-up (naive p50 / real p50) | page faults/check |"
    );
    let _ = writeln!(
        table,
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    let mut ok = problems.is_empty();
    for (n, real, naive) in &rows {
        let all = sorted(real.samples.clone());
        let same = sorted(
            naive
                .pairs
                .iter()
                .flat_map(|p| real.per_pair.get(p).cloned().unwrap_or_default())
                .collect(),
        );
        let naive_sorted = sorted(naive.samples.clone());
        let naive_p50 = percentile(&naive_sorted, 50.0);
        let same_p50 = percentile(&same, 50.0);
        let speedup = if naive.samples.is_empty() {
            "-".to_string()
        } else {
            // With timeouts the naive p50 may be the timeout: a lower bound.
            let bound = if naive.timeouts > 0 && naive_p50 >= millis(naive_timeout) {
                ">="
            } else {
                ""
            };
            format!("{bound}{:.0}x", naive_p50 / same_p50)
        };
        let _ = writeln!(
            table,
            "| {n} | {} | {} | {} | {} | {} | {} | {} | {} | {} ({}) | {} | {} | {} | {speedup} | {:.0} |",
            real.samples.len(),
            real.within,
            real.exceeds,
            real.inconclusive + real.other,
            real.mismatches,
            fmt_ms(percentile(&all, 50.0)),
            fmt_ms(percentile(&all, 99.0)),
            fmt_ms(all.last().copied().unwrap_or(f64::NAN)),
            naive.samples.len(),
            naive.timeouts,
            fmt_ms(naive_p50),
            fmt_ms(percentile(&naive_sorted, 99.0)),
            fmt_ms(same_p50),
            real.faults as f64 / real.samples.len().max(1) as f64,
        );
        if real.mismatches > 0 || real.inconclusive > 0 || real.other > 0 {
            ok = false;
        }
    }
    println!("# containment latency (wall clock around Prover::containment, cache disabled)");
    print!("{table}");
    println!();
    for (n, real, _) in &rows {
        if let Some((_, target)) = TARGETS.iter().find(|(t, _)| t == n) {
            let p99 = percentile(&sorted(real.samples.clone()), 99.0);
            let verdict = if p99 <= *target { "met" } else { "NOT met" };
            println!(
                "target N={n}: p99 <= {target} ms: {verdict} (p99 = {} ms)",
                fmt_ms(p99)
            );
        }
    }
    println!("naive baseline answers that disagree with the expectation: {naive_disagreements}");
    println!();

    if drift_checks > 0 {
        let repeat: Result<Vec<Pair>, String> =
            (1000..1010).map(|p| generate_pair(seed, 10, p)).collect();
        let churn_sizes = env_list("BENCH_DRIFT_CHURN_SIZES").unwrap_or_else(|| vec![10]);
        let runs = repeat.and_then(|pairs| {
            let a = drift(
                &prover,
                seed,
                &DriftInputs::Repeat(pairs),
                drift_checks,
                &mut problems,
            )?;
            let b = drift(
                &prover,
                seed,
                &DriftInputs::Churn(churn_sizes),
                drift_checks,
                &mut problems,
            )?;
            Ok(a && b)
        });
        match runs {
            Ok(good) => ok &= good,
            Err(e) => {
                eprintln!("{e}");
                return ExitCode::from(2);
            }
        }
    }

    println!("load at the end: {}", load_average());
    if !problems.is_empty() {
        println!("# PROBLEMS ({})", problems.len());
        for p in &problems {
            println!("{p}");
        }
    }
    if ok {
        println!("all real-encoding answers match the expectation");
        ExitCode::SUCCESS
    } else {
        println!("FAILED: wrong or inconclusive real-encoding answers (see above)");
        ExitCode::FAILURE
    }
}
