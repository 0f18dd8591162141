//! Golden tests of the CLI: every ```console block of docs/cli.md is run from
//! the repository root and its output and exit code compared, so the
//! documentation cannot drift from the binary. Timings are normalised.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The `agentgate` binary (target/<profile>/agentgate, next to this test's
/// deps/ directory). `cargo test` does not build another package's binary,
/// so `make test` builds it first; run `cargo build -p agentgate` before
/// running this test by hand.
fn binary() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().and_then(Path::parent).unwrap();
    let bin = profile_dir.join("agentgate");
    assert!(
        bin.exists(),
        "{} is missing: run `cargo build -p agentgate` first (make test does)",
        bin.display()
    );
    bin
}

/// Replaces the number before " ms" and after `"solverMillis":` with `<ms>`.
fn normalise(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let mut line = line.to_string();
        if let Some(i) = line.find("\"solverMillis\":") {
            let start = i + "\"solverMillis\":".len();
            let end = line[start..]
                .find(|c: char| !(c.is_ascii_digit() || c == '.'))
                .map_or(line.len(), |e| start + e);
            line.replace_range(start..end, "<ms>");
        }
        if let Some(end) = line.find(" ms") {
            let start = line[..end]
                .rfind(|c: char| !(c.is_ascii_digit() || c == '.'))
                .map_or(0, |s| s + 1);
            if start < end {
                line.replace_range(start..end, "<ms>");
            }
        }
        out.push_str(&line);
        out.push('\n');
    }
    out
}

struct Example {
    line: usize,
    args: Vec<String>,
    expected: String,
    exit: i32,
}

fn examples(markdown: &str) -> Vec<Example> {
    let mut out = Vec::new();
    let mut lines = markdown.lines().enumerate();
    while let Some((n, line)) = lines.next() {
        if line.trim() != "```console" {
            continue;
        }
        let (_, command) = lines.next().unwrap();
        let command = command.strip_prefix("$ agentgate ").unwrap_or_else(|| {
            panic!(
                "docs/cli.md:{}: a console block starts with `$ agentgate`",
                n + 2
            )
        });
        let mut expected = String::new();
        let mut exit = None;
        for (_, line) in lines.by_ref() {
            if line == "```" {
                break;
            }
            if let Some(code) = line
                .strip_prefix("[exit ")
                .and_then(|l| l.strip_suffix(']'))
            {
                exit = Some(code.parse().unwrap());
            } else {
                expected.push_str(line);
                expected.push('\n');
            }
        }
        out.push(Example {
            line: n + 1,
            args: command.split_whitespace().map(str::to_string).collect(),
            expected,
            exit: exit
                .unwrap_or_else(|| panic!("docs/cli.md:{}: block has no [exit N] line", n + 1)),
        });
    }
    out
}

#[test]
fn docs_cli_examples_match_the_binary() {
    let root = repo_root();
    let markdown = std::fs::read_to_string(root.join("docs/cli.md")).unwrap();
    let examples = examples(&markdown);
    assert!(
        examples.len() >= 10,
        "expected the documented examples, found {}",
        examples.len()
    );
    let bin = binary();
    let mut failures = Vec::new();
    for ex in &examples {
        let output = Command::new(&bin)
            .args(&ex.args)
            .current_dir(&root)
            .output()
            .unwrap();
        let actual = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        let code = output.status.code().unwrap_or(-1);
        if normalise(&actual) != normalise(&ex.expected) || code != ex.exit {
            failures.push(format!(
                "docs/cli.md:{}: agentgate {}\n--- expected (exit {})\n{}--- actual (exit {code})\n{actual}",
                ex.line,
                ex.args.join(" "),
                ex.exit,
                ex.expected
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn normalise_hides_only_timings() {
    assert_eq!(
        normalise("proved in 12.5 ms (2 checks)"),
        "proved in <ms> ms (2 checks)\n"
    );
    assert_eq!(
        normalise(r#"{"solverMillis":3.25}"#),
        "{\"solverMillis\":<ms>}\n"
    );
    assert_eq!(normalise("cost 7"), "cost 7\n");
}
