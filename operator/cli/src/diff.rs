//! `agentgate diff`: what a candidate adds over the current policy (concrete
//! example actions) and what that costs under the budget weights.

use std::path::PathBuf;

use clap::Args;
use serde_json::json;

use crate::{EXIT_UNPROVEN, EXIT_USAGE, EXIT_WITHIN, FileProblem, Output, load_file, timeout};
use agentgate_governance::budget::delta_cost;
use agentgate_policy::compile::{Limits, Role};
use agentgate_policy::model::CostWeights;
use agentgate_prover::{Prover, ProverOptions};

/// Arguments of `diff`.
#[derive(Debug, Args)]
pub struct DiffArgs {
    /// The current policy (bare document or manifest).
    #[arg(value_name = "CURRENT")]
    pub current: PathBuf,
    /// The candidate policy.
    #[arg(value_name = "CANDIDATE")]
    pub candidate: PathBuf,
    /// Output format.
    #[arg(long, short = 'o', value_enum, default_value = "text")]
    pub output: Output,
    /// How many distinct example actions to show.
    #[arg(long, default_value_t = 3)]
    pub examples: usize,
    /// Price the delta with this MaximumPolicy's budget weights (default weights otherwise).
    #[arg(long = "weights-from", value_name = "MAXIMUM")]
    pub weights_from: Option<PathBuf>,
    /// Per-check solver timeout in milliseconds.
    #[arg(long = "timeout-ms", default_value_t = 5000)]
    pub timeout_ms: u64,
}

/// Runs `diff` and returns the exit code.
pub fn run(args: &DiffArgs) -> u8 {
    let limits = Limits::default();
    // Diff compares authority; it accepts anything a maximum may contain.
    let load = |path: &PathBuf| match load_file(path, Role::Maximum, &limits) {
        Ok(pair) => Ok(pair),
        Err(FileProblem::Usage(msg)) => Err((EXIT_USAGE, msg)),
        Err(FileProblem::Reason(reason)) => {
            Err((EXIT_UNPROVEN, format!("{}: {reason}", path.display())))
        }
    };
    let loaded = load(&args.current).and_then(|c| load(&args.candidate).map(|n| (c, n)));
    let weights = match &args.weights_from {
        None => Ok(CostWeights::default()),
        Some(path) => load(path).map(|(doc, _)| doc.budget.map(|b| b.weights).unwrap_or_default()),
    };
    let (((current_doc, current), (candidate_doc, candidate)), weights) =
        match loaded.and_then(|l| weights.map(|w| (l, w))) {
            Ok(all) => all,
            Err((code, msg)) => {
                eprintln!("agentgate diff: {msg}");
                return code;
            }
        };
    let prover = Prover::new(ProverOptions {
        timeout: timeout(args.timeout_ms),
        ..ProverOptions::default()
    });
    let found = prover.new_authority(&candidate.policy, &current.policy, args.examples);
    let cost = delta_cost(&current_doc.policy, &candidate_doc.policy, &weights);
    match args.output {
        Output::Json => {
            let value = json!({
                "newAuthority": found.examples,
                "cost": cost.total,
                "costBreakdown": cost.breakdown,
            });
            println!("{value}");
        }
        Output::Text => {
            if found.examples.is_empty() {
                println!("no new authority");
            } else {
                println!(
                    "new authority ({} example{}):",
                    found.examples.len(),
                    if found.examples.len() == 1 { "" } else { "s" }
                );
                for a in &found.examples {
                    println!("  {a}");
                }
            }
            println!("cost {}", cost.total);
            for item in &cost.breakdown {
                println!("  +{} {}", item.weight, item.item);
            }
        }
    }
    if let Some(reason) = found.incomplete {
        eprintln!("agentgate diff: the new-authority search is incomplete: {reason}");
        return EXIT_UNPROVEN;
    }
    EXIT_WITHIN
}
