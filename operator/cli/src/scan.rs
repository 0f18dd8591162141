//! `agentgate scan PATH`: build the information-flow graph of an agent's
//! source, analyse it, and print the findings as text, JSON, SARIF 2.1.0 or
//! an AgentScan manifest for `kubectl apply -f -` (docs/trifecta.md).

use std::path::PathBuf;

use clap::{Args, ValueEnum};

use super::{EXIT_EXCEEDS, EXIT_USAGE, EXIT_WITHIN};
use agentgate_trifecta::analyze;
use agentgate_trifecta::report::{ScanReport, agent_scan_manifest, json, sarif, scan_name, text};
use agentgate_trifecta::scan::scan_path;

/// Output of `scan`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ScanOutput {
    /// One line per finding with its fix, then the scanner's notes.
    Text,
    /// The graph, the findings and the notes as one JSON object.
    Json,
    /// SARIF 2.1.0, witness paths as code flows (for code-scanning UIs).
    Sarif,
    /// An AgentScan manifest (needs --image).
    Yaml,
}

/// Arguments of `scan`.
#[derive(Debug, Args)]
pub struct ScanArgs {
    /// The agent's source: a directory (with an optional agentgate.yaml) or one file.
    pub path: PathBuf,
    /// The image built from it, pinned by digest (name@sha256:<64 hex>).
    #[arg(long)]
    pub image: Option<String>,
    /// Output format.
    #[arg(short, long, value_enum, default_value_t = ScanOutput::Text)]
    pub output: ScanOutput,
    /// AgentScan name for -o yaml (default: derived from the image).
    #[arg(long)]
    pub name: Option<String>,
    /// Exit 1 when there is any finding (for CI gates).
    #[arg(long)]
    pub fail_on_findings: bool,
}

/// Runs `scan` and returns the exit code: 0, 1 (findings with
/// --fail-on-findings), 2 (the path cannot be scanned or the output cannot
/// be made).
pub fn run(args: &ScanArgs) -> u8 {
    let scan = match scan_path(&args.path) {
        Ok(scan) => scan,
        Err(e) => {
            eprintln!("agentgate scan: {e}");
            return EXIT_USAGE;
        }
    };
    let findings = match analyze(&scan.graph) {
        Ok(findings) => findings,
        Err(e) => {
            eprintln!("agentgate scan: the scanned graph is malformed (a bug): {e}");
            return EXIT_USAGE;
        }
    };
    let report = ScanReport {
        graph: &scan.graph,
        findings: &findings,
        notes: &scan.diagnostics,
        image: args.image.as_deref(),
    };
    let rendered = match args.output {
        ScanOutput::Text => Ok(text(&report)),
        ScanOutput::Json => Ok(format!("{:#}\n", json(&report))),
        ScanOutput::Sarif => Ok(format!("{:#}\n", sarif(&report))),
        ScanOutput::Yaml => {
            let name = args
                .name
                .clone()
                .or_else(|| args.image.as_deref().map(scan_name))
                .unwrap_or_default();
            agent_scan_manifest(&report, &name)
        }
    };
    match rendered {
        Ok(out) => print!("{out}"),
        Err(e) => {
            eprintln!("agentgate scan: {e}");
            return EXIT_USAGE;
        }
    }
    if args.output != ScanOutput::Text {
        // Keep stdout machine-readable; a person still sees the summary.
        eprintln!(
            "agentgate scan: {} file(s), {} tool(s), {} finding(s)",
            scan.files,
            report.tools(),
            findings.len()
        );
    }
    if args.fail_on_findings && !findings.is_empty() {
        EXIT_EXCEEDS
    } else {
        EXIT_WITHIN
    }
}
