#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a panic is a failed test
//! Bad input, bounded (`make fuzz` runs the same drivers for a time
//! budget): every admission endpoint and `/v1/decide`, driven in process
//! through the webhook's axum router with mutated real requests, answers
//! without panicking and with a well-formed answer that refuses garbage
//! with a reason; mutated policy documents through load, compile and prove
//! never panic and every refusal names its field.

use std::panic::{AssertUnwindSafe, catch_unwind};

use agentgate_prover::Prover;
use agentgate_tests::fuzz::{
    MUTATIONS, Mutation, Rng, Webhook, check_policy, decide_seed, mutate, mutate_yaml, org_ceiling,
    policy_seeds, seeds,
};
use axum::http::StatusCode;

#[test]
fn the_seeds_themselves_are_answered() {
    let webhook = Webhook::new();
    let answers: Vec<(bool, String)> = seeds()
        .into_iter()
        .map(|(endpoint, seed)| {
            webhook
                .check_admission(endpoint, seed.clone())
                .unwrap_or_else(|e| panic!("{endpoint}: {e}"));
            webhook.admission_answer(endpoint, seed).unwrap()
        })
        .collect();
    // The whole path runs: the example sandbox is proved inside the org
    // ceiling; widened to any host it is refused with the counterexample;
    // alice may not write its status; dropping the namespace's team label
    // would take it out of the ceiling and needs the approve verb.
    assert!(answers[0].0, "{:?}", answers[0]);
    assert!(
        !answers[1].0
            && answers[1]
                .1
                .contains("exceeds MaximumPolicy \"org-ceiling\""),
        "{:?}",
        answers[1]
    );
    assert!(
        !answers[2].0 && answers[2].1.contains("only the agentgate operator"),
        "{:?}",
        answers[2]
    );
    assert!(
        !answers[8].0 && answers[8].1.contains("approve"),
        "{:?}",
        answers[8]
    );
    webhook.check_decide(decide_seed()).unwrap();
}

#[test]
fn every_mutation_of_every_admission_request_gets_a_well_formed_answer() {
    let webhook = Webhook::new();
    let seeds = seeds();
    let mut rng = Rng::new(0x5eed);
    let mut failures = Vec::new();
    // Each mutation of each seed a few times, with different randomness.
    for (endpoint, seed) in &seeds {
        for mutation in MUTATIONS {
            for _ in 0..3 {
                let (to, body) = mutate(endpoint, seed, mutation, &mut rng);
                let outcome = catch_unwind(AssertUnwindSafe(|| webhook.check_admission(to, body)));
                match outcome {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => failures.push(format!("{endpoint} {mutation:?} → {to}: {e}")),
                    Err(_) => failures.push(format!("{endpoint} {mutation:?} → {to}: panicked")),
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn garbage_is_refused_with_a_reason() {
    let webhook = Webhook::new();
    for body in [
        &b""[..],
        b"{",
        b"null",
        b"[]",
        b"{\"request\": 7}",
        b"\xff\xfe",
    ] {
        let (status, answer) = webhook.send("/validate/agentsandboxes", body.to_vec(), None);
        assert_eq!(status, StatusCode::OK);
        let review: serde_json::Value = serde_json::from_slice(&answer).unwrap();
        assert_eq!(review["kind"], "AdmissionReview", "{review}");
        assert_eq!(review["response"]["allowed"], false, "{review}");
        assert!(
            !review["response"]["status"]["message"]
                .as_str()
                .unwrap()
                .is_empty(),
            "{review}"
        );
    }
    // Larger than any AdmissionReview the API server sends: refused, with
    // the reason, not dropped.
    let (status, answer) = webhook.send("/validate/maximumpolicies", vec![b' '; 9 << 20], None);
    assert_eq!(status, StatusCode::OK);
    let review: serde_json::Value = serde_json::from_slice(&answer).unwrap();
    assert_eq!(review["response"]["allowed"], false, "{review}");
}

#[test]
fn decide_answers_every_mutation_with_a_decision() {
    let webhook = Webhook::new();
    let seed = decide_seed();
    let mut rng = Rng::new(7);
    for mutation in MUTATIONS {
        if mutation == Mutation::WrongEndpoint {
            continue;
        }
        for _ in 0..4 {
            let (_, body) = mutate("/v1/decide", &seed, mutation, &mut rng);
            webhook
                .check_decide(body)
                .unwrap_or_else(|e| panic!("{mutation:?}: {e}"));
        }
    }
    // Without a token: 401, whatever the body.
    let (status, _) = webhook.send("/v1/decide", seed, None);
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

#[test]
fn mutated_policies_load_compile_and_prove_without_panic() {
    let prover = Prover::default();
    let ceiling = org_ceiling();
    let mut rng = Rng::new(42);
    let mut failures = Vec::new();
    for seed in policy_seeds() {
        for _ in 0..60 {
            let text = mutate_yaml(&seed, &mut rng);
            match catch_unwind(AssertUnwindSafe(|| check_policy(&text, &prover, &ceiling))) {
                Ok(Ok(())) => {}
                Ok(Err(e)) => failures.push(format!(
                    "{e}\n--- input (first 300 bytes):\n{}",
                    &text[..text.floor_char_boundary(300)]
                )),
                Err(_) => failures.push(format!(
                    "panicked on:\n{}",
                    &text[..text.floor_char_boundary(300)]
                )),
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}
