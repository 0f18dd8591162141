//! Realizable signatures of one string dimension (binary, host, request path,
//! filesystem path).
//!
//! Given the patterns of a question, a *signature* is the set of patterns
//! that one canonical value matches at once. Only some subsets are
//! realizable (no host matches `api.example.com` and `*.org` together), and
//! those are exactly what the solver may choose from. We find them by
//! exploring the subset-construction DFA of all patterns' NFAs, in product
//! with the canonical-form automaton of docs/policy-semantics.md §1, breadth
//! first. Each reachable accepting state contributes its signature, and the
//! BFS parent chain gives the shortest value that realises it: the witness.
//!
//! Characters are explored by class: every literal a live NFA state expects,
//! the separators, and one filler character standing for "anything else"
//! (all such characters lead to the same successor state). This keeps the
//! exploration proportional to the patterns, not to the alphabet. See
//! docs/proofs.md for why this is exact.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};
use std::time::Instant;

use agentgate_policy::action::{MAX_HOST_BYTES, MAX_PATH_BYTES, is_host_byte};
use agentgate_policy::glob::Token;

/// Which canonical form the values of a dimension take.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Domain {
    /// Filesystem paths: `/` or `/seg(/seg)*`, segments non-empty and not
    /// `.`/`..`.
    AbsolutePath,
    /// Executable paths: like [`Domain::AbsolutePath`] without the root `/`
    /// (a directory is not an executable).
    Binary,
    /// REST request paths: like [`Domain::AbsolutePath`] but a trailing `/` is
    /// allowed and `? # ;` are not.
    RequestPath,
    /// Lower-case DNS names.
    Host,
    /// MCP tool and prompt names: 1..=1024 printable ASCII characters
    /// (docs/policy-semantics.md §8.1), no separator.
    Name,
    /// JSON string argument values, explored over ASCII (see
    /// `crate::arguments` for why that suffices), possibly empty.
    Text,
    /// Credential names: DNS labels, 1..=63 of `[a-z0-9-]`, starting and
    /// ending with a letter or digit (docs/policy-semantics.md §9).
    Credential,
}

impl Domain {
    fn separator(self) -> u8 {
        match self {
            Domain::Host => b'.',
            // Name and text patterns have no `Star` (a `*` is `AnyString`):
            // the separator is never consulted for them.
            Domain::Name | Domain::Text | Domain::Credential => 0,
            Domain::AbsolutePath | Domain::Binary | Domain::RequestPath => b'/',
        }
    }

    /// Characters the canonical automaton treats specially, always explored.
    fn special(self) -> &'static [u8] {
        match self {
            Domain::Host => b".",
            Domain::AbsolutePath | Domain::Binary | Domain::RequestPath => b"/.",
            Domain::Name | Domain::Text => b"",
            Domain::Credential => b"-",
        }
    }

    fn allowed(self, c: u8) -> bool {
        match self {
            Domain::Host => is_host_byte(c) || c == b'.',
            Domain::AbsolutePath | Domain::Binary => c.is_ascii() && c != 0,
            Domain::RequestPath => c.is_ascii() && !matches!(c, 0 | b'?' | b'#' | b';'),
            Domain::Name => agentgate_policy::names::is_name_byte(c),
            Domain::Text => c.is_ascii(),
            Domain::Credential => c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-',
        }
    }

    /// Filler preference: readable first.
    fn fillers(self) -> &'static [u8] {
        match self {
            Domain::Host => b"xyzabcdefghijklmnopqrstuvw0123456789-_",
            Domain::AbsolutePath | Domain::Binary | Domain::RequestPath => {
                b"xyzabcdefghijklmnopqrstuvw0123456789-_~XYZABCDEFGHIJKLMNOPQRSTUVW"
            }
            Domain::Name => TEXT_FILLERS.split_at(PRINTABLE_FILLERS).0,
            // Every ASCII byte, so that a state always has an "anything
            // else" character however many literals it expects.
            Domain::Text => TEXT_FILLERS,
            Domain::Credential => b"xyzabcdefghijklmnopqrstuvw0123456789-",
        }
    }

    /// The length limits of §1, which the automaton does not count. The BFS
    /// finds the shortest value of each signature, so a signature whose
    /// shortest value breaks a limit has no canonical value at all.
    fn within_length_limits(self, value: &[u8]) -> bool {
        match self {
            Domain::Host => {
                value.len() <= MAX_HOST_BYTES
                    && value.split(|&b| b == b'.').count() <= 127
                    && value.split(|&b| b == b'.').all(|label| label.len() <= 63)
            }
            Domain::AbsolutePath | Domain::Binary | Domain::RequestPath => {
                value.len() <= MAX_PATH_BYTES
            }
            Domain::Name => value.len() <= agentgate_policy::names::MAX_NAME_BYTES,
            Domain::Text => true,
            Domain::Credential => {
                value.len() <= agentgate_policy::action::MAX_CREDENTIAL_NAME_BYTES
            }
        }
    }

    fn start(self) -> u8 {
        0
    }

    /// Canonical-form automaton. States:
    /// paths: 0 start, 1 root `/`, 2 after a later `/`, 3 `/.`, 4 `/..`, 5 in a segment;
    /// hosts: 0 start of a label, 1 in a label;
    /// names: 0 empty, 1 non-empty; text: 0 only;
    /// credentials: 0 empty, 1 ends with a letter or digit, 2 ends with `-`.
    fn step(self, state: u8, c: u8) -> Option<u8> {
        if !self.allowed(c) {
            return None;
        }
        match self {
            Domain::Name => Some(1),
            Domain::Text => Some(state),
            Domain::Credential => match (state, c) {
                (0, b'-') => None,
                (_, b'-') => Some(2),
                _ => Some(1),
            },
            Domain::Host => match (state, c) {
                (1, b'.') => Some(0),
                (_, b'.') => None,
                _ => Some(1),
            },
            Domain::AbsolutePath | Domain::Binary | Domain::RequestPath => match (state, c) {
                (0, b'/') => Some(1),
                (0, _) => None,
                (1 | 2, b'/') => None,
                (1 | 2, b'.') => Some(3),
                (3, b'.') => Some(4),
                (3 | 4, b'/') => None,
                (5, b'/') => Some(2),
                _ => Some(5),
            },
        }
    }

    fn accepting(self, state: u8) -> bool {
        match self {
            Domain::Host | Domain::Name | Domain::Credential => state == 1,
            Domain::Text => true,
            Domain::AbsolutePath => matches!(state, 1 | 5),
            Domain::Binary => state == 5,
            Domain::RequestPath => matches!(state, 1 | 2 | 5),
        }
    }
}

/// Fillers of names and text: readable printable characters first, then
/// the rest of printable ASCII, then (text only) the control characters.
const TEXT_FILLERS: &[u8] = b"xyzabcdefghijklmnopqrstuvw0123456789_-XYZABCDEFGHIJKLMNOPQRSTUVW .,:/@+=!#$%&'()*;<>?[]^`{|}~\"\\\t\n\r\x00\x01\x02\x03\x04\x05\x06\x07\x08\x0b\x0c\x0e\x0f\x10\x11\x12\x13\x14\x15\x16\x17\x18\x19\x1a\x1b\x1c\x1d\x1e\x1f\x7f";
/// How many of [`TEXT_FILLERS`] are printable (the alphabet of names).
const PRINTABLE_FILLERS: usize = 95;

/// Why the exploration stopped early.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AutomatonError {
    /// More DFA states than allowed.
    #[error("the {dimension} automaton needs more than {limit} states")]
    TooManyStates {
        /// Which dimension.
        dimension: &'static str,
        /// The limit.
        limit: usize,
    },
    /// The deadline passed.
    #[error("deadline reached while building the {0} automaton")]
    Deadline(&'static str),
}

/// One realizable signature and the shortest value that realises it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signature {
    /// Indices of the matched patterns, ascending.
    pub members: Vec<u32>,
    /// A canonical value matching exactly `members` (shortest found).
    pub witness: String,
}

/// Every realizable signature of a set of patterns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signatures {
    /// Signatures in discovery (shortest-witness) order.
    pub signatures: Vec<Signature>,
    /// DFA states explored, for diagnostics.
    pub states: usize,
}

/// An NFA position: pattern index (high 32 bits), token index * 2 + sub-state.
type NfaState = u64;

fn nfa(pattern: usize, position: usize, inside: bool) -> NfaState {
    ((pattern as u64) << 32) | ((position as u64) << 1) | inside as u64
}

fn unpack(s: NfaState) -> (usize, usize, bool) {
    (
        (s >> 32) as usize,
        ((s & 0xffff_ffff) >> 1) as usize,
        s & 1 == 1,
    )
}

struct Explorer<'a> {
    domain: Domain,
    patterns: &'a [&'a [Token]],
}

impl Explorer<'_> {
    /// Adds `state` and its epsilon successors (wildcards may match nothing).
    fn close(&self, pattern: usize, mut position: usize, out: &mut Vec<NfaState>) {
        let tokens = self.patterns[pattern];
        loop {
            out.push(nfa(pattern, position, false));
            match tokens.get(position) {
                Some(Token::Star | Token::AnyString | Token::Segments) => position += 1,
                _ => break,
            }
        }
    }

    fn step(&self, set: &[NfaState], c: u8, out: &mut Vec<NfaState>) {
        let separator = self.domain.separator();
        for &s in set {
            let (p, position, inside) = unpack(s);
            let tokens = self.patterns[p];
            if inside {
                // Inside a segment consumed by an interior `**`.
                if c == b'/' {
                    self.close(p, position, out);
                } else {
                    out.push(nfa(p, position, true));
                }
                continue;
            }
            match tokens.get(position) {
                None => {}
                Some(Token::Literal(l)) if *l == c => self.close(p, position + 1, out),
                Some(Token::Literal(_)) => {}
                Some(Token::Star) if c != separator => self.close(p, position, out),
                Some(Token::Star) => {}
                Some(Token::AnyString) => self.close(p, position, out),
                Some(Token::Segments) => {
                    if c == b'/' {
                        self.close(p, position, out);
                    } else {
                        out.push(nfa(p, position, true));
                    }
                }
            }
        }
        out.sort_unstable();
        out.dedup();
    }

    /// The patterns whose NFA accepts in `set`, ascending, into `out`.
    fn members(&self, set: &[NfaState], out: &mut Vec<u32>) {
        out.clear();
        out.extend(set.iter().filter_map(|&s| {
            let (p, position, inside) = unpack(s);
            (!inside && position == self.patterns[p].len()).then_some(p as u32)
        }));
        out.dedup();
    }

    /// The characters worth trying from `set`: expected literals, the
    /// domain's special characters, and one filler for everything else.
    fn classes(&self, set: &[NfaState], out: &mut Vec<u8>) {
        out.clear();
        for &s in set {
            let (p, position, inside) = unpack(s);
            if !inside && let Some(Token::Literal(l)) = self.patterns[p].get(position) {
                out.push(*l);
            }
        }
        out.extend_from_slice(self.domain.special());
        out.sort_unstable();
        out.dedup();
        if let Some(filler) = self
            .domain
            .fillers()
            .iter()
            .find(|f| out.binary_search(f).is_err())
        {
            // Tried first, so that among equally short witnesses the one
            // with a neutral filler wins (`x.example.com`, not `e.example.com`).
            out.insert(0, *filler);
        }
    }
}

/// A `Hasher` for keys that already are hashes ([`state_hash`]).
#[derive(Default)]
struct PrehashedKey(u64);

impl Hasher for PrehashedKey {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only u64 keys are hashed here; fold anything else in.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ b as u64;
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// A fast, non-cryptographic hash of a DFA state (FxHash-style mixing);
/// collisions are resolved by comparing the states themselves.
fn state_hash(canonical: u8, set: &[NfaState]) -> u64 {
    const K: u64 = 0x517c_c1b7_2722_0a95;
    set.iter().fold(canonical as u64, |h, &s| {
        (h.rotate_left(5) ^ s).wrapping_mul(K)
    })
}

/// Explores the product automaton of `patterns` (token sequences, see
/// [`agentgate_policy::glob::Glob::tokens`]) and the canonical form of `domain`.
pub fn signatures(
    domain: Domain,
    dimension: &'static str,
    patterns: &[&[Token]],
    max_states: usize,
    deadline: Instant,
) -> Result<Signatures, AutomatonError> {
    let explorer = Explorer { domain, patterns };
    let mut start = Vec::new();
    for p in 0..patterns.len() {
        explorer.close(p, 0, &mut start);
    }
    start.sort_unstable();
    start.dedup();

    // States are numbered in discovery order, which is BFS order, so the
    // work list is simply the ids not yet expanded. `index` maps a cheap
    // hash of (canonical state, NFA set) to the ids with that hash.
    let mut states: Vec<(u8, Vec<NfaState>)> = Vec::new();
    let mut index: HashMap<u64, u32, BuildHasherDefault<PrehashedKey>> = HashMap::default();
    // States whose hash collided with a different earlier state (rare).
    let mut collided: HashMap<u64, Vec<u32>> = HashMap::new();
    let mut parents: Vec<(u32, u8)> = Vec::new();
    let mut found: HashSet<Vec<u32>> = HashSet::new();
    let mut order: Vec<(Vec<u32>, String)> = Vec::new();
    let witness = |parents: &[(u32, u8)], mut id: u32| {
        let mut bytes = Vec::new();
        while id != 0 {
            let (parent, c) = parents[id as usize];
            bytes.push(c);
            id = parent;
        }
        bytes.reverse();
        bytes
    };

    index.insert(state_hash(domain.start(), &start), 0);
    states.push((domain.start(), start));
    parents.push((u32::MAX, 0));
    let (mut classes, mut next, mut set, mut members) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut id = 0usize;
    while id < states.len() {
        if id.is_multiple_of(256) && Instant::now() >= deadline {
            return Err(AutomatonError::Deadline(dimension));
        }
        let canonical = states[id].0;
        set.clear();
        set.extend_from_slice(&states[id].1);
        if domain.accepting(canonical) {
            explorer.members(&set, &mut members);
            if !found.contains(members.as_slice()) {
                found.insert(members.clone());
                let value = witness(&parents, id as u32);
                if domain.within_length_limits(&value) {
                    order.push((
                        members.clone(),
                        String::from_utf8_lossy(&value).into_owned(),
                    ));
                }
            }
        }
        explorer.classes(&set, &mut classes);
        for &c in &classes {
            let Some(next_canonical) = domain.step(canonical, c) else {
                continue;
            };
            next.clear();
            explorer.step(&set, c, &mut next);
            let hash = state_hash(next_canonical, &next);
            let same = |other: u32| {
                states[other as usize].0 == next_canonical && states[other as usize].1 == next
            };
            let new_id = states.len() as u32;
            match index.get(&hash) {
                Some(&first) if same(first) => continue,
                Some(_) => {
                    let others = collided.entry(hash).or_default();
                    if others.iter().any(|&o| same(o)) {
                        continue;
                    }
                    others.push(new_id);
                }
                None => {
                    index.insert(hash, new_id);
                }
            }
            if states.len() >= max_states {
                return Err(AutomatonError::TooManyStates {
                    dimension,
                    limit: max_states,
                });
            }
            parents.push((id as u32, c));
            states.push((next_canonical, std::mem::take(&mut next)));
        }
        id += 1;
    }
    Ok(Signatures {
        signatures: order
            .into_iter()
            .map(|(members, witness)| Signature { members, witness })
            .collect(),
        states: states.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentgate_policy::glob::{Glob, GlobKind};
    use std::time::Duration;

    fn sigs(domain: Domain, kind: GlobKind, patterns: &[&str]) -> Signatures {
        let globs: Vec<Glob> = patterns
            .iter()
            .map(|p| Glob::parse(kind, p).unwrap())
            .collect();
        let tokens: Vec<&[Token]> = globs.iter().map(|g| g.tokens()).collect();
        let deadline = Instant::now() + Duration::from_secs(10);
        let s = signatures(domain, "test", &tokens, 100_000, deadline).unwrap();
        // Every witness matches exactly its members under the matcher.
        for sig in &s.signatures {
            for (i, g) in globs.iter().enumerate() {
                assert_eq!(
                    g.matches(&sig.witness),
                    sig.members.contains(&(i as u32)),
                    "{} vs {}",
                    g,
                    sig.witness
                );
            }
        }
        s
    }

    fn has(s: &Signatures, members: &[u32]) -> bool {
        s.signatures.iter().any(|sig| sig.members == members)
    }

    #[test]
    fn star_is_contained_in_recursive() {
        let s = sigs(
            Domain::RequestPath,
            GlobKind::Path,
            &["/repos/x/issues/*", "/repos/x/issues/**"],
        );
        assert!(!has(&s, &[0]), "nothing matches * without **");
        assert!(has(&s, &[0, 1]));
        assert!(has(&s, &[1]));
        assert!(has(&s, &[]));
    }

    #[test]
    fn trailing_slash_counts() {
        let s = sigs(
            Domain::RequestPath,
            GlobKind::Path,
            &["/repos/**", "/repos"],
        );
        assert!(has(&s, &[0]));
        assert!(has(&s, &[1]));
        assert!(!has(&s, &[0, 1]));
        let w = &s
            .signatures
            .iter()
            .find(|sig| sig.members == [0])
            .unwrap()
            .witness;
        assert_eq!(w, "/repos/");
    }

    #[test]
    fn hosts_need_canonical_labels() {
        let s = sigs(
            Domain::Host,
            GlobKind::Host,
            &["*.example.com", "example.com"],
        );
        assert!(!has(&s, &[0, 1]));
        let w = &s
            .signatures
            .iter()
            .find(|sig| sig.members == [0])
            .unwrap()
            .witness;
        assert_eq!(w, "x.example.com");
    }

    #[test]
    fn dot_segments_are_not_canonical() {
        // `/a/*` would match `/a/..`, which is not a canonical path.
        let s = sigs(Domain::RequestPath, GlobKind::Path, &["/a/*", "/a/.*"]);
        let w = &s
            .signatures
            .iter()
            .find(|sig| sig.members == [0, 1])
            .unwrap()
            .witness;
        assert_eq!(w, "/a/.x");
    }

    #[test]
    fn name_and_text_fillers_cover_their_alphabets() {
        let printable = &TEXT_FILLERS[..PRINTABLE_FILLERS];
        assert!(printable.iter().all(|&b| (0x20..=0x7e).contains(&b)));
        let mut all = TEXT_FILLERS.to_vec();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), TEXT_FILLERS.len(), "no filler twice");
        assert_eq!(all, (0u8..128).collect::<Vec<_>>(), "every ASCII byte");
    }

    /// Name globs as tokens: `*` is any run, everything else literal.
    fn name_sigs(domain: Domain, patterns: &[&str]) -> Signatures {
        let globs: Vec<agentgate_policy::names::NameGlob> = patterns
            .iter()
            .map(|p| agentgate_policy::names::NameGlob::parse("t", p, 4096).unwrap())
            .collect();
        let tokens: Vec<Vec<Token>> = globs.iter().map(|g| g.tokens()).collect();
        let refs: Vec<&[Token]> = tokens.iter().map(Vec::as_slice).collect();
        let deadline = Instant::now() + Duration::from_secs(10);
        let s = signatures(domain, "test", &refs, 100_000, deadline).unwrap();
        for sig in &s.signatures {
            for (i, glob) in globs.iter().enumerate() {
                let member = sig.members.contains(&(i as u32));
                assert_eq!(glob.matches(&sig.witness), member, "{}", sig.witness);
            }
        }
        s
    }

    #[test]
    fn names_are_non_empty_and_text_may_be_empty() {
        let names = name_sigs(Domain::Name, &["get_*", "*"]);
        let witnesses: Vec<&str> = names
            .signatures
            .iter()
            .map(|s| s.witness.as_str())
            .collect();
        assert_eq!(witnesses, ["x", "get_"], "no empty name; a readable filler");
        let text = name_sigs(Domain::Text, &["*", "a*", "ab"]);
        assert_eq!(
            text.signatures[0].witness, "",
            "the empty string is a value"
        );
        assert_eq!(text.signatures.len(), 3, "{:?}", text.signatures);
    }

    #[test]
    fn state_limit_fails_closed() {
        let globs: Vec<Glob> = (0..12)
            .map(|i| Glob::parse(GlobKind::Path, &format!("/*{}*", (b'a' + i) as char)).unwrap())
            .collect();
        let tokens: Vec<&[Token]> = globs.iter().map(|g| g.tokens()).collect();
        let deadline = Instant::now() + Duration::from_secs(10);
        let r = signatures(Domain::RequestPath, "path", &tokens, 500, deadline);
        assert!(matches!(r, Err(AutomatonError::TooManyStates { .. })));
    }
}
