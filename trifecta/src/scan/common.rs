//! What the Python and TypeScript front ends have in common once their
//! grammars have been read: the names a file and a body bind, and how a
//! dotted callee resolves through them. Kept apart from the front ends so a
//! fix to resolution reaches both languages at once.

use std::collections::HashMap;

use tree_sitter::Node;

use super::classify::{Arg, Event, Lang};
use super::{Hints, RawTool};

/// Bindings that hold values rather than modules: made in one tool body, or
/// (merged into [`Names::module`]) at module level.
#[derive(Default)]
pub(super) struct Scope {
    /// Variable → normalized value (`client` → `httpx.AsyncClient()`).
    pub(super) aliases: HashMap<String, String>,
    /// Variable → literal value (`API = "https://…"`).
    pub(super) consts: HashMap<String, Arg>,
}

/// The module-level names of one file.
#[derive(Default)]
pub(super) struct Names {
    /// Local name → dotted module path (`r` → `requests`, `WebClient` →
    /// `@slack/web-api.WebClient`).
    pub(super) imports: HashMap<String, String>,
    /// Module-level aliases and constants.
    pub(super) module: Scope,
}

/// What one named child of a string literal is, in the grammar at hand.
pub(super) enum Part<'t> {
    /// Literal text.
    Text,
    /// An interpolation, with the expression inside when there is one.
    Interpolation(Option<Node<'t>>),
    /// Anything else (delimiters, format specifiers): contributes nothing.
    Other,
}

/// How many aliases resolution follows before it gives up: enough for
/// real chains, and it stops on cycles (`a = b`, `b = a`).
const MAX_ALIAS_DEPTH: u8 = 6;

impl Names {
    /// Adds module-level bindings. They are collected in a scope of their
    /// own first because collecting reads the module constants seen so far.
    pub(super) fn define(&mut self, scope: Scope) {
        self.module.aliases.extend(scope.aliases);
        self.module.consts.extend(scope.consts);
    }

    /// The literal value of a variable: the body's binding shadows the
    /// module's; anything unknown is [`Arg::Other`].
    pub(super) fn constant(&self, name: &str, scope: &Scope) -> Arg {
        scope
            .consts
            .get(name)
            .or_else(|| self.module.consts.get(name))
            .cloned()
            .unwrap_or(Arg::Other)
    }

    /// Resolves the leading name of a dotted expression (calls written as
    /// `()`) through body and module aliases, then imports.
    pub(super) fn resolve(&self, dotted: &str, scope: &Scope) -> String {
        self.resolve_at(dotted, scope, 0)
    }

    /// An interpolated string literal (f-string, template literal) whose
    /// named children `part` tells apart: complete when every part is
    /// literal, else its prefix up to the first interpolation. A module
    /// constant interpolated first (`f"{BASE}/x"`) is substituted, since
    /// URLs are commonly built that way.
    pub(super) fn interpolated<'t>(
        &self,
        node: Node<'t>,
        src: &[u8],
        part: impl Fn(Node<'t>) -> Part<'t>,
    ) -> Arg {
        let mut s = String::new();
        let mut cursor = node.walk();
        for child in node.named_children(&mut cursor) {
            match part(child) {
                Part::Text => s.push_str(text(child, src)),
                Part::Interpolation(expr) => {
                    let constant = expr
                        .filter(|e| e.kind() == "identifier")
                        .and_then(|e| self.module.consts.get(text(e, src)));
                    match constant {
                        Some(Arg::Str(c)) if s.is_empty() => s.push_str(c),
                        _ => return Arg::Prefix(s),
                    }
                }
                Part::Other => {}
            }
        }
        Arg::Str(s)
    }

    fn resolve_at(&self, dotted: &str, scope: &Scope, depth: u8) -> String {
        if depth > MAX_ALIAS_DEPTH {
            return dotted.to_string();
        }
        // Longest dotted prefix first: `self.client.get` tries
        // `self.client.get`, `self.client`, `self`. A prefix ending in a
        // call is a value computed at run time, never a variable.
        let mut cut = dotted.len();
        loop {
            let prefix = &dotted[..cut];
            if !prefix.ends_with("()") {
                let found = scope
                    .aliases
                    .get(prefix)
                    .or_else(|| self.module.aliases.get(prefix));
                if let Some(value) = found
                    && value.as_str() != prefix
                {
                    let rest = &dotted[cut..];
                    return self.resolve_at(&format!("{value}{rest}"), scope, depth + 1);
                }
            }
            match prefix.rfind(['.', '(']) {
                Some(i) => cut = i,
                None => break,
            }
        }
        let head_end = dotted.find(['.', '(']).unwrap_or(dotted.len());
        match self.imports.get(&dotted[..head_end]) {
            Some(module) => format!("{module}{}", &dotted[head_end..]),
            None => dotted.to_string(),
        }
    }
}

/// The source text of a node; empty when it is not valid UTF-8 (the file
/// was read as UTF-8, so only a grammar bug could cause that).
pub(super) fn text<'a>(node: Node<'_>, src: &'a [u8]) -> &'a str {
    node.utf8_text(src).unwrap_or("")
}

/// The 1-based line a node starts on.
pub(super) fn line(node: Node<'_>) -> u32 {
    u32::try_from(node.start_position().row + 1).unwrap_or(u32::MAX)
}

/// Visits `root` and its named descendants in preorder, in source order, so
/// a body's assignments are seen before their uses; `visit` returns whether
/// to descend into the node it was given. An explicit stack rather than
/// recursion: generated sources can nest deeper than a stack allows.
pub(super) fn preorder<'t>(root: Node<'t>, mut visit: impl FnMut(Node<'t>) -> bool) {
    let mut stack = vec![root];
    while let Some(node) = stack.pop() {
        if visit(node) {
            let start = stack.len();
            let mut cursor = node.walk();
            stack.extend(node.named_children(&mut cursor));
            // Popped last-in first, so the first child must end on top.
            stack[start..].reverse();
        }
    }
}

/// `f` of each named child of a node, in order.
pub(super) fn map_named<'t, T>(node: Node<'t>, f: impl FnMut(Node<'t>) -> T) -> Vec<T> {
    let mut cursor = node.walk();
    node.named_children(&mut cursor).map(f).collect()
}

/// The named children of a node, collected so the caller can recurse while
/// holding them (a tree cursor cannot be shared with the recursion).
pub(super) fn named_children<'t>(node: Node<'t>) -> Vec<Node<'t>> {
    map_named(node, |n| n)
}

impl Hints {
    /// Records one MCP tool annotation written `key: value` (a dict entry,
    /// keyword argument or object property); true when `key` names one. A
    /// value other than a boolean literal clears what is known. Python code
    /// may also spell the keys in snake_case (`read_only_hint`).
    pub(super) fn set(&mut self, key: &str, value: Node<'_>, lang: Lang) -> bool {
        let slot = match (key, lang) {
            ("readOnlyHint", _) | ("read_only_hint", Lang::Python) => &mut self.read_only,
            ("openWorldHint", _) | ("open_world_hint", Lang::Python) => &mut self.open_world,
            _ => return false,
        };
        // Both grammars name the boolean literals `true` and `false`.
        *slot = match value.kind() {
            "true" => Some(true),
            "false" => Some(false),
            _ => None,
        };
        true
    }
}

/// One tool per `(name, line)`, all with the same events: a dispatch branch
/// (`case "a": case "b":`, `if name in ("a", "b")`) serves each name it
/// compares against.
pub(super) fn tools_sharing(
    names: impl IntoIterator<Item = (String, u32)>,
    events: &[Event],
    out: &mut Vec<RawTool>,
) {
    for (name, line) in names {
        out.push(RawTool {
            deferred: None,
            name,
            line,
            events: events.to_vec(),
            // Only MCP servers dispatch on the called tool's name.
            hints: Hints {
                mcp: true,
                ..Hints::default()
            },
        });
    }
}
