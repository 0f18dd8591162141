#![warn(missing_docs)]
//! The `agentgate` command line's offline commands (verify, diff, export,
//! import, scan, crds) and the `kubectl agentgate` plugin: each a thin
//! shell around the pure core, reading files or the cluster but running
//! no controller or server (those are `crate::runtime`'s). Exit codes
//! follow docs/policy-semantics.md §5.

pub mod crds;
pub mod diff;
pub mod export;
pub mod import;
pub mod lineage;
pub mod manifests;
pub mod plugin;
pub mod scan;
pub mod verify;

use std::path::Path;
use std::time::Duration;

use clap::ValueEnum;

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

/// Output format of verify and diff.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// Human-readable lines.
    Text,
    /// One JSON object (stable shape, see docs/cli.md).
    Json,
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
