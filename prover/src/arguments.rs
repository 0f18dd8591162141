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

use std::collections::{HashMap, VecDeque};
use std::time::Instant;

use serde_json::{Map, Number, Value, json};

use crate::automaton::{AutomatonError, Domain, signatures};
use agentgate_policy::glob::Token;
use agentgate_policy::mcp::{CompiledConstraint, Literal, MAX_ITEMS_DEPTH};

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
/// a value that realises it (`None`: the argument is absent).
#[derive(Debug, Clone, PartialEq)]
pub struct ArgumentClasses {
    /// Per class, the indices of the constraints it satisfies, ascending.
    pub satisfied: Vec<Vec<u32>>,
    /// Per class, its value; the absent class has `None`.
    pub values: Vec<Option<Value>>,
}

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
    };
    for (satisfied, value) in present_classes(constraints, 0, limits)? {
        classes.satisfied.push(satisfied);
        classes.values.push(Some(value));
    }
    Ok(classes)
}

/// One value per realizable combination of the constraints a present
/// value satisfies, in the order of the candidate pool (readable first).
fn present_classes(
    constraints: &[&CompiledConstraint],
    depth: usize,
    limits: &Exploration,
) -> Result<Vec<(Vec<u32>, Value)>, ArgumentError> {
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
    let by_type: [(bool, Vec<Value>); 5] = [
        (
            literal(Value::is_string) || constraints.iter().any(|c| c.glob.is_some()),
            string_candidates(constraints, &literals, limits)?,
        ),
        (
            literal(Value::is_number) || constraints.iter().any(|c| c.bounds_numbers()),
            number_candidates(constraints, &literals)?,
        ),
        (
            literal(Value::is_array)
                || constraints
                    .iter()
                    .any(|c| c.items.is_some() || c.max_items.is_some()),
            array_candidates(constraints, &literals, depth, limits)?,
        ),
        (literal(Value::is_object), object_candidates(&literals)),
        (
            literal(|v| v.is_boolean() || v.is_null()),
            vec![json!(true), json!(false), Value::Null],
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
    for value in pool {
        let satisfied: Vec<u32> = (0..constraints.len() as u32)
            .filter(|&j| constraints[j as usize].admits(&value))
            .collect();
        if seen.insert(satisfied.clone(), ()).is_none() {
            if classes.len() >= MAX_CLASSES {
                return Err(ArgumentError::TooLarge(format!(
                    "an argument's constraints split its values into more than {MAX_CLASSES} classes"
                )));
            }
            classes.push((satisfied, value));
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

/// Objects: only `oneOf` speaks about them, so its object literals and one
/// object equal to none of them.
fn object_candidates(literals: &[&Literal]) -> Vec<Value> {
    let mut out: Vec<Value> = literals
        .iter()
        .filter(|l| l.value.is_object())
        .map(|l| l.value.clone())
        .collect();
    let other = std::iter::once(Value::Object(Map::new()))
        .chain((0..).map(|i| json!({ "x": i })))
        .find(|v| !literals.iter().any(|l| l.equals(v)));
    out.extend(other);
    out
}

/// Arrays. With array literals only: the literals and one array equal to
/// none. With `items`/`maxItems` constraints: the classes of the elements,
/// combined (an array satisfies an `items` iff every element does, so the
/// combinations are the intersections of element classes) and cut by
/// length at every `maxItems`. Both at one level is outside the model.
fn array_candidates(
    constraints: &[&CompiledConstraint],
    literals: &[&Literal],
    depth: usize,
    limits: &Exploration,
) -> Result<Vec<Value>, ArgumentError> {
    let array_literals: Vec<&Literal> = literals
        .iter()
        .copied()
        .filter(|l| l.value.is_array())
        .collect();
    let shaped: Vec<&CompiledConstraint> = constraints
        .iter()
        .copied()
        .filter(|c| c.one_of.is_none() && (c.items.is_some() || c.max_items.is_some()))
        .collect();
    if shaped.is_empty() {
        let mut out: Vec<Value> = array_literals.iter().map(|l| l.value.clone()).collect();
        let other = (0..)
            .map(|n| Value::Array(vec![json!(0); n]))
            .find(|v| !array_literals.iter().any(|l| l.equals(v)));
        out.extend(other);
        return Ok(out);
    }
    if !array_literals.is_empty() {
        return Err(ArgumentError::Unsupported(
            "an argument constrained both by array literals (oneOf) and by items/maxItems is not modelled"
                .to_string(),
        ));
    }
    let items: Vec<&CompiledConstraint> =
        shaped.iter().filter_map(|c| c.items.as_deref()).collect();
    let elements = present_classes(&items, depth + 1, limits)?;

    // Every realizable "items satisfied by all elements" set, with the
    // fewest element classes that realise it (breadth first).
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

    let mut out = vec![Value::Array(Vec::new())];
    for set in &order {
        let used = &combined[set];
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
            let mut array: Vec<Value> = used.iter().map(|&i| elements[i].1.clone()).collect();
            let pad = array.first().cloned().unwrap_or(Value::Null);
            array.resize(length, pad);
            out.push(Value::Array(array));
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
        for (satisfied, value) in classes.satisfied.iter().zip(&classes.values) {
            let actual: Vec<u32> = (0..cs.len() as u32)
                .filter(|&j| cs[j as usize].satisfied_by(value.as_ref()))
                .collect();
            assert_eq!(&actual, satisfied, "{value:?}");
        }
        for probe in probes {
            let actual: Vec<u32> = (0..cs.len() as u32)
                .filter(|&j| cs[j as usize].admits(probe))
                .collect();
            assert!(
                classes.satisfied[1..].contains(&actual),
                "{probe} satisfies {actual:?}, which no class has: {:?}",
                classes.values
            );
        }
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
