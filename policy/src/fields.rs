//! The unknown-field check, derived from the types: a document's keys are
//! walked beside the JSON Schema its Rust type generates (the same derive
//! the CRDs are generated from), so a field the types accept is never
//! refused here and a typo is refused with its path and a "did you mean"
//! hint. No field list is kept by hand.
//!
//! The typed pass (`serde`, `deny_unknown_fields`) would refuse the same
//! keys, but it says neither where a nested key sits in the document's own
//! terms nor which field was meant; and the reserved fields of other
//! policy languages are named as such.

use std::any::TypeId;
use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

use schemars::{JsonSchema, Schema, SchemaGenerator, generate::SchemaSettings};
use serde_json::{Map, Value};

use crate::error::{Reason, ReasonCode};

/// Fields that other policy languages have and this one deliberately does
/// not model yet; named so the message says so instead of "unknown".
pub const RESERVED_FIELDS: &[&str] = &["allowedIPs", "allowed_ips", "tls"];

/// How deep the walk goes; deeper values are left to the typed pass, which
/// bounds nesting itself (docs/policy-semantics.md §8.2).
const MAX_DEPTH: usize = 64;

/// The schema of `T` as the walk reads it: subschemas by reference
/// (`$defs`), so a type that contains itself (a constraint's `items`)
/// is described, not cut off as in a CRD.
pub fn schema_of<T: JsonSchema + 'static>() -> Arc<Schema> {
    static CACHE: LazyLock<Mutex<HashMap<TypeId, Arc<Schema>>>> =
        LazyLock::new(|| Mutex::new(HashMap::new()));
    let mut cache = CACHE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    cache
        .entry(TypeId::of::<T>())
        .or_insert_with(|| {
            let generator = SchemaGenerator::new(SchemaSettings::draft2020_12());
            Arc::new(generator.into_root_schema_for::<T>())
        })
        .clone()
}

/// Whether `generator` writes CRD schemas (every subschema inline, as
/// kube's derive does), where a type cannot contain itself.
pub fn inline(generator: &SchemaGenerator) -> bool {
    generator.settings().inline_subschemas
}

/// Refuses the first unknown or reserved key of `value` (at `field`, `""`
/// for the document itself) that `T`'s schema does not name.
pub fn check_fields<T: JsonSchema + 'static>(value: &Value, field: &str) -> Result<(), Reason> {
    let root = schema_of::<T>();
    Walk::over(&root).check(value, root.as_value(), field, 0)
}

/// Every property path `T`'s schema names below `field` (`a.b[].c`), for
/// tests that hold two schemas against each other.
pub fn property_paths<T: JsonSchema + 'static>(field: &str) -> Vec<String> {
    let root = schema_of::<T>();
    let mut out = Vec::new();
    Walk::over(&root).paths(root.as_value(), field, 0, &mut Vec::new(), &mut out);
    out
}

/// A walk beside one root schema, resolving references into its `$defs`
/// (borrowed: the cached schema is never copied).
struct Walk<'s> {
    defs: Option<&'s Map<String, Value>>,
}

impl<'s> Walk<'s> {
    fn over(root: &'s Schema) -> Walk<'s> {
        Walk {
            defs: root.get("$defs").and_then(Value::as_object),
        }
    }

    /// `schema` with its `$ref` followed (local `#/$defs/NAME` only).
    fn resolve<'a>(&self, mut schema: &'a Value) -> &'a Value
    where
        's: 'a,
    {
        for _ in 0..MAX_DEPTH {
            let Some(name) = schema
                .get("$ref")
                .and_then(Value::as_str)
                .and_then(|r| r.strip_prefix("#/$defs/"))
            else {
                break;
            };
            match self.defs.and_then(|defs| defs.get(name)) {
                Some(next) => schema = next,
                None => break,
            }
        }
        schema
    }

    /// The alternatives a value may match: the schema itself, or each arm
    /// of its `anyOf`/`oneOf`/`allOf` (an `Option` is `anyOf [T, null]`).
    fn arms<'a>(&'a self, schema: &'a Value) -> Vec<&'a Value> {
        let schema = self.resolve(schema);
        let mut out = Vec::new();
        let mut nested = false;
        for key in ["anyOf", "oneOf", "allOf"] {
            for arm in schema
                .get(key)
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                nested = true;
                out.extend(self.arms(arm));
            }
        }
        if !nested || schema.get("properties").is_some() {
            out.push(schema);
        }
        out
    }

    fn check(
        &self,
        value: &Value,
        schema: &Value,
        field: &str,
        depth: usize,
    ) -> Result<(), Reason> {
        if depth > MAX_DEPTH {
            return Ok(());
        }
        let arms = self.arms(schema);
        // Kept as written by the API server too (arbitrary JSON).
        if arms
            .iter()
            .any(|arm| arm.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true)))
        {
            return Ok(());
        }
        match value {
            Value::Object(map) => {
                let object = arms.iter().find(|arm| {
                    arm.get("properties").is_some() || arm.get("additionalProperties").is_some()
                });
                let Some(arm) = object else {
                    return Ok(()); // not an object here, or any object: the typed pass says
                };
                let properties = arm.get("properties").and_then(Value::as_object);
                let additional = arm.get("additionalProperties");
                for (key, inner) in map {
                    let at = join(field, key);
                    match properties.and_then(|p| p.get(key)) {
                        Some(property) => self.check(inner, property, &at, depth + 1)?,
                        None => match additional {
                            Some(Value::Bool(false)) | None if properties.is_some() => {
                                return Err(unknown(key, &at, properties));
                            }
                            Some(schema @ Value::Object(_)) => {
                                self.check(inner, schema, &at, depth + 1)?;
                            }
                            _ => {}
                        },
                    }
                }
                Ok(())
            }
            Value::Array(items) => {
                let Some(item) = arms.iter().find_map(|arm| arm.get("items")) else {
                    return Ok(());
                };
                for (i, inner) in items.iter().enumerate() {
                    self.check(inner, item, &format!("{field}[{i}]"), depth + 1)?;
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    fn paths(
        &self,
        schema: &Value,
        field: &str,
        depth: usize,
        stack: &mut Vec<String>,
        out: &mut Vec<String>,
    ) {
        if depth > MAX_DEPTH {
            return;
        }
        for arm in self.arms(schema) {
            if let Some(properties) = arm.get("properties").and_then(Value::as_object) {
                for (key, property) in properties {
                    let at = join(field, key);
                    out.push(at.clone());
                    // A type inside itself is named once.
                    let reference = property.to_string();
                    if stack.contains(&reference) {
                        continue;
                    }
                    stack.push(reference);
                    self.paths(property, &at, depth + 1, stack, out);
                    stack.pop();
                }
            }
            if let Some(item) = arm.get("items") {
                self.paths(item, &format!("{field}[]"), depth + 1, stack, out);
            }
            if let Some(additional @ Value::Object(_)) = arm.get("additionalProperties") {
                self.paths(additional, &join(field, "*"), depth + 1, stack, out);
            }
        }
    }
}

fn join(field: &str, key: &str) -> String {
    if field.is_empty() {
        key.to_string()
    } else {
        format!("{field}.{key}")
    }
}

fn unknown(key: &str, at: &str, properties: Option<&Map<String, Value>>) -> Reason {
    if RESERVED_FIELDS.contains(&key) {
        return Reason::at(
            ReasonCode::UnsupportedPolicyShape,
            at,
            format!("{key} is not modelled by policy language v1"),
        );
    }
    let hint = properties
        .into_iter()
        .flat_map(Map::keys)
        .map(|candidate| (edit_distance(key, candidate), candidate))
        .filter(|(distance, _)| *distance <= 2)
        .min()
        .map(|(_, candidate)| format!(" (did you mean {candidate:?}?)"))
        .unwrap_or_default();
    Reason::at(
        ReasonCode::UnsupportedPolicyShape,
        at,
        format!("unknown field {key:?}{hint}"),
    )
}

/// Levenshtein distance, for "did you mean" hints on short field names.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1)
                .min(row[j] + 1)
                .min(diagonal + usize::from(ca != *cb));
            diagonal = above;
        }
    }
    row[b.len()]
}
