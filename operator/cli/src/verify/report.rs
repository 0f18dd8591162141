//! The four shapes of a repository verification: text (one line per
//! object, `file:line:` first so editors and CI logs link to it), JSON,
//! JUnit XML (one test case per object) and SARIF 2.1.0 (one result per
//! object that does not hold, located at its manifest's file and line).
//!
//! The JUnit file is written by hand: it is a flat list of elements whose
//! only hazard is escaping, which [`xml_text`] does (including the control
//! characters XML 1.0 cannot carry); an XML crate would add a dependency
//! for less than forty lines.

use std::fmt::Write as _;

use serde_json::{Value, json};

use crate::verify::repository::{ObjectReport, Status};
use agentgate_trifecta::report::{SARIF_SCHEMA, uri_reference};

/// What a run judged, for the summary line and the exit code.
pub struct Summary<'a> {
    /// Every finding, in input order (maximums, sandboxes, proposals).
    pub findings: &'a [ObjectReport],
    /// Objects of other kinds that were passed over.
    pub ignored: usize,
    /// Wall-clock milliseconds of the whole run's proofs.
    pub millis: f64,
}

impl Summary<'_> {
    fn count(&self, status: Status) -> usize {
        self.findings.iter().filter(|f| f.status == status).count()
    }

    /// The worst status: exceeds wins over unsupported and inconclusive
    /// (a definite refusal is the more useful answer), which win over holds.
    pub fn worst(&self) -> Status {
        if self.count(Status::Exceeds) > 0 {
            Status::Exceeds
        } else if self.count(Status::Unsupported) > 0 {
            Status::Unsupported
        } else if self.count(Status::Inconclusive) > 0 {
            Status::Inconclusive
        } else {
            Status::Holds
        }
    }

    /// `3 objects: 2 hold, 1 exceeds (4 other objects ignored)`.
    pub fn line(&self) -> String {
        let mut parts = Vec::new();
        for (status, one, many) in [
            (Status::Holds, "holds", "hold"),
            (Status::Exceeds, "exceeds", "exceed"),
            (Status::Unsupported, "unsupported", "unsupported"),
            (Status::Inconclusive, "inconclusive", "inconclusive"),
        ] {
            let n = self.count(status);
            if n > 0 {
                parts.push(format!("{n} {}", if n == 1 { one } else { many }));
            }
        }
        let n = self.findings.len();
        let mut line = format!(
            "{n} object{}: {}",
            if n == 1 { "" } else { "s" },
            if parts.is_empty() {
                "nothing to verify".to_string()
            } else {
                parts.join(", ")
            }
        );
        if self.ignored > 0 {
            let _ = write!(
                line,
                " ({} other object{} ignored)",
                self.ignored,
                if self.ignored == 1 { "" } else { "s" }
            );
        }
        line
    }
}

/// One line per object, then the summary.
pub fn text(summary: &Summary<'_>) -> String {
    let mut out = String::new();
    for f in summary.findings {
        // A proposal reads best by its verdict: `apply`, `ask`, `reject`.
        let word = match f.decision {
            Some(decision)
                if f.status != Status::Unsupported && f.status != Status::Inconclusive =>
            {
                format!("{decision:?}").to_lowercase()
            }
            _ => f.status.name().to_string(),
        };
        let _ = writeln!(
            out,
            "{}:{}: {} {word}: {}",
            f.file,
            f.line,
            f.object(),
            f.message
        );
    }
    let _ = writeln!(
        out,
        "{}; proved in {:.1} ms",
        summary.line(),
        summary.millis
    );
    out
}

fn finding_json(f: &ObjectReport) -> Value {
    json!({
        "kind": f.kind,
        "namespace": f.namespace,
        "name": f.name,
        "file": &*f.file,
        "line": f.line,
        "field": f.field,
        "result": f.status.name(),
        "verdict": f.decision,
        "message": f.message,
        "maximum": f.maximum,
        "invariant": f.invariant,
        "counterexample": f.counterexample.as_ref().and_then(|a| serde_json::to_value(a).ok()),
        "reason": f.reason.as_ref().map(|r| json!({
            "code": r.code.as_str(), "field": r.field, "message": r.message,
        })),
        "governedBy": f.governed_by,
        "solverMillis": (f.solver_millis * 1000.0).round() / 1000.0,
    })
}

/// `{"result", "summary", "objects": [...]}` (shape in docs/cli.md).
pub fn json(summary: &Summary<'_>) -> Value {
    let count = |s: Status| summary.count(s);
    json!({
        "result": summary.worst().name(),
        "summary": {
            "objects": summary.findings.len(),
            "holds": count(Status::Holds),
            "exceeds": count(Status::Exceeds),
            "unsupported": count(Status::Unsupported),
            "inconclusive": count(Status::Inconclusive),
            "ignored": summary.ignored,
        },
        "objects": summary.findings.iter().map(finding_json).collect::<Vec<_>>(),
        "solverMillis": (summary.millis * 1000.0).round() / 1000.0,
    })
}

/// Text as XML character data or attribute value: markup escaped, and the
/// characters XML 1.0 forbids (C0 controls but tab, newline, carriage
/// return) replaced, so a hostile name cannot break the report.
fn xml_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\t' | '\n' | '\r' => out.push(c),
            c if (c as u32) < 0x20 || c == '\u{FFFE}' || c == '\u{FFFF}' => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

/// JUnit XML: one `<testcase>` per object (classname = kind, name =
/// namespace/name), `<failure>` for exceeds, `<error>` for unsupported and
/// inconclusive.
pub fn junit(summary: &Summary<'_>) -> String {
    let count = |s: Status| summary.count(s);
    let failures = count(Status::Exceeds);
    let errors = count(Status::Unsupported) + count(Status::Inconclusive);
    let seconds = summary.millis / 1000.0;
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        out,
        "<testsuites name=\"agentgate verify\" tests=\"{}\" failures=\"{failures}\" errors=\"{errors}\" time=\"{seconds:.3}\">",
        summary.findings.len()
    );
    let _ = writeln!(
        out,
        "  <testsuite name=\"agentgate verify\" tests=\"{}\" failures=\"{failures}\" errors=\"{errors}\" skipped=\"0\" time=\"{seconds:.3}\">",
        summary.findings.len()
    );
    for f in summary.findings {
        let name = match &f.namespace {
            Some(ns) => format!("{ns}/{}", f.name),
            None => f.name.clone(),
        };
        let _ = write!(
            out,
            "    <testcase classname=\"{}\" name=\"{}\" file=\"{}\" line=\"{}\" time=\"{:.3}\"",
            f.kind,
            xml_text(&name),
            xml_text(&f.file),
            f.line,
            f.solver_millis / 1000.0
        );
        let element = match f.status {
            Status::Holds => None,
            Status::Exceeds => Some("failure"),
            Status::Unsupported | Status::Inconclusive => Some("error"),
        };
        match element {
            None => out.push_str("/>\n"),
            Some(element) => {
                let mut body = format!("{}:{}: {}", f.file, f.line, f.message);
                if let Some(action) = &f.counterexample {
                    let _ = write!(body, "\ncounterexample: {action}");
                }
                let _ = writeln!(
                    out,
                    ">\n      <{element} type=\"{}\" message=\"{}\">{}</{element}>\n    </testcase>",
                    f.status.name(),
                    xml_text(&f.message),
                    xml_text(&body)
                );
            }
        }
    }
    out.push_str("  </testsuite>\n</testsuites>\n");
    out
}

/// The rule of each status that is reported.
fn rule_of(status: Status) -> Option<(&'static str, &'static str)> {
    match status {
        Status::Holds => None,
        Status::Exceeds => Some(("AG-EXCEEDS", "error")),
        Status::Unsupported => Some(("AG-UNSUPPORTED", "error")),
        Status::Inconclusive => Some(("AG-INCONCLUSIVE", "warning")),
    }
}

fn rules() -> Value {
    json!([
        {
            "id": "AG-EXCEEDS",
            "name": "ExceedsCeiling",
            "shortDescription": {"text": "The operator would refuse this object: an action escapes a governing MaximumPolicy or enters an invariant, or a rule it enforces is broken."},
            "help": {"text": "The message names the maximum and a concrete action (the counterexample, replayed through the runtime matcher). Narrow the rule the result points at, or change the ceiling through review. An ungoverned sandbox needs a MaximumPolicy that selects it."},
            "defaultConfiguration": {"level": "error"},
            "properties": {"tags": ["security", "policy"]},
        },
        {
            "id": "AG-UNSUPPORTED",
            "name": "OutsideTheModel",
            "shortDescription": {"text": "The object uses a surface the policy model does not cover; the operator grants nothing for it (fail closed)."},
            "help": {"text": "The message names the field; see docs/policy-language.md for what is modelled."},
            "defaultConfiguration": {"level": "error"},
            "properties": {"tags": ["policy"]},
        },
        {
            "id": "AG-INCONCLUSIVE",
            "name": "Undecided",
            "shortDescription": {"text": "The proof could not be completed (solver timeout, resource limit, or input verify needs but does not have)."},
            "help": {"text": "Raise --timeout-ms, simplify the policy, or give verify what the message says is missing (a Namespace manifest, --namespace-labels, --cluster)."},
            "defaultConfiguration": {"level": "warning"},
            "properties": {"tags": ["policy"]},
        },
    ])
}

fn sarif_result(f: &ObjectReport) -> Option<Value> {
    let (rule, level) = rule_of(f.status)?;
    let mut message = format!("{}: {}", f.object(), f.message);
    if let Some(action) = &f.counterexample {
        let action = action.to_string();
        if !f.message.contains(&action) {
            let _ = write!(message, " (counterexample: {action})");
        }
    }
    let mut location = json!({
        "logicalLocations": [{
            "name": f.name,
            "fullyQualifiedName": f.object(),
            "kind": "object",
        }],
    });
    if &*f.file != "-" {
        let artifact = if f.file.starts_with('/') {
            json!({"uri": format!("file://{}", uri_reference(&f.file))})
        } else {
            json!({"uri": uri_reference(f.file.trim_start_matches("./")), "uriBaseId": "%SRCROOT%"})
        };
        location["physicalLocation"] = json!({
            "artifactLocation": artifact,
            "region": {"startLine": f.line.max(1)},
        });
    }
    let mut properties = json!({"kind": f.kind, "result": f.status.name()});
    if let Some(field) = &f.field {
        properties["field"] = json!(field);
    }
    if let Some(maximum) = &f.maximum {
        properties["maximum"] = json!(maximum);
    }
    if let Some(action) = &f.counterexample
        && let Ok(value) = serde_json::to_value(action)
    {
        properties["counterexample"] = value;
    }
    Some(json!({
        "ruleId": rule,
        "level": level,
        "message": {"text": message},
        "locations": [location],
        "partialFingerprints": {"agentgateObject/v1": format!("{}/{}", f.object(), f.field.as_deref().unwrap_or(""))},
        "properties": properties,
    }))
}

/// SARIF 2.1.0: one result per object that does not hold.
pub fn sarif(summary: &Summary<'_>) -> Value {
    let results: Vec<Value> = summary.findings.iter().filter_map(sarif_result).collect();
    json!({
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {
                "driver": {
                    "name": "agentgate",
                    "informationUri": env!("CARGO_PKG_REPOSITORY"),
                    "version": env!("CARGO_PKG_VERSION"),
                    "rules": rules(),
                }
            },
            "originalUriBaseIds": {"%SRCROOT%": {"description": {"text": "The directory agentgate verify ran in."}}},
            "results": results,
        }],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xml_text_escapes_markup_and_forbidden_characters() {
        assert_eq!(
            xml_text("a<b>&\"'\u{1}\n"),
            "a&lt;b&gt;&amp;&quot;&apos;\u{FFFD}\n"
        );
    }
}
