//! The `agentgate` binary's composition root: the command line, with the
//! offline commands of [`crate::cli`] and the two long-running roles wired
//! here, the reconcilers (`agentgate controller`, which also serves the
//! webhook) and the webhook server alone (`agentgate webhook`). Only this
//! module names both the controllers and the webhook
//! (tests/tests/crate_graph.rs checks it).

pub mod controller;
pub mod webhook;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::cli::{crds, diff, import, scan, verify};

/// agentgate: prove that AI-agent policies stay inside their maximums.
#[derive(Debug, Parser)]
#[command(name = "agentgate", version, about, long_about = None)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
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
