//! `make bench-verify`: `agentgate verify` over a whole repository in one
//! process, side by side with the same work done the old way, one
//! `agentgate verify --maximum M1 --maximum M2 --maximum M3 SANDBOX` per
//! sandbox. Prints numbers for docs/benchmarks.md.
//!
//! The repository is generated: 3 MaximumPolicies (two selecting by
//! namespace label, one by sandbox label), 10 labelled Namespaces and N
//! AgentSandboxes spread over them, each governed by all three. Every 25th
//! sandbox asks for one POST path the ceilings do not allow; the program
//! checks that exactly those exceed (in both runs) and fails otherwise.
//!
//! Knobs (environment): `BENCH_SANDBOXES` (default 500),
//! `BENCH_SEPARATE` (how many separate runs to time, default all),
//! `AGENTGATE_BENCH_SMOKE=1` (30 sandboxes, one exceeding, 5 separate runs, debug build).
//! The binary is the `agentgate` next to this program (target/release for
//! `make bench-verify`).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

const CEILINGS: [(&str, &str); 3] = [
    (
        "org-ceiling",
        "namespaceSelector: {matchLabels: {tier: agents}}",
    ),
    (
        "egress-ceiling",
        "namespaceSelector: {matchExpressions: [{key: team, operator: Exists}]}",
    ),
    ("bot-ceiling", "sandboxSelector: {matchLabels: {kind: bot}}"),
];

fn maximum(name: &str, selector: &str) -> String {
    format!(
        "apiVersion: agentgate.dev/v1alpha1
kind: MaximumPolicy
metadata:
  name: {name}
spec:
  selector:
    {selector}
  allowedModes: [ask, auto]
  policy:
    filesystem:
      readOnly: [/usr, /app, /etc/ssl]
      readWrite: [/sandbox, /tmp]
    network:
      - name: github
        binaries: [/usr/bin/gh, /usr/local/bin/agent]
        endpoints:
          - host: api.github.com
            ports: [443]
            protocol: rest
            rules:
              - methods: [GET]
                path: /repos/acme/**
              - methods: [POST, PATCH]
                path: /repos/acme/*/issues/**
      - name: mirrors
        binaries: [/usr/local/bin/agent]
        endpoints:
          - host: \"*.pypi.org\"
            ports: [443]
            protocol: rest
            access: read-only
  invariants:
    - name: no-cloud-metadata
      reason: credentials theft
      match:
        hosts: [metadata.google.internal, \"169.254.169.254\"]
"
    )
}

fn sandbox(i: usize, exceeding: bool) -> String {
    let namespace = format!("team-{}", i % 10);
    let post = if exceeding {
        format!("/repos/acme/repo-{i}/pulls/**")
    } else {
        format!("/repos/acme/repo-{i}/issues/*/comments")
    };
    format!(
        "apiVersion: agentgate.dev/v1alpha1
kind: AgentSandbox
metadata:
  name: agent-{i}
  namespace: {namespace}
  labels: {{kind: bot}}
spec:
  mode: ask
  agentServiceAccount: agent-{i}
  policy:
    filesystem:
      readOnly: [/app]
      readWrite: [/sandbox]
    network:
      - name: github
        binaries: [/usr/local/bin/agent]
        endpoints:
          - host: api.github.com
            ports: [443]
            protocol: rest
            rules:
              - methods: [GET]
                path: /repos/acme/repo-{i}/**
              - methods: [POST]
                path: {post}
      - name: pypi
        binaries: [/usr/local/bin/agent]
        endpoints:
          - host: files.pypi.org
            ports: [443]
            protocol: rest
            rules:
              - methods: [GET]
                path: /packages/**
"
    )
}

/// Writes the repository: `maximums/`, `namespaces.yaml`, `sandboxes/`.
fn generate(dir: &Path, n: usize) -> std::io::Result<Vec<bool>> {
    std::fs::create_dir_all(dir.join("maximums"))?;
    std::fs::create_dir_all(dir.join("sandboxes"))?;
    for (name, selector) in CEILINGS {
        std::fs::write(
            dir.join(format!("maximums/{name}.yaml")),
            maximum(name, selector),
        )?;
    }
    let mut namespaces = String::new();
    for t in 0..10 {
        let _ = write!(
            namespaces,
            "---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: team-{t}\n  labels: {{tier: agents, team: t{t}}}\n"
        );
    }
    std::fs::write(dir.join("namespaces.yaml"), namespaces)?;
    let mut expected = Vec::with_capacity(n);
    for i in 0..n {
        let exceeding = i % 25 == 24;
        expected.push(exceeding);
        std::fs::write(
            dir.join(format!("sandboxes/agent-{i:04}.yaml")),
            sandbox(i, exceeding),
        )?;
    }
    Ok(expected)
}

fn binary() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let bin = exe
        .parent()
        .map(|d| d.join("agentgate"))
        .ok_or("no directory")?;
    if bin.exists() {
        Ok(bin)
    } else {
        Err(format!(
            "{} is missing: build it first (make bench-verify does)",
            bin.display()
        ))
    }
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench-verify: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), String> {
    let smoke = std::env::var("AGENTGATE_BENCH_SMOKE").is_ok_and(|v| v == "1");
    let n = env_usize("BENCH_SANDBOXES", if smoke { 30 } else { 500 });
    let separate = env_usize("BENCH_SEPARATE", if smoke { 5 } else { n }).min(n);
    let bin = binary()?;
    let dir = std::env::temp_dir().join(format!("agentgate-bench-verify-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let expected = generate(&dir, n).map_err(|e| format!("writing the repository: {e}"))?;
    let exceeding = expected.iter().filter(|e| **e).count();

    // One process over the whole repository.
    let started = Instant::now();
    let out = Command::new(&bin)
        .args(["verify", "-o", "json"])
        .arg(&dir)
        .output()
        .map_err(|e| e.to_string())?;
    let one_process = started.elapsed().as_secs_f64();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).map_err(|e| {
        format!(
            "verify printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })?;
    let summary = &report["summary"];
    let objects = report["objects"].as_array().ok_or("no objects")?;
    for o in objects.iter().filter(|o| o["kind"] == "AgentSandbox") {
        let name = o["name"].as_str().unwrap_or_default();
        let i: usize = name
            .trim_start_matches("agent-")
            .parse()
            .map_err(|_| format!("unexpected {name}"))?;
        let exceeds = o["result"] == "exceeds";
        if exceeds != expected[i] || o["governedBy"].as_array().map(Vec::len) != Some(3) {
            return Err(format!("one process: {name} gave {o}"));
        }
    }
    if summary["exceeds"] != exceeding || summary["holds"] != n - exceeding + 3 {
        return Err(format!("one process: unexpected summary {summary}"));
    }

    // The same proofs as separate runs, one per sandbox, maximums named.
    let mut maximums = Vec::new();
    for (name, _) in CEILINGS {
        maximums.push("--maximum".to_string());
        maximums.push(
            dir.join(format!("maximums/{name}.yaml"))
                .display()
                .to_string(),
        );
    }
    let started = Instant::now();
    for (i, exceeds) in expected.iter().enumerate().take(separate) {
        let status = Command::new(&bin)
            .arg("verify")
            .args(&maximums)
            .arg(dir.join(format!("sandboxes/agent-{i:04}.yaml")))
            .output()
            .map_err(|e| e.to_string())?
            .status
            .code();
        if status != Some(if *exceeds { 1 } else { 0 }) {
            return Err(format!("separate run for agent-{i} exited {status:?}"));
        }
    }
    let separate_secs = started.elapsed().as_secs_f64();
    let per_run = separate_secs / separate.max(1) as f64;
    let projected = per_run * n as f64;
    let _ = std::fs::remove_dir_all(&dir);

    println!(
        "agentgate verify: {n} sandboxes x 3 maximums (+ 3 consistency checks, 10 namespaces), {exceeding} exceeding"
    );
    println!(
        "  one process, whole repository:   {one_process:>8.2} s  ({:.1} ms per sandbox)",
        one_process * 1000.0 / n as f64
    );
    println!(
        "  {separate} separate runs (--maximum x3): {separate_secs:>8.2} s  ({:.1} ms per run{})",
        per_run * 1000.0,
        if separate < n {
            format!(", {projected:.2} s projected for {n}")
        } else {
            String::new()
        }
    );
    println!("  speed-up: {:.1}x", projected / one_process.max(1e-9));
    println!(
        "  target: one process <= 5 s for 500 sandboxes: {}",
        if n == 500 {
            if one_process <= 5.0 { "met" } else { "MISSED" }
        } else {
            "n/a (not 500)"
        }
    );
    Ok(())
}
