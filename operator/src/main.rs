//! The `agentgate` binary.

use std::process::ExitCode;

use clap::Parser;

/// jemalloc, not glibc's malloc, for the whole process: Z3 (C++) allocates
/// through `malloc` too, and jemalloc here also provides that symbol. After
/// a re-verification storm glibc kept about 450 MB of which about 140 MB
/// was in use (its arenas give back freed pages only from their top), so
/// the operator idled at its storm peak; jemalloc's background threads
/// return freed pages after a decay of a few seconds.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

// Seen by rustc, so that its `malloc` and `free` replace glibc's for C and
// C++ code too.
use tikv_jemalloc_sys as _;

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("AGENTGATE_LOG").unwrap_or_else(|_| {
                tracing_subscriber::EnvFilter::new(
                    "warn,agentgate::runtime=info,agentgate_controller=info,agentgate_cli=info,agentgate_webhook=info",
                )
            }),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    agentgate::runtime::run(agentgate::runtime::Cli::parse())
}
