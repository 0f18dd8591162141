//! The repository cites its specification by place: `docs/design.md §4`,
//! `docs/policy-semantics.md §8.3`. This test walks every source and doc
//! file and fails, listing `file:line`, on
//! - a citation `docs/<page>.md` whose page does not exist, or whose `§n`
//!   (or `§n.m`, or a range `§n–§m`) names no numbered heading of that page;
//! - a path outside the repository (the design inputs once lived in a
//!   shared folder beside it);
//! - a reference to the design inputs by their old upper-case names instead
//!   of the pages under `docs/`.
//!
//! The parsing is pure and unit-tested below on small strings, so the test
//! is known to catch a broken citation, not only to pass on a clean tree.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// What holds data or build output, not the project's text: agent source
/// code under test, fixtures, schemas, caches, and `.git` (a file in a
/// worktree, naming the main checkout).
const SKIPPED: &[&str] = &[
    ".git",
    "target",
    ".tools",
    "dist",
    "node_modules",
    "tests/corpus",
    "tests/data",
    "tests/schemas",
];

/// This file: its unit tests hold deliberately broken citations.
const THIS_FILE: &str = "tests/tests/citations.rs";

/// Paths that lead out of the repository.
const OUTSIDE_PATHS: &[&str] = &["/work/", "../shared"];

/// The design inputs' old names. Built from pieces so that this file does
/// not spell them itself (it is skipped anyway; this keeps a grep quiet).
fn old_names() -> [String; 2] {
    [
        format!("{}.md", "DESIGN"),
        format!("{}-{}", "POLICY", "SEMANTICS"),
    ]
}

/// The repository root (`tests/` is one level below it).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// One citation of a page, with the sections it names.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Citation {
    /// 1-based line of the page's path.
    line: usize,
    /// The page, e.g. `design.md`.
    page: String,
    /// Section numbers as written, e.g. `["4", "8.3"]`; ranges expanded.
    sections: Vec<String>,
}

/// The numbered headings of every page under `docs/`, by page name.
#[derive(Debug, Default)]
struct Pages {
    sections: BTreeMap<String, BTreeSet<String>>,
}

impl Pages {
    /// Reads every `docs/*.md` of the repository.
    fn read(root: &Path) -> Pages {
        let mut pages = Pages::default();
        let entries = fs::read_dir(root.join("docs")).unwrap_or_else(|e| panic!("docs/: {e}"));
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Some(stem) = name.strip_suffix(".md") {
                let text =
                    fs::read_to_string(entry.path()).unwrap_or_else(|e| panic!("docs/{name}: {e}"));
                pages.add(&format!("{stem}.md"), &text);
            }
        }
        pages
    }

    /// Records a page and its numbered headings.
    fn add(&mut self, page: &str, text: &str) {
        self.sections
            .insert(page.to_string(), numbered_headings(text));
    }
}

/// The section numbers of a Markdown page's headings (`## 3. Globs`,
/// `### 8.1 Actions`), outside fenced code blocks.
fn numbered_headings(text: &str) -> BTreeSet<String> {
    let mut in_fence = false;
    let mut numbers = BTreeSet::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
            continue;
        }
        if in_fence {
            continue;
        }
        let Some(title) = line
            .strip_prefix('#')
            .map(|rest| rest.trim_start_matches('#'))
            .and_then(|rest| rest.strip_prefix(' '))
        else {
            continue;
        };
        let title = title.trim_start().trim_start_matches('§');
        let (number, _) = section_number(title);
        if !number.is_empty() {
            numbers.insert(number.to_string());
        }
    }
    numbers
}

/// The leading `n` or `n.m…` of `text` (no trailing dot), and the rest.
fn section_number(text: &str) -> (&str, &str) {
    let bytes = text.as_bytes();
    let mut end = 0;
    while end < bytes.len() {
        let digits = bytes[end..]
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .count();
        if digits == 0 {
            break;
        }
        end += digits;
        // A dot continues the number only when a digit follows it.
        if bytes.get(end) == Some(&b'.') && bytes.get(end + 1).is_some_and(u8::is_ascii_digit) {
            end += 1;
        } else {
            break;
        }
    }
    text.split_at(end)
}

/// Skips what may stand between a page and its first section: spaces,
/// an opening parenthesis, and a line break with the next line's comment
/// marker (a citation wrapped in a Rust or shell comment).
fn skip_gap(text: &str) -> &str {
    let mut rest = text;
    loop {
        let before = rest.len();
        rest = rest.trim_start_matches([' ', '\t', '(']);
        if let Some(next) = rest.strip_prefix('\n') {
            rest = next.trim_start_matches([' ', '\t']);
            for marker in ["//!", "///", "//", "#", "*"] {
                if let Some(after) = rest.strip_prefix(marker) {
                    rest = after;
                    break;
                }
            }
        }
        if rest.len() == before {
            return rest;
        }
    }
}

/// After one section: where the next section of the same citation
/// starts (`§1, §7`, `§1 and §7`, `§1 (§7`, a range `§3–§5`, also across
/// a wrapped comment line), and whether it closes a range.
fn next_section(text: &str) -> Option<(&str, bool)> {
    let mut rest = text;
    let mut range = false;
    loop {
        let before = rest.len();
        rest = skip_gap(rest).trim_start_matches(',');
        for word in ["and ", "or "] {
            rest = rest.strip_prefix(word).unwrap_or(rest);
        }
        if let Some(after) = rest.strip_prefix(['–', '-']) {
            rest = after;
            range = true;
        }
        if rest.len() == before {
            break;
        }
    }
    rest.starts_with('§').then_some((rest, range))
}

/// Every `docs/<page>.md` citation in `text`, with the sections it names.
fn citations(text: &str) -> Vec<Citation> {
    let mut found = Vec::new();
    let mut offset = 0;
    while let Some(at) = text[offset..].find("docs/") {
        let start = offset + at;
        offset = start + "docs/".len();
        // `docs/` must start a path: not `kubernetes.io/docs/`, not `x/docs/`.
        let preceded = text[..start]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_ascii_alphanumeric() || "_./-".contains(c));
        if preceded {
            continue;
        }
        let name_len = text[offset..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_'))
            .unwrap_or(text.len() - offset);
        let stem = &text[offset..offset + name_len];
        let Some(after) = text[offset + name_len..].strip_prefix(".md") else {
            continue;
        };
        if stem.is_empty() {
            continue;
        }
        let sections = sections(skip_gap(after));
        // A quoted path without a section is data, not a citation: a file
        // an agent under test opens (`open("docs/README.md")`).
        let quoted = text[..start].ends_with(['"', '\'']);
        if quoted && sections.is_empty() {
            continue;
        }
        found.push(Citation {
            line: text[..start].matches('\n').count() + 1,
            page: format!("{stem}.md"),
            sections,
        });
    }
    found
}

/// The sections a citation names, from the text right after its page.
fn sections(text: &str) -> Vec<String> {
    let mut sections = Vec::new();
    let mut rest = text;
    let mut range_from: Option<u32> = None;
    while let Some(next) = rest.strip_prefix('§') {
        let (number, tail) = section_number(next);
        if number.is_empty() {
            break;
        }
        match (range_from.take(), number.parse::<u32>()) {
            (Some(from), Ok(to)) => sections.extend((from + 1..=to).map(|n| n.to_string())),
            _ => sections.push(number.to_string()),
        }
        let Some((more, is_range)) = next_section(tail) else {
            break;
        };
        if is_range {
            range_from = number.parse().ok();
        }
        rest = more;
    }
    sections
}

/// Every problem of one file's text, as `(line, message)`.
fn problems(pages: &Pages, text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for citation in citations(text) {
        let Some(known) = pages.sections.get(&citation.page) else {
            out.push((
                citation.line,
                format!("cites docs/{}, which does not exist", citation.page),
            ));
            continue;
        };
        for section in &citation.sections {
            if !known.contains(section) {
                out.push((
                    citation.line,
                    format!(
                        "cites docs/{} §{section}, which has no heading numbered {section}",
                        citation.page
                    ),
                ));
            }
        }
    }
    for (i, line) in text.lines().enumerate() {
        for outside in OUTSIDE_PATHS {
            if line.contains(outside) {
                out.push((
                    i + 1,
                    format!("names {outside:?}, a path outside the repository"),
                ));
            }
        }
        for old in old_names() {
            if line.contains(&old) {
                out.push((
                    i + 1,
                    format!(
                        "names {old:?}; cite docs/design.md or docs/policy-semantics.md instead"
                    ),
                ));
            }
        }
    }
    out.sort();
    out
}

/// Every file below `dir`, relative to `root`, except skipped directories
/// and symbolic links.
fn files(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(relative) = path.strip_prefix(root) else {
            continue;
        };
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_symlink() {
            continue;
        }
        let shown = relative.to_string_lossy().replace('\\', "/");
        if SKIPPED.contains(&shown.as_str()) {
            continue;
        }
        if kind.is_dir() {
            files(root, &path, out);
        } else if kind.is_file() && shown != THIS_FILE {
            out.push(relative.to_path_buf());
        }
    }
}

#[test]
fn every_citation_names_a_page_and_section_that_exist() {
    let root = root();
    let root = root.canonicalize().unwrap_or(root);
    let pages = Pages::read(&root);
    for page in ["design.md", "policy-semantics.md"] {
        assert!(
            pages.sections.contains_key(page),
            "docs/{page} is missing: the specification lives in the repository"
        );
    }
    let mut all = Vec::new();
    files(&root, &root, &mut all);
    all.sort();
    let mut report = Vec::new();
    let mut cited = 0;
    for file in &all {
        // Binary files (images, archives) are not text to check.
        let Ok(text) = fs::read_to_string(root.join(file)) else {
            continue;
        };
        cited += citations(&text)
            .iter()
            .filter(|c| ["design.md", "policy-semantics.md"].contains(&c.page.as_str()))
            .count();
        for (line, message) in problems(&pages, &text) {
            report.push(format!("{}:{line}: {message}", file.display()));
        }
    }
    assert!(
        report.is_empty(),
        "{} broken citation(s):\n{}",
        report.len(),
        report.join("\n")
    );
    // The walk really reached the code and docs that cite the specification.
    assert!(
        cited > 50,
        "only {cited} citations of the specification found"
    );
}

fn sample_pages() -> Pages {
    let mut pages = Pages::default();
    pages.add(
        "design.md",
        "# t\n## 1. One\n## 4. Four\n```\n# 9. in a code block\n```\n## 10. Ten\n",
    );
    pages.add(
        "policy-semantics.md",
        "## 3. Globs\n## 4. Rules\n## 5. Questions\n## 8. MCP\n### 8.3 Provenance\n",
    );
    pages
}

#[test]
fn citations_are_parsed_with_their_sections() {
    let text = "a (docs/design.md §1, §10) b\n\
                c docs/policy-semantics.md §3–§5 and\n\
                //! (docs/policy-semantics.md\n//! §8.3), docs/design.md §4 step 7\n\
                see docs/proofs.md, kubernetes.io/docs/concepts.md, x/docs/y.md\n\
                docs/policy-semantics.md §1 (§7 says how); docs/design.md §6,\n//! §7.";
    let citation = |line: usize, page: &str, sections: &[&str]| Citation {
        line,
        page: page.to_string(),
        sections: sections.iter().map(|s| s.to_string()).collect(),
    };
    assert_eq!(
        citations(text),
        vec![
            citation(1, "design.md", &["1", "10"]),
            citation(2, "policy-semantics.md", &["3", "4", "5"]),
            citation(3, "policy-semantics.md", &["8.3"]),
            citation(4, "design.md", &["4"]),
            citation(5, "proofs.md", &[]),
            citation(6, "policy-semantics.md", &["1", "7"]),
            citation(6, "design.md", &["6", "7"]),
        ]
    );
}

#[test]
fn headings_in_code_blocks_are_not_sections() {
    let pages = sample_pages();
    let design = &pages.sections["design.md"];
    assert!(design.contains("4") && design.contains("10"));
    assert!(!design.contains("9"), "{design:?}");
    assert!(pages.sections["policy-semantics.md"].contains("8.3"));
}

#[test]
fn a_broken_citation_is_reported_at_its_line() {
    let pages = sample_pages();
    let text = "fine: docs/design.md §4\n\
                missing section: docs/design.md §9\n\
                missing subsection: docs/policy-semantics.md §8.4\n\
                range past the end: docs/policy-semantics.md §3–§6\n\
                missing page: docs/nowhere.md §1\n\
                data, not a citation: open(\"docs/README.md\")\n";
    let lines: Vec<usize> = problems(&pages, text).iter().map(|(l, _)| *l).collect();
    assert_eq!(lines, vec![2, 3, 4, 5], "{:?}", problems(&pages, text));
    let messages: Vec<String> = problems(&pages, text).into_iter().map(|(_, m)| m).collect();
    assert_eq!(
        messages[2],
        "cites docs/policy-semantics.md §6, which has no heading numbered 6"
    );
    assert!(problems(&pages, "ok: docs/design.md §1, §10\n").is_empty());
}

#[test]
fn paths_outside_and_old_names_are_reported() {
    let pages = sample_pages();
    let text = format!(
        "kept in /work/shared/x\nsee ../shared/y\nas {} says\n{}.md §2\nclean line\n",
        old_names()[0],
        old_names()[1]
    );
    let lines: Vec<usize> = problems(&pages, &text).iter().map(|(l, _)| *l).collect();
    assert_eq!(lines, vec![1, 2, 3, 4]);
}
