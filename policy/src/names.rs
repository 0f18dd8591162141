//! Names of tools, prompts and resources (docs/policy-semantics.md §8.1)
//! and the name globs that match them: the alphabet both the policy's
//! patterns and the concrete calls are checked against.

use crate::error::{Reason, ReasonCode};

/// The longest tool, prompt or resource name (docs/policy-semantics.md §8.1).
pub const MAX_NAME_BYTES: usize = 1024;
/// The pattern-size limit of docs/policy-semantics.md §6.
pub(crate) fn check_length(field: &str, pattern: &str, max_bytes: usize) -> Result<(), Reason> {
    if pattern.len() > max_bytes {
        return Err(Reason::at(
            ReasonCode::ResourceLimit,
            field,
            format!("pattern is longer than {max_bytes} bytes"),
        ));
    }
    Ok(())
}

/// True for a printable ASCII byte (0x20..=0x7e), the alphabet of names.
pub fn is_name_byte(b: u8) -> bool {
    (0x20..=0x7e).contains(&b)
}

/// Checks a tool, prompt or resource name: 1..=1024 printable ASCII bytes.
pub fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_NAME_BYTES {
        return Err(format!("must be 1..{MAX_NAME_BYTES} bytes"));
    }
    if !name.bytes().all(is_name_byte) {
        return Err("must be printable ASCII".to_string());
    }
    Ok(())
}

/// A name glob (tool and prompt names, the `glob` constraint): `*` matches
/// any run of characters, every other character is literal.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct NameGlob {
    pattern: String,
}

impl NameGlob {
    /// Parses a pattern: non-empty printable ASCII. `field` names it in errors.
    pub fn parse(field: &str, pattern: &str, max_bytes: usize) -> Result<NameGlob, Reason> {
        check_length(field, pattern, max_bytes)?;
        if pattern.is_empty() || !pattern.bytes().all(is_name_byte) {
            return Err(Reason::at(
                ReasonCode::InvalidGlob,
                field,
                "a name glob is non-empty printable ASCII",
            ));
        }
        Ok(NameGlob {
            pattern: pattern.to_string(),
        })
    }

    /// The glob that matches only the empty string (a query parameter's
    /// empty value, docs/policy-semantics.md §10.1).
    pub fn empty() -> NameGlob {
        NameGlob {
            pattern: String::new(),
        }
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.pattern
    }

    /// The pattern as glob tokens: `*` is any run of characters, every
    /// other byte a literal (for the prover's automata).
    pub fn tokens(&self) -> Vec<crate::glob::Token> {
        use crate::glob::Token;
        self.pattern
            .bytes()
            .map(|b| {
                if b == b'*' {
                    Token::AnyString
                } else {
                    Token::Literal(b)
                }
            })
            .collect()
    }

    /// The literal runs between the `*`s.
    pub fn literals(&self) -> impl Iterator<Item = &str> {
        self.pattern.split('*')
    }

    /// True when the pattern has a `*`.
    pub fn has_wildcard(&self) -> bool {
        self.pattern.contains('*')
    }

    /// True when `value` matches: the first literal run is a prefix, the
    /// last a suffix, and the others occur in order between them.
    pub fn matches(&self, value: &str) -> bool {
        // No allocation: this runs for every entry a call is judged against.
        let Some((first, tail)) = self.pattern.split_once('*') else {
            return self.pattern == value; // no `*`: the whole value is the literal
        };
        let Some(mut rest) = value.strip_prefix(first) else {
            return false;
        };
        let (middle, last) = tail.rsplit_once('*').unwrap_or(("", tail));
        for part in middle.split('*').filter(|p| !p.is_empty()) {
            match rest.find(part) {
                Some(at) => rest = &rest[at + part.len()..],
                None => return false,
            }
        }
        rest.len() >= last.len() && rest.ends_with(last)
    }
}
