//! The naive baseline encoding, kept only so `make bench` can show what the
//! signature encoding buys: every glob compiled character by character to a
//! Z3 regular expression (`*` as "not the separator" starred) over string
//! variables, as simple prototypes do. It ignores canonical form and is never
//! used for verdicts.

use std::time::{Duration, Instant};

use z3::ast::{Bool, Int, Regexp, String as ZString};
use z3::{Config, SatResult, Solver, with_z3_config};

use agentgate_policy::compile::{CompiledEntry, CompiledPolicy, EndpointKind, MethodSet};
use agentgate_policy::glob::{Glob, GlobKind, Token};

/// The baseline's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NaiveOutcome {
    /// unsat.
    Within,
    /// sat.
    Exceeds,
    /// Timeout or unknown.
    Unknown,
}

fn regex(glob: &Glob) -> Regexp {
    let separator = match glob.kind() {
        GlobKind::Host => ".",
        GlobKind::Path | GlobKind::Binary => "/",
    };
    let not_separator = Regexp::allchar().diff(Regexp::literal(separator));
    let parts: Vec<Regexp> = glob
        .tokens()
        .iter()
        .map(|t| match t {
            Token::Literal(c) => Regexp::literal(&(*c as char).to_string()),
            Token::Star => not_separator.star(),
            Token::AnyString => Regexp::full(),
            Token::Segments => Regexp::concat(&[not_separator.star(), Regexp::literal("/")]).star(),
        })
        .collect();
    match parts.len() {
        0 => Regexp::literal(""),
        1 => parts[0].clone(),
        _ => Regexp::concat(&parts),
    }
}

struct Vars {
    binary: ZString,
    host: ZString,
    path: ZString,
    method: ZString,
    port: Int,
    rest: Bool,
}

fn or(terms: Vec<Bool>) -> Bool {
    if terms.is_empty() {
        Bool::from_bool(false)
    } else {
        Bool::or(&terms)
    }
}

fn and(terms: Vec<Bool>) -> Bool {
    if terms.is_empty() {
        Bool::from_bool(true)
    } else {
        Bool::and(&terms)
    }
}

fn methods(v: &Vars, set: &MethodSet) -> Bool {
    match set {
        MethodSet::Any => Bool::from_bool(true),
        MethodSet::Only(m) => or(m
            .iter()
            .map(|m| v.method.eq(ZString::from(m.as_str())))
            .collect()),
    }
}

fn entry(v: &Vars, e: &CompiledEntry) -> Bool {
    let mut terms = vec![methods(v, &e.methods)];
    if let Some(p) = &e.path {
        terms.push(v.path.regex_matches(&regex(p)));
    }
    and(terms)
}

fn allows(v: &Vars, policy: &CompiledPolicy) -> Bool {
    let mut allow = Vec::new();
    let mut deny = Vec::new();
    for rule in &policy.rules {
        let binary_ok = if rule.binaries.is_empty() {
            Bool::from_bool(true)
        } else {
            or(rule
                .binaries
                .iter()
                .map(|b| v.binary.regex_matches(&regex(b)))
                .collect())
        };
        for e in &rule.endpoints {
            let connection = and(vec![
                binary_ok.clone(),
                v.host.regex_matches(&regex(&e.host)),
                or(e.ports
                    .iter()
                    .map(|&p| v.port.eq(Int::from_u64(p as u64)))
                    .collect()),
            ]);
            match &e.kind {
                EndpointKind::L4 => allow.push(connection),
                EndpointKind::Rest {
                    scope,
                    allow: entries,
                    deny: denies,
                } => {
                    let mut terms = vec![connection.clone(), v.rest.clone()];
                    if let Some(s) = scope {
                        terms.push(v.path.regex_matches(&regex(s)));
                    }
                    terms.push(or(entries.iter().map(|e| entry(v, e)).collect()));
                    allow.push(and(terms));
                    deny.push(and(vec![
                        connection,
                        v.rest.clone(),
                        or(denies.iter().map(|e| entry(v, e)).collect()),
                    ]));
                }
                // No network action is allowed or denied by an mcp endpoint.
                // The baseline models neither queries nor upgrades
                // (docs/policy-semantics.md §10): benchmarks give it none.
                EndpointKind::Mcp(_) | EndpointKind::Websocket { .. } => {}
            }
        }
    }
    and(vec![or(allow), or(deny).not()])
}

/// Network containment with the naive encoding; returns the answer and the
/// wall-clock time it took.
pub fn naive_containment(
    candidate: &CompiledPolicy,
    maximum: &CompiledPolicy,
    timeout: Duration,
) -> (NaiveOutcome, Duration) {
    let started = Instant::now();
    let mut cfg = Config::new();
    cfg.set_timeout_msec(timeout.as_millis() as u64);
    let outcome = with_z3_config(&cfg, || {
        let solver = Solver::new();
        let v = Vars {
            binary: ZString::new_const("binary"),
            host: ZString::new_const("host"),
            path: ZString::new_const("path"),
            method: ZString::new_const("method"),
            port: Int::new_const("port"),
            rest: Bool::new_const("rest"),
        };
        solver.assert(v.port.ge(Int::from_u64(1)));
        solver.assert(v.port.le(Int::from_u64(65535)));
        solver.assert(allows(&v, candidate));
        solver.assert(allows(&v, maximum).not());
        match solver.check() {
            SatResult::Sat => NaiveOutcome::Exceeds,
            SatResult::Unsat => NaiveOutcome::Within,
            SatResult::Unknown => NaiveOutcome::Unknown,
        }
    });
    (outcome, started.elapsed())
}
