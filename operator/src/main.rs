//! The `agentgate` binary.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("AGENTGATE_LOG").unwrap_or_else(|_| {
                tracing_subscriber::EnvFilter::new(
                    "warn,agentgate::controller=info,agentgate::cli=info,agentgate::webhook=info",
                )
            }),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    agentgate::cli::run(agentgate::cli::Cli::parse())
}
