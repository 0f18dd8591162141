//! The propositional encoding: one Boolean atom per pattern (and per literal
//! port and method), constrained to the realizable signatures that
//! [`crate::automaton`] found, and the policies of a question as
//! Boolean formulas over those atoms (docs/policy-semantics.md §4).
//!
//! Z3 never sees a string; that is what makes a check take milliseconds
//! instead of seconds (docs/proofs.md).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::time::Instant;

use serde_json::{Map, Value};

use z3::ast::Bool;
use z3::{Model, Params, SatResult, Solver};

use crate::arguments::{ArgumentError, Exploration, argument_classes};
use crate::automaton::{AutomatonError, Domain, Signatures, signatures};
use agentgate_policy::action::{
    Access, Action, FilesystemAction, Layer, McpAction, McpKind, NetworkAction, Upgrade,
};
use agentgate_policy::compile::{
    CompiledEndpoint, CompiledEntry, CompiledPolicy, CompiledRegion, CompiledRule, EndpointKind,
    MethodSet,
};
use agentgate_policy::error::{Reason, ReasonCode};
use agentgate_policy::glob::{Glob, Token};
use agentgate_policy::mcp::{
    CompiledCall, CompiledCalls, CompiledConstraint, CompiledMcp, UriGlob,
};
use agentgate_policy::names::{MAX_NAME_BYTES, NameGlob};
use agentgate_policy::provenance::{ENTITY_MARK, Position, StatedSources};
use agentgate_policy::query::{ParameterConstraint, Query};

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
    Search::failed(Reason::general(code, message))
}

impl Search {
    /// No examples; the proof could not be completed.
    fn failed(reason: Reason) -> Search {
        Search {
            examples: Vec::new(),
            end: SearchEnd::Inconclusive(reason),
        }
    }

    /// The result of a solver loop: the examples found and whether the
    /// solver proved there are no more.
    fn from_outcome<A>(outcome: Result<(Vec<A>, bool), Reason>, action: fn(A) -> Action) -> Search {
        match outcome {
            Ok((found, exhausted)) => Search {
                examples: found.into_iter().map(action).collect(),
                end: if exhausted {
                    SearchEnd::Exhausted
                } else {
                    SearchEnd::Enough
                },
            },
            Err(reason) => Search::failed(reason),
        }
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

fn argument_reason(argument: &str, e: ArgumentError) -> Reason {
    match e {
        ArgumentError::Automaton(e) => automaton_reason(e),
        ArgumentError::Unsupported(m) => Reason::general(
            ReasonCode::UnsupportedPolicyShape,
            format!("argument {argument:?}: {m}"),
        ),
        ArgumentError::TooLarge(m) => Reason::general(
            ReasonCode::ResourceLimit,
            format!("argument {argument:?}: {m}"),
        ),
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

    /// Adds a policy's patterns; in `mcp` mode also the paths of its `mcp`
    /// endpoints, which only tool calls are judged on.
    fn add_policy(&mut self, policy: &'a CompiledPolicy, mcp: bool) {
        for rule in &policy.rules {
            rule.binaries.iter().for_each(|b| self.binaries.add(b));
            for e in &rule.endpoints {
                self.hosts.add(&e.host);
                self.ports.extend(&e.ports);
                match &e.kind {
                    EndpointKind::Rest { scope, allow, deny }
                    | EndpointKind::Websocket { scope, allow, deny } => {
                        if let Some(scope) = scope {
                            self.paths.add(scope);
                        }
                        allow
                            .iter()
                            .chain(deny)
                            .for_each(|entry| self.add_entry(entry));
                    }
                    EndpointKind::Mcp(m) if mcp => self.paths.add(&m.path),
                    EndpointKind::Mcp(_) | EndpointKind::L4 => {}
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

impl<V> Choices<V> {
    /// Removes the choice that makes no atom true.
    fn drop_empty(&mut self) {
        if let Some(i) = self.members.iter().position(Vec::is_empty) {
            self.members.remove(i);
            self.values.remove(i);
        }
    }
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
    /// Variables for `choices`; the "exactly one" constraint is asserted
    /// under `guard` (so a component's constraints bind only when it is on).
    fn new<V>(name: &str, choices: &Choices<V>, solver: &Solver, guard: &Bool) -> DimVars {
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
        solver.assert(guard.implies(Bool::pb_eq(&weighted, 1)));
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
            .position(|s| holds(model, s))
            .unwrap_or(0)
    }

    /// A literal saying "this dimension chose `choice`" (for blocking).
    fn is_chosen(&self, choice: usize) -> Option<Bool> {
        self.selectors.get(choice).cloned()
    }
}

/// One variable the canonical model fixes: a dimension's choice (least
/// index first: choices come shortest witness first) or a flag (the
/// preferred value first).
enum Canonical<'v> {
    Dim(&'v DimVars),
    /// A dimension whose choices are preferred in this order (every choice
    /// once).
    Ranked(&'v DimVars, Vec<usize>),
    Flag(&'v Bool, bool),
}

/// The least model in the order of `vars` (each variable as small as the
/// ones before it allow): Z3's own model depends on everything its
/// thread's context saw before, so the same question could name another
/// counterexample in another process; the least one is the same
/// everywhere. `model` satisfies what is asserted; each step asks for a
/// smaller value and keeps the answer. `solver` is left as it was.
fn canonical(solver: &Solver, model: Model, vars: &[Canonical<'_>]) -> Result<Model, Reason> {
    solver.push();
    let least = least_model(solver, model, vars);
    solver.pop(1);
    least
}

/// [`canonical`]'s steps, each variable fixed once found.
fn least_model(solver: &Solver, mut model: Model, vars: &[Canonical<'_>]) -> Result<Model, Reason> {
    for var in vars {
        loop {
            let smaller = match var {
                Canonical::Dim(dim) => {
                    let chosen = dim.chosen(&model);
                    if dim.selectors.is_empty() || chosen == 0 {
                        None
                    } else {
                        Some(any(dim.selectors[..chosen].to_vec()))
                    }
                }
                Canonical::Ranked(dim, rank) => {
                    let chosen = dim.chosen(&model);
                    let before: Vec<Bool> = rank
                        .iter()
                        .take_while(|&&c| c != chosen)
                        .filter_map(|&c| dim.is_chosen(c))
                        .collect();
                    (!before.is_empty()).then(|| any(before))
                }
                Canonical::Flag(flag, preferred) => {
                    let value = holds(&model, flag);
                    (value != *preferred).then(|| {
                        if *preferred {
                            (*flag).clone()
                        } else {
                            flag.not()
                        }
                    })
                }
            };
            let Some(smaller) = smaller else { break };
            solver.push();
            solver.assert(&smaller);
            match solver.check() {
                SatResult::Sat => {
                    let next = solver.get_model();
                    solver.pop(1);
                    model = next.ok_or_else(|| {
                        Reason::general(ReasonCode::SolverUnknown, "solver returned no model")
                    })?;
                }
                SatResult::Unsat => {
                    solver.pop(1);
                    break;
                }
                SatResult::Unknown => {
                    solver.pop(1);
                    return Err(unknown_reason(solver));
                }
            }
        }
        // Fixed at the value found, so later variables are least under it.
        match var {
            Canonical::Dim(dim) | Canonical::Ranked(dim, _) => {
                if let Some(chosen) = dim.is_chosen(dim.chosen(&model)) {
                    solver.assert(&chosen);
                }
            }
            Canonical::Flag(flag, _) => {
                let value = holds(&model, flag);
                solver.assert(if value { (*flag).clone() } else { flag.not() });
            }
        }
    }
    Ok(model)
}

/// Whether `b` is true in `model` (unconstrained counts as false).
fn holds(model: &Model, b: &Bool) -> bool {
    model.eval(b, true).and_then(|b| b.as_bool()) == Some(true)
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

/// The question split by host: host patterns that occur together in some
/// realizable host signature form one component. A host value's signature
/// lies in exactly one component, so only that component's endpoints can
/// match it; each component therefore gets its own small selectors for the
/// other dimensions, projected onto the patterns its endpoints (and the
/// regions) use. Z3 then sees many small independent sub-problems instead of
/// one problem whose every dimension has thousands of choices.
struct Component<'q> {
    /// Host patterns of this component.
    hosts: Vec<usize>,
    /// The endpoints whose host pattern lies here, by policy (positives
    /// first, then negatives, as in the question).
    endpoints: Vec<Vec<(&'q CompiledRule, &'q CompiledEndpoint)>>,
    /// Per positive policy: whether it has an allow endpoint here (if not,
    /// nothing in this component can answer the question).
    candidate: Vec<bool>,
    binaries: Vec<usize>,
    paths: Vec<usize>,
    ports: Vec<u16>,
    methods: Vec<String>,
    /// The query parameter constraints the component's entries mention,
    /// by name, and the subprotocol and origin constraints of its
    /// websocket entries (network searches only: a call's transport has
    /// no query and is no upgrade).
    query: BTreeMap<Parameter<'q>, Vec<&'q ParameterConstraint>>,
    /// What the component's `mcp` endpoints mention (tool-call searches only).
    mcp: McpParts<'q>,
    /// Some endpoint here is a `websocket` one (network searches only).
    upgrades: bool,
}

/// A part of a request that is present or not, with a string value that
/// globs speak about: a query parameter (docs/policy-semantics.md §10.1),
/// or an upgrade's subprotocol or origin (§10.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Parameter<'q> {
    Query(&'q str),
    Subprotocol,
    Origin,
}

impl Parameter<'_> {
    /// What its values are: any string for a query value, a non-empty
    /// printable one for a subprotocol or an origin (the tokens and globs
    /// compiled there keep witnesses inside their own characters).
    fn domain(self) -> Domain {
        match self {
            Parameter::Query(_) => Domain::Text,
            Parameter::Subprotocol | Parameter::Origin => Domain::Name,
        }
    }
}

/// One parameter of a component: its value globs and its classes, whose
/// atom 0 is "present" and atom 1 + j "present with a value glob j
/// matches". Class 0 is "absent".
struct QueryParameter<'q> {
    name: Parameter<'q>,
    globs: Vec<&'q NameGlob>,
    classes: Choices<Option<String>>,
}

impl<'q> QueryParameter<'q> {
    fn new(
        name: Parameter<'q>,
        constraints: &[&'q ParameterConstraint],
        budget: &Budget,
    ) -> Result<QueryParameter<'q>, Reason> {
        let mut globs: Vec<&NameGlob> = Vec::new();
        for c in constraints {
            if let ParameterConstraint::Matches { globs: g, .. } = c {
                for glob in g {
                    if !globs.iter().any(|known| known.as_str() == glob.as_str()) {
                        globs.push(glob);
                    }
                }
            }
        }
        let tokens: Vec<Vec<Token>> = globs.iter().map(|g| g.tokens()).collect();
        let token_refs: Vec<&[Token]> = tokens.iter().map(Vec::as_slice).collect();
        let values = signatures(
            name.domain(),
            "query value",
            &token_refs,
            budget.max_states,
            budget.deadline,
        )
        .map_err(automaton_reason)?;
        let mut classes = Choices {
            members: vec![Vec::new()],
            values: vec![None],
            atoms: 1 + globs.len(),
        };
        for sig in values.signatures {
            let mut members = vec![0];
            members.extend(sig.members.iter().map(|m| m + 1));
            classes.members.push(members);
            classes.values.push(Some(sig.witness));
        }
        Ok(QueryParameter {
            name,
            globs,
            classes,
        })
    }

    fn glob_atom(&self, glob: &NameGlob) -> Option<u32> {
        self.globs
            .iter()
            .position(|g| g.as_str() == glob.as_str())
            .map(|i| i as u32 + 1)
    }
}

/// The names, resource URIs and argument constraints that a component's
/// `mcp` entries mention.
#[derive(Default)]
struct McpParts<'q> {
    names: Vec<&'q NameGlob>,
    uris: Vec<&'q UriGlob>,
    arguments: BTreeMap<&'q str, Vec<&'q CompiledConstraint>>,
    /// Some entry refuses arguments it does not name.
    closed: bool,
}

impl<'q> McpParts<'q> {
    fn add_call(&mut self, e: &'q CompiledCall) {
        self.names.push(&e.name);
        self.closed |= !e.additional_arguments;
        for (name, c) in &e.arguments {
            let list = self.arguments.entry(name.as_str()).or_default();
            if !list.contains(&c) {
                list.push(c);
            }
        }
    }

    fn add_region(&mut self, c: &'q CompiledCalls) {
        c.tools
            .iter()
            .chain(&c.prompts)
            .for_each(|e| self.add_call(e));
        self.uris.extend(&c.resources);
    }

    fn add(&mut self, m: &'q CompiledMcp) {
        m.tools
            .iter()
            .chain(&m.deny_tools)
            .chain(&m.prompts)
            .for_each(|e| self.add_call(e));
        self.uris.extend(&m.resources);
    }
}

/// The tool-call dimensions of a component: the kind of call, its name (a
/// tool or prompt name, or a resource URI, as the kind says), whether it
/// has an argument no entry names, and each named argument's classes
/// ([`crate::arguments`]).
struct McpChoices<'q> {
    names: HashMap<&'q str, u32>,
    name: Choices<String>,
    uris: HashMap<&'q str, u32>,
    uri: Choices<String>,
    kind: Choices<McpKind>,
    extra: Choices<bool>,
    /// By argument name (ascending): its interned constraints and classes,
    /// whose atom 0 is "present" and atom 1 + j "satisfies constraint j".
    arguments: Vec<NamedArgument<'q>>,
    /// True when some constraint says `from`: a call then states its
    /// sources, so that `from` is read from them in the replay.
    speaks_of_sources: bool,
}

/// A named argument: its name, its interned constraints and its classes.
struct NamedArgument<'q> {
    name: &'q str,
    constraints: Vec<&'q CompiledConstraint>,
    classes: Choices<Option<Value>>,
    /// Per class, where its strings and numbers were seen, relative to the
    /// argument's value (§8.3).
    sources: Vec<StatedSources>,
}

const KINDS: [McpKind; 3] = [McpKind::Tool, McpKind::Resource, McpKind::Prompt];

/// A resource URI that no `SCHEME://AUTHORITY` glob matches.
const OTHER_URI: &str = "urn:x";

impl<'q> McpChoices<'q> {
    fn new(parts: &McpParts<'q>, budget: &Budget) -> Result<McpChoices<'q>, Reason> {
        let mut names: HashMap<&str, u32> = HashMap::new();
        let mut name_tokens: Vec<Vec<Token>> = Vec::new();
        for g in &parts.names {
            if !names.contains_key(g.as_str()) {
                names.insert(g.as_str(), name_tokens.len() as u32);
                name_tokens.push(g.tokens());
            }
        }
        let tokens: Vec<&[Token]> = name_tokens.iter().map(Vec::as_slice).collect();
        let name = signatures(
            Domain::Name,
            "tool name",
            &tokens,
            budget.max_states,
            budget.deadline,
        )
        .map(|s| Choices::from_signatures(s, name_tokens.len()))
        .map_err(automaton_reason)?;

        // Resource URIs: the literal SCHEME://AUTHORITY picks a group, whose
        // path globs are explored as request paths.
        let mut uris: HashMap<&str, u32> = HashMap::new();
        let mut groups: BTreeMap<&str, Vec<(u32, &Glob)>> = BTreeMap::new();
        for g in &parts.uris {
            if let UriGlob::Prefixed {
                pattern,
                prefix,
                path,
            } = g
                && !uris.contains_key(pattern.as_str())
            {
                let id = uris.len() as u32;
                uris.insert(pattern.as_str(), id);
                groups.entry(prefix.as_str()).or_default().push((id, path));
            }
        }
        let mut uri = Choices {
            members: Vec::new(),
            values: Vec::new(),
            atoms: uris.len(),
        };
        for (prefix, globs) in &groups {
            let tokens: Vec<&[Token]> = globs.iter().map(|(_, g)| g.tokens()).collect();
            let found = signatures(
                Domain::RequestPath,
                "resource path",
                &tokens,
                budget.max_states,
                budget.deadline,
            )
            .map_err(automaton_reason)?;
            for sig in found.signatures {
                let value = format!("{prefix}{}", sig.witness);
                // Witnesses are shortest: a longer URI realises nothing new.
                if value.len() <= MAX_NAME_BYTES {
                    uri.members
                        .push(sig.members.iter().map(|&m| globs[m as usize].0).collect());
                    uri.values.push(value);
                }
            }
        }
        if !uri.members.iter().any(Vec::is_empty) {
            uri.members.push(Vec::new());
            uri.values.push(OTHER_URI.to_string());
        }

        let limits = Exploration {
            max_states: budget.max_states,
            deadline: budget.deadline,
        };
        let mut arguments = Vec::new();
        for (&argument, constraints) in &parts.arguments {
            let classes =
                argument_classes(constraints, &limits).map_err(|e| argument_reason(argument, e))?;
            let choices = Choices {
                members: classes
                    .satisfied
                    .iter()
                    .zip(&classes.values)
                    .map(|(satisfied, value)| {
                        value
                            .is_some()
                            .then_some(0)
                            .into_iter()
                            .chain(satisfied.iter().map(|j| j + 1))
                            .collect()
                    })
                    .collect(),
                values: classes.values,
                atoms: 1 + constraints.len(),
            };
            arguments.push(NamedArgument {
                name: argument,
                constraints: constraints.clone(),
                classes: choices,
                sources: classes.sources,
            });
        }
        let speaks_of_sources = parts
            .arguments
            .values()
            .flatten()
            .any(|c| c.speaks_of_sources());
        Ok(McpChoices {
            names,
            name,
            uris,
            uri,
            kind: literal_choices(&KINDS, None),
            // An extra argument matters only where an entry refuses one.
            extra: if parts.closed {
                literal_choices(&[true], Some(false))
            } else {
                Choices {
                    members: vec![Vec::new()],
                    values: vec![false],
                    atoms: 1,
                }
            },
            arguments,
            speaks_of_sources,
        })
    }

    /// The shapes of the tool-call dimensions, in [`ComponentVars::mcp`] order.
    fn shapes(&self) -> Vec<(Vec<Vec<u32>>, usize)> {
        let mut out = vec![
            (self.kind.members.clone(), self.kind.atoms),
            (self.name.members.clone(), self.name.atoms),
            (self.uri.members.clone(), self.uri.atoms),
            (self.extra.members.clone(), self.extra.atoms),
        ];
        out.extend(
            self.arguments
                .iter()
                .map(|a| (a.classes.members.clone(), a.classes.atoms)),
        );
        out
    }

    /// Changes values of a call whose stated sources no session could show
    /// (two equal values with different sources, one inside the other)
    /// into others of the same classes until a session can: each leaf
    /// whose realized sources differ from the stated ones gets a variant
    /// ([`crate::arguments::leaf_variant`]). What cannot be separated is
    /// left as it is, and the replay then fails closed.
    fn separate_colliding_values(
        &self,
        chosen: &[usize],
        stated: &StatedSources,
        args: &mut Map<String, Value>,
    ) {
        for _ in 0..4 * stated.0.len() {
            let realized = stated.realized(args);
            let Some(pointer) = stated
                .0
                .iter()
                .find(|(p, s)| realized.0.get(*p) != Some(*s))
                .map(|(p, _)| p.clone())
            else {
                return;
            };
            let owner = self.arguments.iter().enumerate().find_map(|(i, a)| {
                let at = Position::Member(&Position::Root, a.name).pointer();
                let rest = pointer.strip_prefix(&at)?;
                (rest.is_empty() || rest.starts_with('/') || rest.starts_with(ENTITY_MARK))
                    .then(|| (i, rest.to_string()))
            });
            let Some((i, relative)) = owner else {
                return;
            };
            let argument = &self.arguments[i];
            let Some(value) = args.get(argument.name) else {
                return;
            };
            let sources = &argument.sources[chosen[i]];
            let Some(variant) = (1..=20).find_map(|k| {
                crate::arguments::leaf_variant(&argument.constraints, value, sources, &relative, k)
            }) else {
                return;
            };
            args.insert(argument.name.to_string(), variant);
        }
    }

    /// A name to give an argument no entry mentions.
    fn extra_argument(&self) -> String {
        ["x", "extra", "other"]
            .into_iter()
            .map(str::to_string)
            .chain((0..).map(|i| format!("extra{i}")))
            .find(|n| {
                self.arguments
                    .binary_search_by(|a| a.name.cmp(n.as_str()))
                    .is_err()
            })
            .unwrap_or_default()
    }
}

/// A string dimension projected onto some of its patterns.
struct Projected {
    /// Global pattern ids, ascending; local atom i stands for `patterns[i]`.
    patterns: Vec<usize>,
    choices: Choices<String>,
}

/// Per global pattern: the choices containing it, and whether it is
/// constant (in every choice, or in none).
struct Holders {
    of: Vec<Vec<usize>>,
    choices: usize,
}

impl Holders {
    fn new<V>(choices: &Choices<V>) -> Holders {
        let mut of = vec![Vec::new(); choices.atoms];
        for (i, members) in choices.members.iter().enumerate() {
            for &m in members {
                of[m as usize].push(i);
            }
        }
        Holders {
            of,
            choices: choices.members.len(),
        }
    }

    fn constant(&self, pattern: usize) -> Option<bool> {
        match self.of[pattern].len() {
            0 => Some(false),
            n if n == self.choices => Some(true),
            _ => None,
        }
    }

    /// The realizable signatures over `patterns` (non-constant global ids):
    /// every global signature restricted to them, deduplicated, each with
    /// the shortest witness among the signatures that restrict to it.
    fn project(&self, global: &Choices<String>, patterns: Vec<usize>) -> Projected {
        let mut touched: Vec<usize> = patterns
            .iter()
            .flat_map(|&p| self.of[p].iter().copied())
            .collect();
        touched.sort_unstable();
        touched.dedup();
        let mut seen: HashMap<Vec<u32>, usize> = HashMap::new();
        let mut members: Vec<(usize, Vec<u32>)> = Vec::new();
        for &sig in &touched {
            let local: Vec<u32> = global.members[sig]
                .iter()
                .filter_map(|m| {
                    patterns
                        .binary_search(&(*m as usize))
                        .ok()
                        .map(|i| i as u32)
                })
                .collect();
            match seen.get(&local) {
                // Choices are in shortest-witness order: keep the earliest.
                Some(&at) if members[at].0 <= sig => {}
                Some(&at) => members[at].0 = sig,
                None => {
                    seen.insert(local.clone(), members.len());
                    members.push((sig, local));
                }
            }
        }
        if touched.len() < self.choices {
            // Some value matches none of these patterns.
            let untouched = (0..self.choices)
                .find(|i| touched.binary_search(i).is_err())
                .unwrap_or(0);
            if !seen.contains_key(&Vec::new()) {
                members.push((untouched, Vec::new()));
            }
        }
        let atoms = patterns.len();
        Projected {
            patterns,
            choices: Choices {
                values: members
                    .iter()
                    .map(|(sig, _)| global.values[*sig].clone())
                    .collect(),
                members: members.into_iter().map(|(_, m)| m).collect(),
                atoms,
            },
        }
    }
}

/// The projected choices of one component, as plain data.
struct ComponentChoices<'q> {
    /// Per policy of the question, its endpoints in this component.
    endpoints: Vec<Vec<(&'q CompiledRule, &'q CompiledEndpoint)>>,
    host: Projected,
    binary: Projected,
    path: Projected,
    port: Choices<u16>,
    method: Choices<String>,
    /// The query parameters the component's entries name (network
    /// searches), by name ascending.
    query: Vec<QueryParameter<'q>>,
    /// Whether the search considers upgrades here: some endpoint is a
    /// `websocket` one, or a region names the layer. Elsewhere an upgrade
    /// answers a question only where a bare connection or a request with
    /// its path does too (only `l4` endpoints would allow it, and regions
    /// hold it by path as they hold that request), so the layer is left out.
    upgrades: bool,
    /// Present in a tool-call search: the action is an MCP call whose
    /// transport is `POST path` (docs/policy-semantics.md §8.2).
    mcp: Option<McpChoices<'q>>,
}

/// A dimension of a component.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Dim {
    Host,
    Binary,
    Path,
    Port,
    Method,
    /// Tool, resource or prompt ([`KINDS`] order).
    Kind,
    /// The tool or prompt name.
    Name,
    /// The resource URI.
    Uri,
    /// Some argument no entry mentions is present.
    Extra,
    /// The `i`-th named argument of [`McpChoices::arguments`].
    Arg(u32),
    /// The `i`-th parameter of [`ComponentChoices::query`].
    Query(u32),
}

/// A propositional formula over a component's atoms: built and hashed in
/// Rust before any Z3 call, so that components posing the same problem are
/// solved once (see [`ComponentProblem`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Formula {
    Const(bool),
    /// Atom `i` of a dimension (pattern or literal `i` of its projection).
    Atom(Dim, u32),
    /// The action is a REST request.
    Rest,
    /// The action is a WebSocket upgrade (neither: raw L4).
    Websocket,
    And(Vec<Formula>),
    Or(Vec<Formula>),
    Not(Box<Formula>),
}

impl Formula {
    fn and(terms: Vec<Formula>) -> Formula {
        Formula::junction(terms, true)
    }

    fn or(terms: Vec<Formula>) -> Formula {
        Formula::junction(terms, false)
    }

    /// A conjunction (`all`) or disjunction, flattened and constant-folded:
    /// `Const(all)` is neutral, `Const(!all)` decides the result.
    fn junction(terms: Vec<Formula>, all: bool) -> Formula {
        let mut out = Vec::with_capacity(terms.len());
        for t in terms {
            match t {
                Formula::Const(b) if b == all => {}
                Formula::Const(_) => return Formula::Const(!all),
                Formula::And(inner) if all => out.extend(inner),
                Formula::Or(inner) if !all => out.extend(inner),
                t => out.push(t),
            }
        }
        match (out.len(), all) {
            (0, _) => Formula::Const(all),
            (1, _) => out.pop().unwrap_or(Formula::Const(all)),
            (_, true) => Formula::And(out),
            (_, false) => Formula::Or(out),
        }
    }

    fn not(self) -> Formula {
        match self {
            Formula::Const(b) => Formula::Const(!b),
            Formula::Not(inner) => *inner,
            f => Formula::Not(Box::new(f)),
        }
    }
}

/// Everything that decides whether a component has an answer: the shape of
/// each dimension's choices (which atoms each choice makes true) and the
/// asserted formulas. Two components with equal problems are both
/// satisfiable or both not, whatever their concrete patterns.
#[derive(Debug, PartialEq, Eq, Hash)]
struct ComponentProblem {
    choices: [Vec<Vec<u32>>; 5],
    atoms: [usize; 5],
    /// The tool-call dimensions' shapes (empty in a network search).
    mcp: Vec<(Vec<Vec<u32>>, usize)>,
    /// The query parameters' shapes (empty in a tool-call search).
    query: Vec<(Vec<Vec<u32>>, usize)>,
    assertions: Vec<Formula>,
}

/// Builds a component's formulas (docs/policy-semantics.md §4) over its
/// projected atoms.
struct ComponentFormulas<'u, 'a> {
    universe: &'u Universe<'a>,
    choices: &'u ComponentChoices<'u>,
    binary_holders: &'u Holders,
    path_holders: &'u Holders,
}

impl ComponentFormulas<'_, '_> {
    fn projected(dim: Dim, projected: &Projected, pattern: usize) -> Formula {
        match projected.patterns.binary_search(&pattern) {
            Ok(i) => Formula::Atom(dim, i as u32),
            Err(_) => Formula::Const(false),
        }
    }

    fn string_atom(dim: Dim, holders: &Holders, projected: &Projected, pattern: usize) -> Formula {
        match holders.constant(pattern) {
            Some(c) => Formula::Const(c),
            None => Self::projected(dim, projected, pattern),
        }
    }

    fn host(&self, g: &Glob) -> Formula {
        // Host patterns outside this component match no value of it.
        Self::projected(Dim::Host, &self.choices.host, self.universe.hosts.id(g))
    }

    fn binary(&self, g: &Glob) -> Formula {
        let id = self.universe.binaries.id(g);
        Self::string_atom(Dim::Binary, self.binary_holders, &self.choices.binary, id)
    }

    fn path(&self, g: &Glob) -> Formula {
        let id = self.universe.paths.id(g);
        Self::string_atom(Dim::Path, self.path_holders, &self.choices.path, id)
    }

    fn port(&self, p: u16) -> Formula {
        let c = &self.choices.port;
        match c.values[..c.atoms].iter().position(|&v| v == p) {
            Some(i) => Formula::Atom(Dim::Port, i as u32),
            None => Formula::Const(false),
        }
    }

    fn methods(&self, set: &MethodSet) -> Formula {
        let c = &self.choices.method;
        match set {
            MethodSet::Any => Formula::Const(true),
            MethodSet::Only(methods) => Formula::or(
                methods
                    .iter()
                    .filter_map(|m| c.values[..c.atoms].iter().position(|v| v == m))
                    .map(|i| Formula::Atom(Dim::Method, i as u32))
                    .collect(),
            ),
        }
    }

    /// "The action is a REST request": a variable in a network search,
    /// true in a tool-call search (a call's transport is `POST path`).
    fn websocket(&self) -> Formula {
        if self.choices.upgrades {
            Formula::Websocket
        } else {
            Formula::Const(false)
        }
    }

    fn rest(&self) -> Formula {
        if self.choices.mcp.is_some() {
            Formula::Const(true)
        } else {
            Formula::Rest
        }
    }

    fn kind(k: McpKind) -> Formula {
        match KINDS.iter().position(|&x| x == k) {
            Some(i) => Formula::Atom(Dim::Kind, i as u32),
            None => Formula::Const(false),
        }
    }

    /// Whether a tool or prompt entry matches the call (§8.2): its kind, its
    /// name glob, every constrained argument, and no other argument unless
    /// the entry allows additional ones.
    fn call(&self, m: &McpChoices<'_>, e: &CompiledCall, kind: McpKind) -> Formula {
        let mut terms = vec![
            Self::kind(kind),
            match m.names.get(e.name.as_str()) {
                Some(&i) => Formula::Atom(Dim::Name, i),
                None => Formula::Const(false),
            },
        ];
        for (i, argument) in m.arguments.iter().enumerate() {
            let arg = Dim::Arg(i as u32);
            match e.arguments.get(argument.name) {
                Some(c) => terms.push(match argument.constraints.iter().position(|x| *x == c) {
                    Some(j) => Formula::Atom(arg, 1 + j as u32),
                    None => Formula::Const(false),
                }),
                None if !e.additional_arguments => {
                    terms.push(Formula::Atom(arg, 0).not());
                }
                None => {}
            }
        }
        if !e.additional_arguments {
            terms.push(Formula::Atom(Dim::Extra, 0).not());
        }
        Formula::and(terms)
    }

    /// Whether some allow entry of an `mcp` endpoint matches the call.
    fn mcp_entry_allows(&self, m: &McpChoices<'_>, e: &CompiledMcp) -> Formula {
        self.calls(m, &e.tools, &e.prompts, &e.resources)
    }

    /// Whether some tool, prompt or resource entry of its kind matches the
    /// call (an allow entry, or a region's calls, §8.5).
    fn calls(
        &self,
        m: &McpChoices<'_>,
        tools: &[CompiledCall],
        prompts: &[CompiledCall],
        resources: &[UriGlob],
    ) -> Formula {
        let mut terms: Vec<Formula> = tools
            .iter()
            .map(|t| self.call(m, t, McpKind::Tool))
            .chain(prompts.iter().map(|p| self.call(m, p, McpKind::Prompt)))
            .collect();
        for g in resources {
            let uri = match g {
                UriGlob::Any { .. } => Formula::Const(true),
                UriGlob::Prefixed { pattern, .. } => match m.uris.get(pattern.as_str()) {
                    Some(&i) => Formula::Atom(Dim::Uri, i),
                    None => Formula::Const(false),
                },
            };
            terms.push(Formula::and(vec![Self::kind(McpKind::Resource), uri]));
        }
        Formula::or(terms)
    }

    fn entry(&self, e: &CompiledEntry) -> Formula {
        let mut terms = vec![self.methods(&e.methods)];
        if let Some(path) = &e.path {
            terms.push(self.path(path));
        }
        terms.extend(
            e.query
                .iter()
                .map(|(name, c)| self.parameter(Parameter::Query(name), c)),
        );
        Formula::and(terms)
    }

    /// A websocket entry (docs/policy-semantics.md §10.2): no method (an
    /// upgrade is a GET), its path, query, subprotocol and origin.
    fn upgrade_entry(&self, e: &CompiledEntry) -> Formula {
        let mut terms = Vec::new();
        if let Some(path) = &e.path {
            terms.push(self.path(path));
        }
        terms.extend(
            e.query
                .iter()
                .map(|(name, c)| self.parameter(Parameter::Query(name), c)),
        );
        if let Some(c) = &e.subprotocols {
            terms.push(self.parameter(Parameter::Subprotocol, c));
        }
        if let Some(c) = &e.origins {
            terms.push(self.parameter(Parameter::Origin, c));
        }
        Formula::and(terms)
    }

    /// A query parameter's constraint (docs/policy-semantics.md §10.1). A
    /// call's transport has no query, so there every parameter is absent.
    fn parameter(&self, name: Parameter<'_>, c: &ParameterConstraint) -> Formula {
        let found = self.choices.query.iter().position(|p| p.name == name);
        let Some(i) = found else {
            return Formula::Const(c.admits(None));
        };
        let dim = Dim::Query(i as u32);
        let present = Formula::Atom(dim, 0);
        match c {
            ParameterConstraint::Absent => present.not(),
            ParameterConstraint::Matches { globs, optional } => {
                let p = &self.choices.query[i];
                let mut terms: Vec<Formula> = globs
                    .iter()
                    .filter_map(|g| p.glob_atom(g))
                    .map(|atom| Formula::Atom(dim, atom))
                    .collect();
                if *optional {
                    terms.push(present.not());
                }
                Formula::or(terms)
            }
        }
    }

    fn binary_ok(&self, rule: &CompiledRule) -> Formula {
        if rule.binaries.is_empty() {
            return Formula::Const(true);
        }
        Formula::or(rule.binaries.iter().map(|b| self.binary(b)).collect())
    }

    /// `allows_P(a)` of §4 for actions whose host lies in this component:
    /// some endpoint allows and no endpoint denies.
    fn allows(&self, policy: usize) -> Formula {
        let mut allows = Vec::new();
        let mut denies = Vec::new();
        for &(rule, e) in &self.choices.endpoints[policy] {
            let host = self.host(&e.host);
            let connection = Formula::and(vec![
                self.binary_ok(rule),
                host,
                Formula::or(e.ports.iter().map(|&p| self.port(p)).collect()),
            ]);
            match &e.kind {
                EndpointKind::L4 => allows.push(connection),
                EndpointKind::Rest { scope, allow, deny }
                | EndpointKind::Websocket { scope, allow, deny } => {
                    // A request's entries speak of methods, an upgrade's of
                    // subprotocols and origins (§4, §10.2).
                    let (layer, entry): (Formula, fn(&Self, &CompiledEntry) -> Formula) = match &e
                        .kind
                    {
                        EndpointKind::Websocket { .. } => (self.websocket(), Self::upgrade_entry),
                        _ => (self.rest(), Self::entry),
                    };
                    if !allow.is_empty() {
                        let mut terms = vec![connection.clone(), layer.clone()];
                        if let Some(scope) = scope {
                            terms.push(self.path(scope));
                        }
                        terms.push(Formula::or(allow.iter().map(|a| entry(self, a)).collect()));
                        allows.push(Formula::and(terms));
                    }
                    if !deny.is_empty() {
                        denies.push(Formula::and(vec![
                            connection,
                            layer,
                            Formula::or(deny.iter().map(|d| entry(self, d)).collect()),
                        ]));
                    }
                }
                // An mcp endpoint judges tool calls only: it neither allows
                // nor denies a network action (docs/policy-semantics.md §8.2).
                EndpointKind::Mcp(server) => {
                    let Some(m) = &self.choices.mcp else {
                        continue;
                    };
                    let on_path = Formula::and(vec![connection, self.path(&server.path)]);
                    allows.push(Formula::and(vec![
                        on_path.clone(),
                        self.mcp_entry_allows(m, server),
                    ]));
                    if !server.deny_tools.is_empty() {
                        denies.push(Formula::and(vec![
                            on_path,
                            Formula::or(
                                server
                                    .deny_tools
                                    .iter()
                                    .map(|d| self.call(m, d, McpKind::Tool))
                                    .collect(),
                            ),
                        ]));
                    }
                }
            }
        }
        Formula::and(vec![Formula::or(allows), Formula::or(denies).not()])
    }

    fn region(&self, r: &CompiledRegion) -> Formula {
        let mut terms = Vec::new();
        if let Some(b) = &r.binaries {
            terms.push(Formula::or(b.iter().map(|g| self.binary(g)).collect()));
        }
        if let Some(h) = &r.hosts {
            terms.push(Formula::or(h.iter().map(|g| self.host(g)).collect()));
        }
        if let Some(p) = &r.ports {
            terms.push(Formula::or(p.iter().map(|&p| self.port(p)).collect()));
        }
        if let Some(layers) = &r.layers {
            terms.push(Formula::or(
                layers
                    .iter()
                    .map(|l| match l {
                        Layer::Rest => self.rest(),
                        Layer::Websocket => self.websocket(),
                        Layer::L4 => Formula::and(vec![self.rest().not(), self.websocket().not()]),
                    })
                    .collect(),
            ));
        }
        if let Some(m) = &r.methods {
            terms.push(Formula::and(vec![self.rest(), self.methods(m)]));
        }
        if let Some(paths) = &r.paths {
            terms.push(Formula::and(vec![
                Formula::or(vec![self.rest(), self.websocket()]),
                Formula::or(paths.iter().map(|g| self.path(g)).collect()),
            ]));
        }
        if let Some(calls) = &r.calls {
            // Such a region holds calls only, never a network action.
            terms.push(match &self.choices.mcp {
                Some(m) => self.calls(m, &calls.tools, &calls.prompts, &calls.resources),
                None => Formula::Const(false),
            });
        }
        Formula::and(terms)
    }

    /// The component's whole problem for a question.
    fn problem(&self, question: &Question<'_>) -> ComponentProblem {
        let mut assertions = Vec::new();
        let positives = question.positive.len();
        assertions.extend((0..positives).map(|p| self.allows(p)));
        assertions.extend((0..question.negative.len()).map(|n| self.allows(positives + n).not()));
        assertions.extend(question.regions.iter().map(|r| self.region(r)));
        // One layer: a request or an upgrade, never both.
        assertions.push(Formula::or(vec![self.rest().not(), self.websocket().not()]));
        let c = self.choices;
        if let Some(m) = &c.mcp {
            // A resource read carries no arguments (§8.1).
            let mut none = vec![Formula::Atom(Dim::Extra, 0).not()];
            none.extend((0..m.arguments.len()).map(|i| Formula::Atom(Dim::Arg(i as u32), 0).not()));
            assertions.push(Formula::or(vec![
                Self::kind(McpKind::Resource).not(),
                Formula::and(none),
            ]));
        }
        ComponentProblem {
            choices: [
                c.host.choices.members.clone(),
                c.binary.choices.members.clone(),
                c.path.choices.members.clone(),
                c.port.members.clone(),
                c.method.members.clone(),
            ],
            atoms: [
                c.host.choices.atoms,
                c.binary.choices.atoms,
                c.path.choices.atoms,
                c.port.atoms,
                c.method.atoms,
            ],
            mcp: c.mcp.as_ref().map(McpChoices::shapes).unwrap_or_default(),
            query: c
                .query
                .iter()
                .map(|p| (p.classes.members.clone(), p.classes.atoms))
                .collect(),
            assertions,
        }
    }
}

/// Z3 variables of one component.
struct ComponentVars<'u> {
    choices: &'u ComponentChoices<'u>,
    dims: [DimVars; 5],
    /// Kind, name, URI, extra, then each named argument (tool-call search).
    mcp: Vec<DimVars>,
    /// Each query parameter (network search).
    query: Vec<DimVars>,
    rest: Bool,
    websocket: Bool,
}

impl<'u> ComponentVars<'u> {
    fn new(choices: &'u ComponentChoices<'u>, solver: &Solver) -> Self {
        let always = Bool::from_bool(true);
        ComponentVars {
            choices,
            dims: [
                DimVars::new("host", &choices.host.choices, solver, &always),
                DimVars::new("binary", &choices.binary.choices, solver, &always),
                DimVars::new("path", &choices.path.choices, solver, &always),
                DimVars::new("port", &choices.port, solver, &always),
                DimVars::new("method", &choices.method, solver, &always),
            ],
            mcp: choices.mcp.as_ref().map_or_else(Vec::new, |m| {
                let mut vars = vec![
                    DimVars::new("kind", &m.kind, solver, &always),
                    DimVars::new("name", &m.name, solver, &always),
                    DimVars::new("uri", &m.uri, solver, &always),
                    DimVars::new("extra", &m.extra, solver, &always),
                ];
                vars.extend(m.arguments.iter().map(|a| {
                    DimVars::new(&format!("arg:{}", a.name), &a.classes, solver, &always)
                }));
                vars
            }),
            query: choices
                .query
                .iter()
                .map(|p| {
                    DimVars::new(
                        &format!("parameter:{:?}", p.name),
                        &p.classes,
                        solver,
                        &always,
                    )
                })
                .collect(),
            rest: Bool::new_const("layer_rest"),
            websocket: Bool::new_const("layer_websocket"),
        }
    }

    /// The order [`canonical`] fixes the variables in: the transport
    /// (host, binary with the ones a rule names first, port, layer, method, path), then the call (kind,
    /// name, URI, arguments, an extra argument).
    fn canonical_order(&self) -> Vec<Canonical<'_>> {
        let mut order = vec![
            Canonical::Dim(self.dim(Dim::Host)),
            Canonical::Ranked(self.dim(Dim::Binary), self.binaries_named_first()),
            Canonical::Dim(self.dim(Dim::Port)),
            // A bare connection when one is a counterexample: it says the
            // most (every request on it is one too).
            Canonical::Flag(&self.rest, false),
        ];
        if self.choices.upgrades {
            order.push(Canonical::Flag(&self.websocket, false));
        }
        order.extend([
            Canonical::Dim(self.dim(Dim::Method)),
            Canonical::Dim(self.dim(Dim::Path)),
        ]);
        // Absent first: a counterexample names only the parameters it needs.
        order.extend((0..self.query.len()).map(|i| Canonical::Dim(self.dim(Dim::Query(i as u32)))));
        if let Some(m) = &self.choices.mcp {
            order.extend([Dim::Kind, Dim::Name, Dim::Uri].map(|d| Canonical::Dim(self.dim(d))));
            order.extend(
                (0..m.arguments.len()).map(|i| Canonical::Dim(self.dim(Dim::Arg(i as u32)))),
            );
            order.push(Canonical::Dim(self.dim(Dim::Extra)));
        }
        order
    }

    /// The binary choices, those a rule of the question names exactly
    /// first (`/usr/bin/gh`, not the filler `/x` standing for any other
    /// binary, when either is a counterexample), each group shortest
    /// witness first.
    fn binaries_named_first(&self) -> Vec<usize> {
        let named: BTreeSet<&str> = self
            .choices
            .endpoints
            .iter()
            .flatten()
            .flat_map(|(rule, _)| rule.binaries.iter())
            .filter(|glob| glob.tokens().iter().all(|t| matches!(t, Token::Literal(_))))
            .map(|glob| glob.as_str())
            .collect();
        let values = &self.choices.binary.choices.values;
        let (mut first, rest): (Vec<usize>, Vec<usize>) =
            (0..values.len()).partition(|&i| named.contains(values[i].as_str()));
        first.extend(rest);
        first
    }

    fn dim(&self, dim: Dim) -> &DimVars {
        match dim {
            Dim::Host => &self.dims[0],
            Dim::Binary => &self.dims[1],
            Dim::Path => &self.dims[2],
            Dim::Port => &self.dims[3],
            Dim::Method => &self.dims[4],
            Dim::Kind => &self.mcp[0],
            Dim::Name => &self.mcp[1],
            Dim::Uri => &self.mcp[2],
            Dim::Extra => &self.mcp[3],
            Dim::Arg(i) => &self.mcp[4 + i as usize],
            Dim::Query(i) => &self.query[i as usize],
        }
    }

    fn z3(&self, f: &Formula) -> Bool {
        match f {
            Formula::Const(b) => Bool::from_bool(*b),
            Formula::Atom(dim, i) => self.dim(*dim).atoms[*i as usize].clone(),
            Formula::Rest => self.rest.clone(),
            Formula::Websocket => self.websocket.clone(),
            Formula::And(terms) => Bool::and(&terms.iter().map(|t| self.z3(t)).collect::<Vec<_>>()),
            Formula::Or(terms) => Bool::or(&terms.iter().map(|t| self.z3(t)).collect::<Vec<_>>()),
            Formula::Not(inner) => self.z3(inner).not(),
        }
    }

    /// The tool call the model describes, and the formula blocking its
    /// combination of signatures and classes.
    fn decode_mcp(&self, m: &McpChoices<'_>, model: &Model) -> (McpAction, Bool) {
        let mut same = Vec::new();
        // The choice of one dimension, recorded for the blocking clause.
        let mut pick = |dim: Dim| {
            let chosen = self.dim(dim).chosen(model);
            same.extend(self.dim(dim).is_chosen(chosen));
            chosen
        };
        let c = self.choices;
        let (host, binary) = (pick(Dim::Host), pick(Dim::Binary));
        let (port, path) = (pick(Dim::Port), pick(Dim::Path));
        let kind = m.kind.values[pick(Dim::Kind)];
        let mut args = Map::new();
        let mut stated = StatedSources::default();
        let mut chosen = Vec::new();
        let name = if kind == McpKind::Resource {
            m.uri.values[pick(Dim::Uri)].clone()
        } else {
            let name = m.name.values[pick(Dim::Name)].clone();
            for (i, argument) in m.arguments.iter().enumerate() {
                let class = pick(Dim::Arg(i as u32));
                chosen.push(class);
                if let Some(value) = &argument.classes.values[class] {
                    args.insert(argument.name.to_string(), value.clone());
                    let at = Position::Member(&Position::Root, argument.name).pointer();
                    for (pointer, set) in &argument.sources[class].0 {
                        stated.0.insert(format!("{at}{pointer}"), set.clone());
                    }
                }
            }
            if m.extra.values[pick(Dim::Extra)] {
                args.insert(m.extra_argument(), Value::String("x".to_string()));
            }
            name
        };
        if m.speaks_of_sources {
            m.separate_colliding_values(&chosen, &stated, &mut args);
        }
        let action = McpAction {
            binary: c.binary.choices.values[binary].clone(),
            host: c.host.choices.values[host].clone(),
            port: c.port.values[port],
            path: c.path.choices.values[path].clone(),
            kind,
            name,
            // A session can only show what it can hold: equal values share
            // their sources, a value inside another inherits the other's.
            sources: m
                .speaks_of_sources
                .then(|| Box::new(stated.realized(&args))),
            args,
            credential: None,
        };
        (action, all(same))
    }

    /// The action the model describes, and a formula for "the same
    /// combination of signatures" to block it for the next example.
    fn decode(&self, model: &Model) -> (Action, Bool) {
        if let Some(m) = &self.choices.mcp {
            let (action, same) = self.decode_mcp(m, model);
            return (Action::Mcp(action), same);
        }
        let rest = holds(model, &self.rest);
        let websocket = self.choices.upgrades && !rest && holds(model, &self.websocket);
        let picks = self.dims.each_ref().map(|d| d.chosen(model));
        let c = self.choices;
        // `dims` order: host, binary, path, port, method.
        let [host, binary, path, port, method] = picks;
        let mut query = Query::new();
        let mut upgrade = websocket.then(Upgrade::default);
        let mut parameter_picks = Vec::new();
        if rest || websocket {
            for (i, p) in c.query.iter().enumerate() {
                let dim = Dim::Query(i as u32);
                let picked = self.dim(dim).chosen(model);
                let value = p.classes.values[picked].clone();
                match (p.name, upgrade.as_mut()) {
                    (Parameter::Query(name), _) => {
                        if let Some(value) = value {
                            query.insert(name.to_string(), value);
                        }
                    }
                    (Parameter::Subprotocol, Some(u)) => u.subprotocol = value,
                    (Parameter::Origin, Some(u)) => u.origin = value,
                    // A request has no subprotocol or origin to tell apart.
                    (_, None) => continue,
                }
                parameter_picks.push((dim, picked));
            }
        }
        let layer = if rest {
            Layer::Rest
        } else if websocket {
            Layer::Websocket
        } else {
            Layer::L4
        };
        let action = NetworkAction {
            host: c.host.choices.values[host].clone(),
            binary: c.binary.choices.values[binary].clone(),
            port: c.port.values[port],
            layer,
            method: match layer {
                Layer::Rest => c.method.values[method].clone(),
                Layer::Websocket => "GET".to_string(),
                Layer::L4 => String::new(),
            },
            path: if rest || websocket {
                c.path.choices.values[path].clone()
            } else {
                String::new()
            },
            credential: None,
            query,
            upgrade,
        };
        let flag = |var: &Bool, on: bool| if on { var.clone() } else { var.not() };
        let mut same = vec![flag(&self.rest, rest)];
        if c.upgrades {
            same.push(flag(&self.websocket, websocket));
        }
        for (dim, picked) in [(Dim::Host, host), (Dim::Binary, binary), (Dim::Port, port)] {
            same.extend(self.dim(dim).is_chosen(picked));
        }
        let mut shown = parameter_picks;
        if rest {
            shown.push((Dim::Method, method));
        }
        if rest || websocket {
            shown.push((Dim::Path, path));
        }
        for (dim, picked) in shown {
            same.extend(self.dim(dim).is_chosen(picked));
        }
        (Action::Network(action), all(same))
    }
}

/// A fresh solver with the check's remaining time as its timeout, in this
/// thread's Z3 context. The context is reused across checks: every check
/// builds a new solver and drops all its terms, so nothing carries over,
/// and reusing it avoids allocating and returning ~16 MiB per check, which
/// in some heap states cost thousands of page faults per check (docs/z3.md:
/// no drift over 20,000 consecutive checks). Z3's default solver: for many
/// small incremental sub-questions (push/check/pop per component) it was
/// measured faster than the finite-domain (SAT) solver.
fn new_solver(budget: &Budget) -> Solver {
    let solver = Solver::new();
    let remaining = budget.deadline.saturating_duration_since(Instant::now());
    let mut params = Params::new();
    params.set_u32(
        "timeout",
        remaining.as_millis().clamp(1, u32::MAX as u128) as u32,
    );
    solver.set_params(&params);
    solver
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

fn union_find_root(parent: &mut [usize], mut x: usize) -> usize {
    while parent[x] != x {
        parent[x] = parent[parent[x]];
        x = parent[x];
    }
    x
}

/// Groups host patterns into components: patterns that occur together in
/// some realizable host signature share one. Returns the patterns of each
/// component and the component of every pattern (`None`: it matches no
/// canonical host).
fn host_components(host: &Choices<String>) -> (Vec<Vec<usize>>, Vec<Option<usize>>) {
    let mut parent: Vec<usize> = (0..host.atoms).collect();
    for members in &host.members {
        for pair in members.windows(2) {
            let (a, b) = (
                union_find_root(&mut parent, pair[0] as usize),
                union_find_root(&mut parent, pair[1] as usize),
            );
            parent[a] = b;
        }
    }
    let mut index: HashMap<usize, usize> = HashMap::new();
    let mut components: Vec<Vec<usize>> = Vec::new();
    let mut component_of_host = vec![None; host.atoms];
    // Choices come shortest witness first, so components do too.
    for members in &host.members {
        for &m in members {
            let m = m as usize;
            if component_of_host[m].is_some() {
                continue;
            }
            let root = union_find_root(&mut parent, m);
            let k = *index.entry(root).or_insert_with(|| {
                components.push(Vec::new());
                components.len() - 1
            });
            components[k].push(m);
            component_of_host[m] = Some(k);
        }
    }
    for patterns in &mut components {
        patterns.sort_unstable();
    }
    (components, component_of_host)
}

/// Searches for up to `k` network actions answering the question.
///
/// The question is split by host component (see [`Component`]): actions in
/// different components share no host pattern, so each component is an
/// independent, small sub-question over its own projected signatures. They
/// are solved one after another in one Z3 context; only components where
/// every positive policy has an allow endpoint can answer at all.
pub fn search_network(question: &Question<'_>, k: usize, budget: &Budget) -> Search {
    search_transport(question, k, budget, false)
}

/// Searches for up to `k` MCP calls answering the question
/// (docs/policy-semantics.md §8.2): the same split by host component, with a
/// call's transport fixed to `POST path` and, per component, the kind, name
/// and argument classes of the calls its `mcp` entries tell apart.
pub fn search_mcp(question: &Question<'_>, k: usize, budget: &Budget) -> Search {
    search_transport(question, k, budget, true)
}

fn search_transport(question: &Question<'_>, k: usize, budget: &Budget, mcp: bool) -> Search {
    if question.positive.is_empty() {
        return inconclusive(
            ReasonCode::SolverUnknown,
            "internal: a question needs at least one policy that must allow the action",
        );
    }
    let mut universe = Universe::default();
    question
        .positive
        .iter()
        .chain(question.negative)
        .for_each(|p| universe.add_policy(p, mcp));
    question.regions.iter().for_each(|r| universe.add_region(r));
    universe.finish();
    tracing::debug!(
        universe_ms = budget.started.elapsed().as_secs_f64() * 1000.0,
        "universe built"
    );
    let dimensions = Dimensions::of(&universe, budget);
    tracing::debug!(
        dims_ms = budget.started.elapsed().as_secs_f64() * 1000.0,
        "automata built"
    );
    let dimensions = match dimensions {
        Ok(d) => d,
        Err(r) => return Search::failed(r),
    };
    let mut parts = components_of(question, &universe, &dimensions.host, mcp);
    tracing::debug!(
        parts_ms = budget.started.elapsed().as_secs_f64() * 1000.0,
        "components split"
    );
    let holders = DimensionHolders::of(&dimensions);
    let mut relevant: Vec<ComponentChoices> = Vec::new();
    // A component where some positive policy allows nothing cannot answer.
    for part in parts.iter_mut().filter(|p| p.candidate.iter().all(|&c| c)) {
        match component_choices(
            part,
            question,
            &universe,
            &dimensions,
            &holders,
            budget,
            mcp,
        ) {
            Ok(choices) => relevant.push(choices),
            Err(reason) => return Search::failed(reason),
        }
    }
    tracing::debug!(
        host_choices = dimensions.host.members.len(),
        components = parts.len(),
        relevant = relevant.len(),
        automata_ms = budget.started.elapsed().as_secs_f64() * 1000.0,
        "signatures projected"
    );
    if relevant.is_empty() {
        return Search {
            examples: Vec::new(),
            end: SearchEnd::Exhausted,
        };
    }
    if Instant::now() >= budget.deadline {
        return inconclusive(ReasonCode::SolverTimeout, "deadline reached before solving");
    }
    let outcome = solve_components(
        &relevant,
        &universe,
        (&holders.binary, &holders.path),
        question,
        k,
        budget,
    );
    Search::from_outcome(outcome, |a| a)
}

/// The realisable choices of the three pattern dimensions of a question's
/// universe.
struct Dimensions {
    host: Choices<String>,
    binary: Choices<String>,
    path: Choices<String>,
}

impl Dimensions {
    fn of(universe: &Universe<'_>, budget: &Budget) -> Result<Dimensions, Reason> {
        let dimension = |domain, name, patterns: &Patterns<'_>| {
            let tokens = patterns.tokens();
            signatures(domain, name, &tokens, budget.max_states, budget.deadline)
                .map(|s| Choices::from_signatures(s, patterns.globs.len()))
                .map_err(automaton_reason)
        };
        Ok(Dimensions {
            host: reversed_host_choices(universe, budget)?,
            binary: dimension(Domain::Binary, "binary", &universe.binaries)?,
            path: dimension(Domain::RequestPath, "path", &universe.paths)?,
        })
    }
}

/// The host dimension, built from the patterns read right to left. Host
/// wildcards sit only in the first label, so reversed the patterns are
/// literal first and diverge at once: the DFA stays a suffix trie instead of
/// carrying every `**.` pattern through every state. The canonical host
/// form is symmetric, so the reversed witness is canonical.
fn reversed_host_choices(
    universe: &Universe<'_>,
    budget: &Budget,
) -> Result<Choices<String>, Reason> {
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
}

/// Which choices of each dimension a pattern holds in.
struct DimensionHolders {
    host: Holders,
    binary: Holders,
    path: Holders,
}

impl DimensionHolders {
    fn of(dimensions: &Dimensions) -> DimensionHolders {
        DimensionHolders {
            host: Holders::new(&dimensions.host),
            binary: Holders::new(&dimensions.binary),
            path: Holders::new(&dimensions.path),
        }
    }
}

/// The question's endpoints split by the components of the host
/// dimension, with what each component's endpoints mention.
fn components_of<'q>(
    question: &Question<'q>,
    universe: &Universe<'_>,
    host: &Choices<String>,
    mcp: bool,
) -> Vec<Component<'q>> {
    let (components, component_of_host) = host_components(host);
    let positives = question.positive.len();
    let mut parts: Vec<Component> = components
        .into_iter()
        .map(|hosts| Component {
            hosts,
            endpoints: vec![Vec::new(); positives + question.negative.len()],
            candidate: vec![false; positives],
            binaries: Vec::new(),
            paths: Vec::new(),
            ports: Vec::new(),
            methods: Vec::new(),
            query: BTreeMap::new(),
            mcp: McpParts::default(),
            upgrades: false,
        })
        .collect();
    let u = universe;
    // Positives first, then negatives: the slot order of `Component::endpoints`.
    let policies: Vec<(Option<usize>, &CompiledPolicy)> = question
        .positive
        .iter()
        .enumerate()
        .map(|(i, p)| (Some(i), *p))
        .chain(question.negative.iter().map(|p| (None, *p)))
        .collect();
    for (slot, (positive, policy)) in policies.into_iter().enumerate() {
        for rule in &policy.rules {
            for e in &rule.endpoints {
                let Some(c) = component_of_host[u.hosts.id(&e.host)] else {
                    continue;
                };
                let part = &mut parts[c];
                part.endpoints[slot].push((rule, e));
                part.binaries
                    .extend(rule.binaries.iter().map(|b| u.binaries.id(b)));
                part.ports.extend(&e.ports);
                let allows_something = match &e.kind {
                    EndpointKind::L4 => true,
                    EndpointKind::Rest { scope, allow, deny }
                    | EndpointKind::Websocket { scope, allow, deny } => {
                        let upgrade = matches!(e.kind, EndpointKind::Websocket { .. });
                        part.upgrades |= upgrade && !mcp;
                        if let Some(scope) = scope {
                            part.paths.push(u.paths.id(scope));
                        }
                        for entry in allow.iter().chain(deny) {
                            if let MethodSet::Only(m) = &entry.methods {
                                part.methods.extend(m.iter().cloned());
                            }
                            if let Some(p) = &entry.path {
                                part.paths.push(u.paths.id(p));
                            }
                            if !mcp {
                                let parameters = entry
                                    .query
                                    .iter()
                                    .map(|(name, c)| (Parameter::Query(name.as_str()), c))
                                    .chain(
                                        entry
                                            .subprotocols
                                            .iter()
                                            .map(|c| (Parameter::Subprotocol, c)),
                                    )
                                    .chain(entry.origins.iter().map(|c| (Parameter::Origin, c)));
                                for (name, c) in parameters {
                                    let list = part.query.entry(name).or_default();
                                    if !list.contains(&c) {
                                        list.push(c);
                                    }
                                }
                            }
                        }
                        // A tool call is never an upgrade.
                        if mcp && upgrade {
                            false
                        } else {
                            !allow.is_empty()
                        }
                    }
                    EndpointKind::Mcp(server) if mcp => {
                        part.paths.push(u.paths.id(&server.path));
                        part.mcp.add(server);
                        server.allows_anything()
                    }
                    EndpointKind::Mcp(_) => false,
                };
                if let Some(i) = positive {
                    part.candidate[i] |= allows_something;
                }
            }
        }
    }
    parts
}

/// One candidate component's choices, projected to what its endpoints and
/// the question's regions mention.
fn component_choices<'q>(
    part: &mut Component<'q>,
    question: &Question<'q>,
    u: &Universe<'_>,
    dimensions: &Dimensions,
    holders: &DimensionHolders,
    budget: &Budget,
    mcp: bool,
) -> Result<ComponentChoices<'q>, Reason> {
    for r in question.regions {
        part.binaries
            .extend(r.binaries.iter().flatten().map(|b| u.binaries.id(b)));
        part.paths
            .extend(r.paths.iter().flatten().map(|p| u.paths.id(p)));
        part.ports.extend(r.ports.iter().flatten());
        if let Some(MethodSet::Only(m)) = &r.methods {
            part.methods.extend(m.iter().cloned());
        }
        if mcp && let Some(calls) = &r.calls {
            part.mcp.add_region(calls);
        }
    }
    let relevant_ids = |ids: &mut Vec<usize>, holders: &Holders| {
        ids.sort_unstable();
        ids.dedup();
        ids.retain(|&p| holders.constant(p).is_none());
        std::mem::take(ids)
    };
    let binaries = relevant_ids(&mut part.binaries, &holders.binary);
    let paths = relevant_ids(&mut part.paths, &holders.path);
    part.ports.sort_unstable();
    part.ports.dedup();
    part.methods.sort_unstable();
    part.methods.dedup();
    let mut host_choice = holders.host.project(&dimensions.host, part.hosts.clone());
    // Values matching none of the component's hosts belong elsewhere.
    host_choice.choices.drop_empty();
    let (method, tool_calls) = if mcp {
        // Every call travels as POST.
        let calls = McpChoices::new(&part.mcp, budget)?;
        (literal_choices(&["POST".to_string()], None), Some(calls))
    } else {
        let other = other_method(&part.methods);
        (literal_choices(&part.methods, Some(other)), None)
    };
    let query = part
        .query
        .iter()
        .map(|(name, constraints)| QueryParameter::new(*name, constraints, budget))
        .collect::<Result<Vec<_>, _>>()?;
    let upgrades = !mcp
        && (part.upgrades
            || question.regions.iter().any(|r| {
                r.layers
                    .as_ref()
                    .is_some_and(|l| l.contains(&Layer::Websocket))
            }));
    Ok(ComponentChoices {
        query,
        upgrades,
        endpoints: std::mem::take(&mut part.endpoints),
        host: host_choice,
        binary: holders.binary.project(&dimensions.binary, binaries),
        path: holders.path.project(&dimensions.path, paths),
        port: literal_choices(&part.ports, other_port(&part.ports)),
        method,
        mcp: tool_calls,
    })
}

/// Solves the components one after another in this thread's Z3 context
/// (a fresh solver per check; see [`new_solver`]).
fn solve_components(
    relevant: &[ComponentChoices<'_>],
    u: &Universe<'_>,
    holders: (&Holders, &Holders),
    question: &Question<'_>,
    k: usize,
    budget: &Budget,
) -> Result<(Vec<Action>, bool), Reason> {
    let solver = new_solver(budget);
    let mut found = Vec::new();
    // Problems already proved to have no answer in this check.
    let mut unsat: HashSet<ComponentProblem> = HashSet::new();
    let (mut solved, mut reused) = (0usize, 0usize);
    for choices in relevant {
        if Instant::now() >= budget.deadline {
            return Err(Reason::general(
                ReasonCode::SolverTimeout,
                "deadline reached while solving",
            ));
        }
        let formulas = ComponentFormulas {
            universe: u,
            choices,
            binary_holders: holders.0,
            path_holders: holders.1,
        };
        let problem = formulas.problem(question);
        if problem.assertions.contains(&Formula::Const(false)) {
            continue; // decided by constant folding: e.g. no allow endpoint survives
        }
        if unsat.contains(&problem) {
            reused += 1;
            continue;
        }
        solved += 1;
        solver.push();
        let vars = ComponentVars::new(choices, &solver);
        for assertion in &problem.assertions {
            solver.assert(vars.z3(assertion));
        }
        let before = found.len();
        while found.len() < k {
            match solver.check() {
                SatResult::Unsat => break,
                SatResult::Unknown => return Err(unknown_reason(&solver)),
                SatResult::Sat => {}
            }
            let Some(model) = solver.get_model() else {
                return Err(Reason::general(
                    ReasonCode::SolverUnknown,
                    "solver returned no model",
                ));
            };
            let model = canonical(&solver, model, &vars.canonical_order())?;
            let (action, same) = vars.decode(&model);
            found.push(action);
            solver.assert(same.not());
        }
        solver.pop(1);
        if found.len() == before {
            unsat.insert(problem);
        }
        if found.len() >= k {
            tracing::debug!(
                solved,
                reused,
                solved_ms = budget.started.elapsed().as_secs_f64() * 1000.0,
                "enough examples"
            );
            return Ok((found, false));
        }
    }
    tracing::debug!(
        solved,
        reused,
        solved_ms = budget.started.elapsed().as_secs_f64() * 1000.0,
        "exhausted"
    );
    Ok((found, true))
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

/// The filesystem question in this thread's Z3 context.
fn solve_filesystem(
    entries: &[&str],
    choices: &Choices<String>,
    question: &Question<'_>,
    k: usize,
    budget: &Budget,
) -> Result<(Vec<FilesystemAction>, bool), Reason> {
    let solver = new_solver(budget);
    let path = DimVars::new("fspath", choices, &solver, &Bool::from_bool(true));
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
        let model = canonical(
            &solver,
            model,
            &[Canonical::Dim(&path), Canonical::Flag(&write, false)],
        )?;
        let is_write = holds(&model, &write);
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
            return Search::failed(automaton_reason(e));
        }
    };
    let entries = &entries;
    let choices = &choices;
    let outcome = solve_filesystem(entries, choices, question, k, budget);
    Search::from_outcome(outcome, Action::Filesystem)
}
