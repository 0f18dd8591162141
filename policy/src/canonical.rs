//! Canonical JSON text (docs/policy-semantics.md §8.2): one text per JSON
//! value, so that two readers of the same arguments hash and compare them
//! the same way.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

/// Canonical JSON text: object keys sorted, integral numbers without a
/// fraction, others in Rust's shortest round-trip form.
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Number(n) => out.push_str(&canonical_number(n)),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        Value::Object(members) => write_canonical_object(members, out),
        other => out.push_str(&other.to_string()),
    }
}

/// [`canonical_json`] of an object, without first wrapping it in a [`Value`].
pub fn canonical_object(members: &Map<String, Value>) -> String {
    let mut out = String::new();
    write_canonical_object(members, &mut out);
    out
}

fn write_canonical_object(members: &Map<String, Value>, out: &mut String) {
    let sorted: BTreeMap<&String, &Value> = members.iter().collect();
    out.push('{');
    for (i, (k, v)) in sorted.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        // A key is a JSON string; its quoted, escaped form is `Value`'s Display.
        out.push_str(&Value::String(k.clone()).to_string());
        out.push(':');
        write_canonical(v, out);
    }
    out.push('}');
}

fn canonical_number(n: &serde_json::Number) -> String {
    if n.is_i64() || n.is_u64() {
        return n.to_string();
    }
    match n.as_f64() {
        // An integral float within the exact range prints as an integer, so
        // `1.0` and `1` have one text.
        Some(f) if f.fract() == 0.0 && f.abs() < 9_007_199_254_740_992.0 => {
            format!("{}", f as i64)
        }
        Some(f) => format!("{f}"),
        None => n.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keys_are_sorted_and_integral_numbers_lose_their_fraction() {
        assert_eq!(
            canonical_json(&json!({"b": 1, "a": 0.5, "c": 2.0})),
            r#"{"a":0.5,"b":1,"c":2}"#
        );
    }
}
