//! `make fuzz`: the bad-input drivers of `tests/tests/bad_input.rs`, each
//! run for a fixed time budget with fresh randomness, printing executions
//! and failures per target. A failing input is written to
//! `target/fuzz-failures/` and the run exits 1.
//!
//!   fuzz [--seconds N] [--seed S]     (N per target, default 600)

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use agentgate_prover::{Prover, ProverOptions};
use agentgate_tests::fuzz::{
    ENDPOINTS, MUTATIONS, Mutation, Rng, Webhook, check_policy, decide_seed, mutate, mutate_yaml,
    org_ceiling, policy_seeds, seeds,
};

fn flag(args: &[String], name: &str) -> Option<u64> {
    let i = args.iter().position(|a| a == name)?;
    match args.get(i + 1).map(|v| v.parse()) {
        Some(Ok(v)) => Some(v),
        _ => {
            eprintln!("fuzz: {name} needs a number");
            std::process::exit(2);
        }
    }
}

/// Runs `one` until `budget` is spent; returns (executions, failures).
fn run(
    name: &str,
    budget: Duration,
    rng: &mut Rng,
    mut one: impl FnMut(&mut Rng) -> (Vec<u8>, Result<(), String>),
) -> (u64, u64) {
    let started = Instant::now();
    let (mut executions, mut failures) = (0u64, 0u64);
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/fuzz-failures");
    while started.elapsed() < budget {
        executions += 1;
        let (input, outcome) = one(rng);
        if let Err(e) = outcome {
            failures += 1;
            let _ = std::fs::create_dir_all(&dir);
            let file = dir.join(format!("{name}-{failures}.bin"));
            let _ = std::fs::write(&file, &input);
            eprintln!("fuzz {name}: FAILURE ({}): {e}", file.display());
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "{name:<10} {executions:>9} executions  {:>8.0}/s  {failures} failures  ({seconds:.0} s)",
        executions as f64 / seconds
    );
    (executions, failures)
}

fn guarded(f: impl FnOnce() -> Result<(), String>) -> Result<(), String> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| Err("panicked".into()))
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let budget = Duration::from_secs(flag(&args, "--seconds").unwrap_or(600));
    let seed = flag(&args, "--seed").unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    });
    println!("fuzz: {} s per target, seed {seed}", budget.as_secs());
    let mut rng = Rng::new(seed);
    let webhook = Webhook::new();
    let admission_seeds = seeds();
    let decide = decide_seed();
    let policies = policy_seeds();
    let ceiling = org_ceiling();
    let prover = Prover::new(ProverOptions {
        timeout: Duration::from_secs(2),
        ..ProverOptions::default()
    });
    let mut failed = 0;
    failed += run("admission", budget, &mut rng, |rng| {
        let (endpoint, seed) = &admission_seeds[rng.below(admission_seeds.len())];
        let mut body = seed.clone();
        let mut to = *endpoint;
        // One to three mutations stacked.
        for _ in 0..=rng.below(3) {
            let mutation = MUTATIONS[rng.below(MUTATIONS.len())];
            (to, body) = mutate(to, &body, mutation, rng);
        }
        let sent = body.clone();
        (sent, guarded(|| webhook.check_admission(to, body)))
    })
    .1;
    failed += run("decide", budget, &mut rng, |rng| {
        let mut body = decide.clone();
        for _ in 0..=rng.below(3) {
            let mutation = MUTATIONS[rng.below(MUTATIONS.len())];
            if mutation != Mutation::WrongEndpoint {
                (_, body) = mutate(ENDPOINTS[0], &body, mutation, rng);
            }
        }
        let sent = body.clone();
        (sent, guarded(|| webhook.check_decide(body)))
    })
    .1;
    failed += run("policy", budget, &mut rng, |rng| {
        let mut text = policies[rng.below(policies.len())].clone();
        for _ in 0..=rng.below(3) {
            text = mutate_yaml(&text, rng);
        }
        let outcome = guarded(|| check_policy(&text, &prover, &ceiling));
        (text.into_bytes(), outcome)
    })
    .1;
    if failed > 0 {
        eprintln!("fuzz: {failed} failures");
        std::process::exit(1);
    }
}
