//! Source scanner (docs/design.md §7): parses agent code with tree-sitter, finds
//! tool definitions of the common Python and TypeScript agent frameworks,
//! classifies each tool by the calls its body makes (one hop into same-file
//! helpers) and builds the information-flow [`Graph`]. An optional
//! `agentgate.yaml` adds what code cannot show. Pure: reads files, nothing
//! else; the output is deterministic for a given tree.

mod classify;
mod common;
pub mod manifest;
mod python;
mod typescript;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};

use crate::graph::{
    Capability, Channel, Edge, EdgeKind, Effect, Graph, LLM, McpTool, Node, NodeKind,
    SourceLocation,
};
use crate::report::{Note, NoteLevel};
use classify::{Event, Lang};
pub use manifest::{MANIFEST_FILE, Manifest};

/// Directories never scanned: dependencies, VCS data, build output.
const SKIP_DIRS: &[&str] = &[
    "node_modules",
    ".git",
    ".venv",
    "venv",
    "__pycache__",
    "dist",
];

/// Files larger than this are skipped with a warning: they are bundles or
/// generated code, not hand-written tools, and would dominate scan time.
const MAX_FILE_BYTES: u64 = 2 * 1024 * 1024;

/// The result of a scan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scan {
    /// The agent's information-flow graph.
    pub graph: Graph,
    /// Annotation mismatches, unparseable files and the like.
    pub diagnostics: Vec<Note>,
    /// Number of source files parsed.
    pub files: usize,
}

/// Why a scan could not produce a graph at all.
#[derive(Debug, thiserror::Error)]
pub enum ScanError {
    /// The root (or a directory under it) cannot be read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The path.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The manifest is not valid YAML of the expected shape.
    #[error("{file}: {message}")]
    Manifest {
        /// The manifest's path relative to the root.
        file: String,
        /// What is wrong (names an unknown field).
        message: String,
    },
    /// The manifest names a tool the scan does not know.
    #[error("{file}: {field} names unknown tool {tool:?}")]
    UnknownTool {
        /// The manifest's path relative to the root.
        file: String,
        /// The manifest field (`loadBearing`, `declassifiers`, `agents`).
        field: &'static str,
        /// The tool id.
        tool: String,
    },
}

/// MCP tool annotations declared in code, cross-checked against the body.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Hints {
    pub read_only: Option<bool>,
    pub open_world: Option<bool>,
    /// An MCP server serves the tool (FastMCP `@mcp.tool()`, a low-level
    /// `call_tool` dispatch, the TypeScript SDK's `server.tool`): the agent
    /// calls it over MCP, where a policy can deny the call.
    pub mcp: bool,
}

/// A tool as a front end found it, before classification.
#[derive(Debug, Clone)]
pub(crate) struct RawTool {
    pub name: String,
    pub line: u32,
    pub events: Vec<Event>,
    pub hints: Hints,
    /// A handler imported from another file of the scan: the function's
    /// name, whose body gives the events (resolved across files).
    pub deferred: Option<String>,
}

/// A classified tool of one file.
#[derive(Debug, Clone)]
struct FoundTool {
    name: String,
    source: SourceLocation,
    capabilities: Vec<Capability>,
    hints: Hints,
    /// The imported handler whose body is in another file.
    deferred: Option<String>,
    /// Local files its body reads and writes, by literal path.
    files: Vec<(String, bool, SourceLocation)>,
}

/// Scans a directory (or one file) and its optional `agentgate.yaml`.
pub fn scan_path(root: &Path) -> Result<Scan, ScanError> {
    let io = |path: &Path, source| ScanError::Io {
        path: path.to_path_buf(),
        source,
    };
    let meta = std::fs::metadata(root).map_err(|e| io(root, e))?;
    let mut diagnostics = Vec::new();
    let mut paths = Vec::new();
    let mut manifest_text = None;
    if meta.is_file() {
        let name = root
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        paths.push((name, root.to_path_buf()));
    } else {
        walk(root, "", &mut paths, &mut diagnostics).map_err(|(p, e)| io(&p, e))?;
        let manifest = root.join(MANIFEST_FILE);
        match std::fs::read_to_string(&manifest) {
            Ok(t) => manifest_text = Some(t),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io(&manifest, e)),
        }
    }
    let mut files = Vec::with_capacity(paths.len());
    for (rel, path) in paths {
        let too_big = std::fs::metadata(&path).is_ok_and(|m| m.len() > MAX_FILE_BYTES);
        if too_big {
            diagnostics.push(Note {
                level: NoteLevel::Warning,
                message: format!("{rel}: larger than {MAX_FILE_BYTES} bytes, not scanned"),
                source: None,
            });
            continue;
        }
        match std::fs::read(&path) {
            Ok(bytes) => match String::from_utf8(bytes) {
                Ok(text) => files.push((rel, text)),
                Err(_) => diagnostics.push(Note {
                    level: NoteLevel::Error,
                    message: format!("{rel}: not UTF-8, not scanned"),
                    source: None,
                }),
            },
            Err(e) => diagnostics.push(Note {
                level: NoteLevel::Error,
                message: format!("{rel}: cannot read: {e}"),
                source: None,
            }),
        }
    }
    let mut scan = scan_source(&files, manifest_text.as_deref())?;
    diagnostics.append(&mut scan.diagnostics);
    scan.diagnostics = diagnostics;
    Ok(scan)
}

/// Collects scannable files under `dir`, sorted, with `/`-separated paths
/// relative to the root. Symbolic links are not followed (no cycles, no
/// escaping the tree). The root must be readable; a directory below it that
/// is not becomes an error diagnostic, like an unreadable file.
fn walk(
    dir: &Path,
    prefix: &str,
    out: &mut Vec<(String, PathBuf)>,
    diagnostics: &mut Vec<Note>,
) -> Result<(), (PathBuf, std::io::Error)> {
    let entries = std::fs::read_dir(dir).map_err(|e| (dir.to_path_buf(), e))?;
    let mut items = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| (dir.to_path_buf(), e))?;
        let kind = entry.file_type().map_err(|e| (entry.path(), e))?;
        items.push((
            entry.file_name().to_string_lossy().into_owned(),
            entry.path(),
            kind,
        ));
    }
    items.sort_by(|a, b| a.0.cmp(&b.0));
    for (name, path, kind) in items {
        let rel = if prefix.is_empty() {
            name.clone()
        } else {
            format!("{prefix}/{name}")
        };
        if kind.is_dir() {
            if !SKIP_DIRS.contains(&name.as_str())
                && let Err((_, e)) = walk(&path, &rel, out, diagnostics)
            {
                diagnostics.push(Note {
                    level: NoteLevel::Error,
                    message: format!("{rel}: cannot read directory: {e}"),
                    source: None,
                });
            }
        } else if kind.is_file() && language(&name).is_some() {
            out.push((rel, path));
        }
    }
    Ok(())
}

/// Which grammar parses a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Grammar {
    Python,
    TypeScript,
    Tsx,
}

fn language(name: &str) -> Option<Grammar> {
    let ext = name.rsplit_once('.')?.1;
    match ext {
        "py" => Some(Grammar::Python),
        "ts" | "mts" | "cts" => Some(Grammar::TypeScript),
        "tsx" => Some(Grammar::Tsx),
        _ => None,
    }
}

/// One parser per grammar, created on first use and reused for every file a
/// thread parses.
#[derive(Default)]
struct Parsers {
    python: Option<tree_sitter::Parser>,
    typescript: Option<tree_sitter::Parser>,
    tsx: Option<tree_sitter::Parser>,
}

impl Parsers {
    fn get(&mut self, grammar: Grammar) -> Result<&mut tree_sitter::Parser, String> {
        let (slot, language): (_, tree_sitter::Language) = match grammar {
            Grammar::Python => (&mut self.python, tree_sitter_python::LANGUAGE.into()),
            Grammar::TypeScript => (
                &mut self.typescript,
                tree_sitter_typescript::LANGUAGE_TYPESCRIPT.into(),
            ),
            Grammar::Tsx => (&mut self.tsx, tree_sitter_typescript::LANGUAGE_TSX.into()),
        };
        if slot.is_none() {
            let mut parser = tree_sitter::Parser::new();
            parser.set_language(&language).map_err(|e| e.to_string())?;
            *slot = Some(parser);
        }
        slot.as_mut()
            .ok_or_else(|| "parser not initialised".to_string())
    }
}

/// A file that a tool with untrusted input writes (it downloads into it)
/// is untrusted input for every tool that reads it back by the same path.
fn downloaded_files(tools: &mut BTreeMap<String, FoundTool>) {
    let downloaded: BTreeMap<String, String> = tools
        .values()
        .filter(|t| {
            t.capabilities
                .iter()
                .any(|c| c.effect == Effect::UntrustedInput)
        })
        .flat_map(|t| {
            t.files
                .iter()
                .filter(|(_, writes, _)| *writes)
                .map(|(path, _, _)| (path.clone(), t.name.clone()))
        })
        .collect();
    if downloaded.is_empty() {
        return;
    }
    for tool in tools.values_mut() {
        let reads: Vec<(String, SourceLocation)> = tool
            .files
            .iter()
            .filter(|(path, writes, _)| !writes && downloaded.contains_key(path))
            .map(|(path, _, at)| (path.clone(), at.clone()))
            .collect();
        for (path, at) in reads {
            push_unique(
                &mut tool.capabilities,
                Capability {
                    effect: Effect::UntrustedInput,
                    channel: Channel::File,
                    call: Some(format!(
                        "read of {path} (written by tool {})",
                        downloaded[&path]
                    )),
                    destination: None,
                    resource: Some(path),
                    source: Some(at),
                },
            );
        }
    }
}

/// Tools whose handler another file defines (`{ send_mail: sendMail }`
/// with `sendMail` imported): the handler's body, found in the scanned file
/// that defines a module-level function of that name, gives the
/// capabilities. Not found: a warning, and the tool keeps none.
fn resolve_deferred(
    tools: &mut BTreeMap<String, FoundTool>,
    files: &[&(String, String)],
    diagnostics: &mut Vec<Note>,
) {
    let mut parsers = Parsers::default();
    for tool in tools.values_mut() {
        let Some(function) = tool.deferred.take() else {
            continue;
        };
        let mut found = false;
        for (path, text) in files.iter().map(|f| (&f.0, &f.1)) {
            if !text.contains(function.as_str()) {
                continue;
            }
            let Some(grammar) = language(path) else {
                continue;
            };
            let Ok(parser) = parsers.get(grammar) else {
                continue;
            };
            let Some(tree) = parser.parse(text.as_str(), None) else {
                continue;
            };
            let (events, lang) = match grammar {
                Grammar::Python => (
                    python::function_events(&tree, text, &function),
                    Lang::Python,
                ),
                Grammar::TypeScript | Grammar::Tsx => (
                    typescript::function_events(&tree, text, &function),
                    Lang::TypeScript,
                ),
            };
            let Some(events) = events else {
                continue;
            };
            for event in &events {
                for cap in classify::classify(event, lang, path) {
                    push_unique(&mut tool.capabilities, cap);
                }
            }
            collapse_sessions(&mut tool.capabilities);
            found = true;
            break;
        }
        if !found {
            diagnostics.push(Note {
                level: NoteLevel::Warning,
                message: format!(
                    "tool {:?}: its handler {function:?} is imported from a file outside the scan; it has no capabilities here (declare them in {MANIFEST_FILE})",
                    tool.name
                ),
                source: Some(tool.source.clone()),
            });
        }
    }
}

/// The agent framework a file imports, if any: the reason a file without
/// recognised tools deserves a note.
fn agent_framework(path: &str, text: &str) -> Option<&'static str> {
    const PYTHON: &[(&str, &str)] = &[
        ("langchain", "LangChain"),
        ("langgraph", "LangGraph"),
        ("llama_index", "LlamaIndex"),
        ("pydantic_ai", "Pydantic AI"),
        ("smolagents", "smolagents"),
        ("autogen", "AutoGen"),
        ("crewai", "CrewAI"),
        ("agents", "the OpenAI Agents SDK"),
        ("mcp", "MCP"),
        ("fastmcp", "FastMCP"),
        ("openai", "OpenAI"),
    ];
    const TYPESCRIPT: &[(&str, &str)] = &[
        ("ai", "the Vercel AI SDK"),
        ("@ai-sdk/", "the Vercel AI SDK"),
        ("@mastra/", "Mastra"),
        ("@modelcontextprotocol/sdk", "MCP"),
        ("@langchain/", "LangChain.js"),
        ("langchain", "LangChain.js"),
        ("@openai/agents", "the OpenAI Agents SDK"),
        ("openai", "OpenAI"),
    ];
    let python = path.ends_with(".py");
    for line in text.lines().map(str::trim_start) {
        if python {
            let module = line
                .strip_prefix("from ")
                .or_else(|| line.strip_prefix("import "))
                .and_then(|rest| rest.split([' ', '.', ',']).next());
            if let Some(module) = module
                && let Some((_, name)) = PYTHON
                    .iter()
                    .find(|(m, _)| *m == module || module.starts_with(&format!("{m}_")))
            {
                return Some(name);
            }
        } else if line.starts_with("import ") || line.contains("require(") {
            let quoted = line.split(['"', '\'']).nth(1).unwrap_or("");
            if let Some((_, name)) = TYPESCRIPT.iter().find(|(m, _)| {
                quoted == *m
                    || (m.ends_with('/') && quoted.starts_with(m))
                    || quoted.starts_with(&format!("{m}/"))
            }) {
                return Some(name);
            }
        }
    }
    None
}

/// Parses and classifies one file.
fn scan_file(parsers: &mut Parsers, path: &str, text: &str) -> (Vec<FoundTool>, Vec<Note>) {
    let mut diagnostics = Vec::new();
    let Some(grammar) = language(path) else {
        return (Vec::new(), diagnostics);
    };
    let parser = match parsers.get(grammar) {
        Ok(p) => p,
        Err(e) => {
            diagnostics.push(Note {
                level: NoteLevel::Error,
                message: format!("{path}: no parser: {e}"),
                source: None,
            });
            return (Vec::new(), diagnostics);
        }
    };
    let Some(tree) = parser.parse(text, None) else {
        diagnostics.push(Note {
            level: NoteLevel::Error,
            message: format!("{path}: could not be parsed"),
            source: None,
        });
        return (Vec::new(), diagnostics);
    };
    let root = tree.root_node();
    if root.has_error() {
        diagnostics.push(Note {
            level: NoteLevel::Warning,
            message: format!(
                "{path}: syntax errors; tools in the damaged part may be missed or misread"
            ),
            source: first_error(root).map(|line| SourceLocation {
                file: path.to_string(),
                line,
            }),
        });
    }
    let (raw, lang) = match grammar {
        Grammar::Python => (python::tools(&tree, text), Lang::Python),
        Grammar::TypeScript | Grammar::Tsx => (typescript::tools(&tree, text), Lang::TypeScript),
    };
    let tools = raw
        .into_iter()
        .map(|t| {
            let mut capabilities: Vec<Capability> = Vec::new();
            for event in &t.events {
                for cap in classify::classify(event, lang, path) {
                    if let Some(note) = conservative_note(&t.name, event, &cap, path) {
                        diagnostics.push(note);
                    }
                    push_unique(&mut capabilities, cap);
                }
            }
            collapse_sessions(&mut capabilities);
            let files = t
                .events
                .iter()
                .filter_map(|e| {
                    let (file, writes) = classify::file_access(e, lang)?;
                    let Event::Call(call) = e else {
                        return None;
                    };
                    Some((
                        file,
                        writes,
                        SourceLocation {
                            file: path.to_string(),
                            line: call.line,
                        },
                    ))
                })
                .collect();
            FoundTool {
                files,
                name: t.name,
                source: SourceLocation {
                    file: path.to_string(),
                    line: t.line,
                },
                capabilities,
                hints: t.hints,
                deferred: t.deferred,
            }
        })
        .collect();
    (tools, diagnostics)
}

/// A note when a capability is the conservative reading of something the
/// scanner cannot resolve: a file path or a URL that only exists at run
/// time. The finding it leads to then says why it exists.
fn conservative_note(tool: &str, event: &Event, cap: &Capability, path: &str) -> Option<Note> {
    let Event::Call(call) = event else {
        return None;
    };
    let source = Some(SourceLocation {
        file: path.to_string(),
        line: call.line,
    });
    let message = match (cap.effect, cap.channel, call.args.first()) {
        (Effect::ReadsSecret, Channel::File, Some(classify::Arg::Param(arg))) => format!(
            "tool {tool:?}: {} reads a file whose path is the argument {arg:?}; counted as a secret read, since the model chooses the path",
            call.callee
        ),
        (Effect::UntrustedInput, Channel::Http, Some(classify::Arg::Other) | None)
            if cap
                .destination
                .as_ref()
                .and_then(|d| d.host.as_ref())
                .is_none() =>
        {
            format!(
                "tool {tool:?}: {} fetches a URL built at run time; counted as untrusted input",
                call.callee
            )
        }
        _ => return None,
    };
    Some(Note {
        level: NoteLevel::Warning,
        message,
        source,
    })
}

/// The line of the first syntax error, for the diagnostic.
fn first_error(node: tree_sitter::Node<'_>) -> Option<u32> {
    if node.is_error() || node.is_missing() {
        return u32::try_from(node.start_position().row + 1).ok();
    }
    let mut cursor = node.walk();
    let children: Vec<_> = node.children(&mut cursor).collect();
    children
        .into_iter()
        .filter(|c| c.has_error())
        .find_map(first_error)
}

/// Adds a capability unless one equal in everything but its source is
/// already there (the first occurrence's source is kept).
fn push_unique(caps: &mut Vec<Capability>, cap: Capability) {
    let same = |c: &Capability| {
        c.effect == cap.effect
            && c.channel == cap.channel
            && c.call == cap.call
            && c.destination == cap.destination
            && c.resource == cap.resource
    };
    if !caps.iter().any(same) {
        caps.push(cap);
    }
}

/// Database, mail and socket operations run over one connection: its
/// destination stands for every call on it. So per node such a channel keeps
/// one capability per destination, and none without a destination when one
/// with a destination exists (`connect(host=…)` then `cursor.execute(…)` is
/// one read of that host, not a second read of an unknown one).
fn collapse_sessions(caps: &mut Vec<Capability>) {
    let session = |c: &Capability| {
        matches!(
            c.channel,
            Channel::Database | Channel::Mail | Channel::Socket
        )
    };
    let mut kept: Vec<Capability> = Vec::with_capacity(caps.len());
    for cap in caps.drain(..) {
        if !session(&cap) {
            kept.push(cap);
            continue;
        }
        let same_dest = kept.iter().any(|k| {
            k.effect == cap.effect && k.channel == cap.channel && k.destination == cap.destination
        });
        if !same_dest {
            kept.push(cap);
        }
    }
    let with_dest: HashSet<(Effect, Channel)> = kept
        .iter()
        .filter(|c| session(c) && c.destination.is_some())
        .map(|c| (c.effect, c.channel))
        .collect();
    kept.retain(|c| {
        !(session(c) && c.destination.is_none() && with_dest.contains(&(c.effect, c.channel)))
    });
    *caps = kept;
}

/// Scans files given in memory: `(relative path, text)` pairs and the
/// manifest text. [`scan_path`] reads the tree and calls this.
pub fn scan_source(files: &[(String, String)], manifest: Option<&str>) -> Result<Scan, ScanError> {
    let manifest = match manifest {
        Some(text) => manifest::parse(text).map_err(|message| ScanError::Manifest {
            file: MANIFEST_FILE.to_string(),
            message,
        })?,
        None => Manifest::default(),
    };
    let mut order: Vec<usize> = (0..files.len()).collect();
    order.sort_by(|a, b| files[*a].0.cmp(&files[*b].0));
    let sorted: Vec<&(String, String)> = order.iter().map(|i| &files[*i]).collect();
    let results = parse_all(&sorted);

    let mut diagnostics = Vec::new();
    let mut tools: BTreeMap<String, FoundTool> = BTreeMap::new();
    for ((path, text), (found, mut diags)) in sorted.iter().map(|f| (&f.0, &f.1)).zip(results) {
        diagnostics.append(&mut diags);
        if found.is_empty()
            && let Some(framework) = agent_framework(path, text)
        {
            diagnostics.push(Note {
                level: NoteLevel::Warning,
                message: format!(
                    "{path} imports {framework} but no tool was recognised in it: tools it defines are not in the graph (declare them in {MANIFEST_FILE}, or report the convention)"
                ),
                source: None,
            });
        }
        for tool in found {
            check_hints(&tool, &mut diagnostics);
            match tools.get_mut(&tool.name) {
                Some(existing) => {
                    diagnostics.push(Note {
                        level: NoteLevel::Warning,
                        message: format!(
                            "tool {:?} is defined more than once (also at {}); capabilities merged",
                            tool.name, existing.source
                        ),
                        source: Some(tool.source.clone()),
                    });
                    for cap in tool.capabilities {
                        push_unique(&mut existing.capabilities, cap);
                    }
                }
                None => {
                    tools.insert(tool.name.clone(), tool);
                }
            }
        }
    }
    resolve_deferred(&mut tools, &sorted, &mut diagnostics);
    downloaded_files(&mut tools);
    let graph = build_graph(tools, &manifest)?;
    Ok(Scan {
        graph,
        diagnostics,
        files: files.len(),
    })
}

/// Stack of a parsing thread. The front ends recurse along expression and
/// statement nesting; generated or hostile sources can nest thousands deep,
/// and the caller may be a small-stack async worker, so parsing always runs
/// on threads of its own with room to spare.
const PARSE_STACK: usize = 256 * 1024 * 1024;

/// Parses every file, on up to two threads (the scanner runs in CI and in
/// the operator; more threads buy little for agent repositories), keeping
/// the input order.
fn parse_all(files: &[&(String, String)]) -> Vec<(Vec<FoundTool>, Vec<Note>)> {
    let run = |chunk: &[&(String, String)]| {
        let mut parsers = Parsers::default();
        chunk
            .iter()
            .map(|(path, text)| scan_file(&mut parsers, path, text))
            .collect::<Vec<_>>()
    };
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(2);
    let chunk = if threads < 2 || files.len() < 8 {
        files.len().max(1)
    } else {
        files.len().div_ceil(2)
    };
    std::thread::scope(|s| {
        let handles: Vec<_> = files
            .chunks(chunk)
            .map(|part| {
                let spawned = std::thread::Builder::new()
                    .name("agentgate-scan".into())
                    .stack_size(PARSE_STACK)
                    .spawn_scoped(s, move || run(part));
                // No thread to be had: parse here rather than fail the scan.
                spawned.map_err(|_| run(part))
            })
            .collect();
        let mut out = Vec::with_capacity(files.len());
        for handle in handles {
            match handle {
                Ok(h) => match h.join() {
                    Ok(mut part) => out.append(&mut part),
                    // A panic is a scanner bug; surface it unchanged.
                    Err(panic) => std::panic::resume_unwind(panic),
                },
                Err(mut part) => out.append(&mut part),
            }
        }
        out
    })
}

/// Cross-checks MCP annotations with what the body does.
fn check_hints(tool: &FoundTool, out: &mut Vec<Note>) {
    let describe = |c: &Capability| {
        let call = c.call.as_deref().unwrap_or("?");
        match &c.source {
            Some(s) => format!("{call} at line {} ({})", s.line, s.file),
            None => call.to_string(),
        }
    };
    if tool.hints.read_only == Some(true)
        && let Some(c) = tool
            .capabilities
            .iter()
            .find(|c| c.effect == Effect::Egress)
    {
        out.push(Note {
            level: NoteLevel::Warning,
            message: format!(
                "tool {:?} declares readOnlyHint: true but its body sends data out: {} ({} egress)",
                tool.name,
                describe(c),
                c.channel
            ),
            source: Some(tool.source.clone()),
        });
    }
    if tool.hints.open_world == Some(false)
        && let Some(c) = tool
            .capabilities
            .iter()
            .find(|c| matches!(c.effect, Effect::Egress | Effect::UntrustedInput))
    {
        let what = if c.effect == Effect::Egress {
            "egress"
        } else {
            "untrusted input"
        };
        out.push(Note {
            level: NoteLevel::Warning,
            message: format!(
                "tool {:?} declares openWorldHint: false but its body reaches the outside world: {} ({} {what})",
                tool.name,
                describe(c),
                c.channel
            ),
            source: Some(tool.source.clone()),
        });
    }
}

/// The model node id of a delegated agent.
pub fn agent_llm(agent: &str) -> String {
    format!("{agent}/{LLM}")
}

fn build_graph(
    tools: BTreeMap<String, FoundTool>,
    manifest: &Manifest,
) -> Result<Graph, ScanError> {
    let file = || MANIFEST_FILE.to_string();
    let mut nodes: BTreeMap<String, Node> = tools
        .into_values()
        .map(|t| {
            (
                t.name.clone(),
                Node {
                    mcp: t.hints.mcp.then(|| McpTool {
                        name: t.name.clone(),
                        ..McpTool::default()
                    }),
                    id: t.name,
                    kind: NodeKind::Tool,
                    capabilities: t.capabilities,
                    source: Some(t.source),
                    ..Node::default()
                },
            )
        })
        .collect();
    for declared in &manifest.tools {
        let node = nodes.entry(declared.name.clone()).or_insert_with(|| Node {
            id: declared.name.clone(),
            kind: NodeKind::Tool,
            source: declared.source.clone(),
            ..Node::default()
        });
        for cap in &declared.capabilities {
            push_unique(&mut node.capabilities, cap.clone());
        }
        if declared.mcp.is_some() {
            node.mcp = declared.mcp.clone();
        }
    }
    let known = |field: &'static str, tool: &str, nodes: &BTreeMap<String, Node>| {
        if nodes.contains_key(tool) {
            Ok(())
        } else {
            Err(ScanError::UnknownTool {
                file: file(),
                field,
                tool: tool.to_string(),
            })
        }
    };
    for id in &manifest.load_bearing {
        known("loadBearing", id, &nodes)?;
        if let Some(n) = nodes.get_mut(id) {
            n.load_bearing = true;
        }
    }
    for d in &manifest.declassifiers {
        known("declassifiers", &d.tool, &nodes)?;
        if let Some(n) = nodes.get_mut(&d.tool) {
            n.declassifies.extend(d.channels.iter().copied());
            n.declassifies.sort();
            n.declassifies.dedup();
        }
    }
    // Which model context each tool talks to.
    let mut owner: HashMap<&str, String> = HashMap::new();
    let mut agent_names = HashSet::new();
    for agent in &manifest.agents {
        if agent.name.is_empty() || agent.name.contains('/') || !agent_names.insert(&agent.name) {
            return Err(ScanError::Manifest {
                file: file(),
                message: format!(
                    "agents: name {:?} must be non-empty, unique and free of '/'",
                    agent.name
                ),
            });
        }
        for tool in &agent.tools {
            known("agents", tool, &nodes)?;
            if owner.insert(tool, agent_llm(&agent.name)).is_some() {
                return Err(ScanError::Manifest {
                    file: file(),
                    message: format!("agents: tool {tool:?} belongs to more than one agent"),
                });
            }
        }
    }

    let mut edges = Vec::new();
    let mut edge = |from: &str, to: &str, kind| {
        edges.push(Edge {
            from: from.to_string(),
            to: to.to_string(),
            kind,
        })
    };
    for id in nodes.keys() {
        let llm = owner.get(id.as_str()).map(String::as_str).unwrap_or(LLM);
        edge(id, llm, EdgeKind::Data);
        edge(llm, id, EdgeKind::Control);
        edge(llm, id, EdgeKind::Data);
    }
    for agent in &manifest.agents {
        let sub = agent_llm(&agent.name);
        edge(LLM, &sub, EdgeKind::Control);
        edge(LLM, &sub, EdgeKind::Data);
        edge(&sub, LLM, EdgeKind::Data);
        nodes.insert(
            sub.clone(),
            Node {
                id: sub,
                kind: NodeKind::Llm,
                ..Node::default()
            },
        );
    }
    edges.sort_by(|a, b| (&a.from, &a.to, a.kind).cmp(&(&b.from, &b.to, b.kind)));
    edges.dedup();

    let mut out = Vec::with_capacity(nodes.len() + 1);
    out.push(Node {
        id: LLM.to_string(),
        kind: NodeKind::Llm,
        ..Node::default()
    });
    out.extend(nodes.into_values().filter(|n| n.id != LLM));
    Ok(Graph { nodes: out, edges })
}

#[cfg(test)]
mod tests;
