//! Query parameters (docs/policy-semantics.md §10.1): how a request
//! target's query becomes an action's `query`, and the constraints rule
//! entries put on it. The one reader the matcher's tests, the prover's
//! replay and the proxy share, so that none of them reads a query another
//! way.
//!
//! The decoder is written here rather than taken from `form_urlencoded`
//! or `percent-encoding`: both are lenient (a malformed escape is kept as
//! written, bytes that are not UTF-8 are replaced), and leniency is where
//! two readers of one query disagree. Here both are refusals.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use crate::error::{Reason, ReasonCode};
use crate::model::QueryMatcher;
use crate::names::{NameGlob, is_name_byte};

/// The longest parameter name a rule may write.
pub const MAX_PARAMETER_NAME_BYTES: usize = 256;

/// An action's query: parameter name to decoded value.
pub type Query = BTreeMap<String, String>;

/// Why a query cannot be judged (docs/policy-semantics.md §10.1).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QueryError {
    /// A `%` without two hex digits, bytes that are not UTF-8, or a `;`.
    #[error("not a canonical query: {0}")]
    NonCanonical(String),
    /// A parameter some rule names occurs more than once.
    #[error(
        "the parameter {0:?} occurs more than once, and servers disagree on which value they read"
    )]
    Repeated(String),
}

/// How `+` is read: servers disagree (RFC 3986 keeps it, form decoding
/// reads a space), so a request is judged in every reading that differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plus {
    /// `+` is a space (`application/x-www-form-urlencoded`).
    Space,
    /// `+` is itself (RFC 3986).
    Literal,
}

impl Plus {
    /// The reading's name in refusals.
    pub fn as_str(self) -> &'static str {
        match self {
            Plus::Space => "'+' read as a space",
            Plus::Literal => "'+' read as itself",
        }
    }
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Decodes one name or value: `+` as `plus` says, then every `%XX`.
pub fn decode(raw: &str, plus: Plus) -> Result<String, QueryError> {
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let escaped = bytes
                    .get(i + 1)
                    .and_then(|&h| hex(h))
                    .zip(bytes.get(i + 2).and_then(|&l| hex(l)));
                let Some((high, low)) = escaped else {
                    return Err(QueryError::NonCanonical(format!(
                        "'%' at byte {i} of {raw:?} is not followed by two hex digits"
                    )));
                };
                out.push(high << 4 | low);
                i += 3;
            }
            b'+' if plus == Plus::Space => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out)
        .map_err(|_| QueryError::NonCanonical(format!("{raw:?} does not decode to UTF-8")))
}

/// Reads a raw query (the target's part after the first `?`, without it)
/// in one reading of `+`: split on `&`, empty pieces skipped, each piece
/// split at its first `=`, both sides decoded. A name in `named` that
/// occurs twice is refused; of a repeated name no rule names, the first
/// value is kept (no rule reads it). A `;` is refused whenever `named` is
/// not empty.
pub fn parse(raw: &str, plus: Plus, named: &BTreeSet<String>) -> Result<Query, QueryError> {
    let mut query = Query::new();
    if named.is_empty() {
        // No rule reads the query: nothing in it can decide a request.
        return Ok(query);
    }
    if raw.contains(';') {
        return Err(QueryError::NonCanonical(
            "a ';' in the query (some servers split on it)".to_string(),
        ));
    }
    for piece in raw.split('&').filter(|p| !p.is_empty()) {
        let (name, value) = piece.split_once('=').unwrap_or((piece, ""));
        let name = decode(name, plus)?;
        let value = decode(value, plus)?;
        if query.contains_key(&name) {
            if named.contains(&name) {
                return Err(QueryError::Repeated(name));
            }
            continue;
        }
        query.insert(name, value);
    }
    Ok(query)
}

/// Every reading of `raw` the policy must allow (docs/policy-semantics.md
/// §10.1): one, or two when a `+` sits in a piece whose name some rule
/// names in either reading. Each comes with its reading of `+`.
pub fn readings(raw: &str, named: &BTreeSet<String>) -> Result<Vec<(Plus, Query)>, QueryError> {
    let space = parse(raw, Plus::Space, named)?;
    if named.is_empty() || !raw.contains('+') {
        return Ok(vec![(Plus::Space, space)]);
    }
    let literal = parse(raw, Plus::Literal, named)?;
    if space == literal {
        return Ok(vec![(Plus::Space, space)]);
    }
    // The readings differ somewhere; they matter only where a rule looks.
    let looked_at = |q: &Query| -> Query {
        q.iter()
            .filter(|(name, _)| named.contains(*name))
            .map(|(n, v)| (n.clone(), v.clone()))
            .collect()
    };
    if looked_at(&space) == looked_at(&literal) {
        return Ok(vec![(Plus::Space, space)]);
    }
    Ok(vec![(Plus::Space, space), (Plus::Literal, literal)])
}

/// Percent-encodes a decoded name or value so that [`decode`] reads it
/// back in either reading of `+`: unreserved characters stay, every other
/// byte is escaped (a `+` too).
pub fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// A query as a request target writes it: `name=value` pairs in name
/// order, encoded by [`encode`]; empty for an empty query.
pub fn to_target(query: &Query) -> String {
    query
        .iter()
        .map(|(name, value)| format!("{}={}", encode(name), encode(value)))
        .collect::<Vec<_>>()
        .join("&")
}

/// A compiled constraint on one parameter.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ParameterConstraint {
    /// The parameter must not be present.
    Absent,
    /// The parameter is present with a value one glob matches, or absent
    /// when `optional`.
    Matches {
        /// Value globs: `*` any run of characters, the rest literal.
        globs: Vec<NameGlob>,
        /// An absent parameter satisfies the constraint.
        optional: bool,
    },
}

impl ParameterConstraint {
    /// Whether `value` (`None`: the parameter is absent) satisfies it.
    pub fn admits(&self, value: Option<&str>) -> bool {
        match (self, value) {
            (ParameterConstraint::Absent, value) => value.is_none(),
            (ParameterConstraint::Matches { optional, .. }, None) => *optional,
            (ParameterConstraint::Matches { globs, .. }, Some(v)) => {
                globs.iter().any(|g| g.matches(v))
            }
        }
    }
}

/// An entry's query constraints, by parameter name (ascending).
pub type QueryConstraints = Vec<(String, ParameterConstraint)>;

/// Whether `query` satisfies every constraint.
pub fn satisfies(constraints: &QueryConstraints, query: &Query) -> bool {
    constraints
        .iter()
        .all(|(name, c)| c.admits(query.get(name).map(String::as_str)))
}

fn shape(field: &str, message: impl Into<String>) -> Reason {
    Reason::at(ReasonCode::UnsupportedPolicyShape, field, message)
}

/// A value glob: printable ASCII (the empty glob matches the empty value).
fn value_glob(field: &str, pattern: &str, max_bytes: usize) -> Result<NameGlob, Reason> {
    if pattern.is_empty() {
        return Ok(NameGlob::empty());
    }
    NameGlob::parse(field, pattern, max_bytes)
}

/// Compiles an entry's `query` (at `field`).
pub fn compile(
    query: &BTreeMap<String, QueryMatcher>,
    field: &str,
    max_pattern_bytes: usize,
) -> Result<QueryConstraints, Reason> {
    let mut out = Vec::with_capacity(query.len());
    for (name, matcher) in query {
        let at = format!("{field}.{name}");
        if name.is_empty()
            || name.len() > MAX_PARAMETER_NAME_BYTES
            || !name.bytes().all(|b| is_name_byte(b) && b != b'*')
        {
            return Err(shape(
                &at,
                format!(
                    "a parameter name is 1..{MAX_PARAMETER_NAME_BYTES} bytes of printable ASCII other than '*'"
                ),
            ));
        }
        let constraint = match matcher {
            QueryMatcher::Glob(g) => ParameterConstraint::Matches {
                globs: vec![value_glob(&at, g, max_pattern_bytes)?],
                optional: false,
            },
            QueryMatcher::Spec(spec) => match (&spec.glob, &spec.any, spec.absent) {
                (None, None, true) if spec.optional => {
                    return Err(shape(
                        &format!("{at}.optional"),
                        "optional beside absent: an absent parameter is never present",
                    ));
                }
                (None, None, true) => ParameterConstraint::Absent,
                (Some(g), None, false) => ParameterConstraint::Matches {
                    globs: vec![value_glob(&format!("{at}.glob"), g, max_pattern_bytes)?],
                    optional: spec.optional,
                },
                (None, Some(any), false) if any.is_empty() => {
                    return Err(shape(&format!("{at}.any"), "an empty any matches nothing"));
                }
                (None, Some(any), false) => ParameterConstraint::Matches {
                    globs: any
                        .iter()
                        .enumerate()
                        .map(|(i, g)| value_glob(&format!("{at}.any[{i}]"), g, max_pattern_bytes))
                        .collect::<Result<_, _>>()?,
                    optional: spec.optional,
                },
                _ => return Err(shape(&at, "give exactly one of glob, any and absent: true")),
            },
        };
        out.push((name.clone(), constraint));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    fn q(pairs: &[(&str, &str)]) -> Query {
        pairs
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_query_is_read_as_a_form_with_names_and_values_decoded() {
        let n = named(&["q"]);
        assert_eq!(
            parse("q=a%20b&&page=2&flag", Plus::Space, &n).unwrap(),
            q(&[("q", "a b"), ("page", "2"), ("flag", "")])
        );
        // The name is decoded too, so an escaped name is the same name.
        assert_eq!(parse("%71=x", Plus::Space, &n).unwrap(), q(&[("q", "x")]));
        // Only the first '=' splits.
        assert_eq!(parse("q=a=b", Plus::Space, &n).unwrap(), q(&[("q", "a=b")]));
    }

    #[test]
    fn malformed_escapes_bad_utf8_and_semicolons_are_refused_when_a_rule_reads_the_query() {
        let n = named(&["q"]);
        for raw in ["q=%zz", "q=%4", "q=%", "q=%ff", "q=a;b=c"] {
            assert!(
                matches!(
                    parse(raw, Plus::Space, &n),
                    Err(QueryError::NonCanonical(_))
                ),
                "{raw}"
            );
        }
        // Without a rule that reads the query, nothing in it decides.
        assert_eq!(
            parse("q=%zz;x", Plus::Space, &named(&[])).unwrap(),
            Query::new()
        );
    }

    #[test]
    fn a_repeated_named_parameter_is_refused_and_an_unnamed_one_keeps_its_first_value() {
        let n = named(&["q"]);
        assert_eq!(
            parse("q=a&q=b", Plus::Space, &n),
            Err(QueryError::Repeated("q".into()))
        );
        // Repeated once decoded.
        assert_eq!(
            parse("q=a&%71=b", Plus::Space, &n),
            Err(QueryError::Repeated("q".into()))
        );
        assert_eq!(
            parse("tag=a&tag=b&q=x", Plus::Space, &n).unwrap(),
            q(&[("tag", "a"), ("q", "x")])
        );
    }

    #[test]
    fn a_plus_where_a_rule_looks_is_judged_in_both_readings() {
        let n = named(&["q"]);
        let both = readings("q=a+b", &n).unwrap();
        assert_eq!(
            both,
            vec![
                (Plus::Space, q(&[("q", "a b")])),
                (Plus::Literal, q(&[("q", "a+b")]))
            ]
        );
        // A '+' only where no rule looks: one reading.
        assert_eq!(readings("q=ab&other=c+d", &n).unwrap().len(), 1);
        // An escaped plus reads the same in both.
        assert_eq!(
            readings("q=a%2Bb", &n).unwrap(),
            vec![(Plus::Space, q(&[("q", "a+b")]))]
        );
        // A '+' in a name: "a b" in one reading, "a+b" in the other.
        assert_eq!(readings("a+b=1", &named(&["a b"])).unwrap().len(), 2);
    }

    #[test]
    fn an_encoded_query_reads_back_as_itself_in_either_reading() {
        let n = named(&["q", "a b", "x&y"]);
        let query = q(&[("q", "a+b c%d&e=f;ü"), ("a b", ""), ("x&y", "=")]);
        let target = to_target(&query);
        for plus in [Plus::Space, Plus::Literal] {
            assert_eq!(parse(&target, plus, &n).unwrap(), query, "{target}");
        }
    }

    #[test]
    fn constraints_read_absent_optional_and_value_globs() {
        let glob = |p: &str| NameGlob::parse("f", p, 4096).unwrap();
        let required = ParameterConstraint::Matches {
            globs: vec![glob("en*")],
            optional: false,
        };
        let optional = ParameterConstraint::Matches {
            globs: vec![glob("en*"), NameGlob::empty()],
            optional: true,
        };
        assert!(required.admits(Some("en-GB")));
        assert!(!required.admits(Some("de")));
        assert!(!required.admits(None));
        assert!(optional.admits(None));
        assert!(optional.admits(Some("")));
        assert!(!optional.admits(Some("x")));
        assert!(ParameterConstraint::Absent.admits(None));
        assert!(!ParameterConstraint::Absent.admits(Some("")));
    }
}
