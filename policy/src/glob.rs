//! Glob patterns of docs/policy-semantics.md §3: parsing, validation and concrete
//! matching.
//!
//! Two independent views of a glob live here on purpose:
//! - [`Glob::matches`] matches a concrete value by walking segments/labels as
//!   §3 describes them (the runtime matcher uses it);
//! - [`Glob::tokens`] is a character-level token sequence that the prover's
//!   automata are built from.
//!
//! The differential tests compare the prover against the matcher, so the two
//! must not share matching code.

use std::fmt;

/// Which kind of value a glob matches; decides the separator and the rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GlobKind {
    /// Executable paths (separator `/`, no trailing slash in values).
    Binary,
    /// REST request paths (separator `/`).
    Path,
    /// DNS host names (separator `.`, wildcards only in the first label).
    Host,
}

/// Why a pattern is not a valid glob.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct GlobError(pub String);

/// One character-level token of a compiled glob.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Token {
    /// Exactly this byte.
    Literal(u8),
    /// Zero or more bytes other than the separator.
    Star,
    /// Zero or more bytes of any kind (trailing `/**`, a `**` host label, `**`).
    AnyString,
    /// Zero or more whole segments, each followed by `/`: `([^/]*/)*`
    /// (an interior `**` path segment).
    Segments,
}

/// A validated glob pattern. Equality and hashing use the kind and the
/// source text, which determine the tokens.
#[derive(Debug, Clone)]
pub struct Glob {
    kind: GlobKind,
    source: String,
    tokens: Vec<Token>,
    /// No wildcard: matching is string equality (the runtime hot path).
    literal: bool,
}

impl Glob {
    /// Parses and validates a pattern. Host patterns are lower-cased. Length
    /// limits are the caller's (`Limits::pattern_bytes`).
    pub fn parse(kind: GlobKind, pattern: &str) -> Result<Glob, GlobError> {
        if pattern.is_empty() {
            return Err(GlobError("empty pattern".into()));
        }
        for c in pattern.chars() {
            if !c.is_ascii() {
                return Err(GlobError(format!("non-ASCII character {c:?}")));
            }
            if matches!(c, '?' | '[' | ']' | '{' | '}' | '\\' | '\0') {
                return Err(GlobError(format!(
                    "character {c:?} is not supported in globs (only * and ** are wildcards)"
                )));
            }
        }
        let mut glob = match kind {
            GlobKind::Host => parse_host(pattern),
            GlobKind::Path | GlobKind::Binary => parse_path(kind, pattern),
        }?;
        glob.literal = !glob.source.contains('*');
        Ok(glob)
    }

    /// The pattern as written (lower-cased for hosts).
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// The kind of value this glob matches.
    pub fn kind(&self) -> GlobKind {
        self.kind
    }

    /// The character-level token form used by the prover's automata.
    pub fn tokens(&self) -> &[Token] {
        &self.tokens
    }

    /// The tokens of exactly the values the glob matches: [`Glob::tokens`],
    /// with the leading `/` that a path glob of `**` or `/**` also requires
    /// (the prover's paths always have it, so its tokens leave it out).
    pub fn value_tokens(&self) -> Vec<Token> {
        if self.kind != GlobKind::Host && self.tokens == [Token::AnyString] {
            return vec![Token::Literal(b'/'), Token::AnyString];
        }
        self.tokens.clone()
    }

    /// True when the pattern contains a wildcard.
    pub fn has_wildcard(&self) -> bool {
        self.source.contains('*')
    }

    /// True when the pattern contains a recursive wildcard (`**`).
    pub fn has_recursive_wildcard(&self) -> bool {
        self.tokens
            .iter()
            .any(|t| matches!(t, Token::AnyString | Token::Segments))
    }

    /// A bare `*`/`**` host or a wildcard whose remaining suffix is a single
    /// label (`*.com`): allowed only in a MaximumPolicy (§3).
    pub fn is_broad_host(&self) -> bool {
        if self.kind != GlobKind::Host || !self.has_wildcard() {
            return false;
        }
        self.source.split('.').count() <= 2
    }

    /// Matches a canonical value (§3), segment by segment.
    pub fn matches(&self, value: &str) -> bool {
        if self.literal {
            return match self.kind {
                // Canonical hosts are lower case, as the source is: one
                // comparison on the hot path, case folded only otherwise.
                GlobKind::Host => self.source == value || self.source.eq_ignore_ascii_case(value),
                GlobKind::Path | GlobKind::Binary => self.source == value,
            };
        }
        match self.kind {
            // Canonical hosts are already lower case: lower-case only when needed.
            GlobKind::Host if value.bytes().any(|b| b.is_ascii_uppercase()) => {
                host_matches(&self.source, &value.to_ascii_lowercase())
            }
            GlobKind::Host => host_matches(&self.source, value),
            GlobKind::Path | GlobKind::Binary => path_matches(&self.source, value),
        }
    }
}

impl PartialEq for Glob {
    fn eq(&self, other: &Self) -> bool {
        self.kind == other.kind && self.source == other.source
    }
}

impl Eq for Glob {}

impl std::hash::Hash for Glob {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.kind.hash(state);
        self.source.hash(state);
    }
}

impl fmt::Display for Glob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

fn parse_host(pattern: &str) -> Result<Glob, GlobError> {
    let source = pattern.to_ascii_lowercase();
    let labels: Vec<&str> = source.split('.').collect();
    for (i, label) in labels.iter().enumerate() {
        if label.is_empty() {
            return Err(GlobError(
                "empty label (leading, trailing or double dot)".into(),
            ));
        }
        if i > 0 && label.contains('*') {
            return Err(GlobError("wildcard allowed only in the first label".into()));
        }
        if let Some(c) = label
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '*')))
        {
            return Err(GlobError(format!(
                "character {c:?} cannot occur in a host name"
            )));
        }
        if label.trim_matches('*').len() > 63 {
            return Err(GlobError("label longer than 63 characters".into()));
        }
    }
    let mut tokens = Vec::with_capacity(source.len());
    let first = labels[0];
    if first == "**" {
        tokens.push(Token::AnyString);
    } else {
        push_segment(&mut tokens, first);
    }
    for label in &labels[1..] {
        tokens.push(Token::Literal(b'.'));
        tokens.extend(label.bytes().map(Token::Literal));
    }
    Ok(Glob {
        kind: GlobKind::Host,
        source,
        tokens,
        literal: false,
    })
}

fn parse_path(kind: GlobKind, pattern: &str) -> Result<Glob, GlobError> {
    if pattern == "**" || pattern == "/**" {
        return Ok(Glob {
            kind,
            source: pattern.to_string(),
            tokens: vec![Token::AnyString],
            literal: false,
        });
    }
    let Some(rest) = pattern.strip_prefix('/') else {
        return Err(GlobError(
            "path pattern must start with / (or be **)".into(),
        ));
    };
    let segments: Vec<&str> = rest.split('/').collect();
    let last = segments.len() - 1;
    for (i, segment) in segments.iter().enumerate() {
        if segment.is_empty() && (i != last || kind == GlobKind::Binary) {
            if i == last {
                return Err(GlobError("binary pattern cannot end with /".into()));
            }
            return Err(GlobError(
                "empty segment (//) never matches a canonical path".into(),
            ));
        }
        if *segment == "." || *segment == ".." {
            return Err(GlobError(format!(
                "segment {segment:?} never matches a canonical path"
            )));
        }
        if kind == GlobKind::Path && segment.contains(['#', ';']) {
            return Err(GlobError(
                "'#' and ';' never occur in a canonical request path".into(),
            ));
        }
    }
    let mut tokens = Vec::with_capacity(pattern.len());
    let mut after_segments = false;
    for (i, segment) in segments.iter().enumerate() {
        if !after_segments {
            tokens.push(Token::Literal(b'/'));
        }
        after_segments = false;
        if *segment == "**" {
            if i == last {
                tokens.push(Token::AnyString);
            } else {
                tokens.push(Token::Segments);
                after_segments = true;
            }
        } else {
            push_segment(&mut tokens, segment);
        }
    }
    Ok(Glob {
        kind,
        source: pattern.to_string(),
        tokens,
        literal: false,
    })
}

/// Pushes one segment/label: literals, with every run of `*` as one [`Token::Star`].
fn push_segment(tokens: &mut Vec<Token>, segment: &str) {
    let mut previous_star = false;
    for b in segment.bytes() {
        if b == b'*' {
            if !previous_star {
                tokens.push(Token::Star);
            }
            previous_star = true;
        } else {
            tokens.push(Token::Literal(b));
            previous_star = false;
        }
    }
}

/// `*`-only wildcard match of one segment or label (no separators inside).
fn segment_matches(pattern: &[u8], value: &[u8]) -> bool {
    // Classic greedy-with-backtrack wildcard matching, linear in practice.
    let (mut p, mut v) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while v < value.len() {
        if p < pattern.len() && pattern[p] == b'*' {
            star = Some((p, v));
            p += 1;
        } else if p < pattern.len() && pattern[p] == value[v] {
            p += 1;
            v += 1;
        } else if let Some((sp, sv)) = star {
            p = sp + 1;
            v = sv + 1;
            star = Some((sp, sv + 1));
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|&b| b == b'*')
}

fn path_matches(pattern: &str, value: &str) -> bool {
    if pattern == "**" || pattern == "/**" {
        return value.starts_with('/');
    }
    // Without a wildcard every segment must be equal: the whole string is
    // (the runtime decision point's hot path; no allocation).
    if !pattern.contains('*') {
        return pattern.starts_with('/') && pattern == value;
    }
    let (Some(pattern), Some(value)) = (pattern.strip_prefix('/'), value.strip_prefix('/')) else {
        return false;
    };
    let pattern: Vec<&str> = pattern.split('/').collect();
    let value: Vec<&str> = value.split('/').collect();
    let last = pattern.len() - 1;
    // reach[i][j]: pattern segments [..i] can consume value segments [..j].
    let mut reach = vec![vec![false; value.len() + 1]; pattern.len() + 1];
    reach[0][0] = true;
    for i in 0..pattern.len() {
        let segment = pattern[i];
        for j in 0..=value.len() {
            if !reach[i][j] {
                continue;
            }
            if segment == "**" {
                // Interior: zero or more segments. Trailing: one or more
                // (so `/repos/**` matches `/repos/` but not `/repos`).
                let min = if i == last { 1 } else { 0 };
                reach[i + 1][(j + min).min(value.len() + 1)..]
                    .iter_mut()
                    .for_each(|r| *r = true);
            } else if j < value.len() && segment_matches(segment.as_bytes(), value[j].as_bytes()) {
                reach[i + 1][j + 1] = true;
            }
        }
    }
    reach[pattern.len()][value.len()]
}

/// Host patterns have a wildcard only in their first label, so a match is
/// "the value ends with the literal suffix at a label boundary, and what
/// precedes it matches the first label" (no allocation).
fn host_matches(pattern: &str, value: &str) -> bool {
    let (first, suffix) = match pattern.split_once('.') {
        Some((first, suffix)) => (first, Some(suffix)),
        None => (pattern, None),
    };
    let head = match suffix {
        None => value,
        Some(suffix) => {
            let Some(rest) = value.strip_suffix(suffix) else {
                return false;
            };
            match rest.strip_suffix('.') {
                Some(head) => head,
                None => return false,
            }
        }
    };
    if first == "**" {
        // One or more whole labels (`head` is at least one label).
        true
    } else {
        !head.contains('.') && segment_matches(first.as_bytes(), head.as_bytes())
    }
}

/// What one move of a token automaton consumes.
#[derive(Debug, Clone, Copy)]
enum Class {
    Byte(u8),
    /// Any byte but the separator.
    Other,
    /// Any byte.
    Any,
}

/// The automaton of a token sequence: state `i` is "before token `i`",
/// `tokens.len()` accepts, and each [`Token::Segments`] adds an inner state
/// (inside one of its segments).
struct TokenAutomaton {
    epsilon: Vec<Vec<usize>>,
    moves: Vec<Vec<(Class, usize)>>,
    accept: usize,
}

impl TokenAutomaton {
    fn new(tokens: &[Token], separator: u8) -> TokenAutomaton {
        let accept = tokens.len();
        let mut epsilon = vec![Vec::new(); accept + 1];
        let mut moves = vec![Vec::new(); accept + 1];
        for (i, token) in tokens.iter().enumerate() {
            match token {
                Token::Literal(b) => moves[i].push((Class::Byte(*b), i + 1)),
                Token::Star => {
                    moves[i].push((Class::Other, i));
                    epsilon[i].push(i + 1);
                }
                Token::AnyString => {
                    moves[i].push((Class::Any, i));
                    epsilon[i].push(i + 1);
                }
                Token::Segments => {
                    let inner = moves.len();
                    epsilon.push(Vec::new());
                    moves.push(vec![(Class::Other, inner), (Class::Byte(separator), i)]);
                    moves[i].push((Class::Other, inner));
                    moves[i].push((Class::Byte(separator), i));
                    epsilon[i].push(i + 1);
                }
            }
        }
        TokenAutomaton {
            epsilon,
            moves,
            accept,
        }
    }
}

/// A byte both classes hold, if any (`fill` where either may be anything).
fn common_byte(a: Class, b: Class, separator: u8, fill: u8) -> Option<u8> {
    match (a, b) {
        (Class::Byte(x), Class::Byte(y)) => (x == y).then_some(x),
        (Class::Byte(x), Class::Other) | (Class::Other, Class::Byte(x)) => {
            (x != separator).then_some(x)
        }
        (Class::Byte(x), Class::Any) | (Class::Any, Class::Byte(x)) => Some(x),
        _ => Some(fill),
    }
}

/// A word that both token sequences match (each [`Token::Star`] excluding
/// `separator`), if one exists: the one a breadth-first search of the
/// product automaton reaches first, with `a` wherever a wildcard of both
/// sides chose the byte. Linear in the product of the lengths.
pub fn common_word(a: &[Token], b: &[Token], separator: u8) -> Option<Vec<u8>> {
    let fill = if separator == b'a' { b'b' } else { b'a' };
    let (left, right) = (
        TokenAutomaton::new(a, separator),
        TokenAutomaton::new(b, separator),
    );
    let width = right.moves.len();
    let index = |x: usize, y: usize| x * width + y;
    // parent[state] = (previous state, byte consumed, if any).
    let mut parent: Vec<Option<(usize, Option<u8>)>> = vec![None; left.moves.len() * width];
    let start = index(0, 0);
    parent[start] = Some((start, None));
    let mut queue = std::collections::VecDeque::from([(0usize, 0usize)]);
    while let Some((x, y)) = queue.pop_front() {
        if x == left.accept && y == right.accept {
            let mut word = Vec::new();
            let mut at = index(x, y);
            while at != start {
                let Some((previous, byte)) = parent[at] else {
                    break;
                };
                word.extend(byte);
                at = previous;
            }
            word.reverse();
            return Some(word);
        }
        let here = index(x, y);
        let mut next = Vec::new();
        next.extend(left.epsilon[x].iter().map(|&x2| (x2, y, None)));
        next.extend(right.epsilon[y].iter().map(|&y2| (x, y2, None)));
        for &(ca, x2) in &left.moves[x] {
            for &(cb, y2) in &right.moves[y] {
                if let Some(byte) = common_byte(ca, cb, separator, fill) {
                    next.push((x2, y2, Some(byte)));
                }
            }
        }
        for (x2, y2, byte) in next {
            let to = index(x2, y2);
            if parent[to].is_none() {
                parent[to] = Some((here, byte));
                queue.push_back((x2, y2));
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(p: &str) -> Glob {
        Glob::parse(GlobKind::Path, p).unwrap()
    }
    fn host(p: &str) -> Glob {
        Glob::parse(GlobKind::Host, p).unwrap()
    }

    fn common(a: &str, b: &str) -> Option<String> {
        common_word(&path(a).value_tokens(), &path(b).value_tokens(), b'/')
            .map(|w| String::from_utf8(w).unwrap())
    }

    #[test]
    fn two_globs_share_a_word_exactly_when_one_exists() {
        assert_eq!(common("/a/*", "/*/b").as_deref(), Some("/a/b"));
        assert_eq!(common("/a/**", "/a/*/c").as_deref(), Some("/a//c"));
        assert_eq!(common("/a/*", "/b/*"), None);
        // `*` stays within a segment; `**` does not.
        assert_eq!(common("/a/*", "/a/b/c"), None);
        assert_eq!(common("/a/**/c", "/a/b/x/c").as_deref(), Some("/a/b/x/c"));
        assert_eq!(common("/x*", "/*y").as_deref(), Some("/xy"));
    }

    fn path_glob() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        proptest::collection::vec(
            prop::sample::select(vec!["a", "b", "*", "**", "a*", "*b", "ab"]),
            1..4,
        )
        .prop_map(|segments| format!("/{}", segments.join("/")))
    }

    proptest::proptest! {
        /// The product search against the segment matcher of §3: a word
        /// both globs match means a common word is found, and the word
        /// found is matched by both.
        #[test]
        fn common_words_agree_with_the_matcher(
            a in path_glob(),
            b in path_glob(),
            values in proptest::collection::vec(
                proptest::collection::vec(
                    proptest::sample::select(vec!["a", "b", "ab", "ba", "abb", ""]),
                    1..5,
                ),
                1..30,
            ),
        ) {
            let (ga, gb) = (path(&a), path(&b));
            let found = common(&a, &b);
            if let Some(word) = &found {
                proptest::prop_assert!(ga.matches(word) && gb.matches(word), "{a} {b} {word}");
            }
            for value in values {
                let value = format!("/{}", value.join("/"));
                if ga.matches(&value) && gb.matches(&value) {
                    proptest::prop_assert!(found.is_some(), "{a} {b} share {value}");
                }
            }
        }
    }

    #[test]
    fn star_matches_within_one_segment() {
        let g = path("/repos/*/issues");
        assert!(g.matches("/repos/x/issues"));
        assert!(!g.matches("/repos/x/y/issues"));
        assert!(path("/a*b").matches("/ab"));
        assert!(path("/a*b").matches("/axxb"));
        assert!(!path("/a*b").matches("/a/b"));
        assert!(path("/a***b").matches("/axb"), "*** inside a segment is *");
    }

    #[test]
    fn double_star_segment_matches_zero_or_more_segments() {
        let g = path("/a/**/b");
        assert!(g.matches("/a/b"));
        assert!(g.matches("/a/x/b"));
        assert!(g.matches("/a/x/y/b"));
        assert!(!g.matches("/a/x/c"));
    }

    #[test]
    fn trailing_double_star_needs_the_slash() {
        let g = path("/repos/**");
        assert!(g.matches("/repos/"));
        assert!(g.matches("/repos/x"));
        assert!(g.matches("/repos/x/y"));
        assert!(!g.matches("/repos"));
        assert!(!g.matches("/reposx"));
    }

    #[test]
    fn bare_double_star_matches_every_path() {
        for p in ["**", "/**"] {
            let g = path(p);
            assert!(g.matches("/"));
            assert!(g.matches("/a/b/c"));
        }
    }

    #[test]
    fn literals_are_case_sensitive() {
        assert!(!path("/Repos").matches("/repos"));
        assert!(path("/Repos").matches("/Repos"));
    }

    #[test]
    fn rejected_characters() {
        for p in ["/a?", "/a[b]", "/{a,b}", "/a\\b", "/é"] {
            assert!(Glob::parse(GlobKind::Path, p).is_err(), "{p}");
        }
        assert!(Glob::parse(GlobKind::Path, "relative").is_err());
        assert!(Glob::parse(GlobKind::Binary, "/usr/bin/").is_err());
        assert!(Glob::parse(GlobKind::Path, "/a//b").is_err());
    }

    #[test]
    fn host_wildcards_only_in_first_label() {
        let e = Glob::parse(GlobKind::Host, "api.*.example.com").unwrap_err();
        assert_eq!(e.0, "wildcard allowed only in the first label");
        assert!(Glob::parse(GlobKind::Host, "a..b").is_err());
    }

    #[test]
    fn host_star_is_one_label() {
        let g = host("*.example.com");
        assert!(g.matches("x.example.com"));
        assert!(!g.matches("example.com"));
        assert!(!g.matches("a.b.example.com"));
        let g = host("api*.example.com");
        assert!(g.matches("api.example.com"));
        assert!(g.matches("api-v2.example.com"));
        assert!(!g.matches("xapi.example.com"));
    }

    #[test]
    fn host_double_star_is_one_or_more_labels() {
        let g = host("**.example.com");
        assert!(g.matches("a.example.com"));
        assert!(g.matches("a.b.example.com"));
        assert!(!g.matches("example.com"));
    }

    #[test]
    fn hosts_are_case_insensitive() {
        let g = host("API.Example.com");
        assert_eq!(g.as_str(), "api.example.com");
        assert!(g.matches("API.EXAMPLE.COM"));
    }

    #[test]
    fn broad_hosts_are_flagged() {
        assert!(host("*").is_broad_host());
        assert!(host("**").is_broad_host());
        assert!(host("*.com").is_broad_host());
        assert!(!host("*.example.com").is_broad_host());
        assert!(!host("example.com").is_broad_host());
    }
}
