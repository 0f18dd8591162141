//! Findings as an OpenReports `Report` (openreports.io/v1alpha1), so
//! policy-report dashboards and `kubectl get reports` show them beside
//! Kyverno's and the scanners'. Pure: builds the object; the sandbox
//! reconciler applies it when the CRD is installed.

use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

use crate::crd::{FindingState, FindingsSummary};
use crate::scan::Severity;

/// API group/version of OpenReports.
pub const API_VERSION: &str = "openreports.io/v1alpha1";

/// The name of a sandbox's report.
pub fn report_name(sandbox: &str) -> String {
    format!("agentgate-{sandbox}")
}

/// The `Report` for a sandbox's findings: one result per finding (`fail`
/// unfixed, `pass` severed, `skip` accepted) and one `error` per image that
/// could not be assessed. `owner` is the sandbox's owner reference.
pub fn report(
    sandbox: &str,
    namespace: &str,
    uid: &str,
    owner: &Value,
    summary: &FindingsSummary,
    now: Timestamp,
) -> Value {
    let timestamp = json!({"seconds": now.as_second(), "nanos": 0});
    let mut counts = [0u32; 4]; // pass, fail, error, skip
    let mut results = Vec::new();
    for image in &summary.images {
        if let Some(problem) = &image.problem {
            counts[2] += 1;
            results.push(json!({
                "source": "agentgate",
                "policy": "lethal-trifecta",
                "rule": "image-scanned",
                "result": "error",
                "severity": "high",
                "timestamp": timestamp,
                "message": problem,
                "properties": {"image": image.image},
            }));
        }
        for finding in &image.findings {
            let (result, slot) = match finding.state {
                FindingState::Unfixed => ("fail", 1),
                FindingState::Severed => ("pass", 0),
                FindingState::Accepted => ("skip", 3),
            };
            counts[slot] += 1;
            let severity = match finding.severity {
                Severity::Critical => "critical",
                Severity::High => "high",
                Severity::Medium => "medium",
            };
            let mut properties = json!({
                "image": image.image,
                "sink": finding.sink,
                "state": format!("{:?}", finding.state),
                "fix": finding.fix,
            });
            if let Some(scan) = &image.scan {
                properties["scan"] = json!(scan);
            }
            if let Some(until) = &finding.accepted_until {
                properties["acceptedUntil"] = json!(until);
            }
            if !finding.severed_by.is_empty() {
                properties["severedBy"] = json!(finding.severed_by.join(","));
            }
            results.push(json!({
                "source": "agentgate",
                "policy": "lethal-trifecta",
                "rule": format!("{}/{}", finding.id, finding.sink),
                "category": "information flow",
                "result": result,
                "severity": severity,
                "scored": true,
                "timestamp": timestamp,
                "message": finding.message,
                "properties": properties,
            }));
        }
    }
    json!({
        "apiVersion": API_VERSION,
        "kind": "Report",
        "metadata": {
            "name": report_name(sandbox),
            "namespace": namespace,
            "labels": {
                "app.kubernetes.io/managed-by": "agentgate",
                crate::crd::SANDBOX_LABEL: sandbox,
            },
            "ownerReferences": [owner],
        },
        "source": "agentgate",
        "scope": {
            "apiVersion": "agentgate.dev/v1alpha1",
            "kind": "AgentSandbox",
            "name": sandbox,
            "namespace": namespace,
            "uid": uid,
        },
        "summary": {"pass": counts[0], "fail": counts[1], "warn": 0, "error": counts[2], "skip": counts[3]},
        "results": results,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::str::FromStr;

    use super::*;
    use crate::crd::{FindingRecord, ImageFindings};

    #[test]
    fn each_state_maps_to_a_result_and_the_summary_counts_them() {
        let record = |sink: &str, state| FindingRecord {
            id: "AG-TRIFECTA".into(),
            sink: sink.into(),
            severity: Severity::Critical,
            state,
            message: format!("AG-TRIFECTA → {sink}"),
            fix: format!("restrict tool {sink}"),
            severed_by: Vec::new(),
            accepted_until: None,
        };
        let summary = FindingsSummary {
            revision: Some(2),
            total: 3,
            unfixed: 1,
            images: vec![
                ImageFindings {
                    image: "a@sha256:00".into(),
                    scan: Some("a".into()),
                    scan_uid: Some("u".into()),
                    scan_generation: Some(1),
                    problem: None,
                    findings: vec![
                        record("x", FindingState::Unfixed),
                        record("y", FindingState::Severed),
                        record("z", FindingState::Accepted),
                    ],
                },
                ImageFindings {
                    image: "b:latest".into(),
                    problem: Some("not pinned".into()),
                    ..ImageFindings::default()
                },
            ],
        };
        let now = Timestamp::from_str("2026-11-29T00:00:00Z").unwrap();
        let r = report(
            "bot",
            "agents",
            "u1",
            &json!({"kind": "AgentSandbox"}),
            &summary,
            now,
        );
        assert_eq!(r["metadata"]["name"], "agentgate-bot");
        assert_eq!(
            r["summary"],
            json!({"pass": 1, "fail": 1, "warn": 0, "error": 1, "skip": 1})
        );
        let results: Vec<&str> = r["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x["result"].as_str().unwrap())
            .collect();
        assert_eq!(results, ["fail", "pass", "skip", "error"]);
        assert_eq!(r["results"][0]["rule"], "AG-TRIFECTA/x");
        assert_eq!(r["results"][0]["severity"], "critical");
    }
}
