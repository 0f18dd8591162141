//! `agentgate verify --maximum M... CANDIDATE`: containment of one
//! candidate (a bare policy or an AgentSandbox) in explicitly named
//! maximums, whatever their selectors, plus the maximums' invariants.

use std::path::Path;

use serde_json::json;

use crate::verify::{Format, VerifyArgs};
use crate::{
    EXIT_EXCEEDS, EXIT_UNPROVEN, EXIT_USAGE, EXIT_WITHIN, FileProblem, load_file, timeout,
};
use agentgate_policy::action::Action;
use agentgate_policy::compile::{Limits, Role};
use agentgate_policy::error::Reason;
use agentgate_prover::{Outcome, Prover, ProverOptions};

/// What verify found.
struct Report {
    outcome: Outcome,
    maximum: Option<String>,
    invariant: Option<(String, Option<String>)>,
    solver_millis: f64,
    checks: usize,
}

fn unproven(reason: Reason, maximum: Option<String>) -> Report {
    Report {
        outcome: Outcome::from_reason(reason),
        maximum,
        invariant: None,
        solver_millis: 0.0,
        checks: 0,
    }
}

fn check(args: &VerifyArgs, candidate: &Path) -> Result<Report, String> {
    let limits = Limits::default();
    let candidate = match load_file(candidate, Role::Sandbox, &limits) {
        Ok((_, compiled)) => compiled,
        Err(FileProblem::Usage(msg)) => return Err(msg),
        Err(FileProblem::Reason(reason)) => return Ok(unproven(reason, None)),
    };
    let mut maximums = Vec::new();
    for path in &args.maximums {
        match load_file(path, Role::Maximum, &limits) {
            Ok((loaded, compiled)) => {
                let name = loaded
                    .name
                    .clone()
                    .unwrap_or_else(|| path.display().to_string());
                maximums.push((name, compiled));
            }
            Err(FileProblem::Usage(msg)) => return Err(msg),
            Err(FileProblem::Reason(reason)) => {
                return Ok(unproven(reason, Some(path.display().to_string())));
            }
        }
    }
    let prover = Prover::new(ProverOptions {
        timeout: timeout(args.timeout_ms),
        ..ProverOptions::default()
    });
    let mut total = 0.0;
    let mut checks = 0;
    for (name, maximum) in &maximums {
        let proof = prover.containment(&candidate.policy, &maximum.policy);
        total += proof.solver_millis;
        checks += 1;
        if proof.outcome != Outcome::Within {
            return Ok(Report {
                outcome: proof.outcome,
                maximum: Some(name.clone()),
                invariant: None,
                solver_millis: total,
                checks,
            });
        }
    }
    for (name, maximum) in &maximums {
        for inv in &maximum.invariants {
            let proof = prover.intersection(&candidate.policy, &inv.region);
            total += proof.solver_millis;
            checks += 1;
            if proof.outcome != Outcome::Within {
                return Ok(Report {
                    outcome: proof.outcome,
                    maximum: Some(name.clone()),
                    invariant: Some((inv.name.clone(), inv.reason.clone())),
                    solver_millis: total,
                    checks,
                });
            }
        }
    }
    Ok(Report {
        outcome: Outcome::Within,
        maximum: (maximums.len() == 1).then(|| maximums[0].0.clone()),
        invariant: None,
        solver_millis: total,
        checks,
    })
}

fn counterexample_json(action: &Action) -> serde_json::Value {
    serde_json::to_value(action).unwrap_or(serde_json::Value::Null)
}

fn print_text(report: &Report, maximums: usize) {
    let max = report.maximum.as_deref().unwrap_or("");
    match &report.outcome {
        Outcome::Within => {
            if maximums == 1 {
                println!("within maximum {max}");
            } else {
                println!("within all {maximums} maximums");
            }
            println!(
                "proved in {:.1} ms ({} checks)",
                report.solver_millis, report.checks
            );
        }
        Outcome::Exceeds { counterexample } => {
            match &report.invariant {
                Some((name, Some(why))) => {
                    println!("exceeds maximum {max}: violates invariant {name} ({why})")
                }
                Some((name, None)) => println!("exceeds maximum {max}: violates invariant {name}"),
                None => println!("exceeds maximum {max}"),
            }
            println!("{counterexample}");
        }
        Outcome::Unsupported { reason } | Outcome::Inconclusive { reason } => {
            let whose = match &report.maximum {
                Some(m) => format!(" (maximum {m})"),
                None => String::new(),
            };
            println!("{}{whose}", report.outcome.name());
            println!("{reason}");
        }
    }
}

/// Runs the single-candidate form and returns the exit code.
pub fn run(args: &VerifyArgs) -> u8 {
    let [candidate] = args.paths.as_slice() else {
        eprintln!(
            "agentgate verify: with --maximum, give exactly one candidate file (without --maximum, verify takes files, directories and - and finds the governing maximums itself)"
        );
        return EXIT_USAGE;
    };
    if !matches!(args.output, Format::Text | Format::Json) {
        eprintln!("agentgate verify: with --maximum, the output is text or json");
        return EXIT_USAGE;
    }
    let report = match check(args, candidate) {
        Ok(report) => report,
        Err(msg) => {
            eprintln!("agentgate verify: {msg}");
            return EXIT_USAGE;
        }
    };
    match args.output {
        Format::Text | Format::Junit | Format::Sarif => print_text(&report, args.maximums.len()),
        Format::Json => {
            let value = json!({
                "result": report.outcome.name(),
                "maximum": report.maximum,
                "counterexample": report.outcome.counterexample().map(counterexample_json),
                "reason": report.outcome.reason(),
                "solverMillis": (report.solver_millis * 1000.0).round() / 1000.0,
            });
            println!("{value}");
        }
    }
    match report.outcome {
        Outcome::Within => EXIT_WITHIN,
        Outcome::Exceeds { .. } => EXIT_EXCEEDS,
        Outcome::Unsupported { .. } | Outcome::Inconclusive { .. } => EXIT_UNPROVEN,
    }
}
