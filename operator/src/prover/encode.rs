//! The propositional encoding: one Boolean atom per pattern (and per literal
//! port and method), constrained to the realizable signatures that
//! [`crate::prover::automaton`] found, and the policies of a question as
//! Boolean formulas over those atoms (POLICY-SEMANTICS.md §4).
//!
//! Z3 never sees a string; that is what makes a check take milliseconds
//! instead of seconds (docs/proofs.md).

use std::collections::HashMap;
use std::time::Instant;

use z3::ast::Bool;
use z3::{Config, Model, SatResult, Solver, with_z3_config};

use crate::policy::action::{Access, Action, FilesystemAction, Layer, NetworkAction};
use crate::policy::compile::{
    CompiledEntry, CompiledPolicy, CompiledRegion, CompiledRule, EndpointKind, MethodSet,
};
use crate::policy::error::{Reason, ReasonCode};
use crate::policy::glob::{Glob, Token};
use crate::prover::automaton::{AutomatonError, Domain, Signatures, signatures};

/// A question: is there an action that every `positive` policy allows, no
/// `negative` policy allows, and that lies in every region?
#[derive(Debug, Clone, Copy)]
pub struct Question<'a> {
    /// Policies that must allow the action.
    pub positive: &'a [&'a CompiledPolicy],
    /// Policies that must not allow it.
    pub negative: &'a [&'a CompiledPolicy],
    /// Regions the action must lie in (network actions only).
    pub regions: &'a [&'a CompiledRegion],
}

/// How a search ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SearchEnd {
    /// No further action exists (the solver proved it).
    Exhausted,
    /// Stopped after finding the number of examples asked for.
    Enough,
    /// The proof could not be completed.
    Inconclusive(Reason),
}

/// The examples found and how the search ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Search {
    /// Distinct concrete actions, each replayed through the matcher.
    pub examples: Vec<Action>,
    /// How it ended.
    pub end: SearchEnd,
}

/// Tuning of one check.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    /// When the check started (for timing logs).
    pub started: Instant,
    /// When the whole check must be over.
    pub deadline: Instant,
    /// Largest automaton per dimension.
    pub max_states: usize,
}

fn inconclusive(code: ReasonCode, message: impl Into<String>) -> Search {
    Search {
        examples: Vec::new(),
        end: SearchEnd::Inconclusive(Reason::general(code, message)),
    }
}

fn automaton_reason(e: AutomatonError) -> Reason {
    match e {
        AutomatonError::Deadline(_) => Reason::general(ReasonCode::SolverTimeout, e.to_string()),
        AutomatonError::TooManyStates { .. } => {
            Reason::general(ReasonCode::ResourceLimit, e.to_string())
        }
    }
}

/// Interns the patterns of one dimension.
#[derive(Default)]
struct Patterns<'a> {
    globs: Vec<&'a Glob>,
    index: HashMap<&'a str, usize>,
}

impl<'a> Patterns<'a> {
    fn add(&mut self, glob: &'a Glob) {
        if !self.index.contains_key(glob.as_str()) {
            self.index.insert(glob.as_str(), self.globs.len());
            self.globs.push(glob);
        }
    }

    fn id(&self, glob: &Glob) -> usize {
        self.index[glob.as_str()]
    }

    fn tokens(&self) -> Vec<&'a [Token]> {
        self.globs.iter().map(|g| g.tokens()).collect()
    }
}

/// Every pattern and literal a network question mentions.
#[derive(Default)]
struct Universe<'a> {
    binaries: Patterns<'a>,
    hosts: Patterns<'a>,
    paths: Patterns<'a>,
    ports: Vec<u16>,
    methods: Vec<String>,
}

impl<'a> Universe<'a> {
    fn add_methods(&mut self, set: &MethodSet) {
        if let MethodSet::Only(methods) = set {
            self.methods.extend(methods.iter().cloned());
        }
    }

    fn add_entry(&mut self, entry: &'a CompiledEntry) {
        self.add_methods(&entry.methods);
        if let Some(path) = &entry.path {
            self.paths.add(path);
        }
    }

    fn add_policy(&mut self, policy: &'a CompiledPolicy) {
        for rule in &policy.rules {
            rule.binaries.iter().for_each(|b| self.binaries.add(b));
            for e in &rule.endpoints {
                self.hosts.add(&e.host);
                self.ports.extend(&e.ports);
                if let EndpointKind::Rest { scope, allow, deny } = &e.kind {
                    if let Some(scope) = scope {
                        self.paths.add(scope);
                    }
                    allow
                        .iter()
                        .chain(deny)
                        .for_each(|entry| self.add_entry(entry));
                }
            }
        }
    }

    fn add_region(&mut self, region: &'a CompiledRegion) {
        region
            .binaries
            .iter()
            .flatten()
            .for_each(|g| self.binaries.add(g));
        region
            .hosts
            .iter()
            .flatten()
            .for_each(|g| self.hosts.add(g));
        region
            .paths
            .iter()
            .flatten()
            .for_each(|g| self.paths.add(g));
        self.ports.extend(region.ports.iter().flatten());
        if let Some(m) = &region.methods {
            self.add_methods(m);
        }
    }

    fn finish(&mut self) {
        self.ports.sort_unstable();
        self.ports.dedup();
        self.methods.sort_unstable();
        self.methods.dedup();
    }
}

/// A dimension's realizable choices as plain data: for each choice, the
/// atoms it makes true, and the concrete value that realises it.
struct Choices<V> {
    members: Vec<Vec<u32>>,
    values: Vec<V>,
    atoms: usize,
}

impl Choices<String> {
    fn from_signatures(s: Signatures, atoms: usize) -> Self {
        let (members, values) = s
            .signatures
            .into_iter()
            .map(|sig| (sig.members, sig.witness))
            .unzip();
        Choices {
            members,
            values,
            atoms,
        }
    }
}

/// One value per literal plus one "other" value outside the literals.
fn literal_choices<V: Clone + PartialEq>(literals: &[V], other: Option<V>) -> Choices<V> {
    let mut members: Vec<Vec<u32>> = (0..literals.len() as u32).map(|i| vec![i]).collect();
    let mut values = literals.to_vec();
    if let Some(other) = other {
        members.push(Vec::new());
        values.push(other);
    }
    Choices {
        members,
        values,
        atoms: literals.len(),
    }
}

fn other_port(ports: &[u16]) -> Option<u16> {
    [443u16, 80, 8443, 8080, 22, 5432]
        .into_iter()
        .chain(1..=u16::MAX)
        .find(|p| ports.binary_search(p).is_err())
}

fn other_method(methods: &[String]) -> String {
    [
        "GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "HEAD", "TRACE", "CONNECT",
    ]
    .into_iter()
    .map(str::to_string)
    .chain((0..).map(|i| format!("X-METHOD-{i}")))
    .find(|m| methods.binary_search(m).is_err())
    .unwrap_or_default()
}

/// Z3 variables of one dimension.
struct DimVars {
    /// One selector per choice (empty when there is a single choice).
    selectors: Vec<Bool>,
    /// One atom per pattern/literal.
    atoms: Vec<Bool>,
}

impl DimVars {
    fn new<V>(name: &str, choices: &Choices<V>, solver: &Solver) -> DimVars {
        let k = choices.members.len();
        if k == 1 {
            let mut atoms = vec![Bool::from_bool(false); choices.atoms];
            for &m in &choices.members[0] {
                atoms[m as usize] = Bool::from_bool(true);
            }
            return DimVars {
                selectors: Vec::new(),
                atoms,
            };
        }
        let selectors: Vec<Bool> = (0..k)
            .map(|i| Bool::new_const(format!("{name}#{i}")))
            .collect();
        let weighted: Vec<(&Bool, i32)> = selectors.iter().map(|s| (s, 1)).collect();
        solver.assert(Bool::pb_eq(&weighted, 1));
        let mut holders: Vec<Vec<usize>> = vec![Vec::new(); choices.atoms];
        for (i, members) in choices.members.iter().enumerate() {
            for &m in members {
                holders[m as usize].push(i);
            }
        }
        let atoms = holders
            .iter()
            .map(|holders| {
                if holders.is_empty() {
                    Bool::from_bool(false)
                } else if holders.len() == k {
                    Bool::from_bool(true)
                } else if holders.len() * 2 <= k {
                    let chosen: Vec<&Bool> = holders.iter().map(|&i| &selectors[i]).collect();
                    Bool::or(&chosen)
                } else {
                    // Exactly one selector is true, so "one of the holders"
                    // is "none of the others": the shorter formula.
                    let others: Vec<&Bool> = (0..k)
                        .filter(|i| holders.binary_search(i).is_err())
                        .map(|i| &selectors[i])
                        .collect();
                    Bool::or(&others).not()
                }
            })
            .collect();
        DimVars { selectors, atoms }
    }

    fn chosen(&self, model: &Model) -> usize {
        self.selectors
            .iter()
            .position(|s| model.eval(s, true).and_then(|b| b.as_bool()) == Some(true))
            .unwrap_or(0)
    }

    /// A literal saying "this dimension chose `choice`" (for blocking).
    fn is_chosen(&self, choice: usize) -> Option<Bool> {
        self.selectors.get(choice).cloned()
    }
}

fn any(terms: Vec<Bool>) -> Bool {
    match terms.len() {
        0 => Bool::from_bool(false),
        1 => terms
            .into_iter()
            .next()
            .unwrap_or_else(|| Bool::from_bool(false)),
        _ => Bool::or(&terms),
    }
}

fn all(terms: Vec<Bool>) -> Bool {
    match terms.len() {
        0 => Bool::from_bool(true),
        1 => terms
            .into_iter()
            .next()
            .unwrap_or_else(|| Bool::from_bool(true)),
        _ => Bool::and(&terms),
    }
}

struct NetworkVars<'u, 'a> {
    universe: &'u Universe<'a>,
    binary: DimVars,
    host: DimVars,
    path: DimVars,
    port: DimVars,
    method: DimVars,
    rest: Bool,
}

impl NetworkVars<'_, '_> {
    fn port(&self, p: u16) -> Bool {
        match self.universe.ports.binary_search(&p) {
            Ok(i) => self.port.atoms[i].clone(),
            Err(_) => Bool::from_bool(false),
        }
    }

    fn methods(&self, set: &MethodSet) -> Bool {
        match set {
            MethodSet::Any => Bool::from_bool(true),
            MethodSet::Only(methods) => any(methods
                .iter()
                .filter_map(|m| self.universe.methods.binary_search(m).ok())
                .map(|i| self.method.atoms[i].clone())
                .collect()),
        }
    }

    fn path(&self, g: &Glob) -> Bool {
        self.path.atoms[self.universe.paths.id(g)].clone()
    }

    fn entry(&self, e: &CompiledEntry) -> Bool {
        let mut terms = vec![self.methods(&e.methods)];
        if let Some(path) = &e.path {
            terms.push(self.path(path));
        }
        all(terms)
    }

    fn binary_ok(&self, rule: &CompiledRule) -> Bool {
        if rule.binaries.is_empty() {
            return Bool::from_bool(true);
        }
        any(rule
            .binaries
            .iter()
            .map(|b| self.binary.atoms[self.universe.binaries.id(b)].clone())
            .collect())
    }

    /// `allows_P(a)` of §4: some endpoint allows and no endpoint denies.
    fn allows(&self, policy: &CompiledPolicy) -> Bool {
        let mut allows = Vec::new();
        let mut denies = Vec::new();
        for rule in &policy.rules {
            let binary_ok = self.binary_ok(rule);
            for e in &rule.endpoints {
                let connection = all(vec![
                    binary_ok.clone(),
                    self.host.atoms[self.universe.hosts.id(&e.host)].clone(),
                    any(e.ports.iter().map(|&p| self.port(p)).collect()),
                ]);
                match &e.kind {
                    EndpointKind::L4 => allows.push(connection),
                    EndpointKind::Rest { scope, allow, deny } => {
                        if !allow.is_empty() {
                            let mut terms = vec![connection.clone(), self.rest.clone()];
                            if let Some(scope) = scope {
                                terms.push(self.path(scope));
                            }
                            terms.push(any(allow.iter().map(|a| self.entry(a)).collect()));
                            allows.push(all(terms));
                        }
                        if !deny.is_empty() {
                            denies.push(all(vec![
                                connection,
                                self.rest.clone(),
                                any(deny.iter().map(|d| self.entry(d)).collect()),
                            ]));
                        }
                    }
                }
            }
        }
        all(vec![any(allows), any(denies).not()])
    }

    fn region(&self, r: &CompiledRegion) -> Bool {
        let mut terms = Vec::new();
        let u = self.universe;
        if let Some(b) = &r.binaries {
            terms.push(any(b
                .iter()
                .map(|g| self.binary.atoms[u.binaries.id(g)].clone())
                .collect()));
        }
        if let Some(h) = &r.hosts {
            terms.push(any(h
                .iter()
                .map(|g| self.host.atoms[u.hosts.id(g)].clone())
                .collect()));
        }
        if let Some(p) = &r.ports {
            terms.push(any(p.iter().map(|&p| self.port(p)).collect()));
        }
        if let Some(layers) = &r.layers {
            terms.push(any(layers
                .iter()
                .map(|l| match l {
                    Layer::Rest => self.rest.clone(),
                    Layer::L4 => self.rest.not(),
                })
                .collect()));
        }
        if let Some(m) = &r.methods {
            terms.push(all(vec![self.rest.clone(), self.methods(m)]));
        }
        if let Some(paths) = &r.paths {
            terms.push(all(vec![
                self.rest.clone(),
                any(paths.iter().map(|g| self.path(g)).collect()),
            ]));
        }
        all(terms)
    }
}

/// The questions are propositional with cardinality constraints: Z3's
/// finite-domain logic routes them to its SAT solver, which handles
/// "exactly one" natively.
fn new_solver() -> Solver {
    Solver::new_for_logic("QF_FD").unwrap_or_default()
}

fn z3_config(budget: &Budget) -> Config {
    let mut cfg = Config::new();
    let remaining = budget.deadline.saturating_duration_since(Instant::now());
    cfg.set_timeout_msec(remaining.as_millis().max(1) as u64);
    cfg.set_model_generation(true);
    cfg
}

fn unknown_reason(solver: &Solver) -> Reason {
    let why = solver.get_reason_unknown().unwrap_or_default();
    if why.contains("timeout") || why.contains("canceled") {
        Reason::general(ReasonCode::SolverTimeout, format!("solver gave up: {why}"))
    } else {
        Reason::general(
            ReasonCode::SolverUnknown,
            format!("solver answered unknown: {why}"),
        )
    }
}

/// Searches for up to `k` network actions answering the question.
pub fn search_network(question: &Question<'_>, k: usize, budget: &Budget) -> Search {
    let mut universe = Universe::default();
    question
        .positive
        .iter()
        .chain(question.negative)
        .for_each(|p| universe.add_policy(p));
    question.regions.iter().for_each(|r| universe.add_region(r));
    universe.finish();

    let dimension = |domain, name, patterns: &Patterns<'_>| {
        let tokens = patterns.tokens();
        signatures(domain, name, &tokens, budget.max_states, budget.deadline)
            .map(|s| Choices::from_signatures(s, patterns.globs.len()))
            .map_err(automaton_reason)
    };
    // Host wildcards sit only in the first label, so read right to left the
    // patterns are literal first and diverge at once: the DFA stays a suffix
    // trie instead of carrying every `**.` pattern through every state. The
    // canonical host form is symmetric, so the reversed witness is canonical.
    let reversed_hosts = || {
        let reversed: Vec<Vec<Token>> = universe
            .hosts
            .globs
            .iter()
            .map(|g| g.tokens().iter().rev().copied().collect())
            .collect();
        let tokens: Vec<&[Token]> = reversed.iter().map(Vec::as_slice).collect();
        signatures(
            Domain::Host,
            "host",
            &tokens,
            budget.max_states,
            budget.deadline,
        )
        .map(|mut s| {
            for sig in &mut s.signatures {
                sig.witness = sig.witness.chars().rev().collect();
            }
            Choices::from_signatures(s, universe.hosts.globs.len())
        })
        .map_err(automaton_reason)
    };
    let binary = match dimension(Domain::Binary, "binary", &universe.binaries) {
        Ok(c) => c,
        Err(r) => {
            return Search {
                examples: Vec::new(),
                end: SearchEnd::Inconclusive(r),
            };
        }
    };
    let host = match reversed_hosts() {
        Ok(c) => c,
        Err(r) => {
            return Search {
                examples: Vec::new(),
                end: SearchEnd::Inconclusive(r),
            };
        }
    };
    let path = match dimension(Domain::RequestPath, "path", &universe.paths) {
        Ok(c) => c,
        Err(r) => {
            return Search {
                examples: Vec::new(),
                end: SearchEnd::Inconclusive(r),
            };
        }
    };
    tracing::debug!(
        binaries = binary.members.len(),
        hosts = host.members.len(),
        paths = path.members.len(),
        host_patterns = universe.hosts.globs.len(),
        path_patterns = universe.paths.globs.len(),
        automata_ms = budget.started.elapsed().as_secs_f64() * 1000.0,
        "signatures built"
    );
    let port = literal_choices(&universe.ports, other_port(&universe.ports));
    let method = literal_choices(&universe.methods, Some(other_method(&universe.methods)));
    if Instant::now() >= budget.deadline {
        return inconclusive(ReasonCode::SolverTimeout, "deadline reached before solving");
    }

    let universe = &universe;
    let (binary, host, path, port, method) = (&binary, &host, &path, &port, &method);
    let cfg = z3_config(budget);
    let outcome: Result<(Vec<NetworkAction>, bool), Reason> = with_z3_config(&cfg, move || {
        let solver = new_solver();
        let vars = NetworkVars {
            universe,
            binary: DimVars::new("binary", binary, &solver),
            host: DimVars::new("host", host, &solver),
            path: DimVars::new("path", path, &solver),
            port: DimVars::new("port", port, &solver),
            method: DimVars::new("method", method, &solver),
            rest: Bool::new_const("layer_rest"),
        };
        for p in question.positive {
            solver.assert(vars.allows(p));
        }
        for n in question.negative {
            solver.assert(vars.allows(n).not());
        }
        for r in question.regions {
            solver.assert(vars.region(r));
        }
        tracing::debug!(
            encoded_ms = budget.started.elapsed().as_secs_f64() * 1000.0,
            "encoded"
        );
        let mut found = Vec::new();
        while found.len() < k {
            let check = solver.check();
            tracing::debug!(
                solved_ms = budget.started.elapsed().as_secs_f64() * 1000.0,
                ?check,
                "solved"
            );
            match check {
                SatResult::Unsat => return Ok((found, true)),
                SatResult::Unknown => return Err(unknown_reason(&solver)),
                SatResult::Sat => {}
            }
            let Some(model) = solver.get_model() else {
                return Err(Reason::general(
                    ReasonCode::SolverUnknown,
                    "solver returned no model",
                ));
            };
            let rest = model.eval(&vars.rest, true).and_then(|b| b.as_bool()) == Some(true);
            let picks = [
                vars.binary.chosen(&model),
                vars.host.chosen(&model),
                vars.port.chosen(&model),
                vars.method.chosen(&model),
                vars.path.chosen(&model),
            ];
            let (method_value, path_value) = if rest {
                (
                    method.values[picks[3]].clone(),
                    path.values[picks[4]].clone(),
                )
            } else {
                (String::new(), String::new())
            };
            found.push(NetworkAction {
                binary: binary.values[picks[0]].clone(),
                host: host.values[picks[1]].clone(),
                port: port.values[picks[2]],
                layer: if rest { Layer::Rest } else { Layer::L4 },
                method: method_value,
                path: path_value,
            });
            // Block this combination of signatures so the next example differs.
            let mut same = vec![if rest {
                vars.rest.clone()
            } else {
                vars.rest.not()
            }];
            same.extend(vars.binary.is_chosen(picks[0]));
            same.extend(vars.host.is_chosen(picks[1]));
            same.extend(vars.port.is_chosen(picks[2]));
            if rest {
                same.extend(vars.method.is_chosen(picks[3]));
                same.extend(vars.path.is_chosen(picks[4]));
            }
            solver.assert(all(same).not());
        }
        Ok((found, false))
    });
    match outcome {
        Ok((found, exhausted)) => Search {
            examples: found.into_iter().map(Action::Network).collect(),
            end: if exhausted {
                SearchEnd::Exhausted
            } else {
                SearchEnd::Enough
            },
        },
        Err(reason) => Search {
            examples: Vec::new(),
            end: SearchEnd::Inconclusive(reason),
        },
    }
}

/// Token form of a filesystem entry `e`: `e` itself, and `e/` followed by anything.
fn filesystem_patterns(entry: &str) -> [Vec<Token>; 2] {
    let exact: Vec<Token> = entry.bytes().map(Token::Literal).collect();
    let mut below = exact.clone();
    if entry != "/" {
        below.push(Token::Literal(b'/'));
    }
    below.push(Token::AnyString);
    [exact, below]
}

/// Searches for up to `k` filesystem actions answering the question
/// (regions are network-only, so a question with regions has none).
pub fn search_filesystem(question: &Question<'_>, k: usize, budget: &Budget) -> Search {
    if !question.regions.is_empty() || k == 0 {
        return Search {
            examples: Vec::new(),
            end: SearchEnd::Exhausted,
        };
    }
    let mut entries: Vec<&str> = question
        .positive
        .iter()
        .chain(question.negative)
        .flat_map(|p| p.filesystem.read.iter().map(String::as_str))
        .collect();
    entries.sort_unstable();
    entries.dedup();
    let tokens: Vec<[Vec<Token>; 2]> = entries.iter().map(|e| filesystem_patterns(e)).collect();
    let flat: Vec<&[Token]> = tokens
        .iter()
        .flat_map(|t| [t[0].as_slice(), t[1].as_slice()])
        .collect();
    let choices = match signatures(
        Domain::AbsolutePath,
        "filesystem",
        &flat,
        budget.max_states,
        budget.deadline,
    ) {
        Ok(s) => Choices::from_signatures(s, flat.len()),
        Err(e) => {
            return Search {
                examples: Vec::new(),
                end: SearchEnd::Inconclusive(automaton_reason(e)),
            };
        }
    };
    let entries = &entries;
    let choices = &choices;
    let cfg = z3_config(budget);
    let outcome: Result<(Vec<FilesystemAction>, bool), Reason> = with_z3_config(&cfg, move || {
        let solver = new_solver();
        let path = DimVars::new("fspath", choices, &solver);
        let write = Bool::new_const("write");
        let covers = |list: &[String]| {
            any(list
                .iter()
                .filter_map(|e| entries.binary_search(&e.as_str()).ok())
                .flat_map(|i| [path.atoms[2 * i].clone(), path.atoms[2 * i + 1].clone()])
                .collect())
        };
        let allows = |p: &CompiledPolicy| {
            let readable = covers(&p.filesystem.read);
            let writable = covers(&p.filesystem.write);
            write.ite(&writable, &readable)
        };
        for p in question.positive {
            solver.assert(allows(p));
        }
        for n in question.negative {
            solver.assert(allows(n).not());
        }
        let mut found = Vec::new();
        while found.len() < k {
            match solver.check() {
                SatResult::Unsat => return Ok((found, true)),
                SatResult::Unknown => return Err(unknown_reason(&solver)),
                SatResult::Sat => {}
            }
            let Some(model) = solver.get_model() else {
                return Err(Reason::general(
                    ReasonCode::SolverUnknown,
                    "solver returned no model",
                ));
            };
            let is_write = model.eval(&write, true).and_then(|b| b.as_bool()) == Some(true);
            let pick = path.chosen(&model);
            found.push(FilesystemAction {
                access: if is_write {
                    Access::Write
                } else {
                    Access::Read
                },
                path: choices.values[pick].clone(),
            });
            let mut same = vec![if is_write { write.clone() } else { write.not() }];
            same.extend(path.is_chosen(pick));
            solver.assert(all(same).not());
        }
        Ok((found, false))
    });
    match outcome {
        Ok((found, exhausted)) => Search {
            examples: found.into_iter().map(Action::Filesystem).collect(),
            end: if exhausted {
                SearchEnd::Exhausted
            } else {
                SearchEnd::Enough
            },
        },
        Err(reason) => Search {
            examples: Vec::new(),
            end: SearchEnd::Inconclusive(reason),
        },
    }
}
