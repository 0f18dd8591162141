//! The `agentgate` binary.

use std::process::ExitCode;

use clap::Parser;

/// jemalloc, not glibc's malloc: after a re-verification storm glibc kept
/// about 450 MB of which about 140 MB was in use (its arenas return freed
/// pages only from their top), so the operator idled at its storm peak.
/// jemalloc returns dirty pages to the system after a decay, which its
/// background thread runs while the operator is idle.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

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
    // Without its background thread jemalloc purges only when something
    // allocates, so an idle operator would keep its peak.
    if let Err(e) = tikv_jemalloc_ctl::background_thread::write(true) {
        tracing::warn!(error = %e, "jemalloc's background thread could not be started; freed memory is returned only while the operator allocates");
    }
    agentgate::cli::run(agentgate::cli::Cli::parse())
}
