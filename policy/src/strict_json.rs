//! JSON read one way only (docs/policy-semantics.md §8.3, "One reading"):
//! the bytes an enforcement point judges are the bytes a server or a model
//! provider acts on, so wherever two readers of the same JSON could take
//! it differently, the message is refused instead of judged.
//!
//! [`parse`] accepts exactly the JSON on which common readers agree:
//! - UTF-8, with no byte order mark (some readers skip one, others refuse
//!   the body or read a key `\u{feff}jsonrpc`);
//! - no object naming a key twice, compared after unescaping (`"role"` and
//!   `"r\u006fle"` are one key): readers keep the first or the last;
//! - no number a reader could round: an integer must fit 64 bits, and any
//!   other number must read back as its own decimal value from the nearest
//!   double (`0.1`, `1e3` and `2.50` do; `9007199254740993.0`, an integer
//!   of 21 digits and `1e400` do not), since a JavaScript or Go server
//!   reads a double where a Python one keeps every digit;
//! - no unpaired surrogate escape (serde_json refuses one, Python keeps it).
//!
//! Pure: no I/O.

use serde::Deserializer;
use serde::de::{self, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// Why a JSON text is refused: it is not JSON, or readers could disagree
/// on what it says.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StrictJsonError {
    /// Not JSON at all (or not UTF-8, or an unpaired surrogate escape).
    #[error("it is not JSON: {0}")]
    NotJson(String),
    /// A byte order mark before the JSON text.
    #[error("it starts with a byte order mark, which some JSON readers skip and others refuse")]
    ByteOrderMark,
    /// An object names a key twice.
    #[error("an object names the key {0:?} twice, which JSON readers take as either value")]
    DuplicateKey(String),
    /// A number that some readers round and others keep exactly.
    #[error(
        "the number {0} has no exact 64-bit reading (an integer beyond 64 bits, or more digits than a double holds), so JSON readers differ on its value"
    )]
    InexactNumber(String),
}

/// Parses `bytes` as JSON, refusing everything [the module](self) lists.
pub fn parse(bytes: &[u8]) -> Result<Value, StrictJsonError> {
    if bytes.starts_with(b"\xef\xbb\xbf") {
        return Err(StrictJsonError::ByteOrderMark);
    }
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let value = match deserializer.deserialize_any(CheckedVisitor) {
        Ok(value) => value,
        Err(e) => return Err(duplicate_or(e)),
    };
    deserializer
        .end()
        .map_err(|e| StrictJsonError::NotJson(e.to_string()))?;
    // Well-formed JSON: its number literals can be found by a scan that
    // only needs to skip strings.
    if let Some(number) = number_literals(bytes).find(|n| !reads_exactly(n)) {
        return Err(StrictJsonError::InexactNumber(number.to_string()));
    }
    Ok(value)
}

/// The marker a duplicate key's error message carries through serde's
/// custom error (the visitor cannot return a typed error).
const DUPLICATE: &str = "agentgate duplicate key: ";

/// A serde_json error as a [`StrictJsonError`]: a duplicate key the
/// visitor found, or JSON that does not parse.
pub fn duplicate_or(e: serde_json::Error) -> StrictJsonError {
    let text = e.to_string();
    match text
        .strip_prefix(DUPLICATE)
        .and_then(|rest| rest.rsplit_once(" at line "))
    {
        Some((key, _)) => StrictJsonError::DuplicateKey(key.to_string()),
        None => StrictJsonError::NotJson(text),
    }
}

/// The number literals of a well-formed JSON text, in order.
fn number_literals(bytes: &[u8]) -> impl Iterator<Item = &str> {
    let mut i = 0;
    std::iter::from_fn(move || {
        while i < bytes.len() {
            match bytes[i] {
                b'"' => {
                    i += 1;
                    while i < bytes.len() && bytes[i] != b'"' {
                        i += if bytes[i] == b'\\' { 2 } else { 1 };
                    }
                    i += 1;
                }
                b'-' | b'0'..=b'9' => {
                    let start = i;
                    while i < bytes.len()
                        && matches!(bytes[i], b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9')
                    {
                        i += 1;
                    }
                    return std::str::from_utf8(&bytes[start..i]).ok();
                }
                _ => i += 1,
            }
        }
        None
    })
}

/// True when every reader takes the JSON number `text` as one value: an
/// integer within 64 bits, or a number whose nearest double prints back
/// as the same decimal value.
pub fn reads_exactly(text: &str) -> bool {
    if !text.contains(['.', 'e', 'E']) {
        return text.parse::<i64>().is_ok() || text.parse::<u64>().is_ok();
    }
    let Ok(double) = text.parse::<f64>() else {
        return false;
    };
    double.is_finite() && canonical_decimal(text) == canonical_decimal(&format!("{double}"))
}

/// The decimal value of a number's text in one spelling: no sign for zero,
/// no leading zeros, no trailing fractional zeros, no exponent (`-0.0` is
/// `0`, `1.50e2` is `150`, `007` is `7`). `None` for text that is not a
/// JSON number (or a number token of content: digits with an optional
/// fraction) or whose exponent is beyond ±1,000 (no double reads it back).
pub fn canonical_decimal(text: &str) -> Option<String> {
    let (negative, unsigned) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (mantissa, exponent) = match unsigned.find(['e', 'E']) {
        Some(at) => {
            let exp: i64 = unsigned[at + 1..].parse().ok()?;
            (&unsigned[..at], exp)
        }
        None => (unsigned, 0),
    };
    let (int, frac) = match mantissa.split_once('.') {
        Some((_, "")) => return None,
        Some(parts) => parts,
        None => (mantissa, ""),
    };
    if int.is_empty() || !int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit()) {
        return None;
    }
    let digits: String = format!("{int}{frac}");
    let significant = digits.trim_start_matches('0');
    if significant.is_empty() {
        return Some("0".to_string());
    }
    if exponent.abs() > 1_000 {
        return None;
    }
    // The decimal point sits `point` digits into `digits`.
    let point = int.len() as i64 + exponent;
    let lead = (digits.len() - significant.len()) as i64;
    let (whole, fraction) = if point <= lead {
        let zeros = (lead - point) as usize;
        (
            "0".to_string(),
            format!("{}{}", "0".repeat(zeros), significant),
        )
    } else if point >= digits.len() as i64 {
        let zeros = (point - digits.len() as i64) as usize;
        (format!("{significant}{}", "0".repeat(zeros)), String::new())
    } else {
        let (w, f) = digits.split_at(point as usize);
        (w.trim_start_matches('0').to_string(), f.to_string())
    };
    let fraction = fraction.trim_end_matches('0');
    let sign = if negative { "-" } else { "" };
    Some(if fraction.is_empty() {
        format!("{sign}{whole}")
    } else {
        format!("{sign}{whole}.{fraction}")
    })
}

/// The decimal value of a parsed JSON number ([`canonical_decimal`]'s
/// spelling): exact for integers within 64 bits, the shortest decimal that
/// reads back as the double otherwise (which is the number's own value for
/// every number [`parse`] accepts).
pub fn number_decimal(number: &serde_json::Number) -> Option<String> {
    if let Some(i) = number.as_i64() {
        return canonical_decimal(&i.to_string());
    }
    if let Some(u) = number.as_u64() {
        return Some(u.to_string());
    }
    number
        .as_f64()
        .filter(|f| f.is_finite())
        .and_then(|f| canonical_decimal(&format!("{f}")))
}

/// Parses a JSON value with duplicate object keys refused (through
/// `deserializer`, so any serde_json entry point can use it).
pub(crate) struct CheckedVisitor;

/// A JSON value whose objects name no key twice.
pub struct Checked(pub Value);

impl<'de> serde::Deserialize<'de> for Checked {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Checked, D::Error> {
        deserializer.deserialize_any(CheckedVisitor).map(Checked)
    }
}

impl<'de> Visitor<'de> for CheckedVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(Checked(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut members = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let Checked(value) = map.next_value()?;
            if members.contains_key(&key) {
                return Err(de::Error::custom(format!("{DUPLICATE}{key}")));
            }
            members.insert(key, value);
        }
        Ok(Value::Object(members))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_key_named_twice_is_refused_after_unescaping() {
        assert_eq!(
            parse(br#"{"role": "user", "role": "tool"}"#),
            Err(StrictJsonError::DuplicateKey("role".into()))
        );
        assert_eq!(
            parse(br#"{"a": {"role": "user", "r\u006fle": "tool"}}"#),
            Err(StrictJsonError::DuplicateKey("role".into()))
        );
        // A key naming " at line " is reported whole.
        assert_eq!(
            parse(br#"[{"x at line 1": 1, "x at line 1": 2}]"#),
            Err(StrictJsonError::DuplicateKey("x at line 1".into()))
        );
        assert_eq!(
            parse(br#"{"a": 1, "A": 2, "b": [1, 1]}"#).unwrap(),
            json!({"a": 1, "A": 2, "b": [1, 1]})
        );
    }

    #[test]
    fn byte_order_marks_invalid_utf8_and_lone_surrogates_are_refused() {
        assert_eq!(
            parse(b"\xef\xbb\xbf{}"),
            Err(StrictJsonError::ByteOrderMark)
        );
        assert!(matches!(
            parse(b"{\"a\": \"\xff\"}"),
            Err(StrictJsonError::NotJson(_))
        ));
        assert!(matches!(
            parse(br#"{"a": "\ud800"}"#),
            Err(StrictJsonError::NotJson(_))
        ));
        assert!(matches!(parse(b"{} {}"), Err(StrictJsonError::NotJson(_))));
    }

    #[test]
    fn numbers_must_read_back_exactly() {
        for exact in [
            "0",
            "-0",
            "100",
            "100.0",
            "100.00",
            "1e3",
            "0.1",
            "2.50",
            "-5.5",
            "9007199254740993",
            "18446744073709551615",
            "-9223372036854775808",
            "1.5e-7",
        ] {
            assert!(parse(exact.as_bytes()).is_ok(), "{exact}");
        }
        for inexact in [
            "18446744073709551616",
            "123456789012345678901",
            "9007199254740993.0",
            "0.10000000000000000001",
            "1e400",
            "1e-400",
        ] {
            assert!(
                matches!(
                    parse(inexact.as_bytes()),
                    Err(StrictJsonError::InexactNumber(_) | StrictJsonError::NotJson(_))
                ),
                "{inexact}"
            );
        }
        // Inside strings, digits are text.
        assert!(parse(br#"{"n": "123456789012345678901", "e\"1e400": 1}"#).is_ok());
        assert_eq!(
            parse(br#"{"amount": 123456789012345678901}"#),
            Err(StrictJsonError::InexactNumber(
                "123456789012345678901".into()
            ))
        );
    }

    #[test]
    fn decimals_have_one_spelling() {
        let c = |t: &str| canonical_decimal(t).unwrap();
        assert_eq!(c("100"), "100");
        assert_eq!(c("100.00"), "100");
        assert_eq!(c("007.50"), "7.5");
        assert_eq!(c("-0.0"), "0");
        assert_eq!(c("1.50e2"), "150");
        assert_eq!(c("15e-3"), "0.015");
        assert_eq!(c("-2E+2"), "-200");
        assert_eq!(c("0.000"), "0");
        assert_eq!(canonical_decimal("1.e2"), None);
        assert_eq!(canonical_decimal(".5"), None);
        assert_eq!(canonical_decimal("1e5000"), None);
        assert_eq!(c("0e5000"), "0");
        let n = |v: Value| match v {
            Value::Number(n) => number_decimal(&n).unwrap(),
            _ => unreachable!(),
        };
        assert_eq!(n(json!(100)), "100");
        assert_eq!(n(json!(100.0)), "100");
        assert_eq!(n(json!(0.1)), "0.1");
        assert_eq!(n(json!(u64::MAX)), "18446744073709551615");
        assert_eq!(n(json!(-3.25)), "-3.25");
        assert_eq!(n(json!(1e21)), "1000000000000000000000");
    }

    proptest::proptest! {
        /// Whatever [`parse`] accepts, serde_json reads the same way, and
        /// every number in it reads back as its own text's value.
        #[test]
        fn accepted_numbers_round_trip(int in "-?[0-9]{1,22}", frac in "([.][0-9]{1,20})?", exp in "([eE][-+]?[0-9]{1,3})?") {
            let text = format!("{int}{frac}{exp}");
            if let Ok(Value::Number(n)) = parse(text.as_bytes()) {
                proptest::prop_assert_eq!(number_decimal(&n), canonical_decimal(&text));
            }
        }
    }
}
