//! The values of one MCP argument, up to what the policies can tell apart
//! (docs/proofs.md, "Tool calls"). A question mentions finitely many
//! constraints on an argument; two values that satisfy exactly the same of
//! them are interchangeable in every proof. This module finds one value for
//! every realizable combination: the argument's *classes*.
//!
//! Each constraint speaks about one JSON type (a `glob` about strings,
//! `minimum`/`maximum` about numbers, `items`/`maxItems` about arrays; a
//! `oneOf` about its literals), so the classes are found type by type from
//! a finite pool of candidates that provably meets every combination:
//! strings from the automaton of the globs and string literals, numbers
//! from the points the bounds and literals cut the line at, arrays from
//! the classes of their elements, closed under intersection and cut at
//! every `maxItems`. Each candidate's combination is then read with the
//! matcher's own [`CompiledConstraint::admits`], so a class is never
//! labelled by a second implementation of the constraints.
//!
//! Where a constraint says `from` (§8.3), a class is a value *and* where
//! each string and number in it was seen: every value candidate is tried
//! with every realizable origin of its leaves. Sources are told apart only
//! as far as the `from` lists can tell them apart (`user`, one tool and one
//! host name per combination of the `tool:`/`host:` globs, and "seen
//! nowhere"), and a leaf may be seen from several at once, so the origins
//! of one leaf are the unions of those; an array's or object's leaves get
//! their origins independently, so its combinations are the intersections
//! of its elements', as for `items`. Origins are chosen position by
//! position, which over-approximates a session (there, equal values share
//! their sources): a proof that nothing exceeds holds a fortiori, and a
//! counterexample is realized as a session before it is replayed
//! ([`agentgate_policy::provenance::StatedSources::realized`]).

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::time::Instant;

use serde_json::{Map, Number, Value, json};

use crate::automaton::{AutomatonError, Domain, signatures};
use agentgate_policy::glob::Token;
use agentgate_policy::mcp::{CompiledConstraint, Literal, MAX_ITEMS_DEPTH};
use agentgate_policy::provenance::{
    ENTITY_MARK, KEY_SUFFIX, Position, Provenance, Source, SourcePattern, StatedSources, tracked,
};

/// The most classes one argument (or one array level) may have.
pub const MAX_CLASSES: usize = 4096;
/// The longest array a class needs (one element past the largest
/// `maxItems` below it); a longer one fails closed.
pub const MAX_ARRAY_LENGTH: usize = 10_000;
/// Numbers in bounds and literals must lie within ±2^52, where every
/// integer and every candidate between two of them is exact.
const MAX_EXACT: f64 = 4_503_599_627_370_496.0;

/// Why the classes of an argument could not be found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArgumentError {
    /// The constraints use a shape the model does not cover.
    #[error("{0}")]
    Unsupported(String),
    /// More classes, or a longer array, than the limits allow.
    #[error("{0}")]
    TooLarge(String),
    /// The string automaton stopped early.
    #[error(transparent)]
    Automaton(#[from] AutomatonError),
}

/// The classes of one argument: for each, the constraints it satisfies and
/// a value that realises it (`None`: the argument is absent), with where its
/// strings and numbers were seen.
#[derive(Debug, Clone, PartialEq)]
pub struct ArgumentClasses {
    /// Per class, the indices of the constraints it satisfies, ascending.
    pub satisfied: Vec<Vec<u32>>,
    /// Per class, its value; the absent class has `None`.
    pub values: Vec<Option<Value>>,
    /// Per class, the sources of its value's leaves by JSON pointer
    /// relative to the value (`""` for a string or number itself, `/0`
    /// for an array's first element); empty where no constraint says
    /// `from`.
    pub sources: Vec<StatedSources>,
}

/// A candidate value and where its leaves were seen.
type Candidate = (Value, StatedSources);

/// Limits of one exploration.
#[derive(Debug, Clone, Copy)]
pub struct Exploration {
    /// Largest string automaton.
    pub max_states: usize,
    /// When the check must be over.
    pub deadline: Instant,
}

/// Every class of an argument under `constraints`: the absent argument
/// (satisfying the optional constraints) and one present value per
/// realizable combination of satisfied constraints.
pub fn argument_classes(
    constraints: &[&CompiledConstraint],
    limits: &Exploration,
) -> Result<ArgumentClasses, ArgumentError> {
    let mut classes = ArgumentClasses {
        satisfied: vec![
            (0..constraints.len() as u32)
                .filter(|&j| constraints[j as usize].optional)
                .collect(),
        ],
        values: vec![None],
        sources: vec![StatedSources::default()],
    };
    let origins = leaf_origins(constraints, limits)?;
    for (satisfied, (value, sources)) in present_classes(constraints, 0, &origins, limits)? {
        classes.satisfied.push(satisfied);
        classes.values.push(Some(value));
        classes.sources.push(sources);
    }
    Ok(classes)
}

/// Every `from` list in the constraints, `items` included.
fn from_lists<'c>(constraints: &[&'c CompiledConstraint], out: &mut Vec<&'c [SourcePattern]>) {
    for c in constraints {
        for from in [&c.from, &c.entities].into_iter().flatten() {
            if !out.contains(&from.as_slice()) {
                out.push(from);
            }
        }
        if let Some(items) = c.items.as_deref() {
            from_lists(&[items], out);
        }
    }
}

/// The origins one string or number may have, as far as the `from` lists
/// of `constraints` tell them apart: seen nowhere (the empty set), and
/// every union of single sources (`user`, one tool and one host name per
/// realizable combination of the `tool:` and `host:` globs, including a
/// name no glob matches). Empty when no constraint says `from`.
fn leaf_origins(
    constraints: &[&CompiledConstraint],
    limits: &Exploration,
) -> Result<Vec<BTreeSet<Source>>, ArgumentError> {
    let mut lists = Vec::new();
    from_lists(constraints, &mut lists);
    if lists.is_empty() {
        return Ok(Vec::new());
    }
    let globs = |tool: bool| -> Vec<Vec<Token>> {
        let mut out: Vec<Vec<Token>> = Vec::new();
        for p in lists.iter().copied().flatten() {
            let glob = match (p, tool) {
                (SourcePattern::Tool(g), true) | (SourcePattern::Host(g), false) => g.tokens(),
                _ => continue,
            };
            if !out.contains(&glob) {
                out.push(glob);
            }
        }
        out
    };
    let mut singles = vec![Source::User];
    for tool in [true, false] {
        let patterns = globs(tool);
        if patterns.is_empty() && !tool {
            continue; // a tool no glob names already stands for "seen, listed nowhere"
        }
        let tokens: Vec<&[Token]> = patterns.iter().map(Vec::as_slice).collect();
        let found = signatures(
            Domain::Name,
            "source name",
            &tokens,
            limits.max_states,
            limits.deadline,
        )?;
        for sig in found.signatures {
            singles.push(if tool {
                Source::Tool(sig.witness)
            } else {
                Source::Host(sig.witness)
            });
        }
    }
    // Which lists a set of sources satisfies; unions, breadth first, one
    // set per distinct answer.
    let answer = |set: &BTreeSet<Source>| -> Vec<bool> {
        lists
            .iter()
            .map(|l| set.iter().any(|s| l.iter().any(|p| p.covers(s))))
            .collect()
    };
    let mut seen: HashMap<Vec<bool>, ()> = HashMap::new();
    let mut out: Vec<BTreeSet<Source>> = vec![BTreeSet::new()];
    let mut queue: VecDeque<BTreeSet<Source>> = VecDeque::new();
    for single in &singles {
        let set = BTreeSet::from([single.clone()]);
        if seen.insert(answer(&set), ()).is_none() {
            queue.push_back(set.clone());
            out.push(set);
        }
    }
    while let Some(set) = queue.pop_front() {
        for single in &singles {
            let mut union = set.clone();
            union.insert(single.clone());
            if seen.insert(answer(&union), ()).is_none() {
                if out.len() >= MAX_CLASSES {
                    return Err(ArgumentError::TooLarge(format!(
                        "the from lists split sources into more than {MAX_CLASSES} classes"
                    )));
                }
                queue.push_back(union.clone());
                out.push(union);
            }
        }
    }
    Ok(out)
}

/// The `k`-th variant (`k` from 1) of `value` with its leaf at `pointer`
/// changed (a string gets a digit appended or prepended, a number moves by
/// whole steps), when it satisfies exactly the constraints `value` does,
/// with the same `sources`: the same class. A counterexample whose values
/// collide (equal values must share their sources in a session) is made
/// realizable this way.
pub fn leaf_variant(
    constraints: &[&CompiledConstraint],
    value: &Value,
    sources: &StatedSources,
    pointer: &str,
    k: usize,
) -> Option<Value> {
    let mut changed = value.clone();
    if let Some((string, index)) = pointer.rsplit_once(ENTITY_MARK) {
        // An entity the candidates wrote (`https://e0.example/`): its host
        // gets the variant's mark.
        let index: usize = index.parse().ok()?;
        let text = changed.pointer_mut(string)?;
        let old = text.as_str()?.to_string();
        let entity = agentgate_policy::provenance::entities(&old)
            .get(index)?
            .to_string();
        let start = old.find(&entity)?;
        let renamed = entity.replacen(".example", &format!("v{k}.example"), 1);
        *text = Value::String(format!(
            "{}{renamed}{}",
            &old[..start],
            &old[start + entity.len()..]
        ));
    } else if pointer.ends_with(KEY_SUFFIX) {
        // A key is not renamed: stated pointers name it.
        return None;
    } else {
        let leaf = changed.pointer_mut(pointer)?;
        *leaf = leaf_changed(leaf, k)?;
    }
    let provenance = Provenance::of(sources);
    let answers = |v: &Value| -> Vec<bool> {
        constraints
            .iter()
            .map(|c| c.admits(v, provenance, &Position::Root))
            .collect()
    };
    (answers(&changed) == answers(value)).then_some(changed)
}

/// A string or number leaf's `k`-th variant (a digit appended, or
/// prepended past ten; a number moved by whole steps).
fn leaf_changed(leaf: &Value, k: usize) -> Option<Value> {
    Some(match leaf {
        Value::String(s) if !s.is_empty() => {
            let digit = (k % 10).to_string();
            Value::String(if k <= 10 {
                format!("{s}{digit}")
            } else {
                format!("{digit}{s}")
            })
        }
        Value::Number(n) => {
            let step = if k % 2 == 1 { k.div_ceil(2) } else { k / 2 } as f64;
            let sign = if k % 2 == 1 { 1.0 } else { -1.0 };
            number_value(n.as_f64()? + sign * step)
        }
        _ => return None,
    })
}

/// `sources` moved under `prefix` (a JSON pointer step such as `/0`).
fn nested(prefix: &str, sources: &StatedSources, into: &mut StatedSources) {
    for (pointer, set) in &sources.0 {
        into.0.insert(format!("{prefix}{pointer}"), set.clone());
    }
}

/// A constraint holding only `from`, standing for the `from` of an array or
/// object on each of its elements (an array satisfies `from` iff every
/// element does). None below the argument's own value where every
/// constraint is `from` alone: there a nested array or object answers
/// every `from` as the intersection of its leaves' answers, which the
/// leaves already give as elements of the enclosing collection, so the
/// exploration stops instead of nesting without end.
fn element_from(constraints: &[&CompiledConstraint], depth: usize) -> Vec<CompiledConstraint> {
    let from_alone = |c: &&CompiledConstraint| {
        c.from.is_some()
            && **c
                == CompiledConstraint {
                    from: c.from.clone(),
                    ..CompiledConstraint::default()
                }
    };
    if depth > 0 && constraints.iter().all(from_alone) {
        return Vec::new();
    }
    constraints
        .iter()
        .filter_map(|c| c.from.clone())
        .map(|from| CompiledConstraint {
            from: Some(from),
            ..CompiledConstraint::default()
        })
        .collect()
}

/// One value per realizable combination of the constraints a present
/// value satisfies, in the order of the candidate pool (readable first).
fn present_classes(
    constraints: &[&CompiledConstraint],
    depth: usize,
    origins: &[BTreeSet<Source>],
    limits: &Exploration,
) -> Result<Vec<(Vec<u32>, Candidate)>, ArgumentError> {
    if depth > MAX_ITEMS_DEPTH {
        return Err(ArgumentError::TooLarge(format!(
            "items nested more than {MAX_ITEMS_DEPTH} deep"
        )));
    }
    let literals: Vec<&Literal> = constraints
        .iter()
        .filter_map(|c| c.one_of.as_ref())
        .flatten()
        .collect();
    let literal = |is: fn(&Value) -> bool| literals.iter().any(|l| is(&l.value));
    // A string or number is tried with every origin its leaf may have.
    let with_origins = |values: Vec<Value>| -> Vec<Candidate> {
        values
            .into_iter()
            .flat_map(|v| {
                let leaf = tracked(&v) && !origins.is_empty();
                let sources: Vec<StatedSources> = if leaf {
                    origins.iter().map(seen_from).collect()
                } else {
                    vec![StatedSources::default()]
                };
                sources.into_iter().map(move |s| (v.clone(), s))
            })
            .collect()
    };
    let by_type: [(bool, Vec<Candidate>); 5] = [
        (
            literal(Value::is_string)
                || constraints
                    .iter()
                    .any(|c| c.glob.is_some() || c.entities.is_some()),
            {
                let mut strings = with_origins(string_candidates(constraints, &literals, limits)?);
                strings.extend(entity_candidates(constraints, &literals, origins)?);
                strings
            },
        ),
        (
            literal(Value::is_number) || constraints.iter().any(|c| c.bounds_numbers()),
            with_origins(number_candidates(constraints, &literals)?),
        ),
        (
            literal(Value::is_array)
                || constraints
                    .iter()
                    .any(|c| c.items.is_some() || c.max_items.is_some()),
            array_candidates(constraints, &literals, depth, origins, limits)?,
        ),
        (
            literal(Value::is_object),
            object_candidates(constraints, &literals, depth, origins, limits)?,
        ),
        (
            literal(|v| v.is_boolean() || v.is_null()),
            with_origins(vec![json!(true), json!(false), Value::Null]),
        ),
    ];
    // The types the constraints speak about first, so that a class is
    // shown by a value of the type the rule expects (`"amount": 101`, not
    // `"amount": ""`) wherever one exists.
    let (mentioned, others): (Vec<_>, Vec<_>) = by_type.into_iter().partition(|(m, _)| *m);
    let pool = mentioned
        .into_iter()
        .chain(others)
        .flat_map(|(_, values)| values);

    let mut seen: HashMap<Vec<u32>, ()> = HashMap::new();
    let mut classes = Vec::new();
    for (value, sources) in pool {
        let satisfied = satisfied_constraints(constraints, &value, &sources);
        if seen.insert(satisfied.clone(), ()).is_none() {
            if classes.len() >= MAX_CLASSES {
                return Err(ArgumentError::TooLarge(format!(
                    "an argument's constraints split its values into more than {MAX_CLASSES} classes"
                )));
            }
            classes.push((satisfied, (value, sources)));
        }
    }
    Ok(classes)
}

/// Strings: one per realizable combination of the globs and the ASCII
/// string literals (the Text automaton), and every string literal itself.
///
/// ASCII suffices for the rest: globs are printable ASCII, so a string's
/// non-ASCII characters only ever fall inside a `*`; replacing each by a
/// run of control characters (which no glob contains) keeps every glob's
/// answer, and among the infinitely many runs one equals no literal.
fn string_candidates(
    constraints: &[&CompiledConstraint],
    literals: &[&Literal],
    limits: &Exploration,
) -> Result<Vec<Value>, ArgumentError> {
    let mut patterns: Vec<Vec<Token>> = constraints
        .iter()
        .filter_map(|c| c.glob.as_ref())
        .map(|g| g.tokens())
        .collect();
    let strings: Vec<&str> = literals.iter().filter_map(|l| l.value.as_str()).collect();
    patterns.extend(
        strings
            .iter()
            .filter(|s| s.is_ascii())
            .map(|s| s.bytes().map(Token::Literal).collect()),
    );
    let tokens: Vec<&[Token]> = patterns.iter().map(Vec::as_slice).collect();
    let found = signatures(
        Domain::Text,
        "argument",
        &tokens,
        limits.max_states,
        limits.deadline,
    )?;
    // "x" first: the shortest witness of a class is often "", and where the
    // class also holds "x" that reads more naturally in a counterexample.
    let mut out = vec![Value::String("x".to_string())];
    out.extend(
        found
            .signatures
            .into_iter()
            .map(|s| Value::String(s.witness)),
    );
    out.extend(strings.iter().map(|s| Value::String(s.to_string())));
    Ok(out)
}

/// Strings with entities inside (§8.3, "Values inside free text"), where
/// some constraint says `entities`: one string per realizable combination
/// of its entities' origins, each entity a distinct URL
/// (`x https://e0.example/ https://e1.example/`) whose sources are stated
/// at its pointer ([`ENTITY_MARK`]). A string satisfies an `entities`
/// constraint iff every entity does, so its combinations are the
/// intersections of single entities', as an array's are of its elements'.
/// The string without entities is among [`string_candidates`]'.
///
/// Beside a `from` on the same argument, the string has an origin too, and
/// an entity inside it was seen wherever the string was: each string
/// origin is tried with the entity origins that contain it, which are the
/// combinations a session can show. Beside a `glob` or a string literal an
/// entity would change their answers, so that shape is not modelled:
/// Unsupported.
fn entity_candidates(
    constraints: &[&CompiledConstraint],
    literals: &[&Literal],
    origins: &[BTreeSet<Source>],
) -> Result<Vec<Candidate>, ArgumentError> {
    if !constraints.iter().any(|c| c.entities.is_some()) {
        return Ok(Vec::new());
    }
    if constraints.iter().any(|c| c.glob.is_some()) || literals.iter().any(|l| l.value.is_string())
    {
        return Err(ArgumentError::Unsupported(
            "an argument constrained by entities beside a glob or a string oneOf is not modelled"
                .to_string(),
        ));
    }
    let text = |count: usize| -> String {
        std::iter::once("x".to_string())
            .chain((0..count).map(|i| format!("https://e{i}.example/")))
            .collect::<Vec<_>>()
            .join(" ")
    };
    // The string's own origin matters only where some constraint reads it.
    let string_origins: Vec<Option<&BTreeSet<Source>>> =
        if constraints.iter().any(|c| c.from.is_some()) {
            origins.iter().map(Some).collect()
        } else {
            vec![None]
        };
    let mut out = Vec::new();
    for own in string_origins {
        let stated = |entities: &[&BTreeSet<Source>]| {
            let mut sources = own.map(seen_from).unwrap_or_default();
            for (i, set) in entities.iter().enumerate() {
                sources
                    .0
                    .insert(format!("{ENTITY_MARK}{i}"), (*set).clone());
            }
            sources
        };
        let fitting: Vec<&BTreeSet<Source>> = origins
            .iter()
            .filter(|set| own.is_none_or(|own| own.is_subset(set)))
            .collect();
        let singles: Vec<(Vec<u32>, Candidate)> = fitting
            .iter()
            .map(|set| {
                let value = Value::String(text(1));
                let sources = stated(&[set]);
                (
                    satisfied_constraints(constraints, &value, &sources),
                    (value, sources),
                )
            })
            .collect();
        for used in combinations(&singles)? {
            let sets: Vec<&BTreeSet<Source>> = used.iter().map(|&i| fitting[i]).collect();
            out.push((Value::String(text(used.len())), stated(&sets)));
        }
    }
    Ok(out)
}

/// The indices of the constraints `value` satisfies, its leaves seen as
/// `sources` say: the matcher's own answer, which labels every class.
fn satisfied_constraints(
    constraints: &[&CompiledConstraint],
    value: &Value,
    sources: &StatedSources,
) -> Vec<u32> {
    let provenance = Provenance::of(sources);
    (0..constraints.len() as u32)
        .filter(|&j| constraints[j as usize].admits(value, provenance, &Position::Root))
        .collect()
}

/// A string or number seen from `set` (stated at the value itself).
fn seen_from(set: &BTreeSet<Source>) -> StatedSources {
    StatedSources(BTreeMap::from([(String::new(), set.clone())]))
}

fn number_value(x: f64) -> Value {
    if x.fract() == 0.0 {
        json!(x as i64)
    } else {
        Number::from_f64(x).map_or(Value::Null, Value::Number)
    }
}

/// Numbers: the bounds and numeric literals cut the line into points and
/// open gaps; every number in a gap satisfies the same constraints, so each
/// point and one number per gap (an integer where there is one) suffice.
fn number_candidates(
    constraints: &[&CompiledConstraint],
    literals: &[&Literal],
) -> Result<Vec<Value>, ArgumentError> {
    let mut points: Vec<f64> = constraints
        .iter()
        .flat_map(|c| c.bounds())
        .map(|b| b.0)
        .chain(literals.iter().filter_map(|l| l.value.as_f64()))
        .collect();
    if let Some(far) = points.iter().find(|p| p.abs() > MAX_EXACT) {
        return Err(ArgumentError::Unsupported(format!(
            "the number {far} lies beyond ±2^52, where the prover's number model is not exact"
        )));
    }
    // Literals beyond the exact range of i64/f64 conversion are caught above
    // through as_f64; a u64 literal above i64 is also beyond 2^52.
    points.sort_by(f64::total_cmp);
    points.dedup_by(|a, b| a == b);
    let Some((&first, &last)) = points.first().zip(points.last()) else {
        return Ok(vec![json!(0)]);
    };
    let mut out = vec![number_value(first.ceil() - 1.0)];
    for pair in points.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        out.push(number_value(a));
        let integer = a.floor() + 1.0;
        let between = if integer < b { integer } else { (a + b) / 2.0 };
        if a < between && between < b {
            out.push(number_value(between));
        }
    }
    out.push(number_value(last));
    out.push(number_value(last.floor() + 1.0));
    Ok(out)
}

/// Objects: only `oneOf` and `from` speak about them. Without `from`, its
/// object literals and one object equal to none of them; with `from` at
/// this level, the empty object and one object per combination of its
/// members' origins (an object satisfies `from` iff every member does, as
/// an array does); literals and `from` together are outside the model.
fn object_candidates(
    constraints: &[&CompiledConstraint],
    literals: &[&Literal],
    depth: usize,
    origins: &[BTreeSet<Source>],
    limits: &Exploration,
) -> Result<Vec<Candidate>, ArgumentError> {
    let object_literals = literals.iter().filter(|l| l.value.is_object());
    let members = element_from(constraints, depth);
    if members.is_empty() {
        let mut out: Vec<Candidate> = object_literals
            .map(|l| (l.value.clone(), StatedSources::default()))
            .collect();
        let other = std::iter::once(Value::Object(Map::new()))
            .chain((0..).map(|i| json!({ "x": i })))
            .find(|v| !literals.iter().any(|l| l.equals(v)));
        out.extend(other.map(|v| (v, StatedSources::default())));
        return Ok(out);
    }
    if object_literals.count() > 0 {
        return Err(ArgumentError::Unsupported(
            "an argument constrained both by object literals (oneOf) and by from is not modelled"
                .to_string(),
        ));
    }
    let members: Vec<&CompiledConstraint> = members.iter().collect();
    let elements = keyed_members(
        &members,
        present_classes(&members, depth + 1, origins, limits)?,
        origins,
    );
    let mut out = vec![(Value::Object(Map::new()), StatedSources::default())];
    for used in combinations(&elements)? {
        let mut object = Map::new();
        let mut sources = StatedSources::default();
        for (k, &i) in used.iter().enumerate() {
            let (value, inner) = &elements[i].1;
            let key = format!("x{k}");
            nested(&format!("/{key}"), inner, &mut sources);
            object.insert(key, value.clone());
        }
        out.push((Value::Object(object), sources));
    }
    Ok(out)
}

/// The members an object may hold: each value class with each origin its
/// key may have (a key carries provenance as a value does, §8.3), the
/// member satisfying what both its key and its value satisfy. The key's
/// sources are stated at [`KEY_SUFFIX`] relative to the member, which the
/// object moves under the member's own pointer.
fn keyed_members(
    members: &[&CompiledConstraint],
    values: Vec<(Vec<u32>, Candidate)>,
    origins: &[BTreeSet<Source>],
) -> Vec<(Vec<u32>, Candidate)> {
    let key_origins: Vec<Option<&BTreeSet<Source>>> = if origins.is_empty() {
        vec![None]
    } else {
        origins.iter().map(Some).collect()
    };
    let key = Value::String("x".to_string());
    let mut out = Vec::new();
    for origin in key_origins {
        let key_satisfies =
            satisfied_constraints(members, &key, &origin.map(seen_from).unwrap_or_default());
        for (satisfied, (value, sources)) in &values {
            let mut sources = sources.clone();
            if let Some(set) = origin {
                sources.0.insert(KEY_SUFFIX.to_string(), set.clone());
            }
            let both = satisfied
                .iter()
                .filter(|j| key_satisfies.contains(j))
                .copied()
                .collect();
            out.push((both, (value.clone(), sources)));
        }
    }
    out
}

/// Every realizable "constraints satisfied by all elements" set of a
/// collection whose elements are drawn from `elements`, each with the
/// fewest element classes that realise it (breadth first), in discovery
/// order: the satisfied sets closed under intersection.
fn combinations(elements: &[(Vec<u32>, Candidate)]) -> Result<Vec<Vec<usize>>, ArgumentError> {
    let mut combined: HashMap<Vec<u32>, Vec<usize>> = HashMap::new();
    let mut queue: VecDeque<Vec<u32>> = VecDeque::new();
    let mut order: Vec<Vec<u32>> = Vec::new();
    for (i, (satisfied, _)) in elements.iter().enumerate() {
        if !combined.contains_key(satisfied) {
            combined.insert(satisfied.clone(), vec![i]);
            queue.push_back(satisfied.clone());
            order.push(satisfied.clone());
        }
    }
    while let Some(set) = queue.pop_front() {
        let used = combined.get(&set).cloned().unwrap_or_default();
        for (i, (satisfied, _)) in elements.iter().enumerate() {
            let meet: Vec<u32> = set
                .iter()
                .copied()
                .filter(|j| satisfied.binary_search(j).is_ok())
                .collect();
            if combined.contains_key(&meet) {
                continue;
            }
            if combined.len() >= MAX_CLASSES {
                return Err(ArgumentError::TooLarge(format!(
                    "array elements combine into more than {MAX_CLASSES} classes"
                )));
            }
            let mut with = used.clone();
            with.push(i);
            combined.insert(meet.clone(), with);
            queue.push_back(meet.clone());
            order.push(meet);
        }
    }
    Ok(order
        .into_iter()
        .filter_map(|set| combined.remove(&set))
        .collect())
}

/// Arrays. With array literals only: the literals and one array equal to
/// none. With `items`/`maxItems` or `from` constraints: the classes of the
/// elements (under the `items` constraints and each `from`, which an array
/// satisfies iff every element does), combined (an array satisfies an
/// `items` iff every element does, so the combinations are the
/// intersections of element classes) and cut by length at every
/// `maxItems`. Both at one level is outside the model.
fn array_candidates(
    constraints: &[&CompiledConstraint],
    literals: &[&Literal],
    depth: usize,
    origins: &[BTreeSet<Source>],
    limits: &Exploration,
) -> Result<Vec<Candidate>, ArgumentError> {
    let array_literals: Vec<&Literal> = literals
        .iter()
        .copied()
        .filter(|l| l.value.is_array())
        .collect();
    let from = element_from(constraints, depth);
    let shaped: Vec<&CompiledConstraint> = constraints
        .iter()
        .copied()
        .filter(|c| c.one_of.is_none() && (c.items.is_some() || c.max_items.is_some()))
        .collect();
    if shaped.is_empty() && from.is_empty() {
        let mut out: Vec<Candidate> = array_literals
            .iter()
            .map(|l| (l.value.clone(), StatedSources::default()))
            .collect();
        let other = (0..)
            .map(|n| Value::Array(vec![json!(0); n]))
            .find(|v| !array_literals.iter().any(|l| l.equals(v)));
        out.extend(other.map(|v| (v, StatedSources::default())));
        return Ok(out);
    }
    if !array_literals.is_empty() {
        return Err(ArgumentError::Unsupported(
            "an argument constrained both by array literals (oneOf) and by items, maxItems or from is not modelled"
                .to_string(),
        ));
    }
    let items: Vec<&CompiledConstraint> = shaped
        .iter()
        .filter_map(|c| c.items.as_deref())
        .chain(&from)
        .collect();
    let elements = present_classes(&items, depth + 1, origins, limits)?;
    let combined = combinations(&elements)?;

    // Lengths that every maxItems answers alike: 1..=t0, t0+1..=t1, ..., beyond.
    let mut thresholds: Vec<usize> = shaped
        .iter()
        .filter_map(|c| c.max_items)
        .map(|m| m as usize)
        .collect();
    thresholds.sort_unstable();
    thresholds.dedup();
    let mut regions: Vec<(usize, Option<usize>)> = Vec::new();
    let mut low = 1;
    for &t in &thresholds {
        if t >= low {
            regions.push((low, Some(t)));
            low = t + 1;
        }
    }
    regions.push((low, None));

    let mut out = vec![(Value::Array(Vec::new()), StatedSources::default())];
    for used in &combined {
        for &(low, high) in &regions {
            let length = used.len().max(low);
            if high.is_some_and(|h| length > h) {
                continue;
            }
            if length > MAX_ARRAY_LENGTH {
                return Err(ArgumentError::TooLarge(format!(
                    "a maxItems of {} needs arrays longer than {MAX_ARRAY_LENGTH} elements to explore",
                    length - 1
                )));
            }
            // Padding repeats the first element, value and origins.
            let mut array = Vec::with_capacity(length);
            let mut sources = StatedSources::default();
            for position in 0..length {
                let (value, inner) = &elements[used.get(position).copied().unwrap_or(used[0])].1;
                nested(&format!("/{position}"), inner, &mut sources);
                array.push(value.clone());
            }
            out.push((Value::Array(array), sources));
        }
    }
    Ok(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::time::Duration;

    use super::*;
    use agentgate_policy::compile::{Limits, Role};
    use agentgate_policy::load::load_document;

    fn limits() -> Exploration {
        Exploration {
            max_states: 100_000,
            deadline: Instant::now() + Duration::from_secs(5),
        }
    }

    /// The constraints on `x` of every entry of one mcp endpoint, in order.
    fn constraints(entries: &str) -> Vec<CompiledConstraint> {
        let yaml = format!(
            "network: [{{name: r, endpoints: [{{host: h.io, ports: [443], protocol: mcp, path: /mcp, tools: [{entries}]}}]}}]"
        );
        let doc = load_document(&yaml, &Limits::default()).unwrap();
        let policy = doc
            .compile(Role::Sandbox, &Limits::default())
            .unwrap()
            .policy;
        let agentgate_policy::compile::EndpointKind::Mcp(m) = &policy.rules[0].endpoints[0].kind
        else {
            panic!("not an mcp endpoint");
        };
        m.tools
            .iter()
            .filter_map(|t| t.arguments.get("x").cloned())
            .collect()
    }

    fn classes_of(entries: &str) -> (Vec<CompiledConstraint>, ArgumentClasses) {
        let cs = constraints(entries);
        let refs: Vec<&CompiledConstraint> = cs.iter().collect();
        let classes = argument_classes(&refs, &limits()).unwrap();
        (cs, classes)
    }

    /// Every probe's combination is some class's, and every class's value
    /// has the combination it claims.
    fn assert_complete(cs: &[CompiledConstraint], classes: &ArgumentClasses, probes: &[Value]) {
        let probes: Vec<(Value, StatedSources)> = probes
            .iter()
            .map(|p| (p.clone(), StatedSources::default()))
            .collect();
        assert_complete_with_sources(cs, classes, &probes);
    }

    /// [`assert_complete`] over values with the sources of their leaves.
    fn assert_complete_with_sources(
        cs: &[CompiledConstraint],
        classes: &ArgumentClasses,
        probes: &[(Value, StatedSources)],
    ) {
        for ((satisfied, value), sources) in classes
            .satisfied
            .iter()
            .zip(&classes.values)
            .zip(&classes.sources)
        {
            let provenance = Provenance::of(sources);
            let actual: Vec<u32> = (0..cs.len() as u32)
                .filter(|&j| {
                    cs[j as usize].satisfied_by(value.as_ref(), provenance, &Position::Root)
                })
                .collect();
            assert_eq!(&actual, satisfied, "{value:?} {sources:?}");
        }
        for (probe, sources) in probes {
            let provenance = Provenance::of(sources);
            let actual: Vec<u32> = (0..cs.len() as u32)
                .filter(|&j| cs[j as usize].admits(probe, provenance, &Position::Root))
                .collect();
            assert!(
                classes.satisfied[1..].contains(&actual),
                "{probe} ({sources}) satisfies {actual:?}, which no class has: {:?}",
                classes.values
            );
        }
    }

    fn seen(pairs: &[(&str, &[&str])]) -> StatedSources {
        StatedSources(
            pairs
                .iter()
                .map(|(pointer, sources)| {
                    let set = sources.iter().map(|s| Source::parse(s).unwrap()).collect();
                    (pointer.to_string(), set)
                })
                .collect(),
        )
    }

    #[test]
    fn sources_are_told_apart_by_the_from_lists() {
        let (cs, classes) = classes_of(
            "{name: a, arguments: {x: {from: [user]}}}, {name: b, arguments: {x: {from: [user, 'tool:read_*']}}}, {name: c, arguments: {x: {glob: 'GB*', from: [model, 'host:*']}}}",
        );
        let mut probes = Vec::new();
        for value in [json!("GB29"), json!("x"), json!(7), json!(""), json!(null)] {
            for sources in [
                &[][..],
                &["user"][..],
                &["tool:read_email"],
                &["tool:send_money"],
                &["host:bank.io"],
                &["user", "tool:read_email"],
                &["tool:read_email", "host:bank.io"],
            ] {
                probes.push((value.clone(), seen(&[("", sources)])));
            }
        }
        assert_complete_with_sources(&cs, &classes, &probes);
        // The model's own value: only c's `model` admits it.
        assert!(classes.satisfied.contains(&vec![2]));
    }

    #[test]
    fn arrays_and_objects_mix_the_sources_of_their_leaves() {
        let (cs, classes) = classes_of(
            "{name: a, arguments: {x: {from: [user]}}}, {name: b, arguments: {x: {from: ['tool:*']}}}, {name: c, arguments: {x: {items: {from: [user, 'tool:*']}, maxItems: 1}}}",
        );
        let probes = [
            (json!([]), seen(&[])),
            (json!(["a"]), seen(&[("/0", &["user"])])),
            (
                json!(["a", "b"]),
                seen(&[("/0", &["user"]), ("/1", &["tool:t"])]),
            ),
            (
                json!(["a", "b"]),
                seen(&[("/0", &["user", "tool:t"]), ("/1", &["tool:t"])]),
            ),
            (json!(["a", 1]), seen(&[("/0", &["user"]), ("/1", &[])])),
            (json!({"k": "a"}), seen(&[("/k", &["user"])])),
            (
                json!({"k": "a", "l": "b"}),
                seen(&[("/k", &["user"]), ("/l", &["tool:t"])]),
            ),
            (json!({}), seen(&[])),
            (json!([[1]]), seen(&[("/0/0", &["user"])])),
        ];
        assert_complete_with_sources(&cs, &classes, &probes);
    }

    #[test]
    fn numbers_are_cut_at_every_bound_and_literal() {
        let (cs, classes) = classes_of(
            "{name: a, arguments: {x: {maximum: 100}}}, {name: b, arguments: {x: {minimum: 0.5, maximum: 50}}}, {name: c, arguments: {x: {oneOf: [7, 'seven']}}}",
        );
        let probes: Vec<Value> = [
            -1e9, -1.0, 0.0, 0.5, 0.7, 7.0, 8.5, 50.0, 50.5, 100.0, 101.0, 1e9,
        ]
        .into_iter()
        .map(number_value)
        .chain([json!("seven"), json!("x"), json!(null)])
        .collect();
        assert_complete(&cs, &classes, &probes);
        // A lone bound is shown by numbers on either side of it.
        let (_, classes) = classes_of("{name: a, arguments: {x: {maximum: 100}}}");
        assert_eq!(classes.values, [None, Some(json!(99)), Some(json!(101))]);
    }

    #[test]
    fn strings_are_told_apart_by_globs_and_literals() {
        let (cs, classes) = classes_of(
            "{name: a, arguments: {x: {glob: 'GB*'}}}, {name: b, arguments: {x: {oneOf: ['GB29', 'é']}}}, {name: c, arguments: {x: {glob: '*29', optional: true}}}",
        );
        let probes: Vec<Value> = ["GB29", "GB", "GB30", "x29", "29", "é", "", "GBé29"]
            .into_iter()
            .map(|s| json!(s))
            .collect();
        assert_complete(&cs, &classes, &probes);
        assert_eq!(
            classes.satisfied[0],
            vec![2],
            "absent satisfies the optional one"
        );
    }

    #[test]
    fn arrays_combine_element_classes_and_lengths() {
        let (cs, classes) = classes_of(
            "{name: a, arguments: {x: {items: {glob: 't-*'}, maxItems: 2}}}, {name: b, arguments: {x: {items: {glob: '*-a'}}}}, {name: c, arguments: {x: {maxItems: 0}}}",
        );
        let probes = [
            json!([]),
            json!(["t-a"]),
            json!(["t-b"]),
            json!(["u-a"]),
            json!(["t-b", "u-a"]),
            json!(["t-a", "t-a", "t-a"]),
            json!(["t-b", "t-b", "t-b"]),
            json!([1]),
            json!("t-a"),
        ];
        assert_complete(&cs, &classes, &probes);
    }

    #[test]
    fn objects_and_array_literals_get_one_other_value() {
        let (cs, classes) = classes_of(
            "{name: a, arguments: {x: {oneOf: [{}, [], [0]]}}}, {name: b, arguments: {x: {}}}",
        );
        assert_complete(
            &cs,
            &classes,
            &[json!({}), json!({"y": 1}), json!([]), json!([1, 2])],
        );
        assert_eq!(classes.values.len(), 3, "absent, a literal, anything else");
        let (cs, classes) = classes_of("{name: a, arguments: {x: {oneOf: [{}]}}}");
        assert_complete(&cs, &classes, &[json!({}), json!({"y": 1})]);
        assert_eq!(classes.values[2], Some(json!({"x": 0})));
    }

    #[test]
    fn shapes_outside_the_model_fail_closed() {
        let cs = constraints(
            "{name: a, arguments: {x: {oneOf: [[1]]}}}, {name: b, arguments: {x: {maxItems: 3}}}",
        );
        let refs: Vec<&CompiledConstraint> = cs.iter().collect();
        assert!(matches!(
            argument_classes(&refs, &limits()),
            Err(ArgumentError::Unsupported(_))
        ));
        let cs = constraints("{name: a, arguments: {x: {maximum: 1e300}}}");
        let refs: Vec<&CompiledConstraint> = cs.iter().collect();
        assert!(matches!(
            argument_classes(&refs, &limits()),
            Err(ArgumentError::Unsupported(_))
        ));
        let cs = constraints("{name: a, arguments: {x: {maxItems: 20000}}}");
        let refs: Vec<&CompiledConstraint> = cs.iter().collect();
        assert!(matches!(
            argument_classes(&refs, &limits()),
            Err(ArgumentError::TooLarge(_))
        ));
    }
}
