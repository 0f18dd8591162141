//! The `kubectl agentgate` plugin binary (install it on PATH as `kubectl-agentgate`).

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    agentgate::cli::plugin::main(agentgate::cli::plugin::PluginCli::parse())
}
