//! Kubernetes manifests as a GitOps repository holds them: files and
//! directories (recursively), multi-document YAML streams, `kind: List`
//! wrappers, or a rendered stream on stdin (`kustomize build | ...`). Each
//! object keeps its file and, for every field, the line and byte range it
//! came from, so a finding can point at the manifest (SARIF, `file:line`)
//! and `export --into` can replace one field without touching the rest.
//!
//! The values come from serde-saphyr, the positions from the event parser
//! under it (granit-parser): serde-saphyr resolves YAML (tags, anchors,
//! merge keys) exactly as the policy loader does, and the events carry the
//! source spans it does not expose.

use std::collections::HashMap;
use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use granit_parser::{Event, Parser, Span, StructureStyle};
use serde_json::Value;

/// The largest file or stream read (the policy loader's limit is per
/// document; a repository may be far larger than one policy).
pub const MAX_INPUT_BYTES: usize = 64 * 1024 * 1024;

/// Input that is not a readable manifest: names the file, line and field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct BadInput {
    /// The file (`-` for stdin).
    pub file: String,
    /// 1-based line, 0 when the whole file is meant.
    pub line: usize,
    /// The field, when one is to blame.
    pub field: Option<String>,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for BadInput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file)?;
        if self.line > 0 {
            write!(f, ":{}", self.line)?;
        }
        if let Some(field) = &self.field {
            write!(f, ": {field}")?;
        }
        write!(f, ": {}", self.message)
    }
}

/// Where a node is in its file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodePosition {
    /// 1-based line of the node's first character.
    pub line: usize,
    /// 0-based column of the node's first character.
    pub column: usize,
    /// Byte range of the node's text (a block collection ends at its last
    /// content character, not at the next key).
    pub bytes: Range<usize>,
    /// Whether the node is a block (indented) collection.
    pub block: bool,
    /// 0-based column of the key this node is the value of, if any.
    pub key_column: Option<usize>,
    /// Byte offset just past that key's text (before its `:`).
    pub key_end: Option<usize>,
}

/// Positions of every node of one document, by field path
/// (`spec.policy.network[0].endpoints[1]`; the root is `""`).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Positions {
    by_path: HashMap<String, NodePosition>,
}

impl Positions {
    /// The node at `path`, or the nearest ancestor that has a position
    /// (a field a default filled in has none of its own).
    pub fn locate(&self, path: &str) -> Option<&NodePosition> {
        let mut path = path;
        loop {
            if let Some(found) = self.by_path.get(path) {
                return Some(found);
            }
            let cut = path.rfind(['.', '['])?;
            path = &path[..cut];
        }
    }

    /// Exactly the node at `path`.
    pub fn get(&self, path: &str) -> Option<&NodePosition> {
        self.by_path.get(path)
    }
}

/// One Kubernetes object read from the input.
#[derive(Debug, Clone)]
pub struct Manifest {
    /// The file it came from (`-` for stdin).
    pub file: Arc<str>,
    /// The object.
    pub value: Value,
    /// Positions in the file (shared by the items of one `List`).
    pub positions: Arc<Positions>,
    /// The object's own path within its document: `""`, or `items[3]` for
    /// an item of a `List`.
    pub base: String,
}

impl Manifest {
    /// The path of `field` (relative to the object) within the document.
    fn full_path(&self, field: &str) -> String {
        match (self.base.is_empty(), field.is_empty()) {
            (true, _) => field.to_string(),
            (false, true) => self.base.clone(),
            (false, false) if field.starts_with('[') => format!("{}{field}", self.base),
            (false, false) => format!("{}.{field}", self.base),
        }
    }

    /// The 1-based line of `field` (or its nearest ancestor present in the
    /// file); the object's first line for `""`.
    pub fn line_of(&self, field: &str) -> usize {
        self.positions
            .locate(&self.full_path(field))
            .map(|p| p.line)
            .unwrap_or(1)
    }

    /// The position of exactly `field`, if it is written in the file.
    pub fn position_of(&self, field: &str) -> Option<&NodePosition> {
        self.positions.get(&self.full_path(field))
    }

    /// `kind`, or `""`.
    pub fn kind(&self) -> &str {
        self.value.get("kind").and_then(Value::as_str).unwrap_or("")
    }

    /// `apiVersion`, or `""`.
    pub fn api_version(&self) -> &str {
        self.value
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or("")
    }

    /// `metadata.name`, or `""`.
    pub fn name(&self) -> &str {
        self.value
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("")
    }

    /// A bad-input error at `field` of this object.
    pub fn bad(&self, field: &str, message: impl Into<String>) -> BadInput {
        BadInput {
            file: self.file.to_string(),
            line: self.line_of(field),
            field: (!field.is_empty()).then(|| field.to_string()),
            message: message.into(),
        }
    }
}

/// Reads every manifest under `paths`: files as given, directories
/// recursively (`*.yaml`, `*.yml`, `*.json`, sorted by path, hidden entries
/// skipped), `-` as stdin.
pub fn read_paths(paths: &[PathBuf]) -> Result<Vec<Manifest>, BadInput> {
    let mut files = Vec::new();
    for path in paths {
        if path.as_os_str() == "-" {
            files.push(path.clone());
        } else if path.is_dir() {
            walk(path, &mut files, &mut Vec::new())?;
        } else {
            files.push(path.clone());
        }
    }
    let mut manifests = Vec::new();
    for file in files {
        if file.as_os_str() == "-" {
            manifests.extend(parse_stream("-", &read_stdin()?)?);
        } else {
            manifests.extend(read_file_manifests(&file)?);
        }
    }
    Ok(manifests)
}

/// Reads the manifests of one file (size-limited, UTF-8).
pub fn read_file_manifests(path: &Path) -> Result<Vec<Manifest>, BadInput> {
    let name = path.display().to_string();
    parse_stream(&name, &read_file(path, &name)?)
}

fn whole_file(file: &str, message: impl Into<String>) -> BadInput {
    BadInput {
        file: file.to_string(),
        line: 0,
        field: None,
        message: message.into(),
    }
}

fn read_file(path: &Path, name: &str) -> Result<String, BadInput> {
    let meta = std::fs::metadata(path).map_err(|e| whole_file(name, e.to_string()))?;
    if meta.len() > MAX_INPUT_BYTES as u64 {
        return Err(whole_file(
            name,
            format!("larger than {MAX_INPUT_BYTES} bytes"),
        ));
    }
    let bytes = std::fs::read(path).map_err(|e| whole_file(name, e.to_string()))?;
    String::from_utf8(bytes).map_err(|e| whole_file(name, format!("not UTF-8: {e}")))
}

fn read_stdin() -> Result<String, BadInput> {
    use std::io::Read;
    let mut bytes = Vec::new();
    std::io::stdin()
        .take(MAX_INPUT_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| whole_file("-", e.to_string()))?;
    if bytes.len() > MAX_INPUT_BYTES {
        return Err(whole_file(
            "-",
            format!("larger than {MAX_INPUT_BYTES} bytes"),
        ));
    }
    String::from_utf8(bytes).map_err(|e| whole_file("-", format!("not UTF-8: {e}")))
}

/// Collects the manifest files under `dir`. `visiting` holds the canonical
/// paths of the directories being walked, so a symlink back up the tree is
/// skipped instead of recursed into forever.
fn walk(dir: &Path, out: &mut Vec<PathBuf>, visiting: &mut Vec<PathBuf>) -> Result<(), BadInput> {
    let name = dir.display().to_string();
    let canonical = std::fs::canonicalize(dir).map_err(|e| whole_file(&name, e.to_string()))?;
    if visiting.contains(&canonical) {
        return Ok(());
    }
    visiting.push(canonical);
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| whole_file(&name, e.to_string()))?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()
        .map_err(|e| whole_file(&name, e.to_string()))?;
    entries.sort();
    for path in entries {
        let hidden = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with('.'));
        if hidden {
            continue;
        }
        if path.is_dir() {
            walk(&path, out, visiting)?;
        } else if path
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| matches!(e, "yaml" | "yml" | "json"))
        {
            out.push(path);
        }
    }
    visiting.pop();
    Ok(())
}

/// One document's text range and positions.
struct Document {
    bytes: Range<usize>,
    first_line: usize,
    positions: Positions,
}

/// What an open collection is waiting for.
enum Frame {
    Mapping {
        path: String,
        /// The key just read, with its column and end byte, awaiting its value.
        key: Option<(String, usize, usize)>,
        /// Whether the next scalar is a key.
        expect_key: bool,
    },
    Sequence {
        path: String,
        next: usize,
    },
}

fn join(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_string()
    } else {
        format!("{parent}.{key}")
    }
}

/// Indexes the documents of a stream by their events.
fn index(name: &str, text: &str) -> Result<Vec<Document>, BadInput> {
    let mut documents = Vec::new();
    // The open collections, innermost last: their byte ranges still grow.
    let mut stack: Vec<Frame> = Vec::new();
    let mut current: Option<Document> = None;
    let byte = |s: &Span, start: bool| {
        let m = if start { s.start } else { s.end };
        m.byte_offset().unwrap_or(0)
    };
    for event in Parser::new_from_str(text) {
        let (event, span) = event.map_err(|e| BadInput {
            file: name.to_string(),
            line: e.marker().line(),
            field: None,
            message: format!("invalid YAML: {}", first_line(&e.to_string())),
        })?;
        match event {
            Event::DocumentStart(..) => {
                // The document's text starts at the beginning of its first line.
                let start = text[..byte(&span, true)].rfind('\n').map_or(0, |i| i + 1);
                current = Some(Document {
                    bytes: start..text.len(),
                    first_line: span.start.line(),
                    positions: Positions::default(),
                });
                stack.clear();
            }
            Event::DocumentEnd => {
                if let Some(mut doc) = current.take() {
                    doc.bytes.end = byte(&span, false).max(doc.bytes.start);
                    documents.push(doc);
                }
            }
            Event::Scalar(..)
            | Event::MappingStart(..)
            | Event::SequenceStart(..)
            | Event::Alias(..) => {
                let Some(doc) = current.as_mut() else {
                    continue;
                };
                // Where this node sits: a key, a value, or an item.
                let (path, key_column, key_end) = match stack.last_mut() {
                    None => (Some(String::new()), None, None),
                    Some(Frame::Sequence { path, next }) => {
                        let p = format!("{path}[{next}]");
                        *next += 1;
                        (Some(p), None, None)
                    }
                    Some(Frame::Mapping {
                        path,
                        key,
                        expect_key,
                    }) => {
                        if *expect_key {
                            *expect_key = false;
                            *key = match &event {
                                Event::Scalar(k, ..) => {
                                    Some((k.to_string(), span.start.col(), byte(&span, false)))
                                }
                                // A complex key: its value gets no path.
                                _ => None,
                            };
                            if matches!(event, Event::Scalar(..) | Event::Alias(..)) {
                                extend(&mut doc.positions, &stack, byte(&span, false));
                                continue;
                            }
                            (None, None, None)
                        } else {
                            *expect_key = true;
                            match key.take() {
                                Some((k, col, end)) => (Some(join(path, &k)), Some(col), Some(end)),
                                None => (None, None, None),
                            }
                        }
                    }
                };
                let block = matches!(
                    event,
                    Event::MappingStart(StructureStyle::Block, ..)
                        | Event::SequenceStart(StructureStyle::Block, ..)
                );
                let start = byte(&span, true);
                let end = byte(&span, false);
                extend(&mut doc.positions, &stack, end);
                let path_for_children = path.clone().unwrap_or_else(|| "?".into());
                if let Some(p) = &path {
                    doc.positions.by_path.insert(
                        p.clone(),
                        NodePosition {
                            line: span.start.line(),
                            column: span.start.col(),
                            bytes: start..end,
                            block,
                            key_column,
                            key_end,
                        },
                    );
                }
                match event {
                    Event::MappingStart(..) => {
                        stack.push(Frame::Mapping {
                            path: path_for_children,
                            key: None,
                            expect_key: true,
                        });
                    }
                    Event::SequenceStart(..) => {
                        stack.push(Frame::Sequence {
                            path: path_for_children,
                            next: 0,
                        });
                    }
                    _ => {}
                }
            }
            Event::MappingEnd | Event::SequenceEnd => {
                let flow = span.end.byte_offset() != span.start.byte_offset();
                if flow && let Some(doc) = current.as_mut() {
                    extend(&mut doc.positions, &stack, byte(&span, false));
                }
                stack.pop();
            }
            _ => {}
        }
    }
    Ok(documents)
}

/// Grows the byte range of every open collection to `end`.
fn extend(positions: &mut Positions, open: &[Frame], end: usize) {
    for frame in open {
        let (Frame::Mapping { path, .. } | Frame::Sequence { path, .. }) = frame;
        if let Some(p) = positions.by_path.get_mut(path)
            && p.bytes.end < end
        {
            p.bytes.end = end;
        }
    }
}

/// Parses a multi-document stream; empty documents are skipped and `List`
/// objects are replaced by their items.
pub fn parse_stream(name: &str, text: &str) -> Result<Vec<Manifest>, BadInput> {
    let file: Arc<str> = Arc::from(name);
    let mut manifests = Vec::new();
    for doc in index(name, text)? {
        let slice = &text[doc.bytes.clone()];
        let value: Value = serde_saphyr::from_str(slice).map_err(|e| {
            let line = e
                .location()
                .map(|l| doc.first_line + (l.line() as usize).saturating_sub(1))
                .unwrap_or(doc.first_line);
            BadInput {
                file: name.to_string(),
                line,
                field: None,
                message: format!("invalid YAML: {}", first_line(&e.to_string())),
            }
        })?;
        let positions = Arc::new(doc.positions);
        match &value {
            Value::Null => {}
            Value::Object(_) => {
                let list = value.get("kind").and_then(Value::as_str).is_some_and(|k| {
                    k == "List" || (k.ends_with("List") && value.get("items").is_some())
                });
                if list {
                    let items = value.get("items").and_then(Value::as_array);
                    let Some(items) = items else {
                        return Err(BadInput {
                            file: name.to_string(),
                            line: positions.locate("items").map_or(doc.first_line, |p| p.line),
                            field: Some("items".into()),
                            message: "a List needs an items array".into(),
                        });
                    };
                    for (i, item) in items.iter().enumerate() {
                        manifests.push(Manifest {
                            file: file.clone(),
                            value: item.clone(),
                            positions: positions.clone(),
                            base: format!("items[{i}]"),
                        });
                    }
                } else {
                    manifests.push(Manifest {
                        file: file.clone(),
                        value,
                        positions,
                        base: String::new(),
                    });
                }
            }
            other => {
                return Err(BadInput {
                    file: name.to_string(),
                    line: doc.first_line,
                    field: None,
                    message: format!(
                        "expected a Kubernetes object (a mapping), found {}",
                        json_kind(other)
                    ),
                });
            }
        }
    }
    Ok(manifests)
}

/// The first line of a parser message, without the parser's own
/// `error: line N column M:` prefix (its lines count from the document, not
/// the file; ours replace them).
fn first_line(message: &str) -> &str {
    let line = message.lines().next().unwrap_or(message);
    let Some(rest) = line.strip_prefix("error: line ") else {
        return line;
    };
    rest.split_once(": ").map_or(line, |(_, text)| text)
}

fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a sequence",
        Value::Object(_) => "a mapping",
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    const STREAM: &str = "\
# leading comment
apiVersion: v1
kind: Namespace
metadata:
  name: agents   # trailing
  labels: {team: a, \"x\": y}
---
kind: AgentSandbox
metadata: {name: bot}
spec:
  policy:
    network:
      - name: gh
        ports: [443]
    # comment inside
  mode: ask

# between
---
---
apiVersion: v1
kind: List
items:
- kind: Namespace
  metadata:
    name: one
- kind: Namespace
  metadata:
    name: two
";

    #[test]
    fn documents_lists_and_lines() {
        let manifests = parse_stream("repo.yaml", STREAM).unwrap();
        let names: Vec<&str> = manifests.iter().map(Manifest::name).collect();
        assert_eq!(names, ["agents", "bot", "one", "two"]);
        assert_eq!(manifests[0].line_of(""), 2);
        assert_eq!(manifests[0].line_of("metadata.labels.team"), 6);
        assert_eq!(manifests[1].line_of(""), 8);
        assert_eq!(manifests[1].line_of("spec.policy.network[0].ports"), 14);
        // A field that is not written points at its nearest ancestor.
        assert_eq!(
            manifests[1].line_of("spec.policy.network[0].endpoints[0]"),
            13
        );
        assert_eq!(manifests[2].line_of(""), 24);
        assert_eq!(manifests[3].line_of("metadata.name"), 29);
        assert_eq!(manifests[3].kind(), "Namespace");
    }

    #[test]
    fn a_block_collection_ends_at_its_last_character() {
        let manifests = parse_stream("repo.yaml", STREAM).unwrap();
        let policy = manifests[1].position_of("spec.policy").unwrap();
        assert!(policy.block);
        assert_eq!(policy.key_column, Some(2));
        assert_eq!(
            &STREAM[policy.bytes.clone()],
            "network:\n      - name: gh\n        ports: [443]"
        );
        let labels = manifests[0].position_of("metadata.labels").unwrap();
        assert!(!labels.block);
        assert_eq!(&STREAM[labels.bytes.clone()], "{team: a, \"x\": y}");
    }

    #[test]
    fn bad_yaml_names_its_file_and_line() {
        let err = parse_stream("bad.yaml", "kind: A\n---\nkind: [unclosed\nx: 1\n").unwrap_err();
        assert_eq!(err.file, "bad.yaml");
        assert!(err.line >= 3, "{err}");
        assert!(err.message.starts_with("invalid YAML"), "{err}");
        let err = parse_stream("s.yaml", "- 1\n- 2\n").unwrap_err();
        assert_eq!(err.line, 1);
        assert!(err.message.contains("found a sequence"), "{err}");
    }

    #[test]
    fn directories_are_read_recursively_in_order() {
        let dir = std::env::temp_dir().join(format!("agentgate-manifests-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("b/.git")).unwrap();
        std::fs::write(dir.join("b/two.yml"), "kind: X\nmetadata: {name: two}\n").unwrap();
        std::fs::write(dir.join("a.yaml"), "kind: X\nmetadata: {name: one}\n").unwrap();
        std::fs::write(
            dir.join("b/.git/config.yaml"),
            "kind: X\nmetadata: {name: hidden}\n",
        )
        .unwrap();
        std::fs::write(dir.join("README.md"), "# not yaml: [\n").unwrap();
        // A symlink back to the root is not followed forever.
        std::os::unix::fs::symlink(&dir, dir.join("b/loop")).unwrap();
        let manifests = read_paths(std::slice::from_ref(&dir)).unwrap();
        let names: Vec<&str> = manifests.iter().map(Manifest::name).collect();
        assert_eq!(names, ["one", "two"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
