//! The prover: containment, new authority and region intersection of
//! policies (docs/policy-semantics.md §5), answered with Z3 over a propositional
//! encoding (the `encode` and `automaton` modules), every counterexample replayed
//! through the runtime matcher before it is reported.
//!
//! It answers logical questions only: the governance crate's verdict
//! composes those answers into Apply, Ask or Reject (docs/design.md §4)
//! behind its proof engine trait. This is the only crate that links Z3.
//!
//! Each check gets a fresh Z3 solver and a deadline, so a hard case cannot
//! block its caller and a long-running process does not slow down.

#![warn(missing_docs)]

mod arguments;
mod automaton;
pub mod cache;
mod encode;
pub mod naive;

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use agentgate_policy::action::Action;
use agentgate_policy::compile::{CompiledPolicy, CompiledRegion, EndpointKind};
use agentgate_policy::error::{Reason, ReasonCode};
use agentgate_policy::matcher::{allows, region_holds};
use agentgate_policy::names::NameGlob;
pub use encode::{Question, Search, SearchEnd};

/// The four answers of §5.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", tag = "result")]
pub enum Outcome {
    /// Proved: no action separates the policies.
    Within,
    /// A replayed counterexample.
    Exceeds {
        /// The action the candidate allows and the maximum does not.
        counterexample: Action,
    },
    /// The input is outside the model.
    Unsupported {
        /// Why.
        reason: Reason,
    },
    /// The proof could not be completed.
    Inconclusive {
        /// Why.
        reason: Reason,
    },
}

impl Outcome {
    /// `within`, `exceeds`, `unsupported` or `inconclusive`.
    pub fn name(&self) -> &'static str {
        match self {
            Outcome::Within => "within",
            Outcome::Exceeds { .. } => "exceeds",
            Outcome::Unsupported { .. } => "unsupported",
            Outcome::Inconclusive { .. } => "inconclusive",
        }
    }

    /// The reason, for Unsupported and Inconclusive.
    pub fn reason(&self) -> Option<&Reason> {
        match self {
            Outcome::Unsupported { reason } | Outcome::Inconclusive { reason } => Some(reason),
            _ => None,
        }
    }

    /// The counterexample, for Exceeds.
    pub fn counterexample(&self) -> Option<&Action> {
        match self {
            Outcome::Exceeds { counterexample } => Some(counterexample),
            _ => None,
        }
    }

    /// A result from a reason code: Unsupported or Inconclusive as §5 says.
    pub fn from_reason(reason: Reason) -> Outcome {
        if reason.code.is_unsupported() {
            Outcome::Unsupported { reason }
        } else {
            Outcome::Inconclusive { reason }
        }
    }
}

/// An outcome with the time the solver work took.
#[derive(Debug, Clone, PartialEq)]
pub struct Proof {
    /// The answer.
    pub outcome: Outcome,
    /// Wall-clock milliseconds of the check (automata + solver + replay).
    pub solver_millis: f64,
    /// True when the answer came from the cache.
    pub cached: bool,
}

/// New authority: example actions a candidate allows beyond the current policy.
#[derive(Debug, Clone, PartialEq)]
pub struct NewAuthority {
    /// Up to k distinct replayed examples.
    pub examples: Vec<Action>,
    /// `None` when complete: either no more examples exist or k were found.
    /// `Some` when the search could not be completed (fail closed: treat the
    /// delta as adding unknown authority).
    pub incomplete: Option<Reason>,
    /// Milliseconds.
    pub solver_millis: f64,
}

/// Prover settings.
#[derive(Debug, Clone, Copy)]
pub struct ProverOptions {
    /// Per-check deadline.
    pub timeout: Duration,
    /// Largest automaton per dimension.
    pub max_states: usize,
    /// Cached answers kept (0 disables the cache).
    pub cache_entries: usize,
}

impl Default for ProverOptions {
    fn default() -> Self {
        ProverOptions {
            timeout: Duration::from_secs(5),
            max_states: 200_000,
            cache_entries: 4096,
        }
    }
}

/// The prover. Cheap to clone (the cache is shared).
#[derive(Clone)]
pub struct Prover {
    options: ProverOptions,
    cache: Arc<cache::Cache<Outcome>>,
}

impl Default for Prover {
    fn default() -> Self {
        Prover::new(ProverOptions::default())
    }
}

/// True when some rule of the policy has an `mcp` endpoint.
fn has_mcp(policy: &CompiledPolicy) -> bool {
    policy
        .rules
        .iter()
        .flat_map(|r| &r.endpoints)
        .any(|e| matches!(e.kind, EndpointKind::Mcp(_)))
}

/// Checks that an example is canonical and that the matcher agrees with the
/// solver about it; otherwise the answer is Inconclusive(invalid_witness).
fn replay(question: &Question<'_>, action: &Action) -> Result<(), Reason> {
    let invalid = |why: String| {
        Reason::general(
            ReasonCode::InvalidWitness,
            format!("counterexample {action} failed replay: {why}"),
        )
    };
    action
        .check_canonical()
        .map_err(|e| invalid(e.to_string()))?;
    if let Some(i) = question.positive.iter().position(|p| !allows(p, action)) {
        return Err(invalid(format!("positive policy {i} does not allow it")));
    }
    if let Some(i) = question.negative.iter().position(|p| allows(p, action)) {
        return Err(invalid(format!("negative policy {i} allows it")));
    }
    if let Some(i) = question
        .regions
        .iter()
        .position(|r| !region_holds(r, action))
    {
        return Err(invalid(format!("region {i} does not contain it")));
    }
    Ok(())
}

impl Prover {
    /// A prover with these options.
    pub fn new(options: ProverOptions) -> Self {
        Prover {
            options,
            cache: Arc::new(cache::Cache::new(options.cache_entries)),
        }
    }

    /// The options in force.
    pub fn options(&self) -> &ProverOptions {
        &self.options
    }

    /// The same prover with another per-check timeout (shares the cache).
    pub fn with_timeout(&self, timeout: Duration) -> Self {
        Prover {
            options: ProverOptions {
                timeout,
                ..self.options
            },
            cache: self.cache.clone(),
        }
    }

    fn budget(&self, started: Instant) -> encode::Budget {
        encode::Budget {
            started,
            deadline: started + self.options.timeout,
            max_states: self.options.max_states,
        }
    }

    /// Searches network, filesystem, then MCP actions, replaying each example.
    ///
    /// Tool calls are searched only when some policy of the question has an
    /// `mcp` endpoint or some region names calls: without either, every
    /// policy judges a call exactly as its transport request `POST path`
    /// (§8.2), and regions hold a call iff they hold that request, so the
    /// network search has already answered for every call.
    pub fn search(&self, question: &Question<'_>, k: usize) -> (Search, f64) {
        let started = Instant::now();
        let budget = self.budget(started);
        // A region that names credentials holds no action without one.
        let mut result = if question.regions.iter().all(|r| r.credentials.is_none()) {
            uncredentialed_search(question, k, &budget)
        } else {
            Search {
                examples: Vec::new(),
                end: SearchEnd::Exhausted,
            }
        };
        if result.end == SearchEnd::Exhausted && result.examples.len() < k {
            let credentialed = credentialed_search(question, k - result.examples.len(), &budget);
            result.examples.extend(credentialed.examples);
            result.end = credentialed.end;
        }
        if let Some(bad) = result
            .examples
            .iter()
            .find_map(|a| replay(question, a).err())
        {
            result = Search {
                examples: Vec::new(),
                end: SearchEnd::Inconclusive(bad),
            };
        }
        (result, started.elapsed().as_secs_f64() * 1000.0)
    }

    fn cached(&self, key: impl FnOnce() -> cache::Key, compute: impl FnOnce() -> Proof) -> Proof {
        if !self.cache.enabled() {
            return compute();
        }
        let started = Instant::now();
        let key = key();
        if let Some(outcome) = self.cache.get(&key) {
            return Proof {
                outcome,
                solver_millis: started.elapsed().as_secs_f64() * 1000.0,
                cached: true,
            };
        }
        let proof = compute();
        if !matches!(proof.outcome, Outcome::Inconclusive { .. }) {
            self.cache.put(key, proof.outcome.clone());
        }
        proof
    }

    /// One example, or a proof that none exists.
    fn exists(&self, question: &Question<'_>) -> Proof {
        let (search, millis) = self.search(question, 1);
        let outcome = match (search.examples.into_iter().next(), search.end) {
            (_, SearchEnd::Inconclusive(reason)) => Outcome::from_reason(reason),
            (Some(counterexample), _) => Outcome::Exceeds { counterexample },
            (None, _) => Outcome::Within,
        };
        Proof {
            outcome,
            solver_millis: millis,
            cached: false,
        }
    }

    /// Containment `candidate ⊆ maximum`: Within, or Exceeds with a
    /// counterexample the candidate allows and the maximum does not.
    pub fn containment(&self, candidate: &CompiledPolicy, maximum: &CompiledPolicy) -> Proof {
        self.cached(
            || {
                cache::ContentHasher::new("containment")
                    .with(candidate)
                    .with(maximum)
                    .key()
            },
            || {
                self.exists(&Question {
                    positive: &[candidate],
                    negative: &[maximum],
                    regions: &[],
                })
            },
        )
    }

    /// Whether `candidate ∖ current` lies inside `ceiling`: Within, or
    /// Exceeds with a new action outside it (docs/design.md §4 step 7).
    pub fn new_authority_within(
        &self,
        candidate: &CompiledPolicy,
        current: &CompiledPolicy,
        ceiling: &CompiledPolicy,
    ) -> Proof {
        self.cached(
            || {
                cache::ContentHasher::new("new-authority-within")
                    .with(candidate)
                    .with(current)
                    .with(ceiling)
                    .key()
            },
            || {
                self.exists(&Question {
                    positive: &[candidate],
                    negative: &[current, ceiling],
                    regions: &[],
                })
            },
        )
    }

    /// Intersection `candidate ∩ region`: Within means disjoint; Exceeds
    /// gives an action the candidate allows inside the region.
    pub fn intersection(&self, candidate: &CompiledPolicy, region: &CompiledRegion) -> Proof {
        self.cached(
            || {
                cache::ContentHasher::new("intersection")
                    .with(candidate)
                    .with(region)
                    .key()
            },
            || {
                self.exists(&Question {
                    positive: &[candidate],
                    negative: &[],
                    regions: &[region],
                })
            },
        )
    }

    /// New authority `candidate ∖ current` with up to `k` distinct examples.
    pub fn new_authority(
        &self,
        candidate: &CompiledPolicy,
        current: &CompiledPolicy,
        k: usize,
    ) -> NewAuthority {
        let (search, solver_millis) = self.search(
            &Question {
                positive: &[candidate],
                negative: &[current],
                regions: &[],
            },
            k,
        );
        NewAuthority {
            examples: search.examples,
            incomplete: match search.end {
                SearchEnd::Inconclusive(reason) => Some(reason),
                _ => None,
            },
            solver_millis,
        }
    }

    /// [`Prover::containment`] on a blocking thread, for async callers: no
    /// Z3 value ever crosses an `.await`.
    pub async fn containment_async(
        &self,
        candidate: Arc<CompiledPolicy>,
        maximum: Arc<CompiledPolicy>,
    ) -> Proof {
        let prover = self.clone();
        let timeout = self.options.timeout;
        tokio::task::spawn_blocking(move || prover.containment(&candidate, &maximum))
            .await
            .unwrap_or_else(|e| Proof {
                outcome: Outcome::Inconclusive {
                    reason: Reason::general(
                        ReasonCode::SolverUnknown,
                        format!("prover task failed: {e}"),
                    ),
                },
                solver_millis: timeout.as_secs_f64() * 1000.0,
                cached: false,
            })
    }

    /// Number of cached answers.
    pub fn cached_answers(&self) -> usize {
        self.cache.len()
    }
}

/// Network, filesystem, then MCP actions that carry no credential.
///
/// Tool calls are searched only when some policy of the question has an
/// `mcp` endpoint or some region names calls: without either, every policy
/// judges a call exactly as its transport request `POST path` (§8.2), and
/// regions hold a call iff they hold that request, so the network search
/// has already answered for every call.
fn uncredentialed_search(question: &Question<'_>, k: usize, budget: &encode::Budget) -> Search {
    let mut result = encode::search_network(question, k, budget);
    if result.end == SearchEnd::Exhausted && result.examples.len() < k {
        let fs = encode::search_filesystem(question, k - result.examples.len(), budget);
        result.examples.extend(fs.examples);
        result.end = fs.end;
    }
    if result.end == SearchEnd::Exhausted && result.examples.len() < k && speaks_of_calls(question)
    {
        let calls = encode::search_mcp(question, k - result.examples.len(), budget);
        result.examples.extend(calls.examples);
        result.end = calls.end;
    }
    result
}

fn speaks_of_calls(question: &Question<'_>) -> bool {
    let mut policies = question.positive.iter().chain(question.negative);
    policies.any(|p| has_mcp(p)) || question.regions.iter().any(|r| r.calls.is_some())
}

/// Network and MCP actions that carry a credential (docs/policy-semantics.md
/// §9). A policy allows an action with credential `c` iff its view
/// [`CompiledPolicy::bound_to`] `c` allows the action without it, so each
/// credential name the question can tell apart is one question about those
/// views: the names are the witnesses of the realizable signatures of
/// every credential pattern it mentions (a name a sandbox writes is its own
/// witness). A file access carries no credential.
fn credentialed_search(question: &Question<'_>, k: usize, budget: &encode::Budget) -> Search {
    let names = match credential_witnesses(question, budget) {
        Ok(names) => names,
        Err(reason) => {
            return Search {
                examples: Vec::new(),
                end: SearchEnd::Inconclusive(reason),
            };
        }
    };
    let mut found = Vec::new();
    for name in names {
        let positive: Vec<CompiledPolicy> = question
            .positive
            .iter()
            .map(|p| p.bound_to(&name))
            .collect();
        let negative: Vec<CompiledPolicy> = question
            .negative
            .iter()
            .map(|p| p.bound_to(&name))
            .collect();
        let (positive, negative): (Vec<&CompiledPolicy>, Vec<&CompiledPolicy>) =
            (positive.iter().collect(), negative.iter().collect());
        let bound = Question {
            positive: &positive,
            negative: &negative,
            regions: question.regions,
        };
        let mut result = encode::search_network(&bound, k - found.len(), budget);
        if result.end == SearchEnd::Exhausted
            && result.examples.len() < k - found.len()
            && speaks_of_calls(&bound)
        {
            let calls = encode::search_mcp(&bound, k - found.len() - result.examples.len(), budget);
            result.examples.extend(calls.examples);
            result.end = calls.end;
        }
        found.extend(result.examples.into_iter().map(|mut action| {
            match &mut action {
                Action::Network(a) => a.credential = Some(name.clone()),
                Action::Mcp(t) => t.credential = Some(name.clone()),
                Action::Filesystem(_) => {}
            }
            action
        }));
        if result.end != SearchEnd::Exhausted || found.len() >= k {
            return Search {
                examples: found,
                end: result.end,
            };
        }
    }
    Search {
        examples: found,
        end: SearchEnd::Exhausted,
    }
}

/// The credential names worth asking about: one per realizable signature
/// of the question's credential patterns that every positive policy binds
/// and every region that names credentials holds.
fn credential_witnesses(
    question: &Question<'_>,
    budget: &encode::Budget,
) -> Result<Vec<String>, Reason> {
    if question
        .positive
        .iter()
        .any(|p| p.credential_patterns().is_empty())
    {
        return Ok(Vec::new());
    }
    let mut patterns: Vec<&NameGlob> = Vec::new();
    let mentioned = question
        .positive
        .iter()
        .chain(question.negative)
        .flat_map(|p| p.credential_patterns())
        .chain(
            question
                .regions
                .iter()
                .flat_map(|r| r.credentials.iter().flatten()),
        );
    for glob in mentioned {
        if !patterns.iter().any(|g| g.as_str() == glob.as_str()) {
            patterns.push(glob);
        }
    }
    let tokens: Vec<Vec<agentgate_policy::glob::Token>> =
        patterns.iter().map(|g| g.tokens()).collect();
    let tokens: Vec<&[agentgate_policy::glob::Token]> = tokens.iter().map(Vec::as_slice).collect();
    let found = automaton::signatures(
        automaton::Domain::Credential,
        "credential",
        &tokens,
        budget.max_states,
        budget.deadline,
    )
    .map_err(|e| match e {
        automaton::AutomatonError::Deadline(_) => {
            Reason::general(ReasonCode::SolverTimeout, e.to_string())
        }
        automaton::AutomatonError::TooManyStates { .. } => {
            Reason::general(ReasonCode::ResourceLimit, e.to_string())
        }
    })?;
    Ok(found
        .signatures
        .into_iter()
        .map(|s| s.witness)
        .filter(|name| {
            question
                .positive
                .iter()
                .all(|p| p.rules.iter().any(|r| r.binds(Some(name))))
                && question
                    .regions
                    .iter()
                    .all(|r| r.holds_credential(Some(name)))
        })
        .collect())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use agentgate_policy::compile::{Limits, Role};
    use agentgate_policy::load::load_document;

    /// Lives here rather than next to `apply_proposal` because it needs the
    /// prover, which the policy crate does not link.
    #[test]
    fn a_removal_never_adds_authority() {
        let sandbox = |yaml: &str| load_document(yaml, &Limits::default()).unwrap().policy;
        let current = sandbox(
            "network:\n  - {name: a, endpoints: [{host: a.io, ports: [443]}]}\n  - {name: b, endpoints: [{host: b.io, ports: [443]}]}\n",
        );
        let candidate =
            agentgate_policy::compose::apply_proposal(&current, None, &["a".into()]).unwrap();
        let compile = |d: &agentgate_policy::PolicyDocument| {
            agentgate_policy::compile(d, Role::Sandbox, &Limits::default()).unwrap()
        };
        let proof = Prover::default().containment(&compile(&candidate), &compile(&current));
        assert_eq!(proof.outcome, Outcome::Within);
    }

    fn policy(yaml: &str) -> CompiledPolicy {
        let doc = load_document(yaml, &Limits::default()).unwrap();
        doc.compile(Role::Maximum, &Limits::default())
            .unwrap()
            .policy
    }

    const NARROW: &str = "network: [{name: a, endpoints: [{host: a.example.com, ports: [443], protocol: rest, rules: [{methods: [GET], path: /x/*}]}]}]";
    const WIDE: &str = "network: [{name: a, endpoints: [{host: '*.example.com', ports: [443], protocol: rest, rules: [{methods: [GET], path: /x/**}]}]}]";

    #[test]
    fn async_containment_runs_off_the_runtime() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let prover = Prover::default();
        let (narrow, wide) = (Arc::new(policy(NARROW)), Arc::new(policy(WIDE)));
        let within = rt.block_on(prover.containment_async(narrow.clone(), wide.clone()));
        assert_eq!(within.outcome, Outcome::Within);
        let exceeds = rt.block_on(prover.containment_async(wide.clone(), narrow.clone()));
        let witness = exceeds.outcome.counterexample().unwrap();
        assert!(
            allows(&wide, witness) && !allows(&narrow, witness),
            "{witness}"
        );
        // Off the runtime: the one blocking thread is held until another
        // task on the runtime's one thread opens it, so the proof can only
        // finish after that task ran. Proved inside the poll, it would
        // finish first, whatever the blocking pool holds.
        let rt = tokio::runtime::Builder::new_current_thread()
            .max_blocking_threads(1)
            .build()
            .unwrap();
        let ran_meanwhile = rt.block_on(async {
            let (open, gate) = std::sync::mpsc::channel::<()>();
            let held = tokio::task::spawn_blocking(move || {
                let _ = gate.recv();
            });
            let ran = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let flag = ran.clone();
            let other = tokio::spawn(async move {
                flag.store(true, std::sync::atomic::Ordering::SeqCst);
                let _ = open.send(());
            });
            let proof = prover
                .containment_async(Arc::new(policy(WIDE)), Arc::new(policy(NARROW)))
                .await;
            let seen = ran.load(std::sync::atomic::Ordering::SeqCst);
            let _ = (other.await, held.await);
            (proof.outcome.counterexample().is_some(), seen)
        });
        assert_eq!(ran_meanwhile, (true, true));
    }

    /// Where a binary a rule names is a counterexample, it is the one
    /// named, not the filler standing for any other binary.
    #[test]
    fn a_named_binary_is_preferred_to_the_filler() {
        let candidate = policy(
            "network: [{name: a, binaries: [/usr/**], endpoints: [{host: api.github.com, ports: [443], protocol: rest, rules: [{methods: [GET, POST], path: /repos/**}]}]}]",
        );
        let ceiling = policy(
            "network: [{name: a, binaries: [/usr/bin/gh], endpoints: [{host: api.github.com, ports: [443], protocol: rest, rules: [{methods: [GET], path: /repos/**}]}]}]",
        );
        let proof = Prover::default().containment(&candidate, &ceiling);
        let witness = proof.outcome.counterexample().unwrap();
        assert!(witness.to_string().contains("by /usr/bin/gh"), "{witness}");
    }

    /// A counterexample does not depend on what the thread's Z3 context
    /// proved before: the same question names the same one on a fresh
    /// thread and after other proofs (docs/proofs.md, the canonical model).
    #[test]
    fn the_counterexample_does_not_depend_on_earlier_proofs() {
        const CANDIDATE: &str = "network:\n  - name: a\n    binaries: [/usr/**]\n    endpoints:\n      - {host: \"*.a.io\", ports: [443, 80], protocol: rest, rules: [{methods: [GET, HEAD, POST], path: /a/**}]}\n      - {host: b.io, ports: [443, 8443]}\nfilesystem: {readOnly: [/app, /srv], readWrite: [/tmp]}\n";
        const CEILING: &str = "network:\n  - name: a\n    binaries: [/usr/bin/gh]\n    endpoints:\n      - {host: c.a.io, ports: [443], protocol: rest, rules: [{methods: [GET], path: /a/**}]}\nfilesystem: {readOnly: [/srv]}\n";
        let prove = |warm_up: bool| {
            std::thread::spawn(move || {
                let prover = Prover::new(ProverOptions {
                    cache_entries: 0,
                    ..ProverOptions::default()
                });
                if warm_up {
                    // Other questions first, in this thread's context.
                    for (c, m) in [(WIDE, NARROW), (CEILING, WIDE), (WIDE, CANDIDATE)] {
                        let _ = prover.containment(&policy(c), &policy(m));
                        let _ = prover.new_authority(&policy(c), &policy(m), 3);
                    }
                }
                let proof = prover.containment(&policy(CANDIDATE), &policy(CEILING));
                let examples = prover.new_authority(&policy(CANDIDATE), &policy(CEILING), 4);
                (
                    format!("{:?}", proof.outcome),
                    format!("{:?}", examples.examples),
                )
            })
            .join()
            .unwrap()
        };
        let fresh = prove(false);
        assert!(fresh.0.contains("Exceeds"), "{}", fresh.0);
        assert_eq!(prove(true), fresh);
    }

    #[test]
    fn answers_are_cached_by_content_but_timeouts_are_not() {
        let prover = Prover::default();
        let (narrow, wide) = (policy(NARROW), policy(WIDE));
        assert!(!prover.containment(&narrow, &wide).cached);
        assert!(prover.containment(&narrow, &wide).cached);
        assert_eq!(prover.cached_answers(), 1);
        let hurried = prover.with_timeout(Duration::from_nanos(1));
        let other = policy("network: []");
        let proof = hurried.containment(&wide, &other);
        assert_eq!(
            proof.outcome.reason().map(|r| r.code),
            Some(ReasonCode::SolverTimeout)
        );
        assert_eq!(prover.cached_answers(), 1);
    }
}
