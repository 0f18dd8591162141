//! The `agentgate` command line. Each subcommand is a thin shell around the
//! pure core; exit codes follow docs/policy-semantics.md §5.

pub mod controller;
pub mod crds;
pub mod diff;
pub mod export;
pub mod import;
pub mod lineage;
pub mod manifests;
pub mod plugin;
pub mod scan;
pub mod verify;
pub mod webhook;

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};

use agentgate_api::documents::load_document;
use agentgate_policy::compile::{Limits, Role};
use agentgate_policy::error::Reason;
use agentgate_policy::load::{CompiledDocument, LoadError, LoadedDocument};

/// Exit code: proved within / success.
pub const EXIT_WITHIN: u8 = 0;
/// Exit code: exceeds, with a counterexample.
pub const EXIT_EXCEEDS: u8 = 1;
/// Exit code: usage or I/O error.
pub const EXIT_USAGE: u8 = 2;
/// Exit code: unsupported or inconclusive.
pub const EXIT_UNPROVEN: u8 = 3;

/// agentgate: prove that AI-agent policies stay inside their maximums.
#[derive(Debug, Parser)]
#[command(name = "agentgate", version, about, long_about = None)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Output format of verify and diff.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// Human-readable lines.
    Text,
    /// One JSON object (stable shape, see docs/cli.md).
    Json,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Prove that a candidate policy stays inside every given maximum.
    Verify(verify::VerifyArgs),
    /// Show the new authority a candidate adds over the current policy, and its cost.
    Diff(diff::DiffArgs),
    /// Convert another policy format into an agentgate policy document.
    #[command(subcommand)]
    Import(import::ImportCommand),
    /// Print the CustomResourceDefinitions (YAML) for `kubectl apply -f -`.
    Crds,
    /// Find lethal-trifecta risks in an agent's source; print them, SARIF or an AgentScan.
    Scan(scan::ScanArgs),
    /// Run the reconcilers against the cluster in KUBECONFIG.
    Controller(controller::ControllerArgs),
    /// Serve only the admission webhook and /v1/decide (every replica serves).
    Webhook(webhook::WebhookCommandArgs),
}

/// Runs the parsed command line.
pub fn run(cli: Cli) -> ExitCode {
    let code = match cli.command {
        Command::Verify(args) => verify::run(&args),
        Command::Diff(args) => diff::run(&args),
        Command::Import(cmd) => import::run(&cmd),
        Command::Crds => crds::run(),
        Command::Scan(args) => scan::run(&args),
        Command::Controller(args) => controller::run(&args),
        Command::Webhook(args) => webhook::run(&args),
    };
    ExitCode::from(code)
}

/// A policy file that could not be used.
pub enum FileProblem {
    /// Unreadable or not YAML: a usage error (exit 2).
    Usage(String),
    /// Readable, but outside the model (exit 3, reported as a result).
    Reason(Reason),
}

/// Reads, parses and compiles a policy file.
pub fn load_file(
    path: &Path,
    role: Role,
    limits: &Limits,
) -> Result<(LoadedDocument, CompiledDocument), FileProblem> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| FileProblem::Usage(format!("{}: {e}", path.display())))?;
    let loaded = load_document(&text, limits).map_err(|e| match e {
        LoadError::Yaml(msg) => {
            FileProblem::Usage(format!("{}: invalid YAML: {msg}", path.display()))
        }
        LoadError::Invalid(reason) => FileProblem::Reason(reason),
    })?;
    let compiled = loaded.compile(role, limits).map_err(FileProblem::Reason)?;
    Ok((loaded, compiled))
}

/// Parses `--timeout-ms`.
pub fn timeout(ms: u64) -> Duration {
    Duration::from_millis(ms.max(1))
}
