//! `kubectl agentgate export SANDBOX --into FILE [--diff]`: fold a sandbox's
//! committed effective policy into the manifest in git, so a grant an agent
//! earned at runtime becomes a reviewed change. Only the `spec.policy`
//! node of the matching AgentSandbox is rewritten; every other byte of the
//! file (other documents, fields, comments, blank lines) stays as it was.
//! The result is read back and checked before it is used.
//!
//! Splicing at the node's source span, rather than re-emitting a parsed
//! tree, is what keeps the rest of the file byte for byte: the YAML
//! libraries that keep comments re-emit whole documents and normalise what
//! they do not model.

use serde_json::Value;

use crate::manifests::{BadInput, Manifest, parse_stream};
use agentgate_policy::model::PolicyDocument;

/// Why a policy could not be folded into a file.
#[derive(Debug, thiserror::Error)]
pub enum FoldError {
    /// The file is not readable YAML.
    #[error(transparent)]
    BadInput(#[from] BadInput),
    /// No AgentSandbox of that name (and namespace) in the file.
    #[error("{file}: no AgentSandbox {name:?}{namespace} in it")]
    NotFound {
        /// The file.
        file: String,
        /// The sandbox.
        name: String,
        /// ` in namespace "x"`, or empty.
        namespace: String,
    },
    /// The sandbox's layout cannot take the policy without reformatting.
    #[error("{0}")]
    Layout(String),
    /// The rewritten file did not read back as intended (a bug; nothing is written).
    #[error("the rewritten file does not read back as intended: {0}")]
    Check(String),
}

/// The document of `manifests` that is the AgentSandbox `name` (in
/// `namespace`, when the manifest names one).
fn find<'a>(manifests: &'a [Manifest], name: &str, namespace: &str) -> Option<&'a Manifest> {
    manifests.iter().find(|m| {
        m.kind() == "AgentSandbox"
            && m.name() == name
            && m.value
                .pointer("/metadata/namespace")
                .and_then(Value::as_str)
                .is_none_or(|ns| ns == namespace)
    })
}

/// `yaml` (block YAML at column 0, ending in a newline) indented by `indent`
/// spaces on every line but the first.
fn indent_rest(yaml: &str, indent: usize) -> String {
    let pad = " ".repeat(indent);
    let mut out = String::with_capacity(yaml.len() + 64);
    for (i, line) in yaml.trim_end_matches('\n').lines().enumerate() {
        if i > 0 {
            out.push('\n');
            if !line.is_empty() {
                out.push_str(&pad);
            }
        }
        out.push_str(line);
    }
    out
}

/// Rewrites `text` (the file `file`) so that AgentSandbox `name`'s
/// `spec.policy` is `policy`, changing nothing else. Where the change is
/// rules added, removed or changed in place and filesystem lists changed,
/// only those are rewritten (a reviewer sees exactly the grant); otherwise
/// the whole `spec.policy` node is.
pub fn fold_policy(
    file: &str,
    text: &str,
    name: &str,
    namespace: &str,
    policy: &PolicyDocument,
) -> Result<String, FoldError> {
    let fold = Fold {
        file,
        name,
        namespace,
        policy,
        before: parse_stream(file, text)?,
    };
    let target = find(&fold.before, name, namespace).ok_or_else(|| FoldError::NotFound {
        file: file.to_string(),
        name: name.to_string(),
        namespace: format!(" in namespace {namespace:?}"),
    })?;
    if let Some(mut edits) = minimal_edits(target, text, policy) {
        // From the end, so earlier offsets stay valid.
        edits.sort_by_key(|(range, _)| std::cmp::Reverse(range.start));
        let mut out = text.to_string();
        for (range, replacement) in &edits {
            out.replace_range(range.clone(), replacement);
        }
        // The same read-back check as the whole-node splice; should the
        // minimal edit not read back exactly, the whole node is replaced.
        if fold.check(&out).is_ok() {
            return Ok(out);
        }
    }
    let (range, replacement) = fold.whole_node(target)?;
    let mut out = String::with_capacity(text.len() + replacement.len());
    out.push_str(&text[..range.start]);
    out.push_str(&replacement);
    out.push_str(&text[range.end..]);
    fold.check(&out)?;
    Ok(out)
}

/// One fold: the file's objects as read and the policy to write into them.
struct Fold<'a> {
    file: &'a str,
    name: &'a str,
    namespace: &'a str,
    policy: &'a PolicyDocument,
    /// The file's objects before the fold.
    before: Vec<Manifest>,
}

/// The policy a manifest has written (an absent one is empty).
fn written_policy(manifest: &Manifest) -> Result<PolicyDocument, serde_json::Error> {
    manifest
        .value
        .pointer("/spec/policy")
        .cloned()
        .map(serde_json::from_value)
        .transpose()
        .map(Option::unwrap_or_default)
}

/// One scalar in flow style: plain where YAML reads it back as the same
/// string, else double-quoted (JSON's quoting is valid YAML).
fn flow_scalar(value: &str) -> String {
    let plain = !value.is_empty()
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '/' | '.' | '_' | '-' | '*'))
        && !value.starts_with(['*', '-', '.'])
        && serde_saphyr::from_str::<Value>(value).ok() == Some(Value::String(value.to_string()));
    if plain {
        value.to_string()
    } else {
        serde_json::to_string(value).unwrap_or_else(|_| format!("{value:?}"))
    }
}

/// The start of the line holding byte `at`.
fn line_start(text: &str, at: usize) -> usize {
    text[..at].rfind('\n').map_or(0, |i| i + 1)
}

/// The edits that turn the sandbox's written policy into `policy` by
/// touching only what differs: network rules added at the end, removed, or
/// changed in place (matched by name, order kept), and filesystem lists
/// rewritten in their own style. `None` when the change does not have that
/// shape (a reorder, a section the file does not have yet, flow-style
/// rules): the caller replaces the whole node instead.
fn minimal_edits(
    target: &Manifest,
    text: &str,
    policy: &PolicyDocument,
) -> Option<Vec<(std::ops::Range<usize>, String)>> {
    target.value.pointer("/spec/policy")?;
    let written = written_policy(target).ok()?;
    let mut edits = Vec::new();
    // Filesystem lists.
    for (old, new, key) in [
        (
            &written.filesystem.read_only,
            &policy.filesystem.read_only,
            "readOnly",
        ),
        (
            &written.filesystem.read_write,
            &policy.filesystem.read_write,
            "readWrite",
        ),
    ] {
        if old == new {
            continue;
        }
        let node = target.position_of(&format!("spec.policy.filesystem.{key}"))?;
        if new.is_empty() {
            return None;
        }
        let replacement = if node.block {
            let pad = " ".repeat(node.column);
            new.iter()
                .map(|v| format!("- {}", flow_scalar(v)))
                .collect::<Vec<_>>()
                .join(&format!("\n{pad}"))
        } else {
            format!(
                "[{}]",
                new.iter()
                    .map(|v| flow_scalar(v))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        edits.push((node.bytes.clone(), replacement));
    }
    if written.network == policy.network {
        return Some(edits);
    }
    if written.network.is_empty() || policy.network.is_empty() {
        return None;
    }
    let sequence = target.position_of("spec.policy.network")?;
    if !sequence.block {
        return None;
    }
    let item = |i: usize| {
        target
            .position_of(&format!("spec.policy.network[{i}]"))
            .filter(|p| p.block)
    };
    // The dash's column: items sit two columns to its right.
    let dash = sequence.column;
    let mut next_original = 0;
    let mut appended = Vec::new();
    let mut kept = vec![false; written.network.len()];
    for rule in &policy.network {
        match written.network.iter().position(|r| r.name == rule.name) {
            Some(i) => {
                if i < next_original || !appended.is_empty() {
                    return None; // reordered, or an old rule after a new one
                }
                next_original = i + 1;
                kept[i] = true;
                if &written.network[i] != rule {
                    let node = item(i)?;
                    let yaml = serde_saphyr::to_string(rule).ok()?;
                    edits.push((node.bytes.clone(), indent_rest(&yaml, node.column)));
                }
            }
            None => appended.push(rule),
        }
    }
    for (i, kept) in kept.iter().enumerate() {
        if !kept {
            // The item's lines, from the line of its dash to its last line's end.
            let node = item(i)?;
            let start = line_start(text, node.bytes.start);
            let end = text[node.bytes.end..]
                .find('\n')
                .map_or(text.len(), |n| node.bytes.end + n + 1);
            edits.push((start..end, String::new()));
        }
    }
    if !appended.is_empty() {
        let last = (0..written.network.len())
            .rev()
            .find(|i| kept[*i])
            .and_then(item)?;
        let mut block = String::new();
        for rule in appended {
            let yaml = serde_saphyr::to_string(rule).ok()?;
            block.push('\n');
            block.push_str(&" ".repeat(dash));
            block.push_str("- ");
            block.push_str(&indent_rest(&yaml, dash + 2));
        }
        edits.push((last.bytes.end..last.bytes.end, block));
    }
    Some(edits)
}

impl Fold<'_> {
    /// The splice that replaces the whole `spec.policy` node of `target`
    /// (or adds one to its spec).
    fn whole_node(&self, target: &Manifest) -> Result<(std::ops::Range<usize>, String), FoldError> {
        let yaml =
            serde_saphyr::to_string(self.policy).map_err(|e| FoldError::Check(e.to_string()))?;
        let single_line = yaml.trim_end().lines().count() <= 1;
        if let Some(node) = target.position_of("spec.policy") {
            return Ok(match node.key_end.filter(|_| single_line) {
                // A one-line policy (`{}`) goes on its key's line.
                Some(key_end) => (key_end..node.bytes.end, format!(": {}", yaml.trim_end())),
                None if node.block => (node.bytes.clone(), indent_rest(&yaml, node.column)),
                // Flow (`policy: {}`) or empty (`policy:`, an empty scalar
                // at the end of the key's line): the policy goes on the
                // lines below its key, indented one step further.
                None => {
                    let indent = node.key_column.unwrap_or(node.column) + 2;
                    (
                        node.bytes.clone(),
                        format!("\n{}{}", " ".repeat(indent), indent_rest(&yaml, indent)),
                    )
                }
            });
        }
        let spec = target
            .position_of("spec")
            .filter(|s| s.block)
            .ok_or_else(|| {
                FoldError::Layout(format!(
                    "{}:{}: AgentSandbox {:?} has no block-style spec to add spec.policy to",
                    self.file,
                    target.line_of(""),
                    self.name
                ))
            })?;
        let pad = " ".repeat(spec.column);
        let block = if single_line {
            format!("\n{pad}policy: {}", yaml.trim_end())
        } else {
            format!(
                "\n{pad}policy:\n{pad}  {}",
                indent_rest(&yaml, spec.column + 2)
            )
        };
        Ok((spec.bytes.end..spec.bytes.end, block))
    }

    /// Checks that `out` reads as the file did with only the sandbox's
    /// `spec.policy` replaced by the policy.
    fn check(&self, out: &str) -> Result<(), FoldError> {
        let after = parse_stream(self.file, out).map_err(|e| FoldError::Check(e.to_string()))?;
        if self.before.len() != after.len() {
            return Err(FoldError::Check("the number of objects changed".into()));
        }
        let without_policy = |m: &Manifest| {
            let mut v = m.value.clone();
            if m.kind() == "AgentSandbox"
                && m.name() == self.name
                && let Some(spec) = v.get_mut("spec").and_then(Value::as_object_mut)
            {
                spec.remove("policy");
            }
            v
        };
        for (b, a) in self.before.iter().zip(&after) {
            if without_policy(b) != without_policy(a) {
                return Err(FoldError::Check(format!(
                    "object {:?} changed outside spec.policy",
                    a.name()
                )));
            }
        }
        let target = find(&after, self.name, self.namespace)
            .ok_or_else(|| FoldError::Check("the sandbox is gone".into()))?;
        let written = written_policy(target).map_err(|e| FoldError::Check(e.to_string()))?;
        if &written != self.policy {
            return Err(FoldError::Check(
                "spec.policy does not read back as the effective policy".into(),
            ));
        }
        Ok(())
    }
}

/// A unified diff (`--- a/FILE`, `+++ b/FILE`, three lines of context);
/// empty when nothing changes.
pub fn unified_diff(file: &str, old: &str, new: &str) -> String {
    if old == new {
        return String::new();
    }
    similar::TextDiff::from_lines(old, new)
        .unified_diff()
        .context_radius(3)
        .header(&format!("a/{file}"), &format!("b/{file}"))
        .to_string()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn policy(yaml: &str) -> PolicyDocument {
        serde_saphyr::from_str(yaml).unwrap()
    }

    /// The `spec.policy` of a sandbox manifest, read as a policy.
    fn sandbox_policy(manifest: &str) -> PolicyDocument {
        policy(
            manifest
                .split("  policy:\n")
                .nth(1)
                .unwrap()
                .lines()
                .map(|l| l.strip_prefix("    ").unwrap_or(l))
                .collect::<Vec<_>>()
                .join("\n")
                .as_str(),
        )
    }

    const REPO: &str = "\
# Team ml's agents. Reviewed by @platform.
apiVersion: v1
kind: Namespace
metadata: {name: agents}
---
apiVersion: agentgate.dev/v1alpha1
kind: AgentSandbox
metadata:
  name: triage-bot   # the issue bot
  namespace: agents
spec:
  mode: auto   # proposals inside the budget apply themselves
  agentServiceAccount: triage-bot
  policy:
    # read issues only
    network:
      - name: github-read
        endpoints:
          - {host: api.github.com, ports: [443]}
  podTemplate: {}   # filled by the chart
---
apiVersion: agentgate.dev/v1alpha1
kind: AgentSandbox
metadata: {name: other, namespace: agents}
spec:
  agentServiceAccount: other
";

    #[test]
    fn only_the_policy_changes_and_comments_stay() {
        let effective = policy(
            "network:\n  - name: github-read\n    endpoints:\n      - {host: api.github.com, ports: [443]}\n  - name: github-comment\n    endpoints:\n      - {host: api.github.com, ports: [443]}\n",
        );
        let out = fold_policy("repo.yaml", REPO, "triage-bot", "agents", &effective).unwrap();
        for kept in [
            "# Team ml's agents. Reviewed by @platform.",
            "name: triage-bot   # the issue bot",
            "mode: auto   # proposals inside the budget apply themselves",
            "podTemplate: {}   # filled by the chart",
            "    # read issues only\n",
            "metadata: {name: other, namespace: agents}",
        ] {
            assert!(out.contains(kept), "{kept:?} lost:\n{out}");
        }
        assert!(out.contains("github-comment"), "{out}");
        // Everything before the policy is byte for byte the same.
        let at = REPO.find("    network:").unwrap();
        assert_eq!(&out[..at], &REPO[..at]);
        let diff = unified_diff("repo.yaml", REPO, &out);
        assert!(
            diff.starts_with("--- a/repo.yaml\n+++ b/repo.yaml\n"),
            "{diff}"
        );
        assert!(
            diff.lines()
                .any(|l| l.starts_with('+') && l.contains("github-comment")),
            "{diff}"
        );
        assert!(
            !diff
                .lines()
                .any(|l| l.starts_with('-') && l.contains("# the issue bot")),
            "{diff}"
        );
        // Folding the same policy again changes nothing more.
        let again = fold_policy("repo.yaml", &out, "triage-bot", "agents", &effective).unwrap();
        assert_eq!(unified_diff("repo.yaml", &out, &again), "");
    }

    #[test]
    fn a_sandbox_without_a_policy_gets_one_and_an_empty_policy_fits_on_its_line() {
        let effective = policy("filesystem:\n  readOnly: [/app]\n");
        let out = fold_policy("repo.yaml", REPO, "other", "agents", &effective).unwrap();
        assert!(
            out.ends_with(
                "spec:\n  agentServiceAccount: other\n  policy:\n    filesystem:\n      readOnly:\n      - /app\n"
            ),
            "{out}"
        );
        let empty = fold_policy(
            "repo.yaml",
            REPO,
            "triage-bot",
            "agents",
            &PolicyDocument::default(),
        )
        .unwrap();
        assert!(
            empty.contains("  agentServiceAccount: triage-bot\n  policy: {}\n  podTemplate: {}   # filled by the chart\n"),
            "{empty}"
        );
    }

    /// The diff lines that remove (`-`) or add (`+`) text, without headers.
    fn changed(diff: &str) -> Vec<&str> {
        diff.lines()
            .filter(|l| !l.starts_with("---") && !l.starts_with("+++"))
            .filter(|l| l.starts_with('-') || l.starts_with('+'))
            .collect()
    }

    #[test]
    fn a_granted_rule_is_the_only_change_a_reviewer_sees() {
        let text = include_str!("../../../examples/sandbox.yaml");
        let mut effective = sandbox_policy(text);
        let pulls: agentgate_policy::model::NetworkRule = serde_saphyr::from_str(
            "name: github-pulls\nbinaries: [/usr/bin/gh]\nendpoints:\n  - {host: api.github.com, ports: [443], protocol: rest, path: /repos/acme/*/pulls/**}\n",
        )
        .unwrap();
        effective.network.push(pulls.clone());
        let out = fold_policy("s.yaml", text, "triage-bot", "agents", &effective).unwrap();
        let diff = unified_diff("s.yaml", text, &out);
        let lines = changed(&diff);
        assert!(lines.iter().all(|l| l.starts_with('+')), "{diff}");
        assert_eq!(lines[0], "+      - name: github-pulls", "{diff}");
        // A rule changed in place (proposals never do this: they add and
        // remove whole rules) is re-emitted, and nothing else.
        let mut narrowed = effective.clone();
        narrowed.network[0].binaries = vec!["/usr/bin/gh".into()];
        let again = fold_policy("s.yaml", &out, "triage-bot", "agents", &narrowed).unwrap();
        let diff = unified_diff("s.yaml", &out, &again);
        assert!(
            !changed(&diff).iter().any(|l| l.contains("github-pulls")),
            "{diff}"
        );
        assert!(changed(&diff).contains(&"+        - /usr/bin/gh"), "{diff}");
        // A rule withdrawn: exactly its lines go.
        let mut withdrawn = effective.clone();
        withdrawn.network.remove(0);
        let fewer = fold_policy("s.yaml", &out, "triage-bot", "agents", &withdrawn).unwrap();
        let diff = unified_diff("s.yaml", &out, &fewer);
        let lines = changed(&diff);
        assert!(lines.iter().all(|l| l.starts_with('-')), "{diff}");
        assert!(lines[0].contains("- name: github-read"), "{diff}");
        assert_eq!(lines.len(), 9, "{diff}");
        // A filesystem list keeps its flow style.
        let mut wider = effective.clone();
        wider.filesystem.read_only.push("/etc/ssl".into());
        let out2 = fold_policy("s.yaml", &out, "triage-bot", "agents", &wider).unwrap();
        let diff = unified_diff("s.yaml", &out, &out2);
        assert_eq!(
            changed(&diff),
            [
                "-      readOnly: [/app]",
                "+      readOnly: [/app, /etc/ssl]"
            ],
            "{diff}"
        );
    }

    #[test]
    fn a_tool_grant_folds_in_with_its_argument_constraints_intact() {
        let text = include_str!("../../../examples/sandbox.yaml");
        let mut effective = sandbox_policy(text);
        let pay: agentgate_policy::model::NetworkRule = serde_saphyr::from_str(
            "name: bank-pay\nbinaries: [/usr/bin/python3]\nendpoints:\n  - host: bank.internal\n    ports: [443]\n    protocol: mcp\n    path: /mcp\n    tools:\n      - name: send_money\n        arguments:\n          recipient: {oneOf: [GB29NWBK60161331926819]}\n          amount: {minimum: 0, exclusiveMaximum: 100.5}\n          tags: {items: {glob: 't-*'}, maxItems: 2, optional: true}\n        additionalArguments: false\n    denyTools: [{name: '*delete*'}]\n",
        )
        .unwrap();
        effective.network.push(pay.clone());
        // fold_policy reads the result back and compares it with `effective`.
        let out = fold_policy("s.yaml", text, "triage-bot", "agents", &effective).unwrap();
        let diff = unified_diff("s.yaml", text, &out);
        let lines = changed(&diff);
        assert!(lines.iter().all(|l| l.starts_with('+')), "{diff}");
        assert_eq!(lines[0], "+      - name: bank-pay", "{diff}");
        assert!(diff.contains("exclusiveMaximum: 100.5"), "{diff}");
    }

    #[test]
    fn a_missing_sandbox_or_namespace_mismatch_is_named() {
        let effective = PolicyDocument::default();
        let err = fold_policy("repo.yaml", REPO, "nobody", "agents", &effective).unwrap_err();
        assert!(
            err.to_string().contains("no AgentSandbox \"nobody\""),
            "{err}"
        );
        let err = fold_policy("repo.yaml", REPO, "triage-bot", "prod", &effective).unwrap_err();
        assert!(matches!(err, FoldError::NotFound { .. }), "{err}");
    }
}
