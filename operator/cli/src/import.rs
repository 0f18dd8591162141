//! `agentgate import openshell [FILE] [--provider PROFILE]...`: converts an
//! OpenShell sandbox policy into an agentgate policy document, and with
//! provider profiles into the sandbox spec's `credentials` and `policy`,
//! printed as YAML (or JSON).

use std::path::PathBuf;

use clap::{Args, Subcommand, ValueEnum};
use serde::Serialize;
use serde_json::Value;

use crate::{EXIT_UNPROVEN, EXIT_USAGE, EXIT_WITHIN};
use agentgate_policy::compile::{Limits, Role, compile};
use agentgate_policy::credentials::{Credential, check as check_credentials};
use agentgate_policy::load::LoadError;
use agentgate_policy::load::parse_yaml;
use agentgate_policy::model::PolicyDocument;
use agentgate_policy::openshell::{import, import_provider};

/// Formats an import can print.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// YAML.
    Yaml,
    /// JSON.
    Json,
}

/// Import sources.
#[derive(Debug, Subcommand)]
pub enum ImportCommand {
    /// An OpenShell sandbox policy (version 1).
    Openshell(OpenshellArgs),
}

/// Arguments of `import openshell`.
#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("source").required(true).multiple(true).args(["file", "provider"]))]
pub struct OpenshellArgs {
    /// The OpenShell policy file.
    #[arg(value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// An OpenShell provider profile attached to the sandbox (repeatable):
    /// its credentials become the spec's `credentials`, read from the Secret
    /// `openshell-<profile id>`, one key per credential named like its first
    /// environment variable.
    #[arg(long, value_name = "PROFILE")]
    pub provider: Vec<PathBuf>,
    /// The sandbox working directory (needed when include_workdir is in effect).
    #[arg(long, value_name = "PATH")]
    pub workdir: Option<String>,
    /// Output format.
    #[arg(long, short = 'o', value_enum, default_value = "yaml")]
    pub output: Format,
}

/// What `import openshell --provider` prints: the AgentSandbox spec's
/// fields the imports fill.
#[derive(Debug, Serialize)]
struct SpecFields {
    credentials: Vec<Credential>,
    policy: PolicyDocument,
}

/// Reads and parses one input file, or prints why not and returns the exit
/// code.
fn read_yaml(path: &std::path::Path) -> Result<Value, u8> {
    let shown = path.display();
    let text = std::fs::read_to_string(path).map_err(|e| {
        eprintln!("agentgate import: {shown}: {e}");
        EXIT_USAGE
    })?;
    parse_yaml(&text, &Limits::default()).map_err(|e| match e {
        LoadError::Yaml(msg) => {
            eprintln!("agentgate import: {shown}: invalid YAML: {msg}");
            EXIT_USAGE
        }
        LoadError::Invalid(reason) => {
            eprintln!("agentgate import: {shown}: {reason}");
            EXIT_UNPROVEN
        }
    })
}

/// Runs `import` and returns the exit code.
pub fn run(cmd: &ImportCommand) -> u8 {
    let ImportCommand::Openshell(args) = cmd;
    match convert(args) {
        Ok(code) | Err(code) => code,
    }
}

fn convert(args: &OpenshellArgs) -> Result<u8, u8> {
    let mut policy = PolicyDocument::default();
    let mut notes = Vec::new();
    if let Some(file) = &args.file {
        let value = read_yaml(file)?;
        let imported = import(&value, args.workdir.as_deref()).map_err(|reason| {
            eprintln!("agentgate import: {}: {reason}", file.display());
            EXIT_UNPROVEN
        })?;
        policy = imported.policy;
        notes.extend(imported.notes);
    }
    let mut credentials = Vec::new();
    for profile in &args.provider {
        let value = read_yaml(profile)?;
        let id = value.get("id").and_then(Value::as_str).unwrap_or_default();
        let imported = import_provider(&value, &format!("openshell-{id}")).map_err(|reason| {
            eprintln!("agentgate import: {}: {reason}", profile.display());
            EXIT_UNPROVEN
        })?;
        credentials.extend(imported.credentials);
        policy.network.extend(imported.rules);
        notes.extend(
            imported
                .notes
                .into_iter()
                .map(|n| format!("{}: {n}", profile.display())),
        );
    }
    // The result must be a valid sandbox of ours; check before printing.
    let compiled = compile(&policy, Role::Sandbox, &Limits::default()).map_err(|reason| {
        eprintln!("agentgate import: the converted policy is invalid: {reason}");
        EXIT_UNPROVEN
    })?;
    if let Err(reason) = check_credentials("credentials", &credentials, &compiled, "policy.") {
        eprintln!("agentgate import: the converted credentials are invalid: {reason}");
        return Err(EXIT_UNPROVEN);
    }
    for note in &notes {
        eprintln!("note: {note}");
    }
    let rendered = if args.provider.is_empty() {
        render(&policy, args.output)
    } else {
        render(
            &SpecFields {
                credentials,
                policy,
            },
            args.output,
        )
    };
    match rendered {
        Ok(text) => {
            print!("{text}");
            if !text.ends_with('\n') {
                println!();
            }
            Ok(EXIT_WITHIN)
        }
        Err(e) => {
            eprintln!("agentgate import: cannot render the result: {e}");
            Err(EXIT_USAGE)
        }
    }
}

fn render<T: Serialize>(value: &T, format: Format) -> Result<String, String> {
    match format {
        Format::Yaml => serde_saphyr::to_string(value).map_err(|e| e.to_string()),
        Format::Json => serde_json::to_string_pretty(value).map_err(|e| e.to_string()),
    }
}
