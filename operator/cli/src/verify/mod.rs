//! `agentgate verify`: does everything in a repository, or a rendered
//! stream, stay inside its ceilings? Two forms:
//! - `verify PATH...` (files, directories, `-`): every AgentSandbox against
//!   the MaximumPolicies that govern it, every MaximumPolicy against its
//!   invariants, every PolicyProposal's verdict ([`repository`]);
//! - `verify --maximum M... CANDIDATE`: one candidate against explicitly
//!   named maximums, whatever their selectors ([`single`]).

pub mod cluster;
pub mod report;
pub mod repository;
pub mod single;

use std::path::PathBuf;
use std::time::Instant;

use clap::{Args, ValueEnum};

use crate::manifests::{BadInput, read_file_manifests, read_paths};
use crate::{EXIT_EXCEEDS, EXIT_UNPROVEN, EXIT_USAGE, EXIT_WITHIN, timeout};
use agentgate_prover::{Prover, ProverOptions};
use repository::{
    Context, NamespaceLabels, Status, classify, judge_all, namespace_labels, with_name_label,
};

/// Output format of verify.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// One line per object (`file:line: Kind ns/name result: message`).
    Text,
    /// One JSON object (shape in docs/cli.md).
    Json,
    /// JUnit XML, one test case per object (CI dashboards).
    Junit,
    /// SARIF 2.1.0, results at the manifest's file and line (code scanning).
    Sarif,
}

/// Arguments of `verify`.
#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// Manifests: files, directories (read recursively) or `-` for stdin
    /// (e.g. `kustomize build . | agentgate verify -`). With --maximum: the
    /// one candidate file.
    #[arg(value_name = "PATH", required = true)]
    pub paths: Vec<PathBuf>,
    /// Prove the one candidate against this maximum, whatever its
    /// selectors (repeatable): bare policy document or MaximumPolicy manifest.
    #[arg(long = "maximum", short = 'm', value_name = "FILE")]
    pub maximums: Vec<PathBuf>,
    /// Namespace labels for sandboxes whose Namespace is not in the input:
    /// Namespace manifests (e.g. `kubectl get ns -o yaml`) or a mapping
    /// `name: {label: value}`.
    #[arg(
        long = "namespace-labels",
        value_name = "FILE",
        conflicts_with_all = ["maximums", "cluster"]
    )]
    pub namespace_labels: Option<PathBuf>,
    /// Read namespace labels, live MaximumPolicies and live AgentSandboxes
    /// from the current kubeconfig; maximums in the input replace live ones
    /// of the same name.
    #[arg(long, conflicts_with = "maximums")]
    pub cluster: bool,
    /// Kubeconfig context for --cluster.
    #[arg(long, requires = "cluster")]
    pub context: Option<String>,
    /// The namespace of objects that name none (as `kubectl apply -n`).
    #[arg(long, short = 'n', default_value = "default")]
    pub namespace: String,
    /// Sandboxes no MaximumPolicy governs hold (the operator's flag of the
    /// same name); without it they are refused, as in the cluster.
    #[arg(long)]
    pub allow_unmanaged: bool,
    /// Output format.
    #[arg(long, short = 'o', value_enum, default_value = "text")]
    pub output: Format,
    /// Per-check solver timeout in milliseconds.
    #[arg(long = "timeout-ms", default_value_t = 5000)]
    pub timeout_ms: u64,
}

/// Runs `verify` and returns the exit code.
pub fn run(args: &VerifyArgs) -> u8 {
    if !args.maximums.is_empty() {
        return single::run(args);
    }
    let report_bad = |bad: &[BadInput]| {
        for b in bad {
            eprintln!("agentgate verify: {b}");
        }
        EXIT_USAGE
    };
    let manifests = match read_paths(&args.paths) {
        Ok(m) => m,
        Err(bad) => return report_bad(&[bad]),
    };
    let repo = match classify(manifests, &args.namespace) {
        Ok(r) => r,
        Err(bad) => return report_bad(&bad),
    };
    let mut context = Context {
        default_namespace: args.namespace.clone(),
        allow_unmanaged: args.allow_unmanaged,
        ..Context::default()
    };
    if let Some(path) = &args.namespace_labels {
        match namespace_labels_file(path) {
            Ok(labels) => context.namespace_labels = labels,
            Err(bad) => return report_bad(&[bad]),
        }
    }
    if args.cluster {
        match cluster::read(args.context.clone()) {
            Ok(live) => {
                context.namespace_labels = live.namespace_labels;
                context.namespaces_complete = true;
                context.live_maximums = live.maximums;
                context.live_sandboxes = live.sandboxes;
            }
            Err(e) => {
                eprintln!("agentgate verify: --cluster: {e:#}");
                return EXIT_USAGE;
            }
        }
    }
    let prover = Prover::new(ProverOptions {
        timeout: timeout(args.timeout_ms),
        ..ProverOptions::default()
    });
    let started = Instant::now();
    let findings = judge_all(&repo, &context, &prover);
    let summary = report::Summary {
        findings: &findings,
        ignored: repo.ignored,
        millis: started.elapsed().as_secs_f64() * 1000.0,
    };
    match args.output {
        Format::Text => print!("{}", report::text(&summary)),
        Format::Json => println!("{}", report::json(&summary)),
        Format::Junit => print!("{}", report::junit(&summary)),
        Format::Sarif => println!("{}", report::sarif(&summary)),
    }
    match summary.worst() {
        Status::Holds => EXIT_WITHIN,
        Status::Exceeds => EXIT_EXCEEDS,
        Status::Unsupported | Status::Inconclusive => EXIT_UNPROVEN,
    }
}

/// Reads `--namespace-labels`: Namespace manifests (or a List of them), or
/// one mapping of namespace name to labels.
pub fn namespace_labels_file(path: &std::path::Path) -> Result<NamespaceLabels, BadInput> {
    let mut labels = NamespaceLabels::new();
    for manifest in &read_file_manifests(path)? {
        if manifest.kind() == "Namespace" {
            let (name, these) = namespace_labels(manifest)?;
            labels.insert(name, these);
        } else if manifest.kind().is_empty() && manifest.base.is_empty() {
            let map: NamespaceLabels =
                serde_json::from_value(manifest.value.clone()).map_err(|e| {
                    manifest.bad(
                        "",
                        format!(
                            "expected Namespace manifests or a mapping of namespace to labels: {e}"
                        ),
                    )
                })?;
            for (ns, these) in map {
                let these = with_name_label(&ns, these);
                labels.insert(ns, these);
            }
        } else {
            return Err(manifest.bad(
                "kind",
                format!("expected a Namespace, found {:?}", manifest.kind()),
            ));
        }
    }
    Ok(labels)
}
