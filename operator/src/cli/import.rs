//! `agentgate import openshell FILE`: converts an OpenShell sandbox policy
//! into an agentgate policy document, printed as YAML (or JSON).

use std::path::PathBuf;

use clap::{Args, Subcommand, ValueEnum};

use crate::cli::{EXIT_UNPROVEN, EXIT_USAGE, EXIT_WITHIN};
use agentgate_policy::compile::{Limits, Role, compile};
use agentgate_policy::load::LoadError;
use agentgate_policy::load::parse_yaml;
use agentgate_policy::openshell::import;

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
pub struct OpenshellArgs {
    /// The OpenShell policy file.
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// The sandbox working directory (needed when include_workdir is in effect).
    #[arg(long, value_name = "PATH")]
    pub workdir: Option<String>,
    /// Output format.
    #[arg(long, short = 'o', value_enum, default_value = "yaml")]
    pub output: Format,
}

/// Runs `import` and returns the exit code.
pub fn run(cmd: &ImportCommand) -> u8 {
    let ImportCommand::Openshell(args) = cmd;
    let path = args.file.display();
    let text = match std::fs::read_to_string(&args.file) {
        Ok(text) => text,
        Err(e) => {
            eprintln!("agentgate import: {path}: {e}");
            return EXIT_USAGE;
        }
    };
    let value = match parse_yaml(&text, &Limits::default()) {
        Ok(value) => value,
        Err(LoadError::Yaml(msg)) => {
            eprintln!("agentgate import: {path}: invalid YAML: {msg}");
            return EXIT_USAGE;
        }
        Err(LoadError::Invalid(reason)) => {
            eprintln!("agentgate import: {path}: {reason}");
            return EXIT_UNPROVEN;
        }
    };
    let imported = match import(&value, args.workdir.as_deref()) {
        Ok(imported) => imported,
        Err(reason) => {
            eprintln!("agentgate import: {path}: {reason}");
            return EXIT_UNPROVEN;
        }
    };
    // The result must be a valid policy of ours; check before printing.
    if let Err(reason) = compile(&imported.policy, Role::Sandbox, &Limits::default()) {
        eprintln!("agentgate import: {path}: the converted policy is invalid: {reason}");
        return EXIT_UNPROVEN;
    }
    for note in &imported.notes {
        eprintln!("note: {note}");
    }
    let rendered = match args.output {
        Format::Yaml => serde_saphyr::to_string(&imported.policy).map_err(|e| e.to_string()),
        Format::Json => serde_json::to_string_pretty(&imported.policy).map_err(|e| e.to_string()),
    };
    match rendered {
        Ok(text) => {
            print!("{text}");
            if !text.ends_with('\n') {
                println!();
            }
            EXIT_WITHIN
        }
        Err(e) => {
            eprintln!("agentgate import: cannot render the policy: {e}");
            EXIT_USAGE
        }
    }
}
